"""Registries: steps, collectors, engines, parsers and figures each have one base module, the packages have no
import cycles, configuration is pure data resolved later, and the report draws what the tables allow."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.campaign.prepare import build_engines, engines_needed
from harness.campaign.resolve import load_resolved, resolve_experiment
from harness.config.experiment import load_experiment
from harness.engines import ENGINES, Engine
from harness.errors import ConfigError
from harness.figures import FIGURES
from harness.results import SCHEMA_VERSION
from harness.results.tables import TABLES, TABLES_DIR, table_file
from tests.helpers import cli_in_process

REGISTRIES = ("harness.steps", "harness.collectors", "harness.engines", "harness.parsers", "harness.figures")

EXPERIMENT = """\
name: reg
files:
  data: {create: 1M}
steps:
  - read: {file: data}
"""


@pytest.fixture(scope="module")
def graph() -> Any:
    grimp = pytest.importorskip("grimp")
    return grimp.build_graph("harness")


def _modules(graph: Any, package: str) -> set[str]:
    return {package} | graph.find_descendants(package)


@pytest.mark.parametrize("package", REGISTRIES)
def test_no_import_cycle_inside_a_registry_package(graph: Any, package: str) -> None:
    cyclic = [(a, b) for a, b in itertools.combinations(sorted(_modules(graph, package)), 2)
              if graph.chain_exists(importer=a, imported=b) and graph.chain_exists(importer=b, imported=a)]
    assert not cyclic


def test_configuration_imports_no_registry(graph: Any) -> None:
    for forbidden in ("harness.steps", "harness.collectors", "harness.emulation", "harness.engines"):
        for module in _modules(graph, forbidden):
            assert not graph.chain_exists(importer="harness.config.experiment", imported=module), module


def test_figures_never_reach_steps_boards_or_the_campaign(graph: Any) -> None:
    for figure_module in _modules(graph, "harness.figures"):
        for forbidden in ("harness.steps", "harness.boards", "harness.campaign"):
            reached = [m for m in _modules(graph, forbidden) if graph.chain_exists(importer=figure_module, imported=m)]
            assert not reached, (figure_module, reached)


def test_parsers_import_only_the_standard_library_each_other_and_the_registry() -> None:
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("harness", include_external_packages=True)
    allowed = {"harness.registry"}  # the generic registry, which itself imports only harness.errors
    registry_imports = graph.find_modules_directly_imported_by("harness.registry")
    assert {m for m in registry_imports if m.split(".")[0] not in sys.stdlib_module_names} == {"harness.errors"}
    for module in _modules(graph, "harness.parsers"):
        outside = {m for m in graph.find_modules_directly_imported_by(module)
                   if not m.startswith("harness.parsers") and m not in allowed}
        assert all(m.split(".")[0] in sys.stdlib_module_names for m in outside), (module, outside)


def test_configuration_is_data_and_resolution_checks_the_registries(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(EXPERIMENT.replace("- read:", "- reed:"))
    loaded = load_experiment(path)  # the file's shape is fine: loading alone does not know the step kinds
    with pytest.raises(ConfigError) as info:
        resolve_experiment(loaded)
    assert str(info.value).startswith(f"{path}:5: steps[0].reed: unknown step 'reed' (known: ")


def test_unknown_engine_is_one_line_naming_file_line_and_known_engines(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(EXPERIMENT + "engine:\n  vllm: {cmake: []}\n")
    with pytest.raises(ConfigError) as info:
        load_resolved(path)
    assert str(info.value) == f"{path}:7: engine.vllm: unknown engine 'vllm' (known: {', '.join(sorted(ENGINES))})"
    done = cli_in_process("plan", str(path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "unknown engine 'vllm' (known: bigmoeonedge, llama.cpp)" in done.stderr


def test_engine_defaults_come_from_the_registry(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(EXPERIMENT)
    experiment = load_resolved(path).experiment
    (spec,) = engines_needed(experiment, {"llama.cpp"}).values()
    assert spec.source == {"sdist": "llama-cpp-python==0.3.36"} and spec.cmake is None
    assert ENGINES["llama.cpp"].inputs(spec, tmp_path)[1] == ["-DGGML_NATIVE=ON", "-DLLAMA_OPENSSL=OFF"]
    path.write_text(EXPERIMENT + "engine:\n  llama.cpp: {source: {path: /src}, cmake: [-DX=1]}\n")
    (spec,) = engines_needed(load_resolved(path).experiment, {"llama.cpp"}).values()
    assert spec.source == {"path": "/src"} and ENGINES["llama.cpp"].inputs(spec, tmp_path)[1] == ["-DX=1"]


def test_prepare_builds_each_engine_with_its_registered_builder(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[str, Any]] = []

    class Fake(Engine):
        name = "fake"
        default_source = {"path": "/fake"}

        def build(self, spec: Any, experiment_dir: Path, cache_dir: Path, say: Any) -> Any:
            built.append((self.name, spec.source))
            return "fake-build"

        def build_on_target(self, session: Any, spec: Any, experiment_dir: Path, sources_cache: Path,
                            say: Any) -> dict[str, Any]:
            raise AssertionError("a local campaign builds on this machine")

    monkeypatch.setitem(ENGINES, "fake", Fake())
    path = tmp_path / "e.yaml"
    path.write_text(EXPERIMENT + "engine:\n  fake: {cmake: [-DY=2]}\n")
    specs = engines_needed(load_resolved(path).experiment, {"fake"})
    said: list[str] = []
    assert build_engines(specs, tmp_path, said.append) == {"fake": "fake-build"}
    assert built == [("fake", {"path": "/fake"})] and said[0].startswith("engine fake: building from")


def test_every_figure_needs_catalogued_tables() -> None:
    for figure in FIGURES.values():
        assert set(figure.needs) | set(figure.needs_any) <= set(TABLES), figure.name


def _tiny_set(path: Path) -> Path:
    """A result set with two read runs and nothing else: no fio, blockstat, requests or bench table."""
    manifest = {"schema_version": SCHEMA_VERSION, "set_id": "20250101-000000-reg-abcdef", "status": "complete",
                "experiment": {"name": "reg", "path": "reg.yaml", "sha256": "0" * 64},
                "harness": {"version": "0", "git_revision": None}, "controller": {"host": "here"},
                "started": None, "ended": None, "targets": [{"name": "local", "platform": "linux", "facts": {}}],
                "runs": []}
    (path / TABLES_DIR).mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps(manifest))
    runs = pd.DataFrame({"run_id": ["0001-read-cold-r1", "0002-read-warm-r1"], "index": [1, 2],
                         "target": ["local"] * 2, "step": ["read"] * 2, "step_label": ["read"] * 2,
                         "cache": ["cold", "warm"], "round": [1, 1], "repeat": [1, 1], "status": ["ok"] * 2,
                         "residency_before_pct": [0.0, 100.0], "cache_files_bytes": [1 << 20] * 2,
                         "dev_read_bytes": [1 << 20, 0], "step_duration_s": [0.1, 0.01]})
    runs.to_parquet(path / TABLES_DIR / table_file("runs"), index=False)
    reads = pd.DataFrame({"run_id": runs["run_id"], "target": runs["target"], "pattern": ["seq"] * 2,
                          "bytes": [1 << 20] * 2, "seconds": [0.1, 0.01]})
    reads.to_parquet(path / TABLES_DIR / table_file("reads"), index=False)
    return path


def test_report_draws_what_the_tables_allow_and_names_what_is_missing(tmp_path: Path) -> None:
    from harness.figures.report import render_report

    path = _tiny_set(tmp_path / "set")
    figures = render_report(path)
    assert sorted(f.name for f in figures) == ["read_accounting.png", "read_accounting.svg"]
    assert sorted(p.name for p in (path / "figures").iterdir()) == ["read_accounting.png", "read_accounting.svg"]
    report = (path / "report.md").read_text()
    assert "![read_accounting](figures/read_accounting.png)" in report
    for line in ("- decode_vs_device: not drawn, no requests table",
                 "- decode_vs_fio: not drawn, no requests table",
                 "- change_vs_baseline: not drawn, no requests or bench table",
                 "- fio_ladder: not drawn, no fio table",
                 "- timeline: not drawn, no blockstat table"):
        assert line in report.splitlines(), line
    assert "read_accounting: not drawn" not in report

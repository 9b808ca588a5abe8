"""The manifest of a result set: one reader (the versioned loader), one writer (``ResultSetWriter``).

A manifest read past the loader skips its ``schema_version`` and field checks: an old or damaged set then fails
as a KeyError deep in --resume or --confirm instead of one line. A manifest written past the writer skips its lock
(the campaign's target threads share it) and its whole-or-nothing save."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from harness.boards.session import TargetSession
from harness.campaign.context import CampaignContext, QuietProgress
from harness.campaign.lifecycle import RunLifecycle
from harness.campaign.orchestrator import new_writer
from harness.campaign.plan import build_plan
from harness.config.experiment import load_experiment
from harness.config.target import Target
from harness.results import INCOMPLETE_SUFFIX
from harness.results.ingest import run_row
from harness.results.loader import read_manifest
from harness.results.store import ResultSetWriter
from runner.contract import CONTRACT_VERSION
from runner.run_context import RunContext
from tests.helpers import REPO, NoCollectors, run_cli
from tests.test_gate import decode_cells, write_set
from tests.test_lifecycle import EXPERIMENT, _finished_run, setup  # noqa: F401 - setup: the fixture

# The modules that may name manifest.json in code, and why
ALLOWED = {
    "harness/results/loader.py": "the one reader: checks schema_version and the fields readers index",
    "harness/results/store.py": "the one writer: its lock and its whole-or-nothing save",
    "harness/results/upgrade.py": "rewrites sets of an older schema, which the loader refuses by design",
    "harness/results/checksums.py": "names the file among those SHA256SUMS seals (hashes its bytes, reads nothing)",
}


def manifest_mentions(path: Path) -> list[int]:
    """The lines of ``path`` whose code (not a docstring or comment) holds the string "manifest.json"."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return sorted({node.lineno for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)
                   and "manifest.json" in node.value and id(node) not in docstrings})


def test_only_the_loader_and_the_writer_touch_manifest_json() -> None:
    found = {}
    for path in sorted((REPO / "harness").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        lines = manifest_mentions(path)
        if lines and name not in ALLOWED:
            found[name] = lines
    assert found == {}, ("read manifests with harness.results.loader.read_manifest and change them through "
                         f"harness.results.store.ResultSetWriter: {found}")


def test_the_scan_sees_a_bare_read(tmp_path: Path) -> None:
    """The scan above must be able to fail: a bare read as --resume had it is found, a docstring is not."""
    module = tmp_path / "bare.py"
    module.write_text('"""Reads manifest.json."""\nimport json\n\n\ndef load(path):\n'
                      '    return json.loads((path / "manifest.json").read_text())\n')
    assert manifest_mentions(module) == [6]


def manifest_surgery(path: Path) -> list[int]:
    """The lines of ``path`` that change a writer's manifest in place: ``x.manifest[...] = ...`` (or ``+=``,
    ``del``) and ``x.manifest.update/setdefault/pop(...)``, past the writer's typed methods."""
    def on_manifest(node: ast.expr) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "manifest"

    lines = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Assign, ast.Delete, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(isinstance(t, ast.Subscript) and on_manifest(t.value) for t in targets):
                lines.add(node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("update", "setdefault", "pop", "clear") and on_manifest(node.func.value)):
            lines.add(node.lineno)
    return sorted(lines)


def test_only_the_writer_changes_a_manifest_in_place() -> None:
    found = {}
    for path in sorted((REPO / "harness").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        lines = manifest_surgery(path)
        if lines and not name.startswith("harness/results/"):
            found[name] = lines
    assert found == {}, f"change a set's manifest through ResultSetWriter's typed methods: {found}"


def test_the_surgery_scan_sees_new_writer_as_it_was(tmp_path: Path) -> None:
    """The scan above must be able to fail: new_writer's old field-by-field assignments are found, reads not."""
    module = tmp_path / "old.py"
    module.write_text('def new_writer(writer, ctx):\n'
                      '    writer.manifest["scratch"] = ctx.scratch\n'
                      '    writer.manifest.setdefault("resumed", []).append("now")\n'
                      '    return writer.manifest["runs"], writer.manifest.get("files")\n')
    assert manifest_surgery(module) == [2, 3]


# ------------------------------------------------------------------------------------------ the model
def test_a_manifest_round_trips_through_the_writer_and_the_loader(tmp_path: Path) -> None:
    (tmp_path / "unit.yaml").write_text(EXPERIMENT)
    target = Target(name="local", workdir=str(tmp_path / "work"))
    ctx = CampaignContext(build_plan(load_experiment(tmp_path / "unit.yaml")), [target], QuietProgress())
    writer = new_writer(ctx, tmp_path / "results")
    run_id = ctx.plan.runs[0].run_id
    writer.update_run(run_id, target="local", status="ok", runner_status="ok", error=None)
    writer.mark_resumed("2026-12-02T12:00:00+0000")
    writer.mark_confirms("20261201-000000-unit-aaaaaa", 3)
    read = read_manifest(writer.path)
    assert read == json.loads(json.dumps(writer.manifest, default=str))
    assert read["confirms"] == {"set_id": "20261201-000000-unit-aaaaaa", "rounds": 3}
    assert read["resumed"] == ["2026-12-02T12:00:00+0000"]
    assert writer.run_entry(run_id, "local")["runner_status"] == "ok"
    assert writer.run_entry(run_id, "elsewhere") == {}  # run ids repeat across targets: looked up by both


def test_a_set_written_before_the_model_loads(tmp_path: Path) -> None:
    """A set as harness wrote it before (tests.test_gate.write_set: no runner_status, no main_process): it loads,
    and its runs table says the manifest's status."""
    path = write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", decode_cells(seed=1, change=1.0))
    manifest = read_manifest(path)
    assert manifest["set_id"] == path.name and all("runner_status" not in run for run in manifest["runs"])
    rows = [run_row(run, {"status": "ok"}) for run in manifest["runs"]]
    assert [row["status"] for row in rows] == [run["status"] for run in manifest["runs"]]


@pytest.mark.slow  # harness run (it stops before any campaign, but run_cli is how run is started)
@pytest.mark.fault
def test_a_malformed_manifest_is_one_line_naming_the_field_for_resume(tmp_path: Path) -> None:
    """--resume read the manifest with a bare json.loads: a damaged one was a TypeError traceback."""
    bad = tmp_path / "results" / ("20261202-000000-unit-bbbbbb" + INCOMPLETE_SUFFIX)
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text('{"schema_version": 2, "set_id": "x", "experiment": "unit"}')
    done = run_cli("run", "--resume", bad.name, "--results", str(tmp_path / "results"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == (f"error: {bad / 'manifest.json'}: field experiment: expected an object, got a "
                                   "JSON string")


# ------------------------------------------------------------------------------------------ status and rusage
def test_the_controllers_verdict_owns_the_status_and_the_runners_is_kept(
        setup: tuple[CampaignContext, TargetSession, ResultSetWriter]) -> None:  # noqa: F811 - the fixture
    """A run the runner recorded as ok, whose runner the watchdog had to stop: failed in the manifest and the
    runs table, with the runner's own ok beside it as runner_status."""
    ctx, session, writer = setup
    run = ctx.plan.runs[0]
    lifecycle = RunLifecycle.adopt(ctx, session, writer, run)
    lifecycle.failure = "the run did not finish within 60 s (run_timeout_s) and was stopped"
    _finished_run(lifecycle, {"status": "ok", "contract": CONTRACT_VERSION})
    assert lifecycle.finish_adopted()
    entry = writer.run_entry(run.run_id, "local")
    assert (entry["status"], entry["runner_status"]) == ("failed", "ok")
    row = run_row(entry, {"status": "ok", "error": None})
    assert row["status"] == "failed" and str(row["error"]).startswith("the run did not finish within 60 s")


def test_the_steps_process_is_picked_by_name_not_by_order() -> None:
    """run.json's rusage is by process name, in the order they were reaped: the step's own process is the one
    the record names (a helper reaped first is not it)."""
    planned = {"run_id": "0001-read-cold-r0", "index": 1, "target": "local", "step": "read", "cache": "cold",
               "round": 0, "repeat": 0, "status": "ok"}
    record = {"status": "ok", "main_process": "read",
              "rusage": {"helper": {"majflt": 1, "utime_s": 0.1}, "read": {"majflt": 500, "utime_s": 2.0}}}
    row = run_row(planned, record)
    assert (row["proc_majflt"], row["proc_utime_s"]) == (500, 2.0)
    del record["main_process"]  # a record written before runners named it: its first entry, as before
    assert run_row(planned, record)["proc_majflt"] == 1


def test_the_runner_names_the_first_process_it_spawned(tmp_path: Path) -> None:
    ctx = RunContext({"run_id": "r"}, str(tmp_path), NoCollectors())
    for name in ("read", "helper"):
        ctx.wait(ctx.spawn(["true"], name=name), 10)
    assert ctx.main_process == "read" and set(ctx.rusage) == {"read", "helper"}

"""The threads collector's experiment options (``collect: threads: {period_ms, stat_ms, wchan, gate, tree}``):
validated with one-line config errors, and rendered into the native sampler's command line where the runner starts
it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved
from harness.collectors import COLLECTORS, collector_configs
from harness.errors import ConfigError
from runner.collectors import run as runner_run

EXPERIMENT = """\
name: cfg
files:
  data: {create: 1M}
collect:
  threads: THREADS
steps:
  - fio:
      file: data
      jobs:
        - {name: custom, iodepth: 1, bs: 64k}
      runtime_s: 1
"""


class RecordingSampler:
    """Stands in for runner.collectors.sampler.Sampler: keeps the argv, starts nothing."""

    started: list[list[str]] = []

    def __init__(self, argv: list[str], out_path: str) -> None:
        self.argv, self.out_path = argv, out_path

    def start(self) -> None:
        RecordingSampler.started.append(self.argv)

    def stop(self) -> None:
        return None


def threads_argv(threads_yaml: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sampler argv the runner builds for an experiment whose threads collector is ``threads_yaml``."""
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.replace("THREADS", threads_yaml))
    loaded = build_plan(load_resolved(path)).experiment  # as the campaign validates and renders it (spec.py)
    config = collector_configs(loaded.experiment, loaded.doc)["threads"]
    spec = COLLECTORS["threads"].runner_spec(config)
    monkeypatch.setattr(runner_run, "Sampler", RecordingSampler)
    RecordingSampler.started = []
    runner_run.Collectors([spec], "/opt/native", str(tmp_path), None).on_spawn(4242)
    [argv] = RecordingSampler.started
    return argv


@pytest.mark.parametrize(("threads_yaml", "options"), [
    ("{}", ["--period-ms", "5", "--stat-ms", "100"]),
    ("{stat_ms: 0}", ["--period-ms", "5", "--stat-ms", "0"]),
    ("{period_ms: 10, stat_ms: 1000, wchan: true}", ["--period-ms", "10", "--stat-ms", "1000", "--wchan"]),
    ("{gate: false}", ["--period-ms", "5", "--stat-ms", "100", "--no-gate"]),
    ("{tree: false}", ["--period-ms", "5", "--stat-ms", "100", "--no-tree"]),  # the step's process only
])
def test_threads_options_reach_the_sampler_command_line(threads_yaml: str, options: list[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    argv = threads_argv(threads_yaml, tmp_path, monkeypatch)
    assert argv == ["/opt/native/sampler", "threads", "4242", *options]


def test_a_spec_from_an_older_controller_gets_the_samplers_defaults(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_run, "Sampler", RecordingSampler)
    RecordingSampler.started = []
    runner_run.Collectors([{"kind": "threads", "period_ms": 5}], "/n", str(tmp_path), None).on_spawn(7)
    assert RecordingSampler.started == [["/n/sampler", "threads", "7", "--period-ms", "5", "--stat-ms", "100"]]


@pytest.mark.parametrize(("threads_yaml", "field", "words"), [
    ("{stat_ms: -1}", "collect.threads.stat_ms", "greater than or equal to 0"),
    ("{stat_ms: 4000000}", "collect.threads.stat_ms", "less than or equal to 3600000"),
    ("{stat_ms: often}", "collect.threads.stat_ms", "valid integer"),
    ("{wchan: sometimes}", "collect.threads.wchan", "valid boolean"),
    ("{gate: sometimes}", "collect.threads.gate", "valid boolean"),
    ("{tree: sometimes}", "collect.threads.tree", "valid boolean"),
    ("{wchans: true}", "collect.threads.wchans", "unknown key 'wchans' (expected one of: period_ms, stat_ms, wchan, "
                                                 "gate, tree)"),
])
def test_a_bad_threads_option_is_one_line_naming_the_field(threads_yaml: str, field: str, words: str,
                                                           tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.replace("THREADS", threads_yaml))
    with pytest.raises(ConfigError) as info:
        build_plan(load_resolved(path))
    message = str(info.value)
    assert message.startswith(f"{path}:5: {field}: ") and words in message, message
    assert "\n" not in message

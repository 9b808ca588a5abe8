"""The shipped board examples stay valid: targets load, the experiment validates, its expectations
and collectors exist for the platform it names, and it plans."""

from __future__ import annotations

from harness.boards.inventory import load_targets
from harness.boards.platforms import PLATFORMS
from harness.campaign.resolve import load_resolved
from harness.collectors import COLLECTORS
from tests.helpers import REPO, cli_in_process

EXAMPLES = REPO / "targets" / "examples"
EXPERIMENT = REPO / "experiments" / "examples" / "jetson-board-state.yaml"


def test_example_targets_load_with_their_platforms() -> None:
    targets = load_targets(EXAMPLES)
    assert {t.platform for t in targets.values()} == {"jetson", "android", "macos"}
    assert targets["pixel-termux"].transport_options["port"] == 8022  # Termux's sshd


def test_example_experiment_uses_known_expectations_and_collectors() -> None:
    experiment = load_resolved(EXPERIMENT).experiment
    target = load_targets(EXAMPLES)[experiment.targets[0]]
    assert set(experiment.expect) <= set(PLATFORMS[target.platform].expectations)
    assert set(experiment.collectors()) <= set(COLLECTORS)
    assert experiment.energy.idle_s == 10 and "tegrastats" in experiment.collectors()  # energy from VDD_IN
    done = cli_in_process("plan", str(EXPERIMENT), "--targets-dir", str(EXAMPLES))
    assert done.returncode == 0, done.stderr

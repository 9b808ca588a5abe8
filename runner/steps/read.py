"""The read step: read a file once, sequentially or in a random block permutation, in a process of its own
(``runner.steps.readfile``)."""

import os
import sys

from runner.util import RUNNER_DIR


def run_read(ctx, spec):
    argv = [sys.executable, "-m", "runner.steps.readfile", spec["file"], "--pattern", spec["pattern"],
            "--bs", str(spec["bs_bytes"]), "--seed", str(spec["seed"]), "--out", ctx.path("read.json")]
    runner_parent = os.path.dirname(RUNNER_DIR)
    proc = ctx.spawn(argv, name="read", env={"PYTHONPATH": runner_parent})
    ctx.wait(proc, spec["timeout_s"])
    return {}

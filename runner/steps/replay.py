"""The replay step: ``native_bin/replay`` reads a routing trace's experts from the model file, token by token.

Stdlib only (Python >= 3.8). The cache condition is made as for bmoe (cold: the model's pages dropped, residency
measured), the layout and trace the controller computed are written into the run dir (``layout.txt``,
``trace.txt``), then the program runs with ``--blockstat`` of the model's device. Block-device stat lines and the
process's /proc stat are snapshotted at its start, when its first token's line appears in
``replay-tokens.jsonl`` and at its exit; ``replay.jsonl`` holds the one record (marks, residency, the program's
summary line) the controller (harness/steps/replay.py) turns into rows.
"""

import json
import os
import time

from runner import sysroot, util
from runner.steps.base import StepFailed, step_env
from runner.steps.bmoe import _cache_state
from runner.steps.llama_server import _device, has_exited, snapshot
from runner.steps.llamacpp import check_model

TOKENS_FILE = "replay-tokens.jsonl"
POLL_S = 0.005
# spec key -> the program's flag (values passed as given; None: left out)
FLAGS = (("strategy", "--strategy"), ("threads", "--threads"), ("bs", "--bs"), ("qd", "--qd"),
         ("cache_bytes", "--cache-bytes"), ("predict_p", "--predict-p"), ("compute", "--compute"),
         ("tokens", "--tokens"), ("seed", "--seed"))


def replay_argv(binary, spec, ctx, device):
    argv = [binary, "--model", spec["model"], "--layout", ctx.path("layout.txt"), "--trace", ctx.path("trace.txt"),
            "--out", ctx.path(TOKENS_FILE)]
    for key, flag in FLAGS:
        if spec.get(key) is not None:
            argv += [flag, str(spec[key])]
    if spec.get("fadv_random"):
        argv.append("--fadv-random")
    stat = sysroot.path("/sys/block/%s/stat" % device) if device else None
    if stat and os.path.exists(stat):
        argv += ["--blockstat", stat]
    return argv


def run_replay(ctx, spec):
    check_model(spec)
    native_bin, model = util.native_bin(ctx.spec), spec["model"]
    binary = os.path.join(native_bin, "replay")
    if not os.access(binary, os.X_OK):
        raise StepFailed("replay: %s is missing or not executable (runner/native not built?)" % binary)
    condition = spec.get("cache", ctx.spec.get("cache", "none"))
    device = _device(ctx, model)
    for name in ("layout", "trace"):
        with open(ctx.path(name + ".txt"), "w") as out:
            out.write(spec[name])
    record = {"index": 0, "prompt_index": 0, "repeat": 0, "cache": condition, "n_predict": spec.get("tokens"),
              "strategy": spec.get("strategy"), "stdout": "replay.stdout", "stderr": "replay.stderr",
              "tokens_file": TOKENS_FILE, "device": device}
    record["residency_before_pct"] = _cache_state(native_bin, model, condition)
    marks = {}
    proc = ctx.spawn(replay_argv(binary, spec, ctx, device), name="replay", env=step_env(spec))
    marks["start"] = snapshot(device, proc.pid)
    deadline = time.monotonic() + spec["timeout_s"]
    while not has_exited(proc) and time.monotonic() < deadline:
        if "first_token" not in marks and _has_line(ctx.path(TOKENS_FILE)):
            marks["first_token"] = snapshot(device, proc.pid)
        time.sleep(POLL_S)
    marks["end"] = snapshot(device, proc.pid)  # before the reap: /proc still holds its faults and CPU
    ctx.wait(proc, max(deadline - time.monotonic(), 0.0))  # kills it past the deadline, fails on exit != 0
    record.update(marks=marks, exit_code=proc.returncode, summary=_summary(ctx.path(TOKENS_FILE)))
    with open(ctx.path("replay.jsonl"), "w") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")
    return {"device": device, "requests": 1, "tokens": (record["summary"] or {}).get("tokens")}


def _has_line(path):
    try:
        with open(path, "rb") as handle:
            return b"\n" in handle.read(65536)
    except OSError:
        return False


def _summary(path):
    """The program's last line's summary, or None (a run cut short has none)."""
    try:
        with open(path) as handle:
            lines = [line for line in handle if line.strip()]
        return json.loads(lines[-1]).get("summary") if lines else None
    except (OSError, ValueError):
        return None

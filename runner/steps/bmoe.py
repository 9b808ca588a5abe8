"""The bmoe step: BigMoeOnEdge's ``bmoe-cli``, one process per prompt, measured like a llama-server request.

Stdlib only (Python >= 3.8). Per prompt: the cache condition is made again (cold: the model's pages dropped,
residency measured), then ``bmoe-cli -m MODEL -p PROMPT -n N ARGS --progress --csv bmoe-I.csv`` runs; block-device
stat lines and the process's /proc stat are snapshotted at its start, when its first ``BMOE_PROGRESS`` line (the
first token, the end of prefill) appears in its stdout, and at its exit. ``bmoe.jsonl`` holds one record per prompt;
the controller (harness/steps/bmoe.py) parses the logs and CSVs and computes the device windows.
"""

import json
import os
import time

from runner import pagecache, util
from runner.steps.base import StepFailed
from runner.steps.llama_server import _device, has_exited, snapshot
from runner.steps.llamacpp import check_model
from runner.util import tail

BINARY = "bmoe-cli"
FIRST_TOKEN = b"BMOE_PROGRESS"
POLL_S = 0.005


def bmoe_binary(ctx, spec):
    engines = ctx.spec.get("engines") or {}
    bin_dir = spec.get("bin_dir") or (engines.get("bigmoeonedge") or {}).get("bin_dir")  # a side's build first
    if not bin_dir:
        raise StepFailed("bmoe: the run spec names no BigMoeOnEdge build (engines.bigmoeonedge.bin_dir)")
    path = os.path.join(bin_dir, BINARY)
    if not os.access(path, os.X_OK):
        raise StepFailed("bmoe: %s is missing or not executable" % path)
    return path


def run_bmoe(ctx, spec):
    check_model(spec)
    binary, model = bmoe_binary(ctx, spec), spec["model"]
    condition = spec.get("cache", ctx.spec.get("cache", "none"))
    native_bin, device = util.native_bin(ctx.spec), _device(ctx, model)
    deadline = time.monotonic() + spec["timeout_s"]
    summary = {"device": device, "requests": 0}
    with open(ctx.path("bmoe.jsonl"), "w") as out:
        for index, prompt in enumerate(spec["prompts"]):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StepFailed("bmoe step exceeded its timeout of %.0f s after %d prompts"
                                 % (spec["timeout_s"], index))
            record = _one_prompt(ctx, binary, spec, native_bin, device, condition, index, prompt, remaining)
            out.write(json.dumps(record, sort_keys=True) + "\n")
            out.flush()  # a later failure keeps the prompts already measured
            summary["requests"] += 1
    return summary


def _cache_state(native_bin, model, condition):
    """Cold: drop the model's pages (retrying briefly for late writeback); either way, the residency measured."""
    for _attempt in range(5):
        if condition == "cold":
            pagecache.drop(native_bin, [model])
        rows = pagecache.residency(native_bin, [model])
        if condition != "cold" or rows[0]["resident_pct"] <= pagecache.COLD_MAX_PCT:
            break
        time.sleep(0.1)
    return rows[0]["resident_pct"]


def _one_prompt(ctx, binary, spec, native_bin, device, condition, index, prompt, timeout_s):
    name = "bmoe-%d" % index
    record = {"index": index, "prompt_index": index, "repeat": 0, "cache": condition, "prompt": prompt,
              "n_predict": spec["n_predict"], "stdout": name + ".stdout", "stderr": name + ".stderr",
              "csv": name + ".csv"}
    record["residency_before_pct"] = _cache_state(native_bin, spec["model"], condition)
    argv = [binary, "-m", spec["model"], "-p", prompt, "-n", str(spec["n_predict"])]
    argv += [str(a) for a in spec.get("args", [])] + ["--progress", "--csv", ctx.path(record["csv"])]
    marks = {}
    deadline = time.monotonic() + timeout_s
    proc = ctx.spawn(argv, name=name)
    marks["start"] = snapshot(device, proc.pid)
    stdout = ctx.path(record["stdout"])
    while not has_exited(proc):
        if "first_token" not in marks and _has_first_token(stdout):
            marks["first_token"] = snapshot(device, proc.pid)
        if time.monotonic() > deadline:
            break  # ctx.wait below kills it and fails the step
        time.sleep(POLL_S)
    # taken before the reap: the exited process's /proc stat still holds its faults and CPU
    marks["end"] = snapshot(device, proc.pid)
    ctx.wait(proc, max(deadline - time.monotonic(), 0.0))
    record.update(marks=marks, exit_code=proc.returncode)
    if "first_token" not in marks and not _has_first_token(stdout):
        raise StepFailed("%s printed no BMOE_PROGRESS line: %s" % (name, tail(ctx.path(record["stderr"]), 5)))
    return record


def _has_first_token(path):
    try:
        with open(path, "rb") as handle:
            return FIRST_TOKEN in handle.read()
    except OSError:
        return False

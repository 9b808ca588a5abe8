"""The llama-bench step: llama.cpp's own benchmark, its JSON lines kept as ``bench.jsonl``."""

import os

from runner.steps.base import StepFailed, step_env
from runner.steps.llamacpp import check_model, engine_binary
from runner.util import read_text, tail


def run_llama_bench(ctx, spec):
    check_model(spec)
    argv = [engine_binary(ctx, spec, "llama-bench"), "-m", spec["model"]]
    argv += [str(a) for a in spec.get("args", [])] + ["-o", "jsonl"]
    proc = ctx.spawn(argv, name="llama-bench", env=step_env(spec))
    try:
        ctx.wait(proc, spec["timeout_s"])
    finally:
        # keep what was printed even when the bench failed part-way: finished tests are still results
        os.replace(ctx.path("llama-bench.stdout"), ctx.path("bench.jsonl"))
    tests = [line for line in (read_text(ctx.path("bench.jsonl"), "") or "").splitlines() if line.startswith("{")]
    if not tests:
        raise StepFailed("llama-bench printed no results: %s" % tail(ctx.path("llama-bench.stderr"), 5))
    return {"tests": len(tests)}

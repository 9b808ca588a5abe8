"""The equivalence step: greedy decoding of the same prompts under two sides (engine, settings, memory budget), their
outputs compared token id by token id, or byte for byte as text where an engine gives no ids.

The sides run one after the other, never together: each starts cold (the model dropped from the page cache) in
a cgroup of its own with its own memory.max when it declares one (``runner.emulation.budget``), and the other
side's pages are gone by then. One machine's two cores also stay the one side's. Outputs go to
``side-<a|b>/outputs.jsonl`` as they come, the comparison to ``equivalence.jsonl`` (one line per prompt), and the
run record's summary says pass or fail and where the first divergence is.
"""

import copy
import json
import os
import time

from runner import pagecache, util
from runner.emulation.budget import SideBudget
from runner.steps.base import StepFailed
from runner.steps.generators import GENERATORS

SIDES = ("a", "b")
EXCERPT_BYTES = 24  # of text around a divergence, enough to see the two outputs part


def _excerpt(data, pos):
    return data[pos:pos + EXCERPT_BYTES].decode("utf-8", errors="replace") if pos < len(data) else None


def compare(a, b):
    """Compare two outputs (``{"tokens": [ids] or None, "text": str}``): as ids when both have them, else as
    UTF-8 bytes. The first divergence is the first position where they differ, or the end of the shorter one
    when one is a prefix of the other (its token there is None)."""
    if a.get("tokens") is not None and b.get("tokens") is not None:
        seq_a, seq_b, how = list(a["tokens"]), list(b["tokens"]), "ids"
    else:
        seq_a, seq_b, how = (a.get("text") or "").encode("utf-8"), (b.get("text") or "").encode("utf-8"), "text"
    pos = next((i for i in range(min(len(seq_a), len(seq_b))) if seq_a[i] != seq_b[i]), None)
    if pos is None and len(seq_a) != len(seq_b):
        pos = min(len(seq_a), len(seq_b))
    row = {"compared_as": how, "identical": pos is None, "a_n": len(seq_a), "b_n": len(seq_b),
           "first_divergence_pos": pos, "a_token": None, "b_token": None}
    if pos is not None:
        if how == "ids":
            row["a_token"] = str(seq_a[pos]) if pos < len(seq_a) else None
            row["b_token"] = str(seq_b[pos]) if pos < len(seq_b) else None
        else:
            row["a_token"], row["b_token"] = _excerpt(seq_a, pos), _excerpt(seq_b, pos)
    return row


def summarize(rows):
    """The run record's verdict: pass when every prompt's outputs are identical; the first divergence."""
    diverged = [row for row in rows if not row["identical"]]
    first = diverged[0] if diverged else None
    return {"identical": not diverged, "verdict": "pass" if not diverged else "fail", "prompts": len(rows),
            "diverged_prompts": len(diverged), "compared_as": sorted({row["compared_as"] for row in rows}),
            "first_divergence": None if first is None else {
                key: first[key] for key in ("prompt_index", "first_divergence_pos", "a_token", "b_token")}}


def _side_context(ctx, side_dir, budget):
    """The run context as one side sees it: its logs and cwd in ``side_dir``, its processes in ``budget``'s
    cgroups, its own rusage; the process list stays the run's, so the agent's clean-up stops them whatever
    happens."""
    view = copy.copy(ctx)
    view.run_dir, view.emulation, view.rusage = side_dir, budget, {}
    return view


def _make_cold(native_bin, model):
    """The model dropped from the page cache (a few tries for late writeback); its residency afterwards."""
    for _attempt in range(5):
        dropped = pagecache.drop(native_bin, [model])
        resident = pagecache.residency(native_bin, [model])[0]["resident_pct"]
        if resident <= pagecache.COLD_MAX_PCT or (dropped is not None and not dropped["cleared"]):
            break
        time.sleep(0.1)
    return {"residency_before_pct": resident, "cold_reached": resident <= pagecache.COLD_MAX_PCT,
            "drop": dropped}


def run_side(ctx, spec, name, deadline):
    """One side, start to stop: cold model, its cgroup, its generator over every prompt. Returns (record,
    outputs); whatever fails, its processes are stopped and its cgroup removed before this returns or raises."""
    side = dict(spec["sides"][name], health_timeout_s=spec["health_timeout_s"], timeout_s=spec["timeout_s"])
    if side["engine"] not in GENERATORS:
        raise StepFailed("side %s: no greedy generator for engine %r on this runner (known: %s)"
                         % (name, side["engine"], ", ".join(sorted(GENERATORS))))
    side_dir = ctx.path("side-" + name)
    os.makedirs(side_dir, exist_ok=True)
    budget = SideBudget(ctx.emulation, ctx.spec["run_id"], name, side.get("memory_bytes"))
    record, outputs, view, generator = {"engine": side["engine"], "args": side.get("args", [])}, [], None, None
    try:
        record["budget"] = budget.setup()
        record["cache"] = _make_cold(util.native_bin(ctx.spec), side["model"])
        view = _side_context(ctx, side_dir, budget)
        generator = GENERATORS[side["engine"]](view, side)
        record["load_s"] = generator.start()
        with open(os.path.join(side_dir, "outputs.jsonl"), "w") as out:
            for index, prompt in enumerate(spec["prompts"]):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StepFailed("equivalence step exceeded its timeout of %.0f s (side %s, prompt %d)"
                                     % (spec["timeout_s"], name, index))
                output = generator.generate(prompt, spec["n_predict"], side["seed"], remaining)
                outputs.append(output)
                out.write(json.dumps(dict(output, prompt_index=index), sort_keys=True) + "\n")
                out.flush()
    finally:
        try:
            if generator is not None:
                record["exit"] = generator.stop()
        finally:  # the cgroup goes even if stopping failed (its drain kills what is left in it, by pid)
            if view is not None:
                ctx.rusage.update(("%s/%s" % (name, proc), usage) for proc, usage in view.rusage.items())
            record["budget"] = budget.teardown()
    return record, outputs


def run_equivalence(ctx, spec):
    deadline = time.monotonic() + spec["timeout_s"]
    sides, outputs = {}, {}
    for name in SIDES:
        sides[name], outputs[name] = run_side(ctx, spec, name, deadline)
    rows = []
    with open(ctx.path("equivalence.jsonl"), "w") as out:
        for index, prompt in enumerate(spec["prompts"]):
            a, b = outputs["a"][index], outputs["b"][index]
            row = dict(compare(a, b), prompt_index=index, prompt=prompt,
                       a_tokens=a.get("tokens"), b_tokens=b.get("tokens"), a_text=a.get("text"), b_text=b.get("text"))
            rows.append(row)
            out.write(json.dumps(row, sort_keys=True) + "\n")
    return dict(summarize(rows), sides=sides)

# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Streaming: decode speed and the device behind it
#
# The figures of group `streaming` of a result set, drawn from its tables exactly as `harness report` draws them
# (same files, same numbers in the PNG metadata). `HARNESS_SET` picks the set (a path, or an id under `results/`;
# unset: the newest complete one), `HARNESS_FIGURES` the output directory (default: the set's `figures/`).
#
# An MoE larger than memory streams its routed experts from the drive for every decoded token. The seed study
# (docs/methodology.md section 1: a 20 GiB Qwen3 MoE on an 8 GB Orin Nano Super) read 146–279 MB from NVMe per
# token in 70–84 KiB I/Os with 1.0–1.7 in flight, decoded at 1–3 tok/s, and found decode tok/s and device MB/s
# correlated at Pearson r = 0.90 over 8 requests. These tables and figures put the same numbers next to each other
# for this set.

# %%
from IPython.display import Image, display

from harness.figures.bandwidth import bound_table, cell_efficiency
from harness.figures.change import observations, ratio_table
from harness.figures.notebook import draw_group, open_set
from harness.figures.report import bench_summary, request_summary
from harness.figures.streaming import baseline_cell, build_baseline, change_table
from harness.results.tables import BENCH, FIO, REQUESTS, RUNS

rs, context = open_set()
runs = rs.table(RUNS.name)

# %% [markdown]
# ## Per request: decode and the device (llama-server)
#
# One row per cell (matrix values and cache condition): requests, mean decode tok/s and its sd, prefill tok/s,
# device MB/s during decode (first streamed token to the last), device MB read per decoded token, the average I/O
# size and queue depth the device saw, and major faults per token. Cold rows are the streaming numbers; warm rows
# are the no-I/O bound of the same cell.

# %%
request_summary(rs)

# %% [markdown]
# ## llama-bench
#
# pp (prompt processing) and tg (generation) tok/s per test and cell, mean and sd over runs.

# %%
bench_summary(rs)

# %% [markdown]
# ## Against the same-session baseline
#
# Every variant is compared only with the baseline cell of the same set (rounds interleaved: baselines drift
# between sessions, 2.26–2.60 tok/s for one setting in the seed study). First the per-round mean ± sd change, then
# the ratio of medians with its bootstrap 95 % CI and Mann-Whitney p, the numbers `change_vs_baseline` draws.

# %%
if runs.empty:
    changes = ratios = None
else:
    baseline = baseline_cell(runs, context.params, context.baseline)
    build_base = build_baseline(context.matrix, context.baseline)  # a set comparing builds: each vs this build
    print("baseline:", f"build={build_base} of the same cell" if build_base else baseline)
    changes = change_table(runs, rs.table(REQUESTS.name), rs.table(BENCH.name), context.params, baseline,
                           build_base)
    ratios = ratio_table(observations(runs, rs.table, context.params), context.params, baseline, build_base)
changes

# %%
ratios

# %% [markdown]
# ## The bandwidth bound
#
# Per cell: decode can go no faster than the device delivers each token's expert bytes. `bound_tps` is the fio
# ladder's MB/s at the I/O size and queue depth decode achieved, divided by the device bytes per token;
# `efficiency` is measured / bound (cold requests).

# %%
bounds = bound_table(runs, rs.table(REQUESTS.name), rs.table(FIO.name), context.params)
cell_efficiency(bounds) if not bounds.empty else bounds

# %% [markdown]
# ## The figures
#
# - `decode_vs_device` (F1): one point per cold request, decode tok/s against device MB/s during decode; Pearson r
#   within each cell in the legend (no pooled r: cells differ in kind, docs/methodology.md section 7).
# - `decode_vs_fio` (F3): device MB/s while decoding, per cell, next to the fio ladder on the same file (grey):
#   which rung of the ladder decode actually uses.
# - `change_vs_baseline` (F4): each variant as a ratio of medians against the baseline, 95 % CI whiskers, log axis.
# - `bandwidth_bound` (F5): measured against bound tok/s, log-log, with y = x; the legend gives each cell's
#   efficiency.
#
# A figure whose tables the set lacks is listed as `not drawn: NAME (no X table)`.

# %%
for png in draw_group(context, "streaming"):
    display(Image(filename=str(png)))

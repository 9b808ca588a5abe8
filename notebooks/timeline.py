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
# # Timeline: the whole campaign on one clock
#
# The figures of group `timeline` of a result set, drawn from its tables exactly as `harness report` draws them
# (same files, same numbers in the PNG metadata). `HARNESS_SET` picks the set (a path, or an id under `results/`;
# unset: the newest complete one), `HARNESS_FIGURES` the output directory (default: the set's `figures/`).
#
# Every sample of a run carries the target's monotonic clock, so a target's runs line up on one axis: decode
# tok/s per streamed token, device read MB/s and I/Os in flight (block stats every 10 ms), and where the board
# reports them power, temperatures and clocks (tegrastats, jtop, thermal zones). The seed study watched exactly
# these under load: VDD_IN up to 21.5 W, tj 71.1 °C, the GPU held at 1020 MHz (docs/methodology.md section 1).
# The timeline shows what the per-run tables average away: a cold request's first seconds, a throttled clock, a
# run that waited on the one before.

# %%
from IPython.display import Image, display

from harness.figures.notebook import draw_group, open_set
from harness.results.tables import BLOCKSTAT, RUNS

rs, context = open_set()

# %% [markdown]
# ## The runs in order
#
# The shaded spans of the timeline: each run's step, cache condition, matrix values, status and how long its step
# took.

# %%
runs = rs.table(RUNS.name)
columns = ["index", "target", "run_id", "step_label", "cache", *context.params, "status", "step_duration_s"]
runs[[c for c in columns if c in runs]].sort_values("index") if not runs.empty else runs

# %% [markdown]
# ## Device activity per run
#
# From the block-stat samples: per run, the mean and peak device read MB/s and the mean I/Os in flight.

# %%
blockstat = rs.table(BLOCKSTAT.name)
if blockstat.empty or "read_bytes_per_s" not in blockstat:
    activity = blockstat
else:
    activity = blockstat.groupby("run_id").agg(
        samples=("read_bytes_per_s", "size"), mean_mbps=("read_bytes_per_s", "mean"),
        peak_mbps=("read_bytes_per_s", "max"), mean_inflight=("avg_inflight", "mean"))
    activity[["mean_mbps", "peak_mbps"]] /= 1e6
activity

# %% [markdown]
# ## The figures
#
# - `timeline_<target>` (F6): one figure per target, panels stacked on the runs' clock (runs shaded and labelled);
#   a panel appears only where the set has its data.
#
# A figure whose tables the set lacks is listed as `not drawn: NAME (no X table)`.

# %%
for png in draw_group(context, "timeline"):
    display(Image(filename=str(png)))

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
# # Storage: what the drive can deliver, and what the block statistics count
#
# The figures of group `storage` of a result set, drawn from its tables exactly as `harness report` draws them
# (same files, same numbers in the PNG metadata). Point `HARNESS_SET` at a set (a path, or an id under
# `results/`), or leave it unset for the newest complete set; `HARNESS_FIGURES` says where the figures go
# (default: the set's own `figures/`).
#
# Before a streaming number means anything, two things must hold on the same target and the same file:
#
# - **the fio ladder**: read MB/s of the drive at the access patterns decode produces — 64 KiB random reads at
#   queue depth 1, 2 and 4, 128 KiB at QD 8, and 1 MiB sequential. The seed study measured 200, 465, 778, 1618 and
#   2515 MB/s on the Orin Nano's NVMe (docs/methodology.md section 1). Decode read 0.13–0.71 GB/s with 1.0–1.7 I/Os
#   in flight: it sits near the low rungs, not near the sequential figure on the box.
# - **block-stat accounting**: a cold read of a file must move the file's size from the device, a warm one
#   nothing; only then are per-request device bytes trustworthy (`read` steps; `experiments/storage-baseline.yaml`).

# %%
from IPython.display import Image, display

from harness.figures.notebook import draw_group, open_set
from harness.figures.report import fio_summary, read_summary

rs, context = open_set()

# %% [markdown]
# ## The fio ladder on the same file
#
# One row per target, cache condition and job: mean read MB/s over the runs, its sd, IOPS and the 99th percentile
# completion latency. fio reads with direct I/O and `--readonly`, so the cache condition changes little; a
# `cold (NOT cleared)` row is a macOS run whose page cache could not be purged.

# %%
fio_summary(rs)

# %% [markdown]
# ## Block-stat accounting of the read step
#
# Per `read` run: how much of the file was resident before, the file's size, what the device delivered
# (`/sys/block/DEV/stat` delta) and what the reader itself fetched. Cold ≈ file size, warm ≈ 0. Empty when the
# experiment has no `read` step (the streaming studies do not need one).

# %%
read_summary(rs)

# %% [markdown]
# ## The figures
#
# - `fio_ladder`: one bar per job and cache condition, mean ± sd over runs, per target. Read the decode-time
#   device MB/s of the streaming notebook against these bars.
# - `read_accounting`: device bytes / file bytes per read run; the dashed line is 1.
#
# A figure whose tables the set lacks is listed as `not drawn: NAME (no X table)`.

# %%
for png in draw_group(context, "storage"):
    display(Image(filename=str(png)))

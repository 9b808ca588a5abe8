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
# # Threads: where the engine's threads spend decode
#
# The figures of group `threads` of a result set, drawn from its tables exactly as `harness report` draws them
# (same files, same numbers in the PNG metadata). `HARNESS_SET` picks the set (a path, or an id under `results/`;
# unset: the newest complete one), `HARNESS_FIGURES` the output directory (default: the set's `figures/`).
#
# The `threads` collector samples every thread of the step's process (`/proc/PID/task/TID/stat`) every few
# milliseconds. A thread is running (R), waiting on I/O (D: for an engine streaming from disk, a page-cache read
# after a fault) or sleeping (S and the rest). The seed study, sampling every 5 ms during decode, found each thread
# running 37–45 %, in D 15–22 % and asleep 38–45 % of the time, with at least one thread in D for 40–45 % of
# decode: more threads than the drive can keep busy only wait longer (docs/methodology.md section 1).

# %%
from IPython.display import Image, display

from harness.figures.notebook import draw_group, open_set
from harness.figures.threads import thread_range, thread_state_table
from harness.results.tables import REQUESTS, RUNS, THREAD_COUNTERS, THREADS

rs, context = open_set()

# %% [markdown]
# ## Per cell: the fraction of sample instants with a thread in D
#
# Groups are `<step> · <variant>`; `llama-server decode` groups hold only the samples inside the requests'
# decode windows (first token to last), the others every sample of the run. `any_d` is the fraction of sample
# instants at which at least one thread of the process was in D: how much of the time the process as a whole
# waited on the device. `threads_worked` of `threads` did work in the windows (`worked_by`: the kernel counters
# where the run has them, as report.md's tables choose them, else the samples): the ranges below and the wait-class
# shares are over those, not over the HTTP and pool threads parked through the decode.

# %%
per_thread, per_group = thread_state_table(rs.table(RUNS.name), rs.table(THREADS.name), rs.table(REQUESTS.name),
                                           context.params, rs.table(THREAD_COUNTERS.name))
per_group

# %% [markdown]
# ## Per cell and state: the range over the threads that worked
#
# Min, median and max over the cell's working threads of each thread's fraction of samples in R, D and S (NaN in
# a cell where none worked).

# %%
thread_range(per_thread) if not per_thread.empty else per_thread

# %% [markdown]
# ## The figures
#
# - `thread_states` (F2): per cell, one panel per state class (the bar spans the working threads' min to max, the
#   tick is the median; each row says how many of how many threads worked), and the fraction of instants with at
#   least one thread in D. Compare the threads sweep's cells:
#   where adding threads adds D time and not R time, the drive, not the CPU, sets the pace.
#
# A figure whose tables the set lacks is listed as `not drawn: NAME (no X table)`.

# %%
for png in draw_group(context, "threads"):
    display(Image(filename=str(png)))

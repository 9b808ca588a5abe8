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
# # Figures from a result set
#
# Regenerates the harness figures from a result set's tables (never from raw files), so a figure in a
# paper can always be rebuilt from the set it came from. Point `HARNESS_SET` at a set directory, or
# leave it unset to use the newest complete set under `results/`. Every figure the report draws is in the
# registry `harness.figures.FIGURES`, each drawn from a `FigureContext` (the set's tables and where to write).

# %%
import os
from pathlib import Path

from harness.figures import FIGURES, FigureContext
from harness.figures.report import fio_summary, read_summary, settings_line
from harness.results.loader import list_result_sets, load_result_set

chosen = os.environ.get("HARNESS_SET")
if chosen:
    rs = load_result_set(Path(chosen))
else:
    sets = [load_result_set(p) for p in list_result_sets(Path("results"))]
    rs = [s for s in sets if s.complete][-1]
out = Path(os.environ.get("HARNESS_FIGURES", rs.path / "figures"))
context = FigureContext(rs.table, out, rs.set_id, settings_line(rs.manifest), list(rs.manifest.get("matrix") or {}),
                        rs.manifest.get("baseline"))
print(rs.set_id, "->", out)
print("figures:", ", ".join(f"{f.name} (needs {', '.join(f.needs + f.needs_any)})" for f in FIGURES.values()))

# %% [markdown]
# ## fio QD ladder on the same file

# %%
fio_summary(rs)

# %%
ladder = FIGURES["fio_ladder"].draw(context)
ladder

# %% [markdown]
# ## Block-stat accounting: cold reads move the file, warm reads move nothing

# %%
read_summary(rs)

# %%
accounting = FIGURES["read_accounting"].draw(context)

# %% [markdown]
# ## Run timeline: device MB/s and in-flight I/O

# %%
timeline = FIGURES["timeline"].draw(context)
written = [p for p in ladder + accounting + timeline if p.suffix == ".png"]
print("\n".join(str(p) for p in written))

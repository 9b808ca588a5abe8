"""Figures (one registry, each declaring the tables it needs) and the report that renders whatever applies.

A new figure is a draw function in a module here carrying ``@register_figure(name, needs=(TABLE, ...))``
(:mod:`harness.figures.base`; tables from :mod:`harness.results.tables`), plus that module in the import
below; ``harness report`` draws it whenever its tables have rows and says which one is missing otherwise.
"""

from __future__ import annotations

from harness.figures.base import FIGURES, Figure, FigureContext, register_figure, save

# isort: off
# the registry's order is the order figures are drawn and listed in report.md: streaming ones first
from harness.figures import streaming  # noqa: E402,F401  (registers decode_vs_device F1, decode_vs_fio F3)
from harness.figures import change  # noqa: E402,F401  (registers change_vs_baseline F4)
from harness.figures import bandwidth  # noqa: E402,F401  (registers bandwidth_bound F5)
from harness.figures import threads  # noqa: E402,F401  (registers thread_states F2)
from harness.figures import storage  # noqa: E402,F401  (registers fio_ladder, read_accounting)
from harness.figures import timeline  # noqa: E402,F401  (registers timeline F6)
from harness.figures import energy  # noqa: E402,F401  (registers energy_per_token)
# isort: on

__all__ = ["FIGURES", "Figure", "FigureContext", "register_figure", "save"]

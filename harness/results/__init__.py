"""Result sets: one immutable directory per ``harness run`` (docs/methodology.md section 6).

The tables a set can hold are catalogued in :mod:`harness.results.tables`.
"""

SCHEMA_VERSION = 2  # 2: the runs table has `variant` (harness results upgrade turns 1 into 2)
INCOMPLETE_SUFFIX = ".incomplete"

"""Result sets: one immutable directory per ``harness run`` (docs/methodology.md section 6).

The tables a set can hold are catalogued in :mod:`harness.results.tables`.
"""

SCHEMA_VERSION = 1
INCOMPLETE_SUFFIX = ".incomplete"

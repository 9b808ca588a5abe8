"""Result sets: one immutable directory per ``harness run`` (DESIGN.md section 6)."""

SCHEMA_VERSION = 1
INCOMPLETE_SUFFIX = ".incomplete"
TABLES = ("runs", "fio", "reads", "blockstat", "threads", "facts",
          "bench", "bench_samples", "requests", "tokens", "telemetry", "memory", "iostat", "reclaim")

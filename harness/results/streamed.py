"""Tables that ingest writes run by run instead of holding them whole: the ones collectors return as Arrow
tables (``threads``, ``blockstat``: millions of rows per hour of sampling). Each run's table gets the columns
every row carries (``run_id``, ``target``, ``t_rel_s``) a row group at a time and goes straight into the
table's parquet file, so ingest holds one run's table at most, never the set's.

The file has the schema of the first run's table plus those three columns; a later run's table is cast to
it. As every table file, it is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.results.store import disk_error
from harness.results.tables import TABLES_DIR, table_file

ROWS_PER_GROUP = 1 << 20  # a row group (and a slice with its run columns in memory) of up to 1 Mi rows


@dataclass(frozen=True)
class RunTable:
    """One run's rows of a table, as a collector returned them, and what ingest adds to every row."""

    table: pa.Table
    run_id: str
    target: str
    t0_ns: int | None  # the step's start (monotonic ns): t_rel_s = (t_ns - t0_ns) / 1e9; None: no t_rel_s

    def with_run_columns(self, start: int, length: int) -> pa.Table:
        """Rows ``start`` to ``start + length`` with ``run_id``, ``target`` and ``t_rel_s`` appended."""
        part = self.table.slice(start, length)
        rows = part.num_rows
        if self.t0_ns is None or "t_ns" not in part.column_names:
            t_rel = pa.nulls(rows, pa.float64())
        else:  # (t_ns - t0) / 1e9 as row by row: an exact integer difference, then one float division
            since = pc.subtract(part["t_ns"], pa.scalar(self.t0_ns, pa.int64()))
            t_rel = pc.divide(pc.cast(since, pa.float64(), safe=False), 1e9)
        for name, column in (("run_id", pa.repeat(pa.scalar(self.run_id, pa.large_string()), rows)),
                             ("target", pa.repeat(pa.scalar(self.target, pa.large_string()), rows)),
                             ("t_rel_s", t_rel)):
            part = part.append_column(name, column)
        return part


class StreamedTables:
    """The parquet files of the tables written run by run; :meth:`finish` puts them under their names."""

    def __init__(self, set_path: Path) -> None:
        self.set_path = set_path
        self.out = set_path / TABLES_DIR
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.schemas: dict[str, pa.Schema] = {}
        self.counts: dict[str, int] = {}

    def _tmp(self, name: str) -> Path:
        return self.out / f".{table_file(name)}.tmp"

    def write(self, name: str, run: RunTable) -> None:
        try:
            for start in range(0, max(run.table.num_rows, 1), ROWS_PER_GROUP):
                part = run.with_run_columns(start, ROWS_PER_GROUP)
                if name not in self.writers:  # an empty first table still sets the columns
                    self.out.mkdir(exist_ok=True)
                    self.writers[name] = pq.ParquetWriter(self._tmp(name), part.schema)
                    self.schemas[name], self.counts[name] = part.schema, 0
                if part.num_rows:
                    schema = self.schemas[name]
                    self.writers[name].write_table(part if part.schema.equals(schema) else part.cast(schema))
                    self.counts[name] += part.num_rows
        except OSError as exc:
            self.discard()
            raise disk_error(exc, self.set_path) from None

    def finish(self) -> dict[str, int]:
        """Close every file and rename it to its table's name; the row count of each table."""
        try:
            for name, writer in self.writers.items():
                writer.close()
                os.replace(self._tmp(name), self.out / table_file(name))
        except OSError as exc:
            self.discard()
            raise disk_error(exc, self.set_path) from None
        self.writers = {}
        return self.counts

    def discard(self) -> None:
        """Close and remove what was written (a full disk): no truncated table is left under its name."""
        for name, writer in self.writers.items():
            try:
                writer.close()
            except OSError:
                pass  # the disk that failed the write may fail the footer too
            self._tmp(name).unlink(missing_ok=True)
        self.writers = {}

"""``harness parse KIND FILE``: tidy rows from real captured outputs, as JSON or CSV."""

from __future__ import annotations

import csv
import io
import json

from tests.helpers import FIXTURES, cli_in_process

FIO_COLUMNS = {"job_name", "rw", "bs_bytes", "iodepth", "numjobs", "ioengine", "direct", "read_iops",
               "read_bw_bytes_per_s", "read_clat_mean_ns", "read_clat_p50_ns", "read_clat_p99_ns", "read_io_bytes",
               "runtime_ms"}


def test_parse_fio_json_has_the_promised_columns() -> None:
    done = cli_in_process("parse", "fio", str(FIXTURES / "fio" / "fio-3.33-io_uring-direct-qd4-64k-randread.json"))
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert isinstance(rows, list) and len(rows) == 1
    assert FIO_COLUMNS <= set(rows[0])
    assert rows[0]["bs_bytes"] == 65536 and rows[0]["iodepth"] == 4 and rows[0]["ioengine"] == "io_uring"


def test_parse_blockstat_csv() -> None:
    capture = FIXTURES / "blockstat" / "vda-stat-17-fields.txt"
    done = cli_in_process("parse", "blockstat", str(capture), "--format", "csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 1
    fields = (FIXTURES / "blockstat" / "vda-stat-17-fields.txt").read_text().split()
    assert rows[0]["read_ios"] == fields[0] and rows[0]["time_in_queue_ms"] == fields[10]
    assert rows[0]["flush_ticks_ms"] == fields[16]


def test_parse_errors_are_one_line_exit_2(tmp_path) -> None:  # noqa: ANN001
    bad = tmp_path / "stat"
    bad.write_text("1 2 3\n")
    done = cli_in_process("parse", "blockstat", str(bad))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert str(bad) in done.stderr and "line 1" in done.stderr
    done = cli_in_process("parse", "nosuchkind", str(bad))
    assert done.returncode == 2 and "unknown kind 'nosuchkind'" in done.stderr
    done = cli_in_process("parse", "fio", str(tmp_path / "missing.json"))
    assert done.returncode == 2 and "missing.json" in done.stderr

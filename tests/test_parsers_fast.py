"""The sampler's captures read column-wise (harness.collectors.sampler_tables, what ingest uses) give exactly the rows
of the per-line parsers, on every real capture in tests/data/sampler and tests/data/blockstat (sources in their
SOURCE.md), and on input the column-wise reader must leave to the per-line parser; malformed captures still fail
with the one error naming their line; ingest writes the tables run by run with the same values."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness.collectors import sampler_tables as tables
from harness.errors import ResultSetError
from harness.parsers import ParseError
from harness.parsers._common import iter_lines, text_of
from harness.parsers.blockstat import derive_intervals, parse_blockstat
from harness.parsers.sampler import parse_sampler_threads
from harness.results.ingest import write_tables
from harness.results.tables import TABLES_DIR

DATA = Path(__file__).resolve().parent / "data"
THREAD_CAPTURES = sorted((DATA / "sampler").glob("threads-*.txt"))
BLOCK_CAPTURES = sorted((DATA / "sampler").glob("block-*.txt"))
BARE_STAT_LINES = sorted((DATA / "blockstat").glob("*.txt"))
HEAD = b"# harness-sampler v1 mode=threads pid=4242 period_ms=5 clock_ticks_per_s=100 clock=monotonic\n"
RECORD = b"1000000000\t4250\tR\t300\t80\t40\tllama worker\t0\n"


def rows_with_intervals(data: bytes) -> list[dict[str, Any]]:
    """The blockstat collector's rows as they were built line by line (intervals on every sample but the first)."""
    rows = parse_blockstat(data)
    for row, interval in zip(rows[1:], derive_intervals(rows), strict=True):
        row.update((name, interval[name]) for name in tables.INTERVAL_COLUMNS)
    return rows


def as_rows(table: Any, keys_of: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows with only the keys the per-line rows have (the first block sample has no interval keys)."""
    return [{key: row[key] for key in reference} for row, reference in zip(table.to_pylist(), keys_of, strict=True)]


@pytest.fixture
def line_by_line_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-line readers fail if used: the column-wise path must read the sampler's own output by itself."""
    def refuse(data: object) -> None:
        raise AssertionError("the column-wise reader handed a real capture to the per-line parser")
    monkeypatch.setattr(tables, "thread_records", refuse)
    monkeypatch.setattr(tables, "block_records", refuse)


@pytest.mark.parametrize("capture", THREAD_CAPTURES, ids=lambda p: p.name)
def test_real_thread_captures_give_the_per_line_rows(capture: Path, line_by_line_fails: None) -> None:
    data = capture.read_bytes()
    expected = parse_sampler_threads(data)
    table = tables.sampler_threads_table(data)
    assert table.schema.equals(tables.THREAD_SCHEMA)
    assert table.to_pylist() == expected and len(expected) > 100
    with capture.open("rb") as stream:  # as ingest reads it: an open file, a block at a time
        assert tables.sampler_threads_table(stream).equals(table)


@pytest.mark.parametrize("capture", BLOCK_CAPTURES, ids=lambda p: p.name)
def test_real_block_captures_give_the_per_line_rows_and_intervals(capture: Path, line_by_line_fails: None) -> None:
    data = capture.read_bytes()
    expected = rows_with_intervals(data)
    with capture.open("rb") as stream:
        table = tables.with_intervals(tables.blockstat_table(stream))
    assert as_rows(table, expected) == expected and len(expected) > 20  # floats equal to the last bit
    assert table.column_names == list(expected[-1])
    assert table.slice(0, 1).select(tables.INTERVAL_COLUMNS).to_pylist() == [dict.fromkeys(tables.INTERVAL_COLUMNS)]


@pytest.mark.parametrize("capture", BARE_STAT_LINES, ids=lambda p: p.name)
def test_bare_stat_lines_are_read_line_by_line_with_the_same_rows_and_error(capture: Path) -> None:
    data = capture.read_bytes()
    table = tables.blockstat_table(data)
    assert table.to_pylist() == parse_blockstat(data)
    with pytest.raises(ValueError, match="needs timestamped samples"):  # as derive_intervals: no t_ns to rate by
        tables.with_intervals(table)


THREADS = (HEAD + RECORD + b"\n# a comment\n"
           b"1000000000\t4242\tS\t120\t50\t20\tllama-server\tfutex_wait_queue\n"
           b"1005000000\t4251\tD\t310\t79\t42\tllama worker\tfilemap_fault\n"
           b"1010000000\t4242\tI\t120\t50\t20\tllama-server\t\n"
           b"# exit t_ns=1012000000\n# stop t_ns=1013000000 samples=3 overruns=0\n")
MAC = (b"# harness-sampler v1 mode=threads pid=812 period_ms=5 clock_ticks_per_s=100 source=libproc majflt=none "
       b"clock=monotonic\n5000000\t6133903360\tS\t0\t3\t1\tllama-server\t\n")


@pytest.mark.parametrize("data", [
    THREADS, MAC, HEAD, HEAD + b"# stop t_ns=5 samples=0 overruns=0\n",
    THREADS.replace(b"\n", b"\r\n"),  # CRLF: \r is for the per-line parser
    THREADS.replace(b"llama worker\tfilemap", b"llama\x0bworker\tfilemap"),  # a line break to str.splitlines
    THREADS.replace(b"llama worker\tfilemap", "llama\u2028worker\tfilemap".encode()),
    THREADS.replace(b"# a comment", b"# a \x0ccomment"),
    THREADS.replace(b"llama worker\tfilemap", b"llama \xff\xfe\tfilemap"),  # not UTF-8: replaced, as line by line
    b"\xef\xbb\xbf" + THREADS, b"\n\n" + THREADS, THREADS + b"   \n\t\t\t\t\t\t\t\n",
    THREADS + b"# harness-sampler v1 mode=threads pid=99 period_ms=5\n" + RECORD,  # a second header: pid 99
    THREADS.replace(b"\t300\t", b"\t 300 \t"),  # int() takes blanks around digits
    THREADS.replace(b"\tllama worker\t0", b"\t llama worker \t 0 "),  # blanks in text stay
    THREADS.replace(b"llama worker", "llama wörker".encode()),  # UTF-8 names are read column-wise too
    THREADS.replace(b"# a comment", b"# a \xff comment"),  # not UTF-8 in a comment
], ids=["synthetic", "macos", "header-only", "header-and-trailer", "crlf", "vt", "u2028", "ff-in-comment",
        "not-utf8", "bom", "blank-first", "blank-lines", "second-header", "blanks-around-int", "blanks-in-text",
        "utf8", "not-utf8-comment"])
@pytest.mark.filterwarnings("error")  # an exception in pyarrow's row handler only warns: it must not happen
def test_any_capture_gives_the_per_line_rows_or_error(data: bytes) -> None:
    assert outcome(lambda: tables.sampler_threads_table(data).to_pylist()) == outcome(
        lambda: parse_sampler_threads(data))


def outcome(parse: Callable[[], list[dict[str, Any]]]) -> tuple[str, Any]:
    """The rows, or the error's message: a line break that only str.splitlines sees may make a malformed line."""
    try:
        return "rows", parse()
    except ParseError as exc:
        return "error", str(exc)


@pytest.mark.parametrize(("data", "error"), [
    (THREADS + b"1015000000\t4242\tS\t120\t50\t20\tllama-serv", r"^line 10: expected 8 TAB-separated fields, got 7$"),
    (THREADS.replace(b"\t4251\t", b"\t0x10\t"), r"^line 6: tid is not an integer: '0x10'$"),  # pyarrow takes hex
    (THREADS.replace(b"\tD\t", b"\tQ\t"), r"^line 6: unknown thread state 'Q'$"),
    (THREADS.replace(b"1005000000", b"1e9"), r"^line 6: t_ns is not an integer: '1e9'$"),
    (THREADS.replace(b"\t120\t50", b"\t120\t"), r"^line 5: utime_ticks is not an integer: ''$"),
    (HEAD.replace(b"v1", b"v4") + RECORD, r"^line 1: sampler output of version v4"),
    (b"", r"^no sampler header: the output is empty"),
    (b"\n\n", r"^no sampler header: the output is empty"),
    (RECORD, r"^line 1: no sampler header"),
    (HEAD.replace(b"threads", b"block"), r"mode=block, not mode=threads"),
], ids=["truncated-last-line", "hex", "state", "float", "empty-int", "version", "empty", "blank", "headless", "mode"])
def test_malformed_threads_fail_with_the_per_line_error(data: bytes, error: str) -> None:
    with pytest.raises(ParseError, match=error):
        parse_sampler_threads(data)
    with pytest.raises(ParseError, match=error):
        tables.sampler_threads_table(data)


BLOCK_HEAD = b"# harness-sampler v1 mode=block dev=sda period_ms=10 clock=monotonic\n"
REAL_BLOCK = (DATA / "sampler" / "block-vda-during-fio.txt").read_bytes()


@pytest.mark.parametrize("data", [
    b"", BLOCK_HEAD, BLOCK_HEAD + b"5 " + b"1 " * 11 + b"\n",  # one sample: no interval
    BLOCK_HEAD + b"0 100 0 800 0 0 0 0 0 0 5 9\n10000000 3 0 24 0 0 0 0 0 0 7 12\n",  # counter reset: None
    BLOCK_HEAD + b"0 " + b"1 " * 15 + b"\n10000000 " + b"2 " * 15 + b"\n",  # kernel 4.18-5.4: 15 fields
    BLOCK_HEAD + b"0 0 0 0 0 0 0 0 0 0 0 0\n10000000 0 0 0 0 0 0 0 0 0 4 0\n",  # no reads: no I/O size
    REAL_BLOCK.replace(b"\n", b"\r\n"), REAL_BLOCK.replace(b" 8273 ", b"  8273 "),  # per-line: split() on blanks
], ids=["empty", "header-only", "one-sample", "reset", "15-fields", "idle", "crlf", "double-blank"])
def test_any_block_capture_gives_the_per_line_rows_and_intervals(data: bytes) -> None:
    expected = rows_with_intervals(data)
    table = tables.with_intervals(tables.blockstat_table(data))
    assert as_rows(table, expected) == expected


@pytest.mark.parametrize(("data", "error", "kind"), [
    (BLOCK_HEAD + b"0 " + b"1 " * 16 + b"\n", r"^line 2: expected 11, 15 or 17 block stat fields, got 16", ParseError),
    (BLOCK_HEAD + b"0 " + b"1 " * 10 + b"-1\n", r"^line 2: negative counter", ParseError),
    (BLOCK_HEAD + b"0 " + b"1 " * 10 + b"0x1\n", r"^line 2: expected integers", ParseError),
    (REAL_BLOCK + b"473737062140 " + b"1 " * 17 + b"\n", r"not in time order at t_ns=473737062140$", ValueError),
], ids=["width", "negative", "hex", "time-order"])
def test_malformed_blocks_fail_with_the_per_line_error(data: bytes, error: str, kind: type[Exception]) -> None:
    with pytest.raises(kind, match=error):
        rows_with_intervals(data)
    with pytest.raises(kind, match=error):
        tables.with_intervals(tables.blockstat_table(data))


@pytest.mark.parametrize("data", [b"", b"a\nb", b"a\r\nb\r\n", b"\n\na\r\rb\x0bc\x1dd\n", "é\u2028x\x85y\n".encode(),
                                  b"\xef\xbb\xbf\xef\xbb\xbfa\n\xef\xbb\xbfb", b"\xe2\x80\n\xffz\n", b"x\r",
                                  b"\r\n\r\n"])
def test_lines_are_read_lazily_as_splitlines_reads_them(data: bytes) -> None:
    assert list(iter_lines(data)) == text_of(data).splitlines()


# --- ingest -----------------------------------------------------------------------------------------------

T0 = 473488000000  # the step's start, a little before the first sample of the fio captures


def make_set(root: Path, threads: dict[str, bytes]) -> dict[str, Any]:
    """A result set of finished ``read`` runs, each with the real block capture and the given threads.txt."""
    runs = []
    for index, (run_id, data) in enumerate(threads.items(), start=1):
        raw = root / "raw" / "local" / run_id
        raw.mkdir(parents=True)
        (raw / "threads.txt").write_bytes(data)
        (raw / "blockstat.txt").write_bytes(REAL_BLOCK)
        collectors = [{"kind": "blockstat", "period_ms": 10}, {"kind": "threads", "period_ms": 5}]
        (raw / "run.json").write_text(json.dumps({"status": "ok", "spec": {"collectors": collectors},
                                                  "step_started": {"mono_ns": T0}}))
        runs.append({"run_id": run_id, "index": index, "target": "local", "step": "read", "cache": "cold",
                     "round": 1, "repeat": 1, "params": {}, "status": "ok"})
    return {"runs": runs, "targets": [], "matrix": {}}


def per_line_frame(rows_by_run: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """A table as ingest built it before the column-wise path: every row a dict, then pandas, then parquet."""
    rows = []
    for run_id, run_rows in rows_by_run.items():
        for row in run_rows:
            rows.append({**row, "run_id": run_id, "target": "local", "t_rel_s": (row["t_ns"] - T0) / 1e9})
    return pd.DataFrame(rows)


def test_ingest_writes_the_per_line_tables_run_by_run(tmp_path: Path) -> None:
    capture = THREAD_CAPTURES[0].read_bytes()
    bad = capture.replace(b"\tfio\t", b"\tfio\tx\t", 1)  # line 2 gets a ninth field
    manifest = make_set(tmp_path, {"0001-read-cold-r1": capture, "0002-read-cold-r1": bad,
                                   "0003-read-cold-r1": capture})
    counts = write_tables(tmp_path, manifest)
    good = ("0001-read-cold-r1", "0003-read-cold-r1")
    threads = per_line_frame({run: parse_sampler_threads(capture) for run in good})
    # a v1 capture has no wait classes: all null (pandas gives an all-None column another dtype than the table's)
    new_columns = ["class", "syscall"]
    assert threads[new_columns].isna().all().all()
    threads = threads.drop(columns=new_columns)
    every = ("0001-read-cold-r1", "0002-read-cold-r1", "0003-read-cold-r1")  # run 2's block stats are fine
    blocks = per_line_frame({run: rows_with_intervals(REAL_BLOCK) for run in every})
    out = tmp_path / TABLES_DIR
    assert counts["threads"] == len(threads) == 2 * 204 and counts["blockstat"] == len(blocks) == 3 * 26
    written = pd.read_parquet(out / "threads.parquet")
    assert written[new_columns].isna().all().all()
    written = written.drop(columns=new_columns)
    pd.testing.assert_frame_equal(written, pd.read_parquet(_parquet_of(threads, tmp_path)), check_exact=True)
    written = pd.read_parquet(out / "blockstat.parquet")[list(blocks.columns)]
    pd.testing.assert_frame_equal(written, pd.read_parquet(_parquet_of(blocks, tmp_path)), check_exact=True)
    runs = pd.read_parquet(out / "runs.parquet").set_index("run_id")
    assert runs.loc["0002-read-cold-r1", "ingest_errors"] == "threads: line 2: expected 8 TAB-separated fields, got 9"
    assert not list(out.glob(".*.tmp"))  # every file under its name


def _parquet_of(frame: pd.DataFrame, tmp_path: Path) -> Path:
    path = tmp_path / "per-line.parquet"
    frame.to_parquet(path, index=False)
    return path


def test_a_large_table_is_written_in_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.results import streamed

    monkeypatch.setattr(streamed, "ROWS_PER_GROUP", 50)  # the 204 rows of a capture as 5 row groups
    capture = THREAD_CAPTURES[0].read_bytes()
    write_tables(tmp_path, make_set(tmp_path, {"0001-read-cold-r1": capture}))
    written = pq.ParquetFile(tmp_path / TABLES_DIR / "threads.parquet")
    assert written.metadata.num_row_groups == 5 and written.metadata.num_rows == 204
    assert written.read().to_pandas()["t_rel_s"].tolist() == [(r["t_ns"] - T0) / 1e9
                                                               for r in parse_sampler_threads(capture)]


def test_a_full_disk_while_a_table_streams_is_one_line_and_leaves_no_file(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.results import streamed

    def full(self: object, table: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(streamed.pq.ParquetWriter, "write_table", full)
    manifest = make_set(tmp_path, {"0001-read-cold-r1": THREAD_CAPTURES[0].read_bytes()})
    with pytest.raises(ResultSetError, match=r"^results disk full: \d+ MB free on "):
        write_tables(tmp_path, manifest)
    assert not list((tmp_path / TABLES_DIR).iterdir())  # neither a table nor its temporary file

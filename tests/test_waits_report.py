"""report.md's "Where decode time goes" on hand-made tables: the shares are averaged over the threads that worked in
the decode window, not over every thread of the process (a llama-server keeps a dozen HTTP and pool threads asleep
through the decode; averaged in, they buried the compute threads' split of a real demo run under 86 % other_sleep,
where the two compute threads spent 53 % (read_ahead_kb 8192) vs 20 % (128) waiting on I/O)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.figures.process_waits import counter_process_shares, process_wait_lines, sampled_process_shares
from harness.figures.waits import disagreement, sampled_summary, wait_lines, wait_summary
from harness.parsers import parse
from harness.parsers.sampler import process_records

MS = 1_000_000
PARAMS = ["read_ahead_kb"]


class Tables:
    """What the report's code reads of a result set: its tables by name."""

    def __init__(self, **tables: pd.DataFrame) -> None:
        self.tables = tables

    def table(self, name: str) -> pd.DataFrame:
        return self.tables.get(name, pd.DataFrame())


def _counter_reads(tid: int, run_ms: int, blkio_ms: int) -> list[dict]:
    """Two reads 1000 ms apart: ``run_ms`` on CPU and ``blkio_ms`` in block I/O; the rest asleep."""
    first = {"run_id": "r1", "kind": "thread", "tid": tid, "t_ns": 0, "run_ns": 0, "runqueue_ns": 0,
             "blkio_delay_ns": 0, "thrashing_delay_ns": 0, "freepages_delay_ns": 0, "clock_ticks_per_s": 100}
    last = {**first, "t_ns": 1000 * MS, "run_ns": run_ms * MS, "blkio_delay_ns": blkio_ms * MS}
    return [first, last]


@pytest.fixture
def result_set() -> Tables:
    runs = pd.DataFrame({"run_id": ["r1"], "index": [1], "status": ["ok"], "step": ["llama-server"],
                         "cache": ["cold"], "read_ahead_kb": [8192], "target": ["local"]})
    # two compute threads (40 % on CPU, 50 % and 40 % in I/O), ten asleep the whole window
    reads = _counter_reads(1, 400, 500) + _counter_reads(2, 400, 400)
    for tid in range(10, 20):
        reads += _counter_reads(tid, 0, 0)
    # samples every 100 ms: thread 1 R 4 times and fault_io 6 times, thread 2 R 5 and futex 5, the idle ones in epoll
    samples = [{"run_id": "r1", "t_ns": i * 100 * MS, "tid": 1, "state": "R" if i < 4 else "D",
                "class": None if i < 4 else "fault_io"} for i in range(10)]
    samples += [{"run_id": "r1", "t_ns": i * 100 * MS, "tid": 2, "state": "R" if i < 5 else "S",
                 "class": None if i < 5 else "futex"} for i in range(10)]
    samples += [{"run_id": "r1", "t_ns": i * 100 * MS, "tid": tid, "state": "S", "class": "idle"}
                for tid in range(10, 20) for i in range(10)]
    requests = pd.DataFrame({"run_id": ["r1"], "t_first_token_ns": [0], "t_end_ns": [1000 * MS]})
    return Tables(runs=runs, thread_counters=pd.DataFrame(reads), threads=pd.DataFrame(samples), requests=requests)


def test_counter_shares_are_the_working_threads_mean(result_set: Tables) -> None:
    (row,) = wait_summary(result_set, PARAMS).to_dict("records")  # type: ignore[arg-type]
    assert (row["threads"], row["idle threads"]) == (2, 10)
    assert row["run %"] == pytest.approx(40.0)
    assert row["io_wait %"] == pytest.approx(45.0)  # (50 + 40) / 2: not diluted to 7.5 by the sleeping ten
    assert row["other_sleep %"] == pytest.approx(15.0)


def test_sampled_shares_are_the_working_threads_mean(result_set: Tables) -> None:
    (row,) = sampled_summary(result_set, PARAMS).to_dict("records")  # type: ignore[arg-type]
    assert (row["threads"], row["idle threads"]) == (2, 10)
    assert (row["running %"], row["fault_io %"], row["futex %"], row["idle %"]) == pytest.approx((45, 30, 25, 0))


def test_report_says_whose_mean_it_is(result_set: Tables) -> None:
    text = "\n".join(wait_lines(result_set, PARAMS))  # type: ignore[arg-type]
    assert "mean over the threads that worked" in text and "idle threads" in text


def test_samples_and_counters_are_compared_on_the_same_threads_over_the_same_span(result_set: Tables) -> None:
    # the decode window runs on for 500 ms past the counters' last read, thread 1 running all along: the samples'
    # own table counts that, the comparison does not (a warm decode is one or two counter intervals long); and the
    # threads compared are the ones that worked by the counters, whatever the samples of the others say
    late = [{"run_id": "r1", "t_ns": (1050 + i * 100) * MS, "tid": 1, "state": "R", "class": None} for i in range(5)]
    threads = pd.concat([result_set.table("threads"), pd.DataFrame(late)], ignore_index=True)
    threads.loc[threads["tid"] == 10, ["state", "class"]] = ["R", None]  # asleep by the counters
    requests = pd.DataFrame({"run_id": ["r1"], "t_first_token_ns": [0], "t_end_ns": [1500 * MS]})
    tables = Tables(**{**result_set.tables, "threads": threads, "requests": requests})
    (own,) = sampled_summary(tables, PARAMS).to_dict("records")  # type: ignore[arg-type]
    assert own["threads"] == 3 and own["running %"] == pytest.approx((60 + 50 + 100) / 3)
    (row,) = disagreement(tables, PARAMS).to_dict("records")  # type: ignore[arg-type]
    assert (row["threads paired"], row["not paired"]) == (2, 10)
    # thread 1: 4 of 10 samples R, 6 fault_io; thread 2: 5 R, 5 futex -- against 40 % run, 50 / 40 % io_wait
    assert (row["running: sampled %"], row["running: counters %"], row["running: Δ pp"]) == pytest.approx((45, 40, 5))
    assert (row["I/O: sampled %"], row["I/O: counters %"], row["I/O: Δ pp"]) == pytest.approx((30, 45, -15))
    assert row["other sleep: Δ pp"] == pytest.approx(10)
    assert "same threads over the same spans" in "\n".join(wait_lines(tables, PARAMS))  # type: ignore[arg-type]


def _run_rows(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{**row, "run_id": "r1"} for row in rows])


def test_per_process_tables_say_which_process_of_the_tree_waited() -> None:
    """The real captures of one fio run (tests/data/sampler/threads-v3-fio-forked-job-psync-direct.txt and
    tests/data/counters/counters-v2-fio-forked-job.txt): the parent (depth 0) slept, the forked job process (depth
    1) did the reads. Its samples, counted with awk: 112 of 211 running, 86 read_io, 13 futex."""
    data = Path(__file__).parent / "data"
    threads = (data / "sampler" / "threads-v3-fio-forked-job-psync-direct.txt").read_bytes()
    counters = (data / "counters" / "counters-v2-fio-forked-job.txt").read_bytes()
    runs = pd.DataFrame({"run_id": ["r1"], "index": [1], "status": ["ok"], "step": ["fio"], "cache": ["cold"],
                         "target": ["local"]})
    rs = Tables(runs=runs, threads=_run_rows(parse("sampler-threads", threads)),
                thread_counters=_run_rows(parse("counters", counters)),
                processes=_run_rows([{**row, "source": "threads"} for row in process_records(threads)]))
    shares = sampled_process_shares(rs.table("threads"), rs.table("requests"))
    job = shares[shares["pid"] == 1973].iloc[0]
    assert (job["running"], job["read_io"], job["futex"]) == pytest.approx((112 / 211, 86 / 211, 13 / 211))
    counted = counter_process_shares(rs.table("thread_counters"), rs.table("requests")).set_index("pid")
    assert counted.loc[1973, "io_wait"] > 0.3 and counted.loc[1928, "io_wait"] == 0
    text = "\n".join(process_wait_lines(rs, []))  # type: ignore[arg-type]
    rows = [line for line in text.splitlines() if line.startswith("| fio step · cold")]
    assert len(rows) == 4  # two processes, by the counters and by the samples
    assert [[cell.strip() for cell in row.split("|")[2:6]] for row in rows[2:]] == [
        ["0", "fio", "1", "1928"], ["1", "fio", "1", "1973"]]
    assert "read_io %" in text and "io_wait %" in text


def test_no_per_process_table_for_steps_of_one_process(result_set: Tables) -> None:
    assert process_wait_lines(result_set, PARAMS) == []  # type: ignore[arg-type]

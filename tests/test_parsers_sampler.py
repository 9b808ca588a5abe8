"""The native sampler's output: thread mode (sampler-threads) and block mode (blockstat + intervals).

Real captures live in tests/data/sampler (see SOURCE.md there); expected counts were taken with
awk/cut on those files, not with the code under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.collectors import COLLECTORS
from harness.parsers import ParseError, parse
from harness.parsers.blockstat import delta, derive_intervals, parse_blockstat
from harness.parsers.sampler import any_d_pct, parse_sampler_threads, sampler_lateness, thread_state_fractions

DATA = Path(__file__).resolve().parent / "data" / "sampler"

# Synthetic, written for this test in the sampler's documented format: a llama.cpp-like process with a
# main thread and two workers, three sample instants 5 ms apart; one comm has a space in it.
THREADS = (
    "# harness-sampler v1 mode=threads pid=4242 period_ms=5 clock_ticks_per_s=100 clock=monotonic\n"
    "1000000000\t4242\tS\t120\t50\t20\tllama-server\tfutex_wait_queue\n"
    "1000000000\t4250\tR\t300\t80\t40\tllama worker\t0\n"
    "1000000000\t4251\tD\t310\t79\t42\tllama worker\tfilemap_fault\n"
    "1005000000\t4242\tS\t120\t50\t20\tllama-server\tfutex_wait_queue\n"
    "1005000000\t4250\tD\t305\t80\t41\tllama worker\tfolio_wait_bit_common\n"
    "1005000000\t4251\tR\t310\t80\t42\tllama worker\t0\n"
    "1010000000\t4242\tI\t120\t50\t20\tllama-server\t\n"
    "1010000000\t4250\tR\t305\t81\t41\tllama worker\t0\n"
    "1010000000\t4251\tS\t310\t80\t42\tllama worker\tfutex_wait_queue\n"
    "# exit t_ns=1012000000\n"
)


def test_thread_rows():
    rows = parse_sampler_threads(THREADS.encode())
    assert len(rows) == 9
    assert rows[1] == {"t_ns": 1000000000, "pid": 4242, "tid": 4250, "state": "R", "majflt": 300,
                       "utime_ticks": 80, "stime_ticks": 40, "comm": "llama worker", "wchan": None,
                       "class": None, "syscall": None}  # v1 raw data: no wait classes
    assert rows[2]["wchan"] == "filemap_fault"
    assert rows[6]["wchan"] is None  # empty wchan field


# The macOS sampler's format (runner/native/sampler_macos.c): libproc thread handles as tids, no wait
# channel, and no per-thread fault count (majflt=none in the header). Synthetic: no Mac runs here.
MAC_THREADS = (
    "# harness-sampler v1 mode=threads pid=812 period_ms=5 clock_ticks_per_s=100 source=libproc majflt=none "
    "clock=monotonic\n"
    "5000000\t6133903360\tS\t0\t3\t1\tllama-server\t\n"
    "5000000\t6134476800\tD\t0\t40\t12\tllama worker\t\n"
    "# exit t_ns=7000000\n"
)


def test_macos_thread_rows_have_no_fault_count_and_no_wchan():
    rows = parse_sampler_threads(MAC_THREADS.encode())
    assert [(r["tid"], r["state"], r["majflt"], r["wchan"]) for r in rows] == [
        (6133903360, "S", None, None), (6134476800, "D", None, None)]
    assert rows[1]["utime_ticks"] == 40 and rows[1]["comm"] == "llama worker"
    assert parse_sampler_threads(THREADS.encode())[0]["majflt"] == 120  # Linux: per-thread counts as printed


def test_thread_state_fractions_per_thread():
    fractions = {f["tid"]: f for f in thread_state_fractions(parse_sampler_threads(THREADS.encode()))}
    main, w1, w2 = fractions[4242], fractions[4250], fractions[4251]
    assert main["samples"] == 3
    assert (main["running_pct"], main["io_wait_pct"], main["sleep_pct"]) == (0.0, 0.0, 100.0)
    assert w1["comm"] == "llama worker"
    assert w1["running_pct"] == pytest.approx(200 / 3) and w1["io_wait_pct"] == pytest.approx(100 / 3)
    assert w1["sleep_pct"] == pytest.approx(0.0)
    assert w2["running_pct"] == w2["io_wait_pct"] == w2["sleep_pct"] == pytest.approx(100 / 3)


def test_any_d_pct_counts_instants_not_threads():
    rows = parse_sampler_threads(THREADS.encode())
    assert any_d_pct(rows) == pytest.approx(200 / 3)  # D at the 1st and 2nd instants, none at the 3rd
    assert any_d_pct([]) is None


def test_real_thread_capture_of_fio():
    rows = parse("sampler-threads", (DATA / "threads-fio-2x-psync-direct.txt").read_bytes())
    assert len(rows) == 204 and {row["pid"] for row in rows} == {7382}
    assert rows[0]["wchan"] == "hrtimer_nanosleep" and rows[0]["majflt"] == 5 and rows[0]["utime_ticks"] == 13
    fractions = {f["tid"]: f for f in thread_state_fractions(rows)}
    assert fractions[7382]["sleep_pct"] == 100.0 and fractions[7386]["sleep_pct"] == 100.0
    assert fractions[7387]["samples"] == 51
    assert fractions[7387]["io_wait_pct"] == pytest.approx(100 * 34 / 51)
    assert fractions[7387]["running_pct"] == pytest.approx(100 * 17 / 51)
    assert fractions[7388]["io_wait_pct"] == pytest.approx(100 * 37 / 51)
    assert any_d_pct(rows) == pytest.approx(100 * 44 / 51)


def test_thread_record_with_wrong_field_count_names_the_line():
    text = THREADS.replace("1005000000\t4250\tD\t305\t80\t41\tllama worker\tfolio_wait_bit_common",
                           "1005000000\t4250\tD\t305\t80\t41\tllama worker")
    with pytest.raises(ParseError, match=r"^line 6: expected 8 TAB-separated fields, got 7"):
        parse_sampler_threads(text.encode())


def test_thread_record_errors():
    head = b"# harness-sampler v1 mode=threads pid=2 period_ms=5 clock_ticks_per_s=100 clock=monotonic\n"
    with pytest.raises(ParseError, match=r"^line 2: tid is not an integer"):
        parse_sampler_threads(head + b"1\tx\tS\t0\t0\t0\tc\t0\n")
    with pytest.raises(ParseError, match=r"^line 2: unknown thread state 'Q'"):
        parse_sampler_threads(head + b"1\t2\tQ\t0\t0\t0\tc\t0\n")
    with pytest.raises(ParseError, match="mode=block, not mode=threads"):
        parse_sampler_threads(b"# harness-sampler v1 mode=block dev=vda period_ms=10\n")


def test_a_header_of_another_version_is_refused_naming_it():
    v4 = THREADS.replace("# harness-sampler v1 ", "# harness-sampler v4 ")
    with pytest.raises(ParseError, match=r"^line 1: sampler output of version v4: this parser reads harness-sampler "
                                         r"v1 or v2 or v3 \(header '# harness-sampler v4 mode=threads pid=4242"):
        parse_sampler_threads(v4.encode())
    with pytest.raises(ParseError, match=r"^line 1: sampler output of version \(none\)"):
        parse_sampler_threads(b"# harness-sampler mode=threads pid=1 period_ms=5\n")
    with pytest.raises(ParseError, match="version v4"):
        parse("sampler-threads", v4.encode())  # as the ingest reads threads.txt
    # v1 lines under a v2 header are not read as v1: v2 records have ten fields
    with pytest.raises(ParseError, match=r"^line 2: expected 10 TAB-separated fields, got 8"):
        parse_sampler_threads(THREADS.replace("# harness-sampler v1 ", "# harness-sampler v2 ").encode())


def test_output_without_the_header_is_refused_naming_what_came_first():
    headless = THREADS.split("\n", 1)[1]
    with pytest.raises(ParseError, match=r"^line 1: no sampler header: expected '# harness-sampler v3 "
                                         r"mode=threads \.\.\.' first, found '1000000000\\t4242\\tS"):
        parse_sampler_threads(headless.encode())
    with pytest.raises(ParseError, match=r"^no sampler header: the output is empty"):
        parse_sampler_threads(b"\n")
    with pytest.raises(ParseError, match=r"^line 2: no sampler header: .* found '# stop t_ns=5"):
        parse_sampler_threads(b"\n# stop t_ns=5 samples=0 overruns=0\n")


# --- block mode -----------------------------------------------------------------------------------

def test_real_block_capture_rows():
    rows = parse_blockstat((DATA / "block-vda-during-fio.txt").read_bytes())
    assert len(rows) == 26
    first = rows[0]
    assert (first["t_ns"], first["device"]) == (473486971871, "vda")
    assert (first["read_ios"], first["read_sectors"], first["flush_ticks_ms"]) == (111646, 12800202, 30)


def test_real_block_capture_intervals():
    rows = parse_blockstat((DATA / "block-vda-during-fio.txt").read_bytes())
    intervals = derive_intervals(rows)
    assert len(intervals) == 25
    first = intervals[0]
    # by hand from lines 2-3: 244 reads, 31232 sectors, io_ticks +8 ms, time_in_queue +16 ms, dt 10094067 ns
    assert first["t_ns"] == 473497065938
    assert first["dt_s"] == pytest.approx(0.010094067)
    assert (first["read_ios"], first["read_bytes"]) == (244, 31232 * 512)
    assert first["avg_read_io_bytes"] == 65536.0  # fio's bs=64k, with direct I/O nothing merged
    assert first["read_bytes_per_s"] == pytest.approx(31232 * 512 / 0.010094067)
    assert first["avg_inflight"] == pytest.approx(16 / 10.094067)
    assert first["util_pct"] == pytest.approx(100 * 8 / 10.094067)
    whole = delta(rows[0], rows[-1])
    assert (whole["read_ios"], whole["read_bytes"]) == (118197 - 111646, (13638730 - 12800202) * 512)
    assert whole["avg_read_io_bytes"] == 65536.0


def test_block_sampler_header_of_another_version_is_refused():
    text = "# harness-sampler v4 mode=block dev=vda period_ms=10 clock=monotonic\n5 " + "1 " * 17 + "\n"
    with pytest.raises(ParseError, match=r"^line 1: sampler output of version v4: this parser reads harness-sampler "
                                         r"v1 or v2 or v3 \(header '# harness-sampler v4 mode=block dev=vda"):
        parse_blockstat(text.encode())
    for version in ("v1", "v2", "v3"):  # the block records did not change from v1 to v3
        assert len(parse_blockstat(text.replace("v4", version).encode())) == 1
    assert len(parse_blockstat(b" ".join([b"1"] * 17))) == 1  # a bare stat line (a run.json snapshot) needs none


def test_block_sampler_wrong_field_count_names_the_line():
    text = "# harness-sampler v1 mode=block dev=nvme0n1 period_ms=10 clock=monotonic\n5 " + "1 " * 16 + "\n"
    with pytest.raises(ParseError, match=r"^line 2: expected 11, 15 or 17 block stat fields, got 16 after"):
        parse_blockstat(text.encode())


def test_block_sampler_accepts_old_kernel_field_counts():
    text = ("# harness-sampler v1 mode=block dev=mmcblk0 period_ms=10 clock=monotonic\n"
            "1000 " + "1 " * 11 + "\n2000 " + "2 " * 15 + "\n# stop t_ns=2000 samples=2 overruns=0\n")
    rows = parse_blockstat(text.encode())
    assert [len([v for v in r.values() if v is not None]) for r in rows] == [2 + 11 + 2, 2 + 15 + 2]


def test_intervals_after_a_counter_reset_give_none_not_negative():
    head = "# harness-sampler v1 mode=block dev=sda period_ms=10 clock=monotonic\n"
    line = "{t} {r} 0 {s} 0 0 0 0 0 0 {tick} {q}\n"
    text = (head + line.format(t=0, r=100, s=800, tick=5, q=9)
            + line.format(t=10_000_000, r=3, s=24, tick=7, q=12))
    [interval] = derive_intervals(parse_blockstat(text.encode()))
    assert interval["read_ios"] is None and interval["read_bytes"] is None
    assert interval["read_bytes_per_s"] is None
    assert interval["util_pct"] == pytest.approx(20.0) and interval["avg_inflight"] == pytest.approx(0.3)


def test_intervals_need_timestamps_in_order():
    with pytest.raises(ValueError, match="timestamped"):
        derive_intervals(parse_blockstat(b" ".join([b"1"] * 17)))
    head = "# harness-sampler v1 mode=block dev=sda\n"
    text = head + "20 " + "1 " * 11 + "\n10 " + "1 " * 11 + "\n"
    with pytest.raises(ValueError, match="not in time order"):
        derive_intervals(parse_blockstat(text.encode()))


# ------------------------------------------------------------------------------------------- lateness (trailer)

V2_HEAD = ("# harness-sampler v2 mode=threads pid=7 period_ms=5 clock_ticks_per_s=100 stat_every=20 wchan=0 "
           "arch=x86_64 gate=schedstat slice_us=100 clock=monotonic\n")
ON_TIME = "# stop t_ns=9 samples=3 overruns=0 late_us_p50=30 late_us_p90=60 late_us_p99=90 late_us_max=95\n"
LATE = "# exit t_ns=9 late_us_p50=400 late_us_p90=2200 late_us_p99=3000 late_us_max=3149\n"


@pytest.mark.parametrize(("tail", "expected"), [
    (V2_HEAD + "5\t7\t-\t\t\t\tmain\t\tidle\t232\n" + ON_TIME,
     {"late_us_p50": 30, "late_us_p90": 60, "late_us_p99": 90, "late_us_max": 95}),
    ("...\t232\n" + LATE, {"late_us_p50": 400, "late_us_p90": 2200, "late_us_p99": 3000, "late_us_max": 3149}),
    (V2_HEAD + "# stop t_ns=9 samples=3 overruns=0\n", {}),  # a sampler from before the lateness fields
    (V2_HEAD + "5\t7\t-\t\t\t\tmain\t\tidle\t232\n", {}),  # killed: no trailer
])
def test_lateness_comes_from_the_last_trailer_line(tail: str, expected: dict):
    assert sampler_lateness(tail.encode()) == expected


@pytest.mark.parametrize(("trailer", "warned"), [(ON_TIME, False), (LATE, True)])
def test_ingest_warns_once_when_samples_were_late(tmp_path: Path, caplog, trailer: str, warned: bool):
    """p90 past a fifth of the period (1 ms at 5 ms): one warning naming the capture; the table is read the same."""
    # 300 records: more than the 4 KiB tail the trailer is looked for in
    (tmp_path / "threads.txt").write_text(V2_HEAD + "5\t7\tS\t1\t2\t3\tmain\t\tidle\t232\n" * 300 + trailer)
    with caplog.at_level("WARNING"):
        tables = COLLECTORS["threads"].ingest(tmp_path, {})
    assert tables["threads"].num_rows == 300
    messages = [r.getMessage() for r in caplog.records if "late" in r.getMessage()]
    assert len(messages) == (1 if warned else 0), messages
    if warned:
        assert str(tmp_path / "threads.txt") in messages[0] and "p90 2200 us" in messages[0]

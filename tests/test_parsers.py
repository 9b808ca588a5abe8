"""Parsers on real captures in tests/data (sources in each SOURCE.md): registry, fio, blockstat, nvpmodel.

Expected numbers were read off the fixture files by eye, not computed by the code under test.
"""

from __future__ import annotations

import json

import pytest

from harness.parsers import PARSERS, ParseError, parse
from harness.parsers.blockstat import delta, parse_blockstat
from harness.parsers.fio import fio_size_bytes, parse_fio
from harness.parsers.nvpmodel import parse_nvpmodel
from harness.parsers.sampler import parse_sampler_threads
from tests.helpers import DATA


def fixture(rel: str) -> bytes:
    return (DATA / rel).read_bytes()


def data(rel: str) -> bytes:
    return (DATA / rel).read_bytes()


# --- registry -------------------------------------------------------------------------------------

def test_registry_names_the_cli_kinds():
    # other kinds (llama-bench, jetson-clocks, ...) register here too; these five are this module's
    assert {"blockstat", "fio", "nvpmodel", "sampler-threads", "tegrastats"} <= set(PARSERS)
    assert PARSERS["sampler-threads"] is parse_sampler_threads and PARSERS["fio"] is parse_fio


def test_parse_dispatches_by_kind():
    assert parse("nvpmodel", fixture("nvpmodel/q-15w.txt")) == parse_nvpmodel(fixture("nvpmodel/q-15w.txt"))


def test_unknown_kind_lists_known_ones():
    with pytest.raises(ParseError, match=r"^unknown kind 'no-such-kind' \(known: blockstat, .*\)$") as info:
        parse("no-such-kind", b"")
    assert all(kind in str(info.value) for kind in PARSERS)


def test_parse_error_is_a_value_error_and_carries_the_line():
    err = ParseError("bad", line=7)
    assert isinstance(err, ValueError) and err.line == 7 and str(err) == "line 7: bad"


@pytest.mark.parametrize("kind, rel", [
    ("fio", "fio/fio-3.33-io_uring-direct-qd4-64k-randread.json"),
    ("fio", "fio/fio-3.33-psync-buffered-qd1-64k-randread.json"),
    ("fio", "fio/fio-3.33-lat-percentiles.json"),
    ("blockstat", "blockstat/vda-stat-17-fields.txt"),
    ("tegrastats", "tegrastats/orin-nano-super-jp6.log"),
    ("nvpmodel", "nvpmodel/q-15w.txt"),
    ("nvpmodel", "nvpmodel/q-maxn-super.txt"),
])
def test_every_fixture_gives_json_serialisable_rows(kind, rel):
    rows = parse(kind, fixture(rel))
    assert rows and all(isinstance(row, dict) for row in rows)
    assert json.loads(json.dumps(rows, allow_nan=False)) == rows


# --- fio ------------------------------------------------------------------------------------------

def test_fio_qd4_io_uring_fixture():
    [row] = parse_fio(fixture("fio/fio-3.33-io_uring-direct-qd4-64k-randread.json"))
    assert row["fio_version"] == "fio-3.33"
    assert row["job_name"] == "rr"
    assert (row["rw"], row["bs_bytes"], row["iodepth"], row["numjobs"]) == ("randread", 65536, 4, 1)
    assert (row["ioengine"], row["direct"]) == ("io_uring", 1)
    assert row["read_iops"] == 18451.909618
    assert row["read_bw_bytes_per_s"] == 1209264348  # bw_bytes, not bw (KiB/s: 1180922)
    assert row["read_io_bytes"] == 6047531008
    assert row["read_clat_mean_ns"] == 208399.018759
    assert row["read_lat_mean_ns"] == 216365.233306
    assert row["read_slat_mean_ns"] == 7966.214547
    assert row["read_clat_p50_ns"] == 199680
    assert row["read_clat_p90_ns"] == 244736
    assert row["read_clat_p95_ns"] == 264192
    assert row["read_clat_p99_ns"] == 313344
    assert row["read_clat_p999_ns"] == 634880
    assert row["read_clat_p9999_ns"] == 1695744
    assert row["read_percentile_source"] == "clat"
    assert row["runtime_ms"] == 5000
    assert (row["usr_cpu_pct"], row["sys_cpu_pct"]) == (2.1, 20.78)
    assert (row["ctx"], row["majf"], row["minf"]) == (23071, 0, 75)
    assert row["opt_size"] == "1g" and row["opt_filename"] == "/data/f1g.bin" and row["opt_runtime"] == "5"
    assert not any(key.startswith("write_") for key in row)  # a pure read job: no write columns


def test_fio_psync_buffered_fixture():
    [row] = parse_fio(fixture("fio/fio-3.33-psync-buffered-qd1-64k-randread.json"))
    assert (row["ioengine"], row["direct"], row["iodepth"]) == ("psync", 0, 1)
    assert row["read_iops"] == 9174.165167
    assert row["read_bw_bytes_per_s"] == 601238088
    assert row["read_io_bytes"] == 3006791680
    assert row["read_clat_mean_ns"] == 105026.252223
    assert row["read_clat_p50_ns"] == 97792
    assert (row["read_clat_p99_ns"], row["read_clat_p999_ns"]) == (268288, 387072)
    assert row["read_slat_mean_ns"] is None  # psync has no submission latency (slat N=0)
    assert (row["usr_cpu_pct"], row["sys_cpu_pct"], row["ctx"], row["minf"]) == (0.84, 45.5, 45848, 26)


def test_fio_lat_percentiles_fixture_has_both_clat_and_lat_percentiles():
    [row] = parse_fio(fixture("fio/fio-3.33-lat-percentiles.json"))
    assert row["iodepth"] == 1  # no iodepth option in this job: fio's default
    assert row["read_iops"] == 10643.356643
    assert (row["read_clat_p50_ns"], row["read_clat_p90_ns"]) == (74240, 83456)
    assert row["read_clat_p99_ns"] == 108032
    assert row["read_clat_p999_ns"] == 321536
    assert (row["read_lat_p50_ns"], row["read_lat_p99_ns"]) == (91648, 128512)
    assert row["read_lat_p999_ns"] == 374784
    assert row["read_percentile_source"] == "clat"
    assert "read_clat_p95_ns" not in row  # percentile_list=50:90:99:99.9
    assert row["opt_lat_percentiles"] == "1"


def test_fio_falls_back_to_lat_percentiles_when_clat_has_none():
    [row] = parse_fio(data("fio/fio-3.33-lat-percentiles-only.json"))
    assert row["read_percentile_source"] == "lat"
    assert (row["read_clat_p50_ns"], row["read_clat_p95_ns"]) == (132096, 156672)
    assert row["read_clat_p99_ns"] == 374784
    assert row["read_lat_p999_ns"] == 374784
    assert row["read_clat_mean_ns"] == 122727.0


def test_fio_skips_warning_lines_and_merges_global_options():
    pair, writer = parse_fio(data("fio/fio-3.33-global-options-junk-mixed.out"))
    assert pair["job_name"] == "pair"
    assert pair["bs_bytes"] == 4096  # bs=4k,8k: the read size
    assert pair["iodepth"] == 4 and pair["ioengine"] == "psync"  # ioengine from [global]
    assert pair["opt_io_size"] == "2m" and pair["opt_filename"] == "/tmp/fioexp/f16m.bin"
    assert pair["read_io_bytes"] == 2097152 and pair["read_total_ios"] == 512
    assert "write_iops" not in pair
    # the job's own filename wins over the global one
    assert writer["opt_filename"] == "/tmp/fioexp/w8m.bin" and writer["opt_size"] == "8m"
    assert (writer["rw"], writer["bs_bytes"]) == ("randrw", 16384)
    assert writer["write_iops"] == 11500.0
    assert writer["write_bw_bytes_per_s"] == 188416000
    assert writer["write_io_bytes"] == 1130496
    assert writer["write_clat_p99_ns"] == 38144
    assert writer["read_io_bytes"] == 966656


def test_fio_bs_units_follow_fio_not_intuition():
    # Measured: fio 3.33 moved 17 x 64000 bytes for bs=64KiB (kb_base=1024 reads IEC as powers of ten).
    rows = {row["job_name"]: row for row in parse_fio(data("fio/fio-3.33-bs-units.json"))}
    assert rows["kib"]["read_io_bytes"] == 17 * 64000
    assert rows["kib"]["bs_bytes"] == 64000
    assert rows["kb"]["bs_bytes"] == rows["k"]["bs_bytes"] == 65536


@pytest.mark.parametrize("text, kb_base, expected", [
    ("64k", 1024, 65536), ("64K", 1024, 65536), ("64KB", 1024, 65536), ("128KB", 1024, 131072),
    ("64KiB", 1024, 64000), ("1m", 1024, 1048576), ("1M", 1024, 1048576), ("4096", 1024, 4096),
    ("64k", 1000, 64000), ("64KiB", 1000, 65536), ("0x1000", 1024, 4096), ("1g", 1024, 1 << 30),
])
def test_fio_size_units(text, kb_base, expected):
    assert fio_size_bytes(text, kb_base) == expected


def test_fio_unknown_unit_is_an_error():
    with pytest.raises(ValueError, match="unknown unit"):
        fio_size_bytes("64q")


def _fio_doc(options: dict, global_options: dict | None = None) -> bytes:
    doc = json.loads(fixture("fio/fio-3.33-lat-percentiles.json"))
    doc["jobs"][0]["job options"] = options
    if global_options is not None:
        doc["global options"] = global_options
    return json.dumps(doc).encode()


def test_fio_defaults_when_options_are_absent():
    [row] = parse_fio(_fio_doc({"name": "bare"}))
    assert (row["rw"], row["bs_bytes"], row["iodepth"], row["numjobs"]) == ("read", 4096, 1, 1)
    assert (row["ioengine"], row["direct"]) == ("psync", 0)


def test_fio_buffered_0_means_direct_and_kb_base_is_honoured():
    [row] = parse_fio(_fio_doc({"buffered": "0", "bs": "64k", "kb_base": "1000"}))
    assert row["direct"] == 1 and row["bs_bytes"] == 64000


def test_fio_bad_iodepth_names_the_job_and_option():
    with pytest.raises(ParseError, match=r"job 'x': option iodepth='four' is not an integer"):
        parse_fio(_fio_doc({"name": "x", "iodepth": "four"}))


def test_fio_bad_bs_names_the_option():
    with pytest.raises(ParseError, match=r"option bs='64 parsecs'"):
        parse_fio(_fio_doc({"bs": "64 parsecs"}))


def test_fio_truncated_json_raises_with_line():
    raw = fixture("fio/fio-3.33-io_uring-direct-qd4-64k-randread.json")
    with pytest.raises(ParseError, match=r"^line \d+: invalid fio JSON") as info:
        parse_fio(raw[: len(raw) // 2])
    assert info.value.line is not None and info.value.line > 1


def test_fio_line_numbers_count_the_skipped_warning_lines():
    with pytest.raises(ParseError) as info:
        parse_fio(b"note: a warning\nnote: another\n{\n  \"jobs\" : [ }\n")
    assert info.value.line == 4


def test_fio_without_json_or_jobs_is_an_error():
    with pytest.raises(ParseError, match="no JSON object"):
        parse_fio(b"fio: failed parsing rw=bogus\n")
    with pytest.raises(ParseError, match="^line 2: fio JSON has no 'jobs' list"):
        parse_fio(b'note: a warning\n{"fio version": "fio-3.33"}')


# --- blockstat ------------------------------------------------------------------------------------

def test_blockstat_17_field_fixture():
    [row] = parse_blockstat(fixture("blockstat/vda-stat-17-fields.txt"))
    assert row["t_ns"] is None and row["device"] is None
    assert (row["read_ios"], row["read_merges"], row["read_sectors"], row["read_ticks_ms"]) == (
        1153123, 1501207, 407570218, 1273402)
    assert (row["write_ios"], row["write_merges"], row["write_sectors"], row["write_ticks_ms"]) == (
        10656, 22378, 13108976, 118823)
    assert (row["in_flight"], row["io_ticks_ms"], row["time_in_queue_ms"]) == (0, 178152, 1392924)
    assert (row["discard_ios"], row["discard_merges"], row["discard_sectors"], row["discard_ticks_ms"]) == (
        8101, 20, 530096, 656)
    assert (row["flush_ios"], row["flush_ticks_ms"]) == (883, 42)
    assert row["read_bytes"] == 407570218 * 512
    assert row["write_bytes"] == 13108976 * 512


def test_blockstat_older_kernels_leave_missing_fields_none():
    line17 = fixture("blockstat/vda-stat-17-fields.txt").split()
    [row15] = parse_blockstat(b" ".join(line17[:15]))
    assert row15["discard_ticks_ms"] == 656 and row15["flush_ios"] is None and row15["flush_ticks_ms"] is None
    [row11] = parse_blockstat(b" ".join(line17[:11]))
    assert row11["time_in_queue_ms"] == 1392924 and row11["discard_ios"] is None


@pytest.mark.parametrize("count", [10, 12, 16, 18])
def test_blockstat_wrong_field_count_names_the_line(count):
    text = "\n" + " ".join(["1"] * count) + "\n"
    with pytest.raises(ParseError, match=rf"^line 2: expected 11, 15 or 17 block stat fields, got {count}"):
        parse_blockstat(text.encode())


def test_blockstat_non_integer_names_the_line():
    with pytest.raises(ParseError, match="^line 1: expected integers"):
        parse_blockstat(b"1 2 3 4 5 6 7 8 9 10 x")


def test_blockstat_rejects_thread_mode_sampler_output():
    with pytest.raises(ParseError, match="mode=threads, not mode=block"):
        parse_blockstat(b"# harness-sampler v1 mode=threads pid=1 period_ms=5\n")


def test_delta_between_two_snapshots():
    before = {"read_ios": 100, "read_sectors": 1000, "write_ios": 5, "write_sectors": 80,
              "io_ticks_ms": 50, "time_in_queue_ms": 70}
    after = {"read_ios": 110, "read_sectors": 2280, "write_ios": 5, "write_sectors": 80,
             "io_ticks_ms": 60, "time_in_queue_ms": 95}
    d = delta(before, after)
    assert d == {"read_bytes": 1280 * 512, "read_ios": 10, "write_bytes": 0, "write_ios": 0,
                 "io_ticks_ms": 10, "time_in_queue_ms": 25, "avg_read_io_bytes": 1280 * 512 / 10}


def test_delta_treats_a_counter_going_down_as_a_reset():
    d = delta({"read_ios": 4294967290, "read_sectors": 10}, {"read_ios": 6, "read_sectors": 20})
    assert d["read_ios"] is None and d["avg_read_io_bytes"] is None and d["read_bytes"] == 5120


def test_delta_without_reads_has_no_average_size():
    same = {"read_ios": 3, "read_sectors": 8}
    assert delta(same, dict(same))["avg_read_io_bytes"] is None


# --- nvpmodel -------------------------------------------------------------------------------------

def test_nvpmodel_fixtures():
    [maxn] = parse_nvpmodel(fixture("nvpmodel/q-maxn-super.txt"))
    assert (maxn["mode_name"], maxn["mode_id"]) == ("MAXN_SUPER", 2)
    [w15] = parse_nvpmodel(fixture("nvpmodel/q-15w.txt"))
    assert (w15["mode_name"], w15["mode_id"]) == ("15W", 0)
    assert w15["messages"] == []


def test_nvpmodel_keeps_nvpm_errors_after_the_mode():
    [row] = parse_nvpmodel(data("nvpmodel/q-5w-nano-nvpm-error.txt"))
    assert (row["mode_name"], row["mode_id"]) == ("5W", 1)
    assert row["messages"][0] == "NVPM ERROR: Error opening /sys/kernel/nvpmodel_emc_cap/emc_iso_cap: 13"
    assert len(row["messages"]) == 2


def test_nvpmodel_warning_before_and_fan_mode_and_verbose_lines():
    # Shapes printed by nvpmodel 1.x: a WARN line first on a Nano without a fan profile, the fan mode on
    # AGX Xavier, and --verbose's "NVPM VERB:" dump which names every mode (not the active one).
    text = (b"NVPM WARN: fan mode is not set!\n"
            b"NVPM VERB: PM_CONFIG: DEFAULT=MAXN(0)\n"
            b"NVPM VERB: POWER_MODEL: ID=1 NAME=5W\n"
            b"NV Fan Mode:cool\n"
            b"NV Power Mode: MODE_30W_4CORE\n"
            b"5\n")
    [row] = parse_nvpmodel(text)
    assert (row["mode_name"], row["mode_id"], row["fan_mode"]) == ("MODE_30W_4CORE", 5, "cool")
    assert (row["default_mode_name"], row["default_mode_id"]) == ("MAXN", 0)
    assert row["messages"] == ["NVPM WARN: fan mode is not set!"]


def test_nvpmodel_errors():
    with pytest.raises(ParseError, match="no 'NV Power Mode:' line"):
        parse_nvpmodel(b"NVPM ERROR: failed to set power mode!\n")
    with pytest.raises(ParseError, match="^line 1: no power mode id"):
        parse_nvpmodel(b"NV Power Mode: 15W\n")
    with pytest.raises(ParseError, match="^line 2: expected the power mode id"):
        parse_nvpmodel(b"NV Power Mode: 15W\nfifteen\n")

"""The fio parser against fio JSON from the field: fio 2.1.3 to 3.34, Linux and Windows, local and client/server.

Every capture is real fio output (tests/data/fio/SOURCE.md says where each one comes from). The expected numbers
were read off the files by eye; where a unit is converted the comment gives the printed value and its unit
(fio 2.x latencies in usec, io_bytes in KiB up to fio-2.20, bw in KiB/s), so the expectation is the hand
conversion, not a rerun of the parser's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.figures.bandwidth import fio_curves
from harness.figures.storage import fio_ladder
from harness.figures.streaming import decode_vs_fio
from harness.parsers import ParseError
from harness.parsers.fio import UNKNOWN_SETTINGS, parse_fio
from tests.helpers import DATA

FIO = DATA / "fio"
SETTINGS = tuple(UNKNOWN_SETTINGS)


def rows_of(name: str) -> list[dict]:
    return parse_fio((FIO / name).read_bytes())


def settings(row: dict) -> tuple:
    return tuple(row[key] for key in SETTINGS)


FIELD_CAPTURES = sorted(p.name for p in FIO.iterdir() if p.name.startswith("fio-") and p.suffix != ".fio"
                        and p.name not in ("fio-3.33-terse.txt", "fio-3.33-normal.txt"))


def test_captures_span_ten_fio_versions_and_each_is_listed_in_source_md() -> None:
    versions = {row["fio_version"] for name in FIELD_CAPTURES for row in rows_of(name)}
    assert len(versions) >= 10 and {"fio-2.1.3", "fio-3.1", "fio-3.34"} <= versions
    source = (FIO / "SOURCE.md").read_text()
    listed = FIELD_CAPTURES + ["fio-3.33-terse.txt", "fio-3.33-normal.txt"]
    assert [name for name in listed if f"| {name} |" not in source] == []


@pytest.mark.parametrize("name", FIELD_CAPTURES)
def test_every_capture_parses_to_json_safe_rows_with_a_version(name: str) -> None:
    rows = rows_of(name)
    assert rows and all(row["fio_version"].startswith("fio-") for row in rows)
    assert json.loads(json.dumps(rows, allow_nan=False)) == rows
    # fio-3.17 and older pad percentile lists with "0.00": 0; that is no 0th percentile
    assert not any(key.endswith("_p0_ns") for row in rows for key in row)


# --- fio 2.x: usec latencies, KiB io_bytes, no bw_bytes ---------------------------------------------------------

def test_fio_2_1_3_compacted_read_sample() -> None:
    [row] = rows_of("fio-2.1.3-yardstick-read.json")
    assert row["fio_version"] == "fio-2.1.3"  # the sample's key is "fioversion"
    assert settings(row) == (None,) * 6  # fio 2.1 printed no options: nothing says what ran
    assert row["read_io_bytes"] == 2218864640  # io_bytes 2166860 KiB
    assert row["read_bw_bytes_per_s"] == 36979712  # bw 36113 KiB/s
    assert row["read_iops"] == 9028 and row["read_runtime_ms"] == 60001
    assert row["read_slat_mean_ns"] == 10490.0  # 10.49 usec
    assert row["read_clat_mean_ns"] == 97840.0  # 97.84 usec
    assert row["read_lat_mean_ns"] == 108700.0  # 108.70 usec
    assert (row["read_clat_p1_ns"], row["read_clat_p50_ns"]) == (84000, 91000)  # 84, 91 usec
    assert (row["read_clat_p99_ns"], row["read_clat_p999_ns"], row["read_clat_p9999_ns"]) == (161000, 215000, 4128000)
    assert row["read_percentile_source"] == "clat"
    assert (row["usr_cpu_pct"], row["sys_cpu_pct"], row["ctx"], row["minf"]) == (4.86, 19.38, 632024, 30)
    assert not any(key.startswith("write_") for key in row)


def test_fio_2_1_3_write_only_job_has_no_invented_read_settings() -> None:
    [row] = rows_of("fio-2.1.3-yardstick-write.json")
    assert settings(row) == (None,) * 6  # not rw=read, bs=4096, psync: fio printed none of them
    assert row["write_io_bytes"] == 2157064192  # 2106508 KiB
    assert row["write_bw_bytes_per_s"] == 35949568  # 35107 KiB/s
    assert row["write_iops"] == 8776
    assert (row["write_slat_mean_ns"], row["write_clat_mean_ns"]) == (11830.0, 99540.0)  # 11.83, 99.54 usec
    assert row["write_lat_mean_ns"] == 111740.0
    assert (row["write_clat_p50_ns"], row["write_clat_p9999_ns"]) == (93000, 628000)
    # the read block is fio's all-zero "no samples" block: zero bytes, no latency
    assert (row["read_io_bytes"], row["read_bw_bytes_per_s"]) == (0, 0)
    assert row["read_clat_mean_ns"] is None and row["read_percentile_source"] is None


def test_fio_2_1_4_five_jobs_without_job_options() -> None:
    rows = {row["job_name"]: row for row in rows_of("fio-2.1.4-pkb-no-job-options.json")}
    assert list(rows) == ["sequential_write", "sequential_read", "random_write_test", "random_read_test",
                          "random_read_test_parallel"]
    assert all(settings(row) == (None,) * 6 for row in rows.values())
    write = rows["sequential_write"]
    assert write["write_io_bytes"] == 370671616  # 361984 KiB
    assert write["write_bw_bytes_per_s"] == 69752832  # 68118 KiB/s
    assert (write["write_iops"], write["write_runtime_ms"]) == (133, 5314)
    assert write["write_slat_mean_ns"] == 1001720.0  # 1001.72 usec
    assert write["write_clat_mean_ns"] == 477734840.0  # 477734.84 usec
    assert (write["write_clat_p25_ns"], write["write_clat_p75_ns"]) == (440380000, 450512000)
    assert write["write_clat_p99_ns"] == 823296000
    read = rows["sequential_read"]
    assert read["read_io_bytes"] == 370671616 and read["read_bw_bytes_per_s"] == 132952064  # 129836 KiB/s
    assert read["read_lat_mean_ns"] == 250770050.0  # 250770.05 usec
    assert rows["random_read_test"]["read_clat_p9999_ns"] == 354304000
    assert rows["random_write_test"]["write_io_bytes"] == 37113856  # 36244 KiB
    assert rows["random_read_test_parallel"]["minf"] == 71


def test_fio_2_17_libaio_settings_and_kib_io_bytes() -> None:
    reader, writer = rows_of("fio-2.17-pkb-libaio-randread.json")
    assert settings(reader) == ("randread", 16384, 1, 2, "libaio", 1)  # bs=16k, numjobs=2 from the options
    assert reader["opt_filename"] == "/dev/disk/by-id/google-pkb-7fb0c9d8-0-data-0-0"
    assert reader["fio_timestamp_ms"] == 1506559552257
    assert reader["read_io_bytes"] == 1325318144  # 1294256 KiB: fio-2.17 predates io_kbytes
    assert reader["read_bw_bytes_per_s"] == 132491264  # 129386 KiB/s
    assert (reader["read_iops"], reader["read_total_ios"]) == (8086.673998, 80891)
    assert reader["read_slat_mean_ns"] == 7173.443  # 7.173443 usec
    assert reader["read_clat_mean_ns"] == 238357.679
    assert reader["read_lat_mean_ns"] == 245531.122
    assert (reader["read_clat_p50_ns"], reader["read_clat_p90_ns"]) == (96000, 1224000)
    assert reader["read_clat_p9999_ns"] == 5408000
    assert settings(writer)[:2] == ("randwrite", 16384)
    assert writer["write_io_bytes"] == 402718720  # 393280 KiB
    assert writer["write_slat_mean_ns"] == 10783.442  # 10.783442 usec, no float residue
    assert writer["write_clat_p99_ns"] == 2384000


def test_fio_2_18_md_raid_randread() -> None:
    [row] = rows_of("fio-2.18-fioplot-libaio-randread.json")
    assert row["fio_version"] == "fio-2.18-59-g618e"
    assert settings(row) == ("randread", 4096, 1, 64, "libaio", 1)  # iodepth "01"
    assert row["read_io_bytes"] == 20033536  # 19564 KiB
    assert row["read_bw_bytes_per_s"] == 1952768  # 1907 KiB/s
    assert row["read_clat_mean_ns"] == 131963750.767  # 131963.750767 usec
    assert row["read_lat_mean_ns"] == 131978623.799
    assert (row["read_clat_p1_ns"], row["read_clat_p99_ns"]) == (8384000, 774144000)


# --- fio 3.0-3.17: ns, no "N", bw_bytes only from 3.2 ---------------------------------------------------------

def test_fio_3_1_jetpack_4_version_keeps_its_means_and_bandwidth() -> None:
    [row] = rows_of("fio-3.1-fioplot-libaio-randread.json")
    assert settings(row) == ("randread", 4096, 2, 16, "libaio", 1)
    assert row["read_io_bytes"] == 17942327296  # io_kbytes present: io_bytes are bytes
    assert row["read_bw_bytes_per_s"] == 299003904  # no bw_bytes before fio-3.2: bw 291996 KiB/s
    assert row["read_iops"] == 72999.000117
    assert row["read_slat_mean_ns"] == 13471.576947  # no "N" key before fio-3.18
    assert row["read_clat_mean_ns"] == 415827.713477
    assert row["read_lat_mean_ns"] == 431333.453501
    assert (row["read_clat_p1_ns"], row["read_clat_p50_ns"]) == (45824, 288768)
    assert (row["read_clat_p99_ns"], row["read_clat_p9999_ns"]) == (2670592, 7634944)
    assert (row["usr_cpu_pct"], row["sys_cpu_pct"], row["ctx"]) == (1.735717, 10.512111, 2667572)
    assert row["runtime_ms"] is None  # job_runtime came with fio-3.1x; not invented


def test_fio_3_1_randrw_both_directions() -> None:
    [row] = rows_of("fio-3.1-fioplot-libaio-randrw.json")
    assert settings(row) == ("randrw", 4096, 32, 1, "libaio", 1)
    assert (row["read_io_bytes"], row["write_io_bytes"]) == (15864913920, 15858020352)
    assert row["read_bw_bytes_per_s"] == 264410112  # 258213 KiB/s
    assert row["write_bw_bytes_per_s"] == 264295424  # 258101 KiB/s
    assert (row["read_clat_mean_ns"], row["write_clat_mean_ns"]) == (275920.057131, 210480.752664)
    assert (row["read_slat_mean_ns"], row["write_slat_mean_ns"]) == (3323.128565, 3443.578383)
    assert (row["read_clat_p9999_ns"], row["write_clat_p999_ns"]) == (3096576, 585728)
    assert row["write_iops"] == 64525.374577


def test_fio_3_1_floppy_sequential_read() -> None:
    [row] = rows_of("fio-3.1-fioplot-floppy-read.json")
    assert settings(row) == ("read", 4096, 4, 1, "libaio", 1)
    assert (row["read_io_bytes"], row["read_bw_bytes_per_s"]) == (1474560, 16384)  # 16 KiB/s
    assert row["read_iops"] == 4.006009 and row["read_runtime_ms"] == 89865
    assert row["read_clat_mean_ns"] == 992832810.655555
    assert (row["read_clat_p50_ns"], row["read_clat_p999_ns"]) == (1027604480, 3137339392)


def test_fio_3_6_two_jobs_of_one_name_are_two_rows() -> None:
    first, second = rows_of("fio-3.6-fioplot-libaio-randread-2jobs.json")
    assert first["job_name"] == second["job_name"] == "random-io"
    assert settings(first) == ("randread", 4096, 16, 2, "libaio", 1)
    assert (first["read_bw_bytes_per_s"], second["read_bw_bytes_per_s"]) == (231868, 235918)  # bw_bytes
    assert (first["read_io_bytes"], second["read_io_bytes"]) == (13983744, 14225408)
    assert (first["read_clat_mean_ns"], second["read_clat_mean_ns"]) == (282482195.900117, 277627513.506766)
    assert (first["read_clat_p50_ns"], second["read_clat_p9999_ns"]) == (212860928, 1686110208)
    assert first["opt_fallocate"] == "none"


def test_fio_3_13_windows_verify_errors_before_the_json() -> None:
    [row] = rows_of("fio-3.13-vc-windowsaio-verify-errors.txt")
    assert row["error"] == 42
    # rw, bs, iodepth, ioengine from "global options"; numjobs and direct left at fio's defaults
    assert settings(row) == ("read", 4096, 512, 1, "windowsaio", 0)
    assert row["opt_verify"] == "md5"
    assert (row["read_io_bytes"], row["read_bw_bytes_per_s"]) == (536973312, 202249835)
    assert row["read_slat_mean_ns"] == 11328.926856 and row["read_clat_mean_ns"] == 5922036.884193
    assert (row["read_clat_p50_ns"], row["read_clat_p99_ns"]) == (6258688, 10420224)
    assert row["runtime_ms"] == 2654


def test_fio_3_14_randread_qd1() -> None:
    [row] = rows_of("fio-3.14-fioplot-libaio-randread.json")
    assert row["fio_version"] == "fio-3.14-6-g97134"
    assert settings(row) == ("randread", 4096, 1, 1, "libaio", 1)
    assert (row["read_bw_bytes_per_s"], row["read_io_bytes"]) == (35663823, 2139865088)
    assert row["read_clat_mean_ns"] == 103252.531844 and row["read_lat_mean_ns"] == 112799.599709
    assert (row["read_clat_p99_ns"], row["read_clat_p999_ns"]) == (134144, 158720)
    assert row["runtime_ms"] == 60000


def test_fio_3_16_randrw_on_a_raid5_file() -> None:
    [row] = rows_of("fio-3.16-fioplot-libaio-randrw.json")
    assert settings(row) == ("randrw", 4096, 32, 8, "libaio", 1)
    assert (row["read_bw_bytes_per_s"], row["write_bw_bytes_per_s"]) == (1284908, 1304963)
    assert row["write_slat_mean_ns"] == 9779208.434631
    assert (row["read_clat_p50_ns"], row["write_clat_p9999_ns"]) == (137363456, 4395630592)
    assert row["runtime_ms"] == 483257 and row["opt_fsync"] == "10000"


def test_fio_3_16_lat_percentiles_sit_under_lat_ns() -> None:
    [row] = rows_of("fio-3.16-superbench-lat-percentiles-randrw.json")
    assert settings(row) == ("randrw", 4096, 64, 4, "libaio", 1)
    assert row["opt_lat_percentiles"] == "1"
    assert (row["read_bw_bytes_per_s"], row["write_bw_bytes_per_s"]) == (348743777, 348450387)
    assert (row["read_iops"], row["write_iops"]) == (85138.890741, 85066.128925)
    assert (row["read_lat_mean_ns"], row["write_clat_mean_ns"]) == (1446562.147113, 1558511.433458)
    # fio-3.13 on puts lat_percentiles=1 under lat_ns: total latency, said so in percentile_source
    assert (row["read_lat_p95_ns"], row["read_lat_p99_ns"], row["read_lat_p999_ns"]) == (1941504, 2244608, 3620864)
    assert (row["write_lat_p95_ns"], row["write_lat_p9999_ns"]) == (1908736, 4358144)
    assert row["read_percentile_source"] == row["write_percentile_source"] == "lat"
    assert row["runtime_ms"] == 120004


def test_fio_3_1_to_3_12_lat_percentiles_under_clat_ns_are_total_latency() -> None:
    # fio-3.1 stat.c add_lat_sample: lat_percentiles=1 feeds the one histogram that add_ddir_status_json writes
    # under clat_ns until fio-3.13 (commit e5eb6fbf). The capture's job did not set it; this copy does.
    doc = json.loads((FIO / "fio-3.1-fioplot-libaio-randread.json").read_bytes())
    doc["jobs"][0]["job options"]["lat_percentiles"] = "1"
    [row] = parse_fio(json.dumps(doc).encode())
    assert row["read_percentile_source"] == "lat"
    assert (row["read_lat_p50_ns"], row["read_lat_p99_ns"]) == (288768, 2670592)
    [plain] = rows_of("fio-3.1-fioplot-libaio-randread.json")
    assert plain["read_percentile_source"] == "clat" and "read_lat_p50_ns" not in plain


# --- fio 3.18 on: "N" ------------------------------------------------------------------------------------------

def test_fio_3_20_gtod_reduce_has_no_latencies_at_all() -> None:
    reader, writer = rows_of("fio-3.20-kubestr-gtod-reduce.json")
    assert settings(reader) == ("randread", 4096, 64, 1, "libaio", 1)
    assert (reader["read_bw_bytes_per_s"], reader["read_iops"]) == (4039322, 982.05078)
    # gtod_reduce=1: every latency block has N=0; no mean, no percentile, rather than zeros
    assert (reader["read_clat_mean_ns"], reader["read_lat_mean_ns"], reader["read_slat_mean_ns"]) == (None,) * 3
    assert reader["read_percentile_source"] is None
    assert not any("_p" in key and key.endswith("_ns") for key in reader)
    assert (writer["rw"], writer["write_bw_bytes_per_s"], writer["write_io_bytes"]) == ("randwrite", 1616406,
                                                                                         24805376)
    assert writer["write_clat_mean_ns"] is None


def test_fio_3_26_readwrite_mix() -> None:
    [row] = rows_of("fio-3.26-vc-libaio-readwrite.json")
    assert settings(row) == ("readwrite", 262144, 64, 1, "libaio", 1)
    assert (row["read_bw_bytes_per_s"], row["write_bw_bytes_per_s"]) == (149343283, 67267937)
    assert (row["read_clat_mean_ns"], row["write_slat_mean_ns"]) == (76331646.873584, 39210.547956)
    assert (row["read_clat_p50_ns"], row["write_clat_p99_ns"]) == (99090432, 151864912)
    assert "trim_iops" not in row


def test_fio_3_26_windows_randwrite() -> None:
    [row] = rows_of("fio-3.26-vc-windowsaio-randwrite.txt")
    assert settings(row) == ("randwrite", 4096, 1, 1, "windowsaio", 1)
    assert (row["write_io_bytes"], row["write_bw_bytes_per_s"]) == (1073741824, 8876980)
    assert row["write_lat_mean_ns"] == 459323.126984
    assert (row["write_clat_p999_ns"], row["write_clat_p9999_ns"]) == (41156608, 54788096)
    assert row["read_clat_mean_ns"] is None  # N=0


def test_fio_3_33_failed_job_after_error_lines() -> None:
    [row] = rows_of("fio-3.33-fioplot-sync-write.json")  # "1m: you need to specify size=" first
    assert row["error"] == 22 and row["runtime_ms"] == 0
    assert settings(row) == ("write", 1048576, 64, 1, "sync", 1)
    assert row["read_io_bytes"] == 0 and "write_io_bytes" not in row  # no write was done


def test_fio_3_34_macos_sync_randread_after_a_signal_line() -> None:
    [row] = rows_of("fio-3.34-fioplot-sync-randread.json")
    assert settings(row) == ("randread", 4096, 1, 1, "sync", 1)
    assert (row["read_bw_bytes_per_s"], row["read_io_bytes"]) == (41380254, 114540544)
    assert row["read_slat_mean_ns"] is None  # sync: N=0
    assert (row["read_clat_mean_ns"], row["read_clat_p9999_ns"]) == (95948.612502, 468992)


def test_fio_3_42_running_the_harness_ladder_job_file() -> None:
    # the job file is what the harness's fio step writes (runner/steps/fio.py): every setting is printed
    rows = {row["job_name"]: row for row in rows_of("fio-3.42-harness-ladder-io_uring.json")}
    assert list(rows) == ["randread-64k-qd1", "randread-64k-qd4", "read-1m-seq"]
    assert settings(rows["randread-64k-qd1"]) == ("randread", 65536, 1, 1, "io_uring", 1)
    assert settings(rows["read-1m-seq"]) == ("read", 1048576, 4, 1, "io_uring", 1)
    qd4 = rows["randread-64k-qd4"]
    assert (qd4["read_bw_bytes_per_s"], qd4["read_io_bytes"], qd4["read_iops"]) == (422720254, 424411136, 6450.199203)
    assert (qd4["read_slat_mean_ns"], qd4["read_clat_mean_ns"]) == (12731.469426, 594335.872915)
    assert (qd4["read_clat_p50_ns"], qd4["read_clat_p99_ns"]) == (317440, 5275648)
    assert qd4["runtime_ms"] == 1003 and qd4["opt_invalidate"] == "1"
    assert rows["read-1m-seq"]["read_clat_p999_ns"] == 23724032


def test_fio_3_42_both_percentile_lists() -> None:
    [row] = rows_of("fio-3.42-psync-randrw-clat-and-lat-percentiles.json")
    assert settings(row) == ("randrw", 4096, 1, 1, "psync", 0)
    assert (row["write_clat_p50_ns"], row["write_lat_p50_ns"]) == (3312, 3344)
    assert (row["write_clat_p999_ns"], row["write_lat_p999_ns"]) == (24960, 25472)
    assert row["write_percentile_source"] == "clat"
    assert (row["read_bw_bytes_per_s"], row["write_bw_bytes_per_s"]) == (31255630, 33272123)
    assert (row["read_lat_mean_ns"], row["write_clat_mean_ns"]) == (124510.510081, 3775.280303)
    assert "read_clat_p90_ns" not in row  # percentile_list=50:99:99.9


def test_fio_3_33_client_server_rows_carry_their_host() -> None:
    first, second, total = rows_of("fio-3.33-client-server-2-hosts.json")
    assert [row["job_name"] for row in (first, second, total)] == ["csread", "csread", "All clients"]
    assert (first["fio_host"], second["fio_host"]) == ("127.0.0.1", "127.0.0.1")
    assert total["fio_host"] is None  # fio tags the sum with whichever server reported last
    assert settings(first) == ("randread", 65536, 1, 1, "psync", 0)  # from "global options"
    assert first["fio_timestamp_ms"] == 1796196704000  # client output has "timestamp" in seconds only
    assert (first["read_bw_bytes_per_s"], second["read_bw_bytes_per_s"]) == (2097152000, 144631172)
    assert (first["read_clat_mean_ns"], second["read_clat_p50_ns"]) == (5564.8125, 110080)
    assert (total["read_io_bytes"], total["read_bw_bytes_per_s"]) == (8388608, 289262344)
    assert total["read_clat_mean_ns"] == 214707.882812 and total["read_percentile_source"] is None


def test_fio_3_33_unified_rw_reporting_is_a_mixed_block() -> None:
    [row] = rows_of("fio-3.33-unified-mixed-randrw.json")
    assert settings(row) == ("randrw", 16384, 1, 1, "psync", 0)
    assert (row["mixed_io_bytes"], row["mixed_bw_bytes_per_s"]) == (4194304, 161319384)
    assert (row["mixed_clat_mean_ns"], row["mixed_clat_p99_ns"]) == (97209.691406, 1351680)
    assert row["mixed_slat_mean_ns"] is None
    assert not any(key.startswith(("read_", "write_")) for key in row)


# --- formats the parser does not read ---------------------------------------------------------------------------

def test_terse_output_is_named_with_its_line() -> None:
    with pytest.raises(ParseError, match=r"^line 1: fio terse output, not JSON"):
        rows_of("fio-3.33-terse.txt")


def test_normal_output_is_named_with_its_line() -> None:
    with pytest.raises(ParseError, match=r"^line 1: fio normal \(text\) output, not JSON"):
        rows_of("fio-3.33-normal.txt")


def test_a_job_without_any_direction_block_is_an_error() -> None:
    doc = json.loads((FIO / "fio-3.14-fioplot-libaio-randread.json").read_bytes())
    for direction in ("read", "write", "trim"):
        del doc["jobs"][0][direction]
    with pytest.raises(ParseError, match="job 'random-read' has no read, write, trim or mixed results"):
        parse_fio(json.dumps(doc).encode())


# --- None settings and missing columns in figures ------------------------------------------------------------

def _fio_table(*names: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    fio = pd.DataFrame([{**row, "run_id": f"f{i}", "target": "b"}
                        for i, name in enumerate(names) for row in rows_of(name)])
    runs = pd.DataFrame({"run_id": sorted(set(fio["run_id"])), "status": "ok", "cache": "cold", "target": "b",
                         "step": "fio"})
    return runs, fio


def test_rows_without_settings_stay_off_the_ladder_curves(tmp_path: Path) -> None:
    runs, fio = _fio_table("fio-2.1.4-pkb-no-job-options.json", "fio-3.1-fioplot-libaio-randread.json")
    curves = fio_curves(runs, fio)
    # only the fio-3.1 job has a block size and queue depth; the fio-2.1.4 rows cannot be placed
    assert curves[["bs_bytes", "iodepth", "bps"]].values.tolist() == [[4096, 2, 299003904]]
    assert {p.suffix for p in fio_ladder(runs, fio, tmp_path, "set", "settings")} == {".png", ".svg"}


def test_figures_skip_fio_tables_without_read_columns(tmp_path: Path) -> None:
    runs, fio = _fio_table("fio-3.33-unified-mixed-randrw.json")  # only mixed_* columns
    assert fio_ladder(runs, fio, tmp_path, "set", "settings") == []
    requests = pd.DataFrame({"run_id": ["f0"], "target": "b"})
    assert decode_vs_fio(runs, requests, fio, [], tmp_path, "set", "settings") == []

"""tegrastats across boards and releases: the Orin Nano Super (JetPack 6) and real
lines from other boards in tests/data/tegrastats (sources in SOURCE.md there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.tegrastats import parse_tegrastats
from tests.helpers import REPO

DATA = REPO / "tests" / "data" / "tegrastats"


def rows_of(path: Path) -> list[dict]:
    return parse_tegrastats(path.read_bytes())


def test_orin_nano_super_jp6_without_sudo():
    first, _ = rows_of(DATA / "orin-nano-super-jp6.log")
    assert first["timestamp"] == "2025-07-14T10:29:36"
    assert (first["ram_used_mb"], first["ram_total_mb"]) == (2147, 7620)
    assert (first["swap_used_mb"], first["swap_total_mb"], first["swap_cached_mb"]) == (1476, 3810, 1)
    assert (first["ram_lfb_blocks"], first["ram_lfb_block_mb"]) == (2, 4.0)
    assert first["cpu_load_pct"] == [0] * 6
    assert first["cpu_freq_mhz"] == [729] * 6
    assert first["emc_load_pct"] is None and first["emc_freq_mhz"] is None  # EMC_FREQ only under sudo
    assert first["gpu_load_pct"] == 0 and first["gpu_freq_mhz"] is None and first["gpu_freq_mhz_list"] is None
    assert first["temp_cpu_c"] == 47.687 and first["temp_tj_c"] == 48.625 and first["temp_soc1_c"] == 48.25
    assert (first["power_vdd_in_mw"], first["power_vdd_in_avg_mw"]) == (4556, 4556)
    assert (first["power_vdd_cpu_gpu_cv_mw"], first["power_vdd_soc_mw"]) == (483, 1451)


def test_orin_nano_super_jp6_with_sudo():
    _, second = rows_of(DATA / "orin-nano-super-jp6.log")
    assert second["timestamp"] == "2026-10-08T04:38:21"
    assert second["cpu_freq_mhz"] == [1497, 729, 729, 729, 729, 729]
    assert (second["emc_load_pct"], second["emc_freq_mhz"]) == (15, 204)
    assert (second["gpu_load_pct"], second["gpu_freq_mhz"], second["gpu_freq_mhz_list"]) == (0, 305, [305])
    assert second["nvdec_freq_mhz"] is None and second["nvjpg_freq_mhz"] is None
    assert second["vic_freq_mhz"] is None and second["ofa_freq_mhz"] is None
    assert second["ape_freq_mhz"] == 200
    assert (second["power_vdd_in_mw"], second["power_vdd_in_avg_mw"]) == (5251, 8535)
    assert (second["power_vdd_soc_mw"], second["power_vdd_soc_avg_mw"]) == (2720, 3659)
    assert second["temp_gpu_c"] == 49.625


def test_agx_orin_jp5_offline_sensors_second_gpc_and_duplicate_rails():
    [row] = rows_of(DATA / "agx-orin-jp5.1.log")
    assert row["timestamp"] == "2023-04-24T00:01:24"
    assert len(row["cpu_load_pct"]) == 12
    assert (row["emc_load_pct"], row["emc_freq_mhz"]) == (0, 2133)
    assert (row["gpu_load_pct"], row["gpu_freq_mhz"]) == (0, 0)
    assert (row["gr3d2_load_pct"], row["gr3d2_freq_mhz"]) == (0, 0)
    assert row["vic_freq_mhz"] == 729 and row["ape_freq_mhz"] == 174
    # upper-case sensor names on JP5 land in the same columns as JP6's lower-case ones
    assert row["temp_cpu_c"] == 42.593 and row["temp_tboard_c"] == 32.0 and row["temp_tdiode_c"] == 33.25
    assert row["temp_gpu_c"] is None and row["temp_cv0_c"] is None  # -256C: sensor off
    assert row["power_vdd_gpu_soc_mw"] == 2399 and row["power_vin_sys_5v0_avg_mw"] == 4032
    assert row["power_vddq_vdd2_1v8ao_mw"] == 301
    assert (row["power_nc_mw"], row["power_nc_2_mw"], row["power_nc_2_avg_mw"]) == (0, 0, 0)


def test_nano_jp4_rails_without_mw_and_no_clocks():
    rows = rows_of(DATA / "nano-jp4-10w.log")
    assert len(rows) == 3
    first = rows[0]
    assert first["timestamp"] is None
    assert first["cpu_load_pct"] == [100] * 4 and first["cpu_freq_mhz"] == [1479] * 4
    assert (first["emc_load_pct"], first["emc_freq_mhz"]) == (0, None)
    assert (first["gpu_load_pct"], first["gpu_freq_mhz"]) == (99, None)
    assert (first["power_pom_5v_gpu_mw"], first["power_pom_5v_gpu_avg_mw"]) == (8949, 8742)
    assert (first["power_pom_5v_in_mw"], first["power_pom_5v_cpu_mw"]) == (3227, 3148)
    assert first["temp_pll_c"] == 41.5 and first["temp_pmic_c"] == 100.0 and first["temp_thermal_c"] == 48.25
    assert rows[1]["gpu_load_pct"] == 83


def test_xavier_nx_jp4_lines_with_and_without_rails():
    rows = rows_of(DATA / "xavier-nx-jp4-15w-20w.log")
    assert len(rows) == 6
    assert (rows[0]["power_vdd_in_mw"], rows[0]["power_vdd_in_avg_mw"]) == (12221, 13950)
    assert rows[0]["power_vdd_cpu_gpu_cv_mw"] == 8812 and rows[0]["temp_aux_c"] == 51.0
    assert not any(key.startswith("power_") for key in rows[3])  # the 20 W lines print no rails
    assert rows[3]["ram_used_mb"] == 6774 and rows[3]["swap_cached_mb"] == 46


def test_agx_xavier_jp4_cpu_is_a_core_list_a_rail_and_a_sensor():
    [row] = rows_of(DATA / "agx-xavier-jp4.2.log")
    assert row["cpu_load_pct"] == [0] * 8 and row["cpu_freq_mhz"] == [1190] * 8
    assert (row["power_cpu_mw"], row["power_cpu_avg_mw"]) == (618, 618)
    assert row["temp_cpu_c"] == 31.5
    assert (row["power_gpu_mw"], row["power_soc_mw"], row["power_cv_mw"]) == (463, 2936, 0)
    assert (row["power_vddrq_mw"], row["power_sys5v_mw"]) == (309, 3306)
    assert row["ram_lfb_block_mb"] == 2.0


def test_tx2_l4t28_lowercase_cpu_and_unprivileged_lines():
    rows = rows_of(DATA / "tx2-l4t28.log")
    assert rows[0]["cpu_freq_mhz"] == [1996, 2035, 2035, 1996, 1996, 1996]
    assert rows[1]["cpu_load_pct"] == [3, 10, 1, 1, 1, 1]
    assert rows[0]["swap_used_mb"] is None and rows[0]["gpu_load_pct"] is None
    assert (rows[2]["emc_load_pct"], rows[2]["emc_freq_mhz"]) == (0, 1600)
    assert (rows[2]["gpu_load_pct"], rows[2]["gpu_freq_mhz"]) == (5, 1275)
    assert (rows[2]["gr3d_pci_load_pct"], rows[2]["gr3d_pci_freq_mhz"]) == (0, 2607)


def test_tx1_one_clock_for_all_cores():
    first, second = rows_of(DATA / "tx1-l4t28.1.log")
    assert first["cpu_load_pct"] == [17, 13, 29, 5] and first["cpu_freq_mhz"] == [408] * 4
    assert (first["emc_load_pct"], first["emc_freq_mhz"]) == (1, 408)
    assert (second["gpu_load_pct"], second["gpu_freq_mhz"]) == (39, 76)
    assert second["swap_cached_mb"] == 281 and second["ape_freq_mhz"] == 25


def test_tx1_old_release_avp_vde_edp():
    rows = rows_of(DATA / "tx1-l4t24.log")
    assert rows[0]["cpu_freq_mhz"] == [1912] * 4
    assert (rows[0]["avp_load_pct"], rows[0]["avp_freq_mhz"]) == (82, 13)
    assert rows[0]["vde_freq_mhz"] == 0 and rows[0]["edp_limit_mhz"] == 1912
    assert (rows[2]["gpu_load_pct"], rows[2]["gpu_freq_mhz"]) == (83, 921)


def test_agx_xavier_jp4_6_without_root_offline_cores_and_no_rails():
    first, second = rows_of(DATA / "agx-xavier-jp4.6-no-sudo.log")
    assert (first["ram_used_mb"], first["ram_total_mb"]) == (3149, 31920)
    assert (first["ram_lfb_blocks"], first["ram_lfb_block_mb"]) == (5889, 4.0)
    assert (first["swap_used_mb"], first["swap_total_mb"], first["swap_cached_mb"]) == (0, 15960, 0)
    assert first["cpu_load_pct"] == [57, 56, 57, 63, None, None, None, None]  # "off": offline core
    assert first["cpu_freq_mhz"] == [2188] * 4 + [None] * 4
    assert (first["emc_load_pct"], first["emc_freq_mhz"]) == (0, None)
    assert (first["gpu_load_pct"], first["gpu_freq_mhz"]) == (39, None)
    assert (first["temp_ao_c"], first["temp_gpu_c"], first["temp_tdiode_c"], first["temp_pmic_c"]) == \
        (35.0, 35.0, 37.75, 50.0)
    assert (first["temp_aux_c"], first["temp_cpu_c"], first["temp_thermal_c"], first["temp_tboard_c"]) == \
        (34.5, 37.5, 35.55, 35.0)
    assert not any(key.startswith("power_") for key in first)  # without root: no rails
    assert (second["ram_used_mb"], second["ram_lfb_blocks"], second["gpu_load_pct"]) == (3153, 5888, 42)
    assert second["cpu_load_pct"][:4] == [49, 71, 48, 50] and second["temp_ao_c"] == 34.5


def test_tx2_jp3_rails_cur_avg_mts_and_bcpu_mcpu():
    rows = rows_of(DATA / "tx2-jp3-2018.log")
    assert len(rows) == 3
    first = rows[0]
    assert (first["ram_used_mb"], first["ram_total_mb"], first["ram_lfb_blocks"]) == (1685, 7854, 1044)
    assert (first["swap_used_mb"], first["swap_total_mb"], first["swap_cached_mb"]) == (278, 8192, 23)
    assert first["cpu_load_pct"] == [0] * 6 and first["cpu_freq_mhz"] == [1303, 345, 345, 1419, 1420, 1421]
    assert (first["emc_load_pct"], first["emc_freq_mhz"], first["gpu_load_pct"], first["gpu_freq_mhz"]) == \
        (0, 1866, 0, 140)
    assert (first["ape_freq_mhz"], first["mts_fg_pct"], first["mts_bg_pct"]) == (150, 1, 8)
    assert (first["temp_bcpu_c"], first["temp_mcpu_c"], first["temp_gpu_c"], first["temp_pll_c"]) == \
        (41.0, 41.0, 39.0, 41.0)
    assert (first["temp_tboard_c"], first["temp_tdiode_c"], first["temp_pmic_c"], first["temp_thermal_c"]) == \
        (37.0, 37.25, 100.0, 39.9)
    assert [(first[f"power_vdd_{r}_mw"], first[f"power_vdd_{r}_avg_mw"]) for r in
            ("in", "cpu", "gpu", "soc", "wifi", "ddr")] == [(1931, 1931), (231, 231), (154, 154), (385, 385),
                                                             (38, 38), (326, 326)]
    second, third = rows[1], rows[2]
    assert second["cpu_load_pct"] == [4, 0, 0, 1, 0, 2] and second["cpu_freq_mhz"] == [346, 344, 345, 345, 345, 345]
    assert (second["emc_load_pct"], second["emc_freq_mhz"], second["mts_fg_pct"]) == (16, 102, 0)
    assert (second["power_vdd_in_mw"], second["power_vdd_in_avg_mw"]) == (1776, 1853)
    assert (second["power_vdd_soc_mw"], second["power_vdd_soc_avg_mw"]) == (386, 385)
    assert (second["power_vdd_ddr_mw"], second["power_vdd_ddr_avg_mw"]) == (250, 288)
    assert third["cpu_load_pct"] == [4, 0, 0, 2, 2, 3] and third["cpu_freq_mhz"] == [345, 345, 345, 345, 346, 345]
    assert (third["temp_bcpu_c"], third["temp_thermal_c"]) == (40.5, 40.2)
    assert (third["power_vdd_in_mw"], third["power_vdd_in_avg_mw"], third["power_vdd_ddr_avg_mw"]) == (1738, 1815, 275)


def test_offline_cores_iram_mts_and_engines():
    # Adapted (shortened, values changed) from the sample lines of the tegrastats emulator in
    # rbonghi/jetson_stats tests/tegrastats; two cores switched "off" as low-power modes print them.
    nano = (b"RAM 1180/3965MB (lfb 1x2MB) SWAP 149/1024MB (cached 7MB) IRAM 0/252kB(lfb 252kB) "
            b"CPU [30%@1036,33%@1036,off,off] EMC_FREQ 10%@1600 GR3D_FREQ 0%@76 NVENC 716 NVDEC 716 "
            b"APE 25 PLL@57C CPU@60.5C PMIC@100C GPU@59C AO@65C thermal@59.75C POM_5V_IN 4520/4680")
    tx2 = (b"RAM 4722/7844MB (lfb 1x512kB) CPU [55%@2035,14%@2034] SWAP 149/1024MB (cached 7MB) "
           b"EMC_FREQ 2%@1866 GR3D_FREQ 40%@1300 APE 150 MTS fg 0% bg 3% BCPU@-45C VDD_IN 14025/14416")
    row, row2 = parse_tegrastats(nano + b"\n" + tx2)
    assert row["cpu_load_pct"] == [30, 33, None, None] and row["cpu_freq_mhz"] == [1036, 1036, None, None]
    assert (row["iram_used_kb"], row["iram_total_kb"]) == (0, 252)
    assert row["nvenc_freq_mhz"] == 716 and row["nvdec_freq_mhz"] == 716
    assert (row2["mts_fg_pct"], row2["mts_bg_pct"]) == (0, 3)
    assert row2["ram_lfb_block_mb"] == 0.5
    assert row2["temp_bcpu_c"] == -45.0  # negative but not the -256 "off" marker


def test_orin_nano_super_jp7_cur_avg_max_rails_and_two_value_temperatures():
    # Captured by the platform work (tests/data/jetson/SOURCE.md): L4T R39.2.1, JetPack 7.
    first, second = rows_of(DATA.parent / "jetson" / "tegrastats-orin-nano-super-jp7.log")
    assert first["timestamp"] == "2026-09-19T13:33:02"
    assert (first["emc_load_pct"], first["emc_freq_mhz"]) == (5, 665)
    assert (first["gpu_load_pct"], first["gpu_freq_mhz"], first["gpu_freq_mhz_list"]) == (0, 305, [305])
    assert first["nvdec0_freq_mhz"] is None and first["nvjpg1_freq_mhz"] is None
    assert second["temp_cpu_c"] == 45.375  # "cpu@45.375C/45.812C": the first reading
    assert (second["power_vdd_in_mw"], second["power_vdd_in_avg_mw"], second["power_vdd_in_max_mw"]) == (
        3462, 3522, 3582)
    assert (second["power_vdd_cpu_gpu_cv_mw"], second["power_vdd_soc_max_mw"]) == (442, 1127)


def test_jetpack7_shapes_do_not_break_the_reader():
    # JetPack 7 prints sensor cur/max pairs and rail cur/avg/max triples; Thor prints GR3D_FREQ
    # without a load. Shapes as public parsers document them; the reader takes the first reading.
    line = (b"07-25-2026 09:08:28 RAM 20642/62817MB (lfb 1x2MB) CPU [23%@2201,10%@2201] EMC_FREQ 3%@3199 "
            b"GR3D_FREQ 12%@[1300,1300] NVENC0 off PVA0_FREQ off cpu@52.968C/52.968C "
            b"VDD_GPU_SOC 5139mW/5139mW/5139mW\n"
            b"RAM 4722/7844MB (lfb 1x512kB) EMC_FREQ 2%@1866 GR3D_FREQ @[1000,1000,1000] APE 150\n")
    jp7, thor = parse_tegrastats(line)
    assert (jp7["gpu_load_pct"], jp7["gpu_freq_mhz"], jp7["gpu_freq_mhz_list"]) == (12, 1300, [1300, 1300])
    assert jp7["temp_cpu_c"] == 52.968
    assert (jp7["power_vdd_gpu_soc_mw"], jp7["power_vdd_gpu_soc_max_mw"]) == (5139, 5139)
    assert jp7["nvenc0_freq_mhz"] is None and jp7["pva0_freq_mhz"] is None
    assert (thor["gpu_load_pct"], thor["gpu_freq_mhz"]) == (None, 1000)


def test_unknown_words_are_skipped():
    [row] = parse_tegrastats(b"RAM 100/200MB FOO_BAR ??? baz 12 (weird) GR3D_FREQ 7%@[300,600] X@\n")
    assert row["ram_used_mb"] == 100
    assert (row["gpu_load_pct"], row["gpu_freq_mhz"], row["gpu_freq_mhz_list"]) == (7, 600, [300, 600])


def test_blank_and_comment_lines_are_skipped_but_junk_lines_fail_with_their_number():
    assert len(parse_tegrastats(b"\n#Ctrl-C to stop\nRAM 1/2MB\n\n")) == 1
    with pytest.raises(ParseError, match=r"^line 2: not a tegrastats line"):
        parse_tegrastats(b"RAM 1/2MB\nbash: tegrastats: command not found\n")


def test_every_capture_has_its_test():
    source = Path(__file__).read_text()
    assert [p.name for p in sorted(DATA.glob("*.log")) if f'"{p.name}"' not in source] == []

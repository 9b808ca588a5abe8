"""Energy from real power captures (tests/data/tegrastats, jetson, macos; sources in their SOURCE.md), each number
computed by hand from the raw lines in the comment beside it; RAPL's wraparound; null columns, never 0."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.analysis import energy
from harness.parsers import parse
from tests.helpers import REPO

DATA = REPO / "tests" / "data"
S = 1_000_000_000  # ns


def tegrastats_rows(path: Path, period_s: float = 1.0) -> list[dict]:
    """A log's rows on the run's axis as ingest puts them: lines without a stamp spaced by the period
    (harness/collectors/platform.py, WallClockCollector), the first at 0."""
    rows = parse("tegrastats", path.read_bytes())
    return [{**row, "t_ns": round(i * period_s * S)} for i, row in enumerate(rows)]


def test_xavier_nx_vdd_in_over_one_second() -> None:
    # xavier-nx-jp4-15w-20w.log, lines 1-2: "VDD_IN 12221/13950", "VDD_IN 14664/13950" (mW, 1 s apart):
    # trapezoid (12221 + 14664) / 2 mW x 1 s = 13442.5 mJ = 13.4425 J, mean 13.4425 W
    series = energy.power_series(tegrastats_rows(DATA / "tegrastats" / "xavier-nx-jp4-15w-20w.log"), "tegrastats")
    assert series is not None and series.rail == "VDD_IN" and series.period_ms == 1000
    row = energy.energy_row(series, 0, S, tokens=10, idle_w=None)
    assert row["energy_j"] == pytest.approx(13.4425)
    assert row["power_w"] == pytest.approx(13.4425)
    assert row["j_per_token"] == pytest.approx(1.34425)
    # the lines 4-6 (20 W mode) print no rails: only the three 15 W lines are power samples;
    # lines 1-3: 13.4425 J + (14664 + 14664) / 2 mW x 1 s = 13.4425 + 14.664 = 28.1065 J
    assert len(series.t_ns) == 3
    assert energy.window_energy(series, 0, 2 * S) == pytest.approx(28.1065)


def test_nano_pom_5v_in_is_the_total_rail() -> None:
    # nano-jp4-10w.log: "POM_5V_GPU 8949/8742 POM_5V_IN 3227/3086": the input rail is POM_5V_IN (not the larger
    # POM_5V_GPU); lines 1-2: (3227 + 3075) / 2 mW x 1 s = 3.151 J
    series = energy.power_series(tegrastats_rows(DATA / "tegrastats" / "nano-jp4-10w.log"), "tegrastats")
    assert series is not None and series.rail == "POM_5V_IN"
    assert energy.window_energy(series, 0, S) == pytest.approx(3.151)
    # half a window: [0.5 s, 1.5 s] interpolates both ends: 3227 -> 3151 at 0.5 s, 3075 at 1 s, 3015.5 at 1.5 s:
    # (3151 + 3075) / 2 x 0.5 + (3075 + 3015.5) / 2 x 0.5 = 1556.5 + 1522.625 = 3079.125 mJ
    assert energy.window_energy(series, S // 2, 3 * S // 2) == pytest.approx(3.079125)


def test_orin_nano_super_stamped_lines() -> None:
    # jetson/tegrastats-orin-nano-super-jp7.log: "09-19-2026 13:33:02 ... VDD_IN 3582mW/3582mW/3582mW" and
    # "13:33:03 ... VDD_IN 3462mW/3522mW/3582mW": (3582 + 3462) / 2 = 3522 mW over 1 s = 3.522 J, which is the
    # running average tegrastats itself prints on the second line (3522mW)
    rows = parse("tegrastats", (DATA / "jetson" / "tegrastats-orin-nano-super-jp7.log").read_bytes())
    assert [r["timestamp"] for r in rows] == ["2026-09-19T13:33:02", "2026-09-19T13:33:03"]
    timed = [{**row, "t_ns": i * S} for i, row in enumerate(rows)]
    series = energy.power_series(timed, "tegrastats")
    assert series is not None and series.rail == "VDD_IN"
    row = energy.energy_row(series, 0, S, tokens=None, idle_w=None)
    assert row["energy_j"] == pytest.approx(3.522) and row["power_w"] == pytest.approx(rows[1]["power_vdd_in_avg_mw"]
                                                                                       / 1000)
    assert row["j_per_token"] is None  # no tokens: no J/token, not 0


def test_agx_orin_without_an_input_rail_sums_its_rails_and_says_so() -> None:
    # agx-orin-jp5.1.log: "VDD_GPU_SOC 2399mW VDD_CPU_CV 400mW VIN_SYS_5V0 4032mW NC 0mW VDDQ_VDD2_1V8AO 301mW NC 0mW":
    # no VDD_IN; the sum 2399 + 400 + 4032 + 0 + 301 + 0 = 7132 mW. The capture has one line: the same line twice,
    # 1 s apart, is a constant 7.132 W
    (row,) = parse("tegrastats", (DATA / "tegrastats" / "agx-orin-jp5.1.log").read_bytes())
    series = energy.power_series([{**row, "t_ns": 0}, {**row, "t_ns": S}], "tegrastats")
    assert series is not None
    assert series.rail == "sum(VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0+NC+VDDQ_VDD2_1V8AO+NC_2)"
    assert energy.window_energy(series, 0, S) == pytest.approx(7.132)


def test_powermetrics_combined_rail_on_its_own_stamps() -> None:
    # macos/powermetrics-mac14-2-two-samples.txt: "(Fri Sep 11 13:41:46 2026 -0700)" "Combined Power (CPU + GPU +
    # ANE): 1172 mW", then "(Fri Sep 11 13:41:47 2026 -0700)" "... 445 mW": stamps 1 s apart (20:41:46 UTC);
    # (1172 + 445) / 2 mW x 1 s = 808.5 mJ = 0.8085 J
    rows = parse("powermetrics", (DATA / "macos" / "powermetrics-mac14-2-two-samples.txt").read_bytes())
    assert rows[0]["wall_s"] == 1789159306.0 and rows[1]["wall_s"] - rows[0]["wall_s"] == 1.0
    timed = [{**row, "t_ns": round((row["wall_s"] - rows[0]["wall_s"]) * S)} for row in rows]
    series = energy.power_series(timed, "powermetrics")
    assert series is not None and series.rail == "COMBINED"
    assert energy.window_energy(series, 0, S) == pytest.approx(0.8085)


def test_idle_baseline_is_subtracted_per_second_and_per_token() -> None:
    # idle: nano lines 2-3, 3075 -> 2956 mW over 1 s: (3075 + 2956) / 2 = 3015.5 mW mean = 3.0155 W.
    # measured: xavier nx lines 1-2, 13.4425 J over 1 s, 5 tokens: above idle 13.4425 - 3.0155 = 10.427 J,
    # 2.0854 J/token
    nano = tegrastats_rows(DATA / "tegrastats" / "nano-jp4-10w.log")[1:]
    idle = energy.idle_power(energy.power_series(nano, "tegrastats"))
    assert idle == pytest.approx(3.0155)
    series = energy.power_series(tegrastats_rows(DATA / "tegrastats" / "xavier-nx-jp4-15w-20w.log"), "tegrastats")
    row = energy.energy_row(series, 0, S, tokens=5, idle_w=idle)
    assert row["idle_w"] == pytest.approx(3.0155)
    assert row["energy_above_idle_j"] == pytest.approx(10.427)
    assert row["j_per_token_above_idle"] == pytest.approx(2.0854)


def test_rapl_counter_wraps_at_its_max_energy_range() -> None:
    # max_energy_range_uj 999: readings 900, 100, 400 at 0, 1, 2 s: 900 -> 100 wrapped: 999 - 900 + 1 + 100 = 200 uJ,
    # then 300 uJ: 500 uJ over 2 s; without the wrap it would read -500 uJ
    series = energy.counter_series([0, S, 2 * S], [900, 100, 400], 999, "rapl", "package-0")
    assert series is not None
    assert energy.window_energy(series, 0, 2 * S) == pytest.approx(500e-6)
    assert energy.window_energy(series, 0, S) == pytest.approx(200e-6)
    row = energy.energy_row(series, 0, 2 * S, tokens=None, idle_w=None)
    assert row["power_w"] == pytest.approx(250e-6) and row["rail"] == "package-0"


def test_no_sensor_and_uncovered_windows_are_null_never_zero() -> None:
    # thermal rows (this machine's telemetry) carry no power column: no series, every energy column null
    thermal = parse("thermal", b"@ 0 0.0\nx86_pkg_temp 45000\n@ 1000000000 1.0\nx86_pkg_temp 46000\n")
    assert energy.power_series([{**r, "source": "thermal"} for r in thermal], "thermal") is None
    row = energy.energy_row(None, 0, S, tokens=32, idle_w=None)
    assert row["tokens"] == 32 and all(row[k] is None for k in row if k != "tokens")
    # a window past the last sample is not covered: null, not the part that is
    series = energy.power_series(tegrastats_rows(DATA / "tegrastats" / "nano-jp4-10w.log"), "tegrastats")
    late = energy.energy_row(series, S, 5 * S, tokens=32, idle_w=3.0)
    assert late["energy_j"] is None and late["j_per_token"] is None and late["energy_above_idle_j"] is None
    assert late["rail"] == "POM_5V_IN"  # the method is still said


def test_missing_cells_read_back_from_a_table_are_skipped() -> None:
    # a table row of another source has NaN in the power column: it is no reading (not 0 W, not a crash)
    rows = tegrastats_rows(DATA / "tegrastats" / "nano-jp4-10w.log")
    rows[1]["power_pom_5v_in_mw"] = math.nan
    series = energy.power_series(rows, "tegrastats")
    assert series is not None and list(series.t_ns) == [0, 2 * S]
    # lines 1 and 3 only: (3227 + 2956) / 2 mW x 2 s = 6.183 J
    assert energy.window_energy(series, 0, 2 * S) == pytest.approx(6.183)


def test_request_windows_give_prefill_and_decode_rows() -> None:
    # xavier nx: 12221, 14664, 14664 mW at 0, 1, 2 s. Prefill [0, 1 s], 8 prompt tokens: 13.4425 J, 1.6803 J/token;
    # decode [1 s, 2 s], 4 tokens: 14.664 J, 3.666 J/token
    series = energy.power_series(tegrastats_rows(DATA / "tegrastats" / "xavier-nx-jp4-15w-20w.log"), "tegrastats")
    request = {"request": 0, "t_ns": 0, "t_first_token_ns": S, "t_end_ns": 2 * S, "prompt_n": 8, "decode_tokens": 4}
    prefill, decode = energy.request_energy(series, [request], idle_w=None)
    assert (prefill["phase"], decode["phase"]) == ("prefill", "decode")
    assert prefill["j_per_token"] == pytest.approx(13.4425 / 8)
    assert decode["energy_j"] == pytest.approx(14.664) and decode["j_per_token"] == pytest.approx(3.666)


def test_a_gap_in_the_readings_leaves_the_window_uncovered() -> None:
    # xavier nx lines 4-6 (20 W) print no rails: spaced 1 s apart with a 15 W line after them, the window across
    # them has a 4 s gap (> 3 periods) between readings: null, not an interpolation over seconds nobody measured
    rows = tegrastats_rows(DATA / "tegrastats" / "xavier-nx-jp4-15w-20w.log")
    rows.append({**rows[0], "t_ns": 6 * S})
    series = energy.power_series(rows, "tegrastats")
    assert series is not None and series.period_ms == 1000
    assert energy.window_energy(series, 0, 2 * S) == pytest.approx(28.1065)  # lines 1-3, as before
    assert energy.window_energy(series, S, 6 * S) is None


def test_a_window_end_within_one_period_of_the_last_reading_holds_it() -> None:
    # nano lines 1-3 at 0, 1, 2 s (POM_5V_IN 3227, 3075, 2956 mW). The step ends at 2.5 s, half a period after the
    # last line: 6.1665 J (0-2 s, as above: 3.151 + 3.0155) + 2956 mW held x 0.5 s = 6.1665 + 1.478 = 7.6445 J.
    # tegrastats' stamps are whole seconds (+-0.5 s): a reading holds one period + 0.5 s, so 3.5 s is still covered
    # (7.6445 + 2.956 = 10.6005 J) and 3.6 s is not
    series = energy.power_series(tegrastats_rows(DATA / "tegrastats" / "nano-jp4-10w.log"), "tegrastats")
    assert energy.window_energy(series, 0, 5 * S // 2) == pytest.approx(7.6445)
    assert energy.window_energy(series, 0, 7 * S // 2) == pytest.approx(10.6005)
    assert energy.window_energy(series, 0, 36 * S // 10) is None
    # a counter is never extrapolated: its snapshots are read at the start and at the stop
    rapl = energy.counter_series([0, S], [0, 1000], 10**9, "rapl", "package-0")
    assert energy.window_energy(rapl, 0, S + 1) is None


def test_lines_stamped_to_the_same_second_are_one_reading_their_mean() -> None:
    # tegrastats at --interval 500 on a JetPack that stamps to the second: lines 1 and 2 of the nano capture at the
    # same second 0, line 3 at 1 s: (3227 + 3075) / 2 = 3151 mW at 0 s, 2956 mW at 1 s: (3151 + 2956) / 2 mW x 1 s
    # = 3.0535 J
    rows = tegrastats_rows(DATA / "tegrastats" / "nano-jp4-10w.log")
    rows[1]["t_ns"], rows[2]["t_ns"] = 0, S
    series = energy.power_series(rows, "tegrastats")
    assert series is not None and list(series.t_ns) == [0, S] and list(series.watts) == pytest.approx([3.151, 2.956])
    assert energy.window_energy(series, 0, S) == pytest.approx(3.0535)


def test_jtop_stats_alone_give_its_tot_rail() -> None:
    # jetson/jtop-stats-orin-nano-25w.txt (jetson.stats of an Orin Nano at 25 W): 'Power TOT': 5133 beside
    # 'Power VDD_CPU_GPU_CV': 1064 and 'Power VDD_SOC': 1540; jtop's total is TOT, not the sum (2604) of the two
    # it lists. One capture, the same sample twice 1 s apart: 5.133 J
    import datetime
    import json

    text = (DATA / "jetson" / "jtop-stats-orin-nano-25w.txt").read_text()
    stats = eval(text, {"__builtins__": {}, "datetime": datetime})  # noqa: S307 - our own test data
    (row,) = parse("jtop", json.dumps({"t_ns": 0, "stats": stats}, default=str).encode())
    series = energy.power_series([row, {**row, "t_ns": S}], "jtop")
    assert series is not None and series.rail == "TOT"
    assert energy.window_energy(series, 0, S) == pytest.approx(5.133)

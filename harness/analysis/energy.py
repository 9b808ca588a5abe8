"""Energy from power telemetry: joules, average watts and J/token over a window, with an idle baseline subtracted.

Pure: telemetry rows (the ``telemetry`` table's, one source's) and windows (monotonic ns) in, energy rows out.

- A power source gives samples ``(t_ns, W)`` of one rail, the board's total where it has one (``TOTAL_RAILS``):
  tegrastats/jtop ``VDD_IN`` (Orin Nano, Xavier NX, TX2), ``POM_5V_IN`` (Nano), jtop's ``TOT`` (its ``stats``
  alone); boards without an input rail (AGX Orin, AGX Xavier) get the sum of their rails, named as such.
  powermetrics gives ``Combined`` (CPU + GPU + ANE, not the whole machine: the rail name says so); ``power_supply``
  the batteries' discharge (``power_battery_discharge_mw``, see harness/parsers/snapshots.py). Energy over a window
  is the trapezoid rule over the samples inside it, with the power at the window's ends linearly interpolated
  between the samples around them.
- A counter source (Intel RAPL ``energy_uj``) gives cumulative microjoules that wrap at ``max_energy_range_uj``:
  the energy of a window is the unwrapped counter's difference, interpolated at the window's ends.
- A window the samples do not cover from end to end gets null columns, never 0; so does a board with no sensor.
- The total is the number, as MLPerf Power measures it (the whole system, over the measured window's own start and
  end stamps, nothing subtracted; mlcommons/inference_policies, power_measurement.adoc, rules 5.1, 5.7, 5.8). The
  energy above idle is given beside it, never instead: ``E - P_idle * t``, with ``P_idle`` the mean power of an
  idle window on the same board.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# the board's total rail per source, best first (column stems of the telemetry table, as the parsers write them)
TOTAL_RAILS: dict[str, tuple[str, ...]] = {
    "tegrastats": ("power_vdd_in_mw", "power_pom_5v_in_mw"),
    "jtop": ("power_vdd_in_mw", "power_pom_5v_in_mw", "power_tot_mw"),
    "powermetrics": ("power_combined_mw",),
    "power": ("power_battery_discharge_mw",),
}
GAP_PERIODS = 3  # a window with a gap of more than this many sampling periods between readings is not covered
# no total rail: the rails summed (AGX Orin, AGX Xavier; hwmon's channels, each named in the rail)
# sources whose readings are placed by a wall-clock stamp of whole seconds (harness/collectors/platform.py puts them
# at the middle of their second): their times are known to +-0.5 s, so a window's ends may lie that much further
# from the first and last reading
WALL_STAMPED = {"tegrastats": 500_000_000, "powermetrics": 500_000_000}
SUMMED_SOURCES = ("tegrastats", "jtop", "hwmon")
# where a board has several, the one nearest its whole input: the module's input rail, then the SoC's, the
# battery's, the CPU package's
SOURCE_ORDER = ("tegrastats", "jtop", "powermetrics", "power", "rapl", "hwmon")
NO_SENSOR = ("no power sensor on this board (no tegrastats/jtop rail, powermetrics, discharging power_supply, "
             "RAPL or hwmon power): energy columns are null")
POWER_COLLECTORS = ("tegrastats", "jtop", "powermetrics", "power", "rapl", "hwmon")
NOT_COLLECTED = ("no power collector in the experiment (collect: one of " + ", ".join(POWER_COLLECTORS) +
                 ", optional: true where a board may lack it): energy columns are null")
ENERGY_COLUMNS = ("source", "rail", "period_ms", "window_s", "energy_j", "power_w", "tokens", "j_per_token",
                  "idle_w", "energy_above_idle_j", "j_per_token_above_idle")


@dataclass(frozen=True)
class PowerSeries:
    """One rail's readings: power samples (``watts``) or a cumulative counter (``joules``), never both."""

    source: str
    rail: str
    t_ns: np.ndarray
    watts: np.ndarray | None = None
    joules: np.ndarray | None = None
    stamp_ns: int = 0  # how finely the readings' times are known: whole-second stamps (tegrastats, powermetrics)

    @property
    def period_ms(self) -> float | None:
        return float(np.median(np.diff(self.t_ns)) / 1e6) if len(self.t_ns) > 1 else None


def _number(value: Any) -> float | None:
    """A finite reading, else None (a table's missing cell reads back as NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    return float(value) if math.isfinite(value) else None


def _rail_name(column: str) -> str:
    return column.removeprefix("power_").removesuffix("_mw").upper()


def _rails(rows: Sequence[Mapping[str, Any]], source: str) -> tuple[list[str], str] | None:
    """The columns that make the total and the rail's name: the board's total rail, or the sum of its rails."""
    # in the order the tool printed them (dicts keep it)
    present = list(dict.fromkeys(k for r in rows for k, v in r.items() if k.startswith("power_") and k.endswith("_mw")
                                 and _number(v) is not None))
    chosen = next((c for c in TOTAL_RAILS.get(source, ()) if c in present), None)
    if chosen:
        return [chosen], _rail_name(chosen)
    if source not in SUMMED_SOURCES:
        return None
    picked = [c for c in present if not c.endswith(("_avg_mw", "_max_mw"))]
    if not picked:
        return None
    if len(picked) == 1:
        return picked, _rail_name(picked[0])
    return picked, "sum(" + "+".join(_rail_name(c) for c in picked) + ")"


def power_series(rows: Sequence[Mapping[str, Any]], source: str) -> PowerSeries | None:
    """The total rail of one source's telemetry rows, or None when they carry no power reading."""
    timed = [r for r in rows if _number(r.get("t_ns")) is not None]
    rails = _rails(timed, source)
    if rails is None:
        return None
    columns, rail = rails
    t, watts = [], []
    for row in sorted(timed, key=lambda r: r["t_ns"]):
        values = [_number(row.get(c)) for c in columns]
        if all(v is not None for v in values):
            t.append(int(row["t_ns"]))
            watts.append(sum(v for v in values if v is not None) / 1000.0)
    # lines stamped to the second (tegrastats of JetPack 5+ at an interval under 1 s) share a time: their mean
    times, index = np.unique(np.array(t, dtype=np.int64), return_inverse=True)
    if len(times) < 2:
        return None
    mean = np.bincount(index, weights=watts) / np.bincount(index)
    return PowerSeries(source, rail, times, watts=mean, stamp_ns=WALL_STAMPED.get(source, 0))


def unwrap_counter(raw: Sequence[int], max_range: int) -> np.ndarray:
    """A wrapping counter's readings as a cumulative sum from the first: a reading below the one before wrapped
    once (the counter runs 0..``max_range``; sampled at least once per wrap period, minutes at 100 W)."""
    values = np.array(raw, dtype=np.int64)
    steps = np.diff(values)
    steps = np.where(steps < 0, steps + max_range + 1, steps)
    return np.concatenate([[0], np.cumsum(steps)])


def counter_series(t_ns: Sequence[int], energy_uj: Sequence[int], max_uj: int, source: str,
                   rail: str) -> PowerSeries | None:
    """A cumulative energy counter (RAPL ``energy_uj``, wrapping at ``max_energy_range_uj``) as joules."""
    if len(t_ns) < 2:
        return None
    order = np.argsort(np.array(t_ns, dtype=np.int64), kind="stable")
    t = np.array(t_ns, dtype=np.int64)[order]
    joules = unwrap_counter([energy_uj[i] for i in order], max_uj) / 1e6
    return PowerSeries(source, rail, t, joules=joules)


def rapl_series(rows: Sequence[Mapping[str, Any]]) -> PowerSeries | None:
    """The rapl collector's rows as one counter: the ``psys`` zone (the whole platform, where the firmware has it),
    else the sum of the top-level (package) zones; subzones (core, uncore, dram) are parts of those, never added."""
    timed = sorted((r for r in rows if _number(r.get("t_ns")) is not None), key=lambda r: r["t_ns"])
    names = {key[len("rapl_"):-len("_name")]: value for r in timed for key, value in r.items()
             if key.startswith("rapl_") and key.endswith("_name") and isinstance(value, str)}
    top = sorted(zone for zone in names if zone.isdigit())
    chosen = [z for z in top if names[z] == "psys"] or top
    if not chosen:
        return None
    keys = [f"rapl_{zone}_energy_uj" for zone in chosen]
    usable = [r for r in timed if all(_number(r.get(k)) is not None for k in keys)]
    if len(usable) < 2:
        return None
    joules = np.zeros(len(usable))
    for zone, key in zip(chosen, keys, strict=True):
        wrap = next((int(v) for r in usable if (v := _number(r.get(f"rapl_{zone}_max_uj"))) is not None), None)
        raw = [int(r[key]) for r in usable]
        joules += unwrap_counter(raw, wrap if wrap else 2**63 - 1) / 1e6
    rail = names[chosen[0]] if len(chosen) == 1 else "sum(" + "+".join(names[z] for z in chosen) + ")"
    return PowerSeries("rapl", rail, np.array([int(r["t_ns"]) for r in usable], dtype=np.int64), joules=joules)


def board_series(rows_by_source: Mapping[str, Sequence[Mapping[str, Any]]]) -> PowerSeries | None:
    """The board's power: the first source, in ``SOURCE_ORDER``, whose rows give a series; None: no sensor."""
    for source in SOURCE_ORDER:
        rows = rows_by_source.get(source)
        if rows:
            series = rapl_series(rows) if source == "rapl" else power_series(rows, source)
            if series is not None:
                return series
    return None


def window_energy(series: PowerSeries, start_ns: int, end_ns: int) -> float | None:
    """Joules over [start_ns, end_ns]; None unless the readings cover the whole window. A power reading holds up to
    one sampling period (plus the resolution of its stamps) beyond the first and last (a tool sampling every second
    rarely has a line at the step's very end); a counter must be read on both sides (the snapshots read it at the
    start and the stop)."""
    t = series.t_ns
    slack = 0.0 if series.joules is not None else (series.period_ms or 0.0) * 1e6 + series.stamp_ns
    if end_ns <= start_ns or start_ns < t[0] - slack or end_ns > t[-1] + slack:
        return None
    first, last = max(int(np.searchsorted(t, start_ns, side="right")) - 1, 0), int(np.searchsorted(t, end_ns))
    period = series.period_ms
    if period and np.diff(t[first:last + 1]).max(initial=0) > GAP_PERIODS * period * 1e6:
        return None  # readings missing inside the window (a battery on its charger, rail-less lines): not covered
    if series.joules is not None:
        ends = np.interp([start_ns, end_ns], t, series.joules)
        return float(ends[1] - ends[0])
    assert series.watts is not None
    inside = (t > start_ns) & (t < end_ns)
    grid = np.concatenate([[start_ns], t[inside], [end_ns]]).astype(float)
    power = np.interp(grid, t.astype(float), series.watts)
    return float(np.trapezoid(power, grid / 1e9))


def idle_power(series: PowerSeries | None) -> float | None:
    """Mean power (W) of an idle window: its energy over its length."""
    if series is None or len(series.t_ns) < 2:
        return None
    joules = window_energy(series, int(series.t_ns[0]), int(series.t_ns[-1]))
    seconds = (series.t_ns[-1] - series.t_ns[0]) / 1e9
    return joules / seconds if joules is not None and seconds > 0 else None


def energy_row(series: PowerSeries | None, start_ns: int | None, end_ns: int | None, tokens: int | None,
               idle_w: float | None) -> dict[str, Any]:
    """One window's energy columns; every one null where there is no sensor or the window is not covered."""
    tokens = int(tokens) if _number(tokens) is not None and tokens else None
    row: dict[str, Any] = dict.fromkeys(ENERGY_COLUMNS)
    row.update(tokens=tokens, idle_w=idle_w)
    start, end = _number(start_ns), _number(end_ns)
    if series is None or start is None or end is None:
        return row
    row.update(source=series.source, rail=series.rail, period_ms=series.period_ms)
    seconds = (end - start) / 1e9
    joules = window_energy(series, int(start), int(end))
    row["window_s"] = seconds
    if joules is None:
        return row
    row.update(energy_j=joules, power_w=joules / seconds)
    if tokens:
        row["j_per_token"] = joules / tokens
    if idle_w is not None:
        above = joules - idle_w * seconds
        row["energy_above_idle_j"] = above
        row["j_per_token_above_idle"] = above / tokens if tokens else None
    return row


def request_energy(series: PowerSeries | None, requests: Sequence[Mapping[str, Any]],
                   idle_w: float | None) -> list[dict[str, Any]]:
    """Per request: a ``prefill`` row (prompt tokens) and a ``decode`` row (the tokens its window holds)."""
    rows = []
    for request in requests:
        for phase, start, end, tokens in (
                ("prefill", request.get("t_ns"), request.get("t_first_token_ns"), request.get("prompt_n")),
                ("decode", request.get("t_first_token_ns"), request.get("t_end_ns"), request.get("decode_tokens"))):
            rows.append({"request": request.get("request"), "phase": phase,
                         **energy_row(series, start, end, tokens, idle_w)})
    return rows

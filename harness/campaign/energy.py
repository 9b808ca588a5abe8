"""The ``energy`` table of a result set, written after the other tables and before the set is finished (so its
SHA256SUMS cover it): per run its step's window, per llama-server request its prefill and decode windows.

Results and analysis are independent layers; this is where they meet: the tables written by ingest in, the pure
computation of harness/analysis/energy.py over them, the table and the method (per target: source, rail, period,
idle baseline) in the manifest out. A target with no power sensor gets its rows with null energy columns and one
line saying so, in the manifest and the run log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import energy
from harness.results.manifest import EnergyMethod
from harness.results.store import ResultSetWriter
from harness.results.tables import ENERGY, REQUESTS, RUNS, TABLES_DIR, TELEMETRY, table_file

INTEGRATION = {"counter": "difference of the unwrapped cumulative counter, interpolated at the window's ends",
               "samples": "trapezoid rule over the samples in the window, its ends linearly interpolated (held up to "
                           "one period, +0.5 s for whole-second stamps, past the first and last reading)"}
_WINDOW_COLUMNS = ("t_ns", "t_first_token_ns", "t_end_ns", "prompt_n", "decode_tokens", "request")


def _table(set_path: Path, name: str) -> pd.DataFrame:
    path = set_path / TABLES_DIR / table_file(name)
    return pd.read_parquet(path) if path.is_file() else pd.DataFrame()


def _power_rows(telemetry: pd.DataFrame) -> dict[tuple[str, str], dict[str, list[dict[str, Any]]]]:
    """Telemetry rows with a power or energy reading, by (target, run) and source (only the columns energy reads)."""
    if telemetry.empty or "source" not in telemetry:
        return {}
    columns = [c for c in telemetry.columns if c in ("t_ns", "source", "run_id", "target")
               or c.startswith(("power_", "rapl_"))]
    out: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for (target, run_id, source), group in telemetry[columns].groupby(["target", "run_id", "source"]):
        out.setdefault((str(target), str(run_id)), {})[str(source)] = group.to_dict("records")
    return out


def _method(series: energy.PowerSeries | None, idle_w: float | None, note: str = energy.NO_SENSOR) -> EnergyMethod:
    if series is None:
        return {"source": None, "rail": None, "period_ms": None, "integration": "", "idle_w": None, "note": note}
    kind = "counter" if series.joules is not None else "samples"
    return {"source": series.source, "rail": series.rail, "period_ms": series.period_ms,
            "integration": INTEGRATION[kind], "idle_w": idle_w, "note": None}


def idle_baselines(runs: pd.DataFrame, power: dict[tuple[str, str], dict[str, list[dict[str, Any]]]]
                   ) -> dict[str, tuple[float | None, float]]:
    """Per target, the mean power (W) of its first ok ``idle`` run (the window ``energy: {idle_s}`` plans first)
    and that window's length (s); None W where the board has no sensor."""
    out: dict[str, tuple[float | None, float]] = {}
    if "step" not in runs:
        return out
    for run in runs[(runs["step"] == "idle") & (runs["status"] == "ok")].to_dict("records"):
        target = str(run["target"])
        if target in out:
            continue
        series = energy.board_series(power.get((target, str(run["run_id"])), {}))
        row = energy.energy_row(series, run.get("step_start_mono_ns"), run.get("step_end_mono_ns"), None, None)
        out[target] = (row["power_w"], (run["step_end_mono_ns"] - run["step_start_mono_ns"]) / 1e9)
    return out


def energy_rows(set_path: Path, collected: bool = True) -> tuple[list[dict[str, Any]], dict[str, EnergyMethod]]:
    """The energy table's rows and each target's method, from a set's written tables (``collected``: the experiment
    asked for a power collector, so a target without readings has no sensor)."""
    runs = _table(set_path, RUNS.name)
    if runs.empty or "step_start_mono_ns" not in runs:
        return [], {}
    power = _power_rows(_table(set_path, TELEMETRY.name))
    requests = _table(set_path, REQUESTS.name)
    idle = idle_baselines(runs, power)
    rows: list[dict[str, Any]] = []
    methods: dict[str, EnergyMethod] = {}
    for run in runs.to_dict("records"):
        target, run_id = str(run["target"]), str(run["run_id"])
        series = energy.board_series(power.get((target, run_id), {}))
        idle_w, idle_s = idle.get(target, (None, None))
        if target not in methods or (methods[target].get("source") is None and series is not None):
            note = energy.NO_SENSOR if collected else energy.NOT_COLLECTED
            methods[target] = {**_method(series, idle_w, note), "idle_s": idle_s}
        where = {"run_id": run_id, "target": target}
        rows.append({**where, "request": None, "phase": "run",
                     **energy.energy_row(series, run.get("step_start_mono_ns"), run.get("step_end_mono_ns"),
                                         None, idle_w)})
        if requests.empty:
            continue
        mine = requests[(requests["run_id"] == run_id) & (requests["target"] == target)]
        windows = mine[[c for c in _WINDOW_COLUMNS if c in mine.columns]].to_dict("records")
        rows += [{**where, **row} for row in energy.request_energy(series, windows, idle_w)]
    return rows, methods


def write_energy(writer: ResultSetWriter, message: Callable[[str], None], collectors: Iterable[str] = ()) -> int:
    """Write ``tables/energy.parquet`` and the method into the manifest; one line per target without a sensor
    (``collectors``: the experiment's; without a power collector among them, the line says that instead)."""
    rows, methods = energy_rows(writer.path, collected=bool(set(collectors) & set(energy.POWER_COLLECTORS)))
    if not rows:
        return 0
    frame = pd.DataFrame(rows)
    for column in energy.ENERGY_COLUMNS:
        if column not in ("source", "rail"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")  # null, never 0
    out = writer.path / TABLES_DIR / table_file(ENERGY.name)
    tmp = out.with_name(f".{out.name}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(out)
    writer.record_energy(methods)
    for target, method in methods.items():
        if method.get("note"):
            message(f"{target}: {method['note']}")
    return len(rows)

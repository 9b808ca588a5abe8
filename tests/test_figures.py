"""Figures from small synthetic tables shaped like a real set's: each registered figure draws PNG + SVG with its
key numbers in the PNG, is skipped with one line naming the table it lacks, and has no overlapping text; F2's
fractions, F4's ratios and F5's efficiency are checked against numbers worked out by hand (or by the gate's
estimate, for F4)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from itertools import combinations
from pathlib import Path
from typing import Any
from unittest.mock import patch

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure as MplFigure
from matplotlib.text import Text
from PIL import Image

from harness.analysis import energy
from harness.analysis.ratios import ratio_of_medians
from harness.figures import FIGURES, FigureContext
from harness.figures import base as figures_base
from harness.figures.bandwidth import FROM_DECODE, FROM_FIO, bound_table, cell_efficiency
from harness.figures.base import NUMBERS_KEY
from harness.figures.change import observations, ratio_table
from harness.figures.report import draw_figures
from harness.figures.threads import CLASSES, thread_range, thread_state_table
from harness.results import SCHEMA_VERSION
from harness.results.tables import TABLES_DIR, table_file
from tests.helpers import cli_in_process

T0 = 1_000_000_000_000  # the runs' monotonic clock, ns
RUN_NS = 10_000_000_000
PARAMS = ["read_ahead_kb"]
BASELINE = {"read_ahead_kb": 8192}
# decode tok/s of each request of a llama-server run, by (read_ahead_kb, cache); rounds scale them a little
DECODE_TPS = {(8192, "cold"): [1.0, 1.2, 0.9], (128, "cold"): [50.0, 55.0, 44.0],
              (8192, "warm"): [100.0, 104.0, 97.0], (128, "warm"): [98.0, 108.0, 95.0]}
FIO_JOBS = [("randread-64k-qd1", "randread", 65536, 1, 200e6), ("randread-64k-qd4", "randread", 65536, 4, 400e6),
            ("read-1m-seq", "read", 1 << 20, 4, 500e6)]


def _runs() -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for rnd in (1, 2):
        for step in ("llama-bench", "llama-server"):
            for ra in (8192, 128):
                for cache in ("cold", "warm"):
                    rows.append({"step": step, "read_ahead_kb": ra, "cache": cache, "round": rnd})
        rows.append({"step": "fio", "read_ahead_kb": 8192, "cache": "cold", "round": rnd})
    rows += [{"step": "read", "read_ahead_kb": 8192, "cache": c, "round": 1} for c in ("cold", "warm")]
    runs = pd.DataFrame(rows)
    runs["index"] = np.arange(1, len(runs) + 1)
    runs["run_id"] = [f"{i:04d}-{r.step}-{r.read_ahead_kb}-{r.cache}-r{r['round']}" for i, (_, r) in
                      zip(runs["index"], runs.iterrows(), strict=True)]
    runs["step_label"] = runs["step"]
    runs["target"], runs["status"], runs["repeat"] = "board", "ok", 1
    runs["step_start_mono_ns"] = T0 + (runs["index"] - 1) * (RUN_NS + 2_000_000_000)
    runs["step_end_mono_ns"] = runs["step_start_mono_ns"] + RUN_NS
    runs["step_duration_s"] = RUN_NS / 1e9
    runs["residency_before_pct"] = np.where(runs["cache"] == "cold", 0.0, 100.0)
    runs["cache_files_bytes"] = 1 << 30
    runs["dev_read_bytes"] = np.where(runs["cache"] == "cold", 1 << 30, 0)
    return runs


def _requests(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, run in runs[runs["step"] == "llama-server"].iterrows():
        cold = run["cache"] == "cold"
        for k, tps in enumerate(DECODE_TPS[(run["read_ahead_kb"], run["cache"])]):
            tps *= 1.0 if run["round"] == 1 else 1.05
            start = run["step_start_mono_ns"] + k * 3_000_000_000 + 100_000_000
            bps = (400e6 if run["read_ahead_kb"] == 8192 else 300e6) if cold else 1e3
            rows.append({"run_id": run["run_id"], "target": run["target"], "request": k, "cache": run["cache"],
                         "t_ns": start, "t_first_token_ns": start + 500_000_000, "t_end_ns": start + 2_500_000_000,
                         "decode_tps": tps, "prefill_tps": tps * 3, "decode_dev_read_bytes_per_s": bps,
                         "decode_dev_read_bytes_per_token": bps / tps,
                         "decode_dev_avg_inflight": (10.0 if run["read_ahead_kb"] == 8192 else 0.6) if cold else 0.01,
                         "decode_dev_avg_read_io_bytes": (600 if run["read_ahead_kb"] == 8192 else 150) * 1024.0})
    return pd.DataFrame(rows)


def _tokens(requests: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, req in requests.iterrows():
        gap_ms = 1000 / req["decode_tps"]
        for token in range(1, 9):
            rows.append({"run_id": req["run_id"], "target": req["target"], "request": req["request"],
                         "token": token, "t_ns": int(req["t_first_token_ns"] + (token - 1) * gap_ms * 1e6 / 20),
                         "gap_ms": np.nan if token == 1 else gap_ms})
    return pd.DataFrame(rows)


Columns = Callable[[pd.Series, np.ndarray], dict[str, Any]]  # a run and its sample times -> the sample columns


def _sampled(runs: pd.DataFrame, period_ns: int, make: Columns) -> pd.DataFrame:
    frames = []
    for _, run in runs.iterrows():
        t = np.arange(run["step_start_mono_ns"], run["step_end_mono_ns"], period_ns)
        frames.append(pd.DataFrame({"run_id": run["run_id"], "target": run["target"], "t_ns": t, **make(run, t)}))
    return pd.concat(frames, ignore_index=True)


def _threads(runs: pd.DataFrame) -> pd.DataFrame:
    def states(run: pd.Series, t: np.ndarray) -> dict[str, Any]:
        i = np.arange(len(t))
        state = np.where(i % 3 == 0, "R", np.where(i % 3 == 1, "D", "S"))
        wait = np.where(state == "R", None, np.where(state == "D", "fault_io", np.where(i % 2, "futex", "idle")))
        return {"state": state, "tid": 100, "pid": 100, "class": wait}  # class: the sampler's v2 wait class

    one = _sampled(runs, 100_000_000, states)
    other = one.assign(tid=101, state="-", **{"class": "futex"})
    return pd.concat([one, other], ignore_index=True)


def synthetic_tables() -> dict[str, pd.DataFrame]:
    runs = _runs()
    requests = _requests(runs)
    bench = pd.DataFrame([{"run_id": r["run_id"], "target": r["target"], "test": test,
                           "avg_tps": base * (1 if r["read_ahead_kb"] == 8192 else 4) * (1 + 0.1 * r["round"])}
                          for _, r in runs[runs["step"] == "llama-bench"].iterrows()
                          for test, base in (("pp16", 10.0), ("tg32", 2.0))])
    fio = pd.DataFrame([{"run_id": r["run_id"], "target": r["target"], "job_name": job, "rw": rw, "bs_bytes": bs,
                         "iodepth": qd, "read_bw_bytes_per_s": bps * (1 + 0.05 * r["round"]), "read_iops": bps / bs,
                         "read_clat_p99_ns": 2e6} for _, r in runs[runs["step"] == "fio"].iterrows()
                        for job, rw, bs, qd, bps in FIO_JOBS])
    reads = runs.loc[runs["step"] == "read", ["run_id", "target"]].assign(pattern="seq", bytes=1 << 30, seconds=2.0)
    blockstat = _sampled(runs, 100_000_000, lambda run, t: {
        "read_bytes_per_s": np.linspace(0, 5e8 if run["cache"] == "cold" else 1e5, len(t)),
        "avg_inflight": np.linspace(0, 8, len(t))})
    telemetry = _sampled(runs, 1_000_000_000, lambda run, t: {
        "source": "tegrastats", "power_vdd_in_mw": np.full(len(t), 5200), "power_vdd_in_avg_mw": 5000,
        "temp_cpu_c": np.linspace(40, 55, len(t)), "temp_gpu_c": np.linspace(38, 50, len(t)),
        "gpu_freq_mhz": 306, "emc_freq_mhz": 2133})
    return {"runs": runs, "requests": requests, "tokens": _tokens(requests), "bench": bench, "fio": fio,
            "reads": reads, "blockstat": blockstat, "threads": _threads(runs), "telemetry": telemetry,
            "energy": _energy(runs, requests, telemetry)}


def _energy(runs: pd.DataFrame, requests: pd.DataFrame, telemetry: pd.DataFrame) -> pd.DataFrame:
    """The energy table as the campaign computes it from these tables (harness/analysis/energy.py): each
    request's decode window holds decode_tps x 2 s tokens."""
    rows = []
    for run_id, mine in requests.groupby("run_id"):
        series = energy.power_series(telemetry[telemetry["run_id"] == run_id].to_dict("records"), "tegrastats")
        windows = mine.assign(decode_tokens=(mine["decode_tps"] * 2).round().astype(int)).to_dict("records")
        rows += [{"run_id": run_id, "target": "board", **row} for row in energy.request_energy(series, windows, None)]
    return pd.DataFrame(rows)


def context_of(tables: dict[str, pd.DataFrame], out: Path) -> FigureContext:
    return FigureContext(lambda name: tables.get(name, pd.DataFrame()), out, "20260101-000000-synth-abcdef",
                         "synthetic tables", PARAMS, BASELINE)


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return synthetic_tables()


@pytest.fixture
def kept_figures() -> Iterator[list[MplFigure]]:
    """The matplotlib figures ``save`` closes, kept for inspection (their text, axes and artists)."""
    kept: list[MplFigure] = []
    with patch.object(figures_base.plt, "close", side_effect=kept.append):
        yield kept
    for fig in kept:
        plt.close(fig)


def drawn_texts(fig: MplFigure) -> list[tuple[Text, Any]]:
    """Every text the figure draws (visible, not empty) with its box in display pixels, as the figure is saved:
    at the saved resolution and cropped like the saved file, where a figure-anchored legend could move."""
    drawn: dict[int, tuple[Text, Any]] = {}
    original = Text.draw

    def recording(self: Text, renderer: Any) -> None:
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn[id(self)] = (self, self.get_window_extent(renderer))  # the last (the saved) pass wins

    with patch.object(Text, "draw", recording):
        fig.savefig(io.BytesIO(), format="png", dpi=120, bbox_inches="tight")
    return list(drawn.values())


def overlapping_texts(fig: MplFigure, slack_px: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose boxes overlap by more than ``slack_px`` both ways: tick labels, axis labels,
    titles, legend entries, annotations and the footer alike (nothing is excepted: labels placed along data,
    like a timeline's run names, are thinned by the figure itself). Boxes are axis-aligned, which is exact for
    the upright and 90°-rotated texts the figures use."""
    texts = drawn_texts(fig)
    clashes = []
    for (a, box_a), (b, box_b) in combinations(texts, 2):
        wide = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        high = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if wide > slack_px and high > slack_px:
            clashes.append((a.get_text(), b.get_text()))
    return clashes


def png_numbers(path: Path) -> dict[str, Any]:
    with Image.open(path) as image:
        return json.loads(image.text[NUMBERS_KEY])


@pytest.mark.parametrize("name", list(FIGURES))
def test_each_figure_draws_png_and_svg_with_numbers_and_no_overlapping_text(
        name: str, tables: dict[str, pd.DataFrame], tmp_path: Path, kept_figures: list[MplFigure]) -> None:
    paths = FIGURES[name].draw(context_of(tables, tmp_path))
    pngs = [p for p in paths if p.suffix == ".png"]
    assert pngs and {p.with_suffix(".svg") for p in pngs} <= set(paths), paths
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.with_suffix(".svg").stat().st_size > 0
        assert png_numbers(png), f"{png.name}: no numbers in the PNG"
    assert len(kept_figures) == len(pngs)
    for fig in kept_figures:
        assert overlapping_texts(fig) == [], name


@pytest.mark.parametrize("name", list(FIGURES))
def test_each_figure_is_skipped_with_the_table_it_lacks(name: str, tables: dict[str, pd.DataFrame],
                                                        tmp_path: Path) -> None:
    figure = FIGURES[name]
    cases = [((table,), f"no {table} table") for table in figure.needs]
    if figure.needs_any:
        cases.append((figure.needs_any, f"no {' or '.join(figure.needs_any)} table"))
    for empty, reason in cases:
        out = tmp_path / "-".join(empty)
        lacking = {k: (pd.DataFrame() if k in empty else v) for k, v in tables.items()}
        with patch.dict(FIGURES, {name: figure}, clear=True):
            drawn, skipped = draw_figures(context_of(lacking, out))
        assert drawn == [] and [(s.figure, s.reason) for s in skipped] == [(name, reason)]
        assert skipped[0].report_line() == f"{name}: not drawn, {reason}"
        assert skipped[0].cli_line() == f"not drawn: {name} ({reason})"
        assert not out.exists() or not any(out.iterdir())


def test_change_vs_baseline_numbers_are_the_same_when_drawn_again(tables: dict[str, pd.DataFrame],
                                                                   tmp_path: Path) -> None:
    # the one figure with resampling in it: its bootstrap has a fixed seed, so a notebook gets the same CI
    figure = FIGURES["change_vs_baseline"]
    first, again = (next(p for p in figure.draw(context_of(tables, tmp_path / run)) if p.suffix == ".png")
                    for run in ("a", "b"))
    assert png_numbers(first) == png_numbers(again)
    assert set(png_numbers(first)) == {"llama-server decode (tok/s)", "llama-bench pp16 (tok/s)",
                                       "llama-bench tg32 (tok/s)"}


def test_change_vs_baseline_draws_ratios_on_a_log_axis_with_the_gates_ci(
        tables: dict[str, pd.DataFrame], tmp_path: Path, kept_figures: list[MplFigure]) -> None:
    paths = FIGURES["change_vs_baseline"].draw(context_of(tables, tmp_path))
    (fig,) = kept_figures
    panels = {ax.get_title(loc="left"): ax for ax in fig.axes if ax.get_title(loc="left")}
    decode = panels["llama-server decode (tok/s)"]
    assert all(ax.get_yscale() == "log" for ax in panels.values())
    req, runs = tables["requests"], tables["runs"]
    values = req.merge(runs[["run_id", "read_ahead_kb"]], on="run_id")

    def tps(ra: int, cache: str) -> pd.Series:
        return values.loc[(values["read_ahead_kb"] == ra) & (values["cache"] == cache), "decode_tps"]

    expected = {f"read_ahead_kb=128 {c}": ratio_of_medians(tps(8192, c), tps(128, c)) for c in ("cold", "warm")}
    whiskers = sorted(y for c in decode.containers for y in c.lines[2][0].get_segments()[0][:, 1])
    assert whiskers == pytest.approx(sorted(y for e in expected.values() for y in (e.low, e.high)))
    numbers = png_numbers(next(p for p in paths if p.suffix == ".png"))["llama-server decode (tok/s)"]
    for variant, est in expected.items():
        got = numbers[variant]
        assert (got["ratio"], got["low"], got["high"]) == pytest.approx((est.ratio, est.low, est.high), rel=1e-5)
        assert est.low > 1 or variant.endswith("warm")  # read_ahead_kb=128 cold really is faster: a clear CI
    tick_labels = [t.get_text() for t in decode.get_yticklabels()]
    assert "×1" in tick_labels and "×10" in tick_labels


def test_decode_panel_names_every_engine_whose_requests_it_holds() -> None:
    # bmoe fills the requests table beside llama-server: a panel titled "llama-server decode" would misname them
    runs = pd.DataFrame({"run_id": ["s1", "b1"], "index": [1, 2], "status": "ok", "target": "local",
                         "step": ["llama-server", "bmoe"], "cache": "cold", "read_ahead_kb": 128})
    requests = pd.DataFrame({"run_id": ["s1", "b1"], "decode_tps": [4.0, 6.6]})
    tables = {"requests": requests, "bench": pd.DataFrame()}
    obs = observations(runs, lambda name: tables.get(name, pd.DataFrame()), PARAMS)
    assert set(obs["panel"]) == {"bmoe / llama-server decode (tok/s)"}
    alone = observations(runs.iloc[:1], lambda name: tables.get(name, pd.DataFrame()), PARAMS)
    assert set(alone["panel"]) == {"llama-server decode (tok/s)"}


def test_change_vs_baseline_pairs_each_target_with_its_own_runs_when_run_ids_repeat() -> None:
    # a set with two targets holds the same run ids once per target: joining on run_id alone gave each target's
    # cells the other's requests too (alpha's ×2 and beta's ×4 both drawn as one mixed ratio, n doubled)
    runs = pd.DataFrame({"run_id": ["0001-a", "0002-b"] * 2, "index": [1, 2] * 2, "status": "ok",
                         "target": ["alpha", "alpha", "beta", "beta"], "step": "llama-server", "cache": "cold",
                         "read_ahead_kb": [128, 8192] * 2})
    decode = {("alpha", "0001-a"): 10.0, ("alpha", "0002-b"): 20.0, ("beta", "0001-a"): 5.0, ("beta", "0002-b"): 20.0}
    requests = pd.DataFrame([{"run_id": run_id, "target": target, "decode_tps": tps + 0.1 * i}
                             for (target, run_id), tps in decode.items() for i in range(5)])
    tables = {"requests": requests, "bench": pd.DataFrame()}
    obs = observations(runs, lambda name: tables.get(name, pd.DataFrame()), PARAMS)
    ratios = ratio_table(obs, PARAMS, {"read_ahead_kb": 128}).set_index("variant")
    assert list(ratios["n_candidate"]) == [5, 5, 5, 5]
    assert ratios.loc["alpha: read_ahead_kb=8192 cold", "ratio"] == pytest.approx(20.2 / 10.2)
    assert ratios.loc["beta: read_ahead_kb=8192 cold", "ratio"] == pytest.approx(20.2 / 5.2)


def test_thread_states_fractions_of_a_hand_made_threads_table() -> None:
    runs = pd.DataFrame({"run_id": ["0001-bench", "0002-server"], "index": [1, 2], "status": ["ok", "ok"],
                         "step": ["llama-bench", "llama-server"], "step_label": ["llama-bench", "llama-server"],
                         "cache": ["cold", "cold"], "read_ahead_kb": [128, 128], "target": ["b", "b"]})
    # bench: thread 1 R R R R R R D D D D, thread 2 S S D D D S S S R R at the same ten instants
    t = np.arange(10) * 1000
    bench = pd.DataFrame({"run_id": "0001-bench", "t_ns": np.tile(t, 2), "tid": np.repeat([1, 2], 10),
                          "state": list("RRRRRRDDDD") + list("SSDDDSSSRR")})
    # server: only t in [100, 140] is decode; the D samples outside it must not count
    server = pd.DataFrame({"run_id": "0002-server", "t_ns": [50, 100, 110, 120, 130, 140, 150], "tid": 7,
                           "state": list("DRRSSRD")})
    requests = pd.DataFrame({"run_id": ["0002-server"], "t_first_token_ns": [100], "t_end_ns": [140]})
    per_thread, per_group = thread_state_table(runs, pd.concat([bench, server]), requests, PARAMS)
    bench_group, server_group = "llama-bench · read_ahead_kb=128 cold", "llama-server decode · read_ahead_kb=128 cold"
    assert list(per_group.index) == [bench_group, server_group]
    # D at instants 2-4 (thread 2) and 6-9 (thread 1): 7 of 10
    assert per_group.loc[bench_group, "any_d"] == pytest.approx(0.7)
    assert per_group.loc[server_group, "any_d"] == 0 and per_group.loc[server_group, "instants"] == 5
    stats = thread_range(per_thread)
    running, waiting, sleeping = CLASSES
    assert (stats.loc[bench_group, (running, "min")], stats.loc[bench_group, (running, "max")]) == (0.2, 0.6)
    assert stats.loc[bench_group, (running, "median")] == pytest.approx(0.4)
    assert (stats.loc[bench_group, (waiting, "min")], stats.loc[bench_group, (waiting, "max")]) == (0.3, 0.4)
    assert (stats.loc[bench_group, (sleeping, "min")], stats.loc[bench_group, (sleeping, "max")]) == (0.0, 0.5)
    assert stats.loc[server_group, (running, "max")] == pytest.approx(0.6)


MS = 1_000_000
SERVER_CELL, IDLE_CELL = "llama-server decode · read_ahead_kb=128 cold", "llama-server decode · read_ahead_kb=8192 cold"


def _server_samples(run_id: str, tid: int, *spans: tuple[str, str | None, int]) -> list[dict[str, Any]]:
    """Forty samples 25 ms apart inside the decode window [0, 1 s]: spans of (state, class, how many)."""
    states = [(state, cls) for state, cls, count in spans for _ in range(count)]
    assert len(states) == 40
    return [{"run_id": run_id, "t_ns": i * 25 * MS, "tid": tid, "state": state, "class": cls}
            for i, (state, cls) in enumerate(states)]


def _idle_counters(run_id: str, tid: int, run_ms: int = 0, blkio_ms: int = 0) -> list[dict[str, Any]]:
    """Two counter reads 1 s apart: ``run_ms`` on CPU, ``blkio_ms`` in block I/O, the rest asleep."""
    first = {"run_id": run_id, "kind": "thread", "tid": tid, "t_ns": 0, "run_ns": 0, "runqueue_ns": 0,
             "blkio_delay_ns": 0, "thrashing_delay_ns": 0, "freepages_delay_ns": 0, "clock_ticks_per_s": 100}
    return [first, {**first, "t_ns": 1000 * MS, "run_ns": run_ms * MS, "blkio_delay_ns": blkio_ms * MS}]


def fourteen_threads(pid: str) -> dict[str, pd.DataFrame]:
    """A llama-server decode of 14 threads of which 2 compute (thread 1: R 40 %, fault_io 60 %; thread 2: R 50 %,
    futex 50 %) and the rest park in epoll -- but thread 3 (HTTP, woken per token) is sampled runnable once (2.5 %),
    thread 4 three times (7.5 %), thread 5 runs only after the window; the counters have 3 and 4 on CPU for 1 and
    2 % of it. A second cell: three threads asleep throughout, no counters. ``pid``: no column, one per row, or
    missing (None) in the rows of one cell."""
    idle = ("-", "idle")
    samples = (_server_samples("s1", 1, ("R", None, 16), ("D", "fault_io", 24))
               + _server_samples("s1", 2, ("R", None, 20), ("-", "futex", 20))
               + _server_samples("s1", 3, (*idle, 20), ("R", None, 1), (*idle, 19))
               + _server_samples("s1", 4, (*idle, 10), ("R", None, 3), (*idle, 27)))
    for tid in range(5, 15):
        samples += _server_samples("s1", tid, ("S", "idle", 1), (*idle, 39))
    samples.append({"run_id": "s1", "t_ns": 1500 * MS, "tid": 5, "state": "R", "class": None})  # after the window
    for tid in (21, 22, 23):
        samples += _server_samples("s2", tid, ("S", "idle", 1), (*idle, 39))
    threads = pd.DataFrame(samples)
    if pid == "per row":
        threads["pid"] = np.where(threads["run_id"] == "s1", 1, 21)
    elif pid == "missing":
        threads["pid"] = np.where(threads["run_id"] == "s1", 1, None)
    counters = _idle_counters("s1", 1, 400, 500) + _idle_counters("s1", 2, 500) + _idle_counters("s1", 3, 10)
    counters += _idle_counters("s1", 4, 20)
    for tid in range(5, 15):
        counters += _idle_counters("s1", tid)
    runs = pd.DataFrame({"run_id": ["s1", "s2"], "index": [1, 2], "status": "ok", "step": "llama-server",
                         "step_label": "llama-server", "cache": "cold", "read_ahead_kb": [128, 8192], "target": "b"})
    requests = pd.DataFrame({"run_id": ["s1", "s2"], "t_first_token_ns": [0, 0], "t_end_ns": [1000 * MS] * 2})
    return {"runs": runs, "threads": threads, "thread_counters": pd.DataFrame(counters), "requests": requests}


def draw_thread_states(tables: dict[str, pd.DataFrame], out: Path) -> dict[str, Any]:
    paths = FIGURES["thread_states"].draw(context_of(tables, out))
    return png_numbers(next(p for p in paths if p.suffix == ".png"))


@pytest.mark.parametrize("pid", ["no column", "per row", "missing"])
def test_thread_states_range_over_the_2_of_14_threads_the_counters_say_worked(
        pid: str, tmp_path: Path, kept_figures: list[MplFigure]) -> None:
    numbers = draw_thread_states(fourteen_threads(pid), tmp_path)
    running, waiting, sleeping = CLASSES
    cell = numbers[SERVER_CELL]
    assert (cell["threads_worked"], cell["threads"], cell["working_by"]) == (2, 14, "counters")
    assert cell[running] == {"min": 0.4, "median": 0.45, "max": 0.5}  # threads 1 and 2 only: not 0 from the idle
    assert cell[waiting] == {"min": 0.0, "median": 0.3, "max": 0.6}
    assert cell[sleeping] == {"min": 0.0, "median": 0.25, "max": 0.5}
    # the class panel is the compute threads' off-CPU samples (6 fault_io, 5 futex), not the parked threads' epoll
    assert cell["off_cpu_by_class"]["fault_io"] == pytest.approx(6 / 11, abs=1e-5)
    assert cell["off_cpu_by_class"]["idle"] == 0
    assert cell["any_d"] == pytest.approx(0.6)  # the process in I/O wait: over all its threads, as before
    (fig,) = kept_figures
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == f"{SERVER_CELL}\n2 of 14 threads worked (by counters)"
    assert overlapping_texts(fig) == []


def test_thread_states_without_counters_choose_the_threads_by_their_samples(tmp_path: Path) -> None:
    tables = {**fourteen_threads("no column"), "thread_counters": pd.DataFrame()}
    cell = draw_thread_states(tables, tmp_path)[SERVER_CELL]
    # 1 and 2 computed; 4 was sampled running 7.5 % of the time, 3 only once (2.5 %), 5 only after the window
    assert (cell["threads_worked"], cell["threads"], cell["working_by"]) == (3, 14, "samples")
    assert cell[CLASSES[0]] == {"min": 0.075, "median": 0.4, "max": 0.5}


def test_thread_states_cell_where_no_thread_worked_says_so(tmp_path: Path, kept_figures: list[MplFigure]) -> None:
    numbers = draw_thread_states(fourteen_threads("no column"), tmp_path)
    cell = numbers[IDLE_CELL]
    assert (cell["threads_worked"], cell["threads"], cell["working_by"]) == (0, 3, "samples")
    assert all(cell[cls] == {"min": None, "median": None, "max": None} for cls in CLASSES)
    assert all(v is None for v in cell["off_cpu_by_class"].values())
    (fig,) = kept_figures
    said = [t for ax in fig.axes[:3] for t in ax.texts if t.get_text() == "no thread worked"]
    assert len(said) == 3 and {t.get_position()[1] for t in said} == {1}  # on the second row, in each range panel
    assert fig.axes[0].get_yticklabels()[1].get_text().endswith("0 of 3 threads worked (by samples)")


def test_thread_states_median_marks_stay_visible_at_the_ends_and_over_a_range_of_one_value(
        tmp_path: Path, kept_figures: list[MplFigure]) -> None:
    # thread 1 alone worked: each range is one value (min = max: no line to draw), and its sleep is 0 %, on the axis
    tables = fourteen_threads("no column")
    tables["threads"] = tables["threads"][tables["threads"]["tid"] != 2]
    tables["thread_counters"] = tables["thread_counters"][tables["thread_counters"]["tid"] != 2]
    draw_thread_states(tables, tmp_path)
    (fig,) = kept_figures
    for ax, value in zip(fig.axes[:3], (0.4, 0.6, 0.0), strict=True):
        low, high = ax.get_xlim()
        assert low < 0 and high > 1  # a mark at 0 % or 100 % is not drawn on a spine
        (mark,) = [line for line in ax.get_lines() if line.get_marker() == "|"]
        ends = [line for line in ax.get_lines() if line.get_marker() == "o"]
        assert mark.get_xdata()[0] == pytest.approx(value)
        assert [line.get_xdata()[0] for line in ends] == pytest.approx([value, value])  # dots where no line is
        assert all(not line.get_clip_on() for line in [mark, *ends])
        assert mark.get_zorder() > max(line.get_zorder() for line in ends)  # the median's mark on top


def _bound_inputs(with_fio: bool) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    runs = pd.DataFrame({"run_id": ["s1", "s2", "f1"], "index": [1, 2, 3], "status": "ok", "round": 1,
                         "step": ["llama-server", "llama-server", "fio"], "cache": "cold", "target": "b",
                         "read_ahead_kb": [128, 8192, 8192]})
    requests = pd.DataFrame({"run_id": ["s1", "s2"], "target": "b", "cache": "cold", "decode_tps": [15.0, 4.0],
                             "decode_dev_read_bytes_per_s": [150e6, 400e6],
                             "decode_dev_read_bytes_per_token": [10e6, 100e6],
                             "decode_dev_avg_inflight": [2.0, 8.0],
                             "decode_dev_avg_read_io_bytes": [64 * 1024.0, 1024 * 1024.0]})
    fio = pd.DataFrame({"run_id": "f1", "target": "b", "bs_bytes": [65536, 65536, 1 << 20], "iodepth": [1, 4, 4],
                        "read_bw_bytes_per_s": [100e6, 400e6, 800e6]}) if with_fio else pd.DataFrame()
    return runs, requests, fio


def test_bandwidth_bound_efficiency_of_hand_made_numbers() -> None:
    # 64 KiB at queue depth 2: halfway between 100 MB/s (qd1) and 400 MB/s (qd4) = 200 MB/s; / 10 MB per token =
    # 20 tok/s; measured 15: 75 %. 1 MiB at queue depth 8: beyond the ladder's qd4, held at 800 MB/s; / 100 MB =
    # 8 tok/s; measured 4: 50 %.
    cells = cell_efficiency(bound_table(*_bound_inputs(with_fio=True), PARAMS))
    assert cells.loc["read_ahead_kb=128 cold", "bound_tps"] == pytest.approx(20.0)
    assert cells.loc["read_ahead_kb=128 cold", "efficiency"] == pytest.approx(0.75)
    assert cells.loc["read_ahead_kb=8192 cold", "efficiency"] == pytest.approx(0.5)
    assert set(cells["source"]) == {FROM_FIO}
    # no fio ladder: the highest decode-window MB/s on the target (400 MB/s) is what the device can deliver
    fallback = cell_efficiency(bound_table(*_bound_inputs(with_fio=False), PARAMS))
    assert fallback.loc["read_ahead_kb=128 cold", "bound_tps"] == pytest.approx(40.0)
    assert fallback.loc["read_ahead_kb=8192 cold", "efficiency"] == pytest.approx(1.0)
    assert set(fallback["source"]) == {FROM_DECODE}


def test_timeline_draws_telemetry_panels_only_where_there_is_telemetry(
        tables: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    (png,) = [p for p in FIGURES["timeline"].draw(context_of(tables, tmp_path / "all")) if p.suffix == ".png"]
    assert png.name == "timeline_board.png"
    assert png_numbers(png)["panels"] == ["tok/s", "device MB/s", "in-flight", "power", "temperature", "clocks"]
    bare = {k: v for k, v in tables.items() if k not in ("telemetry", "tokens")}
    (png,) = [p for p in FIGURES["timeline"].draw(context_of(bare, tmp_path / "bare")) if p.suffix == ".png"]
    assert png_numbers(png)["panels"] == ["device MB/s", "in-flight"]


def _write_set(path: Path, tables: dict[str, pd.DataFrame]) -> Path:
    manifest = {"schema_version": SCHEMA_VERSION, "set_id": "20260101-000000-synth-abcdef", "status": "complete",
                "experiment": {"name": "synth", "path": "synth.yaml", "sha256": "0" * 64},
                "harness": {"version": "0", "git_revision": None}, "controller": {"host": "here"},
                "started": None, "ended": None, "targets": [{"name": "board", "platform": "linux", "facts": {}}],
                "runs": [], "matrix": {"read_ahead_kb": [8192, 128]}, "baseline": BASELINE}
    (path / TABLES_DIR).mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps(manifest))
    for name, frame in tables.items():
        frame.to_parquet(path / TABLES_DIR / table_file(name), index=False)
    return path


def test_report_cli_names_every_figure_it_did_not_draw(tables: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    keep = ("runs", "reads", "fio")
    path = _write_set(tmp_path / "set", {k: v for k, v in tables.items() if k in keep})
    done = cli_in_process("report", str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for line in ("not drawn: decode_vs_device (no requests table)", "not drawn: thread_states (no threads table)",
                 "not drawn: change_vs_baseline (no requests or bench table)",
                 "not drawn: bandwidth_bound (no requests table)", "not drawn: timeline (no blockstat table)"):
        assert line in lines, done.stdout
    assert not any("fio_ladder" in line or "read_accounting" in line for line in lines if "not drawn" in line)
    report = (path / "report.md").read_text()
    assert "- thread_states: not drawn, no threads table" in report.splitlines()


def test_energy_per_token_is_one_marker_per_cell_at_its_medians(tables: dict[str, pd.DataFrame],
                                                                 tmp_path: Path) -> None:
    # the synthetic board draws a constant 5.2 W (telemetry power_vdd_in_mw 5200) and a decode window of 2 s holds
    # round(decode_tps x 2) tokens: every window's J/token is 5.2 W x 2 s / round(2 x tps); a cell's marker is at the
    # medians of its 6 windows (3 requests x 2 rounds): the mean of the 3rd and 4th values
    png = next(p for p in FIGURES["energy_per_token"].draw(context_of(tables, tmp_path)) if p.suffix == ".png")
    numbers = png_numbers(png)
    requests = tables["requests"].merge(tables["runs"][["run_id", *PARAMS]], on="run_id")
    assert len(numbers) == requests.groupby(PARAMS + ["cache"]).ngroups == 4
    for cell in numbers.values():
        assert cell["windows"] == 6 and cell["rail"] == "VDD_IN"  # 3 requests x 2 rounds
    tps = sorted(requests.loc[(requests["read_ahead_kb"] == 128) & (requests["cache"] == "cold"), "decode_tps"])
    cold_128 = next(v for k, v in numbers.items() if "128" in k and "cold" in k)
    assert cold_128["decode_tps"] == pytest.approx((tps[2] + tps[3]) / 2, rel=1e-5)
    joules = sorted(10.4 / round(2 * t) for t in tps)
    assert cold_128["j_per_token"] == pytest.approx((joules[2] + joules[3]) / 2, rel=1e-5)

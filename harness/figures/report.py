"""Regenerate a result set's figures and report.md from its tables (never from raw files).

The figures are every registered one (``harness.figures``) whose tables have rows; report.md (and
``harness report``) names each of the others with the table it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.figures import FIGURES, FigureContext
from harness.figures.change import observations, ratio_table
from harness.figures.correlation_report import correlation_lines
from harness.figures.energy_report import energy_lines
from harness.figures.equivalence_report import equivalence_lines
from harness.figures.outlier_report import outlier_lines
from harness.figures.process_waits import process_wait_lines
from harness.figures.replay_report import replay_validation_lines
from harness.figures.rounds_report import stopping_lines
from harness.figures.streaming import BUILD, baseline_cell, build_baseline, cell_label, change_table, ok_requests
from harness.figures.waits import wait_lines
from harness.parsers.fio import ordered_jobs
from harness.results.cachestate import cache_label, not_cleared
from harness.results.loader import ResultSet, load_result_set
from harness.results.manifest import Manifest
from harness.results.selection import (
    including_perturbed,
    invalid_mask,
    invalid_runs,
    perturbed_mask,
    perturbed_runs,
    usable_runs,
)
from harness.results.tables import BENCH, FIO, REQUESTS, RUNS

MB = 1e6


def _place_of(target: Mapping[str, Any]) -> str:
    """', labgrid place orin-01 (board=orin) on host:20408' for a target locked through a labgrid coordinator."""
    lease = target.get("lease") or {}
    if lease.get("backend") != "labgrid":
        return ""
    tags = " ".join(f"{k}={v}" for k, v in sorted((lease.get("tags") or {}).items()))
    tags = f" ({tags})" if tags else ""
    return f", labgrid place **{lease.get('place')}**{tags} on {lease.get('coordinator')}"


def settings_line(manifest: Manifest) -> str:
    exp = manifest.get("experiment", {}).get("name", "?")
    targets = ",".join(t["name"] for t in manifest.get("targets", []))
    return f"experiment {exp} · targets {targets} · harness {manifest.get('harness', {}).get('version')}"


def fio_summary(rs: ResultSet) -> pd.DataFrame:
    fio, runs = rs.table(FIO.name), rs.table(RUNS.name)
    if fio.empty:
        return pd.DataFrame()
    # only finished runs enter aggregates; a failed or interrupted run's partial output stays in the table
    ok = usable_runs(runs)
    if ok.empty:  # every fio run failed: their partial rows lack the latency columns (no read completed)
        return pd.DataFrame()
    ok = ok.assign(cache=cache_label)  # a NOT-cleared "cold" is its own group
    data = fio.merge(ok[["run_id", "cache"]], on="run_id", how="inner")
    if data.empty:
        return pd.DataFrame()
    # a job fio printed no read block or no percentiles for (unified_rw_reporting, gtod_reduce, old fio) has no
    # such column: its cell is empty, not a crash
    data["read_mbps"] = data.get("read_bw_bytes_per_s", float("nan")) / MB
    data["p99_ms"] = data.get("read_clat_p99_ns", float("nan")) / 1e6
    data["read_iops"] = data.get("read_iops", float("nan"))
    out = data.groupby(["target", "cache", "job_name"]).agg(
        n=("read_mbps", "size"), mbps=("read_mbps", "mean"), sd=("read_mbps", "std"),
        iops=("read_iops", "mean"), p99_ms=("p99_ms", "mean")).reset_index()
    order = {name: i for i, name in enumerate(ordered_jobs(out["job_name"]))}
    out = out.sort_values(["target", "cache", "job_name"], key=lambda c: c.map(order) if c.name == "job_name" else c)
    return out.rename(columns={"job_name": "job", "mbps": "MB/s", "iops": "IOPS", "p99_ms": "p99 ms"})


def read_summary(rs: ResultSet) -> pd.DataFrame:
    runs = rs.table(RUNS.name)
    if runs.empty or "dev_read_bytes" not in runs:
        return pd.DataFrame()
    reads = runs[runs["step"] == "read"].copy()
    if reads.empty:
        return pd.DataFrame()
    out = pd.DataFrame({
        "run": reads["run_id"], "target": reads["target"], "cache": cache_label(reads),
        "status": reads["status"].where(~perturbed_mask(reads), "ok, perturbed"),
        "resident %": reads["residency_before_pct"], "file MB": reads["cache_files_bytes"] / MB,
        "device MB": reads["dev_read_bytes"] / MB,
        # what the reader itself fetched from storage: the device delta minus everyone else's I/O
        "process MB": reads.get("proc_storage_read_bytes", pd.Series(index=reads.index, dtype=float)) / MB,
        "MB/s": reads["cache_files_bytes"] / reads["step_duration_s"] / MB})
    return out


def request_summary(rs: ResultSet) -> pd.DataFrame:
    """Per cell: decode tok/s and what the device did during decode (the seed article's per-request view)."""
    runs, requests = rs.table(RUNS.name), rs.table(REQUESTS.name)
    params = list(rs.manifest.get("matrix") or {})
    data = ok_requests(runs, requests, params)
    if data.empty:
        return pd.DataFrame()
    per_token = "decode_dev_read_bytes_per_token"
    grouped = data.groupby("cell", sort=False)
    out = pd.DataFrame({
        "requests": grouped.size(),
        "decode tok/s": grouped["decode_tps"].mean(), "sd": grouped["decode_tps"].std(),
        "prefill tok/s": grouped["prefill_tps"].mean() if "prefill_tps" in data else None,
        "dev MB/s": grouped["decode_dev_mbps"].mean(),
        "MB/token": grouped[per_token].mean() / MB if per_token in data else None,
        "avg I/O KiB": grouped["decode_dev_avg_read_io_bytes"].mean() / 1024
        if "decode_dev_avg_read_io_bytes" in data else None,
        "in-flight": grouped["decode_dev_avg_inflight"].mean() if "decode_dev_avg_inflight" in data else None,
        "majflt/token": grouped["decode_majflt_per_token"].mean() if "decode_majflt_per_token" in data else None,
    })
    if "engine_read_bytes_per_token" in data and data["engine_read_bytes_per_token"].notna().any():
        # engines that count their own reads (bmoe): theirs beside the device's, per decoded token
        out["engine MB/token"] = grouped["engine_read_bytes_per_token"].mean() / MB
    return out.reset_index()


def bench_summary(rs: ResultSet) -> pd.DataFrame:
    runs, bench = rs.table(RUNS.name), rs.table(BENCH.name)
    if bench.empty or "avg_tps" not in bench:
        return pd.DataFrame()
    params = list(rs.manifest.get("matrix") or {})
    ok = usable_runs(runs)[["run_id", "cache", *[p for p in params if p in runs]]]
    data = bench[["run_id", "test", "avg_tps"]].merge(ok, on="run_id")
    if data.empty:
        return pd.DataFrame()
    data["cell"] = data.apply(cell_label, axis=1, params=params)
    out = data.groupby(["test", "cell"], sort=False)["avg_tps"].agg(["size", "mean", "std"]).reset_index()
    return out.rename(columns={"size": "runs", "mean": "tok/s", "std": "sd"})


@dataclass(frozen=True)
class NotDrawn:
    """A registered figure that was not drawn, and why ('no fio table')."""

    figure: str
    reason: str

    def report_line(self) -> str:
        return f"{self.figure}: not drawn, {self.reason}"

    def cli_line(self) -> str:
        return f"not drawn: {self.figure} ({self.reason})"


@dataclass(frozen=True)
class Report:
    path: Path  # report.md
    figures: list[Path]
    not_drawn: list[NotDrawn]


def figure_context(rs: ResultSet, out_dir: Path, manifest: Manifest | None = None) -> FigureContext:
    """What a set's figures are drawn from and into; the report and the notebooks build it here, alike."""
    manifest = manifest or rs.manifest
    matrix = dict(manifest.get("matrix") or {})
    return FigureContext(rs.table, out_dir, manifest["set_id"], settings_line(manifest), list(matrix),
                         manifest.get("baseline"), matrix)


def draw_figures(context: FigureContext, group: str | None = None) -> tuple[list[Path], list[NotDrawn]]:
    """Every registered figure (of notebook ``group``, if given) whose tables have rows, in registry order; and
    every figure that was not drawn, with the table it lacks (or, when its tables had rows but none it could use,
    which ones those were)."""
    figures: list[Path] = []
    skipped: list[NotDrawn] = []
    for figure in FIGURES.values():
        if group is not None and figure.group != group:
            continue
        missing = figure.missing(lambda name: not context.table(name).empty)
        drawn = [] if missing else figure.draw(context)
        if not missing and not drawn:
            missing = f"no usable rows in the {' and '.join(figure.needs + figure.needs_any)} tables"
        if missing:
            skipped.append(NotDrawn(figure.name, missing))
        figures += drawn
    return figures, skipped


def render(path: Path, manifest: Manifest | None = None, include_perturbed: bool = False,
           verify: bool = False) -> Report:
    """Draw a set's figures and write its report.md; what was drawn and what was not. Perturbed runs are left out
    of the summaries and figures unless ``include_perturbed`` (they are listed either way). With ``verify`` the set
    must match its SHA256SUMS first (``harness report``; the campaign draws a set it has just written)."""
    rs = load_result_set(path, verify=verify)
    marked = rs.table(RUNS.name)  # the Runs section lists perturbed runs as marked, whatever the summaries use
    if include_perturbed:
        rs = ResultSet(rs.path, rs.manifest, {RUNS.name: including_perturbed(marked)})
    manifest = manifest or rs.manifest
    params = list(manifest.get("matrix") or {})
    figures, skipped = draw_figures(figure_context(rs, rs.path / "figures", manifest))
    runs = rs.table(RUNS.name)
    changes, ratios = pd.DataFrame(), pd.DataFrame()
    build_base = build_baseline(manifest.get("matrix"), manifest.get("baseline"))  # None: no builds compared
    if not runs.empty:
        baseline = baseline_cell(runs, params, manifest.get("baseline"))
        changes = change_table(runs, rs.table(REQUESTS.name), rs.table(BENCH.name), params, baseline, build_base)
        ratios = ratio_table(observations(runs, rs.table, params), params, baseline, build_base)
    _write_markdown(rs, manifest, [f for f in figures if f.suffix == ".png"], changes, ratios,
                    [s.report_line() for s in skipped], marked, include_perturbed, build_base)
    return Report(rs.path / "report.md", figures, skipped)


def render_report(path: Path, manifest: Manifest | None = None) -> list[Path]:
    """:func:`render`, returning the figures written."""
    return render(path, manifest).figures


def ratio_lines(ratios: pd.DataFrame, build_base: str | None = None) -> list[str]:
    """report.md's table of F4's numbers: ratio of medians vs the baseline with its 95 % CI (with ``build_base``,
    each cell's baseline is named: the baseline build's cell equal in everything else)."""
    if ratios.empty:
        return []
    paired = ["baseline"] if build_base is not None else []
    shown = ratios[~ratios["is_baseline"]][["panel", "variant", *paired, "ratio", "low", "high", "p", "n_baseline",
                                            "n_candidate"]]
    table = shown.to_markdown(index=False, floatfmt=".3g") if not shown.empty else "_no data_"
    if build_base is None:
        return ["", "## Ratio vs the baseline (median, bootstrap 95 % CI, Mann-Whitney p; figure change_vs_baseline)",
                "", table]
    return ["", f"## Ratio to build {build_base} of the same cell (median, bootstrap 95 % CI, Mann-Whitney p; "
                "figure change_vs_baseline)", "", _across_note(build_base), "", table]


def _across_note(build_base: str) -> str:
    """What report.md's change and ratio tables compare in a set that compares builds."""
    return (f"Each cell of another build against the `{BUILD}={build_base}` cell equal in everything else (the other "
            f"matrix values, cache condition, target, step), measured in the same interleaved rounds: the pairs "
            f"`harness gate SET --across {BUILD} --baseline-value {build_base}` decides on.")


def not_cleared_lines(runs: pd.DataFrame) -> list[str]:
    """One line per target whose cold runs ran with the page cache NOT cleared (macOS without purge)."""
    bad = runs[not_cleared(runs)]
    lines = []
    for target, group in bad.groupby("target"):
        resident = group["residency_before_pct"].dropna()
        seen = f"; residency before the step {resident.min():.0f}-{resident.max():.0f} %" if len(resident) else ""
        lines.append(f"- **{target}: page cache NOT cleared** in {len(group)} cold run(s), which are not cold-cache "
                     f"numbers: {group['cache_note'].iloc[0].removeprefix('page cache NOT cleared: ')}{seen}")
    return lines + [""] if lines else []


def _fio_section(rs: ResultSet, marked: pd.DataFrame) -> str:
    """The fio ladder table, or why there is none: when every fio run failed, how many and the first error."""
    summary = fio_summary(rs)
    if not summary.empty or marked.empty:
        return _table(summary)
    fio_runs = marked[marked["step"] == "fio"]
    if fio_runs.empty or (fio_runs["status"] == "ok").any():
        return _table(summary)
    first = fio_runs.iloc[0]
    error = str(first.get("error") or "no error recorded").strip().splitlines()
    return (f"**every fio run failed** ({len(fio_runs)} run(s)), so there is no ladder: `{first['run_id']}` "
            f"{first['status']}: {error[0] if error else 'no error recorded'}")


def _table(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False, floatfmt=".1f") if not frame.empty else "_no data_"


def perturbed_lines(runs: pd.DataFrame, included: bool = False) -> list[str]:
    """report.md's list of the perturbed runs, each with its reason and measures (none: no lines)."""
    bad = perturbed_runs(runs)
    if bad.empty:
        return []
    fate = "included in the summaries and figures (--include-perturbed)" if included else \
        "kept in the tables, left out of the summaries and figures"
    lines = ["", f"**{len(bad)} perturbed run(s)** (beyond the experiment's validity: limits), {fate}:", ""]
    for _, run in bad.iterrows():
        reason = str(run.get("perturbed_reason") or "")
        measured = ", ".join(f"{label} {run[column]:.0f} %" for label, column in _MEASURED
                             if column in run and pd.notna(run[column]) and not reason.startswith(label)
                             and f"; {label}" not in reason)  # what the reason does not say already
        lines.append(f"- `{run['run_id']}` perturbed: {run.get('perturbed_reason')}" +
                     (f" ({measured})" if measured else ""))
    return lines + [""]


def invalid_lines(runs: pd.DataFrame) -> list[str]:
    """report.md's list of the runs too short to mean anything (below the experiment's validity minimums)."""
    short = invalid_runs(runs)
    if short.empty:
        return []
    lines = ["", f"**{len(short)} invalid run(s)** (decode below the experiment's validity: minimums), kept in the "
                 "tables, left out of the summaries, figures, compare and gate:", ""]
    lines += [f"- `{run['run_id']}` invalid: {run.get('invalid_reason')}" for _, run in short.iterrows()]
    return lines + [""]


_MEASURED = (("foreign CPU", "foreign_cpu_pct"), ("runqueue", "runqueue_pct"), ("steal", "steal_pct"))


def header_lines(manifest: Manifest) -> list[str]:
    """report.md's first lines. A manifest holds what its campaign knew: a field missing (a set some other tool
    wrote) reads as None, not as a KeyError that loses the whole report."""
    experiment: Mapping[str, object] = manifest.get("experiment") or {}
    harness: Mapping[str, object] = manifest.get("harness") or {}
    return [f"# {manifest['set_id']}", "",
            f"- experiment: `{experiment.get('name')}` (sha256 {str(experiment.get('sha256'))[:12]})",
            f"- status: **{manifest.get('status')}**, started {manifest.get('started')}, "
            f"ended {manifest.get('ended')}",
            f"- harness {harness.get('version')} ({harness.get('git_revision')}), "
            f"controller {(manifest.get('controller') or {}).get('host')}", ""]


def _write_markdown(rs: ResultSet, manifest: Manifest, figures: list[Path], changes: pd.DataFrame,
                    ratios: pd.DataFrame, skipped: list[str], marked: pd.DataFrame,
                    include_perturbed: bool = False, build_base: str | None = None) -> None:
    runs = rs.table(RUNS.name)
    lines = header_lines(manifest)
    lines += ["## Targets", ""]
    for target in manifest.get("targets", []):
        facts = target.get("facts") or {}
        lines.append(f"- **{target.get('name')}** ({target.get('platform')}): {facts.get('cpu_model')}, "
                     f"{facts.get('cpu_count')} CPUs, kernel {facts.get('kernel')}, device "
                     f"{facts.get('block_device')} (read_ahead_kb {facts.get('block_read_ahead_kb')})"
                     + _place_of(target))
    lines += ["", "## Runs", ""]
    if not marked.empty:
        status = marked["status"].where(~perturbed_mask(marked), "ok, perturbed").where(~invalid_mask(marked),
                                                                                          "ok, too short")
        counts = marked.assign(cache=cache_label, status=status).groupby(["step", "cache", "status"]).size() \
            .reset_index(name="runs")
        lines += [_table(counts), ""]
        lines += not_cleared_lines(marked)
        failed = marked[marked["status"] != "ok"]
        for _, run in failed.iterrows():
            lines.append(f"- `{run['run_id']}` {run['status']}: {run.get('error')}")
        lines += perturbed_lines(marked, include_perturbed)
        lines += invalid_lines(marked)
        lines += outlier_lines(rs)
    lines += stopping_lines(manifest)  # rounds until tight: which cells stopped when, and why
    requests = request_summary(rs)
    if not requests.empty:
        points = ok_requests(runs, rs.table(REQUESTS.name), list(manifest.get("matrix") or {}))
        lines += ["", "## Requests (llama-server, bmoe): decode and the device", "", _table(requests)]
        lines += correlation_lines(points)
        lines.append("")
    lines += wait_lines(rs, list(manifest.get("matrix") or {}))  # counters and samples side by side
    lines += process_wait_lines(rs, list(manifest.get("matrix") or {}))  # which process of the tree waited
    lines += energy_lines(rs)  # the method per target, or the one line why there is no energy
    bench = bench_summary(rs)
    if not bench.empty:
        lines += ["", "## llama-bench", "", _table(bench)]
    lines += equivalence_lines(rs)
    lines += replay_validation_lines(rs)  # a set with replay and engine runs: how far the replay stands for it
    if not changes.empty and build_base is not None:
        lines += ["", f"## Change vs build {build_base} of the same cell and round", "", _across_note(build_base), "",
                  _table(changes.drop(columns=["is_baseline"]))]
    elif not changes.empty:
        lines += ["", f"## Change vs the same-session baseline ({manifest.get('baseline') or 'first cell'})", "",
                  _table(changes.drop(columns=["is_baseline"]))]
    lines += ratio_lines(ratios, build_base)
    lines += ["", "## fio ladder", "", _fio_section(rs, marked), "", "## Read baseline (block-stat accounting)", "",
              _table(read_summary(rs)), "", "## Figures", ""]
    lines += [f"![{f.stem}](figures/{f.name})" for f in figures]
    if skipped:
        lines += [""] + [f"- {line}" for line in skipped]
    (rs.path / "report.md").write_text("\n".join(lines) + "\n")

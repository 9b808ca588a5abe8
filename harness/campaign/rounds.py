"""Rounds until the answer is tight, on one target: after each round, which cells run another one.

The plan holds the experiment's ``min`` rounds. After the last of them and after every further round, the runs of
this target recorded ok and not perturbed are read through their step's own ingest (the rows the tables will
hold), the metric's observations gathered per cell (and per test, for a metric with one: llama-bench's tg32), and
each cell judged by harness.analysis.sequential (the rule and its source are there). A further round is planned
from the plan's cells, numbered after every run of the target and added to the manifest before it runs, in the
plan's cell order, so the rounds stay interleaved (A B A B) among the cells that run.

Which cells run on (``until.stop``): ``cell`` (default) stops a tight cell, but the experiment's baseline cell
of a step (its ``baseline:`` matrix values, the first values otherwise) runs on while any other cell of that step
and cache condition runs, so every late round of a noisy cell has its baseline measured in the same round and
drift hits both sides alike; ``all`` runs every cell every round until all are tight. When ``max`` is reached the
cells not tight stop with reason ``max``. What stopped when and why goes into the target's manifest entry
(``stopping``) and the report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.analysis.sequential import Look, look, looks
from harness.campaign.context import CampaignContext
from harness.campaign.plan import Cell, PlannedRun, planned, round_runs
from harness.config.rounds import RoundsSpec
from harness.results.metrics import METRICS, Metric
from harness.results.store import ResultSetWriter
from harness.steps import STEPS

Key = tuple[int, str]  # (the cell's position in the plan, the metric's test value or "")


@dataclass
class CellState:
    cell: int
    test: str
    last: Look | None = None
    stopped: str | None = None  # "tight", "max", or "no-metric" (its usable runs report none: not judged)

    def as_record(self, cells: list[Cell], ran: dict[int, int]) -> dict[str, Any]:
        cell = cells[self.cell]
        width = None if self.last is None or not math.isfinite(self.last.halfwidth_pct) else \
            round(self.last.halfwidth_pct, 2)
        return {"step": cell.label, "params": cell.params, "cache": cell.cache, "test": self.test,
                "reason": self.stopped or "running", "rounds": self.last.rounds if self.last else 0,
                "n": self.last.n if self.last else 0, "halfwidth_pct": width,
                "rounds_run": ran.get(self.cell, 0)}  # more than rounds: a baseline kept running for others


@dataclass
class Steering:
    ctx: CampaignContext
    writer: ResultSetWriter
    target: str
    spec: RoundsSpec
    metric: Metric
    observed: dict[Key, list[float]] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)  # run ids read (each once)
    states: dict[Key, CellState] = field(default_factory=dict)
    ran: dict[int, int] = field(default_factory=dict)  # per cell, the last round of a usable run read

    @classmethod
    def of(cls, ctx: CampaignContext, writer: ResultSetWriter, target: str) -> Steering | None:
        spec = ctx.experiment.rounds
        if not isinstance(spec, RoundsSpec):
            return None
        steering = cls(ctx, writer, target, spec, METRICS[spec.until.metric])
        steering._restore()
        return steering

    def _restore(self) -> None:
        """A resumed set: the cells its manifest says stopped stay stopped as they were (tight at round 3 stays
        that, not tight at whichever round the resumed campaign looks first)."""
        with self.writer.lock:
            found = [t for t in self.writer.manifest.get("targets", []) if t.get("name") == self.target]
            record: dict[str, Any] = dict(found[0].get("stopping") or {}) if found else {}
        cells = self._cell_index()
        for saved in record.get("cells", []):
            cell = cells.get((saved.get("step"), saved.get("cache"), _frozen(saved.get("params") or {})))
            if cell is None or saved.get("reason") in (None, "running"):
                continue
            width = saved.get("halfwidth_pct")
            width = math.inf if width is None else float(width)
            state = CellState(cell, str(saved.get("test") or ""), stopped=str(saved["reason"]))
            state.last = Look(int(saved.get("rounds") or 0), int(saved.get("n") or 0), width,
                              saved["reason"] == "tight")
            self.states[(cell, state.test)] = state

    def left_over(self) -> list[PlannedRun]:
        """A resumed set's runs of the extra rounds (beyond the plan's ``min``) not done yet, as they were added."""
        cells = self._cell_index()
        with self.writer.lock:
            entries: list[dict[str, Any]] = [dict(e) for e in self.writer.manifest["runs"]
                                             if e.get("target") == self.target]
        runs = []
        for entry in entries:
            cell = cells.get(_key_of(entry))
            if (cell is None or int(entry.get("round") or 0) <= self.spec.min or entry.get("retry_of")
                    or (self.target, entry["run_id"]) in self.ctx.keep):
                continue
            estimate = float(entry.get("estimate_s") or 0)
            runs.append(PlannedRun(int(entry["index"]), entry["run_id"], self.ctx.plan.cells[cell],
                                   int(entry["round"]), int(entry.get("repeat") or 1), estimate))
        return runs

    def resumed(self) -> list[PlannedRun]:
        """A resumed set whose every run is done: the round after its last one, if the rule wants one (a stop
        can land between a round's last run and its judgement)."""
        with self.writer.lock:
            last = max((int(e.get("round") or 0) for e in self.writer.manifest["runs"]
                        if e.get("target") == self.target), default=0)
        return self.after_round(last) if last else []

    def after_round(self, round_: int) -> list[PlannedRun]:
        """The runs of the next round (none: every cell stopped), added to the manifest; the record saved."""
        self._read_new_runs()
        going = self._judge(round_)
        self.writer.update_target(self.target, stopping=self.record())
        if not going:
            return []
        cells = self.ctx.plan.cells
        with self.writer.lock:
            mine = [e for e in self.writer.manifest["runs"] if e.get("target") == self.target]
            first = max((e.get("index", 0) for e in mine), default=0) + 1
        runs = round_runs(self.ctx.plan, [cells[i] for i in sorted(going)], round_ + 1, first)
        target = next(t for t in self.ctx.targets if t.name == self.target)
        for run in runs:
            self.writer.add_run(planned(target, run))
        with self.writer.lock:  # the bar counts this session's runs: the planned, retried and added ones
            total = sum(e.get("target") == self.target and (self.target, e["run_id"]) not in self.ctx.keep
                        for e in self.writer.manifest["runs"])
        self.ctx.progress.target_started(self.target, total)
        names = ", ".join(f"{cells[i].label} {_params(cells[i])}" for i in sorted(going))
        self.ctx.progress.message(f"{self.target}: round {round_ + 1}: {len(going)} cell(s) not tight yet: {names}")
        return runs

    def _judge(self, round_: int) -> set[int]:
        """Each cell's look after ``round_``; the cells (plan positions) that run the next round."""
        until, n_looks = self.spec.until, looks(self.spec.min, self.spec.max)
        for key, state in self._all_states().items():
            if state.stopped is not None:
                continue
            if key not in self.observed and self.ran.get(state.cell) and round_ >= self.spec.min:
                state.stopped = "no-metric"  # e.g. a read step in an experiment judged by decode_tps
                continue
            state.last = look(self.observed.get(key, []), round_, target_pct=until.ci_halfwidth_pct,
                              confidence=until.confidence, n_looks=n_looks, rule=until.rule)
            if round_ >= self.spec.min and state.last.tight and until.stop == "cell":
                state.stopped = "tight"
        states = self.states.values()
        judged = [s for s in states if s.stopped != "no-metric"]
        if until.stop == "all" and round_ >= self.spec.min and all(s.last is not None and s.last.tight for s in judged):
            for state in judged:
                state.stopped = "tight"
        if round_ >= self.spec.max:
            for state in states:
                state.stopped = state.stopped or ("tight" if state.last and state.last.tight else "max")
        going = {s.cell for s in states if s.stopped is None}
        return going | self._baselines_of(going) if going else set()

    def _all_states(self) -> dict[Key, CellState]:
        for key in self.observed:
            self.states.setdefault(key, CellState(*key))
        for index in range(len(self.ctx.plan.cells)):  # a cell with no usable run yet has no interval: not tight
            keys = [key for key in self.states if key[0] == index]
            if not keys:
                self.states[(index, "")] = CellState(index, "")
            elif len(keys) > 1 and (index, "") in keys and (index, "") not in self.observed:
                del self.states[(index, "")]  # its tests were seen since: they are judged instead
        return self.states

    def _baselines_of(self, going: Iterable[int]) -> set[int]:
        """The baseline cell of each running cell's step and cache condition (stop: cell keeps it running)."""
        cells, exp = self.ctx.plan.cells, self.ctx.experiment
        base = {key: (exp.baseline or {}).get(key, values[0]) for key, values in exp.matrix.items()}
        found = set()
        for index in going:
            for other, cell in enumerate(cells):
                same_place = (cell.step_index, cell.cache) == (cells[index].step_index, cells[index].cache)
                if same_place and all(cell.params.get(k) == v for k, v in base.items() if k in cell.params):
                    found.add(other)
        return found

    def _read_new_runs(self) -> None:
        """The metric's observations of every usable run of this target not read yet (the step's own ingest)."""
        index = self._cell_index()
        with self.writer.lock:
            entries: list[dict[str, Any]] = [dict(e) for e in self.writer.manifest["runs"]
                                             if e.get("target") == self.target]
        for entry in entries:
            run_id = entry["run_id"]
            if run_id in self.read or entry.get("status") != "ok" or entry.get("perturbed"):
                continue
            cell = index.get(_key_of(entry))
            if cell is None:
                continue
            self.read.add(run_id)
            self.ran[cell] = max(self.ran.get(cell, 0), int(entry.get("round") or 0))
            for test, values in self._observations(entry).items():
                self.observed.setdefault((cell, test), []).extend(values)

    def _cell_index(self) -> dict[tuple[Any, ...], int]:
        return {(c.label, c.cache, _frozen(c.params)): i for i, c in enumerate(self.ctx.plan.cells)}

    def _observations(self, entry: dict[str, Any]) -> dict[str, list[float]]:
        raw = self.writer.raw_dir(self.target, entry["run_id"])
        try:
            record = json.loads((raw / "run.json").read_text())
            rows = STEPS[entry["step"]].ingest(raw, record).get(self.metric.table.name, [])
        except (OSError, ValueError):
            return {}  # unreadable output: no observation (the tables will say why)
        frame = pd.DataFrame(rows)
        if frame.empty or not set(self.metric.needs) <= set(frame.columns):
            return {}
        frame = frame.assign(_value=self.metric.observations(frame))
        test = self.metric.test
        groups = frame.groupby(frame[test].astype(str)) if test and test in frame else [("", frame)]
        out = {}
        for name, group in groups:
            finite = [float(v) for v in group["_value"] if math.isfinite(v)]
            if finite:
                out[str(name)] = finite
        return out

    def record(self) -> dict[str, Any]:
        """The manifest's word on it: the rule, and per cell (and test) its last look and why it stopped."""
        until = self.spec.until
        cells = self.ctx.plan.cells
        states = list(self.states.values())
        return {"metric": until.metric, "ci_halfwidth_pct": until.ci_halfwidth_pct, "confidence": until.confidence,
                "rule": until.rule, "stop": until.stop, "min": self.spec.min, "max": self.spec.max,
                "looks": looks(self.spec.min, self.spec.max),
                "cells": [s.as_record(cells, self.ran) for s in sorted(states, key=lambda s: (s.cell, s.test))]}


def _key_of(entry: dict[str, Any]) -> tuple[Any, ...]:
    """A manifest entry's cell, as _cell_index keys the plan's."""
    return entry.get("step_label"), entry.get("cache"), _frozen(entry.get("params") or {})


def _frozen(params: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), repr(v)) for k, v in params.items()))


def _params(cell: Cell) -> str:
    return " ".join(f"{k}={v}" for k, v in cell.params.items()) or cell.cache

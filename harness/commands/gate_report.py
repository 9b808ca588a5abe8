"""What ``harness gate`` leaves for CI besides its table: a JUnit XML file (one test case per cell and metric; a
regression is a failure with ratio, interval and p; an insufficient cell is skipped; an infrastructure failure is
an error, never a failure) and a markdown summary appended to ``$GITHUB_STEP_SUMMARY``."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from harness.commands.comparison import Across, Columns, group_by_metric, markdown_table, visible_columns

COLUMNS: Columns = [(c, c) for c in ("target", "step", "test", "metric", "variant", "baseline", "n")] + [
    ("ratio", "ratio"), ("95% CI", "ci"), ("p", "p"), ("limit", "limit"), ("verdict", "verdict"),
    ("why", "reason")]
PER_METRIC = ("metric", "baseline", "limit")  # said once in a per-metric table's title


class AxisRegressions(TypedDict):
    """With --across: how many of one axis value's cells regressed on one metric (JSON ``regressed``)."""

    axis: str
    value: str
    metric: str
    regressions: int
    cells: int


def table_columns(rows: list[dict[str, Any]]) -> Columns:
    """The columns of one metric's gate table."""
    return visible_columns(rows, COLUMNS, PER_METRIC)


@dataclass
class GateOutcome:
    set_id: str
    baseline: str  # the baseline variant, or the baseline set's id
    mode: str  # same-session | cross-session
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    confirmation: str | None = None  # the confirmation set's path
    across: Across | None = None  # --across: the axis and its baseline value

    def regressed(self) -> list[AxisRegressions]:
        """With --across: per value of the axis (other than the baseline's) and metric, how many of its cells
        regressed against the baseline value's, in order of first appearance."""
        if self.across is None:
            return []
        counts: dict[tuple[str, str], list[int]] = {}
        for row in self.rows:
            seen = counts.setdefault((row["axis_value"], row["metric"]), [0, 0])
            seen[0] += row["verdict"] == "regression"
            seen[1] += 1
        return [AxisRegressions(axis=self.across.axis, value=value, metric=metric, regressions=n, cells=cells)
                for (value, metric), (n, cells) in counts.items()]

    def regressed_lines(self) -> list[str]:
        """Which value of the axis regressed, one line each ("build strategies regressed decode_tps in 2 of 4
        cells"), or one line saying none did; nothing without --across."""
        if self.across is None:
            return []
        lines = [f"{c['axis']} {c['value']} regressed {c['metric']} in {c['regressions']} of {c['cells']} cells"
                 for c in self.regressed() if c["regressions"]]
        return lines or [f"no {self.across.axis} regressed"]

    def by_metric(self) -> dict[str, list[dict[str, Any]]]:
        return group_by_metric(self.rows)

    def count(self, verdict: str) -> int:
        return sum(row["verdict"] == verdict for row in self.rows)

    @property
    def failed(self) -> bool:
        return self.count("regression") > 0

    def headline(self) -> str:
        counts = ", ".join(f"{self.count(v)} {v}" for v in ("regression", "improvement", "pass", "insufficient")
                           if self.count(v))
        return f"gate {'FAILED' if self.failed else 'passed'}: {counts}"

    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "set": self.set_id, "baseline": self.baseline, "mode": self.mode, "result": self.headline(),
            "exit_code": 1 if self.failed else 0, "confirmation": self.confirmation, "notes": self.notes,
            "cells": self.rows}
        if self.across is not None:
            document.update(across={"axis": self.across.axis, "baseline_value": self.across.value},
                            regressed=self.regressed(), summary=self.regressed_lines())
        return document


def failure_message(row: dict[str, Any]) -> str:
    return (f"ratio {row['ratio']:.3f} (95% CI {row['ci']}), p = {row['p']:.2g}, limit {row['limit']:.3f} "
            f"(n = {row['n']})")


def _suite(name: str, cases: list[ET.Element]) -> ET.Element:
    suites = ET.Element("testsuites", name="harness gate")
    suite = ET.SubElement(suites, "testsuite", name=name)
    suite.extend(cases)
    totals = {"tests": len(cases), "failures": sum(c.find("failure") is not None for c in cases),
              "errors": sum(c.find("error") is not None for c in cases),
              "skipped": sum(c.find("skipped") is not None for c in cases)}
    for element in (suites, suite):
        for key, value in totals.items():
            element.set(key, str(value))
    return suites


def write_junit(path: Path, outcome: GateOutcome) -> None:
    cases = []
    for row in outcome.rows:
        case = ET.Element("testcase", classname=".".join(filter(None, (row["target"], row["step"], row["test"]))),
                          name=f"{row['metric']}: {row['variant']} vs {row['baseline']}", time="0")
        if row["verdict"] == "regression":
            ET.SubElement(case, "failure", message=failure_message(row), type="regression").text = row["reason"]
        elif row["verdict"] == "insufficient":
            ET.SubElement(case, "skipped", message=f"insufficient: {row['reason']}")
        cases.append(case)
    _write(path, _suite(f"gate {outcome.set_id} vs {outcome.baseline}", cases))


def write_junit_error(path: Path, set_name: str, message: str) -> None:
    """An infrastructure failure as one errored test case: CI shows it as broken, not as failed."""
    case = ET.Element("testcase", classname="harness.gate", name=f"measure {set_name}", time="0")
    ET.SubElement(case, "error", message=message, type="infrastructure")
    _write(path, _suite(f"gate {set_name}", [case]))


def _write(path: Path, root: ET.Element) -> None:
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def markdown(outcome: GateOutcome) -> str:
    lines = [f"### harness gate: {outcome.set_id} vs {outcome.baseline}", "", f"**{outcome.headline()}**", ""]
    for line in outcome.regressed_lines():  # which build (value of the --across axis) regressed
        lines += [f"**{line}**", ""]
    lines += [f"- {note}" for note in outcome.notes] + ([""] if outcome.notes else [])
    return "\n".join(lines + [markdown_table(outcome.rows, COLUMNS), ""])


def append_step_summary(text: str) -> None:
    """Append to ``$GITHUB_STEP_SUMMARY`` when the job has one (GitHub Actions sets it for every step)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")

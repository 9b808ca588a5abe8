"""``harness probe TARGET...``: targets' facts and, when given, their expectation results.

Expectations come from an experiment's ``expect:`` block (``--experiment``) and/or ``--expect
KEY=VALUE`` (VALUE is YAML: ``--expect nvme_link='{gts: 8, width: 4}'``); the options win. Exit 1
when an expectation fails, so a CI job or a script can gate on a board's state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.table import Table

from harness.boards.inventory import load_targets, select_targets
from harness.boards.platforms import PLATFORMS
from harness.commands.common import TargetsDirOpt, console
from harness.errors import ExpectationError, UsageError

# Shown first in the table; everything else follows in name order (raw tool outputs last).
HEADLINE = ("platform_detected", "board_model", "l4t_release", "power_mode_name", "power_mode_id", "gpu_table_max_hz",
            "gpu_max_freq_hz", "gpu_cur_freq_hz", "cpu_max_khz", "cpu_table_max_khz", "gui", "default_target",
            "mem_total_bytes", "zram_bytes", "nvme_links", "model", "android_release", "soc", "os", "kernel")


def parse_expect(options: list[str]) -> dict[str, Any]:
    expect: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--expect {option!r}: expected KEY=VALUE, e.g. --expect power_mode=MAXN_SUPER")
        try:
            expect[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise UsageError(f"--expect {key}: value is not YAML ({str(exc).splitlines()[0]})") from None
    return expect


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def _probe_one(chosen: Any, wanted: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    from harness.boards.session import open_session

    known = PLATFORMS[chosen.platform].expectations
    unknown = [name for name in wanted if name not in known]
    if unknown:  # before connecting: a typo is not a board problem
        raise UsageError(f"unknown expectation {unknown[0]!r} for platform {chosen.platform} "
                         f"(known: {', '.join(known)})")
    session = open_session(chosen)
    try:
        facts = session.platform.probe(session, [])
        results = session.platform.check(wanted, facts, session) if wanted else []
    finally:
        session.close()
    return facts, results


def _print_table(chosen: Any, facts: dict[str, Any], results: list[Any]) -> None:
    table = Table(title=f"{chosen.name} ({chosen.platform})", title_justify="left")
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    ordered = [k for k in HEADLINE if k in facts] + sorted(k for k in facts if k not in HEADLINE
                                                          and not k.endswith("_raw"))
    for key in ordered:
        if facts[key] not in (None, {}, []):
            table.add_row(key, _value(facts[key]))
    console.print(table)
    if results:
        checks = Table(title="expectations", title_justify="left")
        for col in ("expectation", "expected", "seen", "result", "why"):
            checks.add_column(col, overflow="fold")
        for r in results:
            checks.add_row(r.name, _value(r.expected), _value(r.seen), "ok" if r.ok else "[red]FAILED[/]",
                           r.message)
        console.print(checks)


def probe(targets: list[str] = typer.Argument(..., help="target names or tag:X (several boards at once)"),
          expect: list[str] = typer.Option([], "--expect", help="KEY=VALUE expectation (repeatable)"),
          experiment: Path = typer.Option(None, "--experiment", help="take the expect: block of this experiment"),
          fmt: str = typer.Option("table", "--format", help="table, or json (one object per target per line)"),
          targets_dir: Path = TargetsDirOpt) -> None:
    """Print targets' facts and check expectations (exit 1 if one fails on any target)."""
    if fmt not in ("table", "json"):
        raise UsageError(f"--format: expected table or json, got {fmt!r}")
    wanted: dict[str, Any] = {}
    if experiment is not None:
        from harness.campaign.resolve import load_resolved

        wanted.update(load_resolved(experiment).experiment.expect)
    wanted.update(parse_expect(expect))
    failures: list[str] = []
    for chosen in select_targets(targets, load_targets(targets_dir)):
        facts, results = _probe_one(chosen, wanted)
        if fmt == "json":
            typer.echo(json.dumps({"target": chosen.name, "platform": chosen.platform, "facts": facts,
                                   "expectations": [r.__dict__ for r in results]}, default=str))
        else:
            _print_table(chosen, facts, results)
        failed = [r for r in results if not r.ok]
        if failed:
            failures.append(f"{chosen.name}: {failed[0].name}: {failed[0].message}")
    if failures:
        raise ExpectationError(f"{len(failures)} target(s) failed an expectation; first: {failures[0]}")


def register(app: typer.Typer) -> None:
    app.command()(probe)

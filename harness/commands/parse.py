"""``harness parse KIND FILE``: any parser on any captured file, as tidy rows."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import typer

from harness.errors import UsageError
from harness.parsers import ParseError, parser_of
from harness.parsers import parse as run_parser
from harness.parsers.snapshots import parse_psi_file


def parse(kind: str = typer.Argument(..., help="parser kind (fio, blockstat, tegrastats, psi-io, ...)"),
          file: Path = typer.Argument(..., help="captured output; '-' for stdin"),
          fmt: str = typer.Option("json", "--format", help="json (array of objects) or csv")) -> None:
    """Print the tidy rows a parser reads from FILE."""
    try:  # before the file is read: a wrong kind is said as such, whatever the file
        parser_of(kind)
    except ParseError as exc:
        raise UsageError(str(exc)) from None
    if fmt not in ("json", "csv"):
        raise UsageError(f"--format: expected json or csv, got {fmt!r}")
    try:
        data = typer.get_binary_stream("stdin").read() if str(file) == "-" else file.read_bytes()
    except OSError as exc:
        raise UsageError(f"{file}: {exc.strerror}") from None
    try:  # a bare io.pressure says its resource only by its name
        rows = parse_psi_file(data, str(file)) if kind == "psi" and str(file) != "-" else run_parser(kind, data)
    except ParseError as exc:
        raise UsageError(f"{file}: {exc}") from None
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=1, default=str))
        return
    columns = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})
    typer.echo(buffer.getvalue(), nl=False)


def register(app: typer.Typer) -> None:
    app.command()(parse)

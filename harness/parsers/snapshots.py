"""Sampled kernel files: ``/proc/vmstat``, ``/proc/pressure/*``, thermal zones, power supplies.

The runner writes them in one snapshot format (``runner/collectors/snapshots.py``)::

    # harness-snapshots v1 kind=vmstat period_ms=100
    @ 123456789 1700000000.123456
    nr_free_pages 1869754
    ...

A plain capture without ``@`` lines (``cat /proc/vmstat``) reads as one snapshot at t_ns = None.
Counters also get per-interval deltas (``d_<name>``): reclaim (pgscan, pgsteal), major faults and
refaults during decode are the page-cache thrash BigMoeOnEdge asked to make visible.
"""

from __future__ import annotations

import re

from ._common import numbered_lines
from .base import ParseError, register_parser

Snapshot = tuple[int | None, float | None, list[tuple[int, str]]]
# a row of these parsers: counters and stamps (int), rates, temperatures and seconds (float); None: not read
SnapshotRow = dict[str, int | float | None]

# Counters worth a delta column; everything else stays in the row as it was read.
VMSTAT_DELTAS = re.compile(r"^(pgscan_\w+|pgsteal_\w+|pgmajfault|pgfault|workingset_refault\w*|workingset_activate\w*"
                           r"|pswpin|pswpout|pgpgin|pgpgout|allocstall\w*|pgdeactivate|pgactivate)$")
_PSI = re.compile(r"^(memory|io|cpu|irq)\s+(some|full)\s+avg10=([\d.]+)\s+avg60=([\d.]+)\s+avg300=([\d.]+)"
                  r"\s+total=(\d+)$")


def snapshots(data: bytes) -> list[Snapshot]:
    """Split into (t_ns, wall_s, numbered lines) per snapshot."""
    out: list[Snapshot] = []
    current: list[tuple[int, str]] | None = None
    for number, line in numbered_lines(data):
        if line.startswith("#"):
            continue
        if line.startswith("@"):
            parts = line.split()
            if len(parts) != 3:
                raise ParseError(f"expected '@ <monotonic ns> <wall s>', got {line!r}", line=number)
            try:
                current = []
                out.append((int(parts[1]), float(parts[2]), current))
            except ValueError:
                raise ParseError(f"bad snapshot stamp {line!r}", line=number) from None
            continue
        if current is None:  # a plain capture: one snapshot without a time
            current = []
            out.append((None, None, current))
        current.append((number, line))
    return out


def _with_deltas(rows: list[SnapshotRow], keys: list[str]) -> list[SnapshotRow]:
    for prev, row in zip(rows, rows[1:], strict=False):
        t_ns, t_prev = row.get("t_ns"), prev.get("t_ns")
        if t_ns is not None and t_prev is not None:
            row["dt_s"] = (t_ns - t_prev) / 1e9
        for key in keys:
            value, before = row.get(key), prev.get(key)
            if isinstance(value, int) and isinstance(before, int):
                row[f"d_{key}"] = value - before
    return rows


def _name_and_int(line: str, number: int, expected: str) -> tuple[str, int]:
    """A ``<name> <integer>`` line (vmstat counters, thermal zones); anything else is a ParseError."""
    parts = line.split()
    if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
        raise ParseError(f"expected {expected}, got {line!r}", line=number)
    return parts[0], int(parts[1])


@register_parser("vmstat")
def parse_vmstat(data: bytes) -> list[SnapshotRow]:
    """One row per snapshot: every counter, plus ``d_<counter>`` for reclaim/fault/refault counters."""
    rows = []
    for t_ns, wall, lines in snapshots(data):
        row: SnapshotRow = {"t_ns": t_ns, "wall_s": wall}
        for number, line in lines:
            name, value = _name_and_int(line, number, "'<counter> <value>' (a /proc/vmstat line)")
            row[name] = value
        rows.append(row)
    if not rows:
        raise ParseError("no /proc/vmstat counters")
    keys = sorted({k for row in rows for k in row if VMSTAT_DELTAS.match(k)})
    return _with_deltas(rows, keys)


PSI_RESOURCES = ("cpu", "io", "memory", "irq")


def psi_resource_of_name(name: str) -> str | None:
    """The resource a capture's file name says: ``/proc/pressure/io``, ``io.pressure`` (cgroup v2),
    ``proc-pressure-io.txt``, ``memory.pressure-6.18.txt``; None when the name does not say one (``psi.txt``).
    Only a name with ``pressure`` in it counts, unless it is the bare resource (``/proc/pressure/`` copied as is)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if base in PSI_RESOURCES:
        return base
    if "pressure" not in base:
        return None
    found = [m.group(1) for m in re.finditer(r"(?:^|[-_.])(cpu|io|memory|irq)(?=$|[-_.])", base)]
    return found[0] if len(set(found)) == 1 else None


def _parse_psi(data: bytes, resource: str | None, *, strict: bool = True) -> list[SnapshotRow]:
    """One row per snapshot: ``<res>_<some|full>_avg10_pct`` ... and ``<res>_<kind>_total_us`` (+ deltas).

    The harness's own snapshots prefix each line with its resource (``memory some avg10=...``). A bare capture
    (``cat /proc/pressure/io``, a cgroup's ``io.pressure``) does not say which resource it is: ``resource`` (from
    the kind ``psi-io`` ...) names it, and without one a bare line is a ParseError rather than a guess. ``strict``:
    a prefixed line must be of ``resource`` too (False when the resource is only the file name's guess)."""
    rows = []
    for t_ns, wall, lines in snapshots(data):
        row: SnapshotRow = {"t_ns": t_ns, "wall_s": wall}
        for number, line in lines:
            if line.startswith(("some ", "full ")):
                if resource is None:
                    raise ParseError(f"a bare pressure line {line[:40]!r} does not say its resource: parse it as "
                                     f"{', '.join('psi-' + r for r in PSI_RESOURCES)} (or a file named after it, "
                                     "e.g. io.pressure)", line=number)
                line = f"{resource} {line}"
            match = _PSI.match(line)
            if not match:
                raise ParseError(f"expected a /proc/pressure line ('some avg10=... total=...'), got {line!r}",
                                 line=number)
            res, kind, a10, a60, a300, total = match.groups()
            if strict and resource is not None and res != resource:
                raise ParseError(f"the line says {res} pressure but the capture is read as psi-{resource}",
                                 line=number)
            if res == "irq" and kind == "some":  # the kernel's irq file has only 'full' (6.1+)
                raise ParseError("a 'some' line in irq pressure: /proc/pressure/irq has only a 'full' line; "
                                 "is this another resource's file?", line=number)
            stem = f"{res}_{kind}"
            if f"{stem}_total_us" in row:
                raise ParseError(f"a second '{res} {kind}' line in one snapshot (several pressure files run "
                                 "together? parse each on its own, or use the harness's psi snapshots)",
                                 line=number)
            row.update({f"{stem}_avg10_pct": float(a10), f"{stem}_avg60_pct": float(a60),
                        f"{stem}_avg300_pct": float(a300), f"{stem}_total_us": int(total)})
        rows.append(row)
    if not rows:
        raise ParseError("no pressure lines")
    return _with_deltas(rows, sorted({k for row in rows for k in row if k.endswith("_total_us")}))


@register_parser("psi")
def parse_psi(data: bytes) -> list[SnapshotRow]:
    """The harness's psi snapshots, or any capture whose lines carry their resource (``io some avg10=...``)."""
    return _parse_psi(data, None)


def parse_psi_file(data: bytes, name: str) -> list[SnapshotRow]:
    """``harness parse psi FILE``: as ``psi``, with bare lines read as the resource the file's name says."""
    return _parse_psi(data, psi_resource_of_name(name), strict=False)


def _psi_of(resource: str) -> None:
    def parse_bare(data: bytes) -> list[SnapshotRow]:
        return _parse_psi(data, resource)

    parse_bare.__doc__ = f"A bare /proc/pressure/{resource} or cgroup {resource}.pressure capture."
    register_parser(f"psi-{resource}")(parse_bare)


for _resource in PSI_RESOURCES:  # psi-cpu, psi-io, psi-memory, psi-irq: a bare capture of that resource
    _psi_of(_resource)


@register_parser("thermal")
def parse_thermal(data: bytes) -> list[SnapshotRow]:
    """One row per snapshot: ``temp_<zone type>_c`` (millidegrees in sysfs; offline/negative kept as read)."""
    rows = []
    for t_ns, wall, lines in snapshots(data):
        row: SnapshotRow = {"t_ns": t_ns, "wall_s": wall}
        for number, line in lines:
            zone, millidegrees = _name_and_int(line, number, "'<zone type> <millidegrees C>'")
            row[f"temp_{zone.lower().replace('-', '_')}_c"] = millidegrees / 1000.0
        rows.append(row)
    return rows


# power_supply units: the ABI says uA and uV, some vendor drivers print mA and mV. A battery is 2.5-20 V, so a
# voltage below 100000 is mV; a board that measures energy draws 10 mA at the very least, so a supply whose current
# never reaches 10000 in a whole capture is in mA (the cut-off the Android charging controller acc applies to the
# same files).
MV_BELOW = 100_000
MA_BELOW = 10_000
DISCHARGE = "power_battery_discharge_mw"


def _supply_lines(data: bytes) -> list[tuple[int | None, float | None, list[tuple[int, str, int, int | None,
                                                                                     str | None, str | None]]]]:
    out = []
    for t_ns, wall, lines in snapshots(data):
        supplies = []
        for number, line in lines:
            parts = line.split()
            if len(parts) not in (3, 5) or not parts[1].lstrip("-").isdigit():
                raise ParseError(f"expected '<supply> <current_now uA> <voltage_now uV|-> [<type> <status>]', got "
                                 f"{line!r}", line=number)
            voltage = int(parts[2]) if parts[2].lstrip("-").isdigit() else None
            kind, status = (parts[3], parts[4]) if len(parts) == 5 else (None, None)
            supplies.append((number, parts[0].lower().replace("-", "_"), int(parts[1]), voltage,
                             None if kind == "-" else kind, None if status == "-" else status))
        out.append((t_ns, wall, supplies))
    return out


@register_parser("power")
def parse_power(data: bytes) -> list[SnapshotRow]:
    """One row per snapshot: per supply ``<name>_current_ua``, ``_voltage_uv`` (in the ABI's units, vendor mA and mV
    scaled), ``_power_mw`` (|I x V|) and ``<name>_discharging`` (1/0, where the runner read type and status), and
    ``power_battery_discharge_mw``: the batteries' draw when every battery discharges, else null (on a charger the
    battery's reading is not the board's draw). The sign of current_now is not used for it: the ABI says negative
    while discharging, many vendor drivers print it positive; the status file says which."""
    parsed = _supply_lines(data)
    peak: dict[str, int] = {}
    for _t, _w, supplies in parsed:
        for _n, name, current, _v, _k, _s in supplies:
            peak[name] = max(peak.get(name, 0), abs(current))
    rows = []
    for t_ns, wall, supplies in parsed:
        row: SnapshotRow = {"t_ns": t_ns, "wall_s": wall}
        draws: list[float | None] = []
        for _number, name, current, voltage, kind, status in supplies:
            scale = 1000 if 0 < peak[name] < MA_BELOW else 1
            current_ua = current * scale
            voltage_uv = None if voltage is None else voltage * (1000 if 0 < abs(voltage) < MV_BELOW else 1)
            row[f"{name}_current_ua"], row[f"{name}_voltage_uv"] = current_ua, voltage_uv
            power = abs(current_ua * voltage_uv) / 1e9 if voltage_uv is not None else None
            row[f"power_{name}_mw"] = power
            if kind is not None:
                row[f"{name}_discharging"] = int(status == "Discharging")
            if kind == "Battery":
                draws.append(power if status == "Discharging" else None)
        if draws:
            row[DISCHARGE] = None if None in draws else sum(d for d in draws if d is not None)
        rows.append(row)
    return rows


RECLAIM_COUNTERS = ("pgmajfault", "workingset_refault_file", "workingset_refault_anon", "pswpin", "pswpout",
                    "pgpgin", "pgpgout")


def reclaim_summary(rows: list[SnapshotRow]) -> SnapshotRow:
    """What the whole sampled window reclaimed and re-read: first to last snapshot of /proc/vmstat.

    pgscan/pgsteal are summed over their kswapd/direct/khugepaged variants (names differ by kernel);
    ``direct`` reclaim (the reading thread itself stalls to free pages) is kept apart."""
    if len(rows) < 2:
        return {}
    first, last = rows[0], rows[-1]

    def delta(key: str) -> int | None:
        a, b = first.get(key), last.get(key)
        return b - a if isinstance(a, int) and isinstance(b, int) else None

    out: SnapshotRow = {"samples": len(rows)}
    t_first, t_last = first.get("t_ns"), last.get("t_ns")
    if t_first is not None and t_last is not None:
        out["window_s"] = (t_last - t_first) / 1e9
    for stem in ("pgscan", "pgsteal"):
        keys = [k for k in last if k.startswith(stem + "_") and delta(k) is not None]
        out[f"{stem}_pages"] = sum(delta(k) or 0 for k in keys) if keys else None
        direct = [k for k in keys if k.startswith(stem + "_direct")]
        out[f"{stem}_direct_pages"] = sum(delta(k) or 0 for k in direct) if direct else None
    for key in RECLAIM_COUNTERS:
        out[key] = delta(key)
    return out

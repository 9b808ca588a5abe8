"""macOS tools: ``iostat -d -w N``, ``vm_stat``, ``powermetrics``, ``sysctl``, ``sw_vers``, ``diskutil info``.

Each was checked against real captures (tests/data/macos/SOURCE.md). macOS has no /proc: these are
what the harness reads there for block I/O, memory pressure and power.
"""

from __future__ import annotations

import re
from datetime import datetime

from ._common import numbered_lines
from .base import ParseError, register_parser
from .snapshots import SnapshotRow, _with_deltas, snapshots

# a row of what these tools print: names and levels (str), yes/no (bool), counts and readings (int, float)
ToolRow = dict[str, str | bool | int | float | None]

_VM_HEADER = re.compile(r"page size of (\d+) bytes")
_VM_LINE = re.compile(r'^"?([^":]+?)"?:\s+(\d+)\.?$')
_PM_SAMPLE = re.compile(r"^\*\*\* Sampled system activity \((.+?)\) \(([\d.]+)ms elapsed\) \*\*\*$")
_PM_POWER = re.compile(r"^(CPU|GPU|ANE|Combined|E-Cluster|P-Cluster|P0-Cluster|P1-Cluster|DRAM|Package)"
                       r"(?: Power| Power \(CPU \+ GPU \+ ANE\))?: (\d+) mW$")
_PM_FREQ = re.compile(r"^(E|P|P0|P1)-Cluster HW active frequency: (\d+) MHz$")
_PM_RES = re.compile(r"^(E|P|P0|P1)-Cluster HW active residency:\s+([\d.]+)%")
_PM_GPU_FREQ = re.compile(r"^GPU (?:HW )?active frequency: (\d+) MHz$")
_PM_GPU_RES = re.compile(r"^GPU (?:HW )?active residency:\s+([\d.]+)%")
_PM_PRESSURE = re.compile(r"^Current pressure level: (\w+)$")
_PM_TEMP = re.compile(r"^(CPU|GPU) die temperature: ([\d.]+) C$")


def _snake(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


@register_parser("iostat")
def parse_iostat(data: bytes) -> list[ToolRow]:
    """One row per disk per sample: kb_per_transfer, tps, mb_per_s; sample 0 is the since-boot average.

    Reads ``iostat -d -w N`` and also the default layout with cpu/load columns (ignored); headers
    repeat every screenful and are skipped."""
    rows: list[ToolRow] = []
    disks: list[str] | None = None
    sample = 0
    for number, line in numbered_lines(data):
        words = line.split()
        if words[0].startswith("disk") or words[0] in ("cpu", "load"):
            disks = [w for w in words if w.startswith("disk")]
            continue
        if words[0] == "KB/t":
            continue
        if disks is None:
            raise ParseError("a data line before the 'diskN' header line (expected iostat output)", line=number)
        if len(words) < 3 * len(disks):
            raise ParseError(f"expected {3 * len(disks)} numbers for {', '.join(disks)}, got {line!r}", line=number)
        try:
            values = [float(w) for w in words[:3 * len(disks)]]
        except ValueError:
            raise ParseError(f"not a number in {line!r}", line=number) from None
        for i, disk in enumerate(disks):
            kbt, tps, mbs = values[3 * i:3 * i + 3]
            rows.append({"sample": sample, "since_boot": sample == 0, "disk": disk, "kb_per_transfer": kbt,
                         "tps": tps, "mb_per_s": mbs})
        sample += 1
    if not rows:
        raise ParseError("no iostat samples")
    return rows


def _vm_stat_row(lines: list[tuple[int, str]]) -> SnapshotRow:
    row: SnapshotRow = {"page_size_bytes": None}
    for number, line in lines:
        if line.startswith("Mach Virtual Memory Statistics"):
            header = _VM_HEADER.search(line)
            row["page_size_bytes"] = int(header.group(1)) if header else None
            continue
        match = _VM_LINE.match(line.strip())
        if not match:
            raise ParseError(f"expected 'Name: N.' (a vm_stat line), got {line!r}", line=number)
        row[_snake(match.group(1))] = int(match.group(2))
    if row["page_size_bytes"] is None:
        raise ParseError("no 'Mach Virtual Memory Statistics: (page size of N bytes)' header")
    return row


@register_parser("vm_stat")
def parse_vm_stat(data: bytes) -> list[SnapshotRow]:
    """One row per ``vm_stat`` output (a plain capture or the runner's snapshots): page counters by
    snake_case name (``pages_free``, ``pages_stored_in_compressor``, ``swapins``...), page size,
    and deltas of the cumulative counters (pageins, pageouts, swapins, swapouts, faults...)."""
    rows: list[SnapshotRow] = []
    for t_ns, wall, lines in snapshots(data):
        rows.append({"t_ns": t_ns, "wall_s": wall, **_vm_stat_row(lines)})
    if not rows:
        raise ParseError("no vm_stat output")
    cumulative = ("translation_faults", "pageins", "pageouts", "swapins", "swapouts", "compressions",
                  "decompressions", "pages_copy_on_write", "pages_zero_filled", "pages_reactivated", "pages_purged")
    return _with_deltas(rows, [k for k in cumulative if k in rows[-1]])


@register_parser("powermetrics")
def parse_powermetrics(data: bytes) -> list[ToolRow]:
    """One row per ``*** Sampled system activity`` block: its stamp (``wall_s``: Unix seconds, whole seconds as
    printed), power_<cpu|gpu|ane|combined>_mw, cluster frequencies and residencies, GPU frequency, die temperatures
    (Intel), thermal pressure."""
    rows: list[ToolRow] = []
    row: ToolRow | None = None
    for _number, line in numbered_lines(data):
        line = line.strip()
        if sample := _PM_SAMPLE.match(line):
            row = {"sample_time": sample.group(1), "wall_s": _stamp_seconds(sample.group(1)),
                   "elapsed_ms": float(sample.group(2))}
            rows.append(row)
            continue
        if row is None:
            continue  # the header (machine model, OS version, boot time)
        if power := _PM_POWER.match(line):
            row[f"power_{_snake(power.group(1))}_mw"] = int(power.group(2))
        elif freq := _PM_FREQ.match(line):
            row[f"{freq.group(1).lower()}_cluster_freq_mhz"] = int(freq.group(2))
        elif res := _PM_RES.match(line):
            row[f"{res.group(1).lower()}_cluster_active_pct"] = float(res.group(2))
        elif gpu := _PM_GPU_FREQ.match(line):
            row["gpu_freq_mhz"] = int(gpu.group(1))
        elif gres := _PM_GPU_RES.match(line):
            row["gpu_active_pct"] = float(gres.group(1))
        elif pressure := _PM_PRESSURE.match(line):
            row["thermal_pressure"] = pressure.group(1)
        elif temp := _PM_TEMP.match(line):
            row[f"temp_{temp.group(1).lower()}_c"] = float(temp.group(2))
    if not rows:
        raise ParseError("no '*** Sampled system activity' block (expected powermetrics output)")
    return rows


def _stamp_seconds(stamp: str) -> float | None:
    """``Fri Sep 11 13:41:46 2026 -0700`` as Unix seconds (its own UTC offset); None for another shape."""
    try:
        return datetime.strptime(stamp, "%a %b %d %H:%M:%S %Y %z").timestamp()
    except ValueError:
        return None


def _key_values(data: bytes, what: str) -> dict[str, str]:
    values = {}
    for number, line in numbered_lines(data):
        key, sep, value = line.partition(":")
        if not sep:
            raise ParseError(f"expected 'key: value' ({what}), got {line!r}", line=number)
        values[key.strip()] = value.strip()
    return values


@register_parser("sysctl")
def parse_sysctl(data: bytes) -> list[ToolRow]:
    """``sysctl NAME...`` / ``sysctl -a``: one row {name: value}, integers as ints."""
    values = _key_values(data, "sysctl output")
    return [{k: int(v) if v.lstrip("-").isdigit() else v for k, v in values.items()}]


@register_parser("sw_vers")
def parse_sw_vers(data: bytes) -> list[ToolRow]:
    values = _key_values(data, "sw_vers output")
    if "ProductVersion" not in values:
        raise ParseError("no ProductVersion (expected sw_vers output)")
    return [{"product_name": values.get("ProductName"), "product_version": values["ProductVersion"],
             "build_version": values.get("BuildVersion")}]


_SIZE = re.compile(r"\((\d+) Bytes\)")


@register_parser("diskutil")
def parse_diskutil(data: bytes) -> list[ToolRow]:
    """``diskutil info DISK``: one row with every field in snake_case, sizes in ``*_bytes``."""
    row: ToolRow = {}
    for _number, line in numbered_lines(data):
        key, sep, value = line.partition(":")
        if not sep:
            continue  # "This disk is an APFS Volume.  APFS Information:" style prose
        name, value = _snake(key), value.strip()
        size = _SIZE.search(value)
        if size:
            row[f"{name}_bytes"] = int(size.group(1))
        elif value in ("Yes", "No"):
            row[name] = value == "Yes"
        else:
            row[name] = value
    if "device_identifier" not in row:
        raise ParseError("no 'Device Identifier:' (expected diskutil info output)")
    return [row]

"""``fio --output-format=json`` -> one row per entry in ``jobs``.

fio prints warnings ("note: both iodepth >= 1 and synchronous I/O engine are selected...") on stdout
before the JSON, so the JSON starts at the first line beginning with ``{``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ._common import text_of
from .base import ParseError, register_parser

# The harness's named fio jobs, the seed article's QD ladder in ladder order: the fio step expands them into
# job options, the output carries their names as ``job_name``, and tables and figures list jobs in this order.
PRESETS: dict[str, dict[str, Any]] = {
    "randread-64k-qd1": {"rw": "randread", "bs": "64k", "iodepth": 1},
    "randread-64k-qd2": {"rw": "randread", "bs": "64k", "iodepth": 2},
    "randread-64k-qd4": {"rw": "randread", "bs": "64k", "iodepth": 4},
    "randread-128k-qd8": {"rw": "randread", "bs": "128k", "iodepth": 8},
    "read-1m-seq": {"rw": "read", "bs": "1m", "iodepth": 4},
}
LADDER = list(PRESETS)


def ordered_jobs(names: Iterable[str]) -> list[str]:
    """Job names once each: the ladder's presets in ladder order first, then custom jobs by name."""
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda n: (LADDER.index(n) if n in LADDER else len(LADDER), n))


# fio's defaults for options a job file may leave out (fio 3.x on Linux).
DEFAULT_BS_BYTES = 4096
DEFAULTS = {"rw": "read", "iodepth": 1, "numjobs": 1, "ioengine": "psync", "direct": 0}

_SIZE = re.compile(r"^\s*(0x[0-9a-f]+|\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def fio_size_bytes(value: str, kb_base: int = 1024) -> int:
    """A fio size string in bytes, by fio's own rules (parse.c ``__get_mult_bytes``).

    With the default ``kb_base=1024`` fio reads SI-looking suffixes as powers of two (``64k`` =
    ``64KB`` = 65536) and, for compatibility with old job files, IEC suffixes as powers of ten
    (``64KiB`` = 64000, checked with fio 3.33). ``kb_base=1000`` swaps the two.
    """
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"not a fio size: {value!r}")
    number, suffix = match.groups()
    amount = int(number, 16) if number.lower().startswith("0x") else float(number)
    suffix = suffix.lower()
    if suffix in ("", "b"):
        return int(amount)
    power = _POWERS.get(suffix[0])
    if power is None or suffix not in (suffix[0], suffix[0] + "b", suffix[0] + "ib"):
        raise ValueError(f"unknown unit in fio size {value!r}")
    base = kb_base
    if suffix.endswith("ib"):
        base = 1024 if kb_base == 1000 else 1000
    return int(amount * base**power)


def _load_json(data: bytes | str) -> dict[str, Any]:
    text = text_of(data)
    match = re.search(r"^\s*\{", text, re.MULTILINE)
    if match is None:
        raise ParseError("no JSON object found (expected fio --output-format=json output)")
    skipped_lines = text.count("\n", 0, match.start())
    try:
        # raw_decode: fio may print more warnings after the JSON ("fio: file hash not empty").
        doc, _ = json.JSONDecoder().raw_decode(text, match.start())
    except json.JSONDecodeError as exc:
        raise ParseError(f"invalid fio JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ParseError("fio JSON has no 'jobs' list", line=skipped_lines + 1)
    return doc


def _int_option(options: dict[str, str], name: str, job: str) -> int:
    raw = options.get(name)
    if raw is None:
        return int(DEFAULTS[name])
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ParseError(f"job {job!r}: option {name}={raw!r} is not an integer") from None


def _bool_option(raw: str) -> int:
    return 0 if str(raw).strip().lower() in ("0", "false", "no", "off") else 1


def _job_settings(options: dict[str, str], job: str) -> dict[str, Any]:
    kb_base = 1000 if str(options.get("kb_base", "1024")).strip() == "1000" else 1024
    bs_raw = options.get("bs", options.get("blocksize"))
    bs_bytes = DEFAULT_BS_BYTES
    if bs_raw is not None:
        # "bs=4k,8k[,16k]" gives read,write[,trim] sizes; an empty read part keeps the default.
        read_part = str(bs_raw).split(",")[0].strip()
        if read_part:
            try:
                bs_bytes = fio_size_bytes(read_part, kb_base)
            except ValueError as exc:
                raise ParseError(f"job {job!r}: option bs={bs_raw!r}: {exc}") from None
    if "direct" in options:
        direct = _bool_option(options["direct"])
    elif "buffered" in options:  # fio's inverse spelling of the same switch
        direct = 1 - _bool_option(options["buffered"])
    else:
        direct = DEFAULTS["direct"]
    return {
        "rw": options.get("rw", options.get("readwrite", DEFAULTS["rw"])),
        "bs_bytes": bs_bytes,
        "iodepth": _int_option(options, "iodepth", job),
        "numjobs": _int_option(options, "numjobs", job),
        "ioengine": options.get("ioengine", DEFAULTS["ioengine"]),
        "direct": direct,
    }


def _percentile_suffix(key: str) -> str:
    """'99.900000' -> '999', '50.000000' -> '50', '99.990000' -> '9999'."""
    return f"{float(key):g}".replace(".", "")


def _latency(stats: dict[str, Any] | None) -> float | None:
    """Mean of a fio latency block, or None when fio collected none (slat under psync: N=0)."""
    if not stats or not stats.get("N"):
        return None
    return stats.get("mean")


def _direction(prefix: str, block: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        f"{prefix}_iops": block.get("iops"),
        # bw_bytes is bytes/s; the plain "bw" key is KiB/s and easy to mix up.
        f"{prefix}_bw_bytes_per_s": block.get("bw_bytes"),
        f"{prefix}_io_bytes": block.get("io_bytes"),
        f"{prefix}_total_ios": block.get("total_ios"),
        f"{prefix}_runtime_ms": block.get("runtime"),
    }
    for kind in ("clat", "lat", "slat"):
        row[f"{prefix}_{kind}_mean_ns"] = _latency(block.get(f"{kind}_ns"))
    clat_pct = (block.get("clat_ns") or {}).get("percentile") or {}
    lat_pct = (block.get("lat_ns") or {}).get("percentile") or {}
    # Percentiles live under clat_ns by default, under lat_ns only with lat_percentiles=1
    # (under both when clat_percentiles stays on). Prefer clat; say which one filled the columns.
    chosen, source = (clat_pct, "clat") if clat_pct else (lat_pct, "lat") if lat_pct else ({}, None)
    for key, value in chosen.items():
        row[f"{prefix}_clat_p{_percentile_suffix(key)}_ns"] = value
    for key, value in lat_pct.items():
        row[f"{prefix}_lat_p{_percentile_suffix(key)}_ns"] = value
    row[f"{prefix}_percentile_source"] = source
    return row


@register_parser("fio")
def parse_fio(data: bytes) -> list[dict[str, Any]]:
    """One row per fio job: settings, read (and write/trim when used) results, CPU, options."""
    doc = _load_json(data)
    global_options = doc.get("global options") or {}
    rows = []
    for index, job in enumerate(doc["jobs"]):
        if not isinstance(job, dict):
            raise ParseError(f"jobs[{index}] is not an object")
        name = job.get("jobname", f"jobs[{index}]")
        options = {**global_options, **(job.get("job options") or {})}
        row: dict[str, Any] = {
            "fio_version": doc.get("fio version"),
            "fio_timestamp_ms": doc.get("timestamp_ms"),
            "job_name": name,
            "groupid": job.get("groupid"),
            "error": job.get("error"),
            **_job_settings(options, name),
            "runtime_ms": job.get("job_runtime"),
        }
        for direction in ("read", "write", "trim"):
            block = job.get(direction)
            if block is None:
                if direction == "read":
                    raise ParseError(f"job {name!r} has no 'read' results")
                continue
            # Write and trim columns only when the job did such I/O, so a read-only sweep stays narrow.
            if direction == "read" or block.get("io_bytes") or block.get("total_ios"):
                row.update(_direction(direction, block))
        row.update({
            "usr_cpu_pct": job.get("usr_cpu"),
            "sys_cpu_pct": job.get("sys_cpu"),
            "ctx": job.get("ctx"),
            "majf": job.get("majf"),
            "minf": job.get("minf"),
        })
        row.update({f"opt_{key}": value for key, value in options.items()})
        rows.append(row)
    return rows

"""``fio --output-format=json`` -> one row per entry in ``jobs`` (or ``client_stats``), fio 2.1 to 3.4x.

fio prints warnings ("note: both iodepth >= 1 and synchronous I/O engine are selected...") on stdout
before the JSON, so the JSON starts at the first line beginning with ``{``.

The JSON changed under the same key names over fio's life; what each version writes is read from fio's own
``stat.c`` (``add_ddir_status_json``) and ``client.c``, by tag, in github.com/axboe/fio:

- ``clat``/``lat``/``slat`` with means and ``percentile`` values in microseconds up to fio-2.21; ``*_ns`` in
  nanoseconds from fio-2.99/3.0 (commit d6bb626e). The harness's columns are nanoseconds either way.
- ``io_bytes`` in KiB (``io_bytes >> 10``) up to fio-2.20; bytes from fio-2.21, which added ``io_kbytes`` for
  the old value (commit c12d597a) -- so a block with ``io_kbytes`` has bytes, one without has KiB.
- ``bw`` is KiB/s in every version (``bytes * 1000 / runtime / 1024``); ``bw_bytes`` only from fio-3.2
  (commit aedd021d).
- A latency block without samples is all zeros (``calc_lat`` found none); fio-3.18 added its sample count ``N``
  (commit 56440e63). Percentile lists are padded with ``"0.00": 0`` entries up to fio-3.17.
- ``lat_percentiles=1`` (from fio-3.1, commit b599759b) puts total-latency percentiles under ``clat_ns`` up to
  fio-3.12; fio-3.13 moved them to ``lat_ns`` (commit e5eb6fbf).
- ``job options`` and ``global options`` from fio-2.3 (commit 66e19a38); fio 2.0-2.2 print no settings at all,
  so their setting columns stay None rather than fio's defaults.
- Client/server runs (``fio --client``) write ``client_stats`` instead of ``jobs``, each entry with the
  ``hostname`` of its server, plus an ``All clients`` sum when there are several servers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Literal, TypedDict

from ._common import Json, JsonObject, text_of
from .base import ParseError, register_parser

# The harness's named fio jobs, the seed article's QD ladder in ladder order: the fio step expands them into
# job options, the output carries their names as ``job_name``, and tables and figures list jobs in this order.
PRESETS: dict[str, dict[str, object]] = {  # fio options: str or int values
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


class FioDefaults(TypedDict):
    rw: str
    iodepth: int
    numjobs: int
    ioengine: str
    direct: int


DEFAULTS: FioDefaults = {"rw": "read", "iodepth": 1, "numjobs": 1, "ioengine": "psync", "direct": 0}
# one job's row: its settings, results and options as fio printed them (JSON values), None where it printed none;
# the percentile columns are named after the percentiles the job asked for
FioRow = dict[str, Json]

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


# fio's own first lines of other output formats, so a wrong --output-format is named, not guessed at.
_TERSE = re.compile(r"^\d+;fio-[^;]*;")  # --output-format=terse: "3;fio-3.33;jobname;..."
_NORMAL = re.compile(r"^\S.*: \(g(?:roupid)?=\d+|^Run status group \d+|^\s+(?:read|write) ?: (?:IOPS|io)=")


def _unknown_format(text: str) -> ParseError:
    for number, line in enumerate(text.splitlines(), start=1):
        if _TERSE.match(line):
            return ParseError("fio terse output, not JSON (run fio with --output-format=json)", line=number)
        if _NORMAL.match(line):
            return ParseError("fio normal (text) output, not JSON (run fio with --output-format=json)", line=number)
    return ParseError("no JSON object found (expected fio --output-format=json output)")


def _load_json(data: bytes | str) -> tuple[JsonObject, list[Json]]:
    """The JSON document and its list of job entries (``jobs``, or ``client_stats`` of a client/server run)."""
    text = text_of(data)
    match = re.search(r"^\s*\{", text, re.MULTILINE)
    if match is None:
        raise _unknown_format(text)
    start = match.end() - 1  # the "{" itself: raw_decode does not skip the blank lines \s* matched
    skipped_lines = text.count("\n", 0, start)
    try:
        # raw_decode: fio may print more warnings after the JSON ("fio: file hash not empty").
        doc, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise ParseError(f"invalid fio JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from exc
    if isinstance(doc, dict):
        for key in ("jobs", "client_stats"):
            if isinstance(entries := doc.get(key), list):
                return doc, entries
    raise ParseError("fio JSON has no 'jobs' list (nor a client/server 'client_stats' list)",
                     line=skipped_lines + 1)


def _int_option(options: JsonObject, name: Literal["iodepth", "numjobs"], job: Json) -> int:
    raw = options.get(name)
    if raw is None:
        return DEFAULTS[name]
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ParseError(f"job {job!r}: option {name}={raw!r} is not an integer") from None


def _bool_option(raw: Json) -> int:
    return 0 if str(raw).strip().lower() in ("0", "false", "no", "off") else 1


def _job_settings(options: JsonObject, job: Json) -> FioRow:
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


# fio before 2.3 printed no options: nothing says what the job ran, so nothing is filled in.
UNKNOWN_SETTINGS: FioRow = dict.fromkeys(("rw", "bs_bytes", "iodepth", "numjobs", "ioengine", "direct"))


def _percentile_suffix(key: str) -> str:
    """'99.900000' -> '999', '50.000000' -> '50', '99.990000' -> '9999'."""
    return f"{float(key):g}".replace(".", "")


def _sampled(stats: JsonObject | None) -> bool:
    """Whether fio collected any sample in this latency block (slat under psync has none).

    fio-3.18 on says so in ``N``; before it, a block without samples is written as all zeros
    (stat.c: ``if (!calc_lat(...)) min = max = 0; mean = dev = 0.0``).
    """
    if not stats:
        return False
    if "N" in stats:
        return bool(stats["N"])
    return any(stats.get(key) for key in ("min", "max", "mean", "stddev"))


def _ns(value: Json, scale: int) -> Json:
    """A latency in ns; usec means carry fio's 6 decimals ("%f"), so 3 stay in ns (no float residue)."""
    if scale == 1:
        return value
    if not isinstance(value, int | float):
        raise ParseError(f"latency {value!r} is not a number")
    return round(value * scale, 3)


def _object(value: Json) -> JsonObject:
    """``value`` where it is an object; {} for a missing (or empty) one."""
    return value if isinstance(value, dict) else {}


def _percentiles(stats: JsonObject, scale: int) -> dict[str, Json]:
    """{'99.900000': value} in ns; drops the ``"0.00": 0`` entries fio-3.17 and older pad the list with."""
    if not _sampled(stats):
        return {}
    return {key: _ns(value, scale) for key, value in _object(stats.get("percentile")).items() if float(key) > 0}


def _bytes(prefix: str, block: JsonObject, key: str, kib: bool) -> Json:
    value = block.get(key)
    if value is None or not kib:
        return value
    if not isinstance(value, int):
        raise ParseError(f"{prefix}.{key}={value!r} is not a whole number of KiB")
    return value * 1024


def _version(text: Json) -> tuple[int, ...] | None:
    """'fio-3.26-19-ge7e53' -> (3, 26); 'fio-2.1.3' -> (2, 1, 3); None when it reads otherwise."""
    match = re.match(r"fio-(\d+(?:\.\d+)*)", str(text or ""))
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def _lat_under_clat(version: tuple[int, ...] | None, options: JsonObject) -> bool:
    """fio-3.1 to 3.12 with lat_percentiles=1: the percentiles under ``clat_ns`` are total-latency ones."""
    return (version is not None and (3, 1) <= version < (3, 13)
            and _bool_option(options.get("lat_percentiles", "0")) == 1)


def _direction(prefix: str, block: JsonObject, lat_under_clat: bool = False) -> FioRow:
    # fio-2.21 made io_bytes bytes and kept the old KiB value as io_kbytes: no io_kbytes, io_bytes is KiB.
    kib = "io_bytes" in block and "io_kbytes" not in block
    bw_bytes = block.get("bw_bytes")
    if bw_bytes is None and (bw := block.get("bw")) is not None:
        # Before fio-3.2 only "bw", KiB/s (fio: bytes/s // 1024, so up to 1023 B/s under the exact value).
        if not isinstance(bw, int | float):
            raise ParseError(f"{prefix}.bw={bw!r} is not a number")
        bw_bytes = bw * 1024
    row: FioRow = {
        f"{prefix}_iops": block.get("iops"),
        f"{prefix}_bw_bytes_per_s": bw_bytes,
        f"{prefix}_io_bytes": _bytes(prefix, block, "io_bytes", kib),
        f"{prefix}_total_ios": block.get("total_ios"),
        f"{prefix}_runtime_ms": block.get("runtime"),
    }
    # fio-3.x: *_ns blocks in ns; fio-2.x: the same blocks without the suffix, in usec.
    unit_ns = "clat_ns" in block or "lat_ns" in block or "slat_ns" in block
    scale, suffix = (1, "_ns") if unit_ns else (1000, "")
    stats = {kind: _object(block.get(f"{kind}{suffix}")) for kind in ("clat", "lat", "slat")}
    for kind, block_stats in stats.items():
        mean = block_stats.get("mean") if _sampled(block_stats) else None
        row[f"{prefix}_{kind}_mean_ns"] = None if mean is None else _ns(mean, scale)
    clat_pct, lat_pct = _percentiles(stats["clat"], scale), _percentiles(stats["lat"], scale)
    if lat_under_clat and clat_pct and not lat_pct:
        clat_pct, lat_pct = {}, clat_pct
    # Percentiles live under clat_ns by default, under lat_ns only with lat_percentiles=1
    # (under both when clat_percentiles stays on). Prefer clat; say which one filled the columns.
    chosen, source = (clat_pct, "clat") if clat_pct else (lat_pct, "lat") if lat_pct else ({}, None)
    for key, value in chosen.items():
        row[f"{prefix}_clat_p{_percentile_suffix(key)}_ns"] = value
    for key, value in lat_pct.items():
        row[f"{prefix}_lat_p{_percentile_suffix(key)}_ns"] = value
    row[f"{prefix}_percentile_source"] = source
    return row


# "mixed": unified_rw_reporting=1 sums reads and writes into one block (fio writes no read/write then).
DIRECTIONS = ("read", "write", "trim", "mixed")
# client.c names the sum over several servers "All clients" and tags it with the last server's hostname.
ALL_CLIENTS = "All clients"


def _timestamp_ms(doc: JsonObject) -> Json:
    if doc.get("timestamp_ms") is not None:
        return doc["timestamp_ms"]
    # client/server output and fio before 2.12 (commit aa7d2ef0) carry only "timestamp", in seconds
    seconds = doc.get("timestamp")
    if seconds is None:
        return None
    if not isinstance(seconds, int | float):
        raise ParseError(f"timestamp {seconds!r} is not a number")
    return seconds * 1000


@register_parser("fio")
def parse_fio(data: bytes) -> list[FioRow]:
    """One row per fio job: settings, read (and write/trim/mixed when used) results, CPU, options."""
    doc, jobs = _load_json(data)
    # fio writes "fio version" in every version; "fioversion" is that key with its blank squeezed out
    # by tools that compact the JSON (yardstick's fio-2.1.3 samples).
    version = doc.get("fio version", doc.get("fioversion"))
    global_options = _object(doc.get("global options"))
    rows: list[FioRow] = []
    for index, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise ParseError(f"jobs[{index}] is not an object")
        name = job.get("jobname", f"jobs[{index}]")
        printed = "job options" in job or "global options" in doc
        options = {**global_options, **_object(job.get("job options"))}
        row: FioRow = {
            "fio_version": version,
            "fio_timestamp_ms": _timestamp_ms(doc),
            "job_name": name,
            "groupid": job.get("groupid"),
            "error": job.get("error"),
            **(_job_settings(options, name) if printed else UNKNOWN_SETTINGS),
            "runtime_ms": job.get("job_runtime"),
        }
        if "hostname" in job:  # a client/server run: which server ran the job
            row["fio_host"] = None if name == ALL_CLIENTS else job["hostname"]
        blocks = {direction: block for direction in DIRECTIONS if isinstance(block := job.get(direction), dict)}
        if not blocks:
            raise ParseError(f"job {name!r} has no read, write, trim or mixed results")
        for direction, block in blocks.items():
            # Read columns always (the ladder reads them); write, trim and mixed ones only when the job did
            # such I/O, so a read-only sweep stays narrow.
            if direction == "read" or block.get("io_bytes") or block.get("total_ios"):
                row.update(_direction(direction, block, _lat_under_clat(_version(version), options)))
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

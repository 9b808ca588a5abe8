"""A complete set's own ``SHA256SUMS``: what a decision reads, so a set changed after its campaign is named.

The runner's SHA256SUMS cover one run directory and are checked once, when it is pulled. A set is read again and
again afterwards (``report``, ``compare``, ``gate``), and a deleted run directory or a rewritten table went
unnoticed: the gate decided on what was left. When a campaign completes, the set's root gets a ``SHA256SUMS`` over
its manifest, experiment, every table and every run's record (``run.json`` and the run's own ``SHA256SUMS``, which
cover the rest of the run directory); the format is ``sha256sum``'s, so ``sha256sum -c SHA256SUMS`` in the set
checks it too. Figures and report.md are derived (``harness report`` redraws them) and not covered.

An incomplete set has none (``--resume`` still changes it), nor has a set written before this file existed: those
are read unverified.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath

from harness.results.tables import TABLES_DIR

SUMS_FILE = "SHA256SUMS"
RUN_FILES = ("run.json", "SHA256SUMS")  # of each raw/<target>/<run>/
_CHUNK = 1 << 20
_NAMED = 4  # problems named in the one line; the rest are counted


def covered(path: Path) -> list[str]:
    """The files of the set at ``path`` its SHA256SUMS covers, relative and sorted."""
    found = [name for name in ("manifest.json", "experiment.yaml") if (path / name).is_file()]
    found += [f"{TABLES_DIR}/{p.name}" for p in (path / TABLES_DIR).glob("*.parquet") if p.is_file()]
    for run_dir in (path / "raw").glob("*/*"):
        found += [f"raw/{run_dir.parent.name}/{run_dir.name}/{name}" for name in RUN_FILES
                  if (run_dir / name).is_file()]
    return sorted(found)


def digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def write_sums(path: Path) -> None:
    """Write the set's SHA256SUMS whole or not at all (a temporary name, then the real one)."""
    text = "".join(f"{digest(path / rel)}  {rel}\n" for rel in covered(path))
    tmp = path / f".{SUMS_FILE}.tmp"
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path / SUMS_FILE)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _listed(path: Path) -> tuple[dict[str, str], list[str]]:
    """rel path -> digest from the set's SHA256SUMS, and what in it could not be read."""
    listed: dict[str, str] = {}
    bad: list[str] = []
    for number, line in enumerate((path / SUMS_FILE).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        hexdigest, sep, rel = line.partition("  ")
        parts = PurePosixPath(rel).parts
        if (not sep or len(hexdigest) != 64 or rel.startswith("/") or ".." in parts
                or any(c not in "0123456789abcdef" for c in hexdigest)):
            bad.append(f"{SUMS_FILE} line {number} unreadable")  # and never a path outside the set
            continue
        listed[rel] = hexdigest
    return listed, bad


def problems(path: Path) -> list[str] | None:
    """What differs between the set at ``path`` and its SHA256SUMS, one phrase each (a deleted run directory is
    one phrase, not one per file); [] when it verifies, None when the set has no SHA256SUMS."""
    if not (path / SUMS_FILE).is_file():
        return None
    listed, out = _listed(path)
    gone_runs: set[str] = set()
    for rel, expected in listed.items():
        file = path / rel
        run_dir = str(PurePosixPath(rel).parent) if rel.startswith("raw/") else None
        if run_dir and not (path / run_dir).is_dir():
            if run_dir not in gone_runs:
                gone_runs.add(run_dir)
                out.append(f"run directory {run_dir} deleted")
        elif not file.is_file():
            out.append(f"{rel} deleted")
        elif digest(file) != expected:
            out.append(f"{rel} changed")
    out += [f"{rel} added" for rel in covered(path) if rel.startswith(TABLES_DIR + "/") and rel not in listed]
    return out


def summary(found: list[str]) -> str:
    """The problems as one phrase: the first few named, the rest counted."""
    named = ", ".join(found[:_NAMED])
    return named + (f" and {len(found) - _NAMED} more" if len(found) > _NAMED else "")

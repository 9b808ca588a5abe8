"""``harness results upgrade``: an older result set rewritten into the current schema, as a new set.

The original is never touched (a result set is immutable): the new set gets its own id (the old one plus
``-v<version>``), its manifest records ``upgraded_from: {set_id, schema_version}``, its raw run directories are
hard links to the original's files where the file system allows (copies otherwise), and its tables and manifest
are new files. The upgrade is written under a hidden name and renamed when whole, so a failed upgrade never
leaves something that looks like a set.

Each schema change is one step in :data:`STEPS` (version -> the function that lifts a set from it to the next);
an upgrade runs them in order from the set's version to :data:`harness.results.SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import ResultSetError
from harness.results import INCOMPLETE_SUFFIX, SCHEMA_VERSION, checksums
from harness.results.loader import json_kind
from harness.results.tables import RUNS, TABLES_DIR, table_file
from harness.results.variants import variant_label

Manifest = dict[str, Any]
Step = Callable[[Path, Manifest], None]  # changes the tables of the set at the path and its manifest (in memory)


def upgrade_v1_to_v2(path: Path, manifest: Manifest) -> None:
    """Schema 2 added the runs table's ``variant``: the run's matrix cell and cache condition as one label."""
    runs_file = path / TABLES_DIR / table_file(RUNS.name)
    if not runs_file.exists():
        return
    runs = pd.read_parquet(runs_file)
    # from the plan, as ingest labels a run (a table column with gaps would turn 8192 into 8192.0)
    params = list(manifest.get("matrix") or {})
    labels = {(run["target"], run["run_id"]): variant_label({**run.get("params", {}), "cache": run["cache"]}, params)
              for run in manifest.get("runs", [])}
    runs["variant"] = [labels.get(key) for key in zip(runs["target"], runs["run_id"], strict=True)]
    _write_parquet(runs, runs_file)


STEPS: dict[int, Step] = {1: upgrade_v1_to_v2}


def read_manifest(path: Path) -> Manifest:
    """A set's manifest as written, whatever its schema (the loader refuses old ones; this is the one reader
    that must not)."""
    manifest_path = path / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise ResultSetError(f"{path}: not a result set (no manifest.json)") from None
    except ValueError as exc:
        raise ResultSetError(f"{manifest_path}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise ResultSetError(f"{manifest_path}: the manifest is a JSON {json_kind(manifest)}, not an object")
    return manifest


def pending_steps(path: Path, manifest: Manifest) -> list[int]:
    """The versions whose steps lift this set to the current schema: [] for a current set; a set newer than this
    harness, or of a version no step starts from, is refused."""
    version = manifest.get("schema_version")
    if version == SCHEMA_VERSION:
        return []
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ResultSetError(f"{path}: schema_version {version!r} is newer than this harness reads "
                             f"({SCHEMA_VERSION}); upgrade harness, not the set")
    missing = [v for v in range(version, SCHEMA_VERSION) if v not in STEPS]
    if missing:
        raise ResultSetError(f"{path}: schema_version {version} cannot be upgraded: no step from version "
                             f"{missing[0]} (this harness upgrades from {min(STEPS)})")
    return list(range(version, SCHEMA_VERSION))


def upgrade_set(path: Path, results_dir: Path | None = None) -> Path | None:
    """Write the current-schema copy of the set at ``path`` into ``results_dir`` (default: beside it) and return
    its path; None when the set is already current (nothing is written)."""
    path = Path(path)
    manifest = read_manifest(path)
    versions = pending_steps(path, manifest)
    if not versions:
        return None
    new_id = f"{manifest['set_id']}-v{SCHEMA_VERSION}"
    suffix = INCOMPLETE_SUFFIX if path.name.endswith(INCOMPLETE_SUFFIX) else ""
    results_dir = Path(results_dir) if results_dir is not None else path.parent
    final = results_dir / (new_id + suffix)
    if final.exists():
        raise ResultSetError(f"{path}: already upgraded: {final} exists (remove it to upgrade again)")
    work = results_dir / f".{new_id}.upgrading"
    shutil.rmtree(work, ignore_errors=True)  # what an upgrade that died left
    try:
        _copy_set(path, work)
        for version in versions:
            STEPS[version](work, manifest)
        old = {"set_id": manifest["set_id"], "schema_version": manifest["schema_version"]}
        manifest.update(schema_version=SCHEMA_VERSION, set_id=new_id, upgraded_from=old)
        (work / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")
        if manifest.get("status") == "complete" and not suffix:
            checksums.write_sums(work)  # its own, over its new tables and manifest
        os.replace(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return final


def _copy_set(source: Path, target: Path) -> None:
    """Everything but the manifest and the set's SHA256SUMS (the new set gets its own): raw/ as hard links (falling
    back to copies), the rest as copies (tables are rewritten, figures and the report stay the original's until
    ``harness report`` draws them again)."""
    target.mkdir(parents=True)
    for entry in sorted(source.iterdir()):
        if entry.name in ("manifest.json", checksums.SUMS_FILE):
            continue
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name, symlinks=True,
                            copy_function=_link_or_copy if entry.name == "raw" else shutil.copy2)
        else:
            shutil.copy2(entry, target / entry.name)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)

"""Writing a result set: under ``<set-id>.incomplete`` until the campaign ends, then renamed.

An interrupted campaign therefore leaves a directory whose name and manifest both say
"incomplete"; nothing ever looks complete that is not.

The writer is shared by the campaign's target threads: every manifest change and every save takes the writer's
own lock, so the file is always written from a manifest no other thread is halfway through changing.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, cast

from typing_extensions import Unpack  # typing has it from 3.11; the project supports older Pythons

from harness import __version__
from harness.errors import ResultSetError
from harness.results import INCOMPLETE_SUFFIX, SCHEMA_VERSION, checksums
from harness.results.manifest import EnergyMethod, Manifest, Prepared, RunEntry, RunFields, TargetEntry, TargetFields


def new_set_id(experiment_name: str, experiment_text: str, when: dt.datetime | None = None) -> str:
    when = when or dt.datetime.now()
    digest = hashlib.sha256(f"{experiment_text}{when.isoformat()}{os.getpid()}".encode()).hexdigest()[:6]
    return f"{when:%Y%m%d-%H%M%S}-{experiment_name}-{digest}"


def git_revision(path: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


class ResultSetWriter:
    def __init__(self, results_dir: Path, set_id: str) -> None:
        """A new set: its ``.incomplete`` directory is made here (``start`` writes the first manifest)."""
        self._name(results_dir, set_id)
        try:
            results_dir.mkdir(parents=True, exist_ok=True)
            self.path.mkdir()
            probe = self.path / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ResultSetError(f"{results_dir}: results directory is not writable ({exc.strerror})") from None
        for sub in ("raw", "tables", "figures"):
            (self.path / sub).mkdir()
        self.manifest: Manifest = {"schema_version": SCHEMA_VERSION, "set_id": set_id}

    @classmethod
    def reopen(cls, path: Path, manifest: Manifest) -> ResultSetWriter:
        """The writer of an existing incomplete set, for --resume: nothing is made (the set exists)."""
        writer = cls.__new__(cls)
        writer._name(path.parent, manifest["set_id"])
        writer.path, writer.manifest = path, manifest
        return writer

    def _name(self, results_dir: Path, set_id: str) -> None:
        """What every writer has, new or reopened: its names and its lock."""
        self.results_dir, self.set_id = results_dir, set_id
        self.final_path = results_dir / set_id
        self.path = results_dir / (set_id + INCOMPLETE_SUFFIX)
        # target threads share the writer: manifest changes and saves take this (re-entrant: a change saves)
        self.lock = threading.RLock()

    def start(self, *, experiment_name: str, experiment_path: Path, experiment_text: str,
              targets: list[TargetEntry], plan: list[RunEntry]) -> None:
        repo = Path(__file__).resolve().parents[2]
        self.manifest = {
            "schema_version": SCHEMA_VERSION,
            "set_id": self.set_id,
            "status": "incomplete",
            "experiment": {"name": experiment_name, "path": str(experiment_path),
                           "sha256": hashlib.sha256(experiment_text.encode()).hexdigest()},
            "harness": {"version": __version__, "git_revision": git_revision(repo)},
            "controller": {"host": platform.node(), "python": platform.python_version()},
            "started": _iso_now(),
            "ended": None,
            "targets": targets,
            "files": {},
            "runs": plan,
        }
        try:
            (self.path / "experiment.yaml").write_text(experiment_text, encoding="utf-8")
            self.save()
        except (OSError, ResultSetError):
            # a set directory without its manifest could never be resumed: leave none
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def record_prepared(self, prepared: Prepared) -> None:
        """Record what the campaign prepared (engines, models, matrix, ...) and save: after ``start``'s keys,
        in ``Prepared``'s order."""
        with self.lock:
            self.manifest.update(cast(Manifest, prepared))  # Prepared is a part of Manifest (mypy wants every key)
            self.save()

    def save(self) -> None:
        """Write the manifest whole or not at all: a full disk leaves the last one intact (and no .tmp)."""
        with self.lock:
            tmp = self.path / "manifest.json.tmp"
            try:
                tmp.write_text(json.dumps(self.manifest, indent=1, sort_keys=False, default=str) + "\n")
                os.replace(tmp, self.path / "manifest.json")
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise disk_error(exc, self.path) from None

    def update_run(self, run_id: str, *, target: str | None = None, **fields: Unpack[RunFields]) -> None:
        """Update a run's entry and save. Run ids repeat across targets: with ``target`` only that target's
        entry changes (without it, every entry with the id)."""
        with self.lock:
            for run in self.manifest["runs"]:
                if run["run_id"] == run_id and target in (None, run.get("target")):
                    run.update(cast(RunEntry, fields))  # RunFields is a part of RunEntry (mypy wants every key)
            self.save()

    def run_entry(self, run_id: str, target: str) -> RunEntry:
        """A target's run entry by its id (an empty one when the manifest has none)."""
        with self.lock:
            return next((run for run in self.manifest["runs"] if run.get("run_id") == run_id
                         and run.get("target") == target), RunEntry())

    def add_run(self, entry: RunEntry) -> None:
        """Add a run the plan did not have (a perturbed run measured again) and save."""
        with self.lock:
            self.manifest["runs"].append(entry)
            self.save()

    def update_target(self, name: str, /, **fields: Unpack[TargetFields]) -> None:
        """Update a target's entry (facts, expectations, what was deployed) and save."""
        with self.lock:
            for entry in self.manifest["targets"]:
                if entry["name"] == name:
                    entry.update(cast(TargetEntry, fields))  # the same: TargetFields is a part
            self.save()

    def record_files(self, target: str, records: dict[str, Any]) -> None:
        """Record the named data files a target's runs read (path, size, created or not) and save."""
        with self.lock:
            self.manifest["files"][target] = records
            self.save()

    def mark_resumed(self, when: str) -> None:
        """Say in the manifest when the set was resumed (``resumed``: every time, in order) and save."""
        with self.lock:
            self.manifest.setdefault("resumed", []).append(when)
            self.save()

    def mark_confirms(self, set_id: str, rounds: int) -> None:
        """Say which set this one confirms (``harness gate --confirm``), with how many rounds, and save."""
        with self.lock:
            self.manifest["confirms"] = {"set_id": set_id, "rounds": rounds}
            self.save()

    def record_energy(self, methods: dict[str, EnergyMethod]) -> None:
        """Say how each target's energy was measured (or why it was not) and save."""
        with self.lock:
            self.manifest["energy"] = methods
            self.save()

    def raw_dir(self, target: str, run_id: str) -> Path:
        return self.path / "raw" / target / run_id

    def finish(self, *, complete: bool) -> Path:
        """End the set. A complete set is renamed to its final name first and says ``complete`` only once the
        rename succeeded: a results directory that refuses the rename (read-only, immutable) leaves a set that
        says ``incomplete`` and that ``--resume`` finishes. A complete set then gets its SHA256SUMS
        (:mod:`harness.results.checksums`), over the manifest as it ends."""
        self.manifest["ended"] = _iso_now()
        if complete and self.path != self.final_path:
            try:
                os.replace(self.path, self.final_path)
            except OSError as exc:
                self.manifest["status"] = "incomplete"
                try:
                    self.save()
                except (OSError, ResultSetError):
                    pass  # an immutable set refuses its manifest too; the one on disk already says incomplete
                raise ResultSetError(f"{self.path}: every run is done but the set cannot be renamed to "
                                     f"{self.final_path.name} ({exc.strerror}); make the results directory and "
                                     f"the set writable, then finish it with: harness run --resume "
                                     f"{self.set_id}") from None
            self.path = self.final_path
        self.manifest["status"] = "complete" if complete else "incomplete"
        self.save()
        if complete:
            try:
                checksums.write_sums(self.path)
            except OSError as exc:
                raise disk_error(exc, self.path) from None
        return self.path


def disk_error(exc: OSError, where: Path) -> ResultSetError:
    """A set that cannot be written as one line: ENOSPC (and EDQUOT) with the free space; any other error (a
    read-only file system, an immutable set directory) with the file and the reason. Either way the set keeps
    its last manifest, which says incomplete, and ``--resume`` finishes it once the disk is fixed."""
    set_id = where.name.removesuffix(INCOMPLETE_SUFFIX)
    # pyarrow's errors carry the text but not always the errno
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT) and "No space left on device" not in str(exc):
        what, file = exc.strerror or (str(exc).strip().splitlines() or [type(exc).__name__])[0], exc.filename
        # pyarrow's: "Failed to open local file '/x/.t.tmp'. Detail: [errno 30] Read-only file system"
        found = re.search(r"file '([^']+)'.*Detail:\s*(?:\[errno \d+\]\s*)?(.+)", what)
        if found:
            file, what = found.groups()
        return ResultSetError(f"{file or where}: cannot write the result set ({what}); it stays incomplete: make "
                              f"it writable, then finish it with: harness run --resume {set_id}")
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = 0
    return ResultSetError(f"results disk full: {free / 1e6:.0f} MB free on {where}; free some space, then finish "
                          f"the set with: harness run --resume {set_id}")


def _iso_now() -> str:
    return dt.datetime.now(dt.timezone.utc).astimezone().isoformat(timespec="seconds")

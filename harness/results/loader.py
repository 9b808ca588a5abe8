"""The one loader of result sets. It checks ``schema_version`` before anything reads a table."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas loads with the first table read: commands that only find a set start fast
    import pandas as pd

from harness.errors import ResultSetError
from harness.results import INCOMPLETE_SUFFIX, SCHEMA_VERSION
from harness.results.tables import TABLES_DIR, table_file


@dataclass
class ResultSet:
    path: Path
    manifest: dict[str, Any]
    _tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def set_id(self) -> str:
        return self.manifest["set_id"]

    @property
    def complete(self) -> bool:
        return self.manifest.get("status") == "complete" and not self.path.name.endswith(INCOMPLETE_SUFFIX)

    def table(self, name: str) -> pd.DataFrame:
        """A table (by its name in ``harness.results.tables``) as a DataFrame; an empty one when the set has
        no such data."""
        if name not in self._tables:
            path = self.path / TABLES_DIR / table_file(name)
            import pandas as pd

            self._tables[name] = pd.read_parquet(path) if path.exists() else pd.DataFrame()
        return self._tables[name]


def load_result_set(path: Path) -> ResultSet:
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise ResultSetError(f"{path}: not a result set (no manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError as exc:
        raise ResultSetError(f"{manifest_path}: unreadable manifest ({exc})") from None
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        hint = ("upgrade it with `harness results upgrade`" if isinstance(version, int) and version < SCHEMA_VERSION
                else "it was written by a newer harness; upgrade harness to read it")
        raise ResultSetError(f"{path}: schema_version {version!r}, this harness reads {SCHEMA_VERSION}: {hint}")
    return ResultSet(path, manifest)


def find_result_set(name: str, results_dir: Path) -> Path:
    """A set by path, by id, or by a unique id prefix/suffix inside ``results_dir``."""
    direct = Path(name)
    if (direct / "manifest.json").exists():
        return direct
    candidates = [p for p in list_result_sets(results_dir) if p.name == name or p.name.startswith(name)
                  or name in p.name]
    exact = [p for p in candidates if p.name in (name, name + INCOMPLETE_SUFFIX)]
    if len(exact) == 1:
        return exact[0]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ResultSetError(f"no result set {name!r} in {results_dir}")
    raise ResultSetError(f"{name!r} matches {len(candidates)} result sets in {results_dir}; give more of the id")


def list_result_sets(results_dir: Path) -> list[Path]:
    if not results_dir.is_dir():
        return []
    return sorted(p for p in results_dir.iterdir() if (p / "manifest.json").exists())

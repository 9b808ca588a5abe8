"""The one loader of result sets. It checks ``schema_version`` before anything reads a table."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # pandas loads with the first table read: commands that only find a set start fast
    import pandas as pd

from harness.errors import ResultSetError
from harness.results import INCOMPLETE_SUFFIX, SCHEMA_VERSION, checksums
from harness.results.manifest import Manifest
from harness.results.tables import TABLES_DIR, table_file


@dataclass
class ResultSet:
    path: Path
    manifest: Manifest
    _tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    # checked against its SHA256SUMS when loaded for a decision; None: not checked, or the set has none
    verified: bool | None = None

    @property
    def set_id(self) -> str:
        return str(self.manifest["set_id"])

    @property
    def complete(self) -> bool:
        return self.manifest.get("status") == "complete" and not self.path.name.endswith(INCOMPLETE_SUFFIX)

    def table(self, name: str) -> pd.DataFrame:
        """A table (by its name in ``harness.results.tables``) as a DataFrame; an empty one when the set has
        no such data."""
        if name not in self._tables:
            path = self.path / TABLES_DIR / table_file(name)
            self._tables[name] = read_table(path) if path.exists() else _empty()
        return self._tables[name]


def _empty() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame()


def read_table(path: Path) -> pd.DataFrame:
    """A parquet table of a set; a truncated or foreign file is one line naming it (pyarrow's own error is a
    traceback through every command that reads tables)."""
    import pandas as pd
    import pyarrow as pa

    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise unreadable_table(path, exc) from None


def check_tables(one: ResultSet) -> list[Path]:
    """Every table file of the set, each opened as far as its footer (cheap: the data is not read), so a summary
    that reads only some tables still names a damaged one; the files, in order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((one.path / TABLES_DIR).glob("*.parquet"))
    for path in files:
        try:
            pq.ParquetFile(path).close()
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise unreadable_table(path, exc) from None
    return files


def unreadable_table(path: Path, exc: BaseException) -> ResultSetError:
    """One line for a table file pyarrow or DuckDB cannot read: the file and the reader's first sentence."""
    why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    why = re.sub(r"^Could not open Parquet input source '[^']*':\s*", "", why).split(". ")[0].rstrip(".")
    return ResultSetError(f"{path}: not a readable parquet table ({why}); the set's tables are damaged: restore "
                          "the set from a copy")


def load_result_set(path: Path, *, verify: bool = False) -> ResultSet:
    """The set at ``path``, its manifest checked (an object, this schema, the fields readers index). With
    ``verify`` (a set read for a decision: report, compare, gate) it must also match its SHA256SUMS."""
    path = Path(path)
    one = ResultSet(path, read_manifest(path))
    if verify:
        verify_set(one)
    return one


def read_manifest(path: Path) -> Manifest:
    """The manifest of the set at ``path``, checked (an object, this schema, the fields readers index): the one
    read of ``manifest.json`` (the campaign's --resume and --confirm read it here too, so an old or damaged set
    is one line before anything indexes it)."""
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise ResultSetError(f"{path}: not a result set (no manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:  # UnicodeDecodeError is a ValueError
        raise ResultSetError(f"{manifest_path}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise ResultSetError(f"{manifest_path}: the manifest is a JSON {json_kind(manifest)}, not an object")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        hint = ("upgrade it with `harness results upgrade`" if isinstance(version, int) and version < SCHEMA_VERSION
                else "it was written by a newer harness; upgrade harness to read it")
        raise ResultSetError(f"{path}: schema_version {version!r}, this harness reads {SCHEMA_VERSION}: {hint}")
    _check_fields(manifest_path, manifest)
    return cast(Manifest, manifest)  # its shape checked above: what readers index is there


# What readers index without looking (manifest["experiment"]["name"], run["run_id"], ...): checked once here.
_OBJECTS = ("experiment", "harness", "controller")
_LISTS_OF_OBJECTS = ("targets", "runs")


def _check_fields(manifest_path: Path, manifest: dict[str, Any]) -> None:
    def refuse(field_name: str, expected: str, value: Any) -> ResultSetError:
        return ResultSetError(f"{manifest_path}: field {field_name}: expected {expected}, got a JSON "
                              f"{json_kind(value)}")

    if not isinstance(manifest.get("set_id"), str):
        raise refuse("set_id", "a string", manifest.get("set_id"))
    for name in _OBJECTS:
        if name in manifest and not isinstance(manifest[name], dict):
            raise refuse(name, "an object", manifest[name])
    for name in _LISTS_OF_OBJECTS:
        value = manifest.get(name, [])
        if not isinstance(value, list):
            raise refuse(name, "a list", value)
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                raise refuse(f"{name}[{index}]", "an object", item)


def json_kind(value: Any) -> str:
    """'object', 'list', 'string', ...: what a JSON value is, in JSON's words."""
    kinds = ((dict, "object"), (list, "list"), (str, "string"), (bool, "boolean"), (int, "number"),
             (float, "number"))
    return "null" if value is None else next((kind for t, kind in kinds if isinstance(value, t)), "value")


def unverified_note(one: ResultSet) -> str:
    """What a decision on a set without SHA256SUMS should say."""
    return (f"{one.set_id} has no SHA256SUMS (written before sets were sealed): read unverified, a deleted run or "
            "changed table would go unnoticed")


def verify_set(one: ResultSet) -> None:
    """Check a set against its SHA256SUMS (:mod:`harness.results.checksums`): anything deleted, changed or added
    since the campaign completed is one line, bad input. A set without them (incomplete, or older) is read as
    before, with ``verified`` None."""
    found = checksums.problems(one.path)
    if found is None:
        return
    if found:
        raise ResultSetError(f"{one.path}: the set differs from its SHA256SUMS ({checksums.summary(found)}); it "
                             "changed after its campaign and is not read for a decision: restore it from a copy")
    one.verified = True


def is_result_set(path: Path) -> bool:
    """Whether ``path`` holds a set (its manifest), read or not."""
    return (path / "manifest.json").exists()


def find_result_set(name: str, results_dir: Path) -> Path:
    """A set by path, by id, or by a unique id prefix/suffix inside ``results_dir``."""
    direct = Path(name)
    if is_result_set(direct):
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
    return sorted(p for p in results_dir.iterdir() if is_result_set(p))

"""The BigMoeOnEdge tree a build compiles: the engine's source with a llama.cpp in ``third_party/llama.cpp``.

Made once per (engine source, llama.cpp tree) under ``<sources>/bigmoeonedge/<hash>/`` and never patched there
(patches go into the builder's private copy, as for llama.cpp). See :mod:`harness.engines.bigmoeonedge.source`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.engines.bigmoeonedge.source import (
    BmoeSource,
    SourceUnavailable,
    archive_commit,
    find_archive,
)
from harness.engines.errors import BuildError
from harness.engines.llamacpp.source import SourceSpec, prepare_source, sha256_file, tree_sha256
from runner import enginebuild

REPO_ROOT = Path(__file__).resolve().parents[3]
# The adaptation of session.cpp to the llama.cpp of the llama-cpp-python 0.3.36 sdist (the patch says why).
ADAPTATION_PATCHES = {
    ("sdist", "llama-cpp-python", "0.3.36"): REPO_ROOT / "engines" / "bigmoeonedge" / "session-cpp-llama-0.3.36.patch",
}
LLAMA_SUBDIR = Path("third_party") / "llama.cpp"
DONE_MARK = ".harness-tree.json"


@dataclass(frozen=True)
class EngineTree:
    tree: Path                         # the composed source tree (pristine)
    identity: dict[str, Any]           # engine source + llama.cpp tree: part of the build cache key
    commit: str | None                 # the engine's commit, when known
    llama_commit: str | None           # the llama.cpp commit in third_party/llama.cpp, when known
    patches: list[Path] = field(default_factory=list)  # adaptations this llama.cpp tree needs, applied first

    @property
    def expert_ready_hook(self) -> bool:
        """Whether the llama.cpp tree has the fork's hook that ``--overlap`` needs (the engine's CMake looks for the
        same symbol; without it bmoe-cli refuses --overlap)."""
        header = self.tree / LLAMA_SUBDIR / "ggml" / "include" / "ggml-cpu.h"
        return header.is_file() and "ggml_cpu_set_expert_ready_hook" in header.read_text(errors="replace")


def _unpacked(archive: Path, cache: Path) -> Path:
    """The archive unpacked once under the cache (its single top directory)."""
    digest = sha256_file(archive)
    dest = cache / "bigmoeonedge" / "archives" / digest[:16]
    if not (dest / DONE_MARK).is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".unpack-") as tmp, tarfile.open(archive) as tar:
            kwargs: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(tmp, **kwargs)
            tops = [p for p in Path(tmp).iterdir() if p.is_dir()]
            if len(tops) != 1:
                raise BuildError(f"{archive} does not unpack to one directory")
            (tops[0] / DONE_MARK).write_text(json.dumps({"archive": archive.name, "sha256": digest}) + "\n")
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tops[0], dest)
    return dest


def engine_source(source: BmoeSource, cache: Path) -> tuple[Path, dict[str, Any], str | None]:
    """(pristine engine tree, its identity, its commit) for a git source (archive first) or a path."""
    if source.path is not None:
        path = source.path.expanduser().resolve()
        if not (path / "CMakeLists.txt").is_file():
            raise BuildError(f"engine bigmoeonedge source path {path} holds no CMakeLists.txt")
        return path, {"kind": "path", "path": str(path), "tree_sha256": tree_sha256(path)}, None
    assert source.git is not None and source.commit is not None
    archive = find_archive(source.git, source.commit)
    if archive is not None:
        found = archive_commit(archive)
        if found is None or not found.startswith(source.commit.lower()):
            raise BuildError(f"{archive} holds commit {found or 'unknown'}, not {source.commit} "
                             "(git get-tar-commit-id); replace it with `git archive` of that commit")
        return _unpacked(archive, cache), {"kind": "archive", "name": archive.name, "sha256": sha256_file(archive),
                                           "url": source.git, "commit": found}, found
    try:
        checkout, full = enginebuild.git_checkout(source.git, source.commit, str(cache))
    except enginebuild.EngineBuildError as exc:
        raise SourceUnavailable(f"engine bigmoeonedge: no archive in $HARNESS_ENGINE_SOURCES and {exc}") from None
    # upstream's submodule is the fork with the expert-ready hook (--overlap); without it the stock tree goes in
    subprocess.run(["git", "-C", checkout, "submodule", "update", "--init", "--depth", "1", str(LLAMA_SUBDIR)],
                   capture_output=True, env=dict(os.environ, GIT_TERMINAL_PROMPT="0"), timeout=1800)
    return Path(checkout), {"kind": "git", "url": source.git, "commit": full}, full


def _in_tree_llama(tree: Path) -> dict[str, Any] | None:
    """The llama.cpp the engine source brings itself (a checked-out submodule), or None."""
    llama = tree / LLAMA_SUBDIR
    if not (llama / "CMakeLists.txt").is_file():
        return None
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", f"HEAD:{LLAMA_SUBDIR.as_posix()}"],
                          capture_output=True, text=True)
    commit = done.stdout.strip() if done.returncode == 0 else None
    return {"from": "engine source", "commit": commit,
            "tree_sha256": None if commit else tree_sha256(llama)}


def prepare_tree(source: BmoeSource, llama_source: dict[str, str], cache: Path) -> EngineTree:
    """The composed tree for ``source`` (``llama_source``: the llama.cpp for an empty third_party/llama.cpp).

    The caller holds the sources lock."""
    raw, engine_identity, commit = engine_source(source, cache)
    own = _in_tree_llama(raw)
    if own is not None:
        identity = {"kind": "bigmoeonedge", "engine": engine_identity, "llama.cpp": own}
        return EngineTree(tree=raw, identity=identity, commit=commit, llama_commit=own["commit"])
    spec = SourceSpec.model_validate(llama_source)
    llama = prepare_source(spec, cache)
    record = {"from": "harness llama.cpp source", "source": llama.identity, "commit": llama.commit}
    identity = {"kind": "bigmoeonedge", "engine": engine_identity, "llama.cpp": record}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    dest = cache / "bigmoeonedge" / "trees" / digest
    if not (dest / DONE_MARK).is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        enginebuild.copy_tree(str(raw), str(tmp))
        shutil.rmtree(tmp / LLAMA_SUBDIR, ignore_errors=True)  # the empty submodule directory
        enginebuild.copy_tree(str(llama.tree), str(tmp / LLAMA_SUBDIR))
        (tmp / DONE_MARK).write_text(json.dumps(identity, indent=1) + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    key = tuple(str(llama.identity.get(k)) for k in ("kind", "name", "version"))
    patches = [ADAPTATION_PATCHES[key]] if key in ADAPTATION_PATCHES else []
    return EngineTree(tree=dest, identity=identity, commit=commit, llama_commit=llama.commit, patches=patches)

"""The source tree of a declared engine's named build (``builds: {NAME: {engine: DECLARED, source, patches}}``):
checked out (``{git: URL, commit: SHA}``) or taken (``{path: DIR}``) once, here, copied and patched into
``<build cache>/declared-sources/<key>/src``, where ``key`` hashes the source's identity and the patches. The
target's build copies (or unpacks, on a board) that tree into the build's own directory, where the declaration's
build commands find it as ``{source_dir}``; the build's cache key hashes the declaration's build block and ``key``,
so another commit or another patch is another build, and the same inputs are one."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.declared_engine import EngineDeclaration
from harness.engines.errors import BuildError
from harness.engines.llamacpp.source import tree_sha256
from runner import enginebuild
from runner.util import sha256_file


@dataclass(frozen=True)
class DeclaredSource:
    """A prepared tree (None: the build gives no source, its commands fetch their own) and what identifies it."""

    engine: str
    tree: str | None
    key: str  # "" without a source: the build is the declaration's own, keyed as before builds existed
    identity: dict[str, Any] = field(default_factory=dict)
    commit: str | None = None
    patches: list[dict[str, str]] = field(default_factory=list)

    def build_key(self, declaration: EngineDeclaration) -> str | None:
        own = declaration.build_key()
        if own is None or not self.key:
            return own
        return hashlib.sha256(f"{own}:{self.key}".encode()).hexdigest()[:16]


def _origin(source: dict[str, str], cache: Path) -> tuple[str, dict[str, Any], str | None]:
    """(pristine tree, identity, commit) of a git or path source."""
    if set(source) == {"git", "commit"}:
        try:
            with enginebuild.locked(str(cache / "sources" / ".lock")):
                tree, full = enginebuild.git_checkout(source["git"], source["commit"], str(cache / "sources"))
        except enginebuild.EngineBuildError as exc:
            raise BuildError(str(exc)) from None
        return tree, {"kind": "git", "url": source["git"], "commit": full}, full
    if set(source) == {"path"}:
        path = Path(source["path"]).expanduser().resolve()
        if not path.is_dir():
            raise BuildError(f"engine source path {path} is not a directory")
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                              text=True, check=False)
        lines = done.stdout.split()
        commit = lines[1] if done.returncode == 0 and Path(lines[0]).resolve() == path else None
        return str(path), {"kind": "path", "path": str(path), "tree_sha256": tree_sha256(path)}, commit
    raise BuildError(f"a declared engine's source is {{git: URL, commit: SHA}} or {{path: DIR}}, not "
                     f"{json.dumps(source)}")


def prepare_tree(engine: str, source: dict[str, str], patches: list[Path], cache: Path) -> DeclaredSource:
    """The patched copy of ``source`` (made once; a directory without DONE is made again)."""
    for patch in patches:
        if not patch.is_file():
            raise BuildError(f"patch {patch} does not exist")
    pristine, identity, commit = _origin(source, cache)
    applied = [{"path": str(p), "sha256": sha256_file(str(p))} for p in patches]
    key = hashlib.sha256(json.dumps({"source": identity, "patches": [p["sha256"] for p in applied]},
                                    sort_keys=True).encode()).hexdigest()[:16]
    home = cache / "declared-sources" / key
    tree = home / "src"
    with enginebuild.locked(str(home) + ".lock"):
        if not (home / "DONE").is_file():
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir(parents=True)
            enginebuild.copy_tree(pristine, str(tree))
            try:
                enginebuild.apply_patches([p["path"] for p in applied], str(tree), str(home / "patch.log"))
            except enginebuild.EngineBuildError as exc:
                raise BuildError(f"engine {engine}: {exc}") from None
            (home / "source.json").write_text(json.dumps({"source": identity, "patches": applied}, indent=1))
            (home / "DONE").write_text(commit or "\n")
    os.utime(home / "DONE")  # the last use, for whoever prunes the cache
    return DeclaredSource(engine, str(tree), key, identity, commit, applied)

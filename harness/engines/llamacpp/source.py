"""Where llama.cpp sources come from: a PyPI sdist, a git commit or a local directory.

Each source is fetched once into a pristine cache and described by an *identity* (a JSON-able dict) that is
stable across machines for the same bytes; the build cache key is derived from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from harness.engines.errors import BuildError
from runner import enginebuild

_SDIST_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)\s*$")


class SourceSpec(BaseModel):
    """Exactly one of ``sdist`` ("llama-cpp-python==0.3.36"), ``git`` (+ ``commit``) or ``path``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sdist: str | None = None
    git: str | None = None
    commit: str | None = None
    path: Path | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> SourceSpec:
        kinds = [k for k in ("sdist", "git", "path") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("engine source needs exactly one of sdist, git, path; got "
                             + (", ".join(kinds) or "none"))
        if self.git is not None and not self.commit:
            raise ValueError("a git source needs a commit (a branch name would make builds irreproducible)")
        if self.commit is not None and self.git is None:
            raise ValueError("commit is only meaningful with git")
        if self.sdist is not None and not _SDIST_RE.match(self.sdist):
            raise ValueError(f"sdist must be pinned as NAME==VERSION, got {self.sdist!r}")
        return self

    @property
    def kind(self) -> str:
        return "sdist" if self.sdist else "git" if self.git else "path"


@dataclass(frozen=True)
class PreparedSource:
    """A pristine llama.cpp tree ready to be copied, plus what identifies it."""

    tree: Path                  # directory holding llama.cpp's top-level CMakeLists.txt
    identity: dict[str, Any]    # goes into the cache key and into build.json
    commit: str | None          # full llama.cpp commit if known


def _run(cmd: list[str], *, what: str, log: Path) -> str:
    """Run a fetch command; its output goes to ``log`` and a failure is one line naming that log."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}[exit {proc.returncode}]\n")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise BuildError(f"{what} failed (exit {proc.returncode}): {last.strip()}; log: {log}")
    return proc.stdout


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_sha256(root: Path) -> str:
    """Content hash of a source tree: relative paths, file bytes, symlink targets, exec bits."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not enginebuild.skip_dir(str(here / d)))
        for name in sorted(filenames):
            p = here / name
            rel = p.relative_to(root).as_posix()
            if name == ".git":          # a submodule's gitlink file
                continue
            if p.is_symlink():
                h.update(f"L {rel} {os.readlink(p)}\n".encode())
                continue
            mode = "x" if os.access(p, os.X_OK) else "f"
            h.update(f"{mode} {rel} {sha256_file(p)}\n".encode())
    return h.hexdigest()


def _llama_root(d: Path) -> Path:
    """The llama.cpp tree inside ``d``: itself, or the copy vendored by llama-cpp-python."""
    for cand in (d / "vendor" / "llama.cpp", d):
        if (cand / "CMakeLists.txt").is_file() and (cand / "ggml").is_dir():
            return cand
    raise BuildError(f"no llama.cpp source tree (CMakeLists.txt + ggml/) in {d}")


def _sdist_commit(root: Path) -> str | None:
    """llama-cpp-python sdists carry the submodule's git dir; its HEAD is the vendored llama.cpp commit."""
    head = root / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD"
    if head.is_file():
        text = head.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{40}", text):
            return text
    # Fallback: the changelog's first "update llama.cpp to ggml-org/llama.cpp@SHA" line is the current one.
    log = root / "CHANGELOG.md"
    if log.is_file():
        m = re.search(r"llama\.cpp@([0-9a-f]{7,40})", log.read_text(errors="replace"))
        if m:
            return m.group(1)
    return None


def _prepare_sdist(spec: str, cache: Path) -> PreparedSource:
    m = _SDIST_RE.match(spec)
    assert m  # validated by SourceSpec
    name, version = m.group(1), m.group(2)
    log = cache / "fetch.log"
    dest = cache / "sdist" / f"{name}-{version}"
    meta_file = dest / "source.json"
    if not meta_file.is_file():
        cache.joinpath("sdist").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache / "sdist", prefix=".dl-") as tmp:
            tmpd = Path(tmp)
            _run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                  "--disable-pip-version-check", f"{name}=={version}", "-d", str(tmpd / "dl")],
                 what=f"pip download of {spec}", log=log)
            archives = sorted((tmpd / "dl").glob("*.tar.gz"))
            if len(archives) != 1:
                raise BuildError(f"pip download of {spec} gave {len(archives)} .tar.gz files, expected 1")
            archive = archives[0]
            with tarfile.open(archive) as tf:
                # The "data" filter refuses absolute paths and links leaving the tree (Python >= 3.11.4).
                kw: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tf.extractall(tmpd / "x", **kw)
            tops = [p for p in (tmpd / "x").iterdir() if p.is_dir()]
            if len(tops) != 1:
                raise BuildError(f"sdist {archive.name} does not unpack to one directory")
            root = tops[0]
            meta = {"kind": "sdist", "name": name, "version": version, "file": archive.name,
                    "sha256": sha256_file(archive), "commit": _sdist_commit(root),
                    "llama_dir": _llama_root(root).relative_to(root).as_posix()}
            os.replace(root, tmpd / "tree")
            (tmpd / "tree" / "source.json").write_text(json.dumps(meta, indent=1) + "\n")
            try:
                os.replace(tmpd / "tree", dest)
            except OSError:
                if not meta_file.is_file():  # lost a race with another process only if it finished
                    raise
    meta = json.loads(meta_file.read_text())
    identity = {k: meta[k] for k in ("kind", "name", "version", "sha256")}
    return PreparedSource(tree=dest / meta["llama_dir"], identity=identity, commit=meta.get("commit"))


def _prepare_git(url: str, commit: str, cache: Path) -> PreparedSource:
    try:
        checkout, full = enginebuild.git_checkout(url, commit, str(cache))
    except enginebuild.EngineBuildError as exc:
        raise BuildError(str(exc)) from None
    return PreparedSource(tree=_llama_root(Path(checkout)), identity={"kind": "git", "url": url, "commit": full},
                          commit=full)


def _prepare_path(path: Path) -> PreparedSource:
    path = path.expanduser().resolve()
    if not path.is_dir():
        raise BuildError(f"engine source path {path} is not a directory")
    tree = _llama_root(path)
    commit: str | None = None
    proc = subprocess.run(["git", "-C", str(tree), "rev-parse", "--show-toplevel", "HEAD"],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        top, head = proc.stdout.split()
        if Path(top).resolve() == tree:  # only a repo rooted at the tree itself says which commit it is
            commit = head
    identity = {"kind": "path", "path": str(tree), "tree_sha256": tree_sha256(tree)}
    return PreparedSource(tree=tree, identity=identity, commit=commit)


def prepare_source(spec: SourceSpec, cache: Path) -> PreparedSource:
    """Fetch (once) and describe a source; ``cache`` holds pristine downloads and checkouts."""
    if spec.sdist:
        return _prepare_sdist(spec.sdist, cache)
    if spec.git:
        assert spec.commit
        return _prepare_git(spec.git, spec.commit, cache)
    assert spec.path is not None
    return _prepare_path(spec.path)

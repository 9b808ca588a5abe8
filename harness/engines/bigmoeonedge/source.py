"""Where BigMoeOnEdge comes from, and the one source tree its build compiles.

The engine's source is ``{git: URL, commit: SHA}`` (the default: upstream at a pinned commit) or ``{path: DIR}``.
A git source is taken from an archive ``<repo>-<short commit>.tar.gz`` in ``$HARNESS_ENGINE_SOURCES`` when there
is one (its commit checked with ``git get-tar-commit-id``): machines without network to GitHub build the same
commit from it; otherwise the commit is fetched.

Upstream pins a llama.cpp fork as the ``third_party/llama.cpp`` submodule; archives and shallow checkouts leave it
empty. Then the llama.cpp tree the harness already builds (the llama.cpp engine's source; keys ``llama_sdist``,
``llama_git`` + ``llama_commit`` or ``llama_path`` name another) is put there, and the build record says which.
The composed tree is made once under ``<sources>/bigmoeonedge/`` and identified by both parts, so the build
cache key covers the engine commit and the llama.cpp tree.
"""

from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from harness.engines.errors import BuildError

UPSTREAM_GIT = "https://github.com/Helldez/BigMoeOnEdge"
PINNED_COMMIT = "2d4f2b11db128cbe32da738ce114c0479542f458"
SOURCES_ENV = "HARNESS_ENGINE_SOURCES"
LLAMA_KEYS = {"llama_sdist": "sdist", "llama_git": "git", "llama_commit": "commit", "llama_path": "path"}


class SourceUnavailable(BuildError):
    """Neither an archive of the commit nor the network: the engine cannot be had on this machine."""


class BmoeSource(BaseModel):
    """``git`` + ``commit`` or ``path``; optionally the llama.cpp tree for ``third_party/llama.cpp``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    git: str | None = None
    commit: str | None = None
    path: Path | None = None
    llama_sdist: str | None = None
    llama_git: str | None = None
    llama_commit: str | None = None
    llama_path: Path | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> BmoeSource:
        if (self.git is None) == (self.path is None):
            raise ValueError("the bigmoeonedge source needs exactly one of git (+ commit) or path")
        if self.git is not None and not self.commit:
            raise ValueError("a git source needs a commit (a branch name would make builds irreproducible)")
        if self.commit is not None and self.git is None:
            raise ValueError("commit is only meaningful with git")
        return self

    def llama_source(self) -> dict[str, str] | None:
        """The llama.cpp source the keys ``llama_*`` name, or None."""
        given = {LLAMA_KEYS[k]: str(v) for k, v in self.model_dump().items() if k in LLAMA_KEYS and v is not None}
        return given or None


def parse_source(source: dict[str, Any]) -> BmoeSource:
    try:
        return BmoeSource.model_validate(source)
    except ValidationError as e:
        error = e.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        why = error["msg"].removeprefix("Value error, ")
        raise BuildError(f"engine bigmoeonedge source {source!r}: {where + ': ' if where else ''}{why}") from None


def archive_name(url: str, commit: str) -> str:
    """``BigMoeOnEdge-2d4f2b1.tar.gz`` for upstream at 2d4f2b11...: what `git archive` users name it."""
    return f"{url.rstrip('/').removesuffix('.git').rsplit('/', 1)[-1]}-{commit[:7]}.tar.gz"


def find_archive(url: str, commit: str) -> Path | None:
    """The archive of ``commit`` in ``$HARNESS_ENGINE_SOURCES``, or None (unset, or not there)."""
    folder = os.environ.get(SOURCES_ENV)
    if not folder:
        return None
    candidate = Path(folder).expanduser() / archive_name(url, commit)
    return candidate if candidate.is_file() else None


def archive_commit(archive: Path) -> str | None:
    """The commit `git archive` wrote into the tar's pax header (``git get-tar-commit-id``), or None."""
    with gzip.open(archive, "rb") as f:
        head = f.read(64 * 1024)  # the commit id is in the first (global pax) header
    try:
        done = subprocess.run(["git", "get-tar-commit-id"], input=head, capture_output=True, timeout=30)
    except OSError as exc:
        raise BuildError(f"cannot check the commit of {archive}: {exc}") from None
    text = done.stdout.decode(errors="replace").strip()
    return text if done.returncode == 0 and text else None


def unavailable_reason(source: BmoeSource) -> str | None:
    """Why this source cannot be had here (no archive of the commit and no network), or None when it can.

    A path is always available (a wrong one fails the build with its own message); a git source is when
    its archive is in $HARNESS_ENGINE_SOURCES or the repository answers."""
    if source.git is None:
        return None
    assert source.commit is not None
    if find_archive(source.git, source.commit) is not None:
        return None
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    try:
        done = subprocess.run(["git", "ls-remote", "--exit-code", source.git, "HEAD"], env=env,
                              capture_output=True, timeout=30)
        if done.returncode == 0:
            return None
        why = (done.stderr.decode(errors="replace").strip().splitlines() or ["no answer"])[-1]
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = str(exc)
    where = os.environ.get(SOURCES_ENV)
    return (f"no {archive_name(source.git, source.commit)} in ${SOURCES_ENV} ({where or 'unset'}) and "
            f"{source.git} cannot be reached ({why.removeprefix('fatal: ')})")

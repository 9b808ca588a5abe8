"""Build llama.cpp tools (llama-bench, llama-server) reproducibly, cached by what determines the binaries.

Layout under ``cache_dir`` (default ``~/.cache/harness/builds``)::

    sources/               pristine downloads and checkouts (never patched)
    <key>/src/             private copy of the source, patches applied here
    <key>/build/           cmake build dir; binaries in build/bin/
    <key>/build.log        everything cmake, the compiler and git apply printed
    <key>/build.json       BuildInfo of the completed build
    <key>/DONE             written last; a key dir without it is an interrupted or failed build
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.engines.errors import BuildError
from harness.engines.llamacpp.source import PreparedSource, SourceSpec, copy_tree, prepare_source, sha256_file

DEFAULT_CACHE_DIR = Path("~/.cache/harness/builds")
DEFAULT_TARGETS = ("llama-bench", "llama-server")

# Always passed, before the user's flags (which may override them): static binaries can be pushed to a board
# and hashed as one file; tests/examples are not needed; the server's web UI must never be fetched from the
# network during a build (builds run on offline boards and CI).
BASE_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
# A good choice for a CPU-only machine building for itself; callers pass it explicitly.
CPU_NATIVE_FLAGS = ("-DGGML_NATIVE=ON", "-DLLAMA_OPENSSL=OFF")

_log = logging.getLogger(__name__)


@dataclass
class BuildInfo:
    """What was built and from what; JSON form goes into the result-set manifest."""

    key: str
    dir: str
    source: dict[str, Any]
    source_dir: str                       # the pristine tree (holds e.g. models/ggml-vocab-*.gguf)
    commit: str | None
    cmake_flags: list[str]                # exactly what cmake was configured with
    patches: list[dict[str, str]]         # [{"path", "sha256"}] in application order
    compiler: str
    binaries: dict[str, str]              # target -> absolute path
    binary_sha256: dict[str, str]
    versions: dict[str, str]              # target -> what `TARGET --version` printed
    build_seconds: float
    built_at: str
    log: str
    unused_cmake_vars: list[str] = field(default_factory=list)
    cached: bool = field(default=False, compare=False)  # True when served from the cache by this call

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("cached")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BuildInfo:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def binary(self, target: str) -> Path:
        try:
            return Path(self.binaries[target])
        except KeyError:
            built = ", ".join(self.binaries)
            raise BuildError(f"build {self.key[:12]} has no {target} (built: {built})") from None


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (out.strip().splitlines() or ["unknown"])[0]


def compiler_identity() -> str:
    """First line of `cc --version` and `c++ --version` (or $CC/$CXX): a compiler upgrade means a rebuild."""
    cc = os.environ.get("CC", "cc")
    cxx = os.environ.get("CXX", "c++")
    return f"{_first_line([cc, '--version'])} | {_first_line([cxx, '--version'])}"


def cache_key(identity: dict[str, Any], cmake_flags: Sequence[str], patch_shas: Sequence[str],
              compiler: str) -> str:
    blob = json.dumps({"source": identity, "cmake": list(cmake_flags), "patches": list(patch_shas),
                       "compiler": compiler}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _env(src: Path) -> dict[str, str]:
    # The private copy has no .git; stop git (used by llama.cpp's build-info.cmake and by `git apply`) from
    # discovering an unrelated repository that happens to enclose the cache directory.
    return dict(os.environ, GIT_CEILING_DIRECTORIES=str(src.parent), LC_ALL="C")


def _run_logged(cmd: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> int:
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode


def _apply_patches(patches: Sequence[Path], src: Path, log: Path) -> None:
    env = _env(src)
    for p in patches:
        for args in (["--check"], []):
            cmd = ["git", "apply", *args, "--verbose", "--whitespace=nowarn", str(p)]
            if _run_logged(cmd, cwd=src, env=env, log=log) != 0:
                tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("error:")]
                why = tail[-1].removeprefix("error: ") if tail else "git apply failed"
                raise BuildError(f"patch {p} does not apply: {why}; log: {log}")


def _unused_vars(log: Path) -> list[str]:
    """cmake's 'Manually-specified variables were not used' list: a typo, or a flag this version lacks."""
    text = log.read_text(errors="replace")
    m = re.search(r"Manually-specified variables were not used by the project:\n\n((?:\s+\S+\n)+)", text)
    return m.group(1).split() if m else []


def _version(binary: Path) -> str:
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable: {e}"
    return (proc.stdout + proc.stderr).strip()


def _load_cached(key_dir: Path, targets: Sequence[str]) -> BuildInfo | None:
    if not (key_dir / "DONE").is_file():
        return None
    try:
        info = BuildInfo.from_dict(json.loads((key_dir / "build.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None
    for t in targets:
        b = info.binaries.get(t)
        if b is None or not Path(b).is_file() or sha256_file(Path(b)) != info.binary_sha256.get(t):
            return None
    info.cached = True
    return info


def build_llamacpp(
    source: SourceSpec | dict[str, Any],
    cmake_flags: Sequence[str] = CPU_NATIVE_FLAGS,
    patches: Sequence[Path] = (),
    cache_dir: Path = DEFAULT_CACHE_DIR,
    targets: Sequence[str] = DEFAULT_TARGETS,
    jobs: int | None = None,
    log: Callable[[str], None] | None = None,
) -> BuildInfo:
    """Build (or take from the cache) llama.cpp ``targets`` from ``source``, ``cmake_flags`` and ``patches``.

    Raises BuildError with a one-line message naming what failed and the log file.
    """
    say = log or _log.info
    try:
        spec = source if isinstance(source, SourceSpec) else SourceSpec.model_validate(source)
    except ValidationError as e:
        why = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise BuildError(f"engine source {source!r}: {why}") from None
    cache_dir = Path(cache_dir).expanduser().resolve()
    patch_paths = [Path(p).expanduser().resolve() for p in patches]
    for p in patch_paths:
        if not p.is_file():
            raise BuildError(f"patch {p} does not exist")
    flags = [*BASE_CMAKE_FLAGS, *cmake_flags]
    patch_shas = [sha256_file(p) for p in patch_paths]
    compiler = compiler_identity()

    with _locked(cache_dir / "sources" / ".lock"):
        prepared = prepare_source(spec, cache_dir / "sources")
    key = cache_key(prepared.identity, flags, patch_shas, compiler)
    key_dir = cache_dir / key

    hit = _load_cached(key_dir, targets)
    if hit:
        return hit
    with _locked(cache_dir / f"{key}.lock"):
        hit = _load_cached(key_dir, targets)  # another process may have finished it while we waited
        if hit:
            return hit
        return _build(prepared, flags, patch_paths, patch_shas, compiler, key, key_dir, targets,
                      jobs or os.cpu_count() or 1, say)


def _previous_targets(key_dir: Path) -> list[str] | None:
    if not (key_dir / "DONE").is_file():
        return None
    try:
        return list(json.loads((key_dir / "build.json").read_text())["binaries"])
    except (OSError, ValueError, KeyError):
        return None


def _build(prepared: PreparedSource, flags: list[str], patches: list[Path], patch_shas: list[str],
           compiler: str, key: str, key_dir: Path, targets: Sequence[str], jobs: int,
           say: Callable[[str], None]) -> BuildInfo:
    src, bld, logf = key_dir / "src", key_dir / "build", key_dir / "build.log"
    configure = list(flags)
    if prepared.commit:  # the copy has no .git, so tell build-info what `git rev-parse --short` would have
        configure.append(f"-DLLAMA_BUILD_COMMIT={prepared.commit[:7]}")
    env = _env(src)
    t0 = time.monotonic()
    previous = _previous_targets(key_dir)
    if previous is not None and (bld / "CMakeCache.txt").is_file():
        # A complete build of the same inputs that lacks a target: add it incrementally, keep the others.
        targets = list(dict.fromkeys([*previous, *targets]))
        (key_dir / "DONE").unlink()
    else:
        # Anything here without DONE is a failed or interrupted attempt: start clean rather than trust it.
        shutil.rmtree(key_dir, ignore_errors=True)
        key_dir.mkdir(parents=True)
        logf.write_text(f"# harness llama.cpp build {key}\n# source {json.dumps(prepared.identity)}\n")
        say(f"llama.cpp build {key[:12]}: copying source to {src}")
        copy_tree(prepared.tree, src)
        _apply_patches(patches, src, logf)
        say(f"llama.cpp build {key[:12]}: cmake configure (log: {logf})")
        if _run_logged(["cmake", "-S", str(src), "-B", str(bld), *configure], cwd=key_dir, env=env, log=logf):
            raise BuildError(f"llama.cpp cmake configure failed (flags: {' '.join(flags)}); log: {logf}")
    say(f"llama.cpp build {key[:12]}: compiling {', '.join(targets)} with {jobs} jobs")
    cmd = ["cmake", "--build", str(bld), "--config", "Release", "-j", str(jobs), "--target", *targets]
    if _run_logged(cmd, cwd=key_dir, env=env, log=logf):
        raise BuildError(f"llama.cpp build of {', '.join(targets)} failed; log: {logf}")

    binaries: dict[str, str] = {}
    for t in targets:
        b = bld / "bin" / t
        if not b.is_file():
            raise BuildError(f"llama.cpp build finished but {b} is missing; log: {logf}")
        binaries[t] = str(b)
    info = BuildInfo(
        key=key, dir=str(key_dir), source=prepared.identity, source_dir=str(prepared.tree),
        commit=prepared.commit, cmake_flags=configure,
        patches=[{"path": str(p), "sha256": s} for p, s in zip(patches, patch_shas, strict=True)],
        compiler=compiler, binaries=binaries,
        binary_sha256={t: sha256_file(Path(b)) for t, b in binaries.items()},
        versions={t: _version(Path(b)) for t, b in binaries.items()},
        build_seconds=round(time.monotonic() - t0, 1),
        built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        log=str(logf), unused_cmake_vars=_unused_vars(logf),
    )
    if info.unused_cmake_vars:
        ignored = ", ".join(info.unused_cmake_vars)
        say(f"llama.cpp build {key[:12]}: cmake ignored {ignored} (typo, or a flag this version lacks?)")
    (key_dir / "build.json").write_text(json.dumps(info.to_dict(), indent=1) + "\n")
    (key_dir / "DONE").write_text(info.built_at + "\n")
    say(f"llama.cpp build {key[:12]}: done in {info.build_seconds:.0f} s")
    return info

"""Build llama.cpp tools (llama-bench, llama-server) reproducibly, cached by what determines the binaries.

The build itself is ``runner.enginebuild`` (stdlib), shared with builds on boards so both are keyed alike.

Layout under ``cache_dir`` (default ``~/.cache/harness/builds``)::

    sources/               pristine downloads and checkouts (never patched)
    <key>/src/             private copy of the source, patches applied here
    <key>/build/           cmake build dir; binaries in build/bin/
    <key>/build.log        everything cmake, the compiler and git apply printed
    <key>/build.json       BuildInfo of the completed build
    <key>/DONE             written last; a key dir without it is an interrupted or failed build
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from harness.engines.errors import BuildError
from harness.engines.llamacpp.source import SourceSpec, prepare_source, sha256_file
from runner import enginebuild

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


_Info = TypeVar("_Info", bound="BuildInfo")


@dataclass
class BuildInfo:
    """What was built and from what; JSON form goes into the result-set manifest."""

    key: str
    dir: str
    source: dict[str, Any]
    source_dir: str                       # the pristine tree (holds e.g. models/ggml-vocab-*.gguf)
    commit: str | None
    cmake_flags: list[str]                # exactly what cmake was configured with (launcher: compiler_cache)
    patches: list[dict[str, str]]         # [{"path", "sha256"}] in application order
    compiler: str
    binaries: dict[str, str]              # target -> absolute path
    binary_sha256: dict[str, str]
    versions: dict[str, str]              # target -> what `TARGET --version` printed
    build_seconds: float
    built_at: str
    log: str
    unused_cmake_vars: list[str] = field(default_factory=list)
    compiler_cache: dict[str, str] | None = None  # ccache it built through (path, version, dir); not in the key
    cached: bool = field(default=False, compare=False)  # True when served from the cache by this call

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("cached")
        return d

    @classmethod
    def from_dict(cls: type[_Info], d: dict[str, Any]) -> _Info:  # a subclass's from_dict gives that subclass
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def binary(self, target: str) -> Path:
        try:
            return Path(self.binaries[target])
        except KeyError:
            built = ", ".join(self.binaries)
            raise BuildError(f"build {self.key[:12]} has no {target} (built: {built})") from None


def compiler_identity() -> str:
    """First line of `cc --version` and `c++ --version` (or $CC/$CXX): a compiler upgrade means a rebuild."""
    return str(enginebuild.compiler_identity())


def cache_key(identity: dict[str, Any], cmake_flags: Sequence[str], patch_shas: Sequence[str],
              compiler: str) -> str:
    """The same key a board computes (runner.enginebuild), so local and on-target builds are keyed alike."""
    return str(enginebuild.cache_key(identity, cmake_flags, patch_shas, compiler))


def _apply_patches(patches: Sequence[Path], src: Path, log: Path) -> None:
    try:
        enginebuild.apply_patches([str(p) for p in patches], str(src), str(log))
    except enginebuild.EngineBuildError as exc:
        raise BuildError(str(exc)) from None


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

    with enginebuild.locked(str(cache_dir / "sources" / ".lock")):
        prepared = prepare_source(spec, cache_dir / "sources")
    try:
        info = enginebuild.build_cached(str(prepared.tree), prepared.identity, prepared.commit, flags,
                                        list(zip(map(str, patch_paths), patch_shas, strict=True)), str(cache_dir),
                                        list(targets), jobs, say)
    except enginebuild.EngineBuildError as exc:
        raise BuildError(str(exc)) from None
    build = BuildInfo.from_dict(info)
    build.cached = bool(info.get("cached"))
    return build

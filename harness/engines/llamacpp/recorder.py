"""``trace-record`` (``trace_record.cpp`` beside this file): the routing recorder of ``harness trace record``,
compiled against a llama.cpp build of the harness's cache (its ``src/`` headers and the static ``libllama.a`` and
``libggml*.a`` its ``build/`` keeps), so it runs exactly the llama.cpp those tools run.

Cached by content like the builds: ``<build cache>/trace-record/<key>/trace-record`` with the key over the
program's source, the llama.cpp build's key and the compiler; through ccache when installed (as the builds).
One C++ file and a link: about a second once the llama.cpp build exists.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from harness.engines.errors import BuildError
from harness.engines.llamacpp.build import BuildInfo
from runner import enginebuild

SOURCE = Path(__file__).with_name("trace_record.cpp")
LIBS = ("libllama.a", "libggml.a", "libggml-cpu.a", "libggml-base.a")  # link order: users before what they use


def _find(root: Path, name: str, build: BuildInfo) -> Path:
    for directory, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if name in filenames:
            return Path(directory) / name
    raise BuildError(f"llama.cpp build {build.key[:12]} has no {name} under {root}; trace-record needs a static "
                     "build (BUILD_SHARED_LIBS=OFF, the harness's default)")


def _llama_root(build: BuildInfo) -> Path:
    """The llama.cpp tree in the build's source copy: itself, or one embedded (BigMoeOnEdge's third_party/)."""
    for directory, dirnames, _files in os.walk(Path(build.dir) / "src"):
        dirnames.sort()
        here = Path(directory)
        if (here / "include" / "llama.h").is_file() and (here / "ggml" / "include" / "ggml.h").is_file():
            return here
    raise BuildError(f"llama.cpp build {build.key[:12]} has no include/llama.h beside ggml/include/ggml.h")


def _commands(build: BuildInfo, key_dir: Path, binary: Path, launcher: list[str]) -> list[list[str]]:
    """Compile (through ccache when given: it caches compiles, never links), then link."""
    root = _llama_root(build)
    libs = [str(_find(Path(build.dir) / "build", lib, build)) for lib in LIBS]
    cache = Path(build.dir) / "build" / "CMakeCache.txt"
    openmp = cache.is_file() and "GGML_OPENMP_ENABLED:INTERNAL=ON" in cache.read_text(errors="replace")
    cxx = os.environ.get("CXX", "c++")
    obj = key_dir / "trace_record.o"
    compile_ = [*launcher, cxx, "-O2", "-std=c++17", "-Wall", "-Wextra", f"-I{root / 'include'}",
                f"-I{root / 'ggml' / 'include'}", "-c", str(SOURCE), "-o", str(obj)]
    link = [cxx, str(obj), *libs, *(["-fopenmp"] if openmp else []), "-lpthread", "-ldl", "-lm", "-o", str(binary)]
    return [compile_, link]


def recorder_key(build: BuildInfo) -> str:
    blob = b"\0".join([SOURCE.read_bytes(), build.key.encode(), enginebuild.compiler_identity().encode()])
    return hashlib.sha256(blob).hexdigest()


def build_recorder(build: BuildInfo, say: Callable[[str], None] = lambda _line: None) -> Path:
    """The ``trace-record`` binary for ``build`` (compiled once per content key); BuildError naming the log."""
    key = recorder_key(build)
    key_dir = Path(build.dir).parent / "trace-record" / key
    binary = key_dir / "trace-record"
    if (key_dir / "DONE").is_file() and binary.is_file():
        return binary
    with enginebuild.locked(str(key_dir.parent / f"{key}.lock")):
        if (key_dir / "DONE").is_file() and binary.is_file():
            return binary
        shutil.rmtree(key_dir, ignore_errors=True)
        key_dir.mkdir(parents=True)
        _args, env, ccache = enginebuild.compiler_cache(str(key_dir))
        if ccache is not None:  # the builds' own ccache directory, not one beside the recorder's key dirs
            env["CCACHE_DIR"] = ccache["dir"] = str(Path(build.dir).parent / "ccache")
        commands = _commands(build, key_dir, binary, [ccache["path"]] if ccache else [])
        say(f"trace-record {key[:12]}: compiling against llama.cpp build {build.key[:12]}")
        log = key_dir / "build.log"
        with log.open("w") as out:
            for command in commands:
                out.write("$ " + " ".join(command) + "\n")
                out.flush()
                done = subprocess.run(command, cwd=key_dir, env=dict(os.environ, **env), stdout=out,
                                      stderr=subprocess.STDOUT, check=False)
                if done.returncode != 0:
                    break
        if done.returncode != 0 or not binary.is_file():
            raise BuildError(f"trace-record failed to compile against llama.cpp build {build.key[:12]}; log: {log}")
        (key_dir / "DONE").write_text(build.key + "\n")
    return binary

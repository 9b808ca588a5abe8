"""What the compiler cache buys a named build: a first llama.cpp build with a cold ccache, then a build of the same
tree with one extra patch that touches one ggml-cpu file, with the ccache warm (the case of a `strategies` build
beside `base`, or of a bisect midpoint).

Both builds go through ``runner.enginebuild.build_cached`` exactly as a campaign's do, into a fresh build cache of
their own (so nothing cached elsewhere answers), from the experiment default llama.cpp source (the sdist the
harness vendors, taken from the harness's source cache). The patch is made here with ``diff -u`` and adds one
global to ``ggml/src/ggml-cpu/ggml-cpu.c`` (code, not a comment, so the preprocessed file differs too). Prints the
wall time of each build, the build cache keys and ccache's statistics after each.

    nice -n 10 .venv/bin/python bench/ccache_rebuild.py [--keep]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.engines.llamacpp.source import PreparedSource

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TOUCHED = "ggml/src/ggml-cpu/ggml-cpu.c"


def one_file_patch(tree: Path, out: Path) -> Path:
    """A real unified diff (``diff -u``) adding one global after the includes of TOUCHED."""
    original = (tree / TOUCHED).read_text()
    lines = original.splitlines(keepends=True)
    last_include = max(i for i, line in enumerate(lines) if line.startswith("#include"))
    changed = "".join(lines[:last_include + 1] + ["\nvolatile int harness_bench_marker = 1;\n"]
                      + lines[last_include + 1:])
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a", TOUCHED), Path(tmp, "b", TOUCHED)
        a.parent.mkdir(parents=True)
        b.parent.mkdir(parents=True)
        a.write_text(original)
        b.write_text(changed)
        diff = subprocess.run(["diff", "-u", f"a/{TOUCHED}", f"b/{TOUCHED}"], cwd=tmp, capture_output=True,
                              text=True, check=False)
    out.write_text(diff.stdout)
    return out


def ccache_stats(directory: str) -> dict[str, str]:
    done = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, check=False,
                          env={"CCACHE_DIR": directory, "PATH": "/usr/bin:/bin"})
    wanted = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")
    return dict(line.split("\t", 1) for line in done.stdout.splitlines() if line.split("\t", 1)[0] in wanted)


def timed_build(prepared: PreparedSource, flags: list[str], patches: list[tuple[str, str]],
                cache: Path) -> dict[str, Any]:
    from runner import enginebuild

    started = time.monotonic()
    info = enginebuild.build_cached(str(prepared.tree), prepared.identity, prepared.commit, flags, patches,
                                    str(cache), say=lambda line: print(line, flush=True))
    wall = time.monotonic() - started
    ccache = info.get("compiler_cache") or {}
    return {"key": info["key"][:16], "cached": info["cached"], "wall_s": round(wall, 1),
            "build_seconds": info["build_seconds"], "ccache": ccache.get("version"),
            "stats": ccache_stats(ccache["dir"]) if ccache else {}}


def main() -> int:
    from harness.campaign.prepare import BUILD_CACHE
    from harness.engines.llamacpp.build import BASE_CMAKE_FLAGS, CPU_NATIVE_FLAGS
    from harness.engines.llamacpp.engine import LlamaCpp
    from harness.engines.llamacpp.source import SourceSpec, prepare_source, sha256_file
    from runner import enginebuild

    if shutil.which("ccache") is None:
        print("ccache is not installed (apt-get install ccache): nothing to measure")
        return 2
    with enginebuild.locked(str(BUILD_CACHE / "sources" / ".lock")):
        prepared = prepare_source(SourceSpec.model_validate(LlamaCpp.default_source), BUILD_CACHE / "sources")
    cache = Path(tempfile.mkdtemp(prefix="harness-ccache-bench-", dir="/var/tmp"))
    flags = [*BASE_CMAKE_FLAGS, *CPU_NATIVE_FLAGS]
    patch = one_file_patch(prepared.tree, cache / "one-ggml-cpu-file.patch")
    try:
        first = timed_build(prepared, flags, [], cache)
        print(json.dumps({"first build, cold ccache": first}), flush=True)
        again = timed_build(prepared, flags, [(str(patch), sha256_file(patch))], cache)
        print(json.dumps({"one-patch rebuild, warm ccache": again}), flush=True)
        print(json.dumps({"source": prepared.identity, "commit": prepared.commit, "touched": TOUCHED,
                          "speedup": round(first["wall_s"] / again["wall_s"], 1)}))
    finally:
        if "--keep" not in sys.argv:
            shutil.rmtree(cache, ignore_errors=True)
        else:
            print(f"kept {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

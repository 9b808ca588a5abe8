"""BigMoeOnEdge (bmoe-cli) as a registered engine, built by the builder and into the cache llama.cpp uses.

The build key covers the engine source, the llama.cpp tree in ``third_party/llama.cpp``, the cmake flags and
every patch (the adaptation the llama.cpp tree needs first, then the experiment's), so a new llama.cpp or patch
is a new build and the same inputs are one build, here and on a board.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.experiment import EngineSpec
from harness.engines.base import Engine, Say, register_engine
from harness.engines.bigmoeonedge.source import (
    LLAMA_KEYS,
    PINNED_COMMIT,
    UPSTREAM_GIT,
    parse_source,
    unavailable_reason,
)
from harness.engines.bigmoeonedge.tree import EngineTree, prepare_tree
from harness.engines.errors import BuildError
from harness.engines.llamacpp.build import CPU_NATIVE_FLAGS, BuildInfo
from harness.engines.llamacpp.engine import LlamaCpp
from harness.engines.llamacpp.source import sha256_file
from runner import enginebuild

TARGETS = ("bmoe-cli",)
# Always passed before the experiment's flags: a static bmoe-cli (pushed to boards, hashed as one file); the
# engine's own gates and tests are not needed to measure it.
BASE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DBMOE_BUILD_TESTS=OFF")


@dataclass
class BmoeBuildInfo(BuildInfo):
    """llama.cpp's build record, plus whether ``--overlap`` can work with this build."""

    expert_ready_hook: bool = False


@register_engine
class BigMoeOnEdge(Engine):
    name = "bigmoeonedge"
    default_source = {"git": UPSTREAM_GIT, "commit": PINNED_COMMIT}
    default_flags = CPU_NATIVE_FLAGS

    def spec(self, given: EngineSpec | None, configured: dict[str, EngineSpec] | None = None) -> EngineSpec:
        """Defaults, plus the llama.cpp tree for an empty third_party/llama.cpp: the ``llama_*`` keys when given,
        else the experiment's llama.cpp source, else llama.cpp's default (the tree the harness builds anyway)."""
        spec = super().spec(given)
        source = dict(spec.source or {})
        if not any(key in source for key in LLAMA_KEYS):
            llama = LlamaCpp().spec((configured or {}).get(LlamaCpp.name)).source or {}
            source.update({f"llama_{key}": value for key, value in llama.items()})
        return spec.model_copy(update={"source": source})

    def unavailable(self, spec: EngineSpec) -> str | None:
        return unavailable_reason(parse_source(spec.source or {}))

    def prepare(self, spec: EngineSpec, sources: Path) -> EngineTree:
        source = parse_source(spec.source or {})
        llama = source.llama_source() or dict(LlamaCpp.default_source)
        with enginebuild.locked(str(sources / ".lock")):
            return prepare_tree(source, llama, sources)

    def flags(self, tree: EngineTree, flags: list[str]) -> list[str]:
        commit = [f"-DLLAMA_BUILD_COMMIT={tree.llama_commit[:7]}"] if tree.llama_commit else []
        return [*BASE_FLAGS, *commit, *flags]

    def build(self, spec: EngineSpec, experiment_dir: Path, cache_dir: Path, say: Say) -> BmoeBuildInfo:
        patches, flags = self.inputs(spec, experiment_dir)
        cache_dir = Path(cache_dir).expanduser().resolve()
        tree = self.prepare(spec, cache_dir / "sources")
        all_patches = [*tree.patches, *patches]
        for path in all_patches:
            if not path.is_file():
                raise BuildError(f"patch {path} does not exist")
        say(f"engine bigmoeonedge: {tree.identity['engine']['kind']} source at {str(tree.commit)[:12]}, "
            f"llama.cpp {str(tree.llama_commit)[:12]} ({tree.identity['llama.cpp']['from']})")
        try:
            info = enginebuild.build_cached(str(tree.tree), tree.identity, None, self.flags(tree, flags),
                                            [(str(p), sha256_file(p)) for p in all_patches], str(cache_dir),
                                            list(TARGETS), None, say)
        except enginebuild.EngineBuildError as exc:
            raise BuildError(f"bigmoeonedge: {exc}") from None
        build = BmoeBuildInfo.from_dict({**info, "commit": tree.commit, "expert_ready_hook": tree.expert_ready_hook})
        build.cached = bool(info.get("cached"))
        return build

    def build_on_target(self, session: Any, spec: EngineSpec, experiment_dir: Path, sources_cache: Path,
                        say: Say) -> dict[str, Any]:
        from harness.engines.llamacpp.remote import build_tree_on_target  # the transports: only for a board

        patches, flags = self.inputs(spec, experiment_dir)
        tree = self.prepare(spec, Path(sources_cache).expanduser().resolve())
        record = build_tree_on_target(session, tree.tree, tree.identity, None, self.flags(tree, flags),
                                      [*tree.patches, *patches], say, TARGETS, label="BigMoeOnEdge")
        return {**record, "commit": tree.commit, "expert_ready_hook": tree.expert_ready_hook}

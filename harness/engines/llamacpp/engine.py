"""llama.cpp as a registered engine: ``build`` (``harness.engines.llamacpp.build``) and ``build_on_target``
(``harness.engines.llamacpp.remote``) with the llama.cpp defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.experiment import EngineSpec
from harness.engines.base import Engine, Say, register_engine
from harness.engines.llamacpp.build import CPU_NATIVE_FLAGS, BuildInfo, build_llamacpp


@register_engine
class LlamaCpp(Engine):
    name = "llama.cpp"
    default_source = {"sdist": "llama-cpp-python==0.3.36"}
    default_flags = CPU_NATIVE_FLAGS

    def build(self, spec: EngineSpec, experiment_dir: Path, cache_dir: Path, say: Say) -> BuildInfo:
        patches, flags = self.inputs(spec, experiment_dir)
        return build_llamacpp(spec.source or dict(self.default_source), flags, patches, cache_dir=cache_dir, log=say)

    def build_on_target(self, session: Any, spec: EngineSpec, experiment_dir: Path, sources_cache: Path,
                        say: Say) -> dict[str, Any]:
        from harness.engines.llamacpp.remote import build_on_target  # the transports: only when a board builds

        patches, flags = self.inputs(spec, experiment_dir)
        return build_on_target(session, spec.source or dict(self.default_source), flags, patches, sources_cache, say)

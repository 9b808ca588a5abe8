"""llama.cpp: reproducible, cached builds of llama-bench and llama-server."""

from harness.engines.errors import BuildError
from harness.engines.llamacpp.build import (
    BASE_CMAKE_FLAGS,
    CPU_NATIVE_FLAGS,
    DEFAULT_CACHE_DIR,
    BuildInfo,
    build_llamacpp,
)
from harness.engines.llamacpp.source import SourceSpec

__all__ = ["BASE_CMAKE_FLAGS", "CPU_NATIVE_FLAGS", "DEFAULT_CACHE_DIR", "BuildError", "BuildInfo",
           "SourceSpec", "build_llamacpp"]

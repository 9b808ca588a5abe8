"""What a campaign needs before its first run: engine builds and synthetic models.

Both are made once and cached by a hash of their inputs (builds in ~/.cache/harness/builds, models
in ~/.cache/harness/models), so a second campaign starts at once and two campaigns with the same
inputs share the same binaries and files byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config.experiment import EngineSpec, Experiment, SynthSpec
from harness.units import parse_size

MODEL_CACHE = Path(os.environ.get("HARNESS_MODEL_CACHE", "~/.cache/harness/models")).expanduser()
BUILD_CACHE = Path(os.environ.get("HARNESS_BUILD_CACHE", "~/.cache/harness/builds")).expanduser()

Say = Callable[[str], None]


def engines_needed(experiment: Experiment, step_engines: set[str]) -> dict[str, EngineSpec]:
    """Engines the steps use: as configured, or the default source when the experiment names none."""
    return {name: experiment.engine.get(name, EngineSpec()) for name in sorted(step_engines)}


def build_engines(engines: dict[str, EngineSpec], experiment_dir: Path, say: Say) -> dict[str, Any]:
    """Build (or take from the cache) every engine; returns name -> BuildInfo."""
    from harness.engines.llamacpp.build import CPU_NATIVE_FLAGS, build_llamacpp

    builds = {}
    for name, spec in engines.items():
        patches = [(experiment_dir / p).resolve() for p in spec.patches]
        flags = list(spec.cmake) if spec.cmake is not None else list(CPU_NATIVE_FLAGS)
        say(f"engine {name}: building from {json.dumps(spec.source)} (cached after the first time)")
        builds[name] = build_llamacpp(spec.source, flags, patches, cache_dir=BUILD_CACHE, log=say)
    return builds


def synth_key(spec: SynthSpec) -> str:
    from harness.models import synth

    identity = {"spec": spec.model_dump(), "writer": getattr(synth, "FORMAT_VERSION", 1)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def synth_model(spec: SynthSpec, say: Say, cache: Path = MODEL_CACHE) -> tuple[Path, dict[str, Any]]:
    """The cached synthetic model for ``spec`` (made now if missing) and its description."""
    from harness.models.synth import synth_moe

    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"qwen3moe-{synth_key(spec)}.gguf"
    info_path = path.with_suffix(".json")
    if path.exists() and info_path.exists():
        return path, json.loads(info_path.read_text())
    say(f"synthesizing a qwen3moe model ({spec.size or 'default size'}, {spec.quant}) into {path}")
    tmp = path.with_suffix(".partial")
    info = synth_moe(tmp, size_bytes=parse_size(spec.size) if spec.size is not None else None,
                     layers=spec.layers, experts=spec.experts, used=spec.used, hidden=spec.hidden, ff=spec.ff,
                     quant=spec.quant, seed=spec.seed)
    described = {k: v for k, v in info.to_dict().items() if k != "tensors"}
    described["path"] = str(path)
    os.replace(tmp, path)
    info_path.write_text(json.dumps(described, indent=1))
    return path, described

"""What a campaign needs before its first run: engine builds and synthetic models.

Both are made once and cached by a hash of their inputs (builds in ~/.cache/harness/builds, models
in ~/.cache/harness/models), so a second campaign starts at once and two campaigns with the same
inputs share the same binaries and files byte for byte. A board gets the same: engines built there
into ``<workdir>/cache/builds`` (same keys) and models pushed to ``<workdir>/cache/models``, each
verified by sha256 once and skipped afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.boards.transports import put_bytes
from harness.config.experiment import EngineSpec, Experiment, SynthSpec
from harness.engines import ENGINES
from harness.errors import TargetError
from harness.units import parse_size
from runner import enginebuild
from runner.util import sha256_file

MODEL_CACHE = Path(os.environ.get("HARNESS_MODEL_CACHE", "~/.cache/harness/models")).expanduser()
BUILD_CACHE = Path(os.environ.get("HARNESS_BUILD_CACHE", "~/.cache/harness/builds")).expanduser()

Say = Callable[[str], None]


def engines_needed(experiment: Experiment, step_engines: set[str]) -> dict[str, EngineSpec]:
    """Engines the steps use: as configured, with the engine's defaults where the experiment says nothing."""
    return {name: ENGINES[name].spec(experiment.engine.get(name), experiment.engine) for name in sorted(step_engines)}


def drop_unavailable(engines: dict[str, EngineSpec], say: Say) -> set[str]:
    """Optional engines whose source cannot be had here (no network, no archive): each said in one line, taken
    out of ``engines`` and returned, so the campaign runs without their steps."""
    dropped = set()
    for name, spec in list(engines.items()):
        reason = ENGINES[name].unavailable(spec) if spec.optional else None
        if reason:
            say(f"engine {name} left out (optional): {reason}; its steps do not run")
            del engines[name]
            dropped.add(name)
    return dropped


def build_engines(engines: dict[str, EngineSpec], experiment_dir: Path, say: Say) -> dict[str, Any]:
    """Build (or take from the cache) every engine, each by its registered builder; returns name -> build."""
    builds = {}
    for name, spec in engines.items():
        say(f"engine {name}: building from {json.dumps(spec.source)} (cached after the first time)")
        builds[name] = ENGINES[name].build(spec, experiment_dir, BUILD_CACHE, say)
    return builds


def synth_key(spec: SynthSpec) -> str:
    from harness.models import synth
    from harness.models.routing import parse_routing

    described = spec.model_dump()
    described["routing"] = str(parse_routing(spec.routing))  # "zipf" and "zipf:<its default>" are one model
    if described["routing"] == "narrow":  # the default writes the bytes it wrote before routing existed
        del described["routing"]
    identity = {"spec": described, "writer": getattr(synth, "FORMAT_VERSION", 1)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def synth_model(spec: SynthSpec, say: Say, cache: Path = MODEL_CACHE) -> tuple[Path, dict[str, Any]]:
    """The cached synthetic model for ``spec`` (made now if missing) and its description."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"qwen3moe-{synth_key(spec)}.gguf"
    # two campaigns (or test suites) on one machine may want the same model at once: one makes it, the other
    # waits and finds it made (they would otherwise write the same .partial file together)
    with enginebuild.locked(str(path.with_suffix(".lock"))):
        return _cached_or_made(spec, path, say)


def _cached_or_made(spec: SynthSpec, path: Path, say: Say) -> tuple[Path, dict[str, Any]]:
    from harness.models.synth import synth_moe

    info_path = path.with_suffix(".json")
    if path.exists() and info_path.exists():
        described = json.loads(info_path.read_text())
        if "sha256" not in described:  # made by an older harness: hash it once
            described["sha256"] = sha256_file(path)
            info_path.write_text(json.dumps(described, indent=1))
        return path, described
    say(f"synthesizing a qwen3moe model ({spec.size or 'default size'}, {spec.quant}, routing {spec.routing})"
        f" into {path}")
    tmp = path.with_suffix(".partial")
    info = synth_moe(tmp, size_bytes=parse_size(spec.size) if spec.size is not None else None,
                     layers=spec.layers, experts=spec.experts, used=spec.used, hidden=spec.hidden, ff=spec.ff,
                     quant=spec.quant, seed=spec.seed, routing=spec.routing)
    described = {k: v for k, v in info.to_dict().items() if k != "tensors"}
    described["path"] = str(path)
    described["sha256"] = sha256_file(tmp)
    os.replace(tmp, path)
    info_path.write_text(json.dumps(described, indent=1))
    return path, described


def prepare_target(session: Any, engines: dict[str, EngineSpec], models: dict[str, tuple[str, dict[str, Any]]],
                   experiment_dir: Path, say: Say) -> None:
    """Build ``engines`` on the board and push ``models`` (file name -> (local path, description)) to it;
    fills ``session.engines`` and ``session.models``."""
    for name, spec in engines.items():
        session.engines[name] = ENGINES[name].build_on_target(session, spec, experiment_dir, BUILD_CACHE / "sources",
                                                              say)
    for name, (path, info) in models.items():
        session.models[name] = push_file(session, Path(path), info["sha256"], say)


def push_file(session: Any, local: Path, sha256: str, say: Say) -> str:
    """``local`` on the board under ``<workdir>/cache/models``; sent only when the board lacks this content.

    The ``.sha256`` beside it is written only after the board hashed what arrived, so its presence means
    a complete, verified copy (a pull cut short or a flipped byte is sent again)."""
    transport = session.transport
    remote = f"{session.workdir}/cache/models/{local.name}"
    marker = f"{remote}.sha256"
    found = transport.run(["cat", marker])
    if found.returncode == 0 and found.stdout.decode().strip() == sha256 and transport.exists(remote):
        return remote
    size = local.stat().st_size
    say(f"{session.target.name}: pushing {local.name} ({size / 2**20:.0f} MiB) to {remote}")
    transport.put(local, remote)
    done = transport.run([session.python, "-m", "runner", "sha256", remote], cwd=session.runner_root, timeout=3600)
    got = done.stdout.decode().strip()
    if done.returncode != 0 or got != sha256:
        transport.run(["rm", "-f", remote])
        raise TargetError(f"target {session.target.name}: {remote} arrived damaged (sha256 {got[:12] or '?'}, "
                          f"expected {sha256[:12]})")
    put_bytes(transport, (sha256 + "\n").encode(), marker)
    return remote

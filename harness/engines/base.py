"""What every engine shares: the :class:`Engine` base, the registry of engines by name, and the check of
an experiment's ``engine:`` block against that registry.

An engine is something a step runs (``StepKind.engine`` names it). The campaign asks the registry for it
by that name and has it built once: here, into the local build cache, for a local target, or on each
board, into the board's cache. Both builds are cached by what determines the binaries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from harness.config.experiment import EngineSpec
from harness.registry import Registry, check_implemented

Say = Callable[[str], None]


class Engine(ABC):
    """A kind of engine; ``build`` and ``build_on_target`` are what every engine must provide (checked when
    it registers), the rest has a default."""

    name: ClassVar[str]
    default_source: ClassVar[dict[str, str]]  # where the source comes from when the experiment says nothing
    default_flags: ClassVar[tuple[str, ...]] = ()  # build flags when the experiment gives none

    def spec(self, given: EngineSpec | None, configured: dict[str, EngineSpec] | None = None) -> EngineSpec:
        """The experiment's spec for this engine (or none), with the defaults filled in; ``configured`` is the
        experiment's whole ``engine:`` block (an engine built on another's tree reads that one's source)."""
        given = given or EngineSpec()
        return given if given.source is not None else given.model_copy(update={"source": dict(self.default_source)})

    def inputs(self, spec: EngineSpec, experiment_dir: Path) -> tuple[list[Path], list[str]]:
        """Patches (absolute; given relative to the experiment file) and the build flags."""
        patches = [(experiment_dir / p).resolve() for p in spec.patches]
        return patches, list(spec.cmake) if spec.cmake is not None else list(self.default_flags)

    def unavailable(self, spec: EngineSpec) -> str | None:
        """Why this engine's source cannot be had on this machine (e.g. no network and no archive), or None.
        An engine the experiment marks ``optional`` is then left out, with its steps, in one line."""
        return None

    @abstractmethod
    def build(self, spec: EngineSpec, experiment_dir: Path, cache_dir: Path, say: Say) -> Any:
        """Build on this machine (or take the cached build); a record with ``to_dict()``, ``key``, ``dir``,
        ``cached`` and ``binaries``."""

    @abstractmethod
    def build_on_target(self, session: Any, spec: EngineSpec, experiment_dir: Path, sources_cache: Path,
                        say: Say) -> dict[str, Any]:
        """Build on the session's board (or find it built there); the board's build record."""


ENGINES: Registry[Engine] = Registry("engine")


def register_engine(cls: type[Engine]) -> type[Engine]:
    check_implemented(cls, "engine")
    ENGINES.add(cls.name, cls(), cls)
    return cls


def check_engines(experiment: Any, doc: Any) -> None:
    """Every engine the experiment configures is one the harness knows."""
    for name in experiment.engine:
        if name not in ENGINES:
            raise doc.error(("engine", name), ENGINES.unknown_message(name))

"""The platform base and registry: what kind of machine a target is, so which facts, expectations and
cache methods apply.

A platform probes facts through the target's transport (by asking the runner, which reads the
machine locally), and checks an experiment's ``expect:`` block against them. Expectations are
read back, never assumed: the seed article's board said MAXN_SUPER while its clocks were not.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.errors import TargetError
from harness.registry import Registry, check_implemented


@dataclass(frozen=True)
class ExpectationResult:
    name: str
    expected: Any
    seen: Any
    ok: bool
    message: str


class Platform(ABC):
    """A kind of machine; ``check`` is what every platform must provide (checked when it registers), ``probe``
    has a default."""

    name: ClassVar[str]
    expectations: ClassVar[dict[str, str]] = {}  # name -> what it checks (for errors and docs)

    def probe(self, session: Any, files: list[str], tools: Sequence[str] = ()) -> dict[str, Any]:
        argv = [session.python, "-m", "runner", "probe", "--block-device", session.target.block_device]
        for path in files:
            argv += ["--file", path]
        for tool in tools:
            argv += ["--tool", tool]
        result = session.transport.run(argv, cwd=session.runner_root, timeout=120).check()
        try:
            return json.loads(result.stdout)
        except ValueError:
            raise TargetError(f"target {session.target.name}: the runner's probe printed no JSON") from None

    @abstractmethod
    def check(self, expect: dict[str, Any], facts: dict[str, Any], session: Any) -> list[ExpectationResult]:
        """Each expectation of ``expect`` checked against the probed ``facts``."""


PLATFORMS: Registry[Platform] = Registry("platform")


def register_platform(cls: type[Platform]) -> type[Platform]:
    check_implemented(cls, "platform")
    PLATFORMS.add(cls.name, cls(), cls)
    return cls


Check = Callable[[Any, dict[str, Any], Any], ExpectationResult]

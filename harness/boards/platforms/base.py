"""The platform base and registry: what kind of machine a target is, so which facts, expectations and
cache methods apply.

A platform probes facts through the target's transport (by asking the runner, which reads the
machine locally), and checks an experiment's ``expect:`` block against them. Expectations are
read back, never assumed: the seed article's board said MAXN_SUPER while its clocks were not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.errors import TargetError


@dataclass(frozen=True)
class ExpectationResult:
    name: str
    expected: Any
    seen: Any
    ok: bool
    message: str


class Platform:
    name: ClassVar[str]
    expectations: ClassVar[dict[str, str]] = {}  # name -> what it checks (for errors and docs)

    def probe(self, session: Any, files: list[str], tools: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
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

    def check(self, expect: dict[str, Any], facts: dict[str, Any], session: Any) -> list[ExpectationResult]:
        raise NotImplementedError


PLATFORMS: dict[str, Platform] = {}


def register_platform(cls: type[Platform]) -> type[Platform]:
    PLATFORMS[cls.name] = cls()
    return cls


Check = Callable[[Any, dict[str, Any], Any], ExpectationResult]

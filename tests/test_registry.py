"""The generic plug-in registry: a second definition under a taken name is refused naming both, a kind class
missing a method of its base is refused when it registers (at import, not when a run reaches the method), an
unknown name is one line listing the known ones, and registration order is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.boards.platforms import PLATFORMS, Platform, register_platform
from harness.engines import ENGINES, Engine, register_engine
from harness.errors import HarnessError
from harness.parsers import PARSERS, ParseError, parse
from harness.parsers.base import register_parser
from harness.registry import Registry, RegistryError
from harness.steps import STEPS, StepKind
from harness.steps.base import register_step


def test_a_second_definition_under_a_taken_name_is_refused_naming_both() -> None:
    before = STEPS["read"]

    class Read(StepKind):
        name = "read"

        def estimate_s(self, config: Any, file_sizes: dict[str, int]) -> float:
            return 0.0

        def runner_spec(self, config: Any, files: dict[str, str], cache: str) -> dict[str, Any]:
            return {}

    with pytest.raises(RegistryError) as info:
        register_step(Read)
    message = str(info.value)
    assert message == (f"step 'read' is registered twice: by {type(before).__module__}:{type(before).__qualname__} "
                       f"and by {__name__}:{Read.__qualname__}")
    assert "\n" not in message and isinstance(info.value, HarnessError)
    assert STEPS["read"] is before  # the first stays: nothing silently replaced


def test_a_parser_registered_twice_under_one_kind_is_refused_and_the_first_kept() -> None:
    first = PARSERS["fio"]

    with pytest.raises(RegistryError, match=r"^kind 'fio' is registered twice: by harness\.parsers\.fio:\S+ "
                                            rf"and by {__name__}:.*other_fio$"):
        @register_parser("fio")
        def other_fio(data: bytes) -> list[dict[str, Any]]:
            return []

    assert PARSERS["fio"] is first


def test_a_step_missing_a_method_is_refused_when_it_registers() -> None:
    class Half(StepKind):
        name = "half"

        def estimate_s(self, config: Any, file_sizes: dict[str, int]) -> float:
            return 1.0

    with pytest.raises(RegistryError) as info:
        register_step(Half)  # type: ignore[type-abstract]  # the point: refused at run time too
    assert str(info.value) == f"step {__name__}:{Half.__qualname__} does not implement runner_spec"
    assert "half" not in STEPS


def test_an_engine_and_a_platform_missing_methods_are_refused_naming_each() -> None:
    class NoBuild(Engine):
        name = "nobuild"
        default_source = {"path": "/none"}

    with pytest.raises(RegistryError, match=r"^engine .*NoBuild does not implement build, build_on_target$"):
        register_engine(NoBuild)  # type: ignore[type-abstract]  # the point: refused at run time too

    class NoCheck(Platform):
        name = "nocheck"

    with pytest.raises(RegistryError, match=r"^platform .*NoCheck does not implement check$"):
        register_platform(NoCheck)  # type: ignore[type-abstract]  # the point: refused at run time too
    assert "nobuild" not in ENGINES and "nocheck" not in PLATFORMS


def test_an_unknown_name_is_one_line_listing_the_known_ones() -> None:
    with pytest.raises(ParseError) as info:
        parse("nosuch", b"")
    assert str(info.value) == f"unknown kind 'nosuch' (known: {', '.join(sorted(PARSERS))})"
    registry: Registry[int] = Registry("widget", unknown=LookupError)
    registry.add("b", 2, test_an_unknown_name_is_one_line_listing_the_known_ones)
    registry.add("a", 1, test_an_unknown_name_is_one_line_listing_the_known_ones)
    with pytest.raises(LookupError, match=r"^unknown widget 'c' \(known: a, b\)$"):
        registry.get_or_raise("c")
    assert registry.get_or_raise("a") == 1


def test_registration_order_is_kept() -> None:
    registry: Registry[str] = Registry("thing")
    for name in ("zeta", "alpha", "mid"):
        registry.add(name, name.upper(), Path)
    assert list(registry) == ["zeta", "alpha", "mid"] and list(registry.values()) == ["ZETA", "ALPHA", "MID"]

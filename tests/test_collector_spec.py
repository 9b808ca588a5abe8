"""Every collector's ``runner_spec`` (a ``CollectorSpec`` of runner/contract.py) carries each option of its Config,
under the option's own name and in its order: an option a collector adds to its Config but not to its spec would
reach the runner as its default, silently."""

from __future__ import annotations

from typing import Any, get_type_hints

import pytest

from harness.collectors import COLLECTORS
from runner.contract import CollectorSpec


def _other(value: Any) -> Any:
    """A valid value unlike the default, so a spec that drops the option and lets the runner default it shows."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2 if value else 100
    return "python" if value == "native" else value


@pytest.mark.parametrize("name", sorted(COLLECTORS))
def test_every_config_option_reaches_the_spec(name: str) -> None:
    kind = COLLECTORS[name]
    defaults = kind.Config().model_dump()
    changed = kind.Config(**{key: _other(value) for key, value in defaults.items()})
    for config in (kind.Config(), changed):
        spec = kind.runner_spec(config)
        assert list(spec.items()) == [("kind", name), *config.model_dump().items()]
        assert set(spec) <= set(get_type_hints(CollectorSpec))  # the contract documents every key it sends

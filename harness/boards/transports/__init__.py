"""Transports: how the controller reaches a target (``local``, ``ssh``, ``adb``). The protocol and the
registry are in ``base``; each module here registers one kind. To add one: a module with a class that
implements ``base.Transport`` and ``@register_transport("name", ...)`` on its opener, imported below."""

from __future__ import annotations

from typing import Any

from harness.boards.transports import adb as _adb  # noqa: F401  (registers)
from harness.boards.transports import local as _local  # noqa: F401  (registers)
from harness.boards.transports import ssh as _ssh  # noqa: F401  (registers)
from harness.boards.transports.base import (
    TRANSPORTS,
    CommandResult,
    Transport,
    TransportKind,
    put_bytes,
    register_transport,
)
from harness.errors import TargetError

__all__ = ["TRANSPORTS", "CommandResult", "Transport", "TransportKind", "connect", "kind_of", "put_bytes",
           "register_transport"]


def kind_of(target: Any) -> TransportKind:
    """The registered kind of a target's transport; one line naming the known ones otherwise."""
    kind = target.transport_kind
    if kind not in TRANSPORTS:
        raise TargetError(f"target {target.name}: transport {kind!r} is not available (known: {TRANSPORTS.known()})")
    return TRANSPORTS[kind]


def connect(target: Any) -> Transport:
    return kind_of(target).open(target)

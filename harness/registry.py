"""One registry of plug-ins by name, used by every kind (steps, collectors, engines, parsers, figures,
transports, platforms).

Plug-ins register at import, so a mistake in one shows when the harness starts, not when a run reaches
it: a second definition under a name already taken is refused with one line naming both definitions
(a silent replacement would measure the wrong code), and a kind class missing a method its abstract base
requires is refused with one line naming the class and the methods. An unknown name is one line listing
the known ones. Registration order is kept (``harness parse`` and the docs list kinds in that order).

This module sits at the bottom of the layers with ``errors`` and ``units``; parsers may import it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, MutableMapping
from typing import Generic, TypeVar

from harness.errors import HarnessError

T = TypeVar("T")


class RegistryError(HarnessError):
    """A plug-in registered twice under one name, or a kind class that does not implement its base.

    A programming error in the harness or a plug-in, raised at import; not the user's input."""


def origin(obj: object) -> str:
    """Where ``obj`` (a class or function) is defined, as ``module:qualname``."""
    module = getattr(obj, "__module__", None) or "?"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{module}:{name}"


def check_implemented(cls: type, what: str) -> None:
    """Refuse a kind class that leaves abstract methods of its base unimplemented (it could not be
    instantiated, and would otherwise fail only when a run calls the method)."""
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing or inspect.isabstract(cls):
        raise RegistryError(f"{what} {origin(cls)} does not implement {', '.join(missing)}")


class Registry(MutableMapping[str, T], Generic[T]):
    """Plug-ins of one kind by name: a mapping to the code that reads it, :meth:`add` to the code that
    registers. Item assignment and deletion replace without a check: they exist for tests that put a
    double in place for one test (``monkeypatch.setitem``, ``patch.dict``); registration always uses ``add``."""

    def __init__(self, what: str, unknown: Callable[[str], Exception] | None = None) -> None:
        self.what = what  # "step", "parser kind", ... (in messages)
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._unknown = unknown or (lambda message: KeyError(message))

    def add(self, name: str, item: T, defined_by: object) -> T:
        """Register ``item`` under ``name``; ``defined_by`` is the class or function that defines it (named in
        the message when another definition already holds the name)."""
        where = origin(defined_by)
        if name in self._items:
            raise RegistryError(f"{self.what} {name!r} is registered twice: by {self._origins[name]} "
                                f"and by {where}")
        self._items[name] = item
        self._origins[name] = where
        return item

    def known(self) -> str:
        """The known names, sorted, as a message lists them."""
        return ", ".join(sorted(self._items))

    def unknown_message(self, name: str) -> str:
        return f"unknown {self.what} {name!r} (known: {self.known()})"

    def get_or_raise(self, name: str) -> T:
        """The plug-in named ``name``; an unknown name is one line (the registry's error type) listing the
        known ones."""
        try:
            return self._items[name]
        except KeyError:
            raise self._unknown(self.unknown_message(name)) from None

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __setitem__(self, name: str, item: T) -> None:
        self._items[name] = item
        self._origins[name] = origin(type(item))

    def __delitem__(self, name: str) -> None:
        del self._items[name]
        del self._origins[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self._items)})"

"""Explicit value templating from the matrix: ``"{threads}"`` -> 2.

Only plain names from the matrix cell are substituted; there is no expression language and the
result is a value, never a shell string. A value that is exactly ``"{name}"`` keeps the matrix
value's type (so ``iodepth: "{qd}"`` becomes the integer 4).
"""

from __future__ import annotations

import string
from typing import Any

from harness.config.yamlsrc import Loc, YamlDoc

_FORMATTER = string.Formatter()


def template_names(value: Any) -> set[str]:
    """Every ``{name}`` used anywhere inside ``value``."""
    if isinstance(value, str):
        return {field for _, field, _, _ in _FORMATTER.parse(value) if field is not None}
    if isinstance(value, dict):
        return set().union(*(template_names(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(template_names(v) for v in value)) if value else set()
    return set()


def render(value: Any, params: dict[str, Any], doc: YamlDoc, loc: Loc) -> Any:
    """Substitute matrix values into ``value``; unknown names are ConfigErrors at ``loc``."""
    if isinstance(value, dict):
        return {k: render(v, params, doc, loc + (k,)) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, params, doc, loc + (i,)) for i, v in enumerate(value)]
    if not isinstance(value, str) or "{" not in value:
        return value
    try:
        parts = list(_FORMATTER.parse(value))
    except ValueError as exc:
        raise doc.error(loc, f"bad template {value!r}: {exc}") from None
    fields = [field for _, field, _, _ in parts if field is not None]
    for field in fields:
        if field not in params:
            known = ", ".join(sorted(params)) or "none"
            raise doc.error(loc, f"template {value!r} names {field!r}, which is not a matrix key "
                                 f"(matrix keys: {known})")
    if len(parts) == 1 and parts[0][0] == "" and fields and parts[0][2] == "" and parts[0][3] is None:
        return params[fields[0]]
    try:
        return value.format_map(params)
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise doc.error(loc, f"bad template {value!r}: {exc}") from None

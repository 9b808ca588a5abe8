"""Turn pydantic validation errors into one-line ConfigErrors with file, line and field."""

from __future__ import annotations

import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from harness.config.yamlsrc import Loc, YamlDoc

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _submodel(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model class that owns the last element of ``loc`` (for listing allowed keys)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = _model_in(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def describe(error: ErrorDetails, model: type[BaseModel], loc: Loc) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        owner = _submodel(model, loc[:-1]) if len(loc) > 1 else model
        allowed = ", ".join(owner.model_fields) if owner else ""
        return f"unknown key {loc[-1]!r}" + (f" (expected one of: {allowed})" if allowed else "")
    if kind == "missing":
        return "required field is missing"
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if kind not in ("value_error", "assertion_error") and "input" in error:
        shown = repr(error["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        message = f"{message} (got {shown})"
    return message


def _data_loc(data: Any, loc: tuple[Any, ...]) -> tuple[Loc, bool]:
    """Keep the parts of a pydantic loc that index into the data; drop union-branch tags such as
    'str' or 'FioJob'. Also say whether the whole path exists (the last key may be an unknown one)."""
    kept: list[str | int] = []
    node, exists = data, True
    for part in loc:
        if isinstance(node, dict) and part in node:
            kept.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            kept.append(part)
            node = node[part]
        elif isinstance(part, str) and (part[:1].isupper() or "[" in part or part in _TYPE_TAGS):
            continue
        else:
            kept.append(part)  # a missing key: still the right place to point at
            exists = False
            node = None
    return tuple(kept), exists


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "literal"}


def _best_error(errors: list[ErrorDetails], data: Any) -> tuple[ErrorDetails, Loc]:
    """Among union alternatives, the error that got deepest into the data is the one to show."""
    scored = []
    for order, error in enumerate(errors):
        loc, _ = _data_loc(data, tuple(error["loc"]))
        scored.append((-len(loc), order, error, loc))
    _, _, error, loc = min(scored, key=lambda item: item[:2])
    return error, loc


def validate(model: type[M], data: Any, doc: YamlDoc, prefix: Loc = ()) -> M:
    """Validate ``data`` (found at ``prefix`` in ``doc``) as ``model``; raise ConfigError on the first problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error, loc = _best_error(exc.errors(), data)
        raise doc.error(prefix + loc, describe(error, model, loc)) from None

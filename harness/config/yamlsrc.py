"""Load YAML while remembering the line of every key and list item.

Validation errors then point at ``file:line`` for the exact field, which is what a person editing
an experiment needs. PyYAML's composed node tree carries the marks; we walk it once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError

Loc = tuple[str | int, ...]


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (a silent overwrite hides typos)."""


def _line_map(node: yaml.Node, loc: Loc, lines: dict[Loc, int], source: str) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise ConfigError(f"duplicate key {key!r}", file=source, line=key_node.start_mark.line + 1,
                                  field=_dotted(loc + (key,)))
            seen.add(key)
            lines[loc + (key,)] = key_node.start_mark.line + 1
            _line_map(value_node, loc + (key,), lines, source)
            # the key's own line is more useful than the value's for "unknown key" errors
            lines[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, loc + (index,), lines, source)


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def dotted(loc: Loc) -> str:
    """``('steps', 0, 'fio', 'jobs')`` -> ``steps[0].fio.jobs``."""
    return _dotted(loc)


class YamlDoc:
    """A parsed YAML document plus the line of every location in it."""

    def __init__(self, data: Any, lines: dict[Loc, int], source: str) -> None:
        self.data, self.lines, self.source = data, lines, source

    def line_of(self, loc: Loc) -> int | None:
        """Line of ``loc`` or of its nearest existing ancestor."""
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get((), None)

    def error(self, loc: Loc, message: str) -> ConfigError:
        return ConfigError(message, file=self.source, line=self.line_of(loc), field=dotted(loc) or None)


def load_yaml(path: Path, *, display: str | None = None) -> YamlDoc:
    """Parse ``path``; any problem becomes a one-line ConfigError naming file and line."""
    source = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=source) from None
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"malformed YAML: {problem}", file=source, line=line) from None
    if node is None:
        raise ConfigError("the file is empty", file=source, line=1)
    lines: dict[Loc, int] = {}
    _line_map(node, (), lines, source)
    data = yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    return YamlDoc(data, lines, source)

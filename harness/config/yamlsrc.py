"""Load YAML while remembering the line of every key and list item.

Validation errors then point at ``file:line`` for the exact field, which is what a person editing
an experiment needs. PyYAML's composed node tree carries the marks; we walk it once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError

Loc = tuple[str | int, ...]


# How deep collections may nest. An experiment nests about eight levels; PyYAML composes (and the line map walks)
# a document recursively, so a few hundred levels ended in a RecursionError traceback instead of one line.
MAX_YAML_DEPTH = 64


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (a silent overwrite hides typos) and nesting past MAX_YAML_DEPTH."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _TooDeep(mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _TooDeep(Exception):
    """Raised inside the composer (which has no file name); load_yaml turns it into a ConfigError."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


# A file this size is far beyond any experiment; above it the file is refused before it is parsed.
MAX_YAML_BYTES = 1 << 20
MAX_YAML_ENV = "HARNESS_MAX_YAML_BYTES"
# How many values a document may hold once its aliases are expanded (an experiment has hundreds; an alias
# bomb of nine anchors of nine aliases each has 9**9).
MAX_EXPANDED_VALUES = 100_000


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many values ``node`` stands for with every alias expanded; each node is counted once (memo), so a
    bomb costs as many steps as it has nodes, not as many as it expands to."""
    known = memo.get(id(node))
    if known is not None:
        return known
    memo[id(node)] = 1  # a recursive alias (a list that contains itself) counts once
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(item, memo) for item in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


def _line_map(node: yaml.Node, loc: Loc, lines: dict[Loc, int], source: str,
              seen: set[int] | None = None) -> None:
    """Lines of every key and item. An alias is the same node object as its anchor: its lines are the anchor's,
    so a node is walked once (walking through aliases is what made an alias bomb take all memory)."""
    seen = set() if seen is None else seen
    lines[loc] = node.start_mark.line + 1
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode) and "\x00" in node.value:
        # a "\0" escape: a NUL in a name or path reached os calls as "embedded null byte" (a traceback)
        raise ConfigError("a NUL character (\\0) in a value: no name, path or option may hold one", file=source,
                          line=node.start_mark.line + 1, field=_dotted(loc) or None)
    if isinstance(node, yaml.MappingNode):
        keys: set[Any] = set()  # this mapping's keys; `seen` stays the node ids of the whole walk
        for key_node, value_node in node.value:
            key = key_node.value
            if isinstance(key, str) and "\x00" in key:
                raise ConfigError("a NUL character (\\0) in a key", file=source, line=key_node.start_mark.line + 1,
                                  field=_dotted(loc) or None)
            if key in keys:
                raise ConfigError(f"duplicate key {key!r}", file=source, line=key_node.start_mark.line + 1,
                                  field=_dotted(loc + (key,)))
            keys.add(key)
            lines[loc + (key,)] = key_node.start_mark.line + 1
            _line_map(value_node, loc + (key,), lines, source, seen)
            # the key's own line is more useful than the value's for "unknown key" errors
            lines[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, loc + (index,), lines, source, seen)


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


def _max_bytes(source: str) -> int:
    raw = os.environ.get(MAX_YAML_ENV)
    if not raw:
        return MAX_YAML_BYTES
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{MAX_YAML_ENV}={raw!r} is not a number of bytes", file=source) from None


def _line_and_column(text: str, position: int) -> tuple[int, int]:
    """1-based line and column of character ``position`` of ``text``."""
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def load_yaml(path: Path, *, display: str | None = None) -> YamlDoc:
    """Parse ``path``; any problem becomes a one-line ConfigError naming file and line."""
    source = display or str(path)
    limit = _max_bytes(source)
    try:
        size = path.stat().st_size
        if size > limit:
            raise ConfigError(f"the file is {size} bytes, more than the {limit} an experiment or target file may have "
                              f"(raise it with {MAX_YAML_ENV}=BYTES if it really is that big)", file=source)
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=source) from None
    try:
        node = yaml.compose(text, Loader=_Loader)
    except _TooDeep as exc:
        raise ConfigError(f"collections nest more than {MAX_YAML_DEPTH} levels deep (an experiment needs about "
                          "eight)", file=source, line=exc.line) from None
    except yaml.reader.ReaderError as exc:  # a control character (a NUL byte) anywhere in the file
        line, column = _line_and_column(text, exc.position)
        what = "a NUL byte" if exc.character in ("\x00", 0) else f"control character {exc.character!r}"
        raise ConfigError(f"{what} at column {column}: a YAML file is text without control characters",
                          file=source, line=line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        mark_line = mark.line + 1 if mark else None
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"malformed YAML: {problem}", file=source, line=mark_line) from None
    except yaml.YAMLError as exc:  # anything else PyYAML refuses: still one line
        raise ConfigError(f"malformed YAML: {exc}".splitlines()[0], file=source) from None
    if node is None:
        raise ConfigError("the file is empty", file=source, line=1)
    expanded = _expanded_size(node, {})
    if expanded > MAX_EXPANDED_VALUES:
        raise ConfigError(f"the document expands to {expanded} values through its aliases (at most "
                          f"{MAX_EXPANDED_VALUES}): an alias bomb, or anchors used far more than an experiment needs",
                          file=source, line=1)
    lines: dict[Loc, int] = {}
    _line_map(node, (), lines, source)
    data = yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    return YamlDoc(data, lines, source)

"""The README and docs/ point at what exists: every relative link (and its #anchor) resolves, every repository
path the README names in backticks is there, every ``harness`` command of its table is a real command, and the
README stays a front page (the measured history lives in docs/measurements.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from tests.helpers import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# Top-level folders a path in backticks starts with; anything with a placeholder or a glob is a pattern, not a path
TOP = ("bench/", "docs/", "engines/", "experiments/", "harness/", "notebooks/", "runner/", "targets/", "tests/",
       ".github/", ".ci/")
PATTERN = re.compile(r"[<>*{}|\s]|\.\.\.|\[")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))  # a '# comment' in a code block is no heading
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        found += [(number, m.group(1)) for m in LINK.finditer(line)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(doc: Path) -> None:
    bad = []
    for number, target in links(doc):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        name, _, anchor = target.partition("#")
        dest = (doc.parent / name).resolve() if name else doc
        if not dest.exists():
            bad.append(f"{doc.name}:{number}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{doc.name}:{number}: {target}: no heading #{anchor} in {dest.name}")
    assert not bad, "\n".join(bad)


def test_the_paths_the_readme_names_exist() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    named = {m.group(1).split(" ")[0].rstrip(".,:;)") for m in CODE.finditer(text)}
    paths = {p for p in named if p.startswith(TOP) and not PATTERN.search(p)}
    assert len(paths) >= 5, f"the README names too few paths to check: {sorted(paths)}"
    missing = sorted(p for p in paths if not exists(p))
    assert not missing, f"README.md names paths that do not exist: {missing}"


def exists(path: str) -> bool:
    """A file or folder; a native tool by its source (``runner/native/cachectl`` is built from cachectl.c); a test as
    ``file::name``, defined in that file."""
    name, _, test = path.partition("::")
    if test:
        return (REPO / name).is_file() and f"def {test}(" in (REPO / name).read_text(encoding="utf-8")
    return (REPO / name).exists() or (name.startswith("runner/native/") and (REPO / f"{name}.c").exists())


def test_the_tests_the_readme_names_exist() -> None:
    """The fault table names its tests by function name: each must be a test somewhere under tests/."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    names = {m.group(1) for m in re.finditer(r"`(test_\w+)`", text)}
    assert len(names) >= 10, names
    defined = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").glob("test_*.py"))
    missing = sorted(n for n in names if f"def {n}(" not in defined)
    assert not missing, f"README.md names tests that do not exist: {missing}"


def readme_commands() -> list[list[str]]:
    """``harness A B`` of the README's command table, alternatives (``list\\|show``) expanded."""
    rows = [line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `harness ")]
    commands = []
    for row in rows:
        for code in re.findall(r"`harness ([^`]+)`", row):
            words: list[list[str]] = [[]]
            for token in code.replace("\\|", "|").split():
                if not re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", token):
                    break
                words = [w + [alt] for w in words for alt in token.split("|")]
            commands += [w for w in words if w]
    return commands


def test_the_commands_the_readme_names_exist() -> None:
    from harness import cli

    cli._register()
    root = typer.main.get_command(cli.app)  # typer's own click: a group is what has ``commands``
    commands = readme_commands()
    assert len(commands) >= 12, commands
    missing = []
    for words in commands:
        cmd: object = root
        for word in words:
            sub: dict[str, object] | None = getattr(cmd, "commands", None)
            if sub is None:
                break  # the rest are the command's own arguments
            if word not in sub:
                missing.append(" ".join(words))
                break
            cmd = sub[word]
    assert not missing, f"README.md names commands harness does not have: {missing}"


def test_the_readme_is_a_front_page_and_the_history_is_in_measurements() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    measured = (REPO / "docs" / "measurements.md").read_text(encoding="utf-8")
    # every headline row of the README carries a date, and the date's measurements are in measurements.md
    dated = re.compile(r"\| .* \| \d{4}-\d\d-\d\d \|$")
    rows = [line for line in lines[lines.index("## Headline numbers"):] if dated.match(line)]
    assert len(rows) >= 10, "the headline table lost its dated rows"
    for row in rows:
        date = row.rsplit("|", 2)[-2].strip()
        assert date in measured, f"{row}: nothing measured on {date} in docs/measurements.md"

"""An engine declared in YAML, with no code: how to build it (or where it already is), how to run it, and how to
read what it prints into the ``tokens`` and ``requests`` tables.

Pure data, like the rest of ``harness.config``: this module validates a declaration's shape and finds
declaration files; ``harness.steps.declared`` runs them and ``harness.parsers.declared`` reads their output.

    name: powerinfer
    build: {commands: [[git, clone, URL, "{build_dir}/src"], [make, -C, "{build_dir}/src"]]}   # or none
    binary: "{build_dir}/src/main"             # or a path that already exists on the board
    run: ["{binary}", -m, "{model}", -n, "{n_predict}", -p, "{prompt}"]   # an argument list, never a shell line
    defaults: {prompt: "Hello"}                # placeholder values a step may override
    outputs: [results.tsv]                     # files the run leaves in its working directory
    decode_window: [129, 256]                  # optional: decode also reported over these output tokens
    probes: {profile: ["{binary}", profile]}   # run once per target before the runs; raw output kept as a fact
    extract:                                   # rules: see ExtractRule
      - {table: requests, source: stderr, regex: 'eval time = +(?P<ms>[\\d.]+) ms', columns: {predicted_ms: ms}}
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationInfo, field_validator, model_validator

from harness.config.validate import StrictModel, validate
from harness.config.yamlsrc import YamlDoc, load_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINES_DIR = REPO_ROOT / "engines"  # the declarations shipped with the harness
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# placeholders the harness fills in itself: the built (or prebuilt) binary, its build directory, the step's model
# file, the run directory on the target, and a named build's source tree (builds: {NAME: {engine, source, patches}})
HARNESS_PLACEHOLDERS = frozenset({"binary", "build_dir", "model", "run_dir", "source_dir"})
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
Scalar = str | int | float | bool
Argv = Annotated[list[str], Field(min_length=1)]


def placeholders(value: Any) -> set[str]:
    """Every ``{name}`` in a string or a list of strings (single braces only: no format specs, no expressions)."""
    if isinstance(value, list):
        return set().union(*(placeholders(v) for v in value)) if value else set()
    return set(PLACEHOLDER.findall(value)) if isinstance(value, str) else set()


class ScaledColumn(StrictModel):
    """A column taken from a named group (regex), a key (JSON) or a column (CSV), multiplied by ``scale``
    (e.g. 1000 for seconds -> ms)."""

    field: str
    scale: float = 1.0


class Pivot(StrictModel):
    """One column per matched line: ``column`` (a template with ``{key}``) named by the ``key`` group, holding the
    ``value`` group (flash-moe's ``--timing`` block: ``  expert_io:  12.345`` -> ``layer_expert_io_ms``)."""

    key: str = "key"
    value: str = "value"
    column: Annotated[str, Field(pattern=r".*\{key\}.*")]
    scale: float = 1.0


class CsvRule(StrictModel):
    delimiter: Annotated[str, Field(min_length=1, max_length=1)] = ","
    comment: str | None = "#"  # lines starting with this are skipped (before the header too)


class ExtractRule(StrictModel):
    """One way to read rows out of one output: exactly one of ``regex`` (named groups; a line that matches gives
    values), ``json_prefix`` (a line starting with it carries a JSON object after it) or ``csv`` (a table with a
    header row). ``columns`` maps table columns to groups / keys / CSV columns; ``pivot`` names columns by a group.
    ``rows: each`` makes a row per match (tokens, a CSV's rows); ``one`` merges every match into the run's single
    ``requests`` row. ``after``: only lines after the first line containing this text count (a block's heading)."""

    table: Literal["tokens", "requests"]
    source: str = "stdout"  # stdout | stderr | a file named in outputs
    regex: str | None = None
    json_prefix: str | None = None
    csv: CsvRule | None = None
    columns: dict[str, str | ScaledColumn] = Field(default_factory=dict)
    pivot: Pivot | None = None
    rows: Literal["each", "one"] | None = None  # default: each for tokens, one for requests
    after: str | None = None

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"regular expression does not compile: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ExtractRule:
        kinds = [k for k in ("regex", "json_prefix", "csv") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of regex, json_prefix or csv")
        if not self.columns and self.pivot is None:
            raise ValueError("give columns (table column: group/key/CSV column) or a pivot")
        if self.regex is not None:
            groups = set(re.compile(self.regex).groupindex)
            wanted = {c if isinstance(c, str) else c.field for c in self.columns.values()}
            wanted |= {self.pivot.key, self.pivot.value} if self.pivot else set()
            missing = sorted(wanted - groups)
            if missing:
                raise ValueError(f"columns name groups the regex does not have: {', '.join(missing)} "
                                 f"(its named groups: {', '.join(sorted(groups)) or 'none'})")
        return self


class BuildSpec(StrictModel):
    """Commands run in order in ``{build_dir}`` (a directory of the target's build cache, keyed by this block), each
    an argument list; a build that finished once is not run again."""

    commands: list[Argv] = Field(min_length=1)
    timeout_s: Annotated[float, Field(gt=0)] = 3600.0


class EngineDeclaration(StrictModel):
    name: Annotated[str, Field(pattern=_NAME)]
    description: str = ""
    source: dict[str, str] = Field(default_factory=dict)  # where it comes from (url, commit, docs): recorded only
    build: BuildSpec | None = None
    binary: str
    run: Argv
    defaults: dict[str, Scalar] = Field(default_factory=dict)
    outputs: list[str] = Field(default_factory=list)
    decode_window: tuple[int, int] | None = None
    probes: dict[str, Argv] = Field(default_factory=dict)
    extract: list[ExtractRule] = Field(min_length=1)

    @field_validator("extract")
    @classmethod
    def _sources(cls, rules: list[ExtractRule], info: ValidationInfo) -> list[ExtractRule]:
        outputs = info.data.get("outputs") or []
        for index, rule in enumerate(rules):
            if rule.source not in ("stdout", "stderr") and rule.source not in outputs:
                raise ValueError(f"rule {index} reads {rule.source!r}, which is neither stdout, stderr nor one of "
                                 f"outputs ({', '.join(outputs) or 'none'})")
        return rules

    @model_validator(mode="after")
    def _consistent(self) -> EngineDeclaration:
        if "{build_dir}" in self.binary and self.build is None:
            raise ValueError("binary names {build_dir} but there is no build: block")
        given = HARNESS_PLACEHOLDERS | set(self.defaults)
        for name, argv in self.probes.items():
            unknown = sorted(placeholders(argv) - given)
            if unknown:
                raise ValueError(f"probe {name!r} uses {', '.join(unknown)}: a probe may use only "
                                 f"{', '.join(sorted(given))}")
        if self.decode_window is not None and not 2 <= self.decode_window[0] <= self.decode_window[1]:
            raise ValueError("decode_window [first, last]: need 2 <= first <= last (token 1 comes out of prefill)")
        return self

    def build_key(self) -> str | None:
        """What the build cache is keyed by: the build block alone (a new run template needs no rebuild)."""
        if self.build is None:
            return None
        return hashlib.sha256(self.build.model_dump_json().encode()).hexdigest()[:16]


class Declared:
    """A validated declaration plus its text (the file, or the experiment's entry as YAML), that text's sha256 and
    where it came from: what the manifest records."""

    def __init__(self, declaration: EngineDeclaration, text: str, origin: str) -> None:
        self.declaration, self.text, self.origin = declaration, text, origin
        self.sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()

    def record(self) -> dict[str, Any]:
        return {"origin": self.origin, "sha256": self.sha256, "text": self.text,
                "declaration": self.declaration.model_dump(mode="json")}


def load_declaration(path: Path) -> Declared:
    """One declaration file; a problem is a ConfigError naming file:line: field."""
    doc = load_yaml(path)
    declaration = validate(EngineDeclaration, doc.data, doc)
    return Declared(declaration, path.read_text(encoding="utf-8"), str(path))


def inline_declaration(data: Any, doc: YamlDoc, loc: tuple[str | int, ...]) -> Declared:
    """An experiment's own ``engines: {NAME: {...}}`` entry (its name is the key unless it gives one)."""
    if isinstance(data, dict) and "name" not in data:
        data = {"name": loc[-1], **data}
    declaration = validate(EngineDeclaration, data, doc, loc)
    text = yaml.safe_dump(data, sort_keys=False)
    return Declared(declaration, text, f"{doc.source}:{doc.line_of(loc)}")


def shipped_declarations(directory: Path = ENGINES_DIR) -> dict[str, Path]:
    """The declaration files in ``engines/`` by file stem (loaded only when a step names one)."""
    return {path.stem: path for path in sorted(directory.glob("*.yaml"))} if directory.is_dir() else {}

"""The ``run`` step: run an engine declared in YAML (``engines/*.yaml``, or the experiment's own ``engines:``).

    engines:                                   # optional: the experiment's own declarations
      my-engine: engines/my-engine.yaml        # a path (relative to the experiment file) ...
      other: {binary: /opt/x/bin/x, run: ["{binary}", -n, "{n_predict}"], extract: [...]}   # ... or inline
    steps:
      - run:
          engine: powerinfer                   # a declaration's name
          model: model                         # the named file behind {model} (null: none)
          n_predict: 64                        # {n_predict}
          args: {threads: "{threads}"}         # other placeholders of the run template (matrix templates allowed)
          decode_window: [129, 256]            # overrides the declaration's

The target builds the engine once (``runner.steps.declared prepare``, before the runs, from the campaign) and runs
its template as one argument list: a value with spaces or quotes stays one argument. Tables: ``requests`` (one row
per run unless a rule says ``rows: each``, plus ``engine`` and ``declaration_sha256``) and ``tokens``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from harness.config.declared_engine import (
    HARNESS_PLACEHOLDERS,
    Declared,
    Scalar,
    inline_declaration,
    load_declaration,
    placeholders,
    shipped_declarations,
)
from harness.config.template import template_names
from harness.config.validate import StrictModel
from harness.parsers.declared import extract
from harness.steps.base import Rows, StepKind, register_step
from harness.steps.requests import without_marks
from runner.contract import RunRecord

# name -> declaration, filled by resolve_declared for the experiment being resolved (as the other registries are
# filled at import); a run's spec carries its declaration whole, so ingest never needs this
DECLARED: dict[str, Declared] = {}


class RunConfig(StrictModel):
    engine: str
    model: str | None = "model"
    n_predict: Annotated[int, Field(ge=1)] | None = None
    prompt: str | None = None
    args: dict[str, Scalar] = Field(default_factory=dict)
    decode_window: tuple[int, int] | None = None
    timeout_s: Annotated[float, Field(gt=0)] = 3600.0

    def values(self, declared: Declared) -> dict[str, Scalar]:
        """Placeholder values: the declaration's defaults, then the step's args, n_predict and prompt."""
        own = {k: v for k, v in (("n_predict", self.n_predict), ("prompt", self.prompt)) if v is not None}
        return {**declared.declaration.defaults, **self.args, **own}


def resolve_declared(experiment: Any, doc: Any, experiment_path: Path) -> dict[str, Declared]:
    """The declarations the experiment's ``run`` steps can name: ``engines/*.yaml`` and its own ``engines:``
    (which win). Only the ones its steps name are loaded, so a broken file elsewhere does not stop it."""
    wanted: set[Any] = set()
    for item in experiment.steps:
        named = (item.get("run") or {}).get("engine") if isinstance(item, dict) else None
        wanted.add(named)
        for key in template_names(named):  # engine: "{engine}" makes the engine a matrix axis
            wanted.update(experiment.matrix.get(key, []))
    wanted.update(build.engine for build in (getattr(experiment, "builds", None) or {}).values())
    own = getattr(experiment, "engines", None) or {}
    found: dict[str, Declared] = {}
    for name, entry in own.items():
        if isinstance(entry, str):
            path = Path(entry) if Path(entry).is_absolute() else experiment_path.parent / entry
            found[name] = load_declaration(path)
        else:
            found[name] = inline_declaration(entry, doc, ("engines", name))
        if found[name].declaration.name != name:  # one name in the step, the tables and the manifest
            declared_as = found[name].declaration.name
            raise doc.error(("engines", name), f"declares engine {declared_as!r} under the key {name!r}")
    for name, path in shipped_declarations().items():
        if name in wanted and name not in found:
            found[name] = load_declaration(path)
    DECLARED.clear()
    DECLARED.update(found)
    return found


@register_step
class RunStep(StepKind):
    name = "run"
    Config = RunConfig

    def files_read(self, config: RunConfig) -> list[str]:
        return [config.model] if config.model else []

    def engine_label(self, config: RunConfig) -> str | None:
        return config.engine  # the declared engine's name: two declared engines are two variants

    def check(self, config: RunConfig, experiment: Any) -> str | None:
        declared = DECLARED.get(config.engine)
        if declared is None:
            known = sorted(set(DECLARED) | set(shipped_declarations()))
            return (f"engine {config.engine!r} is not declared (in engines/*.yaml or this file's engines:; "
                    f"known: {', '.join(known) or 'none'})")
        declaration = declared.declaration
        template = set(placeholders(declaration.run)) | placeholders(declaration.binary)
        values = config.values(declared)
        missing = sorted(template - HARNESS_PLACEHOLDERS - set(values))
        if missing:
            return f"engine {config.engine}: the run template needs {', '.join(missing)} (give them in args)"
        unused = sorted(set(config.args) - template)
        if unused:
            return f"engine {config.engine}: args {', '.join(unused)} are not placeholders of its run template " \
                   f"({', '.join(sorted(template - HARNESS_PLACEHOLDERS)) or 'none'})"
        if "model" in template and not config.model:
            return f"engine {config.engine}: the run template uses {{model}}, so the step needs model:"
        window = config.decode_window or declaration.decode_window
        n_predict = values.get("n_predict")
        if window and isinstance(n_predict, int) and not window[1] <= n_predict:
            return f"decode_window {list(window)} ends after n_predict ({n_predict})"
        return None

    def estimate_s(self, config: RunConfig, file_sizes: dict[str, int]) -> float:
        return 10.0 + (config.n_predict or 32) * 0.2

    def runner_spec(self, config: RunConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        declared = DECLARED[config.engine]
        declaration = declared.declaration
        window = config.decode_window or declaration.decode_window
        return {"engine": declaration.name, "declaration_sha256": declared.sha256,
                "build": declaration.build.model_dump() if declaration.build else None,
                "build_key": declaration.build_key(), "binary": declaration.binary, "argv": list(declaration.run),
                "values": config.values(declared), "model": files[config.model] if config.model else None,
                "outputs": list(declaration.outputs), "timeout_s": config.timeout_s,
                "decode_window": list(window) if window else None,
                "extract": [rule.model_dump(exclude_none=True) for rule in declaration.extract]}

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        step = record["spec"]["step"]
        names = {"stdout": "engine.stdout", "stderr": "engine.stderr", **{o: o for o in step.get("outputs", [])}}
        outputs = {source: (run_dir / name).read_bytes() for source, name in names.items()
                   if (run_dir / name).is_file()}
        if not outputs:
            return {}
        tables = extract(step["extract"], outputs, step.get("decode_window"))
        tables["requests"] = [without_marks({**row, "engine": step["engine"],
                                             "declaration_sha256": step["declaration_sha256"]})
                              for row in tables["requests"]]
        return {name: rows for name, rows in tables.items() if rows}

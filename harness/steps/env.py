"""A step's ``env:``: variables added to its engine process's environment (the seed switched its read strategies
inside one build this way, ``HARNESS_EXPERT_*`` in patches/llama.cpp).

    steps:
      - llama-bench: {args: [-t, "{threads}"], env: {HARNESS_EXPERT_PREAD: "131072", OMP_WAIT: "{threads}"}}

Values are templated per cell like ``args`` (a number, from YAML or a matrix value, becomes its text); names are
not. The runner adds them to the environment it already builds for the process (its own, plus the run's marks),
so a variable not named here is inherited as before. The spec, the manifest and the runs table carry them, and
those are shared with whoever reads the set, so the names that look like secrets are refused: a secret belongs in
the target's own environment, which the engine inherits without the set recording it.

Refused names, each for a reason a user would not see in the tables otherwise:

- ``HARNESS_*`` (but ``HARNESS_EXPERT_*``, the strategy switches): the harness's and runner's own (the run's
  reap mark and spawn tag, emulation state, sysroot, cgroup root); an engine given another value would escape the
  run's clean-up or repair, or its children would.
- ``LD_*``, ``DYLD_*`` (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, LD_BIND_NOW, ...) and ``PATH``: they change which
  code runs -- another library interposed or loaded, another program found -- while the manifest's build identity
  (binary hashes) still names the built one; a different engine is a different build, not an environment.
- ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*PASSWD*``, ``*KEY*``, ``*CREDENTIAL*`` (any case): see above.

Recorded: the run spec's step (``env``, only when set), the manifest's run entry (``env``) and the runs table, one
column per variable, ``env_<NAME>`` (text; null where a run's step did not set it). Columns rather than one JSON
text: a user asks "which runs had HARNESS_EXPERT_PREAD=131072" and groups by it as by a matrix axis
(``runs.groupby("env_HARNESS_EXPERT_PREAD")``, ``WHERE env_X = '1'`` in ``results query``) without parsing JSON,
and unset stays distinguishable from empty. Equivalence's two sides each have their own: the equivalence table's
``a_env``/``b_env`` (JSON text beside ``a_args``).

A step may refuse more (``refuse_owned_env``): llama-server's ``LLAMA_ARG_MODEL``/``HOST``/``PORT`` are the
flags the harness sets; llama.cpp would print a warning and use the harness's, so the user's intent would be
silently ignored.
"""

from __future__ import annotations

import json
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ALLOWED_HARNESS_PREFIX = "HARNESS_EXPERT_"  # the engine patches' switches (patches/llama.cpp, part of the build)
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
# the runs table's column of a variable: env_<NAME> (a run without it: null, i.e. unset)
COLUMN_PREFIX = "env_"


def name_problem(name: str) -> str | None:
    """Why ``name`` may not be set by a step's ``env:``, or None."""
    if not NAME.fullmatch(name):
        return f"environment variable name {name!r}: expected letters, digits and '_', not starting with a digit"
    upper = name.upper()
    if upper.startswith("HARNESS_") and not upper.startswith(ALLOWED_HARNESS_PREFIX):
        return f"{name} belongs to the harness and its runner (only {ALLOWED_HARNESS_PREFIX}* may be set by a step)"
    if upper.startswith(("LD_", "DYLD_")) or upper == "PATH":
        return (f"{name} changes which code runs behind the build's identity (the manifest's binary hashes); "
                "declare another build instead")
    word = next((w for w in SECRET_WORDS if w in upper), None)
    if word is not None:
        return (f"{name} looks like a secret (*{word}*) and the spec, manifest and tables are shared: "
                "set it in the target's own environment, which the engine inherits unrecorded")
    return None


def _name(name: str) -> str:
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def _value(value: object) -> object:
    # a number (YAML 131072, or "{threads}" rendered to the matrix's int) is its text; a boolean is ambiguous
    # (True, true or 1?) and anything else is not a value of an environment variable
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a string (quote it, e.g. \"1\"), got {value!r}")
    text = str(value)
    if "\0" in text:
        raise ValueError("an environment variable's value cannot hold a NUL byte")
    return text


EnvName = Annotated[str, AfterValidator(_name)]
EnvValue = Annotated[str, BeforeValidator(_value)]
StepEnv = dict[EnvName, EnvValue]


def refuse_owned_env(env: dict[str, str], owned: tuple[str, ...], whose: str) -> dict[str, str]:
    """``env`` unless it sets a variable ``whose`` engine reads as one of the flags the harness sets."""
    clash = sorted(set(env) & set(owned))
    if clash:
        raise ValueError(f"{', '.join(clash)} would set {whose}'s flags the harness sets itself (owned: "
                         f"{', '.join(owned)})")
    return env


def with_env(env: dict[str, str]) -> dict[str, dict[str, str]]:
    """The runner spec's ``env`` key, only when the step sets one: the spec of a step without ``env:`` stays as it
    was before steps had one."""
    return {"env": dict(env)} if env else {}


def env_columns(env: dict[str, str] | None) -> dict[str, str]:
    """The runs table's columns of a run's env: one ``env_<NAME>`` per variable (text, as the process saw it)."""
    return {COLUMN_PREFIX + name: value for name, value in sorted((env or {}).items())}


def env_text(env: dict[str, str] | None) -> str | None:
    """One side's env as JSON text (sorted keys) for a table that shows two processes side by side; None: none."""
    return json.dumps(env, sort_keys=True) if env else None

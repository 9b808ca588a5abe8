"""``harness run EXP --build-source NAME=git:URL@SHA`` or ``NAME=path:DIR``: a build's source replaced for one
campaign, the rest of the build (engine, patches, flags) as the experiment says. CI builds the pushed revision
this way and bisect each midpoint; the manifest records the source each target actually built.

Pure data, like the rest of ``harness.config``: a bad value is one UsageError line naming the option.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from harness.config.experiment import BuildSpec, LoadedExperiment
from harness.errors import UsageError

OPTION = "--build-source"
_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
_EXAMPLE = "NAME=git:URL@SHA or NAME=path:DIR"


def parse_build_source(text: str) -> tuple[str, dict[str, str]]:
    """``NAME=git:URL@SHA`` -> (NAME, {git: URL, commit: SHA}); ``NAME=path:DIR`` -> (NAME, {path: absolute DIR}).
    A git URL may hold '@' itself (git@host:repo): the commit is what follows the last one."""
    name, eq, given = text.partition("=")
    if not eq or not name or not given:
        raise UsageError(f"{OPTION} {text!r}: expected {_EXAMPLE}")
    kind, colon, where = given.partition(":")
    if not colon or not where or kind not in ("git", "path"):
        raise UsageError(f"{OPTION} {text!r}: the source must start with git: or path: ({_EXAMPLE})")
    if kind == "path":
        directory = Path(where).expanduser().resolve()
        if not directory.is_dir():
            raise UsageError(f"{OPTION} {text!r}: {directory} is not a directory")
        return name, {"path": str(directory)}
    url, at, commit = where.rpartition("@")
    if not at or not url or not _SHA.match(commit):
        raise UsageError(f"{OPTION} {text!r}: a git source needs a commit as URL@SHA (7 to 40 hex digits; a branch "
                         "name would make the build irreproducible)")
    local = Path(url).expanduser()
    if "://" not in url and local.is_dir():  # a repository on this machine, named relative to here
        url = str(local.resolve())
    return name, {"git": url, "commit": commit.lower()}


def with_build_sources(loaded: LoadedExperiment, given: Sequence[str]) -> LoadedExperiment:
    """``loaded`` with each named build's source replaced (itself when nothing is given). A name that is not a build
    of the experiment, or one given twice, is one line."""
    if not given:
        return loaded
    builds = dict(loaded.experiment.builds)
    seen: set[str] = set()
    for text in given:
        name, source = parse_build_source(text)
        if name not in builds:
            raise UsageError(f"{OPTION} {text!r}: {loaded.path} has no build {name!r} (builds: "
                             f"{', '.join(builds) or 'none'})")
        if name in seen:
            raise UsageError(f"{OPTION}: build {name!r} is given twice")
        seen.add(name)
        builds[name] = BuildSpec(**{**builds[name].model_dump(), "source": source})
    experiment = loaded.experiment.model_copy(update={"builds": builds})
    replaced = LoadedExperiment(experiment, loaded.doc, loaded.path, loaded.text)
    replaced.build_sources = {name: dict(builds[name].source or {}) for name in sorted(seen)}
    return replaced

"""The ``run`` step on the target: an engine declared in YAML, built once into the target's cache and run from its
template. Also ``python3 -m runner.steps.declared prepare SPEC``: the build and the probes, before the runs.

Every command is an argument list: placeholders (``{name}``) are replaced inside each argument in one pass, so a
value with spaces, quotes or braces stays one argument and is never read again as a template or by a shell.

Build cache: ``<workdir>/cache/declared/<build key>/`` with ``build.log`` and ``DONE`` (written last); a directory
without DONE is an interrupted or failed build and is built again from scratch. A named build with a source
(``spec["source"]``: a prepared tree ``dir`` on this machine, or an ``archive`` the controller pushed) has it copied
or unpacked into ``<build dir>/src`` first: the build commands' ``{source_dir}``.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

from runner.enginebuild import copy_tree, locked, unpack_source
from runner.steps.base import StepFailed
from runner.util import sha256_file, tail

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
PROBE_OUTPUT_LIMIT = 64 * 1024  # a probe's raw output kept as a fact: enough for a profile, not a log


def render(arg, values):
    """``arg`` with each ``{name}`` replaced by its value (one pass); an unknown name is a StepFailed."""
    def value(match):
        name = match.group(1)
        if name not in values:
            raise StepFailed("placeholder {%s} has no value (have: %s)" % (name, ", ".join(sorted(values))))
        return str(values[name])
    return PLACEHOLDER.sub(value, str(arg))


def render_argv(argv, values):
    return [render(arg, values) for arg in argv]


def workdir_of(run_dir):
    """<workdir>/runs/<set>/<run> -> <workdir> (as runner.agent finds it)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(run_dir))))


def build_dir(workdir, spec):
    return os.path.join(workdir, "cache", "declared", spec["build_key"]) if spec.get("build_key") else None


def source_dir(directory, spec):
    """Where a named build's source tree is inside its build directory ("" for a build without one)."""
    return os.path.join(directory, "src") if directory and spec.get("source") else ""


def place_source(directory, spec):
    """The build's own copy of its source tree: from the prepared tree, or the pushed archive."""
    source = spec.get("source")
    if not source:
        return
    if source.get("archive"):
        unpack_source(source["archive"], source_dir(directory, spec))
    else:
        copy_tree(source["dir"], source_dir(directory, spec))


def ensure_built(workdir, spec):
    """Build the engine into its cache directory unless a finished build is there; returns (dir, seconds or None)."""
    directory = build_dir(workdir, spec)
    if directory is None:
        return None, None
    done = os.path.join(directory, "DONE")
    with locked(directory + ".lock"):
        if os.path.exists(done):
            return directory, None
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        started = time.monotonic()
        log_path = os.path.join(directory, "build.log")
        deadline = started + spec["build"]["timeout_s"]
        try:
            place_source(directory, spec)
        except (OSError, ValueError) as exc:  # tarfile errors are OSError or ValueError subclasses
            raise StepFailed("engine %s: its source could not be placed in %s: %s"
                             % (spec["engine"], directory, exc)) from None
        placed = {"build_dir": directory, "source_dir": source_dir(directory, spec)}
        with open(log_path, "ab") as log:
            for command in spec["build"]["commands"]:
                argv = render_argv(command, placed)
                log.write(("$ %s\n" % json.dumps(argv)).encode())
                log.flush()
                try:
                    code = subprocess.run(argv, cwd=directory, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, timeout=max(1.0, deadline - time.monotonic()),
                                          check=False).returncode
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise StepFailed("engine %s: build command %s failed: %s (log: %s)"
                                     % (spec["engine"], argv[0], exc, log_path)) from None
                if code != 0:
                    raise StepFailed("engine %s: build command %s exited with %d: %s (log: %s)"
                                     % (spec["engine"], argv[0], code, tail(log_path, 1), log_path))
        seconds = time.monotonic() - started
        with open(done, "w") as handle:
            handle.write("%.3f\n" % seconds)
        return directory, seconds


def harness_values(spec, directory, run_dir):
    values = dict(spec.get("values") or {})
    values.update({"build_dir": directory or "", "run_dir": run_dir, "model": spec.get("model") or "",
                   "source_dir": source_dir(directory, spec)})
    values["binary"] = render(spec["binary"], values)
    return values


def run_declared(ctx, spec):
    if spec.get("model") and not os.path.exists(spec["model"]):
        raise StepFailed("model file %s does not exist" % spec["model"])
    directory, built_s = ensure_built(workdir_of(ctx.run_dir), spec)
    values = harness_values(spec, directory, ctx.run_dir)
    argv = render_argv(spec["argv"], values)
    if not os.access(values["binary"], os.X_OK) and not shutil.which(values["binary"]):
        raise StepFailed("engine %s: %s is missing or not executable" % (spec["engine"], values["binary"]))
    with open(ctx.path("engine.argv.json"), "w") as handle:
        json.dump(argv, handle)  # what ran, exactly, one element per argument
    proc = ctx.spawn(argv, name="engine")
    ctx.wait(proc, spec["timeout_s"])
    missing = [name for name in spec.get("outputs", []) if not os.path.exists(ctx.path(name))]
    return {"engine": spec["engine"], "argv": argv, "built_now_s": built_s, "outputs_missing": missing}


def run_probes(spec, directory):
    """Each probe's raw output (stdout, stderr tail, exit code): what the campaign stores as facts."""
    values = harness_values(spec, directory, "")
    found = {}
    for name, argv in sorted((spec.get("probes") or {}).items()):
        argv = render_argv(argv, values)
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  timeout=spec.get("probe_timeout_s", 600), check=False)
            out = done.stdout[:PROBE_OUTPUT_LIMIT].decode("utf-8", "replace")
            found[name] = {"argv": argv, "returncode": done.returncode, "stdout": out,
                           "stderr": done.stderr[-2000:].decode("utf-8", "replace")}
        except (OSError, subprocess.TimeoutExpired) as exc:
            found[name] = {"argv": argv, "returncode": None, "stdout": "", "stderr": str(exc)}
    return found


def prepare(spec_path):
    """Build (or find built) and probe; prints one JSON object. Exit 1 with one line when the build fails."""
    with open(spec_path) as handle:
        spec = json.load(handle)
    try:
        directory, built_s = ensure_built(spec["workdir"], spec)
    except StepFailed as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1
    binary = harness_values(spec, directory, "")["binary"]
    print(json.dumps({"engine": spec["engine"], "build_dir": directory, "built_now_s": built_s,
                      "build_key": spec.get("build_key"), "binary": binary,
                      "binary_sha256": sha256_file(binary) if os.path.isfile(binary) else None,
                      "probes": run_probes(spec, directory)}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "prepare":
        print("usage: python3 -m runner.steps.declared prepare SPEC.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(prepare(sys.argv[2]))

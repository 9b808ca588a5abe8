"""What both llama.cpp steps share: the engine's binaries (the step's own ``bin_dir`` when it names one: an
equivalence side running a named build; else ``spec["engines"]["llama.cpp"]["bin_dir"]``) and the model file."""

import os

from runner.steps.base import StepFailed


def engine_binary(ctx, spec, name):
    engines = ctx.spec.get("engines") or {}
    bin_dir = spec.get("bin_dir") or (engines.get("llama.cpp") or {}).get("bin_dir")
    if not bin_dir:
        raise StepFailed("%s: the run spec names no llama.cpp build (engines.llama.cpp.bin_dir)" % name)
    path = os.path.join(bin_dir, name)
    if not os.access(path, os.X_OK):
        raise StepFailed("%s: %s is missing or not executable" % (name, path))
    return path


def check_model(spec):
    if not os.path.isfile(spec["model"]):
        raise StepFailed("model file %s does not exist" % spec["model"])

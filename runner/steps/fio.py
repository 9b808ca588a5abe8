"""The fio step: one INI job file, fio reading the file read-only."""

import os
import re
import shutil

from runner.steps.base import StepFailed


def _fio_value(key, value):
    # one line per option: a line break, '=' or a bracket in a value would add options or sections (the
    # controller refuses these; checked here again because this file is what fio executes)
    text = str(value)
    if any(ch in text for ch in "\n\r\x00=[]") or any(ch in key for ch in "\n\r\x00=[] "):
        raise StepFailed("fio option %s=%r cannot be written into a job file" % (key, text))
    if isinstance(value, bool):
        return str(int(value))
    if key in ("runtime", "ramp_time") and isinstance(value, (int, float)):
        return "%dms" % round(value * 1000)  # fio reads a bare number as whole seconds
    return str(value)


# fio ends a job-file value at ';' or '#', strips blanks around it and replaces '$' keywords: a file named so
# would be another file to fio (the controller refuses these at plan time or preflight; checked again here)
_UNNAMEABLE = re.compile(r"[#;$\x00-\x1f]|^\s|\s$")


def fio_jobfile(spec):
    """An INI job file: values are written as data, never passed through a shell.

    Every job gets readonly=1 here as well as on the controller: fio must never write to a model file.
    """
    if _UNNAMEABLE.search(spec["file"]):
        raise StepFailed("fio cannot be given the path %r ('#', ';', '$' or a blank at its ends)" % spec["file"])
    escaped = spec["file"].replace(":", "\\:")  # ':' separates file names in fio's filename=
    # allow_file_create=0: fio must fail rather than lay out a file that is not there
    lines = ["[global]", "filename=" + escaped, "time_based=1", "allow_file_create=0", ""]
    for job in spec["jobs"]:
        options = dict(job)
        options.pop("readonly", None)  # a command-line switch in fio (--readonly), set in run_fio
        name = str(options.pop("name"))
        if any(ch in name for ch in "\n\r\x00=[]"):
            raise StepFailed("fio job name %r cannot be written into a job file" % name)
        lines.append("[%s]" % name)
        lines += ["%s=%s" % (key, _fio_value(key, value)) for key, value in options.items()]
        lines += ["stonewall", ""]
    return "\n".join(lines)


def run_fio(ctx, spec):
    if not shutil.which("fio"):
        raise StepFailed("fio is not installed on the target (apt-get install fio)")
    if not os.path.exists(spec["file"]):
        raise StepFailed("fio: %s does not exist (the harness never lets fio create or write a file)"
                         % spec["file"])
    if not os.path.isfile(spec["file"]):  # a FIFO would hang fio, a directory or device is not a file to read
        raise StepFailed("fio: %s is not a regular file" % spec["file"])
    jobfile = ctx.path("jobs.fio")
    with open(jobfile, "w") as out:
        out.write(fio_jobfile(spec))
    # --readonly: fio's own safety switch, refusing any write or trim in every job
    proc = ctx.spawn(["fio", "--readonly", "--output-format=json", "--output=" + ctx.path("fio.json"), jobfile])
    ctx.wait(proc, spec["timeout_s"])
    return {"jobs": len(spec["jobs"])}

"""Steps on the target. Each takes the step spec the controller expanded and a RunContext."""

import os
import shutil
import sys


class StepFailed(Exception):
    pass


def _fio_value(value):
    return str(int(value)) if isinstance(value, bool) else str(value)


def fio_jobfile(spec):
    """An INI job file: values are written as data, never passed through a shell.

    Every job gets readonly=1 here as well as on the controller: fio must never write to a model file.
    """
    escaped = spec["file"].replace(":", "\\:")  # ':' separates file names in fio's filename=
    lines = ["[global]", "filename=" + escaped, "time_based=1", ""]
    for job in spec["jobs"]:
        options = dict(job)
        options["readonly"] = 1
        lines.append("[%s]" % options.pop("name"))
        lines += ["%s=%s" % (key, _fio_value(value)) for key, value in options.items()]
        lines += ["stonewall", ""]
    return "\n".join(lines)


def run_fio(ctx, spec):
    if not shutil.which("fio"):
        raise StepFailed("fio is not installed on the target (apt-get install fio)")
    if not os.path.isfile(spec["file"]):
        raise StepFailed("fio: %s does not exist (the harness never lets fio create or write a file)"
                         % spec["file"])
    jobfile = ctx.path("jobs.fio")
    with open(jobfile, "w") as out:
        out.write(fio_jobfile(spec))
    proc = ctx.spawn(["fio", "--output-format=json", "--output=" + ctx.path("fio.json"), jobfile])
    ctx.wait(proc, spec["timeout_s"])
    return {"jobs": len(spec["jobs"])}


def run_read(ctx, spec):
    argv = [sys.executable, "-m", "runner.readfile", spec["file"], "--pattern", spec["pattern"],
            "--bs", str(spec["bs_bytes"]), "--seed", str(spec["seed"]), "--out", ctx.path("read.json")]
    proc = ctx.spawn(argv)
    ctx.wait(proc, spec["timeout_s"])
    return {}


STEPS = {"fio": run_fio, "read": run_read}

"""The ``fio`` step: a ladder of read jobs against one named file, JSON output, read-only always.

Presets follow the seed article's ladder (64 KiB random at QD1/2/4, 128 KiB at QD8, 1 MiB sequential),
so decode-time device throughput can be placed against what the same file delivers to fio.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from harness.config.validate import StrictModel
from harness.parsers import parse
from harness.parsers.fio import LADDER, PRESETS
from harness.steps.base import Rows, StepKind, register_step

# Options the harness owns: a custom job may not override them (safety and comparability).
_OWNED = {"filename", "readonly", "allow_file_create", "invalidate", "output-format", "output", "write_iolog", "name"}


# Options that run commands, write files, change system settings or point fio at other files. A custom job may
# use them only when the experiment says ``fio: {allow_exec: true}`` (and the manifest records that it did).
_UNSAFE = {"rw", "readwrite", "readonly", "filename", "directory", "opendir", "filename_format", "ioscheduler",
           "unlink", "unlink_each_loop", "do_verify", "fill_device", "allow_mounted_write", "read_iolog",
           "replay_redirect", "cgroup", "exitall_on_error", "pre_read"}
_UNSAFE_PREFIXES = ("exec_", "write_", "trim", "verify", "create_")
# An INI value is one line; '=' and brackets would start a new option or section (a value like
# "64k\nexec_prerun=..." became a second option that fio ran as root).
_INI_VALUE = re.compile(r"^[^\x00-\x1f=\[\]]*$")
_INI_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]*$")


def _ini_value(value: Any) -> Any:
    if isinstance(value, str) and not _INI_VALUE.match(value):
        raise ValueError(f"{value!r} cannot be an fio option value (no line breaks, '=', '[' or ']')")
    return value


IniScalar = Annotated[str | int | float | bool, AfterValidator(_ini_value)]


class FioJob(StrictModel):
    name: Annotated[str, Field(pattern=_JOB_NAME.pattern)]
    rw: Literal["read", "randread"] = "randread"
    bs: Annotated[str | int, AfterValidator(_ini_value)] = "64k"
    iodepth: Annotated[int, Field(ge=1)] = 1
    numjobs: Annotated[int, Field(ge=1)] = 1
    direct: bool = True
    ioengine: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] | None = None
    options: dict[Annotated[str, Field(pattern=_INI_KEY.pattern)], IniScalar] = Field(default_factory=dict)


def unsafe_options(job: FioJob) -> list[str]:
    """The options of a custom job that run commands, write, or reach beyond the named file."""
    return sorted(k for k in job.options if k in _UNSAFE or k.startswith(_UNSAFE_PREFIXES))


class FioConfig(StrictModel):
    file: str
    jobs: list[str | FioJob] = Field(default_factory=lambda: list(LADDER), min_length=1)
    runtime_s: Annotated[float, Field(gt=0)] = 5.0
    ramp_s: Annotated[float, Field(ge=0)] = 0.0
    ioengine: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] = "libaio"
    timeout_s: Annotated[float, Field(gt=0)] | None = None


def expand_job(job: str | FioJob, config: FioConfig) -> dict[str, Any]:
    """A preset name or custom job -> the concrete fio options (without the harness-owned ones)."""
    if isinstance(job, str):
        if job not in PRESETS:
            raise ValueError(f"unknown fio preset {job!r} (known: {', '.join(PRESETS)})")
        options = {"name": job, "direct": 1, "ioengine": config.ioengine, "numjobs": 1, **PRESETS[job]}
    else:
        clash = _OWNED & set(job.options)
        if clash:
            raise ValueError(f"fio job {job.name!r}: options {sorted(clash)} are set by the harness")
        options = {"name": job.name, "rw": job.rw, "bs": job.bs, "iodepth": job.iodepth,
                   "numjobs": job.numjobs, "direct": int(job.direct),
                   "ioengine": job.ioengine or config.ioengine, **job.options}
    options.update(runtime=config.runtime_s, ramp_time=config.ramp_s)
    return options


@register_step
class FioStep(StepKind):
    name = "fio"
    Config = FioConfig
    required_tools = ("fio",)

    def check(self, config: FioConfig, experiment: Any) -> str | None:
        if experiment.fio.allow_exec:
            return None
        for job in config.jobs:
            unsafe = unsafe_options(job) if isinstance(job, FioJob) else []
            if unsafe:
                return (f"fio job {job.name!r}: {', '.join(unsafe)} can run commands, write files or reach other "
                        "files; refused unless the experiment says fio: {allow_exec: true}")
        return None

    def estimate_s(self, config: FioConfig, file_sizes: dict[str, int]) -> float:
        return len(config.jobs) * (config.runtime_s + config.ramp_s + 0.5) + 1.0

    def runner_spec(self, config: FioConfig, files: dict[str, str], cache: str) -> dict[str, Any]:
        jobs = [expand_job(job, config) for job in config.jobs]
        # cold: fio drops the file's cached pages before each job; warm/none: keep them.
        invalidate = 1 if cache == "cold" else 0
        for job in jobs:
            job.update(readonly=1, invalidate=invalidate)
        timeout = config.timeout_s or self.estimate_s(config, {}) * 3 + 30
        return {"file": files[config.file], "jobs": jobs, "timeout_s": timeout}

    def ingest(self, run_dir: Path, record: dict[str, Any]) -> dict[str, Rows]:
        output = run_dir / "fio.json"
        if not output.exists():
            return {}
        rows = parse("fio", output.read_bytes())
        return {"fio": rows}


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
from runner.contract import RunRecord

# Options the harness owns: a custom job may not override them (safety and comparability).
_OWNED = {"filename", "readonly", "allow_file_create", "invalidate", "output-format", "output", "write_iolog", "name"}


# What a read measurement needs, and nothing else: a custom job may use any other engine or option only when the
# experiment says ``fio: {allow_exec: true}`` (and the manifest records that it did). An allow-list, because fio's
# lists grow: engines that execute (exec), delete, create or stat files (filedelete, filecreate, filestat, dir*),
# truncate or allocate (ftruncate, falloc), send raw device commands (sg, io_uring_cmd) or reach the network, and
# options that execute (exec_prerun), write (write_*_log, verify*, trim*, fill_device, rw=write), delete (unlink*),
# create (create_*, mem=mmap:FILE), replay (read_iolog) or change the system (ioscheduler, cgroup, uid).
# Engines (fio's HOWTO, "I/O engine"): read(2), pread(2), readv(2), preadv(2), preadv2(2), Linux AIO, io_uring,
# POSIX aio, mmap(2) + memcpy.
READ_ENGINES = frozenset({"sync", "psync", "vsync", "pvsync", "pvsync2", "libaio", "io_uring", "posixaio", "mmap"})
READ_OPTIONS = frozenset({
    # block sizes and alignment
    "bs", "blocksize", "ba", "blockalign", "bsrange", "blocksize_range", "bssplit", "bs_unaligned",
    "blocksize_unaligned", "bs_is_seq_rand",
    # queue depth and submission
    "iodepth", "iodepth_batch", "iodepth_batch_submit", "iodepth_batch_complete", "iodepth_batch_complete_min",
    "iodepth_batch_complete_max", "iodepth_low", "io_submit_mode", "serialize_overlap", "numjobs", "thread",
    # the region read and how much of it
    "size", "io_size", "io_limit", "offset", "fileoffset", "offset_align", "offset_increment", "number_ios",
    "loops", "time_based", "startdelay",
    # random offsets
    "randrepeat", "allrandrepeat", "randseed", "norandommap", "softrandommap", "random_generator",
    "random_distribution", "percentage_random", "percentage_sequential", "random_sequence_stride", "rw_sequencer",
    # page cache and buffers (mem/iomem: values without a file, checked below)
    "direct", "buffered", "fadvise_hint", "mem", "iomem", "iomem_align", "mem_align",
    # pacing and latency targets
    "rate", "rate_min", "ratemin", "rate_iops", "rate_iops_min", "rate_process", "rate_cycle", "ratecycle",
    "rate_ignore_thinktime", "thinktime", "thinktime_spin", "thinktime_blocks", "thinktime_blocks_type",
    "thinktime_iotime", "thinkcycles", "max_latency", "latency_target", "latency_window", "latency_percentile",
    "latency_run",
    # CPUs and priorities of fio's own threads
    "cpumask", "cpus_allowed", "cpus_allowed_policy", "numa_cpu_nodes", "nice", "prio", "prioclass", "priohint",
    # what the JSON output reports
    "clat_percentiles", "lat_percentiles", "slat_percentiles", "percentile_list", "significant_figures",
    "disable_lat", "disable_clat", "disable_slat", "disable_bw_measurement", "disable_bw", "gtod_reduce",
    "gtod_cpu", "clocksource", "unified_rw_reporting", "group_reporting", "block_error_percentiles", "kb_base",
    "unit_base", "description",
    # engine options of the engines above (engines/sync.c, libaio.c, io_uring.c, cmdprio.h, mmap.c)
    "hipri", "hipri_percentage", "uncached", "nowait", "userspace_reap", "fixedbufs", "registerfiles",
    "sqthread_poll", "sqthread_poll_cpu", "nonvectored", "force_async", "thp", "cmdprio_percentage",
    "cmdprio_class", "cmdprio_hint", "cmdprio", "cmdprio_bssplit",
})
# mem=mmap:FILE and mmaphuge:FILE map a file fio creates; cudamalloc is the rdma engine's
_MEM_VALUES = frozenset({"malloc", "shm", "shmhuge", "mmap", "mmapshared"})
_ALLOW_FLAG = "fio: {allow_exec: true}"
# An INI value is one line; '=' and brackets would start a new option or section (a value like
# "64k\nexec_prerun=..." became a second option that fio ran as root).
_INI_VALUE = re.compile(r"^[^\x00-\x1f=\[\]]*$")
# fio cuts a job-file line at the first ';' or '#' (parse.c strip_blank_end, also applied to filename= values,
# so neither escaping nor ${ENV} substitution gets one through), strips blanks around a value and replaces
# '$' keywords ($ncpus, ...) before handing the value to bc: such a file name would make fio open another file.
_FIO_UNNAMEABLE = re.compile(r"[#;$\x00-\x1f]|^\s|\s$")
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


def refused_options(job: FioJob) -> list[tuple[tuple[str, ...], str]]:
    """What a custom job asks for beyond a read measurement: (its place in the job, what it is)."""
    refused: list[tuple[tuple[str, ...], str]] = []
    if job.ioengine is not None and job.ioengine not in READ_ENGINES:
        refused.append((("ioengine",), f"ioengine {job.ioengine}"))
    for key, value in job.options.items():
        if key not in READ_OPTIONS and key != "ioengine":
            refused.append((("options", key), f"option {key}"))
        elif key == "ioengine" and value not in READ_ENGINES:
            refused.append((("options", key), f"ioengine {value}"))
        elif key in ("mem", "iomem") and value not in _MEM_VALUES:
            refused.append((("options", key), f"{key}={value}"))
    return refused


class FioConfig(StrictModel):
    file: str
    jobs: list[str | FioJob] = Field(default_factory=lambda: list[str | FioJob](LADDER), min_length=1)
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

    def check(self, config: FioConfig, experiment: Any) -> tuple[tuple[str | int, ...], str] | None:
        if experiment.fio.allow_exec:
            return None
        if config.ioengine not in READ_ENGINES:
            return ("ioengine",), (f"ioengine {config.ioengine} is not one a read measurement needs (allowed: "
                                   f"{', '.join(sorted(READ_ENGINES))}); refused unless the experiment says "
                                   f"{_ALLOW_FLAG}")
        for index, job in enumerate(config.jobs):
            refused = refused_options(job) if isinstance(job, FioJob) else []
            if refused and isinstance(job, FioJob):  # (a named ladder rung has no options to refuse)
                return ("jobs", index, *refused[0][0]), (
                    f"fio job {job.name!r}: {', '.join(w for _, w in refused)}: not what a read measurement "
                    "needs (READ_ENGINES, READ_OPTIONS in harness/steps/fio.py); refused unless the experiment says "
                    f"{_ALLOW_FLAG}")
        return None

    def path_problem(self, path: str) -> str | None:
        found = _FIO_UNNAMEABLE.search(path)
        if found is None:
            return None
        what = repr(found.group()) if found.group().strip() else "a blank at its start or end"
        return (f"fio cannot be given the path {path!r}: it has {what}, where fio's job-file parser ends or changes "
                "a value ('#', ';' start a comment); rename the file or give a symlink with a plain name")

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

    def ingest(self, run_dir: Path, record: RunRecord) -> dict[str, Rows]:
        output = run_dir / "fio.json"
        if not output.exists():
            return {}
        rows = parse("fio", output.read_bytes())
        return {"fio": rows}


"""The contract between controller and runner: the run spec (``spec.json``, written by the controller) and the
run record (``run.json``, written by the runner), versioned together as ``CONTRACT_VERSION`` (major.minor).

A minor version adds optional keys an older reader may ignore; a major version renames, removes or changes the
meaning of a key. A reader refuses a document of another major version with one line (``incompatible``): the
runner refuses such a spec (run.json says why, with status "failed"), the controller such a record. A document
without ``contract`` is "0.0": it was written before the contract existed.

The TypedDicts describe the keys (Python 3.8 ``typing.TypedDict``; nothing checks them at run time, the type
checker does). The controller builds the spec in harness/campaign/spec.py (``build_spec`` returns a ``RunSpec``;
collectors and emulation give their parts as ``CollectorSpec`` and ``EmulateSpec``), the runner writes the record
in runner/agent.py (annotated with these types), the controller reads it as a ``RunRecord`` (harness/campaign/pull.py,
harness/results/ingest.py and every kind's ``ingest``).
"""

from typing import Any, Dict, List, Optional, TypedDict

CONTRACT_VERSION = "1.4"  # 1.1: run.json "interference"; 1.2: "left_running_stopped"; 1.3: a step's "env", a declared
# build's "source" and "build_key", an equivalence side's "build" and "bin_dir" (the runner is pushed by content
# hash, so no 1.2 runner receives them); 1.4: the "replay" step kind (its spec: layout and trace text, options)

# What "cold" and "warm" mean, on both sides of the contract: the runner prepares and verifies the page cache to
# these bounds (runner/pagecache.py), the controller judges each request's residency by the same ones
# (``cold_reached``/``warm_reached`` in harness/steps/requests.py). Here because the runner imports nothing from
# the controller and this module is the one both already share.
COLD_MAX_PCT = 1.0  # cold: at most 1 % of the model resident
WARM_MIN_PCT = 99.0  # warm: at least 99 %

_DOCUMENTS = {"runner": "run spec", "controller": "run record"}  # what each reader reads


def _major(version: object) -> Optional[int]:
    """The major number of "major.minor" (None: missing, "0.0"), or None when it is not one."""
    head = ("0.0" if version is None else str(version)).split(".", 1)[0].strip()
    return int(head) if head.isdigit() else None


def incompatible(version: object, reader: str) -> Optional[str]:
    """None when ``version`` (a document's ``contract``; None when it has none) has this contract's major
    version, otherwise one line naming both versions.

    ``reader`` is who reads the document: "runner" (a run spec) or "controller" (a run record).
    """
    if _major(version) == _major(CONTRACT_VERSION):
        return None
    shown = "0.0" if version is None else str(version)
    return "%s contract %s is not readable by this %s (contract %s.x): deploy the matching runner" % (
        _DOCUMENTS.get(reader, "document"), shown, reader, CONTRACT_VERSION.split(".", 1)[0])


# ----------------------------------------------------------------------------------------------- run spec

class Clock(TypedDict):
    wall: float  # time.time() on the target
    mono_ns: int  # time.monotonic_ns() on the target: the axis every sample and snapshot is on


class _CollectorKey(TypedDict):
    kind: str  # blockstat, threads (native sampler); counters, offcpu; tegrastats, iostat, vmstat, psi, thermal, ...


class CollectorSpec(_CollectorKey, total=False):
    """One ``collect:`` entry: its kind and its options (harness/collectors/<kind>.py ``runner_spec``)."""

    period_ms: int  # every collector
    optional: bool  # platform collectors and offcpu: skipped (and said why) where they cannot run, not failing
    stat_ms: int  # threads: every thread's stat this often (the sampler's --stat-ms)
    wchan: bool  # threads: every thread's wait channel off CPU (--wchan)
    gate: bool  # threads: a parked thread re-read only after it ran (false: --no-gate)
    tree: bool  # threads, counters: the step's process and its descendants (false: the step's process only)
    reader: str  # counters: "native" (runner/native/bin/counters) or "python"


class EmulateSpec(TypedDict, total=False):
    memory_bytes: Optional[int]  # cgroup memory budget of the step, page cache included, no swap
    read_bytes_per_s: Optional[int]  # cgroup read throttle on the run's block device
    read_iops: Optional[int]
    read_ahead_kb: Optional[int]  # the block device's read-ahead (machine-wide, restored after the run)
    requested: Dict[str, Any]  # what the experiment wrote (sizes as text), for the record


class EngineLocation(TypedDict, total=False):
    bin_dir: str  # where the engine's binaries are on the target
    commit: Optional[str]


class _RunSpecKeys(TypedDict):
    run_id: str
    cache: str  # cold, warm or none: the state the cache files are brought into before the step
    # what the step does: {"kind": ..., the kind's own keys}; a kind's keys are what its controller side's
    # runner_spec returns (harness/steps/<kind>.py) and its runner side reads (runner.steps.registry.STEPS[kind]);
    # an engine step (and an equivalence side) may carry "env": names -> strings added to its engine process's
    # environment (harness/steps/env.py; absent when the experiment sets none)
    step: Dict[str, Any]


class RunSpec(_RunSpecKeys, total=False):
    """``spec.json``: one run, as the controller sends it."""

    contract: str  # CONTRACT_VERSION of the controller that wrote it; missing: "0.0"
    set_id: str  # the campaign's result set: with target, marks every process of the run (runner.reap)
    target: str  # the target's name: a reap never touches another target's runs on the same machine
    params: Dict[str, Any]  # the matrix cell
    round: int
    repeat: int
    cache_files: List[str]  # files whose cache state is prepared and measured
    block_device: Optional[str]  # "auto" (the device holding the cache files) or a name such as nvme0n1
    native_bin: Optional[str]  # where cachectl and sampler are (default: runner/native/bin)
    collectors: List[CollectorSpec]
    engines: Dict[str, EngineLocation]  # by engine name, e.g. "llama.cpp"
    emulate: Optional[EmulateSpec]  # None: no emulation
    run_dir: str  # the directory the spec is in: <workdir>/runs/<set>/<run>


# ----------------------------------------------------------------------------------------------- run record

class RunnerInfo(TypedDict):
    version: str  # runner.RUNNER_VERSION
    pid: int
    python: str
    host: str


class CacheRecord(TypedDict, total=False):
    condition: str  # the spec's cache
    before: List[Dict[str, Any]]  # cachectl residency rows: path, size_bytes, pages_resident, resident_pct, ...
    drop: Dict[str, Any]  # macOS purge: method, cleared, reason (cleared false: the run was NOT cold)
    after: List[Dict[str, Any]]  # residency after the step
    after_error: str


class InterferenceRecord(TypedDict, total=False):
    """Who else had the machine during the step (runner/interference.py says how each number is measured).
    Contract 1.1; a 1.0 record has none (the controller's columns are then empty)."""

    wall_s: float  # the measured window: the step
    ncpu: int  # online CPUs
    machine_busy_s: float  # /proc/stat user + nice + system over the window, every CPU
    own_cpu_s: float  # the runner's process tree: the step, the runner, its collectors
    foreign_cpu_pct: Optional[float]  # (machine busy - own) / (wall x ncpu) x 100
    steal_s: float
    steal_pct: Optional[float]  # the hypervisor's steal, of all CPU time in the window
    irq_pct: Optional[float]  # irq + softirq, of all CPU time (not counted as foreign: the step's I/O is there)
    resolution_pct: Optional[float]  # how finely the jiffy counters resolve a percentage over this window
    run_s: float  # the step's tasks on a CPU (schedstat exec_runtime)
    run_delay_s: float  # the step's tasks runnable but waiting for a CPU (schedstat run_delay)
    runqueue_pct: Optional[float]  # run_delay / (run + run_delay) x 100; None without schedstat
    tasks_seen: int
    period_s: float  # how often the step's tasks were read
    throttled: Optional[bool]  # a cpufreq cap lowered or throttle events during the step; None: not readable
    cpu_cap_drop_khz: Optional[int]
    throttle_events: Optional[int]
    temp_max_c: Optional[float]  # the hottest thermal zone at the end
    error: str  # the sampler failed: the numbers above may be partial


class _RunRecordKeys(TypedDict):
    contract: str  # CONTRACT_VERSION of the runner that wrote it
    run_id: Optional[str]
    spec: RunSpec  # the spec as read (a refused one may be of another contract: the controller never reads it)
    status: str  # ok, failed (step, cache, collector or emulation refused; or a refused spec), interrupted, error
    error: Optional[str]  # one line for failed and interrupted; "runner error: ..." for error
    runner: RunnerInfo
    started: Clock


class RunRecord(_RunRecordKeys, total=False):
    """``run.json``: what happened, written with SHA256SUMS and then DONE, whatever happened."""

    ended: Clock  # every run.json has it: written last (runner.agent._finish), after the record was built
    traceback: str  # status error: the runner's own bug
    block_device: Optional[str]  # the device resolved for the run's files
    strays_stopped: Dict[str, Any]  # processes an earlier, killed run of the set left: stopped, left
    # 1.2: this run's processes that outlived their step process's group (fio's setsid job processes after its
    # leader was killed), stopped before the record was written: stopped, left (pid, comm, run, process)
    left_running_stopped: Dict[str, Any]
    emulation_repaired: Dict[str, Any]  # what a dead runner's emulation had left changed, restored
    emulation: Optional[Dict[str, Any]]  # settings, effective values, cgroups, stats; None: no emulation
    entry_state: Dict[str, Any]  # memory, load, heat, clocks, device_inflight before the step
    cache: CacheRecord
    blockstat_before: Optional[str]  # /sys/block/DEV/stat lines around the step
    blockstat_after: Optional[str]
    step_started: Clock
    step_ended: Clock
    summary: Dict[str, Any]  # what the step returned (counts; the step's files hold the measurements)
    collector_errors: List[str]  # collectors that failed or were skipped (optional), one line each
    rusage: Dict[str, Dict[str, Any]]  # by process name: majflt, minflt, storage_read_bytes, utime_s, stime_s, ...
    main_process: str  # the rusage entry of the step's own process (the first it spawned)
    interference: Optional[InterferenceRecord]  # 1.1: other processes' CPU, steal, runqueue, throttling

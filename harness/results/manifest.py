"""What a result set's ``manifest.json`` holds, as types: the set (``Manifest``), its targets and its runs.

The JSON on disk is these dicts as they are (TypedDicts, not classes): sets written before the types existed read
unchanged, and ``harness.results.loader.read_manifest`` is still the one reader (it checks ``schema_version`` and
the fields readers index), ``harness.results.store.ResultSetWriter`` the one writer.

A run's ``status`` has one owner, the controller: its verdict once the run was pulled (the watchdog's timeout, a
refused run.json, a runner that died, or else what the runner said). What the runner itself said in its run.json
is kept beside it as ``runner_status`` (absent in sets written before, and for runs without a readable record).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict, cast

from typing_extensions import NotRequired  # typing has it from 3.11; the project supports 3.10

# a run's status that is no verdict yet (an interrupted set keeps them)
NOT_FINAL = ("pending", "planned", "running")


class RunPlan(TypedDict, total=False):
    """A run as the campaign planned it: what a retry copies from its original (``_PLANNED_KEYS``)."""

    target: str
    step: str
    step_label: str  # the cell's label (sets before it: the step's kind)
    engine: str | None  # the engine the step ran (None: the step runs none)
    cache: str  # cold | warm
    round: int
    repeat: int
    params: dict[str, Any]  # the matrix values of the run's cell (JSON scalars)
    estimate_s: float
    # the variables the step's env: added to its engine process's environment, templated for the cell (absent:
    # none; equivalence's sides carry theirs in the spec and the equivalence table)
    env: dict[str, str]


class RunFields(TypedDict, total=False):
    """What the campaign records about a run as it happens (``ResultSetWriter.update_run``)."""

    status: str  # the controller's verdict: one owner (see the module's docstring)
    runner_status: str | None  # what the runner's run.json said (None: no readable record)
    error: str | None
    runner_pid: int
    runner_identity: str | None
    runner_started: float  # time.time() when the runner was started
    adopted: str  # --resume found the run's runner gone: why, and that it was measured again
    perturbed: bool  # ok, but beyond the experiment's validity limits (harness/results/validity.py)
    perturbed_reason: str | None
    retry_of: str  # the run id of the perturbed run this one measures again
    # what runstate found around the run (campaign.runstate via target.record)
    tj_gate: Any  # the thermal gate waited for before it
    mem_gate: Any  # the memory gate waited for before it
    expectations_before: str  # "ok" or why not
    expectations_after: str


class RunEntry(RunPlan, RunFields, total=False):
    """One run of the set's ``runs`` list: its planned identity and what happened to it."""

    run_id: str  # unique within a target (run ids repeat across targets)
    index: int


class BinaryIdentity(TypedDict):
    path: str  # on the target
    sha256: str


class PatchIdentity(TypedDict):
    path: str
    sha256: str


class BuildIdentity(TypedDict):
    """One named build (the experiment's ``builds:``) as one target built it: ``targets[T].builds[NAME]``."""

    engine: str
    source: dict[str, Any]  # the source actually built (its identity: sdist hash, git URL + full commit, tree hash)
    commit: str | None
    patches: list[PatchIdentity]  # in application order
    flags: list[str]  # exactly what the build was configured with (cmake), none for a declared engine
    key: str  # the build cache key
    cached: bool  # found in the target's cache, not built by this campaign
    binaries: dict[str, BinaryIdentity]


class TargetFields(TypedDict, total=False):
    """What the campaign records about a target as it learns it (``ResultSetWriter.update_target``)."""

    platform: str
    transport: str
    block_device: str | None
    facts: dict[str, Any]
    deployed: Any  # what was deployed to it (runner, native tools, engines): the session's record
    lease: dict[str, Any]  # its lease (labgrid: coordinator, place, tags, reservation token)
    expectations_before: list[dict[str, Any]]
    expectations_after: list[dict[str, Any]]
    engines: dict[str, Any]  # the engines built or deployed on it, by name
    builds: dict[str, BuildIdentity]  # the named builds made for it (builds:), by name
    stopping: dict[str, Any]  # rounds until tight: the rule and each cell's last look (harness.campaign.rounds)


class TargetEntry(TargetFields, total=False):
    """One target of the set's ``targets`` list (``name`` always; the rest as the campaign learns it)."""

    name: str


class ExperimentInfo(TypedDict):
    name: str
    path: str
    sha256: str  # of the experiment text: --resume and --confirm use the original file only when it matches


class HarnessInfo(TypedDict):
    version: str
    git_revision: str | None


class ControllerInfo(TypedDict, total=False):
    host: str
    python: str


class Confirms(TypedDict):
    """A confirmation set (``harness gate --confirm``): the set it confirms and how many rounds it ran."""

    set_id: str
    rounds: int


class EnergyMethod(TypedDict, total=False):
    """How a target's energy was measured (harness/campaign/energy.py): the source and its rail, the sampling period,
    the integration rule, the idle baseline (None: none measured); ``note``: why there is no energy, one line."""

    source: str | None
    rail: str | None
    period_ms: float | None
    integration: str
    idle_w: float | None
    idle_s: float | None  # the idle window's length (None: no idle window ran)
    note: str | None


class UpgradedFrom(TypedDict):
    """A set ``harness results upgrade`` wrote: the set it was made from and that set's schema."""

    set_id: str
    schema_version: int


class Prepared(TypedDict):
    """What the campaign prepared before its first run (``ResultSetWriter.record_prepared``), in this order."""

    engines: dict[str, dict[str, Any]]  # the engines built for the campaign, by name (EngineBuild.to_dict)
    declared_engines: dict[str, Any]  # declared engines whole, with sha256
    models: dict[str, Any]  # synthetic models made for the campaign, by name
    matrix: dict[str, list[Any]]
    baseline: Any  # the experiment's baseline cell (its matrix values), if it names one
    scratch: str | None  # --scratch, used again by --resume (None: the target's workdir)
    fio_policy: dict[str, Any]  # allow_exec: said here when it was on
    build_sources: NotRequired[dict[str, dict[str, str]]]  # --build-source: build name -> the source given
    # the experiment's validity: limits (None: off); ingest holds each run's decode to its minimums
    validity: NotRequired[dict[str, Any] | None]


class Manifest(TypedDict, total=False):
    """A result set's manifest.json. ``schema_version`` and ``set_id`` always; the writer's ``start`` writes the
    rest but ``status``, ``ended`` and what the campaign prepared (``engines`` ... ``fio_policy``); the marks
    (``resumed``, ``confirms``, ``upgraded_from``) only sets that had them."""

    schema_version: int
    set_id: str
    status: Literal["complete", "incomplete"]
    experiment: ExperimentInfo
    harness: HarnessInfo
    controller: ControllerInfo
    started: str  # ISO 8601 with the controller's UTC offset
    ended: str | None
    targets: list[TargetEntry]
    files: dict[str, dict[str, Any]]  # by target: the named data files its runs read (path, size, created)
    runs: list[RunEntry]
    engines: dict[str, dict[str, Any]]  # the engines built for the campaign, by name (EngineBuild.to_dict)
    declared_engines: dict[str, Any]  # declared engines whole, with sha256
    models: dict[str, Any]  # synthetic models made for the campaign, by name
    matrix: dict[str, list[Any]]
    baseline: Any  # the experiment's baseline cell (its matrix values), if it names one
    scratch: str | None  # --scratch, used again by --resume (None: the target's workdir)
    fio_policy: dict[str, Any]
    build_sources: dict[str, dict[str, str]]  # only a campaign given --build-source; --resume uses it again
    validity: dict[str, Any] | None  # the experiment's validity: limits (None: off; absent: a set made before)
    resumed: list[str]  # when --resume reopened it, in order
    confirms: Confirms
    upgraded_from: UpgradedFrom
    energy: dict[str, EnergyMethod]  # by target: how its energy table was computed, or why it has none


def verdict(entry: Mapping[str, Any], record: Mapping[str, Any] | None) -> tuple[str, str | None]:
    """(status, error) of a run as the runs table says it: the controller's verdict from its entry. An entry
    with none yet (``planned``, or ``running`` in a set whose controller died before recording it) falls back to
    what the runner's run.json said, the only word there is on the run; neither: ``planned``."""
    status = entry.get("status")
    if status not in (None, *NOT_FINAL) or record is None:
        return (status or "planned"), entry.get("error")
    return record.get("status", status or "planned"), record.get("error")


def retry_entry(original: RunEntry, run_id: str, index: int) -> RunEntry:
    """A retry's entry (a perturbed run measured again): its original's plan, not what happened to it, under a
    new id and index, pending."""
    plan: Mapping[str, object] = original
    copied = {key: plan[key] for key in RunPlan.__annotations__ if key in plan}
    # the keys are RunPlan's, the values the original's: a RunEntry (mypy cannot follow keys from a loop)
    return cast(RunEntry, {**copied, "run_id": run_id, "index": index, "status": "pending",
                           "retry_of": original.get("run_id")})

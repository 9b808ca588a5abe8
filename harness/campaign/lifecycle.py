"""One run on one target, as a state machine: write the spec, start the runner detached, poll for DONE, pull the
run directory, verify it, record it.

    planned -> started -> done | died | timed-out | interrupted -> pulled | not-pulled -> recorded

Every way a run can go is a transition: the watchdog (no DONE within the run's limit: timed-out), a stop signal
while the runner runs (interrupted: it is stopped, then pulled), a runner gone without DONE (died), a pull that
keeps failing (not-pulled: the run directory stays on the target). A runner that died or was stopped could not
clean up after itself, so leaving died, timed-out and interrupted undoes what it left (``undo_dead_runner``).
A run a dead controller left running is adopted by --resume in the started state (``RunLifecycle.adopt``); its
watchdog limit is worked out again from the spec it runs (on the target) and counted from when it was started (the
manifest's ``runner_started``, the controller's wall clock; from the adoption where an older manifest has none).
The runner is known by more than its pid (``recorded.RecordedRunner``): a pid that names another process now is
never signalled, and the run is judged by what its runner left.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from enum import Enum

from harness.boards.session import TargetSession
from harness.boards.transports import put_bytes
from harness.campaign import space, stopping
from harness.campaign.context import CampaignContext
from harness.campaign.plan import PlannedRun
from harness.campaign.pull import Pulled, pull_run
from harness.campaign.recorded import RecordedRunner, lost_reason, stop_runner
from harness.campaign.spec import build_spec, run_limit_s
from harness.emulation import controller as emulation
from harness.errors import TargetError
from harness.results.store import ResultSetWriter
from harness.results.validity import NOT_PERTURBED, judge
from runner.contract import RunSpec

POLL_FIRST_S, POLL_MAX_S = 0.05, 1.0


class RunState(Enum):
    PLANNED = "planned"  # nothing of the run is on the target yet
    STARTED = "started"  # the runner runs, and the manifest says so (status running, runner_pid, runner_identity)
    DONE = "done"  # the runner wrote DONE
    DIED = "died"  # the runner is gone without DONE (killed, crashed, a full disk)
    TIMED_OUT = "timed-out"  # no DONE within the run's limit: the watchdog stopped the runner
    INTERRUPTED = "interrupted"  # a stop signal arrived while the runner ran: it was stopped
    # the run directory is here, verified against the runner's SHA256SUMS (a mismatch is another pull attempt,
    # so pulled and verified are one state)
    PULLED = "pulled"
    NOT_PULLED = "not-pulled"  # every pull attempt failed: the run directory stays on the target
    RECORDED = "recorded"  # its status and error are in the manifest


_ENDED = {RunState.DONE, RunState.DIED, RunState.TIMED_OUT, RunState.INTERRUPTED}
TRANSITIONS: dict[RunState, set[RunState]] = {
    RunState.PLANNED: {RunState.STARTED},
    RunState.STARTED: _ENDED,
    **{state: {RunState.PULLED, RunState.NOT_PULLED} for state in _ENDED},
    RunState.PULLED: {RunState.RECORDED},
    RunState.NOT_PULLED: {RunState.RECORDED},
    RunState.RECORDED: set(),
}
# what a run is recorded as when its run.json is missing, by how the runner ended
DEFAULT_STATUS = {RunState.DONE: "unknown", RunState.DIED: "failed", RunState.TIMED_OUT: "failed",
                  RunState.INTERRUPTED: "interrupted"}


class _RunOverdue(Exception):
    """The runner passed the run's time limit without writing DONE."""


class RunLifecycle:
    def __init__(self, ctx: CampaignContext, session: TargetSession, writer: ResultSetWriter, run: PlannedRun) -> None:
        self.ctx, self.session, self.writer, self.run = ctx, session, writer, run
        self.target = session.target.name
        self.remote_dir = f"{session.workdir}/runs/{ctx.set_id}/{run.run_id}"
        self.spec_path = f"{self.remote_dir}/spec.json"  # also the marker in its runner's command line
        self.state = RunState.PLANNED
        self.runner: RecordedRunner | None = None
        self.spec: RunSpec | None = None  # built when the run starts, or read back from the target when adopted
        self.failure: str | None = None  # the controller's own verdict (the watchdog's); overrides the runner's
        self.started_wall: float | None = None  # when the runner was started (time.time()), as the manifest says
        self.perturbed = False  # recorded ok but beyond the experiment's validity: limits

    @classmethod
    def adopt(cls, ctx: CampaignContext, session: TargetSession, writer: ResultSetWriter,
              run: PlannedRun) -> RunLifecycle:
        """A run a dead controller started (--resume): started, with the runner its manifest entry recorded."""
        lifecycle = cls(ctx, session, writer, run)
        entry = writer.run_entry(run.run_id, lifecycle.target)
        lifecycle.runner = RecordedRunner.from_entry(entry, lifecycle.spec_path)
        lifecycle.started_wall = entry.get("runner_started")
        lifecycle.state = RunState.STARTED
        return lifecycle

    def finish_adopted(self) -> bool:
        """Wait for an adopted runner still running, under the watchdog, and pull the run when it wrote DONE (or
        when the watchdog stopped it: failed, with the reason). False when it is gone without DONE (its pid free or
        another process's, left alone): the run is measured again."""
        transport = self.session.transport
        if self.runner is not None and self.runner.alive(transport):
            self.spec, left_s, limit_s = adopted_limit_s(self.ctx, self.session, self.remote_dir, self.started_wall)
            try:
                self.wait(left_s)
            except _RunOverdue:
                self.ctx.progress.run_started(self.target, self.run)
                self._overdue(limit_s)
                return True
        if self.state is RunState.STARTED:
            self._to(RunState.DONE if transport.exists(f"{self.remote_dir}/DONE") else RunState.DIED)
        if self.state is not RunState.DONE:
            self._lost()
            return False
        self.ctx.progress.run_started(self.target, self.run)
        self.pull()
        return True

    def _lost(self) -> None:  # an adopted run gone without DONE: why, in its entry and said
        why = lost_reason(self.session.transport, self.runner)
        self.writer.update_run(self.run.run_id, target=self.target, adopted=f"{why}; measured again")
        self.ctx.progress.message(f"{self.target} {self.run.run_id}: {why}; measuring it again")

    def _to(self, state: RunState) -> None:
        self._can(state)
        self.state = state

    def _can(self, state: RunState) -> None:
        if state not in TRANSITIONS[self.state]:
            raise RuntimeError(f"run {self.run.run_id} on {self.target}: no transition {self.state.value} -> "
                               f"{state.value}")

    # ------------------------------------------------------------------ the whole run
    def execute(self, files: dict[str, str]) -> None:
        """From planned to recorded. A stop signal stops the runner, pulls and records the run, then raises."""
        self.spec = build_spec(self.ctx, self.session, self.run, files, self.remote_dir)
        self.ctx.progress.run_started(self.target, self.run)
        self._write_spec()
        limit_s = run_limit_s(self.ctx, self.spec)
        try:
            self._start()
            stopping.checkpoint("run")
            self.wait(limit_s)
        except KeyboardInterrupt:
            if self.state is RunState.PLANNED:
                raise
            if self.state is RunState.STARTED:  # (a stop landing just as the runner ended keeps that end)
                self._to(RunState.INTERRUPTED)
            with stopping.deferred():  # a second Ctrl-C must not leave the runner running
                self._stop_runner()
                self.undo_dead_runner()  # in case it had to be SIGKILLed
                self.pull()
            raise
        except _RunOverdue:
            self._overdue(limit_s)
            return
        if self.state is RunState.DIED:
            self.undo_dead_runner()
        self.pull()

    def _overdue(self, limit_s: float) -> None:
        """A runner hung outside its step (a collector, a cache prefetch, a wedged service): stop it, keep what it
        wrote, fail the run; the campaign goes on with the next one."""
        self._to(RunState.TIMED_OUT)
        self.ctx.progress.message(f"{self.target} {self.run.run_id}: no DONE after {limit_s:.0f} s: "
                                  "stopping the runner")
        self._stop_runner(why="watchdog")
        self.undo_dead_runner()
        self.failure = f"the run did not finish within {limit_s:.0f} s (run_timeout_s) and was stopped"
        self.pull()

    def _write_spec(self) -> None:
        if self.ctx.resumed:
            self.session.transport.run(["rm", "-rf", self.remote_dir])  # a resumed run starts clean
        try:
            put_bytes(self.session.transport, json.dumps(self.spec, indent=1).encode(), self.spec_path)
        except (OSError, TargetError) as exc:
            full = space.workdir_full(self.session)
            if full is None:
                raise
            raise space.resumable(self.session, full, self.ctx.set_id) from exc

    def _start(self) -> None:
        # a runner that started is recorded with its pid before a stop can act: it is never left unrecorded
        with stopping.deferred():
            transport = self.session.transport
            pid = transport.start_detached([self.session.python, "-m", "runner", "run", self.spec_path],
                                           cwd=self.session.runner_root, log=f"{self.remote_dir}/runner.log")
            self.runner = RecordedRunner.started(transport, pid, self.spec_path)
            self._to(RunState.STARTED)
            self.started_wall = time.time()
            self.writer.update_run(self.run.run_id, target=self.target, status="running", **self.runner.fields(),
                                   runner_started=round(self.started_wall, 3))

    # ------------------------------------------------------------------ started -> done | died | timed-out
    def wait(self, limit_s: float = float("inf")) -> None:
        """Poll for DONE: done, or died when the runner is gone without it; _RunOverdue after ``limit_s``,
        KeyboardInterrupt when a stop was requested."""
        transport, done = self.session.transport, f"{self.remote_dir}/DONE"
        delay, deadline = POLL_FIRST_S, time.monotonic() + limit_s
        while not transport.exists(done):
            stopping.check()  # a stop requested: this target's worker stops its runner (execute)
            if self.runner is None or not self.runner.alive(transport):
                self._to(RunState.DONE if transport.exists(done) else RunState.DIED)
                return
            if time.monotonic() > deadline:
                raise _RunOverdue
            time.sleep(delay)
            delay = min(delay * 1.5, POLL_MAX_S)
        # the runner writes DONE last; give it a moment to exit so no process is left behind
        for _ in range(100):
            if self.runner is None or not self.runner.alive(transport):
                break
            time.sleep(0.05)
        self._to(RunState.DONE)

    def _stop_runner(self, why: str = "interrupt") -> None:
        assert self.runner is not None  # started
        stop_runner(self.session, self.runner, why, self.ctx.progress.message)

    def undo_dead_runner(self) -> None:
        undo_dead_runner(self.session, self.spec, self.ctx.set_id, self.run.run_id, self.ctx.progress.message)

    # ------------------------------------------------------------------ ended -> pulled | not-pulled -> recorded
    def pull(self) -> None:
        """Pull, verify and record the run. A stop signal waits until the run is recorded (stopping.deferred)."""
        with stopping.deferred():
            stopping.checkpoint("pull")
            self._pull_and_record()

    def _pull_and_record(self) -> None:
        self._can(RunState.PULLED)  # the runner has ended
        local = self.writer.raw_dir(self.target, self.run.run_id)
        default_status = DEFAULT_STATUS[self.state]
        pulled = pull_run(self.session, self.remote_dir, local, f"{self.target} {self.run.run_id}", self.ctx.progress)
        self._to(RunState.PULLED if pulled.here else RunState.NOT_PULLED)
        status, error, full = self._verdict(pulled, default_status)
        # an ok run another process, steal or throttling disturbed stays ok, marked (harness/results/validity.py)
        verdict = judge(pulled.record.get("interference"), self.ctx.experiment.validity) \
            if status == "ok" and pulled.record is not None else NOT_PERTURBED
        self.perturbed = verdict.perturbed
        self.writer.update_run(self.run.run_id, target=self.target, status=status, error=error,
                               runner_status=pulled.runner_status, **verdict.fields())
        self._to(RunState.RECORDED)
        self.ctx.progress.run_finished(self.target, self.run, status, error)
        if verdict.perturbed:
            self.ctx.progress.message(f"{self.target} {self.run.run_id}: perturbed: {verdict.reason}")
        if pulled.here:
            self.session.transport.run(["rm", "-rf", self.remote_dir])
        if full is not None:  # every later run would die the same way: stop here, resumable
            raise space.resumable(self.session, full, self.ctx.set_id)

    def _verdict(self, pulled: Pulled, status: str) -> tuple[str, str | None, str | None]:
        """(status, error) for the manifest, and the full workdir that killed the runner, if that was it."""
        error, full = pulled.error, None
        if pulled.refused is not None:
            status, error = "failed", pulled.refused
        elif pulled.record is not None:
            status, error = pulled.record["status"], pulled.record.get("error")
        elif pulled.here and error is None:
            log = self.writer.raw_dir(self.target, self.run.run_id) / "runner.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
            error = "runner died without DONE" + (": " + " | ".join(tail) if tail else "")
            full = space.workdir_full(self.session)  # a full workdir leaves the runner no place to say so
            if full is not None:
                error += f" ({full})"
        if not pulled.here:
            error = f"{error} (the run directory is kept on the target: {self.remote_dir})"
        if self.failure is not None:
            status, error = "failed", self.failure + (f"; then: {error}" if error else "")
        return status, error, full


def adopted_limit_s(ctx: CampaignContext, session: TargetSession, remote_dir: str,
                    started_wall: float | None) -> tuple[RunSpec | None, float, float]:
    """An adopted run's (spec, what is left of its watchdog limit, the limit): the limit of the spec it runs (read
    from the target), less the time since it was started. Without a readable spec (None), the experiment's
    run_timeout_s or the default step limit."""
    spec: RunSpec | None
    try:
        spec = json.loads(session.transport.read_file(f"{remote_dir}/spec.json"))
    except (OSError, TargetError, ValueError):
        spec = None
    limit_s = left_s = run_limit_s(ctx, spec)
    if isinstance(started_wall, (int, float)):
        left_s -= max(0.0, time.time() - started_wall)
    return spec, max(0.0, left_s), limit_s


# ---------------------------------------------------------------------- a runner that has to be undone
def undo_dead_runner(session: TargetSession, spec: RunSpec | None, set_id: str, run_id: str,
                     say: Callable[[str], None]) -> None:
    """A runner that died or was killed could not clean up: restore what its emulation changed (read_ahead_kb,
    cgroups) and stop every process marked with this set's runs, so nothing of it reads while the next run is
    measured."""
    emulation.repair(session, spec, say)
    scope = f"{set_id}/{session.target.name}"  # this target's runs only: another may share the machine
    done = session.transport.run([session.python, "-m", "runner", "reap", scope], cwd=session.runner_root)
    try:
        result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return
    if result.get("stopped"):
        names = ", ".join(sorted({p["comm"] for p in result["stopped"]}))
        say(f"{session.target.name} {run_id}: stopped {len(result['stopped'])} process(es) the run left running "
            f"({names})")
    if result.get("left"):
        say(f"{session.target.name}: {len(result['left'])} process(es) of the set would not die (uninterruptible "
            "I/O?); the next run records its entry state")

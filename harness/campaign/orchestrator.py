"""Execute a plan on targets and leave a result set.

For every run: write the spec, start the runner detached on the target, poll for DONE, pull the
run directory, verify it against the runner's checksums. A failing run is recorded and the
campaign goes on; an interrupt stops the current runner cleanly, keeps every finished run and
leaves the set marked incomplete.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.boards.lease import DEFAULT_WAIT_S as DEFAULT_LEASE_WAIT_S
from harness.boards.session import TargetSession, open_session
from harness.boards.transports import put_bytes
from harness.campaign import runstate, stopping
from harness.campaign.plan import Plan, PlannedRun
from harness.collectors import COLLECTORS, collector_configs
from harness.collectors.platform import preflight as collector_preflight
from harness.config.target import Target
from harness.emulation import controller as emulation
from harness.errors import DiskFullError, ExpectationError, ResultSetError, TargetError, ToolMissingError, UsageError
from harness.results.store import ResultSetWriter, new_set_id
from harness.steps import STEPS

POLL_FIRST_S, POLL_MAX_S = 0.05, 1.0
PULL_ATTEMPTS = 3
INTERRUPT_GRACE_S = 20.0
# what a run may take beyond its step's own timeout (cache drop or prefetch of a big model, emulation set-up,
# collectors starting and stopping) before the controller's watchdog stops it
RUN_SLACK_S = 900.0
# What a result set needs on the results disk, estimated before it starts: raw run directories (collector
# samples at 5-10 ms, engine logs) measured here at 0.2-2 MB per run, tables and figures once.
RESULTS_PER_RUN_BYTES = 4 << 20
RESULTS_FIXED_BYTES = 16 << 20
# a target's workdir holds one run's raw files until they are pulled (plus a margin for the runner's log)
WORKDIR_MIN_FREE_BYTES = 2 * RESULTS_PER_RUN_BYTES


class Progress(Protocol):
    def target_started(self, target: str, total: int) -> None: ...
    def run_started(self, target: str, run: PlannedRun) -> None: ...
    def run_finished(self, target: str, run: PlannedRun, status: str, error: str | None) -> None: ...
    def message(self, text: str) -> None: ...


class QuietProgress:
    def target_started(self, target: str, total: int) -> None: ...
    def run_started(self, target: str, run: PlannedRun) -> None: ...
    def run_finished(self, target: str, run: PlannedRun, status: str, error: str | None) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass
class CampaignResult:
    path: Path
    complete: bool
    interrupted: bool = False
    statuses: dict[str, int] = field(default_factory=dict)
    table_rows: dict[str, int] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)


class Campaign:
    def __init__(self, plan: Plan, targets: list[Target], results_dir: Path, *, scratch: str | None = None,
                 progress: Progress | None = None, lease_wait_s: float = DEFAULT_LEASE_WAIT_S) -> None:
        self.plan, self.targets, self.results_dir = plan, targets, results_dir
        self.scratch = scratch
        self.lease_wait_s = lease_wait_s
        # targets run in threads (one run at a time per target); manifest writes take this lock
        self._lock = threading.RLock()
        self._local = threading.local()
        self._interrupt = threading.Event()
        self.keep: set[tuple[str, str]] = set()  # (target, run_id) already done in a resumed set
        self.resumed_running: set[tuple[str, str]] = set()  # runs a dead controller left running
        self.progress = progress or QuietProgress()
        loaded = plan.experiment
        self.experiment = loaded.experiment
        self.collectors = collector_configs(self.experiment, loaded.doc)
        self.set_id = new_set_id(self.experiment.name, loaded.text)
        self.builds: dict[str, Any] = {}  # engine name -> BuildInfo (controller-side builds)
        self.engine_specs: dict[str, Any] = {}  # engine name -> EngineSpec the steps need
        self.synth: dict[str, tuple[str, dict[str, Any]]] = {}  # file name -> (path, description)

    # ------------------------------------------------------------------ whole campaign
    def run(self) -> CampaignResult:
        self._check_results_space()
        sessions = self._preflight()
        try:
            stopping.checkpoint("preflight")
            with stopping.deferred():  # a set directory always has its manifest
                writer = self._new_writer()
        except BaseException:
            for session in sessions:
                session.close()
            raise
        return self._execute(sessions, writer)

    def _check_results_space(self) -> None:
        """Refuse a campaign the results disk cannot hold (an estimate: raw files, tables, figures)."""
        runs = len(self.plan.runs) * len(self.targets)
        needed = RESULTS_FIXED_BYTES + runs * RESULTS_PER_RUN_BYTES
        where = self.results_dir
        while not where.exists() and where != where.parent:
            where = where.parent
        free = shutil.disk_usage(where).free
        if free < needed:
            raise ResultSetError(f"results disk full: {free / 1e6:.0f} MB free on {where}; this campaign writes "
                                 f"about {needed / 1e6:.0f} MB ({runs} runs)")

    def _new_writer(self) -> ResultSetWriter:
        writer = ResultSetWriter(self.results_dir, self.set_id)
        loaded = self.plan.experiment
        writer.start(experiment_name=self.experiment.name, experiment_path=loaded.path, experiment_text=loaded.text,
                     targets=[{"name": t.name, "platform": t.platform, "transport": t.transport_kind,
                               "block_device": t.block_device} for t in self.targets],
                     plan=[self._planned(t, r) for t in self.targets for r in self.plan.runs])
        writer.manifest["engines"] = {name: build.to_dict() for name, build in self.builds.items()}
        writer.manifest["models"] = {name: info for name, (_path, info) in self.synth.items()}
        writer.manifest["matrix"] = {key: list(values) for key, values in self.experiment.matrix.items()}
        writer.manifest["baseline"] = self.experiment.baseline
        writer.manifest["scratch"] = self.scratch  # --resume uses it again (None: the target's workdir)
        writer.manifest["fio_policy"] = self.experiment.fio.model_dump()  # allow_exec: said here when it was on
        writer.save()
        return writer

    def resume(self, path: Path) -> CampaignResult:
        """Complete an incomplete set: runs that finished stay; missing, failed and interrupted ones run."""
        manifest = json.loads((path / "manifest.json").read_text())
        self.set_id = manifest["set_id"]
        self.scratch = self.scratch or manifest.get("scratch")  # the original --scratch unless another is given
        self.keep = {(r["target"], r["run_id"]) for r in manifest["runs"] if r["status"] == "ok"}
        self.resumed_running = {(r["target"], r["run_id"]) for r in manifest["runs"] if r["status"] == "running"}
        sessions = self._preflight()
        writer = _ReopenedWriter(path, manifest)
        writer.manifest.setdefault("resumed", []).append(time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        writer.save()
        return self._execute(sessions, writer)

    def _execute(self, sessions: list[TargetSession], writer: ResultSetWriter) -> CampaignResult:
        self._guard_writer(writer)
        complete = interrupted = failed = False
        try:
            if len(sessions) == 1:
                self._run_target(writer, sessions[0])
            else:
                self._run_parallel(writer, sessions)
            complete = True
        except KeyboardInterrupt:
            # the current runners were stopped and pulled in _run_one; keep everything done so far
            interrupted = True
        except BaseException:
            failed = True
            raise
        finally:
            for session in sessions:
                session.close()
            try:
                result = self._finish(writer, complete)
            except Exception:
                if not failed:
                    raise
                # the first error says what went wrong; finishing failed for the same reason (a full disk):
                # the set stays incomplete with its last manifest, and --resume finishes it
        result.interrupted = interrupted or result.interrupted
        return result

    def _run_parallel(self, writer: ResultSetWriter, sessions: list[TargetSession]) -> None:
        """A thread per target; Ctrl-C reaches the main thread, which tells every target to stop."""
        errors: list[BaseException] = []

        def work(session: TargetSession) -> None:
            try:
                self._run_target(writer, session)
            except KeyboardInterrupt:
                pass  # this target's runner was stopped and pulled
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
                errors.append(exc)
                self.progress.message(f"{session.target.name}: stopped: {exc}")

        threads = [threading.Thread(target=work, args=(s,), name=f"target-{s.target.name}", daemon=True)
                   for s in sessions]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except KeyboardInterrupt:
            self._interrupt.set()
            for thread in threads:
                thread.join()
            raise
        if errors:
            raise errors[0]

    def _guard_writer(self, writer: ResultSetWriter) -> None:
        """Manifest writes under the lock; a run update touches only the calling target's entry
        (run ids repeat across targets)."""
        lock, local, save = self._lock, self._local, writer.save

        def locked_save() -> None:
            with lock:
                save()

        def update_run(run_id: str, **fields: Any) -> None:
            target = getattr(local, "target", None)
            with lock:
                for entry in writer.manifest["runs"]:
                    if entry["run_id"] == run_id and target in (None, entry.get("target")):
                        entry.update(fields)
                save()

        writer.save = locked_save  # type: ignore[method-assign]
        writer.update_run = update_run  # type: ignore[method-assign]

    def _preflight(self) -> list[TargetSession]:
        """Everything that can be checked before a result set exists: names, tools, reachability."""
        self._check_expectation_names()
        self._prepare_engines_and_models()
        tools = sorted({tool for run in self.plan.runs for tool in STEPS[run.step].required_tools})
        sessions: list[TargetSession] = []
        try:
            for target in self.targets:
                # the board's lease comes first: nothing on a board changes while another campaign holds it
                session = open_session(target, lease_for=self.set_id, lease_wait_s=self.lease_wait_s,
                                       on_wait=self.progress.message)
                sessions.append(session)
                if hasattr(session.transport, "on_event"):  # remote transports report reconnects
                    session.transport.on_event = self.progress.message
                facts = session.platform.probe(session, [], tools)
                # a required collector that cannot run on this target stops here; optional ones are skipped
                collector_preflight(target.name, self.collectors, facts, self.progress.message)
                self._check_workdir_space(session)
                missing = [tool for tool in tools if not facts.get(f"tool_{tool}")]
                if missing:
                    raise ToolMissingError(f"target {target.name}: {', '.join(missing)} not installed "
                                           f"(needed by the experiment's steps; apt-get install {' '.join(missing)})")
                for name, spec in self.experiment.named_files().items():
                    if spec.path is not None:
                        self._existing_file_size(session, name, spec.path)
                        if name in self._engine_files():
                            self._check_gguf(session, name, spec.path)
                # a machine that cannot emulate the board refuses here, before a set exists (exit 2)
                paths = [s.path for s in self.experiment.named_files().values() if s.path is not None]
                emulation.preflight(session, self.experiment, self.plan.experiment.doc,
                                    paths + [self.scratch or session.workdir])
            self._prepare_remote(sessions)
        except BaseException:
            for session in sessions:
                session.close()
            raise
        return sessions

    def _workdir_free(self, session: TargetSession) -> tuple[str, int] | None:
        """(mount point or nearest existing dir, free bytes) of the target's workdir; None when unknown."""
        done = session.transport.run([session.python, "-m", "runner", "free", session.workdir],
                                     cwd=session.runner_root)
        try:
            answer = json.loads(done.stdout.decode().strip().splitlines()[-1])
            return str(answer["path"]), int(answer["free_bytes"])
        except (ValueError, IndexError, KeyError, TypeError):
            return None

    def _workdir_full(self, session: TargetSession) -> DiskFullError | None:
        """The one-line error when the target's workdir cannot take another run, else None."""
        free = self._workdir_free(session)
        if free is None or free[1] >= WORKDIR_MIN_FREE_BYTES:
            return None
        return DiskFullError(f"target {session.target.name}: workdir disk full: {free[1] / 1e6:.0f} MB free on "
                             f"{free[0]}; a run writes up to about {RESULTS_PER_RUN_BYTES / 1e6:.0f} MB there")

    def _check_workdir_space(self, session: TargetSession) -> None:
        full = self._workdir_full(session)
        if full is not None:
            raise full

    def _prepare_engines_and_models(self) -> None:
        """Build the engines the steps use and synthesize models, once, cached across campaigns.

        The controller builds only for a local target; boards build their own (``_prepare_remote``)."""
        from harness.boards.prepare import build_engines, engines_needed, synth_model

        step_engines = {STEPS[run.step].engine for run in self.plan.runs} - {None}
        self.engine_specs = engines_needed(self.experiment, step_engines)  # type: ignore[arg-type]
        if self.engine_specs and any(t.transport_kind == "local" for t in self.targets):
            self.builds = build_engines(self.engine_specs, self.plan.experiment.path.parent, self.progress.message)
        for name, spec in self.experiment.named_files().items():
            if spec.synth is not None:
                path, info = synth_model(spec.synth, self.progress.message)
                self.synth[name] = (str(path), info)

    def _prepare_remote(self, sessions: list[TargetSession]) -> None:
        """Engines built on each board and synthetic models pushed to it, boards in parallel (a build on a
        board takes minutes); both are skipped when the board already has them."""
        from harness.boards.prepare import prepare_target

        remote = [s for s in sessions if s.target.transport_kind != "local"]
        if not remote or not (self.engine_specs or self.synth):
            return
        experiment_dir = self.plan.experiment.path.parent
        errors: list[BaseException] = []

        def prepare(session: TargetSession) -> None:
            try:
                prepare_target(session, self.engine_specs, self.synth, experiment_dir, self.progress.message)
            except BaseException as exc:  # noqa: BLE001 - re-raised below in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=prepare, args=(s,), daemon=True) for s in remote]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _finish(self, writer: ResultSetWriter, complete: bool) -> CampaignResult:
        # Tables come from whatever runs finished, even after an interrupt; the set is renamed to
        # its final name only when complete. Figures and report are derived, so they come last.
        # a stop signal here waits until the tables and the manifest are written (and the set renamed)
        from harness.results.ingest import write_tables  # pandas: loaded when tables are written, not at start

        with stopping.deferred(raise_after=False):
            stopping.checkpoint("tables")
            counts = write_tables(writer.path, writer.manifest)
            path = writer.finish(complete=complete)
        interrupted = stopping.take_pending()
        figures: list[Path] = []
        if not interrupted:
            try:
                from harness.figures.report import render_report

                figures = render_report(path)
            except KeyboardInterrupt:
                interrupted = True
            except Exception as exc:  # noqa: BLE001 - the data is safe; say how to retry instead of failing
                self.progress.message(f"figures/report failed ({exc}); retry with: harness report {path}")
        if interrupted:
            self.progress.message(f"stopped ({stopping.name()}) before the figures; the tables are written; "
                                  f"draw them with: harness report {path}")
        statuses: dict[str, int] = {}
        for run in writer.manifest["runs"]:
            statuses[run["status"]] = statuses.get(run["status"], 0) + 1
        return CampaignResult(path, complete, interrupted=interrupted, statuses=statuses, table_rows=counts,
                              figures=figures)

    def _planned(self, target: Target, run: PlannedRun) -> dict[str, Any]:
        return {"run_id": run.run_id, "index": run.index, "target": target.name, "step": run.step,
                "step_label": run.cell.label, "cache": run.cache, "round": run.round, "repeat": run.repeat,
                "params": run.params, "estimate_s": round(run.estimate_s, 1), "status": "pending"}

    def _check_expectation_names(self) -> None:
        from harness.boards.platforms import PLATFORMS

        doc = self.plan.experiment.doc
        for target in self.targets:
            known = PLATFORMS[target.platform].expectations
            for name in self.experiment.expect:
                if name not in known:
                    raise doc.error(("expect", name), f"unknown expectation {name!r} for platform "
                                    f"{target.platform} (known: {', '.join(known)})")

    # ------------------------------------------------------------------ one target
    def _run_target(self, writer: ResultSetWriter, session: TargetSession) -> None:
        target = session.target
        self._local.target = target.name
        created: list[str] = []
        todo = [run for run in self.plan.runs if (target.name, run.run_id) not in self.keep]
        if not todo:
            return  # a resumed set with nothing left here: no data files made, nothing probed again
        try:
            files, created = self._prepare_files(session, writer)
            facts = session.platform.probe(session, list(files.values()))
            self._record_target(writer, target.name, facts=facts, deployed=session.deployed,
                                **({"engines": session.engines} if session.engines else {}))
            self._check_expectations(session, writer, facts, "before")
            self.progress.target_started(target.name, len(todo))
            for run in todo:
                if self._interrupt.is_set():
                    raise KeyboardInterrupt
                if (target.name, run.run_id) in self.resumed_running and self._pull_finished(session, writer, run):
                    continue
                # temperature gate and expectations around every run: clocks can change under load
                runstate.before_run(session, writer, run, self.experiment.expect, self.progress.message)
                self._run_one(session, writer, run, files)
                runstate.after_run(session, writer, run, self.experiment.expect)
                stopping.checkpoint("between-runs")
            self._check_expectations(session, writer, facts, "after")
        finally:
            self._remove_created(session, created)
            # pulled runs were removed one by one; the set's runs/ directory goes when empty (rmdir only)
            session.transport.run(["rmdir", f"{session.workdir}/runs/{self.set_id}"])

    def _scratch(self, session: TargetSession) -> str:
        return self.scratch or f"{session.workdir}/scratch/{self.set_id}"

    def _remove_created(self, session: TargetSession, created: list[str]) -> None:
        """Delete the data files this campaign created, each checked by the runner first: inside the scratch
        directory and marked as this campaign's. Anything else is left alone and said."""
        for path in created:
            done = session.transport.run([session.python, "-m", "runner", "rmfile", path, "--owner", self.set_id,
                                          "--inside", self._scratch(session)], cwd=session.runner_root)
            if done.returncode != 0:
                self.progress.message(f"{session.target.name}: {done.stderr.decode(errors='replace').strip()}")
        if created and self.scratch is None:  # the default scratch dir is the harness's own: gone when empty
            session.transport.run(["rmdir", self._scratch(session)])

    def _pull_finished(self, session: TargetSession, writer: ResultSetWriter, run: PlannedRun) -> bool:
        """A run a dead controller left running may have finished on the board (or still be running):
        wait for it and pull it instead of measuring it again."""
        remote_dir = f"{session.workdir}/runs/{self.set_id}/{run.run_id}"
        entry = next((r for r in writer.manifest["runs"] if r["run_id"] == run.run_id
                      and r.get("target") == session.target.name), {})
        pid = entry.get("runner_pid")
        if pid and session.transport.alive(int(pid)):
            self._wait_done(session, remote_dir, int(pid), {})
        if not session.transport.exists(f"{remote_dir}/DONE"):
            return False
        self.progress.run_started(session.target.name, run)
        self._pull(session, writer, run, remote_dir, default_status="unknown")
        return True

    def _record_target(self, writer: ResultSetWriter, name: str, **fields: Any) -> None:
        with self._lock:
            for entry in writer.manifest["targets"]:
                if entry["name"] == name:
                    entry.update(fields)
            writer.save()

    def _check_expectations(self, session: TargetSession, writer: ResultSetWriter, facts: dict[str, Any],
                            when: str) -> None:
        if not self.experiment.expect:
            return
        if when == "after":
            facts = session.platform.probe(session, [])
        results = session.platform.check(self.experiment.expect, facts, session)
        self._record_target(writer, session.target.name,
                            **{f"expectations_{when}": [r.__dict__ for r in results]})
        failed = [r for r in results if not r.ok]
        if failed:
            raise ExpectationError(f"target {session.target.name}: expectation {failed[0].name} failed {when} "
                                   f"the runs: {failed[0].message}")

    def _prepare_files(self, session: TargetSession,
                       writer: ResultSetWriter) -> tuple[dict[str, str], list[str]]:
        """Resolve named files on the target; create the ``create:`` ones in scratch."""
        scratch = self._scratch(session)
        files: dict[str, str] = {}
        created: list[str] = []
        records: dict[str, Any] = {}
        for name, spec in self.experiment.named_files().items():
            if spec.path is not None:
                path = spec.path
                records[name] = {"path": path, "size_bytes": self._existing_file_size(session, name, path),
                                 "created": False}
            elif spec.synth is not None:
                path, info = self.synth[name]
                path = session.models.get(name, path)  # a board holds its pushed copy
                records[name] = {"path": path, "size_bytes": info["file_bytes"], "created": False,
                                 "synth": spec.synth.model_dump()}
            else:
                path = f"{scratch}/{name}.bin"
                self.progress.message(f"{session.target.name}: creating {name} ({spec.create}) in {scratch}")
                made = session.transport.run([session.python, "-m", "runner", "mkfile", path,
                                              str(spec.create_bytes), "--owner", self.set_id],
                                             cwd=session.runner_root)
                if made.returncode == 3:  # a file there that the harness did not make: never overwritten
                    raise UsageError(f"target {session.target.name}: "
                                     f"{made.stderr.decode(errors='replace').strip().removeprefix('error: ')}")
                if made.returncode == 4:  # no space: the set stays incomplete, and resumes once there is
                    raise DiskFullError(f"target {session.target.name}: "
                                        f"{made.stderr.decode(errors='replace').strip().removeprefix('error: ')}; "
                                        f"free some space, then: harness run --resume {self.set_id}")
                if made.returncode != 0:
                    raise TargetError(f"target {session.target.name}: cannot create {path}: "
                                      f"{made.stderr.decode(errors='replace').strip()[-200:]}")
                created.append(path)
                records[name] = {"path": path, "size_bytes": spec.create_bytes, "created": True}
            files[name] = path
        if session.target.transport_kind == "local":
            for record in records.values():
                record.update(describe_model_file(Path(record["path"])))
        with self._lock:
            writer.manifest["files"][session.target.name] = records
            writer.save()
        return files, created

    def _existing_file_size(self, session: TargetSession, name: str, path: str) -> int:
        probe = session.transport.run(["stat", "-L", "-c", "%s", path])
        if probe.returncode != 0:
            doc = self.plan.experiment.doc
            loc = ("model",) if name == "model" and self.experiment.model else ("files", name, "path")
            raise doc.error(loc, f"{path} does not exist on target {session.target.name}")
        return int(probe.stdout.split()[0])

    def _engine_files(self) -> set[str]:
        """Named files an engine step loads as a model (they must be GGUF files)."""
        return {name for run in self.plan.runs if STEPS[run.step].engine
                for name in STEPS[run.step].files_read(run.cell.config)}

    def _check_gguf(self, session: TargetSession, name: str, path: str) -> None:
        head = session.transport.run(["head", "-c", "4", path])
        if head.stdout != b"GGUF":
            doc = self.plan.experiment.doc
            loc = ("model",) if name == "model" and self.experiment.model else ("files", name, "path")
            raise doc.error(loc, f"{path} is not a GGUF file (it starts with {head.stdout[:4]!r}); "
                                 "llama.cpp steps need a .gguf model")

    # ------------------------------------------------------------------ one run
    def _spec(self, session: TargetSession, run: PlannedRun, files: dict[str, str], remote_dir: str) -> dict[str, Any]:
        step = STEPS[run.step]
        return {
            "run_id": run.run_id, "set_id": self.set_id, "target": session.target.name,
            "params": run.params, "cache": run.cache, "round": run.round, "repeat": run.repeat,
            "cache_files": [files[name] for name in step.files_read(run.cell.config)],
            "block_device": session.target.block_device,
            "native_bin": session.native_bin,
            "collectors": [COLLECTORS[name].runner_spec(cfg) for name, cfg in self.collectors.items()],
            "step": {"kind": run.step, **step.runner_spec(run.cell.config, files, run.cache)},
            "engines": self._engines_on(session),
            "emulate": emulation.runner_spec(self.experiment, run.params, self.plan.experiment.doc),
            "run_dir": remote_dir,
        }

    def _engines_on(self, session: TargetSession) -> dict[str, Any]:
        """Where the engine binaries are on this target: built there (boards) or here (local)."""
        builds = session.engines or {name: build.to_dict() for name, build in self.builds.items()}
        return {name: {"bin_dir": str(Path(next(iter(build["binaries"].values()))).parent),
                       "commit": build.get("commit")} for name, build in builds.items()}

    def _run_one(self, session: TargetSession, writer: ResultSetWriter, run: PlannedRun,
                 files: dict[str, str]) -> None:
        target = session.target.name
        remote_dir = f"{session.workdir}/runs/{self.set_id}/{run.run_id}"
        spec = self._spec(session, run, files, remote_dir)
        self.progress.run_started(target, run)
        if self.keep or self.resumed_running:
            session.transport.run(["rm", "-rf", remote_dir])  # a resumed run starts clean
        try:
            put_bytes(session.transport, json.dumps(spec, indent=1).encode(), f"{remote_dir}/spec.json")
        except (OSError, TargetError) as exc:
            full = self._workdir_full(session)
            if full is None:
                raise
            raise DiskFullError(f"{full}; free some space, then: harness run --resume {self.set_id}") from exc
        limit_s = self._run_limit_s(spec)
        pid = None
        try:
            # a runner that started is recorded with its pid before a stop can act: it is never left unrecorded
            with stopping.deferred():
                pid = session.transport.start_detached(
                    [session.python, "-m", "runner", "run", f"{remote_dir}/spec.json"],
                    cwd=session.runner_root, log=f"{remote_dir}/runner.log")
                writer.update_run(run.run_id, status="running", runner_pid=pid)
            stopping.checkpoint("run")
            died = self._wait_done(session, remote_dir, pid, spec, limit_s)
        except KeyboardInterrupt:
            if pid is None:
                raise
            with stopping.deferred():  # a second Ctrl-C must not leave the runner running
                self._stop_runner(session, remote_dir, pid)
                self._undo_dead_runner(session, spec, run)  # in case it had to be SIGKILLed
                self._pull(session, writer, run, remote_dir, default_status="interrupted")
            raise
        except _RunOverdue:
            # a runner hung outside its step (a collector, a cache prefetch, a wedged service): stop it, keep
            # what it wrote, fail the run and go on with the next one
            self.progress.message(f"{target} {run.run_id}: no DONE after {limit_s:.0f} s: stopping the runner")
            self._stop_runner(session, remote_dir, pid, why="watchdog")
            self._undo_dead_runner(session, spec, run)
            self._pull(session, writer, run, remote_dir, default_status="failed",
                       failure=f"the run did not finish within {limit_s:.0f} s (run_timeout_s) and was stopped")
            return
        if died:
            self._undo_dead_runner(session, spec, run)
        self._pull(session, writer, run, remote_dir, default_status="failed" if died else "unknown")

    def _undo_dead_runner(self, session: TargetSession, spec: dict[str, Any], run: PlannedRun) -> None:
        """A runner that died or was killed could not clean up: restore what its emulation changed (read_ahead_kb,
        cgroups) and stop every process marked with this set's runs, so nothing of it reads while the next run is
        measured."""
        emulation.repair(session, spec, self.progress.message)
        done = session.transport.run([session.python, "-m", "runner", "reap", self.set_id], cwd=session.runner_root)
        try:
            result = json.loads(done.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return
        if result.get("stopped"):
            names = ", ".join(sorted({p["comm"] for p in result["stopped"]}))
            self.progress.message(f"{session.target.name} {run.run_id}: stopped {len(result['stopped'])} "
                                  f"process(es) the run left running ({names})")
        if result.get("left"):
            self.progress.message(f"{session.target.name}: {len(result['left'])} process(es) of the set would not "
                                  "die (uninterruptible I/O?); the next run records its entry state")

    def _run_limit_s(self, spec: dict[str, Any]) -> float:
        if self.experiment.run_timeout_s is not None:
            return self.experiment.run_timeout_s
        step = spec["step"]
        return float(step.get("timeout_s") or 3600.0) + float(step.get("health_timeout_s") or 0.0) + RUN_SLACK_S

    def _wait_done(self, session: TargetSession, remote_dir: str, pid: int, spec: dict[str, Any],
                   limit_s: float = float("inf")) -> bool:
        """Poll for DONE; True when the runner died without writing it; _RunOverdue after ``limit_s``."""
        delay = POLL_FIRST_S
        deadline = time.monotonic() + limit_s
        while not session.transport.exists(f"{remote_dir}/DONE"):
            if self._interrupt.is_set():
                raise KeyboardInterrupt  # Ctrl-C in the main thread; this target's worker stops its runner
            if not session.transport.alive(pid):
                return not session.transport.exists(f"{remote_dir}/DONE")
            if time.monotonic() > deadline:
                raise _RunOverdue
            time.sleep(delay)
            delay = min(delay * 1.5, POLL_MAX_S)
        # the runner writes DONE last; give it a moment to exit so no process is left behind
        for _ in range(100):
            if not session.transport.alive(pid):
                break
            time.sleep(0.05)
        return False

    def _stop_runner(self, session: TargetSession, remote_dir: str, pid: int, why: str = "interrupt") -> None:
        self.progress.message(f"{session.target.name}: {why}: stopping the runner (pid {pid})")
        session.transport.signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + INTERRUPT_GRACE_S
        while session.transport.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if session.transport.alive(pid):
            session.transport.signal(pid, signal.SIGKILL)

    def _pull(self, session: TargetSession, writer: ResultSetWriter, run: PlannedRun, remote_dir: str,
              default_status: str, failure: str | None = None) -> None:
        """Pull, verify and record the run; ``failure`` (the controller's own verdict) overrides the runner's.
        A stop signal waits until the run is recorded (stopping.deferred)."""
        with stopping.deferred():
            stopping.checkpoint("pull")
            self._pull_and_record(session, writer, run, remote_dir, default_status, failure)

    def _pull_and_record(self, session: TargetSession, writer: ResultSetWriter, run: PlannedRun, remote_dir: str,
                         default_status: str, failure: str | None) -> None:
        target = session.target.name
        local = writer.raw_dir(target, run.run_id)
        status, error = default_status, None
        for attempt in range(1, PULL_ATTEMPTS + 1):
            # a partial or corrupted pull (checksum mismatch) is pulled again; the run dir stays on the target
            try:
                session.transport.get(remote_dir, local)
                verify_checksums(local)
                record = json.loads((local / "run.json").read_text()) if (local / "run.json").exists() else None
                error = None
                break
            except (TargetError, OSError, ValueError) as exc:
                record, error = None, f"pull failed: {exc}"
                if attempt < PULL_ATTEMPTS:
                    self.progress.message(f"{target} {run.run_id}: {error}; pulling again ({attempt}/{PULL_ATTEMPTS})")
        full = None
        if record is not None:
            status, error = record["status"], record.get("error")
        elif error is None:
            log = local / "runner.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
            error = "runner died without DONE" + (": " + " | ".join(tail) if tail else "")
            full = self._workdir_full(session)  # a full workdir leaves the runner no place to say so
            if full is not None:
                error += f" ({str(full).removeprefix(f'target {target}: ')})"
        pulled = record is not None or not (error or "").startswith("pull failed")
        if not pulled:
            error = f"{error} (the run directory is kept on the target: {remote_dir})"
        if failure is not None:
            status, error = "failed", failure + (f"; then: {error}" if error else "")
        writer.update_run(run.run_id, status=status, error=error)
        self.progress.run_finished(target, run, status, error)
        if pulled:
            session.transport.run(["rm", "-rf", remote_dir])
        if full is not None:  # every later run would die the same way: stop here, resumable
            raise DiskFullError(f"{full}; free some space, then: harness run --resume {self.set_id}")


class _RunOverdue(Exception):
    """The runner passed the run's time limit without writing DONE."""


class _ReopenedWriter(ResultSetWriter):
    """The writer of an existing incomplete set, for --resume."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:  # noqa: D107 - no mkdir: the set exists
        self.results_dir, self.set_id, self.manifest = path.parent, manifest["set_id"], manifest
        self.final_path, self.path = path.parent / self.set_id, path


def verify_checksums(run_dir: Path) -> None:
    """Compare every file against the runner's SHA256SUMS; a mismatch is a failed pull."""
    sums = run_dir / "SHA256SUMS"
    if not sums.exists():
        return  # a runner that died early wrote none; the record says so
    for line in sums.read_text().splitlines():
        if not line.strip():
            continue
        digest, rel = line.split("  ", 1)
        path = run_dir / rel
        actual = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"
        if actual != digest:
            raise TargetError(f"{path}: checksum mismatch after pull")



def describe_model_file(path: Path) -> dict[str, Any]:
    """What identifies a model file in a manifest: a quick hash and, for a GGUF, its layout summary.

    The quick hash covers the size and the first and last MiB: enough to tell revisions apart without
    reading 20 GB before every campaign.
    """
    digest = hashlib.sha256(str(path.stat().st_size).encode())
    with open(path, "rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(max(0, path.stat().st_size - (1 << 20)))
        digest.update(handle.read(1 << 20))
        magic = (handle.seek(0), handle.read(4))[1]
    out: dict[str, Any] = {"quick_sha256": digest.hexdigest()}
    if magic == b"GGUF":
        from harness.models.inspect import inspect_gguf

        info = inspect_gguf(path)
        out["gguf"] = {k: getattr(info, k) for k in (
            "architecture", "name", "quant_types", "block_count", "expert_count", "expert_used_count",
            "expert_bytes", "dense_bytes", "expert_bytes_per_token")}
    return out

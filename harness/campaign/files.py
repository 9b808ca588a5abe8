"""Named data files on a target: resolve the ones given by path (they must exist; an engine's model must be a
GGUF), place the synthetic models, create the ``create:`` ones in scratch, and remove what the campaign created."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from harness.boards.session import TargetSession
from harness.campaign.context import CampaignContext
from harness.errors import DiskFullError, TargetError, UsageError
from harness.steps import STEPS


def scratch_dir(ctx: CampaignContext, session: TargetSession) -> str:
    return ctx.scratch or f"{session.workdir}/scratch/{ctx.set_id}"


def check_directories(ctx: CampaignContext, session: TargetSession) -> None:
    """Preflight: no other user of the board can plant a symlink in the workdir (the runner, run directories)
    or scratch, or swap one of their parents: the runner often runs there as root."""
    for what, path, shared in (("workdir", session.workdir, False), ("scratch", scratch_dir(ctx, session), True)):
        done = session.transport.run([session.python, "-m", "runner", "safedir", path, *(["--shared"] * shared)],
                                     cwd=session.runner_root)
        try:
            problem = json.loads(done.stdout.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise TargetError(f"target {session.target.name}: cannot check the {what} {path}: "
                              f"{done.stderr.decode(errors='replace').strip()[-200:]}") from None
        if problem:
            raise UsageError(f"target {session.target.name}: {what} {path}: {problem}, so another user could plant "
                             "symlinks there; refused (give a directory of your own)")


def check_shared_scratch(ctx: CampaignContext, sessions: list[TargetSession]) -> None:
    """Preflight: two targets whose scratch is one directory (two targets of one machine given one ``--scratch``)
    would create the same data files there at once (one fails: "data.bin.partial: No such file or directory"),
    and a lock would not be enough: each target's cold runs would drop the pages the other's warm runs measure, and
    the first to finish would remove the file under the other. Refused in one line naming both and the directory,
    before anything is created or built."""
    created = sorted(f"{name}.bin" for name, spec in ctx.experiment.named_files().items() if spec.create is not None)
    if not created:
        return  # nothing is written to scratch: sharing it is harmless
    seen: dict[tuple[str, int, int, str], str] = {}
    for session in sessions:
        directory = scratch_dir(ctx, session)
        done = session.transport.run([session.python, "-m", "runner", "dirid", directory], cwd=session.runner_root)
        try:
            found = json.loads(done.stdout.decode(errors="replace").strip().splitlines()[-1])
            key = (str(found["machine"]), int(found["dev"]), int(found["ino"]), os.path.normpath(found["below"]))
        except (ValueError, IndexError, KeyError, TypeError):
            raise TargetError(f"target {session.target.name}: cannot tell which directory the scratch {directory} "
                              f"is: {done.stderr.decode(errors='replace').strip()[-200:]}") from None
        other = seen.setdefault(key, session.target.name)
        if other != session.target.name:
            raise UsageError(f"targets {other} and {session.target.name} share the scratch directory {directory} "
                             f"on one machine: both would create, cache-drop and remove {', '.join(created)} there "
                             "at once; give each its own (without --scratch each uses its workdir) or run them as "
                             "two campaigns")


def existing_file_size(ctx: CampaignContext, session: TargetSession, name: str, path: str) -> int:
    size = session.transport.file_size(path)
    if size is None:
        raise ctx.file_error(name, f"{path} does not exist on target {session.target.name}")
    return size


def engine_files(ctx: CampaignContext) -> set[str]:
    """Named files an engine step loads as a model (they must be GGUF files)."""
    return {name for run in ctx.plan.runs if STEPS[run.step].engine
            for name in STEPS[run.step].files_read(run.cell.config)}


def check_gguf(ctx: CampaignContext, session: TargetSession, name: str, path: str) -> None:
    head = session.transport.run(["head", "-c", "4", path])
    _check_magic(ctx, name, path, head.stdout)


def _check_magic(ctx: CampaignContext, name: str, path: str, head: bytes) -> None:
    if head != b"GGUF":
        raise ctx.file_error(name, f"{path} is not a GGUF file (it starts with {head[:4]!r}); "
                                   "llama.cpp steps need a .gguf model")


def check_local_models(ctx: CampaignContext, target: str) -> None:
    """Before an engine is built for a target that shares the controller's files: every model given by path is a
    readable regular file that starts as a GGUF file. A build takes minutes; a wrong model path is bad input to
    be told at once, not after the build (the full check on each target follows in preflight)."""
    for name, spec in ctx.experiment.named_files().items():
        if spec.path is None or name not in engine_files(ctx):
            continue
        path = str(spec.path)
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise ctx.file_error(name, f"{path} does not exist on target {target}") from None
        except OSError as exc:
            raise ctx.file_error(name, f"{path}: {exc.strerror}") from None
        if not stat.S_ISREG(mode):  # never open a FIFO (it would block) or a device here
            continue  # check_regular_file names what it is, on the target, in preflight
        try:
            with open(path, "rb") as model:
                head = model.read(4)
        except OSError as exc:
            raise ctx.file_error(name, f"{path}: {exc.strerror}") from None
        _check_magic(ctx, name, path, head)


# What a path is on the target (symlinks followed), through its POSIX shell like shell_file_size: test(1) says the
# same on GNU, BSD (macOS), busybox and toybox (Android). Asked before anything opens the file: a FIFO would hang
# the first reader (the controller, describing the file), a device or a directory has no file size.
_KIND = ('if [ -f "$1" ]; then k="regular file"; elif [ -d "$1" ]; then k=directory; elif [ -b "$1" ]; then '
         'k="block device"; elif [ -c "$1" ]; then k="character device"; elif [ -p "$1" ]; then k=FIFO; '
         'elif [ -S "$1" ]; then k=socket; elif [ -e "$1" ]; then k="special file"; else exit 1; fi; '
         'if [ -r "$1" ]; then echo "$k"; else echo "unreadable $k"; fi')


def check_regular_file(ctx: CampaignContext, session: TargetSession, name: str, path: str) -> None:
    """A file given by path exists on the target, is a regular file and the runner's user can read it."""
    done = session.transport.run(["sh", "-c", _KIND, "sh", path])
    kind = done.stdout.decode(errors="replace").strip()
    where = f"on target {session.target.name}"
    if done.returncode != 0 or not kind:
        raise ctx.file_error(name, f"{path} does not exist {where}")
    if kind.removeprefix("unreadable ") != "regular file":
        raise ctx.file_error(name, f"{path} is a {kind.removeprefix('unreadable ')} {where}, not a regular file: "
                                   "the steps read regular files (give the file, or a file on that device)")
    if kind.startswith("unreadable"):
        raise ctx.file_error(name, f"{path} {where} cannot be read by the runner's user")


def target_path(ctx: CampaignContext, session: TargetSession, name: str, spec: Any) -> str:
    """Where a named file is (or will be) on the target."""
    if spec.path is not None:
        return str(spec.path)
    if spec.synth is not None:
        return session.models.get(name, ctx.synth[name][0])  # a board holds its pushed copy
    return f"{scratch_dir(ctx, session)}/{name}.bin"


def check_existing(ctx: CampaignContext, session: TargetSession) -> None:
    """Preflight: every file given by path is a regular file on the target, an engine's model is a GGUF file,
    and every step can name the path of each file it reads (fio cannot name some: ``StepKind.path_problem``)."""
    named = ctx.experiment.named_files()
    for name, spec in named.items():
        if spec.path is not None:
            check_regular_file(ctx, session, name, spec.path)
            if name in engine_files(ctx):
                check_gguf(ctx, session, name, spec.path)
    for run in ctx.plan.runs:
        step = STEPS[run.step]
        for name in step.files_read(run.cell.config):
            read = named.get(name)
            problem = read is not None and step.path_problem(target_path(ctx, session, name, read))
            if problem and read is not None and read.create is not None:  # the path is scratch's, not the experiment's
                raise ctx.plan.experiment.doc.error(("files", name, "create"), f"target {session.target.name}: "
                                                    f"{problem} (it is made in scratch: choose another --scratch)")
            if problem:
                raise ctx.file_error(name, f"target {session.target.name}: {problem}")


def prepare_files(ctx: CampaignContext, session: TargetSession,
                  created: list[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Resolve named files on the target; create the ``create:`` ones in scratch, each added to ``created`` as
    soon as it exists (so that a failure on the next one still removes it). Returns (name -> path on the
    target, the records for the manifest)."""
    scratch = scratch_dir(ctx, session)
    files: dict[str, str] = {}
    records: dict[str, Any] = {}
    for name, spec in ctx.experiment.named_files().items():
        if spec.path is not None:
            path = spec.path
            records[name] = {"path": path, "size_bytes": existing_file_size(ctx, session, name, path),
                             "created": False}
        elif spec.synth is not None:
            path, info = target_path(ctx, session, name, spec), ctx.synth[name][1]
            records[name] = {"path": path, "size_bytes": info["file_bytes"], "created": False,
                             "synth": spec.synth.model_dump()}
        else:
            path = target_path(ctx, session, name, spec)
            ctx.progress.message(f"{session.target.name}: creating {name} ({spec.create}) in {scratch}")
            size = spec.create_bytes
            assert size is not None  # FileSpec's validator: exactly one of path, synth, create
            create_file(ctx, session, path, size)
            created.append(path)
            records[name] = {"path": path, "size_bytes": size, "created": True}
        files[name] = path
    if session.transport.shares_controller_files:  # the file is here too: describe it
        for record in records.values():
            record.update(describe_model_file(Path(record["path"])))
    return files, records


def made_earlier(ctx: CampaignContext, session: TargetSession, records: dict[str, Any]) -> list[str]:
    """The data files an earlier controller of a resumed set created on a target (its manifest's records), in the
    scratch directory this campaign uses (only there may it remove them)."""
    inside = scratch_dir(ctx, session).rstrip("/") + "/"
    return [r["path"] for r in records.values() if r.get("created") and str(r.get("path", "")).startswith(inside)]


def create_file(ctx: CampaignContext, session: TargetSession, path: str, size: int) -> None:
    """The runner makes the file, marked as this campaign's (so that only this campaign removes it)."""
    made = session.transport.run([session.python, "-m", "runner", "mkfile", path, str(size), "--owner", ctx.set_id],
                                 cwd=session.runner_root)
    said = made.stderr.decode(errors="replace").strip()
    if made.returncode == 3:  # a file there that the harness did not make: never overwritten
        raise UsageError(f"target {session.target.name}: {said.removeprefix('error: ')}")
    if made.returncode == 4:  # no space: the set stays incomplete, and resumes once there is
        raise DiskFullError(f"target {session.target.name}: {said.removeprefix('error: ')}; "
                            f"free some space, then: harness run --resume {ctx.set_id}")
    if made.returncode != 0:
        raise TargetError(f"target {session.target.name}: cannot create {path}: {said[-200:]}")


def remove_created(ctx: CampaignContext, session: TargetSession, created: list[str]) -> None:
    """Delete the data files this campaign created, each checked by the runner first: inside the scratch
    directory and marked as this campaign's. Anything else is left alone and said."""
    for path in dict.fromkeys(created):  # a resumed set's file is also the one made earlier
        done = session.transport.run([session.python, "-m", "runner", "rmfile", path, "--owner", ctx.set_id,
                                      "--inside", scratch_dir(ctx, session)], cwd=session.runner_root)
        if done.returncode != 0:
            ctx.progress.message(f"{session.target.name}: {done.stderr.decode(errors='replace').strip()}")
    if created and ctx.scratch is None:  # the default scratch dir is the harness's own: gone when empty
        session.transport.run(["rmdir", scratch_dir(ctx, session)])


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

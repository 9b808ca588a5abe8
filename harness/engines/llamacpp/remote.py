"""Build llama.cpp on a board: the controller pushes the source (or names a git URL+commit), the board builds.

The board runs ``runner.enginebuild`` (the code local builds use), detached with its own log, into
``<workdir>/cache/builds`` keyed exactly like a local build. A second campaign first asks the board's
cache (one command): on a hit nothing is sent and nothing is built.

Sources: an sdist or a local checkout is pushed as one gzip'd tar of the pristine llama.cpp tree, named
by its identity, so a board without network can build and a tree already on the board is not sent twice.
A git source is fetched by the board itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.boards.transports import put_bytes
from harness.engines.errors import BuildError
from harness.engines.llamacpp.build import BASE_CMAKE_FLAGS, DEFAULT_TARGETS
from harness.engines.llamacpp.source import SourceSpec, prepare_source, sha256_file
from runner import enginebuild

POLL_S = 2.0
Say = Callable[[str], None]


def board_cache(workdir: str) -> str:
    return f"{workdir}/cache/builds"


def build_on_target(session: Any, source: dict[str, Any], cmake_flags: list[str], patches: list[Path],
                    local_sources: Path, say: Say, targets: tuple[str, ...] = DEFAULT_TARGETS) -> dict[str, Any]:
    """The board's build record for this engine (built there now if its cache lacks it)."""
    spec = SourceSpec.model_validate(source)
    flags = [*BASE_CMAKE_FLAGS, *cmake_flags]
    if spec.git:
        assert spec.commit is not None
        return build_tree_on_target(session, None, {"url": spec.git, "commit": spec.commit}, None, flags, patches,
                                    say, targets)
    prepared = prepare_source(spec, local_sources)  # download the sdist once, on the controller
    return build_tree_on_target(session, prepared.tree, prepared.identity, prepared.commit, flags, patches, say,
                                targets)


def build_tree_on_target(session: Any, tree: Path | None, identity: dict[str, Any], commit: str | None,
                         flags: list[str], patches: list[Path], say: Say,
                         targets: tuple[str, ...] = DEFAULT_TARGETS, label: str = "llama.cpp") -> dict[str, Any]:
    """Build ``targets`` on the board from a pristine ``tree`` pushed once (named by ``identity``), or, with
    ``tree`` None, from the git ``identity`` {url, commit} the board fetches itself; exactly ``flags``."""
    name = session.target.name
    cache = board_cache(session.workdir)
    transport = session.transport
    started = time.monotonic()
    sent = 0
    patch_sums = [sha256_file(p) for p in patches]
    board_patches = [{"path": f"{cache}/patches/{sha[:16]}.patch", "sha256": sha} for sha in patch_sums]
    board_source: dict[str, Any]
    if tree is None:
        board_source = {"kind": "git", "url": identity["url"], "commit": identity["commit"]}
    else:
        identity_hash = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
        board_source = {"kind": "pushed", "identity": identity, "identity_hash": identity_hash,
                        "commit": commit, "archive": f"{cache}/sources/{identity_hash}.tar.gz"}
    build_spec = {"cache_dir": cache, "source": board_source, "flags": list(flags),
                  "patches": board_patches, "targets": list(targets)}
    spec_hash = hashlib.sha256(json.dumps(build_spec, sort_keys=True).encode()).hexdigest()[:16]
    spec_path = f"{cache}/specs/{spec_hash}.json"
    put_bytes(transport, json.dumps(build_spec, indent=1, sort_keys=True).encode(), spec_path)

    record = _check(session, spec_path)
    if record is None:
        for local, board in zip(patches, board_patches, strict=True):
            if not transport.exists(board["path"]):
                transport.put(local, board["path"])
                sent += local.stat().st_size
        if tree is not None and not transport.exists(board_source["archive"]):
            say(f"{name}: pushing the {label} source ({identity.get('kind')}) to {cache}/sources")
            sent += _push_tree(transport, tree, board_source["archive"])
        say(f"{name}: building {label} on the board (log: {cache}/specs/{spec_hash}.log)")
        record = _build(session, spec_path, f"{cache}/specs/{spec_hash}.log", say, label)
    built = not record.pop("cached")  # the runner says whether its cache answered, on check and on build
    return {**record, "location": "target", "target": name, "built": built, "transferred_bytes": sent,
            "duration_s": round(time.monotonic() - started, 3)}


def _runner(session: Any, *args: str, timeout: float | None = None) -> Any:
    return session.transport.run([session.python, "-m", "runner", *args], cwd=session.runner_root, timeout=timeout)


def _check(session: Any, spec_path: str) -> dict[str, Any] | None:
    done = _runner(session, "engine", "check", spec_path, timeout=600)
    if done.returncode != 0:
        raise BuildError(f"target {session.target.name}: checking the build cache failed: "
                         f"{_last_line(done.stderr)}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def _build(session: Any, spec_path: str, log: str, say: Say, label: str) -> dict[str, Any]:
    transport = session.transport
    pidfile = f"{log}.pid"
    transport.run(["rm", "-f", pidfile, log])  # start_detached returns the old pid while its pid file exists
    pid = transport.start_detached([session.python, "-m", "runner", "engine", "build", spec_path],
                                   cwd=session.runner_root, log=log)
    shown = 0
    while transport.alive(pid):
        time.sleep(POLL_S)
        shown = _relay(transport, log, shown, say, session.target.name)
    text = transport.read_file(log).decode(errors="replace")
    _relay(transport, log, shown, say, session.target.name)
    lines = text.strip().splitlines()
    try:
        record = json.loads(lines[-1]) if lines else None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        errors = [ln for ln in lines if ln.startswith("error: ")]
        why = errors[-1][len("error: "):] if errors else (lines[-1] if lines else "the builder printed nothing")
        raise BuildError(f"target {session.target.name}: {label} build failed: {why}")
    return record


def _relay(transport: Any, log: str, shown: int, say: Say, name: str) -> int:
    """Show the builder's progress lines (not the JSON record) as they appear."""
    try:
        lines = transport.read_file(log).decode(errors="replace").splitlines()
    except Exception:  # noqa: BLE001 - progress is best effort; the final read reports errors
        return shown
    for line in lines[shown:]:
        if line.startswith("llama.cpp build"):
            say(f"{name}: {line}")
    return len(lines)


def _push_tree(transport: Any, tree: Path, remote: str) -> int:
    """Send ``tree`` as one gzip'd tar (written to a temporary file: a source tree is tens of MB)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "source.tar.gz"
        with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
            for dirpath, dirnames, filenames in os.walk(tree):
                dirnames[:] = sorted(d for d in dirnames if not enginebuild.skip_dir(os.path.join(dirpath, d)))
                for fname in sorted(filenames):
                    path = Path(dirpath, fname)
                    tar.add(path, arcname=path.relative_to(tree).as_posix(), recursive=False)
        transport.put(archive, remote)
        return archive.stat().st_size


def _last_line(data: bytes) -> str:
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "(no output)"


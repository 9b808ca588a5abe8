"""Deploy: push the runner (Python + native sources) to a target and build the native tools there.

Files are compared by content hash against a manifest kept on the target, so a second deploy of an
unchanged tree costs one command: no transfer, no build. Engines are deployed separately
(``harness.engines.llamacpp.remote``): their source goes over as one archive named by its identity.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.boards.transports import Transport, put_bytes
from harness.boards.transports.ssh import tar_tree
from harness.errors import TargetError

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNNER_DIR = REPO_ROOT / "runner"
MANIFEST = ".deployed.json"
NATIVE_SUFFIXES = (".c", ".h")
TRANSFER_NAME = ".deploy-transfer.tar"


def runner_files(root: Path = RUNNER_DIR) -> dict[str, Path]:
    """What a target needs of runner/: Python modules and native sources, never built binaries."""
    files: dict[str, Path] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or "__pycache__" in rel.parts or rel.parts[:2] == ("native", "bin"):
            continue
        if path.suffix == ".py" or (rel.parts[0] == "native" and (path.suffix in NATIVE_SUFFIXES
                                                                  or path.name == "Makefile")):
            files[rel.as_posix()] = path
    return files


def file_hashes(files: dict[str, Path]) -> dict[str, str]:
    return {rel: hashlib.sha256(path.read_bytes()).hexdigest() for rel, path in files.items()}


def tree_hash(hashes: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{h}  {rel}\n" for rel, h in sorted(hashes.items())).encode()).hexdigest()


@dataclass
class SyncResult:
    remote_root: str
    hashes: dict[str, str]
    previous: dict[str, Any]  # the manifest found on the target ({} on a first deploy)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    transferred_bytes: int = 0
    listing: list[str] = field(default_factory=list)  # `ls` of the directory the caller asked about


def _sh(transport: Transport, script: str, timeout: float | None = None) -> Any:
    return transport.run(["sh", "-c", script], timeout=timeout)


def sync_tree(transport: Transport, files: dict[str, Path], remote_root: str, *,
              list_dir: str | None = None) -> SyncResult:
    """Make ``remote_root`` hold ``files`` (relative name -> local path); transfer only what changed.

    One command reads the target's manifest (and lists ``list_dir`` under the root, so callers can
    check build outputs in the same round trip); changed files go over as one tar.
    """
    hashes = file_hashes(files)
    q = shlex.quote(remote_root)
    listing = f"; echo '--ls--'; ls {q}/{shlex.quote(list_dir)} 2>/dev/null" if list_dir else ""
    found = _sh(transport, f"cat {q}/{MANIFEST} 2>/dev/null{listing}; true")
    text, _, listed = found.stdout.decode(errors="replace").partition("--ls--\n")
    try:
        previous = json.loads(text) if text.strip() else {}
    except ValueError:
        previous = {}  # a damaged manifest: redeploy everything
    before = previous.get("files", {}) if isinstance(previous, dict) else {}
    result = SyncResult(remote_root, hashes, previous if isinstance(previous, dict) else {},
                        listing=listed.split())
    result.changed = [rel for rel, digest in hashes.items() if before.get(rel) != digest]
    result.removed = [rel for rel in before if rel not in hashes]
    if result.changed:
        data = _tar(files, result.changed)
        result.transferred_bytes = len(data)
        put_bytes(transport, data, f"{remote_root}/{TRANSFER_NAME}")
    if result.changed or result.removed:
        removed = " ".join(shlex.quote(f"{remote_root}/{rel}") for rel in result.removed)
        script = f"cd {q}"
        if result.changed:
            script += f" && tar -xf {TRANSFER_NAME} && rm -f {TRANSFER_NAME}"
        if removed:
            script += f" && rm -f {removed}"
        done = _sh(transport, script)
        if done.returncode != 0:
            raise TargetError(f"deploy to {remote_root} failed: {done.stderr.decode(errors='replace').strip()[-200:]}")
    return result


def _tar(files: dict[str, Path], names: Iterable[str]) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel in names:
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(files[rel].read_bytes())
            dest.chmod(files[rel].stat().st_mode & 0o777)
        return tar_tree(root, sorted(names))


def write_manifest(transport: Transport, remote_root: str, manifest: dict[str, Any]) -> None:
    put_bytes(transport, json.dumps(manifest, indent=1, sort_keys=True).encode(), f"{remote_root}/{MANIFEST}")


def deploy_runner(transport: Transport, workdir: str, *, target_name: str = "?") -> dict[str, Any]:
    """Push runner/ to ``<workdir>/runner`` and build its native tools there; return what was deployed.

    The returned record goes into the result set's manifest: file hashes, tree hash, compiler,
    the exact build commands (flags), and whether this deploy transferred or built anything.
    """
    started = time.monotonic()
    remote_root = f"{workdir}/runner"
    files = runner_files()
    sync = sync_tree(transport, files, remote_root, list_dir="native/bin")
    previous = sync.previous
    native_changed = any(rel.startswith("native/") for rel in sync.changed + sync.removed)
    bins_missing = not previous.get("bin") or not set(previous.get("bin", [])) <= set(sync.listing)
    built = native_changed or bins_missing or not previous.get("build_ok")
    build: dict[str, Any] = {key: previous.get(key) for key in ("compiler", "build_commands", "bin")}
    if built:
        build = _build_native(transport, remote_root, target_name)
    manifest = {"tree_hash": tree_hash(sync.hashes), "files": sync.hashes, "build_ok": True, **build,
                "deployed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                if sync.changed or sync.removed or built else previous.get("deployed_at")}
    if sync.changed or sync.removed or built:
        write_manifest(transport, remote_root, manifest)
    return {**manifest, "remote_root": remote_root, "transferred_files": sync.changed, "removed_files": sync.removed,
            "transferred_bytes": sync.transferred_bytes, "built": built,
            "duration_s": round(time.monotonic() - started, 3)}


def _build_native(transport: Transport, remote_root: str, target_name: str) -> dict[str, Any]:
    native = shlex.quote(f"{remote_root}/native")
    # -B: a fresh tree must not trust binaries left by an older deploy (their sources changed)
    done = _sh(transport, f"make -B -C {native} 2>&1", timeout=600)
    if done.returncode != 0:
        tail = done.stdout.decode(errors="replace").strip().splitlines()[-3:]
        raise TargetError(f"target {target_name}: building the runner's native tools failed: {' | '.join(tail)}")
    commands = [line.strip() for line in done.stdout.decode(errors="replace").splitlines()
                if line.strip() and not line.startswith("make")]
    info = _sh(transport, f"cc --version 2>/dev/null | head -n 1; echo '--bin--'; ls {native}/bin")
    compiler, _, bins = info.stdout.decode(errors="replace").partition("--bin--\n")
    return {"compiler": compiler.strip() or None, "build_commands": commands, "bin": bins.split()}

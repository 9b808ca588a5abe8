"""A real labgrid farm for the tests and the bench: ``labgrid-coordinator`` on loopback (free port, its own
directory for places.yaml), ``labgrid-exporter`` exporting NetworkService resources, places made with
``labgrid-client``. Every process is stopped by its pid; a stopped coordinator can be started again in the same
directory on the same port (it keeps its places, forgets its locks, as labgrid does)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent


# labgrid-coordinator's own main() without its ``loop.set_debug(True)`` (labgrid/remote/coordinator.py, main):
# asyncio's debug mode captures a stack trace for every callback, about half of the coordinator's CPU time under
# load. Only for the bench's comparison (--coordinator-asyncio-debug off); a farm runs the stock command.
COORDINATOR_WITHOUT_ASYNCIO_DEBUG = """\
import asyncio, logging, sys
from labgrid.remote import coordinator
logging.basicConfig(level=logging.INFO)
coordinator.inspect = None  # as main() sets it without --pystuck
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
cleanup = []
loop.run_until_complete(coordinator.serve(sys.argv[1], cleanup))
if cleanup:
    loop.run_until_complete(*cleanup)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def _saved_places(root: Path) -> list[str]:
    """Names of the places the coordinator has written to its places.yaml (none before its first save)."""
    try:
        saved = yaml.safe_load((root / "places.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    return list(saved) if isinstance(saved, dict) else []


@dataclass
class LabgridFarm:
    root: Path
    port: int = 0
    services: dict[str, dict[str, object]] = field(default_factory=dict)  # group -> NetworkService params
    coordinator: subprocess.Popen[bytes] | None = None
    exporter: subprocess.Popen[bytes] | None = None
    places: list[str] = field(default_factory=list)  # made through place()
    asyncio_debug: bool = True  # False: labgrid's coordinator without the asyncio debug mode its main() turns on

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LabgridFarm:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.start_coordinator()
        return self

    def start_coordinator(self) -> None:
        log = (self.root / "coordinator.log").open("ab")
        command = ([str(BIN / "labgrid-coordinator"), "-l", self.address] if self.asyncio_debug else
                   [sys.executable, "-c", COORDINATOR_WITHOUT_ASYNCIO_DEBUG, self.address])
        self.coordinator = subprocess.Popen(command, cwd=self.root,
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # its log is its history
        deadline = time.monotonic() + 30
        while not _answers(self.port):
            if self.coordinator.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"labgrid-coordinator did not start: {(self.root / 'coordinator.log').read_text()}")
            time.sleep(0.05)
        if self.services:
            _stop(self.exporter)  # one exporter at a time under its name
            self.start_exporter()

    def export(self, group: str, *, address: str, port: int, username: str = "root") -> None:
        self.services[group] = {"address": address, "port": port, "username": username}
        _stop(self.exporter)
        self.start_exporter()

    def start_exporter(self) -> None:
        config = self.root / "exporter.yaml"
        config.write_text("".join(f"{group}:\n  NetworkService:\n" + "".join(f"    {k}: {v}\n" for k, v in p.items())
                                  for group, p in self.services.items()))
        log = (self.root / "exporter.log").open("ab")
        self.exporter = subprocess.Popen([str(BIN / "labgrid-exporter"), "-c", self.address, "-n", "exp",
                                          str(config)], cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while "Exporter ready" not in (self.root / "exporter.log").read_text(errors="replace").split("---")[-1]:
            if self.exporter.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"labgrid-exporter did not start: {(self.root / 'exporter.log').read_text()}")
            time.sleep(0.05)
        with (self.root / "exporter.log").open("a") as out:
            out.write("---\n")  # the next start waits for its own "Exporter ready"

    def client(self, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LG_COORDINATOR": self.address, **({"LG_USERNAME": user} if user else {})}
        return subprocess.run([str(BIN / "labgrid-client"), *args], capture_output=True, text=True, env=env,
                              timeout=60, check=False)

    def place(self, name: str, group: str, **tags: str) -> None:
        self.places.append(name)
        for argv in (["-p", name, "create"], ["-p", name, "add-match", f"exp/{group}/NetworkService"],
                     ["-p", name, "set-tags", *(f"{k}={v}" for k, v in tags.items())]):
            done = self.client(*argv)
            if done.returncode != 0:
                raise RuntimeError(f"labgrid-client {' '.join(argv)}: {done.stderr.strip()}")

    def holder(self, place: str) -> str | None:
        """Who the coordinator says holds the place (``host/user``), or None."""
        for line in self.client("-p", place, "show").stdout.splitlines():
            if line.strip().startswith("acquired:"):
                value = line.split(":", 1)[1].strip()
                return None if value == "None" else value
        raise RuntimeError(f"place {place} not shown")

    def stop_coordinator(self) -> None:
        """Stop it as an admin would, once it has saved its places: labgrid's coordinator writes places.yaml from
        a poll every 15 s, not on shutdown, so one stopped sooner after a place was made would come back without it."""
        names = set(self.places)
        deadline = time.monotonic() + 60
        while not names <= set(_saved_places(self.root)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"labgrid-coordinator did not save places {sorted(names)} within 60 s")
            time.sleep(0.2)
        _stop(self.coordinator)

    def stop(self) -> None:
        _stop(self.exporter)
        _stop(self.coordinator)

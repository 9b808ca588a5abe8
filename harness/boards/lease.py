"""Board leases: one controller at a time touches a board.

The lease lives on the board itself (so every controller sees it): a small holder process started
detached on the target keeps ``flock`` on ``<workdir>/.lease/lock`` and writes ``lease.json`` (owner,
host, pid, campaign, expiry). The controller renews it by touching a heartbeat file; when the
heartbeats stop (the controller died or lost the network for good) the holder lets the lease expire
and exits, which frees the lock. A holder that died frees it at once (the kernel drops the flock).
A lease past its expiry whose holder still runs (hung) is taken over. Release and ``break`` act only
on the holder named in lease.json, checked against its command line (its token), never on a pid
alone. The holder is stdlib Python >= 3.8 sent with ``python3 -c``: boards need nothing installed.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.boards.transports import Transport
from harness.errors import TargetError

DEFAULT_TTL_S = 60.0
DEFAULT_WAIT_S = 300.0
BACKEND = "board-lock-file"  # the backend's name in the manifest (BoardLockFile.name)
POLL_S = 0.2

# Target side (only python3 needed: no mkdir/touch/rm, which a minimal PATH may lack).
# Modes: hold DIR TOKEN TTL OWNER_JSON | beat DIR TOKEN | show DIR | break DIR [TOKEN]
PROGRAM = r'''
import fcntl, json, os, signal, sys, time
mode, d = sys.argv[1], sys.argv[2]
info_path, lock_path = os.path.join(d, "lease.json"), os.path.join(d, "lock")

def read_info():
    try:
        with open(info_path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def holder_matches(info):
    pid, token = info.get("holder_pid"), info.get("token", "")
    try:
        os.kill(pid, 0)
    except (OSError, TypeError):
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return token.encode() in f.read()
    except OSError:
        return True  # no /proc (macOS): kill -0 is all there is

def show():
    info = read_info()
    out = {"now": time.time(), "lease": info}
    if info:
        out["holder_alive"] = holder_matches(info)
        out["expired"] = time.time() > info.get("expires", 0)
    return out

def stop_holder(info):
    if not holder_matches(info):
        return False
    os.kill(info["holder_pid"], signal.SIGTERM)
    for _ in range(100):
        if not holder_matches(info):
            return True
        time.sleep(0.05)
    if holder_matches(info):  # checked again right before the signal, like every recorded pid
        os.kill(info["holder_pid"], signal.SIGKILL)
    return True

if mode == "show":
    for name in sys.argv[3:]:  # answers already read by the controller
        for path in (os.path.join(d, name), os.path.join(d, name + ".pid")):
            try:
                os.unlink(path)
            except OSError:
                pass
    print(json.dumps(show()))
elif mode == "beat":
    try:
        os.utime(os.path.join(d, "heartbeat." + sys.argv[3]), None)
        print(json.dumps({"lost": False}))
    except OSError:  # our holder is gone: the lease expired (a long outage) or was broken
        print(json.dumps({"lost": True}))
elif mode == "break":
    info = read_info()
    only = sys.argv[3] if len(sys.argv) > 3 else None
    if info and (only is None or info.get("token") == only):
        stopped = stop_holder(info)
        current = read_info()
        if current and current.get("token") == info.get("token"):
            os.unlink(info_path)
        print(json.dumps({"broken": info, "holder_stopped": stopped}))
    else:
        print(json.dumps({"broken": None, "lease": info}))
elif mode == "hold":
    token, ttl, record = sys.argv[3], float(sys.argv[4]), json.loads(sys.argv[5])
    beat = os.path.join(d, "heartbeat." + token)
    if not os.path.isdir(d):
        os.makedirs(d)
    for name in os.listdir(d):  # answers of earlier holders, read long ago
        path = os.path.join(d, name)
        try:
            if name.startswith("holder.") and os.stat(path).st_mtime < time.time() - 3600:
                os.unlink(path)
        except OSError:
            pass
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("busy", flush=True)
        sys.exit(3)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def write(expires):
        record.update(token=token, holder_pid=os.getpid(), expires=expires, ttl_s=ttl)
        tmp = info_path + ".tmp." + token
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, info_path)

    open(beat, "a").close()
    os.utime(beat, None)
    expires = time.time() + ttl
    write(expires)
    print("held", flush=True)
    while not stop:
        time.sleep(min(0.5, ttl / 4))
        try:
            renewed = os.stat(beat).st_mtime + ttl
        except OSError:
            renewed = 0
        if time.time() > renewed:
            break  # no heartbeat for a whole ttl: the lease expires
        if renewed - expires >= 1:
            expires = renewed
            write(expires)
    current = read_info()
    if current and current.get("token") == token:
        os.unlink(info_path)
    try:
        os.unlink(beat)
    except OSError:
        pass
'''


def describe(lease: dict[str, Any], now: float | None = None) -> str:
    left = lease.get("expires", 0) - (now if now is not None else time.time())
    when = f"expires in {left:.0f} s" if left >= 0 else f"expired {-left:.0f} s ago"
    return (f"{lease.get('owner')}@{lease.get('host')} (pid {lease.get('pid')}, campaign {lease.get('campaign')}, "
            f"{when})")


@dataclass
class BoardFileLease:
    """The board's lock file, held (a ``HeldLease`` of ``harness.boards.lease_backends``): renewed by its heartbeat
    thread, which also reports a lost lease as it happens."""

    transport: Transport
    target_name: str
    python: str
    directory: str
    token: str
    holder_pid: int
    ttl_s: float
    info: dict[str, Any]  # what lease.json says about us: owner, host, pid, campaign, taken
    on_event: Callable[[str], None] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.ttl_s / 4):
                try:
                    answer = _program(self.transport, self.python, self.directory, "beat", self.token)
                except Exception:  # noqa: BLE001 - a missed beat is retried; the lease outlives ttl/4 gaps
                    continue
                if answer.get("lost"):
                    if self.on_event:
                        self.on_event(f"{self.target_name}: LEASE LOST (expired during an outage, or broken): "
                                      "another campaign may use this board now")
                    return

        self._thread = threading.Thread(target=beat, name=f"lease-{self.target_name}", daemon=True)
        self._thread.start()

    def check(self) -> None:
        return None  # a lost lock file is reported by the heartbeat as it happens

    def record(self) -> dict[str, Any]:
        return {"backend": BACKEND, "token": self.token, "owner": self.info.get("owner"),
                "host": self.info.get("host")}

    def release(self) -> None:
        """Stop renewing and end our holder; a lease someone else holds now is left alone."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            _program(self.transport, self.python, self.directory, "break", self.token)
        except TargetError:
            pass  # the board is unreachable: the lease expires by itself after ttl


def _program(transport: Transport, python: str, directory: str, *args: str) -> dict[str, Any]:
    done = transport.run([python, "-c", PROGRAM, args[0], directory, *args[1:]], timeout=60)
    if done.returncode != 0:
        raise TargetError(f"lease helper failed: {done.stderr.decode(errors='replace').strip()[-200:]}")
    return json.loads(done.stdout)


def lease_dir(workdir: str) -> str:
    return f"{workdir}/.lease"


def show(transport: Transport, python: str, workdir: str) -> dict[str, Any]:
    return _program(transport, python, lease_dir(workdir), "show")


def break_lease(transport: Transport, python: str, workdir: str) -> dict[str, Any]:
    return _program(transport, python, lease_dir(workdir), "break")


def acquire(transport: Transport, *, target_name: str, python: str, workdir: str, campaign: str,
            wait_s: float = DEFAULT_WAIT_S, ttl_s: float = DEFAULT_TTL_S,
            on_wait: Any = None) -> BoardFileLease:
    """Take the board's lease, waiting up to ``wait_s`` for another holder; TargetError says who holds it."""
    directory = lease_dir(workdir)
    record = {"owner": getpass.getuser(), "host": socket.gethostname(), "pid": os.getpid(), "campaign": campaign,
              "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    deadline = time.monotonic() + wait_s
    said_waiting = False
    while True:
        token = uuid.uuid4().hex
        log = f"{directory}/holder.{token}.log"
        pid = transport.start_detached([python, "-c", PROGRAM, "hold", directory, token, str(ttl_s),
                                        json.dumps(record)], cwd=workdir, log=log)
        answer = _holder_answer(transport, pid, log)
        state = _program(transport, python, directory, "show", os.path.basename(log))  # also drops the answer
        if answer == "held":
            lease = BoardFileLease(transport, target_name, python, directory, token, pid, ttl_s, record,
                                   on_event=on_wait)
            lease.start_heartbeat()
            return lease
        holder = state.get("lease")
        if holder and (state.get("expired") or _orphaned_by_us(holder, record)):
            # renewals stopped but the holder hangs on, or it is this very campaign's lease and the
            # controller that took it (on this host) is dead: take the lease over
            _program(transport, python, directory, "break", holder.get("token", ""))
            continue
        who = describe(holder, state["now"]) if holder else "another controller (no lease record yet)"
        if time.monotonic() >= deadline:
            raise TargetError(f"target {target_name} is leased by {who}; waited {wait_s:.0f} s "
                              f"(see: harness lease show {target_name}; force: harness lease break {target_name})")
        if on_wait and not said_waiting:
            on_wait(f"{target_name}: waiting up to {wait_s:.0f} s for the lease held by {who}")
            said_waiting = True
        time.sleep(min(2.0, max(POLL_S, deadline - time.monotonic())))


def _orphaned_by_us(holder: dict[str, Any], record: dict[str, Any]) -> bool:
    """The lease of the same campaign (a --resume after a crash), taken on this host by a process
    that no longer exists."""
    if holder.get("campaign") != record["campaign"] or holder.get("host") != record["host"]:
        return False
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _holder_answer(transport: Transport, pid: int, log: str) -> str:
    """'held' or 'busy', from the holder's first line."""
    while True:
        text = transport.read_file(log).decode(errors="replace") if transport.exists(log) else ""
        if "held" in text:
            return "held"
        if "busy" in text:
            return "busy"
        if not transport.alive(pid):
            text = transport.read_file(log).decode(errors="replace") if transport.exists(log) else ""
            if "held" in text or "busy" in text:
                return "held" if "held" in text else "busy"
            raise TargetError(f"lease holder on the target exited without answering: {text.strip()[-200:]}")
        time.sleep(POLL_S / 4)

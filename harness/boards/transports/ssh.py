"""The ``ssh`` transport: one persistent Fabric connection per target per campaign.

Commands are argument lists joined with ``shlex.join`` (a value is never pasted into a shell
string). Host keys are checked against known_hosts (paramiko RejectPolicy): an unknown key is an
error that says ``harness targets trust NAME``; a changed key is always an error. Unset options come
from ``~/.ssh/config`` and the agent, as ``ssh`` would (Fabric reads both).

A dropped connection is not a failed run: every operation is idempotent (starting the runner
included: it leaves a pid file), so on a connection error the transport reconnects with backoff and
repeats the operation, for up to ``reconnect_s``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import select
import shlex
import shutil
import signal as _signal
import socket
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from harness.boards.transports import CommandResult, register_transport
from harness.config.validate import StrictModel
from harness.errors import TargetError

CHANNEL_OPEN_TIMEOUT_S = 15.0
DEFAULT_TIMEOUT_S = 3600.0  # a command that hangs this long on a live connection is a bug on the target
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.2, 5.0
DEAD_LINK_S = 20  # unacknowledged data this long: the link is gone


class SshOptions(StrictModel):
    host: str = Field(description="host name or ~/.ssh/config alias")
    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = None
    key: str | None = Field(default=None, description="private key file; default: ssh config / agent")
    proxy_jump: str | None = Field(default=None, description="[user@]host[:port] of a jump host")
    known_hosts: str | None = Field(default=None, description="default: ~/.ssh/known_hosts")
    connect_timeout_s: int = Field(default=10, ge=1)
    reconnect_s: float = Field(default=300.0, ge=0, description="how long to keep reconnecting after a drop")


class ConnectionLost(Exception):
    """The SSH connection went away under an operation; retried after a reconnect."""


class UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: Any) -> None:
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


def fingerprint(key: Any) -> str:
    """OpenSSH's SHA256 fingerprint of a paramiko key."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def _reject_policy() -> Any:
    from paramiko import MissingHostKeyPolicy

    class Reject(MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise UnknownHostKey(hostname, key)

    return Reject()


def command_line(argv: Sequence[str], cwd: str | None = None, env: dict[str, str] | None = None) -> str:
    """One POSIX shell line; every value quoted."""
    line = shlex.join(list(argv))
    if env:
        line = shlex.join(["env", *(f"{k}={v}" for k, v in env.items())]) + " " + line
    if cwd:
        line = f"cd {shlex.quote(cwd)} && {line}"
    return line


class SshTransport:
    name = "ssh"

    def __init__(self, target: Any, *, connect_now: bool = True) -> None:
        self.target_name = getattr(target, "name", "?")
        self.options = SshOptions.model_validate(target.transport_options)
        self._lock = threading.RLock()
        self._conn: Any = None
        self.reconnects = 0
        self.on_event: Callable[[str], None] | None = None  # the campaign shows reconnects
        if connect_now:
            try:
                self._ensure()
            except ConnectionLost as exc:  # at the start, fail fast: the board is off or the address wrong
                raise TargetError(f"target {self.target_name}: {exc}") from None

    # ------------------------------------------------------------------ connection
    @property
    def known_hosts(self) -> Path:
        return Path(os.path.expanduser(self.options.known_hosts or "~/.ssh/known_hosts"))

    def _connection(self) -> Any:
        from fabric import Connection

        opts = self.options
        connect_kwargs: dict[str, Any] = {}
        if opts.key:
            connect_kwargs["key_filename"] = [os.path.expanduser(opts.key)]
        kwargs: dict[str, Any] = {"connect_timeout": opts.connect_timeout_s, "connect_kwargs": connect_kwargs}
        if opts.user:
            kwargs["user"] = opts.user
        if opts.port:
            kwargs["port"] = opts.port
        if opts.proxy_jump:
            kwargs["gateway"] = Connection(opts.proxy_jump, connect_timeout=opts.connect_timeout_s,
                                           connect_kwargs=dict(connect_kwargs))
        conn = Connection(opts.host, **kwargs)
        self._harden(conn)
        return conn

    def _harden(self, conn: Any) -> None:
        """Fabric accepts any host key by default; the harness verifies them (gateways too)."""
        conn.client.set_missing_host_key_policy(_reject_policy())
        if self.known_hosts.exists():
            conn.client.load_system_host_keys(str(self.known_hosts))
        if conn.gateway is not None and not isinstance(conn.gateway, str):
            self._harden(conn.gateway)

    def _open(self) -> Any:
        from paramiko import AuthenticationException, BadHostKeyException

        conn = self._connection()
        where = f"{conn.user}@{conn.host}:{conn.port}"
        try:
            conn.open()
        except UnknownHostKey as exc:
            conn.close()
            raise TargetError(f"target {self.target_name}: unknown host key for {exc.hostname} "
                              f"({exc.key.get_name()} {fingerprint(exc.key)}); check it and accept it with: "
                              f"harness targets trust {self.target_name}") from None
        except BadHostKeyException as exc:
            conn.close()
            raise TargetError(f"target {self.target_name}: HOST KEY CHANGED for {exc.hostname}: known "
                              f"{fingerprint(exc.expected_key)}, offered {fingerprint(exc.key)}; if the board was "
                              f"reinstalled, remove the old key (ssh-keygen -f {self.known_hosts} -R "
                              f"{shlex.quote(exc.hostname)}), then: harness targets trust {self.target_name}") from None
        except AuthenticationException as exc:
            conn.close()
            raise TargetError(f"target {self.target_name}: authentication failed for {where}: {exc}") from None
        except Exception:
            conn.close()
            raise
        conn.transport.set_keepalive(15)
        _detect_dead_links(conn.transport.sock)
        return conn

    def _ensure(self) -> Any:
        with self._lock:
            conn = self._conn
            if conn is not None and conn.transport is not None and conn.transport.is_active():
                return conn
            if conn is not None:
                conn.close()
                self._conn = None
            try:
                self._conn = self._open()
            except (OSError, EOFError, _ssh_exception()) as exc:
                raise ConnectionLost(f"cannot connect to {self.options.host}: {exc}") from None
            return self._conn

    def _drop(self, conn: Any) -> None:
        with self._lock:
            if self._conn is conn and conn is not None:
                conn.close()
                self._conn = None

    def _retrying(self, op: Callable[[Any], Any]) -> Any:
        """Run ``op(connection)``; on a connection error reconnect with backoff and run it again."""
        deadline: float | None = None
        delay = BACKOFF_FIRST_S
        while True:
            conn = None
            try:
                conn = self._ensure()
                result = op(conn)
                if deadline is not None and self.on_event:
                    lost_for = time.monotonic() - (deadline - self.options.reconnect_s)
                    self.on_event(f"{self.target_name}: reconnected after {lost_for:.1f} s")
                return result
            except (ConnectionLost, OSError, EOFError, _ssh_exception()) as exc:
                self._drop(conn)
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.options.reconnect_s
                    if self.on_event:
                        self.on_event(f"{self.target_name}: connection lost ({exc}); reconnecting")
                if now >= deadline:
                    raise TargetError(f"target {self.target_name}: no connection to {self.options.host} "
                                      f"within {self.options.reconnect_s:.0f} s: {exc}") from None
                time.sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, BACKOFF_MAX_S)
                with self._lock:
                    self.reconnects += 1

    # ------------------------------------------------------------------ commands
    def _exec(self, conn: Any, command: str, stdin: bytes | Path | None,
              timeout: float | None) -> tuple[int, bytes, bytes]:
        transport = conn.transport
        if transport is None or not transport.is_active():
            raise ConnectionLost("not connected")
        chan = transport.open_session(timeout=CHANNEL_OPEN_TIMEOUT_S)
        try:
            chan.exec_command(command)
            if isinstance(stdin, Path):  # a file goes in chunks: a model can be larger than this machine's memory
                with open(stdin, "rb") as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        chan.sendall(block)
            elif stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + (timeout or DEFAULT_TIMEOUT_S)
            while True:
                select.select([chan], [], [], 0.05)
                while chan.recv_ready():
                    out += chan.recv(1 << 16)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 16)
                if (chan.eof_received or chan.closed) and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if not transport.is_active():
                    raise ConnectionLost("connection closed during a command")
                if time.monotonic() > deadline:
                    raise TargetError(f"target {self.target_name}: {command[:60]}: no answer within "
                                      f"{timeout or DEFAULT_TIMEOUT_S:.0f} s")
            status = chan.recv_exit_status()
            if status == -1 and not transport.is_active():
                raise ConnectionLost("connection closed before the exit status")
            return status, bytes(out), bytes(err)
        finally:
            chan.close()

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, stdin: bytes | None = None) -> CommandResult:
        command = command_line(argv, cwd, env)
        status, out, err = self._retrying(lambda conn: self._exec(conn, command, stdin, timeout))
        if status == 127 and b"not found" in err:
            raise TargetError(f"{argv[0]}: not found on target {self.target_name}")
        return CommandResult(tuple(argv), status, out, err)

    def shell(self, script: str, *, stdin: bytes | Path | None = None, timeout: float | None = None) -> CommandResult:
        """A fixed shell snippet (values already quoted by the caller)."""
        status, out, err = self._retrying(lambda conn: self._exec(conn, script, stdin, timeout))
        return CommandResult(("sh", "-c", script), status, out, err)

    # ------------------------------------------------------------------ files
    def put(self, local: Path, remote: str) -> None:
        local = Path(local)
        q = shlex.quote(remote)
        if local.is_dir():
            data = tar_tree(local)
            script = f"rm -rf {q} && mkdir -p {q} && tar -C {q} -xf -"
            self.shell(script, stdin=data).check()
            return
        parent = shlex.quote(os.path.dirname(remote) or ".")
        # streamed, then renamed: a partial upload never looks complete
        self.shell(f"mkdir -p {parent} && cat > {q}.part && mv -f {q}.part {q}", stdin=local, timeout=3600).check()

    def put_bytes(self, data: bytes, remote: str) -> None:
        q = shlex.quote(remote)
        parent = shlex.quote(os.path.dirname(remote) or ".")
        self.shell(f"mkdir -p {parent} && cat > {q}.part && mv -f {q}.part {q}", stdin=data).check()

    def get(self, remote: str, local: Path) -> None:
        q = shlex.quote(remote)
        done = self.shell(f"if [ -d {q} ]; then echo D; tar -C {q} -cf - .; "
                          f"elif [ -f {q} ]; then echo F; cat {q}; else exit 3; fi")
        if done.returncode == 3:
            raise TargetError(f"{remote}: not found on target {self.target_name}")
        done.check()
        kind, payload = done.stdout[:2], done.stdout[2:]
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        if kind == b"D\n":
            if local.exists():
                shutil.rmtree(local)
            local.mkdir()
            try:
                with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
                    tar.extractall(local, filter="data")
            except tarfile.TarError as exc:
                raise TargetError(f"{remote}: truncated or corrupt transfer from {self.target_name}: {exc}") from None
        elif kind == b"F\n":
            local.write_bytes(payload)
        else:
            raise TargetError(f"{remote}: unexpected answer from target {self.target_name}")

    def read_file(self, remote: str) -> bytes:
        done = self.run(["cat", remote])
        if done.returncode != 0:
            raise TargetError(f"{remote}: {done.stderr.decode(errors='replace').strip() or 'cannot read'}")
        return done.stdout

    def exists(self, remote: str) -> bool:
        return self.run(["test", "-e", remote]).returncode == 0

    # ------------------------------------------------------------------ processes
    def start_detached(self, argv: Sequence[str], *, cwd: str, log: str,
                       env: dict[str, str] | None = None) -> int:
        # The pid file makes a repeated start (after a drop mid-command) return the first runner
        # instead of starting a second one.
        pidfile = shlex.quote(log + ".pid")
        qlog = shlex.quote(log)
        inner = command_line(["setsid", "nohup", *argv], None, env)
        script = (f"if [ -s {pidfile} ]; then cat {pidfile}; exit 0; fi; "
                  f"mkdir -p {shlex.quote(os.path.dirname(log) or '.')} && cd {shlex.quote(cwd)} && "
                  f"{{ {inner} > {qlog} 2>&1 < /dev/null & echo $! > {pidfile}.part && "
                  f"mv -f {pidfile}.part {pidfile} && cat {pidfile}; }}")
        done = self.shell(script).check()
        try:
            return int(done.stdout.split()[0])
        except (IndexError, ValueError):
            raise TargetError(f"target {self.target_name}: starting {argv[0]} printed no pid") from None

    def alive(self, pid: int) -> bool:
        # a zombie (nobody reaped it yet) is not alive; no /proc (macOS) means kill -0 decides
        script = (f"kill -0 {int(pid)} 2>/dev/null || exit 1; "
                  f"if [ -r /proc/{int(pid)}/stat ] && grep -q ') Z ' /proc/{int(pid)}/stat; then exit 1; fi")
        return self.shell(script).returncode == 0

    def signal(self, pid: int, signum: int = _signal.SIGTERM) -> None:
        self.shell(f"kill -{int(signum)} {int(pid)} 2>/dev/null; true")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _detect_dead_links(sock: Any) -> None:
    """A cable pulled or Wi-Fi gone sends no RST: without this a read waits for TCP's ~15 min
    retransmission timeout. Idle probes and a bound on unacknowledged data turn it into an error
    (then a reconnect) within about half a minute. Not for gateway channels (no socket)."""
    if not isinstance(sock, socket.socket):
        return
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3),
                        ("TCP_USER_TIMEOUT", DEAD_LINK_S * 1000)):
        if hasattr(socket, name):  # Linux; macOS has only some of them
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError:
            pass


def _ssh_exception() -> type[Exception]:
    from paramiko import SSHException

    return SSHException


def tar_tree(root: Path, names: Sequence[str] | None = None) -> bytes:
    """An uncompressed tar of ``root`` (or of the relative ``names`` under it), owner-neutral."""
    buffer = io.BytesIO()

    def neutral(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names if names is not None else ["."]:
            tar.add(root / name, arcname=name, filter=neutral)
    return buffer.getvalue()


def fetch_host_key(target: Any) -> tuple[str, Any, Path, bool]:
    """Connect far enough to see the server's host key: (known_hosts entry, key, file, already known)."""
    from paramiko import AuthenticationException, BadHostKeyException, MissingHostKeyPolicy

    transport = SshTransport(target, connect_now=False)
    conn = transport._connection()
    seen: dict[str, Any] = {}

    class Capture(MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            seen["entry"], seen["key"] = hostname, key
            raise UnknownHostKey(hostname, key)

    conn.client.set_missing_host_key_policy(Capture())
    entry = conn.host if conn.port == 22 else f"[{conn.host}]:{conn.port}"
    try:
        conn.open()
    except UnknownHostKey:
        return seen["entry"], seen["key"], transport.known_hosts, False
    except BadHostKeyException as exc:
        raise TargetError(f"target {transport.target_name}: HOST KEY CHANGED for {exc.hostname} (known "
                          f"{fingerprint(exc.expected_key)}, offered {fingerprint(exc.key)}); refusing to trust it; "
                          f"remove the old key first: ssh-keygen -f {transport.known_hosts} -R "
                          f"{shlex.quote(exc.hostname)}") from None
    except AuthenticationException:
        pass  # the host key was checked (and known) before authentication
    except (OSError, _ssh_exception()) as exc:
        conn.close()
        raise TargetError(f"target {transport.target_name}: cannot reach {transport.options.host}: {exc}") from None
    try:
        paramiko_transport = conn.client.get_transport()
        return entry, paramiko_transport.get_remote_server_key(), transport.known_hosts, True
    finally:
        conn.close()


def add_known_host(path: Path, entry: str, key: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with path.open("a") as out:
        out.write(f"{entry} {key.get_name()} {key.get_base64()}\n")


@register_transport("ssh")
def _factory(target: Any) -> SshTransport:
    return SshTransport(target)

"""One persistent Fabric connection to a target: opened with verified host keys, watched for dead links,
and re-opened with backoff when it drops (``retrying``). The ``ssh`` transport builds its operations on it."""

from __future__ import annotations

import os
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import Field

from harness.boards.transports.ssh_hostkeys import UnknownHostKey, fingerprint, reject_policy, ssh_exception
from harness.config.validate import StrictModel
from harness.errors import TargetError

if TYPE_CHECKING:  # fabric is imported when a connection is made (it is slow to import)
    from fabric import Connection

T = TypeVar("T")

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


class SshConnection:
    def __init__(self, target_name: str, options: SshOptions) -> None:
        self.target_name, self.options = target_name, options
        self._lock = threading.RLock()
        self._conn: Connection | None = None
        self.reconnects = 0
        self.on_event: Callable[[str], None] | None = None  # the campaign shows reconnects

    @property
    def known_hosts(self) -> Path:
        return Path(os.path.expanduser(self.options.known_hosts or "~/.ssh/known_hosts"))

    def connection(self) -> Connection:
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

    def _harden(self, conn: Connection) -> None:
        """Fabric accepts any host key by default; the harness verifies them (gateways too)."""
        conn.client.set_missing_host_key_policy(reject_policy())
        if self.known_hosts.exists():
            conn.client.load_system_host_keys(str(self.known_hosts))
        if conn.gateway is not None and not isinstance(conn.gateway, str):
            self._harden(conn.gateway)

    def _open(self) -> Connection:
        from paramiko import AuthenticationException, BadHostKeyException

        conn = self.connection()
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

    def ensure(self) -> Connection:
        with self._lock:
            conn = self._conn
            if conn is not None and conn.transport is not None and conn.transport.is_active():
                return conn
            if conn is not None:
                # found dead between operations (paramiko saw the EOF first): the same lost connection as one
                # that fails under an operation, so retrying() says so and reconnects with backoff
                conn.close()
                self._conn = None
                raise ConnectionLost("the connection was closed")
            try:
                self._conn = self._open()
            except (OSError, EOFError, ssh_exception()) as exc:
                raise ConnectionLost(f"cannot connect to {self.options.host}: {exc}") from None
            return self._conn

    def _drop(self, conn: Connection | None) -> None:
        with self._lock:
            if self._conn is conn and conn is not None:
                conn.close()
                self._conn = None

    def retrying(self, op: Callable[[Connection], T]) -> T:
        """Run ``op(connection)``; on a connection error reconnect with backoff and run it again."""
        deadline: float | None = None
        delay = BACKOFF_FIRST_S
        while True:
            conn = None
            try:
                conn = self.ensure()
                result = op(conn)
                if deadline is not None and self.on_event:
                    lost_for = time.monotonic() - (deadline - self.options.reconnect_s)
                    self.on_event(f"{self.target_name}: reconnected after {lost_for:.1f} s")
                return result
            except (ConnectionLost, OSError, EOFError, ssh_exception()) as exc:
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

    def exec(self, conn: Connection, command: str, stdin: bytes | Path | None,
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

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _detect_dead_links(sock: object) -> None:
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

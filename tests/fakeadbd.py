"""A stand-in for a phone's adbd: the adb *device* wire protocol over TCP, with this machine as the phone.

Only the phone is hardware; the adb server the tests talk to is the real one (Debian's ``adb``), which
reaches this stand-in with ``adb connect 127.0.0.1:PORT`` exactly as it reaches a phone over Wi-Fi debugging.

Wire protocol (AOSP ``adb/protocol.txt``, ``SYNC.TXT``): every message is a 24-byte little-endian header
``command, arg0, arg1, data_length, data_check (byte sum), magic = command ^ 0xffffffff`` plus the payload.

* ``CNXN(version, maxdata, "host::...")`` from the server is answered with our own ``CNXN`` and a
  ``device::ro.product.name=...;`` banner without ``features=``: we advertise none, so the server and
  adbutils use the v1 ``shell:`` service (no exit status on the wire) and sync v1.
* ``authorized=False``: the device answers ``AUTH(TOKEN)`` and never accepts a signature, and when the server
  offers its public key the "user" never taps Allow, so the server reports the device ``unauthorized``.
* ``answer=False``: the device accepts the TCP connection and never answers ``CNXN`` (``offline``).
* ``OPEN(id, 0, "shell:CMD")``: ``/bin/sh -c CMD`` here with stdout and stderr merged into the stream
  (what adbd does for a legacy raw shell), ``CLSE`` when it exits. ``OPEN("sync:")``: ``STAT``, ``LIST``,
  ``SEND``, ``RECV`` and ``QUIT`` on this machine's files. Any other service is refused with ``CLSE``.
* Flow control as in adb 29: after each ``WRTE`` the sender waits for the peer's ``OKAY``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import stat
import struct
import subprocess
import threading
from pathlib import Path


def _cmd(name: bytes) -> int:
    return struct.unpack("<I", name)[0]


A_CNXN, A_AUTH, A_OPEN, A_OKAY = _cmd(b"CNXN"), _cmd(b"AUTH"), _cmd(b"OPEN"), _cmd(b"OKAY")
A_CLSE, A_WRTE = _cmd(b"CLSE"), _cmd(b"WRTE")
A_VERSION = 0x01000001        # checksums may be 0 from the server; ours are always filled in
MAX_PAYLOAD = 256 * 1024
AUTH_TOKEN, AUTH_SIGNATURE, AUTH_RSAPUBLICKEY = 1, 2, 3
SYNC_DATA_MAX = 64 * 1024


def pack(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    return struct.pack("<6I", command, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF,
                       command ^ 0xFFFFFFFF) + data


class _Closed(Exception):
    pass


class _Stream:
    """One OPENed service: bytes in from the server's WRTEs, bytes out as WRTEs paced by OKAY."""

    def __init__(self, conn: _Connection, local_id: int, remote_id: int) -> None:
        self.conn, self.local_id, self.remote_id = conn, local_id, remote_id
        self.inbox = bytearray()
        self.cond = threading.Condition()
        self.peer_closed = False
        self.ready = threading.Event()
        self.ready.set()
        self.on_peer_close: list = []

    # -- from the connection's reader thread
    def feed(self, data: bytes) -> None:
        with self.cond:
            self.inbox += data
            self.cond.notify_all()

    def peer_close(self) -> None:
        with self.cond:
            self.peer_closed = True
            self.cond.notify_all()
        self.ready.set()
        for callback in self.on_peer_close:
            callback()

    # -- from the service's thread
    def read(self, n: int) -> bytes:
        with self.cond:
            while len(self.inbox) < n and not self.peer_closed:
                self.cond.wait()
            if len(self.inbox) < n:
                raise _Closed
            data = bytes(self.inbox[:n])
            del self.inbox[:n]
            return data

    def write(self, data: bytes) -> None:
        step = self.conn.max_payload
        for start in range(0, len(data), step):
            self.ready.wait()
            if self.peer_closed or self.conn.closed:
                raise _Closed
            self.ready.clear()
            self.conn.send(A_WRTE, self.local_id, self.remote_id, data[start:start + step])
        self.ready.wait()

    def close(self) -> None:
        self.conn.drop(self.local_id)
        if not self.peer_closed:
            self.conn.send(A_CLSE, self.local_id, self.remote_id)


class _Connection:
    def __init__(self, device: FakeAdbd, sock: socket.socket) -> None:
        self.device, self.sock = device, sock
        self.lock = threading.Lock()
        self.streams: dict[int, _Stream] = {}
        self.next_id = 1
        self.max_payload = 4096
        self.closed = False

    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        try:
            with self.lock:
                self.sock.sendall(pack(command, arg0, arg1, data))
        except OSError:
            self.closed = True

    def drop(self, local_id: int) -> None:
        with self.lock:
            self.streams.pop(local_id, None)

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise _Closed
            data += chunk
        return data

    def serve(self) -> None:
        try:
            while True:
                command, arg0, arg1, length, _check, magic = struct.unpack("<6I", self._read(24))
                if magic != command ^ 0xFFFFFFFF:
                    return  # a corrupt header: a real adbd drops the connection
                self.handle(command, arg0, arg1, self._read(length) if length else b"")
        except (_Closed, OSError):
            pass
        finally:
            self.closed = True
            for stream in list(self.streams.values()):
                stream.peer_close()
            with contextlib.suppress(OSError):
                self.sock.close()

    def handle(self, command: int, arg0: int, arg1: int, data: bytes) -> None:
        device = self.device
        if command == A_CNXN:
            self.max_payload = max(4096, min(arg1, MAX_PAYLOAD))
            device.host_banners.append(data.rstrip(b"\0").decode(errors="replace"))
            if not device.answer:
                return
            if device.authorized:
                self.send(A_CNXN, A_VERSION, MAX_PAYLOAD, device.banner().encode() + b"\0")
            else:
                self.send(A_AUTH, AUTH_TOKEN, 0, secrets.token_bytes(20))
        elif command == A_AUTH:
            if arg0 == AUTH_SIGNATURE:  # no key of ours matches: ask for the next one
                self.send(A_AUTH, AUTH_TOKEN, 0, secrets.token_bytes(20))
            elif arg0 == AUTH_RSAPUBLICKEY:
                device.offered_keys.append(data.rstrip(b"\0").decode(errors="replace"))
                # the phone now shows "Allow USB debugging?" and nobody taps it
        elif command == A_OPEN:
            self.open(arg0, data.rstrip(b"\0").decode(errors="replace"))
        elif command == A_OKAY:
            stream = self.streams.get(arg1)
            if stream is not None:
                stream.ready.set()
        elif command == A_WRTE:
            stream = self.streams.get(arg1)
            if stream is None:
                self.send(A_CLSE, 0, arg0)
                return
            stream.feed(data)
            self.send(A_OKAY, arg1, arg0)
        elif command == A_CLSE:
            with self.lock:
                stream = self.streams.pop(arg1, None)
            if stream is not None:
                stream.peer_close()

    def open(self, remote_id: int, service: str) -> None:
        device = self.device
        device.services.append(service)
        if service.startswith("shell:"):
            run = _shell
        elif service == "sync:":
            run = _sync
        else:
            self.send(A_CLSE, 0, remote_id)
            return
        with self.lock:
            local_id = self.next_id
            self.next_id += 1
            stream = _Stream(self, local_id, remote_id)
            self.streams[local_id] = stream
        self.send(A_OKAY, local_id, remote_id)
        threading.Thread(target=_guarded, args=(run, stream, service), daemon=True).start()


def _guarded(run, stream: _Stream, service: str) -> None:
    try:
        run(stream, service)
    except _Closed:
        pass
    finally:
        stream.close()


def _shell(stream: _Stream, service: str) -> None:
    """Legacy raw shell: ``sh -c``, stdout and stderr merged, no exit status; hang-up when the host closes."""
    proc = subprocess.Popen(["/bin/sh", "-c", service[len("shell:"):]], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/",
                            start_new_session=True)

    def hang_up() -> None:  # the host went away mid-command: hang up its process group (nohup'd jobs stay)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGHUP)

    stream.on_peer_close.append(hang_up)
    try:
        assert proc.stdout is not None
        while True:
            chunk = os.read(proc.stdout.fileno(), stream.conn.max_payload)
            if not chunk:
                break
            stream.write(chunk)
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.poll() is None and stream.peer_closed:
            hang_up()
        proc.wait()


def _sync(stream: _Stream, _service: str) -> None:
    """The file sync service, v1 requests: 4-byte id, little-endian u32 length, then the path."""

    def fail(message: str) -> None:
        data = message.encode()
        stream.write(b"FAIL" + struct.pack("<I", len(data)) + data)

    while True:
        request, length = struct.unpack("<4sI", stream.read(8))
        if request == b"QUIT":
            return
        arg = stream.read(length).decode(errors="surrogateescape")
        if request == b"STAT":
            try:
                st = os.lstat(arg)
                stream.write(b"STAT" + struct.pack("<III", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime)))
            except OSError:
                stream.write(b"STAT" + struct.pack("<III", 0, 0, 0))
        elif request == b"LIST":
            with contextlib.suppress(OSError):
                for name in sorted(os.listdir(arg)):
                    with contextlib.suppress(OSError):
                        st = os.lstat(os.path.join(arg, name))
                        raw = name.encode(errors="surrogateescape")
                        stream.write(b"DENT" + struct.pack("<IIII", st.st_mode, st.st_size & 0xFFFFFFFF,
                                                           int(st.st_mtime), len(raw)) + raw)
            stream.write(b"DONE" + struct.pack("<IIII", 0, 0, 0, 0))
        elif request == b"SEND":
            path, _, mode_text = arg.rpartition(",")
            mode = int(mode_text) if mode_text.isdigit() else 0o644
            chunks, mtime = [], None
            while mtime is None:
                kind, size = struct.unpack("<4sI", stream.read(8))
                if kind == b"DATA":
                    chunks.append(stream.read(size))
                elif kind == b"DONE":
                    mtime = size
                else:
                    fail(f"invalid data message {kind!r}")
                    return
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_bytes(b"".join(chunks))
                os.chmod(path, stat.S_IMODE(mode))
                os.utime(path, (mtime, mtime))
            except OSError as exc:
                fail(f"couldn't create file: {exc.strerror}")
                continue
            stream.write(b"OKAY" + struct.pack("<I", 0))
        elif request == b"RECV":
            try:
                with open(arg, "rb") as file:
                    while chunk := file.read(SYNC_DATA_MAX):
                        stream.write(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
            except OSError as exc:
                fail(exc.strerror or str(exc))
                continue
            stream.write(b"DONE" + struct.pack("<I", 0))
        else:
            fail(f"unknown sync request {request!r}")
            return


class FakeAdbd:
    """A phone's adbd on 127.0.0.1:``port`` (free port by default). ``stop`` drops every connection:
    to the adb server the phone is gone (unplugged, or Wi-Fi debugging lost)."""

    def __init__(self, *, name: str = "harness", model: str = "Fakeadbd", authorized: bool = True,
                 answer: bool = True, port: int = 0) -> None:
        self.name, self.model, self.authorized, self.answer = name, model, authorized, answer
        self.services: list[str] = []
        self.host_banners: list[str] = []
        self.offered_keys: list[str] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections: list[_Connection] = []
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    def banner(self) -> str:
        return f"device::ro.product.name={self.name};ro.product.model={self.model};ro.product.device={self.name};"

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except OSError:
                return
            if self.stopped:
                sock.close()
                return
            conn = _Connection(self, sock)
            self.connections.append(conn)
            threading.Thread(target=conn.serve, daemon=True).start()

    def stop(self) -> None:
        self.stopped = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not)
        with contextlib.suppress(OSError):
            self.sock.close()
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=5)


if __name__ == "__main__":  # a manual stand-in: python -m tests.fakeadbd [PORT]
    import sys

    device = FakeAdbd(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(f"fakeadbd on {device.serial}; adb connect {device.serial}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    device.stop()

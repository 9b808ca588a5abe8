"""A stand-in for the jtop service (jetson-stats) that replays a real board's captured jtop properties.

The jtop service reads a Jetson's sysfs, so it cannot run here. This stand-in runs jetson-stats' OWN
service code with only the hardware readers replaced: the real ``JtopServer`` control loop (``run``:
the client's ``{'interval': ...}`` request answered with the ``init`` message, the real ``TimerReader``
calling ``jtop_stats``), the real ``JtopServer.start`` (``JtopManager`` on the Unix socket with the
package's authkey, chown and ``chmod 660`` like on a board) and ``close``. ``jtop_decode`` — the one
method that reads hardware — returns the service's payload made of the real client properties printed on
an Orin Nano (tests/data/jetson/jtop-properties-orin-nano-25w.txt: jetson.cpu, .memory, .gpu, .power,
...), so the real client's properties, and ``jetson.stats`` computed from them, give that capture back.

    python -m tests.fakejtop --socket PATH --capture FILE [--version V] [--authkey K] [--gid G]

It serves until SIGTERM, then closes like the real service (the socket file is removed). The socket
path is jetson-stats' module constant ``jtop.service.JTOP_PIPE`` (``/run/jtop.sock`` on a board), set
here before anything uses it; the client reads the same constant.
"""

from __future__ import annotations

import argparse
import datetime
import grp
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from jtop import service  # jetson-stats: the real service module
from jtop.core.timer_reader import TimerReader


def load_capture(path: Path) -> dict[str, Any]:
    """``# jetson.NAME`` / ``# <printed value>`` pairs (tests/data/jetson/jtop-properties-*.txt) into a dict."""
    props: dict[str, Any] = {}
    for block in path.read_text().strip().split("\n\n\n"):
        head, value = (line[2:] for line in block.splitlines())
        name = head.removeprefix("jetson.")
        if name == "nvpmodel":  # printed as its name
            props[name] = value
        elif name == "uptime":  # printed as a timedelta: H:MM:SS.ffffff
            h, m, sec = value.split(":")
            props[name] = datetime.timedelta(hours=int(h), minutes=int(m), seconds=float(sec))
        else:
            props[name] = eval(value, {"__builtins__": {}, "datetime": datetime})  # noqa: S307 - our own test data
    return props


def payload(props: dict[str, Any], uptime_s: float) -> dict[str, Any]:
    """What the real service's ``jtop_decode`` sends, under its own keys; the client's properties are views
    of it (``jetson.memory`` is ``data['mem']``, ``jetson.engine`` is ``data['engines']``, ...)."""
    data = {"uptime": uptime_s, "cpu": props["cpu"], "gpu": props["gpu"], "processes": props.get("processes", []),
            "mem": props["memory"], "engines": props["engine"], "temperature": props["temperature"],
            "power": props["power"], "fan": props["fan"]}
    if "jetson_clocks" in props:  # the capture has the status only; thread/config/boot are the idle values
        data["jc"] = {"enable": props["jetson_clocks"], "thread": "", "config": False, "boot": False}
    if "nvpmodel" in props:
        data["nvp"] = {"status": [True], "thread": False, "model": {"id": 0, "name": props["nvpmodel"]}}
    return data


class _Stub:
    """The service's hardware controllers, reduced to the calls the control loop makes."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.answers.get(name)


class StandinServer(service.JtopServer):
    """``JtopServer`` with its hardware readers replaced by a capture; everything else is jetson-stats'."""

    def __init__(self, props: dict[str, Any], version: str, authkey: bytes | None) -> None:
        # Not JtopServer.__init__: it builds CPUService, GPUService, ... which read a Jetson's sysfs, and
        # requires root. The attributes set here are the ones it sets, in the same way.
        multiprocessing.Process.__init__(self)
        self.force, self.props, self.started = True, props, time.monotonic()
        self.config = _Stub()
        self._version = version
        self._error = multiprocessing.Queue()
        self.q = multiprocessing.Queue()
        self.interval = multiprocessing.Value("d", -1.0)
        self.data: dict[str, Any] = {}
        self.event = multiprocessing.Event()
        service.JtopManager.register("get_queue", callable=lambda: self.q)
        service.JtopManager.register("sync_data", callable=lambda: self.data)
        service.JtopManager.register("sync_event", callable=lambda: self.event)
        self.broadcaster = service.JtopManager(authkey=authkey)
        self.board = {"hardware": {"Model": "stand-in replaying a captured Orin Nano"}, "cpu": {}}
        nvp = props.get("nvpmodel")
        self.cpu, self.power, self.memory = _Stub(), _Stub(), _Stub(swap_path="/")
        self.fan = _Stub(get_configs={name: [fan.get("profile")] for name, fan in props["fan"].items()})
        self.jetson_clocks = _Stub(exists="jetson_clocks" in props)
        self.nvpmodel = _Stub(exists=nvp is not None, get_all_nvpmodels=[nvp], get_default={"id": 0, "name": nvp})
        self.jetsonpower = None
        self._timer_reader = TimerReader(self.jtop_stats)

    def jtop_decode(self) -> dict[str, Any]:
        uptime = self.props["uptime"].total_seconds() + time.monotonic() - self.started
        self.data = payload(self.props, uptime)
        return self.data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True, help="where the service listens (a board: /run/jtop.sock)")
    ap.add_argument("--capture", required=True, type=Path, help="tests/data/jetson/jtop-properties-*.txt")
    ap.add_argument("--version", default=None, help="the version the service reports (default: the package's)")
    ap.add_argument("--authkey", default=None, help="another authkey than jetson-stats' own")
    ap.add_argument("--gid", type=int, default=None, help="group of the socket (a board: the jtop group)")
    args = ap.parse_args(argv)
    service.JTOP_PIPE = args.socket
    gid = grp.getgrgid(args.gid if args.gid is not None else os.getgid())
    service.getgrnam = lambda name: gid  # the real start() chowns the socket to group "jtop"
    server = StandinServer(load_capture(args.capture), args.version or service.get_var(service.VERSION_RE),
                           args.authkey.encode() if args.authkey else None)

    def _stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    server.loop_for_ever()  # the real one: start(), join(), close() (removes the socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())

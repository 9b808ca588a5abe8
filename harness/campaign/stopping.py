"""A clean stop on SIGINT (Ctrl-C), SIGTERM (CI runners, systemd) and SIGHUP (a closed terminal).

Each becomes ``KeyboardInterrupt`` in the main thread, so every stop takes the one path Ctrl-C takes: the current
runner is stopped and pulled, finished runs are kept, the set is marked incomplete. The exit code is
128 + the signal's number (130, 143, 129), as a shell reports a process killed by it.

Two things make sure a stop is never lost:

- The handlers are installed explicitly. CPython installs its SIGINT handler only when SIGINT is at its
  default at start-up, and a non-interactive shell starts background jobs (``harness run ... &``, CI steps)
  with SIGINT *ignored*: without this, ``kill -INT`` on such a controller did nothing and the campaign ran to
  its end with exit 0.
- Short sections that must not be cut in half (start a runner and record it; pull, verify and record a run;
  write the tables and the manifest) run under ``deferred()``: a signal that arrives there is remembered and
  raised when the section ends, so a run is never left started-but-unrecorded or pulled-but-unrecorded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_state: dict[str, int | None] = {"received": None, "pending": None, "depth": 0}


def _handler(signum: int, frame: object) -> None:
    _state["received"] = signum
    if _state["depth"]:
        _state["pending"] = signum  # raised when the section ends
        return
    raise KeyboardInterrupt


def install() -> None:
    """Stop cleanly on SIGINT, SIGTERM and SIGHUP (main thread only). A SIGHUP ignored on purpose (``nohup``)
    stays ignored; SIGINT is taken even when inherited as ignored (see the module's docstring)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        signal.signal(signum, _handler)


def received() -> int | None:
    """The last stop signal received, if any."""
    return _state["received"]


def exit_code() -> int:
    """128 + the stop signal (130 for Ctrl-C, also when the stop came from elsewhere)."""
    return 128 + (_state["received"] or signal.SIGINT)


def name() -> str:
    """The stop signal's name, for messages."""
    return signal.Signals(_state["received"] or signal.SIGINT).name


def pending() -> bool:
    """True when a stop arrived inside a deferred section and waits for its end."""
    return _state["pending"] is not None


@contextlib.contextmanager
def deferred(*, raise_after: bool = True) -> Iterator[None]:
    """Hold a stop signal until the section ends, then raise it (or, with ``raise_after=False``, leave it for
    the caller to find with ``take_pending()``). Other threads are never interrupted by signals; for them this
    is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["depth"] = (_state["depth"] or 0) + 1
    try:
        yield
    finally:
        _state["depth"] = (_state["depth"] or 1) - 1
        if not _state["depth"] and raise_after and _state["pending"] is not None:
            _state["pending"] = None
            raise KeyboardInterrupt


def take_pending() -> bool:
    """Whether a stop arrived in a section left with ``raise_after=False``; clears it."""
    was = _state["pending"] is not None
    _state["pending"] = None
    return was


# --------------------------------------------------------------------------- test seam
PAUSE_ENV = "HARNESS_PAUSE_AT"
RELEASE_ENV = "HARNESS_PAUSE_RELEASE"


def checkpoint(phase: str) -> None:
    """Named phases of a campaign (``preflight``, ``run``, ``pull``, ``between-runs``, ``tables``).

    With ``HARNESS_PAUSE_AT=<phase>[,<phase>...]`` the controller says ``paused at <phase> (pid N)`` on stderr
    and waits there until a stop signal arrives, so the tests can stop it in exactly that phase instead of
    guessing with sleeps. With ``HARNESS_PAUSE_RELEASE=FILE`` it also goes on, without a stop, once FILE exists
    (a test changes the world there, e.g. kills a runner or makes the results directory immutable); the file is
    taken (deleted) on release. Without the variables this does nothing."""
    if phase not in os.environ.get(PAUSE_ENV, "").split(","):
        return
    print(f"paused at {phase} (pid {os.getpid()})", file=sys.stderr, flush=True)
    release = os.environ.get(RELEASE_ENV)
    while not pending():
        if release and os.path.exists(release):
            os.unlink(release)  # taken: the next pause waits for a new one
            return
        time.sleep(0.02)  # outside a deferred section the signal raises from here

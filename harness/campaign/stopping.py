"""A clean stop on SIGINT (Ctrl-C), SIGTERM (CI runners, systemd) and SIGHUP (a closed terminal).

One mechanism, whatever the number of targets: every target runs in a worker thread (also a single one), and
the main thread only turns a signal into a *stop request* while they run. Every thread sees the request the same
way: ``check()`` (the polls between steps and while a runner runs), the end of a ``deferred()`` section and a
paused ``checkpoint()`` raise ``KeyboardInterrupt`` there, so every stop takes the one path Ctrl-C takes: the
current runner is stopped and pulled, finished runs are kept, the set is marked incomplete. Outside the targets'
runs (preflight, the figures) the main thread is not in a section and the signal raises there at once. The exit
code is 128 + the signal's number (130, 143, 129), as a shell reports a process killed by it.

Two things make sure a stop is never lost:

- The handlers are installed explicitly. CPython installs its SIGINT handler only when SIGINT is at its
  default at start-up, and a non-interactive shell starts background jobs (``harness run ... &``, CI steps)
  with SIGINT *ignored*: without this, ``kill -INT`` on such a controller did nothing and the campaign ran to
  its end with exit 0.
- Short sections that must not be cut in half (start a runner and record it; pull, verify and record a run;
  write the tables and the manifest) run under ``deferred()``, in whichever thread: a stop that arrives there is
  remembered and raised when the section ends, so a run is never left started-but-unrecorded or
  pulled-but-unrecorded. The main thread waits for the targets inside such a section, so a signal then never
  raises in it: it only sets the request the workers act on.
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
_received: list[int] = []  # the last stop signal, for the exit code and the messages
_requested = threading.Event()  # a stop that arrived inside a section: every thread acts on it
_local = threading.local()  # per thread: how deep in deferred() sections it is


def _depth() -> int:
    depth: int = getattr(_local, "depth", 0)
    return depth


def _handler(signum: int, frame: object) -> None:
    _received[:] = [signum]
    if _depth():  # the main thread in a section (or waiting for the targets' workers)
        _requested.set()  # raised when the section ends; the workers see it at their next check
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
    return _received[0] if _received else None


def exit_code() -> int:
    """128 + the stop signal (130 for Ctrl-C, also when the stop came from elsewhere)."""
    return 128 + (received() or signal.SIGINT)


def name() -> str:
    """The stop signal's name, for messages."""
    return signal.Signals(received() or signal.SIGINT).name


def pending() -> bool:
    """True when a stop was requested and not yet taken (``take_pending``)."""
    return _requested.is_set()


def check() -> None:
    """Raise ``KeyboardInterrupt`` when a stop was requested, unless inside a section (its end raises it)."""
    if _requested.is_set() and not _depth():
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred(*, raise_after: bool = True) -> Iterator[None]:
    """Hold a stop until the section ends, then raise it (or, with ``raise_after=False``, leave it for the caller
    to find with ``take_pending()``). The same in every thread. The main thread takes the request when it raises
    it; a worker leaves it set, since it is every target's to act on (the main thread takes it when they ended)."""
    _local.depth = _depth() + 1
    try:
        yield
    finally:
        _local.depth = _depth() - 1
        if not _depth() and raise_after and _requested.is_set():
            if threading.current_thread() is threading.main_thread():
                _requested.clear()
            raise KeyboardInterrupt


def take_pending() -> bool:
    """Whether a stop was requested (in a section left with ``raise_after=False``, or while the targets ran);
    clears it."""
    was = _requested.is_set()
    _requested.clear()
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
        time.sleep(0.02)  # in the main thread outside a section the signal raises from here
    check()  # a worker outside a section stops here; inside one, the section's end raises

"""Board state around every run: the temperature gate, then expectations before and after.

Clocks and power modes can change under load (thermal throttling, a daemon re-applying nvpmodel),
so expectations are read back before and after each run, not once per campaign. The optional
``tj_below_c`` gate waits for the board to cool before a run, ``mem_available_min`` for memory to
be given back (BigMoeOnEdge gates every cell on temperature and MemAvailable); each wait is
recorded in the manifest entry of the run. This module only reads the board: ``before_run`` and ``after_run``
give what they found as manifest fields, and the campaign records them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from harness.errors import ExpectationError, TargetError
from harness.units import format_size, parse_size

POLL_S = 5.0
DEFAULT_TIMEOUT_S = 600.0
_THERMAL = "import json; from runner.probes import linux as p; print(json.dumps(p.thermal_zones()))"


def read_tj(session: Any) -> tuple[str | None, float | None]:
    """(zone, degrees C): the junction zone (``tj-thermal``) or, without one, the hottest zone."""
    done = session.transport.run([session.python, "-c", _THERMAL], cwd=session.runner_root, timeout=60).check()
    try:
        zones = {k: float(v) for k, v in json.loads(done.stdout).items() if float(v) > -200}  # -256: offline
    except (ValueError, AttributeError):
        raise TargetError(f"target {session.target.name}: thermal zones unreadable") from None
    if not zones:
        return None, None
    junction = [name for name in zones if "tj" in name.lower()]
    name = junction[0] if junction else max(zones, key=lambda zone: zones[zone])
    return name, zones[name]


def wait_for_temperature(session: Any, expect: dict[str, Any], message: Any = None) -> dict[str, Any] | None:
    """Block until tj < ``tj_below_c``; return what was waited (for the record) or None without a gate."""
    if "tj_below_c" not in expect:
        return None
    bound = float(expect["tj_below_c"])
    timeout = float(expect.get("tj_wait_timeout_s", DEFAULT_TIMEOUT_S))
    start = time.monotonic()
    zone, first = read_tj(session)
    if zone is None:
        raise ExpectationError(f"target {session.target.name}: tj_below_c is set but no thermal zone is readable")
    temp, said = first, False
    while temp is not None and temp >= bound:
        waited = time.monotonic() - start
        if waited >= timeout:
            raise ExpectationError(f"target {session.target.name}: {zone} stayed at {temp:.1f} C, not below "
                                   f"{bound:g} C, for {waited:.0f} s (tj_wait_timeout_s {timeout:g})")
        if message and not said:
            message(f"{session.target.name}: waiting for {zone} {temp:.1f} C to drop below {bound:g} C")
            said = True
        time.sleep(min(POLL_S, max(0.1, timeout - waited)))
        zone, temp = read_tj(session)
    return {"zone": zone, "bound_c": bound, "start_c": first, "end_c": temp,
            "waited_s": round(time.monotonic() - start, 3)}


_MEMAVAIL = "from runner.probes import machine; print(machine.meminfo().get('MemAvailable') or '')"


def read_mem_available(session: Any) -> int | None:
    done = session.transport.run([session.python, "-c", _MEMAVAIL], cwd=session.runner_root, timeout=60).check()
    text = done.stdout.decode().strip()
    return int(text) if text.isdigit() else None


def wait_for_memory(session: Any, expect: dict[str, Any], message: Any = None) -> dict[str, Any] | None:
    """Block until MemAvailable >= ``mem_available_min`` (a previous run's memory is given back, a
    background app is killed); the other BigMoeOnEdge entry gate. None without the gate."""
    if "mem_available_min" not in expect:
        return None
    bound = parse_size(expect["mem_available_min"])
    timeout = float(expect.get("mem_wait_timeout_s", DEFAULT_TIMEOUT_S))
    start = time.monotonic()
    first = avail = read_mem_available(session)
    if first is None:
        raise ExpectationError(f"target {session.target.name}: mem_available_min is set but MemAvailable "
                               "is unreadable")
    said = False
    while avail is not None and avail < bound:
        waited = time.monotonic() - start
        if waited >= timeout:
            raise ExpectationError(f"target {session.target.name}: MemAvailable stayed at {format_size(avail)}, "
                                   f"below {expect['mem_available_min']}, for {waited:.0f} s "
                                   f"(mem_wait_timeout_s {timeout:g})")
        if message and not said:
            message(f"{session.target.name}: waiting for MemAvailable {format_size(avail)} to reach "
                    f"{expect['mem_available_min']}")
            said = True
        time.sleep(min(POLL_S, max(0.1, timeout - waited)))
        avail = read_mem_available(session)
    return {"bound_bytes": bound, "start_bytes": first, "end_bytes": avail,
            "waited_s": round(time.monotonic() - start, 3)}


def check(session: Any, expect: dict[str, Any], when: str) -> list[dict[str, Any]]:
    """Probe and check; raise ExpectationError naming the first failure. Returns the results."""
    facts = session.platform.probe(session, [])
    results = session.platform.check(expect, facts, session)
    failed = [r for r in results if not r.ok]
    if failed:
        raise ExpectationError(f"target {session.target.name}: expectation {failed[0].name} failed {when}: "
                               f"{failed[0].message}")
    return [r.__dict__ for r in results]


_CACHE_DROP = "import json; from runner.probes import macos as p; print(json.dumps(p.cache_drop_method()))"


def warn_cache_not_clearable(session: Any, run: Any, message: Any = None) -> str | None:
    """Before a target's first cold run on macOS: if purge is not allowed there, say that its cold runs go on
    with the page cache NOT cleared (each run record and the report say so too). Returns the reason."""
    if run.cache != "cold" or session.platform.name != "macos" or "_cache_drop_checked" in vars(session):
        return None
    done = session.transport.run([session.python, "-c", _CACHE_DROP], cwd=session.runner_root, timeout=60)
    try:
        method, reason = json.loads(done.stdout)
    except ValueError:
        method, reason = None, f"cannot tell whether purge is allowed: {done.stderr.decode(errors='replace')[-200:]}"
    session._cache_drop_checked = True  # once per target and campaign: the answer does not change mid-campaign
    if method is None and message:
        message(f"{session.target.name}: the page cache will NOT be cleared before cold runs ({reason}); they run "
                "anyway and are marked 'NOT cleared' in run.json, the runs table and the report")
    return None if method else reason


def before_run(session: Any, run: Any, expect: dict[str, Any], message: Any = None) -> Iterator[dict[str, Any]]:
    """What the board is found in before a run: fields for the run's manifest entry, each given as soon as it is
    known (the campaign records it: a gate waited for stays recorded when a later wait is stopped). A failed
    expectation gives the run's skipped status and error, then raises."""
    warn_cache_not_clearable(session, run, message)
    if not expect:
        return
    try:
        gate = wait_for_temperature(session, expect, message)
        if gate is not None:
            yield {"tj_gate": gate}
        mem_gate = wait_for_memory(session, expect, message)
        if mem_gate is not None:
            yield {"mem_gate": mem_gate}
        check(session, expect, f"before run {run.run_id}")
    except ExpectationError as exc:
        yield {"status": "skipped", "error": str(exc)}
        raise
    yield {"expectations_before": "ok"}


def after_run(session: Any, run: Any, expect: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The expectations read back after a run, as a field for its manifest entry; a failure raises after it."""
    if not expect:
        return
    try:
        check(session, expect, f"after run {run.run_id}")
    except ExpectationError as exc:
        yield {"expectations_after": str(exc)}
        raise
    yield {"expectations_after": "ok"}

"""Locking boards through a real labgrid coordinator on loopback (harness/boards/labgrid_lease.py).

1. Round trip: reserve + lock + release + cancel of one free place, through one open session. Target <= 100 ms.
2. Contention: 20 places tagged bench=yes, 4 controller processes (4 labgrid users), each with 6 workers (24
   workers for 20 places, so someone is always queued). Each worker, for --seconds: reserve any bench place through
   the coordinator's queue, lock it, run a short fio read, release. Checked afterwards:
   - no place held by two controllers: per place, the coordinator's own history (its log: "place acquired by" /
     "place released") alternates, and the workers' lock spans and fio run timestamps never overlap;
   - idle time of a free place while someone waits: for every release, the time until the place is locked again
     during which some worker was queued. Target: total <= 1 s; also reported per hand-over.

    .venv/bin/python bench/labgrid_lock.py [--seconds 20] [--round-trips 50]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.boards.labgrid_client import Coordinator, open_coordinator  # noqa: E402
from harness.boards.labgrid_lease import lock  # noqa: E402
from harness.config.target import Target  # noqa: E402
from tests.labgrid_farm import LabgridFarm  # noqa: E402

PLACES, CONTROLLERS, WORKERS = 20, 4, 6
ROUND_TRIP_TARGET_S, IDLE_TARGET_S = 0.100, 1.0


def _target(filters: dict[str, str], address: str) -> Target:
    return Target.model_validate({"name": "bench", "labgrid": {"coordinator": address, "tags": filters}})


def round_trips(address: str, count: int) -> list[float]:
    coordinator = Coordinator(address)
    target = _target({"name": "rt"}, address)
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            place, token = lock(coordinator, target, 0, None)
            coordinator.cancel(token)
            coordinator.release(place, from_user=coordinator.identity)
            times.append(time.perf_counter() - start)
    finally:
        coordinator.close()
    return times


def worker(address: str, seconds: float, data: Path, log: list[dict[str, object]]) -> None:
    coordinator = open_coordinator(address)  # one session per controller, as a campaign on several boards has
    target = _target({"bench": "yes"}, address)
    end = time.time() + seconds
    try:
        seen = threading.local()
        acquire = coordinator.acquire

        def timed_acquire(place: str) -> None:  # when the allocation was seen: the end of waiting in the queue
            seen.at = time.time()
            acquire(place)

        coordinator.acquire = timed_acquire  # type: ignore[method-assign]
        while time.time() < end:
            asked = time.time()
            place, token = lock(coordinator, target, 600, None)
            locked = time.time()
            subprocess.run(["fio", "--name=b", f"--filename={data}", "--size=2M", "--rw=read", "--bs=64k",
                           "--ioengine=psync", "--rate=1m", "--output-format=terse"], capture_output=True, check=True)
            ran = time.time()
            coordinator.cancel(token)  # as PlaceLease.release: the release then hands the place on at once
            coordinator.release(place, from_user=coordinator.identity)
            released = time.time()
            log.append({"place": place, "asked": asked, "allocated": seen.at, "locked": locked, "ran": ran,
                        "released": released,
                        "user": coordinator.identity})
    finally:
        coordinator.close()


def controller(address: str, seconds: float, out: Path) -> None:
    """One controller process: WORKERS threads sharing the controller's session with the coordinator."""
    data = out.with_suffix(".data")
    data.write_bytes(os.urandom(2 << 20))
    log: list[dict[str, object]] = []
    threads = [threading.Thread(target=worker, args=(address, seconds, data, log)) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.write_text(json.dumps(log))


def contention(farm: LabgridFarm, seconds: float, work: Path) -> list[dict[str, object]]:
    procs = []
    for index in range(CONTROLLERS):
        env = {**os.environ, "LG_USERNAME": f"controller{index}"}
        procs.append(subprocess.Popen([sys.executable, __file__, "--controller", farm.address, "--seconds",
                                       str(seconds), "--out", str(work / f"c{index}.json")], env=env))
    for proc in procs:
        if proc.wait() != 0:
            raise SystemExit(f"controller {proc.pid} failed")
    return [entry for index in range(CONTROLLERS) for entry in json.loads((work / f"c{index}.json").read_text())]


def coordinator_history_alternates(log_text: str) -> tuple[bool, int]:
    """Per place, the coordinator's log says acquired, released, acquired, ...: never two holders at once."""
    state: dict[str, bool] = {}
    events = 0
    for line in log_text.splitlines():
        found = re.match(r"(\S+): place (acquired by \S+|released)$", line.strip())
        if not found:
            continue
        events += 1
        place, acquired = found.group(1), found.group(2).startswith("acquired")
        if state.get(place, False) == acquired:
            return False, events
        state[place] = acquired
    return True, events


def analyse(entries: list[dict[str, object]]) -> dict[str, float]:
    """Per place, consecutive holders never overlap; for every release while someone was queued (asked, no place
    allocated yet), the time until the next holder had the place locked."""
    by_place: dict[str, list[dict[str, object]]] = {}
    for entry in entries:
        by_place.setdefault(str(entry["place"]), []).append(entry)
    overlaps = 0
    idle: list[float] = []
    notice: list[float] = []
    queued = [(float(e["asked"]), float(e["allocated"])) for e in entries]
    for spans in by_place.values():
        spans.sort(key=lambda e: float(e["locked"]))
        for before, after in zip(spans, spans[1:], strict=False):
            if float(after["locked"]) < float(before["released"]) or float(after["locked"]) < float(before["ran"]):
                overlaps += 1
            free = float(before["released"])
            if any(a <= free < b for a, b in queued):
                idle.append(max(0.0, float(after["locked"]) - free))
                notice.append(max(0.0, float(after["allocated"]) - free))
    return {"locks": len(entries), "places_used": len(by_place), "overlaps": overlaps,
            "handovers_with_waiters": len(idle), "idle_total_s": sum(idle),
            "idle_max_s": max(idle, default=0.0), "idle_median_s": statistics.median(idle) if idle else 0.0,
            "notice_median_s": statistics.median(notice) if notice else 0.0,
            "wait_median_s": statistics.median(float(e["locked"]) - float(e["asked"]) for e in entries)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--round-trips", type=int, default=50)
    parser.add_argument("--controller", metavar="ADDRESS")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.controller:
        controller(args.controller, args.seconds, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="labgrid-bench-") as tmp:
        work = Path(tmp)
        farm = LabgridFarm(work / "labgrid").start()
        try:
            for index in range(PLACES):
                farm.services[f"board{index}"] = {"address": f"10.0.0.{index + 1}", "port": 22, "username": "root"}
            farm.services["boardrt"] = {"address": "10.0.1.1", "port": 22, "username": "root"}
            farm.start_exporter()
            farm.place("rt", "boardrt", kind="roundtrip")
            for index in range(PLACES):
                farm.place(f"bench-{index:02d}", f"board{index}", bench="yes")
            times = round_trips(farm.address, args.round_trips)
            entries = contention(farm, args.seconds, work)
            alternates, events = coordinator_history_alternates((farm.root / "coordinator.log").read_text())
        finally:
            farm.stop()
    median, p95 = statistics.median(times), sorted(times)[int(0.95 * (len(times) - 1))]
    print(f"lock + release round trip: median {median * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms over {len(times)} "
          f"(target <= {ROUND_TRIP_TARGET_S * 1000:.0f} ms): {'OK' if median <= ROUND_TRIP_TARGET_S else 'MISSED'}")
    result = analyse(entries)
    print(f"contention: {PLACES} places, {CONTROLLERS} controllers x {WORKERS} workers, {args.seconds:.0f} s: "
          f"{result['locks']} locks on {result['places_used']} places, median wait {result['wait_median_s']:.2f} s")
    print(f"  coordinator history: {events} acquire/release events, "
          f"{'alternating on every place' if alternates else 'A PLACE WAS ACQUIRED TWICE'}; "
          f"overlapping lock/run spans: {result['overlaps']}")
    idle, notice = result["idle_median_s"] * 1000, result["notice_median_s"] * 1000
    print(f"  idle while someone waits: total {result['idle_total_s']:.2f} s over {result['handovers_with_waiters']} "
          f"hand-overs (max {result['idle_max_s'] * 1000:.0f} ms, median {idle:.0f} ms, of which seeing the "
          f"allocation: median {notice:.0f} ms, the rest labgrid's AcquirePlace); "
          f"target total <= {IDLE_TARGET_S:.0f} s: {'OK' if result['idle_total_s'] <= IDLE_TARGET_S else 'MISSED'}")
    if not alternates or result["overlaps"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

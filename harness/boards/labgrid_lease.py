"""The labgrid lease backend: a place reserved and locked through a labgrid coordinator.

Fair across users: every lock starts as a reservation (labgrid's queue: oldest first, by tags or by the place's
name); once the coordinator allocates a place to it, the place is acquired and held until the campaign ends. The
board's own lock file is then taken as a second guard. Another user's lock is never broken: without a wait the
campaign stops at once (exit 2) naming the holder. A place this user and host still hold after their controller
died is taken back on ``--resume`` (labgrid's ``release-from``). A coordinator that goes away mid-campaign makes
``check`` stop the campaign before its next run (a restarted coordinator has forgotten every lock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.boards.labgrid_client import Coordinator, CoordinatorError, open_coordinator
from harness.boards.lease_backends import BoardLockFile, Held
from harness.config.target import Target
from harness.errors import InfrastructureError, TargetError, UsageError

POLL_S = 0.02  # a coordinator handle that pushes no change notifications is checked this often
KEEPALIVE_S = 10.0  # our reservation is polled this often while queued (labgrid drops one unpolled for 60 s)


class PlaceBusy(UsageError):
    """The place is locked by someone else and the campaign was not told to wait (long enough)."""


def resolve(target: Target, coordinator: Coordinator, place: str) -> Target:
    """The target with the place's SSH address and user (its NetworkService); named after the place when it was
    picked by tags."""
    service = coordinator.network_service(place)
    if service is None:
        raise TargetError(f"target {target.name}: labgrid place {place} has no NetworkService resource (export "
                          f"one with labgrid-exporter and add it: labgrid-client -p {place} add-match "
                          "EXPORTER/GROUP/NetworkService)")
    if not service.get("avail", True):
        raise TargetError(f"target {target.name}: the NetworkService of place {place} is not available (its "
                          f"exporter {service.get('exporter')} is offline)")
    ssh = {**target.transport_options, "host": service["address"], "user": service.get("username") or None}
    if service.get("port"):
        ssh["port"] = int(service["port"])
    assert target.labgrid is not None
    tags = dict(coordinator.places()[place].tags)
    ref = target.labgrid.model_copy(update={"place": place, "tags": tags, "coordinator": coordinator.address})
    name = place if target.selector else target.name
    return target.model_copy(update={"name": name, "transport": {"ssh": ssh}, "labgrid": ref})


def resolve_unlocked(target: Target) -> Target:
    assert target.labgrid is not None
    if target.labgrid.place is None:
        raise UsageError(f"{target.name}: a labgrid tag selector names no place until a campaign reserves one")
    coordinator = open_coordinator(target.labgrid.address)
    try:
        return resolve(target, coordinator, target.labgrid.place)
    finally:
        coordinator.close()


def holders(coordinator: Coordinator, filters: dict[str, str]) -> str:
    """Who holds the places a filter matches, for one line: 'orin-01 locked by host/user'."""
    owners = {r.token: r.owner for r in coordinator.reservations()}
    found = []
    for name, place in sorted(coordinator.places().items()):
        if not all({**place.tags, "name": name}.get(k) == v for k, v in filters.items()):
            continue
        if place.acquired:
            found.append(f"{name} locked by {place.acquired}")
        elif place.reservation:
            found.append(f"{name} reserved for {owners.get(place.reservation, 'another reservation')}")
    return ", ".join(found) or f"no place matches {filters}"


class PlaceLease:
    """One place held through the coordinator (and the board's lock file under it)."""

    def __init__(self, coordinator: Coordinator, place: str, token: str, board: Any, campaign: str,
                 on_event: Callable[[str], None] | None) -> None:
        self.coordinator, self.place, self.token, self.board = coordinator, place, token, board
        self.campaign, self.on_event, self.released = campaign, on_event, False
        self.selector = ""  # the labgrid:... selector the place was picked by (a --resume pins the same place)

    def check(self) -> None:
        if not self.coordinator.connected:
            raise InfrastructureError(f"labgrid coordinator {self.coordinator.address} went away: stopped before "
                                      f"the next run on place {self.place}; finished runs are kept; when it is "
                                      f"back: harness run --resume {self.campaign}")
        holder = self.coordinator.places().get(self.place)
        if holder is not None and holder.acquired != self.coordinator.identity:
            raise InfrastructureError(f"labgrid place {self.place} is no longer locked by us (now: "
                                      f"{holder.acquired or 'nobody'}; kicked?): stopped before the next run; "
                                      f"finished runs are kept; harness run --resume {self.campaign}")

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        try:
            if self.board is not None:
                self.board.release()
        finally:
            if self.coordinator.connected:  # a restarted coordinator holds no lock of ours
                try:  # the reservation first: the release then hands the place to the next in the queue at once
                    self.coordinator.cancel(self.token)
                    self.coordinator.release(self.place, from_user=self.coordinator.identity)
                except CoordinatorError as exc:
                    if self.on_event:
                        self.on_event(f"{self.place}: could not release the labgrid place ({exc}); "
                                      f"free it with: labgrid-client -p {self.place} release")
            self.coordinator.close()

    def record(self) -> dict[str, Any]:
        place = self.coordinator.places().get(self.place)
        return {"backend": LabgridPlace.name, "coordinator": self.coordinator.address, "place": self.place,
                "tags": dict(place.tags) if place is not None else {}, "reservation": self.token,
                "locked_by": self.coordinator.identity, "selector": self.selector,
                "board_lock": self.board.record() if self.board is not None else None}


class LabgridPlace:
    name = "labgrid"

    def take(self, target: Target, *, campaign: str, wait_s: float, on_wait: Callable[[str], None] | None,
             reclaim: bool = False) -> Held:
        assert target.labgrid is not None
        coordinator = open_coordinator(target.labgrid.address)
        try:
            if reclaim and target.labgrid.place:
                take_back(coordinator, target.labgrid.place, on_wait)
            place, token = lock(coordinator, target, wait_s, on_wait)
        except BaseException:
            coordinator.close()
            raise
        lease = PlaceLease(coordinator, place, token, None, campaign, on_wait)
        lease.selector = target.selector
        try:
            resolved = resolve(target, coordinator, place)
            # the second guard: a controller that bypasses labgrid still finds the board's lock file taken
            held = BoardLockFile().take(resolved, campaign=campaign, wait_s=wait_s, on_wait=on_wait,
                                        reclaim=reclaim)
        except BaseException:
            lease.release()
            raise
        lease.board = held.lease
        return Held(held.target, held.transport, lease)


def take_back(coordinator: Coordinator, place: str, on_wait: Callable[[str], None] | None) -> None:
    """--resume after a crash: the place is still locked by this very user and host (the dead controller), and
    its reservation still holds it; release both, like ``labgrid-client release-from``."""
    me = coordinator.identity
    current = coordinator.places().get(place)
    if current is None or current.acquired != me:
        return
    for reservation in coordinator.reservations():
        if reservation.owner == me and place in reservation.allocations.get("main", []):
            coordinator.cancel(reservation.token)
    coordinator.release(place, from_user=me)
    if on_wait:
        on_wait(f"{place}: took back the labgrid place still locked by {me} (a controller that died; "
                "labgrid's release-from)")


def lock(coordinator: Coordinator, target: Target, wait_s: float,
         on_wait: Callable[[str], None] | None) -> tuple[str, str]:
    """Reserve (the coordinator's fair queue), wait up to ``wait_s`` for an allocation, acquire: (place, token).

    While queued, the allocation is seen in the place updates the coordinator pushes (a place's ``reservation``
    becomes our token): the coordinator allocates a freed place inside the release itself, and the waiter wakes
    on that update and acquires at once, without loading the coordinator; the reservation itself is polled only
    every ``KEEPALIVE_S`` (labgrid drops a reservation nobody polls)."""
    assert target.labgrid is not None
    filters = target.labgrid.filters
    reservation = coordinator.reserve(filters)
    token = reservation.token
    deadline = time.monotonic() + wait_s
    polled = time.monotonic()
    said_waiting = False
    try:
        while True:
            seen = getattr(coordinator, "changes", None)  # read before the check: no update slips in between
            place = _allocated(coordinator, reservation, token)
            if place is not None:
                coordinator.acquire(place)
                return place, token
            if reservation.state.name not in ("waiting", "allocated"):
                raise TargetError(f"target {target.name}: labgrid reservation {token} is {reservation.state.name}")
            if time.monotonic() >= deadline:
                waited = f"waited {wait_s:.0f} s" if wait_s > 0 else "not waiting (--lease-wait 0)"
                raise PlaceBusy(f"target {target.name}: labgrid place busy: {holders(coordinator, filters)}; "
                                f"{waited} (see: harness lease show {target.name})")
            if on_wait and not said_waiting:
                on_wait(f"{target.name}: waiting up to {wait_s:.0f} s in the labgrid queue for "
                        f"{holders(coordinator, filters)}")
                said_waiting = True
            stream_gone = _wait_for_update(coordinator, seen, min(deadline, polled + KEEPALIVE_S) - time.monotonic())
            if stream_gone or time.monotonic() - polled >= KEEPALIVE_S:
                reservation, polled = coordinator.poll(token), time.monotonic()
    except BaseException:
        try:
            coordinator.cancel(token)  # leave the queue; an acquired place is released by the caller
        except CoordinatorError:
            pass
        raise


def _wait_for_update(coordinator: Coordinator, seen: int | None, timeout: float) -> bool:
    """Sleep until a place update arrives (or ``timeout``); True when no update will come any more, so the
    reservation is to be asked for now (a coordinator that went away then fails that request)."""
    if seen is None:  # a stand-in without pushed updates (the unit tests' fake coordinator)
        time.sleep(POLL_S)
        return False
    if coordinator.wait_for_change(seen, timeout):
        return False
    time.sleep(POLL_S)
    return True


def _allocated(coordinator: Coordinator, reservation: Any, token: str) -> str | None:
    """The place the coordinator allocated to our reservation: from its answer, or from the pushed place updates."""
    if reservation.state.name in ("allocated", "acquired"):
        return reservation.allocations["main"][0]
    for name, place in coordinator.places().items():
        if place.reservation == token and not place.acquired:
            return name
    return None


def farm_state(target: Target) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(coordinator, places, reservations) as the coordinator has them, for ``harness lease show``."""
    assert target.labgrid is not None
    coordinator = open_coordinator(target.labgrid.address)
    try:
        places = [{"place": name, "tags": dict(place.tags), "holder": place.acquired or "",
                   "reservation": place.reservation or ""} for name, place in sorted(coordinator.places().items())]
        reservations = [{"token": r.token, "owner": r.owner, "state": r.state.name,
                         "filter": dict(r.filters.get("main", {})),
                         "place": ", ".join(r.allocations.get("main", [])), "created": r.created}
                        for r in sorted(coordinator.reservations(), key=lambda r: (-r.prio, r.created))]
    finally:
        coordinator.close()
    return coordinator.address, places, reservations


def kick(target: Target) -> tuple[str, str | None]:
    """labgrid's kick (``labgrid-client release --kick``): the place released whoever holds it; (place, holder)."""
    assert target.labgrid is not None
    place = target.labgrid.place
    if place is None:
        raise UsageError(f"{target.name}: name one place to break (harness lease break PLACE-TARGET)")
    coordinator = open_coordinator(target.labgrid.address)
    try:
        current = coordinator.places().get(place)
        if current is None:
            raise UsageError(f"{target.name}: no place {place} on labgrid coordinator {coordinator.address}")
        holder = current.acquired  # read first: labgrid updates its Place objects in place
        if holder:
            coordinator.release(place)
        return place, holder
    finally:
        coordinator.close()

"""A blocking handle on a labgrid coordinator, through labgrid's own client library.

labgrid's ``ClientSession`` is asyncio; the campaign is threads. Each ``Coordinator`` runs one event loop in a
thread of its own and hands labgrid's coroutines and gRPC stub calls to it, so any campaign thread may call it.
The session subscribes to places and resources (labgrid keeps ``places``/``resources`` current), and says who
we are the way labgrid-client does: ``host/user`` from $LG_HOSTNAME/$LG_USERNAME or the system's.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from harness.errors import TargetError, ToolMissingError

CALL_TIMEOUT_S = 10.0


def labgrid_missing() -> str | None:
    """Why labgrid's client cannot be used here, or None."""
    try:
        import labgrid.remote.client  # noqa: F401
    except ImportError as exc:
        return f"labgrid is not installed ({exc.name}): pip install 'harness[labgrid]'"
    return None


def own_connection(session: Any) -> None:
    """Give labgrid's session a TCP connection of its own. gRPC shares one connection between channels to the
    same address in a process, and the coordinator knows a client by its connection: two sessions in one
    process (two targets on one farm) would be one client to it. Same channel options as labgrid's."""
    import grpc
    from labgrid.remote.generated import labgrid_coordinator_pb2_grpc

    options = [("grpc.keepalive_time_ms", 7500), ("grpc.keepalive_timeout_ms", 10000),
               ("grpc.http2.ping_timeout_ms", 10000), ("grpc.http2.max_pings_without_data", 0),
               ("grpc.use_local_subchannel_pool", 1)]
    session.channel = grpc.aio.insecure_channel(target=session.address, options=options)
    session.stub = labgrid_coordinator_pb2_grpc.CoordinatorStub(session.channel)


def _not_from_labgrid(record: logging.LogRecord) -> bool:
    return "/labgrid/" not in record.pathname.replace("\\", "/")


def quiet_labgrid_logs() -> None:
    """labgrid's client logs to the root logger ("coordinator became unavailable", with a traceback); the harness
    says what it means in its own one line (``PlaceLease.check``), so those records are dropped."""
    root = logging.getLogger()
    if _not_from_labgrid not in root.filters:
        root.addFilter(_not_from_labgrid)


class CoordinatorError(TargetError):
    """The coordinator refused a request (its own words) or cannot be reached."""


class Coordinator:
    def __init__(self, address: str) -> None:
        missing = labgrid_missing()
        if missing:
            raise ToolMissingError(missing)
        from labgrid.remote.client import ClientSession
        from labgrid.remote.generated import labgrid_coordinator_pb2

        quiet_labgrid_logs()
        self.address, self.pb = address, labgrid_coordinator_pb2
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"labgrid-{address}", daemon=True)
        self._thread.start()

        self.changes = 0  # place updates seen so far (``wait_for_change``)
        self._changed = threading.Condition()
        self.listeners: list[Callable[[Any], None]] = []  # called with each pushed place (labgrid ``Place``)

        async def start() -> Any:
            session = ClientSession(address, self.loop)
            own_connection(session)
            self._watch_places(session)
            await session.start()
            return session

        try:
            self.session = self._run(start)
        except Exception as exc:  # noqa: BLE001 - labgrid's ServerError / gRPC errors: one line for the user
            self._stop_loop()
            raise CoordinatorError(f"labgrid coordinator {address} is not reachable: {exc}") from None
        self.identity = f"{self.session.gethostname()}/{self.session.getuser()}"
        self.users = 1  # open_coordinator hands one session to every target of this controller on this farm

    # ----------------------------------------------------------------- plumbing
    def _run(self, make: Callable[[], Any], timeout: float = CALL_TIMEOUT_S) -> Any:
        async def go() -> Any:
            return await make()

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(timeout)

    def call(self, method: str, request: Any) -> Any:
        """One unary RPC of labgrid's generated stub; the coordinator's refusal becomes a CoordinatorError."""
        import grpc

        stub_method = getattr(self.session.stub, method)
        try:
            return self._run(lambda: stub_method(request, timeout=CALL_TIMEOUT_S))
        except grpc.aio.AioRpcError as exc:
            raise CoordinatorError(exc.details() or str(exc.code())) from None
        except TimeoutError:
            raise CoordinatorError(f"labgrid coordinator {self.address} did not answer {method}") from None

    @property
    def connected(self) -> bool:
        """False once the coordinator's update stream broke (the coordinator stopped or the network went)."""
        return not self.session.stopping.is_set()

    def sync(self) -> None:
        """Wait until our view of places and resources includes everything the coordinator did before now."""
        self._run(self.session.sync_with_coordinator)

    def close(self) -> None:
        with _SHARED_LOCK:
            self.users -= 1
            if self.users > 0:
                return
            if _SHARED.get(self.address) is self:
                del _SHARED[self.address]
        try:
            self._run(self.session.stop, timeout=5)
            self._run(self.session.close, timeout=5)
        except Exception:  # noqa: BLE001 - closing a channel to a coordinator that is gone
            pass
        self._stop_loop()

    def _watch_places(self, session: Any) -> None:
        """Wake the threads waiting for a place change as soon as labgrid has applied a pushed update (a queued
        reservation sees its allocation at once, not at its next poll)."""
        apply = session.on_place_changed

        async def on_place_changed(place_pb2: Any) -> None:
            await apply(place_pb2)
            place = session.places.get(place_pb2.name)
            for listener in self.listeners:
                listener(place)
            with self._changed:
                self.changes += 1
                self._changed.notify_all()

        session.on_place_changed = on_place_changed  # labgrid's message pump calls it for every place update

    def wait_for_change(self, seen: int, timeout: float) -> bool:
        """Return once a place update after the ``seen``-th has arrived, or after ``timeout`` seconds; False at
        once when the update stream is gone (no update will come)."""
        with self._changed:
            if self.connected:
                self._changed.wait_for(lambda: self.changes != seen, max(0.0, timeout))
        return self.connected

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    # ----------------------------------------------------------------- what labgrid knows
    def places(self) -> dict[str, Any]:
        """Place name -> labgrid ``Place`` (tags, matches, acquired, reservation)."""
        return dict(self.session.places)

    def reservations(self) -> list[Any]:
        from labgrid.remote.common import Reservation

        answer = self.call("GetReservations", self.pb.GetReservationsRequest())
        return [Reservation.from_pb2(r) for r in answer.reservations]

    def network_service(self, place_name: str) -> dict[str, Any] | None:
        """The ``NetworkService`` resource matched by the place (address, username, port, avail), or None."""
        place = self.session.places.get(place_name)
        if place is None:
            return None
        for exporter, groups in sorted(self.session.resources.items()):
            for group_name, group in sorted(groups.items()):
                for resource_name, entry in sorted(group.items()):
                    if entry.cls != "NetworkService":
                        continue
                    if place.getmatch((exporter, group_name, entry.cls, resource_name)) is not None:
                        return {**entry.params, "avail": entry.avail, "exporter": exporter, "group": group_name}
        return None

    # ----------------------------------------------------------------- locking
    def reserve(self, filters: dict[str, str]) -> Any:
        from labgrid.remote.common import Reservation

        request = self.pb.CreateReservationRequest(filters={"main": self.pb.Reservation.Filter(filter=filters)},
                                                   prio=0.0)
        return Reservation.from_pb2(self.call("CreateReservation", request).reservation)

    def poll(self, token: str) -> Any:
        from labgrid.remote.common import Reservation

        answer = self.call("PollReservation", self.pb.PollReservationRequest(token=token))
        return Reservation.from_pb2(answer.reservation)

    def cancel(self, token: str) -> None:
        self.call("CancelReservation", self.pb.CancelReservationRequest(token=token))

    def acquire(self, place: str) -> None:
        self.call("AcquirePlace", self.pb.AcquirePlaceRequest(placename=place))
        self.sync()

    def release(self, place: str, *, from_user: str | None = None) -> None:
        """labgrid's release; with ``from_user`` only if that user holds it (labgrid-client release-from)."""
        request = self.pb.ReleasePlaceRequest(placename=place)
        if from_user is not None:
            request.fromuser = from_user
        self.call("ReleasePlace", request)
        self.sync()


_SHARED: dict[str, Coordinator] = {}
_SHARED_LOCK = threading.Lock()


def open_coordinator(address: str) -> Coordinator:
    """This controller's session with a coordinator, shared by all its targets there (closed by the last
    ``close``): one client per controller, as labgrid-client is, and a coordinator that publishes every change to
    every client is not slowed by one client per board."""
    with _SHARED_LOCK:
        current = _SHARED.get(address)
        if current is not None and current.connected:
            current.users += 1
            return current
    made = Coordinator(address)
    with _SHARED_LOCK:
        _SHARED[address] = made
    return made

"""Targets from a labgrid farm, without processes: ``labgrid:`` in a target file and ``labgrid:KEY=VALUE``
selectors, resolved against the inventory's farm; a resumed set pins the place it ran on."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.boards.inventory import load_targets, targets_of_set
from harness.config.target import DEFAULT_COORDINATOR, parse_labgrid_selector, select_targets
from harness.errors import UsageError

FARM = ('platform: linux\nlabgrid: {coordinator: "lab.example:20408"}\n'
        "transport:\n  ssh: {key: /keys/id_lab, known_hosts: /keys/known_hosts}\nworkdir: /data/harness\n")


def _inventory(tmp_path: Path, **files: str) -> dict:
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return load_targets(tmp_path)


def test_selector_gives_labgrid_reservation_filters_and_farm() -> None:
    assert parse_labgrid_selector("labgrid:board=orin,soc=t234@lab") == ({"board": "orin", "soc": "t234"}, "lab")
    assert parse_labgrid_selector("labgrid:board=orin") == ({"board": "orin"}, None)


@pytest.mark.parametrize("selector", ["labgrid:", "labgrid:orin", "labgrid:board=", "labgrid:=orin"])
def test_a_malformed_selector_says_the_expected_form(selector: str) -> None:
    with pytest.raises(UsageError, match=r"labgrid:KEY=VALUE|at least one tag"):
        parse_labgrid_selector(selector, source="exp.yaml")


def test_a_tag_selector_takes_everything_but_the_place_from_the_farm(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, lab=FARM, local="platform: linux\ntransport: local\n")
    (target,) = select_targets(["labgrid:board=orin"], inventory)
    assert target.labgrid is not None and target.labgrid.place is None
    assert target.labgrid.filters == {"board": "orin"} and target.labgrid.address == "lab.example:20408"
    assert target.transport_kind == "ssh" and target.transport_options["key"] == "/keys/id_lab"
    assert target.workdir == "/data/harness" and "board=orin" in target.tags
    assert target.selector == "labgrid:board=orin"


def test_without_a_farm_the_coordinator_is_lg_coordinator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LG_COORDINATOR", raising=False)
    (target,) = select_targets(["labgrid:board=orin"], {})
    assert target.labgrid is not None and target.labgrid.address == DEFAULT_COORDINATOR
    monkeypatch.setenv("LG_COORDINATOR", "10.0.0.5:20408")
    assert target.labgrid.address == "10.0.0.5:20408"


def test_several_farms_must_be_named(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, lab=FARM, lab2=FARM.replace("lab.example", "lab2.example"))
    with pytest.raises(UsageError, match=r"several farms \(lab, lab2\).*labgrid:board=orin@lab"):
        select_targets(["labgrid:board=orin"], inventory, source="exp.yaml")
    (target,) = select_targets(["labgrid:board=orin@lab2"], inventory)
    assert target.labgrid is not None and target.labgrid.address == "lab2.example:20408"
    with pytest.raises(UsageError, match="no farm target 'nope'"):
        select_targets(["labgrid:board=orin@nope"], inventory)


def test_a_place_target_file_needs_no_address_and_filters_by_name(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, orin=FARM.replace('"}', '", place: orin-01}'))
    labgrid = inventory["orin"].labgrid
    assert labgrid is not None and labgrid.filters == {"name": "orin-01"}


def test_a_labgrid_target_over_another_transport_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text('labgrid: {place: orin-01}\ntransport: local\n')
    with pytest.raises(UsageError, match=r"bad.yaml:1: labgrid: a labgrid place is reached over ssh"):
        load_targets(tmp_path)


def test_a_resumed_set_pins_the_place_it_ran_on(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, lab=FARM)
    lease = {"backend": "labgrid", "coordinator": "lab.example:20408", "place": "orin-07",
             "selector": "labgrid:board=orin"}
    (target,) = targets_of_set([{"name": "orin-07", "lease": lease}], inventory)
    assert target.labgrid is not None and target.labgrid.place == "orin-07"
    assert target.labgrid.filters == {"name": "orin-07"} and target.selector == "labgrid:board=orin"


class _Reservation:
    def __init__(self, token: str, owner: str, state: str, place: str | None = None) -> None:
        from types import SimpleNamespace

        self.token, self.owner, self.state = token, owner, SimpleNamespace(name=state)
        self.allocations = {"main": [place]} if place else {}


class _FakeCoordinator:
    """What labgrid's coordinator answers, without one: a place held by someone, a queue that never moves."""

    address, identity = "lab:20408", "ctl/alice"

    def __init__(self, holder: str | None, free_after_polls: int | None = None) -> None:
        from types import SimpleNamespace

        self.place = SimpleNamespace(tags={"board": "orin"}, acquired=holder, reservation=None)
        self.free_after, self.polls, self.cancelled, self.released, self.acquired = free_after_polls, 0, [], [], []

    def places(self) -> dict:
        return {"orin-01": self.place}

    def reservations(self) -> list:
        return [_Reservation("OLD", self.identity, "acquired", "orin-01")] if self.place.acquired else []

    def reserve(self, filters: dict) -> _Reservation:
        return _Reservation("TOK", self.identity, "waiting" if self.place.acquired else "allocated", "orin-01")

    def poll(self, token: str) -> _Reservation:
        self.polls += 1
        free = self.free_after is not None and self.polls >= self.free_after
        return _Reservation(token, self.identity, "allocated" if free else "waiting", "orin-01")

    def cancel(self, token: str) -> None:
        self.cancelled.append(token)

    def acquire(self, place: str) -> None:
        self.acquired.append(place)

    def release(self, place: str, *, from_user: str | None = None) -> None:
        self.released.append((place, from_user))
        self.place.acquired = None


def _orin_target(tmp_path: Path):  # noqa: ANN202
    (target,) = select_targets(["labgrid:board=orin"], _inventory(tmp_path, lab=FARM))
    return target


def test_another_users_lock_without_wait_is_exit_2_naming_the_holder(tmp_path: Path) -> None:
    from harness.boards.labgrid_lease import PlaceBusy, lock

    coordinator = _FakeCoordinator(holder="lab-pc/carol")
    with pytest.raises(PlaceBusy, match=r"orin-01 locked by lab-pc/carol; not waiting \(--lease-wait 0\)") as err:
        lock(coordinator, _orin_target(tmp_path), 0, None)  # type: ignore[arg-type]
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    assert coordinator.cancelled == ["TOK"] and not coordinator.acquired  # left the queue, broke nothing


def test_a_queued_campaign_says_it_waits_then_locks_what_it_is_allocated(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.boards import labgrid_lease

    monkeypatch.setattr(labgrid_lease, "POLL_S", 0.0)
    monkeypatch.setattr(labgrid_lease, "KEEPALIVE_S", 0.0)
    coordinator, told = _FakeCoordinator(holder="lab-pc/carol", free_after_polls=3), []
    place, token = labgrid_lease.lock(coordinator, _orin_target(tmp_path), 60, told.append)  # type: ignore[arg-type]
    assert (place, token) == ("orin-01", "TOK") and coordinator.acquired == ["orin-01"]
    assert told == ["labgrid:board=orin: waiting up to 60 s in the labgrid queue for orin-01 locked by lab-pc/carol"]


def test_resume_takes_back_only_a_place_this_user_and_host_hold() -> None:
    from harness.boards.labgrid_lease import take_back

    theirs = _FakeCoordinator(holder="lab-pc/carol")
    take_back(theirs, "orin-01", None)  # type: ignore[arg-type]
    assert not theirs.released and not theirs.cancelled
    ours, told = _FakeCoordinator(holder="ctl/alice"), []
    take_back(ours, "orin-01", told.append)  # type: ignore[arg-type]
    assert ours.released == [("orin-01", "ctl/alice")] and ours.cancelled == ["OLD"]  # release-from, not a kick
    assert "took back the labgrid place still locked by ctl/alice" in told[0]

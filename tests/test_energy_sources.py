"""Power sources read from sysfs on the target, as the runner reads them: power_supply trees of each vendor's sign
and unit convention. The trees are fakes under a tmp dir (no battery here); the files and their meaning are the
kernel's ABI (Documentation/ABI/testing/sysfs-class-power)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis import energy
from harness.parsers import parse
from runner import sysroot
from runner.collectors import snapshots

S = 1_000_000_000


def supply(root: Path, name: str, **files: str) -> None:
    folder = root / "sys" / "class" / "power_supply" / name
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in files.items():
        (folder / key).write_text(value + "\n")


def capture(root: Path, monkeypatch: pytest.MonkeyPatch, seconds: int = 2) -> bytes:
    """The power collector's file: a snapshot per second of the same tree, in the runner's format."""
    monkeypatch.setattr(sysroot, "ROOT", str(root))
    header = b"# harness-snapshots v1 kind=power period_ms=1000\n"
    return header + b"".join(b"@ %d %d.0\n" % (i * S, i) + snapshots._snapshot_power().encode()
                             for i in range(seconds))


# 512 mA at 3.851 V: 0.512 x 3.851 = 1.971712 W, the same board draw written three ways
CONVENTIONS = {
    "abi: negative while discharging, uA and uV": ("-512000", "3851000"),
    "vendor: positive while discharging (uA, uV)": ("512000", "3851000"),
    "vendor: mA and mV": ("512", "3851"),
}


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_each_sign_and_unit_convention_gives_the_same_draw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           convention: str) -> None:
    current, voltage = CONVENTIONS[convention]
    supply(tmp_path, "battery", current_now=current, voltage_now=voltage, type="Battery", status="Discharging")
    supply(tmp_path, "usb", current_now="0", type="USB", status="-")  # a charger port reads 0 A on battery
    rows = parse("power", capture(tmp_path, monkeypatch))
    assert rows[0]["battery_current_ua"] in (-512000, 512000) and rows[0]["battery_voltage_uv"] == 3851000
    assert rows[0]["power_battery_discharge_mw"] == pytest.approx(1971.712)
    series = energy.power_series([{**r, "source": "power"} for r in rows], "power")
    assert series is not None and series.rail == "BATTERY_DISCHARGE"
    # constant 1971.712 mW over 1 s: 1.971712 J
    assert energy.window_energy(series, 0, S) == pytest.approx(1.971712)


def test_a_charging_battery_is_not_the_boards_draw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # on its charger the battery takes 0.8 A: |I x V| is kept per supply, but it is no energy of the run
    supply(tmp_path, "battery", current_now="800000", voltage_now="4100000", type="Battery", status="Charging")
    rows = parse("power", capture(tmp_path, monkeypatch))
    assert rows[0]["power_battery_mw"] == pytest.approx(3280.0) and rows[0]["battery_discharging"] == 0
    assert rows[0]["power_battery_discharge_mw"] is None
    assert energy.power_series([{**r, "source": "power"} for r in rows], "power") is None
    # 'Not charging' (plugged in, full): one word in the capture, still not a discharge
    supply(tmp_path, "battery", status="Not charging")
    rows = parse("power", capture(tmp_path, monkeypatch))
    assert rows[0]["power_battery_discharge_mw"] is None


def test_an_older_capture_without_type_and_status_has_no_discharge_column() -> None:
    # the runner's lines before type and status were added: per-supply power only, no energy (no way to tell a
    # charger's current from the board's draw)
    rows = parse("power", b"@ 1000 1.0\nbattery -512000 3851000\nusb 0 -\n")
    assert rows[0]["power_battery_mw"] == pytest.approx(1971.712)
    assert "power_battery_discharge_mw" not in rows[0]

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


def rapl_zone(root: Path, zone: str, name: str, energy_uj: int, max_uj: int = 999) -> None:
    folder = root / "sys" / "class" / "powercap" / zone
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in (("name", name), ("energy_uj", str(energy_uj)), ("max_energy_range_uj", str(max_uj))):
        (folder / key).write_text(value + "\n")


def snapshot_file(kind: str, states: list[dict[str, int]], write: object, root: Path,
                  monkeypatch: pytest.MonkeyPatch) -> bytes:
    """The collector's file over several states of the tree, one second apart (``write(root, **state)``)."""
    monkeypatch.setattr(sysroot, "ROOT", str(root))
    out = b"# harness-snapshots v1 kind=%s period_ms=1000\n" % kind.encode()
    for i, state in enumerate(states):
        write(root, **state)  # type: ignore[operator]
        out += b"@ %d %d.0\n" % (i * S, i) + snapshots.SNAPSHOTS[kind]().encode()
    return out


def test_rapl_package_counter_unwrapped_across_its_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # package-0 reads 900, 100, 400 uJ at 0, 1, 2 s with max_energy_range_uj 999: 900 -> 100 wrapped once,
    # (999 - 900 + 1) + 100 = 200 uJ, then 300 uJ: 500 uJ in all. Its core subzone (intel-rapl:0:0, part of the
    # package) reads 9000 uJ more every second and is never added
    def write(root: Path, package: int, core: int) -> None:
        rapl_zone(root, "intel-rapl:0", "package-0", package)
        rapl_zone(root, "intel-rapl:0:0", "core", core, max_uj=10**9)

    text = snapshot_file("rapl", [{"package": 900, "core": 0}, {"package": 100, "core": 9000},
                                  {"package": 400, "core": 18000}], write, tmp_path, monkeypatch)
    rows = parse("rapl", text)
    assert [r["rapl_0_energy_uj"] for r in rows] == [900, 100, 400] and rows[0]["rapl_0_max_uj"] == 999
    assert rows[0]["rapl_0_0_name"] == "core"
    series = energy.board_series({"rapl": rows})
    assert series is not None and (series.source, series.rail) == ("rapl", "package-0")
    assert energy.window_energy(series, 0, 2 * S) == pytest.approx(500e-6)
    assert energy.window_energy(series, 0, S) == pytest.approx(200e-6)


def test_rapl_psys_is_the_platform_total_where_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a laptop's psys zone (intel-rapl:1) covers the package: it is the rail; 5000 -> 12000 uJ over 1 s = 7 mJ
    def write(root: Path, package: int, psys: int) -> None:
        rapl_zone(root, "intel-rapl:0", "package-0", package, max_uj=10**9)
        rapl_zone(root, "intel-rapl:1", "psys", psys, max_uj=10**9)

    text = snapshot_file("rapl", [{"package": 1000, "psys": 5000}, {"package": 4000, "psys": 12000}], write,
                         tmp_path, monkeypatch)
    series = energy.board_series({"rapl": parse("rapl", text)})
    assert series is not None and series.rail == "psys"
    assert energy.window_energy(series, 0, S) == pytest.approx(7e-3)


def test_hwmon_power_channels_in_microwatts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # hwmon0 (ina226, labelled VBUS) reads 4200000 then 4800000 uW: (4.2 + 4.8) / 2 W x 1 s = 4.5 J
    def write(root: Path, uw: int) -> None:
        chip = root / "sys" / "class" / "hwmon" / "hwmon0"
        chip.mkdir(parents=True, exist_ok=True)
        (chip / "name").write_text("ina226\n")
        (chip / "power1_input").write_text(f"{uw}\n")
        (chip / "power1_label").write_text("VBUS\n")

    rows = parse("hwmon", snapshot_file("hwmon", [{"uw": 4_200_000}, {"uw": 4_800_000}], write, tmp_path,
                                        monkeypatch))
    assert rows[0]["power_ina226_vbus_mw"] == 4200.0
    series = energy.board_series({"hwmon": [{**r, "source": "hwmon"} for r in rows]})
    assert series is not None and series.rail == "INA226_VBUS"
    assert energy.window_energy(series, 0, S) == pytest.approx(4.5)


def test_no_sensor_is_one_line_per_collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an empty tree (this machine has neither powercap nor hwmon power): each collector says why in one line
    from runner.collectors.availability import unavailable_reason

    monkeypatch.setattr(sysroot, "ROOT", str(tmp_path))
    for kind in ("rapl", "hwmon", "power"):
        reason = unavailable_reason(kind)
        assert reason and "\n" not in reason
    assert unavailable_reason("rapl").startswith("no power sensor")  # type: ignore[union-attr]
    assert unavailable_reason("hwmon").startswith("no power sensor")  # type: ignore[union-attr]
    assert energy.board_series({"thermal": [{"t_ns": 0}, {"t_ns": S}]}) is None


def test_the_idle_step_sleeps_with_the_collectors_on_and_says_when_there_is_no_sensor(tmp_path: Path) -> None:
    # the runner, started as the controller starts it, on an idle step of 0.3 s with the rapl and hwmon collectors
    # optional: where the machine has neither (this VM), each is skipped with its one line, and the run is ok
    import json
    import subprocess
    import sys

    from runner.contract import CONTRACT_VERSION
    from tests.helpers import REPO

    run_dir = tmp_path / "runs" / "set" / "r1"
    run_dir.mkdir(parents=True)
    spec = {"contract": CONTRACT_VERSION, "run_id": "r1", "set_id": "energy-idle", "cache": "none", "cache_files": [],
            "block_device": None, "emulate": None, "run_dir": str(run_dir), "step": {"kind": "idle", "seconds": 0.3},
            "collectors": [{"kind": "rapl", "period_ms": 100, "optional": True},
                           {"kind": "hwmon", "period_ms": 100, "optional": True}]}
    (run_dir / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "runner", "run", str(run_dir / "spec.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    record = json.loads((run_dir / "run.json").read_text())
    assert done.returncode == 0 and record["status"] == "ok", done.stderr + str(record.get("error"))
    started, ended = record["step_started"]["mono_ns"], record["step_ended"]["mono_ns"]
    assert ended - started >= 300_000_000  # it slept the whole window
    for kind in ("rapl", "hwmon"):
        skipped = [line for line in record.get("collector_errors", []) if line.startswith(f"{kind} skipped")]
        if (run_dir / f"{kind}.txt").exists():
            assert not skipped  # a machine with the sensor: sampled, and nothing said
        else:
            assert len(skipped) == 1 and ("no power sensor" in skipped[0] or "root" in skipped[0])

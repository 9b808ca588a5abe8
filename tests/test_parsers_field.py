"""The board parsers against captures from the field (issue 21): nvpmodel ``-q`` / ``-q --verbose`` on every
board tried, bare PSI files (/proc/pressure/*, cgroup v2 ``*.pressure``) across kernels, and the jetson_clocks and
tegrastats captures added with them. Sources in each folder's SOURCE.md.

Every expected value below was read off the capture by eye, not computed by the code under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.parsers import ParseError, parse
from harness.parsers.snapshots import psi_resource_of_name
from tests.helpers import DATA, cli_in_process

NVPM = DATA / "nvpmodel"
PSI = DATA / "psi"

# --- nvpmodel ---------------------------------------------------------------------------------------------------

# file: (mode name, id, fan mode, (default name, id), messages kept, number of PARAM lines)
NVPMODEL: dict[str, tuple[str, int, str | None, tuple[str | None, int | None], int, int]] = {
    "q-15w.txt": ("15W", 0, None, (None, None), 0, 0),
    "q-maxn-super.txt": ("MAXN_SUPER", 2, None, (None, None), 0, 0),
    "q-5w-nano-nvpm-error.txt": ("5W", 1, None, (None, None), 2, 0),
    "q-thor-maxn-jp7.txt": ("MAXN", 0, None, (None, None), 0, 0),
    "q-orin-nano-15w-snap.txt": ("15W", 0, None, (None, None), 0, 0),
    "q-agx-orin-j501-40w-jp6.2.txt": ("MODE_40W", 3, None, (None, None), 0, 0),
    "q-agx-xavier-fan-cool-maxn.txt": ("MAXN", 0, "cool", (None, None), 0, 0),
    "q-agx-xavier-fan-cool-30w-4core.txt": ("MODE_30W_4CORE", 5, "cool", (None, None), 0, 0),
    "q-agx-xavier-15w-desktop-errors-r32.6.1.txt": ("MODE_15W_DESKTOP", 7, "quiet", (None, None), 14, 0),
    "q-xavier-nx-15w-6core.txt": ("MODE_15W_6CORE", 2, None, (None, None), 0, 0),
    "q-xavier-nx-fan-cool-15w-2core.txt": ("MODE_15W_2CORE", 0, "cool", (None, None), 0, 0),
    "q-verbose-nano-maxn-jp4.txt": ("MAXN", 0, None, (None, None), 1, 12),
    "q-verbose-tx2-maxp-core-arm-jp4.2.txt": ("MAXP_CORE_ARM", 3, None, (None, None), 0, 10),
    "q-verbose-xavier-nx-15w-6core-jp4.4.txt": ("MODE_15W_6CORE", 2, "quiet", (None, None), 0, 23),
    "q-verbose-tx2-maxn-r32.3.1.txt": ("MAXN", 0, None, (None, None), 0, 14),
    "q-verbose-tx2-maxn-jp3-old-format.txt": ("MAXN", 0, None, ("MAXP_CORE_ARM", 3), 0, 0),
    "q-verbose-orin-nano-super-25w-r36.4.3.txt": ("25W", 1, None, (None, None), 0, 25),
    "q-verbose-orin-nx-40w-r36.5-cut.txt": ("40W", 4, None, (None, None), 0, 37),
}

# file: the GPU max_freq PARAM line's (REAL_VAL, CONF_VAL), as printed
NVPM_GPU_MAX = {
    "q-verbose-nano-maxn-jp4.txt": ("921600000", "2147483647"),
    "q-verbose-tx2-maxp-core-arm-jp4.2.txt": ("1134750000", "1120000000"),
    "q-verbose-xavier-nx-15w-6core-jp4.4.txt": ("1109250000", "1109250000"),
    "q-verbose-tx2-maxn-r32.3.1.txt": ("1300500000", "2147483647"),
    "q-verbose-orin-nano-super-25w-r36.4.3.txt": ("918000000", "918000000"),
    "q-verbose-orin-nx-40w-r36.5-cut.txt": ("1173000000", "1173000000"),
}


def test_every_nvpmodel_capture_is_checked() -> None:
    assert sorted(p.name for p in NVPM.glob("*.txt")) == sorted(NVPMODEL)


@pytest.mark.parametrize("name", sorted(NVPMODEL))
def test_nvpmodel_capture(name: str) -> None:
    mode, mode_id, fan, default, messages, params = NVPMODEL[name]
    [row] = parse("nvpmodel", (NVPM / name).read_bytes())
    assert (row["mode_name"], row["mode_id"], row["fan_mode"]) == (mode, mode_id, fan)
    assert (row["default_mode_name"], row["default_mode_id"]) == default
    assert len(row["messages"]) == messages and all(m.startswith(("NVPM WARN", "NVPM ERROR")) for m in row["messages"])
    assert len(row["params"]) == params
    if name in NVPM_GPU_MAX:
        [gpu] = [p for p in row["params"] if (p["param"], p["arg"]) == ("GPU", "MAX_FREQ")]
        assert (gpu["real"], gpu["conf"]) == NVPM_GPU_MAX[name]
        assert gpu["path"].endswith("max_freq")


def test_nvpmodel_verbose_keeps_warnings_and_each_param_line() -> None:
    [nano] = parse("nvpmodel", (NVPM / "q-verbose-nano-maxn-jp4.txt").read_bytes())
    assert nano["messages"] == ["NVPM WARN: fan mode is not set!"]
    assert nano["params"][0] == {"param": "CPU_ONLINE", "arg": "CORE_0", "path": "/sys/devices/system/cpu/cpu0/online",
                                 "real": "1", "conf": "1"}
    assert nano["params"][6] == {"param": "GPU_POWER_CONTROL_ENABLE", "arg": "GPU_PWR_CNTL_EN",
                                 "path": "/sys/devices/gpu.0/power/control", "real": "auto", "conf": "on"}
    [tx2] = parse("nvpmodel", (NVPM / "q-verbose-tx2-maxp-core-arm-jp4.2.txt").read_bytes())
    online = {p["arg"]: p["real"] for p in tx2["params"] if p["param"] == "CPU_ONLINE"}
    assert online == {"CORE_1": "0", "CORE_2": "0", "CORE_3": "1", "CORE_4": "1", "CORE_5": "1"}  # Denver off
    [nx] = parse("nvpmodel", (NVPM / "q-verbose-orin-nx-40w-r36.5-cut.txt").read_bytes())
    [emc] = [p for p in nx["params"] if p["param"] == "EMC"]
    assert (emc["real"], emc["conf"]) == ("3199000000", "9223372036854775807")
    [cpu7] = [p for p in nx["params"] if (p["param"], p["arg"]) == ("CPU_A78_7", "MAX_FREQ")]
    assert cpu7["real"] == "1497600"


def test_nvpmodel_errors_kept_in_order() -> None:
    [row] = parse("nvpmodel", (NVPM / "q-agx-xavier-15w-desktop-errors-r32.6.1.txt").read_bytes())
    assert row["messages"][0] == "NVPM ERROR: Error opening /sys/kernel/nvpmodel_emc_cap/emc_iso_cap: 13"
    assert row["messages"][-1] == "NVPM ERROR: Fan failed to set mode:quiet"


def test_nvpmodel_unknown_line_names_its_number() -> None:
    text = (NVPM / "q-thor-maxn-jp7.txt").read_bytes() + b"exit=0\n"
    with pytest.raises(ParseError, match=r"^line 3: not a line of nvpmodel -q output: 'exit=0'"):
        parse("nvpmodel", text)
    with pytest.raises(ParseError, match="^line 4: a second power mode line"):
        parse("nvpmodel", b"NV Power Mode: MAXN\n0\nNVPM VERB: ok\nNVPM VERB: Current mode: NV Power Mode: 15W\n")


def test_harness_parse_reads_nvpmodel_verbose() -> None:
    done = cli_in_process("parse", "nvpmodel", str(NVPM / "q-verbose-orin-nano-super-25w-r36.4.3.txt"))
    assert done.returncode == 0 and '"mode_name": "25W"' in done.stdout and '"mode_id": 1' in done.stdout


# --- PSI --------------------------------------------------------------------------------------------------------

# file: (resource, {kind: (avg10, avg60, avg300, total)})
PSI_CAPTURES: dict[str, tuple[str, dict[str, tuple[float, float, float, int]]]] = {
    "proc-pressure-cpu-flatcar-2020.txt": ("cpu", {"some": (0.13, 0.68, 0.28, 1195993)}),
    "proc-pressure-io-flatcar-2020.txt": ("io", {"some": (0.00, 1.11, 0.68, 2828208),
                                                 "full": (0.00, 0.91, 0.56, 2334731)}),
    "proc-pressure-memory-flatcar-2020.txt": ("memory", {"some": (0.0, 0.0, 0.0, 0), "full": (0.0, 0.0, 0.0, 0)}),
    "proc-pressure-irq-htop-2023.txt": ("irq", {"full": (0.00, 0.00, 0.00, 100648410)}),
    "proc-pressure-cpu-6.18-vm.txt": ("cpu", {"some": (98.92, 78.61, 27.73, 99577358),
                                              "full": (0.0, 0.0, 0.0, 0)}),
    "proc-pressure-io-6.18-vm.txt": ("io", {"some": (7.20, 2.35, 0.87, 5151107),
                                            "full": (0.00, 0.03, 0.25, 2547783)}),
    "proc-pressure-memory-6.18-vm.txt": ("memory", {"some": (0.0, 0.0, 0.0, 0), "full": (0.0, 0.0, 0.0, 0)}),
    "cgroup2-root-cpu.pressure-6.18-vm.txt": ("cpu", {"some": (98.92, 78.61, 27.73, 99577358),
                                                      "full": (0.0, 0.0, 0.0, 0)}),
    "cgroup2-root-io.pressure-6.18-vm.txt": ("io", {"some": (7.20, 2.35, 0.87, 5153297),
                                                    "full": (0.00, 0.03, 0.25, 2547783)}),
    "cgroup2-root-memory.pressure-6.18-vm.txt": ("memory", {"some": (0.0, 0.0, 0.0, 0),
                                                            "full": (0.0, 0.0, 0.0, 0)}),
    "cgroup2-unified-root-cpu.pressure-ubuntu20.04.txt": ("cpu", {"some": (0.0, 0.0, 0.0, 2501067303)}),
    "cgroup2-unified-root-io.pressure-ubuntu20.04.txt": ("io", {"some": (0.0, 0.0, 0.0, 299044042),
                                                                "full": (0.0, 0.0, 0.0, 271257559)}),
    "cgroup2-unified-root-memory.pressure-ubuntu20.04.txt": ("memory", {"some": (0.0, 0.0, 0.0, 298215),
                                                                        "full": (0.0, 0.0, 0.0, 229843)}),
    "cgroup2-child-cpu.pressure-gce.txt": ("cpu", {"some": (0.0, 0.0, 0.0, 0)}),
    "cgroup2-child-io.pressure-gce.txt": ("io", {"some": (0.0, 0.0, 0.0, 0), "full": (0.0, 0.0, 0.0, 0)}),
    "cgroup2-child-memory.pressure-gce.txt": ("memory", {"some": (0.0, 0.0, 0.0, 0), "full": (0.0, 0.0, 0.0, 0)}),
}


def _psi_values(row: dict[str, Any]) -> dict[str, tuple[float, float, float, int]]:
    """The row's values grouped back as '<res> <kind>' -> (avg10, avg60, avg300, total)."""
    stems = {key[: -len("_total_us")] for key in row if key.endswith("_total_us") and not key.startswith("d_")}
    return {stem.replace("_", " "): (row[f"{stem}_avg10_pct"], row[f"{stem}_avg60_pct"], row[f"{stem}_avg300_pct"],
                                     row[f"{stem}_total_us"]) for stem in stems}


def test_every_psi_capture_is_checked() -> None:
    assert sorted(p.name for p in PSI.glob("*.txt")) == sorted(PSI_CAPTURES)


@pytest.mark.parametrize("name", sorted(PSI_CAPTURES))
def test_psi_capture_read_as_the_resource_its_kind_names(name: str) -> None:
    resource, lines = PSI_CAPTURES[name]
    [row] = parse(f"psi-{resource}", (PSI / name).read_bytes())
    assert (row["t_ns"], row["wall_s"]) == (None, None)
    assert _psi_values(row) == {f"{resource} {kind}": values for kind, values in lines.items()}


@pytest.mark.parametrize("name", sorted(PSI_CAPTURES))
def test_harness_parse_psi_takes_the_resource_from_the_file_name(name: str) -> None:
    resource, lines = PSI_CAPTURES[name]
    assert psi_resource_of_name(name) == resource
    done = cli_in_process("parse", "psi", str(PSI / name), "--format", "csv")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split(",")
    assert {f"{resource}_{kind}_total_us" for kind in lines} <= set(header)
    assert not [col for col in header if col.endswith("_total_us") and not col.startswith(resource + "_")]


def test_a_bare_capture_without_a_resource_is_an_error_not_memory(tmp_path: Path) -> None:
    io = (PSI / "proc-pressure-io-flatcar-2020.txt").read_bytes()
    with pytest.raises(ParseError, match=r"^line 1: a bare pressure line .* parse it as psi-cpu, psi-io"):
        parse("psi", io)
    unnamed = tmp_path / "capture.txt"  # a name that says no resource
    unnamed.write_bytes(io)
    done = cli_in_process("parse", "psi", str(unnamed))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "capture.txt: line 1: a bare pressure line" in done.stderr
    done = cli_in_process("parse", "psi-io", str(unnamed))
    assert done.returncode == 0 and '"io_full_total_us": 2334731' in done.stdout


def test_psi_kind_cross_checks_the_capture() -> None:
    cpu = (PSI / "proc-pressure-cpu-6.18-vm.txt").read_bytes()
    with pytest.raises(ParseError, match="^line 1: a 'some' line in irq pressure"):
        parse("psi-irq", cpu)  # /proc/pressure/irq has only a 'full' line
    with pytest.raises(ParseError, match="^line 3: a second 'cpu some' line in one snapshot"):
        parse("psi-cpu", cpu + cpu)  # cat of two files run together
    with pytest.raises(ParseError, match="^line 1: the line says memory pressure but the capture is read as psi-io"):
        parse("psi-io", b"memory some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_the_harness_snapshots_still_carry_their_resource() -> None:
    text = b"# harness-snapshots v1 kind=psi period_ms=500\n@ 1000000000 1.5\n" + b"".join(
        b"%s %s" % (res, line) for res, name in ((b"io", "proc-pressure-io-6.18-vm.txt"),
                                                 (b"cpu", "proc-pressure-cpu-flatcar-2020.txt"))
        for line in (PSI / name).read_bytes().splitlines(keepends=True))
    [row] = parse("psi", text)
    assert _psi_values(row) == {"io some": (7.20, 2.35, 0.87, 5151107), "io full": (0.00, 0.03, 0.25, 2547783),
                                "cpu some": (0.13, 0.68, 0.28, 1195993)}
    assert row["t_ns"] == 1_000_000_000


@pytest.mark.parametrize(("name", "resource"), [
    ("/proc/pressure/irq", "irq"), ("/sys/fs/cgroup/system.slice/io.pressure", "io"), ("memory.pressure", "memory"),
    ("psi.txt", None), ("cpu.txt", None), ("pressure-io-vs-cpu.txt", None),
])
def test_psi_resource_of_name(name: str, resource: str | None) -> None:
    assert psi_resource_of_name(name) == resource


# --- jetson_clocks --show ---------------------------------------------------------------------------------------

JETSON = DATA / "jetson"
# name: (soc, machine, online per core, governor, (min, max) kHz of every core, current kHz per core,
#        GPU (min, max, cur) Hz, active TPCs, EMC (min, max, cur) Hz, FreqOverride, power mode, cpu_max_khz)
T, F, N = True, False, None
JETSON_CLOCKS: dict[str, tuple[Any, ...]] = {
    "agx-orin-jp5": ("tegra234", "Jetson AGX Orin", [T] * 12, "schedutil", (729600, 2201600),
                     [2201600, 2201600, 2201600, 1190400, 2201600, 2201600, 2188800, 2112000, 2201600, 1190400,
                      1113600, 1113600],
                     (306000000, 1300500000, 306000000), N, (204000000, 3199000000, 2133000000), F, "MAXN", 2201600),
    "tx1-l4t28": ("tegra210", "jetson_tx1", [N] * 4, "interactive", (1734000, 1734000), [1734000] * 4,
                  (998400000, 998400000, 998400000), N, (12750000, 1600000000, 1600000000), T, N, 1734000),
    "jetson-nano-5w": ("tegra210", "NVIDIA Jetson Nano Developer Kit", [T, T, F, F], "schedutil", (921600, 921600),
                       [921600] * 4, (614400000, 614400000, 614400000), N, (204000000, 1600000000, 1600000000), T,
                       "5W", 921600),
    "orin-nano-super-25w-jp7": ("tegra234", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super",
                                [N] * 6, "schedutil", (729600, 1344000),
                                [960000, 960000, 1344000, 1344000, 1344000, 1267200],
                                (306000000, 918000000, 306000000), 4, (204000000, 3199000000, 665600000), N, "25W",
                                1344000),
    "nano-maxn-default": ("tegra210", "NVIDIA Jetson Nano Developer Kit", [T] * 4, "schedutil", (102000, 1428000),
                          [1036800, 921600, 1132800, 1428000], (76800000, 921600000, 230400000), N,
                          (204000000, 1600000000, 1600000000), F, "MAXN", 1428000),
    "nano-maxn-locked": ("tegra210", "NVIDIA Jetson Nano Developer Kit", [T] * 4, "schedutil", (1428000, 1428000),
                         [1428000] * 4, (921600000, 921600000, 921600000), N, (204000000, 1600000000, 1600000000), T,
                         "MAXN", 1428000),
    "nano-machine-jetson-nano": ("tegra210", "jetson-nano", [T] * 4, "schedutil", (102000, 1428000), [1428000] * 4,
                                 (76800000, 921600000, 153600000), N, (204000000, 1600000000, 1600000000), F, "MAXN",
                                 1428000),
    "nano-5w-two-cores": ("tegra210", "NVIDIA Jetson Nano Developer Kit", [T, T, F, F], "schedutil",
                          (921600, 921600), [921600] * 4, (76800000, 614400000, 460800000), N,
                          (204000000, 1600000000, 1600000000), F, "5W", 921600),
    "orin-nano-15w-snap": ("tegra234", "NVIDIA Jetson Orin Nano Developer Kit", [T] * 6, "ondemand",
                           (729600, 1510400), [960000, 729600, 729600, 960000, 729600, 729600],
                           (306000000, 624750000, 306000000), 4, (204000000, 2133000000, 665600000), F, N, 1510400),
    "orin-nano-super-25w-r36.4.3": ("tegra234", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super",
                                    [T] * 6, "schedutil", (729600, 1344000),
                                    [729600, 729600, 1190400, 729600, 1190400, 1190400],
                                    (306000000, 918000000, 306000000), 4, (204000000, 3199000000, 2133000000), F,
                                    "25W", 1344000),
}


def test_every_jetson_clocks_capture_is_checked() -> None:
    names = sorted(p.name.removeprefix("jetson-clocks-show-").removesuffix(".txt")
                   for p in JETSON.glob("jetson-clocks-show-*.txt"))
    assert names == sorted(JETSON_CLOCKS)


@pytest.mark.parametrize("name", sorted(JETSON_CLOCKS))
def test_jetson_clocks_capture(name: str) -> None:
    soc, machine, online, governor, (low, high), cur, gpu, tpcs, emc, override, mode, cpu_max = JETSON_CLOCKS[name]
    [row] = parse("jetson-clocks", (JETSON / f"jetson-clocks-show-{name}.txt").read_bytes())
    assert (row["soc_family"], row["machine"]) == (soc, machine)
    assert [c["cpu"] for c in row["cpus"]] == list(range(len(online)))
    assert [c["online"] for c in row["cpus"]] == online
    assert {c["governor"] for c in row["cpus"]} == {governor}
    assert {(c["min_khz"], c["max_khz"]) for c in row["cpus"]} == {(low, high)}
    assert [c["cur_khz"] for c in row["cpus"]] == cur
    assert (row["gpu_min_hz"], row["gpu_max_hz"], row["gpu_cur_hz"], row["gpu_active_tpcs"]) == (*gpu, tpcs)
    assert (row["emc_min_hz"], row["emc_max_hz"], row["emc_cur_hz"], row["emc_freq_override"]) == (*emc, override)
    assert (row["power_mode"], row["cpu_max_khz"]) == (mode, cpu_max)

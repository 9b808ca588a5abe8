"""The board parsers against captures from the field (issue 21): nvpmodel ``-q`` / ``-q --verbose`` on every
board tried, bare PSI files (/proc/pressure/*, cgroup v2 ``*.pressure``) across kernels, and the jetson_clocks and
tegrastats captures added with them. Sources in each folder's SOURCE.md.

Every expected value below was read off the capture by eye, not computed by the code under test.
"""

from __future__ import annotations

import pytest

from harness.parsers import ParseError, parse
from tests.helpers import DATA, cli_in_process

NVPM = DATA / "nvpmodel"

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

"""Jetson: facts read from a fake sysfs tree and fake tools replaying real captures; expectations
checked the way the seed author checked them by hand (mode name AND clock tables)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.boards.platforms import PLATFORMS
from harness.boards.platforms.jetson import enrich
from harness.parsers import ParseError, parse
from runner import sysroot
from runner.probes import jetson, linux
from tests import fakeboard as fb
from tests.helpers import FIXTURES, REPO, cli_in_process, python_or_skip

JETSON = fb.DATA / "jetson"


def _board(tmp_path: Path, **tree: object) -> tuple[Path, dict[str, str]]:
    root = fb.jetson_tree(tmp_path / "root", **tree)  # type: ignore[arg-type]
    bindir = fb.jetson_tools(tmp_path / "bin")
    return fb.target_dir(tmp_path, "orin", "jetson"), fb.jetson_env(root, bindir)


def _probe_json(targets: Path, env: dict[str, str], *expect: str) -> tuple[int, dict, str]:
    args = ["probe", "orin", "--targets-dir", str(targets), "--format", "json"]
    for item in expect:
        args += ["--expect", item]
    done = cli_in_process(*args, env=env, timeout=120)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def test_probe_reports_a_super_board_and_its_expectations_pass(tmp_path: Path) -> None:
    targets, env = _board(tmp_path)
    code, out, err = _probe_json(targets, env, "power_mode=MAXN_SUPER", "gui=off", "nvme_link={gts: 8, width: 4}",
                                 "mem_total_min=7G")
    assert code == 0, err
    facts = out["facts"]
    assert facts["platform_detected"] == "jetson"
    assert facts["l4t_release"] == "36.4.7"
    assert facts["board_model"] == "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super"
    assert (facts["power_mode_name"], facts["power_mode_id"]) == ("MAXN_SUPER", 2)
    assert facts["gpu_table_max_hz"] == 1_020_000_000 and facts["cpu_max_khz"] == 1_728_000
    assert facts["zram_bytes"] == 3901436 * 1024 and facts["gui"] == "off"
    assert facts["jetson_clocks"]["emc_max_hz"] == 3_199_000_000  # jetson_clocks --show, parsed
    assert all(r["ok"] for r in out["expectations"]), out["expectations"]


def test_maxn_super_name_with_a_non_super_gpu_table_fails_and_says_why(tmp_path: Path) -> None:
    targets, env = _board(tmp_path, gpu_table=fb.NON_SUPER_GPU_TABLE)
    code, out, err = _probe_json(targets, env, "power_mode=MAXN_SUPER")
    assert code == 1
    head = out["expectations"][0]
    assert head["name"] == "power_mode" and not head["ok"] and head["seen"] == "MAXN_SUPER"
    assert "nvpmodel says MAXN_SUPER but the GPU devfreq table tops out at 624.75 MHz" in head["message"]
    assert "Super clocks are not active" in head["message"]
    assert "624.75 MHz" in err and len(err.strip().splitlines()) == 1  # one line for the user


def test_cpu_cap_below_super_fails_even_when_the_gpu_table_is_super(tmp_path: Path) -> None:
    targets, env = _board(tmp_path, cpu_max_khz=1510400)
    code, out, _ = _probe_json(targets, env, "power_mode=MAXN_SUPER")
    assert code == 1
    failed = [r for r in out["expectations"] if not r["ok"]]
    assert [r["name"] for r in failed] == ["power_mode", "power_mode:cpu_max_khz"]
    assert "1510400 kHz" in failed[1]["message"]


def test_wrong_mode_name_fails(tmp_path: Path) -> None:
    root = fb.jetson_tree(tmp_path / "root")
    bindir = fb.jetson_tools(tmp_path / "bin", mode="15w")
    targets = fb.target_dir(tmp_path, "orin", "jetson")
    code, out, _ = _probe_json(targets, fb.jetson_env(root, bindir), "power_mode=MAXN_SUPER")
    assert code == 1
    assert out["expectations"][0]["message"] == "nvpmodel says 15W (id 0), expected MAXN_SUPER"


def test_gui_and_slow_nvme_link_are_failed_expectations(tmp_path: Path) -> None:
    targets, env = _board(tmp_path, default_target="graphical.target", gui_process=True, link=("5.0 GT/s PCIe", 2))
    code, out, _ = _probe_json(targets, env, "gui=off", "nvme_link={gts: 8, width: 4}")
    assert code == 1
    by_name = {r["name"]: r for r in out["expectations"]}
    assert not by_name["gui"]["ok"] and "graphical.target" in by_name["gui"]["message"]
    assert "gdm3" in by_name["gui"]["message"]
    assert not by_name["nvme_link"]["ok"] and by_name["nvme_link"]["seen"] == {"gts": 5.0, "width": 2}


def test_unknown_expectation_is_a_usage_error(tmp_path: Path) -> None:
    targets, env = _board(tmp_path)
    done = cli_in_process("probe", "orin", "--targets-dir", str(targets), "--expect", "power_mod=MAXN", env=env)
    assert done.returncode == 2
    assert "unknown expectation 'power_mod'" in done.stderr


@pytest.mark.parametrize("gpu_dir", jetson.GPU_DEVFREQ_DIRS[:4])
def test_gpu_devfreq_is_found_under_every_kernel_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        gpu_dir: str) -> None:
    fb.jetson_tree(tmp_path, gpu_dir=gpu_dir)
    monkeypatch.setattr(sysroot, "ROOT", str(tmp_path))
    found = jetson.gpu_devfreq()
    assert found["gpu_devfreq_path"] == gpu_dir
    assert found["gpu_available_hz"] == fb.SUPER_GPU_TABLE and found["gpu_table_max_hz"] == 1_020_000_000


def test_missing_gpu_devfreq_is_a_failed_gpu_expectation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysroot, "ROOT", str(tmp_path))
    facts = enrich(linux.linux_facts() | jetson.gpu_devfreq())
    [result] = PLATFORMS["jetson"].check({"gpu_max_hz": 1_020_000_000}, facts, None)
    assert not result.ok and "no GPU devfreq table readable" in result.message


def test_explicit_clock_requirements_override_the_known_board_table() -> None:
    facts = {"power_mode_name": "MAXN", "board_model": "Jetson AGX Orin", "gpu_table_max_hz": 1_300_500_000,
             "gpu_max_freq_hz": 1_300_500_000, "cpufreq": {"policy0": {"scaling_max_khz": 2_201_600}}}
    spec = {"name": "MAXN", "gpu_max_hz": 1_300_500_000, "cpu_max_khz": 2_201_600}
    assert all(r.ok for r in PLATFORMS["jetson"].check({"power_mode": spec}, facts, None))
    facts["cpufreq"]["policy0"]["scaling_max_khz"] = 1_958_400
    assert not PLATFORMS["jetson"].check({"power_mode": spec}, facts, None)[0].ok
    # an unknown board is checked by name only, and says so
    [only] = PLATFORMS["jetson"].check({"power_mode": "MAXN"}, facts, None)
    assert only.ok and "name checked only" in only.message


@pytest.mark.parametrize(("name", "machine", "cpus", "cpu_max", "gpu_max", "emc_max", "mode"), [
    ("orin-nano-super-25w-jp7", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", 6, 1344000,
     918000000, 3199000000, "25W"),
    ("agx-orin-jp5", "Jetson AGX Orin", 12, 2201600, 1300500000, 3199000000, "MAXN"),
    ("tx1-l4t28", "jetson_tx1", 4, 1734000, 998400000, 1600000000, None),
    ("jetson-nano-5w", "NVIDIA Jetson Nano Developer Kit", 4, 921600, 614400000, 1600000000, "5W"),
])
def test_jetson_clocks_show_parses_real_captures(name: str, machine: str, cpus: int, cpu_max: int, gpu_max: int,
                                                 emc_max: int, mode: str | None) -> None:
    [row] = parse("jetson-clocks", (JETSON / f"jetson-clocks-show-{name}.txt").read_bytes())
    assert row["machine"] == machine and len(row["cpus"]) == cpus
    assert (row["cpu_max_khz"], row["gpu_max_hz"], row["emc_max_hz"], row["power_mode"]) == \
        (cpu_max, gpu_max, emc_max, mode)
    assert [c["cpu"] for c in row["cpus"]] == sorted(c["cpu"] for c in row["cpus"])


def test_jetson_clocks_offline_cores_and_governor_typo() -> None:
    [nano] = parse("jetson-clocks", (JETSON / "jetson-clocks-show-jetson-nano-5w.txt").read_bytes())
    assert [c["online"] for c in nano["cpus"]] == [True, True, False, False]
    [tx1] = parse("jetson-clocks", (JETSON / "jetson-clocks-show-tx1-l4t28.txt").read_bytes())
    assert {c["governor"] for c in tx1["cpus"]} == {"interactive"}  # the tool printed "Gonvernor"


def test_jetson_clocks_rejects_other_output() -> None:
    with pytest.raises(ParseError, match="jetson_clocks --show"):
        parse("jetson-clocks", (FIXTURES / "nvpmodel" / "q-15w.txt").read_bytes())


def test_tegrastats_jetpack7_capture_parses() -> None:
    rows = parse("tegrastats", (JETSON / "tegrastats-orin-nano-super-jp7.log").read_bytes())
    assert len(rows) == 2
    assert rows[0]["ram_used_mb"] == 2850 and rows[0]["gpu_freq_mhz"] == 305
    assert rows[0]["temp_tj_c"] == 46.843 and rows[1]["power_vdd_in_mw"] == 3462


def test_the_runner_probe_runs_on_python_3_8(tmp_path: Path) -> None:
    """JetPack 5 boards ship Python 3.8: the target side must not use anything newer."""
    import subprocess

    py38 = str(python_or_skip("3.8"))
    root = fb.jetson_tree(tmp_path / "root")
    env = fb.jetson_env(root, fb.jetson_tools(tmp_path / "bin"))
    done = subprocess.run([py38, "-m", "runner", "probe"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, **env}, check=False)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["platform_detected"] == "jetson" and facts["gpu_table_max_hz"] == 1_020_000_000


def test_a_tag_probes_every_board_and_fails_if_one_does(tmp_path: Path) -> None:
    targets, env = _board(tmp_path, gpu_table=fb.NON_SUPER_GPU_TABLE)
    for name in ("orin-a", "orin-b"):
        (targets / f"{name}.yaml").write_text(f"platform: jetson\ntransport: local\ntags: [farm]\n"
                                              f"workdir: {tmp_path / name}\n")
    done = cli_in_process("probe", "tag:farm", "--targets-dir", str(targets), "--format", "json",
                   "--expect", "power_mode=MAXN_SUPER", env=env, timeout=120)
    assert done.returncode == 1
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["target"] for line in lines] == ["orin-a", "orin-b"]
    assert "2 target(s) failed an expectation; first: orin-a: power_mode" in done.stderr


def test_a_target_declared_jetson_that_is_not_one_says_so_first(tmp_path: Path) -> None:
    targets = fb.target_dir(tmp_path, "orin", "jetson")  # but this machine is a plain Linux VM
    done = cli_in_process("probe", "orin", "--targets-dir", str(targets), "--expect", "gui=off", timeout=120)
    assert done.returncode == 1
    assert "declared platform jetson but the runner found linux (no /etc/nv_tegra_release)" in done.stderr

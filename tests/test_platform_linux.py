"""Plain Linux targets (a PC or an ARM board with NVMe): the NVMe link expectation and the entry gates
work there as on a Jetson, read from a fake sysfs tree through HARNESS_SYSROOT."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.boards.platforms import PLATFORMS
from tests import fakeboard as fb
from tests.helpers import run_cli


def pc_tree(root: Path, *, link: tuple[str, int] = ("16.0 GT/s PCIe", 4), pkg_millic: int = 52000) -> Path:
    """A desktop: a PCIe 4.0 x4 NVMe drive, ACPI and x86 package thermal zones (no 'tj' zone)."""
    fb.write(root, "/proc/meminfo", "MemTotal:       32768000 kB\nMemAvailable:   20000000 kB\n")
    fb.write(root, "/sys/class/nvme/nvme0/model", "WD_BLACK SN850X 1000GB\n")
    fb.write(root, "/sys/class/nvme/nvme0/device/current_link_speed", link[0] + "\n")
    fb.write(root, "/sys/class/nvme/nvme0/device/current_link_width", f"{link[1]}\n")
    fb.write(root, "/sys/class/nvme/nvme0/device/max_link_speed", "16.0 GT/s PCIe\n")
    fb.write(root, "/sys/class/nvme/nvme0/device/max_link_width", "4\n")
    fb.write(root, "/sys/class/thermal/thermal_zone0/type", "acpitz\n")
    fb.write(root, "/sys/class/thermal/thermal_zone0/temp", "38000\n")
    fb.write(root, "/sys/class/thermal/thermal_zone1/type", "x86_pkg_temp\n")
    fb.write(root, "/sys/class/thermal/thermal_zone1/temp", f"{pkg_millic}\n")
    return root


def _env(root: Path) -> dict[str, str]:
    return {"HARNESS_SYSROOT": str(root), "PATH": os.environ["PATH"]}


def _probe(tmp_path: Path, *expect: str, **tree: object) -> tuple[int, dict, str]:
    root = pc_tree(tmp_path / "root", **tree)  # type: ignore[arg-type]
    targets = fb.target_dir(tmp_path, "pc", "linux")
    args = ["probe", "pc", "--targets-dir", str(targets), "--format", "json"]
    for item in expect:
        args += ["--expect", item]
    done = run_cli(*args, env=_env(root), timeout=120)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def test_linux_accepts_the_nvme_link_and_the_gates() -> None:
    for name in ("nvme_link", "tj_below_c", "tj_wait_timeout_s", "mem_available_min", "mem_wait_timeout_s"):
        assert name in PLATFORMS["linux"].expectations
    # gates are waited for before runs, not pass/fail checks; Jetson and Android inherit all of them
    facts = {"nvme_links": {"nvme0": {"gts": 16.0, "width": 4, "max_gts": 16.0, "max_width": 4}}}
    results = PLATFORMS["linux"].check({"nvme_link": {"gts": 8, "width": 4}, "tj_below_c": 60}, facts, None)
    assert [(r.name, r.ok) for r in results] == [("nvme_link", True)]
    assert "nvme_link" in PLATFORMS["jetson"].expectations and "tj_below_c" in PLATFORMS["android"].expectations


def test_probe_checks_the_nvme_link_of_a_pc(tmp_path: Path) -> None:
    code, out, err = _probe(tmp_path, "nvme_link={gts: 16, width: 4}", "tj_below_c=60")
    assert code == 0, err
    assert out["facts"]["nvme_links"]["nvme0"]["gts"] == 16.0
    assert [r["name"] for r in out["expectations"]] == ["nvme_link"]


def test_a_slow_nvme_link_on_a_pc_is_a_failed_expectation(tmp_path: Path) -> None:
    code, out, _ = _probe(tmp_path, "nvme_link={gts: 16, width: 4}", link=("8.0 GT/s PCIe", 2))
    assert code == 1
    [result] = out["expectations"]
    assert not result["ok"] and result["seen"] == {"gts": 8.0, "width": 2}
    assert "runs at 8.0 GT/s x2 (capable of 16.0 GT/s x4)" in result["message"]


@pytest.mark.slow
def test_a_linux_campaign_waits_on_the_hottest_zone_and_records_it(tmp_path: Path) -> None:
    root = pc_tree(tmp_path / "root")
    targets = fb.target_dir(tmp_path, "pc", "linux")
    exp = tmp_path / "pc.yaml"
    exp.write_text("""name: pc
targets: [pc]
files:
  data: {create: 4M}
cache: none
rounds: 1
expect: {nvme_link: {gts: 8, width: 4}, tj_below_c: 60, mem_available_min: 8G}
steps:
  - read: {file: data, pattern: seq}
""")
    results = tmp_path / "results"
    done = run_cli("run", str(exp), "--targets-dir", str(targets), "--results", str(results),
                   "--scratch", str(tmp_path / "scratch"), env=_env(root), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [set_dir] = results.iterdir()
    manifest = json.loads((set_dir / "manifest.json").read_text())
    [run] = manifest["runs"]
    assert run["status"] == "ok" and run["expectations_before"] == "ok" and run["expectations_after"] == "ok"
    # no junction zone on a PC: the hottest zone is the one waited on
    assert run["tj_gate"]["zone"] == "x86_pkg_temp" and run["tj_gate"]["start_c"] == 52.0
    assert run["mem_gate"]["start_bytes"] == 20000000 * 1024

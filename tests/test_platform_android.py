"""Android: getprop facts (real captures), storage and battery from a fake phone tree, expectations,
the temperature gate on the hottest zone, and the adb transport's errors without a phone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.boards.platforms import PLATFORMS
from harness.boards.platforms.android import enrich
from harness.parsers import ParseError, parse
from tests import fakeboard as fb
from tests.helpers import cli_in_process

ANDROID = fb.DATA / "android"


def _phone(tmp_path: Path, getprop: str = "getprop-redmi-m2101k9c-mt6893.txt") -> tuple[Path, dict[str, str]]:
    root = fb.android_tree(tmp_path / "root")
    bindir = fb.android_tools(tmp_path / "bin", getprop)
    return fb.target_dir(tmp_path, "phone", "android"), fb.jetson_env(root, bindir)


def test_probe_reads_a_phone(tmp_path: Path) -> None:
    targets, env = _phone(tmp_path)
    done = cli_in_process("probe", "phone", "--targets-dir", str(targets), "--format", "json",
                   "--expect", "android_release_min=12", "--expect", "model=M2101K9C",
                   "--expect", "mem_total_min=10G", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    facts = out["facts"]
    assert facts["platform_detected"] == "android"
    assert (facts["model"], facts["soc"], facts["android_release"], facts["android_sdk"]) == \
        ("M2101K9C", "MT6893", "13", "33")
    assert facts["block_devices"] == ["sda"]  # UFS
    assert facts["power_supply"]["battery"]["current_now"] == -512000
    assert facts["thermal_c"] == {"cpu-0-0-usr": 38.0, "battery": 31.0}
    assert facts["cpu_max_khz"] == 3050000
    assert all(r["ok"] for r in out["expectations"])


def test_old_android_fails_the_release_expectation(tmp_path: Path) -> None:
    targets, env = _phone(tmp_path)
    done = cli_in_process("probe", "phone", "--targets-dir", str(targets), "--expect", "android_release_min=14",
                   env=env, timeout=120)
    assert done.returncode == 1
    assert "Android 13, need >= 14" in done.stderr


@pytest.mark.parametrize(("capture", "model", "soc"), [
    ("getprop-redmi-m2101k9c-mt6893.txt", "M2101K9C", "MT6893"),
    ("getprop-pixel-8-pro.txt", "Pixel 8 Pro", "Tensor G3"),
    ("getprop-galaxy-s24-exynos.txt", "SM-S928B", "exynos2400"),  # no ro.soc.model: board platform
])
def test_getprop_captures_give_model_and_soc(capture: str, model: str, soc: str) -> None:
    facts = enrich({"getprop_raw": (ANDROID / capture).read_text()})
    assert (facts["model"], facts["soc"]) == (model, soc)


def test_getprop_keeps_empty_values_and_rejects_other_text() -> None:
    [props] = parse("getprop", (ANDROID / "getprop-redmi-m2101k9c-mt6893.txt").read_bytes())
    assert props["persist.sys.locale"] == "" and len(props) == 17
    with pytest.raises(ParseError, match="getprop"):
        parse("getprop", b"ro.product.model=Pixel\n")


def test_android_checks_generic_and_unknown_expectations() -> None:
    facts = {"mem_total_bytes": 8 << 30, "model": "Pixel 8 Pro"}
    results = PLATFORMS["android"].check({"mem_total_min": "12G", "tj_below_c": 50, "bogus": 1}, facts, None)
    by_name = {r.name: r for r in results}
    assert not by_name["mem_total_min"].ok and "need >= 12G" in by_name["mem_total_min"].message
    assert "tj_below_c" not in by_name  # a gate, waited for before runs, not a pass/fail check
    assert not by_name["bogus"].ok and "unknown expectation" in by_name["bogus"].message

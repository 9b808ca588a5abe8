"""macOS: facts from sysctl/sw_vers/diskutil (fake tools replaying real captures), expectations,
the purge cache drop that says when the cache was NOT cleared, and the collectors' parsers.

Cold runs on "macOS" run here for real (a real file on disk, the real cachectl and mincore), with
only what cannot exist on Linux faked: platform detection, and a ``purge`` that empties the page
cache of the test file (fadvise DONTNEED) the way the real one empties the whole cache."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from harness.boards.inventory import load_targets
from harness.boards.platforms import PLATFORMS
from harness.boards.platforms.macos import enrich
from harness.boards.session import build_native_here, open_session
from harness.campaign import runstate
from harness.figures.report import not_cleared_lines
from harness.parsers import ParseError, parse
from harness.results.cachestate import cache_label
from harness.results.ingest import run_row
from runner import pagecache
from runner.probes import macos, platforms
from runner.steps.pageout import make_cold
from tests import fakeboard as fb

MACOS = fb.DATA / "macos"


@pytest.fixture
def mac_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    fb.replay(bindir, "sysctl", MACOS / "sysctl-m2-max-memsize.txt")
    fb.replay(bindir, "sw_vers", MACOS / "sw_vers-15.7.4.txt")
    fb.replay(bindir, "diskutil", MACOS / "diskutil-info-disk0-apple-ssd.txt")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir


def test_mac_facts_from_the_tools(mac_tools: Path) -> None:
    facts = enrich(platforms.facts("macos"))
    assert facts["mem_total_bytes"] == 68719476736
    assert (facts["performance_cores"], facts["efficiency_cores"]) == (8, 4)
    assert (facts["macos_version"], facts["macos_build"]) == ("15.7.4", "24G517")
    assert facts["disk_solid_state"] is True and facts["disk_protocol"] == "PCI-Express"
    assert facts["disk_size_bytes"] == 251000193024
    results = PLATFORMS["macos"].check({"mem_total_min": "48G", "macos_version_min": "14.5",
                                        "performance_cores_min": 8, "solid_state": True}, facts, None)
    assert all(r.ok for r in results), [r.message for r in results]
    [old] = PLATFORMS["macos"].check({"macos_version_min": "15.10"}, facts, None)
    assert not old.ok and old.message == "macOS 15.7.4, need >= 15.10"


def test_a_missing_tool_leaves_the_fact_empty_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    facts = enrich(macos.macos_facts())
    assert facts["macos_version"] is None and facts["sw_vers_error"] == "sw_vers not found on PATH"
    [result] = PLATFORMS["macos"].check({"mem_total_min": "8G"}, facts, None)
    assert not result.ok


def test_purge_not_allowed_means_the_cache_was_not_cleared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    fb.tool(bindir, "purge", "import sys\nsys.exit(0)\n")
    fb.tool(bindir, "sudo", "import sys\nsys.stderr.write('sudo: a password is required\\n')\nsys.exit(1)\n")
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setattr(os, "geteuid", lambda: 501)  # a normal user, as on a Mac
    record = macos.drop_page_cache_macos()
    assert record["cleared"] is False and "a password is required" in record["reason"]
    facts = enrich(macos.macos_facts())
    [result] = PLATFORMS["macos"].check({"cache_drop": "purge"}, facts, None)
    assert not result.ok and "cold runs would NOT be cold" in result.message


def test_purge_as_root_clears(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    marker = tmp_path / "purged"
    fb.tool(bindir, "purge", f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert macos.drop_page_cache_macos() == {"method": "purge", "cleared": True, "reason": None}
    assert marker.exists()


def test_iostat_reads_disks_and_marks_the_since_boot_sample() -> None:
    rows = parse("iostat", (MACOS / "iostat-w1-c5-two-disks.txt").read_bytes())
    assert len(rows) == 10 and {r["disk"] for r in rows} == {"disk0", "disk4"}
    assert rows[0]["since_boot"] and not rows[2]["since_boot"]
    peak = max(rows, key=lambda r: r["mb_per_s"])
    assert (peak["disk"], peak["tps"], peak["mb_per_s"], peak["sample"]) == ("disk0", 222.0, 3.10, 3)
    three = parse("iostat", (MACOS / "iostat-d-three-disks.txt").read_bytes())
    assert [r["disk"] for r in three[:3]] == ["disk0", "disk4", "disk6"] and three[3]["kb_per_transfer"] == 6.04


def test_iostat_repeated_headers_and_bad_lines() -> None:
    text = (MACOS / "iostat-d-three-disks.txt").read_bytes()
    assert len(parse("iostat", text + text)) == 12  # the header repeats every screenful
    with pytest.raises(ParseError, match="diskN"):
        parse("iostat", b"  1.0 2 3.0\n")


def test_vm_stat_reads_page_counters_and_swap() -> None:
    [row] = parse("vm_stat", (MACOS / "vm_stat-swapping.txt").read_bytes())
    assert row["page_size_bytes"] == 16384 and row["pages_stored_in_compressor"] == 1236954
    assert row["translation_faults"] == 1179544352 and row["swapouts"] == 2314393
    [big] = parse("vm_stat", (MACOS / "vm_stat-m4-max-128g.txt").read_bytes())
    assert big["pages_free"] == 3174400 and "swapins" not in big
    snaps = b"@ 1000000000 1.0\n" + (MACOS / "vm_stat-swapping.txt").read_bytes() + \
        b"@ 2000000000 2.0\n" + (MACOS / "vm_stat-swapping.txt").read_bytes()
    rows = parse("vm_stat", snaps)
    assert rows[1]["d_swapouts"] == 0 and rows[1]["dt_s"] == 1.0


def test_powermetrics_reads_each_sample() -> None:
    first, second = parse("powermetrics", (MACOS / "powermetrics-mac14-2-two-samples.txt").read_bytes())
    assert (first["power_cpu_mw"], first["power_gpu_mw"], first["power_ane_mw"], first["power_combined_mw"]) == \
        (823, 26, 323, 1172)
    assert first["p_cluster_freq_mhz"] == 1145 and first["e_cluster_active_pct"] == 77.43
    assert second["power_combined_mw"] == 445 and second["thermal_pressure"] == "Nominal"
    with pytest.raises(ParseError, match="powermetrics"):
        parse("powermetrics", b"powermetrics must be invoked as the superuser\n")


def test_sysctl_sw_vers_diskutil_parsers() -> None:
    [cpu] = parse("sysctl", (MACOS / "sysctl-m1-pro-cpu.txt").read_bytes())
    assert cpu["machdep.cpu.brand_string"] == "Apple M1 Pro" and cpu["hw.perflevel1.physicalcpu"] == 2
    assert parse("sw_vers", (MACOS / "sw_vers-14.6.1.txt").read_bytes())[0]["build_version"] == "23G93"
    [disk] = parse("diskutil", (MACOS / "diskutil-info-disk0-apple-ssd.txt").read_bytes())
    assert disk["device_media_name"] == "APPLE SSD AP0256M" and disk["whole"] is True
    with pytest.raises(ParseError, match="diskutil"):
        parse("diskutil", b"   Volume Name:   x\n")


# ----------------------------------------------------------------------------------------- cold runs on macOS
@pytest.fixture(scope="module")
def native_bin() -> str:
    return str(build_native_here())


@pytest.fixture
def warm_file():
    """A 8 MiB file on a real disk (not tmpfs: mincore must see the page cache), written back and read."""
    with tempfile.TemporaryDirectory(prefix="harness-mac-", dir="/var/tmp") as tmp:
        path = Path(tmp) / "model.gguf"
        with open(path, "wb") as out:
            out.write(os.urandom(8 << 20))
            out.flush()
            os.fsync(out.fileno())
        path.read_bytes()
        yield path


def _as_mac(monkeypatch: pytest.MonkeyPatch, bindir: Path, *, root: bool, purge_evicts: Path | None = None) -> None:
    """This process believes it is a Mac with ``purge`` on PATH; a normal user's sudo asks for a password."""
    evict = "" if purge_evicts is None else (
        f"import os\nfd = os.open({str(purge_evicts)!r}, os.O_RDONLY)\n"
        "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n")
    fb.tool(bindir, "purge", evict)
    fb.tool(bindir, "sudo", "import sys\nsys.stderr.write('sudo: a password is required\\n')\nsys.exit(1)\n")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(platforms, "detect", lambda: "macos")
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 501)


def test_cold_on_macos_purges_then_verifies_with_mincore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         native_bin: str, warm_file: Path) -> None:
    _as_mac(monkeypatch, tmp_path / "bin", root=True, purge_evicts=warm_file)
    state = pagecache.prepare(native_bin, "cold", [str(warm_file)])
    assert state["drop"] == {"method": "purge", "cleared": True, "reason": None}
    assert state["before"][0]["resident_pct"] <= pagecache.COLD_MAX_PCT
    row = run_row({"run_id": "r1", "index": 0, "target": "mac", "step": "read", "cache": "cold", "round": 0,
                   "repeat": 0}, {"status": "ok", "cache": state})
    assert row["cache_cleared"] is True and row["cache_note"] is None


def test_cold_on_macos_without_purge_runs_and_says_the_cache_was_not_cleared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native_bin: str, warm_file: Path) -> None:
    _as_mac(monkeypatch, tmp_path / "bin", root=False, purge_evicts=warm_file)
    state = pagecache.prepare(native_bin, "cold", [str(warm_file)])  # no CacheStateError: the run goes on
    assert state["drop"]["cleared"] is False and state["drop"]["method"] is None
    assert "sudo -n purge is not allowed" in state["drop"]["reason"]
    assert "a password is required" in state["drop"]["reason"]
    assert state["before"][0]["resident_pct"] > 90  # measured, not assumed: the file is still cached
    # the runs table and the report say it, for the run and for the target
    row = run_row({"run_id": "r1", "index": 0, "target": "mac", "step": "read", "cache": "cold", "round": 0,
                   "repeat": 0}, {"status": "ok", "cache": state})
    assert row["cache_cleared"] is False
    assert row["cache_note"].startswith("page cache NOT cleared: sudo -n purge is not allowed")
    runs = pd.DataFrame([row, {**row, "run_id": "r2", "cache": "warm", "cache_cleared": None}])
    assert list(cache_label(runs)) == ["cold (NOT cleared)", "warm"]
    [line] = [ln for ln in not_cleared_lines(runs) if ln]
    assert line.startswith("- **mac: page cache NOT cleared** in 1 cold run(s)") and "a password is required" in line
    assert "residency before the step 100-100 %" in line
    # per request (llama-server cold requests): one attempt, recorded with the evicted bytes
    evicted, rows = make_cold(native_bin, os.getpid(), str(warm_file))
    assert evicted["cache_drop"]["cleared"] is False and rows[0]["resident_pct"] > 90


def test_a_purge_that_leaves_the_file_resident_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        native_bin: str, warm_file: Path) -> None:
    _as_mac(monkeypatch, tmp_path / "bin", root=True)  # purge "succeeds" but evicts nothing
    with pytest.raises(pagecache.CacheStateError, match=r"still \d+\.\d % resident after purge"):
        pagecache.prepare(native_bin, "cold", [str(warm_file)])


def test_linux_cold_record_is_unchanged(native_bin: str, warm_file: Path) -> None:
    state = pagecache.prepare(native_bin, "cold", [str(warm_file)])
    assert set(state) == {"condition", "before"} and state["before"][0]["resident_pct"] <= pagecache.COLD_MAX_PCT


@pytest.mark.parametrize("purge_on_path", [True, False])
def test_the_controller_says_before_the_first_cold_run_that_the_cache_will_not_be_cleared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, purge_on_path: bool) -> None:
    """A real local session declared macOS; the runner answers whether purge is allowed (here: as root, so only
    when a purge is on PATH)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if purge_on_path:
        fb.tool(bindir, "purge", "")
    (bindir / "python3").symlink_to(sys.executable)
    targets = fb.target_dir(tmp_path, "mac", "macos")
    session = open_session(load_targets(targets)["mac"])  # builds runner/native with the real PATH
    messages: list[str] = []
    try:
        monkeypatch.setenv("PATH", str(bindir))  # what the runner sees on the "Mac"
        warm = SimpleNamespace(cache="warm", run_id="w")
        assert runstate.warn_cache_not_clearable(session, warm, messages.append) is None and not messages
        cold = SimpleNamespace(cache="cold", run_id="c")
        reason = runstate.warn_cache_not_clearable(session, cold, messages.append)
        runstate.warn_cache_not_clearable(session, cold, messages.append)  # asked once per target
    finally:
        session.close()
    if purge_on_path:
        assert reason is None and messages == []
    else:
        assert reason == "purge not found on PATH"
        assert messages == ["mac: the page cache will NOT be cleared before cold runs (purge not found on PATH); "
                            "they run anyway and are marked 'NOT cleared' in run.json, the runs table and the report"]

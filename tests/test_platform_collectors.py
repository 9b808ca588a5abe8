"""Platform collectors: tegrastats run by the runner and parsed into `telemetry`, sampled kernel files
(/proc/vmstat, PSI, thermal zones, power supplies) parsed into tables, optional vs required when a
collector cannot run, and the parsers on real captures."""

from __future__ import annotations

import datetime
import json
import os
import signal
from pathlib import Path

import pandas as pd
import pytest

from harness.parsers import ParseError, parse
from runner import sysroot
from runner.collectors import availability, tools
from runner.collectors.base import KINDS, Unavailable
from runner.collectors.run import start_platform
from tests import fakeboard as fb
from tests.helpers import REPO, run_cli, wait_for

LINUX = fb.DATA / "linux"
COLLECT = """collect:
  tegrastats: {period_ms: 100}
  thermal: {period_ms: 50}
  vmstat: {period_ms: 50}
  psi: {period_ms: 50, optional: true}
  jtop: {optional: true}"""


READ = "read: {file: data, pattern: seq}"
# a step that lasts (fio's runtime) so that the collectors' own tools have started and written before it ends
FIO_2S = "fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 2}"


def _run(tmp_path: Path, collect: str, platform: str = "jetson", env: dict[str, str] | None = None,  # noqa: ANN202
         step: str = READ):
    exp = tmp_path / "col.yaml"
    exp.write_text(f"name: col\ntargets: [board]\nfiles:\n  data: {{create: 8M}}\ncache: none\n{collect}\n"
                   f"steps:\n  - {step}\n")
    targets = fb.target_dir(tmp_path, "board", platform)
    results = tmp_path / "results"
    done = run_cli("run", str(exp), "--targets-dir", str(targets), "--results", str(results),
                   "--scratch", str(tmp_path / "scratch"), env=env, timeout=300)
    return done, results


@pytest.mark.slow  # a campaign
def test_tegrastats_and_sampled_files_land_in_tables(tmp_path: Path) -> None:
    root = fb.jetson_tree(tmp_path / "root")
    env = fb.jetson_env(root, fb.jetson_tools(tmp_path / "bin"))
    done, results = _run(tmp_path, COLLECT, env=env, step=FIO_2S)
    assert done.returncode == 0, done.stdout + done.stderr
    # optional collectors that cannot run are named with the reason, and the runs go on
    assert "collector psi unavailable" in done.stdout + done.stderr
    [rs] = list(results.iterdir())
    telemetry = pd.read_parquet(rs / "tables" / "telemetry.parquet")
    tegra = telemetry[telemetry["source"] == "tegrastats"]
    assert len(tegra) >= 1 and tegra["ram_total_mb"].iloc[0] == 7620  # the replayed real capture
    assert tegra["temp_tj_c"].notna().all()
    # its local wall-clock stamps are placed on the step's time axis (1 s resolution)
    assert tegra["t_rel_s"].abs().max() < 60
    thermal = telemetry[telemetry["source"] == "thermal"]
    assert len(thermal) >= 2 and (thermal["temp_tj_thermal_c"] == 47.0).all()
    assert thermal["t_rel_s"].notna().all()  # placed on the step's time axis
    memory = pd.read_parquet(rs / "tables" / "memory.parquet")
    vm = memory[memory["source"] == "vmstat"]
    assert len(vm) >= 2 and "d_pgmajfault" in vm.columns and (vm["d_pgmajfault"].dropna() == 0).all()
    reclaim = pd.read_parquet(rs / "tables" / "reclaim.parquet")
    assert len(reclaim) == 1 and reclaim["pgmajfault"].iloc[0] == 0 and reclaim["samples"].iloc[0] >= 2
    record = json.loads(next((rs / "raw").rglob("run.json")).read_text())
    skipped = " ".join(record.get("collector_errors", []))
    assert "psi skipped (optional): /proc/pressure/* is not readable" in skipped
    # the board's python3 has no jetson-stats, or (an activated venv with the dev extras) has it and no service
    assert ("jtop skipped (optional): jetson-stats is not installed" in skipped
            or "jtop skipped (optional): the jtop service is not running" in skipped)


def test_a_required_collector_that_cannot_run_stops_before_a_set_exists(tmp_path: Path) -> None:
    # this machine has no tegrastats: a plain Linux target
    done, results = _run(tmp_path, "collect:\n  tegrastats: {period_ms: 500}", platform="linux")
    assert done.returncode == 2
    assert "collector tegrastats cannot run: tegrastats not found on PATH (or mark it optional: true)" in done.stderr
    assert not results.exists() or not list(results.iterdir())


def test_collector_options_are_validated(tmp_path: Path) -> None:
    done, _ = _run(tmp_path, "collect:\n  vmstat: {period_ms: 5, optinal: true}", platform="linux")
    assert done.returncode == 2 and "collect.vmstat" in done.stderr


def test_snapshotter_writes_a_first_and_a_last_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fb.jetson_tree(tmp_path / "root")
    monkeypatch.setattr(sysroot, "ROOT", str(tmp_path / "root"))
    running, skipped = start_platform({"vmstat": {"period_ms": 10_000}, "thermal": {"period_ms": 10_000}},
                                      str(tmp_path))
    assert skipped == {}
    assert [item.stop() for item in running] == [None, None]
    rows = parse("vmstat", (tmp_path / "vmstat.txt").read_bytes())
    assert len(rows) == 2 and rows[1]["t_ns"] > rows[0]["t_ns"]
    assert rows[1]["d_pgmajfault"] == 0 and rows[0]["nr_free_pages"] > 0
    temps = parse("thermal", (tmp_path / "thermal.txt").read_bytes())
    assert temps[0]["temp_tj_thermal_c"] == 47.0 and temps[0]["temp_cpu_thermal_c"] == 46.0


def test_psi_snapshots_name_each_resource_and_add_irq_where_present(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.collectors.snapshots import SNAPSHOTS

    pressure = tmp_path / "proc" / "pressure"
    pressure.mkdir(parents=True)
    psi = REPO / "tests" / "data" / "psi"
    for res, name in (("memory", "proc-pressure-memory-flatcar-2020.txt"), ("io", "proc-pressure-io-6.18-vm.txt"),
                      ("cpu", "proc-pressure-cpu-flatcar-2020.txt"), ("irq", "proc-pressure-irq-htop-2023.txt")):
        (pressure / res).write_bytes((psi / name).read_bytes())
    monkeypatch.setattr(sysroot, "ROOT", str(tmp_path))
    [row] = parse("psi", SNAPSHOTS["psi"]().encode())
    assert (row["irq_full_avg10_pct"], row["irq_full_total_us"]) == (0.0, 100648410)
    assert (row["io_some_total_us"], row["io_full_total_us"], row["cpu_some_total_us"]) == (5151107, 2547783, 1195993)
    assert "cpu_full_total_us" not in row and "irq_some_total_us" not in row
    (pressure / "irq").unlink()  # most kernels: no irq file, and no irq columns
    [row] = parse("psi", SNAPSHOTS["psi"]().encode())
    assert not [key for key in row if key.startswith("irq_")] and row["memory_full_total_us"] == 0


def test_required_unavailable_collector_is_an_error_in_the_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   ) -> None:
    monkeypatch.setattr(sysroot, "ROOT", str(tmp_path))  # an empty tree: no /proc/pressure
    with pytest.raises(Unavailable, match="collector psi: /proc/pressure"):
        start_platform({"psi": {"period_ms": 100}}, str(tmp_path))


def test_tegrastats_tool_process_is_stopped_by_sigterm(tmp_path: Path) -> None:
    bindir = fb.jetson_tools(tmp_path / "bin")
    proc = tools.ToolProcess("tegrastats", [str(bindir / "tegrastats"), "--interval", "20", "--logfile",
                                         str(tmp_path / "t.log")], str(tmp_path / "t.log"), False)
    proc.start()
    pid = proc.proc.pid
    assert proc.stop() is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)  # gone, not left behind


# ------------------------------------------------------------------------------------- parsers
def test_vmstat_parser_reads_a_real_proc_vmstat() -> None:
    [row] = parse("vmstat", (LINUX / "proc-vmstat-debian12-6.18.txt").read_bytes())
    assert row["t_ns"] is None and row["pgmajfault"] >= 0 and "workingset_refault_file" in row


def test_reclaim_summary_between_two_real_captures() -> None:
    from harness.parsers.snapshots import reclaim_summary

    text = b"".join(b"@ %d %d\n" % (t * 10**9, t) + (LINUX / name).read_bytes() for t, name in
                    ((0, "proc-vmstat-debian12-6.18.txt"), (2400, "proc-vmstat-debian12-6.18-later.txt")))
    summary = reclaim_summary(parse("vmstat", text))
    assert summary["window_s"] == 2400 and summary["samples"] == 2
    assert summary["pgmajfault"] == 59813 - 7052
    assert summary["workingset_refault_file"] == 64651204 - 14065521
    assert summary["pgscan_pages"] is not None and summary["pgscan_direct_pages"] is not None
    assert reclaim_summary(parse("vmstat", text.split(b"@ 2400")[0])) == {}  # one snapshot: no window


def test_psi_parser_reads_real_pressure_files() -> None:
    [row] = parse("psi-memory", (LINUX / "proc-pressure-memory.txt").read_bytes())  # bare: the kind names it
    assert {"memory_some_avg10_pct", "memory_full_total_us"} <= set(row)
    text = b"".join(b"@ %d 1.0\n" % (i * 10**9) + b"".join(
        b"%s %s" % (res.encode(), line) for res in ("memory", "io")
        for line in (LINUX / f"proc-pressure-{res}.txt").read_bytes().splitlines(keepends=True)) for i in (1, 2))
    rows = parse("psi", text)
    assert rows[1]["d_memory_some_total_us"] == 0 and rows[1]["dt_s"] == 1.0


def test_snapshot_parsers_reject_other_text() -> None:
    with pytest.raises(ParseError, match="/proc/vmstat"):
        parse("vmstat", b"MemTotal:  123 kB\n")
    with pytest.raises(ParseError, match="pressure"):
        parse("psi", b"some total=3\n")


def test_power_parser_multiplies_current_and_voltage() -> None:
    rows = parse("power", b"@ 1000 1.0\nbattery -512000 3851000\nusb 0 -\n")
    assert rows[0]["power_battery_mw"] == pytest.approx(1971.712)
    assert rows[0]["usb_voltage_uv"] is None and rows[0]["power_usb_mw"] is None


def test_jtop_parser_reads_real_stats_in_tegrastats_columns() -> None:
    # the repr holds datetime objects, as jetson.stats does; rebuild them and serialise like the runner
    text = (fb.DATA / "jetson" / "jtop-stats-orin-nano-25w.txt").read_text()
    stats = eval(text, {"__builtins__": {}, "datetime": datetime})  # noqa: S307 - our own test data
    line = json.dumps({"t_ns": 5, "stats": stats}, default=str).encode()
    [row] = parse("jtop", line)
    assert row["cpu_load_pct"] == [18, 39, 9, 9, 5, 3] and row["gpu_load_pct"] == 4.8
    assert row["temp_tj_c"] == 47.906 and row["temp_cv0_c"] is None  # -256 = offline
    assert row["power_tot_mw"] == 5133 and row["nvp_model"] == "25W"
    assert row["ram_used_pct"] == pytest.approx(45.74, abs=0.01)


def test_every_collector_has_a_registered_parser() -> None:
    from harness.collectors import COLLECTORS
    from harness.parsers import PARSERS

    assert set(KINDS) <= set(COLLECTORS)
    assert all(COLLECTORS[kind].parser in PARSERS for kind in KINDS)
    assert (REPO / "runner" / "collectors" / "base.py").exists()


def test_powermetrics_is_stopped_with_sigint_and_its_output_parses(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    capture = fb.DATA / "macos" / "powermetrics-mac14-2-two-samples.txt"
    # like the real tool: samples until interrupted; SIGINT (Ctrl-C) ends it cleanly, SIGTERM would not
    fb.tool(tmp_path / "bin", "powermetrics", f"""import signal, sys, time
text = open({str(capture)!r}).read()
half = text.index('*** Sampled system activity (Fri Sep 11 13:41:47')
sys.stdout.write(text[:half]); sys.stdout.flush()
signal.signal(signal.SIGTERM, lambda *a: sys.exit(9))
try:
    time.sleep(60)
except KeyboardInterrupt:
    sys.stdout.write(text[half:]); sys.exit(0)
""")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    proc = tools.tool_process("powermetrics", {"period_ms": 1000}, str(tmp_path))
    proc.start()
    # wait until the first sample is on disk, then stop (no time is asserted); the fake's sleep(60) is only its
    # "samples until interrupted" body: the SIGINT below ends it

    def first_sample_written() -> bool:
        if proc.proc.poll() is not None:
            pytest.fail(proc.proc.stderr.read().decode())
        return b"Nominal" in (tmp_path / "powermetrics.txt").read_bytes()  # not created yet: OSError, "not yet"

    wait_for("the first powermetrics sample in powermetrics.txt", first_sample_written, timeout=60, interval=0.01)
    assert proc.stop() is None
    rows = parse("powermetrics", (tmp_path / "powermetrics.txt").read_bytes())
    assert [r["power_combined_mw"] for r in rows] == [1172, 445]


def test_a_run_shorter_than_one_period_gives_no_rows_not_an_error(tmp_path: Path) -> None:
    from harness.collectors import COLLECTORS

    (tmp_path / "iostat.txt").write_text("              disk0\n    KB/t  tps  MB/s\n")
    assert COLLECTORS["iostat"].ingest(tmp_path, {"spec": {}}) == {}
    (tmp_path / "iostat.txt").write_text("garbage line\n")
    with pytest.raises(ParseError):
        COLLECTORS["iostat"].ingest(tmp_path, {"spec": {}})


def test_blockstat_where_there_is_no_sys_block_is_refused_before_any_run(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysroot, "ROOT", str(tmp_path))  # a tree without /sys/block, as on macOS
    assert availability.availability()["blockstat"] == "no /sys/block here (on macOS collect iostat instead)"
    monkeypatch.setattr(sysroot, "ROOT", "")
    assert availability.availability()["blockstat"] is None  # this Linux machine has /sys/block

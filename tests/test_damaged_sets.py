"""Result sets damaged after their campaign, read by every command that reads sets: one line naming what is wrong
and where, exit 2, and nothing else hidden (the other sets of a directory are still listed and queried).

The sets are written here (``tests.test_gate.write_set``: manifest, runs and requests tables),
sealed the way a campaign seals a complete set (:func:`harness.results.checksums.write_sums`), with a run record
per run; the failed-fio set carries a real fio capture (tests/data/fio/SOURCE.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from harness.parsers import parse
from harness.results import checksums
from harness.results.loader import load_result_set
from harness.results.store import ResultSetWriter
from tests.helpers import DATA, cli_in_process, one_line_exit_2
from tests.test_gate import decode_cells, write_set

pytestmark = pytest.mark.fault

SET_ID = "20261201-000000-gatetest-aaaaaa"
GATE = ("--baseline-variant", "arm=a", "--metric", "decode_tps")


def a_set(results: Path, set_id: str = SET_ID, cells: dict | None = None, **kwargs: object) -> Path:
    """``write_set``'s set with the manifest fields a campaign also writes (harness, controller, times)."""
    path = write_set(results, set_id, cells or decode_cells(seed=1, change=1.0), **kwargs)  # type: ignore[arg-type]
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["targets"] = [{**target, "platform": "linux"} for target in manifest["targets"]]
    manifest.update(harness={"version": "0.1.0", "git_revision": "abc1234"}, controller={"host": "lab"},
                    started="2026-12-01T00:00:00+00:00", ended="2026-12-01T00:10:00+00:00")
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def sealed_set(results: Path, set_id: str = SET_ID) -> Path:
    """A complete set as a campaign leaves it: a run directory with its record per run, then SHA256SUMS."""
    path = a_set(results, set_id)
    for run in json.loads((path / "manifest.json").read_text())["runs"]:
        run_dir = path / "raw" / run["target"] / run["run_id"]
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"run_id": run["run_id"], "status": run["status"]}))
    checksums.write_sums(path)
    return path


def every_reader(results: Path, set_name: str) -> dict[str, tuple[str, ...]]:
    """Each command that reads a set, as run on ``set_name``."""
    where = ("--results", str(results))
    return {
        "report": ("report", set_name, *where),
        "show": ("results", "show", set_name, *where),
        "compare": ("compare", set_name, "--baseline-variant", "arm=a", *where),
        "gate": ("gate", set_name, *GATE, *where),
        "query": ("results", "query", "SELECT count(*) AS n FROM requests JOIN runs USING (set_id, target, run_id)",
                  *where),
        "trend": ("results", "trend", "decode_tps", "--cell", "arm=b cold", "--target", "local",
                  "--out", str(results.parent / "trend.png"), *where),
    }


READERS = ("report", "show", "compare", "gate", "query", "trend")


# ------------------------------------------------------------------------------------------ truncated tables
@pytest.mark.parametrize("command", READERS)
@pytest.mark.parametrize("table", ["requests", "runs"])
def test_a_truncated_table_is_one_line_naming_it(tmp_path: Path, command: str, table: str) -> None:
    """A table cut short (a copy that died halfway, a full disk outside the harness): pyarrow's or DuckDB's
    traceback before; the gate said 3 (infrastructure). Now one line naming the file, exit 2, in every reader.
    The set is unsealed (as a set from before SHA256SUMS), so the reader itself must notice."""
    results = tmp_path / "results"
    path = a_set(results)
    damaged = path / "tables" / f"{table}.parquet"
    damaged.write_bytes(damaged.read_bytes()[:300])
    line = one_line_exit_2(cli_in_process(*every_reader(results, SET_ID)[command]))
    assert line.startswith(f"error: {damaged}: not a readable parquet table (") and "damaged" in line, line


def test_the_same_set_whole_is_read_by_every_reader(tmp_path: Path) -> None:
    """The control of the test above: nothing but the truncation makes them fail."""
    results = tmp_path / "results"
    a_set(results)
    for command, args in every_reader(results, SET_ID).items():
        done = cli_in_process(*args)
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"


# ------------------------------------------------------------------------------------------ manifests
@pytest.mark.parametrize(("text", "said"), [
    ("[1, 2, 3]", "the manifest is a JSON list, not an object"),
    ('"a set"', "the manifest is a JSON string, not an object"),
    ('{"schema_version": 2, "set_id": "x", "runs": {"0001": 1}}', "field runs: expected a list, got a JSON object"),
    ('{"schema_version": 2, "set_id": "x", "experiment": "e2e"}',
     "field experiment: expected an object, got a JSON string"),
    ('{"schema_version": 2, "set_id": "x", "targets": [1]}', "field targets[0]: expected an object, got a JSON number"),
])
def test_a_manifest_that_is_not_an_object_hides_no_other_set(tmp_path: Path, text: str, said: str) -> None:
    """One bad set in a directory broke results list and results query for all of them (AttributeError,
    KeyError). Now that set is one line, in list's table and on query's stderr, and the good set is still there."""
    results = tmp_path / "results"
    a_set(results)
    bad = results / "20261202-000000-gatetest-bbbbbb"
    bad.mkdir()
    (bad / "manifest.json").write_text(text)
    listed = cli_in_process("results", "list", "--results", str(results))
    assert listed.returncode == 0, listed.stdout + listed.stderr
    rows = [line for line in listed.stdout.splitlines() if line.startswith("│ 2026")]
    assert [row.split()[1:4:2] for row in rows] == [[SET_ID, "complete"], [bad.name, "unreadable"]], listed.stdout
    query = cli_in_process("results", "query", "SELECT count(*) AS n FROM runs", "--format", "csv",
                           "--results", str(results))
    assert query.returncode == 0, query.stderr
    assert query.stdout.split() == ["n", "10"]  # the good set's 10 runs
    assert query.stderr.strip() == f"left out {bad / 'manifest.json'}: {said}"
    line = one_line_exit_2(cli_in_process("results", "show", str(bad)))
    assert line == f"error: {bad / 'manifest.json'}: {said}"
    if "not an object" in said:  # the one reader of any schema checks the shape too
        line = one_line_exit_2(cli_in_process("results", "upgrade", str(bad)))
        assert line.startswith(f"error: {bad / 'manifest.json'}: the manifest is a JSON ") and "not an object" in line


# ------------------------------------------------------------------------------------------ SHA256SUMS
def test_a_campaigns_complete_set_is_sealed_over_what_a_decision_reads(tmp_path: Path) -> None:
    """The writer seals a set when it completes: manifest (as it ends), experiment, every table, each run's record;
    not the figures or report.md (redrawn by harness report). The file is sha256sum's format. An incomplete set
    (--resume will still change it) gets none."""
    writer = ResultSetWriter(tmp_path, "20261201-000000-seal-cccccc")
    writer.start(experiment_name="seal", experiment_path=tmp_path / "seal.yaml", experiment_text="name: seal\n",
                 targets=[{"name": "local"}], plan=[{"run_id": "0001-read-cold-r1", "target": "local"}])
    run_dir = writer.raw_dir("local", "0001-read-cold-r1")
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    (run_dir / "SHA256SUMS").write_text("")
    (run_dir / "read.json").write_text("{}")
    pd.DataFrame({"run_id": ["0001-read-cold-r1"]}).to_parquet(writer.path / "tables" / "runs.parquet")
    (writer.path / "figures" / "f.png").write_bytes(b"png")
    assert not (writer.path / "SHA256SUMS").exists()
    path = writer.finish(complete=True)
    listed = [line.split("  ", 1)[1] for line in (path / "SHA256SUMS").read_text().splitlines()]
    assert listed == ["experiment.yaml", "manifest.json", "raw/local/0001-read-cold-r1/SHA256SUMS",
                      "raw/local/0001-read-cold-r1/run.json", "tables/runs.parquet"]
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=path, capture_output=True,
                               text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads((path / "manifest.json").read_text())["status"] == "complete"
    assert load_result_set(path, verify=True).verified is True
    other = ResultSetWriter(tmp_path, "20261201-000000-seal-dddddd")
    other.start(experiment_name="seal", experiment_path=tmp_path / "seal.yaml", experiment_text="name: seal\n",
                targets=[], plan=[])
    assert not (other.finish(complete=False) / "SHA256SUMS").exists()


@pytest.mark.parametrize("command", ["report", "show", "compare", "gate"])
def test_a_deleted_run_directory_is_named_before_a_decision(tmp_path: Path, command: str) -> None:
    """A run directory deleted after the campaign went unnoticed: the gate decided on what was left (here the
    tables still hold the run, so it passed). Now each command that reads the set for a decision says which run
    directory is gone, exit 2, and decides nothing."""
    results = tmp_path / "results"
    path = sealed_set(results)
    args = every_reader(results, SET_ID)[command]
    assert cli_in_process(*args).returncode == 0
    shutil.rmtree(path / "raw" / "local" / "0003-llama-server-a-cold-r2")
    line = one_line_exit_2(cli_in_process(*args))
    assert line == (f"error: {path}: the set differs from its SHA256SUMS (run directory "
                    "raw/local/0003-llama-server-a-cold-r2 deleted); it changed after its campaign and is not read "
                    "for a decision: restore it from a copy")


def test_a_changed_or_added_table_is_named_and_the_gate_says_2(tmp_path: Path) -> None:
    """A table rewritten after the campaign (here arm b's decode made 40 % slower, a regression the gate would
    report with exit 1) is named; so is a table that was not there. Bad input, exit 2: not 1, not 3."""
    results = tmp_path / "results"
    path = sealed_set(results)
    junit = tmp_path / "gate.xml"
    requests = pd.read_parquet(path / "tables" / "requests.parquet")
    requests.loc[requests["run_id"].str.contains("-b-"), "decode_tps"] *= 0.6
    requests.to_parquet(path / "tables" / "requests.parquet")
    line = one_line_exit_2(cli_in_process("gate", SET_ID, *GATE, "--results", str(results), "--junit", str(junit)))
    assert "(tables/requests.parquet changed)" in line
    assert not junit.exists()  # bad input: no verdict, no infrastructure error either
    pd.DataFrame({"run_id": ["x"]}).to_parquet(path / "tables" / "extra.parquet")
    line = one_line_exit_2(cli_in_process("compare", SET_ID, "--baseline-variant", "arm=a", "--results",
                                          str(results)))
    assert "(tables/requests.parquet changed, tables/extra.parquet added)" in line


def test_a_changed_manifest_and_many_problems_stay_one_line(tmp_path: Path) -> None:
    results = tmp_path / "results"
    path = sealed_set(results)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["runs"][0]["status"] = "failed"
    (path / "manifest.json").write_text(json.dumps(manifest))
    for run_dir in sorted((path / "raw" / "local").iterdir())[:5]:
        shutil.rmtree(run_dir)
    line = one_line_exit_2(cli_in_process("report", SET_ID, "--results", str(results)))
    assert "(manifest.json changed, run directory raw/local/0001-llama-server-a-cold-r1 deleted, " in line
    assert " and 2 more)" in line  # six problems: four named, two counted


def test_a_set_without_sha256sums_is_read_and_said_to_be_unverified(tmp_path: Path) -> None:
    """Sets written before sealing (and the tests' own) have none: still read, and the decision says so."""
    results = tmp_path / "results"
    a_set(results)
    done = cli_in_process("gate", SET_ID, *GATE, "--format", "json", "--results", str(results))
    assert done.returncode == 0, done.stderr
    assert any("has no SHA256SUMS" in note for note in json.loads(done.stdout)["notes"])
    sealed = sealed_set(tmp_path / "sealed")
    done = cli_in_process("gate", str(sealed), *GATE, "--format", "json")
    assert done.returncode == 0 and not any("SHA256SUMS" in n for n in json.loads(done.stdout)["notes"])
    show = cli_in_process("results", "show", str(sealed))
    assert "SHA256SUMS: verified" in show.stdout


def test_a_hostile_sha256sums_reads_nothing_outside_the_set(tmp_path: Path) -> None:
    results = tmp_path / "results"
    path = sealed_set(results)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the set's")
    sums = path / "SHA256SUMS"
    listed = len(sums.read_text().splitlines())
    sums.write_text(sums.read_text() + f"{'0' * 64}  ../../outside.txt\n{'0' * 64}  {outside}\n")
    line = one_line_exit_2(cli_in_process("gate", SET_ID, *GATE, "--results", str(results)))
    assert f"(SHA256SUMS line {listed + 1} unreadable, SHA256SUMS line {listed + 2} unreadable)" in line


# ------------------------------------------------------------------------------------------ every fio run failed
FAILED_FIO = DATA / "fio" / "fio-3.33-direct-bs1000-einval.json"
FIO_ERROR = ("fio exited with 1: fio: io_u error on file /var/tmp/oneline-scratch2/data.bin: Invalid argument: "
             "read offset=505000, buflen=1000")


def test_a_set_whose_every_fio_run_failed_gets_its_report(tmp_path: Path) -> None:
    """Every fio run failed (fio's JSON has the job, error 22, no completed read, so no latency columns): the
    report ended in KeyError: 'read_clat_p99_ns' and no report.md. Now it is written and its fio section says
    every run failed, with the first one's error."""
    rows = parse("fio", FAILED_FIO.read_bytes())
    assert "read_clat_p99_ns" not in rows[0] and rows[0]["error"] == 22
    results = tmp_path / "results"
    path = a_set(results, SET_ID, {"a": {"read_bw_bytes_per_s": [0] * 5}, "b": {"read_bw_bytes_per_s": [0] * 5}},
                 step="fio", broken={f"{i:04d}-fio-{arm}-cold-r{(i + 1) // 2}": FIO_ERROR
                                     for i, arm in zip(range(1, 11), "ab" * 5, strict=True)})
    fio = pd.read_parquet(path / "tables" / "fio.parquet")[["run_id", "target"]]
    pd.DataFrame([{**rows[0], "run_id": r, "target": t} for r, t in fio.itertuples(index=False)]) \
        .to_parquet(path / "tables" / "fio.parquet")
    done = cli_in_process("report", SET_ID, "--results", str(results))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not drawn: fio_ladder (no usable rows in the runs and fio tables)" in done.stdout
    report = (path / "report.md").read_text()
    section = report.split("## fio ladder\n\n", 1)[1].split("\n", 1)[0]
    assert section == f"**every fio run failed** (10 run(s)), so there is no ladder: `0001-fio-a-cold-r1` failed: " \
                      f"{FIO_ERROR}"
    show = cli_in_process("results", "show", SET_ID, "--results", str(results))
    assert show.returncode == 0, show.stdout + show.stderr


def test_an_upgraded_set_is_sealed_with_its_own_sha256sums(tmp_path: Path) -> None:
    """harness results upgrade writes a new set (new tables, new manifest): it gets SHA256SUMS of its own, never
    the original's (which would name every rewritten file as changed)."""
    results = tmp_path / "results"
    old = sealed_set(results)
    runs_file = old / "tables" / "runs.parquet"
    pd.read_parquet(runs_file).drop(columns=["variant"]).to_parquet(runs_file, index=False)
    manifest = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps(dict(manifest, schema_version=1)))
    checksums.write_sums(old)  # a v1 set sealed as v1 (by hand: no v1 harness sealed sets)
    before = (old / "SHA256SUMS").read_text()
    done = cli_in_process("results", "upgrade", old.name, "--results", str(results))
    assert done.returncode == 0, done.stderr
    new = results / f"{old.name}-v2"
    assert (new / "SHA256SUMS").read_text() != before and (old / "SHA256SUMS").read_text() == before
    assert load_result_set(new, verify=True).verified is True
    gated = cli_in_process("gate", new.name, *GATE, "--results", str(results), "--format", "json")
    assert gated.returncode == 0, gated.stderr


def test_report_on_a_read_only_set_is_one_line(tmp_path: Path) -> None:
    """A set on a read-only mount (an archive, a colleague's share): the first figure's OSError was a traceback.
    Now one line naming the file; the set is read (and verified) but nothing is written."""
    results = tmp_path / "results"
    path = sealed_set(results)
    mounted = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root): {mounted.stderr.strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True,
                                 check=False)
        assert remount.returncode == 0, remount.stderr
        line = one_line_exit_2(cli_in_process("report", SET_ID, "--results", str(results)))
    finally:
        subprocess.run(["umount", str(path)], check=False)
    assert line.startswith(f"error: {path}/figures") and "cannot write the report (Read-only file system)" in line
    assert not (path / "report.md").exists()

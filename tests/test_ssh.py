"""The ssh transport against a real OpenSSH server on loopback: quoting, files, host keys, deploy, a campaign.

The server (tests/sshd.py) has its own host key, client key and known_hosts; the user's ~/.ssh is
never read or written (every target names its key and known_hosts file).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.boards.inventory import load_target
from harness.boards.transports.procid import GONE, OTHER, SAME
from harness.boards.transports.ssh import SshTransport
from harness.errors import ConfigError, TargetError
from harness.results.loader import load_result_set
from tests.helpers import FILE_BYTES, SMALL, find_python, run_cli, wait_for
from tests.sshd import SshServer, sshd_unavailable

pytestmark = pytest.mark.skipif(sshd_unavailable() is not None, reason=sshd_unavailable() or "")
# every test here but the config check talks to the real sshd (the `sshd`/`board` fixtures): marked slow one by one


@pytest.fixture()
def workdir() -> Iterator[str]:
    path = Path("/var/tmp/harness-ssh-tests") / uuid.uuid4().hex[:8]  # a real disk, not tmpfs
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def board(sshd: SshServer, tmp_path: Path, workdir: str) -> Path:
    """A targets dir with one ssh target, ``board``, pointing at the test sshd."""
    sshd.write_target(tmp_path / "targets", "board", workdir=workdir)
    return tmp_path / "targets"


def _transport(targets: Path, name: str = "board") -> SshTransport:
    return SshTransport(load_target(targets / f"{name}.yaml"))


def test_ssh_options_are_validated_with_line(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("platform: linux\ntransport:\n  ssh:\n    host: b\n    prot: 22\n")
    with pytest.raises(ConfigError, match=r"b.yaml:5: transport.ssh.prot: unknown key 'prot'.*port"):
        load_target(path)
    path.write_text("transport:\n  ssh:\n    port: 22\n")
    with pytest.raises(ConfigError, match=r"b.yaml:2: transport.ssh.host: required"):
        load_target(path)


@pytest.mark.slow
def test_arguments_reach_the_target_unchanged(board: Path) -> None:
    transport = _transport(board)
    try:
        tricky = ["a b", "$HOME", "'q'", '"dq"', "x;rm -rf /nonexistent", "`id`", "*", ""]
        done = transport.run(["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *tricky],
                             cwd="/", env={"HARNESS_X": "1 2 $3"})
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == tricky
        env = transport.run(["sh", "-c", 'printf %s "$HARNESS_X"; pwd'], cwd="/tmp", env={"HARNESS_X": "1 2 $3"})
        assert env.stdout == b"1 2 $3/tmp\n"
        failed = transport.run(["sh", "-c", "echo oops >&2; exit 7"])
        assert (failed.returncode, failed.stderr) == (7, b"oops\n")
        with pytest.raises(TargetError, match="exit 7: oops"):
            failed.check()
    finally:
        transport.close()


@pytest.mark.slow
def test_put_and_get_files_and_trees(board: Path, tmp_path: Path, workdir: str) -> None:
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "deeper" / "bin.dat").write_bytes(bytes(range(256)) * 1000)
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    transport = _transport(board)
    try:
        transport.put(src, f"{workdir}/tree")
        transport.put(src / "a.txt", f"{workdir}/single/a.txt")
        assert transport.exists(f"{workdir}/tree/sub/deeper/bin.dat")
        assert not transport.exists(f"{workdir}/tree/nope")
        assert transport.read_file(f"{workdir}/single/a.txt") == b"alpha\n"
        back = tmp_path / "back"
        transport.get(f"{workdir}/tree", back)
        assert (back / "sub" / "deeper" / "bin.dat").read_bytes() == bytes(range(256)) * 1000
        assert (back / "run.sh").stat().st_mode & 0o111
        transport.get(f"{workdir}/single/a.txt", tmp_path / "a_back.txt")
        assert (tmp_path / "a_back.txt").read_text() == "alpha\n"
        # a put replaces the tree: files that are gone locally are gone remotely
        (src / "a.txt").unlink()
        transport.put(src, f"{workdir}/tree")
        assert not transport.exists(f"{workdir}/tree/a.txt")
        with pytest.raises(TargetError, match="not found"):
            transport.get(f"{workdir}/missing", tmp_path / "m")
        with pytest.raises(TargetError, match="missing"):
            transport.read_file(f"{workdir}/missing")
    finally:
        transport.close()


@pytest.mark.slow
def test_detached_process_outlives_the_connection(board: Path, sshd: SshServer, workdir: str) -> None:
    transport = _transport(board)
    try:
        # it waits for a file the test creates after the drop: no race with the reconnect (and gives up after
        # ~5 min, so a failed test leaves nothing running)
        waits = f"i=0; while [ ! -e {workdir}/go ] && [ $i -lt 6000 ]; do sleep 0.05; i=$((i + 1)); done; echo finished"
        pid = transport.start_detached(["sh", "-c", waits], cwd="/", log=f"{workdir}/d/log")
        assert transport.alive(pid)
        # starting again with the same log (a retried start after a drop) returns the same process
        assert transport.start_detached(["sleep", "100"], cwd="/", log=f"{workdir}/d/log") == pid
        assert sshd.drop_connections()  # the controller's session is gone ...
        assert transport.alive(pid)  # ... the transport reconnects, and the process still runs
        assert transport.reconnects >= 1
        transport.run(["touch", f"{workdir}/go"]).check()
        wait_for("the detached process to finish once its go file exists", lambda: not transport.alive(pid))
        assert transport.read_file(f"{workdir}/d/log") == b"finished\n"
        victim = transport.start_detached(["sleep", "100"], cwd="/", log=f"{workdir}/e/log")
        transport.signal(victim, 9)
        wait_for("the signalled process to be gone", lambda: not transport.alive(victim))
    finally:
        transport.close()


@pytest.mark.slow
@pytest.mark.fault
def test_a_recorded_pid_is_signalled_only_while_it_names_the_recorded_process(board: Path, workdir: str) -> None:
    """The identity check runs on the board, in the same shell as the kill: a pid whose process is gone and whose
    number another process holds (same command line, as a reused runner pid could be) is left alone."""
    transport = _transport(board)
    try:
        marker = f"{workdir}/runs/s/0001/spec.json"
        sleeper = ["python3", "-c", "import time; time.sleep(100)", marker]  # the marker in its command line
        first = transport.start_detached(sleeper, cwd="/", log=f"{workdir}/a/log")
        recorded = transport.identify(first)
        assert recorded is not None and transport.check(first, recorded, marker) == SAME
        assert transport.check(first, recorded, f"{workdir}/runs/s/0002/spec.json") == OTHER  # not its marker
        transport.signal(first, 9)
        wait_for("the first process to be gone", lambda: transport.check(first, recorded, marker) == GONE)
        other = transport.start_detached(sleeper, cwd="/", log=f"{workdir}/b/log")
        try:
            # the record of the first process, pointing at the second (what a reused pid looks like)
            assert transport.signal_recorded(other, 9, recorded, marker) == OTHER
            assert transport.alive(other)
            assert transport.signal_recorded(other, 9, transport.identify(other), marker) == SAME
            wait_for("the signalled process to be gone", lambda: not transport.alive(other))
        finally:
            transport.signal(other, 9)
    finally:
        transport.close()


@pytest.mark.slow
def test_unknown_host_key_is_refused_until_trusted(sshd: SshServer, tmp_path: Path, workdir: str) -> None:
    known = tmp_path / "empty_known_hosts"
    targets = tmp_path / "targets"
    sshd.write_target(targets, "fresh", workdir=workdir, known_hosts=known)
    refused = run_cli("targets", "--targets-dir", str(targets), "--check")
    assert refused.returncode == 1
    assert "fresh: target fresh: unknown host key" in refused.stdout and "harness targets trust fresh" in refused.stdout
    done = run_cli("deploy", "fresh", "--targets-dir", str(targets))
    assert done.returncode == 1 and "harness targets trust fresh" in done.stderr
    assert not known.exists()
    trusted = run_cli("targets", "trust", "fresh", "--yes", "--targets-dir", str(targets))
    assert trusted.returncode == 0, trusted.stderr
    host_fp = run_cli_keygen_fingerprint(Path(f"{sshd.host_key}.pub"))
    assert host_fp in trusted.stdout
    assert known.read_text().split()[1:] == Path(f"{sshd.host_key}.pub").read_text().split()[:2]
    again = run_cli("targets", "trust", "fresh", "--yes", "--targets-dir", str(targets))
    assert "already in" in again.stdout and len(known.read_text().splitlines()) == 1
    checked = run_cli("targets", "--targets-dir", str(targets), "--check")
    assert checked.returncode == 0 and "yes" in checked.stdout, checked.stdout
    assert "python 3." in checked.stdout and "cmake" in checked.stdout  # what the board has to build with


@pytest.mark.slow
def test_check_says_when_a_board_cannot_run_the_runner(sshd: SshServer, tmp_path: Path, workdir: str) -> None:
    targets = tmp_path / "targets"
    sshd.write_target(targets, "nopython", workdir=workdir, extra="python: /nonexistent/python3\n")
    old = [p for p in (find_python("3.7"), find_python("3.6")) if p]
    if old:
        sshd.write_target(targets, "oldpython", workdir=workdir, extra=f"python: {old[0]}\n")
    checked = run_cli("targets", "--check", "--targets-dir", str(targets))
    assert checked.returncode == 1
    out = " ".join(checked.stdout.split())  # the table wraps; the problem lines below it are whole
    assert "nopython: target nopython: /nonexistent/python3 not found (the runner needs Python >= 3.8" in out
    if old:
        version = old[0].name.removeprefix("python")
        assert f"oldpython: target oldpython: {old[0]} is Python {version}; the runner needs >= 3.8" in out


@pytest.mark.slow
def test_changed_host_key_is_always_an_error(sshd: SshServer, tmp_path: Path, workdir: str) -> None:
    from tests.sshd import keygen

    other = keygen(tmp_path / "other_host_key")
    entry = f"[{sshd.address}]:{sshd.port}"
    known = tmp_path / "known_hosts"
    known.write_text(f"{entry} {' '.join(Path(f'{other}.pub').read_text().split()[:2])}\n")
    targets = tmp_path / "targets"
    sshd.write_target(targets, "moved", workdir=workdir, known_hosts=known)
    with pytest.raises(TargetError, match="HOST KEY CHANGED"):
        _transport(targets, "moved")
    trusted = run_cli("targets", "trust", "moved", "--yes", "--targets-dir", str(targets))
    assert trusted.returncode == 1 and "HOST KEY CHANGED" in trusted.stderr and "refusing" in trusted.stderr
    assert len(known.read_text().splitlines()) == 1


def run_cli_keygen_fingerprint(pub: Path) -> str:
    import subprocess

    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[1]


@pytest.mark.slow
def test_deploy_pushes_builds_and_then_skips(board: Path, workdir: str) -> None:
    first = run_cli("deploy", "board", "--targets-dir", str(board))
    assert first.returncode == 0, first.stderr
    assert "native tools built" in first.stdout
    transport = _transport(board)
    try:
        manifest = json.loads(transport.read_file(f"{workdir}/runner/.deployed.json"))
        assert "agent.py" in manifest["files"] and "native/sampler.c" in manifest["files"]
        assert not any(name.startswith("native/bin") for name in manifest["files"])
        assert manifest["compiler"] and any("sampler.c" in c for c in manifest["build_commands"])
        assert transport.run([f"{workdir}/runner/native/bin/cachectl"]).returncode != 127
        second = run_cli("deploy", "board", "--targets-dir", str(board))
        assert "no files sent (unchanged)" in second.stdout and "no build needed" in second.stdout
        # a file changed on the target is sent again, alone; a lost binary is rebuilt
        transport.run(["sh", "-c", f"echo '# edited' >> {workdir}/runner/agent.py"]).check()
        transport.run(["rm", f"{workdir}/runner/native/bin/sampler"]).check()
        manifest["files"]["agent.py"] = "0" * 64
        transport.put_bytes(json.dumps(manifest).encode(), f"{workdir}/runner/.deployed.json")
        third = run_cli("deploy", "board", "--targets-dir", str(board))
        assert "1 files sent" in third.stdout and "native tools built" in third.stdout, third.stdout
        assert transport.exists(f"{workdir}/runner/native/bin/sampler")
        assert b"# edited" not in transport.read_file(f"{workdir}/runner/agent.py")
    finally:
        transport.close()


@pytest.mark.slow
def test_campaign_over_ssh_gives_the_local_tables(board: Path, tmp_path: Path, workdir: str) -> None:
    exp = tmp_path / "e2e.yaml"
    exp.write_text(SMALL)
    done = run_cli("run", str(exp), "--target", "board", "--targets-dir", str(board), "--results",
                   str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = list((tmp_path / "results").iterdir())
    rs = load_result_set(path)
    assert rs.complete and [r["status"] for r in rs.manifest["runs"]] == ["ok"] * 8
    (entry,) = rs.manifest["targets"]
    assert entry["transport"] == "ssh" and entry["deployed"]["compiler"]
    assert entry["deployed"]["files"]["agent.py"]
    runs = rs.table("runs")
    reads = runs[runs["step"] == "read"]
    cold, warm = reads[reads["cache"] == "cold"], reads[reads["cache"] == "warm"]
    assert len(cold) == len(warm) == 2
    # the device moved at least the file (other disk users on this machine may add to it) ...
    assert (cold["dev_read_bytes"] >= 0.9 * FILE_BYTES).all(), list(cold["dev_read_bytes"])
    # ... and the reader's own storage accounting says exactly the file cold, nothing warm
    assert ((cold["proc_storage_read_bytes"] - FILE_BYTES).abs() <= 0.02 * FILE_BYTES).all()
    # warm: the file was >= 99 % resident when the run began, but a busy machine may evict some pages during the
    # read (seen: 2.3 % read back); what matters is that warm is nothing like cold's whole file
    assert (warm["proc_storage_read_bytes"] <= 0.10 * FILE_BYTES).all(), list(warm["proc_storage_read_bytes"])
    assert (runs.loc[runs["cache"] == "cold", "residency_before_pct"] <= 1.0).all()
    assert (runs.loc[runs["cache"] == "warm", "residency_before_pct"] >= 99.0).all()
    fio = rs.table("fio")
    assert set(fio["job_name"]) == {"randread-64k-qd1", "randread-64k-qd4"} and (fio["read_iops"] > 0).all()
    assert set(rs.table("threads")["state"]) & {"R", "D", "S"}
    assert (path / "raw" / "board").is_dir() and len(list((path / "raw" / "board").iterdir())) == 8
    # nothing is left on the board: run dirs pulled and removed, created data files removed
    transport = _transport(board)
    try:
        left = transport.run(["sh", "-c", f"ls {workdir}/runs/*/ 2>/dev/null; find {workdir} -name '*.bin'"])
        assert left.stdout.strip() == b""
    finally:
        transport.close()


@pytest.mark.slow
def test_proxy_jump_goes_through_the_jump_host_with_its_key_verified(sshd: SshServer, tmp_path: Path,
                                                                     workdir: str) -> None:
    targets = tmp_path / "targets"
    jump = f"root@{sshd.address}:{sshd.port}"
    sshd.write_target(targets, "behind", workdir=workdir, extra=f"    proxy_jump: {jump}\n")
    log = sshd.root / "sshd.log"
    accepted_before = log.read_text().count("Accepted publickey")
    transport = _transport(targets, "behind")
    try:
        assert transport.run(["echo", "through"]).stdout == b"through\n"
    finally:
        transport.close()
    assert log.read_text().count("Accepted publickey") - accepted_before == 2  # the jump host, then the target
    # the jump host's key is checked too: with an empty known_hosts the jump is refused
    sshd.write_target(targets, "behind", workdir=workdir, extra=f"    proxy_jump: {jump}\n",
                      known_hosts=tmp_path / "empty")
    with pytest.raises(TargetError, match="unknown host key"):
        _transport(targets, "behind")


@pytest.mark.slow
def test_unreachable_or_refused_targets_are_one_line_errors(sshd: SshServer, tmp_path: Path, workdir: str) -> None:
    from tests.sshd import free_port, keygen

    targets = tmp_path / "targets"
    targets.mkdir()
    base = sshd.target_yaml(workdir=workdir)
    (targets / "off.yaml").write_text(base.replace(f"port: {sshd.port}", f"port: {free_port()}"))
    (targets / "stranger.yaml").write_text(base.replace(str(sshd.client_key), str(keygen(tmp_path / "k"))))
    off = run_cli("deploy", "off", "--targets-dir", str(targets))
    assert off.returncode == 1 and "target off: cannot connect to 127.0.0.1" in off.stderr
    assert len(off.stderr.strip().splitlines()) == 1
    stranger = run_cli("deploy", "stranger", "--targets-dir", str(targets))
    assert stranger.returncode == 1 and "target stranger: authentication failed for root@127.0.0.1" in stranger.stderr
    checked = run_cli("targets", "--check", "--targets-dir", str(targets))
    assert checked.returncode == 1 and "off: target off: cannot connect" in checked.stdout

"""Test helpers: where the repository and its captures are, running the real CLI, and waiting for a state.

Test modules import from here (never from ``tests.conftest``, which pytest loads as a plugin); fixtures live in
``conftest.py``. Every file a test reads is inside the repository: real captures are under ``tests/data/<tool>/``
with a ``SOURCE.md`` saying where each came from.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from harness.models.synth import SynthInfo
    from runner.run_context import RunContext

REPO = Path(__file__).resolve().parents[1]
# Real captured output of real tools and boards, copied byte for byte (tests/data/<tool>/SOURCE.md).
DATA = REPO / "tests" / "data"
FIXTURES = DATA

T = TypeVar("T")


# Set (to the test's id) while a test not marked slow runs; see conftest.py.
QUICK_TEST = "HARNESS_TEST_QUICK"


def slow_only(what: str) -> None:
    """Fail a test that does something slow (a campaign, a build, sshd, adb, jtop) without the ``slow`` marker:
    ``make test-fast`` leaves out exactly the slow tests, so the marker must say the truth."""
    quick = os.environ.get(QUICK_TEST)
    if quick:
        import pytest

        pytest.fail(f"{quick} {what} but is not marked slow (@pytest.mark.slow)", pytrace=False)


def without_columns(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment without COLUMNS: the output a CI log gets (stdout not a terminal: tables at natural width),
    whatever the shell that started pytest exported."""
    return {k: v for k, v in environ.items() if k != "COLUMNS"}


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 600, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """Run ``harness ARGS`` as a user would, in a subprocess."""
    done = subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**without_columns(os.environ), **(env or {})}, check=False)
    if args and args[0] in ("run", "deploy") and done.returncode != 2:
        slow_only(f"ran a campaign (`harness {args[0]}` got past its input checks)")  # exit 2: refused bad input
    return done


def cli_in_process(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float | None = None,
                   ) -> subprocess.CompletedProcess[str]:
    """Run ``harness ARGS`` through its real entry point (``harness.cli.main``) inside this process: the same
    parsing, output and exit codes as :func:`run_cli` without starting Python and loading pandas and scipy again,
    for the quick tests of commands that only read and write files. Never for a campaign (signals, children).
    ``timeout`` is accepted for symmetry with run_cli; the test's own timeout (pytest-timeout) bounds it."""
    import io

    from harness import cli

    if args and args[0] in ("run", "deploy"):
        raise AssertionError("cli_in_process is for commands that do not start a campaign: use run_cli")
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    os.environ.pop("COLUMNS", None)  # as run_cli's environment
    os.environ.update(env or {})
    code: int | str | None = 0
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main(list(args))
            except SystemExit as exc:
                code = exc.code
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(["harness", *args], returncode, out.getvalue(), err.getvalue())


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 120, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy and return that; after ``timeout`` seconds fail the test
    saying what was awaited. ``check`` may raise OSError or ValueError (a file half-written, not there yet):
    that counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (OSError, ValueError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


FILE_BYTES = 256 << 20
SMALL = f"""\
name: e2e
files:
  data: {{create: {FILE_BYTES}}}
cache: both
rounds: 2
validity: off   # the suite may share the machine (a second make test): its load must not decide what is drawn
collect:
  blockstat: {{period_ms: 10}}
  threads: {{period_ms: 5}}
steps:
  - fio:
      file: data
      jobs: [randread-64k-qd1, randread-64k-qd4]
      runtime_s: 1
  - read: {{file: data, pattern: seq}}
"""


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """Hold the emulation lock: no emulated run (ours or a colleague's) can change read_ahead_kb meanwhile."""
    from runner.emulation import machine_lock as emulation_lock

    with emulation_lock():
        yield


def private_base() -> Path:
    """This test process's own directory under /var/tmp (scratch files, workdirs): two test sessions on one machine
    never share one."""
    base = Path("/var/tmp/harness-tests") / f"p{os.getpid()}"
    base.mkdir(parents=True, exist_ok=True)
    return base


def private_targets_dir() -> Path:
    """A targets dir whose `local` has its own workdir, so its board lease is this test run's alone
    (campaigns elsewhere on the machine never make these tests wait)."""
    base = private_base() / "targets"
    if not (base / "local.yaml").exists():
        base.mkdir(parents=True, exist_ok=True)
        text = (REPO / "targets" / "local.yaml").read_text()
        workdir = private_base() / "work"
        (base / "local.yaml").write_text(text.replace("workdir: /var/tmp/harness", f"workdir: {workdir}"))
    return base


def run_campaign(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``harness run ARGS`` on the private local target."""
    return run_cli("run", *args, "--targets-dir", str(private_targets_dir()), **kwargs)  # type: ignore[arg-type]


def find_python(version: str) -> Path | None:
    """An interpreter of ``version`` (e.g. "3.8") for the tests of old-Python boards, or None. Looked for, in order:
    ``$HARNESS_TEST_PYTHON<major><minor>`` (e.g. HARNESS_TEST_PYTHON38=/usr/bin/python3.8), ``uv python find``,
    ``pyenv``, then ``python<version>`` on PATH."""
    wanted = f"HARNESS_TEST_PYTHON{version.replace('.', '')}"
    candidates: list[str] = []
    if os.environ.get(wanted):
        candidates.append(os.environ[wanted])
    candidates.append(_first_line(["uv", "python", "find", "--no-project", version]))
    latest = _first_line(["pyenv", "latest", version])
    if latest:
        prefix = _first_line(["pyenv", "prefix", latest])
        if prefix:
            candidates.append(str(Path(prefix) / "bin" / f"python{version}"))
    candidates.append(shutil.which(f"python{version}") or "")
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, check=False) if Path(candidate).exists() else None
        if probe is not None and probe.returncode == 0 and probe.stdout.strip() == version:
            return Path(candidate)
    return None


def python_or_skip(version: str) -> Path:
    """``find_python(version)``, or skip the test with one line saying how to enable it."""
    import pytest

    found = find_python(version)
    if found is None:
        pytest.skip(f"no Python {version} here (old board images run the runner on it): set "
                    f"HARNESS_TEST_PYTHON{version.replace('.', '')}=/path/to/python{version}, "
                    f"or `uv python install {version}` / `pyenv install {version}`")
    return found


def _first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else ""


def live_processes_mentioning(text: str) -> list[str]:
    """``pid: command line`` of every live process (but this one) whose command line contains ``text``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


# Controllers the tests started; conftest stops any still running when a test ends (a failed test leaves none).
STARTED: list[subprocess.Popen[str]] = []

STOPPED = """\
name: stopped
files:
  data: {{create: 8M}}
rounds: 2
validity: off   # stopping, not interference, is under test here
collect: [{collect}]
steps:
  - fio: {{file: data, jobs: [randread-64k-qd1], runtime_s: {runtime}}}
"""


class Controller:
    """``harness run`` in its own process, paused at ``phase``; its stderr is read as it comes."""

    def __init__(self, tmp_path: Path, phase: str, *, runtime_s: float = 1, ignore_sigint: bool = False,
                 release: Path | None = None, results: Path | None = None, extra_yaml: str = "",
                 env: dict[str, str] | None = None, targets_dir: Path | None = None,
                 scratch: Path | None = None, collect: str = "blockstat, threads", own_scratch: bool = True) -> None:
        slow_only("runs a campaign")
        self.exp = tmp_path / "stopped.yaml"
        self.exp.write_text(STOPPED.format(runtime=runtime_s, collect=collect) + extra_yaml)
        self.results = results or tmp_path / "results"
        self.scratch = scratch or private_base() / f"scratch-{tmp_path.name}"
        # a file beside scratch that no fault may touch: checked when the controller has stopped
        self.sentinel = self.scratch.parent / f"sentinel-{tmp_path.name}"
        self.sentinel_bytes = os.urandom(4096)
        self.sentinel.write_bytes(self.sentinel_bytes)
        self.lines: list[str] = []

        def start_from_a_terminal() -> None:
            # SIGINT and SIGHUP as a shell in a terminal gives them, whatever this suite inherited: under `nohup`
            # (or `cmd &`) they arrive ignored, and the controller rightly keeps an ignored SIGHUP ignored
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        def start_as_a_background_job() -> None:  # what `cmd &` in a non-interactive shell does
            start_from_a_terminal()
            signal.signal(signal.SIGINT, signal.SIG_IGN)

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "run", str(self.exp), "--results", str(self.results),
             *(["--scratch", str(self.scratch)] if own_scratch else []),  # off: under each target's workdir
             "--targets-dir", str(targets_dir or private_targets_dir())],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**without_columns(os.environ), "HARNESS_PAUSE_AT": phase,
                 **({"HARNESS_PAUSE_RELEASE": str(release)} if release else {}), **(env or {})},
            preexec_fn=start_as_a_background_job if ignore_sigint else start_from_a_terminal)
        self.out: list[str] = []
        assert self.proc.stderr is not None and self.proc.stdout is not None  # both PIPE
        stderr, stdout = self.proc.stderr, self.proc.stdout
        self.readers = [threading.Thread(target=lambda: self.lines.extend(stderr), daemon=True),
                        threading.Thread(target=lambda: self.out.extend(stdout), daemon=True)]
        for reader in self.readers:
            reader.start()
        STARTED.append(self.proc)
        first = phase.split(",")[0]
        try:
            wait_for(f"the controller to pause at {first}", lambda: any(f"paused at {first}" in x for x in self.lines),
                     timeout=300)
        except BaseException:
            self.proc.kill()  # a test that gives up leaves no controller behind
            self.proc.wait()
            raise

    def release_at(self, phase: str, nth: int, release: Path) -> None:
        """Wait for the ``nth`` pause at ``phase``, then let the controller go on (``release`` file)."""
        wait_for(f"pause {nth} at {phase}", lambda: sum(f"paused at {phase}" in x for x in self.lines) >= nth, 300)
        release.touch()

    def stop(self, signum: int | None) -> tuple[int, str, str]:
        """Send ``signum`` (None: just wait) and collect the exit code, stdout and stderr."""
        if signum is not None:
            self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        for reader in self.readers:
            reader.join(10)
        assert self.sentinel.read_bytes() == self.sentinel_bytes, f"{self.sentinel} beside scratch was changed"
        self.sentinel.unlink()
        return self.proc.returncode, "".join(self.out), "".join(self.lines)

    def result_set(self) -> Path:
        (path,) = list(self.results.iterdir())
        json.loads((path / "manifest.json").read_text())  # valid JSON, whatever happened
        return path


def cgroups_missing() -> str | None:
    """Why emulation (cgroups, read_ahead_kb) cannot run on this machine, or None: the one gate of every test
    that runs ``emulate:`` for real."""
    from runner.emulation import cgroup

    if os.geteuid() != 0:
        return "cgroups and read_ahead_kb need root"
    if "memory" not in cgroup.detect() or "io" not in cgroup.detect():
        return "no writable cgroup memory and io controllers on this machine"
    return None


def needs_cgroups():  # noqa: ANN201 - a pytest mark
    """``@needs_cgroups()``: skip with the reason where the machine cannot emulate a board."""
    import pytest

    reason = cgroups_missing()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


# Tests that build llama.cpp (or wait for a build a neighbour makes) may take far longer than the default timeout.
BUILD_TIMEOUT_S = 3600


PAPER = REPO / "experiments" / "paper"


def trimmed_streaming_experiment(text: str) -> str:
    """experiments/paper/emulated-orin.yaml cut down for the test suite, same shape: every step, collector, matrix
    key, cache condition and emulation stays, so every figure group has data; one round, the first and last value
    of each matrix key (and the baseline's), two prompts of 8 tokens, one llama-bench repetition, 1 s fio jobs."""
    import yaml

    exp = yaml.safe_load(text)
    exp["name"] = "streaming-test"
    exp["rounds"] = 1
    # the suite may share the machine (a second make test): its load must not decide which figures exist;
    # validity has its own tests (tests/test_validity*.py)
    exp["validity"] = "off"
    baseline = exp.get("baseline") or {}
    exp["matrix"] = {key: [v for v in values if v in (values[0], values[-1], baseline.get(key, values[0]))]
                     for key, values in exp["matrix"].items()}
    for item in exp["steps"]:
        (kind,) = set(item) - {"over", "cache"}
        config = item[kind]
        if kind == "llama-bench":
            config["args"] = _set_args(config["args"], {"-p": 8, "-n": 8, "-r": 1})
        elif kind == "llama-server":
            from harness.steps.llamacpp import load_prompts

            prompts = config["prompts"]
            config["prompts"] = (load_prompts(prompts) if isinstance(prompts, str) else prompts)[:2]
            config["n_predict"] = 8
        elif kind == "fio":
            config["runtime_s"] = 1
    return yaml.safe_dump(exp, sort_keys=False)


def _set_args(args: list[object], values: dict[str, object]) -> list[object]:
    """``args`` with the value after each flag in ``values`` replaced (flags not present are left alone)."""
    out = list(args)
    for flag, value in values.items():
        if flag in out:
            out[out.index(flag) + 1] = value
    return out


def build_native_tools() -> Path:
    """``make`` in runner/native (a no-op when built) and the directory of its binaries."""
    native = REPO / "runner" / "native"
    done = subprocess.run(["make", "-C", str(native)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return native / "bin"


@contextlib.contextmanager
def workload_files(prefix: str) -> Iterator[dict[str, str]]:
    """The workload's two 48 MiB files, ``fault`` (mmap touches) and ``pread``, on a real disk (/var/tmp: tmpfs
    pages are never cold), removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    files = {}
    for name in ("fault", "pread"):
        path = where / f"{name}.bin"
        with path.open("wb") as out:
            for _ in range(48):
                out.write(os.urandom(1 << 20))
        files[name] = str(path)
    try:
        yield files
    finally:
        shutil.rmtree(where, ignore_errors=True)


def one_line_exit_2(done: subprocess.CompletedProcess[str]) -> str:
    """The project's rule for bad input: exit 2 and one line on stderr, which is returned for the test to read."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def a_bad_field_is_one_line(kind: str, capture: Path, tmp_path: Path, line: int, error: str) -> None:
    """``capture`` with an ``x`` put into the second TAB-separated field of its ``line`` (1-based): the parser
    raises a ParseError ``line N: error``, and ``harness parse`` says it in one line naming the file and line."""
    from harness.parsers import ParseError, parse

    lines = capture.read_text().splitlines()
    lines[line - 1] = lines[line - 1].replace("\t", "\tx", 1)
    bad = tmp_path / capture.name
    bad.write_text("\n".join(lines) + "\n")
    try:
        parse(kind, bad.read_bytes())
    except ParseError as exc:
        assert f"line {line}: {error}" in str(exc), exc
    else:
        raise AssertionError(f"{kind} read {bad} without an error")
    message = one_line_exit_2(cli_in_process("parse", kind, str(bad)))
    assert str(bad) in message and f"line {line}" in message, message


def collect_step(native: Path, run_dir: Path, specs: list[dict[str, object]], argv: list[str],
                 timeout: float = 60) -> tuple[int, int, int]:
    """``argv`` as a run's step under the collectors ``specs``, started as the runner starts them (global ones
    first, then told the step's pid): (its pid, its exit status, CLOCK_MONOTONIC ns when it was started). The
    collectors are stopped whatever happens, and none may have failed."""
    from runner.collectors.run import Collectors

    collectors = Collectors(specs, str(native), str(run_dir), None)
    collectors.start_global()  # returns once they run (offcpu: once bpftrace's probes are attached)
    try:
        started = time.monotonic_ns()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        collectors.on_spawn(proc.pid)
        status = proc.wait(timeout=timeout)
    finally:
        errors = collectors.stop_all()
    assert errors == []
    return proc.pid, status, started


def subshell_workload(native: Path, out: Path, seconds: float) -> list[str]:
    """A step whose subshell runs the workload's sleeping threads for ``seconds`` (truth in ``out``): the workload
    is the step's grandchild, so only a collector that follows the step's process tree sees it."""
    return ["sh", "-c", f'( "{native / "workload"}" --seconds {seconds} --sleep 1 --hold-ms 0 --out "{out}"; true );'
                        " true"]


class NoCollectors:
    """The runner's collectors for a RunContext in a test that samples nothing."""

    def on_spawn(self, pid: int) -> None:
        pass


def fake_bmoe_cli(tmp_path: Path, script: str) -> tuple[RunContext, Path]:
    """A RunContext whose BigMoeOnEdge is ``script`` (a shell stand-in for bmoe-cli) and a model file to give it."""
    from runner.run_context import RunContext

    (tmp_path / "bin").mkdir()
    cli = tmp_path / "bin" / "bmoe-cli"
    cli.write_text(script)
    cli.chmod(0o755)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return RunContext({"engines": {"bigmoeonedge": {"bin_dir": str(cli.parent)}}}, str(tmp_path),
                      NoCollectors()), model


@contextlib.contextmanager
def synced_synth_moe(name: str, **params: Any) -> Iterator[SynthInfo]:
    """A synthetic MoE (``harness.models.synth.synth_moe`` with ``params``) on the real disk, not tmpfs, and synced,
    so that dropping its pages makes the next read hit the device; removed afterwards."""
    from harness.models.synth import synth_moe

    base = Path("/var/tmp/harness-tests") / f"{name}-{os.getpid()}"
    base.mkdir(parents=True, exist_ok=True)
    info = synth_moe(base / f"{name}.gguf", **params)
    fd = os.open(info.path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    try:
        yield info
    finally:
        os.unlink(info.path)
        base.rmdir()

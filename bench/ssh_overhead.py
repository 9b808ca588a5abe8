#!/usr/bin/env python3
"""Controller overhead per run over SSH (loopback sshd), and the cost of a second, unchanged deploy.

    .venv/bin/python bench/ssh_overhead.py [--runs 10] [--deploys 5]

1. Overhead per run: a campaign of N tiny runs (read of a 1 MiB file, cache none, no collectors) on a
   target behind a real sshd on 127.0.0.1, and the same on the local transport. For each run,
   overhead = (controller's run_started -> run_finished) - (the runner's own started -> ended wall time):
   spec push, detached start, DONE polling latency, pull with checksums, cleanup. Target <= 1.5 s.
2. Second deploy: deploy_runner on a workdir that already holds this tree (one manifest read, no
   transfer, no build), alone and with a fresh connection (what `harness deploy` pays). Target <= 1 s.
3. llama.cpp on the board (--engine): the board's build (pushed sdist tree, built there; minutes, once per
   board workdir, which persists at --engine-workdir) and then the cost of finding it in the board's cache
   (what every later campaign pays).

Needs root (sshd) and openssh-server; starts its own sshd and stops it by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.boards.deploy import deploy_runner  # noqa: E402
from harness.boards.inventory import load_target  # noqa: E402
from harness.boards.transports.ssh import SshTransport  # noqa: E402
from harness.campaign.orchestrator import Campaign  # noqa: E402
from harness.campaign.plan import build_plan  # noqa: E402
from harness.config.experiment import load_experiment  # noqa: E402
from tests.sshd import SshServer, sshd_unavailable  # noqa: E402

EXPERIMENT = """\
name: overhead
files:
  data: {{create: 1M}}
cache: none
rounds: {runs}
steps:
  - read: {{file: data}}
"""


class Clock:
    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.spans: dict[str, float] = {}

    def target_started(self, target: str, total: int) -> None: ...

    def run_started(self, target: str, run: object) -> None:
        self.started[run.run_id] = time.monotonic()  # type: ignore[attr-defined]

    def run_finished(self, target: str, run: object, status: str, error: str | None) -> None:
        self.spans[run.run_id] = time.monotonic() - self.started[run.run_id]  # type: ignore[attr-defined]

    def message(self, text: str) -> None: ...


def overhead(target_yaml: Path, exp: Path, results: Path) -> list[float]:
    clock = Clock()
    campaign = Campaign(build_plan(load_experiment(exp)), [load_target(target_yaml)], results, progress=clock,
                        lease_wait_s=0)
    result = campaign.run()
    assert result.statuses == {"ok": len(clock.spans)}, result.statuses
    out = []
    for run_id, span in clock.spans.items():
        record = json.loads((result.path / "raw" / target_yaml.stem / run_id / "run.json").read_text())
        out.append(span - (record["ended"]["wall"] - record["started"]["wall"]))
    return out


def summary(values: list[float]) -> str:
    return (f"median {statistics.median(values):.3f} s, mean {statistics.mean(values):.3f} s, "
            f"max {max(values):.3f} s (n={len(values)})")


def engine_on_board(server: SshServer, targets: Path, workdir: str, repeats: int) -> None:
    from harness.boards.session import open_session
    from harness.campaign.prepare import BUILD_CACHE
    from harness.engines import ENGINES
    from harness.engines.llamacpp.remote import build_on_target

    server.write_target(targets, "board", workdir=workdir)
    engine = ENGINES["llama.cpp"]
    spec = engine.spec(None)
    patches, flags = engine.inputs(spec, ROOT)
    session = open_session(load_target(targets / "board.yaml"))
    try:
        first = build_on_target(session, spec.source, flags, patches, BUILD_CACHE / "sources", lambda _m: None)
        what = "built" if first["built"] else "was already in the board's cache"
        print(f"llama.cpp on the board: {what} in {first['duration_s']:.1f} s "
              f"({first['transferred_bytes'] / 2**20:.1f} MiB sent)")
        hits = []
        for _ in range(repeats):
            again = build_on_target(session, spec.source, flags, patches, BUILD_CACHE / "sources", lambda _m: None)
            assert not again["built"] and again["transferred_bytes"] == 0, again
            hits.append(again["duration_s"])
        print(f"llama.cpp on the board, cache hit (no transfer, no build): {summary(hits)}")
    finally:
        session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--deploys", type=int, default=5)
    parser.add_argument("--engine", action="store_true", help="also time llama.cpp built on the board")
    parser.add_argument("--engine-workdir", default="/var/tmp/harness-test-board")
    args = parser.parse_args()
    if sshd_unavailable():
        sys.exit(f"cannot start sshd: {sshd_unavailable()}")
    base = Path(tempfile.mkdtemp(prefix="ssh-overhead-"))
    workdir = Path("/var/tmp/harness-bench") / uuid.uuid4().hex[:8]
    server = SshServer(base / "sshd").start()
    try:
        targets = base / "targets"
        server.write_target(targets, "ssh", workdir=str(workdir / "ssh"))
        (targets / "local.yaml").write_text(f"platform: linux\ntransport: local\nworkdir: {workdir / 'local'}\n")
        exp = base / "overhead.yaml"
        exp.write_text(EXPERIMENT.format(runs=args.runs))
        print(f"machine: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}; {args.runs} runs per campaign")
        for name in ("local", "ssh"):
            values = overhead(targets / f"{name}.yaml", exp, base / f"results-{name}")
            print(f"controller overhead per run, {name:5s}: {summary(values)}")
        target = load_target(targets / "ssh.yaml")
        warm = SshTransport(target)  # the tree may have changed since the campaign deployed it
        deploy_runner(warm, target.workdir, target_name="ssh")
        warm.close()
        alone, with_connect = [], []
        for _ in range(args.deploys):
            t0 = time.monotonic()
            transport = SshTransport(target)
            t1 = time.monotonic()
            info = deploy_runner(transport, target.workdir, target_name="ssh")
            t2 = time.monotonic()
            transport.close()
            assert not info["transferred_files"] and not info["built"], info
            alone.append(t2 - t1)
            with_connect.append(t2 - t0)
        print(f"second deploy (unchanged tree), deploy only:       {summary(alone)}")
        print(f"second deploy (unchanged tree), connect + deploy:  {summary(with_connect)}")
        if args.engine:
            engine_on_board(server, targets, args.engine_workdir, args.deploys)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

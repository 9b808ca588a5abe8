"""The seed's read strategies (patches/llama.cpp/) measured on this machine: per strategy, cold llama-server requests
on a synthetic qwen3moe under a memory budget, interleaved with the unpatched base build in every round.

    python bench/read_strategies.py [--size 384M --experts 64 --used 8 --hidden 512] [--budget 128M]
        [--threads 2] [--tokens 16] [--requests 2] [--rounds 3] [--only willneed pread-128k ...] [--json out.json]

Per setting and round: a llama-server (``-t THREADS -c 512 --no-repack``) with the setting's variables, in a cgroup
of its own with memory.max = BUDGET and the device's read_ahead_kb at 128 (runner.emulation, as a run with
``emulate: {memory: BUDGET, read_ahead_kb: 128}``); per request the model paged
out of the server's mapping and dropped (runner.steps.pageout, as the llama-server step's cold requests), then one
greedy /completion of TOKENS tokens with /sys/block/DEV/stat and the server's /proc/PID/io read around it, as the
seed measured per request. Printed per setting (medians over requests): device read bytes, average read request,
requests in flight while the device was busy (Δtime_in_queue / Δio_ticks), the server's own read bytes, the
prompt's time (``timings.prompt_ms``: from cold, most of the routed experts are read there) and decode tok/s
(``timings.predicted_per_second``), each with the ratio of medians to the same session's base and its bootstrap
95 % interval (harness.analysis.ratios, the gate's statistic). Without a memory budget the decode finds most
experts already read by the prompt: only under one does it stream. The device is shared with whatever else
runs: the server's bytes are exact, the request size and in-flight count are the device's.

The builds come from the harness's build cache (HARNESS_BUILD_CACHE, default ~/.cache/harness/builds): the base
build and ONE build with the whole series; the series' README.md holds a table this script printed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.analysis.ratios import ratio_of_medians  # noqa: E402
from harness.engines.llamacpp import CPU_NATIVE_FLAGS, DEFAULT_CACHE_DIR, build_llamacpp  # noqa: E402
from harness.models.synth import synth_moe  # noqa: E402
from harness.parsers.blockstat import delta, parse_blockstat  # noqa: E402
from harness.units import parse_size  # noqa: E402
from runner.contract import COLD_MAX_PCT  # noqa: E402
from runner.emulation.run import Emulation  # noqa: E402
from runner.probes.blockdev import block_device_of, blockstat_line  # noqa: E402
from runner.steps.generators import post_completion  # noqa: E402
from runner.steps.llama_server import free_port  # noqa: E402
from runner.steps.pageout import make_cold, warm_engine_files  # noqa: E402

SDIST = "llama-cpp-python==0.3.36"
PROMPTS = REPO / "experiments" / "prompts" / "short.jsonl"  # the seed's five short prompts
SERIES = sorted((REPO / "patches" / "llama.cpp").glob("[0-9][0-9][0-9][0-9]-*.patch"))
SETTINGS: dict[str, dict[str, str]] = {   # name -> variables; "base" is the unpatched build, "off" the series unset
    "base": {},
    "off": {},
    "willneed": {"HARNESS_EXPERT_WILLNEED": "1"},
    "pread-128k": {"HARNESS_EXPERT_PREAD": "131072"},
    "pread-128k-random": {"HARNESS_EXPERT_PREAD": "131072", "HARNESS_EXPERT_FADV_RANDOM": "1"},
    "pread-512k": {"HARNESS_EXPERT_PREAD": "524288"},
    "async-4": {"HARNESS_EXPERT_ASYNC": "4"},
    "async-8": {"HARNESS_EXPERT_ASYNC": "8"},
    "async-16": {"HARNESS_EXPERT_ASYNC": "16"},
}


@dataclass
class Server:
    """A llama-server with ``env`` added to its environment, under the runner's emulation of a board: a cgroup of
    its own with memory.max = ``budget`` (if any) and the device's read_ahead_kb (set under the machine lock before
    the server opens the model, restored after, as in a run with ``emulate:``)."""

    binary: str
    model: str
    env: dict[str, str]
    threads: int
    budget: int | None
    read_ahead_kb: int | None
    run_id: str

    def __enter__(self) -> Server:
        spec = {"memory_bytes": self.budget, "read_bytes_per_s": None, "read_iops": None,
                "read_ahead_kb": self.read_ahead_kb}
        self.side = Emulation(spec, self.run_id, block_device_of(self.model))
        self.side.setup()
        self.port = free_port()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_EXPERT_")}
        argv = [self.binary, "-m", self.model, "--host", "127.0.0.1", "--port", str(self.port), "-t",
                str(self.threads), "-c", "512", "--no-repack"]
        self.proc = subprocess.Popen(argv, env={**clean, **self.env}, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=self.side.enter)
        deadline = time.monotonic() + 300
        while not _healthy(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise SystemExit(f"{' '.join(argv)}: not healthy (exit {self.proc.returncode})")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()  # our own child, by its pid
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.side.teardown()

    def io(self) -> dict[str, int]:
        """The server's /proc/PID/io: what it read through read(2)/pread(2) (rchar) and from storage (read_bytes)."""
        lines = Path(f"/proc/{self.proc.pid}/io").read_text().splitlines()
        return {key: int(value) for key, value in (line.split(": ") for line in lines)}

    def complete(self, prompt: str, n_predict: int) -> dict[str, Any]:
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "seed": 1, "cache_prompt": False,
                "stream": False, "return_tokens": True, "ignore_eos": True}
        reply: dict[str, Any] = post_completion(self.port, body, 600)
        return reply

    def cold_request(self, prompt: str, n_predict: int, native_bin: str) -> dict[str, float]:
        """One request from a cold page cache (the server's mapping paged out, the file dropped, as the
        llama-server step's cold requests): the device's deltas around it and the server's own read bytes."""
        warm_engine_files(native_bin, self.proc.pid, self.model)
        _evicted, rows = make_cold(native_bin, self.proc.pid, self.model)
        if rows[0]["resident_pct"] > COLD_MAX_PCT:
            raise SystemExit(f"{self.model} still {rows[0]['resident_pct']:.1f} % resident after the page-out")
        device = block_device_of(self.model)
        before, io0 = blockstat_line(device), self.io()
        reply = self.complete(prompt, n_predict)
        after, io1 = blockstat_line(device), self.io()
        assert before is not None and after is not None
        d = delta(parse_blockstat(before.encode())[0], parse_blockstat(after.encode())[0])
        return {"device_read_bytes": d["read_bytes"], "read_ios": d["read_ios"],
                "avg_read_io_bytes": d["avg_read_io_bytes"] or 0.0,
                "inflight": d["time_in_queue_ms"] / d["io_ticks_ms"] if d["io_ticks_ms"] else 0.0,
                "process_read_bytes": io1["read_bytes"] - io0["read_bytes"],
                "process_rchar": io1["rchar"] - io0["rchar"],
                "prompt_s": float(reply["timings"]["prompt_ms"]) / 1000,
                "tps": float(reply["timings"]["predicted_per_second"])}


SHARED_MAX = 1.25  # a request's device delta is the server's when the device read at most this x what it read


def attributable_request(server: Server, prompt: str, n_predict: int, native_bin: str,
                         attempts: int = 4) -> dict[str, float]:
    """A cold request whose device delta is the server's own (others' reads at most a quarter of it): the device
    is shared, and its request sizes and in-flight count mean the strategy's only then. Up to ``attempts`` tries;
    the last one is returned with ``attributable`` 0 when none was."""
    for _ in range(attempts):
        one = server.cold_request(prompt, n_predict, native_bin)
        one["attributable"] = float(one["device_read_bytes"] <= SHARED_MAX * one["process_read_bytes"])
        if one["attributable"]:
            break
    return one


def _healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="384M")
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--used", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--budget", default="128M", help="memory.max of each server's cgroup; none: no cgroup")
    ap.add_argument("--read-ahead-kb", type=int, default=128, help="the device's, during each server (the board's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--requests", type=int, default=2, help="cold requests per server, per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None, help="settings besides base (default: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cache = Path(os.environ.get("HARNESS_BUILD_CACHE", str(DEFAULT_CACHE_DIR))).expanduser()
    base = build_llamacpp({"sdist": SDIST}, list(CPU_NATIVE_FLAGS), cache_dir=cache, log=print)
    patched = build_llamacpp({"sdist": SDIST}, list(CPU_NATIVE_FLAGS), patches=SERIES, cache_dir=cache, log=print)
    native = REPO / "runner" / "native"
    subprocess.run(["make", "-s", "-C", str(native)], check=True)
    budget = None if args.budget == "none" else parse_size(args.budget)
    names = ["base"] + [n for n in SETTINGS if n != "base" and (args.only is None or n in args.only)]
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="read-strategies-") as work:
        model = Path(work) / "synth.gguf"
        info = synth_moe(model, size_bytes=parse_size(args.size), experts=args.experts, used=args.used,
                         hidden=args.hidden)
        fd = os.open(model, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        print(f"model {info.file_bytes / 2**20:.0f} MiB, {info.layers} layers, {args.experts} experts, {args.used} "
              f"used, {info.expert_bytes_per_token / 2**20:.1f} MiB of experts per token; budget {args.budget}")
        prompts = [json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines() if line.strip()]
        for r in range(args.rounds):
            for name in names:  # interleaved: every round runs every setting once, base first
                build = base if name == "base" else patched
                with Server(str(build.binary("llama-server")), str(model), SETTINGS[name], args.threads,
                            budget, args.read_ahead_kb, f"rs{os.getpid()}-{r}-{name}") as server:
                    for i in range(args.requests):
                        one = attributable_request(server, prompts[(r * args.requests + i) % len(prompts)],
                                                   args.tokens, str(native / "bin"))
                        runs[name].append(one)
                        print(f"round {r} {name:18s} prompt {one['prompt_s']:6.2f} s {one['tps']:7.2f} tok/s  device "
                              f"{one['device_read_bytes'] / 2**20:7.1f} MiB  avg io "
                              f"{one['avg_read_io_bytes'] / 1024:7.1f} KiB  in flight {one['inflight']:5.2f}",
                              flush=True)
    print("\n| setting | device MiB | process MiB | avg read KiB | in flight | prompt s | prompt vs base (95 % CI) "
          "| decode tok/s | vs base (95 % CI) | own |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---|---:|")
    summary: dict[str, object] = {}
    for name in names:
        rows = runs[name]
        est = ratio_of_medians([x["tps"] for x in runs["base"]], [x["tps"] for x in rows])
        first = ratio_of_medians([x["prompt_s"] for x in runs["base"]], [x["prompt_s"] for x in rows])
        mid = {k: median(x[k] for x in rows) for k in rows[0]}
        summary[name] = {"medians": mid, "ratio": est.ratio, "ci": [est.low, est.high], "prompt_ratio": first.ratio,
                         "prompt_ci": [first.low, first.high], "runs": rows}
        own = sum(int(x["attributable"]) for x in rows)
        print(f"| {name} | {mid['device_read_bytes'] / 2**20:.1f} | {mid['process_read_bytes'] / 2**20:.1f} | "
              f"{mid['avg_read_io_bytes'] / 1024:.0f} | {mid['inflight']:.2f} | {mid['prompt_s']:.2f} | "
              f"{first.ratio:.3f} ({first.low:.3f}-{first.high:.3f}) | {mid['tps']:.2f} | "
              f"{est.ratio:.3f} ({est.low:.3f}-{est.high:.3f}) | {own}/{len(rows)} |")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "settings": summary},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()

"""How synthetic models route for real: write one small qwen3moe per ``--routing``, decode with BigMoeOnEdge's
``bmoe-cli --route-trace`` and print the routing figures (harness.analysis.routing) beside those of any real traces
given, over the same number of decoded tokens.

    python bench/routing_measure.py --bmoe-cli PATH [--routing narrow uniform zipf:1.1 ...] [--tokens 24]
        [--experts 64 --used 4] [--reference qwen.route.csv ...] [--json out.json]

``bmoe-cli`` comes from the harness's build of the ``bigmoeonedge`` engine (or any build of it). The reference
traces are BigMoeOnEdge's own (its archive's docs/bench-data, see tests/data/bmoe/routes/SOURCE.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from harness.analysis.routing import decode_window, routing_summary
from harness.models.synth import synth_moe
from harness.parsers.bmoe_route import parse_bmoe_route

PROMPT = "Explain how a mixture-of-experts model decides which experts handle each token."
FIGURES = ("distinct_experts", "uniform_distinct", "top4_share", "reuse_prev", "effective_experts")


def measure(bmoe_cli: str, routing: str, tokens: int, work: Path, **geometry: int) -> dict:
    """Write the model, decode ``tokens`` tokens with a route trace, and summarise the trace."""
    model, trace = work / f"synth-{routing.replace(':', '-')}.gguf", work / f"{routing.replace(':', '-')}.route.csv"
    synth_moe(model, routing=routing, **geometry)
    done = subprocess.run([bmoe_cli, "-m", str(model), "-p", PROMPT, "-n", str(tokens), "-t", "2", "-c", "512",
                           "--moe-stream", "--cache-mb", "0", "--route-trace", str(trace)],
                          capture_output=True, text=True, errors="replace", timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bmoe-cli failed on {routing}: {done.stderr[-2000:]}")
    return routing_summary(decode_window(parse_bmoe_route(trace.read_bytes()), tokens))


def _row(name: str, summary: dict) -> str:
    cells = [f"{summary[f]['mean']:.1%}" if f in ("top4_share", "reuse_prev") else f"{summary[f]['mean']:.1f}"
             for f in FIGURES]
    geometry = f"{summary['n_expert']}/{summary['n_expert_used']}"
    return f"| {name} | {geometry} | {summary['tokens']} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bmoe-cli", required=True)
    parser.add_argument("--routing", nargs="+", default=["narrow", "uniform", "zipf:1.1"])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--used", type=int, default=4)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ff", type=int, default=128)
    parser.add_argument("--reference", nargs="*", default=[], type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    geometry = {"experts": args.experts, "used": args.used, "layers": args.layers, "hidden": args.hidden,
                "ff": args.ff}
    results = {}
    print("| model | experts/used | tokens | distinct | uniform would | top-4 share | reuse prev | effective |\n"
          "|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="routing-") as work:
        for routing in args.routing:
            results[f"synth {routing}"] = measure(args.bmoe_cli, routing, args.tokens, Path(work), **geometry)
            print(_row(f"synth {routing}", results[f"synth {routing}"]), flush=True)
    for trace in args.reference:
        results[trace.name] = routing_summary(decode_window(parse_bmoe_route(trace.read_bytes()), args.tokens))
        print(_row(trace.name, results[trace.name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""Wall time of a 256-token replay of the demo model (issue 24: under a minute here).

    .venv/bin/python bench/replay_256.py [--tokens 256] [--strategy mmap ...] [--threads 2] [--compute dot]
        [--routing zipf] [--rounds 1]

The demo's model (experiments/quickstart.yaml: a 1.6 GB synthetic qwen3moe, 64 experts, 4 used; from the
harness's model cache, made there if missing, as a campaign does), its expert layout from ``inspect_gguf``, a
seeded synthetic trace of TOKENS tokens (zipf with the default exponent: the routing of the real traces), and per
strategy one replay run from a cold file (its pages dropped first), no memory budget. Printed per strategy: the
wall time of the whole program (reading the layout and trace included), its tok/s equivalent, device MB/s and
page-cache hit %.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from replay_vs_fio import replay  # noqa: E402

from harness.campaign.prepare import synth_model  # noqa: E402
from harness.config.experiment import SynthSpec  # noqa: E402
from harness.models.routing import parse_routing  # noqa: E402
from harness.steps.replay import model_layout  # noqa: E402
from harness.traces.model import write_trace  # noqa: E402
from harness.traces.synth import synth_trace  # noqa: E402

DEMO = SynthSpec(size="1.6G", experts=64, used=4, hidden=512)  # quickstart.yaml's model (routing narrow)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--strategy", action="append", help="repeatable (default: mmap)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compute", default="dot")
    parser.add_argument("--routing", default="zipf", help="uniform | zipf | zipf:S")
    args = parser.parse_args()
    model, _ = synth_model(DEMO, say=print)
    routing = parse_routing(args.routing)
    s = routing.s if routing.kind == "zipf" else 0.0
    with tempfile.TemporaryDirectory() as tmp:
        layout, trace = Path(tmp) / "layout.txt", Path(tmp) / "trace.txt"
        text, (n_layer, n_expert, n_used) = model_layout(str(model))  # what the replay step sends the target
        layout.write_text(text)
        write_trace(synth_trace(n_layer, n_expert, n_used, args.tokens, s=s, seed=0), trace)
        print(f"{model.name}: {model.stat().st_size / 1e9:.2f} GB, {n_layer} layers x {n_expert} experts, "
              f"{n_used} used; trace {args.tokens} tokens, routing {routing}; "
              f"threads {args.threads}, compute {args.compute}, cold, no budget")
        for strategy in args.strategy or ["mmap"]:
            summary = replay(model, layout, trace, Path(tmp) / f"{strategy}.jsonl", strategy,
                             "--threads", str(args.threads), compute=args.compute)
            print(f"{strategy:14s} wall {summary['wall_s']:6.1f} s (target < 60)  "
                  f"{summary['tok_s']:.2f} tok/s equivalent  "
                  f"device {summary.get('dev_mb_s') or 0:.0f} MB/s  page-cache hits "
                  f"{summary.get('cache_hit_pct') or 0:.1f} %")


if __name__ == "__main__":
    main()

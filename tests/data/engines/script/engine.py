"""A stand-in engine: llama.cpp-style timing lines on stderr, one [gen i/N] line per token, argv.json."""

import json
import sys
import time

n_predict = int(sys.argv[sys.argv.index("-n") + 1])
with open("argv.json", "w") as handle:
    json.dump(sys.argv[1:], handle)
start = time.monotonic()
for index in range(1, n_predict + 1):
    time.sleep(0.002)
    print(f"  [gen {index}/{n_predict}] token_id={100 + index} (2 ms, 500.00 tok/s)", file=sys.stderr)
eval_ms = (time.monotonic() - start) * 1000
prefix = "llama_perf_context_print:"
print(f"{prefix}        load time =      10.00 ms", file=sys.stderr)
print(f"{prefix} prompt eval time =       5.00 ms /     4 tokens (    1.25 ms per token,   800.00 tokens per second)",
      file=sys.stderr)
per_token, tps = eval_ms / n_predict, n_predict * 1000 / eval_ms
print(f"{prefix}        eval time = {eval_ms:10.2f} ms / {n_predict:5d} runs   ({per_token:8.2f} ms per token, "
      f"{tps:8.2f} tokens per second)", file=sys.stderr)
print(f"{prefix}       total time = {eval_ms + 15:10.2f} ms / {n_predict + 4:5d} tokens", file=sys.stderr)

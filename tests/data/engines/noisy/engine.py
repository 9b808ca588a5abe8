"""A stand-in engine whose decode speed has an injected spread: llama.cpp-style timing lines on stderr.

``--spread PCT`` draws the reported eval time from a lognormal around 2 ms per token with a coefficient of
variation of PCT per cent (fresh entropy each run); 0 reports exactly 2 ms per token, 500 tok/s, every run.
"""

import math
import random
import sys
import time

n_predict = int(sys.argv[sys.argv.index("-n") + 1])
spread = float(sys.argv[sys.argv.index("--spread") + 1]) / 100
sigma = math.sqrt(math.log(1 + spread * spread))  # the lognormal's sigma for that coefficient of variation
factor = random.SystemRandom().lognormvariate(-sigma * sigma / 2, sigma) if spread else 1.0
eval_ms = n_predict * 2.0 * factor
time.sleep(0.01)
prefix = "llama_perf_context_print:"
print(f"{prefix}        load time =      10.00 ms", file=sys.stderr)
print(f"{prefix} prompt eval time =       5.00 ms /     4 tokens (    1.25 ms per token,   800.00 tokens per second)",
      file=sys.stderr)
per_token, tps = eval_ms / n_predict, n_predict * 1000 / eval_ms
print(f"{prefix}        eval time = {eval_ms:10.2f} ms / {n_predict:5d} runs   ({per_token:8.2f} ms per token, "
      f"{tps:8.2f} tokens per second)", file=sys.stderr)
print(f"{prefix}       total time = {eval_ms + 15:10.2f} ms / {n_predict + 4:5d} tokens", file=sys.stderr)

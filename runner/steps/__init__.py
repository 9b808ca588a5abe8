"""Steps on the target: what a run measures. Each takes the step spec the controller expanded and a RunContext.

- ``registry``: the step functions by kind (``STEPS``)
- ``fio``: fio with a job file; ``read``: read a file once (the reader is ``readfile``, a process of its own)
- ``llama_bench``, ``llama_server``: llama.cpp, with ``llamacpp`` (binaries, model), ``llama_http`` (the
  server's streamed completions) and ``pageout`` (evicting the model's mapped pages for a cold request)
- ``equivalence``: greedy decoding under two sides compared token for token, with ``generators`` (one greedy
  generator per engine: llama-server, bmoe-cli)
- ``base``: ``StepFailed``

This file imports nothing: the reader (``python3 -m runner.steps.readfile``) starts without the other steps.
"""

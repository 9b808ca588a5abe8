"""Greedy generators for the equivalence step: one engine each, registered by engine name.

A generator is made with the side's context (its own run sub-directory and cgroup) and the side's spec, then
``start()`` (returns load seconds or None), ``generate(prompt, n_predict, seed, timeout_s)`` once per prompt
(returns ``{"tokens": [ids] or None, "text": str}``: token ids where the engine gives them, the generated text
always) and ``stop()`` (returns an exit code or None). Sides whose engines both give ids are compared as ids,
otherwise as text, byte for byte.

Adding an engine is one class here and its name in ``GENERATORS``. BigMoeOnEdge's ``bmoe-cli`` prints the generated
text: a process per prompt, compared as text.
"""

import http.client
import json

from runner.steps.base import StepFailed, step_env
from runner.steps.bmoe import bmoe_binary
from runner.steps.llama_server import has_exited, start_server, stop_server
from runner.steps.llamacpp import check_model
from runner.util import tail


def post_completion(port, body, timeout_s):
    """POST /completion without streaming: the final message, with every generated token id when
    ``return_tokens`` is set (a streamed reply holds back the ids of tokens that end inside a UTF-8 sequence)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("POST", "/completion", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise StepFailed("POST /completion: HTTP %d %s" % (resp.status, data[:500].decode(errors="replace")))
        return json.loads(data.decode("utf-8", errors="replace"))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise StepFailed("POST /completion failed: %s" % exc) from None
    finally:
        conn.close()


class LlamaServerGenerator:
    """llama-server on the loopback, one non-streamed /completion per prompt, ids from ``return_tokens``."""

    def __init__(self, ctx, side):
        self.ctx, self.side = ctx, side
        self.proc, self.port = None, None

    def start(self):
        self.proc, self.port, load_s = start_server(self.ctx, self.side)
        return load_s

    def generate(self, prompt, n_predict, seed, timeout_s):
        # temperature 0 keeps only the most likely token (llama.cpp's temp sampler); the seed matters only for a
        # side that samples (temperature > 0), and no prompt cache may carry state from one request to the next
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": self.side.get("temperature", 0.0),
                "seed": seed, "cache_prompt": False, "stream": False, "return_tokens": True,
                "ignore_eos": self.side.get("ignore_eos", True)}
        try:
            final = post_completion(self.port, body, timeout_s)
        except StepFailed as exc:
            if self.proc is not None and has_exited(self.proc):
                self.stop()
                raise StepFailed("%s (llama-server exited with %s: %s)" % (
                    exc, self.proc.returncode, tail(self.ctx.path("llama-server.stderr"), 8))) from None
            raise
        tokens = final.get("tokens")
        valid = isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)
        return {"tokens": tokens if valid else None, "text": final.get("content") or "",
                "stop_type": final.get("stop_type"), "tokens_predicted": final.get("tokens_predicted")}

    def stop(self):
        if self.proc is None:
            return None
        return stop_server(self.ctx, self.proc)


class BmoeCliGenerator:
    """BigMoeOnEdge's ``bmoe-cli``, one process per prompt; it gives text, not ids.

    Without ``--progress`` it prints the prompt, every generated token's piece as it comes, then a blank line and
    its ``generation:`` summary: the text compared is what lies between the prompt and that summary (the raw
    pieces, before any chat parsing). It stops at an end-of-generation token whatever ``ignore_eos`` says."""

    SUMMARY = b"\n\ngeneration: "

    def __init__(self, ctx, side):
        self.ctx, self.side = ctx, side
        self.calls, self.binary = 0, None

    def start(self):
        check_model(self.side)
        self.binary = bmoe_binary(self.ctx, self.side)
        return None  # every prompt loads the model in a process of its own

    def generate(self, prompt, n_predict, seed, timeout_s):
        name = "bmoe-cli-%d" % self.calls
        self.calls += 1
        argv = [self.binary, "-m", self.side["model"], "-p", prompt, "-n", str(n_predict), "--seed", str(seed),
                "--temp", repr(float(self.side.get("temperature", 0.0)))] + [str(a) for a in self.side.get("args", [])]
        self.ctx.wait(self.ctx.spawn(argv, name=name, env=step_env(self.side)), timeout_s)
        with open(self.ctx.path(name + ".stdout"), "rb") as handle:
            out = handle.read()
        head, end = prompt.encode("utf-8"), out.rfind(self.SUMMARY)
        if not out.startswith(head) or end < len(head):
            raise StepFailed("%s: stdout is not prompt + text + generation summary: %r" % (name, out[:200]))
        return {"tokens": None, "text": out[len(head):end].decode("utf-8", errors="replace")}

    def stop(self):
        return None


# engine name (as in the experiment's engine: and the run spec's engines) -> generator class
GENERATORS = {"llama.cpp": LlamaServerGenerator, "bigmoeonedge": BmoeCliGenerator}

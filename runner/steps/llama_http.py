"""llama-server over HTTP on the loopback: its health, and a streamed completion timed token by token."""

import http.client
import json
import time

from runner.steps.base import StepFailed


def health(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _running_count(msg, count):
    """Tokens generated so far after this streamed message.

    The server's own running count (``tokens_predicted``) is preferred: it holds back tokens that end in
    an incomplete UTF-8 sequence and sends them later in one message, which still lists one token id.
    """
    predicted = msg.get("tokens_predicted")
    if isinstance(predicted, int) and not isinstance(predicted, bool):
        return max(count, predicted)
    tokens = msg.get("tokens")
    if tokens is not None:
        return count + len(tokens)
    return count + (1 if msg.get("content") else 0)  # builds that stream neither


def stream_completion(port, body, timeout_s, on_tokens):
    """POST /completion with stream=true; call ``on_tokens(n)`` with the running token count as tokens arrive.

    The first call comes when prefill has ended (its last logits give the first token). Returns (final
    message, arrival time in monotonic ns of every message that carried tokens, running count at each,
    generated text).
    """
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("POST", "/completion", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise StepFailed("POST /completion: HTTP %d %s" % (resp.status, resp.read(500).decode(errors="replace")))
        count, times, counts, text = 0, [], [], []
        while True:
            line = resp.readline()  # returns as soon as one line is in: token times are not batched
            if not line:
                raise StepFailed("llama-server closed the stream before the final message")
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, SSE comments
            msg = json.loads(line[5:].decode("utf-8", errors="replace"))
            if "error" in msg:
                raise StepFailed("llama-server error: %s" % json.dumps(msg["error"])[:500])
            now_ns, new_count = time.monotonic_ns(), _running_count(msg, count)
            if new_count > count:
                count = new_count
                times.append(now_ns)
                counts.append(count)
                on_tokens(count)
            text.append(msg.get("content") or "")
            if msg.get("stop"):
                return msg, times, counts, "".join(text)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise StepFailed("POST /completion failed: %s" % exc) from None
    finally:
        conn.close()

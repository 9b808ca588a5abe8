"""llama.cpp steps on the target: llama-bench, and llama-server measured request by request.

Stdlib only (Python >= 3.8). The binaries come from ``spec["engines"]["llama.cpp"]["bin_dir"]`` (or the
step's own ``bin_dir``). Per request the server step records, on this machine's monotonic clock, block-device
stat lines and the server's /proc stat (majflt, utime, stime) just before the request, at the first streamed
token (which ends prefill), at the edges of an optional decode window and after the final message, plus the
arrival time of every streamed token. The controller turns these into whole-request, prefill, decode and
window deltas (harness/steps/llamacpp.py).
"""

import ctypes
import http.client
import json
import os
import signal
import socket
import time

from runner import cache, probe
from runner.steps import StepFailed
from runner.util import read_text, tail

CLK_TCK = os.sysconf("SC_CLK_TCK")
HEALTH_POLL_S = 0.2
STOP_GRACE_S = 5.0
EXIT_SETTLE_S = 2.0  # after a broken stream: time for a killed server to show up as exited


def engine_binary(ctx, spec, name):
    engines = ctx.spec.get("engines") or {}
    bin_dir = (engines.get("llama.cpp") or {}).get("bin_dir") or spec.get("bin_dir")
    if not bin_dir:
        raise StepFailed("%s: the run spec names no llama.cpp build (engines.llama.cpp.bin_dir)" % name)
    path = os.path.join(bin_dir, name)
    if not os.access(path, os.X_OK):
        raise StepFailed("%s: %s is missing or not executable" % (name, path))
    return path


def _check_model(spec):
    if not os.path.isfile(spec["model"]):
        raise StepFailed("model file %s does not exist" % spec["model"])


# ----------------------------------------------------------------------------------------------- llama-bench

def run_llama_bench(ctx, spec):
    _check_model(spec)
    argv = [engine_binary(ctx, spec, "llama-bench"), "-m", spec["model"]]
    argv += [str(a) for a in spec.get("args", [])] + ["-o", "jsonl"]
    proc = ctx.spawn(argv, name="llama-bench")
    try:
        ctx.wait(proc, spec["timeout_s"])
    finally:
        # keep what was printed even when the bench failed part-way: finished tests are still results
        os.replace(ctx.path("llama-bench.stdout"), ctx.path("bench.jsonl"))
    tests = [line for line in (read_text(ctx.path("bench.jsonl"), "") or "").splitlines() if line.startswith("{")]
    if not tests:
        raise StepFailed("llama-bench printed no results: %s" % tail(ctx.path("llama-bench.stderr"), 5))
    return {"tests": len(tests)}


# ----------------------------------------------------------------------------------------------- snapshots

blockstat_line = probe.blockstat_line


def proc_stat(pid):
    """majflt and CPU seconds of one process (not its children) from /proc/PID/stat, or None once gone."""
    text = read_text("/proc/%d/stat" % pid)
    if not text:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may contain spaces and parentheses
    # fields[0] is field 3 (state): majflt is field 12, utime 14, stime 15 (proc(5))
    return {"majflt": int(fields[9]), "utime_s": int(fields[11]) / CLK_TCK, "stime_s": int(fields[12]) / CLK_TCK}


def snapshot(device, pid):
    return {"mono_ns": time.monotonic_ns(), "blockstat": blockstat_line(device), "proc": proc_stat(pid)}


# ----------------------------------------------------------------------------------------------- cold cache

class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


# Same numbers on x86_64, aarch64 and arm (asm-generic table); Linux >= 5.10.
SYS_PIDFD_OPEN, SYS_PROCESS_MADVISE, MADV_PAGEOUT = 434, 440, 21


def _mapped_ranges(pid, path):
    real = os.path.realpath(path)
    ranges = []
    for line in (read_text("/proc/%d/maps" % pid, "") or "").splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5] == real:
            start, end = (int(x, 16) for x in parts[0].split("-"))
            ranges.append((start, end - start))
    return ranges


def page_out(pid, path):
    """Evict the pages of ``path`` that the server has mapped (process_madvise MADV_PAGEOUT).

    fadvise(DONTNEED) leaves every page that a process has mapped, and a llama.cpp server maps the whole
    model: without this a "cold" request would find the model fully resident. Returns bytes advised, or an
    error string where the kernel cannot (then the measured residency shows what the request really saw).
    """
    ranges = _mapped_ranges(pid, path)
    if not ranges:
        return {"mapped_bytes": 0}
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    pidfd = libc.syscall(SYS_PIDFD_OPEN, ctypes.c_int(pid), ctypes.c_uint(0))
    if pidfd < 0:
        return {"mapped_bytes": sum(n for _, n in ranges), "error": "pidfd_open: %s" % os.strerror(ctypes.get_errno())}
    try:
        vec = (_IoVec * len(ranges))(*[_IoVec(start, n) for start, n in ranges])
        done = libc.syscall(SYS_PROCESS_MADVISE, ctypes.c_int(pidfd), vec, ctypes.c_size_t(len(ranges)),
                            ctypes.c_int(MADV_PAGEOUT), ctypes.c_uint(0))
        out = {"mapped_bytes": sum(n for _, n in ranges)}
        if done < 0:
            out["error"] = "process_madvise(MADV_PAGEOUT): %s" % os.strerror(ctypes.get_errno())
        else:
            out["paged_out_bytes"] = done
        return out
    finally:
        os.close(pidfd)


def make_cold(native_bin, pid, model):
    """Page out the server's mapping, DONTNEED the file (retrying briefly for late writeback), measure.

    On macOS the drop is a whole-cache purge; its record (cleared or NOT, and why) goes with the evicted bytes."""
    evicted = page_out(pid, model)
    for _attempt in range(5):
        dropped = cache.drop(native_bin, [model])
        rows = cache.residency(native_bin, [model])
        if dropped is not None:
            evicted["cache_drop"] = dropped
            if not dropped["cleared"]:
                break  # retrying cannot help: purge is not allowed (or failed), and the record says so
        if rows[0]["resident_pct"] <= cache.COLD_MAX_PCT:
            break
        time.sleep(0.1)
    return evicted, rows


# ----------------------------------------------------------------------------------------------- HTTP

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def has_exited(proc):
    """True once the process has exited, without reaping it (stop_server reaps it and keeps its rusage)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return proc.poll() is not None


def _exits_soon(proc, within_s):
    """Whether a server whose connection just broke is exiting: a killed process closes its sockets
    before it becomes a zombie, so the client can see the broken stream first."""
    deadline = time.monotonic() + within_s
    while not has_exited(proc):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def wait_healthy(ctx, proc, port, timeout_s):
    deadline = time.monotonic() + timeout_s
    while True:
        if has_exited(proc):
            stop_server(ctx, proc)  # reaps: exit status and rusage (majflt, maxrss) of a server that died
            raise StepFailed("llama-server exited with %s before it was healthy: %s"
                             % (proc.returncode, tail(ctx.path("llama-server.stderr"), 8)))
        if _health(port) == 200:
            return
        if time.monotonic() > deadline:
            raise StepFailed("llama-server not healthy within %.0f s: %s"
                             % (timeout_s, tail(ctx.path("llama-server.stderr"), 8)))
        time.sleep(HEALTH_POLL_S)


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


# ----------------------------------------------------------------------------------------------- llama-server

def stop_server(ctx, proc, grace_s=STOP_GRACE_S):
    """SIGTERM to the server's process group, SIGKILL after ``grace_s``; reap it and keep its rusage."""
    if proc.returncode is not None:
        return proc.returncode
    deadline, sig = time.monotonic() + grace_s, signal.SIGTERM
    _signal_group(proc.pid, sig)
    while True:
        try:
            # WNOWAIT: an exited server stays a zombie, so its group id cannot be reused by the time the
            # group is killed below (anything the server itself started goes with it)
            exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped elsewhere (Popen.poll)
            return proc.poll()
        if exited is not None:
            _signal_group(proc.pid, signal.SIGKILL)
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            ctx.rusage[proc.log_name] = {"majflt": usage.ru_majflt, "minflt": usage.ru_minflt,
                                         "storage_read_bytes": usage.ru_inblock * 512,
                                         "utime_s": usage.ru_utime, "stime_s": usage.ru_stime,
                                         "maxrss_kb": usage.ru_maxrss, "exit_code": proc.returncode}
            return proc.returncode
        if sig == signal.SIGTERM and time.monotonic() > deadline:
            sig = signal.SIGKILL
            _signal_group(proc.pid, sig)
        time.sleep(0.02)


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _device(ctx, model):
    device = getattr(ctx.collectors, "device", None)
    return device or probe.resolve_block_device(ctx.spec.get("block_device", "auto"), [model])


def run_llama_server(ctx, spec):
    _check_model(spec)
    model, condition = spec["model"], spec.get("cache", ctx.spec.get("cache", "none"))
    native_bin = ctx.spec.get("native_bin") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "bin")
    device = _device(ctx, model)
    deadline = time.monotonic() + spec["timeout_s"]
    summary = {"device": device, "requests": 0}
    proc = None
    try:
        proc, port, summary["load_s"] = start_server(ctx, spec)
        summary["port"] = port
        with open(ctx.path("requests.jsonl"), "w") as out:
            for index, (prompt_index, repeat, prompt) in enumerate(_schedule(spec)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StepFailed("llama-server step exceeded its timeout of %.0f s after %d requests"
                                     % (spec["timeout_s"], index))
                record = _one_request(ctx, proc, spec, native_bin, device, port, condition, prompt, remaining)
                record.update(index=index, prompt_index=prompt_index, repeat=repeat)
                out.write(json.dumps(record, sort_keys=True) + "\n")
                out.flush()  # a later failure keeps the requests already measured
                summary["requests"] += 1
    except StepFailed as exc:
        if proc is not None and "exited" not in str(exc) and _exits_soon(proc, EXIT_SETTLE_S):
            stop_server(ctx, proc)
            exc.args = ("%s (llama-server exited with %s: %s)" % (exc, proc.returncode,
                                                                  tail(ctx.path("llama-server.stderr"), 8)),)
        raise
    finally:
        if proc is not None:
            summary["server_exit"] = stop_server(ctx, proc)
    return summary


def start_server(ctx, spec, attempts=3):
    """Start llama-server on a free loopback port and wait until /health says 200.

    The port is chosen before the server binds it; should something else take it in between, the server
    exits with "couldn't bind" and is started again on another port. Returns (proc, port, load seconds).
    """
    for attempt in range(attempts):
        port = free_port()
        argv = [engine_binary(ctx, spec, "llama-server"), "-m", spec["model"], "--host", "127.0.0.1",
                "--port", str(port)] + [str(a) for a in spec.get("args", [])]
        t0 = time.monotonic_ns()
        proc = ctx.spawn(argv, name="llama-server")
        try:
            wait_healthy(ctx, proc, port, min(spec.get("health_timeout_s", 300), spec["timeout_s"]))
            return proc, port, (time.monotonic_ns() - t0) / 1e9
        except StepFailed as exc:
            stop_server(ctx, proc)
            if "couldn't bind" not in str(exc) or attempt == attempts - 1:
                raise


def _schedule(spec):
    for repeat in range(spec.get("requests_per_prompt", 1)):
        for prompt_index, prompt in enumerate(spec["prompts"]):
            yield prompt_index, repeat, prompt


def _one_request(ctx, proc, spec, native_bin, device, port, condition, prompt, timeout_s):
    record = {"cache": condition, "prompt": prompt, "n_predict": spec["n_predict"],
              "decode_window": spec.get("decode_window")}
    if condition == "cold":
        record["pageout"], residency = make_cold(native_bin, proc.pid, spec["model"])
    else:
        residency = cache.residency(native_bin, [spec["model"]])
    record["residency_before_pct"] = residency[0]["resident_pct"]
    body = {"prompt": prompt, "n_predict": spec["n_predict"], "temperature": 0, "cache_prompt": False,
            "stream": True}
    body.update(spec.get("request", {}))
    marks = {}
    # decode_window [a, b]: tokens a..b, i.e. from the arrival of token a-1 to that of token b
    window = spec.get("decode_window")
    edges = {"first_token": 1}
    if window:
        edges.update(window_start=window[0] - 1, window_end=window[1])

    def on_tokens(count):
        for name, at in edges.items():
            if count >= at and name not in marks:
                marks[name] = snapshot(device, proc.pid)

    marks["start"] = snapshot(device, proc.pid)
    final, times, counts, text = stream_completion(port, body, timeout_s, on_tokens)
    marks["end"] = snapshot(device, proc.pid)
    record.update(marks=marks, token_ns=times, token_counts=counts, content=text, timings=final.get("timings"))
    for key in ("stop_type", "tokens_predicted", "tokens_evaluated", "tokens_cached", "truncated"):
        record[key] = final.get(key)
    return record

"""The llama-server step: the server measured request by request.

Stdlib only (Python >= 3.8). Per request the server step records, on this machine's monotonic clock, block-device
stat lines and the server's /proc stat (majflt, utime, stime) just before the request, at the first streamed
token (which ends prefill), at the edges of an optional decode window and after the final message, plus the
arrival time of every streamed token. The controller turns these into whole-request, prefill, decode and
window deltas (harness/steps/llamacpp.py).
"""

import json
import os
import signal
import socket
import time

from runner import pagecache, util
from runner.probes.blockdev import blockstat_line, resolve_block_device
from runner.steps.base import StepFailed, step_env
from runner.steps.llama_http import health, stream_completion
from runner.steps.llamacpp import check_model, engine_binary
from runner.steps.pageout import make_cold, warm_engine_files
from runner.util import read_text, tail

CLK_TCK = os.sysconf("SC_CLK_TCK")
HEALTH_POLL_S = 0.2
STOP_GRACE_S = 5.0
EXIT_SETTLE_S = 2.0  # after a broken stream: time for a killed server to show up as exited


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        if health(port) == 200:
            return
        if time.monotonic() > deadline:
            raise StepFailed("llama-server not healthy within %.0f s: %s"
                             % (timeout_s, tail(ctx.path("llama-server.stderr"), 8)))
        time.sleep(HEALTH_POLL_S)


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
            return ctx.reaped(proc, status, usage)
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
    return device or resolve_block_device(ctx.spec.get("block_device", "auto"), [model])


def run_llama_server(ctx, spec):
    check_model(spec)
    model, condition = spec["model"], spec.get("cache", ctx.spec.get("cache", "none"))
    native_bin = util.native_bin(ctx.spec)
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
        proc = ctx.spawn(argv, name="llama-server", env=step_env(spec))
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
    # first the engine's own files (so that the model's residency below is what the request meets), then the model
    record["engine_files"] = warm_engine_files(native_bin, proc.pid, spec["model"])
    if condition == "cold":
        record["pageout"], residency = make_cold(native_bin, proc.pid, spec["model"])
    else:
        residency = pagecache.residency(native_bin, [spec["model"]])
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

"""What each column of BigMoeOnEdge's rows means (``bmoe-cli``'s own telemetry, the telemetry.md of its docs folder).

Three sets: :data:`TOKEN_COLUMNS` (the ``tokens`` table, one row per generated token), :data:`SUMMARY_COLUMNS` (one
row per generation: the end-of-run lines, ``BMOE_DONE`` or the CSV's ``# summary`` trailer) and
:data:`REQUEST_COLUMNS` (what :func:`harness.parsers.bmoe.bmoe_request_row` adds to the ``requests`` table beside the
llama-server columns it fills). Every value is the engine's own measurement, never the harness's: the device bytes
the harness measures go into ``decode_dev_*`` from block-stat snapshots, as for llama-server.

Null, never 0, for what the engine did not measure: the engine writes 0 (or -1) for "unmeasured" in several places,
and each column below says which sentinel becomes null.
"""

from __future__ import annotations

_COMPUTE_RESIDUAL = ("a residual, not a measurement: wall_ms - io_ms - mgmt_ms (serial) or wall_ms - stall_ms - "
                     "mgmt_ms (--overlap), clamped at 0 by the engine, so it absorbs faults and scheduler stalls "
                     "and the wall-additive identity is not exact when the clamp fires; null when the engine did not "
                     "stream (mmap: nothing was subtracted)")
_ZERO_UNMEASURED = "the engine writes 0 where the platform cannot measure it (its Windows host build): 0 -> null"

TOKEN_COLUMNS: dict[str, str] = {
    "request": "which generation the token belongs to: the CSV's turn, the session's BMOE_BEGIN id, or the n-th "
               "run of a log holding several (0 for a one-shot run)",
    "token": "1-based index of the generated token (the engine's step)",
    "steps": "the number of tokens the engine was asked for (n_predict)",
    "t_ns": "arrival time on the harness's monotonic clock: null, the engine's output carries no clock",
    "gap_ms": "time since the previous token's decode ended plus this decode: loop_overhead_ms + wall_ms; null "
              "where loop_overhead_ms is absent (logs, CSVs before the memory block) and for the first token",
    "wall_ms": "wall time of this token's llama_decode (and nothing between two decodes)",
    "io_ms": "flash read time of the engine's own expert reads: serial, the wall time blocked on reads; under "
             "--overlap the SUM of per-lane busy time, which can exceed wall_ms; null when not streaming",
    "compute_ms": _COMPUTE_RESIDUAL,
    "mgmt_ms": "cache management this token (page commit, eviction, LRU bookkeeping; plus the throttled "
               "dense-residency probe); null in CSVs older than the column, and when not streaming",
    "stall_ms": "--overlap only: wall time compute threads waited for expert reads (summed per-thread block time / "
                "threads, so it under-states a partial stall); null for a serial run (the engine writes 0 there) "
                "and when not streaming",
    "read_bytes": "flash bytes the engine read for experts this token; from a log it is BMOE_PROGRESS read_mb "
                  "(2 decimals of MiB) x 2^20, so exact to +-5 KiB only; null when not streaming (mmap reads are "
                  "the kernel's page faults, which the engine does not count)",
    "cache_hit_pct": "cumulative expert-cache hit rate, in percent; null when no cache was used (engine: -1). Under "
                     "--drop-cold-experts it rises without the cache serving more (dropped routings leave the ratio)",
    "majflt": "major page faults inside this token's llama_decode (dense weights re-faulted from flash); "
              "null when cpu_ms is unmeasured (both come from one getrusage pair; " + _ZERO_UNMEASURED + ")",
    "cpu_ms": "CPU time of all threads inside this token's llama_decode; " + _ZERO_UNMEASURED,
    "dense_resident_frac": "sampled fraction of the dense (non-expert) weights in RAM, by mincore; null when "
                           "unmeasured (engine: -1)",
    "loop_overhead_ms": "wall time between the previous decode and this one (sampling, detokenization, sink "
                        "writes), outside wall_ms and outside tok/s; CSV only",
    "mtp_batch": "tokens the decode that produced this row confirmed (1 without speculation); a group's whole cost "
                 "sits on its first row, the others carry zeros; CSV only",
    "rss_mib": "resident set of the engine process (VmRSS); null when unmeasured (engine: 0); CSV only",
    "cache_budget_mib": "expert-cache budget in effect; null without a cache (engine: 0); CSV only",
}

SUMMARY_COLUMNS: dict[str, str] = {
    "request": "which generation (as for tokens)",
    "source": "what the row was read from: log (end-of-run lines), done (BMOE_DONE) or csv (# summary)",
    "tokens": "tokens generated",
    "s_per_token": "mean decode wall time per token, s (decode time only: drafting and loop overhead excluded)",
    "tok_s": "tokens per second over decode time",
    "n_prompt": "prompt tokens", "prefill_s": "prefill time, s", "prefill_tps": "prompt tokens per second",
    "load_s": "model load time, s", "ttft_s": "load_s + prefill_s, as the engine prints it",
    "read_mib": "flash MiB the engine read for experts (decode); null when not streaming",
    "read_mib_per_token": "read_mib / tokens (CSV: from the rows' exact byte sums)",
    "read_mib_per_s": "MiB per second of flash read time, as the log's moe-stream: line (CSV: from the rows' exact "
                      "sums, since the # summary line rounds io_s to 10 ms)",
    "io_s": "total flash read time, s (CSV; BMOE_DONE: io_s_per_token x tokens)",
    "io_s_per_token": "flash read time per token, s (a lane-busy sum under --overlap)",
    "compute_s_per_token": "mean of compute_ms, s: " + _COMPUTE_RESIDUAL,
    "mgmt_s_per_token": "mean cache-management time per token, s; null where the build did not report it",
    "stall_s_per_token": "--overlap only: mean wall stall on reads per token, s; null for a serial run",
    "cache_hit_pct": "expert-cache hit rate, %; null when no cache was used (engine: -1)",
    "cache_resident_mib": "expert-cache resident MiB at the end; null when no cache was used",
    "cache_budget_mib": "expert-cache budget, MiB; null when no cache was used",
    "cache_resizes": "times an auto budget was resized (older builds)",
    "cache_evictions": "cache evictions", "cache_rereads": "re-reads of an entry the cache had held once",
    "cpu_s_per_token": "CPU seconds per token over all threads; " + _ZERO_UNMEASURED,
    "majflt_per_token": "major faults per token inside decode; null when cpu_s_per_token is unmeasured",
    "cpu_occupancy_pct": "cpu_s_per_token / (s_per_token x threads), % (the compute: line)",
    "threads": "compute threads (the compute: line or the CSV preamble)",
    "spec_read_mib": "speculative prefetch MiB; null when the run did not prefetch",
    "spec_experts": "experts prefetched; null when the run did not prefetch",
    "spec_useful": "prefetched experts a later routing hit; null when the run did not prefetch",
    "experts_routed": "routed experts (with --drop-cold-experts)", "experts_dropped": "routed experts dropped",
    "streaming": "the engine streamed experts itself (--moe-stream); false: mmap, the kernel read them",
    "overlap": "reads overlapped with compute (--overlap); null when the output does not say",
    "output_sha256": "sha256 of the generated text (=== answer === block or BMOE_DONE text); null without it",
}

REQUEST_COLUMNS: dict[str, str] = {
    "decode_tps": "= tok_s (llama-server: predicted_per_second)",
    "prefill_tps": "= prefill_tps", "prompt_n": "= n_prompt", "prompt_ms": "= prefill_s x 1000",
    "predicted_n": "= tokens", "predicted_ms": "= s_per_token x tokens x 1000",
    "predicted_per_token_ms": "= s_per_token x 1000", "decode_tokens": "= tokens (every generated token is a decode)",
    "decode_s_per_token": "= s_per_token",
    "engine_read_bytes_per_token": "read_mib_per_token x 2^20: the engine's own count, to set beside the "
                                   "harness's decode_dev_read_bytes_per_token",
    "engine_read_mib_per_s": "= read_mib_per_s", "engine_cache_hit_pct": "= cache_hit_pct",
    "engine_cache_resident_mib": "= cache_resident_mib", "engine_load_s": "= load_s",
    "engine_io_s_per_token": "= io_s_per_token", "engine_compute_s_per_token": "= compute_s_per_token (a residual)",
    "engine_mgmt_s_per_token": "= mgmt_s_per_token", "engine_stall_s_per_token": "= stall_s_per_token",
    "engine_majflt_per_token": "= majflt_per_token (inside decode only; the harness's decode_majflt_per_token "
                               "counts the whole process over the decode window)",
    "engine_cpu_s_per_token": "= cpu_s_per_token", "output_sha256": "= output_sha256",
}

"""The table catalogue: every table a result set can hold, its file under ``tables/``, and what one row is.

Ingest writes these files, the loader reads them, and each figure names the ones it needs from here. Every
row of every table carries ``run_id`` and ``target`` (``facts``: ``target`` only), so any table joins onto
``runs`` for the matrix parameters, cache condition and round. A step or collector that produces a table
not listed here still gets its file (``<name>.parquet``); listing it documents it and lets figures need it.
"""

from __future__ import annotations

from dataclasses import dataclass

TABLES_DIR = "tables"  # inside a result set


@dataclass(frozen=True)
class Table:
    name: str
    holds: str  # what one row is, and who writes it

    @property
    def file(self) -> str:
        return table_file(self.name)


def table_file(name: str) -> str:
    """The file of table ``name`` inside ``tables/``."""
    return f"{name}.parquet"


RUNS = Table("runs", "one planned run: plan, variant (cell and cache label), status, timings, entry state, cache, "
                     "device deltas, emu_* (ingest)")
FACTS = Table("facts", "one fact of one target: key, value as text (ingest, from the manifest)")
FIO = Table("fio", "one fio job of an fio run (fio step)")
READS = Table("reads", "one read run as the reader saw it: pattern, block size, bytes, seconds (read step)")
BENCH = Table("bench", "one llama-bench test, every key of the build kept, avg_tps (llama-bench step)")
BENCH_SAMPLES = Table("bench_samples", "one llama-bench repetition (llama-bench step)")
REQUESTS = Table("requests", "one llama-server request: timings, prefill/decode windows (llama-server step)")
TOKENS = Table("tokens", "one streamed llama-server message with tokens: arrival time, gap (llama-server step)")
BLOCKSTAT = Table("blockstat", "one block-device sample with interval rates (blockstat collector)")
THREADS = Table("threads", "one thread (pid, tid) of the step's process or of a descendant at one sample (threads "
                "collector)")
PROCESSES = Table("processes", "one process of the step's tree: pid, ppid, comm, cmd, first and last seen (first_ns, "
                  "last_ns), gone; source threads or counters: the collector that saw it")
TELEMETRY = Table("telemetry", "one board sample: load, clocks, temperatures, power (tegrastats, jtop, thermal, "
                               "power, powermetrics collectors; column source)")
MEMORY = Table("memory", "one memory sample: vmstat, psi or vm_stat counters (column source)")
IOSTAT = Table("iostat", "one macOS iostat sample of one disk (iostat collector)")
THREAD_COUNTERS = Table("thread_counters", "one thread (pid, tid) of the step's process or of a descendant at one "
                                           "read of its cumulative kernel "
                                           "counters (schedstat, stat, taskstats delays), or one read of PSI "
                                           "(kind psi) (counters collector)")
OFFCPU = Table("offcpu", "one thread of the step's process, one class key (state, syscall, device) at one "
               "snapshot: cumulative time asleep and waiting for a CPU after wake-ups (offcpu collector)")
RECLAIM = Table("reclaim", "what one run's window reclaimed and re-read (vmstat collector)")
ENERGY = Table("energy", "one window's energy: a run's step (phase run) or a request's prefill or decode, with its "
                        "source, rail, period, joules, watts, J/token and the same above the idle baseline; null "
                        "columns where the board has no sensor or the samples do not cover the window (campaign)")
EQUIVALENCE = Table("equivalence", "one prompt decoded greedily under two sides: identical or the first "
                                   "divergence (position, both tokens), compared as ids or text (equivalence step)")

TABLES: dict[str, Table] = {table.name: table for table in (
    RUNS, FIO, READS, BLOCKSTAT, THREADS, FACTS, BENCH, BENCH_SAMPLES, REQUESTS, TOKENS, TELEMETRY, MEMORY, IOSTAT,
    RECLAIM, THREAD_COUNTERS, OFFCPU, EQUIVALENCE, PROCESSES, ENERGY)}

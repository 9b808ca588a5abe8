/*
 * sampler — fixed-period, low-overhead sampler of block-device stats or of the thread states of one process and
 * its descendants (harness runner, docs/methodology.md section 5). One mode per process.
 *
 *   sampler block DEV   [--period-ms 10] [--slice-us 100] [--out FILE] [--root DIR]
 *   sampler threads PID [--period-ms 5]  [--stat-ms 100] [--wchan] [--no-gate] [--slice-us 100] [--tree-ms 100]
 *                       [--no-tree] [--out FILE] [--root DIR]
 *
 * --root prefixes the /sys and /proc paths (tests use fake trees). Output (stdout by default) is text, written
 * through one big buffer that is flushed when full and on exit (the header line is flushed at once):
 *
 *   # harness-sampler v3 mode=block dev=vda period_ms=10 slice_us=100 clock=monotonic    (block: as in v1 and v2)
 *   <t_ns> <the fields of /sys/block/DEV/stat, single-space separated, exactly as the kernel printed them>
 *
 *   # harness-sampler v3 mode=threads pid=123 period_ms=5 clock_ticks_per_s=100 stat_every=20 wchan=0 arch=x86_64
 *     tree=ppid tree_every=20 gate=schedstat slice_us=100 clock=monotonic
 *                                            (one line; gate=none with --no-gate; tree=none with --no-tree)
 *   # proc t_ns=<t> pid=<pid> ppid=<ppid>\tcomm=<comm>\tcmd=<the head of its command line>
 *                                            a process of the tree, written at its first sample
 *   <t_ns>\t<pid>\t<tid>\t<state>\t<majflt>\t<utime_ticks>\t<stime_ticks>\t<comm>\t<wchan>\t<class>\t<syscall>
 *       (one line per thread per sample, same t_ns for all threads of a sample; process by process, tids
 *       ascending within each; pid is the thread's process, the tgid)
 *   # proc_end pid=<pid> first_ns=<t> last_ns=<t> gone=1|0
 *                                            a process that has gone (gone=1; last_ns: its last sample with a record),
 *                                            or, before the stop line, one still there (gone=0)
 *   # exit t_ns=<t> late_us_p50=<n> late_us_p90=<n> late_us_p99=<n> late_us_max=<n>
 *                                                     threads mode: the process has gone (or is a zombie); exit 0
 *   # stop t_ns=<t> samples=<n> overruns=<n> late_us_p50=<n> late_us_p90=<n> late_us_p99=<n> late_us_max=<n>
 *                                                     on SIGTERM/SIGINT (the current sample is finished); exit 0
 *
 * Threads mode, what is read (v2): every sample, every thread's /proc/PID/task/TID/syscall, one read that says
 * whether the thread is running (or runnable) and, when it is not, in which syscall it waits; every stat_every-th
 * sample (--stat-ms / --period-ms; 0 = every sample), at a rescan after a failed read, at a thread's first
 * sample and for a zombie, its stat too. Why: stat costs ~4 us per read (52 numbers formatted) and syscall ~2 us,
 * and v1's stat + wchan for every thread every sample cost 2.2-2.7 % of a core at 5 ms over 17 threads; wchan is
 * read only with --wchan (for threads not running).
 * Gating (gate=schedstat, the default; --no-gate: off): a thread whose syscall file printed the same line twice in
 * a row (parked in one wait: same syscall, arguments, stack and return address) is read through its schedstat
 * first (3 numbers, about half the cost of syscall): when sum_exec_runtime and pcount (the times it got a CPU) have
 * not moved since a schedstat read taken before its last syscall read, it has not been on a CPU since, so it is
 * still in that wait and the last reading is written again; otherwise syscall is read (a thread that ran even
 * briefly is always re-read). A thread that keeps waking (a barrier, a timed poll) is gated again only after 4,
 * 8, ... 256 identical lines. Caveat: a parked thread woken but not yet given a CPU (runnable, waiting in the run
 * queue) keeps its wait class until it runs, where --no-gate would say R. Kernels whose schedstat reads "0 0 0"
 * (no sched_info) are never gated. So in v2:
 *   state    R (syscall says running; or stat's R), stat's letter where stat was read this sample, else '-' (off
 *            CPU; D or S not read)
 *   majflt, utime_ticks, stime_ticks   as stat printed them where it was read this sample, else empty
 *   comm     the text between the first '(' and the LAST ')' of the thread's last stat read, control characters
 *            replaced by '?'
 *   wchan    with --wchan: the wait channel ("0" for R or none, "?" unreadable); without it: empty
 *   class    for a thread off CPU, from syscall's first field (the build architecture's numbers, <sys/syscall.h>;
 *            the header's arch): -1 (blocked outside a syscall) = fault_io, unless stat says stopped (other);
 *            read/pread64/readv/preadv/preadv2, and the async I/O waits io_uring_enter/io_getevents/
 *            io_pgetevents = read_io (but read/readv of a pipe, socket, anon
 *            inode such as an eventfd, or terminal = idle: that waits for a writer); mmap/madvise/mlock/mlock2/
 *            mlockall = fault_io (they fault a mapping in: MAP_POPULATE, MADV_POPULATE_READ; or wait for the mmap
 *            lock, which the syscall cannot tell apart); futex/futex_waitv = futex;
 *            ioctl on an fd (syscall's second field, arg0) that /proc/PID/fd/N names a GPU device
 *            (/dev/nvgpu..., /dev/nvmap, /dev/nvhost..., /dev/nvidia..., /dev/dri/..., /dev/kgsl..., /dev/mali...)
 *            = gpu (fds resolved once per thread and fd, forgotten every ~100 ms: an fd number can be reused);
 *            epoll_wait/epoll_pwait/epoll_pwait2/poll/ppoll/select/pselect6/nanosleep/clock_nanosleep = idle;
 *            any other = other. Empty for a running
 *            thread; '?' when syscall is unreadable (no ptrace access to the process: stat is then read every
 *            sample).
 *   syscall  the syscall number (-1: not in a syscall), empty for a running thread
 * v1 (older raw data, read by harness/parsers/sampler.py too) had the first eight fields, stat + wchan every sample;
 * v2 had no pid field and followed the step's process only.
 *
 * The tree (v3): the step's process and its descendants, found by proctree.h (a process whose parent is followed;
 * new pids probed after /proc/loadavg's last pid, a full /proc listing at least every ~1 s) every tree_every
 * samples (--tree-ms / --period-ms, default 100 ms; 0: every sample); each is sampled as the one process of v2 was
 * (its own task directory, thread list and fds), one after the other at the same instant, and dropped when it has
 * gone. The sampler exits when every process of the tree has gone (the step's own may exit before a descendant).
 *
 * Scheduling (Linux): a sample is only as good as its instant, and the sampler is itself a thread the scheduler
 * must put on a CPU when its timer fires. At the default slice, while every CPU is busy, EEVDF lets the running
 * thread finish its slice, so the sampler got a CPU at the next scheduling event -- 1 ms late at p90 beside a
 * 2-CPU workload -- and the commonest event is a thread blocking: samples landed just after I/O and futex waits
 * began, and those classes came out 7-19 points above the threads' own clocks and bpftrace's time in D
 * (tests/test_sampler_classes.py). So the sampler asks for a short slice (sched_setattr's sched_runtime,
 * --slice-us, default 100: the kernel's minimum), which lets it preempt at its wake-up (EEVDF's PREEMPT_SHORT,
 * Linux 6.12) at the policy and nice it was started with: late by 57-76 us at p90 there, classes within 6 points
 * (a preemption is itself a scheduling event: a thread waiting for a CPU tends to get it just after a sample, so
 * that wait is seen a little more often). SCHED_FIFO was tried and is worse: fault_io 20-30 points low in some runs
 * even on an idle machine. A thread that runs at a higher priority than the sampler (a step reniced, llama.cpp's
 * --prio) still delays it: p90 2.2 ms and fault_io 20 points high with the workload at nice -15 and the sampler at
 * 0. The header's slice_us is the slice the kernel reports back (sched_getattr): its default (1400 here) with
 * --slice-us 0, 0 where fair threads have no slice to report (before 6.12: the request is accepted and ignored).
 * The timer slack is set to 1 ns (prctl PR_SET_TIMERSLACK): the default 50 us let an idle machine wake the sampler
 * up to 50 us late on purpose, to batch timers. Every sample's lateness (its start minus its deadline) goes into a
 * histogram of 10 us bins; the exit and stop lines give its p50/p90/p99 (bin upper edges) and the largest, so a
 * reader can tell samples taken on time from samples taken at the scheduler's convenience.
 *
 * t_ns is CLOCK_MONOTONIC in nanoseconds, taken at the start of the sample. Samples follow an absolute schedule
 * (t0 + k*period, clock_nanosleep TIMER_ABSTIME); when a sample ends past the next deadline the missed deadlines are
 * skipped (no catch-up burst) and one overrun is counted.
 *
 * Cost: every file is opened once and re-read with pread(fd, buf, n, 0) (procfs seq_files and sysfs attributes
 * regenerate their content on a read at offset 0). The task directory stays open; every ~100 ms one fstat reads
 * its link count (2 + the number of threads) and the directory is listed again only when that count changed,
 * when a thread's read failed, or every ~1 s (a thread exiting as another starts keeps the count); where the link
 * count does not match the listing (fake trees on some file systems) it is listed every ~100 ms as before. The
 * per-thread fd classification is forgotten every ~100 ms (an fd number can be reused). Records are assembled in
 * place in the output buffer (cached tid and t_ns text, numbers parsed by hand: strtol and per-field copies
 * showed in the profile). What remains is kernel time: the procfs reads (~80 % of the sampler's CPU by perf) and
 * the timer wake-up (~15-20 us per sample on a VM). bench/sampler_overhead.py measures the modes side by side.
 *
 * Exit status: 0 stopped or process gone; 1 runtime error (message on stderr); 2 usage error.
 *
 * macOS (#ifdef __APPLE__): threads mode follows the step's process only (tree=none; libproc's
 * proc_listchildpids could find children, untested so far) and reads libproc (proc_pidinfo PROC_PIDLISTTHREADS, then PROC_PIDTHREADINFO per
 * thread) and prints the same header and record lines, so one parser reads both. What differs, and why:
 *   header   adds "source=libproc majflt=none" (keys a reader may ignore).
 *   t_ns     CLOCK_UPTIME_RAW: that is Python's time.monotonic on macOS, which the runner stamps the step with
 *            (macOS CLOCK_MONOTONIC also counts sleep, so it would not line up).
 *   tid      libproc's thread handle (the thread's pthread_t in the target), unique among live threads; the
 *            public SDK has no call that maps it to a pthread_threadid_np id.
 *   state    pth_run_state: RUNNING (on a CPU or runnable) -> R; UNINTERRUPTIBLE -> D (as on Linux: disk and
 *            page-fault I/O, but XNU also blocks kernel mutex waits this way, so D is broader than I/O);
 *            WAITING -> S; STOPPED -> T; HALTED (terminating) -> X.
 *   majflt   0: XNU counts faults per task, not per thread (the header says majflt=none).
 *   utime/stime  pth_user_time/pth_system_time (ns) converted to clock_ticks_per_s ticks, as /proc reports them.
 *   comm     pth_name, or the process name for an unnamed thread (Linux threads inherit the process comm).
 *   wchan    empty: XNU exposes no wait channel.
 *   class, syscall   empty: libproc gives no syscall (the header says class=none).
 * The process is gone when listing its threads fails with ESRCH or finds none, or it became a zombie, or its
 * start time changed (the pid was reused; checked every ~100 ms). Block mode exits 1 with one line on stderr:
 * macOS has no /sys/block; the iostat collector covers disk I/O there. --root is Linux-only (fake trees).
 *
 * Files (sampler.h): this one has the command line, the schedule and the header, exit and stop lines;
 * sampler_output.c the output buffer, "# proc_end" and the lateness; sampler_linux.c the Linux and Android
 * sources (block, and threads over /proc for the tree); sampler_macos.c the libproc one.
 */

#include "sampler.h"

static volatile sig_atomic_t g_stop;
long g_stat_every = 1;
int g_read_wchan;
int g_gate = 1;
static long g_slice_us = 100;  /* the scheduler slice asked for (--slice-us; 0: the kernel's default) (Linux) */

void (*g_at_stop)(void *);

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* ------------------------------------------------------------------------------------------------ time */

static uint64_t now_ns(void)
{
    struct timespec ts;
#ifdef __APPLE__
    clock_gettime(CLOCK_UPTIME_RAW, &ts); /* = Python's time.monotonic on macOS (mach_absolute_time) */
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleep until the absolute CLOCK_MONOTONIC time t (ns); returns early when a stop signal arrives. */
static void sleep_until(uint64_t t)
{
#if defined(__linux__)
    struct timespec ts;
    ts.tv_sec = (time_t)(t / 1000000000u);
    ts.tv_nsec = (long)(t % 1000000000u);
    while (!g_stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
#else /* macOS has no clock_nanosleep: relative sleeps against the same absolute schedule */
    for (;;) {
        struct timespec ts;
        uint64_t n = now_ns(), d;
        if (g_stop || n >= t)
            return;
        d = t - n;
        ts.tv_sec = (time_t)(d / 1000000000u);
        ts.tv_nsec = (long)(d % 1000000000u);
        if (nanosleep(&ts, NULL) == 0)
            return;
    }
#endif
}

/* ------------------------------------------------------------------------------------------------ main */

static void usage(FILE *f)
{
    fprintf(f, "usage: sampler block DEV   [--period-ms N] [--slice-us N] [--out FILE] [--root DIR]\n"
               "                           (default period 10 ms)\n"
               "       sampler threads PID [--period-ms N] [--stat-ms N] [--wchan] [--no-gate] [--slice-us N]\n"
               "                           [--tree-ms N] [--no-tree] [--out FILE] [--root DIR]\n"
               "                           (default period 5 ms, stat of every thread every 100 ms, the\n"
               "                           process's descendants looked for every 100 ms; --no-tree: not)\n"
               "       --slice-us: the scheduler slice to ask for (default 100; 0: the kernel's default)\n");
}

static int usage_error(const char *msg, const char *arg)
{
    if (arg)
        fprintf(stderr, "sampler: %s: %s\n", msg, arg);
    else
        fprintf(stderr, "sampler: %s\n", msg);
    usage(stderr);
    return 2;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *e;
    long v;
    if (!*s)
        return -1;
    errno = 0;
    v = strtol(s, &e, 10);
    if (errno || *e || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    enum mode mode;
    const char *target = NULL, *out_path = NULL, *root = "";
    long period_ms = -1, pid = 0, stat_ms = 100;
    int i, rc;
    uint64_t period_ns, next, samples = 0, overruns = 0;
#ifdef __linux__
    uint64_t slice_us;
#endif
    sample_fn sample;
    void *ctx;
    struct sigaction sa;

    if (argc < 2)
        return usage_error("missing mode", NULL);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "block"))
        mode = BLOCK;
    else if (!strcmp(argv[1], "threads"))
        mode = THREADS;
    else
        return usage_error("unknown mode", argv[1]);

    for (i = 2; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        size_t nl;
        if (a[0] != '-' || a[1] == '\0') {
            if (target)
                return usage_error("unexpected argument", a);
            target = a;
            continue;
        }
        if (!strcmp(a, "--wchan")) {
            g_read_wchan = 1;
            continue;
        }
        if (!strcmp(a, "--no-gate")) {
            g_gate = 0;
            continue;
        }
        if (!strcmp(a, "--no-tree")) {
#ifdef __linux__
            g_follow_tree = 0;
#endif
            continue;
        }
        nl = strcspn(a, "=");
        if (a[nl] == '=')
            val = a + nl + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return usage_error("option needs a value", a);
        if (!strncmp(a, "--period-ms", nl) && nl == 11) {
            if (parse_long(val, 1, MAX_PERIOD_MS, &period_ms))
                return usage_error("bad --period-ms (1..3600000)", val);
        } else if (!strncmp(a, "--stat-ms", nl) && nl == 9) {
            if (parse_long(val, 0, MAX_PERIOD_MS, &stat_ms))
                return usage_error("bad --stat-ms (0..3600000)", val);
        } else if (!strncmp(a, "--tree-ms", nl) && nl == 9) {
            long tree_ms;
            if (parse_long(val, 0, MAX_PERIOD_MS, &tree_ms))
                return usage_error("bad --tree-ms (0..3600000)", val);
#ifdef __linux__
            g_tree_ms = tree_ms;
#endif
        } else if (!strncmp(a, "--slice-us", nl) && nl == 10) {
            if (parse_long(val, 0, 100000, &g_slice_us))
                return usage_error("bad --slice-us (0..100000)", val);
        } else if (!strncmp(a, "--out", nl) && nl == 5) {
            out_path = val;
        } else if (!strncmp(a, "--root", nl) && nl == 6) {
            root = val;
        } else {
            return usage_error("unknown option", a);
        }
    }
    if (!target)
        return usage_error(mode == BLOCK ? "missing DEV" : "missing PID", NULL);
    if (mode == BLOCK && (strchr(target, '/') || !strcmp(target, ".") || !strcmp(target, "..")))
        return usage_error("DEV must be a device name such as nvme0n1", target);
    if (mode == THREADS && parse_long(target, 1, 0x7fffffffL, &pid))
        return usage_error("PID must be a positive integer", target);
    if (period_ms < 0)
        period_ms = mode == BLOCK ? 10 : 5;
    period_ns = (uint64_t)period_ms * 1000000u;
    g_stat_every = stat_ms / period_ms > 1 ? stat_ms / period_ms : 1;

    /* open the source before the output, so a bad DEV/PID does not truncate --out */
    rc = open_source(mode, target, pid, root, period_ms, &sample, &ctx);
    if (rc != 0)
        return rc;
#ifdef __linux__
    slice_us = use_short_slice(g_slice_us); /* before the first sample: it is the one to wake on time */
#endif

    g_out.buf = malloc(OUT_CAP);
    if (!g_out.buf) {
        fprintf(stderr, "sampler: out of memory\n");
        return 1;
    }
    if (out_path) {
        g_out.fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (g_out.fd < 0) {
            fprintf(stderr, "sampler: %s: %s\n", out_path, strerror(errno));
            return 1;
        }
    } else {
        g_out.fd = STDOUT_FILENO;
    }

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: the sleep returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a closed reader shows up as a write error */

    out_str("# harness-sampler v3 mode=");
    if (mode == BLOCK) {
        out_str("block dev=");
        out_str(target);
        out_str(" period_ms=");
        out_u64((uint64_t)period_ms);
    } else {
        long tck = sysconf(_SC_CLK_TCK);
        out_str("threads pid=");
        out_u64((uint64_t)pid);
        out_str(" period_ms=");
        out_u64((uint64_t)period_ms);
        out_str(" clock_ticks_per_s=");
        out_u64((uint64_t)(tck > 0 ? tck : 100));
        out_source_header(ctx);
    }
#ifdef __linux__
    out_str(" slice_us=");
    out_u64(slice_us);
#endif
    out_str(" clock=monotonic\n");
    out_flush(); /* the header goes out at once: the caller can see that sampling has started */

    next = now_ns();
    for (;;) {
        uint64_t t, after;
        if (g_stop) {
            rc = 0;
            if (g_at_stop)
                g_at_stop(ctx);
            out_str("# stop t_ns=");
            out_u64(now_ns());
            out_str(" samples=");
            out_u64(samples);
            out_str(" overruns=");
            out_u64(overruns);
            out_lateness();
            out_char('\n');
            break;
        }
        t = now_ns();
        late_add(t > next ? t - next : 0);
        rc = sample(ctx, t);
        if (rc == SAMPLE_ERROR) {
            rc = 1;
            break;
        }
        samples++;
        if (rc == SAMPLE_EXIT) {
            rc = 0;
            out_str("# exit t_ns=");
            out_u64(now_ns());
            out_lateness();
            out_char('\n');
            break;
        }
        if (g_out.failed) {
            rc = 1;
            break;
        }
        next += period_ns;
        after = now_ns();
        if (after >= next) { /* overran: skip to the next future deadline, no catch-up burst */
            overruns++;
            next += ((after - next) / period_ns + 1) * period_ns;
        }
        sleep_until(next);
    }
    out_flush();
    if (g_out.failed)
        rc = 1;
    if (out_path && close(g_out.fd) != 0) {
        fprintf(stderr, "sampler: %s: %s\n", out_path, strerror(errno));
        rc = 1;
    }
    return rc;
}

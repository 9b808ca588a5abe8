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
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#ifdef __linux__
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include "proctree.h"
#endif
#include <time.h>
#include <unistd.h>
#ifdef __APPLE__
#include <libproc.h>
#include <sys/proc.h>
#include <sys/proc_info.h>
#endif

#define OUT_CAP ((size_t)1 << 20)
#define READ_BUF 4096
#define RESCAN_MS 100
#define MAX_PERIOD_MS 3600000L
#if defined(__x86_64__)
#define ARCH "x86_64" /* whose syscall numbers the records carry */
#elif defined(__aarch64__)
#define ARCH "aarch64"
#elif defined(__arm__)
#define ARCH "arm"
#elif defined(__riscv)
#define ARCH "riscv"
#else
#define ARCH "other"
#endif

enum { SAMPLE_OK = 0, SAMPLE_EXIT = 1, SAMPLE_ERROR = -1 };
enum mode { BLOCK, THREADS };
typedef int (*sample_fn)(void *, uint64_t);

static volatile sig_atomic_t g_stop;
static long g_stat_every = 1; /* read stat for every thread every this many samples (always at a rescan) (Linux) */
static int g_read_wchan;       /* --wchan: read wchan for every thread not running, as v1 did (Linux) */
static int g_gate = 1;         /* gate syscall reads of parked threads by their schedstat (--no-gate: off) (Linux) */
static long g_slice_us = 100;  /* the scheduler slice asked for (--slice-us; 0: the kernel's default) (Linux) */

static void (*g_at_stop)(void *); /* threads mode: the tree's processes still there, before the stop line */

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* ------------------------------------------------------------------------------------------------ output */

static struct {
    int fd;
    char *buf;
    size_t len;
    int failed;
} g_out;

static void out_write_all(const char *p, size_t n)
{
    while (n > 0 && !g_out.failed) {
        ssize_t w = write(g_out.fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "sampler: write: %s\n", strerror(errno));
            g_out.failed = 1;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void out_flush(void)
{
    out_write_all(g_out.buf, g_out.len);
    g_out.len = 0;
}

static void out_mem(const char *p, size_t n)
{
    if (g_out.len + n > OUT_CAP) {
        out_flush();
        if (n > OUT_CAP) {
            out_write_all(p, n);
            return;
        }
    }
    memcpy(g_out.buf + g_out.len, p, n);
    g_out.len += n;
}

static void out_str(const char *s) { out_mem(s, strlen(s)); }

static void out_char(char c) { out_mem(&c, 1); }

/* v in decimal at dst (at most 20 digits); returns how many were written */
static size_t format_u64(char *dst, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof tmp, n;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    n = sizeof tmp - i;
    memcpy(dst, tmp + i, n);
    return n;
}

static void out_u64(uint64_t v)
{
    char digits[24];
    out_mem(digits, format_u64(digits, v));
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

/* "# proc_end pid=P first_ns=F last_ns=L gone=0|1": last_ns is the last sample with a record of it (both builds) */
static void write_proc_end(long pid, uint64_t first_ns, uint64_t last_ns, int gone)
{
    out_str("# proc_end pid=");
    out_u64((uint64_t)pid);
    out_str(" first_ns=");
    out_u64(first_ns);
    out_str(" last_ns=");
    out_u64(last_ns);
    out_str(gone ? " gone=1\n" : " gone=0\n");
}

#ifdef __APPLE__
/* ------------------------------------------------------------------------------------------------ macOS (libproc) */

struct threads_ctx {
    int pid;
    uint64_t start_us; /* process start time: a reused pid belongs to another process */
    char comm[2 * MAXCOMLEN + 1]; /* process name, for threads without a name of their own */
    uint64_t *handles;
    size_t cap;
    uint64_t ns_per_tick;
    unsigned since_check, check_every;
    int ppid, announced;        /* v3's "# proc" line written; macOS follows the step's process only (tree=none) */
    uint64_t first_ns, last_ns; /* the first and last samples that saw it */
};

static void mac_proc_end(struct threads_ctx *c, int gone) { write_proc_end(c->pid, c->first_ns, c->last_ns, gone); }

static void mac_finish(void *vctx) { mac_proc_end(vctx, 0); }

static size_t bounded_len(const char *s, size_t cap)
{
    const char *z = memchr(s, '\0', cap);
    return z ? (size_t)(z - s) : cap;
}

/* The process's start time, name and parent; -1 with errno when it is gone or unreadable, 1 when a zombie. */
static int proc_identity(int pid, uint64_t *start_us, char *comm, size_t cap, int *ppid)
{
    struct proc_bsdinfo bi;
    const char *name;
    size_t n;
    errno = 0;
    if (proc_pidinfo(pid, PROC_PIDTBSDINFO, 0, &bi, (int)sizeof bi) != (int)sizeof bi) {
        if (!errno)
            errno = ESRCH;
        return -1;
    }
    *start_us = bi.pbi_start_tvsec * 1000000u + bi.pbi_start_tvusec;
    *ppid = (int)bi.pbi_ppid;
    name = bi.pbi_name[0] ? bi.pbi_name : bi.pbi_comm; /* pbi_comm is cut at 16 bytes */
    n = bounded_len(name, name == bi.pbi_name ? sizeof bi.pbi_name : sizeof bi.pbi_comm);
    if (n >= cap)
        n = cap - 1;
    memcpy(comm, name, n);
    comm[n] = '\0';
    return bi.pbi_status == SZOMB;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The documented mapping (see the top of this file); XNU has no other run state. */
static char state_letter(int32_t run_state)
{
    switch (run_state) {
    case TH_STATE_RUNNING: return 'R';
    case TH_STATE_UNINTERRUPTIBLE: return 'D';
    case TH_STATE_STOPPED: return 'T';
    case TH_STATE_HALTED: return 'X';
    default: return 'S'; /* TH_STATE_WAITING */
    }
}

/* Still the process we started with? (not gone, not a zombie, pid not reused) */
static int same_process(struct threads_ctx *c)
{
    uint64_t start;
    return proc_identity(c->pid, &start, c->comm, sizeof c->comm, &c->ppid) == 0 && start == c->start_us;
}

static int threads_sample(void *vctx, uint64_t t)
{
    struct threads_ctx *c = vctx;
    size_t n, i;
    int bytes, live = 0;

    if (!c->announced) {
        c->announced = 1;
        c->first_ns = t;
        out_str("# proc t_ns=");
        out_u64(t);
        out_str(" pid=");
        out_u64((uint64_t)c->pid);
        out_str(" ppid=");
        out_u64((uint64_t)c->ppid);
        out_str("\tcomm=");
        out_str(c->comm);
        out_str("\tcmd=\n");
    }
    if (++c->since_check >= c->check_every) {
        c->since_check = 0;
        if (!same_process(c)) {
            mac_proc_end(c, 1);
            return SAMPLE_EXIT;
        }
    }
    for (;;) { /* a full buffer may mean more threads than it holds: grow and list again */
        errno = 0;
        bytes = proc_pidinfo(c->pid, PROC_PIDLISTTHREADS, 0, c->handles, (int)(c->cap * sizeof *c->handles));
        if (bytes <= 0) {
            if (errno == 0 || errno == ESRCH) {
                mac_proc_end(c, 1);
                return SAMPLE_EXIT;
            }
            fprintf(stderr, "sampler: pid %d: listing threads: %s\n", c->pid, strerror(errno));
            return SAMPLE_ERROR;
        }
        n = (size_t)bytes / sizeof *c->handles;
        if (n < c->cap || c->cap >= 65536) {
            break;
        } else {
            uint64_t *p = realloc(c->handles, c->cap * 2 * sizeof *p);
            if (!p)
                break;
            c->handles = p;
            c->cap *= 2;
        }
    }
    qsort(c->handles, n, sizeof *c->handles, cmp_u64);

    for (i = 0; i < n; i++) {
        struct proc_threadinfo ti;
        char state;
        char *name;
        size_t len, k;
        if (proc_pidinfo(c->pid, PROC_PIDTHREADINFO, c->handles[i], &ti, (int)sizeof ti) != (int)sizeof ti)
            continue; /* exited since the listing */
        state = state_letter(ti.pth_run_state);
        if (state != 'X')
            live++;
        len = bounded_len(ti.pth_name, sizeof ti.pth_name);
        name = ti.pth_name;
        if (len == 0) {
            name = c->comm;
            len = strlen(c->comm);
        }
        out_u64(t);
        out_char('\t');
        out_u64((uint64_t)c->pid);
        out_char('\t');
        out_u64(c->handles[i]);
        out_char('\t');
        out_char(state);
        out_str("\t0\t");
        out_u64(ti.pth_user_time / c->ns_per_tick);
        out_char('\t');
        out_u64(ti.pth_system_time / c->ns_per_tick);
        out_char('\t');
        for (k = 0; k < len; k++) {
            char ch = name[k];
            out_char((unsigned char)ch < 0x20 || ch == 0x7f ? '?' : ch);
        }
        out_str("\t\t\t\n"); /* wchan, class, syscall: none on macOS */
    }
    /* nothing readable, or only terminating threads: gone unless the process itself says otherwise */
    if (live == 0 && !same_process(c)) {
        mac_proc_end(c, 1);
        return SAMPLE_EXIT;
    }
    c->last_ns = t;
    return SAMPLE_OK;
}

static int open_source(enum mode mode, const char *target, long pid, const char *root, long period_ms,
                       sample_fn *sample, void **ctx)
{
    static struct threads_ctx tctx;
    long tck = sysconf(_SC_CLK_TCK);
    int zombie;
    if (mode == BLOCK) {
        fprintf(stderr, "sampler: block mode reads /sys/block/%s/stat, which macOS does not have; disk I/O on "
                        "macOS comes from the iostat collector\n", target);
        return 1;
    }
    if (*root) {
        fprintf(stderr, "sampler: --root (fake /proc trees) is Linux-only; macOS reads threads through libproc\n");
        return 2;
    }
    memset(&tctx, 0, sizeof tctx);
    tctx.pid = (int)pid;
    zombie = proc_identity(tctx.pid, &tctx.start_us, tctx.comm, sizeof tctx.comm, &tctx.ppid);
    if (zombie != 0) {
        fprintf(stderr, "sampler: pid %ld: %s\n", pid, zombie > 0 ? "is a zombie" : strerror(errno));
        return 1;
    }
    tctx.cap = 64;
    tctx.handles = malloc(tctx.cap * sizeof *tctx.handles);
    if (!tctx.handles) {
        fprintf(stderr, "sampler: out of memory\n");
        return 1;
    }
    errno = 0;
    if (proc_pidinfo(tctx.pid, PROC_PIDLISTTHREADS, 0, tctx.handles, (int)(tctx.cap * sizeof *tctx.handles)) <= 0
        && errno) { /* EPERM: another user's process (run as that user or root) */
        fprintf(stderr, "sampler: pid %ld: listing threads: %s\n", pid, strerror(errno));
        return 1;
    }
    tctx.ns_per_tick = 1000000000u / (uint64_t)(tck > 0 ? tck : 100);
    tctx.check_every = (unsigned)(RESCAN_MS / period_ms > 1 ? RESCAN_MS / period_ms : 1);
    *sample = threads_sample;
    *ctx = &tctx;
    g_at_stop = mac_finish;
    return 0;
}

#else
/* ------------------------------------------------------------------------------------------------ helpers */

static ssize_t pread_all0(int fd, char *buf, size_t cap)
{
    ssize_t n;
    do {
        n = pread(fd, buf, cap, 0);
    } while (n < 0 && errno == EINTR);
    return n;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* A decimal number (optionally negative) after any spaces; *end just past its digits. By hand: strtol's locale
 * and errno handling showed in the profile of a sampler that parses hundreds of numbers per sample. */
static long parse_dec(const char *s, const char **end)
{
    long v = 0;
    int neg = 0;
    while (is_space(*s))
        s++;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    for (; *s >= '0' && *s <= '9'; s++)
        v = v * 10 + (*s - '0');
    *end = s;
    return neg ? -v : v;
}

/* A hexadecimal number ("0x..." as procfs prints it) after any spaces; -1 when there is none. */
static long parse_hex(const char *s)
{
    unsigned long v = 0;
    int digits = 0;
    while (is_space(*s))
        s++;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    for (;; s++, digits++) {
        unsigned d;
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (*s >= 'a' && *s <= 'f')
            d = (unsigned)(*s - 'a' + 10);
        else if (*s >= 'A' && *s <= 'F')
            d = (unsigned)(*s - 'A' + 10);
        else
            break;
        v = v * 16 + d;
    }
    return digits ? (long)v : -1;
}

/* The next whitespace-separated word in [*p, end): its start (NULL at the end) and length;
 * *p moves past it. Both stat formats (block and per-thread) are read word by word. */
static char *next_word(char **p, const char *end, size_t *len)
{
    char *s;
    while (*p < end && is_space(**p))
        (*p)++;
    if (*p >= end)
        return NULL;
    s = *p;
    while (*p < end && !is_space(**p))
        (*p)++;
    *len = (size_t)(*p - s);
    return s;
}

static char *path_join(const char *root, const char *rest)
{
    size_t a = strlen(root), b = strlen(rest);
    char *p = malloc(a + b + 1);
    if (!p) {
        fprintf(stderr, "sampler: out of memory\n");
        exit(1);
    }
    memcpy(p, root, a);
    memcpy(p + a, rest, b + 1);
    return p;
}

static void raise_nofile_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* ------------------------------------------------------------------------------------------------ block mode */

struct block_ctx {
    int fd;
    const char *path;
    char buf[READ_BUF];
};

static int block_sample(void *vctx, uint64_t t)
{
    struct block_ctx *c = vctx;
    ssize_t n = pread_all0(c->fd, c->buf, sizeof c->buf - 1);
    char *p, *end;
    if (n < 0) {
        fprintf(stderr, "sampler: %s: %s\n", c->path, strerror(errno));
        return SAMPLE_ERROR;
    }
    out_u64(t);
    p = c->buf;
    end = c->buf + n;
    for (;;) {
        size_t len;
        char *s = next_word(&p, end, &len);
        if (!s)
            break;
        out_char(' ');
        out_mem(s, len);
    }
    out_char('\n');
    return SAMPLE_OK;
}

/* ------------------------------------------------------------------------------------------------ threads mode */

#define FD_CACHE 8     /* ioctl fds resolved per thread (a GPU runtime waits on one or two device fds) */
#define COMM_CAP 64
#define SYS_LINE 192   /* syscall: "NR 0xARG0 ... 0xARG5 0xSP 0xPC\n", at most ~175 bytes */
#define GATE_AFTER 2   /* identical syscall lines in a row before a thread is read through its schedstat first */
#define FALLBACK_MS 1000 /* rescan at least this often even when the thread count has not changed */
#define RECORD_ROOM (24 + 12 + 12 + 2 + 3 * 24 + COMM_CAP + 256 + 16 + 24 + 16) /* one record line at most */

enum fd_kind_code { FD_FILE, FD_GPU, FD_WAIT, FD_OTHER };

struct fd_kind {
    int fd;
    enum fd_kind_code kind;
};

struct text {
    const char *s;
    size_t n;
};

#define TEXT(s) {s, sizeof s - 1}
static const struct text CLS_NONE = TEXT(""), CLS_UNKNOWN = TEXT("?"), CLS_FAULT = TEXT("fault_io"),
                         CLS_READ = TEXT("read_io"), CLS_FUTEX = TEXT("futex"), CLS_GPU = TEXT("gpu"),
                         CLS_IDLE = TEXT("idle"), CLS_OTHER = TEXT("other");

struct task {
    int tid;
    int stat_fd;
    int syscall_fd; /* -1: not openable (another user's process without CAP_SYS_PTRACE): stat every sample */
    int wchan_fd;   /* only with --wchan; -1: not openable -> "?" */
    int sched_fd;   /* schedstat, opened when the thread is first gated; -1 not yet (or not readable) */
    char state;     /* the letter of its last stat read; 0: never read */
    char comm[COMM_CAP];
    size_t comm_len;
    char tid_txt[12]; /* the tid as printed, cached */
    size_t tid_len;
    /* the last syscall line of the thread off CPU, exactly as read (sys_len 0: running or unknown), its class */
    char sys[SYS_LINE];
    size_t sys_len, nr_len;
    const struct text *cls;
    unsigned same;     /* identical off-CPU lines in a row */
    unsigned gate_after; /* identical lines needed to gate; doubles at every miss (a thread that keeps waking) */
    int gated;         /* 1: schedstat first; syscall only when the thread has been on a CPU since */
    int never_gate;    /* schedstat unreadable or all zeros (a kernel without sched_info) */
    int ss_valid;      /* ss_run/ss_count were read before the syscall read whose line is in sys */
    int ss_valid_before; /* ss_valid as it was before the last schedstat read (a miss, not a first baseline) */
    uint64_t ss_run, ss_count;
    unsigned nfds, next_fd;
    struct fd_kind fds[FD_CACHE];
};

struct threads_ctx { /* one process of the step's tree */
    int pid, ppid;
    char pid_txt[12]; /* the pid as printed, cached */
    size_t pid_len;
    char comm[PT_COMM_CAP]; /* the process's comm when it was found */
    uint64_t first_ns, last_ns; /* the first and last samples that saw it */
    int announced; /* its "# proc" line is written */
    int pid_dirfd; /* /proc/PID, bound to this process even if the pid is reused later */
    DIR *taskdir;  /* /proc/PID/task, kept open: its link count is 2 + the number of threads */
    int count_ok;  /* the link count matched the listing at the last scan (else: rescan every ~100 ms) */
    struct task *tasks;
    size_t ntasks;
    int *tids; /* scratch for rescans */
    size_t tids_cap;
    unsigned since_flush, flush_every, since_scan, scan_every, fallback_every;
    long since_stat;
    int need_scan;
    char t_txt[24]; /* this sample's t_ns as printed */
    size_t t_len;
    char buf[READ_BUF];
    char sbuf[SYS_LINE];
    char wbuf[256];
};

/* What one sample read of one thread: the words to print (empty when not read this sample). */
struct reading {
    char state;
    const char *majflt, *utime, *stime, *nr;
    size_t lmaj, lut, lst, lnr;
    const struct text *cls;
};

static void task_close(struct task *t)
{
    if (t->stat_fd >= 0)
        close(t->stat_fd);
    if (t->syscall_fd >= 0)
        close(t->syscall_fd);
    if (t->wchan_fd >= 0)
        close(t->wchan_fd);
    if (t->sched_fd >= 0)
        close(t->sched_fd);
    t->stat_fd = t->syscall_fd = t->wchan_fd = t->sched_fd = -1;
    t->tid = -1;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int task_open(int dfd, int tid, struct task *t)
{
    char rel[32];
    memset(t, 0, sizeof *t);
    t->tid = tid;
    t->tid_len = format_u64(t->tid_txt, (uint64_t)tid);
    t->cls = &CLS_NONE;
    t->gate_after = GATE_AFTER;
    t->sched_fd = t->wchan_fd = -1;
    snprintf(rel, sizeof rel, "%d/stat", tid);
    t->stat_fd = openat(dfd, rel, O_RDONLY);
    if (t->stat_fd < 0)
        return -1; /* exited meanwhile */
    snprintf(rel, sizeof rel, "%d/syscall", tid);
    t->syscall_fd = openat(dfd, rel, O_RDONLY);
    if (g_read_wchan) {
        snprintf(rel, sizeof rel, "%d/wchan", tid);
        t->wchan_fd = openat(dfd, rel, O_RDONLY);
    }
    return 0;
}

/* The thread count from the task directory's link count (2 + threads); -1 when it does not tell. */
static long task_count(struct threads_ctx *c)
{
    struct stat st;
    if (fstat(dirfd(c->taskdir), &st) != 0 || st.st_nlink < 2)
        return -1;
    return (long)st.st_nlink - 2;
}

/* The tids listed in /proc/PID/task, ascending, into c->tids; their number, or -1 when the directory cannot be
 * opened (the process has been reaped before the first scan). */
static long list_tids(struct threads_ctx *c)
{
    struct dirent *de;
    size_t n = 0;
    if (!c->taskdir) {
        int taskfd;
        do {
            taskfd = openat(c->pid_dirfd, "task", O_RDONLY | O_DIRECTORY);
        } while (taskfd < 0 && errno == EINTR);
        if (taskfd < 0)
            return -1;
        c->taskdir = fdopendir(taskfd);
        if (!c->taskdir) {
            close(taskfd);
            return -1;
        }
    } else {
        rewinddir(c->taskdir); /* procfs lists the threads anew; a reaped process lists none */
    }
    while ((de = readdir(c->taskdir)) != NULL) {
        const char *s = de->d_name;
        long v = 0;
        if (*s < '0' || *s > '9')
            continue;
        for (; *s >= '0' && *s <= '9' && v < 0x7fffffffL / 10; s++)
            v = v * 10 + (*s - '0');
        if (*s)
            continue;
        if (n == c->tids_cap) {
            size_t cap = c->tids_cap ? c->tids_cap * 2 : 64;
            int *p = realloc(c->tids, cap * sizeof *p);
            if (!p)
                break;
            c->tids = p;
            c->tids_cap = cap;
        }
        c->tids[n++] = (int)v;
    }
    qsort(c->tids, n, sizeof *c->tids, cmp_int);
    return (long)n;
}

/* Re-list /proc/PID/task: keep the fds (and last readings) of known threads, open new ones, close vanished ones.
 * Returns the number of threads, or -1 when the task directory is gone (the process has been reaped). */
static int threads_scan(struct threads_ctx *c)
{
    long listed = list_tids(c);
    size_t n, i, j, k;
    struct task *nt;

    if (listed < 0)
        return -1;
    n = (size_t)listed;
    /* can the link count stand in for the listing? procfs: yes, unless a thread came or went in between (then
     * the next scan, ~100 ms later, asks again); a fake tree on some file systems: never */
    c->count_ok = task_count(c) == listed;
    c->scan_every = c->count_ok ? c->fallback_every : c->flush_every;
    nt = malloc((n ? n : 1) * sizeof *nt);
    if (!nt)
        return (int)c->ntasks;
    /* merge two ascending lists: old tasks (c->tasks) and the listing (c->tids) */
    for (i = 0, j = 0, k = 0; j < n; j++) {
        int tid = c->tids[j];
        while (i < c->ntasks && c->tasks[i].tid < tid)
            task_close(&c->tasks[i++]);
        if (i < c->ntasks && c->tasks[i].tid == tid)
            nt[k++] = c->tasks[i++];
        else if (task_open(dirfd(c->taskdir), tid, &nt[k]) == 0)
            k++;
    }
    while (i < c->ntasks)
        task_close(&c->tasks[i++]);
    free(c->tasks);
    c->tasks = nt;
    c->ntasks = k;
    return (int)k;
}

/* What fd (of the process) is: a GPU device (Jetson nvgpu, nvmap, nvhost; desktop NVIDIA; DRM render/card nodes;
 * Adreno kgsl; Mali), a file or another device (a path), a pipe, socket or anon inode (eventfd, timerfd: waiting
 * for another thread or the network), or unknown. Resolved through /proc/PID/fd/N once per thread and fd (until
 * the cache is forgotten, every ~100 ms). */
static enum fd_kind_code fd_kind(struct threads_ctx *c, struct task *tk, long fd)
{
    static const char *const gpu_prefixes[] = {"/dev/nvgpu", "/dev/nvmap", "/dev/nvhost", "/dev/nvidia",
                                               "/dev/dri/", "/dev/kgsl", "/dev/mali"};
    static const char *const wait_prefixes[] = {"pipe:", "socket:", "anon_inode:", "/dev/pts/", "/dev/tty"};
    char rel[40], target[256];
    ssize_t n;
    unsigned i;
    enum fd_kind_code kind = FD_OTHER;
    if (fd < 0 || fd > 0x7fffffffL)
        return FD_OTHER;
    for (i = 0; i < tk->nfds; i++)
        if (tk->fds[i].fd == (int)fd)
            return tk->fds[i].kind;
    snprintf(rel, sizeof rel, "fd/%ld", fd);
    n = readlinkat(c->pid_dirfd, rel, target, sizeof target - 1);
    if (n > 0) {
        target[n] = '\0';
        if (target[0] == '/')
            kind = FD_FILE;
        for (i = 0; i < sizeof gpu_prefixes / sizeof *gpu_prefixes; i++)
            if (!strncmp(target, gpu_prefixes[i], strlen(gpu_prefixes[i])))
                kind = FD_GPU;
        for (i = 0; i < sizeof wait_prefixes / sizeof *wait_prefixes; i++)
            if (!strncmp(target, wait_prefixes[i], strlen(wait_prefixes[i])))
                kind = FD_WAIT;
    }
    i = tk->nfds < FD_CACHE ? tk->nfds++ : tk->next_fd++ % FD_CACHE;
    tk->fds[i].fd = (int)fd;
    tk->fds[i].kind = kind;
    return kind;
}

/* The wait class of a thread off CPU in syscall nr (-1: not in a syscall) with first argument arg0 (read only
 * when the class needs it: *arg0 is parsed from arg0_text on demand). The numbers are the build architecture's
 * (<sys/syscall.h>): a 32-bit process on a 64-bit kernel would be misread. */
static const struct text *classify(struct threads_ctx *c, struct task *tk, long nr, const char *arg0_text,
                                   char state)
{
    if (nr < 0) /* blocked outside a syscall: a page fault, unless the thread is stopped (signal, debugger) */
        return state == 'T' || state == 't' ? &CLS_OTHER : &CLS_FAULT;
    switch (nr) {
    case SYS_read: case SYS_readv: /* a read of a pipe, socket or eventfd waits for a writer, not for storage */
        return fd_kind(c, tk, parse_hex(arg0_text)) == FD_WAIT ? &CLS_IDLE : &CLS_READ;
    case SYS_pread64: case SYS_preadv:
#ifdef SYS_preadv2
    case SYS_preadv2:
#endif
#ifdef SYS_io_uring_enter
    case SYS_io_uring_enter:
#endif
#ifdef SYS_io_getevents
    case SYS_io_getevents: /* libaio (fio's default engine) waits for its reads here */
#endif
#ifdef SYS_io_pgetevents
    case SYS_io_pgetevents:
#endif
        return &CLS_READ;
    /* the calls that fault a mapping in before they return (mmap with MAP_POPULATE, as llama.cpp maps its model;
     * mlock; madvise MADV_POPULATE_READ/WILLNEED) wait for the pages' I/O like a fault -- or for the process's
     * mmap lock, which the syscall does not tell apart */
#ifdef SYS_mmap
    case SYS_mmap:
#endif
#ifdef SYS_mmap2
    case SYS_mmap2: /* 32-bit ARM has only mmap2 */
#endif
    case SYS_madvise: case SYS_mlock: case SYS_mlockall:
#ifdef SYS_mlock2
    case SYS_mlock2:
#endif
        return &CLS_FAULT;
    case SYS_futex:
#ifdef SYS_futex_waitv
    case SYS_futex_waitv:
#endif
#ifdef SYS_futex_time64
    case SYS_futex_time64: /* 32-bit ABIs with a 64-bit time_t (glibc 2.34+, musl) wait in the _time64 calls */
#endif
        return &CLS_FUTEX;
    case SYS_ioctl:
        return fd_kind(c, tk, parse_hex(arg0_text)) == FD_GPU ? &CLS_GPU : &CLS_OTHER;
#ifdef SYS_epoll_wait
    case SYS_epoll_wait:
#endif
#ifdef SYS_poll
    case SYS_poll:
#endif
#ifdef SYS_select
    case SYS_select:
#endif
#ifdef SYS_nanosleep
    case SYS_nanosleep:
#endif
#ifdef SYS_epoll_pwait2
    case SYS_epoll_pwait2:
#endif
#ifdef SYS_clock_nanosleep
    case SYS_clock_nanosleep:
#endif
#ifdef SYS_clock_nanosleep_time64
    case SYS_clock_nanosleep_time64:
#endif
#ifdef SYS_ppoll_time64
    case SYS_ppoll_time64:
#endif
#ifdef SYS_pselect6_time64
    case SYS_pselect6_time64:
#endif
    case SYS_epoll_pwait: case SYS_ppoll: case SYS_pselect6:
        return &CLS_IDLE;
    default:
        return &CLS_OTHER;
    }
}

/* stat of one thread into r (state, majflt, utime, stime) and tk (state, comm); -1 when the thread is gone,
 * 1 when the line is malformed or truncated (the thread is skipped this sample). */
static int read_stat(struct threads_ctx *c, struct task *tk, struct reading *r)
{
    ssize_t n = pread_all0(tk->stat_fd, c->buf, sizeof c->buf - 1);
    char *buf = c->buf, *lp, *rp, *p, *end, *state = NULL;
    size_t lstate = 0;
    int field;
    if (n <= 0) /* thread gone (ESRCH) */
        return -1;
    end = buf + n;
    *end = '\0';
    lp = memchr(buf, '(', (size_t)n);
    for (rp = end - 1; rp > buf && *rp != ')'; rp--)
        ;
    if (!lp || rp <= lp)
        return 1;
    /* fields after ") ": 0 state, 9 majflt, 11 utime, 12 stime */
    r->stime = NULL;
    for (p = rp + 1, field = 0; field <= 12; field++) {
        size_t len;
        char *s = next_word(&p, end, &len);
        if (!s)
            break;
        switch (field) {
        case 0: state = s; lstate = len; break;
        case 9: r->majflt = s; r->lmaj = len; break;
        case 11: r->utime = s; r->lut = len; break;
        case 12: r->stime = s; r->lst = len; break;
        default: break;
        }
    }
    if (!r->stime || lstate != 1)
        return 1;
    r->state = tk->state = *state;
    tk->comm_len = (size_t)(rp - lp - 1) < COMM_CAP ? (size_t)(rp - lp - 1) : COMM_CAP;
    for (field = 0, p = lp + 1; (size_t)field < tk->comm_len; field++, p++)
        tk->comm[field] = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p;
    return 0;
}

/* The thread is on a CPU or runnable: no wait to remember, no gating. */
static void forget_wait(struct task *tk)
{
    tk->sys_len = 0;
    tk->same = 0;
    tk->gated = 0;
}

/* syscall of one thread into tk (the line, its class) and r (nr, class; the state '-' when stat was not read);
 * -1 when the thread is gone. A line identical to the last one counts towards gating the thread. */
static int read_syscall(struct threads_ctx *c, struct task *tk, struct reading *r, int stat_read)
{
    ssize_t n = pread_all0(tk->syscall_fd, c->sbuf, sizeof c->sbuf - 1);
    const char *p = c->sbuf, *e;
    long nr;
    if (n <= 0)
        return -1;
    c->sbuf[n] = '\0';
    while (is_space(*p))
        p++;
    if (*p != '-' && (*p < '0' || *p > '9')) { /* "running": on a CPU or runnable (stat would say R) */
        if (!stat_read)
            r->state = 'R';
        forget_wait(tk);
        return 0;
    }
    if ((size_t)n == tk->sys_len && !memcmp(c->sbuf, tk->sys, (size_t)n)) {
        tk->same++;
    } else {
        memcpy(tk->sys, c->sbuf, (size_t)n);
        tk->sys_len = (size_t)n;
        tk->same = 0;
        tk->gated = 0;
    }
    p = tk->sys + (p - c->sbuf);
    nr = parse_dec(p, &e);
    tk->nr_len = (size_t)(e - tk->sys);
    r->nr = tk->sys;
    r->lnr = tk->nr_len;
    if (!stat_read)
        r->state = '-'; /* off CPU; D or S was not read this sample */
    /* stopped stays stopped till a stat */
    tk->cls = classify(c, tk, nr, e, stat_read ? r->state : tk->state);
    r->cls = tk->cls;
    return 0;
}

/* Has the thread been on a CPU since the last schedstat read? 0 no, 1 yes or unknown (the new values are the
 * baseline now), -1 gone. schedstat: "sum_exec_runtime run_delay pcount"; pcount counts the times the thread got
 * a CPU, so unchanged numbers mean it has not run, not even briefly. */
static int schedstat_changed(struct threads_ctx *c, struct task *tk)
{
    ssize_t n;
    const char *p, *e;
    uint64_t run, count;
    if (tk->sched_fd < 0) {
        char rel[40];
        snprintf(rel, sizeof rel, "%d/schedstat", tk->tid);
        tk->sched_fd = openat(dirfd(c->taskdir), rel, O_RDONLY);
        if (tk->sched_fd < 0) {
            tk->never_gate = 1;
            tk->gated = 0;
            return 1;
        }
    }
    n = pread_all0(tk->sched_fd, c->wbuf, sizeof c->wbuf - 1);
    if (n <= 0)
        return -1;
    c->wbuf[n] = '\0';
    run = (uint64_t)parse_dec(c->wbuf, &e);
    (void)parse_dec(e, &p);
    count = (uint64_t)parse_dec(p, &e);
    if (count == 0) { /* "0 0 0": a kernel without sched_info; every thread has had a CPU at least once */
        tk->never_gate = 1;
        tk->gated = 0;
        return 1;
    }
    tk->ss_valid_before = tk->ss_valid;
    if (tk->ss_valid && run == tk->ss_run && count == tk->ss_count)
        return 0;
    tk->ss_run = run;
    tk->ss_count = count;
    tk->ss_valid = 1;
    return 1;
}

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

static void write_wchan(struct threads_ctx *c, struct task *tk, char state)
{
    ssize_t w;
    char *ws, *we, *p;
    if (state == 'R') {
        out_char('0'); /* a running task has no wait channel; the kernel would print 0 */
        return;
    }
    w = tk->wchan_fd < 0 ? -1 : pread_all0(tk->wchan_fd, c->wbuf, sizeof c->wbuf - 1);
    if (w < 0) {
        out_char('?');
        return;
    }
    ws = c->wbuf;
    we = c->wbuf + w;
    while (ws < we && is_space(*ws))
        ws++;
    while (we > ws && is_space(we[-1]))
        we--;
    for (p = ws; p < we; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    if (we > ws)
        out_mem(ws, (size_t)(we - ws));
    else
        out_char('0');
}

/* One record line, assembled in place in the output buffer (wchan, when read, through out_mem). */
static void write_record(struct threads_ctx *c, struct task *tk, const struct reading *r)
{
    char *p;
    if (g_out.len + RECORD_ROOM > OUT_CAP)
        out_flush();
    p = g_out.buf + g_out.len;
    p = put(p, c->t_txt, c->t_len);
    *p++ = '\t';
    p = put(p, c->pid_txt, c->pid_len);
    *p++ = '\t';
    p = put(p, tk->tid_txt, tk->tid_len);
    *p++ = '\t';
    *p++ = r->state;
    *p++ = '\t';
    p = put(p, r->majflt, r->lmaj);
    *p++ = '\t';
    p = put(p, r->utime, r->lut);
    *p++ = '\t';
    p = put(p, r->stime, r->lst);
    *p++ = '\t';
    p = put(p, tk->comm, tk->comm_len);
    *p++ = '\t';
    if (g_read_wchan) {
        g_out.len = (size_t)(p - g_out.buf);
        write_wchan(c, tk, r->state);
        if (g_out.len + RECORD_ROOM > OUT_CAP)
            out_flush();
        p = g_out.buf + g_out.len;
    }
    *p++ = '\t';
    p = put(p, r->cls->s, r->cls->n);
    *p++ = '\t';
    p = put(p, r->nr, r->lnr);
    *p++ = '\n';
    g_out.len = (size_t)(p - g_out.buf);
}

/* For a gated thread: 1 when it has not been on a CPU since its last syscall read (that reading still holds),
 * 0 when syscall must be read (it ran: a miss, after which it is gated again only after a longer quiet spell),
 * -1 when it is gone. */
static int still_parked(struct threads_ctx *c, struct task *tk)
{
    int rc = schedstat_changed(c, tk);
    if (rc == 1 && tk->ss_valid_before) {
        tk->gated = 0;
        tk->same = 0;
        if (tk->gate_after < 256)
            tk->gate_after *= 2;
    }
    return rc < 0 ? -1 : !rc;
}

/* One thread in one sample: 0 written, 1 skipped (malformed stat), -1 gone. */
static int sample_task(struct threads_ctx *c, struct task *tk, int full)
{
    struct reading r = {0, "", "", "", "", 0, 0, 0, 0, &CLS_NONE};
    int dead = tk->state == 'Z' || tk->state == 'X';
    int stat_read = full || dead || tk->state == 0 || tk->syscall_fd < 0, rc, parked = 0;
    if (stat_read) {
        rc = read_stat(c, tk, &r);
        if (rc != 0)
            return rc;
        dead = r.state == 'Z' || r.state == 'X';
    }
    if (!dead && !(stat_read && r.state == 'R') && tk->syscall_fd >= 0 && tk->gated && tk->sys_len) {
        parked = still_parked(c, tk);
        if (parked < 0 && !stat_read)
            return -1;
    }
    if (dead || (stat_read && r.state == 'R')) {
        forget_wait(tk); /* nothing to classify */
    } else if (tk->syscall_fd < 0) {
        r.cls = &CLS_UNKNOWN; /* syscall unreadable: the class is unknown */
    } else if (parked > 0) { /* still in the wait of its last syscall read */
        if (!stat_read)
            r.state = '-';
        r.nr = tk->sys;
        r.lnr = tk->nr_len;
        r.cls = tk->cls;
    } else if (parked < 0 || read_syscall(c, tk, &r, stat_read) != 0) {
        if (!stat_read)
            return -1;
        r.cls = &CLS_UNKNOWN; /* exited between the two reads */
        forget_wait(tk);
    } else if (g_gate && !tk->gated && !tk->never_gate && tk->sys_len && tk->same + 1 >= tk->gate_after) {
        tk->gated = 1;    /* parked in one wait: from the next sample on, schedstat first */
        tk->ss_valid = 0; /* ... whose baseline must be read before a syscall read (the next sample does both) */
    }
    write_record(c, tk, &r);
    return 0;
}

static int threads_sample(void *vctx, uint64_t t)
{
    struct threads_ctx *c = vctx;
    size_t i, k;
    int live = 0, scanned = 0, full = 0, written = 0;

    /* housekeeping every ~100 ms: an fd number can be reused (resolve ioctl/read fds anew), and a changed link
     * count of the task directory (one fstat, ~1/3 of a listing's cost) means threads came or went */
    if (++c->since_flush >= c->flush_every) {
        c->since_flush = 0;
        for (i = 0; i < c->ntasks; i++)
            c->tasks[i].nfds = 0;
        if (c->count_ok && task_count(c) != (long)c->ntasks)
            c->since_scan = c->scan_every; /* rescan now (and read stat: new threads' first samples do anyway) */
    }
    if (c->need_scan || ++c->since_scan >= c->scan_every) {
        full = c->need_scan || !c->count_ok; /* after a failed read: stat says who is a zombie */
        scanned = 1;
        c->need_scan = 0;
        c->since_scan = 0;
        if (threads_scan(c) < 0)
            return SAMPLE_EXIT;
    }
    full = full || ++c->since_stat >= g_stat_every;
    if (full)
        c->since_stat = 0;
    c->t_len = format_u64(c->t_txt, t);

    for (i = 0; i < c->ntasks; i++) {
        struct task *tk = &c->tasks[i];
        int rc = sample_task(c, tk, full);
        if (rc < 0) {
            task_close(tk);
            c->need_scan = 1;
        } else if (rc == 0) {
            written++;
            live += tk->state != 'Z' && tk->state != 'X';
        }
    }
    if (written)
        c->last_ns = t; /* the last sample with a record of it */

    /* drop the threads whose read failed */
    for (i = 0, k = 0; i < c->ntasks; i++)
        if (c->tasks[i].tid >= 0)
            c->tasks[k++] = c->tasks[i];
    c->ntasks = k;

    if (live == 0) {
        /* only zombies or nothing readable: confirm with a fresh listing before declaring the process gone */
        if (scanned)
            return SAMPLE_EXIT;
        c->need_scan = 1;
    }
    return SAMPLE_OK;
}

/* ------------------------------------------------------------------------------------------------ the tree */

/* The step's process and its descendants (proctree.h finds them): each a threads_ctx, sampled in turn at the same
 * instant; a process found is announced by a "# proc" line at its first sample, one that has gone by a
 * "# proc_end" line (gone=1), and every one still there at the stop by one with gone=0. */
struct tree_ctx {
    struct threads_ctx **procs;
    size_t nprocs, cap;
    int follow;            /* descendants followed (--no-tree: the step's process only, as v2) */
    struct proctree pt;
    unsigned since_tree, tree_every; /* scan for descendants every tree_every samples (--tree-ms) */
    long period_ms;
    uint64_t t;            /* the current sample's instant, for processes found during it */
};

static int g_follow_tree = 1;  /* --no-tree: 0 */
static long g_tree_ms = RESCAN_MS; /* --tree-ms */

/* /proc/PID opened (dirfd: the pid relative to it, or -1 with path the absolute path) into a new threads_ctx */
static struct threads_ctx *proc_new(int dirfd, const char *path, int pid, int ppid, const char *comm, long period_ms)
{
    struct threads_ctx *c = calloc(1, sizeof *c);
    char rel[24];
    if (!c)
        return NULL;
    snprintf(rel, sizeof rel, "%d", pid);
    c->pid_dirfd = dirfd >= 0 ? openat(dirfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                              : open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->pid_dirfd < 0) {
        free(c);
        return NULL;
    }
    c->pid = pid;
    c->ppid = ppid;
    c->pid_len = format_u64(c->pid_txt, (uint64_t)pid);
    snprintf(c->comm, sizeof c->comm, "%s", comm);
    c->flush_every = (unsigned)(RESCAN_MS / period_ms > 1 ? RESCAN_MS / period_ms : 1);
    c->scan_every = c->flush_every; /* until the first scan shows the link count can be trusted */
    c->fallback_every = (unsigned)(FALLBACK_MS / period_ms > 1 ? FALLBACK_MS / period_ms : 1);
    c->need_scan = 1;
    return c;
}

static void proc_free(struct threads_ctx *c)
{
    size_t i;
    for (i = 0; i < c->ntasks; i++)
        task_close(&c->tasks[i]);
    if (c->taskdir)
        closedir(c->taskdir);
    close(c->pid_dirfd);
    free(c->tasks);
    free(c->tids);
    free(c);
}

/* "# proc t_ns=T pid=P ppid=Q\tcomm=COMM\tcmd=ARGS": comm and cmd are TAB-separated (they may hold spaces) */
static void proc_announce(struct threads_ctx *c, uint64_t t)
{
    char cmd[128];
    size_t n = pt_cmdline(c->pid_dirfd, -1, cmd, sizeof cmd);
    if (!c->announced)
        c->first_ns = t;
    c->announced = 1;
    out_str("# proc t_ns=");
    out_u64(t);
    out_str(" pid=");
    out_u64((uint64_t)c->pid);
    out_str(" ppid=");
    out_u64((uint64_t)(c->ppid > 0 ? c->ppid : 0));
    out_str("\tcomm=");
    out_str(c->comm);
    out_str("\tcmd=");
    out_mem(cmd, n);
    out_char('\n');
}

static void proc_end(const struct threads_ctx *c, int gone) { write_proc_end(c->pid, c->first_ns, c->last_ns, gone); }

static int tree_follows(void *vctx, int pid)
{
    struct tree_ctx *tr = vctx;
    size_t i;
    for (i = 0; i < tr->nprocs; i++)
        if (tr->procs[i]->pid == pid)
            return 1;
    return 0;
}

static void tree_add(struct tree_ctx *tr, struct threads_ctx *c)
{
    if (tr->nprocs == tr->cap) {
        size_t cap = tr->cap ? tr->cap * 2 : 8;
        struct threads_ctx **p = realloc(tr->procs, cap * sizeof *p);
        if (!p) {
            proc_free(c);
            return; /* out of memory: this process goes unsampled */
        }
        tr->procs = p;
        tr->cap = cap;
    }
    tr->procs[tr->nprocs++] = c;
}

static void tree_found(void *vctx, int pid, int ppid, const char *comm)
{
    struct tree_ctx *tr = vctx;
    struct threads_ctx *c = proc_new(tr->pt.procfd, NULL, pid, ppid, comm, tr->period_ms);
    if (c) /* NULL: gone since the listing */
        tree_add(tr, c);
}

static int tree_sample(void *vctx, uint64_t t)
{
    struct tree_ctx *tr = vctx;
    size_t i, k;
    tr->t = t;
    if (tr->follow && (tr->since_tree++ % tr->tree_every) == 0 && pt_scan(&tr->pt, tree_follows, tree_found, tr) < 0) {
        fprintf(stderr, "sampler: out of memory\n");
        return SAMPLE_ERROR;
    }
    for (i = 0, k = 0; i < tr->nprocs; i++) {
        struct threads_ctx *c = tr->procs[i];
        if (!c->announced)
            proc_announce(c, t);
        if (threads_sample(c, t) == SAMPLE_EXIT) {
            proc_end(c, 1);
            proc_free(c);
            continue;
        }
        if (c->ntasks && c->tasks[0].tid == c->pid && c->tasks[0].comm_len
            && (c->tasks[0].comm_len != strlen(c->comm) || memcmp(c->tasks[0].comm, c->comm, c->tasks[0].comm_len))) {
            /* its main thread's name changed (an exec: found between fork and exec, it was still the parent's
             * program): the same "# proc" line again, whose comm and cmd replace the first */
            memcpy(c->comm, c->tasks[0].comm, c->tasks[0].comm_len < PT_COMM_CAP ? c->tasks[0].comm_len
                                                                                  : PT_COMM_CAP - 1);
            c->comm[c->tasks[0].comm_len < PT_COMM_CAP ? c->tasks[0].comm_len : PT_COMM_CAP - 1] = '\0';
            proc_announce(c, t);
        }
        tr->procs[k++] = c;
    }
    tr->nprocs = k;
    return k ? SAMPLE_OK : SAMPLE_EXIT; /* the whole tree has gone */
}

/* at the stop: the processes still there */
static void tree_finish(void *vctx)
{
    struct tree_ctx *tr = vctx;
    size_t i;
    for (i = 0; i < tr->nprocs; i++)
        if (tr->procs[i]->announced)
            proc_end(tr->procs[i], 0);
}

static int open_source(enum mode mode, const char *target, long pid, const char *root, long period_ms,
                       sample_fn *sample, void **ctx)
{
    static struct block_ctx bctx;
    static struct tree_ctx tree;
    if (mode == BLOCK) {
        char rel[512];
        snprintf(rel, sizeof rel, "/sys/block/%s/stat", target);
        bctx.path = path_join(root, rel);
        bctx.fd = open(bctx.path, O_RDONLY);
        if (bctx.fd < 0) {
            fprintf(stderr, "sampler: %s: %s\n", bctx.path, strerror(errno));
            return 1;
        }
        *sample = block_sample;
        *ctx = &bctx;
    } else {
        char rel[64], comm[PT_COMM_CAP] = "";
        char *path, *proc_path;
        int ppid = 0, procfd;
        struct threads_ctx *c;
        raise_nofile_limit();
        snprintf(rel, sizeof rel, "/proc/%ld", pid);
        path = path_join(root, rel);
        proc_path = path_join(root, "/proc");
        procfd = open(proc_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (procfd >= 0)
            (void)pt_stat(procfd, (int)pid, &ppid, comm, sizeof comm);
        c = proc_new(-1, path, (int)pid, ppid, comm, period_ms);
        if (!c) {
            fprintf(stderr, "sampler: %s: %s\n", path, strerror(errno));
            return 1;
        }
        free(path);
        memset(&tree, 0, sizeof tree);
        tree.period_ms = period_ms;
        tree.tree_every = (unsigned)(g_tree_ms / period_ms > 1 ? g_tree_ms / period_ms : 1);
        /* the full /proc listing at least every ~1 s (proctree.h: between, the new pids only) */
        tree.follow = g_follow_tree && procfd >= 0
                      && pt_open(&tree.pt, procfd, (unsigned)(FALLBACK_MS / period_ms / tree.tree_every)) == 0;
        if (!tree.follow && procfd >= 0)
            close(procfd);
        if (g_follow_tree && !tree.follow) {
            fprintf(stderr, "sampler: %s: cannot list it (%s): the step's process only\n", proc_path,
                    strerror(errno));
        }
        free(proc_path);
        tree_add(&tree, c);
        *sample = tree_sample;
        *ctx = &tree;
        g_at_stop = tree_finish;
    }
    return 0;
}
#endif /* __APPLE__ */

/* ------------------------------------------------------------------------------------------------ lateness */

#define LATE_BIN_US 10
#define LATE_BINS 2000 /* 10 us bins up to 20 ms; later samples count in the last */
static uint32_t g_late[LATE_BINS];
static uint64_t g_late_n, g_late_max_ns;

static void late_add(uint64_t late_ns)
{
    uint64_t bin = late_ns / (LATE_BIN_US * 1000u);
    g_late[bin < LATE_BINS ? bin : LATE_BINS - 1]++;
    g_late_n++;
    if (late_ns > g_late_max_ns)
        g_late_max_ns = late_ns;
}

/* the upper edge (us) of the bin holding the per_mille-th quantile of the lateness, never above the largest seen;
 * 0 with no samples */
static uint64_t late_quantile_us(unsigned per_mille)
{
    uint64_t need = (g_late_n * per_mille + 999) / 1000, seen = 0, max_us = g_late_max_ns / 1000u;
    size_t i;
    for (i = 0; i < LATE_BINS && g_late_n; i++) {
        seen += g_late[i];
        if (seen >= need) { /* need >= 1 with any sample: this bin holds one */
            uint64_t edge = (uint64_t)(i + 1) * LATE_BIN_US;
            return edge < max_us ? edge : max_us;
        }
    }
    return 0;
}

static void out_lateness(void)
{
    out_str(" late_us_p50=");
    out_u64(late_quantile_us(500));
    out_str(" late_us_p90=");
    out_u64(late_quantile_us(900));
    out_str(" late_us_p99=");
    out_u64(late_quantile_us(990));
    out_str(" late_us_max=");
    out_u64(g_late_max_ns / 1000u);
}

/* ------------------------------------------------------------------------------------------------ scheduling */

#ifdef __linux__
/* struct sched_attr of sched_setattr(2) (glibc 2.36 has no wrapper for it) */
struct slice_attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

/* Ask for a slice of slice_us at the current policy and nice; the slice the kernel reports back, in us (0: the
 * kernel's default, or a kernel without custom slices, which accepts sched_runtime for SCHED_OTHER and ignores it) */
static uint64_t use_short_slice(long slice_us)
{
    struct slice_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* wake at the deadline, not up to 50 us after it */
    if (syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0) != 0)
        return 0;
    if (attr.policy != SCHED_OTHER && attr.policy != SCHED_BATCH)
        return 0; /* started at another policy (an RT caller): leave it */
    if (slice_us > 0) {
        attr.size = sizeof attr;
        attr.flags = 0;
        attr.runtime = (uint64_t)slice_us * 1000u;
        syscall(SYS_sched_setattr, 0, &attr, 0); /* refused: the read-back says what it runs with instead */
    }
    memset(&attr, 0, sizeof attr);
    if (syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0) != 0)
        return 0;
    return attr.runtime / 1000u;
}
#endif

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
#ifdef __APPLE__
        out_str(" source=libproc majflt=none class=none tree=none");
#else
        out_str(" stat_every=");
        out_u64((uint64_t)g_stat_every);
        out_str(g_read_wchan ? " wchan=1 arch=" : " wchan=0 arch=");
        out_str(ARCH);
        if (((struct tree_ctx *)ctx)->follow) {
            out_str(" tree=ppid tree_every=");
            out_u64(((struct tree_ctx *)ctx)->tree_every);
        } else {
            out_str(" tree=none");
        }
        out_str(g_gate ? " gate=schedstat" : " gate=none");
#endif
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

/*
 * sampler — fixed-period, low-overhead sampler of block-device stats or of one process's thread states
 * (harness runner, docs/methodology.md section 5). One mode per process.
 *
 *   sampler block DEV   [--period-ms 10] [--out FILE] [--root DIR]
 *   sampler threads PID [--period-ms 5]  [--out FILE] [--root DIR]
 *
 * --root prefixes the /sys and /proc paths (tests use fake trees). Output (stdout by default) is text, written
 * through one big buffer that is flushed when full and on exit (the header line is flushed at once):
 *
 *   # harness-sampler v1 mode=block dev=vda period_ms=10 clock=monotonic
 *   <t_ns> <the fields of /sys/block/DEV/stat, single-space separated, exactly as the kernel printed them>
 *
 *   # harness-sampler v1 mode=threads pid=123 period_ms=5 clock_ticks_per_s=100 clock=monotonic
 *   <t_ns>\t<tid>\t<state>\t<majflt>\t<utime_ticks>\t<stime_ticks>\t<comm>\t<wchan>
 *       (one line per thread per sample, same t_ns for all threads of a sample, tids ascending; comm is the text
 *        between the first '(' and the LAST ')' of the stat line, control characters replaced by '?'; wchan "0" or
 *        empty -> 0, unreadable -> ?)
 *   # exit t_ns=<t>                                   threads mode: the process has gone (or is a zombie); exit 0
 *
 *   # stop t_ns=<t> samples=<n> overruns=<n>          on SIGTERM/SIGINT (the current sample is finished); exit 0
 *
 * t_ns is CLOCK_MONOTONIC in nanoseconds, taken at the start of the sample. Samples follow an absolute schedule
 * (t0 + k*period, clock_nanosleep TIMER_ABSTIME); when a sample ends past the next deadline the missed deadlines are
 * skipped (no catch-up burst) and one overrun is counted.
 *
 * Cost: every file is opened once and re-read with pread(fd, buf, n, 0) (procfs seq_files and sysfs attributes
 * regenerate their content on a read at offset 0); the task directory is rescanned every ~100 ms or when a thread's
 * read fails. wchan is not read for threads that stat shows running (R): the kernel reports 0 for those anyway.
 *
 * Exit status: 0 stopped or process gone; 1 runtime error (message on stderr); 2 usage error.
 *
 * macOS (#ifdef __APPLE__): threads mode reads libproc (proc_pidinfo PROC_PIDLISTTHREADS, then PROC_PIDTHREADINFO per
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

enum { SAMPLE_OK = 0, SAMPLE_EXIT = 1, SAMPLE_ERROR = -1 };
enum mode { BLOCK, THREADS };
typedef int (*sample_fn)(void *, uint64_t);

static volatile sig_atomic_t g_stop;

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

static void out_u64(uint64_t v)
{
    char tmp[24];
    int i = (int)sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    out_mem(tmp + i, sizeof tmp - (size_t)i);
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
};

static size_t bounded_len(const char *s, size_t cap)
{
    const char *z = memchr(s, '\0', cap);
    return z ? (size_t)(z - s) : cap;
}

/* The process's start time and name; -1 with errno when it is gone or unreadable, 1 when it is a zombie. */
static int proc_identity(int pid, uint64_t *start_us, char *comm, size_t cap)
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
    return proc_identity(c->pid, &start, c->comm, sizeof c->comm) == 0 && start == c->start_us;
}

static int threads_sample(void *vctx, uint64_t t)
{
    struct threads_ctx *c = vctx;
    size_t n, i;
    int bytes, live = 0;

    if (++c->since_check >= c->check_every) {
        c->since_check = 0;
        if (!same_process(c))
            return SAMPLE_EXIT;
    }
    for (;;) { /* a full buffer may mean more threads than it holds: grow and list again */
        errno = 0;
        bytes = proc_pidinfo(c->pid, PROC_PIDLISTTHREADS, 0, c->handles, (int)(c->cap * sizeof *c->handles));
        if (bytes <= 0) {
            if (errno == 0 || errno == ESRCH)
                return SAMPLE_EXIT;
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
        out_str("\t\n"); /* wchan: none on macOS */
    }
    /* nothing readable, or only terminating threads: gone unless the process itself says otherwise */
    if (live == 0 && !same_process(c))
        return SAMPLE_EXIT;
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
    zombie = proc_identity(tctx.pid, &tctx.start_us, tctx.comm, sizeof tctx.comm);
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

struct task {
    int tid;
    int stat_fd;
    int wchan_fd; /* -1: not openable -> "?" */
};

struct threads_ctx {
    int pid_dirfd; /* /proc/PID, bound to this process even if the pid is reused later */
    struct task *tasks;
    size_t ntasks;
    int *tids; /* scratch for rescans */
    size_t tids_cap;
    unsigned since_scan, scan_every;
    int need_scan;
    char buf[READ_BUF];
    char wbuf[256];
};

static void task_close(struct task *t)
{
    if (t->stat_fd >= 0)
        close(t->stat_fd);
    if (t->wchan_fd >= 0)
        close(t->wchan_fd);
    t->stat_fd = t->wchan_fd = -1;
    t->tid = -1;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Re-list /proc/PID/task: keep the fds of known threads, open new ones, close vanished ones.
 * Returns the number of threads, or -1 when the task directory is gone (the process has been reaped). */
static int threads_scan(struct threads_ctx *c)
{
    int taskfd, dfd;
    DIR *d;
    struct dirent *de;
    size_t n = 0, i, j, k;
    struct task *nt;

    do {
        taskfd = openat(c->pid_dirfd, "task", O_RDONLY | O_DIRECTORY);
    } while (taskfd < 0 && errno == EINTR);
    if (taskfd < 0)
        return -1;
    d = fdopendir(taskfd);
    if (!d) {
        close(taskfd);
        return -1;
    }
    dfd = dirfd(d);
    while ((de = readdir(d)) != NULL) {
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

    nt = malloc((n ? n : 1) * sizeof *nt);
    if (!nt) {
        closedir(d);
        return (int)c->ntasks;
    }
    /* merge two ascending lists: old tasks (c->tasks) and the listing (c->tids) */
    for (i = 0, j = 0, k = 0; j < n; j++) {
        int tid = c->tids[j];
        while (i < c->ntasks && c->tasks[i].tid < tid)
            task_close(&c->tasks[i++]);
        if (i < c->ntasks && c->tasks[i].tid == tid) {
            nt[k++] = c->tasks[i++];
        } else {
            char rel[32];
            struct task t;
            t.tid = tid;
            snprintf(rel, sizeof rel, "%d/stat", tid);
            t.stat_fd = openat(dfd, rel, O_RDONLY);
            if (t.stat_fd < 0)
                continue; /* exited meanwhile */
            snprintf(rel, sizeof rel, "%d/wchan", tid);
            t.wchan_fd = openat(dfd, rel, O_RDONLY);
            nt[k++] = t;
        }
    }
    while (i < c->ntasks)
        task_close(&c->tasks[i++]);
    closedir(d);
    free(c->tasks);
    c->tasks = nt;
    c->ntasks = k;
    return (int)k;
}

static int threads_sample(void *vctx, uint64_t t)
{
    struct threads_ctx *c = vctx;
    size_t i, k;
    int live = 0, scanned = 0;

    if (c->need_scan || ++c->since_scan >= c->scan_every) {
        scanned = 1;
        c->need_scan = 0;
        c->since_scan = 0;
        if (threads_scan(c) < 0)
            return SAMPLE_EXIT;
    }

    for (i = 0; i < c->ntasks; i++) {
        struct task *tk = &c->tasks[i];
        ssize_t n = pread_all0(tk->stat_fd, c->buf, sizeof c->buf - 1);
        char *buf = c->buf, *lp, *rp, *p, *end, *state = NULL, *majflt = NULL, *utime = NULL, *stime = NULL;
        size_t lstate = 0, lmaj = 0, lut = 0, lst = 0;
        int field;

        if (n <= 0) { /* thread gone (ESRCH) */
            task_close(tk);
            c->need_scan = 1;
            continue;
        }
        end = buf + n;
        *end = '\0';
        lp = memchr(buf, '(', (size_t)n);
        for (rp = end - 1; rp > buf && *rp != ')'; rp--)
            ;
        if (!lp || rp <= lp)
            continue; /* malformed */

        /* fields after ") ": 0 state, 9 majflt, 11 utime, 12 stime */
        for (p = rp + 1, field = 0; field <= 12; field++) {
            size_t len;
            char *s = next_word(&p, end, &len);
            if (!s)
                break;
            switch (field) {
            case 0: state = s; lstate = len; break;
            case 9: majflt = s; lmaj = len; break;
            case 11: utime = s; lut = len; break;
            case 12: stime = s; lst = len; break;
            default: break;
            }
        }
        if (!stime)
            continue; /* truncated */
        if (!(lstate == 1 && (*state == 'Z' || *state == 'X')))
            live++;

        out_u64(t);
        out_char('\t');
        out_u64((uint64_t)tk->tid);
        out_char('\t');
        out_mem(state, lstate);
        out_char('\t');
        out_mem(majflt, lmaj);
        out_char('\t');
        out_mem(utime, lut);
        out_char('\t');
        out_mem(stime, lst);
        out_char('\t');
        for (p = lp + 1; p < rp; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
        out_mem(lp + 1, (size_t)(rp - lp - 1));
        out_char('\t');

        if (lstate == 1 && *state == 'R') {
            out_char('0'); /* a running task has no wait channel; the kernel would print 0 */
        } else if (tk->wchan_fd < 0) {
            out_char('?');
        } else {
            ssize_t w = pread_all0(tk->wchan_fd, c->wbuf, sizeof c->wbuf - 1);
            if (w < 0) {
                out_char('?');
            } else {
                char *ws = c->wbuf, *we = c->wbuf + w;
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
        }
        out_char('\n');
    }

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

static int open_source(enum mode mode, const char *target, long pid, const char *root, long period_ms,
                       sample_fn *sample, void **ctx)
{
    static struct block_ctx bctx;
    static struct threads_ctx tctx;
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
        char rel[64];
        char *path;
        raise_nofile_limit();
        snprintf(rel, sizeof rel, "/proc/%ld", pid);
        path = path_join(root, rel);
        memset(&tctx, 0, sizeof tctx);
        tctx.pid_dirfd = open(path, O_RDONLY | O_DIRECTORY);
        if (tctx.pid_dirfd < 0) {
            fprintf(stderr, "sampler: %s: %s\n", path, strerror(errno));
            return 1;
        }
        free(path);
        tctx.scan_every = (unsigned)(RESCAN_MS / period_ms > 1 ? RESCAN_MS / period_ms : 1);
        tctx.need_scan = 1;
        *sample = threads_sample;
        *ctx = &tctx;
    }
    return 0;
}
#endif /* __APPLE__ */

/* ------------------------------------------------------------------------------------------------ main */

static void usage(FILE *f)
{
    fprintf(f, "usage: sampler block DEV   [--period-ms N] [--out FILE] [--root DIR]   (default period 10 ms)\n"
               "       sampler threads PID [--period-ms N] [--out FILE] [--root DIR]   (default period 5 ms)\n");
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
    long period_ms = -1, pid = 0;
    int i, rc;
    uint64_t period_ns, next, samples = 0, overruns = 0;
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

    /* open the source before the output, so a bad DEV/PID does not truncate --out */
    rc = open_source(mode, target, pid, root, period_ms, &sample, &ctx);
    if (rc != 0)
        return rc;

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

    out_str("# harness-sampler v1 mode=");
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
        out_str(" source=libproc majflt=none");
#endif
    }
    out_str(" clock=monotonic\n");
    out_flush(); /* the header goes out at once: the caller can see that sampling has started */

    next = now_ns();
    for (;;) {
        uint64_t t, after;
        if (g_stop) {
            rc = 0;
            out_str("# stop t_ns=");
            out_u64(now_ns());
            out_str(" samples=");
            out_u64(samples);
            out_str(" overruns=");
            out_u64(overruns);
            out_char('\n');
            break;
        }
        t = now_ns();
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

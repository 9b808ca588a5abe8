/* sampler_linux.c -- block mode (/sys/block/DEV/stat) and threads mode over /proc for the step's process tree
 * (proctree.h), on Linux and Android; and the short scheduler slice the sampler asks for there. Empty on macOS.
 * What is read, how it is classified and what it costs: sampler.c's opening comment. */

#include "sampler.h"

#ifndef __APPLE__
#ifdef __linux__
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include "proctree.h"
#endif

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
    int cmd_retries; /* that line had an empty cmd: this many more reads of it (PT_CMD_RETRIES) */
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

/* The tids listed in /proc/PID/task (proctree.h), ascending, into c->tids; their number, or -1 when the directory
 * cannot be opened (the process has been reaped before the first scan). */
static long list_tids(struct threads_ctx *c)
{
    long n;
    if (!c->taskdir && !(c->taskdir = pt_tasks_open(c->pid_dirfd, "task")))
        return -1;
    n = pt_tasks_list(c->taskdir, &c->tids, &c->tids_cap);
    qsort(c->tids, (size_t)n, sizeof *c->tids, pt_cmp);
    return n;
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
    c->count_ok = pt_task_count(c->taskdir) == listed;
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
        if (c->count_ok && pt_task_count(c->taskdir) != (long)c->ntasks)
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

int g_follow_tree = 1;  /* --no-tree: 0 */
long g_tree_ms = RESCAN_MS; /* --tree-ms */

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
    char cmd[128], line[PT_LINE_CAP];
    size_t n = pt_cmdline(c->pid_dirfd, -1, cmd, sizeof cmd);
    if (!c->announced)
        c->first_ns = t;
    c->announced = 1;
    c->cmd_retries = n ? 0 : PT_CMD_RETRIES;
    out_mem(line, pt_proc_line(line, sizeof line, t, c->pid, c->ppid, c->comm, cmd, n));
}

/* a "# proc" line written mid-exec had no cmd: once it can be read, the line again with it (proctree.h) */
static void proc_retry_cmd(struct threads_ctx *c, uint64_t t)
{
    char cmd[128], line[PT_LINE_CAP];
    size_t n = pt_cmdline(c->pid_dirfd, -1, cmd, sizeof cmd);
    if (!n) {
        c->cmd_retries--;
        return;
    }
    c->cmd_retries = 0;
    out_mem(line, pt_proc_line(line, sizeof line, t, c->pid, c->ppid, c->comm, cmd, n));
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
        } else if (c->cmd_retries) {
            proc_retry_cmd(c, t);
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

int open_source(enum mode mode, const char *target, long pid, const char *root, long period_ms,
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

/* the threads header's Linux keys: how often stat is read, wchan, whose syscall numbers, the tree, the gate */
void out_source_header(void *ctx)
{
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
uint64_t use_short_slice(long slice_us)
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
#endif /* !__APPLE__ */

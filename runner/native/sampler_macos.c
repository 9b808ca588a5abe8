/* sampler_macos.c -- threads mode on macOS through libproc; block mode refuses (sampler.c, "macOS", says what
 * differs from Linux and why). Empty on every other system. */

#include "sampler.h"

#ifdef __APPLE__
#include <libproc.h>
#include <sys/proc.h>
#include <sys/proc_info.h>

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

int open_source(enum mode mode, const char *target, long pid, const char *root, long period_ms,
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


/* the threads header's macOS keys: what libproc cannot give */
void out_source_header(void *ctx)
{
    (void)ctx;
    out_str(" source=libproc majflt=none class=none tree=none");
}

#endif /* __APPLE__ */

/*
 * proctree.h -- the one walker of /proc for the thread sampler (sampler_linux.c) and the counters reader
 * (counters.c): which processes descend from the step's process (pt_scan), the threads of each (pt_tasks_*), and
 * the "# proc" line both write for a process of the tree (pt_proc_line). Linux only; header-only (static
 * functions, each used by both tools), so the build stays one command per tool.
 *
 * How: a pid whose parent is followed -- or is found in the same scan, so a child and its grandchild that appeared
 * together are both taken -- is a descendant. Listing /proc costs ~400 us here (150 processes: procfs builds a
 * dentry per entry), 8 % of a core if done every 5 ms sample and 0.4 % every 100 ms, so a scan first reads the
 * last pid the kernel allocated (/proc/loadavg's last field, ~5 us; pids are handed out in ascending order):
 *   - unchanged since the last scan: nothing was started anywhere, the scan ends there;
 *   - grown by at most PT_PROBE_MAX: only the new pids are probed, /proc/N/stat each (ppid, comm, exit_signal: a
 *     thread -- tids share the pid space -- has exit_signal -1 and is skipped; a pid already gone fails the open);
 *   - otherwise (wrapped, a burst of forks, loadavg unreadable), and at least every full_every scans as a safety
 *     net (a pid whose stat was probed while it was still being created): the full listing, reading stat only for a
 *     pid seen for the first time; any other is remembered as outside the tree (a process cannot move into the
 *     tree later: an orphan is reparented to init or a subreaper, never to a descendant).
 *
 * Why not /proc/PID/task/TID/children: the kernel has it only with CONFIG_PROC_CHILDREN (this VM's 6.18 kernel
 * has not), it is one read per thread of every followed process (17 reads per scan for llama.cpp, about the cost
 * of the listing), and proc(5) calls it reliable only while the children are stopped or frozen. One way
 * everywhere is the one tested.
 *
 * Limits: a process whose parent exits before the next scan is reparented first and not found (an intermediate
 * that lives less than a scan period: the step's own processes that outlive their parent are found only when
 * the parent lived past a scan); a pid remembered outside the tree that exits and is reused by a new descendant
 * within one scan period is missed (the pid space wraps after pid_max forks).
 */
#ifndef HARNESS_PROCTREE_H
#define HARNESS_PROCTREE_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PT_COMM_CAP 64
#define PT_PROBE_MAX 256 /* new pids probed one by one; more: the full listing */

struct proctree {
    int procfd;     /* ROOT/proc, kept open */
    DIR *dir;       /* its listing, rewound at every full scan */
    int loadavg_fd; /* ROOT/proc/loadavg: the last pid allocated; -1: every scan is a full listing */
    long last_pid;  /* as it read at the last scan; -1: no full listing yet */
    unsigned since_full, full_every; /* scans since the last full listing; a full listing at least this often */
    long probes, listings; /* pids probed one by one, full listings: what the scans cost */
    int *outside;   /* pids seen before and not in the tree, ascending */
    size_t noutside, cap_outside;
    int *seen;      /* scratch: this scan's outside set */
    size_t nseen, cap_seen;
    struct pt_new {
        int pid, ppid, taken;
        char comm[PT_COMM_CAP];
    } *fresh;       /* scratch: pids new in this scan */
    size_t nfresh, cap_fresh;
};

/* callbacks: is pid followed? / a new descendant (its parent is followed now) */
typedef int (*pt_followed_fn)(void *ctx, int pid);
typedef void (*pt_found_fn)(void *ctx, int pid, int ppid, const char *comm);

static int pt_grow(void **p, size_t *cap, size_t need, size_t size)
{
    void *q;
    size_t n;
    if (need <= *cap)
        return 0;
    n = *cap ? *cap * 2 : 256;
    while (n < need)
        n *= 2;
    q = realloc(*p, n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* ppid and comm (control characters as '?') of process pid from procfd/PID/stat; -1 when it is gone, 1 when pid is
 * a thread (exit_signal -1: CLONE_THREAD; its stat names its process's parent) */
static int pt_stat(int procfd, int pid, int *ppid, char *comm, size_t cap)
{
    char rel[32], buf[1024], *lp, *rp, *p;
    int field;
    ssize_t n;
    size_t len, i;
    int fd;
    snprintf(rel, sizeof rel, "%d/stat", pid);
    fd = openat(procfd, rel, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    lp = strchr(buf, '(');
    rp = strrchr(buf, ')');
    if (!lp || !rp || rp < lp || rp[1] != ' ' || !rp[2] || !rp[3])
        return -1;
    /* after ") ": state, ppid, ... exit_signal (the 36th, stat's field 38) */
    *ppid = (int)strtol(rp + 4, NULL, 10);
    for (p = rp + 2, field = 0; *p && field < 35; p++)
        field += *p == ' ';
    if (field == 35 && p[0] == '-' && p[1] == '1' && (p[2] == ' ' || p[2] == '\n'))
        return 1;
    len = (size_t)(rp - lp - 1);
    if (len >= cap)
        len = cap - 1;
    for (i = 0; i < len; i++)
        comm[i] = (unsigned char)lp[1 + i] < 0x20 || lp[1 + i] == 0x7f ? '?' : lp[1 + i];
    comm[len] = '\0';
    return 0;
}

/* the head of procfd/PID/cmdline (pid -1: procfd is /proc/PID itself; arguments joined by spaces, control
 * characters as '?') into buf; its length */
/* Reads of an empty command line retried after a "# proc" line that had none, one per sample. exec sets the new
 * comm (begin_new_exec) before the loader points the new mm at its arguments (create_elf_tables), so a process
 * read in between has the new comm and an empty /proc/PID/cmdline for a few microseconds; a zombie keeps it
 * empty, hence the bound (200 reads: 1 s at the sampler's 5 ms period, 10 s at the counters' 50 ms). */
#define PT_CMD_RETRIES 200

static size_t pt_cmdline(int procfd, int pid, char *buf, size_t cap)
{
    char rel[32];
    ssize_t n;
    size_t i;
    int fd;
    if (pid < 0)
        snprintf(rel, sizeof rel, "cmdline");
    else
        snprintf(rel, sizeof rel, "%d/cmdline", pid);
    fd = openat(procfd, rel, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, cap);
    close(fd);
    if (n <= 0)
        return 0;
    while (n > 0 && buf[n - 1] == '\0')
        n--;
    for (i = 0; i < (size_t)n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
        else if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            buf[i] = '?';
    return (size_t)n;
}

static int pt_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* procfd = ROOT/proc opened by the caller; a full listing at least every full_every scans; 0, or -1 when it cannot
 * be listed */
static int pt_open(struct proctree *pt, int procfd, unsigned full_every)
{
    int listfd;
    memset(pt, 0, sizeof *pt);
    pt->procfd = procfd;
    pt->last_pid = -1;
    pt->full_every = full_every ? full_every : 1;
    pt->loadavg_fd = openat(procfd, "loadavg", O_RDONLY | O_CLOEXEC);
    listfd = openat(procfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (listfd < 0)
        return -1;
    pt->dir = fdopendir(listfd);
    if (!pt->dir) {
        close(listfd);
        return -1;
    }
    return 0;
}

/* the last pid allocated (the last field of loadavg: "0.20 0.18 0.12 1/80 11206"); -1 when unknown */
static long pt_last_pid(struct proctree *pt)
{
    char buf[128], *p;
    ssize_t n = pt->loadavg_fd < 0 ? -1 : pread(pt->loadavg_fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    p = strrchr(buf, ' ');
    return p && p[1] >= '0' && p[1] <= '9' ? strtol(p + 1, NULL, 10) : -1;
}

static int pt_add_fresh(struct proctree *pt, int pid)
{
    int rc;
    if (pt_grow((void **)&pt->fresh, &pt->cap_fresh, pt->nfresh + 1, sizeof *pt->fresh))
        return -1;
    rc = pt_stat(pt->procfd, pid, &pt->fresh[pt->nfresh].ppid, pt->fresh[pt->nfresh].comm, PT_COMM_CAP);
    if (rc == 0) { /* -1: gone since; 1: a thread */
        pt->fresh[pt->nfresh].pid = pid;
        pt->fresh[pt->nfresh].taken = 0;
        pt->nfresh++;
    }
    return 0;
}

/* a new process whose parent is followed (or was just taken) is a descendant; repeated until none is added */
static int pt_take(struct proctree *pt, pt_followed_fn followed, pt_found_fn found, void *ctx)
{
    size_t i;
    int progress, taken = 0;
    do {
        progress = 0;
        for (i = 0; i < pt->nfresh; i++) {
            struct pt_new *f = &pt->fresh[i];
            if (!f->taken && f->ppid > 0 && followed(ctx, f->ppid)) {
                f->taken = 1;
                progress = 1;
                taken++;
                found(ctx, f->pid, f->ppid, f->comm);
            }
        }
    } while (progress);
    return taken;
}

/* One scan: found() for every new descendant (a parent before its children); the number found, -1 on no memory. */
static int pt_scan(struct proctree *pt, pt_followed_fn followed, pt_found_fn found, void *ctx)
{
    struct dirent *de;
    size_t i;
    int taken, key;
    long last = pt_last_pid(pt), pid;
    pt->nseen = pt->nfresh = 0;
    if (pt->last_pid >= 0 && last >= 0 && ++pt->since_full < pt->full_every) {
        if (last == pt->last_pid)
            return 0; /* no process (nor thread) was started anywhere */
        if (last > pt->last_pid && last - pt->last_pid <= PT_PROBE_MAX) {
            for (pid = pt->last_pid + 1; pid <= last; pid++)
                if (!followed(ctx, (int)pid) && pt_add_fresh(pt, (int)pid))
                    return -1;
            pt->probes += last - pt->last_pid;
            pt->last_pid = last;
            return pt_take(pt, followed, found, ctx);
        }
    }
    pt->since_full = 0;
    pt->last_pid = last; /* read before the listing: a pid allocated meanwhile is probed at the next scan */
    pt->listings++;
    rewinddir(pt->dir);
    while ((de = readdir(pt->dir)) != NULL) {
        const char *s = de->d_name;
        long v = 0;
        if (*s < '1' || *s > '9')
            continue;
        for (; *s >= '0' && *s <= '9' && v < 0x7fffffffL / 10; s++)
            v = v * 10 + (*s - '0');
        if (*s || followed(ctx, (int)v))
            continue;
        key = (int)v;
        if (bsearch(&key, pt->outside, pt->noutside, sizeof *pt->outside, pt_cmp)) {
            if (pt_grow((void **)&pt->seen, &pt->cap_seen, pt->nseen + 1, sizeof *pt->seen))
                return -1;
            pt->seen[pt->nseen++] = key; /* still there, still outside */
            continue;
        }
        if (pt_add_fresh(pt, key))
            return -1;
    }
    taken = pt_take(pt, followed, found, ctx);
    for (i = 0; i < pt->nfresh; i++) {
        if (pt->fresh[i].taken)
            continue;
        if (pt_grow((void **)&pt->seen, &pt->cap_seen, pt->nseen + 1, sizeof *pt->seen))
            return -1;
        pt->seen[pt->nseen++] = pt->fresh[i].pid;
    }
    qsort(pt->seen, pt->nseen, sizeof *pt->seen, pt_cmp);
    { /* the outside set is now this scan's: pids gone since are forgotten */
        int *swap = pt->outside;
        size_t cap = pt->cap_outside;
        pt->outside = pt->seen;
        pt->cap_outside = pt->cap_seen;
        pt->noutside = pt->nseen;
        pt->seen = swap;
        pt->cap_seen = cap;
    }
    return taken;
}

/* ------------------------------------------------------------------------------- the threads of one process */

/* A process's task directory (rel under dirfd: "task" under its /proc/PID, or an absolute /proc/PID/task with
 * AT_FDCWD), kept open by the caller: bound to that process even if its pid is reused, its link count tells the
 * thread count, and rewinding it lists the threads anew. NULL when it cannot be opened (the process has gone). */
static DIR *pt_tasks_open(int dirfd, const char *rel)
{
    DIR *dir;
    int fd;
    do {
        fd = openat(dirfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return NULL;
    dir = fdopendir(fd);
    if (!dir)
        close(fd);
    return dir;
}

/* The thread count from the task directory's link count (2 + threads): an fstat, far cheaper than listing it; -1
 * when it does not tell (the process has been reaped, or a file system that counts no links). */
static long pt_task_count(DIR *tasks)
{
    struct stat st;
    if (fstat(dirfd(tasks), &st) != 0 || st.st_nlink < 2)
        return -1;
    return (long)st.st_nlink - 2;
}

/* The tids listed in the task directory now (procfs lists the threads anew; a reaped process lists none), in
 * listing order, into *tids (grown as needed; on no memory, those listed so far); their number. */
static long pt_tasks_list(DIR *tasks, int **tids, size_t *cap)
{
    struct dirent *de;
    size_t n = 0;
    rewinddir(tasks);
    while ((de = readdir(tasks)) != NULL) {
        const char *s = de->d_name;
        long v = 0;
        if (*s < '0' || *s > '9')
            continue;
        for (; *s >= '0' && *s <= '9' && v < 0x7fffffffL / 10; s++)
            v = v * 10 + (*s - '0');
        if (*s)
            continue;
        if (pt_grow((void **)tids, cap, n + 1, sizeof **tids))
            break;
        (*tids)[n++] = (int)v;
    }
    return (long)n;
}

/* ------------------------------------------------------------------------------------------- the tree's lines */

#define PT_LINE_CAP 384 /* a "# proc" line: its numbers, a comm of PT_COMM_CAP, a cmd of at most 128 bytes */

/* "# proc t_ns=T pid=P ppid=Q<TAB>comm=COMM<TAB>cmd=ARGS\n" into buf (comm and cmd are TAB-separated: they may hold
 * spaces; both come from pt_stat and pt_cmdline, control characters already '?'); its length. ppid <= 0: 0. */
static size_t pt_proc_line(char *buf, size_t cap, uint64_t t_ns, long pid, long ppid, const char *comm,
                           const char *cmd, size_t ncmd)
{
    int n = snprintf(buf, cap, "# proc t_ns=%" PRIu64 " pid=%ld ppid=%ld\tcomm=%s\tcmd=", t_ns, pid,
                     ppid > 0 ? ppid : 0L, comm);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    if (ncmd > cap - 1 - len)
        ncmd = cap - 1 - len;
    memcpy(buf + len, cmd, ncmd);
    len += ncmd;
    if (len < cap - 1)
        buf[len++] = '\n';
    buf[len] = '\0';
    return len;
}

#endif

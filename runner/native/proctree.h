/*
 * proctree.h -- the step's process tree, for the thread sampler (sampler.c) and the counters reader (counters.c):
 * which processes descend from the step's process, found by a scan of /proc. Linux only; header-only (static
 * functions), so each tool stays one compilation unit.
 *
 * How: list /proc (the directory stays open: rewinddir + readdir, one getdents of ~100-300 entries), and read
 * /proc/N/stat (its ppid and comm) only for a pid seen for the first time; a pid whose parent is followed -- or is
 * found in the same scan, so a child and its grandchild that appeared together are both taken -- is a descendant,
 * any other is remembered as outside the tree (a process cannot move into the tree later: an orphan is reparented
 * to init or a subreaper, never to a descendant), so a scan reads no stat at all when nothing new was started.
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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PT_COMM_CAP 64

struct proctree {
    int procfd;     /* ROOT/proc, kept open */
    DIR *dir;       /* its listing, rewound at every scan */
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

/* ppid and comm (control characters as '?') of process pid from procfd/PID/stat; -1 when it is gone */
static int pt_stat(int procfd, int pid, int *ppid, char *comm, size_t cap)
{
    char rel[32], buf[1024], *lp, *rp;
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
    /* after ") ": state, ppid */
    *ppid = (int)strtol(rp + 4, NULL, 10);
    len = (size_t)(rp - lp - 1);
    if (len >= cap)
        len = cap - 1;
    for (i = 0; i < len; i++)
        comm[i] = (unsigned char)lp[1 + i] < 0x20 || lp[1 + i] == 0x7f ? '?' : lp[1 + i];
    comm[len] = '\0';
    return 0;
}

/* the head of procfd/PID/cmdline (arguments joined by spaces, control characters as '?') into buf; its length */
static size_t pt_cmdline(int procfd, int pid, char *buf, size_t cap)
{
    char rel[32];
    ssize_t n;
    size_t i;
    int fd;
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

/* procfd = ROOT/proc opened by the caller; 0, or -1 when it cannot be listed */
static int pt_open(struct proctree *pt, int procfd)
{
    int listfd;
    memset(pt, 0, sizeof *pt);
    pt->procfd = procfd;
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

/* One scan: found() for every new descendant (a parent before its children); the number found, -1 on no memory. */
static int pt_scan(struct proctree *pt, pt_followed_fn followed, pt_found_fn found, void *ctx)
{
    struct dirent *de;
    size_t i;
    int progress, taken = 0, key;
    pt->nseen = pt->nfresh = 0;
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
        if (pt_grow((void **)&pt->fresh, &pt->cap_fresh, pt->nfresh + 1, sizeof *pt->fresh))
            return -1;
        if (pt_stat(pt->procfd, key, &pt->fresh[pt->nfresh].ppid, pt->fresh[pt->nfresh].comm, PT_COMM_CAP))
            continue; /* gone since the listing */
        pt->fresh[pt->nfresh].pid = key;
        pt->fresh[pt->nfresh].taken = 0;
        pt->nfresh++;
    }
    /* a new process whose parent is followed (or was just taken) is a descendant; repeat until none is added */
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

#endif

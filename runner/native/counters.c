/*
 * counters: the periodic reads of the counters collector (runner/collectors/counters.py) in C -- per thread of the
 * step's process and of its descendants (v2), every period: with taskstats, one generic-netlink answer per thread carries everything (schedstat's
 * three numbers too: cpu_run_virtual_total, cpu_delay_total and cpu_count are the same kernel fields, filled while
 * delay accounting is on; a thread whose answer lacks them -- delay accounting off -- is read from
 * /proc/PID/task/TID/schedstat instead); without taskstats, /proc/PID/task/TID/schedstat, stat and status. And PSI
 * totals. The Python collector writes the header and the "# stop" line; this program appends the data lines in
 * the format harness/parsers/counters.py reads:
 *
 *   # proc t_ns=T pid=P ppid=Q<TAB>comm=COMM<TAB>cmd=ARGS    (v2: a process of the step's tree, at its first read)
 *   t  t_ns pid tid run_ns runqueue_ns timeslices utime_ticks stime_ticks blkio_ticks nvcsw nivcsw cpu_delay_ns
 *      blkio_delay_ns swapin_delay_ns thrashing_delay_ns freepages_delay_ns compact_delay_ns comm
 *   p  t_ns memory_some_us memory_full_us io_some_us io_full_us
 *   # proc_end pid=P first_ns=F last_ns=L gone=0|1        (it has gone; gone=0: still there at the end)
 *
 *   counters --pid PID --period-ms MS --out FILE [--taskstats] [--no-tree] [--psi MEMORY_FILE --psi IO_FILE]
 *
 * v2 follows the step's process and its descendants (proctree.h: a /proc scan for new ones at every read; --no-tree:
 * the step's process only, as v1); the tree is recorded the way the thread sampler records it.
 *
 * Reads now, every period, and once more at SIGTERM/SIGINT (or once its parent, the runner, is gone); then prints "reads=N overruns=N cpu_s=S
 * sched_taskstats=N sched_proc=N" on stdout (the last two: thread reads whose run/runqueue/timeslices came from
 * taskstats or from /proc). A read that takes longer than the period is skipped, never caught up in bursts
 * (overruns). "-" marks a value the kernel did not give. Files stay open and are re-read with pread (a /proc read
 * is then a few microseconds). Lines are formatted by hand (printf was a fifth of the CPU) and written once a
 * second and at the end (each write also updates the file's mtime: a journalled inode update per read).
 *
 * Linux only (procfs, netlink).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proctree.h"

#define MAX_THREADS 4096
#define MAX_PROCS 256 /* processes of the step's tree followed at once */
#define BATCH 64 /* threads asked per datagram: their answers always fit the socket's receive buffer */
#define TASKSTATS_CMD_GET 1
#define TASKSTATS_CMD_ATTR_PID 1
#define TASKSTATS_TYPE_PID 1
#define TASKSTATS_TYPE_STATS 3
#define TASKSTATS_TYPE_AGGR_PID 4

/* byte offsets of the u64 fields read from struct taskstats (linux/taskstats.h; the struct only grows at its end) */
static const int DELAY_OFFSETS[] = {24, 40, 56, 336, 320, 360}; /* cpu, blkio, swapin, thrashing, freepages, compact */
#define N_DELAYS 6
#define CPU_COUNT_OFFSET 16       /* sched_info.pcount: schedstat's timeslices */
#define CPU_RUN_VIRTUAL_OFFSET 72 /* se.sum_exec_runtime: schedstat's on-CPU ns (cpu_delay_total is its run_delay) */
#define NVCSW_OFFSET 272
#define NIVCSW_OFFSET 280
#define COMM_OFFSET 80 /* char ac_comm[32] */
#define UTIME_US_OFFSET 152
#define STIME_US_OFFSET 160

#define OUT_CAP (1 << 20)
#define FLUSH_NS 1000000000LL

struct thread {
    long pid, tid; /* its process (tgid) and itself */
    int schedstat_fd, stat_fd, status_fd; /* with taskstats, schedstat is opened only if an answer lacks it */
    int seen; /* in the latest listing */
    int has_stats;
    int64_t t_ns; /* when its answer was read */
    uint64_t delays[N_DELAYS], nvcsw, nivcsw, utime_us, stime_us, run_ns, timeslices;
    int has_delay[N_DELAYS];
    char comm[33];
};

static struct thread threads[MAX_THREADS];
static int n_threads;
static volatile sig_atomic_t stopping;
static int nl_fd = -1, family_id;
static uint32_t nl_seq;
/* the step's process and its descendants (proctree.h): each listed on its own; one that has gone is dropped */
struct proc {
    long pid, ppid;
    char task_dir[64], comm[PT_COMM_CAP];
    DIR *tasks; /* its task directory, kept open (proctree.h): bound to it, its link count the thread count */
    int listed_threads, reads_since_listing, has_threads;
    int cmd_retries; /* its "# proc" line had an empty cmd: this many more reads of it (PT_CMD_RETRIES) */
    int64_t first_ns, last_ns; /* the first and last reads that listed a thread of it */
};
static struct proc procs[MAX_PROCS];
static int n_procs, follow_tree = 1, proc_fd = -1;
static struct proctree tree;
static int *listed_tids; /* scratch: a process's tids as last listed */
static size_t listed_cap;
static const char *psi_paths[2];
static int psi_fds[2] = {-1, -1};
static int n_psi;
static int thread_gone;
static int out_fd = -1;
static char out_buf[OUT_CAP];
static size_t out_len;
static int64_t flushed_at;
static long sched_from_taskstats, sched_from_proc;
static unsigned long long clk_tck = 100;

static void on_signal(int sig) { (void)sig; stopping = 1; }

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static ssize_t read_at0(int fd, char *buf, size_t cap) {
    ssize_t n = pread(fd, buf, cap - 1, 0);
    if (n < 0)
        return -1;
    buf[n] = 0;
    return n;
}

/* ------------------------------------------------------------------------------------------------------ output */

static void flush_out(void) {
    for (size_t done = 0; done < out_len;) {
        ssize_t n = write(out_fd, out_buf + done, out_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* disk full: what is lost is lost, the reads go on */
        done += (size_t)n;
    }
    out_len = 0;
    flushed_at = mono_ns();
}

static void put_str(const char *s) {
    while (*s)
        out_buf[out_len++] = *s++;
}

static void put_u64(uint64_t v) {
    char digits[20];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        out_buf[out_len++] = digits[--n];
}

/* the value then a TAB, or "-" when the kernel did not give it */
static void put_field(int has, uint64_t value) {
    if (has)
        put_u64(value);
    else
        out_buf[out_len++] = '-';
    out_buf[out_len++] = '\t';
}

/* comm with TABs and newlines as spaces (they would split the line), then the line's end */
static void put_comm_eol(const char *comm) {
    for (const char *c = comm; *c; c++)
        out_buf[out_len++] = (*c == '\t' || *c == '\n') ? ' ' : *c;
    out_buf[out_len++] = '\n';
    if (out_len > OUT_CAP - 4096) /* room for the next line: one is at most ~400 bytes */
        flush_out();
}

/* ------------------------------------------------------------------------------------------- taskstats (netlink) */

static int nl_attr(char *at, int type, const void *data, int len) {
    struct nlattr *a = (struct nlattr *)at;
    a->nla_type = (unsigned short)type;
    a->nla_len = (unsigned short)(NLA_HDRLEN + len);
    memcpy(at + NLA_HDRLEN, data, (size_t)len);
    return NLA_ALIGN(a->nla_len);
}

static int nl_message(char *at, int type, int cmd, int attr_type, const void *data, int len) {
    struct nlmsghdr *n = (struct nlmsghdr *)at;
    struct genlmsghdr *g = (struct genlmsghdr *)(at + NLMSG_HDRLEN);
    memset(n, 0, NLMSG_HDRLEN + GENL_HDRLEN);
    g->cmd = (unsigned char)cmd;
    g->version = 1;
    int size = NLMSG_HDRLEN + GENL_HDRLEN + nl_attr(at + NLMSG_HDRLEN + GENL_HDRLEN, attr_type, data, len);
    n->nlmsg_len = (unsigned)size;
    n->nlmsg_type = (unsigned short)type;
    n->nlmsg_flags = NLM_F_REQUEST;
    n->nlmsg_seq = ++nl_seq;
    return NLMSG_ALIGN(size);
}

/* the first attribute of ``type`` in [at, end), or NULL */
static struct nlattr *nl_find(char *at, char *end, int type) {
    while (at + NLA_HDRLEN <= end) {
        struct nlattr *a = (struct nlattr *)at;
        if (a->nla_len < NLA_HDRLEN || at + a->nla_len > end)
            return NULL;
        if ((a->nla_type & NLA_TYPE_MASK) == type)
            return a;
        at += NLA_ALIGN(a->nla_len);
    }
    return NULL;
}

static int taskstats_open(void) {
    static char buf[8192];
    nl_fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_GENERIC);
    if (nl_fd < 0)
        return -1;
    struct timeval timeout = {1, 0};
    setsockopt(nl_fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    int size = nl_message(buf, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME, "TASKSTATS", 10);
    if (send(nl_fd, buf, (size_t)size, 0) < 0)
        return -1;
    ssize_t got = recv(nl_fd, buf, sizeof buf, 0);
    if (got < (ssize_t)(NLMSG_HDRLEN + GENL_HDRLEN) || ((struct nlmsghdr *)buf)->nlmsg_type == NLMSG_ERROR)
        return -1;
    struct nlattr *id = nl_find(buf + NLMSG_HDRLEN + GENL_HDRLEN, buf + got, CTRL_ATTR_FAMILY_ID);
    if (!id)
        return -1;
    memcpy(&family_id, (char *)id + NLA_HDRLEN, 2);
    family_id &= 0xffff;
    return 0;
}

static struct thread *find(long tid) {
    /* tids are unique across processes */
    for (int i = 0; i < n_threads; i++)
        if (threads[i].tid == tid)
            return &threads[i];
    return NULL;
}

static uint64_t u64_at(const char *s, int offset) {
    uint64_t v;
    memcpy(&v, s + offset, 8);
    return v;
}

static void taskstats_reply(char *msg, char *end, int64_t now) {
    struct nlattr *aggr = nl_find(msg + NLMSG_HDRLEN + GENL_HDRLEN, end, TASKSTATS_TYPE_AGGR_PID);
    if (!aggr)
        return;
    char *inner = (char *)aggr + NLA_HDRLEN, *inner_end = (char *)aggr + aggr->nla_len;
    struct nlattr *pid = nl_find(inner, inner_end, TASKSTATS_TYPE_PID);
    struct nlattr *stats = nl_find(inner, inner_end, TASKSTATS_TYPE_STATS);
    if (!pid || !stats)
        return;
    uint32_t tid;
    memcpy(&tid, (char *)pid + NLA_HDRLEN, 4);
    struct thread *t = find((long)tid);
    if (!t)
        return;
    char *s = (char *)stats + NLA_HDRLEN;
    int len = stats->nla_len - NLA_HDRLEN;
    for (int i = 0; i < N_DELAYS; i++) {
        t->has_delay[i] = DELAY_OFFSETS[i] + 8 <= len;
        if (t->has_delay[i])
            t->delays[i] = u64_at(s, DELAY_OFFSETS[i]);
    }
    if (NIVCSW_OFFSET + 8 <= len) {
        t->nvcsw = u64_at(s, NVCSW_OFFSET);
        t->nivcsw = u64_at(s, NIVCSW_OFFSET);
        t->utime_us = u64_at(s, UTIME_US_OFFSET);
        t->stime_us = u64_at(s, STIME_US_OFFSET);
        t->run_ns = u64_at(s, CPU_RUN_VIRTUAL_OFFSET);
        t->timeslices = u64_at(s, CPU_COUNT_OFFSET);
        memcpy(t->comm, s + COMM_OFFSET, 32);
        t->comm[32] = 0;
        t->t_ns = now;
        t->has_stats = 1;
    }
}

/* the answers to the requests numbered from ``first``: how many carried a thread's stats (a thread gone since the
 * listing answers ESRCH); one reply datagram per thread, taken many at a time (recvmmsg), not one recv each */
static int taskstats_answers(uint32_t first, int asked, int64_t now) {
    static char reply[BATCH * 1024];
    static struct mmsghdr msgs[BATCH];
    static struct iovec iovs[BATCH];
    for (int i = 0; i < BATCH; i++) {
        iovs[i].iov_base = reply + i * 1024;
        iovs[i].iov_len = 1024;
        msgs[i].msg_hdr.msg_iov = &iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int answered = 0, stats_seen = 0;
    while (answered < asked) {
        int count = recvmmsg(nl_fd, msgs, BATCH, MSG_WAITFORONE, NULL);
        if (count <= 0)
            break; /* timed out: this read goes without the rest */
        for (int m = 0; m < count; m++) {
            char *datagram = iovs[m].iov_base, *end = datagram + msgs[m].msg_len;
            for (char *at = datagram; at + NLMSG_HDRLEN <= end;) {
                struct nlmsghdr *n = (struct nlmsghdr *)at;
                if (n->nlmsg_len < NLMSG_HDRLEN || at + n->nlmsg_len > end)
                    break;
                if (n->nlmsg_seq >= first) {
                    answered++;
                    if (n->nlmsg_type != NLMSG_ERROR && n->nlmsg_type != NLMSG_DONE) {
                        taskstats_reply(at, at + n->nlmsg_len, now);
                        stats_seen++;
                    }
                }
                at += NLMSG_ALIGN(n->nlmsg_len);
            }
        }
    }
    return stats_seen;
}

/* one datagram asking for up to BATCH threads, then their answers: the kernel fills every answer while send()
 * runs, so the time after it stamps them all */
static void taskstats_read(void) {
    static char request[BATCH * 32];
    for (int from = 0; from < n_threads; from += BATCH) {
        int size = 0, asked = 0;
        uint32_t first = nl_seq + 1;
        for (int i = from; i < n_threads && asked < BATCH; i++, asked++) {
            uint32_t tid = (uint32_t)threads[i].tid;
            threads[i].has_stats = 0;
            size += nl_message(request + size, family_id, TASKSTATS_CMD_GET, TASKSTATS_CMD_ATTR_PID, &tid, 4);
        }
        if (send(nl_fd, request, (size_t)size, 0) < 0)
            return;
        if (taskstats_answers(first, asked, mono_ns()) < asked)
            thread_gone = 1; /* ESRCH: exited since the listing */
    }
}

/* ------------------------------------------------------------------------------------------------------ /proc */

static int open_in(const struct thread *t, const char *name) {
    char path[128];
    snprintf(path, sizeof path, "/proc/%ld/task/%ld/%s", t->pid, t->tid, name);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static void close_thread(struct thread *t) {
    if (t->schedstat_fd >= 0)
        close(t->schedstat_fd);
    if (t->stat_fd >= 0)
        close(t->stat_fd);
    if (t->status_fd >= 0)
        close(t->status_fd);
}

/* the thread count of the process (proctree.h: its task directory's link count), -1 once it is gone */
static int thread_count(struct proc *p) {
    if (!p->tasks)
        p->tasks = pt_tasks_open(AT_FDCWD, p->task_dir);
    return p->tasks ? (int)pt_task_count(p->tasks) : -1;
}

/* a thread of the latest listing not yet followed: its /proc files opened (without taskstats; with it, the answer
 * says all), 0 if it exited since the listing */
static int open_thread(struct thread *t, long pid, long tid) {
    memset(t, 0, sizeof *t);
    t->pid = pid;
    t->tid = tid;
    t->schedstat_fd = t->stat_fd = t->status_fd = -1;
    if (nl_fd >= 0)
        return 1;
    t->schedstat_fd = open_in(t, "schedstat");
    t->stat_fd = open_in(t, "stat");
    t->status_fd = open_in(t, "status");
    if (t->schedstat_fd < 0 || t->stat_fd < 0) {
        close_thread(t);
        return 0;
    }
    return 1;
}

/* the threads of process p now: new ones opened, gone ones closed -- listed again only when the count changed,
 * a thread was found gone, or every 10th read (a thread that ended while another began keeps the count); 0 once
 * the process has gone (its task directory lists no thread) */
static int list_threads(struct proc *p, int relist) {
    int count = thread_count(p);
    if (count > 0 && count == p->listed_threads && !relist && ++p->reads_since_listing < 10)
        return p->has_threads;
    p->listed_threads = count;
    p->reads_since_listing = 0;
    long listed = count < 0 ? 0 : pt_tasks_list(p->tasks, &listed_tids, &listed_cap);
    for (int i = 0; i < n_threads; i++)
        if (threads[i].pid == p->pid)
            threads[i].seen = 0;
    p->has_threads = 0;
    for (long k = 0; k < listed; k++) {
        long tid = listed_tids[k];
        struct thread *t = find(tid);
        if (!t && n_threads < MAX_THREADS && open_thread(&threads[n_threads], p->pid, tid))
            t = &threads[n_threads++];
        if (t) {
            t->seen = 1;
            p->has_threads = 1;
        }
    }
    for (int i = 0; i < n_threads;) {
        if (threads[i].pid == p->pid && !threads[i].seen) {
            close_thread(&threads[i]);
            threads[i] = threads[--n_threads];
        } else {
            i++;
        }
    }
    return p->has_threads;
}

/* "# proc t_ns=T pid=P ppid=Q<TAB>comm=COMM<TAB>cmd=ARGS" (proctree.h), as the thread sampler writes it */
static void put_proc_text(const struct proc *p, int64_t now, const char *cmd, size_t n) {
    out_len += pt_proc_line(out_buf + out_len, PT_LINE_CAP, (uint64_t)now, p->pid, p->ppid, p->comm, cmd, n);
    if (out_len > OUT_CAP - 4096) /* room for the next line, as put_comm_eol leaves it */
        flush_out();
}

static void put_proc(struct proc *p, int64_t now) {
    char cmd[128];
    size_t n = proc_fd >= 0 ? pt_cmdline(proc_fd, (int)p->pid, cmd, sizeof cmd) : 0;
    p->cmd_retries = n || proc_fd < 0 ? 0 : PT_CMD_RETRIES;
    put_proc_text(p, now, cmd, n);
}

/* a "# proc" line written mid-exec had no cmd: once it can be read, the line again with it (proctree.h) */
static void retry_proc_cmd(struct proc *p, int64_t now) {
    char cmd[128];
    size_t n = pt_cmdline(proc_fd, (int)p->pid, cmd, sizeof cmd);
    if (!n) {
        p->cmd_retries--;
        return;
    }
    p->cmd_retries = 0;
    put_proc_text(p, now, cmd, n);
}

/* "# proc_end pid=P first_ns=F last_ns=L gone=0|1" */
static void put_proc_end(const struct proc *p, int gone) {
    put_str("# proc_end pid=");
    put_u64((uint64_t)p->pid);
    put_str(" first_ns=");
    put_u64((uint64_t)p->first_ns);
    put_str(" last_ns=");
    put_u64((uint64_t)p->last_ns);
    put_str(gone ? " gone=1" : " gone=0");
    put_comm_eol("");
}

static int tree_follows(void *ctx, int pid) {
    (void)ctx;
    for (int i = 0; i < n_procs; i++)
        if (procs[i].pid == pid)
            return 1;
    return 0;
}

static void add_proc(long pid, long ppid, const char *comm) {
    struct proc *p;
    if (n_procs >= MAX_PROCS)
        return;
    p = &procs[n_procs++];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    p->ppid = ppid;
    p->listed_threads = -1;
    snprintf(p->task_dir, sizeof p->task_dir, "/proc/%ld/task", pid);
    snprintf(p->comm, sizeof p->comm, "%s", comm);
}

static void tree_found(void *ctx, int pid, int ppid, const char *comm) {
    (void)ctx;
    add_proc(pid, ppid, comm);
}

/* every process of the tree listed (new descendants first found), gone ones written off and dropped */
static void list_tree(int64_t now) {
    int relist = thread_gone;
    thread_gone = 0;
    if (follow_tree && pt_scan(&tree, tree_follows, tree_found, NULL) < 0)
        follow_tree = 0; /* out of memory: the processes found so far */
    for (int i = 0; i < n_procs;) {
        struct proc *p = &procs[i];
        int alive = list_threads(p, relist);
        if (alive && !p->first_ns) {
            p->first_ns = now;
            put_proc(p, now);
        } else if (alive && proc_fd >= 0) {
            /* its name changed (an exec: found between fork and exec, it was the parent's program): the same
             * "# proc" line again, whose comm and cmd replace the first */
            int ppid;
            char comm[PT_COMM_CAP];
            if (pt_stat(proc_fd, (int)p->pid, &ppid, comm, sizeof comm) == 0 && strcmp(comm, p->comm)) {
                memcpy(p->comm, comm, sizeof comm);
                put_proc(p, now);
            } else if (p->cmd_retries) {
                retry_proc_cmd(p, now);
            }
        }
        if (alive || !p->first_ns) { /* a process never seen alive is dropped without a line */
            p->last_ns = alive ? now : p->last_ns;
            if (alive) {
                i++;
                continue;
            }
        } else {
            put_proc_end(p, 1);
        }
        if (p->tasks)
            closedir(p->tasks);
        procs[i] = procs[--n_procs];
    }
}

/* schedstat's "run_ns runqueue_ns timeslices" into v, 0 if the thread is gone */
static int read_schedstat(struct thread *t, unsigned long long v[3]) {
    char buf[256];
    if (t->schedstat_fd < 0)
        t->schedstat_fd = open_in(t, "schedstat");
    if (t->schedstat_fd < 0 || read_at0(t->schedstat_fd, buf, sizeof buf) <= 0)
        return 0;
    char *at = buf, *end;
    for (int i = 0; i < 3; i++, at = end) {
        v[i] = strtoull(at, &end, 10);
        if (end == at)
            return 0;
    }
    return 1;
}

/* "t", t_ns, pid, tid, run_ns, runqueue_ns, timeslices, each followed by a TAB */
static void put_line_start(int64_t now, const struct thread *t, const unsigned long long sched[3]) {
    put_str("t\t");
    put_u64((uint64_t)now);
    out_buf[out_len++] = '\t';
    put_u64((uint64_t)t->pid);
    out_buf[out_len++] = '\t';
    put_u64((uint64_t)t->tid);
    out_buf[out_len++] = '\t';
    for (int i = 0; i < 3; i++)
        put_field(1, sched[i]);
}

/* with taskstats: all from the netlink answer (utime/stime in clock ticks as stat gives them; blkio ticks = (blkio +
 * swapin delay) in ticks, which is how the kernel computes stat's field 42). run/runqueue/timeslices are schedstat's
 * own fields, there while delay accounting is on (a thread on a CPU has run at least once: timeslices >= 1); else
 * from schedstat */
static void write_from_taskstats(struct thread *t) {
    if (!t->has_stats)
        return; /* exited since the listing */
    unsigned long long sched[3] = {t->run_ns, t->delays[0], t->timeslices};
    int64_t now = t->t_ns;
    if (t->timeslices > 0 && t->has_delay[0]) {
        sched_from_taskstats++;
    } else {
        if (!read_schedstat(t, sched)) {
            thread_gone = 1;
            return;
        }
        now = mono_ns();
        sched_from_proc++;
    }
    put_line_start(now, t, sched);
    put_field(1, t->utime_us * clk_tck / 1000000);
    put_field(1, t->stime_us * clk_tck / 1000000);
    put_field(t->has_delay[1] && t->has_delay[2], (t->delays[1] + t->delays[2]) / (1000000000ULL / clk_tck));
    put_field(1, t->nvcsw);
    put_field(1, t->nivcsw);
    for (int i = 0; i < N_DELAYS; i++)
        put_field(t->has_delay[i], t->delays[i]);
    put_comm_eol(t->comm);
}

/* the number after "\nNAME:" in a status text, as written, or "-" */
static void put_status_field(const char *status, const char *name) {
    const char *at = status ? strstr(status, name) : NULL;
    if (at)
        put_u64(strtoull(at + strlen(name), NULL, 10));
    else
        out_buf[out_len++] = '-';
    out_buf[out_len++] = '\t';
}

/* without taskstats: schedstat, stat (utime, stime, blkio ticks, comm) and status (context switches) */
static void write_from_proc(struct thread *t) {
    char stat[1024], status[4096];
    unsigned long long sched[3];
    if (!read_schedstat(t, sched)) {
        thread_gone = 1; /* exited since the listing */
        return;
    }
    if (read_at0(t->stat_fd, stat, sizeof stat) <= 0)
        return;
    int64_t now = mono_ns();
    char *open_paren = strchr(stat, '('), *close_paren = strrchr(stat, ')');
    if (!open_paren || !close_paren)
        return;
    *close_paren = 0;
    /* stat after comm: field 3 is index 0, so utime (14) is 11, stime (15) 12, blkio ticks (42) 39 */
    char *fields[64];
    int n = 0;
    for (char *tok = strtok(close_paren + 2, " \n"); tok && n < 64; tok = strtok(NULL, " \n"))
        fields[n++] = tok;
    if (n < 13)
        return;
    int has_status = t->status_fd >= 0;
    if (has_status && read_at0(t->status_fd, status, sizeof status) <= 0) {
        /* exited between its stat and its status: a row without the switches would be its last, read as "no
           switches counted" (the rows before had them) */
        thread_gone = 1;
        return;
    }
    sched_from_proc++;
    put_line_start(now, t, sched);
    const char *stat_fields[3] = {fields[11], fields[12], n > 39 ? fields[39] : "-"};
    for (int i = 0; i < 3; i++) {
        put_str(stat_fields[i]);
        out_buf[out_len++] = '\t';
    }
    put_status_field(has_status ? status : NULL, "\nvoluntary_ctxt_switches:");
    put_status_field(has_status ? status : NULL, "\nnonvoluntary_ctxt_switches:");
    put_str("-\t-\t-\t-\t-\t-\t");
    char comm[64];
    snprintf(comm, sizeof comm, "%s", open_paren + 1);
    put_comm_eol(comm);
}

/* (some total, full total) of a PSI file, "-" where missing */
static void psi_totals(int i, char *some, char *full) {
    char buf[512];
    strcpy(some, "-");
    strcpy(full, "-");
    if (psi_fds[i] < 0)
        psi_fds[i] = open(psi_paths[i], O_RDONLY | O_CLOEXEC); /* kept open, re-read with pread */
    ssize_t n = psi_fds[i] < 0 ? -1 : read_at0(psi_fds[i], buf, sizeof buf);
    for (char *line = n > 0 ? buf : NULL; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        char *total = strstr(line, "total=");
        if (total && !strncmp(line, "some", 4))
            snprintf(some, 24, "%s", total + 6);
        else if (total && !strncmp(line, "full", 4))
            snprintf(full, 24, "%s", total + 6);
        line = next;
    }
}

static void read_once(void) {
    list_tree(mono_ns());
    if (nl_fd >= 0)
        taskstats_read();
    for (int i = 0; i < n_threads; i++) {
        if (nl_fd >= 0)
            write_from_taskstats(&threads[i]);
        else
            write_from_proc(&threads[i]);
    }
    if (n_psi > 0) {
        char totals[2][2][24];
        for (int i = 0; i < n_psi; i++)
            psi_totals(i, totals[i][0], totals[i][1]);
        put_str("p\t");
        put_u64((uint64_t)mono_ns());
        for (int i = 0; i < n_psi; i++)
            for (int j = 0; j < 2; j++) {
                out_buf[out_len++] = '\t';
                put_str(totals[i][j]);
            }
        put_comm_eol("");
    }
    if (mono_ns() - flushed_at >= FLUSH_NS)
        flush_out();
}

static void usage(void) {
    fprintf(stderr, "usage: counters --pid PID --period-ms MS --out FILE [--taskstats] [--no-tree] "
                    "[--psi FILE --psi FILE]\n");
    exit(2);
}

int main(int argc, char **argv) {
    long pid = 0, period_ms = 100;
    const char *out_path = NULL;
    int want_taskstats = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--taskstats")) {
            want_taskstats = 1;
            continue;
        }
        if (!strcmp(argv[i], "--no-tree")) {
            follow_tree = 0;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *val = argv[++i];
        if (!strcmp(argv[i - 1], "--pid")) pid = atol(val);
        else if (!strcmp(argv[i - 1], "--period-ms")) period_ms = atol(val);
        else if (!strcmp(argv[i - 1], "--out")) out_path = val;
        else if (!strcmp(argv[i - 1], "--psi") && n_psi < 2) psi_paths[n_psi++] = val;
        else usage();
    }
    if (pid <= 0 || period_ms <= 0 || !out_path)
        usage();
    {
        int ppid = 0;
        char comm[PT_COMM_CAP] = "";
        proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (proc_fd >= 0)
            (void)pt_stat(proc_fd, (int)pid, &ppid, comm, sizeof comm);
        /* the full /proc listing at least every ~1 s (proctree.h: between, the new pids only) */
        follow_tree = follow_tree && proc_fd >= 0 && pt_open(&tree, proc_fd, (unsigned)(1000 / period_ms)) == 0;
        add_proc(pid, ppid, comm);
    }
    clk_tck = (unsigned long long)sysconf(_SC_CLK_TCK);
    out_fd = open(out_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (out_fd < 0) {
        fprintf(stderr, "counters: cannot write %s: %s\n", out_path, strerror(errno));
        return 1;
    }
    if (want_taskstats && taskstats_open() != 0) {
        fprintf(stderr, "counters: taskstats not usable: %s\n", strerror(errno));
        if (nl_fd >= 0)
            close(nl_fd);
        nl_fd = -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    long reads = 0, overruns = 0;
    int64_t period = period_ms * 1000000LL, due = mono_ns();
    flushed_at = due;
    pid_t runner = getppid();
    while (!stopping) {
        if (getppid() != runner)
            break; /* the runner was killed: nobody will stop this reader, so it ends by itself */
        read_once();
        reads++;
        due += period;
        int64_t now = mono_ns();
        if (now > due) { /* a read took longer than the period: skip, never catch up in bursts */
            overruns++;
            due = now;
            continue;
        }
        struct timespec wait = {(time_t)((due - now) / 1000000000LL), (long)((due - now) % 1000000000LL)};
        nanosleep(&wait, NULL); /* a signal ends it early: then the loop stops */
    }
    read_once(); /* the end: deltas cover the whole step */
    reads++;
    for (int i = 0; i < n_procs; i++)
        if (procs[i].first_ns)
            put_proc_end(&procs[i], 0); /* still there at the stop */
    flush_out();
    close(out_fd);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("reads=%ld overruns=%ld cpu_s=%.6f sched_taskstats=%ld sched_proc=%ld\n", reads, overruns,
           usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6,
           sched_from_taskstats, sched_from_proc);
    return 0;
}

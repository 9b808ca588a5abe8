/*
 * workload: threads of known behaviour, each measuring its own truth with clocks -- the ground truth the
 * counters collector (runner/collectors/counters.py) is validated against (tests/test_counters.py).
 *
 *   workload --seconds S [--busy N] [--barrier N:PERIODus] [--fault FILE] [--pread FILE] [--sleep N]
 *            [--oversubscribed N] [--cpu C] [--hold-ms MS] [--sleep-us US] --out truth.json
 *
 * Roles (one thread each unless N says more):
 *   busy            compute only: truth run = its CPU time, runqueue = wall - CPU (it never blocks)
 *   barrier         N threads meeting at a futex barrier every PERIOD us, like llama.cpp's per-op barrier;
 *                   thread i computes (i+1)/N of the period, so the faster ones wait in FUTEX_WAIT
 *   fault           touches one byte per page of a cold mmap of FILE (MADV_RANDOM: one page per fault);
 *                   after each pass the pages are unmapped and evicted (POSIX_FADV_DONTNEED), so every pass
 *                   is cold again
 *   pread           pread()s FILE in 128 KiB blocks (POSIX_FADV_RANDOM: no read-ahead), evicting it at EOF
 *   sleep           nanosleep(1 ms, or --sleep-us) in a loop
 *   oversubscribed  N busy threads pinned to one CPU (--cpu, default the last one): each waits for the other
 *
 * Every thread measures, over its own phase of S seconds: wall (CLOCK_MONOTONIC), on-CPU
 * (CLOCK_THREAD_CPUTIME_ID), and for each blocking call the wall time around it minus the CPU time it used
 * (so a blocked_* includes the wait for a CPU after the wake-up). After its phase a thread sleeps --hold-ms
 * (default 300) before exiting, so a sampler still finds it. The JSON gives per thread: tid, role, the phase's
 * CLOCK_MONOTONIC start and end (the sampler's clock), wall_ns, cpu_ns, futex_ns, fault_ns, pread_ns,
 * sleep_ns, and runqueue_ns = wall - CPU for the pure-compute roles (busy, oversubscribed).
 *
 * asleep_ns (the sampler's truth, tests/test_sampler_classes.py): the part of those blocking calls the thread spent
 * asleep, off CPU and not runnable -- each call's wall minus its CPU minus the runqueue wait the kernel added to the
 * thread's own /proc/thread-self/schedstat meanwhile (the wait for a CPU after the wake-up, which a sampler sees as
 * runnable, R). That makes it independent of the machine's load. null where schedstat is not readable.
 *
 * Linux only (futex, sched_setaffinity, posix_fadvise).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define BLOCK (128 * 1024)

enum role { BUSY, BARRIER, FAULT, PREAD, SLEEP, OVERSUB };
static const char *ROLE_NAMES[] = {"busy", "barrier", "fault", "pread", "sleep", "oversubscribed"};

struct worker {
    pthread_t thread;
    enum role role;
    int index; /* within its role's group */
    long tid;
    int64_t start_ns, end_ns, cpu_ns, futex_ns, fault_ns, pread_ns, sleep_ns, ops, asleep_ns;
    int schedstat_fd; /* /proc/thread-self/schedstat, -1: not readable */
};

/* Where a blocking call started: wall, CPU and runqueue wait so far. */
struct mark {
    int64_t wall, cpu, run_delay;
};

static struct worker workers[MAX_THREADS];
static int n_workers;
static double seconds = 3.0;
static int hold_ms = 300, sleep_us = 1000;
static int barrier_threads, barrier_period_us = 200, oversub_cpu = -1;
static const char *fault_file, *pread_file;
static pthread_barrier_t start_line;
static int64_t phase_start_ns, phase_end_ns;

/* the futex barrier: generation counter; the last to arrive decides whether the phase is over */
static volatile int barrier_arrived, barrier_generation, barrier_stop;
static pthread_mutex_t barrier_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t mono(void) { return clock_ns(CLOCK_MONOTONIC); }
static int64_t cpu(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

/* the thread's time waiting on a runqueue so far (schedstat's second field), 0 when not readable */
static int64_t run_delay(struct worker *w) {
    char text[96];
    long long on_cpu, waited;
    ssize_t n = w->schedstat_fd < 0 ? -1 : pread(w->schedstat_fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    return sscanf(text, "%lld %lld", &on_cpu, &waited) == 2 ? waited : 0;
}

/* The three clocks at one instant. The runqueue wait is added to schedstat when the thread gets its CPU back, so a
 * preemption between the reads would land in one clock and not the other (a barrier's last thread, preempted by the
 * threads it just woke, had come out asleep for less than no time): read again until schedstat did not move. */
static struct mark mark(struct worker *w) {
    struct mark m;
    int64_t before;
    do {
        before = run_delay(w);
        m.wall = mono();
        m.cpu = cpu();
        m.run_delay = run_delay(w);
    } while (m.run_delay != before);
    return m;
}

/* a blocking call since m is over: its wall minus CPU (returned: the blocked_* fields), and its asleep part */
static int64_t blocked_since(struct worker *w, struct mark m) {
    struct mark now = mark(w);
    int64_t blocked = (now.wall - m.wall) - (now.cpu - m.cpu);
    w->asleep_ns += blocked - (now.run_delay - m.run_delay);
    return blocked;
}

static void die(const char *what, const char *arg) {
    fprintf(stderr, "workload: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(errno));
    exit(1);
}

/* some arithmetic the compiler cannot drop */
static volatile uint64_t sink;
static void compute(int rounds) {
    uint64_t x = sink + 1;
    for (int i = 0; i < rounds; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sink = x;
}

/* compute until this thread has used ``us`` microseconds of CPU */
static void compute_cpu_us(int64_t us) {
    int64_t until = cpu() + us * 1000;
    while (cpu() < until)
        compute(200);
}

/* every thread of the barrier group arrives; returns nonzero when the phase is over (decided by the last) */
static int barrier_wait(struct worker *w) {
    struct mark m = mark(w);
    pthread_mutex_lock(&barrier_lock);
    int generation = barrier_generation;
    if (++barrier_arrived == barrier_threads) {
        barrier_arrived = 0;
        barrier_stop = mono() >= phase_end_ns;
        __atomic_store_n(&barrier_generation, generation + 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&barrier_lock);
        syscall(SYS_futex, &barrier_generation, FUTEX_WAKE_PRIVATE, MAX_THREADS, NULL, NULL, 0);
    } else {
        pthread_mutex_unlock(&barrier_lock);
        while (__atomic_load_n(&barrier_generation, __ATOMIC_SEQ_CST) == generation)
            syscall(SYS_futex, &barrier_generation, FUTEX_WAIT_PRIVATE, generation, NULL, NULL, 0);
    }
    w->futex_ns += blocked_since(w, m);
    return barrier_stop;
}

static void run_barrier(struct worker *w) {
    int64_t work_us = (int64_t)barrier_period_us * (w->index + 1) / barrier_threads;
    do {
        compute_cpu_us(work_us);
        w->ops++;
    } while (!barrier_wait(w));
}

static void evict(int fd, const char *path) {
    if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
        die("posix_fadvise DONTNEED", path);
}

static void run_fault(struct worker *w) {
    int fd = open(fault_file, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        die("open", fault_file);
    long page = sysconf(_SC_PAGESIZE);
    while (mono() < phase_end_ns) {
        unsigned char *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
            die("mmap", fault_file);
        madvise(map, (size_t)st.st_size, MADV_RANDOM);
        struct mark m = mark(w);
        for (off_t at = 0; at < st.st_size && mono() < phase_end_ns; at += page) {
            sink += map[at];
            w->ops++;
        }
        w->fault_ns += blocked_since(w, m);
        munmap(map, (size_t)st.st_size);
        evict(fd, fault_file); /* unmapped first: mapped pages are not evicted */
    }
    close(fd);
}

static void run_pread(struct worker *w) {
    static char buffer[BLOCK];
    int fd = open(pread_file, O_RDONLY);
    if (fd < 0)
        die("open", pread_file);
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    off_t at = 0;
    while (mono() < phase_end_ns) {
        struct mark m = mark(w);
        ssize_t got = pread(fd, buffer, BLOCK, at);
        w->pread_ns += blocked_since(w, m);
        if (got < 0)
            die("pread", pread_file);
        w->ops++;
        at += got;
        if (got < BLOCK) { /* end of file: cold again */
            evict(fd, pread_file);
            at = 0;
        }
    }
    close(fd);
}

static void run_sleep(struct worker *w) {
    struct timespec ms = {sleep_us / 1000000, (long)(sleep_us % 1000000) * 1000L};
    while (mono() < phase_end_ns) {
        struct mark m = mark(w);
        nanosleep(&ms, NULL);
        w->sleep_ns += blocked_since(w, m);
        w->ops++;
    }
}

static void run_busy(struct worker *w) {
    while (mono() < phase_end_ns) {
        compute(2000);
        w->ops++;
    }
}

static void pin(int cpu_index) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_index, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        die("sched_setaffinity", NULL);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    char name[16];
    snprintf(name, sizeof(name), "wl-%.8s%d", ROLE_NAMES[w->role], w->index);
    prctl(PR_SET_NAME, name, 0, 0, 0);
    w->tid = syscall(SYS_gettid);
    w->schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY);
    if (w->role == OVERSUB)
        pin(oversub_cpu);
    pthread_barrier_wait(&start_line);
    w->start_ns = mono();
    int64_t cpu0 = cpu();
    switch (w->role) {
    case BUSY: case OVERSUB: run_busy(w); break;
    case BARRIER: run_barrier(w); break;
    case FAULT: run_fault(w); break;
    case PREAD: run_pread(w); break;
    case SLEEP: run_sleep(w); break;
    }
    w->end_ns = mono();
    w->cpu_ns = cpu() - cpu0;
    struct timespec hold = {hold_ms / 1000, (long)(hold_ms % 1000) * 1000000L};
    nanosleep(&hold, NULL); /* still there for the sampler's read after the phase */
    return NULL;
}

static void add(enum role role, int count) {
    for (int i = 0; i < count; i++) {
        if (n_workers == MAX_THREADS) {
            fprintf(stderr, "workload: more than %d threads\n", MAX_THREADS);
            exit(2);
        }
        workers[n_workers].role = role;
        workers[n_workers++].index = i;
    }
}

static void usage(void) {
    fprintf(stderr, "usage: workload --seconds S [--busy N] [--barrier N:PERIODus] [--fault FILE] [--pread FILE]"
                    " [--sleep N] [--oversubscribed N] [--cpu C] [--hold-ms MS] [--sleep-us US] --out truth.json\n");
    exit(2);
}

static const char *parse_args(int argc, char **argv) {
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val)
            usage();
        i++;
        if (!strcmp(opt, "--seconds")) seconds = atof(val);
        else if (!strcmp(opt, "--busy")) add(BUSY, atoi(val));
        else if (!strcmp(opt, "--barrier")) {
            if (sscanf(val, "%d:%dus", &barrier_threads, &barrier_period_us) < 1 || barrier_threads < 1)
                usage();
            add(BARRIER, barrier_threads);
        } else if (!strcmp(opt, "--fault")) { fault_file = val; add(FAULT, 1); }
        else if (!strcmp(opt, "--pread")) { pread_file = val; add(PREAD, 1); }
        else if (!strcmp(opt, "--sleep")) add(SLEEP, atoi(val));
        else if (!strcmp(opt, "--oversubscribed")) add(OVERSUB, atoi(val));
        else if (!strcmp(opt, "--cpu")) oversub_cpu = atoi(val);
        else if (!strcmp(opt, "--hold-ms")) hold_ms = atoi(val);
        else if (!strcmp(opt, "--sleep-us")) sleep_us = atoi(val);
        else if (!strcmp(opt, "--out")) out = val;
        else usage();
    }
    if (!out || n_workers == 0 || seconds <= 0 || sleep_us < 1)
        usage();
    if (oversub_cpu < 0)
        oversub_cpu = (int)sysconf(_SC_NPROCESSORS_ONLN) - 1;
    return out;
}

static void write_truth(const char *path) {
    FILE *out = fopen(path, "w");
    if (!out)
        die("cannot write", path);
    fprintf(out, "{\"seconds\": %.3f, \"pid\": %ld, \"clock\": \"monotonic\", \"threads\": [", seconds,
            (long)getpid());
    for (int i = 0; i < n_workers; i++) {
        struct worker *w = &workers[i];
        int64_t wall = w->end_ns - w->start_ns;
        int compute_only = w->role == BUSY || w->role == OVERSUB;
        fprintf(out, "%s\n {\"tid\": %ld, \"role\": \"%s\", \"index\": %d, \"start_ns\": %lld, \"end_ns\": %lld, "
                "\"wall_ns\": %lld, \"cpu_ns\": %lld, \"futex_ns\": %lld, \"fault_ns\": %lld, \"pread_ns\": %lld, "
                "\"sleep_ns\": %lld, \"ops\": %lld, \"asleep_ns\": ", i ? "," : "", w->tid, ROLE_NAMES[w->role],
                w->index, (long long)w->start_ns, (long long)w->end_ns, (long long)wall, (long long)w->cpu_ns,
                (long long)w->futex_ns, (long long)w->fault_ns, (long long)w->pread_ns, (long long)w->sleep_ns,
                (long long)w->ops);
        if (w->schedstat_fd >= 0)
            fprintf(out, "%lld, \"runqueue_ns\": ", (long long)w->asleep_ns);
        else
            fprintf(out, "null, \"runqueue_ns\": ");
        if (compute_only)
            fprintf(out, "%lld}", (long long)(wall - w->cpu_ns));
        else
            fprintf(out, "null}");
    }
    fprintf(out, "\n]}\n");
    if (fclose(out) != 0)
        die("cannot write", path);
}

int main(int argc, char **argv) {
    const char *out = parse_args(argc, argv);
    pthread_barrier_init(&start_line, NULL, (unsigned)n_workers + 1);
    for (int i = 0; i < n_workers; i++)
        if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0)
            die("pthread_create", NULL);
    phase_start_ns = mono();
    phase_end_ns = phase_start_ns + (int64_t)(seconds * 1e9);
    pthread_barrier_wait(&start_line);
    for (int i = 0; i < n_workers; i++)
        pthread_join(workers[i].thread, NULL);
    write_truth(out);
    return 0;
}

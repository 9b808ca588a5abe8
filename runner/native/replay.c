/*
 * replay — replay a routing trace's expert reads against a model file (harness runner; docs/methodology.md "Replay").
 *
 *   replay --model FILE --layout LAYOUT --trace TRACE --out OUT.jsonl --strategy S [options]
 *     S: mmap | mmap-willneed | pread | io_uring | direct-cache | prefetch
 *     --threads T (1)  --bs BYTES (65536)  --qd Q (4)  --fadv-random  --cache-bytes N  --predict-p P (1)
 *     (--fadv-random: readahead off, POSIX_FADV_RANDOM on the fd and MADV_RANDOM on the mapping)
 *     --compute none|dot|spin:NS_PER_KIB (dot)  --tokens N  --seed S  --blockstat /sys/block/DEV/stat
 *
 * Layout: "# harness-replay-layout v1 n_layer=L n_expert=E", then "LAYER KIND OFFSET SLICE_BYTES" (KIND up|gate|down;
 * expert e is [OFFSET + e*SLICE_BYTES, +SLICE_BYTES)). Trace: harness/traces/model.py's text format.
 * Per token and layer the chosen experts' up, then gate, then down slices are read with the strategy, and the
 * compute emulation runs over the bytes read. One JSON line per token, then a summary line.
 *
 * The model file is only ever opened O_RDONLY (and mapped PROT_READ): this tool never writes to it.
 * Exit status: 0 ok; 1 an I/O error while replaying; 2 bad input (one line on stderr).
 * C99 + pthreads, Linux/Android.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#if defined(__has_include)
#if __has_include(<linux/io_uring.h>)
#include <linux/io_uring.h>
#endif
#endif
/* IORING_OP_READ came with 5.6 headers, IORING_FEAT_FAST_POLL (a macro, unlike the opcodes) with 5.7: older
 * headers (an old NDK) build everything but io_uring, which then exits 2 saying so */
#if defined(IORING_FEAT_FAST_POLL) && defined(__NR_io_uring_setup)
#define HAVE_URING 1
#else
#define HAVE_URING 0
#endif

#define DIRECT_ALIGN 4096u
#define KINDS 3

enum strategy { S_MMAP, S_WILLNEED, S_PREAD, S_URING, S_DIRECT, S_PREFETCH };
enum compute { C_NONE, C_DOT, C_SPIN };
static const char *STRATEGIES[] = {"mmap", "mmap-willneed", "pread", "io_uring", "direct-cache", "prefetch"};
static const char *KIND_NAMES[KINDS] = {"up", "gate", "down"};

struct opts {
    const char *model, *layout, *trace, *out, *blockstat, *compute_arg;
    int strategy, threads, qd, fadv_random, compute;
    uint64_t bs, cache_bytes, seed;
    long tokens;
    double predict_p, spin_ns_per_kib;
};

struct range { uint64_t off, len; };
/* one unit of work for the block workers: read [off, off+len) of fd into dst (a worker's buffer when NULL);
 * fd < 0: nothing to read, only the compute over dst (a direct-cache hit) */
struct block { uint64_t off, len; unsigned char *dst; int fd; uint64_t skip, clen; }; /* compute: [skip, +clen) */

static struct opts O;
static int n_layer, n_expert, n_used;
static long n_tokens;
static uint64_t *lay_off, *lay_slice; /* [layer * KINDS + kind] */
static int32_t *trace_ids;            /* [(token * n_layer + layer) * n_used + rank] */
static const unsigned char *map;
static uint64_t file_size;
static long page_size;

static void die2(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die1(const char *what, int err) __attribute__((noreturn));

static void die2(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("replay: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void die1(const char *what, int err)
{
    fprintf(stderr, "replay: %s: %s\n", what, strerror(err));
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *xalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p)
        die1("calloc", ENOMEM);
    return p;
}

static unsigned char *aligned_alloc_or_die(size_t n)
{
    void *p = NULL;
    int rc = posix_memalign(&p, DIRECT_ALIGN, n ? n : DIRECT_ALIGN);
    if (rc)
        die1("posix_memalign", rc);
    return p;
}

/* ---------- input ---------- */

static uint64_t parse_u64(const char *s, const char *what)
{
    char *end;
    unsigned long long v;
    errno = 0;
    if (!s || !*s || *s == '-')
        die2("%s: expected a non-negative integer, got '%s'", what, s ? s : "");
    v = strtoull(s, &end, 10);
    if (errno || *end)
        die2("%s: expected a non-negative integer, got '%s'", what, s);
    return (uint64_t)v;
}

static int header_field(const char *line, const char *key, const char *where)
{
    char pat[32];
    const char *p;
    long v = 0;
    snprintf(pat, sizeof pat, " %s=", key);
    p = strstr(line, pat);
    if (!p || (v = strtol(p + strlen(pat), NULL, 10)) <= 0)
        die2("%s:1: header field %s is missing or not a positive integer", where, key);
    return (int)v;
}

static FILE *open_input(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die2("%s: cannot open (%s)", path, strerror(errno));
    return f;
}

static void read_layout(void)
{
    FILE *f = open_input(O.layout);
    char *line = NULL;
    size_t cap = 0;
    long number = 1;
    int layer, kind, i;
    unsigned long long off, slice;
    char kname[16];
    if (getline(&line, &cap, f) < 0 || strncmp(line, "# harness-replay-layout v1", 26))
        die2("%s:1: not a replay layout (expected '# harness-replay-layout v1 ...')", O.layout);
    n_layer = header_field(line, "n_layer", O.layout);
    n_expert = header_field(line, "n_expert", O.layout);
    lay_off = xalloc(sizeof(uint64_t) * (size_t)n_layer * KINDS);
    lay_slice = xalloc(sizeof(uint64_t) * (size_t)n_layer * KINDS);
    while (getline(&line, &cap, f) >= 0) {
        number++;
        if (line[0] == '#' || line[strspn(line, " \t\r\n")] == '\0')
            continue;
        if (sscanf(line, "%d %15s %llu %llu", &layer, kname, &off, &slice) != 4 || layer < 0 || layer >= n_layer)
            die2("%s:%ld: expected 'LAYER KIND OFFSET SLICE_BYTES' with LAYER in 0..%d", O.layout, number,
                 n_layer - 1);
        for (kind = 0; kind < KINDS && strcmp(kname, KIND_NAMES[kind]); kind++)
            ;
        if (kind == KINDS)
            die2("%s:%ld: unknown kind '%s' (up, gate or down)", O.layout, number, kname);
        if (slice == 0 || off + slice * (uint64_t)n_expert > file_size)
            die2("%s:%ld: layer %d %s: [%llu, +%d x %llu) is past the end of %s (%" PRIu64 " bytes)", O.layout,
                 number, layer, kname, off, n_expert, slice, O.model, file_size);
        lay_off[layer * KINDS + kind] = off;
        lay_slice[layer * KINDS + kind] = slice;
    }
    for (i = 0; i < n_layer * KINDS; i++)
        if (!lay_slice[i])
            die2("%s: layer %d has no %s line", O.layout, i / KINDS, KIND_NAMES[i % KINDS]);
    free(line);
    fclose(f);
}

static void trace_line(const char *line, long number, long row, long *cap)
{
    char *end;
    const char *p = line;
    long token = strtol(p, &end, 10), layer, e;
    int k;
    if (end == p || (layer = strtol(p = end, &end, 10), end == p))
        die2("%s:%ld: expected integers (token layer experts...)", O.trace, number);
    if (token != row / n_layer || layer != row % n_layer)
        die2("%s:%ld: expected token %ld layer %ld, got %ld %ld", O.trace, number, row / n_layer, row % n_layer,
             token, layer);
    if ((row + 1) * n_used > *cap) {
        *cap = (*cap ? *cap * 2 : 4096) + n_used;
        trace_ids = realloc(trace_ids, sizeof(int32_t) * (size_t)*cap);
        if (!trace_ids)
            die1("realloc", ENOMEM);
    }
    for (k = 0; k < n_used; k++) {
        e = strtol(p = end, &end, 10);
        if (end == p)
            die2("%s:%ld: expected %d experts", O.trace, number, n_used);
        if (e < 0 || e >= n_expert)
            die2("%s:%ld: expert %ld is not in 0..%d (n_expert=%d)", O.trace, number, e, n_expert - 1, n_expert);
        trace_ids[row * n_used + k] = (int32_t)e;
    }
    if (end[strspn(end, " \t\r\n")] != '\0')
        die2("%s:%ld: more than %d experts", O.trace, number, n_used);
}

static void read_trace(void)
{
    FILE *f = open_input(O.trace);
    char *line = NULL;
    size_t cap = 0;
    long number = 1, rows = 0, ids_cap = 0;
    if (getline(&line, &cap, f) < 0 || strncmp(line, "# harness-trace v1", 18))
        die2("%s:1: not a harness trace (expected '# harness-trace v1 ...')", O.trace);
    if (header_field(line, "n_layer", O.trace) != n_layer || header_field(line, "n_expert", O.trace) != n_expert)
        die2("%s:1: the trace has n_layer=%d n_expert=%d, the layout n_layer=%d n_expert=%d", O.trace,
             header_field(line, "n_layer", O.trace), header_field(line, "n_expert", O.trace), n_layer, n_expert);
    n_used = header_field(line, "n_used", O.trace);
    if (n_used > n_expert)
        die2("%s:1: n_used=%d is more than n_expert=%d", O.trace, n_used, n_expert);
    while (getline(&line, &cap, f) >= 0) {
        number++;
        if (line[0] == '#' || line[strspn(line, " \t\r\n")] == '\0')
            continue;
        trace_line(line, number, rows++, &ids_cap);
    }
    if (!rows || rows % n_layer)
        die2("%s: the trace ends inside a token (%ld lines for %d layers)", O.trace, rows, n_layer);
    n_tokens = rows / n_layer;
    if (O.tokens > 0 && O.tokens < n_tokens)
        n_tokens = O.tokens;
    free(line);
    fclose(f);
}

static int parse_compute(const char *s)
{
    char *end;
    if (!strcmp(s, "none"))
        return C_NONE;
    if (!strcmp(s, "dot"))
        return C_DOT;
    if (!strncmp(s, "spin:", 5)) {
        O.spin_ns_per_kib = strtod(s + 5, &end);
        if (end != s + 5 && !*end && O.spin_ns_per_kib >= 0)
            return C_SPIN;
    }
    die2("--compute: expected none, dot or spin:NS_PER_KIB, got '%s'", s);
    return C_NONE;
}

static void parse_args(int argc, char **argv)
{
    int i, s;
    const char *strategy = NULL;
    O.threads = 1, O.bs = 65536, O.qd = 4, O.predict_p = 1.0, O.compute = C_DOT, O.compute_arg = "dot";
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--fadv-random")) {
            O.fadv_random = 1;
            continue;
        }
        if (!v)
            die2("%s: missing value (or unknown option)", a);
        i++;
        if (!strcmp(a, "--model")) O.model = v;
        else if (!strcmp(a, "--layout")) O.layout = v;
        else if (!strcmp(a, "--trace")) O.trace = v;
        else if (!strcmp(a, "--out")) O.out = v;
        else if (!strcmp(a, "--blockstat")) O.blockstat = v;
        else if (!strcmp(a, "--strategy")) strategy = v;
        else if (!strcmp(a, "--threads")) O.threads = (int)parse_u64(v, a);
        else if (!strcmp(a, "--bs")) O.bs = parse_u64(v, a);
        else if (!strcmp(a, "--qd")) O.qd = (int)parse_u64(v, a);
        else if (!strcmp(a, "--cache-bytes")) O.cache_bytes = parse_u64(v, a);
        else if (!strcmp(a, "--tokens")) O.tokens = (long)parse_u64(v, a);
        else if (!strcmp(a, "--seed")) O.seed = parse_u64(v, a);
        else if (!strcmp(a, "--compute")) O.compute = parse_compute(O.compute_arg = v);
        else if (!strcmp(a, "--predict-p")) {
            char *end;
            O.predict_p = strtod(v, &end);
            if (end == v || *end || O.predict_p < 0 || O.predict_p > 1)
                die2("--predict-p: expected a probability in 0..1, got '%s'", v);
        } else
            die2("unknown option %s", a);
    }
    if (!O.model || !O.layout || !O.trace || !O.out || !strategy)
        die2("usage: replay --model FILE --layout LAYOUT --trace TRACE --out OUT.jsonl --strategy S [options]");
    for (s = 0; s < 6 && strcmp(strategy, STRATEGIES[s]); s++)
        ;
    if (s == 6)
        die2("--strategy: unknown strategy '%s' (mmap, mmap-willneed, pread, io_uring, direct-cache, prefetch)",
             strategy);
    O.strategy = s;
    if (O.threads < 1 || O.threads > 256 || O.qd < 1 || O.qd > 4096 || O.bs < 512 || O.bs > ((uint64_t)1 << 30))
        die2("--threads 1..256, --qd 1..4096 and --bs 512..1 GiB");
    if (O.strategy == S_DIRECT)
        O.bs = (O.bs + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
}

/* ---------- compute emulation ---------- */

/* the sum of the bytes: a real pass over memory, and a checksum that does not depend on how reads were split */
static uint64_t sum_bytes(const unsigned char *p, uint64_t n)
{
    uint64_t s = 0, i;
    for (i = 0; i < n; i++)
        s += p[i];
    return s;
}

static void spin_for(uint64_t bytes)
{
    uint64_t until = now_ns() + (uint64_t)(O.spin_ns_per_kib * (double)bytes / 1024.0);
    while (now_ns() < until)
        ;
}

/* The compute over bytes already in memory (pread, io_uring, direct-cache buffers). */
static uint64_t compute_over(const unsigned char *p, uint64_t n)
{
    if (O.compute == C_DOT)
        return sum_bytes(p, n);
    if (O.compute == C_SPIN)
        spin_for(n);
    return 0;
}

/* mmap: the touch is the read. dot sums every byte; none and spin touch one byte per page (spin then spins). */
static uint64_t touch(const unsigned char *p, uint64_t n)
{
    uint64_t s = 0, i;
    if (O.compute == C_DOT)
        return sum_bytes(p, n);
    if (n) {
        s += p[0];
        for (i = (uint64_t)page_size - ((uintptr_t)p & (uintptr_t)(page_size - 1)); i < n; i += (uint64_t)page_size)
            s += p[i];
    }
    if (O.compute == C_SPIN)
        spin_for(n);
    return s;
}

/* ---------- the worker pool ---------- */

enum mode { M_TOUCH, M_BLOCKS, M_QUIT };

struct worker {
    int id;
    pthread_t tid;
    unsigned char *buf;
    uint64_t sum, io_ns;
};

static struct {
    pthread_barrier_t start, kinds, end;
    enum mode mode;
    struct range *kind_ranges[KINDS]; /* touch: per kind, the layer's n_used slices */
    struct block *blocks;
    size_t nblocks, next;
    struct worker *w;
} P;

static void read_full(int fd, unsigned char *dst, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, dst + done, (size_t)(len - done), (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die1(O.model, errno);
        if (n == 0)
            break; /* O_DIRECT's aligned tail past EOF */
        done += (uint64_t)n;
    }
}

static void work_touch(struct worker *w)
{
    int k, r;
    uint64_t T = (uint64_t)O.threads, id = (uint64_t)w->id;
    for (k = 0; k < KINDS; k++) {
        for (r = 0; r < n_used; r++) {
            const struct range *g = &P.kind_ranges[k][r];
            uint64_t lo = g->len * id / T, hi = g->len * (id + 1) / T;
            w->sum += touch(map + g->off + lo, hi - lo);
        }
        pthread_barrier_wait(&P.kinds);
    }
}

static void work_blocks(struct worker *w)
{
    for (;;) {
        size_t i = __atomic_fetch_add(&P.next, 1, __ATOMIC_RELAXED);
        struct block *b;
        unsigned char *dst;
        if (i >= P.nblocks)
            return;
        b = &P.blocks[i];
        dst = b->dst ? b->dst : w->buf;
        if (b->fd >= 0) {
            uint64_t t0 = now_ns();
            read_full(b->fd, dst, b->len, b->off);
            w->io_ns += now_ns() - t0;
        }
        w->sum += compute_over(dst + b->skip, b->clen);
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (;;) {
        pthread_barrier_wait(&P.start);
        if (P.mode == M_QUIT)
            return NULL;
        if (P.mode == M_TOUCH)
            work_touch(w);
        else
            work_blocks(w);
        pthread_barrier_wait(&P.end);
    }
}

static void pool_start(void)
{
    int i, rc;
    P.w = xalloc(sizeof(struct worker) * (size_t)O.threads);
    pthread_barrier_init(&P.start, NULL, (unsigned)O.threads + 1);
    pthread_barrier_init(&P.end, NULL, (unsigned)O.threads + 1);
    pthread_barrier_init(&P.kinds, NULL, (unsigned)O.threads);
    for (i = 0; i < KINDS; i++)
        P.kind_ranges[i] = xalloc(sizeof(struct range) * (size_t)n_used);
    for (i = 0; i < O.threads; i++) {
        P.w[i].id = i;
        P.w[i].buf = aligned_alloc_or_die((size_t)O.bs);
        if ((rc = pthread_create(&P.w[i].tid, NULL, worker_main, &P.w[i])))
            die1("pthread_create", rc);
    }
}

static void pool_run(enum mode mode)
{
    P.mode = mode;
    P.next = 0;
    pthread_barrier_wait(&P.start);
    if (mode != M_QUIT)
        pthread_barrier_wait(&P.end);
}

static void pool_stop(void)
{
    int i;
    pool_run(M_QUIT);
    for (i = 0; i < O.threads; i++)
        pthread_join(P.w[i].tid, NULL);
}

/* ---------- blocks and ranges ---------- */

static size_t blocks_cap;

static void add_block(uint64_t off, uint64_t len, unsigned char *dst, int fd)
{
    if (P.nblocks == blocks_cap) {
        blocks_cap = blocks_cap ? blocks_cap * 2 : 1024;
        P.blocks = realloc(P.blocks, sizeof(struct block) * blocks_cap);
        if (!P.blocks)
            die1("realloc", ENOMEM);
    }
    P.blocks[P.nblocks].off = off, P.blocks[P.nblocks].len = len;
    P.blocks[P.nblocks].dst = dst, P.blocks[P.nblocks].fd = fd;
    P.blocks[P.nblocks].skip = 0, P.blocks[P.nblocks].clen = len;
    P.nblocks++;
}

/* [off, off+len) as bs-byte blocks (dst advancing with them when given) */
static void add_split(uint64_t off, uint64_t len, unsigned char *dst, int fd)
{
    uint64_t pos;
    for (pos = 0; pos < len; pos += O.bs)
        add_block(off + pos, len - pos < O.bs ? len - pos : O.bs, dst ? dst + pos : NULL, fd);
}

static const int32_t *chosen(long token, int layer)
{
    return trace_ids + ((size_t)token * (size_t)n_layer + (size_t)layer) * (size_t)n_used;
}

static struct range slice_of(int layer, int kind, int expert)
{
    struct range r;
    r.len = lay_slice[layer * KINDS + kind];
    r.off = lay_off[layer * KINDS + kind] + (uint64_t)expert * r.len;
    return r;
}

static uint64_t expert_bytes(int layer)
{
    return lay_slice[layer * KINDS] + lay_slice[layer * KINDS + 1] + lay_slice[layer * KINDS + 2];
}

static unsigned char *mincore_vec;
static size_t mincore_cap;

/* page-cache-resident bytes of [off, off+len), from mincore (which faults nothing in) */
static uint64_t resident_bytes(uint64_t off, uint64_t len)
{
    uint64_t ps = (uint64_t)page_size, a0 = off / ps * ps, a1 = (off + len + ps - 1) / ps * ps, i, hit = 0;
    size_t pages = (size_t)((a1 - a0) / ps);
    if (pages > mincore_cap) {
        mincore_cap = pages;
        free(mincore_vec);
        mincore_vec = xalloc(pages);
    }
    if (mincore((void *)(map + a0), (size_t)(a1 - a0), (void *)mincore_vec))
        die1("mincore", errno);
    for (i = 0; i < pages; i++) {
        uint64_t p0 = a0 + i * ps, p1 = p0 + ps;
        if (mincore_vec[i] & 1)
            hit += (p1 < off + len ? p1 : off + len) - (p0 > off ? p0 : off);
    }
    return hit;
}

static uint64_t layer_resident(long token, int layer)
{
    const int32_t *ids = chosen(token, layer);
    uint64_t hit = 0;
    int k, r;
    for (k = 0; k < KINDS; k++)
        for (r = 0; r < n_used; r++) {
            struct range g = slice_of(layer, k, ids[r]);
            hit += resident_bytes(g.off, g.len);
        }
    return hit;
}

/* ---------- strategies: one layer of one token each ---------- */

static int fd_read = -1, fd_direct = -1;

static void layer_touch(long token, int layer)
{
    const int32_t *ids = chosen(token, layer);
    int k, r;
    for (k = 0; k < KINDS; k++)
        for (r = 0; r < n_used; r++)
            P.kind_ranges[k][r] = slice_of(layer, k, ids[r]);
    if (O.strategy == S_WILLNEED)
        for (k = 0; k < KINDS; k++)
            for (r = 0; r < n_used; r++) {
                uint64_t ps = (uint64_t)page_size, off = P.kind_ranges[k][r].off, end = off + P.kind_ranges[k][r].len;
                uint64_t a0 = off / ps * ps, a1 = (end + ps - 1) / ps * ps;
                (void)madvise((void *)(map + a0), (size_t)(a1 - a0), MADV_WILLNEED); /* advisory */
            }
    pool_run(M_TOUCH);
}

/* the layer's chosen slices (up, gate, down) as bs-byte blocks read from fd_read: what pread and io_uring issue */
static void split_layer(long token, int layer)
{
    const int32_t *ids = chosen(token, layer);
    int k, r;
    P.nblocks = 0;
    for (k = 0; k < KINDS; k++)
        for (r = 0; r < n_used; r++) {
            struct range g = slice_of(layer, k, ids[r]);
            add_split(g.off, g.len, NULL, fd_read);
        }
}

static void layer_pread(long token, int layer)
{
    split_layer(token, layer);
    pool_run(M_BLOCKS);
}

#if HAVE_URING
/* io_uring through the raw syscalls: one ring, up to qd reads of bs bytes in flight, reaped in the main thread */
static struct {
    int fd;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    unsigned char **bufs;
    uint64_t *submit_ns, *lens;
    int *free_slots, nfree;
    uint64_t io_ns, sum;
} U;

static void uring_setup(void)
{
    struct io_uring_params p;
    unsigned char *sq, *cq;
    size_t sq_len, cq_len;
    int i;
    memset(&p, 0, sizeof p);
    U.fd = (int)syscall(__NR_io_uring_setup, (unsigned)O.qd, &p);
    if (U.fd < 0 && (errno == ENOSYS || errno == EPERM || errno == EACCES))
        die2("io_uring: the kernel refuses io_uring_setup (%s)", strerror(errno));
    if (U.fd < 0)
        die1("io_uring_setup", errno);
    sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP)
        sq_len = cq_len = sq_len > cq_len ? sq_len : cq_len;
    sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, U.fd, IORING_OFF_SQ_RING);
    cq = (p.features & IORING_FEAT_SINGLE_MMAP) ? sq
         : mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, U.fd, IORING_OFF_CQ_RING);
    U.sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_POPULATE, U.fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || U.sqes == MAP_FAILED)
        die1("io_uring mmap", errno);
    U.sq_head = (unsigned *)(sq + p.sq_off.head), U.sq_tail = (unsigned *)(sq + p.sq_off.tail);
    U.sq_mask = (unsigned *)(sq + p.sq_off.ring_mask), U.sq_array = (unsigned *)(sq + p.sq_off.array);
    U.cq_head = (unsigned *)(cq + p.cq_off.head), U.cq_tail = (unsigned *)(cq + p.cq_off.tail);
    U.cq_mask = (unsigned *)(cq + p.cq_off.ring_mask), U.cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    U.bufs = xalloc(sizeof(unsigned char *) * (size_t)O.qd);
    U.submit_ns = xalloc(sizeof(uint64_t) * (size_t)O.qd);
    U.lens = xalloc(sizeof(uint64_t) * (size_t)O.qd);
    U.free_slots = xalloc(sizeof(int) * (size_t)O.qd);
    for (i = 0; i < O.qd; i++) {
        U.bufs[i] = aligned_alloc_or_die((size_t)O.bs);
        U.free_slots[U.nfree++] = i;
    }
}

static void uring_push(const struct block *b)
{
    unsigned tail = *U.sq_tail, idx = tail & *U.sq_mask;
    int slot = U.free_slots[--U.nfree];
    struct io_uring_sqe *sqe = &U.sqes[idx];
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_READ;
    sqe->fd = fd_read;
    sqe->addr = (uint64_t)(uintptr_t)U.bufs[slot];
    sqe->len = (unsigned)b->len;
    sqe->off = b->off;
    sqe->user_data = (uint64_t)slot;
    U.sq_array[idx] = idx;
    U.lens[slot] = b->len;
    U.submit_ns[slot] = now_ns();
    __atomic_store_n(U.sq_tail, tail + 1, __ATOMIC_RELEASE);
}

static int uring_reap(void)
{
    unsigned head = *U.cq_head, tail = __atomic_load_n(U.cq_tail, __ATOMIC_ACQUIRE);
    int reaped = 0;
    for (; head != tail; head++, reaped++) {
        struct io_uring_cqe *cqe = &U.cqes[head & *U.cq_mask];
        int slot = (int)cqe->user_data;
        if (cqe->res < 0)
            die1(O.model, -cqe->res);
        U.io_ns += now_ns() - U.submit_ns[slot];
        U.sum += compute_over(U.bufs[slot], (uint64_t)cqe->res < U.lens[slot] ? (uint64_t)cqe->res : U.lens[slot]);
        U.free_slots[U.nfree++] = slot;
    }
    __atomic_store_n(U.cq_head, head, __ATOMIC_RELEASE);
    return reaped;
}

static void layer_uring(long token, int layer)
{
    size_t next = 0, done = 0;
    split_layer(token, layer);
    while (done < P.nblocks) {
        unsigned submit = 0;
        while (U.nfree > 0 && next < P.nblocks)
            uring_push(&P.blocks[next++]), submit++;
        if (syscall(__NR_io_uring_enter, U.fd, submit, 1u, IORING_ENTER_GETEVENTS, NULL, 0) < 0 && errno != EINTR)
            die1("io_uring_enter", errno);
        done += (size_t)uring_reap();
    }
}

#else
static struct { uint64_t io_ns, sum; } U;

static void uring_setup(void)
{
    die2("io_uring: this replay was built without <linux/io_uring.h> (5.7+ kernel headers)");
}

static void layer_uring(long token, int layer)
{
    (void)token, (void)layer;
}
#endif

/* direct-cache: an LRU of whole experts (up+gate+down, O_DIRECT-read 4 KiB-aligned copies); budget in slice bytes,
 * as harness/traces/lru.py counts it */
struct centry { unsigned char *buf; uint64_t slot_off[KINDS]; int prev, next; long pinned; };
static struct centry *cache;
static int lru_head = -1, lru_tail = -1;
static uint64_t cache_used;
static long layer_serial;

static void lru_unlink(int i)
{
    if (cache[i].prev >= 0) cache[cache[i].prev].next = cache[i].next; else lru_head = cache[i].next;
    if (cache[i].next >= 0) cache[cache[i].next].prev = cache[i].prev; else lru_tail = cache[i].prev;
}

static void lru_front(int i)
{
    cache[i].prev = -1, cache[i].next = lru_head;
    if (lru_head >= 0) cache[lru_head].prev = i;
    lru_head = i;
    if (lru_tail < 0) lru_tail = i;
}

static struct range aligned_slice(int layer, int kind, int expert)
{
    struct range g = slice_of(layer, kind, expert), a;
    a.off = g.off / DIRECT_ALIGN * DIRECT_ALIGN;
    a.len = (g.off + g.len + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN - a.off;
    return a;
}

/* room for an expert of `need` bytes, evicting least recently used experts not used by this layer; 0 if none */
static int lru_make_room(uint64_t need)
{
    if (need > O.cache_bytes)
        return 0;
    while (cache_used + need > O.cache_bytes && lru_tail >= 0 && cache[lru_tail].pinned != layer_serial) {
        int v = lru_tail;
        lru_unlink(v);
        free(cache[v].buf);
        cache[v].buf = NULL;
        cache_used -= expert_bytes(v / n_expert);
    }
    return cache_used + need <= O.cache_bytes;
}

static unsigned char **scratch;
static int nscratch;

static uint64_t expert_direct(int layer, int e)
{
    int id = layer * n_expert + e, k, keep;
    uint64_t total = 0, need = expert_bytes(layer);
    struct centry *c = &cache[id];
    struct range a[KINDS];
    c->pinned = layer_serial;
    if (c->buf) {
        lru_unlink(id), lru_front(id);
        for (k = 0; k < KINDS; k++) {
            struct range g = slice_of(layer, k, e);
            add_block(0, g.len, c->buf + c->slot_off[k] + (g.off % DIRECT_ALIGN), -1);
        }
        return need;
    }
    for (k = 0; k < KINDS; k++)
        a[k] = aligned_slice(layer, k, e), c->slot_off[k] = total, total += a[k].len;
    keep = lru_make_room(need);
    c->buf = aligned_alloc_or_die((size_t)total);
    for (k = 0; k < KINDS; k++) {
        struct range g = slice_of(layer, k, e);
        size_t first = P.nblocks, i;
        add_split(a[k].off, a[k].len, c->buf + c->slot_off[k], fd_direct);
        for (i = first; i < P.nblocks; i++) { /* the compute sees the slice's bytes only, not the alignment's */
            struct block *b = &P.blocks[i];
            uint64_t lo = b->off > g.off ? b->off : g.off, hi = b->off + b->len < g.off + g.len ? b->off + b->len
                                                                                              : g.off + g.len;
            b->skip = hi > lo ? lo - b->off : 0, b->clen = hi > lo ? hi - lo : 0;
        }
    }
    if (keep)
        lru_front(id), cache_used += need;
    else { /* larger than what the budget can free: read it, keep nothing (freed after the layer) */
        scratch[nscratch++] = c->buf;
        c->buf = NULL;
    }
    return 0;
}

static uint64_t layer_direct(long token, int layer)
{
    const int32_t *ids = chosen(token, layer);
    uint64_t hit = 0;
    int r;
    P.nblocks = 0, nscratch = 0, layer_serial++;
    for (r = 0; r < n_used; r++)
        hit += expert_direct(layer, ids[r]);
    pool_run(M_BLOCKS);
    for (r = 0; r < nscratch; r++)
        free(scratch[r]);
    return hit;
}

/* prefetch: an I/O thread preads the next layer's predicted experts (filling the page cache) while this one runs */
static struct {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, quit;
    struct range *ranges;
    int nranges;
    unsigned char *buf;
    uint64_t rng, sum;
} F;

static uint64_t rng_next(void)
{
    F.rng ^= F.rng << 13, F.rng ^= F.rng >> 7, F.rng ^= F.rng << 17;
    return F.rng;
}

static void *prefetch_main(void *arg)
{
    int i;
    uint64_t pos;
    (void)arg;
    pthread_mutex_lock(&F.mu);
    for (;;) {
        while (!F.pending && !F.quit)
            pthread_cond_wait(&F.cv, &F.mu);
        if (F.quit)
            break;
        pthread_mutex_unlock(&F.mu);
        for (i = 0; i < F.nranges; i++)
            for (pos = 0; pos < F.ranges[i].len; pos += O.bs) {
                uint64_t n = F.ranges[i].len - pos < O.bs ? F.ranges[i].len - pos : O.bs;
                read_full(fd_read, F.buf, n, F.ranges[i].off + pos);
                F.sum += F.buf[0];
            }
        pthread_mutex_lock(&F.mu);
        F.pending = 0;
        pthread_cond_broadcast(&F.cv);
    }
    pthread_mutex_unlock(&F.mu);
    return NULL;
}

static void prefetch_wait(void)
{
    pthread_mutex_lock(&F.mu);
    while (F.pending)
        pthread_cond_wait(&F.cv, &F.mu);
    pthread_mutex_unlock(&F.mu);
}

static int in_set(const int32_t *set, int n, int e)
{
    int i;
    for (i = 0; i < n; i++)
        if (set[i] == e)
            return 1;
    return 0;
}

/* the prediction: each true expert with probability p, else a random expert outside the true set */
static void prefetch_post(long token, int layer)
{
    const int32_t *ids = chosen(token, layer);
    int32_t pred[4096];
    int r, k, n = 0, wrong = 0;
    for (r = 0; r < n_used && r < 4096; r++) {
        int e = ids[r];
        /* a wrong guess needs an expert outside the true set not guessed yet; none left: the true one */
        if ((double)(rng_next() >> 11) / 9007199254740992.0 >= O.predict_p && n_expert - n_used > wrong) {
            do
                e = (int)(rng_next() % (uint64_t)n_expert);
            while (in_set(ids, n_used, e) || in_set(pred, n, e));
            wrong++;
        }
        pred[n++] = e;
    }
    for (k = 0, F.nranges = 0; k < KINDS; k++)
        for (r = 0; r < n; r++)
            F.ranges[F.nranges++] = slice_of(layer, k, pred[r]);
    pthread_mutex_lock(&F.mu);
    F.pending = 1;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
}

static void prefetch_start(void)
{
    int rc;
    pthread_mutex_init(&F.mu, NULL);
    pthread_cond_init(&F.cv, NULL);
    F.ranges = xalloc(sizeof(struct range) * (size_t)n_used * KINDS);
    F.buf = aligned_alloc_or_die((size_t)O.bs);
    F.rng = O.seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if ((rc = pthread_create(&F.tid, NULL, prefetch_main, NULL)))
        die1("pthread_create", rc);
}

static void prefetch_stop(void)
{
    prefetch_wait();
    pthread_mutex_lock(&F.mu);
    F.quit = 1;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
    pthread_join(F.tid, NULL);
}

/* ---------- per-token accounting ---------- */

struct bstat { unsigned long long rd_ios, rd_sectors, queue_ms; int ok; };

static struct bstat read_blockstat(void)
{
    struct bstat b;
    unsigned long long f[11];
    FILE *fp;
    memset(&b, 0, sizeof b);
    if (!O.blockstat || !(fp = fopen(O.blockstat, "r")))
        return b;
    if (fscanf(fp, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3], &f[4],
               &f[5], &f[6], &f[7], &f[8], &f[9], &f[10]) == 11)
        b.rd_ios = f[0], b.rd_sectors = f[2], b.queue_ms = f[10], b.ok = 1;
    fclose(fp);
    return b;
}

static long majflt_now(long *inblock)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *inblock = ru.ru_inblock; /* 512-byte blocks this process had read from storage: no other reader counts */
    return ru.ru_majflt;
}

static uint64_t io_ns_now(void)
{
    uint64_t t = U.io_ns;
    int i;
    for (i = 0; i < O.threads; i++)
        t += P.w[i].io_ns;
    return t;
}

struct totals {
    uint64_t bytes, hit, dev_bytes, dev_ios, queue_ms, io_ns, wall_ns, self_bytes;
    long majflt;
    int dev_ok;
};

/* one token: every layer's reads and compute; adds its requested and cache-hit bytes */
static void run_token(long t, uint64_t *bytes, uint64_t *hit)
{
    int l;
    for (l = 0; l < n_layer; l++) {
        *bytes += expert_bytes(l) * (uint64_t)n_used;
        if (O.strategy == S_DIRECT) {
            *hit += layer_direct(t, l);
            continue;
        }
        if (O.strategy == S_PREFETCH) {
            prefetch_wait(); /* this layer's prediction is in (or failed to be) before its own reads */
            *hit += layer_resident(t, l);
            if (l + 1 < n_layer || t + 1 < n_tokens)
                prefetch_post(l + 1 < n_layer ? t : t + 1, (l + 1) % n_layer);
        } else
            *hit += layer_resident(t, l);
        if (O.strategy == S_PREAD)
            layer_pread(t, l);
        else if (O.strategy == S_URING)
            layer_uring(t, l);
        else
            layer_touch(t, l);
    }
}

static void put_u64_or_null(FILE *out, const char *key, int ok, uint64_t v)
{
    if (ok)
        fprintf(out, ",\"%s\":%" PRIu64, key, v);
    else
        fprintf(out, ",\"%s\":null", key);
}

static void put_ratio_or_null(FILE *out, const char *key, int ok, double v)
{
    if (ok)
        fprintf(out, ",\"%s\":%.4f", key, v);
    else
        fprintf(out, ",\"%s\":null", key);
}

static int qd_known(void) { return O.strategy == S_PREAD || O.strategy == S_URING || O.strategy == S_DIRECT; }

static void one_token(FILE *out, long t, struct totals *tot)
{
    struct bstat b0 = read_blockstat(), b1;
    long in0, in1, f0 = majflt_now(&in0), f1;
    uint64_t io0 = io_ns_now(), bytes = 0, hit = 0, t0 = now_ns(), t1, wall;
    int dev;
    run_token(t, &bytes, &hit);
    t1 = now_ns();
    b1 = read_blockstat();
    f1 = majflt_now(&in1);
    wall = t1 - t0 ? t1 - t0 : 1;
    dev = b0.ok && b1.ok;
    fprintf(out, "{\"token\":%ld,\"t_start_ns\":%" PRIu64 ",\"t_end_ns\":%" PRIu64 ",\"latency_ns\":%" PRIu64
            ",\"bytes\":%" PRIu64, t, t0, t1, t1 - t0, bytes);
    put_u64_or_null(out, "dev_read_bytes", dev, (b1.rd_sectors - b0.rd_sectors) * 512u);
    put_u64_or_null(out, "dev_read_ios", dev, b1.rd_ios - b0.rd_ios);
    fprintf(out, ",\"cache_hit_bytes\":%" PRIu64 ",\"majflt\":%ld,\"self_read_bytes\":%" PRIu64, hit, f1 - f0,
            (uint64_t)(in1 - in0) * 512u);
    put_ratio_or_null(out, "inflight_avg", dev, (double)(b1.queue_ms - b0.queue_ms) * 1e6 / (double)wall);
    put_ratio_or_null(out, "qd_avg", qd_known(), (double)(io_ns_now() - io0) / (double)wall);
    fputs("}\n", out);
    fflush(out); /* the runner marks the first token when its line appears */
    tot->bytes += bytes, tot->hit += hit, tot->majflt += f1 - f0, tot->io_ns += io_ns_now() - io0;
    tot->self_bytes += (uint64_t)(in1 - in0) * 512u;
    tot->dev_ok = dev && (t == 0 || tot->dev_ok);
    tot->dev_bytes += (b1.rd_sectors - b0.rd_sectors) * 512u, tot->dev_ios += b1.rd_ios - b0.rd_ios;
    tot->queue_ms += b1.queue_ms - b0.queue_ms;
}

static void summary(FILE *out, const struct totals *tot, uint64_t checksum)
{
    double wall_s = (double)(tot->wall_ns ? tot->wall_ns : 1) / 1e9, n = (double)n_tokens;
    fprintf(out, "{\"summary\":{\"tokens\":%ld,\"wall_ns\":%" PRIu64 ",\"tok_s\":%.4f", n_tokens, tot->wall_ns,
            n / wall_s);
    put_ratio_or_null(out, "dev_mb_s", tot->dev_ok, (double)tot->dev_bytes / wall_s / 1e6);
    fprintf(out, ",\"cache_hit_pct\":%.4f,\"bytes_per_token\":%.1f",
            tot->bytes ? 100.0 * (double)tot->hit / (double)tot->bytes : 0.0, (double)tot->bytes / n);
    put_ratio_or_null(out, "dev_read_bytes_per_token", tot->dev_ok, (double)tot->dev_bytes / n);
    put_ratio_or_null(out, "dev_read_ios_per_token", tot->dev_ok, (double)tot->dev_ios / n);
    put_ratio_or_null(out, "inflight_avg", tot->dev_ok, (double)tot->queue_ms / 1e3 / wall_s);
    fprintf(out, ",\"self_read_bytes_per_token\":%.1f", (double)tot->self_bytes / n);
    put_ratio_or_null(out, "qd_avg", qd_known(), (double)tot->io_ns / 1e9 / wall_s);
    fprintf(out, ",\"bytes\":%" PRIu64 ",\"cache_hit_bytes\":%" PRIu64 ",\"majflt\":%ld,\"strategy\":\"%s\","
            "\"threads\":%d,\"bs\":%" PRIu64 ",\"qd\":%d,\"compute\":\"%s\",\"fadv_random\":%s,\"cache_bytes\":%"
            PRIu64 ",\"predict_p\":%.4f,\"seed\":%" PRIu64 ",\"n_layer\":%d,\"n_expert\":%d,\"n_used\":%d,"
            "\"checksum\":%" PRIu64 ",\"prefetch_checksum\":%" PRIu64 "}}\n",
            tot->bytes, tot->hit, tot->majflt, STRATEGIES[O.strategy], O.threads, O.bs, O.qd, O.compute_arg,
            O.fadv_random ? "true" : "false", O.cache_bytes, O.predict_p, O.seed, n_layer, n_expert, n_used,
            checksum, F.sum);
}

/* ---------- main ---------- */

static void open_model(void)
{
    struct stat st;
    int fd = open(O.model, O_RDONLY | O_NOCTTY);
    if (fd < 0 || fstat(fd, &st))
        die2("%s: cannot open the model (%s)", O.model, strerror(errno));
    file_size = (uint64_t)st.st_size;
    if (!file_size)
        die2("%s: the model file is empty", O.model);
    fd_read = fd;
    if (O.fadv_random)
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); /* readahead off for this fd; advisory */
}

static void map_model(void)
{
    void *m = mmap(NULL, (size_t)file_size, PROT_READ, MAP_SHARED, fd_read, 0);
    if (m == MAP_FAILED)
        die1("mmap", errno);
    map = m;
    if (O.fadv_random) /* mmap faults read around by the mapping's own advice, not the fd's */
        (void)madvise(m, (size_t)file_size, MADV_RANDOM);
    if (O.strategy == S_DIRECT) {
        fd_direct = open(O.model, O_RDONLY | O_NOCTTY | O_DIRECT);
        if (fd_direct < 0)
            die2("%s: O_DIRECT open refused (%s)", O.model, strerror(errno));
        cache = xalloc(sizeof(struct centry) * (size_t)n_layer * (size_t)n_expert);
        scratch = xalloc(sizeof(unsigned char *) * (size_t)n_used);
    }
    if (O.strategy == S_URING)
        uring_setup();
    if (O.strategy == S_PREFETCH)
        prefetch_start();
}

int main(int argc, char **argv)
{
    FILE *out;
    struct totals tot;
    uint64_t t_first = 0, checksum = 0;
    long t;
    int i;
    parse_args(argc, argv);
    page_size = sysconf(_SC_PAGESIZE);
    open_model();
    read_layout();
    read_trace();
    if (O.strategy == S_DIRECT && !O.cache_bytes)
        die2("--cache-bytes: direct-cache needs an LRU budget (bytes)");
    if (O.blockstat && !read_blockstat().ok)
        die2("--blockstat %s: not a readable /sys/block/DEV/stat", O.blockstat);
    if (!(out = fopen(O.out, "w")))
        die2("%s: cannot write (%s)", O.out, strerror(errno));
    map_model();
    pool_start();
    memset(&tot, 0, sizeof tot);
    for (t = 0; t < n_tokens; t++) {
        if (t == 0)
            t_first = now_ns();
        one_token(out, t, &tot);
    }
    tot.wall_ns = now_ns() - t_first;
    if (O.strategy == S_PREFETCH)
        prefetch_stop();
    pool_stop();
    for (i = 0; i < O.threads; i++)
        checksum += P.w[i].sum;
    summary(out, &tot, checksum + U.sum);
    if (fclose(out))
        die1(O.out, errno);
    return 0;
}

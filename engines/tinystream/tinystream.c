/* tinystream: a small real streaming engine for the harness's tests (and for learning the harness).
 *
 * It reads a GGUF's routed-expert slices the way a MoE decode does: per token, per layer, the k experts a router
 * picks (here: a seeded PRNG, so a run is reproducible), each expert's slice of every expert tensor of that layer
 * (ffn_gate_exps, ffn_up_exps, ffn_down_exps) at its offset in the file, and sums the bytes (the "compute": small,
 * real, and kept so the reads cannot be optimised away). The layout comes from the GGUF header, parsed here, as
 * harness/models/inspect.py reads it: expert e of a [ne0, ne1, n_expert] tensor is the contiguous bytes
 * [e * nbytes / n_expert, (e + 1) * nbytes / n_expert).
 *
 * The model file is opened O_RDONLY and, with --io mmap, mapped PROT_READ: the engine never writes to it.
 *
 *   tinystream -m MODEL [-n TOKENS] [-s SEED] [-k USED] [--io pread|mmap] [--block BYTES]
 *
 * Output (stdout), read by engines/tinystream.yaml's extract rules:
 *   tinystream: model M: L layers, E experts, K used, X expert bytes per token
 *   tinystream: token 3/16: 1.234 ms, 1572864 bytes
 *   tinystream: decode: 16 tokens in 19.740 ms, 810.54 tok/s
 *   tinystream: io: rchar=N read_bytes=M          (this process's /proc/self/io over the decode, Linux only)
 *   tinystream: faults: major=N minor=M           (getrusage over the decode: the mapping's page faults)
 *   tinystream: checksum: 0x0123456789abcdef
 * A bad argument or a file that is not a GGUF it can read: one line on stderr, exit 2.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_DIMS 4
#define MAX_NAME 256
#define MAX_LAYERS 1024
#define MAX_PER_LAYER 8      /* expert tensors per layer (gate, up, down, and room for variants) */
#define MAX_EXPERTS 4096

struct tensor {
    char name[MAX_NAME];
    uint32_t n_dims, type;
    uint64_t ne[MAX_DIMS];
    uint64_t offset;         /* relative to the data section, then made absolute */
    uint64_t nbytes;
};

struct layer {
    int n;                            /* expert tensors in this layer */
    uint64_t offset[MAX_PER_LAYER];   /* absolute offset of each expert tensor */
    uint64_t slice[MAX_PER_LAYER];    /* bytes of one expert's slice of it */
};

struct model {
    const char *path;
    uint64_t file_bytes, data_offset;
    uint32_t alignment;
    int64_t n_experts, n_used, n_layers;
    struct layer layers[MAX_LAYERS];
};

static const char *model_path = "";

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tinystream: error: %s: ", model_path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* ---- the GGUF header (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) ---- */

static void rd(FILE *f, void *out, size_t n, const char *what) {
    if (fread(out, 1, n, f) != n)
        die("truncated header while reading %s at byte %lld", what, (long long)ftello(f));
}

static uint32_t rd_u32(FILE *f, const char *what) { uint32_t v; rd(f, &v, 4, what); return v; }
static uint64_t rd_u64(FILE *f, const char *what) { uint64_t v; rd(f, &v, 8, what); return v; }

static void skip(FILE *f, uint64_t n, const char *what) {
    if (n > (uint64_t)1 << 40 || fseeko(f, (off_t)n, SEEK_CUR) != 0)
        die("cannot skip %" PRIu64 " bytes of %s", n, what);
}

/* A GGUF string (u64 length + bytes) into buf (cut to size - 1), or skipped when buf is NULL. */
static void rd_str(FILE *f, char *buf, size_t size, const char *what) {
    uint64_t n = rd_u64(f, what);
    if (buf == NULL) { skip(f, n, what); return; }
    if (n >= size) die("%s is %" PRIu64 " bytes long (at most %zu)", what, n, size - 1);
    rd(f, buf, (size_t)n, what);
    buf[n] = '\0';
}

static const int scalar_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, -1, -1, 8, 8, 8};  /* by GGUF value type; 8 string, 9 array */

/* One value of GGUF type t: an integer (types 0-5, 7, 10, 11) is returned in *num, anything else skipped. */
static int rd_value(FILE *f, uint32_t t, int64_t *num, const char *key) {
    if (t == 8) { rd_str(f, NULL, 0, key); return 0; }
    if (t == 9) {
        uint32_t item = rd_u32(f, key);
        uint64_t n = rd_u64(f, key);
        if (item == 9) die("key %s: nested arrays are not supported", key);
        if (item > 12) die("key %s: unknown array item type %u", key, item);
        if (item == 8) { for (uint64_t i = 0; i < n; i++) rd_str(f, NULL, 0, key); }
        else skip(f, n * (uint64_t)scalar_size[item], key);
        return 0;
    }
    if (t > 12) die("key %s: unknown value type %u", key, t);
    unsigned char raw[8] = {0};
    rd(f, raw, (size_t)scalar_size[t], key);
    switch (t) {
    case 0: case 7: *num = raw[0]; return 1;
    case 1: *num = (int8_t)raw[0]; return 1;
    case 2: { uint16_t v; memcpy(&v, raw, 2); *num = v; return 1; }
    case 3: { int16_t v; memcpy(&v, raw, 2); *num = v; return 1; }
    case 4: { uint32_t v; memcpy(&v, raw, 4); *num = v; return 1; }
    case 5: { int32_t v; memcpy(&v, raw, 4); *num = v; return 1; }
    case 10: case 11: { int64_t v; memcpy(&v, raw, 8); *num = v; return 1; }
    default: return 0;  /* floats */
    }
}

/* Bytes of a tensor of ggml type `type` with `elements` elements, or 0 for a type not in this table (ggml.c's
 * type_traits: block size and bytes per block). */
static uint64_t type_bytes(uint32_t type, uint64_t elements) {
    static const struct { uint32_t type, block, size; } traits[] = {
        {0, 1, 4}, {1, 1, 2}, {2, 32, 18}, {3, 32, 20}, {6, 32, 22}, {7, 32, 24}, {8, 32, 34}, {9, 32, 36},
        {10, 256, 84}, {11, 256, 110}, {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {15, 256, 292},
        {24, 1, 1}, {25, 1, 2}, {26, 1, 4}, {27, 1, 8}, {28, 1, 8}, {30, 1, 2},
    };
    for (size_t i = 0; i < sizeof traits / sizeof traits[0]; i++)
        if (traits[i].type == type) return elements / traits[i].block * traits[i].size;
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    uint64_t x = (*(const struct tensor *const *)a)->offset, y = (*(const struct tensor *const *)b)->offset;
    return x < y ? -1 : x > y;
}

/* blk.N.<name>_exps.* (or _chexps): the layer N, else -1 */
static int expert_layer(const char *name) {
    int layer, end = 0;
    if (sscanf(name, "blk.%d.%n", &layer, &end) != 1 || end == 0 || layer < 0) return -1;
    const char *dot = strchr(name + end, '.');
    if (dot == NULL) return -1;
    size_t len = (size_t)(dot - (name + end));
    if ((len >= 5 && memcmp(dot - 5, "_exps", 5) == 0) || (len >= 7 && memcmp(dot - 7, "_chexps", 7) == 0))
        return layer;
    return -1;
}

static void read_model(struct model *m) {
    FILE *f = fopen(m->path, "rb");
    if (f == NULL) die("cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) die("cannot stat: %s", strerror(errno));
    m->file_bytes = (uint64_t)st.st_size;
    char magic[4];
    rd(f, magic, 4, "magic");
    if (memcmp(magic, "GGUF", 4) != 0) die("not a GGUF file (no GGUF magic at byte 0)");
    uint32_t version = rd_u32(f, "version");
    if (version < 2 || version > 3) die("GGUF version %u (this reads versions 2 and 3)", version);
    uint64_t n_tensors = rd_u64(f, "tensor count"), n_kv = rd_u64(f, "key count");
    if (n_tensors > 1000000 || n_kv > 1000000) die("implausible counts: %" PRIu64 " tensors, %" PRIu64 " keys",
                                                   n_tensors, n_kv);
    char arch[MAX_NAME] = "", key[MAX_NAME];
    int64_t alignment = 32, n_exp = 0, n_used = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        rd_str(f, key, sizeof key, "a metadata key");
        uint32_t t = rd_u32(f, key);
        int64_t num = 0;
        if (strcmp(key, "general.architecture") == 0 && t == 8) { rd_str(f, arch, sizeof arch, key); continue; }
        if (!rd_value(f, t, &num, key)) continue;
        const char *suffix = strchr(key, '.');
        if (strcmp(key, "general.alignment") == 0) alignment = num;
        else if (suffix && strncmp(key, arch, (size_t)(suffix - key)) == 0 && arch[suffix - key] == '\0') {
            if (strcmp(suffix, ".expert_count") == 0) n_exp = num;
            else if (strcmp(suffix, ".expert_used_count") == 0) n_used = num;
        }
    }
    if (alignment <= 0 || (alignment & (alignment - 1)) != 0) die("general.alignment %lld is not a power of two",
                                                                  (long long)alignment);
    struct tensor *ts = calloc(n_tensors ? n_tensors : 1, sizeof *ts);
    struct tensor **order = calloc(n_tensors ? n_tensors : 1, sizeof *order);
    if (ts == NULL || order == NULL) die("out of memory for %" PRIu64 " tensors", n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct tensor *t = &ts[i];
        rd_str(f, t->name, sizeof t->name, "a tensor name");
        t->n_dims = rd_u32(f, t->name);
        if (t->n_dims == 0 || t->n_dims > MAX_DIMS) die("tensor %s has %u dimensions", t->name, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) t->ne[d] = rd_u64(f, t->name);
        t->type = rd_u32(f, t->name);
        t->offset = rd_u64(f, t->name);
        order[i] = t;
    }
    uint64_t end = (uint64_t)ftello(f);
    fclose(f);
    m->alignment = (uint32_t)alignment;
    m->data_offset = (end + (uint64_t)alignment - 1) / (uint64_t)alignment * (uint64_t)alignment;
    if (m->data_offset > m->file_bytes) die("truncated: the header ends past the end of the file");
    /* sizes: from the type's block size; a type not in the table: the gap to the next tensor */
    qsort(order, n_tensors, sizeof *order, cmp_offset);
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct tensor *t = order[i];
        uint64_t elements = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) elements *= t->ne[d];
        uint64_t next = i + 1 < n_tensors ? order[i + 1]->offset : m->file_bytes - m->data_offset;
        t->nbytes = type_bytes(t->type, elements);
        if (t->nbytes == 0) t->nbytes = next > t->offset ? next - t->offset : 0;
        t->offset += m->data_offset;
        if (t->offset + t->nbytes > m->file_bytes) die("tensor %s ends past the end of the file", t->name);
    }
    m->n_experts = n_exp;
    m->n_used = n_used;
    for (uint64_t i = 0; i < n_tensors; i++) {  /* file order, as inspect.py lists them */
        struct tensor *t = order[i];
        int layer = expert_layer(t->name);
        if (layer < 0 || t->n_dims < 2) continue;
        if (m->n_experts <= 0) m->n_experts = (int64_t)t->ne[t->n_dims - 1];
        if (t->ne[t->n_dims - 1] != (uint64_t)m->n_experts || t->nbytes % (uint64_t)m->n_experts != 0) continue;
        if (layer >= MAX_LAYERS) die("tensor %s: layer %d (at most %d)", t->name, layer, MAX_LAYERS - 1);
        struct layer *l = &m->layers[layer];
        if (l->n == MAX_PER_LAYER) die("layer %d has more than %d expert tensors", layer, MAX_PER_LAYER);
        l->offset[l->n] = t->offset;
        l->slice[l->n] = t->nbytes / (uint64_t)m->n_experts;
        l->n++;
        if (layer + 1 > m->n_layers) m->n_layers = layer + 1;
    }
    free(order);
    free(ts);
    if (m->n_layers == 0) die("no routed-expert tensors (blk.N.*_exps.*): not a MoE model");
    if (m->n_experts > MAX_EXPERTS) die("%lld experts (at most %d)", (long long)m->n_experts, MAX_EXPERTS);
}

/* ---- decode ---- */

static uint64_t splitmix64(uint64_t *state) {  /* Steele, Lea, Flood 2014; the reference constants */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The compute: the sum of the bytes (any split into blocks, pread or mmap, gives the same checksum) */
static uint64_t sum_bytes(const unsigned char *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

/* rchar and read_bytes of this process (-1 where /proc/self/io is not readable); returns the bytes this read of
 * /proc/self/io itself added to rchar, so the decode's own reads can be told exactly */
static long long proc_io(long long *rchar, long long *read_bytes) {
    *rchar = *read_bytes = -1;
    int fd = open("/proc/self/io", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char text[1024];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    const char *r = strstr(text, "rchar: "), *b = strstr(text, "\nread_bytes: ");
    if (r) *rchar = strtoll(r + 7, NULL, 10);
    if (b) *read_bytes = strtoll(b + 13, NULL, 10);
    return (long long)n;
}

struct options {
    long tokens, used, block;
    uint64_t seed;
    int use_mmap;
};

/* One expert slice: read (pread in blocks, or touch the mapping), summed into *checksum. */
static void read_slice(int fd, const unsigned char *map, unsigned char *buf, const struct options *o,
                       uint64_t offset, uint64_t length, uint64_t *checksum) {
    for (uint64_t done = 0; done < length;) {
        size_t want = (size_t)(length - done < (uint64_t)o->block ? length - done : (uint64_t)o->block);
        if (map != NULL) {
            *checksum += sum_bytes(map + offset + done, want);
            done += want;
            continue;
        }
        ssize_t got = pread(fd, buf, want, (off_t)(offset + done));
        if (got <= 0) die("pread of %zu bytes at %" PRIu64 ": %s", want, offset + done,
                          got == 0 ? "end of file" : strerror(errno));
        *checksum += sum_bytes(buf, (size_t)got);
        done += (uint64_t)got;
    }
}

static void decode(const struct model *m, const struct options *o) {
    int fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("cannot open: %s", strerror(errno));
    const unsigned char *map = NULL;
    if (o->use_mmap) {
        void *p = mmap(NULL, (size_t)m->file_bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) die("mmap: %s", strerror(errno));
        map = p;
    }
    unsigned char *buf = map ? NULL : malloc((size_t)o->block);
    if (!map && buf == NULL) die("out of memory for a %ld-byte read buffer", o->block);
    int experts[MAX_EXPERTS];
    uint64_t state = o->seed, checksum = 0, per_token = 0;
    for (int64_t l = 0; l < m->n_layers; l++)
        for (int i = 0; i < m->layers[l].n; i++) per_token += m->layers[l].slice[i] * (uint64_t)o->used;
    long long rchar0, read0, rchar1, read1;
    long long own = proc_io(&rchar0, &read0);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    double start = now_ms();
    for (long token = 1; token <= o->tokens; token++) {
        double t0 = now_ms();
        for (int64_t l = 0; l < m->n_layers; l++) {
            for (int e = 0; e < m->n_experts; e++) experts[e] = e;
            for (long k = 0; k < o->used; k++) {  /* the router: k distinct experts (partial Fisher-Yates) */
                long j = k + (long)(splitmix64(&state) % (uint64_t)(m->n_experts - k));
                int chosen = experts[j];
                experts[j] = experts[k];
                experts[k] = chosen;
                for (int i = 0; i < m->layers[l].n; i++)
                    read_slice(fd, map, buf, o, m->layers[l].offset[i] + (uint64_t)chosen * m->layers[l].slice[i],
                               m->layers[l].slice[i], &checksum);
            }
        }
        printf("tinystream: token %ld/%ld: %.3f ms, %" PRIu64 " bytes\n", token, o->tokens, now_ms() - t0,
               per_token);
        fflush(stdout);
    }
    double total = now_ms() - start;
    getrusage(RUSAGE_SELF, &ru1);
    proc_io(&rchar1, &read1);
    printf("tinystream: decode: %ld tokens in %.3f ms, %.2f tok/s\n", o->tokens, total,
           total > 0 ? (double)o->tokens * 1e3 / total : 0.0);
    if (rchar0 >= 0 && rchar1 >= 0)
        printf("tinystream: io: rchar=%lld read_bytes=%lld\n", rchar1 - rchar0 - own, read1 - read0);
    printf("tinystream: faults: major=%ld minor=%ld\n", ru1.ru_majflt - ru0.ru_majflt, ru1.ru_minflt - ru0.ru_minflt);
    printf("tinystream: checksum: 0x%016" PRIx64 "\n", checksum);
    if (map) munmap((void *)map, (size_t)m->file_bytes);
    free(buf);
    close(fd);
}

static long number(const char *flag, const char *value, long low) {
    char *end;
    errno = 0;
    long v = value ? strtol(value, &end, 10) : 0;
    if (value == NULL || errno || *end || v < low) {
        fprintf(stderr, "tinystream: error: %s needs an integer >= %ld, got %s\n", flag, low, value ? value : "none");
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    static struct model m;
    struct options o = {16, 0, 1 << 20, 42, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-m") == 0 && v) { m.path = v; i++; }
        else if (strcmp(a, "-n") == 0) { o.tokens = number(a, v, 1); i++; }
        else if (strcmp(a, "-s") == 0) { o.seed = (uint64_t)number(a, v, 0); i++; }
        else if (strcmp(a, "-k") == 0) { o.used = number(a, v, 1); i++; }
        else if (strcmp(a, "--block") == 0) { o.block = number(a, v, 1); i++; }
        else if (strcmp(a, "--io") == 0 && v && (strcmp(v, "pread") == 0 || strcmp(v, "mmap") == 0)) {
            o.use_mmap = strcmp(v, "mmap") == 0; i++;
        } else {
            fprintf(stderr, "tinystream: error: unknown or incomplete argument %s (usage: tinystream -m MODEL "
                            "[-n TOKENS] [-s SEED] [-k USED] [--io pread|mmap] [--block BYTES])\n", a);
            return 2;
        }
    }
    if (m.path == NULL) { fprintf(stderr, "tinystream: error: no model (-m MODEL)\n"); return 2; }
    model_path = m.path;
    read_model(&m);
    if (o.used == 0) o.used = m.n_used > 0 ? (long)m.n_used : 1;
    if (o.used > m.n_experts) die("-k %ld: the model has %lld experts", o.used, (long long)m.n_experts);
    uint64_t per_token = 0;
    for (int64_t l = 0; l < m.n_layers; l++)
        for (int i = 0; i < m.layers[l].n; i++) per_token += m.layers[l].slice[i] * (uint64_t)o.used;
    printf("tinystream: model %s: %lld layers, %lld experts, %ld used, %" PRIu64 " expert bytes per token\n",
           m.path, (long long)m.n_layers, (long long)m.n_experts, o.used, per_token);
    decode(&m, &o);
    return 0;
}

/*
 * cachectl — page-cache control for model files (harness runner, docs/methodology.md section 4 "Cache state is verified").
 *
 *   cachectl drop FILE...        posix_fadvise(POSIX_FADV_DONTNEED) on each whole file
 *   cachectl prefetch FILE...    read each file fully (1 MiB reads) so its pages are cached
 *   cachectl residency FILE...   one JSON line per file from mmap + mincore:
 *     {"path": "...", "size_bytes": N, "page_size": 4096, "pages_total": N, "pages_resident": N, "resident_pct": 12.34}
 *
 * Files are only ever opened O_RDONLY: this tool never writes to a model file.
 * Exit status: 0 ok; 1 if any file failed (one line "cachectl: FILE: strerror" on stderr per failure, the other
 * files are still processed); 2 usage error.
 *
 * C99 + POSIX. Linux/Android are the main targets. macOS has no posix_fadvise, so no per-file drop: `drop` exits 1
 * with one line naming purge (sudo; the whole cache), which the runner uses there instead. prefetch turns the file's
 * readahead on (F_RDAHEAD) and reads it; residency uses mincore as on Linux.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define READ_BUF_BYTES (1u << 20)

/* mincore() windows: large on 64-bit, small where address space is scarce. Must be a multiple of any page size. */
#define RESIDENCY_WINDOW_BYTES ((sizeof(void *) >= 8) ? ((uint64_t)1 << 30) : ((uint64_t)64 << 20))

#ifdef __linux__
typedef unsigned char mincore_vec_t;
#else
typedef char mincore_vec_t;
#endif

static void usage(void)
{
    fprintf(stderr,
            "usage: cachectl drop FILE...        drop the files' pages from the page cache (fadvise DONTNEED)\n"
            "       cachectl prefetch FILE...    read the files fully into the page cache\n"
            "       cachectl residency FILE...   print one JSON line per file with its page-cache residency\n");
}

static void file_error(const char *path, int err)
{
    fprintf(stderr, "cachectl: %s: %s\n", path, strerror(err));
}

static int open_ro(const char *path)
{
    int fd;
    do {
        fd = open(path, O_RDONLY | O_NOCTTY);
    } while (fd < 0 && errno == EINTR);
    return fd;
}

/* Returns 0 or an errno value. */
static int do_drop(int fd)
{
#if defined(POSIX_FADV_DONTNEED)
    return posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
#else
    (void)fd;
    return ENOTSUP;
#endif
}

static int do_prefetch(int fd, char *buf)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return errno;
    if (S_ISDIR(st.st_mode))
        return EISDIR;
#if defined(POSIX_FADV_SEQUENTIAL)
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); /* larger readahead; advisory only */
#elif defined(F_RDAHEAD)
    (void)fcntl(fd, F_RDAHEAD, 1); /* macOS: readahead on for this fd (the default, unless someone turned it off) */
#endif
    for (;;) {
        ssize_t n = read(fd, buf, READ_BUF_BYTES);
        if (n > 0)
            continue;
        if (n == 0)
            return 0;
        if (errno != EINTR)
            return errno;
    }
}

static void json_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\u%04x", (unsigned)*p);
            else
                fputc(*p, f); /* bytes >= 0x80 pass through: paths are assumed to be UTF-8 */
        }
    }
    fputc('"', f);
}

static int do_residency(int fd, const char *path)
{
    struct stat st;
    long ps = sysconf(_SC_PAGESIZE);
    uint64_t page = ps > 0 ? (uint64_t)ps : 4096;
    uint64_t size, total, resident = 0, window, off;
    mincore_vec_t *vec = NULL;

    if (fstat(fd, &st) != 0)
        return errno;
    if (S_ISDIR(st.st_mode))
        return EISDIR;
    size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    total = (size + page - 1) / page;
    window = RESIDENCY_WINDOW_BYTES;
    if (window % page)
        window -= window % page;

    if (size > 0) {
        vec = malloc((size_t)(window / page));
        if (!vec)
            return ENOMEM;
    }
    for (off = 0; off < size; off += window) {
        uint64_t len = size - off < window ? size - off : window;
        uint64_t npages = (len + page - 1) / page, i;
        void *map;
        if ((uint64_t)(off_t)off != off) { /* file offset does not fit this build's off_t */
            free(vec);
            return EOVERFLOW;
        }
        map = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd, (off_t)off);
        if (map == MAP_FAILED) {
            int e = errno;
            free(vec);
            return e;
        }
        if (mincore(map, (size_t)len, vec) != 0) {
            int e = errno;
            munmap(map, (size_t)len);
            free(vec);
            return e;
        }
        munmap(map, (size_t)len);
        for (i = 0; i < npages; i++)
            resident += (uint64_t)(vec[i] & 1);
    }
    free(vec);

    fputs("{\"path\": ", stdout);
    json_string(stdout, path);
    printf(", \"size_bytes\": %llu, \"page_size\": %llu, \"pages_total\": %llu, \"pages_resident\": %llu, "
           "\"resident_pct\": %.2f}\n",
           (unsigned long long)size, (unsigned long long)page, (unsigned long long)total,
           (unsigned long long)resident, total ? 100.0 * (double)resident / (double)total : 0.0);
    return 0;
}

int main(int argc, char **argv)
{
    enum { DROP, PREFETCH, RESIDENCY } cmd;
    char *buf = NULL;
    int i, status = 0, first = 2;

    if (argc < 2) {
        usage();
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage();
        return 0;
    }
    if (!strcmp(argv[1], "drop"))
        cmd = DROP;
    else if (!strcmp(argv[1], "prefetch"))
        cmd = PREFETCH;
    else if (!strcmp(argv[1], "residency"))
        cmd = RESIDENCY;
    else {
        fprintf(stderr, "cachectl: unknown command '%s'\n", argv[1]);
        usage();
        return 2;
    }
    if (first < argc && !strcmp(argv[first], "--"))
        first++;
    if (first >= argc) {
        fprintf(stderr, "cachectl: %s: no FILE given\n", argv[1]);
        usage();
        return 2;
    }
#if !defined(POSIX_FADV_DONTNEED)
    if (cmd == DROP) { /* say why once, instead of one ENOTSUP per file */
        fprintf(stderr, "cachectl: drop: no posix_fadvise here, so no per-file page-cache drop; on macOS drop the "
                        "whole cache with purge (sudo)\n");
        return 1;
    }
#endif
    if (cmd == PREFETCH) {
        buf = malloc(READ_BUF_BYTES);
        if (!buf) {
            fprintf(stderr, "cachectl: %s\n", strerror(ENOMEM));
            return 1;
        }
    }

    for (i = first; i < argc; i++) {
        const char *path = argv[i];
        int err, fd = open_ro(path);
        if (fd < 0) {
            file_error(path, errno);
            status = 1;
            continue;
        }
        switch (cmd) {
        case DROP: err = do_drop(fd); break;
        case PREFETCH: err = do_prefetch(fd, buf); break;
        default: err = do_residency(fd, path); break;
        }
        close(fd);
        if (err) {
            file_error(path, err);
            status = 1;
        }
    }
    free(buf);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "cachectl: stdout: %s\n", strerror(errno));
        status = 1;
    }
    return status;
}

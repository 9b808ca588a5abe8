/*
 * sampler.h -- what the sampler's four files share (sampler.c says what the sampler does and writes):
 *
 *   sampler.c          the command line, the schedule (absolute deadlines, overruns), the header, exit and stop lines
 *   sampler_output.c   the output buffer, the "# proc_end" line and the lateness histogram
 *   sampler_linux.c    Linux (and Android): block mode, and threads mode over /proc for the step's process tree
 *   sampler_macos.c    macOS: threads mode through libproc (block mode refuses)
 *
 * One of the two platform files has content on a given build (each is guarded by __APPLE__), so the build is the
 * same command everywhere: cc ... -o sampler sampler.c sampler_linux.c sampler_macos.c sampler_output.c.
 * The small output writers are static inline here: they run for every field of every record, and a call across
 * files would cost what one file's inlining saved.
 */
#ifndef HARNESS_SAMPLER_H
#define HARNESS_SAMPLER_H

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

#define OUT_CAP ((size_t)1 << 20)
#define READ_BUF 4096
#define RESCAN_MS 100
#define MAX_PERIOD_MS 3600000L

enum { SAMPLE_OK = 0, SAMPLE_EXIT = 1, SAMPLE_ERROR = -1 };
enum mode { BLOCK, THREADS };
typedef int (*sample_fn)(void *, uint64_t);

/* sampler.c: the options the platform files read */
extern long g_stat_every; /* read stat for every thread every this many samples (always at a rescan) (Linux) */
extern int g_read_wchan;  /* --wchan: read wchan for every thread not running, as v1 did (Linux) */
extern int g_gate;        /* gate syscall reads of parked threads by their schedstat (--no-gate: off) (Linux) */
extern void (*g_at_stop)(void *); /* threads mode: the tree's processes still there, before the stop line */

/* sampler_linux.c: the tree's options (--no-tree, --tree-ms) */
#ifndef __APPLE__
extern int g_follow_tree;
extern long g_tree_ms;
#endif

/* sampler_linux.c or sampler_macos.c: the platform's source of samples, and its part of the threads header */
int open_source(enum mode mode, const char *target, long pid, const char *root, long period_ms, sample_fn *sample,
                void **ctx);
void out_source_header(void *ctx);
#ifdef __linux__
uint64_t use_short_slice(long slice_us);
#endif

/* ------------------------------------------------------------------------------------------------ output */

/* sampler_output.c: the one output buffer (records are assembled in place in it, sampler_linux.c) */
struct out_buf {
    int fd;
    char *buf;
    size_t len;
    int failed;
};
extern struct out_buf g_out;

void out_write_all(const char *p, size_t n);
void out_flush(void);
void write_proc_end(long pid, uint64_t first_ns, uint64_t last_ns, int gone);
void late_add(uint64_t late_ns);
void out_lateness(void);

static inline void out_mem(const char *p, size_t n)
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

static inline void out_str(const char *s) { out_mem(s, strlen(s)); }

static inline void out_char(char c) { out_mem(&c, 1); }

/* v in decimal at dst (at most 20 digits); returns how many were written */
static inline size_t format_u64(char *dst, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof tmp, n;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    n = sizeof tmp - i;
    memcpy(dst, tmp + i, n);
    return n;
}

static inline void out_u64(uint64_t v)
{
    char digits[24];
    out_mem(digits, format_u64(digits, v));
}

#endif /* HARNESS_SAMPLER_H */

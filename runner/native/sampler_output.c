/* sampler_output.c -- the sampler's output buffer, the "# proc_end" line and the lateness histogram (sampler.h). */

#include "sampler.h"

/* ------------------------------------------------------------------------------------------------ output */

struct out_buf g_out;

void out_write_all(const char *p, size_t n)
{
    while (n > 0 && !g_out.failed) {
        ssize_t w = write(g_out.fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "sampler: write: %s\n", strerror(errno));
            g_out.failed = 1;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

void out_flush(void)
{
    out_write_all(g_out.buf, g_out.len);
    g_out.len = 0;
}

/* "# proc_end pid=P first_ns=F last_ns=L gone=0|1": last_ns is the last sample with a record of it (both builds) */
void write_proc_end(long pid, uint64_t first_ns, uint64_t last_ns, int gone)
{
    out_str("# proc_end pid=");
    out_u64((uint64_t)pid);
    out_str(" first_ns=");
    out_u64(first_ns);
    out_str(" last_ns=");
    out_u64(last_ns);
    out_str(gone ? " gone=1\n" : " gone=0\n");
}

/* ------------------------------------------------------------------------------------------------ lateness */

#define LATE_BIN_US 10
#define LATE_BINS 2000 /* 10 us bins up to 20 ms; later samples count in the last */
static uint32_t g_late[LATE_BINS];
static uint64_t g_late_n, g_late_max_ns;

void late_add(uint64_t late_ns)
{
    uint64_t bin = late_ns / (LATE_BIN_US * 1000u);
    g_late[bin < LATE_BINS ? bin : LATE_BINS - 1]++;
    g_late_n++;
    if (late_ns > g_late_max_ns)
        g_late_max_ns = late_ns;
}

/* the upper edge (us) of the bin holding the per_mille-th quantile of the lateness, never above the largest seen;
 * 0 with no samples */
static uint64_t late_quantile_us(unsigned per_mille)
{
    uint64_t need = (g_late_n * per_mille + 999) / 1000, seen = 0, max_us = g_late_max_ns / 1000u;
    size_t i;
    for (i = 0; i < LATE_BINS && g_late_n; i++) {
        seen += g_late[i];
        if (seen >= need) { /* need >= 1 with any sample: this bin holds one */
            uint64_t edge = (uint64_t)(i + 1) * LATE_BIN_US;
            return edge < max_us ? edge : max_us;
        }
    }
    return 0;
}

void out_lateness(void)
{
    out_str(" late_us_p50=");
    out_u64(late_quantile_us(500));
    out_str(" late_us_p90=");
    out_u64(late_quantile_us(900));
    out_str(" late_us_p99=");
    out_u64(late_quantile_us(990));
    out_str(" late_us_max=");
    out_u64(g_late_max_ns / 1000u);
}

/* ------------------------------------------------------------------------------------------------ scheduling */

/*
 * ctl_cost.c - the cost of reading strata's statistics: epoch plus
 * every stats.arenas.4096.* value (by MIB, looked up once, and by name), and one
 * OpenMetrics write ("P", and "PD" with per-arena and per-class series), in microseconds,
 * medians of 200 runs, with every arena in use. Run with MALLOC_CONF=narenas:8 / :64.
 * Not linked to an allocator: LD_PRELOAD=libstrata.so or libjemalloc.so.2 (which has no
 * OpenMetrics: those columns are n/a). Names an allocator lacks are left out, counted.
 * Build: cc -O2 bench/ctl/ctl_cost.c -o ctl_cost -lpthread
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Plain jemalloc names: the same binary runs under strata and libjemalloc2 (LD_PRELOAD). */
#define WEAK __attribute__((weak))
WEAK int mallctl(const char *, void *, size_t *, void *, size_t);
WEAK int mallctlnametomib(const char *, size_t *, size_t *);
WEAK int mallctlbymib(const size_t *, size_t, void *, size_t *, void *, size_t);
WEAK void malloc_stats_print(void (*)(void *, const char *), void *, const char *);

#define RUNS 200
static const char *scalars[] = {"nthreads", "uptime", "dirty_decay_ms", "muzzy_decay_ms", "pactive", "pdirty",
    "pmuzzy", "dirty_npurge", "dirty_nmadvise", "dirty_purged", "muzzy_npurge", "muzzy_nmadvise", "muzzy_purged",
    "small.allocated", "small.nmalloc", "small.ndalloc", "small.nrequests", "small.nfills", "small.nflushes",
    "large.allocated", "large.nmalloc", "large.ndalloc", "large.nrequests", "large.nfills", "large.nflushes",
    "mapped", "retained", "base", "internal", "metadata_thp", "tcache_bytes", "tcache_stashed_bytes", "resident",
    "abandoned_vm", "extent_avail", "mutexes.extents.num_ops", "mutexes.extents.num_wait",
    "mutexes.extents.num_spin_acq", "mutexes.extents.num_owner_switch", "mutexes.extents.total_wait_time",
    "mutexes.extents.max_wait_time", "mutexes.extents.max_num_thds"};
static const char *bin_f[] = {"nmalloc", "ndalloc", "nrequests", "curregs", "nfills", "nflushes", "nslabs",
    "nreslabs", "curslabs", "nonfull_slabs", "mutex.num_ops", "mutex.num_wait", "mutex.num_spin_acq",
    "mutex.num_owner_switch", "mutex.total_wait_time", "mutex.max_wait_time", "mutex.max_num_thds"};
static const char *lext_f[] = {"nmalloc", "ndalloc", "nrequests", "curlextents"};
static const char *ext_f[] = {"ndirty", "nmuzzy", "nretained", "dirty_bytes", "muzzy_bytes", "retained_bytes"};

static char names[8192][80];
static size_t mibs[8192][8], miblens[8192];
static int nnames;

static void add(const char *fmt, const char *f, int j) {
    if (j < 0)
        snprintf(names[nnames], 80, fmt, f);
    else
        snprintf(names[nnames], 80, fmt, j, f);
    nnames++;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }

static void discard(void *o, const char *s) { *(size_t *)o += strlen(s); }

static void *bind_and_allocate(void *arg) {
    unsigned ind = (unsigned)(size_t)arg;
    mallctl("thread.arena", NULL, NULL, &ind, sizeof ind);
    for (int i = 0; i < 200; i++) free(malloc((size_t)(i * 37 % 4000) + 16));
    return NULL;
}

static double median(double *v) { qsort(v, RUNS, sizeof *v, cmp); return v[RUNS / 2]; }

int main(void) {
    if (!mallctl) {
        fprintf(stderr, "run with LD_PRELOAD=libstrata.so or libjemalloc.so.2\n");
        return 2;
    }
    unsigned narenas;
    size_t len = sizeof narenas;
    mallctl("arenas.narenas", &narenas, &len, NULL, 0);
    for (unsigned i = 0; i < narenas - 1; i++) { /* every ordinary arena in use */
        pthread_t t;
        pthread_create(&t, NULL, bind_and_allocate, (void *)(size_t)i);
        pthread_join(t, NULL);
    }
    for (size_t i = 0; i < sizeof scalars / sizeof *scalars; i++) add("stats.arenas.4096.%s", scalars[i], -1);
    for (int j = 0; j < 36; j++)
        for (size_t f = 0; f < sizeof bin_f / sizeof *bin_f; f++) add("stats.arenas.4096.bins.%d.%s", bin_f[f], j);
    unsigned nlext;
    len = sizeof nlext;
    mallctl("arenas.nlextents", &nlext, &len, NULL, 0);
    for (int j = 0; j < (int)nlext; j++)
        for (size_t f = 0; f < 4; f++) add("stats.arenas.4096.lextents.%d.%s", lext_f[f], j);
    for (int j = 0;; j++) {
        size_t m[8], ml = 8;
        char n[80];
        snprintf(n, 80, "stats.arenas.4096.extents.%d.ndirty", j);
        if (mallctlnametomib(n, m, &ml)) break;
        for (size_t f = 0; f < 6; f++) add("stats.arenas.4096.extents.%d.%s", ext_f[f], j);
    }
    int missing = 0;
    for (int i = 0; i < nnames; i++) {
        miblens[i] = 8;
        if (mallctlnametomib(names[i], mibs[i], &miblens[i])) {
            missing++;
            memmove(names[i], names[i + 1], sizeof(names[0]) * (size_t)(nnames - i - 1));
            nnames--, i--;
        }
    }
    const char *version = "";
    len = sizeof version;
    mallctl("version", &version, &len, NULL, 0);
    int om = strncmp(version, "5.", 2) != 0; /* jemalloc has no OpenMetrics output */
    static double t_mib[RUNS], t_name[RUNS], t_om[RUNS], t_omd[RUNS];
    uint64_t e = 1, sink = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now_us();
        len = sizeof e;
        mallctl("epoch", &e, &len, &e, sizeof e);
        for (int i = 0; i < nnames; i++) {
            uint64_t v = 0;
            len = strstr(names[i], "max_num_thds") ? 4 : 8; /* uint32_t */
            mallctlbymib(mibs[i], miblens[i], &v, &len, NULL, 0);
            sink += v;
        }
        double t1 = now_us();
        mallctl("epoch", &e, &len, &e, sizeof e);
        for (int i = 0; i < nnames; i++) {
            uint64_t v = 0;
            len = strstr(names[i], "max_num_thds") ? 4 : 8;
            mallctl(names[i], &v, &len, NULL, 0);
            sink += v;
        }
        double t2 = now_us();
        size_t bytes = 0, dbytes = 0;
        if (om) malloc_stats_print(discard, &bytes, "P");
        double t3 = now_us();
        if (om) malloc_stats_print(discard, &dbytes, "PD");
        double t4 = now_us();
        t_mib[r] = t1 - t0, t_name[r] = t2 - t1, t_om[r] = t3 - t2, t_omd[r] = t4 - t3;
        if (r == 0)
            printf("%s: %d values (%d names absent), OpenMetrics %zu bytes, with D %zu bytes\n", version, nnames,
                   missing, bytes, dbytes);
    }
    printf("arenas.narenas %u: epoch + all stats.arenas.4096.* by MIB %.1f us, by name %.1f us; "
           "OpenMetrics write %.1f us, with per-arena/per-class series %.1f us (sink %llu)\n",
           narenas, median(t_mib), median(t_name), median(t_om), median(t_omd), (unsigned long long)(sink & 1));
    return 0;
}

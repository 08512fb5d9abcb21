/*
 * introspection.c - the mallctl tree: jemalloc's names with their types,
 * read/write rules and error codes, multi-component MIBs, MALLCTL_ARENAS_ALL (4096),
 * per-bin / per-large-class / per-extent statistics that move when the program does,
 * and malloc_stats_print's omission letters and OpenMetrics output ("P").
 */
#define _GNU_SOURCE
#include "strata_names.h"

#include <errno.h>
#include <pthread.h>

#include "check.h"

#define MiB ((size_t)1 << 20)

static void epoch(void)
{
    uint64_t e = 1;
    size_t len = sizeof e;
    CHECK_EQ(mallctl("epoch", &e, &len, &e, sizeof e), 0);
}

static uint64_t rd64(const char *name)
{
    uint64_t v = 0;
    size_t len = sizeof v;
    int r = mallctl(name, &v, &len, NULL, 0);
    CHECK(r == 0 && len == sizeof v, "mallctl(\"%s\") = %d, len %zu", name, r, len);
    return v;
}

static unsigned rdu(const char *name)
{
    unsigned v = 0;
    size_t len = sizeof v;
    int r = mallctl(name, &v, &len, NULL, 0);
    CHECK(r == 0 && len == sizeof v, "mallctl(\"%s\") = %d", name, r);
    return v;
}

TEST(test_mallctl_jemalloc_names_answer_with_their_types)
{
    static const char *size_names[] = {
        "stats.allocated", "stats.active", "stats.metadata", "stats.resident", "stats.mapped",
        "stats.retained", "arenas.page", "arenas.quantum", "arenas.tcache_max",
        "arenas.bin.0.size", "arenas.bin.35.slab_size", "arenas.lextent.0.size", "opt.tcache_max",
        "opt.oversize_threshold", "stats.arenas.4096.pactive", "stats.arenas.4096.small.allocated",
        "stats.arenas.4096.large.allocated", "stats.arenas.4096.bins.2.curregs",
        "stats.arenas.4096.lextents.3.curlextents", "stats.arenas.4096.extents.0.retained_bytes",
        "stats.arenas.0.tcache_bytes"};
    epoch();
    /* MALLCTL_ARENAS_DESTROYED has statistics only once an arena was destroyed (jemalloc). */
    size_t v4097, l4097 = sizeof v4097;
    CHECK_EQ(mallctl("stats.arenas.4097.pactive", &v4097, &l4097, NULL, 0), ENOENT);
    for (size_t i = 0; i < sizeof size_names / sizeof *size_names; i++) (void)rd64(size_names[i]);
    static const char *u_names[] = {"arenas.narenas", "arenas.nbins", "arenas.nhbins", "arenas.nlextents",
                                    "opt.narenas", "thread.arena", "stats.arenas.4096.nthreads"};
    for (size_t i = 0; i < sizeof u_names / sizeof *u_names; i++) (void)rdu(u_names[i]);
    CHECK_EQ(rdu("arenas.nbins"), 36u);
    CHECK_EQ(rd64("arenas.bin.0.size"), (uint64_t)8);
    CHECK(rd64("arenas.lextent.0.size") > 14336, "first large class %ju", (uintmax_t)rd64("arenas.lextent.0.size"));
    const char *s = NULL;
    size_t len = sizeof s;
    CHECK_EQ(mallctl("opt.junk", &s, &len, NULL, 0), 0);
    CHECK(s && strcmp(s, "false") == 0, "opt.junk %s", s ? s : "(null)");
    bool b;
    len = sizeof b;
    CHECK_EQ(mallctl("config.stats", &b, &len, NULL, 0), 0);
    CHECK(b);
    b = false; /* the profiler is always compiled in: jemalloc's tools read config.prof */
    CHECK_EQ(mallctl("config.prof", &b, &len, NULL, 0), 0);
    CHECK(b);
    ssize_t d;
    len = sizeof d;
    CHECK_EQ(mallctl("opt.dirty_decay_ms", &d, &len, NULL, 0), 0);
    CHECK_EQ(d, (ssize_t)10000);
}

TEST(test_mallctl_error_codes_follow_jemalloc)
{
    size_t v, len = sizeof v;
    CHECK_EQ(mallctl("stats", &v, &len, NULL, 0), ENOENT);          /* inner node */
    CHECK_EQ(mallctl("stats.arenas.4096.nosuch", &v, &len, NULL, 0), ENOENT);
    CHECK_EQ(mallctl("arenas.bin.36.size", &v, &len, NULL, 0), ENOENT); /* past nbins */
    CHECK_EQ(mallctl("stats.arenas.4000.pactive", &v, &len, NULL, 0), ENOENT);
    CHECK_EQ(mallctl("stats.arenas.x.pactive", &v, &len, NULL, 0), ENOENT);
    CHECK_EQ(mallctl("background_thread", &v, &len, NULL, 0), EINVAL); /* a bool read into a wider buffer */
    CHECK_EQ(mallctl("arena.4000.purge", NULL, NULL, NULL, 0), EFAULT);
    CHECK_EQ(mallctl("arena.0.purge", &v, &len, NULL, 0), EPERM);     /* an action reads nothing */
    CHECK_EQ(mallctl("opt.narenas", NULL, NULL, &v, sizeof(unsigned)), EPERM);
    CHECK_EQ(mallctl("arenas.page", NULL, NULL, &v, sizeof v), EPERM);
    unsigned big = 100000;
    CHECK_EQ(mallctl("thread.arena", NULL, NULL, &big, sizeof big), EFAULT);
    CHECK_EQ(mallctl("thread.arena", NULL, NULL, &big, 1), EINVAL);
    void *nul = NULL;
    unsigned ind;
    len = sizeof ind;
    CHECK_EQ(mallctl("arenas.lookup", &ind, &len, &nul, sizeof nul), EINVAL);
}

TEST(test_mallctlnametomib_gives_one_component_per_name_part)
{
    size_t mib[8], miblen = 8;
    CHECK_EQ(mallctlnametomib("stats.arenas.0.pactive", mib, &miblen), 0);
    CHECK_EQ(miblen, (size_t)4);
    CHECK_EQ(mib[2], (size_t)0);
    epoch();
    unsigned n = rdu("arenas.narenas");
    size_t sum = 0, all = 0, len;
    for (unsigned i = 0; i < n; i++) {
        size_t p = 0;
        mib[2] = i;
        len = sizeof p;
        int r = mallctlbymib(mib, miblen, &p, &len, NULL, 0);
        CHECK(r == 0 || r == ENOENT, "arena %u: %d", i, r);
        sum += r == 0 ? p : 0;
    }
    mib[2] = 4096;
    len = sizeof all;
    CHECK_EQ(mallctlbymib(mib, miblen, &all, &len, NULL, 0), 0);
    CHECK_EQ(all, sum);
    /* A partial translation: the prefix, then the rest by index. */
    size_t pre[8], prelen = 3;
    CHECK_EQ(mallctlnametomib("arenas.bin.3.size", pre, &prelen), 0);
    CHECK_EQ(prelen, (size_t)3);
    len = sizeof all;
    CHECK_EQ(mallctlbymib(pre, 3, &all, &len, NULL, 0), ENOENT);
}

TEST(test_bin_and_large_class_statistics_move_with_allocations)
{
    epoch();
    size_t mib[8], miblen = 8;
    /* bin 2 is 32 bytes (jemalloc's index) */
    CHECK_EQ(mallctlnametomib("stats.arenas.4096.bins.2.nmalloc", mib, &miblen), 0);
    CHECK_EQ(rd64("arenas.bin.2.size"), (uint64_t)32);
    uint64_t m0 = 0, m1 = 0, l0, l1;
    size_t len = sizeof m0;
    CHECK_EQ(mallctlbymib(mib, miblen, &m0, &len, NULL, 0), 0);
    l0 = rd64("stats.arenas.4096.lextents.0.curlextents");
    enum { N = 5000 };
    static void *p[N];
    for (int i = 0; i < N; i++) p[i] = malloc(32);
    void *big = malloc((size_t)rd64("arenas.lextent.0.size"));
    epoch();
    len = sizeof m1;
    CHECK_EQ(mallctlbymib(mib, miblen, &m1, &len, NULL, 0), 0);
    l1 = rd64("stats.arenas.4096.lextents.0.curlextents");
    CHECK(m1 >= m0 + N - 400, "bins.2.nmalloc %ju -> %ju after %d mallocs", (uintmax_t)m0, (uintmax_t)m1, N);
    CHECK_EQ(l1, l0 + 1);
    CHECK(rd64("stats.arenas.4096.bins.2.curslabs") >= 1);
    for (int i = 0; i < N; i++) free(p[i]);
    free(big);
}

TEST(test_arenas_lookup_and_thread_arena_agree)
{
    void *p = malloc(100);
    unsigned ind = 99, mine = rdu("thread.arena");
    size_t len = sizeof ind;
    CHECK_EQ(mallctl("arenas.lookup", &ind, &len, &p, sizeof p), 0);
    CHECK_EQ(ind, mine);
    free(p);
    /* Move this thread to another arena: new blocks come from there. */
    unsigned n = rdu("arenas.narenas"), to = (mine + 1) % (n - 1), old;
    len = sizeof old;
    CHECK_EQ(mallctl("thread.arena", &old, &len, &to, sizeof to), 0);
    CHECK_EQ(old, mine);
    CHECK_EQ(rdu("thread.arena"), to);
    void *q[64];
    for (int i = 0; i < 64; i++) q[i] = malloc(48);
    len = sizeof ind;
    CHECK_EQ(mallctl("arenas.lookup", &ind, &len, &q[63], sizeof q[63]), 0);
    CHECK_EQ(ind, to);
    for (int i = 0; i < 64; i++) free(q[i]);
}

TEST(test_tcache_enabled_off_serves_from_the_arena)
{
    bool on = true, old, off = false;
    size_t len = sizeof old;
    CHECK_EQ(mallctl("thread.tcache.enabled", &old, &len, NULL, 0), 0);
    CHECK(old);
    CHECK_EQ(mallctl("thread.tcache.enabled", &old, &len, &off, sizeof off), 0);
    uint64_t a0 = rd64("thread.allocated");
    epoch();
    uint64_t f0 = rd64("stats.arenas.4096.bins.3.nmalloc");
    for (int i = 0; i < 100; i++) free(malloc(48));
    epoch();
    uint64_t f1 = rd64("stats.arenas.4096.bins.3.nmalloc");
    CHECK(f1 - f0 >= 100, "uncached mallocs go to the bin: %ju -> %ju", (uintmax_t)f0, (uintmax_t)f1);
    CHECK(rd64("thread.allocated") - a0 >= 4800);
    CHECK_EQ(mallctl("thread.tcache.enabled", &old, &len, &on, sizeof on), 0);
    CHECK(!old);
    CHECK_EQ(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    CHECK_EQ(mallctl("thread.idle", NULL, NULL, NULL, 0), 0);
}

TEST(test_arena_4096_purge_returns_dirty_pages)
{
    enum { N = 16 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(2 * MiB);
        memset(p[i], 1, 2 * MiB);
    }
    for (int i = 0; i < N; i++) free(p[i]);
    epoch();
    uint64_t purged0 = rd64("stats.arenas.4096.dirty_purged");
    CHECK_EQ(mallctl("arena.4096.purge", NULL, NULL, NULL, 0), 0);
    epoch();
    CHECK_EQ(rd64("stats.arenas.4096.pdirty"), (uint64_t)0);
    CHECK(rd64("stats.arenas.4096.dirty_purged") > purged0);
    CHECK(rd64("stats.arenas.4096.dirty_npurge") >= 1);
}

static struct {
    char text[1 << 20];
    size_t len;
} out;
static void cb(void *opaque, const char *s)
{
    (void)opaque;
    size_t n = strlen(s);
    if (out.len + n < sizeof out.text) {
        memcpy(out.text + out.len, s, n + 1);
        out.len += n;
    }
}

TEST(test_stats_print_sections_and_omission_letters)
{
    void *p = malloc(100);
    out.len = 0;
    malloc_stats_print(cb, NULL, NULL);
    CHECK(strstr(out.text, "___ Begin jemalloc statistics ___") && strstr(out.text, "Run-time option settings") &&
              strstr(out.text, "  opt.narenas: ") && strstr(out.text, "bins:") && strstr(out.text, "arenas[0]:") &&
              strstr(out.text, "--- End jemalloc statistics ---"),
          "text layout:\n%.2000s", out.text);
    /* the arena's name prints as a string (a pointer's digits before) */
    CHECK(strstr(out.text, "\nname:") && strstr(out.text, "\"auto_0\"\n"), "arena name:\n%.3000s", out.text);
    out.len = 0;
    malloc_stats_print(cb, NULL, "gbl");
    CHECK(!strstr(out.text, "opt.narenas") && !strstr(out.text, "bins:") && strstr(out.text, "Allocated: "),
          "omissions g b l:\n%.2000s", out.text);
    out.len = 0;
    malloc_stats_print(cb, NULL, "J");
    CHECK(strstr(out.text, "\"stats.arenas\"") && strstr(out.text, "\"nregs\"") && strstr(out.text, "\"uptime_ns\""));
    out.len = 0;
    malloc_stats_print(cb, NULL, "P");
    CHECK(strstr(out.text, "# TYPE strata_allocated_bytes gauge\n# UNIT strata_allocated_bytes bytes\n") &&
              strstr(out.text, "strata_arena_dirty_purged_bytes_total ") &&
              strcmp(out.text + out.len - 6, "# EOF\n") == 0,
          "OpenMetrics:\n%.3000s", out.text);
    free(p);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

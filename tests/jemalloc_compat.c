/*
 * jemalloc_compat.c - what a program written for jemalloc 5.3 expects of the names and
 * options strata took from it: thread.allocatedp's live counters, arena.<i>.dss,
 * experimental.hooks.* (alloc, dalloc and expand hooks called, the safety-check hook),
 * experimental.batch_alloc and arenas_create_ext, a live stats.zero_reallocs, jemalloc's
 * types for the new names, and the options xmalloc, zero_realloc, zero:true (in-place
 * growth zeroed), stats_interval and prof_leak_error, each in a child run under
 * MALLOC_CONF.
 */
#define _GNU_SOURCE
#include "strata_names.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define MiB ((size_t)1 << 20)

/* jemalloc's hook types (its include/jemalloc/internal/hook.h; an experimental ABI). */
typedef void (*hook_alloc)(void *extra, int type, void *result, uintptr_t result_raw, uintptr_t args_raw[3]);
typedef void (*hook_dalloc)(void *extra, int type, void *address, uintptr_t args_raw[3]);
typedef void (*hook_expand)(void *extra, int type, void *address, size_t old_usize, size_t new_usize,
                            uintptr_t result_raw, uintptr_t args_raw[4]);
typedef struct {
    hook_alloc alloc_hook;
    hook_dalloc dalloc_hook;
    hook_expand expand_hook;
    void *extra;
} hooks_t;
enum { HOOK_ALLOC_MALLOC = 0, HOOK_ALLOC_CALLOC = 3, HOOK_DALLOC_FREE = 0, HOOK_EXPAND_XALLOCX = 2 };

/* Runs this test again in a child with MALLOC_CONF set; the child sees COMPAT_CHILD=1. */
static check_child_t child_result;
static check_child_t *rerun(const char *test, const char *conf)
{
    char mc[256];
    snprintf(mc, sizeof mc, "MALLOC_CONF=%s", conf);
    const char *env[] = {"COMPAT_CHILD=1", mc, "STRATA_CONF", NULL};
    char *argv[] = {"/proc/self/exe", (char *)test, NULL};
    CHECK(check_exec(argv, env, 60, &child_result) == 0, "cannot run the child");
    return &child_result;
}
static int in_child(void) { return getenv("COMPAT_CHILD") != NULL; }

TEST(test_thread_allocatedp_points_at_live_counters)
{
    uint64_t *ap = NULL, *dp = NULL;
    size_t len = sizeof ap;
    CHECK_EQ(mallctl("thread.allocatedp", &ap, &len, NULL, 0), 0);
    CHECK_EQ(len, sizeof(uint64_t *));
    len = sizeof dp;
    CHECK_EQ(mallctl("thread.deallocatedp", &dp, &len, NULL, 0), 0);
    CHECK(ap != NULL && dp != NULL && ap != dp);
    /* the wrong size is EINVAL, as every jemalloc name */
    len = 4;
    CHECK_EQ(mallctl("thread.allocatedp", &ap, &len, NULL, 0), EINVAL);
    uint64_t a0 = *ap, d0 = *dp;
    void *p = malloc(4 * MiB);
    CHECK(p != NULL);
    CHECK(*ap >= a0 + 4 * MiB, "allocated %llu -> %llu after 4 MiB", (unsigned long long)a0,
          (unsigned long long)*ap);
    free(p);
    CHECK(*dp >= d0 + 4 * MiB, "deallocated %llu -> %llu after freeing 4 MiB", (unsigned long long)d0,
          (unsigned long long)*dp);
    /* small blocks: within a thread cache's worth of the exact figure */
    uint64_t a1 = *ap, exact0, exact1;
    len = sizeof exact0;
    CHECK_EQ(mallctl("thread.allocated", &exact0, &len, NULL, 0), 0);
    static void *keep[20000];
    for (int i = 0; i < 20000; i++) keep[i] = malloc(64);
    CHECK_EQ(mallctl("thread.allocated", &exact1, &len, NULL, 0), 0);
    CHECK(exact1 - exact0 >= 20000 * 64);
    CHECK(*ap - a1 + 64 * 1024 >= 20000 * 64, "allocatedp moved %llu for 1.28 MB",
          (unsigned long long)(*ap - a1));
    CHECK_EQ(*ap, exact1); /* a read of thread.allocated publishes */
    for (int i = 0; i < 20000; i++) free(keep[i]);
}

/* jemalloc counts every resize in thread.allocated / thread.deallocated, also one that keeps
 * the block where it is (jemalloc's test/unit/zero_realloc_alloc.c relies on it). */
TEST(test_in_place_realloc_counts_in_thread_allocated)
{
    uint64_t a0, a1, d0, d1;
    size_t len = sizeof(uint64_t);
    void *p = malloc(10);
    CHECK(p != NULL);
    CHECK_EQ(mallctl("thread.allocated", &a0, &len, NULL, 0), 0);
    CHECK_EQ(mallctl("thread.deallocated", &d0, &len, NULL, 0), 0);
    void *q = realloc(p, 12); /* the same size class: stays in place */
    CHECK(q == p, "realloc(p, 12) of a 10-byte block moved it");
    q = rallocx(q, 11, 0);
    CHECK(q == p, "rallocx(p, 11) of a 10-byte block moved it");
    CHECK_EQ(mallctl("thread.allocated", &a1, &len, NULL, 0), 0);
    CHECK_EQ(mallctl("thread.deallocated", &d1, &len, NULL, 0), 0);
    size_t u = malloc_usable_size(q);
    CHECK(a1 - a0 == 2 * u && d1 - d0 == 2 * u,
          "two in-place resizes of a %zu-byte block moved thread.allocated by %ju, thread.deallocated by %ju",
          u, (uintmax_t)(a1 - a0), (uintmax_t)(d1 - d0));
    free(q);
}

TEST(test_arena_dss_reads_disabled_and_refuses_sbrk)
{
    const char *v = NULL;
    size_t len = sizeof v;
    CHECK_EQ(mallctl("arena.0.dss", &v, &len, NULL, 0), 0);
    CHECK(v && strcmp(v, "disabled") == 0);
    const char *w = "disabled";
    CHECK_EQ(mallctl("arena.0.dss", NULL, NULL, &w, sizeof w), 0);
    w = "primary"; /* accepted with no effect: jemalloc on Linux takes it */
    CHECK_EQ(mallctl("arena.0.dss", NULL, NULL, &w, sizeof w), 0);
    w = "secondary";
    CHECK_EQ(mallctl("arena.4096.dss", &v, &len, &w, sizeof w), 0);
    CHECK(strcmp(v, "disabled") == 0);
    w = "sometimes";
    CHECK_EQ(mallctl("arena.0.dss", NULL, NULL, &w, sizeof w), EINVAL);
    CHECK_EQ(mallctl("arena.4000.dss", &v, &len, NULL, 0), EFAULT); /* no such arena */
}

static struct {
    int nalloc, ndalloc, nexpand, last_alloc_type;
    void *last_result, *last_dalloc;
    size_t last_old, last_new;
} seen;
static void on_alloc(void *extra, int type, void *result, uintptr_t raw, uintptr_t args[3])
{
    (void)raw, (void)args;
    if (extra != &seen) return;
    seen.nalloc++;
    seen.last_alloc_type = type;
    seen.last_result = result;
}
static void on_dalloc(void *extra, int type, void *address, uintptr_t args[3])
{
    (void)type, (void)args;
    if (extra != &seen) return;
    seen.ndalloc++;
    seen.last_dalloc = address;
}
static void on_expand(void *extra, int type, void *address, size_t old_usize, size_t new_usize, uintptr_t raw,
                      uintptr_t args[4])
{
    (void)type, (void)address, (void)raw, (void)args;
    if (extra != &seen) return;
    seen.nexpand++;
    seen.last_old = old_usize;
    seen.last_new = new_usize;
}

TEST(test_experimental_hooks_are_called_and_removed)
{
    hooks_t h = {on_alloc, on_dalloc, on_expand, &seen};
    void *handle = NULL;
    size_t len = sizeof handle;
    CHECK_EQ(mallctl("experimental.hooks.install", &handle, &len, &h, sizeof h), 0);
    CHECK(handle != NULL);
    memset(&seen, 0, sizeof seen);
    void *volatile p = malloc(100);
    CHECK_EQ(seen.nalloc, 1);
    CHECK_EQ(seen.last_alloc_type, HOOK_ALLOC_MALLOC);
    CHECK(seen.last_result == p);
    free(p);
    CHECK_EQ(seen.ndalloc, 1);
    CHECK(seen.last_dalloc == p);
    for (int i = 0; i < 1000; i++) {
        void *volatile q = malloc((size_t)(i % 300) + 1);
        free(q);
    }
    CHECK_EQ(seen.nalloc, 1001);
    CHECK_EQ(seen.ndalloc, 1001);
    p = calloc(10, 10);
    CHECK_EQ(seen.last_alloc_type, HOOK_ALLOC_CALLOC);
    CHECK_EQ(seen.nalloc, 1002); /* once, as calloc */
    free(p);
    /* in-place growth: the expand hook with both usable sizes */
    char *b = mallocx(4 * MiB, 0);
    CHECK(b != NULL);
    CHECK_EQ(xallocx(b, 2 * MiB, 0, 0), 2 * MiB);
    int ne = seen.nexpand;
    size_t got = xallocx(b, 3 * MiB, 0, 0);
    if (got == 3 * MiB) {
        CHECK_EQ(seen.nexpand, ne + 1);
        CHECK(seen.last_old == 2 * MiB && seen.last_new == 3 * MiB);
    }
    dallocx(b, 0);
    CHECK_EQ(mallctl("experimental.hooks.remove", NULL, NULL, &handle, sizeof handle), 0);
    int na = seen.nalloc, nd = seen.ndalloc;
    for (int i = 0; i < 100; i++) {
        void *volatile q = malloc(48);
        free(q);
    }
    CHECK(seen.nalloc == na && seen.ndalloc == nd, "hooks called after remove");
    /* a removed handle is no handle */
    CHECK_EQ(mallctl("experimental.hooks.remove", NULL, NULL, &handle, sizeof handle), EINVAL);
    /* Removing the last hook gives malloc its size table back as it was: every size gets a
     * block of its own class again (a table refilled in other units hands out other bins). */
    for (size_t n = 1; n <= 16384; n += 7) {
        void *q = malloc(n);
        CHECK(q != NULL && malloc_usable_size(q) >= n && malloc_usable_size(q) < 2 * n + 16,
              "malloc(%zu) after the hooks went: usable %zu", n, q ? malloc_usable_size(q) : 0);
        free(q);
    }
    /* four at most, as jemalloc */
    void *hs[5];
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        len = sizeof hs[i];
        if (mallctl("experimental.hooks.install", &hs[i], &len, &h, sizeof h) == 0) ok++;
    }
    CHECK_EQ(ok, 4);
    for (int i = 0; i < 4; i++) CHECK_EQ(mallctl("experimental.hooks.remove", NULL, NULL, &hs[i], sizeof hs[i]), 0);
}

static void on_safety(const char *msg)
{
    if (strstr(msg, "invalid pointer")) _exit(42);
}
static void double_free(void *arg)
{
    (void)arg;
    void (*hook)(const char *) = on_safety;
    mallctl("experimental.hooks.safety_check_abort", NULL, NULL, &hook, sizeof hook);
    char *volatile p = malloc(5000);
    free(p);
    free((char *)p + 16); /* not a block start: reported */
}

TEST(test_safety_check_abort_hook_gets_the_message)
{
    check_child_t r;
    CHECK(check_child(double_free, NULL, 30, &r) == 0);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 42, "child ended with %s; stderr:\n%s",
          check_status_str(r.status), r.err);
}

/* A sized free with another class's size, under a safety_check_abort hook: the hook gets
 * the message naming the block, the call returns and the block stays allocated (jemalloc
 * leaks it likewise); without a hook strata aborts (misuse tests). */
static char size_mismatch_msg[512];
static void on_size_mismatch(const char *msg)
{
    snprintf(size_mismatch_msg, sizeof size_mismatch_msg, "%s", msg);
}

TEST(test_sized_free_mismatch_calls_the_hook_and_returns)
{
    void (*h)(const char *) = on_size_mismatch;
    CHECK_EQ(mallctl("experimental.hooks.safety_check_abort", NULL, NULL, &h, sizeof h), 0);
    size_t sizes[] = {14336, 16384, 100000};
    for (int i = 0; i < 3; i++) {
        char *p = malloc(sizes[i]);
        CHECK(p != NULL);
        memset(p, 0x33, sizes[i]);
        size_mismatch_msg[0] = '\0';
        char want[64];
        snprintf(want, sizeof want, "%p", (void *)p);
        sdallocx(p, sizes[i] * 2, 0);
        CHECK(strstr(size_mismatch_msg, "does not match") && strstr(size_mismatch_msg, want + 2),
              "sdallocx(%p, %zu) of a %zu-byte block: hook message \"%s\"", (void *)p, sizes[i] * 2, sizes[i],
              size_mismatch_msg);
        CHECK(p[0] == 0x33 && p[sizes[i] - 1] == 0x33, "the block changed after a refused sized free");
        free(p);
    }
    h = NULL;
    CHECK_EQ(mallctl("experimental.hooks.safety_check_abort", NULL, NULL, &h, sizeof h), 0);
}

/* slab_sizes: the usual slab of each class in a range has that many pages (clamped to
 * what one region needs), arenas.bin.<i>.slab_size and nregs say so, and the classes
 * work: jemalloc's integration test slab_sizes.sh's setting. */
TEST(test_slab_sizes_sets_the_slab_geometry)
{
    if (!in_child()) {
        check_child_t *r = rerun("test_slab_sizes_sets_the_slab_geometry", "slab_sizes:1-4096:17|100-200:1|128-128:2");
        CHECK_CHILD_EXITED_0(r);
        return;
    }
    unsigned nbins;
    size_t page, len = sizeof nbins;
    CHECK_EQ(mallctl("arenas.nbins", &nbins, &len, NULL, 0), 0);
    len = sizeof page;
    CHECK_EQ(mallctl("arenas.page", &page, &len, NULL, 0), 0);
    for (unsigned i = 0; i < nbins; i++) {
        char name[64];
        size_t size, slab;
        uint32_t nregs;
        len = sizeof size;
        snprintf(name, sizeof name, "arenas.bin.%u.size", i);
        CHECK_EQ(mallctl(name, &size, &len, NULL, 0), 0);
        snprintf(name, sizeof name, "arenas.bin.%u.slab_size", i);
        CHECK_EQ(mallctl(name, &slab, &len, NULL, 0), 0);
        len = sizeof nregs;
        snprintf(name, sizeof name, "arenas.bin.%u.nregs", i);
        CHECK_EQ(mallctl(name, &nregs, &len, NULL, 0), 0);
        size_t want = size == 128 ? 2 * page : size >= 100 && size <= 200 ? page : size <= 4096 ? 17 * page : 0;
        if (want && want < size) want = (size + page - 1) / page * page; /* one region at least */
        if (want && want / size > 8192) want = 8192 * size / page * page;  /* the bitmap's 8,192 regions */
        if (want) CHECK(slab == want, "class %zu: slab_size %zu, want %zu", size, slab, want);
        CHECK(nregs == slab / size, "class %zu: nregs %u in a %zu-byte slab", size, nregs, slab);
        void *p[300];
        for (int k = 0; k < 300; k++) {
            p[k] = mallocx(size, 0);
            CHECK(p[k] != NULL && sallocx(p[k], 0) >= size); /* the 8-byte class serves from 16 */
        }
        for (int k = 0; k < 300; k++) dallocx(p[k], 0);
    }
}

TEST(test_batch_alloc_fills_the_packet)
{
    struct {
        void **ptrs;
        size_t num, size;
        int flags;
    } b;
    void *ptrs[100];
    b.ptrs = ptrs, b.num = 100, b.size = 40, b.flags = MALLOCX_ZERO;
    size_t filled = 0, len = sizeof filled;
    CHECK_EQ(mallctl("experimental.batch_alloc", &filled, &len, &b, sizeof b), 0);
    CHECK_EQ(filled, 100);
    for (int i = 0; i < 100; i++) {
        CHECK(ptrs[i] && sallocx(ptrs[i], 0) >= 40 && ((char *)ptrs[i])[39] == 0);
        free(ptrs[i]);
    }
}

TEST(test_arenas_create_ext_makes_an_arena)
{
    struct {
        void *extent_hooks;
        bool metadata_use_hooks;
    } cfg = {NULL, false};
    unsigned ind = 0;
    size_t len = sizeof ind;
    CHECK_EQ(mallctl("experimental.arenas_create_ext", &ind, &len, &cfg, sizeof cfg), 0);
    CHECK(ind > 0);
    void *p = mallocx(100, MALLOCX_ARENA(ind) | MALLOCX_TCACHE_NONE);
    unsigned owner = 0;
    len = sizeof owner;
    CHECK_EQ(mallctl("arenas.lookup", &owner, &len, &p, sizeof p), 0);
    CHECK_EQ(owner, ind);
    dallocx(p, MALLOCX_TCACHE_NONE);
}

TEST(test_stats_zero_reallocs_is_live)
{
    size_t before = 0, after = 0, len = sizeof before;
    CHECK_EQ(mallctl("stats.zero_reallocs", &before, &len, NULL, 0), 0);
    void *p = malloc(10);
    CHECK(realloc(p, 0) == NULL);
    CHECK_EQ(mallctl("stats.zero_reallocs", &after, &len, NULL, 0), 0);
    CHECK_EQ(after, before + 1); /* no epoch write in between */
}

/* A selection of the names jemalloc 5.3 has and strata lacked, with jemalloc's types:
 * the right size reads, another size is EINVAL. */
TEST(test_new_names_answer_with_jemalloc_types)
{
    static const struct {
        const char *name;
        size_t size;
    } names[] = {
        {"opt.xmalloc", sizeof(bool)},         {"opt.zero_realloc", sizeof(char *)},
        {"opt.stats_interval", 8},             {"opt.stats_interval_opts", sizeof(char *)},
        {"opt.prof_leak_error", sizeof(bool)}, {"opt.hpa", sizeof(bool)},
        {"opt.mutex_max_spin", 8},             {"opt.tcache_nslots_large", sizeof(unsigned)},
        {"opt.hpa_dirty_mult", sizeof(char *)}, {"opt.malloc_conf.env_var", sizeof(char *)},
        {"opt.experimental_infallible_new", sizeof(bool)}, {"config.prof_frameptr", sizeof(bool)},
        {"arenas.hugepage", sizeof(size_t)},   {"stats.metadata_rtree", sizeof(size_t)},
        {"stats.arenas.0.mutexes.extents_dirty.num_ops", 8},
        {"stats.arenas.0.mutexes.large.max_num_thds", 4},
        {"stats.arenas.0.hpa_shard.sec_bytes", sizeof(size_t)},
        {"stats.arenas.0.hpa_shard.nonfull_slabs.0.ndirty_huge", sizeof(size_t)},
        {"stats.mutexes.max_per_bg_thd.num_wait", 8}, {"stats.mutexes.prof_dump.num_ops", 8},
        {"thread.tcache.max", sizeof(size_t)}, {"thread.peak.read", 8}, {"arena.0.name", sizeof(char *)},
        {"stats.arenas.0.name", sizeof(char *)}, {"approximate_stats.active", sizeof(size_t)},
        {"arena.0.retain_grow_limit", sizeof(size_t)}, {"arena.0.oversize_threshold", sizeof(size_t)},
        {"experimental.arenas.0.pactivep", sizeof(size_t *)}, {"stats.arenas.0.hpa_sec_bytes", sizeof(size_t)},
        {"prof.thread_active_init", sizeof(bool)},
    };
    uint64_t e = 1;
    size_t len = sizeof e;
    CHECK_EQ(mallctl("epoch", &e, &len, &e, sizeof e), 0);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char buf[16];
        len = names[i].size;
        int r = mallctl(names[i].name, buf, &len, NULL, 0);
        CHECK(r == 0 && len == names[i].size, "%s: %d, length %zu", names[i].name, r, len);
        len = names[i].size + 1;
        CHECK_EQ(mallctl(names[i].name, buf, &len, NULL, 0), EINVAL);
    }
    /* the per-arena names jemalloc gives its extent locks read strata's one lock */
    void *volatile p = malloc(2 * MiB);
    free(p);
    len = sizeof e;
    CHECK_EQ(mallctl("epoch", &e, &len, &e, sizeof e), 0);
    uint64_t a = 0, b = 0;
    len = sizeof a;
    CHECK_EQ(mallctl("stats.arenas.4096.mutexes.extents.num_ops", &a, &len, NULL, 0), 0);
    CHECK_EQ(mallctl("stats.arenas.4096.mutexes.extents_dirty.num_ops", &b, &len, NULL, 0), 0);
    CHECK(a > 0 && a == b);
}

TEST(test_utilization_query_describes_the_slab)
{
    void *p = malloc(100);
    struct {
        void *slabcur;
        size_t nfree, nregs, size, bin_nfree, bin_nregs;
    } u;
    size_t len = sizeof u;
    CHECK_EQ(mallctl("experimental.utilization.query", &u, &len, &p, sizeof p), 0);
    CHECK(u.nregs > 1 && u.nfree < u.nregs && u.size >= u.nregs * 100 && u.bin_nregs >= u.nregs,
          "nfree %zu nregs %zu size %zu bin %zu/%zu", u.nfree, u.nregs, u.size, u.bin_nfree, u.bin_nregs);
    void *big = malloc(MiB);
    struct {
        size_t nfree, nregs, size;
    } b[2];
    void *ptrs[2] = {p, big};
    len = sizeof b;
    CHECK_EQ(mallctl("experimental.utilization.batch_query", b, &len, ptrs, sizeof ptrs), 0);
    CHECK(b[0].nregs == u.nregs && b[1].nregs == 1 && b[1].nfree == 0 && b[1].size >= MiB);
    free(big);
    free(p);
    const char *name = "cache-arena";
    CHECK_EQ(mallctl("arena.0.name", NULL, NULL, &name, sizeof name), 0);
    const char *got = NULL;
    len = sizeof got;
    CHECK_EQ(mallctl("arena.0.name", &got, &len, NULL, 0), 0);
    CHECK(got && strcmp(got, "cache-arena") == 0);
}

/* Extent hooks wrapping the defaults, recording which were called (as jemalloc's
 * test/include/test/extent_hooks.h does). */
static extent_hooks_t *def_hooks;
static struct {
    bool split, merge, dalloc, decommit, purge, refuse_split;
} ext_seen;
static void *xh_alloc(extent_hooks_t *h, void *a, size_t s, size_t al, bool *z, bool *c, unsigned i)
{
    (void)h, (void)i;
    return def_hooks->alloc(def_hooks, a, s, al, z, c, 0);
}
static bool xh_dalloc(extent_hooks_t *h, void *a, size_t s, bool c, unsigned i)
{
    (void)h, (void)a, (void)s, (void)c, (void)i;
    ext_seen.dalloc = true;
    return true; /* keep the pages: the decommit and purge hooks follow */
}
static void xh_destroy(extent_hooks_t *h, void *a, size_t s, bool c, unsigned i)
{
    (void)h, (void)i;
    def_hooks->destroy(def_hooks, a, s, c, 0);
}
static bool xh_commit(extent_hooks_t *h, void *a, size_t s, size_t o, size_t l, unsigned i)
{
    (void)h, (void)i;
    return def_hooks->commit(def_hooks, a, s, o, l, 0);
}
static bool xh_decommit(extent_hooks_t *h, void *a, size_t s, size_t o, size_t l, unsigned i)
{
    (void)h, (void)a, (void)s, (void)o, (void)l, (void)i;
    ext_seen.decommit = true;
    return true;
}
static bool xh_purge_lazy(extent_hooks_t *h, void *a, size_t s, size_t o, size_t l, unsigned i)
{
    (void)h, (void)i;
    ext_seen.purge = true;
    return def_hooks->purge_lazy(def_hooks, a, s, o, l, 0);
}
static bool xh_purge_forced(extent_hooks_t *h, void *a, size_t s, size_t o, size_t l, unsigned i)
{
    (void)h, (void)i;
    ext_seen.purge = true;
    return def_hooks->purge_forced(def_hooks, a, s, o, l, 0);
}
static bool xh_split(extent_hooks_t *h, void *a, size_t s, size_t sa, size_t sb, bool c, unsigned i)
{
    (void)h, (void)i;
    ext_seen.split = true;
    if (ext_seen.refuse_split) return true;
    return def_hooks->split(def_hooks, a, s, sa, sb, c, 0);
}
static bool xh_merge(extent_hooks_t *h, void *a, size_t sa, void *b, size_t sb, bool c, unsigned i)
{
    (void)h, (void)i;
    ext_seen.merge = true;
    return def_hooks->merge(def_hooks, a, sa, b, sb, c, 0);
}
static extent_hooks_t xhooks = {xh_alloc, xh_dalloc, xh_destroy, xh_commit, xh_decommit,
                                xh_purge_lazy, xh_purge_forced, xh_split, xh_merge};

TEST(test_extent_hooks_called_where_jemalloc_calls_them)
{
    size_t len = sizeof def_hooks;
    CHECK_EQ(mallctl("arena.0.extent_hooks", &def_hooks, &len, NULL, 0), 0);
    unsigned ind;
    extent_hooks_t *nh = &xhooks;
    len = sizeof ind;
    CHECK_EQ(mallctl("arenas.create", &ind, &len, &nh, sizeof nh), 0);
    int flags = MALLOCX_ARENA(ind) | MALLOCX_TCACHE_NONE;
    char purge[64];
    snprintf(purge, sizeof purge, "arena.%u.purge", ind);
    char *p = mallocx(32768, flags);
    CHECK(p != NULL);
    /* an in-place shrink splits */
    memset(&ext_seen, 0, sizeof ext_seen);
    CHECK_EQ(xallocx(p, 16384, 0, flags), 16384);
    CHECK(ext_seen.split, "no split hook call for an in-place shrink");
    /* growing back into the free neighbour merges */
    memset(&ext_seen, 0, sizeof ext_seen);
    CHECK_EQ(xallocx(p, 32768, 0, flags), 32768);
    CHECK(ext_seen.merge, "no merge hook call for an in-place growth");
    /* purging the freed tail: dalloc first, then decommit, then a purge (jemalloc's order) */
    CHECK_EQ(xallocx(p, 16384, 0, flags), 16384);
    memset(&ext_seen, 0, sizeof ext_seen);
    CHECK_EQ(mallctl(purge, NULL, NULL, NULL, 0), 0);
    CHECK(ext_seen.dalloc && ext_seen.decommit && ext_seen.purge, "dalloc %d decommit %d purge %d",
          ext_seen.dalloc, ext_seen.decommit, ext_seen.purge);
    dallocx(p, flags);
    /* a split hook that refuses: the shrink fails, the block keeps its size */
    p = mallocx(65536, flags);
    memset(&ext_seen, 0, sizeof ext_seen);
    ext_seen.refuse_split = true;
    CHECK_EQ(xallocx(p, 16384, 0, flags), 65536);
    CHECK_EQ(sallocx(p, 0), 65536);
    ext_seen.refuse_split = false;
    dallocx(p, flags);
}

/* zero:true: growing a large block in place into reused (dirty) pages zeroes them. */
TEST(test_zero_true_xallocx_growth_is_zeroed)
{
    if (!in_child()) {
        check_child_t *r = rerun("test_zero_true_xallocx_growth_is_zeroed", "zero:true");
        CHECK_CHILD_EXITED_0(r);
        return;
    }
    for (int round = 0; round < 8; round++) {
        char *f = malloc(MiB);
        memset(f, 0xa5, MiB);
        free(f);
        char *p = mallocx(16385, 0);
        size_t u = sallocx(p, 0);
        for (size_t i = 0; i < u; i++) CHECK(p[i] == 0, "byte %zu of a fresh block", i);
        memset(p, 0x11, u);
        size_t g = xallocx(p, u + 1, 0, 0);
        for (size_t i = u; i < g; i++) CHECK(p[i] == 0, "byte %zu of %zu after growth from %zu", i, g, u);
        dallocx(p, 0);
    }
}

TEST(test_xmalloc_aborts_on_out_of_memory)
{
    if (!in_child()) {
        check_child_t *r = rerun("test_xmalloc_aborts_on_out_of_memory", "xmalloc:true");
        CHECK(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT, "child ended with %s; stderr:\n%s",
              check_status_str(r->status), r->err);
        CHECK(strstr(r->err, "out of memory (xmalloc:true)"), "stderr:\n%s", r->err);
        return;
    }
    volatile size_t huge = SIZE_MAX - 4096;
    void *volatile p = malloc(huge);
    CHECK(p == NULL, "malloc(SIZE_MAX - 4096) returned a block");
}

TEST(test_zero_realloc_modes)
{
    if (!in_child()) {
        check_child_t *r = rerun("test_zero_realloc_modes", "zero_realloc:alloc");
        CHECK_CHILD_EXITED_0(r);
        r = rerun("test_zero_realloc_modes", "zero_realloc:abort");
        CHECK(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT, "zero_realloc:abort: %s",
              check_status_str(r->status));
        return;
    }
    void *p = malloc(100);
    void *q = realloc(p, 0); /* alloc: a minimal block; abort: never returns */
    CHECK(q != NULL && malloc_usable_size(q) >= 1);
    free(q);
}

/* zero_realloc:abort goes through the safety_check_abort hook as jemalloc's does: with a
 * hook set, the hook gets the message and realloc returns NULL with the block intact. */
static int zero_realloc_hook_calls;
static void on_zero_realloc(const char *msg)
{
    if (strstr(msg, "zero_realloc:abort")) zero_realloc_hook_calls++;
}

TEST(test_zero_realloc_abort_calls_the_safety_check_hook)
{
    if (!in_child()) {
        check_child_t *r = rerun("test_zero_realloc_abort_calls_the_safety_check_hook", "zero_realloc:abort");
        CHECK_CHILD_EXITED_0(r);
        return;
    }
    void (*h)(const char *) = on_zero_realloc;
    CHECK_EQ(mallctl("experimental.hooks.safety_check_abort", NULL, NULL, &h, sizeof h), 0);
    char *p = malloc(42);
    CHECK(p != NULL);
    memset(p, 0x5a, 42);
    void *q = realloc(p, 0);
    CHECK(q == NULL && zero_realloc_hook_calls == 1, "realloc(p, 0) returned %p, hook called %d times", q,
          zero_realloc_hook_calls);
    CHECK(p[41] == 0x5a);
    free(p);
    h = NULL;
    CHECK_EQ(mallctl("experimental.hooks.safety_check_abort", NULL, NULL, &h, sizeof h), 0);
}

TEST(test_stats_interval_prints_as_the_program_allocates)
{
    if (!in_child()) {
        check_child_t *r = rerun("test_stats_interval_prints_as_the_program_allocates",
                                 "stats_interval:4194304,stats_interval_opts:Jgmdablxe");
        CHECK_CHILD_EXITED_0(r);
        int n = 0;
        for (const char *s = r->err; (s = strstr(s, "\"jemalloc\"")) != NULL; s++) n++;
        CHECK(n >= 4 && n <= 12, "%d prints for 32 MiB at 4 MiB intervals", n);
        return;
    }
    for (int i = 0; i < 64; i++) {
        void *volatile p = malloc(MiB / 2);
        memset(p, 1, 64);
        free(p);
    }
}

TEST(test_prof_leak_error_exits_1_on_leaks)
{
    if (!in_child()) {
        check_child_t *r = rerun("test_prof_leak_error_exits_1_on_leaks",
                                 "prof:true,prof_leak:true,prof_leak_error:true,lg_prof_sample:0");
        CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 1, "child ended with %s; stderr:\n%s",
              check_status_str(r->status), r->err);
        CHECK(strstr(r->err, "memory leaks were detected"), "stderr:\n%s", r->err);
        return;
    }
    static void *volatile leak;
    leak = malloc(12345);
    CHECK(leak != NULL);
}

/* thread.tcache.ncached_max.read_sizeclass reads the calling thread's bin as it is now: it
 * grows while the thread's bursts of 1,000 blocks of 64 B overflow it (up to 128 KiB of
 * blocks), so that they fit. */
static size_t ncached_max(size_t size)
{
    size_t n = 0, len = sizeof n;
    CHECK_EQ(mallctl("thread.tcache.ncached_max.read_sizeclass", &n, &len, &size, sizeof size), 0);
    return n;
}

static void *burst_thread(void *arg)
{
    size_t *out = arg;
    static void *p[1000];
    free(malloc(64));
    out[0] = ncached_max(64);
    for (int round = 0; round < 12; round++) {
        for (int i = 0; i < 1000; i++)
            p[i] = malloc(64);
        for (int i = 0; i < 1000; i++)
            free(p[i]);
    }
    out[1] = ncached_max(64);
    return NULL;
}

TEST(test_ncached_max_follows_the_threads_bursts)
{
    size_t out[2] = {0, 0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, burst_thread, out), 0);
    pthread_join(t, NULL);
    CHECK(out[0] > 0 && out[0] < 1000, "64 B bin starts with %zu", out[0]);
    CHECK(out[1] >= 1000 && out[1] <= 2048, "64 B bin after bursts of 1000: %zu (from %zu)", out[1], out[0]);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

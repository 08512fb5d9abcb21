/*
 * arenas_user.c - user arenas, extent hooks and explicit caches: every mallctl
 * name (arenas.create, arenas.lookup, arena.<i>.{reset,destroy,initialized,extent_hooks},
 * thread.arena, tcache.{create,flush,destroy}, stats.arenas.<i>.*), MALLOCX_ARENA and
 * MALLOCX_TCACHE, hooks that count their calls, hooks that fail (always, at random), a
 * hook that mallocs, fork while a hook runs, and threads racing a reset against frees
 * into their caches. Built for both builds; the prefixed one runs under TSan.
 */
#define _GNU_SOURCE
#include "strata_names.h"

/* TSan cannot start a thread in the child of a multi-threaded fork ("starting new threads
 * after multi-threaded fork is not supported"), and strata starts its background thread in
 * a child once the child has pages to decay: the TSan build runs without it. */
#if defined(__SANITIZE_THREAD__)
const char *malloc_conf = "background_thread:false";
#endif

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* ---------------------------------------------------------------- helpers */
static unsigned arena_create(extent_hooks_t *h)
{
    unsigned ind = 0;
    size_t sz = sizeof ind;
    int err = h ? mallctl("arenas.create", &ind, &sz, &h, sizeof h) : mallctl("arenas.create", &ind, &sz, NULL, 0);
    CHECK(err == 0, "arenas.create: %d", err);
    return ind;
}

/* jemalloc's arena_config_t (experimental.arenas_create_ext) */
typedef struct {
    extent_hooks_t *extent_hooks;
    bool metadata_use_hooks;
} arena_config_t;

static int arena_create_ext(extent_hooks_t *h, bool metadata_use_hooks, unsigned *ind)
{
    arena_config_t c = {h, metadata_use_hooks};
    size_t sz = sizeof *ind;
    return mallctl("experimental.arenas_create_ext", ind, &sz, &c, sizeof c);
}

/* An arena whose hooks serve its extents only (metadata_use_hooks false): tests that count
 * the hooks' calls and bytes for the extents alone. */
static unsigned arena_create_data_hooks(extent_hooks_t *h)
{
    unsigned ind = 0;
    int err = arena_create_ext(h, false, &ind);
    CHECK(err == 0, "experimental.arenas_create_ext: %d", err);
    return ind;
}

static int arena_cmd(unsigned ind, const char *what)
{
    char name[64];
    snprintf(name, sizeof name, "arena.%u.%s", ind, what);
    return mallctl(name, NULL, NULL, NULL, 0);
}

static unsigned lookup(const void *p, int *err)
{
    unsigned ind = ~0u;
    size_t sz = sizeof ind;
    *err = mallctl("arenas.lookup", &ind, &sz, &p, sizeof p);
    return ind;
}

static unsigned owner(const void *p)
{
    int err;
    unsigned ind = lookup(p, &err);
    CHECK(err == 0, "arenas.lookup(%p): %d", p, err);
    return ind;
}

static uint64_t arena_stat(unsigned ind, const char *what)
{
    char name[96];
    snprintf(name, sizeof name, "stats.arenas.%u.%s", ind, what);
    uint64_t epoch = 1; /* statistics are a snapshot refreshed by "epoch", as in jemalloc */
    CHECK(mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0, "epoch");
    uint64_t v64 = 0;
    size_t v = 0, sz = sizeof v;
    bool is64 = strstr(what, "malloc") || strstr(what, "dalloc") || strstr(what, "purged");
    int err = is64 ? (sz = sizeof v64, mallctl(name, &v64, &sz, NULL, 0)) : mallctl(name, &v, &sz, NULL, 0);
    CHECK(err == 0, "%s: %d", name, err);
    return is64 ? v64 : v;
}

static bool initialized(unsigned ind)
{
    char name[64];
    bool v = false;
    size_t sz = sizeof v;
    snprintf(name, sizeof name, "arena.%u.initialized", ind);
    CHECK(mallctl(name, &v, &sz, NULL, 0) == 0);
    return v;
}

static unsigned thread_arena_set(unsigned ind)
{
    unsigned old = 0;
    size_t sz = sizeof old;
    CHECK(mallctl("thread.arena", &old, &sz, &ind, sizeof ind) == 0, "thread.arena := %u", ind);
    return old;
}

static unsigned narenas(void)
{
    unsigned n = 0;
    size_t sz = sizeof n;
    CHECK(mallctl("arenas.narenas", &n, &sz, NULL, 0) == 0);
    return n;
}

/* ---------------------------------------------------------------- counting hooks */
/* Pages come from mmap(PROT_NONE) and alloc leaves them uncommitted unless asked: commit
 * (mprotect) must be called before any block is used, or the test faults. */
static atomic_long n_alloc, n_dalloc, n_destroy, n_commit, n_decommit, n_purge_lazy, n_purge_forced,
    n_split, n_merge;
static atomic_long bytes_alloc, bytes_dalloc, bytes_destroy;
static atomic_int fail_rate; /* percent of calls that fail */
static atomic_int hook_sleep_ms;
static atomic_int in_hook;
static atomic_int hook_mallocs;
static atomic_uint rng_state = 12345;

static bool should_fail(void)
{
    int rate = atomic_load(&fail_rate);
    if (rate == 0)
        return false;
    unsigned s = atomic_fetch_add(&rng_state, 0x9e3779b9u) * 2654435761u;
    return (int)((s >> 16) % 100) < rate;
}

static void *c_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero, bool *commit,
                     unsigned ind)
{
    (void)h, (void)ind;
    atomic_fetch_add(&n_alloc, 1);
    atomic_store(&in_hook, 1);
    int ms = atomic_load(&hook_sleep_ms);
    if (ms) {
        struct timespec ts = {0, ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&hook_mallocs)) { /* a hook may call malloc: served by an ordinary arena */
        void *q = malloc(100);
        CHECK(q != NULL);
        memset(q, 1, 100);
        free(q);
    }
    atomic_store(&in_hook, 0);
    if (new_addr != NULL || should_fail())
        return NULL;
    char *a = check_map_aligned(size, align, *commit ? PROT_READ | PROT_WRITE : PROT_NONE);
    if (a == NULL)
        return NULL;
    *zero = true;
    atomic_fetch_add(&bytes_alloc, (long)size);
    return a;
}

static bool c_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)committed, (void)ind;
    atomic_fetch_add(&n_dalloc, 1);
    if (should_fail())
        return true;
    munmap(addr, size);
    atomic_fetch_add(&bytes_dalloc, (long)size);
    return false;
}

/* dalloc that always opts out: the address space is retained */
static bool c_dalloc_keep(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)addr, (void)size, (void)committed, (void)ind;
    atomic_fetch_add(&n_dalloc, 1);
    return true;
}

static void c_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)committed, (void)ind;
    atomic_fetch_add(&n_destroy, 1);
    munmap(addr, size);
    atomic_fetch_add(&bytes_destroy, (long)size);
}

static bool c_commit(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len, unsigned ind)
{
    (void)h, (void)size, (void)ind;
    atomic_fetch_add(&n_commit, 1);
    if (should_fail())
        return true;
    return mprotect((char *)addr + off, len, PROT_READ | PROT_WRITE) != 0;
}

static bool c_decommit(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len, unsigned ind)
{
    (void)h, (void)size, (void)ind;
    atomic_fetch_add(&n_decommit, 1);
    if (should_fail())
        return true;
    madvise((char *)addr + off, len, MADV_DONTNEED);
    return mprotect((char *)addr + off, len, PROT_NONE) != 0;
}

static bool c_purge_lazy(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len, unsigned ind)
{
    (void)h, (void)addr, (void)size, (void)off, (void)len, (void)ind;
    atomic_fetch_add(&n_purge_lazy, 1);
    return true;
}

static bool c_purge_forced(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len, unsigned ind)
{
    (void)h, (void)size, (void)ind;
    atomic_fetch_add(&n_purge_forced, 1);
    if (should_fail())
        return true;
    return madvise((char *)addr + off, len, MADV_DONTNEED) != 0;
}

static bool c_split(extent_hooks_t *h, void *addr, size_t size, size_t a, size_t b, bool committed, unsigned ind)
{
    (void)h, (void)addr, (void)ind, (void)committed;
    CHECK(a + b == size && a % 4096 == 0 && b % 4096 == 0, "split %zu into %zu + %zu", size, a, b);
    atomic_fetch_add(&n_split, 1);
    return should_fail();
}

static bool c_merge(extent_hooks_t *h, void *a, size_t sa, void *b, size_t sb, bool committed, unsigned ind)
{
    (void)h, (void)committed, (void)ind, (void)sb;
    CHECK((char *)a + sa == (char *)b, "merge of non-adjacent extents %p+%zu, %p", a, sa, b);
    atomic_fetch_add(&n_merge, 1);
    return should_fail();
}

static extent_hooks_t counting_hooks = {c_alloc, c_dalloc, c_destroy, c_commit, c_decommit,
                                        c_purge_lazy, c_purge_forced, c_split, c_merge};

static void counters_zero(void)
{
    atomic_long *all[] = {&n_alloc, &n_dalloc, &n_destroy, &n_commit, &n_decommit, &n_purge_lazy,
                          &n_purge_forced, &n_split, &n_merge, &bytes_alloc, &bytes_dalloc, &bytes_destroy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        atomic_store(all[i], 0);
    atomic_store(&fail_rate, 0);
}

/* ---------------------------------------------------------------- names */
TEST(test_arenas_create_gives_a_new_initialized_arena)
{
    unsigned n0 = narenas(); /* every arena, the oversize one included (jemalloc counts all) */
    unsigned a = arena_create(NULL), b = arena_create(NULL);
    CHECK(a >= n0 && b >= n0 && a != b && narenas() >= n0 + 2, "indices %u %u, narenas %u", a, b, narenas());
    CHECK(initialized(a) && initialized(b) && initialized(MALLCTL_ARENAS_ALL));
    CHECK(!initialized(4000));
    /* reading into a wrong-sized buffer is EINVAL, as jemalloc */
    uint64_t big;
    size_t sz = sizeof big;
    CHECK(mallctl("arenas.create", &big, &sz, NULL, 0) == EINVAL);
    extent_hooks_t *bad = NULL;
    unsigned ind;
    sz = sizeof ind;
    CHECK(mallctl("arenas.create", &ind, &sz, &bad, sizeof bad) == EINVAL);
    CHECK(arena_cmd(a, "destroy") == 0 && arena_cmd(b, "destroy") == 0);
}

TEST(test_mallocx_arena_blocks_are_found_by_arenas_lookup)
{
    unsigned a = arena_create(NULL);
    size_t sizes[] = {16, 100, 4096, 14336, 20000, 300 * KiB, 9 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = mallocx(sizes[i], MALLOCX_ARENA(a) | (i % 2 ? MALLOCX_TCACHE_NONE : 0));
        CHECK(p != NULL);
        memset(p, 0xab, sizes[i]);
        CHECK_EQ(owner(p), a);
        free(p);
    }
    void *q = malloc(64);
    CHECK(owner(q) != a);
    free(q);
    int err, local;
    lookup(&local, &err);
    CHECK_EQ(err, EINVAL);
    CHECK(arena_cmd(a, "destroy") == 0);
}

TEST(test_reset_discards_every_block_and_the_arena_stays_usable)
{
    unsigned a = arena_create(NULL);
    enum { N = 5000 };
    static void *ps[N];
    for (int i = 0; i < N; i++) {
        size_t n = i % 50 == 0 ? 40 * KiB : 16 + (size_t)(i % 700);
        ps[i] = mallocx(n, MALLOCX_ARENA(a) | MALLOCX_TCACHE_NONE);
        CHECK(ps[i] != NULL);
        memset(ps[i], 1, n);
    }
    CHECK(arena_stat(a, "pactive") > 0);
    CHECK(arena_stat(a, "small.nmalloc") > 0 && arena_stat(a, "large.nmalloc") > 0);
    CHECK(arena_cmd(a, "reset") == 0);
    CHECK_EQ(arena_stat(a, "pactive"), 0);
    for (int i = 0; i < N; i++) {
        ps[i] = mallocx(64, MALLOCX_ARENA(a));
        CHECK(ps[i] != NULL && owner(ps[i]) == a);
    }
    for (int i = 0; i < N; i++)
        dallocx(ps[i], 0);
    CHECK(arena_cmd(a, "destroy") == 0);
}

/* Blocks of a user arena freed by threads with caches must not be handed out by those
 * caches after a reset: every later malloc is checked against the arena. */
TEST(test_reset_blocks_freed_into_caches_are_never_handed_out)
{
    unsigned a = arena_create(NULL);
    enum { N = 2000 };
    static void *ps[N];
    for (int i = 0; i < 4; i++) /* this thread has a cache, and it is warm */
        free(malloc(32 + (size_t)i * 16)), free(malloc(32 + (size_t)i * 16));
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < N; i++)
            ps[i] = mallocx(32 + (size_t)(i % 4) * 16, MALLOCX_ARENA(a));
        for (int i = 0; i < N; i++)
            free(ps[i]); /* plain free: would go to this thread's cache */
        CHECK(arena_cmd(a, "reset") == 0);
        for (int i = 0; i < N; i++) {
            ps[i] = malloc(32 + (size_t)(i % 4) * 16);
            CHECK(owner(ps[i]) != a, "malloc handed out block %p of reset arena %u", ps[i], a);
        }
        for (int i = 0; i < N; i++)
            free(ps[i]);
    }
    CHECK(arena_cmd(a, "destroy") == 0);
}

TEST(test_reset_and_destroy_refuse_bad_indices)
{
    CHECK_EQ(arena_cmd(0, "reset"), EFAULT); /* an ordinary arena */
    CHECK_EQ(arena_cmd(narenas(), "destroy"), EFAULT); /* the oversize arena */
    CHECK_EQ(arena_cmd(4000, "reset"), EFAULT);
    CHECK_EQ(arena_cmd(MALLCTL_ARENAS_ALL, "destroy"), EFAULT);
    unsigned a = arena_create(NULL), v;
    size_t sz = sizeof v;
    char name[64];
    snprintf(name, sizeof name, "arena.%u.reset", a);
    CHECK_EQ(mallctl(name, &v, &sz, NULL, 0), EPERM);
    CHECK_EQ(mallctl(name, NULL, NULL, &v, sizeof v), EPERM);
    CHECK_EQ(mallctl("arena.x.reset", NULL, NULL, NULL, 0), ENOENT);
    CHECK(arena_cmd(a, "destroy") == 0);
    CHECK_EQ(arena_cmd(a, "destroy"), EFAULT);
    CHECK_EQ(arena_cmd(a, "reset"), EFAULT);
}

TEST(test_destroy_merges_counters_into_arenas_destroyed_and_reuses_the_index)
{
    unsigned a = arena_create(NULL);
    /* MALLCTL_ARENAS_DESTROYED has statistics once an arena was destroyed (jemalloc) */
    uint64_t before = initialized(MALLCTL_ARENAS_DESTROYED) ? arena_stat(MALLCTL_ARENAS_DESTROYED, "small.nmalloc") : 0;
    for (int i = 0; i < 100; i++)
        free(mallocx(48, MALLOCX_ARENA(a) | MALLOCX_TCACHE_NONE));
    free(mallocx(100 * KiB, MALLOCX_ARENA(a)));
    /* as in jemalloc, regions taken from the bins in batches count (the thread's reserve) */
    uint64_t nmalloc = arena_stat(a, "small.nmalloc");
    CHECK(nmalloc >= 100, "%" PRIu64, nmalloc);
    CHECK(arena_cmd(a, "destroy") == 0);
    CHECK(!initialized(a) && initialized(MALLCTL_ARENAS_DESTROYED));
    CHECK_EQ(arena_stat(MALLCTL_ARENAS_DESTROYED, "small.nmalloc") - before, nmalloc);
    CHECK(arena_stat(MALLCTL_ARENAS_DESTROYED, "large.nmalloc") >= 1);
    char name[64];
    uint64_t v;
    size_t sz = sizeof v;
    snprintf(name, sizeof name, "stats.arenas.%u.small.nmalloc", a);
    CHECK_EQ(mallctl(name, &v, &sz, NULL, 0), ENOENT); /* jemalloc: no such arena */
    unsigned b = arena_create(NULL);
    CHECK_EQ(b, a);
    CHECK_EQ(arena_stat(b, "small.nmalloc"), 0);
    void *p = mallocx(64, MALLOCX_ARENA(b));
    CHECK(p && owner(p) == b);
    free(p);
    CHECK(arena_cmd(b, "destroy") == 0);
}

TEST(test_thread_arena_reads_and_moves_the_thread)
{
    unsigned cur = 0;
    size_t sz = sizeof cur;
    CHECK(mallctl("thread.arena", &cur, &sz, NULL, 0) == 0 && cur < narenas());
    unsigned a = arena_create(NULL);
    CHECK_EQ(thread_arena_set(a), cur);
    void *ps[300];
    for (int i = 0; i < 300; i++) {
        ps[i] = malloc(24 + (size_t)i);
        CHECK(owner(ps[i]) == a, "malloc after thread.arena:=%u came from %u", a, owner(ps[i]));
    }
    void *big = malloc(20 * MiB); /* above oversize_threshold: still the thread's user arena */
    CHECK(big && owner(big) == a);
    free(big);
    CHECK_EQ(arena_cmd(a, "destroy"), EFAULT); /* a thread is bound to it */
    for (int i = 0; i < 300; i++)
        free(ps[i]);
    CHECK(arena_cmd(a, "reset") == 0);
    unsigned bad = 4000;
    CHECK_EQ(mallctl("thread.arena", NULL, NULL, &bad, sizeof bad), EFAULT);
    CHECK_EQ(thread_arena_set(cur), a);
    void *p = malloc(32);
    CHECK(owner(p) == cur);
    free(p);
    CHECK(arena_cmd(a, "destroy") == 0);
    CHECK_EQ(mallctl("thread.arena", NULL, NULL, &a, sizeof a), EFAULT); /* destroyed */
}

static void *tcache_user(void *arg)
{
    unsigned tc = *(unsigned *)arg;
    void *p = mallocx(64, MALLOCX_TCACHE(tc));
    CHECK(p != NULL);
    dallocx(p, MALLOCX_TCACHE(tc));
    CHECK(mallocx(64, MALLOCX_TCACHE(tc)) == p); /* LIFO: the cache handed it back */
    dallocx(p, MALLOCX_TCACHE(tc));
    return NULL;
}

TEST(test_explicit_tcache_create_use_flush_destroy)
{
    unsigned tc;
    size_t sz = sizeof tc;
    CHECK(mallctl("tcache.create", &tc, &sz, NULL, 0) == 0);
    void *p = mallocx(64, MALLOCX_TCACHE(tc));
    CHECK(p != NULL);
    dallocx(p, MALLOCX_TCACHE(tc));
    void *q = malloc(64); /* the thread's own cache does not hold p */
    CHECK(q != p);
    free(q);
    CHECK(mallocx(64, MALLOCX_TCACHE(tc)) == p);
    dallocx(p, MALLOCX_TCACHE(tc));
    /* used from another thread, one at a time */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, tcache_user, &tc) == 0 && pthread_join(t, NULL) == 0);
    CHECK(mallctl("tcache.flush", NULL, NULL, &tc, sizeof tc) == 0);
    CHECK(mallctl("tcache.destroy", NULL, NULL, &tc, sizeof tc) == 0);
    CHECK_EQ(mallctl("tcache.destroy", NULL, NULL, &tc, sizeof tc), EFAULT);
    CHECK_EQ(mallctl("tcache.flush", NULL, NULL, NULL, 0), EFAULT);
    unsigned bad = 4092;
    CHECK_EQ(mallctl("tcache.flush", NULL, NULL, &bad, sizeof bad), EFAULT);
    CHECK_EQ(mallctl("tcache.flush", &tc, &sz, &tc, sizeof tc), EPERM);
    unsigned tc2;
    CHECK(mallctl("tcache.create", &tc2, &sz, NULL, 0) == 0 && tc2 == tc); /* index reused */
    /* user arena blocks never enter an explicit cache */
    unsigned a = arena_create(NULL);
    void *u = mallocx(64, MALLOCX_ARENA(a));
    dallocx(u, MALLOCX_TCACHE(tc2));
    CHECK(arena_cmd(a, "reset") == 0);
    for (int i = 0; i < 100; i++) {
        void *r = mallocx(64, MALLOCX_TCACHE(tc2));
        CHECK(owner(r) != a);
        dallocx(r, MALLOCX_TCACHE(tc2));
    }
    CHECK(mallctl("tcache.destroy", NULL, NULL, &tc2, sizeof tc2) == 0);
    CHECK(arena_cmd(a, "destroy") == 0);
}

static void child_bad_arena(void *arg)
{
    (void)arg;
    mallocx(64, MALLOCX_ARENA(3000));
}
static void child_bad_tcache(void *arg)
{
    (void)arg;
    mallocx(64, MALLOCX_TCACHE(4000));
}
static void child_destroyed_arena(void *arg)
{
    unsigned a = arena_create(NULL);
    CHECK(arena_cmd(a, "destroy") == 0);
    (void)arg;
    mallocx(64, MALLOCX_ARENA(a));
}

TEST(test_mallocx_with_a_bad_arena_or_cache_aborts_with_a_message)
{
    static check_child_t r;
    void (*fns[])(void *) = {child_bad_arena, child_bad_tcache, child_destroyed_arena};
    const char *want[] = {"mallocx(): MALLOCX_ARENA(3000): no such arena",
                          "mallocx(): MALLOCX_TCACHE(4000): no such cache", "no such arena"};
    for (int i = 0; i < 3; i++) {
        CHECK(check_child(fns[i], NULL, 30, &r) == 0);
        CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "status %d", r.status);
        CHECK(strstr(r.err, want[i]) != NULL, "stderr: %s", r.err);
    }
}

/* ---------------------------------------------------------------- hooks */
TEST(test_extent_hooks_read_default_and_replace)
{
    extent_hooks_t *h = NULL;
    size_t sz = sizeof h;
    CHECK(mallctl("arena.0.extent_hooks", &h, &sz, NULL, 0) == 0);
    CHECK(h && h->alloc && h->dalloc && h->destroy && h->split && h->merge && h->purge_forced);
    /* the defaults are callable: a hook may wrap them */
    bool zero = false, commit = false;
    void *p = h->alloc(h, NULL, 2 * MiB, 4096, &zero, &commit, 0);
    CHECK(p && zero && commit);
    memset(p, 1, 2 * MiB);
    h->destroy(h, p, 2 * MiB, true, 0);
    unsigned a = arena_create(NULL);
    char name[64];
    snprintf(name, sizeof name, "arena.%u.extent_hooks", a);
    extent_hooks_t *mine = &counting_hooks, *old = NULL;
    CHECK(mallctl(name, &old, &sz, &mine, sizeof mine) == 0 && old == h);
    CHECK(mallctl(name, &old, &sz, NULL, 0) == 0 && old == &counting_hooks);
    extent_hooks_t *null_hooks = NULL;
    CHECK_EQ(mallctl(name, NULL, NULL, &null_hooks, sizeof null_hooks), EINVAL);
    CHECK_EQ(mallctl("arena.4000.extent_hooks", &old, &sz, NULL, 0), EFAULT);
    CHECK(mallctl(name, NULL, NULL, &h, sizeof h) == 0);
    CHECK(arena_cmd(a, "destroy") == 0);
}

TEST(test_hooks_are_called_for_alloc_commit_split_merge_purge_destroy)
{
    counters_zero();
    static extent_hooks_t keep = {c_alloc, c_dalloc_keep, c_destroy, c_commit, c_decommit,
                                  c_purge_lazy, c_purge_forced, c_split, c_merge};
    unsigned a = arena_create_data_hooks(&keep);
    char *p = mallocx(64 * KiB, MALLOCX_ARENA(a));
    CHECK(p != NULL);
    CHECK(atomic_load(&n_alloc) == 1, "alloc %ld", atomic_load(&n_alloc));
    CHECK(atomic_load(&n_commit) >= 1, "uncommitted pages handed out (commit %ld)", atomic_load(&n_commit));
    CHECK(atomic_load(&n_split) >= 1, "a 64 KiB block from a larger mapping without split");
    memset(p, 7, 64 * KiB); /* faults unless committed */
    char *q = mallocx(64 * KiB, MALLOCX_ARENA(a));
    CHECK(q == p + 64 * KiB, "%p %p", (void *)p, (void *)q); /* lowest address first */
    memset(q, 7, 64 * KiB);
    long merges = atomic_load(&n_merge);
    dallocx(p, 0);
    dallocx(q, 0);
    CHECK(atomic_load(&n_merge) > merges, "freeing neighbours did not ask to merge");
    long purges = atomic_load(&n_purge_forced) + atomic_load(&n_decommit);
    CHECK(arena_cmd(a, "purge") == 0);
    CHECK(atomic_load(&n_dalloc) >= 1, "purge did not offer the pages back");
    CHECK(atomic_load(&n_decommit) + atomic_load(&n_purge_forced) > purges, "purge bypassed the hooks");
    /* purged pages are retained or handed back: not "mapped" (jemalloc's stats.arenas.<i>.mapped) */
    CHECK(arena_stat(a, "dirty_purged") >= 32 && arena_stat(a, "pdirty") == 0, "purged %ju pdirty %ju",
          (uintmax_t)arena_stat(a, "dirty_purged"), (uintmax_t)arena_stat(a, "pdirty"));
    CHECK_EQ(arena_stat(a, "large.ndalloc"), 2);
    long commits = atomic_load(&n_commit);
    p = mallocx(64 * KiB, MALLOCX_ARENA(a));
    memset(p, 9, 64 * KiB); /* decommitted pages come back through commit */
    CHECK(atomic_load(&n_commit) > commits);
    CHECK(arena_cmd(a, "destroy") == 0);
    CHECK(atomic_load(&n_destroy) >= 1);
    CHECK_EQ(atomic_load(&bytes_destroy), atomic_load(&bytes_alloc));
}

/* No purge_* (and no dalloc/decommit): pages are never purged, contents survive. */
TEST(test_hooks_without_purge_never_purge)
{
    counters_zero();
    static extent_hooks_t nopurge = {c_alloc, NULL, c_destroy, c_commit, NULL, NULL, NULL, c_split, c_merge};
    unsigned a = arena_create_data_hooks(&nopurge);
    char *p = mallocx(256 * KiB, MALLOCX_ARENA(a));
    CHECK(p != NULL);
    memset(p, 0x5c, 256 * KiB);
    dallocx(p, 0);
    CHECK(arena_cmd(a, "purge") == 0);
    unsigned char vec[64];
    CHECK(mincore(p, 256 * KiB, vec) == 0);
    for (int i = 0; i < 64; i++)
        CHECK(vec[i] & 1, "page %d purged without a purge hook", i);
    CHECK_EQ((unsigned char)p[4096 * 3 + 17], 0x5c);
    CHECK(arena_cmd(a, "destroy") == 0);
    CHECK_EQ(atomic_load(&bytes_destroy), atomic_load(&bytes_alloc));
}

TEST(test_failing_alloc_hook_gives_null_and_enomem)
{
    counters_zero();
    unsigned a = arena_create(&counting_hooks);
    atomic_store(&fail_rate, 100);
    size_t sizes[] = {64, 4096, 100 * KiB, 3 * MiB};
    for (int i = 0; i < 4; i++) {
        errno = 0;
        CHECK(mallocx(sizes[i], MALLOCX_ARENA(a) | MALLOCX_TCACHE_NONE) == NULL);
        CHECK_EQ(errno, ENOMEM);
    }
    atomic_store(&fail_rate, 0);
    void *p = mallocx(64, MALLOCX_ARENA(a));
    CHECK(p != NULL && owner(p) == a);
    dallocx(p, 0);
    CHECK(arena_cmd(a, "destroy") == 0);
    CHECK_EQ(atomic_load(&bytes_destroy) + atomic_load(&bytes_dalloc), atomic_load(&bytes_alloc));
}

/* Every hook fails 30% of the time: allocations fail cleanly or succeed with usable memory,
 * and after destroy every byte the alloc hook gave is back (dalloc or destroy). */
TEST(test_hooks_failing_at_random_leak_nothing)
{
    counters_zero();
    unsigned a = arena_create(&counting_hooks);
    atomic_store(&fail_rate, 30);
    enum { N = 512 };
    static char *ps[N];
    static size_t ns[N];
    uint64_t r = 88172645463325252ull;
    long iters = check_scaled(20000), nfail = 0;
    for (long it = 0; it < iters; it++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int k = (int)(r % N);
        if (ps[k]) {
            CHECK_EQ((unsigned char)ps[k][ns[k] - 1], (unsigned char)k);
            dallocx(ps[k], 0);
            ps[k] = NULL;
            continue;
        }
        size_t n = (r >> 20) % 8 == 0 ? 4096 + (r >> 32) % (600 * KiB) : 16 + (r >> 32) % 3000;
        errno = 0;
        ps[k] = mallocx(n, MALLOCX_ARENA(a) | MALLOCX_TCACHE_NONE);
        if (ps[k] == NULL) {
            CHECK_EQ(errno, ENOMEM);
            nfail++;
            continue;
        }
        CHECK(owner(ps[k]) == a);
        ns[k] = n;
        memset(ps[k], k, n);
        if (it % 1000 == 0)
            CHECK(arena_cmd(a, "purge") == 0);
    }
    CHECK(nfail > 0, "no allocation failed at a 30%% hook failure rate");
    if (iters > 5000)
        CHECK(atomic_load(&n_split) > 0 && atomic_load(&n_merge) > 0 && atomic_load(&n_commit) > 0);
    atomic_store(&fail_rate, 0);
    CHECK(arena_cmd(a, "destroy") == 0);
    memset(ps, 0, sizeof ps);
    CHECK_EQ(atomic_load(&bytes_destroy) + atomic_load(&bytes_dalloc), atomic_load(&bytes_alloc));
}

TEST(test_a_hook_may_call_malloc)
{
    counters_zero();
    atomic_store(&hook_mallocs, 1);
    unsigned a = arena_create(&counting_hooks);
    for (int i = 0; i < 50; i++) {
        void *p = mallocx(300 * KiB + (size_t)i * 8192, MALLOCX_ARENA(a));
        CHECK(p && owner(p) == a);
        dallocx(p, 0);
        CHECK(arena_cmd(a, "purge") == 0);
    }
    CHECK(atomic_load(&n_alloc) >= 1);
    /* bound to the hooked arena too: the hook's mallocs go elsewhere */
    unsigned old = thread_arena_set(a);
    void *p = malloc(5 * MiB);
    CHECK(p && owner(p) == a);
    free(p);
    thread_arena_set(old);
    atomic_store(&hook_mallocs, 0);
    CHECK(arena_cmd(a, "destroy") == 0);
}

/* ---------------------------------------------------------------- fork and threads */
static void *slow_alloc_thread(void *arg)
{
    unsigned a = *(unsigned *)arg;
    void *p = mallocx(5 * MiB, MALLOCX_ARENA(a)); /* grows: the hook sleeps */
    CHECK(p != NULL);
    memset(p, 3, 5 * MiB);
    dallocx(p, 0);
    return NULL;
}

TEST(test_fork_while_a_hook_runs)
{
    counters_zero();
    unsigned a = arena_create(&counting_hooks);
    atomic_store(&hook_sleep_ms, 300);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, slow_alloc_thread, &a) == 0);
    while (!atomic_load(&in_hook))
        sched_yield();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(20);
        atomic_store(&hook_sleep_ms, 0);
        void *p = malloc(100), *q = mallocx(64, MALLOCX_ARENA(a)), *r = mallocx(3 * MiB, MALLOCX_ARENA(a));
        if (!p || !q || !r || owner(q) != a)
            _exit(2);
        memset(r, 1, 3 * MiB);
        free(p), free(q), free(r);
        _exit(arena_cmd(a, "reset") == 0 ? 0 : 3);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    CHECK(pthread_join(t, NULL) == 0);
    atomic_store(&hook_sleep_ms, 0);
    CHECK(arena_cmd(a, "destroy") == 0);
}

/* Threads allocate from a user arena, free into their caches, and keep allocating
 * ordinary blocks while the main thread resets the arena: no ordinary malloc may ever
 * return a block of the reset arena. */
#define RACE_THREADS 4
static unsigned race_arena;
static atomic_int race_phase, race_done, race_stop;

static void *race_thread(void *arg)
{
    (void)arg;
    void *mine[256];
    int seen = 0;
    while (!atomic_load(&race_stop)) {
        int phase = atomic_load(&race_phase);
        if (phase != seen && phase % 2 == 1) { /* odd: allocate from the arena and free */
            for (int i = 0; i < 256; i++)
                mine[i] = mallocx(16 + (size_t)(i % 8) * 16, MALLOCX_ARENA(race_arena));
            for (int i = 0; i < 256; i++)
                free(mine[i]);
            seen = phase;
            atomic_fetch_add(&race_done, 1);
        }
        for (int i = 0; i < 64; i++) { /* the reset races with these */
            void *p = malloc(16 + (size_t)(i % 8) * 16);
            CHECK(p != NULL);
            if (owner(p) == race_arena)
                check_fail(__FILE__, __LINE__, "owner", " malloc returned %p of the reset arena", p);
            mine[i] = p;
        }
        for (int i = 0; i < 64; i++)
            free(mine[i]);
    }
    return NULL;
}

TEST(test_threads_race_reset_against_frees_from_their_caches)
{
    race_arena = arena_create(NULL);
    pthread_t t[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, race_thread, NULL) == 0);
    long rounds = check_scaled(200);
    for (long r = 0; r < rounds; r++) {
        atomic_store(&race_done, 0);
        atomic_store(&race_phase, (int)(2 * r + 1));
        while (atomic_load(&race_done) < RACE_THREADS)
            sched_yield();
        atomic_store(&race_phase, (int)(2 * r + 2));
        CHECK(arena_cmd(race_arena, "reset") == 0);
        CHECK_EQ(arena_stat(race_arena, "pactive"), 0);
    }
    atomic_store(&race_stop, 1);
    for (int i = 0; i < RACE_THREADS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(arena_cmd(race_arena, "destroy") == 0);
}

/* Threads fill slabs of one hooked arena at once while the alloc hook sleeps (the bin
 * lock is dropped around it): every block stays intact and nothing leaks. */
static unsigned hooked_arena;
static void *hooked_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    enum { K = 400 };
    char *ps[K];
    size_t ns[K];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < K; i++) {
            seed = seed * 1103515245u + 12345u;
            ns[i] = 16 + (seed >> 8) % 3000;
            ps[i] = mallocx(ns[i], MALLOCX_ARENA(hooked_arena) | (i % 2 ? MALLOCX_TCACHE_NONE : 0));
            CHECK(ps[i] != NULL);
            memset(ps[i], (int)(i & 0xff), ns[i]);
        }
        for (int i = 0; i < K; i++) {
            CHECK_EQ((unsigned char)ps[i][ns[i] - 1], (unsigned char)(i & 0xff));
            CHECK_EQ((unsigned char)ps[i][0], (unsigned char)(i & 0xff));
            free(ps[i]);
        }
    }
    return NULL;
}

TEST(test_threads_fill_slabs_of_a_hooked_arena_while_its_hook_sleeps)
{
    counters_zero();
    atomic_store(&hook_sleep_ms, 2);
    static extent_hooks_t nosplit = {c_alloc, c_dalloc, c_destroy, c_commit, c_decommit,
                                     c_purge_lazy, c_purge_forced, NULL, c_merge};
    hooked_arena = arena_create(&nosplit); /* no split: a mapping per slab, many hook calls */
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, hooked_thread, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    atomic_store(&hook_sleep_ms, 0);
    CHECK(atomic_load(&n_alloc) > 8, "alloc hook called %ld times", atomic_load(&n_alloc));
    CHECK(arena_cmd(hooked_arena, "destroy") == 0);
    CHECK_EQ(atomic_load(&bytes_destroy) + atomic_load(&bytes_dalloc), atomic_load(&bytes_alloc));
}

TEST(test_mallctlnametomib_and_bymib_reach_the_new_names)
{
    unsigned a = arena_create(NULL);
    size_t mib[8], miblen = 8;
    CHECK(mallctlnametomib("arena.0.initialized", mib, &miblen) == 0 && miblen == 3);
    mib[1] = a;
    bool init = false;
    size_t sz = sizeof init;
    CHECK(mallctlbymib(mib, miblen, &init, &sz, NULL, 0) == 0 && init);
    miblen = 8;
    CHECK(mallctlnametomib("arena.0.destroy", mib, &miblen) == 0);
    mib[1] = a;
    CHECK(mallctlbymib(mib, miblen, NULL, NULL, NULL, 0) == 0);
    mib[1] = a;
    miblen = 8;
    CHECK(mallctlnametomib("arena.0.initialized", mib, &miblen) == 0);
    mib[1] = a;
    CHECK(mallctlbymib(mib, miblen, &init, &sz, NULL, 0) == 0 && !init);
}

/* ---------------------------------------------------------------- metadata_use_hooks */
/* Hooks that log every range they hand out and how it came back (dalloc or destroy), so a
 * test can tell the arena's metadata blocks (taken at creation and as the arena grows,
 * given back through dalloc at destroy, as jemalloc's base does) from its extents. */
enum { LOG_MAX = 16384, BACK_NONE = 0, BACK_DALLOC, BACK_DESTROY };
static struct {
    void *addr;
    size_t size;
    int back;
} mlog[LOG_MAX];
static int mlog_n;
static atomic_int mlog_fail; /* alloc fails while set */
static pthread_mutex_t mlog_lock = PTHREAD_MUTEX_INITIALIZER;

static void *m_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero, bool *commit,
                     unsigned ind)
{
    (void)h, (void)ind;
    if (new_addr != NULL || atomic_load(&mlog_fail))
        return NULL;
    char *a = check_map_aligned(size, align, PROT_READ | PROT_WRITE);
    if (a == NULL)
        return NULL;
    *zero = *commit = true;
    pthread_mutex_lock(&mlog_lock);
    CHECK(mlog_n < LOG_MAX, "more than %d hook allocations", LOG_MAX);
    if (mlog_n < LOG_MAX)
        mlog[mlog_n++] = (typeof(mlog[0])){a, size, BACK_NONE};
    pthread_mutex_unlock(&mlog_lock);
    return a;
}

/* Marks what comes back; a range is split and merged by strata, so a piece is found by the
 * logged range that contains it. */
static void mlog_back(void *addr, size_t size, int how)
{
    pthread_mutex_lock(&mlog_lock);
    int found = 0;
    for (int i = 0; i < mlog_n; i++) {
        char *b = mlog[i].addr;
        if ((char *)addr >= b && (char *)addr + size <= b + mlog[i].size) {
            CHECK(mlog[i].back == BACK_NONE || mlog[i].back == how || mlog[i].size != size,
                  "range %p+%zu given back twice", addr, size);
            if (addr == b && size == mlog[i].size)
                mlog[i].back = how;
            found = 1;
        }
    }
    CHECK(found, "hook given back %p+%zu, which it never handed out", addr, size);
    pthread_mutex_unlock(&mlog_lock);
}

static bool m_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)committed, (void)ind;
    mlog_back(addr, size, BACK_DALLOC);
    munmap(addr, size);
    return false;
}

static void m_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)committed, (void)ind;
    mlog_back(addr, size, BACK_DESTROY);
    munmap(addr, size);
}

/* No split or merge: every extent is one logged range, given back whole. */
static extent_hooks_t logging_hooks = {m_alloc, m_dalloc, m_destroy, NULL, NULL, NULL, NULL, NULL, NULL};

static void mlog_reset(void)
{
    pthread_mutex_lock(&mlog_lock);
    mlog_n = 0;
    pthread_mutex_unlock(&mlog_lock);
    atomic_store(&mlog_fail, 0);
}

static int mlog_count(void)
{
    pthread_mutex_lock(&mlog_lock);
    int n = mlog_n;
    pthread_mutex_unlock(&mlog_lock);
    return n;
}

/* Many slabs of several classes and many large extents, half freed, the rest left for the
 * destroy: the arena's descriptors and bitmaps outgrow its first metadata block. */
static void fill_hooked_arena(unsigned a)
{
    enum { N = 3000 };
    static void *ps[N];
    for (int i = 0; i < N; i++) {
        size_t n = i % 3 == 0 ? 16 * KiB + (size_t)(i % 7) * 4096 : (size_t)(i % 5 + 1) * 4000;
        ps[i] = mallocx(n, MALLOCX_ARENA(a) | MALLOCX_TCACHE_NONE);
        CHECK(ps[i] != NULL && owner(ps[i]) == a);
        memset(ps[i], i, n < 64 ? n : 64);
    }
    for (int i = 0; i < N; i += 2)
        dallocx(ps[i], MALLOCX_TCACHE_NONE);
}

TEST(test_metadata_use_hooks_takes_metadata_from_the_alloc_hook)
{
    /* true: the alloc hook is called at creation, before any allocation */
    mlog_reset();
    unsigned a;
    CHECK_EQ(arena_create_ext(&logging_hooks, true, &a), 0);
    CHECK(mlog_count() == 1, "creation called the alloc hook %d times", mlog_count());
    void *first = mlog[0].addr;
    fill_hooked_arena(a);
    int with = mlog_count();
    CHECK(arena_cmd(a, "destroy") == 0);
    /* Everything went back, and the metadata block taken at creation through dalloc. */
    for (int i = 0; i < mlog_n; i++)
        CHECK(mlog[i].back != BACK_NONE, "range %p+%zu never given back", mlog[i].addr, mlog[i].size);
    CHECK(mlog[0].addr == first && mlog[0].back == BACK_DALLOC, "creation's block came back by %d", mlog[0].back);

    /* false: no call at creation, and the same workload takes fewer ranges (no metadata) */
    mlog_reset();
    unsigned b;
    CHECK_EQ(arena_create_ext(&logging_hooks, false, &b), 0);
    CHECK(mlog_count() == 0, "creation without metadata_use_hooks called the alloc hook %d times", mlog_count());
    fill_hooked_arena(b);
    int without = mlog_count();
    CHECK(arena_cmd(b, "destroy") == 0);
    for (int i = 0; i < mlog_n; i++)
        CHECK(mlog[i].back != BACK_NONE, "range %p+%zu never given back", mlog[i].addr, mlog[i].size);
    /* the creation's block and at least one more as the descriptors grew */
    CHECK(with >= without + 2, "metadata blocks: %d ranges with metadata_use_hooks, %d without", with, without);
}

/* arenas.create with hooks is jemalloc's arena_config_default: metadata_use_hooks true. */
TEST(test_arenas_create_with_hooks_takes_metadata_from_them)
{
    mlog_reset();
    unsigned a = arena_create(&logging_hooks);
    CHECK(mlog_count() == 1, "creation called the alloc hook %d times", mlog_count());
    void *p = mallocx(100, MALLOCX_ARENA(a) | MALLOCX_TCACHE_NONE);
    CHECK(p != NULL && owner(p) == a);
    dallocx(p, MALLOCX_TCACHE_NONE);
    /* new hooks later: the metadata still goes back to the ones it came from */
    static extent_hooks_t other;
    other = logging_hooks;
    char name[64];
    snprintf(name, sizeof name, "arena.%u.extent_hooks", a);
    extent_hooks_t *o = &other;
    CHECK(mallctl(name, NULL, NULL, &o, sizeof o) == 0);
    CHECK(arena_cmd(a, "destroy") == 0);
    CHECK_EQ(mlog[0].back, BACK_DALLOC);
}

/* A hook that cannot supply the metadata fails the creation with EAGAIN, as jemalloc's
 * arena_new does; the index is taken by the next creation and nothing leaks. */
TEST(test_failing_metadata_hook_fails_arena_creation)
{
    mlog_reset();
    unsigned n0 = narenas(), a = ~0u;
    atomic_store(&mlog_fail, 1);
    CHECK_EQ(arena_create_ext(&logging_hooks, true, &a), EAGAIN);
    CHECK_EQ(a, ~0u);
    unsigned ind = ~0u;
    size_t sz = sizeof ind;
    extent_hooks_t *h = &logging_hooks;
    CHECK_EQ(mallctl("arenas.create", &ind, &sz, &h, sizeof h), EAGAIN);
    CHECK(narenas() <= n0 + 1, "failed creations took %u indices", narenas() - n0);
    /* without metadata from the hook the arena is made, and its first allocation fails */
    unsigned b;
    CHECK_EQ(arena_create_ext(&logging_hooks, false, &b), 0);
    errno = 0;
    CHECK(mallocx(64, MALLOCX_ARENA(b) | MALLOCX_TCACHE_NONE) == NULL);
    CHECK_EQ(errno, ENOMEM);
    atomic_store(&mlog_fail, 0);
    void *p = mallocx(64, MALLOCX_ARENA(b) | MALLOCX_TCACHE_NONE);
    CHECK(p != NULL && owner(p) == b);
    dallocx(p, MALLOCX_TCACHE_NONE);
    CHECK(arena_cmd(b, "destroy") == 0);
    /* the failed index is reused; a good hook now makes the arena */
    unsigned c;
    CHECK_EQ(arena_create_ext(&logging_hooks, true, &c), 0);
    CHECK(c < n0 + 2, "index %u after %u", c, n0);
    CHECK(arena_cmd(c, "destroy") == 0);
    for (int i = 0; i < mlog_n; i++)
        CHECK(mlog[i].back != BACK_NONE, "range %p+%zu never given back", mlog[i].addr, mlog[i].size);
}

/* Arenas with metadata from their hooks created and destroyed in a loop, filled each time:
 * under ASan every block comes back and no descriptor or bitmap outlives its arena. */
TEST(test_hooked_metadata_arenas_created_filled_destroyed)
{
    for (int r = 0; r < 4; r++) {
        mlog_reset();
        unsigned a;
        CHECK_EQ(arena_create_ext(&logging_hooks, true, &a), 0);
        fill_hooked_arena(a);
        CHECK(arena_cmd(a, "reset") == 0);
        fill_hooked_arena(a);
        CHECK(arena_cmd(a, "destroy") == 0);
        /* an ordinary user arena may take the index next: the pools serve it */
        unsigned b = arena_create(NULL);
        void *p = mallocx(5000, MALLOCX_ARENA(b) | MALLOCX_TCACHE_NONE);
        CHECK(p != NULL);
        dallocx(p, MALLOCX_TCACHE_NONE);
        CHECK(arena_cmd(b, "destroy") == 0);
        for (int i = 0; i < mlog_n; i++)
            CHECK(mlog[i].back != BACK_NONE, "range %p+%zu never given back", mlog[i].addr, mlog[i].size);
    }
}

/* A purge from another thread (arena.<i>.purge here, a background thread's decay in
 * general) takes a batch of dirty extents while destroy has the extent lock dropped around
 * its own hooks: destroy waits for it, and every extent is destroyed, none coming back to
 * the destroyed arena. dalloc declines (the pages stay retained) and sleeps, so the
 * batches stay out long enough to overlap. */
static atomic_int racer_stop, destroy_in_hooks;
static pthread_t destroyer;
static bool m_dalloc_slow_keep(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)addr, (void)size, (void)committed, (void)ind;
    if (pthread_equal(pthread_self(), destroyer))
        atomic_store(&destroy_in_hooks, 1); /* destroy's purge: its extent lock is dropped */
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    return true;
}
static extent_hooks_t slow_keep_hooks = {m_alloc, m_dalloc_slow_keep, m_destroy, NULL, NULL, NULL, NULL, NULL, NULL};

static void *purge_racer(void *arg)
{
    unsigned a = (unsigned)(uintptr_t)arg;
    while (!atomic_load(&destroy_in_hooks) && !atomic_load(&racer_stop))
        sched_yield();
    while (!atomic_load(&racer_stop))
        (void)arena_cmd(a, "purge"); /* EFAULT once the arena is gone */
    return NULL;
}

TEST(test_destroy_waits_for_a_purge_it_raced)
{
    for (int round = 0; round < 3; round++) {
        mlog_reset();
        unsigned a = arena_create_data_hooks(&slow_keep_hooks);
        enum { N = 400 };
        static void *ps[N];
        for (int i = 0; i < N; i++) {
            ps[i] = mallocx(8 * KiB, MALLOCX_ARENA(a) | MALLOCX_TCACHE_NONE);
            CHECK(ps[i] != NULL);
        }
        for (int i = 0; i < N; i++)
            dallocx(ps[i], MALLOCX_TCACHE_NONE); /* no merge hook: N dirty extents */
        atomic_store(&racer_stop, 0);
        atomic_store(&destroy_in_hooks, 0);
        destroyer = pthread_self();
        pthread_t t;
        CHECK(pthread_create(&t, NULL, purge_racer, (void *)(uintptr_t)a) == 0);
        CHECK(arena_cmd(a, "destroy") == 0);
        atomic_store(&racer_stop, 1);
        pthread_join(t, NULL);
        for (int i = 0; i < mlog_n; i++)
            CHECK(mlog[i].back == BACK_DESTROY, "round %d: range %p+%zu %s after destroy", round, mlog[i].addr,
                  mlog[i].size, mlog[i].back == BACK_NONE ? "never given back" : "came back by dalloc");
    }
}

int main(int argc, char **argv) { return check_main(argc, argv); }

/*
 * background.c - memory going back on its own: the decay/purge/background-thread mallctls
 * (read, write, bad values), muzzy pages, malloc_trim, background threads returning an
 * idle process's pages within the decay time, sleeping without polling when nothing is
 * dirty, toggled on and off under load, across fork and thread exit.
 */
#define _GNU_SOURCE
#include "strata_names.h"
#include "mallctl_read.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

/* Sanitizers do not support starting threads in the child of a multi-threaded fork (TSan
 * refuses; gcc 12's ASan can hang): there the child only checks that none survived. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CHILD_THREADS_OK false
#else
#define CHILD_THREADS_OK true
#endif

/* The highest ordinary arena index: the oversize arena (arenas.narenas counts every
 * arena, the oversize one included, as jemalloc's does). */
static unsigned n_arenas(void)
{
    unsigned n = 0;
    size_t sz = sizeof n;
    CHECK(mallctl("arenas.narenas", &n, &sz, NULL, 0) == 0);
    return n - 1;
}

static void write_bool(const char *name, bool v)
{
    int err = mallctl(name, NULL, NULL, &v, sizeof v);
    CHECK(err == 0, "mallctl(%s, %d) = %d", name, v, err);
}

/* Every arena (and the default for new ones) gets these decay times. */
static void set_decay_all(ssize_t dirty_ms, ssize_t muzzy_ms)
{
    char name[64];
    CHECK(mallctl("arenas.dirty_decay_ms", NULL, NULL, &dirty_ms, sizeof dirty_ms) == 0);
    CHECK(mallctl("arenas.muzzy_decay_ms", NULL, NULL, &muzzy_ms, sizeof muzzy_ms) == 0);
    for (unsigned i = 0; i <= n_arenas(); i++) {
        snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", i);
        CHECK(mallctl(name, NULL, NULL, &dirty_ms, sizeof dirty_ms) == 0, "%s", name);
        snprintf(name, sizeof name, "arena.%u.muzzy_decay_ms", i);
        CHECK(mallctl(name, NULL, NULL, &muzzy_ms, sizeof muzzy_ms) == 0, "%s", name);
    }
}

/* Statistics are a snapshot refreshed by "epoch", as in jemalloc. */
static void epoch(void)
{
    uint64_t e = 1;
    CHECK(mallctl("epoch", NULL, NULL, &e, sizeof e) == 0);
}
static size_t pdirty(void) { epoch(); return read_size("stats.arenas.4096.pdirty"); }
static size_t pmuzzy(void) { epoch(); return read_size("stats.arenas.4096.pmuzzy"); }

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Allocate and touch n blocks of size bytes, then free them all: n*size dirty bytes. */
static void burst(size_t n, size_t size)
{
    void *p[64];
    CHECK(n <= 64);
    for (size_t i = 0; i < n; i++) {
        p[i] = malloc(size);
        CHECK(p[i] != NULL);
        memset(p[i], 0x5a, size);
    }
    for (size_t i = 0; i < n; i++) free(p[i]);
}

/* Polls (without allocating) until pred() or the deadline; returns pred(). */
static bool wait_for(bool (*pred)(void), long timeout_ms)
{
    for (long t = 0; t < timeout_ms && !pred(); t += 20) sleep_ms(20);
    return pred();
}
static bool nothing_dirty(void) { return pdirty() == 0; }

TEST(test_decay_mallctls_read_write_and_reject_bad_values)
{
    ssize_t v = 0, bad = -2;
    size_t sz = sizeof v;
    CHECK(mallctl("opt.dirty_decay_ms", &v, &sz, NULL, 0) == 0 && v == 10000, "%zd", v);
    CHECK(mallctl("opt.muzzy_decay_ms", &v, &sz, NULL, 0) == 0 && v == 0, "%zd", v);
    CHECK(mallctl("opt.dirty_decay_ms", NULL, NULL, &v, sizeof v) == EPERM);
    CHECK(mallctl("opt.muzzy_decay_ms", NULL, NULL, &v, sizeof v) == EPERM);

    ssize_t nv = 1234, old = 0;
    CHECK(mallctl("arenas.dirty_decay_ms", &old, &sz, &nv, sizeof nv) == 0 && old == 10000);
    CHECK(mallctl("arenas.dirty_decay_ms", &v, &sz, NULL, 0) == 0 && v == 1234);
    CHECK(mallctl("arenas.dirty_decay_ms", NULL, NULL, &bad, sizeof bad) == EINVAL);
    CHECK(mallctl("arenas.dirty_decay_ms", NULL, NULL, &nv, sizeof(int)) == EINVAL);
    CHECK(mallctl("arenas.muzzy_decay_ms", &old, &sz, &nv, sizeof nv) == 0 && old == 0);
    CHECK(mallctl("arenas.muzzy_decay_ms", &v, &sz, NULL, 0) == 0 && v == 1234);
    CHECK(mallctl("arenas.muzzy_decay_ms", NULL, NULL, &bad, sizeof bad) == EINVAL);

    nv = -1;
    CHECK(mallctl("arena.0.dirty_decay_ms", &old, &sz, &nv, sizeof nv) == 0 && old == 10000, "%zd", old);
    CHECK(mallctl("arena.0.dirty_decay_ms", &v, &sz, NULL, 0) == 0 && v == -1);
    CHECK(mallctl("arena.0.dirty_decay_ms", NULL, NULL, &bad, sizeof bad) == EINVAL);
    CHECK(mallctl("arena.0.muzzy_decay_ms", &old, &sz, &nv, sizeof nv) == 0 && old == 0);
    CHECK(mallctl("arena.0.muzzy_decay_ms", &v, &sz, NULL, 0) == 0 && v == -1);
    char name[64];
    snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", n_arenas() + 1);
    CHECK(mallctl(name, &v, &sz, NULL, 0) == EFAULT, "%s", name);
    CHECK(mallctl("arena.4096.dirty_decay_ms", &v, &sz, NULL, 0) == EFAULT);

    CHECK(mallctl("arena.0.decay", NULL, NULL, NULL, 0) == 0);
    CHECK(mallctl("arena.0.purge", NULL, NULL, NULL, 0) == 0);
    CHECK(mallctl("arena.4096.decay", NULL, NULL, NULL, 0) == 0);
    CHECK(mallctl("arena.4096.purge", NULL, NULL, NULL, 0) == 0);
    CHECK(mallctl("arena.0.purge", &v, &sz, NULL, 0) == EPERM);
    CHECK(mallctl("arena.0.decay", NULL, NULL, &v, sizeof v) == EPERM);
    snprintf(name, sizeof name, "arena.%u.purge", n_arenas() + 1); /* arenas.narenas: all (Redis) */
    CHECK(mallctl(name, NULL, NULL, NULL, 0) == 0, "%s", name);
    snprintf(name, sizeof name, "arena.%u.purge", n_arenas() + 2);
    CHECK(mallctl(name, NULL, NULL, NULL, 0) == EFAULT, "%s", name);
    CHECK(mallctl("arena.x.purge", NULL, NULL, NULL, 0) == ENOENT);
    CHECK(mallctl("arena.0.purgex", NULL, NULL, NULL, 0) == ENOENT);

    /* By MIB, as jemalloc programs do for the per-arena names. */
    size_t mib[4], miblen = 4;
    CHECK(mallctlnametomib("arena.0.dirty_decay_ms", mib, &miblen) == 0 && miblen == 3);
    mib[1] = 0;
    CHECK(mallctlbymib(mib, miblen, &v, &sz, NULL, 0) == 0 && v == -1);
    miblen = 4;
    CHECK(mallctlnametomib("stats.arenas.0.pdirty", mib, &miblen) == 0 && miblen == 4);
    mib[2] = 4096;
    size_t pd = 1, psz = sizeof pd;
    CHECK(mallctlbymib(mib, miblen, &pd, &psz, NULL, 0) == 0);
    CHECK(mallctl("stats.arenas.0.pdirty", NULL, NULL, &pd, sizeof pd) == EPERM);
    snprintf(name, sizeof name, "stats.arenas.%u.pmuzzy", n_arenas() + 1);
    CHECK(mallctl(name, &pd, &psz, NULL, 0) == ENOENT); /* no such arena (jemalloc) */
}

TEST(test_background_thread_mallctls_read_write_and_reject_bad_values)
{
    /* On by default (an idle process returns memory untuned); threads start lazily. */
    CHECK(read_bool("opt.background_thread"));
    write_bool("background_thread", false);
    CHECK(!read_bool("background_thread"));
    size_t maxbg = read_size("opt.max_background_threads");
    CHECK(maxbg >= 1);
    CHECK(read_size("max_background_threads") == maxbg);
    const char *s = NULL;
    size_t ssz = sizeof s;
    CHECK(mallctl("opt.thp", &s, &ssz, NULL, 0) == 0 && strcmp(s, "default") == 0);
    CHECK(mallctl("opt.metadata_thp", &s, &ssz, NULL, 0) == 0 && strcmp(s, "disabled") == 0);
    CHECK(mallctl("opt.thp", NULL, NULL, &s, sizeof s) == EPERM);
    bool t = true;
    CHECK(mallctl("opt.background_thread", NULL, NULL, &t, sizeof t) == EPERM);
    CHECK(mallctl("background_thread", NULL, NULL, &t, sizeof(int)) == EINVAL);
    size_t zero = 0, two = 2, old = 0, osz = sizeof old;
    CHECK(mallctl("max_background_threads", NULL, NULL, &zero, sizeof zero) == EINVAL);
    CHECK(mallctl("max_background_threads", &old, &osz, &two, sizeof two) == 0 && old == maxbg);
    CHECK(read_size("max_background_threads") == 2);
    CHECK(read_size("stats.background_thread.num_threads") == 0);
    CHECK(read_u64("stats.background_thread.num_runs") == 0);
    CHECK(read_u64("stats.background_thread.run_interval") == 0);
    CHECK(mallctl("stats.background_thread.num_threads", NULL, NULL, &two, sizeof two) == EPERM);
    write_bool("background_thread", true);
    CHECK(read_bool("background_thread"));
    write_bool("background_thread", false);
    CHECK(!read_bool("background_thread"));
    CHECK(read_size("stats.background_thread.num_threads") == 0);
    /* The limit strata sees (0 without a cgroup limit) and its purge count. */
    (void)read_u64("stats.mem_limit");
    CHECK(read_u64("stats.mem_limit_purges") == 0);
    size_t h = 1;
    CHECK(mallctl("opt.limit_headroom", &h, &osz, NULL, 0) == 0 && h == 0);
}

TEST(test_purge_and_malloc_trim_return_dirty_pages)
{
    set_decay_all(-1, 0); /* nothing purges by age: only the calls below */
    burst(8, 1 * MiB);
    CHECK(pdirty() >= 8 * MiB / 4096 / 2, "pdirty %zu", pdirty());
    CHECK(mallctl("arena.4096.purge", NULL, NULL, NULL, 0) == 0);
    CHECK_EQ(pdirty(), 0);
    burst(8, 1 * MiB);
    CHECK(pdirty() > 0);
    CHECK(malloc_trim(0) == 1);
    CHECK_EQ(pdirty(), 0);
}

/* A decay step counts every page freed since the previous step, even when a call in
 * between (a background wake, arena.<i>.decay) already saw them: that call must not move
 * the step's starting point, or the next step finds nothing new and purges freshly freed
 * pages as if they were old. */
TEST(test_decay_step_counts_frees_seen_by_a_call_between_steps)
{
    write_bool("background_thread", false);
    set_decay_all(10000, 0); /* steps of 100 ms; a new step starts now */
    CHECK(mallctl("arena.4096.purge", NULL, NULL, NULL, 0) == 0);
    burst(8, 1 * MiB);
    CHECK(mallctl("arena.4096.decay", NULL, NULL, NULL, 0) == 0); /* same step: no purge */
    size_t before = pdirty();
    CHECK(before >= 8 * MiB / 4096 / 2, "pdirty %zu", before);
    sleep_ms(250);
    CHECK(mallctl("arena.4096.decay", NULL, NULL, NULL, 0) == 0); /* the next step */
    /* Freed 0.25 s ago with a 10 s decay time: nearly all stays (h(2) > 0.99). */
    CHECK(pdirty() >= before - before / 16, "pdirty %zu of %zu", pdirty(), before);
}

TEST(test_muzzy_stage_madv_free_then_purged_on_its_own_clock)
{
    set_decay_all(0, -1); /* dirty pages go muzzy at once; muzzy ones stay */
    burst(8, 1 * MiB);
    CHECK_EQ(pdirty(), 0);
    size_t m = pmuzzy();
    CHECK(m >= 8 * MiB / 4096 / 2, "pmuzzy %zu", m);
    /* Muzzy pages are reused before fresh ones. */
    void *p = malloc(1 * MiB);
    CHECK(p != NULL && pmuzzy() < m);
    memset(p, 1, 1 * MiB);
    free(p);
    set_decay_all(0, 0); /* the muzzy clock now purges at once */
    CHECK(mallctl("arena.4096.decay", NULL, NULL, NULL, 0) == 0);
    CHECK_EQ(pmuzzy(), 0);
    CHECK_EQ(pdirty(), 0);
}

TEST(test_background_thread_returns_idle_memory_within_decay_time)
{
    set_decay_all(300, 0);
    write_bool("background_thread", true);
    burst(16, 1 * MiB);
    CHECK(pdirty() > 0, "the burst left nothing dirty: the test would prove nothing");
    /* No allocator call from here on: only the background thread can purge. */
    CHECK(wait_for(nothing_dirty, 300 + 1500), "pdirty still %zu", pdirty());
    CHECK(read_size("stats.background_thread.num_threads") >= 1);
    CHECK(read_u64("stats.background_thread.num_runs") >= 1);
    write_bool("background_thread", false);
    CHECK_EQ(read_size("stats.background_thread.num_threads"), 0);
}

TEST(test_background_thread_sleeps_without_polling_when_nothing_is_dirty)
{
    set_decay_all(100, 0);
    write_bool("background_thread", true);
    burst(4, 1 * MiB);
    CHECK(wait_for(nothing_dirty, 2000));
    sleep_ms(400); /* the decay time (100 ms) passes with nothing new: the clock stops */
    uint64_t runs = read_u64("stats.background_thread.num_runs");
    sleep_ms(600);
    CHECK_EQ(read_u64("stats.background_thread.num_runs"), runs);
    /* And it wakes when pages are dirty again. */
    burst(4, 1 * MiB);
    CHECK(wait_for(nothing_dirty, 2000));
    CHECK(read_u64("stats.background_thread.num_runs") > runs);
}

/* With decay disabled the background thread has no clock to keep: frees must not wake it
 * (each pass found no deadline, and the next free woke it again: a context switch or two
 * a free in a busy program). */
TEST(test_background_thread_stays_asleep_with_decay_disabled)
{
    set_decay_all(-1, -1);
    write_bool("background_thread", true);
    burst(4, 1 * MiB); /* the threads start at a slow path */
    sleep_ms(100);
    uint64_t runs = read_u64("stats.background_thread.num_runs");
    for (int i = 0; i < 10; i++) {
        burst(4, 1 * MiB);
        sleep_ms(20); /* time for a woken thread to run */
    }
    uint64_t woke = read_u64("stats.background_thread.num_runs") - runs;
    CHECK(woke <= 1, "%llu runs for 10 bursts", (unsigned long long)woke);
    write_bool("background_thread", false);
    set_decay_all(10000, 0);
}

static atomic_bool load_stop;
static void *load_main(void *arg)
{
    uint64_t x = (uintptr_t)arg * 2654435761u + 1;
    void *keep[32] = {0};
    while (!atomic_load(&load_stop)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned k = x % 32;
        free(keep[k]);
        size_t size = (x >> 8) % 4 == 0 ? 64 * 1024 + (x >> 16) % (2 * MiB) : 16 + (x >> 16) % 2048;
        keep[k] = malloc(size);
        CHECK(keep[k] != NULL);
        memset(keep[k], 1, size < 4096 ? size : 4096);
    }
    for (int k = 0; k < 32; k++) free(keep[k]);
    return NULL;
}

TEST(test_background_thread_toggled_under_load)
{
    set_decay_all(50, 20);
    pthread_t th[4];
    atomic_store(&load_stop, false);
    for (uintptr_t i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, load_main, (void *)(i + 1)) == 0);
    long rounds = check_scaled(30);
    for (long r = 0; r < rounds; r++) {
        write_bool("background_thread", true);
        sleep_ms(10);
        if (r % 5 == 0) {
            size_t n = 1 + (size_t)r % 3;
            CHECK(mallctl("max_background_threads", NULL, NULL, &n, sizeof n) == 0);
        }
        write_bool("background_thread", false);
        CHECK_EQ(read_size("stats.background_thread.num_threads"), 0);
    }
    write_bool("background_thread", true);
    sleep_ms(50);
    atomic_store(&load_stop, true);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK(wait_for(nothing_dirty, 3000), "pdirty %zu", pdirty());
    write_bool("background_thread", false);
}

static void *exit_main(void *arg)
{
    (void)arg;
    burst(4, 512 * 1024);
    void *p = malloc(100);
    free(p);
    return NULL;
}

TEST(test_background_thread_with_threads_that_exit)
{
    set_decay_all(100, 0);
    write_bool("background_thread", true);
    for (int round = 0; round < check_scaled(20); round++) {
        pthread_t th[4];
        for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, exit_main, NULL) == 0);
        for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    }
    /* decay 100 ms: a few background wakeups; 10 s leaves room for a loaded machine running
     * a sanitizer build (3 s once missed there), and still fails if nothing purges. */
    CHECK(wait_for(nothing_dirty, 10000), "pdirty %zu", pdirty());
    write_bool("background_thread", false);
}

TEST(test_background_thread_comes_back_lazily_in_a_forked_child)
{
    set_decay_all(100, 0);
    write_bool("background_thread", true);
    burst(4, 1 * MiB);
    CHECK(wait_for(nothing_dirty, 2000));
    CHECK(read_size("stats.background_thread.num_threads") >= 1);
    alarm(20);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* No thread survives fork; the setting does, and a thread comes back when the
         * child has pages to decay. */
        CHECK(read_bool("background_thread"));
        CHECK_EQ(read_size("stats.background_thread.num_threads"), 0);
        if (!CHILD_THREADS_OK) _exit(0);
        burst(4, 1 * MiB);
        CHECK(wait_for(nothing_dirty, 2000), "child pdirty %zu", pdirty());
        CHECK(read_size("stats.background_thread.num_threads") >= 1);
        write_bool("background_thread", false);
        _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
    /* The parent's thread still runs. */
    burst(4, 1 * MiB);
    CHECK(wait_for(nothing_dirty, 2000));
    write_bool("background_thread", false);
    alarm(0);
}

/* ---------------------------------------------------------------- metadata, user arenas */
static size_t metadata(void) { epoch(); return read_size("stats.metadata"); }

static size_t rss_bytes(void)
{
    char buf[128] = {0};
    int fd = open("/proc/self/statm", O_RDONLY);
    CHECK(fd >= 0);
    CHECK(read(fd, buf, sizeof buf - 1) > 0);
    close(fd);
    unsigned long size = 0, res = 0;
    CHECK(sscanf(buf, "%lu %lu", &size, &res) == 2);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* A peak's metadata (extent descriptors, slab bitmaps, page-map pages) goes back with its
 * pages: within the decay time and a second, with no allocator call, stats.metadata is
 * back near where it started and RSS within 4 MiB of it (memory returned within the decay time, at test size).
 * Before, metadata never shrank. */
static size_t pk_meta0, pk_meta_peak, pk_rss0;
static bool peak_returned(void)
{
    bool meta_back = metadata() < pk_meta0 + (pk_meta_peak - pk_meta0) / 2;
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
    return meta_back && rss_bytes() < pk_rss0 + 4 * MiB;
#else
    return meta_back;
#endif
}

TEST(test_background_thread_returns_a_peaks_metadata)
{
    set_decay_all(300, 0);
    write_bool("background_thread", true);
    /* Not scaled down under the sanitizers: a smaller peak's metadata is too close to what
     * the idle process keeps anyway (chunk headers, the cached regions' slabs). */
    size_t nmax = 400000;
    void **p = mmap(NULL, nmax * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    size_t rss0 = rss_bytes(), meta0 = metadata();
    size_t n = 0, small = 0, large = 0, want = 64 * MiB;
    unsigned x = 1;
    while (n < nmax && (small < want || large < want)) {
        x = x * 1103515245u + 12345u;
        bool big = large < want && (small >= want || (x >> 8) % 512 == 0);
        size_t s = big ? 64 * 1024 + (x >> 4) % (960 * 1024) : 16 + (x >> 8) % 1009;
        p[n] = malloc(s);
        CHECK(p[n] != NULL);
        memset(p[n], 0x3c, s < 4096 ? s : 4096);
        if (big) large += s; else small += s;
        n++;
    }
    size_t meta_peak = metadata();
    CHECK(meta_peak >= meta0 + 256 * 1024, "the burst grew metadata by %zu bytes only: the test would prove nothing",
          meta_peak - meta0);
    for (size_t i = 0; i < n; i++) free(p[i]);
    /* No allocator call: only the background thread can give it back. It needs the decay
     * time (300 ms) and a pass; the deadline is generous for a loaded machine. */
    pk_meta0 = meta0, pk_meta_peak = meta_peak, pk_rss0 = rss0;
    wait_for(peak_returned, 10000);
    size_t rss1 = rss_bytes(), meta1 = metadata();
    CHECK(meta1 < meta0 + (meta_peak - meta0) / 2, "metadata %zu before, %zu at the peak, %zu after", meta0,
          meta_peak, meta1);
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__) /* their shadow memory is RSS too */
    CHECK(rss1 < rss0 + 4 * MiB, "RSS %zu KiB before the burst, %zu KiB after", rss0 >> 10, rss1 >> 10);
#else
    (void)rss0, (void)rss1;
#endif
    munmap(p, nmax * sizeof(void *));
    write_bool("background_thread", false);
}

static unsigned create_arena(extent_hooks_t *h)
{
    unsigned ind = 0;
    size_t sz = sizeof ind;
    int err = mallctl("arenas.create", &ind, &sz, h ? (void *)&h : NULL, h ? sizeof h : 0);
    CHECK(err == 0, "arenas.create = %d", err);
    char name[64];
    ssize_t ms = 300, zero = 0;
    snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", ind);
    CHECK(mallctl(name, NULL, NULL, &ms, sizeof ms) == 0);
    snprintf(name, sizeof name, "arena.%u.muzzy_decay_ms", ind);
    CHECK(mallctl(name, NULL, NULL, &zero, sizeof zero) == 0);
    return ind;
}

static size_t arena_pdirty(unsigned ind)
{
    char name[64];
    snprintf(name, sizeof name, "stats.arenas.%u.pdirty", ind);
    epoch();
    return read_size(name);
}

/* 8 MiB in 1 MiB blocks of the arena, touched and freed: dirty pages of that arena only. */
static void arena_burst(unsigned ind)
{
    void *q[8];
    for (int i = 0; i < 8; i++) {
        q[i] = mallocx(MiB, MALLOCX_ARENA(ind) | MALLOCX_TCACHE_NONE);
        CHECK(q[i] != NULL);
        memset(q[i], 0x11, MiB);
    }
    for (int i = 0; i < 8; i++) dallocx(q[i], MALLOCX_TCACHE_NONE);
}

static unsigned ua_ind;
static bool user_arena_clean(void) { return arena_pdirty(ua_ind) == 0; }

/* User arenas are on the background threads' schedule too (before, they purged only on
 * their own events, and with background threads on, only past their dirty cap). */
TEST(test_background_thread_decays_user_arenas)
{
    unsigned ind = create_arena(NULL);
    write_bool("background_thread", true);
    arena_burst(ind);
    CHECK(arena_pdirty(ind) > 0, "nothing dirty: the test would prove nothing");
    ua_ind = ind;
    wait_for(user_arena_clean, 10000); /* decay time 300 ms, generous for a loaded machine */
    CHECK_EQ(arena_pdirty(ind), 0);
    write_bool("background_thread", false);
}

/* A hooked arena is purged through its hooks (jemalloc's order: dalloc, decommit,
 * purge_forced, purge_lazy), by the background thread. */
static atomic_long hk_purges, hk_purges_elsewhere;
static pthread_t hk_test_thread;

static void *hk_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero, bool *commit,
                      unsigned ind)
{
    (void)h, (void)ind;
    if (new_addr != NULL)
        return NULL;
    char *a = check_map_aligned(size, align, PROT_READ | PROT_WRITE);
    if (a == NULL)
        return NULL;
    *zero = *commit = true;
    return a;
}

static bool hk_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)addr, (void)size, (void)committed, (void)ind;
    return true; /* keep the address space: the purge hooks are asked next */
}

static bool hk_purge_forced(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len, unsigned ind)
{
    (void)h, (void)size, (void)ind;
    atomic_fetch_add(&hk_purges, 1);
    if (!pthread_equal(pthread_self(), hk_test_thread))
        atomic_fetch_add(&hk_purges_elsewhere, 1);
    return madvise((char *)addr + off, len, MADV_DONTNEED) != 0;
}

static extent_hooks_t hk_hooks = {hk_alloc, hk_dalloc, NULL, NULL, NULL, NULL, hk_purge_forced, NULL, NULL};

TEST(test_background_thread_purges_hooked_arenas_through_their_hooks)
{
    hk_test_thread = pthread_self();
    unsigned ind = create_arena(&hk_hooks);
    write_bool("background_thread", true);
    arena_burst(ind);
    CHECK(arena_pdirty(ind) > 0, "nothing dirty: the test would prove nothing");
    long before = atomic_load(&hk_purges);
    ua_ind = ind;
    wait_for(user_arena_clean, 10000);
    CHECK_EQ(arena_pdirty(ind), 0);
    CHECK(atomic_load(&hk_purges) > before);
    CHECK(atomic_load(&hk_purges_elsewhere) > 0, "purge_forced never ran on a background thread");
    write_bool("background_thread", false);
}

/* stats.mutexes.background_thread: the lock that creates, toggles and joins the threads. */
TEST(test_stats_mutexes_background_thread_counts_its_lock)
{
    epoch();
    uint64_t n0 = read_u64("stats.mutexes.background_thread.num_ops");
    write_bool("background_thread", true);
    write_bool("background_thread", false);
    epoch();
    uint64_t n1 = read_u64("stats.mutexes.background_thread.num_ops");
    CHECK(n1 >= n0 + 2, "num_ops %" PRIu64 " then %" PRIu64, n0, n1);
    CHECK(read_u64("stats.mutexes.background_thread.num_spin_acq") <= n1, "spin acquisitions are acquisitions");
    uint64_t v = 1;
    CHECK_EQ(mallctl("stats.mutexes.background_thread.num_ops", NULL, NULL, &v, sizeof v), EPERM);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

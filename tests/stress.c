/*
 * stress.c - multi-threaded stress of strata through its strata_ names only (so it runs in
 * the prefixed sanitizer builds too): worker threads exchange patterned objects of every
 * size class through shared mailboxes, realloc chains, aligned blocks, thread churn, a
 * producer/consumer pair, and a free-only thread after which the totals must come back.
 * Size: STRESS_SCALE at compile time, or env STRATA_TEST_SCALE / STRESS_SCALE at run time.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "check.h"
#include "strata.h"

#ifndef STRESS_SCALE
#define STRESS_SCALE 1.0
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define NWORKERS 8
#define NSLOTS 1024 /* shared mailboxes */
#define NLOCAL 128  /* objects each worker keeps to itself */
/* Objects above this are filled and checked on sampled ranges only (first/last 4 KiB and a
 * few bytes of every page) to keep multi-MiB blocks cheap. */
#define FULL_CHECK_MAX (64 * KiB)

/* How an object was allocated, which decides how it may be freed. */
enum alloc_kind { K_MALLOC, K_CALLOC, K_ALIGNED, K_POSIX_MEMALIGN, K_MALLOCX_ALIGN, K_REALLOC };

typedef struct obj {
    uint8_t *p;
    size_t size;  /* requested bytes */
    size_t fill;  /* bytes patterned: size, or the usable size for some objects */
    size_t align; /* 0, or the requested alignment */
    uint64_t gen;
    int kind;
} obj_t;

static _Atomic(obj_t *) slots[NSLOTS];
static atomic_uint_fast64_t next_gen = 1;
static atomic_bool stop_flag;
static atomic_uint_fast64_t ops_done, objects_checked;

typedef struct {
    uint64_t s;
} rng_t;
static uint64_t rng_next(rng_t *r)
{
    uint64_t x = r->s;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return r->s = x;
}
static size_t rng_below(rng_t *r, size_t n) { return (size_t)(rng_next(r) % n); }

static double stress_scale(void)
{
    const char *s = getenv("STRESS_SCALE");
    if (s && strtod(s, NULL) > 0)
        return strtod(s, NULL);
    return check_scale() * STRESS_SCALE;
}
static long scaled(long n)
{
    long v = (long)((double)n * stress_scale());
    return v < 1 ? 1 : v;
}

/* ---- patterns: derived from address, size and generation, so a block handed to the
 * wrong owner, overlapping another, or corrupted after free is caught by its freer. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}
static uint64_t obj_seed(const uint8_t *p, size_t size, uint64_t gen)
{
    return mix64((uint64_t)(uintptr_t)p ^ (size * 0x9E3779B97F4A7C15ull) ^ (gen << 17));
}
/* The pattern word of bytes [8k, 8k+8): one multiply-xorshift per word keeps it cheap. */
static inline uint64_t pat_word(uint64_t seed, size_t k)
{
    uint64_t x = (seed + k) * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}
static inline uint8_t pat(uint64_t seed, size_t i)
{
    return (uint8_t)(pat_word(seed, i >> 3) >> (8 * (i & 7)));
}
/* Writes / checks the pattern on [a, b): whole words where possible (little-endian bytes). */
static void pat_write(uint8_t *p, uint64_t seed, size_t a, size_t b)
{
    size_t i = a;
    for (; i < b && (i & 7); i++)
        p[i] = pat(seed, i);
    for (; i + 8 <= b; i += 8) {
        uint64_t w = pat_word(seed, i >> 3);
        memcpy(p + i, &w, 8);
    }
    for (; i < b; i++)
        p[i] = pat(seed, i);
}
/* Returns the first offset in [a, b) that does not hold the pattern, or SIZE_MAX. */
static size_t pat_find_bad(const uint8_t *p, uint64_t seed, size_t a, size_t b)
{
    size_t i = a;
    for (; i + 8 <= b; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if ((i & 7) == 0 && w == pat_word(seed, i >> 3))
            continue;
        for (size_t j = i; j < i + 8; j++)
            if (p[j] != pat(seed, j))
                return j;
    }
    for (; i < b; i++)
        if (p[i] != pat(seed, i))
            return i;
    return SIZE_MAX;
}

/* Calls fn on the byte ranges [a, b) of a block of n bytes that carry the pattern. */
#define FOR_RANGES(n, limit, body)                                                        \
    do {                                                                                  \
        size_t n_ = (n), lim_ = (limit);                                                  \
        if (n_ <= FULL_CHECK_MAX) {                                                       \
            size_t a = 0, b = n_ < lim_ ? n_ : lim_;                                      \
            body;                                                                         \
        } else {                                                                          \
            for (size_t off_ = 0; off_ < n_; off_ += 4096) {                              \
                size_t a = off_, b = off_ + (off_ == 0 ? 4096 : 16);                      \
                if (off_ + 8192 >= n_)                                                    \
                    b = off_ + 4096 > n_ ? n_ : off_ + 4096;                              \
                if (b > lim_)                                                             \
                    b = lim_;                                                             \
                if (a < b)                                                                \
                    body;                                                                 \
            }                                                                             \
        }                                                                                 \
    } while (0)

static void obj_fill(obj_t *o)
{
    uint64_t seed = obj_seed(o->p, o->size, o->gen);
    FOR_RANGES(o->fill, o->fill, pat_write(o->p, seed, a, b));
}

/* Checks the first `limit` patterned bytes of o (all of them with limit SIZE_MAX). */
static void obj_check(const obj_t *o, size_t limit, const char *who)
{
    uint64_t seed = obj_seed(o->p, o->size, o->gen);
    FOR_RANGES(o->fill, limit, {
        size_t i = pat_find_bad(o->p, seed, a, b);
        if (i != SIZE_MAX)
            check_fail(__FILE__, __LINE__, "pattern intact",
                       " %s: object %p (size %zu, fill %zu, align %zu, kind %d, gen %ju) "
                       "byte %zu is 0x%02x, want 0x%02x",
                       who, (void *)o->p, o->size, o->fill, o->align, o->kind,
                       (uintmax_t)o->gen, i, o->p[i], pat(seed, i));
    });
    atomic_fetch_add_explicit(&objects_checked, 1, memory_order_relaxed);
}

/* Every size class from 8 B to 64 KiB (uniform in log scale), rarely up to 4 MiB. */
static size_t pick_size(rng_t *r)
{
    unsigned roll = (unsigned)rng_below(r, 1000);
    unsigned lg = roll < 800 ? 3 + (unsigned)rng_below(r, 8)      /* 8 B .. 1 KiB */
                  : roll < 995 ? 11 + (unsigned)rng_below(r, 6)  /* 1 KiB .. 64 KiB */
                               : 17 + (unsigned)rng_below(r, 6); /* 64 KiB .. 4 MiB */
    size_t hi = (size_t)1 << lg, lo = hi / 2;
    return lo + 1 + rng_below(r, hi - lo);
}

static obj_t *obj_new(rng_t *r)
{
    obj_t *o = strata_malloc(sizeof *o);
    CHECK(o != NULL, "strata_malloc(%zu) failed", sizeof *o);
    o->size = pick_size(r);
    o->align = 0;
    o->kind = (int)rng_below(r, 20);
    o->kind = o->kind < 12 ? K_MALLOC : o->kind < 14 ? K_CALLOC : o->kind < 16 ? K_ALIGNED
              : o->kind < 18 ? K_POSIX_MEMALIGN : K_MALLOCX_ALIGN;
    switch (o->kind) {
    case K_MALLOC:
        o->p = strata_malloc(o->size);
        break;
    case K_CALLOC: {
        size_t n = 1 + rng_below(r, 4);
        o->size = (o->size + n - 1) / n * n;
        o->p = strata_calloc(n, o->size / n);
        CHECK(o->p != NULL);
        FOR_RANGES(o->size, o->size, {
            for (size_t i = a; i < b; i++)
                CHECK(o->p[i] == 0, "calloc(%zu, %zu) byte %zu is 0x%02x", n, o->size / n, i,
                      o->p[i]);
        });
        break;
    }
    case K_ALIGNED:
        o->align = (size_t)16 << rng_below(r, rng_below(r, 50) == 0 ? 17 : 9); /* .. 2 MiB */
        o->p = strata_aligned_alloc(o->align, o->size);
        break;
    case K_POSIX_MEMALIGN: {
        o->align = (size_t)8 << rng_below(r, 10);
        void *p = NULL;
        int rc = strata_posix_memalign(&p, o->align, o->size);
        CHECK(rc == 0, "posix_memalign(%zu, %zu) = %d", o->align, o->size, rc);
        o->p = p;
        break;
    }
    default:
        o->align = (size_t)1 << (4 + rng_below(r, 9));
        o->p = strata_mallocx(o->size, MALLOCX_ALIGN(o->align) |
                                           (rng_below(r, 8) == 0 ? MALLOCX_TCACHE_NONE : 0));
        break;
    }
    CHECK(o->p != NULL, "allocation of %zu bytes (kind %d, align %zu) failed", o->size, o->kind,
          o->align);
    if (o->align)
        CHECK_ALIGNED(o->p, o->align);
    size_t usable = strata_malloc_usable_size(o->p);
    CHECK(usable >= o->size, "usable %zu < size %zu", usable, o->size);
    /* One object in eight is written over its whole usable size. */
    o->fill = (o->size <= FULL_CHECK_MAX && rng_below(r, 8) == 0) ? usable : o->size;
    o->gen = atomic_fetch_add_explicit(&next_gen, 1, memory_order_relaxed);
    obj_fill(o);
    return o;
}

/* Checks and frees o by one of the ways its allocation allows. */
static void obj_free(obj_t *o, rng_t *r, const char *who)
{
    obj_check(o, SIZE_MAX, who);
    unsigned how = (unsigned)rng_below(r, 4);
    if (how == 0) {
        strata_free(o->p);
    } else if (how == 1) {
        if (o->align)
            strata_free_aligned_sized(o->p, o->align, o->size);
        else
            strata_free_sized(o->p, o->size);
    } else if (how == 2) {
        strata_sdallocx(o->p, o->size, o->align ? MALLOCX_ALIGN(o->align) : 0);
    } else {
        strata_dallocx(o->p, rng_below(r, 8) == 0 ? MALLOCX_TCACHE_NONE : 0);
    }
    strata_free(o);
}

/* Grows or shrinks o, checking the kept prefix, then re-patterns it. */
static void obj_realloc(obj_t *o, rng_t *r, const char *who)
{
    size_t n = pick_size(r);
    uint8_t *q;
    obj_t old = *o;
    if (o->align) {
        q = strata_rallocx(o->p, n, MALLOCX_ALIGN(o->align));
        CHECK(q != NULL);
        CHECK_ALIGNED(q, o->align);
    } else if (rng_below(r, 2)) {
        q = strata_realloc(o->p, n);
    } else {
        q = strata_rallocx(o->p, n, 0);
    }
    CHECK(q != NULL, "realloc(%zu -> %zu) failed", o->size, n);
    /* The kept bytes still carry the pattern of the old address. */
    old.p = q;
    uint64_t seed = obj_seed(o->p, o->size, o->gen);
    size_t keep = n < o->size ? n : o->size;
    FOR_RANGES(old.fill, keep, {
        size_t i = pat_find_bad(q, seed, a, b);
        if (i != SIZE_MAX)
            check_fail(__FILE__, __LINE__, "realloc kept contents",
                       " %s: realloc %p (%zu) -> %p (%zu) lost byte %zu", who, (void *)o->p,
                       o->size, (void *)q, n, i);
    });
    o->p = q;
    o->size = n;
    o->fill = n;
    o->kind = o->align ? o->kind : K_REALLOC;
    o->gen = atomic_fetch_add_explicit(&next_gen, 1, memory_order_relaxed);
    obj_fill(o);
}

/* Puts o in a random mailbox; checks and frees what was there. */
static void exchange(obj_t *o, rng_t *r, const char *who)
{
    obj_t *prev = atomic_exchange(&slots[rng_below(r, NSLOTS)], o);
    if (prev)
        obj_free(prev, r, who);
}

/* ---- phase 1: workers */

static obj_t *leftovers[NWORKERS][NLOCAL];

typedef struct {
    int id;
    long ops;
} worker_arg_t;

static void *worker(void *arg)
{
    worker_arg_t *w = arg;
    rng_t r = {mix64((uint64_t)w->id + 12345) | 1};
    obj_t **local = leftovers[w->id];
    for (long op = 0; op < w->ops && !atomic_load(&stop_flag); op++) {
        unsigned roll = (unsigned)rng_below(&r, 100);
        if (roll < 60) {
            exchange(obj_new(&r), &r, "worker exchange");
        } else if (roll < 80) {
            size_t i = rng_below(&r, NLOCAL);
            if (local[i])
                obj_free(local[i], &r, "worker local");
            local[i] = obj_new(&r);
        } else if (roll < 95) {
            size_t i = rng_below(&r, NLOCAL);
            if (!local[i])
                local[i] = obj_new(&r);
            int chain = 1 + (int)rng_below(&r, 6);
            for (int c = 0; c < chain; c++) {
                obj_check(local[i], SIZE_MAX, "realloc chain");
                obj_realloc(local[i], &r, "realloc chain");
            }
        } else {
            /* Take an object from a mailbox into the local set (ownership moves here). */
            size_t i = rng_below(&r, NLOCAL);
            obj_t *got = atomic_exchange(&slots[rng_below(&r, NSLOTS)], NULL);
            if (got) {
                obj_check(got, SIZE_MAX, "worker take");
                if (local[i])
                    exchange(local[i], &r, "worker give");
                local[i] = got;
            }
        }
        atomic_fetch_add_explicit(&ops_done, 1, memory_order_relaxed);
    }
    return NULL;
}

/* ---- thread churn: short-lived threads allocate, leave objects for others, exit. */
static void *churn_thread(void *arg)
{
    rng_t r = {mix64((uint64_t)(uintptr_t)arg * 7919 + 1) | 1};
    enum { N = 64 };
    obj_t *mine[N];
    for (int i = 0; i < N; i++)
        mine[i] = obj_new(&r);
    for (int i = 0; i < N; i++) {
        if (i % 4 == 0)
            obj_free(mine[i], &r, "churn free");
        else
            exchange(mine[i], &r, "churn exchange"); /* left for the others */
    }
    return NULL;
}

/* ---- free-only thread: frees everything left, allocates nothing, exits. */
typedef struct {
    obj_t **objs;
    size_t n;
} batch_t;
static void *free_only_thread(void *arg)
{
    batch_t *b = arg;
    rng_t r = {0x5eed5eedull};
    for (size_t i = 0; i < b->n; i++)
        obj_free(b->objs[i], &r, "free-only thread");
    return NULL;
}

static size_t stat_size(const char *name)
{
    uint64_t epoch = 1;
    size_t len = sizeof epoch;
    CHECK(strata_mallctl("epoch", &epoch, &len, &epoch, sizeof epoch) == 0);
    size_t v = 0;
    len = sizeof v;
    int rc = strata_mallctl(name, &v, &len, NULL, 0);
    CHECK(rc == 0 && len == sizeof v, "strata_mallctl(\"%s\") = %d", name, rc);
    return v;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

TEST(test_threads_exchange_objects_of_every_size_class)
{
    strata_malloc_trim(0);
    size_t alloc0 = stat_size("stats.allocated"), active0 = stat_size("stats.active");
    double t0 = now_s();
    /* The whole run is bounded in time too, so a slow machine or sanitizer cannot hang it. */
    double deadline = t0 + 60.0;

    pthread_t th[NWORKERS];
    worker_arg_t args[NWORKERS];
    for (int i = 0; i < NWORKERS; i++) {
        args[i] = (worker_arg_t){i, scaled(400000)};
        CHECK(pthread_create(&th[i], NULL, worker, &args[i]) == 0);
    }
    /* Meanwhile: churn threads, two at a time, and watch the totals. */
    long churn = scaled(600);
    size_t peak = 0;
    for (long c = 0; c < churn; c += 2) {
        pthread_t a, b;
        CHECK(pthread_create(&a, NULL, churn_thread, (void *)(uintptr_t)(c + 1)) == 0);
        CHECK(pthread_create(&b, NULL, churn_thread, (void *)(uintptr_t)(c + 2)) == 0);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        if (c % 32 == 0) {
            size_t al = stat_size("stats.allocated");
            peak = al > peak ? al : peak;
        }
        if (now_s() > deadline)
            atomic_store(&stop_flag, true);
    }
    for (int i = 0; i < NWORKERS; i++)
        pthread_join(th[i], NULL);
    double t1 = now_s();

    /* Everything still live goes to one thread that only frees, then exits. */
    static obj_t *rest[NSLOTS + NWORKERS * NLOCAL];
    size_t n = 0;
    for (int i = 0; i < NSLOTS; i++) {
        obj_t *o = atomic_exchange(&slots[i], NULL);
        if (o)
            rest[n++] = o;
    }
    for (int w = 0; w < NWORKERS; w++)
        for (int i = 0; i < NLOCAL; i++)
            if (leftovers[w][i])
                rest[n++] = leftovers[w][i], leftovers[w][i] = NULL;
    size_t alloc_full = stat_size("stats.allocated");
    CHECK(alloc_full > alloc0, "stats.allocated did not grow (%zu -> %zu) with %zu live objects",
          alloc0, alloc_full, n);
    batch_t b = {rest, n};
    pthread_t f;
    CHECK(pthread_create(&f, NULL, free_only_thread, &b) == 0);
    pthread_join(f, NULL);

    strata_malloc_trim(0);
    size_t alloc1 = stat_size("stats.allocated"), active1 = stat_size("stats.active");
    printf("stress: %ju ops, %ju objects checked, %ld churn threads in %.1f s; "
           "allocated %zu -> peak %zu / %zu live -> %zu; active %zu -> %zu\n",
           (uintmax_t)atomic_load(&ops_done), (uintmax_t)atomic_load(&objects_checked), churn,
           t1 - t0, alloc0, peak, alloc_full, alloc1, active0, active1);
    /* Memory must come back: nothing allocated is left, so the totals return to the start
     * (slack: metadata-like bookkeeping and the main thread's cache). */
    CHECK(alloc1 <= alloc0 + 64 * KiB,
          "stats.allocated did not return: %zu at start, %zu after every object was freed",
          alloc0, alloc1);
    CHECK(active1 <= active0 + 8 * MiB,
          "stats.active did not return: %zu KiB at start, %zu KiB after every object was freed",
          active0 / KiB, active1 / KiB);
}

/* ---- producer/consumer: every free is a remote free back to the producer's arena. */
typedef struct {
    _Atomic(obj_t *) ring[4096];
    atomic_size_t head, tail;
    atomic_bool done;
} ring_t;

static ring_t ring;

static void *producer(void *arg)
{
    long n = (long)(intptr_t)arg;
    rng_t r = {0xabcdefull};
    for (long i = 0; i < n; i++) {
        obj_t *o = obj_new(&r);
        size_t h = atomic_load(&ring.head);
        while (h - atomic_load(&ring.tail) >= 4096)
            sched_yield();
        atomic_store(&ring.ring[h % 4096], o);
        atomic_store(&ring.head, h + 1);
    }
    atomic_store(&ring.done, true);
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    rng_t r = {0x12345ull};
    for (;;) {
        size_t t = atomic_load(&ring.tail);
        if (t == atomic_load(&ring.head)) {
            if (atomic_load(&ring.done) && t == atomic_load(&ring.head))
                return NULL;
            sched_yield();
            continue;
        }
        obj_t *o = atomic_exchange(&ring.ring[t % 4096], NULL);
        CHECK(o != NULL);
        atomic_store(&ring.tail, t + 1);
        obj_free(o, &r, "consumer");
    }
}

TEST(test_producer_consumer_remote_frees_return_memory)
{
    strata_malloc_trim(0);
    size_t alloc0 = stat_size("stats.allocated");
    pthread_t p, c;
    CHECK(pthread_create(&c, NULL, consumer, NULL) == 0);
    CHECK(pthread_create(&p, NULL, producer, (void *)(intptr_t)scaled(300000)) == 0);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    strata_malloc_trim(0);
    size_t alloc1 = stat_size("stats.allocated");
    printf("producer/consumer: allocated %zu -> %zu\n", alloc0, alloc1);
    CHECK(alloc1 <= alloc0 + 64 * KiB, "stats.allocated %zu -> %zu after all remote frees",
          alloc0, alloc1);
}

/* ---------------------------------------------------------------- 8-byte blocks across threads */
/* The 8-byte class is packed and untagged: threads pass 1..8-byte blocks through shared
 * slots and free each other's, every block carrying its owner's pattern in all 8 bytes, so
 * that a free, a malloc or a neighbour's write that touched a block's neighbour (the
 * second word a thread cache would tag) or handed a block out twice shows up. */
#define TINY_THREADS 8
#define TINY_SLOTS 512
#define TINY_LOCAL 256
static _Atomic(uint64_t *) tiny_slot[TINY_SLOTS];

static uint64_t tiny_mark(uint64_t *p) { return (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull ^ 0x5555; }

static size_t tiny_usable = 8; /* 16 without tiny_class (the default) */

static void tiny_check_free(uint64_t *p)
{
    CHECK(*p == tiny_mark(p), "8-byte block %p holds %llx", (void *)p, (unsigned long long)*p);
    CHECK_EQ(strata_malloc_usable_size(p), tiny_usable);
    strata_free(p);
}

static void *tiny_worker(void *arg)
{
    rng_t r = {(uint64_t)(uintptr_t)arg * 7919 + 1};
    uint64_t *local[TINY_LOCAL] = {0};
    long n = scaled(200000);
    for (long i = 0; i < n; i++) {
        uint64_t *p = strata_malloc(1 + rng_next(&r) % 8);
        CHECK(p != NULL && ((uintptr_t)p & 7) == 0);
        *p = tiny_mark(p);
        uint64_t *q;
        if (rng_next(&r) % 2) { /* to another thread, and one of theirs freed here */
            q = atomic_exchange(&tiny_slot[rng_next(&r) % TINY_SLOTS], p);
        } else { /* kept a while by this thread: its neighbours come and go around it */
            size_t k = rng_next(&r) % TINY_LOCAL;
            q = local[k];
            local[k] = p;
        }
        if (q != NULL)
            tiny_check_free(q);
    }
    for (size_t k = 0; k < TINY_LOCAL; k++)
        if (local[k] != NULL)
            tiny_check_free(local[k]);
    return NULL;
}

TEST(test_threads_exchange_8_byte_blocks)
{
    bool tiny = false;
    size_t blen = sizeof tiny;
    CHECK(strata_mallctl("opt.tiny_class", &tiny, &blen, NULL, 0) == 0);
    tiny_usable = tiny ? 8 : 16; /* ctest runs this test again with MALLOC_CONF=tiny_class:true */
    strata_malloc_trim(0);
    size_t alloc0 = stat_size("stats.allocated");
    pthread_t t[TINY_THREADS];
    for (intptr_t i = 0; i < TINY_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, tiny_worker, (void *)i) == 0);
    for (int i = 0; i < TINY_THREADS; i++)
        pthread_join(t[i], NULL);
    for (size_t k = 0; k < TINY_SLOTS; k++) {
        uint64_t *q = atomic_exchange(&tiny_slot[k], NULL);
        if (q != NULL)
            tiny_check_free(q);
    }
    strata_malloc_trim(0);
    size_t alloc1 = stat_size("stats.allocated");
    printf("8-byte exchange: allocated %zu -> %zu\n", alloc0, alloc1);
    CHECK(alloc1 <= alloc0 + 64 * KiB, "stats.allocated %zu -> %zu after every 8-byte block was freed",
          alloc0, alloc1);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

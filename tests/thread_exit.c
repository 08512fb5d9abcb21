/*
 * thread_exit.c - allocation during and after thread teardown: pthread key destructors
 * (keys created before and after strata initialised) that malloc and free after strata's
 * own destructor ran, and threads that only free or only allocate-and-exit must not leak
 * their caches (stats.allocated/stats.active stay flat over many threads).
 */
#define _GNU_SOURCE
#include "strata_names.h"

#include <pthread.h>
#include <stdatomic.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* Destructor rounds each key value goes through: glibc runs up to 4 (the last after
 * strata's and every other destructor). TSan tears its own thread state down in the last
 * round, so under TSan the values stop one round earlier. */
#if defined(__SANITIZE_THREAD__)
#define TSD_ROUNDS 3
#else
#define TSD_ROUNDS 4
#endif

static pthread_key_t early_key, late_key;
static atomic_int destructor_calls, destructor_allocs;

/* A key created by a constructor of the program. In the prefixed build strata is not yet
 * initialised here; in the override build the loader may already have called malloc. */
__attribute__((constructor(101))) static void make_early_key(void);

/* Value stored in the keys: a block that knows its round, patterned. */
typedef struct {
    int round;
    size_t n;
    uint8_t data[];
} tsd_block_t;

static tsd_block_t *tsd_block_new(int round)
{
    size_t n = 16 + (size_t)round * 1000;
    tsd_block_t *b = malloc(sizeof *b + n);
    CHECK(b != NULL, "malloc in a key destructor (round %d) failed", round);
    b->round = round;
    b->n = n;
    memset(b->data, 0x40 + round, n);
    return b;
}

static void tsd_destructor(void *v, pthread_key_t key)
{
    tsd_block_t *b = v;
    for (size_t i = 0; i < b->n; i++)
        CHECK(b->data[i] == 0x40 + b->round, "key block corrupted at %zu (round %d)", i, b->round);
    atomic_fetch_add(&destructor_calls, 1);
    /* Allocate and free many sizes: strata's own destructor may have run already. */
    void *p[64];
    for (int i = 0; i < 64; i++) {
        size_t n = (size_t)1 << (i % 21);
        p[i] = (i & 1) ? calloc(1, n) : malloc(n);
        CHECK(p[i] != NULL, "malloc(%zu) in a key destructor failed", n);
        memset(p[i], i, n < 4096 ? n : 4096);
    }
    for (int i = 0; i < 64; i++)
        free(p[i]);
    atomic_fetch_add(&destructor_allocs, 64);
    int round = b->round;
    free(b);
    /* Re-arm for the next destructor round: later rounds surely come after strata's
     * destructor whatever the key order. */
    if (round < TSD_ROUNDS - 1)
        CHECK(pthread_setspecific(key, tsd_block_new(round + 1)) == 0);
}
static void early_destructor(void *v) { tsd_destructor(v, early_key); }
static void late_destructor(void *v) { tsd_destructor(v, late_key); }

static void make_early_key(void) { CHECK(pthread_key_create(&early_key, early_destructor) == 0); }

static void *keyed_thread(void *arg)
{
    pthread_key_t key = *(pthread_key_t *)arg;
    for (int i = 0; i < 100; i++)
        free(malloc((size_t)i * 37 + 1)); /* the thread has a cache to tear down */
    CHECK(pthread_setspecific(key, tsd_block_new(0)) == 0);
    return NULL;
}

static void *both_keys_thread(void *arg)
{
    keyed_thread(&early_key);
    keyed_thread(&late_key);
    return arg;
}

static void run_keyed_threads(pthread_key_t *key, long n)
{
    atomic_store(&destructor_calls, 0);
    for (long i = 0; i < n; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, keyed_thread, key) == 0);
        pthread_join(t, NULL);
    }
    CHECK(atomic_load(&destructor_calls) == n * TSD_ROUNDS, "destructors ran %d times, want %ld",
          atomic_load(&destructor_calls), n * TSD_ROUNDS);
}

TEST(test_key_destructor_created_after_init_allocates_after_strata_teardown)
{
    free(malloc(100)); /* strata is initialised, its key exists */
    CHECK(pthread_key_create(&late_key, late_destructor) == 0);
    run_keyed_threads(&late_key, check_scaled(200));
}

TEST(test_key_destructor_created_before_init_allocates_during_teardown)
{
    run_keyed_threads(&early_key, check_scaled(200));
}

TEST(test_key_destructors_of_both_orders_in_one_thread)
{
    CHECK(pthread_key_create(&late_key, late_destructor) == 0);
    atomic_store(&destructor_calls, 0);
    long n = check_scaled(100);
    for (long i = 0; i < n; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, both_keys_thread, NULL) == 0);
        pthread_join(t, NULL);
    }
    CHECK(atomic_load(&destructor_calls) == n * 2 * TSD_ROUNDS,
          "destructors ran %d times, want %ld", atomic_load(&destructor_calls), n * 2 * TSD_ROUNDS);
}

/* Allocated-then-freed growth across many short threads must stay bounded. */

typedef struct {
    void **objs;
    size_t n;
} batch_t;

static void *free_only(void *arg)
{
    batch_t *b = arg;
    for (size_t i = 0; i < b->n; i++)
        free(b->objs[i]);
    return NULL;
}

TEST(test_free_only_threads_do_not_leak_their_cache)
{
    enum { N = 4000 };
    static void *objs[N];
    long rounds = check_scaled(60);
    size_t alloc_mid = 0, active_mid = 0;
    for (long r = 0; r < rounds; r++) {
        for (size_t i = 0; i < N; i++)
            objs[i] = malloc(8 + (i * 40) % 3000);
        batch_t b = {objs, N};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, free_only, &b) == 0);
        pthread_join(t, NULL);
        if (r == 4 || (rounds <= 4 && r == 0)) {
            malloc_trim(0);
            alloc_mid = stat_read("stats.allocated");
            active_mid = stat_read("stats.active");
        }
    }
    malloc_trim(0);
    size_t alloc_end = stat_read("stats.allocated"), active_end = stat_read("stats.active");
    printf("free-only threads: allocated %zu -> %zu, active %zu -> %zu\n", alloc_mid, alloc_end,
           active_mid, active_end);
    /* A leaked cache would add up to N objects (~6 MiB) per thread. */
    CHECK(alloc_end <= alloc_mid + 512 * KiB, "stats.allocated grew %zu -> %zu over %ld threads",
          alloc_mid, alloc_end, rounds);
    CHECK(active_end <= active_mid + 2 * MiB, "stats.active grew %zu -> %zu over %ld threads",
          active_mid, active_end, rounds);
}

static void *alloc_free_exit(void *arg)
{
    (void)arg;
    enum { N = 3000 };
    void *p[N];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N; i++)
            p[i] = malloc(8 + (size_t)(i * 24) % 2000);
        for (int i = 0; i < N; i++)
            free(p[i]);
    }
    return NULL; /* exits with a full cache */
}

TEST(test_exiting_threads_return_their_cache)
{
    long rounds = check_scaled(60);
    size_t alloc_mid = 0, active_mid = 0;
    for (long r = 0; r < rounds; r++) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&t[i], NULL, alloc_free_exit, NULL) == 0);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        if (r == 4 || (rounds <= 4 && r == 0)) {
            malloc_trim(0);
            alloc_mid = stat_read("stats.allocated");
            active_mid = stat_read("stats.active");
        }
    }
    malloc_trim(0);
    size_t alloc_end = stat_read("stats.allocated"), active_end = stat_read("stats.active");
    printf("exiting threads: allocated %zu -> %zu, active %zu -> %zu\n", alloc_mid, alloc_end,
           active_mid, active_end);
    CHECK(alloc_end <= alloc_mid + 512 * KiB, "stats.allocated grew %zu -> %zu over %ld rounds",
          alloc_mid, alloc_end, rounds);
    CHECK(active_end <= active_mid + 2 * MiB, "stats.active grew %zu -> %zu over %ld rounds",
          active_mid, active_end, rounds);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

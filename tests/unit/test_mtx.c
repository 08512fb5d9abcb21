/* Unit tests of strata's lock (internal.h mtx_t, os.c mtx_lock_slow): exclusion, the
 * acquisition counters behind stats.mutexes, trylock, and a sleeper that is woken. */
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "internal.h"
#include "unit.h"

#define NTHREADS 4
#define ROUNDS 5000 /* acquisitions per thread and round */

static mtx_t lk = MTX_INITIALIZER;
static unsigned inside, overlaps;
static uint64_t counter;

static void *excl_worker(void *arg) {
  (void)arg;
  for (unsigned i = 0; i < ROUNDS; i++) {
    mtx_lock(&lk);
    /* Another thread inside at the same time is an overlap; the plain counter would also
     * lose increments (and TSan would report the race). */
    if (__atomic_fetch_add(&inside, 1, __ATOMIC_RELAXED) != 0) __atomic_fetch_add(&overlaps, 1, __ATOMIC_RELAXED);
    uint64_t c = counter;
    for (volatile unsigned k = 0; k < 20; k++) {
    }
    counter = c + 1;
    __atomic_fetch_sub(&inside, 1, __ATOMIC_RELAXED);
    mtx_unlock(&lk);
  }
  return NULL;
}

/* Rounds until the lock saw contention (a thread spun or slept: the threads did run at
 * once), at most 50: a loaded machine may run them one after another. A lock that does
 * not exclude never records contention, so it runs all 50 rounds and overlaps show. */
static void test_lock_excludes_and_counts_every_acquisition(void) {
  unsigned rounds = 0;
  do {
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) CHECK(pthread_create(&t[i], NULL, excl_worker, NULL) == 0);
    for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
    rounds++;
  } while (lk.n_wait + lk.n_spin == 0 && rounds < 50);
  CHECK_EQ(overlaps, 0);
  CHECK_EQ(counter, (uint64_t)rounds * NTHREADS * ROUNDS);
  CHECK_EQ(lk.n_lock_ops, (uint64_t)rounds * NTHREADS * ROUNDS);
  CHECK(lk.n_wait + lk.n_spin <= lk.n_lock_ops);
  CHECK_EQ(__atomic_load_n(&lk.word, __ATOMIC_RELAXED), 0);
}

static void test_trylock_takes_only_a_free_lock(void) {
  mtx_t m = MTX_INITIALIZER;
  mtx_init(&m);
  CHECK(!mtx_trylock(&m)); /* free: taken */
  CHECK(mtx_trylock(&m));  /* held: refused */
  mtx_unlock(&m);
  CHECK(!mtx_trylock(&m));
  mtx_unlock(&m);
  CHECK_EQ(m.n_lock_ops, 0); /* trylock counts nothing: its callers do */
}

static mtx_t slp = MTX_INITIALIZER;
static unsigned got_it;
static void *sleeper(void *arg) {
  (void)arg;
  bool waited = mtx_lock(&slp);
  __atomic_store_n(&got_it, 1, __ATOMIC_RELEASE);
  mtx_unlock(&slp);
  return (void *)(uintptr_t)waited;
}

/* A thread that finds the lock held spins, then marks the word 2 and sleeps on the futex;
 * the unlock must wake it (a lost wake hangs the test: ctest's timeout fails it). Waits for
 * the mark by looping (a loaded machine may run the thread late), never by timing. */
static void test_sleeper_is_woken_and_counted(void) {
  mtx_lock(&slp);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, sleeper, NULL) == 0);
  bool marked = false;
  for (unsigned i = 0; i < 100000 && !marked; i++) { /* up to ~100 s */
    marked = __atomic_load_n(&slp.word, __ATOMIC_RELAXED) == 2;
    if (!marked) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
  CHECK(marked);
  CHECK_EQ(__atomic_load_n(&got_it, __ATOMIC_ACQUIRE), 0);
  mtx_unlock(&slp);
  void *waited = NULL;
  pthread_join(t, &waited);
  CHECK(waited != NULL); /* mtx_lock reported contention */
  CHECK_EQ(got_it, 1);
  CHECK_EQ(slp.n_lock_ops, 2);
  CHECK_EQ(slp.n_wait, 1);
  CHECK_EQ(__atomic_load_n(&slp.word, __ATOMIC_RELAXED), 0);
}

int main(void) {
  RUN(test_lock_excludes_and_counts_every_acquisition);
  RUN(test_trylock_takes_only_a_free_lock);
  RUN(test_sleeper_is_woken_and_counted);
  UNIT_EXIT();
}

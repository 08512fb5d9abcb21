/* Thread caches: fills half a bin on a miss, flushes half on overflow, the GC drains a
 * bin the thread stopped using, and thread exit flushes everything back. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "unit.h"

static tbin_t *bin_of(szind_t ind) { return &strata_tsd.tcache->bins[ind]; }

static void test_miss_fills_half_the_bin(void) {
  szind_t ind = sz_size2index(48);
  void *p = strata_malloc(48);
  CHECK(p != NULL);
  CHECK_EQ(strata_tsd.state, TSD_ACTIVE);
  /* One region was handed out of a fill of max/2. */
  CHECK_EQ(tbin_count(strata_tsd.tcache, ind), tbin_nslots[ind] / 2 - 1);
  strata_free(p);
  CHECK_EQ(tbin_count(strata_tsd.tcache, ind), tbin_nslots[ind] / 2);
}

static void test_overflow_flushes_half(void) {
  szind_t ind = sz_size2index(256);
  void *ptrs[1000];
  ptrs[0] = strata_malloc(256);
  tbin_t *b = bin_of(ind);
  uint32_t max = tbin_nslots[ind];
  CHECK(max > 0 && 2 * max < 1000);
  for (unsigned i = 1; i < 2 * max; i++) ptrs[i] = strata_malloc(256);
  unsigned i = 0;
  while (b->avail > 0) strata_free(ptrs[i++]); /* the bin is now full */
  CHECK_EQ(tbin_count(strata_tsd.tcache, ind), max);
  strata_free(ptrs[i++]); /* overflow: half goes back, then this one is cached */
  CHECK_EQ(tbin_count(strata_tsd.tcache, ind), max / 2 + 1);
  while (i < 2 * max) strata_free(ptrs[i++]);
  CHECK(tbin_count(strata_tsd.tcache, ind) <= max);
}

/* Bins grow while other classes' bursts fit them (fewer fills and flushes, so fewer GC
 * visits): enough rounds that the GC still comes round to the idle bin. */
static void test_gc_drains_idle_bin(void) {
  szind_t idle = sz_size2index(3000);
  void *p = strata_malloc(3000);
  strata_free(p);
  uint32_t before = tbin_count(strata_tsd.tcache, idle);
  CHECK(before > 0);
  /* Churn other classes: fills and flushes tick the GC, which visits every bin. */
  void *ptrs[512];
  for (int round = 0; round < 1600; round++) {
    size_t sz = 16 + (size_t)(round % 20) * 16;
    for (int i = 0; i < 512; i++) ptrs[i] = strata_malloc(sz);
    for (int i = 0; i < 512; i++) strata_free(ptrs[i]);
  }
  CHECK(tbin_count(strata_tsd.tcache, idle) < before);
}

static void *thread_body(void *arg) {
  (void)arg;
  void *ptrs[100];
  for (int i = 0; i < 100; i++) ptrs[i] = strata_malloc(100);
  for (int i = 0; i < 100; i++) strata_free(ptrs[i]);
  return NULL;
}

static size_t small_curregs(szind_t ind) {
  size_t n = 0;
  for (unsigned i = 0; i <= narenas; i++) {
    if (arenas[i]) n += arenas[i]->bins[ind].curregs;
  }
  return n;
}

static void test_thread_exit_flushes_cache(void) {
  szind_t ind = sz_size2index(100);
  size_t before = small_curregs(ind);
  pthread_t t;
  pthread_create(&t, NULL, thread_body, NULL);
  pthread_join(t, NULL);
  CHECK_EQ(small_curregs(ind), before);
}

/* A flush whose regions belong to two arenas returns every region to its owner: the
 * flush visits each owner's runs from the first of that owner on (flush_batch),
 * so no run may be left out. This thread (arena 1) frees its own blocks
 * and another thread's (arena 2) alternately, overflowing its bin several times. */
#define MIX_N 500
#define MIX_SIZE 256
static void *alloc_in_arena_2(void *arg) {
  void **ptrs = arg;
  unsigned want = 2;
  CHECK_EQ(au_thread_arena(NULL, 0, NULL, NULL, &want, sizeof want), 0);
  for (int i = 0; i < MIX_N; i++) ptrs[i] = strata_malloc(MIX_SIZE);
  return NULL;
}

static void test_mixed_owner_flush_returns_every_region(void) {
  szind_t ind = sz_size2index(MIX_SIZE);
  unsigned want = 1, old = 0;
  size_t oldlen = sizeof old;
  CHECK_EQ(au_thread_arena(NULL, 0, &old, &oldlen, &want, sizeof want), 0);
  tcache_flush_all(strata_tsd.tcache);
  size_t before = small_curregs(ind);
  static void *mine[MIX_N], *theirs[MIX_N];
  pthread_t t;
  pthread_create(&t, NULL, alloc_in_arena_2, theirs);
  pthread_join(t, NULL); /* its cache went back at exit; its blocks are live */
  for (int i = 0; i < MIX_N; i++) mine[i] = strata_malloc(MIX_SIZE);
  CHECK(tbin_nslots[ind] < MIX_N); /* the frees below overflow the bin */
  /* Every flush is mixed. In the first half each batch starts with arena 2's region
   * (freed last): the general path takes the whole batch, one owner after the other. In
   * the second half it starts with this thread's: the own-arena walk takes this
   * thread's regions and sets arena 2's aside, which go to their bitmaps, not onto
   * arena 2's remote chains. */
  bin_t *theirs_bin = &arena_get(2)->bins[ind];
  uint32_t remote0 = theirs_bin->remote_count;
  for (int i = 0; i < MIX_N / 2; i++) {
    strata_free(mine[i]);
    strata_free(theirs[i]);
  }
  for (int i = MIX_N / 2; i < MIX_N; i++) {
    strata_free(theirs[i]);
    strata_free(mine[i]);
  }
  CHECK_EQ(theirs_bin->remote_count, remote0);
  tcache_flush_all(strata_tsd.tcache);
  CHECK_EQ(small_curregs(ind), before);
  CHECK_EQ(au_thread_arena(NULL, 0, NULL, NULL, &old, sizeof old), 0);
}

/* A thread that only frees a class (a consumer: other threads' blocks) keeps none of it
 * at an overflow: the whole bin goes to the owner as one chain, then the block that
 * overflowed it is cached. A thread that allocates the class keeps half
 * (test_overflow_flushes_half). */
static void *consumer_body(void *arg) {
  void **theirs = arg;
  szind_t ind = sz_size2index(MIX_SIZE);
  bin_t *owner = &arena_get(2)->bins[ind];
  unsigned i = 0;
  strata_free(theirs[i++]); /* a thread's first free is not cached: it sets up the cache */
  tbin_t *b = bin_of(ind);
  while (b->avail > 0) strata_free(theirs[i++]);
  uint32_t max = strata_tsd.tcache->max[ind];
  CHECK(max > 1 && i < MIX_N);
  CHECK_EQ(tbin_count(strata_tsd.tcache, ind), max);
  uint32_t remote0 = owner->remote_count, chains0 = owner->nrchain;
  strata_free(theirs[i++]);
  CHECK_EQ(tbin_count(strata_tsd.tcache, ind), 1);
  CHECK_EQ(owner->remote_count, remote0 + max);
  CHECK_EQ(owner->nrchain, chains0 + 1);
  while (i < MIX_N) strata_free(theirs[i++]);
  return NULL;
}

static void test_consumer_overflow_flushes_the_whole_bin(void) {
  szind_t ind = sz_size2index(MIX_SIZE);
  (void)strata_malloc_trim(0); /* chains left by the tests before: regions still counted */
  size_t before = small_curregs(ind);
  static void *theirs[MIX_N];
  pthread_t t;
  pthread_create(&t, NULL, alloc_in_arena_2, theirs);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, consumer_body, theirs);
  pthread_join(t, NULL); /* its cache went back at exit */
  (void)strata_malloc_trim(0); /* the owner's chains back to their bitmaps */
  CHECK_EQ(small_curregs(ind), before);
}

/* Hoard's cache-scratch: a thread whose first call frees a block allocated by another
 * thread (next to other threads' blocks) must not get that block back from its next
 * malloc of the same size, or it writes to a cache line other threads write to. */
static void *scratch_body(void *arg) {
  void *given = arg;
  strata_free(given);
  void *mine = strata_malloc(8);
  void *result = mine == given ? (void *)1 : NULL;
  strata_free(mine);
  return result;
}

static void test_first_free_of_a_thread_is_not_cached(void) {
  void *given = strata_malloc(8);
  pthread_t t;
  void *reused;
  pthread_create(&t, NULL, scratch_body, given);
  pthread_join(t, &reused);
  CHECK(reused == NULL);
}

static void test_thread_counters_are_exact(void) {
  uint64_t a0, d0, a1, d1;
  tcache_counts(&strata_tsd, &a0, &d0);
  void *p = strata_malloc(100); /* class 112 */
  void *q = strata_malloc(20000); /* class 20480 */
  strata_free(p);
  strata_free(q);
  tcache_counts(&strata_tsd, &a1, &d1);
  CHECK_EQ(a1 - a0, 112 + 20480);
  CHECK_EQ(d1 - d0, 112 + 20480);
  /* A 16 KiB block strata_malloc's own pop takes (counted in the bin's nmalloc) */
  strata_free(strata_malloc(15000)); /* the bin holds one now */
  szind_t i16 = sz_size2index(16384);
  CHECK(tbin_count(strata_tsd.tcache, i16) > 0);
  tcache_counts(&strata_tsd, &a0, &d0);
  uint64_t n0 = strata_tsd.tcache->bins[i16].nmalloc;
  strata_free(strata_malloc(15000));
  tcache_counts(&strata_tsd, &a1, &d1);
  CHECK_EQ(strata_tsd.tcache->bins[i16].nmalloc - n0, 1);
  CHECK_EQ(a1 - a0, 16384);
  CHECK_EQ(d1 - d0, 16384);
}

/* Global cap (tcache_total_max): 16 threads fill their caches with five classes of
 * 1..12 KiB, then keep working with one class for about a hundred fills and flushes
 * and wait while the main thread adds up what every cache holds. Without a cap the GC
 * has visited a few bins by then and the caches hold about 16 x 5 bins. With one, each
 * thread learns it is over at a GC visit and from then on empties a bin at every fill
 * or flush (and an overflowing bin entirely): what stays is the cap plus about one bin
 * of the class still in use per thread (three allowed: the lag of the GC visits, and a
 * thread that stops while the total is under the cap keeps what it holds; under TSan
 * the total read 444-1,110 KiB, and up to 1,512 with locks that spin, against a bound
 * of two bins, 1,280 KiB; 6.9 MiB without a cap). */
#define CAP_THREADS 16
static const size_t cap_sizes[] = {1024, 2048, 4096, 8192, 12288};
static pthread_barrier_t cap_full, cap_done;

static void *cap_body(void *arg) {
  (void)arg;
  void *p[40];
  for (int round = 0; round < 20; round++) {
    for (unsigned c = 0; c < sizeof cap_sizes / sizeof cap_sizes[0]; c++) {
      for (int i = 0; i < 40; i++) p[i] = strata_malloc(cap_sizes[c]);
      for (int i = 0; i < 40; i++) strata_free(p[i]);
    }
  }
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 40; i++) p[i] = strata_malloc(cap_sizes[0]);
    for (int i = 0; i < 40; i++) strata_free(p[i]);
  }
  pthread_barrier_wait(&cap_full);
  pthread_barrier_wait(&cap_done);
  return NULL;
}

static size_t cached_bytes_of_all_threads(void) {
  size_t total = 0;
  mtx_lock(&tcache_list_lock);
  for (tcache_t *tc = tcache_list; tc; tc = tc->next) {
    for (szind_t i = 1; i < tcache_nbins; i++) total += (size_t)tbin_count(tc, i) * sz_size[i];
  }
  mtx_unlock(&tcache_list_lock);
  return total;
}

static size_t cap_run(size_t cap) {
  opt.tcache_total_max = cap;
  pthread_t t[CAP_THREADS];
  pthread_barrier_init(&cap_full, NULL, CAP_THREADS + 1);
  pthread_barrier_init(&cap_done, NULL, CAP_THREADS + 1);
  for (int i = 0; i < CAP_THREADS; i++) pthread_create(&t[i], NULL, cap_body, NULL);
  pthread_barrier_wait(&cap_full);
  size_t held = cached_bytes_of_all_threads();
  pthread_barrier_wait(&cap_done);
  for (int i = 0; i < CAP_THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&cap_full);
  pthread_barrier_destroy(&cap_done);
  return held;
}

static void test_global_cap_bounds_cached_bytes(void) {
  size_t saved = opt.tcache_total_max, cap = (size_t)256 << 10;
  size_t uncapped = cap_run(0);
  size_t capped = cap_run(cap);
  printf("     cached by %d threads: %zu KiB without a cap, %zu KiB with %zu KiB\n", CAP_THREADS,
         uncapped >> 10, capped >> 10, cap >> 10);
  szind_t one = sz_size2index(cap_sizes[0]);
  size_t bound = cap + 3 * CAP_THREADS * (size_t)tbin_nslots[one] * sz_size[one];
  CHECK(uncapped > bound); /* the threads did fill their caches: the test can tell */
  CHECK(capped <= bound);
  /* Exited threads took their share out: what is published is the main thread's. */
  CHECK_EQ(__atomic_load_n(&tcache_total, __ATOMIC_RELAXED),
           strata_tsd.state == TSD_ACTIVE ? strata_tsd.tcache->bytes : 0);
  opt.tcache_total_max = saved;
}

/* A thread whose traffic is above tcache_max makes no fills or flushes: its uncached
 * allocations drive the GC (one visit per opt.tcache_gc_incr_bytes), which drains the small bins it
 * filled once and stopped using (wl_nativethreads' 100 threads). */
static void *large_traffic_body(void *arg) {
  size_t *left = arg;
  szind_t ind = sz_size2index(320);
  void *p = strata_malloc(320); /* a first fill: half the bin */
  strata_free(p);
  uint32_t before = tbin_count(strata_tsd.tcache, ind);
  size_t big = opt.tcache_max + 1;
  CHECK(before > 1 && big >= opt.tcache_gc_incr_bytes / 2);
  /* Each bin is halved at each visit: 16 passes over the bins empty any bin. */
  for (unsigned i = 0; i < 16 * tcache_nbins * (opt.tcache_gc_incr_bytes / big + 1); i++) {
    void *q = strata_malloc(big);
    CHECK(q != NULL);
    strata_free(q);
  }
  left[0] = before;
  left[1] = tbin_count(strata_tsd.tcache, ind);
  return NULL;
}

static void test_large_allocations_drive_gc(void) {
  pthread_t t;
  size_t left[2];
  pthread_create(&t, NULL, large_traffic_body, left);
  pthread_join(t, NULL);
  printf("     320 B bin: %zu cached after the first fill, %zu after large traffic\n", left[0], left[1]);
  CHECK_EQ(left[1], 0);
}

/* A thread that allocated opt.tcache_gc_incr_bytes above tcache_max fills a small class for the
 * first time with 4 KiB's worth (tcache_large_tick), doubling on the next misses; a thread
 * without such traffic still gets half the bin. */
static void *lean_body(void *arg) {
  size_t *out = arg;
  strata_free(strata_malloc(1024)); /* the thread's cache */
  if (out[0]) { /* large traffic first */
    size_t big = opt.tcache_max + 1;
    for (size_t done = 0; done < opt.tcache_gc_incr_bytes; done += big) strata_free(strata_malloc(big));
  }
  szind_t ind = sz_size2index(256);
  strata_free(strata_malloc(256)); /* the first fill, then the block back */
  out[1] = tbin_count(strata_tsd.tcache, ind);
  out[2] = strata_tsd.tcache->fill[ind]; /* the next miss's fill */
  return NULL;
}

static void test_large_traffic_thread_fills_small_classes_lean(void) {
  szind_t ind = sz_size2index(256);
  size_t half = tbin_nslots[ind] / 2, lean = ((size_t)4 << 10) / 256;
  CHECK(2 * lean < half);
  size_t lean_run[3] = {1, 0, 0}, full_run[3] = {0, 0, 0};
  pthread_t t;
  pthread_create(&t, NULL, lean_body, lean_run);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, lean_body, full_run);
  pthread_join(t, NULL);
  printf("     256 B first fill: %zu with large traffic, %zu without\n", lean_run[1], full_run[1]);
  CHECK_EQ(lean_run[1], lean);
  CHECK_EQ(lean_run[2], 2 * lean); /* doubles on the next miss */
  CHECK_EQ(full_run[1], half);
}

/* Large classes are cached by bytes: 8 blocks of 16 KiB (128 KiB), 4 of 32 KiB (the
 * least). Eight 16 KiB blocks freed in a row all stay in the thread's bin: no extent
 * operation (nlarge_dalloc unchanged), and the next eight mallocs take them back. */
static void test_large_bins_hold_their_bytes(void) {
  szind_t i16 = sz_size2index(16384), i32 = sz_size2index(32768);
  if (i32 >= tcache_nbins) {
    printf("     tcache_max below 32 KiB: skipped\n");
    return;
  }
  CHECK(i16 > SZ_NSMALL);
  CHECK_EQ(tbin_nslots[i16], 8);
  CHECK_EQ(tbin_nslots[i32], 4);
  void *p[8];
  for (unsigned k = 0; k < 8; k++) p[k] = strata_malloc(16384);
  while (tbin_count(strata_tsd.tcache, i16) > 0) (void)strata_malloc(16384); /* leaks at most a few: empties the bin */
  arena_t *a = strata_tsd.tcache->arena;
  uint64_t before = a->nlarge_dalloc;
  for (unsigned k = 0; k < 8; k++) strata_free(p[k]);
  CHECK_EQ(tbin_count(strata_tsd.tcache, i16), 8);
  CHECK_EQ(a->nlarge_dalloc, before);
  for (unsigned k = 0; k < 8; k++) {
    void *q = strata_malloc(16384);
    CHECK(q == p[7 - k]); /* LIFO */
  }
  for (unsigned k = 0; k < 8; k++) strata_free(p[k]);
}

/* A cached large block (16-32 KiB) carries its class in its first page-map entry, so
 * free()'s fast path pushes it into the thread's bin as it does a small region: counted in
 * the bin's ndalloc, which only that path counts (the slow path's push adds to the thread's
 * deallocated bytes instead). realloc keeps the entry exact: a class where the new size is
 * cached, 0 where it is not. A user arena's block gets class 0 and goes back to its arena,
 * never into the thread's cache; a block popped again carries no free tag. */
static void test_large_frees_take_the_fast_path(void) {
  static const size_t sizes[] = {16384, 20480, 32768};
  szind_t i32 = sz_size2index(32768), i64 = sz_size2index(65536);
  if (i32 >= tcache_nbins_malloc || i64 < tcache_nbins) {
    printf("     tcache_max not 32 KiB: skipped\n");
    return;
  }
  arena_t *own = strata_tsd.tcache->arena;
  for (unsigned k = 0; k < 3; k++) {
    szind_t ind = sz_size2index(sizes[k]);
    void *p = strata_malloc(sizes[k]);
    CHECK(p != NULL);
    CHECK_EQ(rt_szind(rtree_read((uintptr_t)p)), ind);
    CHECK_EQ(rt_szind(rtree_read((uintptr_t)p + os_page)), 0); /* interior: no class */
    tbin_t *b = bin_of(ind);
    uint32_t n0 = tbin_count(strata_tsd.tcache, ind);
    CHECK(n0 < tbin_nslots[ind]); /* p's pop left room */
    uint64_t nd0 = tbin_ndalloc(strata_tsd.tcache, ind), ld0 = own->nlarge_dalloc, a0, d0, a1, d1;
    tcache_counts(&strata_tsd, &a0, &d0);
    strata_free(p);
    CHECK(b->head == p);
    CHECK_EQ(tbin_count(strata_tsd.tcache, ind), n0 + 1);
    CHECK_EQ(tbin_ndalloc(strata_tsd.tcache, ind) - nd0, 1); /* the fast path's push */
    CHECK_EQ(own->nlarge_dalloc, ld0);
    tcache_counts(&strata_tsd, &a1, &d1);
    CHECK_EQ(d1 - d0, sizes[k]);
    void *q = strata_malloc(sizes[k]);
    CHECK(q == p);
    CHECK_EQ(TAG_WORD(q), 0);
    strata_free(q);
  }
  /* realloc in place or moved: the entry names the new class, or none. */
  szind_t i16 = sz_size2index(16384), i20 = sz_size2index(20480);
  void *r = strata_malloc(16384);
  CHECK_EQ(rt_szind(rtree_read((uintptr_t)r)), i16);
  r = strata_realloc(r, 20000);
  CHECK_EQ(rt_szind(rtree_read((uintptr_t)r)), i20);
  r = strata_realloc(r, 65536);
  CHECK_EQ(rt_szind(rtree_read((uintptr_t)r)), 0);
  r = strata_realloc(r, 32768);
  CHECK_EQ(rt_szind(rtree_read((uintptr_t)r)), i32);
  strata_free(r);
  /* A user arena's block: class 0, back to its arena. */
  unsigned ua;
  size_t sz = sizeof ua;
  CHECK_EQ(au_arenas_create(NULL, 0, &ua, &sz, NULL, 0), 0);
  arena_t *u = arena_get(ua);
  CHECK(u != NULL && u->user);
  if (u == NULL) return;
  void *x = strata_mallocx(16384, MALLOCX_ARENA(ua));
  CHECK(x != NULL);
  CHECK_EQ(rt_szind(rtree_read((uintptr_t)x)), 0);
  tbin_t *b16 = bin_of(i16);
  void *hold = strata_malloc(16384); /* the bin has room: only the class keeps x out */
  uint32_t n0 = tbin_count(strata_tsd.tcache, i16);
  CHECK(n0 < tbin_nslots[i16]);
  uint64_t nd0 = tbin_ndalloc(strata_tsd.tcache, i16), ud0 = u->nlarge_dalloc;
  strata_free(x);
  CHECK(b16->head != x);
  CHECK_EQ(tbin_count(strata_tsd.tcache, i16), n0);
  CHECK_EQ(tbin_ndalloc(strata_tsd.tcache, i16), nd0);
  CHECK_EQ(u->nlarge_dalloc - ud0, 1);
  strata_free(hold);
}

/* More than tcache_crowd_nlive live thread caches: a cache made then keeps only the
 * classes up to 1 KiB (4 KiB and 16 KiB blocks freed go back to their arena, a 64 B one
 * is cached); once the others have exited, a round of GC visits opens them again.
 * Barriers, no timing. */
static pthread_barrier_t crowd_live, crowd_done, crowd_gone;

static void *crowd_member(void *arg) {
  (void)arg;
  strata_free(strata_malloc(64)); /* its cache */
  pthread_barrier_wait(&crowd_live);
  pthread_barrier_wait(&crowd_done);
  return NULL;
}

static void *crowd_checker(void *arg) {
  size_t *out = arg;
  szind_t i4k = sz_size2index(4096), i64 = sz_size2index(64);
  pthread_barrier_wait(&crowd_live); /* every member holds a cache */
  out[0] = __atomic_load_n(&tcache_nlive, __ATOMIC_RELAXED);
  strata_free(strata_malloc(64)); /* this cache is made crowded */
  tcache_t *tc = strata_tsd.tcache;
  out[1] = tc->nbins_open;
  void *p = strata_malloc(4096);
  memset(p, 1, 4096);
  strata_free(p);
  out[2] = tc->bins[i4k].avail + (tc->bins[i4k].head != TBIN_END); /* 0: nothing cached, no room */
  void *q = strata_malloc(64);
  strata_free(q);
  out[3] = tbin_count(tc, i64); /* still cached */
  szind_t i16k = sz_size2index(16384); /* a large class: back to the extents at once */
  uint64_t before16 = tc->arena->nlarge_dalloc;
  void *l = strata_malloc(16384);
  memset(l, 2, 16384);
  strata_free(l);
  out[7] = tc->bins[i16k].avail + (tc->bins[i16k].head != TBIN_END) + (tc->arena->nlarge_dalloc - before16 != 1);
  pthread_barrier_wait(&crowd_done);
  pthread_barrier_wait(&crowd_gone); /* the members have exited */
  out[4] = __atomic_load_n(&tcache_nlive, __ATOMIC_RELAXED);
  size_t big = opt.tcache_max + 1; /* uncached traffic: a GC visit per opt.tcache_gc_incr_bytes, */
  for (unsigned v = 0; v < 2 * tcache_nbins; v++) /* and a crowd check per round of the bins */
    for (size_t done = 0; done < opt.tcache_gc_incr_bytes; done += big) strata_free(strata_malloc(big));
  out[5] = tc->nbins_open;
  p = strata_malloc(4096);
  size_t before = tbin_count(tc, i4k);
  strata_free(p);
  out[6] = tbin_count(tc, i4k) - before; /* 1: cached again */
  return NULL;
}

static void test_crowded_caches_keep_small_classes_only(void) {
  unsigned n = tcache_crowd_nlive + 4;
  if (tcache_nbins <= sz_size2index(16384) || n > 512) {
    printf("     tcache_max below 16 KiB or %u CPUs: skipped\n", os_ncpus);
    return;
  }
  pthread_t *t = strata_malloc(sizeof(pthread_t) * n), c;
  size_t out[8] = {0};
  pthread_barrier_init(&crowd_live, NULL, n + 1);
  pthread_barrier_init(&crowd_done, NULL, n + 1);
  pthread_barrier_init(&crowd_gone, NULL, 2);
  for (unsigned i = 0; i < n; i++) CHECK_EQ(pthread_create(&t[i], NULL, crowd_member, NULL), 0);
  CHECK_EQ(pthread_create(&c, NULL, crowd_checker, out), 0);
  for (unsigned i = 0; i < n; i++) pthread_join(t[i], NULL);
  pthread_barrier_wait(&crowd_gone);
  pthread_join(c, NULL);
  printf("     %zu caches live (crowded above %u): %zu bins open, 4 KiB room %zu, 64 B cached %zu; "
         "then %zu live: %zu open, 4 KiB cached %zu\n",
         out[0], tcache_crowd_nlive, out[1], out[2], out[3], out[4], out[5], out[6]);
  CHECK(out[0] > tcache_crowd_nlive);
  CHECK_EQ(out[1], tcache_crowd_nbins);
  CHECK_EQ(out[2], 0);
  CHECK_EQ(out[7], 0); /* the 16 KiB block was not cached and went back to its extents */
  CHECK(out[3] >= 1);
  CHECK(out[4] <= tcache_crowd_nlive / 2);
  CHECK_EQ(out[5], tcache_nbins);
  CHECK_EQ(out[6], 1);
  pthread_barrier_destroy(&crowd_live);
  pthread_barrier_destroy(&crowd_done);
  pthread_barrier_destroy(&crowd_gone);
  strata_free(t);
}

/* Crowded slab geometry (docs/design.md, "Size classes and slab geometry"): a page for the classes up to 128 B, never
 * more than the usual slab, regions within it. */
static void test_crowded_slab_geometry(void) {
  for (szind_t i = 1; i <= SZ_NSMALL; i++) {
    const bin_info_t *bi = &bin_info[i];
    CHECK(bi->slab_size_crowd <= bi->slab_size && bi->slab_size_crowd % os_page == 0);
    CHECK(bi->nregs_crowd >= 1 && bi->nregs_crowd == bi->slab_size_crowd / bi->size);
    CHECK_EQ(bi->used_crowd, (uint64_t)bi->nregs_crowd * bi->size);
    CHECK_EQ(bi->used, (uint64_t)bi->nregs * bi->size);
    if (bi->size <= 128 && os_page == 4096) CHECK_EQ(bi->slab_size_crowd, os_page);
  }
}

/* Regions of class ind from arena a, one fill at a time, until the bin makes a slab: that
 * slab's size (0 if none came within the cap). The regions go back to the bin. */
static void *geo_regs[20000];
static size_t next_slab_size(arena_t *a, szind_t ind) {
  bin_t *bin = &a->bins[ind];
  mtx_lock(&bin->lock);
  uint64_t ns = bin->nslabs;
  mtx_unlock(&bin->lock);
  unsigned n = 0;
  size_t size = 0;
  while (n < sizeof(geo_regs) / sizeof(geo_regs[0]) && bin_fill(a, ind, &geo_regs[n], 1) == 1) {
    n++;
    mtx_lock(&bin->lock);
    bool made = bin->nslabs != ns;
    mtx_unlock(&bin->lock);
    if (made) {
      edata_t *s = rt_edata(rtree_read((uintptr_t)geo_regs[n - 1]));
      size = s->size;
      CHECK(s->slab && s->nfree == slab_nregs(s, &bin_info[ind]) - 1); /* a fresh slab, one region taken */
      break;
    }
  }
  bin_dalloc_batch(a, ind, geo_regs, n);
  return size;
}

/* While more than tcache_crowd_nlive caches are live, an ordinary arena's new slab of a
 * small class takes the crowded geometry; its regions go back through a cache's flush;
 * after the members exit, a fresh thread's cache reads the thread count again (at most
 * every 10 ms: loops until it did) and new slabs are the usual size again. Then threads
 * that hold no cache yet (parked before their first malloc) are counted too. */
static pthread_barrier_t geo_live, geo_done;
static void *geo_member(void *arg) {
  (void)arg;
  strata_free(strata_malloc(64));
  pthread_barrier_wait(&geo_live);
  pthread_barrier_wait(&geo_done);
  return NULL;
}
static void *geo_parked(void *arg) { /* no malloc: no cache */
  (void)arg;
  pthread_barrier_wait(&geo_live);
  pthread_barrier_wait(&geo_done);
  return NULL;
}
static void *geo_probe(void *arg) { /* a new cache: reads the thread count if 10 ms passed */
  (void)arg;
  strata_free(strata_malloc(64));
  return NULL;
}
static void geo_probe_until(bool crowded) {
  for (unsigned k = 0; k < 2000; k++) {
    unsigned seen = __atomic_load_n(&tcache_nthreads_seen, __ATOMIC_RELAXED);
    if ((seen > tcache_crowd_nlive) == crowded) return;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, geo_probe, NULL), 0);
    pthread_join(t, NULL);
  }
  CHECK(!"the thread count was never read");
}
static void test_crowded_arenas_make_small_slabs(void) {
  unsigned n = tcache_crowd_nlive + 4;
  szind_t ind = sz_size2index(112);
  if (n > 512 || tcache_nbins == 0 || bin_info[ind].slab_size_crowd == bin_info[ind].slab_size) {
    printf("     %u CPUs, no caches or one geometry: skipped\n", os_ncpus);
    return;
  }
  arena_t *a = arena_get(narenas - 1);
  CHECK(a != NULL);
  pthread_t *t = strata_malloc(sizeof(pthread_t) * n);
  for (int round = 0; round < 2; round++) { /* 0: live caches, 1: parked threads */
    pthread_barrier_init(&geo_live, NULL, n + 1);
    pthread_barrier_init(&geo_done, NULL, n + 1);
    for (unsigned i = 0; i < n; i++) CHECK_EQ(pthread_create(&t[i], NULL, round ? geo_parked : geo_member, NULL), 0);
    pthread_barrier_wait(&geo_live);
    if (round == 1) geo_probe_until(true);
    size_t crowded = next_slab_size(a, ind);
    /* Regions of the crowded slab through this thread's cache and its flush: every one
     * back in its bin. */
    bin_t *bin = &a->bins[ind];
    mtx_lock(&bin->lock);
    size_t regs0 = bin->curregs - bin->remote_count; /* remote chains: handed back, not yet in */
    mtx_unlock(&bin->lock);
    void *p[64];
    unsigned ncrowd = 0;
    for (unsigned j = 0; j < 64; j++) {
      p[j] = strata_mallocx(112, MALLOCX_ARENA(narenas - 1) | MALLOCX_TCACHE_NONE);
      CHECK(p[j] != NULL);
      ncrowd += rt_edata(rtree_read((uintptr_t)p[j]))->size == bin_info[ind].slab_size_crowd;
    }
    CHECK(ncrowd >= bin_info[ind].nregs_crowd); /* a whole crowded slab at least */
    for (unsigned j = 0; j < 64; j++) strata_free(p[j]);
    CHECK_EQ(strata_mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    mtx_lock(&bin->lock);
    size_t regs1 = bin->curregs - bin->remote_count;
    mtx_unlock(&bin->lock);
    CHECK_EQ(regs1, regs0);
    pthread_barrier_wait(&geo_done);
    for (unsigned i = 0; i < n; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&geo_live);
    pthread_barrier_destroy(&geo_done);
    geo_probe_until(false);
    size_t usual = next_slab_size(a, ind);
    printf("     %s: %u threads, new slabs %zu bytes crowded, %zu after\n", round ? "parked" : "live caches", n, crowded, usual);
    CHECK_EQ(crowded, bin_info[ind].slab_size_crowd);
    CHECK_EQ(usual, bin_info[ind].slab_size);
  }
  strata_free(t);
}

/* Bins that follow bursts: a thread that allocates a burst of 64 B blocks larger than the
 * bin and frees it, again and again, makes round trips (its flushes return what its fills
 * brought); the bin grows until the burst fits, after which a burst makes no fill or
 * flush (the bin's dbase moves only on those). Uncached traffic then drives the GC, which
 * finds the bin idle and halves it back to its start. The thread's growth stays within
 * its bound in bytes, however many classes burst. */
#define BURST 1000
static void *burst_body(void *arg) {
  size_t *out = arg;
  szind_t ind = sz_size2index(64);
  tcache_t *tc;
  static void *p[BURST];
  for (int round = 0; round < 12; round++) {
    for (int i = 0; i < BURST; i++) p[i] = strata_malloc(64);
    for (int i = 0; i < BURST; i++) strata_free(p[i]);
  }
  tc = strata_tsd.tcache;
  out[0] = tbin_nslots[ind];
  out[1] = tc->max[ind];
  uint64_t dbase = tc->bins[ind].dbase;
  for (int i = 0; i < BURST; i++) p[i] = strata_malloc(64);
  for (int i = 0; i < BURST; i++) strata_free(p[i]);
  out[2] = tc->bins[ind].dbase != dbase; /* a fill or a flush happened */
  out[3] = tbin_count(tc, ind);
  /* Idle: only uncached blocks from now on, a GC visit per tcache_gc_incr_bytes. */
  size_t big = opt.tcache_max + 1;
  for (unsigned i = 0; i < 16 * tcache_nbins * (opt.tcache_gc_incr_bytes / big + 1); i++) strata_free(strata_malloc(big));
  out[4] = tc->max[ind];
  out[5] = tbin_count(tc, ind);
  /* Bursts in every small class up to 1 KiB: growth stops at the thread's bound. */
  for (szind_t c = 1; c <= SZ_NSMALL && sz_size[c] <= 1024; c++) {
    for (int round = 0; round < 8; round++) {
      for (int i = 0; i < BURST; i++) p[i] = strata_malloc(sz_size[c]);
      for (int i = 0; i < BURST; i++) strata_free(p[i]);
    }
  }
  size_t grown = 0;
  for (szind_t c = 1; c < tcache_nbins; c++) {
    CHECK(tc->max[c] >= tbin_nslots[c] || c >= tc->nbins_open);
    CHECK((size_t)tc->max[c] * sz_size[c] <= ((size_t)128 << 10) || tc->max[c] == tbin_nslots[c]);
    if (tc->max[c] > tbin_nslots[c]) grown += (size_t)(tc->max[c] - tbin_nslots[c]) * sz_size[c];
  }
  out[6] = grown;
  out[7] = tc->grown;
  return NULL;
}

static void test_bins_grow_with_bursts_and_shrink_when_idle(void) {
  pthread_t t;
  size_t out[8];
  pthread_create(&t, NULL, burst_body, out);
  pthread_join(t, NULL);
  printf("     64 B bin: %zu slots at first, %zu after bursts of %d (then %s, %zu cached), %zu after idle GC (%zu cached)\n",
         out[0], out[1], BURST, out[2] ? "fills/flushes" : "no fill or flush", out[3], out[4], out[5]);
  printf("     bursts in every class to 1 KiB: %zu bytes grown (bound 512 KiB)\n", out[6]);
  CHECK(out[0] < BURST);
  CHECK(out[1] >= BURST && out[1] <= 2 * BURST);
  CHECK_EQ(out[2], 0);
  CHECK(out[3] >= BURST); /* the burst, and what its fills brought besides */
  CHECK_EQ(out[4], out[0]);
  CHECK(out[5] <= out[0]);
  CHECK_EQ(out[6], out[7]);
  CHECK(out[6] > 0 && out[6] <= ((size_t)512 << 10));
}

/* The process-wide bound: eight threads bursting in every class up to 1 KiB would grow
 * about 400 KiB each; together they stay within 2 MiB, and a thread's growth goes back when
 * it exits. */
#define NGROW 8
static pthread_barrier_t grow_bar;
static void *grow_body(void *arg) {
  (void)arg;
  void **p = strata_malloc(BURST * sizeof(void *));
  for (szind_t c = 1; c <= SZ_NSMALL && sz_size[c] <= 1024; c++) {
    for (int round = 0; round < 8; round++) {
      for (int i = 0; i < BURST; i++) p[i] = strata_malloc(sz_size[c]);
      for (int i = 0; i < BURST; i++) strata_free(p[i]);
    }
  }
  strata_free(p);
  pthread_barrier_wait(&grow_bar); /* grown: the main thread reads the total */
  pthread_barrier_wait(&grow_bar);
  return NULL;
}

static void test_bins_grow_within_a_process_wide_bound(void) {
  pthread_t t[NGROW];
  pthread_barrier_init(&grow_bar, NULL, NGROW + 1);
  for (int i = 0; i < NGROW; i++) pthread_create(&t[i], NULL, grow_body, NULL);
  pthread_barrier_wait(&grow_bar);
  size_t all = tcache_grown_bytes();
  pthread_barrier_wait(&grow_bar);
  for (int i = 0; i < NGROW; i++) pthread_join(t[i], NULL);
  size_t mine = strata_tsd.tcache ? strata_tsd.tcache->grown : 0;
  printf("     %d threads bursting: %zu bytes grown together (bound 2 MiB); %zu after they exited\n", NGROW, all,
         tcache_grown_bytes());
  CHECK(all > ((size_t)512 << 10) && all <= ((size_t)2 << 20));
  CHECK_EQ(tcache_grown_bytes(), mine);
  pthread_barrier_destroy(&grow_bar);
}

int main(void) {
  if (strata_init()) return 1;
  printf("unit: tcache\n");
  RUN(test_miss_fills_half_the_bin);
  RUN(test_overflow_flushes_half);
  RUN(test_gc_drains_idle_bin);
  RUN(test_thread_exit_flushes_cache);
  RUN(test_thread_counters_are_exact);
  RUN(test_first_free_of_a_thread_is_not_cached);
  RUN(test_mixed_owner_flush_returns_every_region);
  RUN(test_consumer_overflow_flushes_the_whole_bin);
  RUN(test_global_cap_bounds_cached_bytes);
  RUN(test_large_allocations_drive_gc);
  RUN(test_large_traffic_thread_fills_small_classes_lean);
  RUN(test_large_bins_hold_their_bytes);
  RUN(test_large_frees_take_the_fast_path);
  RUN(test_crowded_caches_keep_small_classes_only);
  RUN(test_crowded_slab_geometry);
  RUN(test_crowded_arenas_make_small_slabs);
  RUN(test_bins_grow_with_bursts_and_shrink_when_idle);
  RUN(test_bins_grow_within_a_process_wide_bound);
  UNIT_EXIT();
}

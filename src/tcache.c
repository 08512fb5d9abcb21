/*
 * tcache.c - per-thread caches: for each class up to tcache_max, a bounded LIFO of free
 * regions (an intrusive list) that the inline fast paths pop and push. Misses fill in
 * one batch under the bin lock (above 320 B a fill grows from 4 KiB's worth to half the
 * bin while the class keeps missing); overflows flush half: a batch that belongs to
 * one other arena goes to that bin's remote list as a chain, anything else back to the
 * bitmaps grouped by owning arena, one lock per batch, never one per object. An
 * incremental GC flushes bins a thread stopped using, and empties them while all
 * threads' caches together hold more than tcache_total_max; a thread's cache is flushed
 * by a pthread key destructor and recycled.
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* Every bin empty with max 0 and c32 0: the fast paths always miss, and free's never
 * writes it (its room test, a decrement, follows the region test that c32 0 fails). */
tcache_t tcache_empty = {.bins = {[0 ... TCACHE_NBINS_MAX - 1] = {.head = TBIN_END, .link_mask = ~(uint64_t)0}}};
uintptr_t tcache_key;
unsigned tcache_nbins;
unsigned tcache_nbins_malloc;
uint32_t tbin_nslots[TCACHE_NBINS_MAX];
static uint16_t tbin_grow_max[TCACHE_NBINS_MAX]; /* the most a bin grows to: TBIN_GROW_BYTES' worth */
static uint16_t tbin_fill_max[TCACHE_NBINS_MAX];  /* half the starting capacity: the largest fill's doubling */
static uint8_t tbin_flush_div[TCACHE_NBINS_MAX];  /* lg_tcache_flush_small_div or _large_div */
static uint32_t tbin_c32[TCACHE_NBINS_MAX]; /* tbin_t.c32 */
static uint16_t tbin_fill_init[TCACHE_NBINS_MAX]; /* a new thread's first fill */
static uint16_t tbin_fill_lean[TCACHE_NBINS_MAX]; /* FILL_INIT_BYTES' worth: see tcache_large_tick */
mtx_t tcache_list_lock = MTX_INITIALIZER;
tcache_t *tcache_list;      /* live caches; guarded by tcache_list_lock */
unsigned tcache_nlive;      /* caches on tcache_list: written under tcache_list_lock, read relaxed */
static tcache_t *tcache_pool; /* caches of exited threads, for reuse */
size_t tcache_total;

/* A small class starts with twice a slab's regions, clamped to [20, 200] (jemalloc's
 * defaults, which balance refill frequency against memory held per thread: the options
 * tcache_nslots_small_min/max and lg_tcache_nslots_mul); large classes 4 at least. */
#define TBIN_LARGE 4
/* Bins that follow bursts (tcache_bin_grow): a thread that frees a burst of a class larger
 * than its bin and allocates it again pays a flush and a refill per burst (glibc-simple's
 * 400- and 1,600-block bursts: 136 M of its 2,546 M instructions; espresso's: 420 M). A
 * bin whose flushes return regions its own fills brought (round trips) TRIPS_GROW times
 * between two GC visits doubles its capacity, up to TBIN_GROW_BYTES' worth (1,600 blocks
 * of 64 B fit) and while the thread's bins together have grown by at most
 * TCACHE_GROW_BYTES and every thread's together by at most TCACHE_GROW_ALL_BYTES; a GC
 * visit that finds the bin idle halves it back toward its start. The process-wide bound
 * keeps a server's hundreds of threads from each growing its share (512 KiB each: 50 MiB
 * for 100 threads); a program's few busy threads keep the whole gain (glibc-simple and
 * espresso are single-threaded). */
#define TRIPS_GROW 2
#define TRIP_FILLED 0x80 /* tcache_t.trips: filled since the last flush */
#define TBIN_GROW_BYTES ((size_t)128 << 10)
#define TCACHE_GROW_BYTES ((size_t)512 << 10)
#define TCACHE_GROW_ALL_BYTES ((size_t)2 << 20)
/* Every cache's grown bytes (tc->grown) together (atomic); a retired cache gives its share
 * back. A forked child keeps its parent's other threads' shares (it grows less). */
static size_t tcache_grown_all;
/* Large classes hold up to this many bytes (at least TBIN_LARGE blocks): 8 blocks of 16 KiB,
 * 4 of 28-32 KiB. A large miss or flush is an extent operation (~1,000 and ~450
 * instructions under the elock); with 4 slots a thread that allocates and frees 16 KiB
 * blocks at random went to its arena every 4-5 calls (wl_xthread: 8,600 of 40,000). */
#define TBIN_LARGE_BYTES ((size_t)128 << 10)
/* The GC looks at one bin every GC_INTERVAL fills and flushes. */
#define GC_INTERVAL 32
#define FLUSH_BUF 256
/* A whole cache's flush (thread exit, thread.tcache.flush) batches this many regions: its
 * buffer is 0.8 KiB of stack, not FLUSH_BUF's 6 KiB, so a thread that exits after a few
 * allocations does not fault in stack pages its own work never touched (mleak: one page
 * fault more per thread than glibc's, where a stack comes freshly mapped). */
#define FLUSH_ALL_BUF 32
/* One flush batch's buffer: its slab runs (small classes) or extents (large ones). */
typedef union {
  slab_run_t runs[FLUSH_BUF];
  edata_t *eds[FLUSH_BUF];
} flush_buf_t;
typedef union {
  slab_run_t runs[FLUSH_ALL_BUF];
  edata_t *eds[FLUSH_ALL_BUF];
} flush_all_buf_t;
/* A thread's first fill of a class above FILL_FULL_MAX brings at most this many bytes
 * (at least one region); each further miss doubles it. 100 threads that each touch 20
 * classes of 1-14 KiB once would otherwise take 10 regions of each (wl_nativethreads:
 * peak RSS 3x jemalloc's); at 32 KiB, a JVM's 100 threads still held 10-13 MiB in
 * first fills they never used (docs/design.md, "Thread caches"). Classes up to
 * 320 B start at the full half-bin fill, which the producer/consumer figure depends on. */
#define FILL_INIT_BYTES ((size_t)4 << 10)
#define FILL_FULL_MAX 320
/* Crowded caches (tcache_crowd): with more than CROWD_PER_CPU live thread caches per CPU
 * a thread runs a small share of the time, and its cached blocks of the larger classes
 * mostly wait for it (wl_nativethreads, 100 threads on 2 CPUs: 326 KiB a cache at the
 * peak, 24 MiB in all). Its cache then keeps only the classes up to CROWD_MAX: the
 * interleaved rounds' peak fell from 39-42 to 31-34 MiB (docs/design.md, "Thread caches";
 * 256 B and 4 KiB did no better). 16 per CPU leaves every other
 * workload (at most 16 threads) untouched on 2 CPUs; the caches open again at half. */
#define CROWD_PER_CPU 16
#define CROWD_MAX 1024
unsigned tcache_crowd_nlive; /* crowded above this many live caches */
szind_t tcache_crowd_nbins;  /* classes below this one stay cached when crowded */

void tcache_boot(void) {
  if (!opt.tcache || opt.junk != JUNK_NONE || opt.zero) {
    tcache_nbins = 0; /* junk and zero need every allocation on the slow path */
    return;
  }
  size_t maxsz = opt.tcache_max;
  szind_t last = 0;
  if (maxsz >= 8) {
    last = sz_size2index(maxsz);
    if (last == 0 || last >= TCACHE_NBINS_MAX) last = TCACHE_NBINS_MAX - 1;
    if (sz_size[last] > maxsz) last--;
  }
  tcache_nbins = last + 1;
  tcache_nbins_malloc = prof_on ? 0 : tcache_nbins;
  /* jemalloc's rule: a max below the min lowers the min. */
  uint32_t smax = opt.tcache_nslots_small_max, smin = opt.tcache_nslots_small_min;
  if (smin > smax) smin = smax;
  for (szind_t i = 1; i < tcache_nbins; i++) {
    if (i <= SZ_NSMALL) {
      int64_t mul = opt.lg_tcache_nslots_mul;
      uint64_t m = mul >= 0 ? (uint64_t)bin_info[i].nregs << mul : (uint64_t)bin_info[i].nregs >> -mul;
      tbin_nslots[i] = m < smin ? smin : m > smax ? smax : (uint32_t)m;
      size_t g = TBIN_GROW_BYTES / sz_size[i];
      if (g > TCACHE_NSLOTS_MAX) g = TCACHE_NSLOTS_MAX;
      tbin_grow_max[i] = (uint16_t)(g > tbin_nslots[i] ? g : tbin_nslots[i]);
    } else {
      size_t m = TBIN_LARGE_BYTES / sz_size[i];
      tbin_nslots[i] = m > TBIN_LARGE ? (uint32_t)m : TBIN_LARGE;
      tbin_grow_max[i] = (uint16_t)tbin_nslots[i]; /* an extent per block: no growth */
    }
    tbin_flush_div[i] = (uint8_t)(i <= SZ_NSMALL ? opt.lg_tcache_flush_small_div : opt.lg_tcache_flush_large_div);
    tbin_fill_max[i] = (uint16_t)(tbin_nslots[i] / 2 ? tbin_nslots[i] / 2 : 1);
    size_t first = sz_size[i] <= FILL_FULL_MAX ? tbin_fill_max[i] : FILL_INIT_BYTES / sz_size[i];
    tbin_fill_init[i] = (uint16_t)(first < 1 ? 1 : first < tbin_fill_max[i] ? first : tbin_fill_max[i]);
    size_t lean = FILL_INIT_BYTES / sz_size[i];
    tbin_fill_lean[i] = (uint16_t)(lean < 1 ? 1 : lean < tbin_fill_init[i] ? lean : tbin_fill_init[i]);
    tbin_c32[i] = i <= SZ_NSMALL ? (uint32_t)bin_info[i].div_magic : (uint32_t)1 << 20;
  }
  /* The 8-byte class: c32 0 (and a full link mask, tcache_reset_bins), so that malloc's and
   * free's fast paths, which clear or write a second word, always miss it; malloc_tiny and
   * free_tiny pop and push it (alloc.c). */
  tbin_c32[SZ_TINY_IND] = 0;
  tcache_crowd_nlive = CROWD_PER_CPU * os_ncpus;
  tcache_crowd_nbins = (szind_t)sz_size2index(CROWD_MAX) + 1;
  if (tcache_crowd_nbins > tcache_nbins) tcache_crowd_nbins = tcache_nbins;
}

/* Every bin empty, with its room and its region and link checks. */
static void tcache_reset_bins(tcache_t *tc) {
  memset(tc, 0, sizeof(*tc));
  for (szind_t i = 0; i < TCACHE_NBINS_MAX; i++) {
    tc->bins[i].head = TBIN_END;
    tc->bins[i].link_mask = ~(uint64_t)0; /* always misses: bin 0 and classes not cached */
  }
  for (szind_t i = 1; i < tcache_nbins; i++) {
    tc->max[i] = (uint16_t)tbin_nslots[i];
    tc->keep[i] = (uint16_t)(tbin_nslots[i] >> tbin_flush_div[i]);
    tbin_avail_set(&tc->bins[i], tbin_nslots[i]);
    tc->bins[i].c32 = tbin_c32[i];
    if (i != SZ_TINY_IND) tc->bins[i].link_mask = sz_link_mask[i]; /* 8 bytes: always misses */
    tc->fill[i] = tbin_fill_init[i];
  }
  tc->gc_every = GC_INTERVAL;
  tc->nbins_open = tcache_nbins;
}

/*
 * A thread cache among too many (docs/design.md, "Thread caches"): above tcache_crowd_nlive live
 * caches, the classes from tcache_crowd_nbins up close: their bins are flushed and get
 * no room (avail 0, so every free of them reaches tcache_dalloc_hard and every malloc
 * tcache_alloc_hard, which serve them from the arena). Checked when the cache is made
 * and at GC visits; they open again at half the count. Thread caches only.
 */
static void tcache_flush_bin(tcache_t *tc, szind_t ind, uint32_t keep);
static void tcache_publish(tcache_t *tc, szind_t ind);

/* Bin ind's capacity becomes max (it holds no more than that): its room moves with it,
 * and tc->grown keeps the bytes above the class's start. */
static void tcache_bin_resize(tcache_t *tc, szind_t ind, uint32_t max) {
  uint32_t old = tc->max[ind], start = tbin_nslots[ind];
  sassert(tbin_count(tc, ind) <= max);
  size_t before = tc->grown;
  tc->grown -= (size_t)(old > start ? old - start : 0) * sz_size[ind];
  tc->grown += (size_t)(max > start ? max - start : 0) * sz_size[ind];
  if (tc->grown != before) __atomic_add_fetch(&tcache_grown_all, tc->grown - before, __ATOMIC_RELAXED); /* mod 2^64 */
  tc->max[ind] = (uint16_t)max;
  tc->keep[ind] = (uint16_t)(max >> tbin_flush_div[ind]);
  tbin_avail_move(&tc->bins[ind], (int64_t)max - (int64_t)old);
  /* A grown bin fills half of itself at once (the fills' doubling stops at half the
   * starting capacity); a shrunk one no more than half of what is left. */
  uint16_t half = (uint16_t)(max / 2 ? max / 2 : 1);
  if (tc->fill[ind] != 0 && (max > start || tc->fill[ind] > half)) tc->fill[ind] = half; /* 0: closed */
}

/* The process's threads, 0 if unknown: /proc/self/task has a link per thread besides
 * "." and ".." (one stat call: no open, read or parse). */
static unsigned threads_read(void) {
  struct stat st;
  if (fstatat(AT_FDCWD, "/proc/self/task", &st, 0) != 0 || st.st_nlink < 3) return 0;
  return (unsigned)(st.st_nlink - 2);
}

/* Threads that exist but have not allocated yet hold no cache: 100 threads released by a
 * barrier make their caches one by one, and the arenas' first slabs come from the first
 * few, uncrowded. A new cache other than the first reads the process's thread count, at
 * most once per THREADS_PROBE_NS (one stat call of /proc/self/task, 2-3 us), and slab_new
 * takes the crowded geometry while it or the live caches are over tcache_crowd_nlive. A
 * count that went stale as threads exited is read again at the next thread's cache. */
#define THREADS_PROBE_NS ((uint64_t)10 * 1000000u)
unsigned tcache_nthreads_seen;  /* atomic: the last count read */
static uint64_t threads_probe_ns; /* atomic: when it was read */
static void threads_probe(void) {
  uint64_t now = decay_now(), last = __atomic_load_n(&threads_probe_ns, __ATOMIC_RELAXED);
  if (last != 0 && now - last < THREADS_PROBE_NS) return;
  if (!__atomic_compare_exchange_n(&threads_probe_ns, &last, now, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;
  __atomic_store_n(&tcache_nthreads_seen, threads_read(), __ATOMIC_RELAXED);
}

static NOINLINE void tcache_crowd(tcache_t *tc) {
  unsigned n = __atomic_load_n(&tcache_nlive, __ATOMIC_RELAXED);
  if (n > tcache_crowd_nlive && tc->nbins_open > tcache_crowd_nbins) {
    for (szind_t i = tcache_crowd_nbins; i < tc->nbins_open; i++) {
      tcache_flush_bin(tc, i, 0);
      tcache_publish(tc, i);
      tcache_bin_resize(tc, i, 0);
      tc->fill[i] = 0; /* what tcache_alloc_hard tests */
      tc->events[i] = 0;
    }
    tc->nbins_open = tcache_crowd_nbins;
  } else if (n <= tcache_crowd_nlive / 2 && tc->nbins_open < tcache_nbins) {
    for (szind_t i = tc->nbins_open; i < tcache_nbins; i++) {
      tcache_bin_resize(tc, i, tbin_nslots[i]);
      tc->fill[i] = tbin_fill_init[i];
    }
    tc->nbins_open = tcache_nbins;
  }
}

tcache_t *tcache_get_slow(tsd_t *tsd) {
  if (tsd->state == TSD_ACTIVE) return tsd->tcache;
  if (tsd->state != TSD_NOMINAL || tcache_nbins == 0) return NULL;
  /* A thread bound to a user arena runs uncached: a reset may discard its blocks. */
  if (tsd->arena != NULL && tsd->arena->user) return NULL;
  if (!__atomic_load_n(&tsd_key_ready, __ATOMIC_ACQUIRE)) return NULL; /* retry later */
  mtx_lock(&tcache_list_lock);
  tcache_t *tc = tcache_pool;
  if (tc) tcache_pool = tc->next;
  mtx_unlock(&tcache_list_lock);
  if (tc == NULL && (tc = meta_alloc(sizeof(tcache_t))) == NULL) return NULL;
  tcache_reset_bins(tc);
  if (tsd->arena == NULL) tsd->arena = arena_choose();
  tc->arena = tsd->arena;
  mtx_lock(&tcache_list_lock);
  tc->next = tcache_list;
  if (tcache_list) tcache_list->prev = tc;
  tcache_list = tc;
  __atomic_store_n(&tcache_nlive, tcache_nlive + 1, __ATOMIC_RELAXED);
  bool probe = tcache_nlive >= 2;
  mtx_unlock(&tcache_list_lock);
  if (probe) threads_probe();
  tcache_crowd(tc);
  tsd->tcache = tc;
  tsd->state = TSD_ACTIVE;
  /* May allocate (glibc's second-level key array): the cache is live, so that is fine. */
  pthread_setspecific(tsd_key, tc);
  return tc;
}

typedef struct {
  void *last;
  unsigned nruns, remote;
  bool one_remote;
} flush_scan_t;

/* Cut the chain of n regions at p into runs of the same slab (the rtree is consulted
 * once per run) and check that each pointer is a region's start: its offset from the
 * run's slab is a multiple of the size within the slab's used bytes. Power-of-two
 * classes skip the multiple test (check_start false): free() checked the alignment,
 * which proves it. Specialised for both, so the per-region loop has no test of it. */
/* Heap profiling (prof.c): a slab's granule carries class 0 where a sampled block starts
 * (its other regions are cached as any other). Out of line, so the scan's code does not
 * change with prof:false. */
static NOINLINE bool flush_prof_class_ok(uint64_t e, szind_t ind) {
  edata_t *ed = rt_edata(e);
  if (!prof_on || !(e & RT_SLAB) || ed == NULL) return false;
  return rt_szind(e) == 0 && ed->szind == ind && !arena_ind_is_user(edata_arena_ind(ed));
}

static inline __attribute__((always_inline)) flush_scan_t flush_scan(void *p, uint32_t n, szind_t ind,
                                                                      szind_t rt_ind, slab_run_t *runs,
                                                                      unsigned own, const bool check_start) {
  const bin_info_t *bi = &bin_info[ind];
  const uint64_t magic = bi->div_magic, size = bi->size;
  uint64_t last = 0; /* the current run's slab's last region start (slab_last) */
  const uintptr_t key = tcache_key;
  flush_scan_t sc = {p, 0, (unsigned)-1, true};
  uintptr_t lo = 0;
  /* A run's length is told by the countdown at its start and at the next's (no count per
   * region), and the last region is p when the loop stops (no store per region). */
  uint32_t k = n, run_k = n;
  for (;;) {
    uint64_t diff = (uintptr_t)p - lo;
    if (unlikely(diff > last)) {
      unsigned field;
      uint64_t e = rtree_read_split((uintptr_t)p, &field);
      if (unlikely(!(e & RT_SLAB) || field != rt_ind * TBIN_SIZE) &&
          !flush_prof_class_ok(rt_join(field, e), ind))
        strata_invalid_free("free", p);
      if (sc.nruns) runs[sc.nruns - 1].len = run_k - k;
      edata_t *slab = rt_edata(e);
      runs[sc.nruns++] = (slab_run_t){slab, p, 0};
      run_k = k;
      lo = slab->addr;
      last = slab_last(slab, size);
      diff = (uintptr_t)p - lo;
      if (unlikely(diff > last)) strata_invalid_free("free", p); /* in the last region or the tail */
      if (sc.remote == (unsigned)-1) sc.remote = slab->arena_id; /* ids: index + 1 */
      sc.one_remote &= slab->arena_id == sc.remote && sc.remote != own;
    }
    if (check_start && unlikely(((diff * magic) >> 32) * size != diff)) strata_invalid_free("free", p);
    if (--k == 0) break;
    p = (void *)(*(const uintptr_t *)p ^ key ^ (uintptr_t)p); /* validated by the rtree test above on the next turn */
  }
  sc.last = p;
  runs[sc.nruns - 1].len = run_k;
  return sc;
}

/* Whether the thread is a consumer of class ind: it frees more than four times what it
 * allocates (other threads' blocks). Its flushes go to the owners as chains, and its
 * overflows keep nothing. nmalloc itself is biased with prof:true: tbin_nmalloc. */
static inline bool tbin_consumer(const tcache_t *tc, szind_t ind) {
  return tbin_nmalloc(tc, ind) < tbin_ndalloc(tc, ind) / 4;
}

/* n regions from p (the first n of bin b) back to their owners: scanned into runs of one
 * slab and validated, then as a chain to the owner bin when all belong to one other arena
 * (and chains: not what an own-arena walk left of a mixed batch),
 * else to the bitmaps, one bin lock per owning arena. Sets b->head past them. */
static inline __attribute__((always_inline)) void flush_batch(tbin_t *b, szind_t ind, szind_t rt_ind, void *p,
                                                              uint32_t n, unsigned own, bool chains,
                                                              slab_run_t *runs) {
  flush_scan_t sc = bin_info[ind].pow2 ? flush_scan(p, n, ind, rt_ind, runs, own, false)
                                       : flush_scan(p, n, ind, rt_ind, runs, own, true);
  b->head = tbin_next(sc.last, ind);
  LINK_SET(sc.last, NULL);
  if (chains && sc.one_remote) {
    /* Cross-thread frees: the chain goes to the owner bin as it is, one lock and no
     * bitmap work per batch (double frees were caught by the tag at free()). */
    bin_push_remote(arenas[sc.remote - 1], ind, p, sc.last, n, runs, sc.nruns);
    return;
  }
  /* One bin lock per owning arena (usually one). */
  for (unsigned r = 0; r < sc.nruns; r++) {
    if (runs[r].slab) bin_dalloc_runs(arena_of(runs[r].slab), ind, runs + r, sc.nruns - r); /* runs before r: done */
  }
}

/* The first step of a flush for a thread that is not a consumer: regions of its own
 * arena go back to their bitmaps in one walk (bin_flush_local), other arenas' are set
 * aside; returns how many of the n are left for flush_batch, from *pp on (docs/design.md,
 * "Thread caches"). Out of line and without a runs buffer of its own, so that a
 * consumer's flushes (the producer/consumer figure) keep flush_batch's code as it was,
 * and the deepest flush holds one FLUSH_BUF buffer on the stack, not two (a thread's
 * exit flush stays within the stack pages its start left mapped). */
static NOINLINE uint32_t flush_own_local(tcache_t *tc, tbin_t *b, szind_t ind, szind_t rt_ind, void **pp,
                                         uint32_t n) {
  uint32_t left;
  void *p = bin_flush_local(tc->arena, ind, rt_ind, *pp, n, &left);
  if (left == 0) {
    if (unlikely(p != TBIN_END && !link_ok(p, ind))) strata_heap_corruption(p, ind); /* as tbin_next's test */
    b->head = p;
    return 0;
  }
  *pp = p;
  return left;
}

/* Flush all but `keep` of bin ind, taking them from the head of the list. Each region is
 * validated against the rtree (a slab of this class and a region start; a large extent
 * of this class that starts at the pointer), then returned to its owner arena. rt_ind:
 * the rtree class expected of the slabs (ind). runs/eds: the caller's buffer of cap entries
 * (a constant: FLUSH_BUF, or FLUSH_ALL_BUF for whole-cache flushes). */
static inline __attribute__((always_inline)) void flush_tbin(tcache_t *tc, tbin_t *b, szind_t ind, szind_t rt_ind,
                                                             uint32_t max, uint32_t keep, slab_run_t *runs,
                                                             edata_t **eds, uint32_t cap) {
  sassert(max - b->avail <= max);
  while (max - b->avail > keep) {
    uint32_t n = max - b->avail - keep;
    if (n > cap) n = cap;
    /* The first n regions of the list go: no walk to a cut point (the kept ones are the
     * older half; overflows happen in free-heavy phases, where that costs nothing). */
    void *p = b->head;
    if (unlikely(!link_ok(p, ind))) strata_heap_corruption(p, ind); /* a fast path decoded it */
    tbin_avail_move(b, n);
    if (ind > SZ_NSMALL) {
      for (uint32_t i = 0; i < n; i++) {
        uint64_t e = rtree_read_slow((uintptr_t)p);
        edata_t *ed = rt_edata(e);
        if (unlikely(!ed || (e & RT_SLAB) || ed->state != ES_ACTIVE || ed->szind != ind ||
                     ed->addr != (uintptr_t)p))
          strata_invalid_free("free", p);
        eds[i] = ed;
        p = tbin_next(p, ind);
      }
      b->head = p;
      for (uint32_t i = 0; i < n; i++) arena_large_dalloc(eds[i]);
      continue;
    }
    /* A thread that frees far more of this class than it allocates (a consumer) frees
     * other threads' blocks: those go to their bin as a chain, as remote frees do, even
     * when it shares their arena (with arena_spread, threads share arenas until contention). */
    bool consumer = tbin_consumer(tc, ind);
    unsigned own = tc->arena && !consumer ? tc->arena->ind + 1 : (unsigned)-1; /* an edata arena_id */
    /* A batch the walk took some of is mixed: what it leaves goes to the bitmaps, not as
     * a chain, even when it all belongs to one other arena (docs/design.md, "Thread
     * caches": chains from mixed flushes pinned their slabs). */
    if (own != (unsigned)-1) {
      uint32_t left = flush_own_local(tc, b, ind, rt_ind, &p, n);
      if (left == 0) continue;
      if (left != n) {
        flush_batch(b, ind, rt_ind, p, left, own, false, runs);
        continue;
      }
    }
    flush_batch(b, ind, rt_ind, p, n, own, true, runs);
  }
}

static void tcache_flush_bin(tcache_t *tc, szind_t ind, uint32_t keep) {
  flush_buf_t fb;
  flush_tbin(tc, &tc->bins[ind], ind, ind, tc->max[ind], keep, fb.runs, fb.eds, FLUSH_BUF);
}

/* Bring bin ind's share of tcache_total up to date (slow paths only: one atomic add). */
static void tcache_publish(tcache_t *tc, szind_t ind) {
  uint32_t c = tbin_count(tc, ind);
  if (c == tc->published[ind]) return;
  size_t delta = ((size_t)c - tc->published[ind]) * sz_size[ind]; /* wraps when it shrank */
  tc->published[ind] = c;
  tc->bytes += delta;
  __atomic_fetch_add(&tcache_total, delta, __ATOMIC_RELAXED);
}

static inline bool tcache_over_cap(void) {
  return opt.tcache_total_max && __atomic_load_n(&tcache_total, __ATOMIC_RELAXED) > opt.tcache_total_max;
}

/* The GC's flush of an idle bin: half of it, or all over the global cap; a grown bin
 * halves its capacity too (back to its start over the cap). */
static NOINLINE void tcache_gc_flush(tcache_t *tc, szind_t g, bool over) {
  uint32_t c = tbin_count(tc, g), keep = over ? 0 : c / 2;
  uint32_t max = tc->max[g], start = tbin_nslots[g];
  if (max > start) max = over || max / 2 < start ? start : max / 2;
  if (keep > max) keep = max;
  if (c > keep) tcache_flush_bin(tc, g, keep);
  if (max != tc->max[g]) tcache_bin_resize(tc, g, max);
}

/* The flush of bin ind at an overflow after a fill: a round trip (the regions its fills
 * brought go back). TRIPS_GROW of them between two GC
 * visits double the bin, within its and the thread's bounds (see TBIN_GROW_BYTES). Not
 * over the global cap, nor for a consumer (its flushes are other threads' blocks). */
static NOINLINE void tcache_bin_grow(tcache_t *tc, szind_t ind) {
  tc->trips[ind] = (uint8_t)((tc->trips[ind] & ~TRIP_FILLED) + 1);
  if ((tc->trips[ind] & ~TRIP_FILLED) >= TRIPS_GROW && tc->gc_every != 1) {
    uint32_t max = tc->max[ind], want = 2 * max;
    if (want > tbin_grow_max[ind]) want = tbin_grow_max[ind];
    size_t more = (size_t)(want - max) * sz_size[ind];
    if (want > max && tc->grown + more <= TCACHE_GROW_BYTES &&
        __atomic_load_n(&tcache_grown_all, __ATOMIC_RELAXED) + more <= TCACHE_GROW_ALL_BYTES) {
      tc->trips[ind] = 0;
      tcache_bin_resize(tc, ind, want);
    }
  }
  /* Then the overflow's flush: nothing when the bin has doubled (it keeps its new half). */
  tcache_flush_bin(tc, ind, tc->gc_every == 1 ? 0 : tc->keep[ind]);
}

static void tcache_gc_visit(tcache_t *tc, szind_t ind);

/* Whether block p lies in cache tc's own arena (one page-map read: overflows only). */
static bool tcache_block_is_local(const tcache_t *tc, const void *p) {
  const edata_t *ed = rt_edata(rtree_read_slow((uintptr_t)p));
  return ed != NULL && tc->arena != NULL && edata_arena_ind(ed) == tc->arena->ind;
}

static void tcache_event(tcache_t *tc, szind_t ind) {
  tc->events[ind] = 1;
  tcache_publish(tc, ind);
  if (++tc->gc_ticks < tc->gc_every) return;
  tc->gc_ticks = 0;
  /* Arena spreading (arena.c): a cache's fills count their lock waits only; its lock
   * acquisitions are counted here, one per fill or flush since the last visit, so the
   * producer/consumer figure pays nothing per fill for the tally. Not explicit caches. */
  if (tc == strata_tsd.tcache) {
    strata_tsd.lk_ops += tc->gc_every;
    arena_spread_check(&strata_tsd);
  }
  tcache_gc_visit(tc, ind);
}

/* One GC visit: bin gc_bin + 1, skipping `busy` (the bin being filled or flushed). */
static void tcache_gc_visit(tcache_t *tc, szind_t ind) {
  prof_trace_tick(); /* a tracer attached or left (prof.c): every 32 fills and flushes */
  /* The global cap: published at every fill and flush (one atomic add), looked at on
   * GC visits only. Over it, every event is a GC visit that empties the bin it visits,
   * busy or not, so many threads' caches shrink together until they fit. */
  bool over = tcache_over_cap();
  tc->gc_every = over ? 1 : GC_INTERVAL;
  if (++tc->gc_bin >= tc->nbins_open) {
    tc->gc_bin = 1;
    if (tc == strata_tsd.tcache) tcache_crowd(tc); /* once a round of the bins */
  }
  szind_t g = tc->gc_bin;
  if (g >= tc->nbins_open) return; /* every bin closed (tcache_crowd) */
  /* A bin with no fill or flush since the last visit was not under pressure: give half
   * of what it holds back, so a class the thread stopped using drains over time. */
  /* A grown bin that absorbs its thread's bursts makes no fill or flush: it is idle only
   * when nothing was popped from it either (malloc's fast path counts its pops). */
  uint32_t pops = (uint32_t)tbin_nmalloc(tc, g);
  bool used = tc->max[g] > tbin_nslots[g] && pops != tc->gc_pops[g];
  tc->gc_pops[g] = pops;
  if (g != ind && (over || (!tc->events[g] && !used))) {
    if (tbin_count(tc, g) > 0 || tc->max[g] > tbin_nslots[g]) tcache_gc_flush(tc, g, over);
    if (tc->fill[g] > tbin_fill_init[g])
      tc->fill[g] = (uint16_t)(over || tc->fill[g] / 2 < tbin_fill_init[g] ? tbin_fill_init[g] : tc->fill[g] / 2);
  }
  tcache_publish(tc, g);
  tc->events[g] = 0;
  tc->trips[g] &= TRIP_FILLED; /* round trips count between two visits */
}

/* A closed bin (tcache_crowd): a malloc is served by the arena, and its bytes drive the
 * GC as uncached ones do; a free goes back alone, through the flush (its checks, its
 * owner's bin or extents). Out of line: the fills and flushes of open bins pay a compare. */
static NOINLINE void *tcache_alloc_closed(tcache_t *tc, szind_t ind) {
  void *p = ind <= SZ_NSMALL ? arena_small_alloc(tc->arena, ind, false)
                             : arena_large_alloc(tc->arena, sz_size[ind], 0, false);
  if (p) tcache_large_tick(tc, sz_size[ind]);
  return p;
}

static NOINLINE void tcache_dalloc_closed(tcache_t *tc, szind_t ind, void *p) {
  tbin_t *b = &tc->bins[ind];
  LINK_SET(p, TBIN_END);
  b->head = p;
  flush_all_buf_t fb;
  flush_tbin(tc, b, ind, ind, 1, 0, fb.runs, fb.eds, FLUSH_ALL_BUF);
  tbin_avail_set(b, 0);
}

void *tcache_alloc_hard(tcache_t *tc, szind_t ind) {
  tbin_t *b = &tc->bins[ind];
  void *p;
  if (ind <= SZ_NSMALL) {
    /* The bin is empty: the filled list (lowest addresses first) becomes it. */
    /* Over the global cap a fill brings only the region asked for: a wave of new threads
     * (each about to wait, holding its first fills) cannot stock caches past the cap. */
    bool over = tcache_over_cap();
    unsigned want = tc->fill[ind];
    if (unlikely(want == 0)) return tcache_alloc_closed(tc, ind); /* closed (tcache_crowd) */
    if (unlikely(over)) want = 1;
    sassert(b->head == TBIN_END && b->avail == tc->max[ind] && want >= 1);
    if (unlikely(guard_enabled) && ind != SZ_TINY_IND && (p = guard_fill_hook(ind, &want)) != NULL) return p;
    unsigned got = bin_fill_list_upto(tc->arena, ind, &p, want, unlikely(over) ? 1 : tc->max[ind], TBIN_END);
    if (got == 0) return NULL;
    if (unlikely(want < tbin_fill_max[ind]) && !over)
      tc->fill[ind] = (uint16_t)(2 * want < tbin_fill_max[ind] ? 2 * want : tbin_fill_max[ind]);
    tc->trips[ind] |= TRIP_FILLED;
    b->head = tbin_next(p, ind);
    tbin_avail_move(b, -(int64_t)(got - 1));
  } else {
    if (unlikely(tc->fill[ind] == 0)) return tcache_alloc_closed(tc, ind);
    p = arena_large_alloc(tc->arena, sz_size[ind], 0, false);
  }
  tcache_event(tc, ind);
  return p;
}

void tcache_dalloc_hard(tcache_t *tc, szind_t ind, void *p) {
  tbin_t *b = &tc->bins[ind];
  /* Small regions were checked by their tag already; large ones have none. */
  if (unlikely(p == b->head)) strata_invalid_free("free", p);
  if (b->avail == 0) {
    /* No room and nothing cached: a closed bin (an open one is full). */
    if (unlikely(b->head == TBIN_END)) {
      tcache_dalloc_closed(tc, ind, p);
      return;
    }
    /* Over the global cap (gc_every 1) the whole bin goes, else all but capacity >>
     * lg_tcache_flush_*_div (half by default); p is cached before the GC looks, which may
     * close the bin (tcache_crowd) and so flush p as well. A round trip may grow the bin
     * first, so that the next burst fits; only when the block that overflows it is from
     * the cache's own arena: a thread freeing other threads' blocks (a server's workers)
     * would otherwise grow its bins with blocks that pin their slabs elsewhere. */
    if (unlikely(tc->trips[ind] & TRIP_FILLED) && tcache_block_is_local(tc, p)) {
      tcache_bin_grow(tc, ind);
    } else {
      /* A consumer keeps nothing: it would never pop what it kept, and one chain of the
       * whole bin is one push. */
      tcache_flush_bin(tc, ind, tc->gc_every == 1 || tbin_consumer(tc, ind) ? 0 : tc->keep[ind]);
    }
    LINK_SET(p, b->head);
    b->head = p;
    tbin_avail_move(b, -1);
    tcache_event(tc, ind);
    return;
  }
  LINK_SET(p, b->head);
  b->head = p;
  tbin_avail_move(b, -1);
}

void tcache_counts(const tsd_t *tsd, uint64_t *allocated, uint64_t *deallocated) {
  *allocated = tsd->allocated;
  *deallocated = tsd->deallocated;
  if (tsd->state != TSD_ACTIVE) return;
  for (szind_t i = 1; i <= SZ_MALLOC_FAST_IND && i < tcache_nbins; i++) /* strata_malloc counts nmalloc */
    *allocated += tbin_nmalloc(tsd->tcache, i) * sz_size[i];
  for (szind_t i = 1; i < tcache_nbins; i++) /* free()'s fast path pushes, large classes too */
    *deallocated += tbin_ndalloc(tsd->tcache, i) * sz_size[i];
}

void tcache_flush_all(tcache_t *tc) {
  flush_all_buf_t fb;
  for (szind_t i = 1; i < tc->nbins_open; i++) {
    flush_tbin(tc, &tc->bins[i], i, i, tc->max[i], 0, fb.runs, fb.eds, FLUSH_ALL_BUF);
    tcache_publish(tc, i);
  }
}

size_t tcache_grown_bytes(void) { return __atomic_load_n(&tcache_grown_all, __ATOMIC_RELAXED); }

/* A flushed cache's growth goes back to the process-wide bound (its bins are reset when
 * the cache is used again). */
static void tcache_grown_release(tcache_t *tc) {
  if (tc->grown) __atomic_sub_fetch(&tcache_grown_all, tc->grown, __ATOMIC_RELAXED);
  tc->grown = 0;
}

/* Unlist a flushed cache and keep it for the next thread. */
static void tcache_retire(tcache_t *tc) {
  tcache_grown_release(tc);
  mtx_lock(&tcache_list_lock);
  if (tc->prev) {
    tc->prev->next = tc->next;
  } else {
    tcache_list = tc->next;
  }
  if (tc->next) tc->next->prev = tc->prev;
  __atomic_store_n(&tcache_nlive, tcache_nlive - 1, __ATOMIC_RELAXED);
  tc->next = tcache_pool;
  tc->prev = NULL;
  tcache_pool = tc;
  mtx_unlock(&tcache_list_lock);
}

void tcache_thread_exit(void *arg) {
  tcache_t *tc = arg;
  tsd_t *tsd = &strata_tsd;
  ureserve_thread_exit(tsd);
  if (unlikely(prof_on)) prof_thread_exit(tsd); /* its record in heap profiles */
  if (tc == &tcache_empty) { /* uncached (bound to a user arena, or a reserve): only unbind */
    arena_unbind(tsd->arena);
    tsd->arena = NULL;
    tsd->state = TSD_DEAD;
    return;
  }
  if (tc == NULL || tsd->tcache != tc) return;
  /* Later destructors may still allocate: they are served without a cache. */
  uint64_t al, de;
  tcache_counts(tsd, &al, &de);
  tsd->allocated = al;
  tsd->deallocated = de;
  tsd->tcache = &tcache_empty;
  tsd->state = TSD_DEAD;
  tcache_flush_all(tc);
  /* The arena is free for the next thread (later destructors still use it). */
  arena_unbind(tsd->arena);
  tcache_retire(tc);
}

/* thread.tcache.enabled: off flushes the cache and serves the thread from its arena
 * (its counts folded into the thread's totals); on lets the next slow path make one. */
void tcache_set_enabled(tsd_t *tsd, bool on) {
  if (on) {
    if (tsd->state == TSD_NOCACHE) tsd->state = TSD_NOMINAL;
    return;
  }
  tcache_release(tsd);
  tsd->state = TSD_NOCACHE;
}

/* ---------------------------------------------------------------- user arenas, explicit caches */
/* The thread binds to a user arena (thread.arena): its cache is flushed and given up, so
 * that no block of that arena ever sits in a cache (arena.<i>.reset could not reach it).
 * The key's value becomes tcache_empty, which the destructor reads as "only unbind". */
void tcache_release(tsd_t *tsd) {
  if (tsd->state == TSD_ACTIVE) {
    tcache_t *tc = tsd->tcache;
    uint64_t al, de;
    tcache_counts(tsd, &al, &de);
    tsd->allocated = al;
    tsd->deallocated = de;
    tsd->tcache = &tcache_empty;
    tsd->state = TSD_NOMINAL;
    tcache_flush_all(tc);
    tcache_retire(tc);
  }
  if (tsd_key_ready) pthread_setspecific(tsd_key, &tcache_empty);
}

/* Explicit caches (tcache.create): jemalloc's tcaches. A cache is used by one thread at a
 * time, whichever; the table and the free indices are guarded by tcache_list_lock. */
static tcache_t *tcaches[TCACHES_MAX];
static unsigned tcaches_free[TCACHES_MAX], tcaches_nfree, tcaches_next;
static tcache_t *tcaches_pool; /* structures of destroyed caches */

tcache_t *tcache_explicit(unsigned ind) {
  return ind < TCACHES_MAX ? __atomic_load_n(&tcaches[ind], __ATOMIC_ACQUIRE) : NULL;
}

/* 0, or EFAULT when every index is taken (jemalloc's code), EAGAIN without memory. */
int tcache_explicit_create(unsigned *ind) {
  tsd_t *tsd = &strata_tsd;
  arena_t *a = tsd->arena != NULL && !tsd->arena->user ? tsd->arena : arena_get(0);
  mtx_lock(&tcache_list_lock);
  unsigned i;
  if (tcaches_nfree) {
    i = tcaches_free[--tcaches_nfree];
  } else if (tcaches_next < TCACHES_MAX) {
    i = tcaches_next++;
  } else {
    mtx_unlock(&tcache_list_lock);
    return EFAULT;
  }
  tcache_t *tc = tcaches_pool;
  if (tc) tcaches_pool = tc->next;
  mtx_unlock(&tcache_list_lock);
  if (tc == NULL && (tc = meta_alloc(sizeof(tcache_t))) == NULL) {
    mtx_lock(&tcache_list_lock);
    tcaches_free[tcaches_nfree++] = i;
    mtx_unlock(&tcache_list_lock);
    return EAGAIN;
  }
  tcache_reset_bins(tc);
  tc->arena = a;
  __atomic_store_n(&tcaches[i], tc, __ATOMIC_RELEASE);
  *ind = i;
  return 0;
}

/* tcache.flush and tcache.destroy: EFAULT for an index that names no cache. */
int tcache_explicit_flush(unsigned ind, bool destroy) {
  if (ind >= TCACHES_MAX) return EFAULT;
  mtx_lock(&tcache_list_lock);
  tcache_t *tc = tcaches[ind];
  if (tc != NULL && destroy) {
    __atomic_store_n(&tcaches[ind], NULL, __ATOMIC_RELEASE);
    tcaches_free[tcaches_nfree++] = ind;
  }
  mtx_unlock(&tcache_list_lock);
  if (tc == NULL) return EFAULT;
  tcache_flush_all(tc);
  if (destroy) {
    tcache_grown_release(tc);
    mtx_lock(&tcache_list_lock);
    tc->next = tcaches_pool;
    tcaches_pool = tc;
    mtx_unlock(&tcache_list_lock);
  }
  return 0;
}

/* mallctl: read-only size_t values (jemalloc's rules: EPERM on write, EINVAL on a wrong
 * length). opt.tcache_total_max is the option; stats.tcache_bytes what all caches hold
 * as last published (at their fills, flushes and GC visits), live, not per epoch. */
static int ctl_size_ro(size_t v, void *oldp, size_t *oldlenp, void *newp) {
  if (newp != NULL) return EPERM;
  if (oldp == NULL || oldlenp == NULL) return 0;
  if (*oldlenp != sizeof(size_t)) return EINVAL;
  *(size_t *)oldp = v;
  return 0;
}

int tcache_ctl_total_max(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  return ctl_size_ro(opt.tcache_total_max, oldp, oldlenp, newp);
}

int tcache_ctl_bytes(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  return ctl_size_ro(__atomic_load_n(&tcache_total, __ATOMIC_RELAXED), oldp, oldlenp, newp);
}

/* A thread's uncached allocations (above tcache_max) drive GC visits too: one visit per
 * tcache_gc_incr_bytes of them (jemalloc's option, 64 KiB by default). A thread whose traffic is
 * mostly large blocks makes few fills and flushes, so its cache would otherwise never be
 * looked at and keep its first fills for life (wl_nativethreads: 100 threads held 45 MiB
 * at the peak; docs/design.md, "Thread caches"). Slow path only. */
void tcache_large_tick(tcache_t *tc, size_t usize) {
  tc->gc_bytes += usize;
  if (tc->gc_bytes < opt.tcache_gc_incr_bytes) return;
  tc->gc_bytes = 0;
  tcache_gc_visit(tc, 0);
  /* Such a thread's next fill of a small class at its first-fill size brings
   * FILL_INIT_BYTES' worth, as classes above FILL_FULL_MAX always do, and doubles on each
   * further miss: the half bins a first fill of the classes up to 320 B brings were 5.4 MiB
   * of wl_nativethreads' 100 caches when its threads all interleave, mostly never used
   * (each thread makes a few dozen allocations of each class). Threads that never
   * allocate above tcache_max (a producer) keep the full first fills. */
  for (szind_t i = 1; i < tcache_nbins && sz_size[i] <= FILL_FULL_MAX; i++)
    if (tc->fill[i] == tbin_fill_init[i]) tc->fill[i] = tbin_fill_lean[i];
}

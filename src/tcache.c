/*
 * tcache.c - per-thread caches: for each class up to tcache_max, a bounded LIFO of free
 * regions (an intrusive list) that the inline fast paths pop and push. Misses fill half
 * a bin in one batch under the bin lock; overflows flush half: a batch that belongs to
 * one other arena goes to that bin's remote list as a chain, anything else back to the
 * bitmaps grouped by owning arena, one lock per batch, never one per object. An
 * incremental GC flushes bins a thread stopped using; a thread's cache is flushed by a
 * pthread key destructor and recycled.
 */
#include <pthread.h>
#include <string.h>

#include "internal.h"

tcache_t tcache_empty; /* every bin empty with max 0: the fast paths always miss */
uintptr_t tcache_key;
unsigned tcache_nbins;
uint32_t tbin_max[TCACHE_NBINS_MAX];
static uint32_t tbin_align_mask[TCACHE_NBINS_MAX];
mtx_t tcache_list_lock = MTX_INITIALIZER;
tcache_t *tcache_list;      /* live caches; guarded by tcache_list_lock */
static tcache_t *tcache_pool; /* caches of exited threads, for reuse */

/* Slots per class: twice a slab's regions, clamped to [20, 200] (jemalloc's defaults,
 * which balance refill frequency against memory held per thread); large classes 4. */
#define TBIN_SMALL_MIN 20
#define TBIN_SMALL_MAX 200
#define TBIN_LARGE 4
/* The GC looks at one bin every GC_INTERVAL fills and flushes. */
#define GC_INTERVAL 32
#define FLUSH_BUF 256

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
  for (szind_t i = 1; i < tcache_nbins; i++) {
    if (i <= SZ_NSMALL) {
      uint32_t m = bin_info[i].nregs * 2;
      tbin_max[i] = m < TBIN_SMALL_MIN ? TBIN_SMALL_MIN : m > TBIN_SMALL_MAX ? TBIN_SMALL_MAX : m;
    } else {
      tbin_max[i] = TBIN_LARGE;
    }
    size_t nat = sz_size[i] & -sz_size[i];
    tbin_align_mask[i] = (uint32_t)((nat < os_page ? nat : os_page) - 1);
  }
}

tcache_t *tcache_get_slow(tsd_t *tsd) {
  if (tsd->state == TSD_ACTIVE) return tsd->tcache;
  if (tsd->state != TSD_NOMINAL || tcache_nbins == 0) return NULL;
  if (!__atomic_load_n(&tsd_key_ready, __ATOMIC_ACQUIRE)) return NULL; /* retry later */
  mtx_lock(&tcache_list_lock);
  tcache_t *tc = tcache_pool;
  if (tc) tcache_pool = tc->next;
  mtx_unlock(&tcache_list_lock);
  if (tc == NULL && (tc = meta_alloc(sizeof(tcache_t))) == NULL) return NULL;
  void *stash = tc->prof_stash; /* a pooled cache keeps its (empty) profiler stash */
  memset(tc, 0, sizeof(*tc));
  tc->prof_stash = stash;
  for (szind_t i = 1; i < tcache_nbins; i++) {
    tc->bins[i].avail = tbin_max[i];
    tc->bins[i].align_mask = tbin_align_mask[i];
    /* Heap profiling counts every free (prof.c): no pointer passes an all-ones mask. */
    if (unlikely(prof_on)) tc->bins[i].align_mask = UINT32_MAX;
  }
  if (tsd->arena == NULL) tsd->arena = arena_choose();
  tc->arena = tsd->arena;
  mtx_lock(&tcache_list_lock);
  tc->next = tcache_list;
  if (tcache_list) tcache_list->prev = tc;
  tcache_list = tc;
  mtx_unlock(&tcache_list_lock);
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
static inline __attribute__((always_inline)) flush_scan_t flush_scan(void *p, uint32_t n, szind_t ind,
                                                                      slab_run_t *runs, unsigned own,
                                                                      const bool check_start) {
  const bin_info_t *bi = &bin_info[ind];
  const uint64_t magic = bi->div_magic, size = bi->size, used = (uint64_t)bi->nregs * bi->size;
  flush_scan_t sc = {p, 0, (unsigned)-1, true};
  uintptr_t lo = 0;
  uint32_t len = 0;
  for (uint32_t k = n; k > 0; k--) {
    uint64_t diff = (uintptr_t)p - lo;
    if (unlikely(diff >= used)) {
      uint64_t e = rtree_read((uintptr_t)p);
      if (unlikely(!(e & RT_SLAB) || rt_szind(e) != ind)) strata_invalid_free("free", p);
      if (sc.nruns) runs[sc.nruns - 1].len = len;
      edata_t *slab = rt_edata(e);
      runs[sc.nruns++] = (slab_run_t){slab, p, 0};
      len = 0;
      lo = slab->addr;
      diff = (uintptr_t)p - lo;
      if (unlikely(diff >= used)) strata_invalid_free("free", p); /* in the slab's tail */
      if (sc.remote == (unsigned)-1) sc.remote = slab->arena_ind;
      sc.one_remote &= slab->arena_ind == sc.remote && sc.remote != own;
    }
    if (check_start && unlikely(((diff * magic) >> 32) * size != diff)) strata_invalid_free("free", p);
    len++;
    sc.last = p;
    p = *(void **)p;
  }
  runs[sc.nruns - 1].len = len;
  return sc;
}

/* Flush all but `keep` of bin ind, taking them from the head of the list. Each region is
 * validated against the rtree (a slab of this class and a region start; a large extent
 * of this class that starts at the pointer), then returned to its owner arena. */
static void tcache_flush_bin(tcache_t *tc, szind_t ind, uint32_t keep) {
  tbin_t *b = &tc->bins[ind];
  sassert(tbin_count(b, ind) <= tbin_max[ind]);
  while (tbin_count(b, ind) > keep) {
    uint32_t n = tbin_count(b, ind) - keep;
    if (n > FLUSH_BUF) n = FLUSH_BUF;
    /* The first n regions of the list go: no walk to a cut point (the kept ones are the
     * older half; overflows happen in free-heavy phases, where that costs nothing). */
    void *p = b->head;
    b->avail += n;
    if (ind > SZ_NSMALL) {
      edata_t *eds[FLUSH_BUF];
      for (uint32_t i = 0; i < n; i++) {
        uint64_t e = rtree_read((uintptr_t)p);
        edata_t *ed = rt_edata(e);
        if (unlikely(!ed || (e & RT_SLAB) || ed->state != ES_ACTIVE || ed->szind != ind ||
                     ed->addr != (uintptr_t)p))
          strata_invalid_free("free", p);
        eds[i] = ed;
        p = *(void **)p;
      }
      b->head = p;
      for (uint32_t i = 0; i < n; i++) arena_large_dalloc(eds[i]);
      continue;
    }
    slab_run_t runs[FLUSH_BUF];
    unsigned own = tc->arena ? tc->arena->ind : (unsigned)-1;
    flush_scan_t sc = bin_info[ind].pow2 ? flush_scan(p, n, ind, runs, own, false)
                                         : flush_scan(p, n, ind, runs, own, true);
    b->head = *(void **)sc.last;
    *(void **)sc.last = NULL;
    if (sc.one_remote) {
      /* Cross-thread frees: the chain goes to the owner bin as it is, one lock and no
       * bitmap work per batch (double frees were caught by the tag at free()). */
      bin_push_remote(arenas[sc.remote], ind, p, sc.last, n);
      continue;
    }
    /* One bin lock per owning arena (usually one). */
    for (unsigned r = 0; r < sc.nruns; r++) {
      if (runs[r].slab) bin_dalloc_runs(arenas[runs[r].slab->arena_ind], ind, runs, sc.nruns);
    }
  }
}

static inline __attribute__((always_inline)) void tcache_event(tcache_t *tc, szind_t ind) {
  tc->events[ind] = 1;
  if (++tc->gc_ticks < GC_INTERVAL) return;
  tc->gc_ticks = 0;
  if (++tc->gc_bin >= tcache_nbins) tc->gc_bin = 1;
  szind_t g = tc->gc_bin;
  /* A bin with no fill or flush since the last visit was not under pressure: give half
   * of what it holds back, so a class the thread stopped using drains over time. */
  if (!tc->events[g] && tbin_count(&tc->bins[g], g) > 0) tcache_flush_bin(tc, g, tbin_count(&tc->bins[g], g) / 2);
  tc->events[g] = 0;
}

static void *alloc_hard_prof(tcache_t *tc, szind_t ind);

void *tcache_alloc_hard(tcache_t *tc, szind_t ind) {
  if (unlikely(prof_on)) return alloc_hard_prof(tc, ind);
  tbin_t *b = &tc->bins[ind];
  void *p;
  if (ind <= SZ_NSMALL) {
    /* The bin is empty: the filled list (lowest addresses first) becomes it. */
    unsigned want = tbin_max[ind] / 2 ? tbin_max[ind] / 2 : 1;
    sassert(b->head == NULL && b->avail == tbin_max[ind]);
    unsigned got = bin_fill_list(tc->arena, ind, &p, want);
    if (got == 0) return NULL;
    b->head = *(void **)p;
    b->avail -= got - 1;
  } else {
    p = arena_large_alloc(tc->arena, sz_size[ind], 0, false);
  }
  tcache_event(tc, ind);
  return p;
}

/* ---------------------------------------------------------------- heap profiling */
/*
 * With prof:true (prof.c) every free takes the slow path, which puts the block in this
 * stash instead of the bin's list: the malloc fast path pops only blocks whose bytes are
 * reserved against the thread's next sample. Fills take from the stash first (no arena
 * trip); when the reservation must be given back, the bins' lists move to the stash.
 */
prof_stash_t *tcache_prof_stash(tcache_t *tc) {
  if (tc->prof_stash == NULL) tc->prof_stash = meta_alloc(sizeof(prof_stash_t));
  return tc->prof_stash;
}
#define stash_get tcache_prof_stash

/* Up to n blocks off the stash's list, linked, NULL-terminated; the count taken. */
static unsigned stash_take(prof_stash_t *s, szind_t ind, unsigned n, void **head) {
  if (s == NULL || s->n[ind] == 0) return 0;
  if (n > s->n[ind]) n = s->n[ind];
  void *first = s->head[ind], *last = first;
  for (unsigned i = 1; i < n; i++) last = *(void **)last;
  s->head[ind] = *(void **)last;
  *(void **)last = NULL;
  s->n[ind] -= n;
  *head = first;
  return n;
}

void tcache_prof_unreserve(tcache_t *tc) {
  prof_stash_t *s = stash_get(tc);
  for (szind_t i = 1; i < tcache_nbins; i++) {
    tbin_t *b = &tc->bins[i];
    uint32_t n = tbin_count(b, i);
    if (n == 0) continue;
    if (s == NULL) {
      tcache_flush_bin(tc, i, 0);
      continue;
    }
    void *last = b->head;
    for (uint32_t k = 1; k < n; k++) last = *(void **)last;
    *(void **)last = s->head[i];
    s->head[i] = b->head;
    s->n[i] += n;
    b->head = NULL;
    b->avail = tbin_max[i];
  }
}

/* Everything in the stash back to the arenas (tcache_flush_all: exit, trim, flush). */
static void stash_drain(tcache_t *tc) {
  prof_stash_t *s = tc->prof_stash;
  for (szind_t i = 1; i < tcache_nbins; i++) {
    tbin_t *b = &tc->bins[i];
    void *head;
    unsigned got;
    while ((got = stash_take(s, i, tbin_max[i] - tbin_count(b, i), &head)) != 0) {
      void *last = head;
      while (*(void **)last) last = *(void **)last;
      *(void **)last = b->head;
      b->head = head;
      b->avail -= got;
      tcache_flush_bin(tc, i, 0);
    }
  }
}

/* The fill holds only as many blocks as the bytes left before the thread's next sample
 * allow (prof_fill_limit); the returned block may be the sampled one. */
static NOINLINE void *alloc_hard_prof(tcache_t *tc, szind_t ind) {
  tbin_t *b = &tc->bins[ind];
  size_t usize = sz_size[ind];
  void *p = NULL;
  if (ind <= SZ_NSMALL) {
    unsigned want = prof_fill_limit(ind, tbin_max[ind] / 2 ? tbin_max[ind] / 2 : 1);
    unsigned got = stash_take(tc->prof_stash, ind, want, &p);
    if (got == 0) got = bin_fill_list(tc->arena, ind, &p, want);
    if (got < want) prof_credit_return((size_t)(want - (got ? got : 1)) * usize);
    if (got == 0) return NULL;
    b->head = *(void **)p;
    b->avail -= got - 1;
  } else {
    prof_take(usize);
    if (stash_take(tc->prof_stash, ind, 1, &p) == 0) p = arena_large_alloc(tc->arena, usize, 0, false);
  }
  tcache_event(tc, ind);
  prof_after(&strata_tsd, p, usize);
  return p;
}

void tcache_dalloc_hard(tcache_t *tc, szind_t ind, void *p) {
  tbin_t *b = &tc->bins[ind];
  /* Small regions were checked by their tag already; large ones have none. */
  if (unlikely(p == b->head)) strata_invalid_free("free", p);
  if (b->avail == 0) {
    tcache_flush_bin(tc, ind, tbin_max[ind] / 2);
    tcache_event(tc, ind);
  }
  *(void **)p = b->head;
  b->head = p;
  b->avail--;
}

void tcache_counts(const tsd_t *tsd, uint64_t *allocated, uint64_t *deallocated) {
  *allocated = tsd->allocated;
  *deallocated = tsd->deallocated;
  if (tsd->state != TSD_ACTIVE) return;
  for (szind_t i = 1; i <= SZ_NSMALL && i < tcache_nbins; i++) {
    *allocated += tsd->tcache->bins[i].nmalloc * sz_size[i];
    *deallocated += tsd->tcache->bins[i].ndalloc * sz_size[i];
  }
}

void tcache_flush_all(tcache_t *tc) {
  for (szind_t i = 1; i < tcache_nbins; i++) tcache_flush_bin(tc, i, 0);
  if (unlikely(tc->prof_stash != NULL)) stash_drain(tc);
}

void tcache_thread_exit(void *arg) {
  tcache_t *tc = arg;
  tsd_t *tsd = &strata_tsd;
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
  mtx_lock(&tcache_list_lock);
  if (tc->prev) {
    tc->prev->next = tc->next;
  } else {
    tcache_list = tc->next;
  }
  if (tc->next) tc->next->prev = tc->prev;
  tc->next = tcache_pool;
  tc->prev = NULL;
  tcache_pool = tc;
  mtx_unlock(&tcache_list_lock);
}

/*
 * arena.c - arenas: independent heaps, each with its extents (extent.c) and a bin per
 * small class (slab.c). narenas ordinary arenas (default 4 x usable CPUs) are created on
 * first use; a thread binds to the least loaded live one at its first slow-path
 * allocation, and live arenas grow with lock contention (arena_spread); one more arena
 * takes every allocation of oversize_threshold bytes and above. Memory always
 * returns to the arena that owns it (the edata's arena_id).
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

/* Per large class counts (stats); aligned blocks of a small class's size are not counted. */
static inline void lext_count(uint64_t *counts, unsigned ind) {
  if (ind > SZ_NSMALL) counts[ind - SZ_NSMALL - 1]++;
}

arena_t **arenas;
unsigned narenas;
mtx_t arenas_lock = MTX_INITIALIZER;

/* Whether an all-zero lock is an initialised one (MTX_INITIALIZER is all zeros). Then a
 * new arena's locks need no init: its metadata comes zeroed, and the 37 bins (960 bytes
 * each, 35 KiB of the 49 KiB arena) stay untouched until a thread uses their class, so the
 * oversize arena and a heap that uses a few classes do not fault in pages for the rest
 * (docs/design.md, "Arenas"). */
static bool mtx_zero_is_init(void) {
  static const mtx_t init = MTX_INITIALIZER;
  const unsigned char *b = (const unsigned char *)&init;
  for (size_t i = 0; i < sizeof(init); i++)
    if (b[i] != 0) return false;
  return true;
}

arena_t *arena_get(unsigned ind) {
  arena_t *a = __atomic_load_n(&arenas[ind], __ATOMIC_ACQUIRE);
  if (likely(a != NULL)) return a;
  mtx_lock(&arenas_lock);
  a = arenas[ind];
  if (a == NULL) {
    a = meta_alloc(sizeof(arena_t));
    if (a != NULL) {
      if (!mtx_zero_is_init()) {
        mtx_init(&a->elock);
        mtx_init(&a->mlock);
        for (unsigned i = 0; i <= SZ_NSMALL; i++) mtx_init(&a->bins[i].lock);
      }
      a->ind = ind;
      a->huge = (ind == narenas);
      a->grow_next = (size_t)2 << 20;
      uint64_t now = decay_now();
      decay_init(&a->ddecay, __atomic_load_n(&arenas_dirty_decay_ms, __ATOMIC_RELAXED), now);
      decay_init(&a->mdecay, __atomic_load_n(&arenas_muzzy_decay_ms, __ATOMIC_RELAXED), now);
      a->created_ns = now;
      __atomic_store_n(&arenas[ind], a, __ATOMIC_RELEASE);
    }
  }
  mtx_unlock(&arenas_lock);
  return a;
}

/* The live arena with the fewest threads bound, skipping `skip`; *n_out its count. */
static unsigned arena_least_loaded(unsigned live, unsigned skip, unsigned *n_out) {
  unsigned best = 0, best_n = (unsigned)-1;
  for (unsigned i = 0; i < live; i++) {
    if (i == skip) continue;
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    unsigned n = a ? __atomic_load_n(&a->nthreads, __ATOMIC_RELAXED) : 0;
    if (n < best_n) {
      best = i;
      best_n = n;
      if (n == 0) break;
    }
  }
  *n_out = best_n;
  return best;
}

arena_t *arena_choose(void) {
  unsigned n;
  arena_t *a = arena_get(arena_least_loaded(__atomic_load_n(&narenas_live, __ATOMIC_ACQUIRE), (unsigned)-1, &n));
  if (a == NULL) a = arena_get(0);
  if (a) __atomic_fetch_add(&a->nthreads, 1, __ATOMIC_RELAXED);
  return a;
}

void arena_unbind(arena_t *a) {
  if (a) __atomic_fetch_sub(&a->nthreads, 1, __ATOMIC_RELAXED);
}

/*
 * Arena spreading. Each arena costs memory of its own: partly used slabs in every class,
 * a spare slab per bin, dirty pages only it reuses; and a thread's blocks freed in
 * another arena's threads pin that arena's slabs. With jemalloc's 4 x CPUs arenas from
 * the start, 16 threads that pass blocks around (wl_xthread) peaked at 1.4x tcmalloc's
 * RSS, where one arena peaked at 0.9x. So arenas open as contention shows: threads bind
 * to the least loaded of the live arenas (one at start), count how many of their bin
 * and extent lock acquisitions waited (arena_tally), and look at the count every
 * ARENA_SPREAD_WINDOW acquisitions. A thread that waited on SPREAD_WAITS or more of them
 * moves to a live arena with at least two threads fewer than its own, else opens the next
 * arena (up to narenas) and moves there; later threads bind to the least loaded, so
 * they fill the new arena. Its cached blocks go home to their owners when flushed.
 */
#define SPREAD_WAITS (ARENA_SPREAD_WINDOW / 8)
unsigned narenas_live;

void arena_spread(tsd_t *tsd) {
  uint32_t waits = tsd->lk_waits;
  tsd->lk_ops = tsd->lk_waits = 0;
  arena_t *cur = tsd->arena;
  if (waits < SPREAD_WAITS || cur == NULL || cur->ind >= narenas || tsd->arena_pinned || tsd->in_hook) return;
  unsigned n_cur = __atomic_load_n(&cur->nthreads, __ATOMIC_RELAXED);
  if (n_cur <= 1) return; /* alone in its arena: moving would not help */
  unsigned live = __atomic_load_n(&narenas_live, __ATOMIC_ACQUIRE), n;
  unsigned target = arena_least_loaded(live, cur->ind, &n); /* n: UINT_MAX if none */
  if (n >= n_cur - 1) {
    if (live >= narenas) return;
    if (__atomic_compare_exchange_n(&narenas_live, &live, live + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      target = live;
    } else { /* another thread opened one: the least loaded now */
      target = arena_least_loaded(live, cur->ind, &n);
      if (n >= n_cur - 1) return;
    }
  }
  arena_t *a = arena_get(target);
  if (a == NULL) return;
  __atomic_fetch_add(&a->nthreads, 1, __ATOMIC_RELAXED);
  arena_unbind(cur);
  tsd->arena = a;
  if (tsd->state == TSD_ACTIVE) tsd->tcache->arena = a; /* cached blocks still go home to their owners */
}

int arena_ctl_nlive(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  if (newp != NULL) return EPERM;
  unsigned v = __atomic_load_n(&narenas_live, __ATOMIC_ACQUIRE);
  return ctl_copy_out(oldp, oldlenp, &v, sizeof(v));
}

void *arena_small_alloc(arena_t *a, szind_t ind, bool zero) {
  void *p;
  strata_tsd.lk_ops++; /* the fill's bin lock (bin_fill_list_upto counts only its wait) */
  if (bin_fill(a, ind, &p, 1) == 0) return NULL;
  if (zero) memset(p, 0, sz_size[ind]);
  return p;
}

/* The class a large block's first rtree entry carries: its own where free()'s fast path may
 * push it into a thread cache (a cached class, prof:false: tcache_nbins_malloc), 0 where
 * free must take the slow path (user arenas' blocks never enter the ordinary caches; the
 * sampled ones reach the prof free path; guard blocks are registered by guard.c). */
static inline szind_t large_rt_ind(const arena_t *a, szind_t ind) {
  return ind < __atomic_load_n(&tcache_nbins_malloc, __ATOMIC_RELAXED) && !a->user ? ind : 0;
}

void *arena_large_alloc(arena_t *a, size_t usize, size_t align, bool zero) {
  size_t esize = (usize + os_page - 1) & ~(os_page - 1);
  szind_t ind = sz_size2index(usize);
  arena_tally(mtx_lock(&a->elock));
  edata_t *e = extent_alloc(a, esize, align);
  bool zeroed = false;
  if (e) {
    e->szind = (uint16_t)ind;
    extent_register(e, large_rt_ind(a, ind), false);
    a->large_allocated += usize;
    a->nlarge_malloc++;
    lext_count(a->lext_nmalloc, ind);
    zeroed = e->zeroed;
  }
  mtx_unlock(&a->elock);
  arena_maybe_purge(a); /* a limit purge, if taking these pages brought one due */
  if (e == NULL) return NULL;
  if (zero && !zeroed) memset((void *)e->addr, 0, usize);
  return (void *)e->addr;
}

void arena_large_dalloc(edata_t *e) {
  arena_t *a = arena_of(e);
  arena_tally(mtx_lock(&a->elock));
  if (unlikely(e->state != ES_ACTIVE || e->slab)) {
    mtx_unlock(&a->elock);
    strata_invalid_free("free", (void *)e->addr);
  }
  a->large_allocated -= sz_size[e->szind];
  a->nlarge_dalloc++;
  lext_count(a->lext_ndalloc, e->szind);
  extent_dalloc(a, e);
  mtx_unlock(&a->elock);
  arena_maybe_purge(a);
}

bool arena_large_resize(edata_t *e, size_t usize) {
  arena_t *a = arena_of(e);
  size_t esize = (usize + os_page - 1) & ~(os_page - 1);
  szind_t ind = sz_size2index(usize);
  bool fail = false, shrink = esize < e->size;
  mtx_lock(&a->elock);
  size_t old_usize = sz_size[e->szind];
  if (shrink) {
    fail = extent_shrink_inplace(a, e, esize);
  } else if (esize > e->size) {
    fail = extent_grow_inplace(a, e, esize);
  }
  if (!fail) {
    lext_count(a->lext_ndalloc, e->szind);
    lext_count(a->lext_nmalloc, ind);
    e->szind = (uint16_t)ind;
    extent_register(e, large_rt_ind(a, ind), false);
    a->large_allocated += usize - old_usize;
  }
  mtx_unlock(&a->elock);
  arena_maybe_purge(a); /* decay after a shrink, the limit after a growth */
  return fail;
}

/* Move a large block with mremap instead of copying; NULL if the kernel refuses (the
 * extent spans two mappings, say): the caller then copies. */
void *arena_large_remap(edata_t *e, size_t usize) {
  arena_t *a = arena_of(e);
  if (arena_hooks(a) != NULL) return NULL; /* the pages are the hook's: no mremap */
  size_t esize = (usize + os_page - 1) & ~(os_page - 1);
  mtx_lock(&a->elock);
  if (os_commit(esize - e->size)) {
    mtx_unlock(&a->elock);
    return NULL;
  }
  /* The destination is reserved and its page-map leaves made first, so that running out
   * of memory fails the call instead of leaving a moved block the map cannot describe. */
  void *p = os_map(esize, os_page);
  if (p == NULL || rtree_ensure((uintptr_t)p, esize) || !os_remap_fixed((void *)e->addr, e->size, esize, p)) {
    if (p) os_unmap(p, esize);
    os_decommit(esize - e->size);
    mtx_unlock(&a->elock);
    return NULL;
  }
  rtree_write(e->addr, 0);
  rtree_write(e->addr + e->size - GRAN, 0);
  a->mapped += esize - e->size; /* the old range went back to the kernel with the move */
  if (esize >= e->size) {
    __atomic_fetch_add(&extent_resident_pages, (esize - e->size) / os_page, __ATOMIC_RELAXED);
    limit_check(a);
  } else {
    __atomic_fetch_sub(&extent_resident_pages, (e->size - esize) / os_page, __ATOMIC_RELAXED);
  }
  /* The oversize arena backs the growth with freed blocks' pages where it has some:
   * no faults, and they do not sit resident beside the grown block. */
  if (a->huge && esize > e->size) extent_fill_from_dirty(a, (uintptr_t)p + esize, esize - e->size);
  a->nactive += esize / os_page - e->size / os_page;
  if (a->huge) arena_note_peak(a);
  a->large_allocated += usize - sz_size[e->szind];
  lext_count(a->lext_ndalloc, e->szind);
  e->addr = (uintptr_t)p;
  e->size = esize;
  e->szind = (uint16_t)sz_size2index(usize);
  lext_count(a->lext_nmalloc, e->szind);
  extent_register(e, large_rt_ind(a, e->szind), false);
  mtx_unlock(&a->elock);
  arena_maybe_purge(a);
  return p;
}

size_t arena_purge_all(void) {
  size_t purged = 0;
  for (unsigned i = 0; i < __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE); i++) {
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (a == NULL) continue;
    for (unsigned b = 1; b <= SZ_NSMALL; b++) bin_release_spare(a, b);
    purged += arena_purge(a);
  }
  meta_purge();
  return purged;
}

/* Heap profiling (alloc.c, prof_promote): the page extent of a promoted sampled small
 * block, of small class ind but no slab (page-map class 0: free() takes the slow path).
 * Counted in large.allocated and large.nmalloc as its pages: a thread keeps a freed one for
 * its next sample of any small class (prof.c, prof_page_get), so the count cannot follow
 * the class. NULL when no pages can be had. */
edata_t *arena_prof_page_alloc(arena_t *a, size_t esize, szind_t ind) {
  arena_tally(mtx_lock(&a->elock));
  edata_t *e = extent_alloc(a, esize, 0);
  if (e) {
    e->szind = (uint16_t)ind;
    extent_register(e, 0, false);
    a->large_allocated += e->size;
    a->nlarge_malloc++;
  }
  mtx_unlock(&a->elock);
  arena_maybe_purge(a);
  return e;
}

void arena_prof_page_dalloc(edata_t *e) {
  arena_t *a = arena_of(e);
  arena_tally(mtx_lock(&a->elock));
  a->large_allocated -= e->size;
  a->nlarge_dalloc++;
  extent_dalloc(a, e);
  mtx_unlock(&a->elock);
  arena_maybe_purge(a);
}

/*
 * arenas_user.c - arenas a program makes and discards (jemalloc's arenas.create,
 * arena.<i>.reset, arena.<i>.destroy), their page sources (arena.<i>.extent_hooks), the
 * explicit caches' names (tcache.*), thread.arena, arenas.lookup and per-arena counters,
 * as mallctl handlers of the standard type. A user arena's blocks are never cached
 * (slabs carry class 0 in the rtree, so free() takes the slow path; a thread bound to one
 * gives up its cache), so a reset reaches every block: it walks the arena's active
 * extents, never its objects. Relies on extent.c, slab.c's bins and tcache.c.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

unsigned narenas_total;

/* ---------------------------------------------------------------- counters */
static arena_counts_t destroyed_counts; /* MALLCTL_ARENAS_DESTROYED; arenas_lock */
static bool destroyed_any;

static void counts_add(arena_counts_t *to, const arena_counts_t *c) {
  to->small_nmalloc += c->small_nmalloc;
  to->small_ndalloc += c->small_ndalloc;
  to->large_nmalloc += c->large_nmalloc;
  to->large_ndalloc += c->large_ndalloc;
  to->npurged += c->npurged;
  to->pactive += c->pactive;
  to->pdirty += c->pdirty;
  to->mapped += c->mapped;
}

/* Takes the arena's locks unless the caller holds them all (locked). */
static void counts_read(arena_t *a, arena_counts_t *c, bool locked) {
  memset(c, 0, sizeof(*c));
  for (unsigned b = 1; b <= SZ_NSMALL; b++) {
    if (!locked) mtx_lock(&a->bins[b].lock);
    c->small_nmalloc += a->bins[b].nmalloc;
    c->small_ndalloc += a->bins[b].ndalloc;
    if (!locked) mtx_unlock(&a->bins[b].lock);
  }
  if (!locked) mtx_lock(&a->elock);
  c->large_nmalloc = a->nlarge_malloc;
  c->large_ndalloc = a->nlarge_dalloc;
  c->npurged = a->npurged;
  c->pactive = a->nactive;
  c->pdirty = a->dirty.npages;
  c->mapped = a->mapped;
  if (!locked) mtx_unlock(&a->elock);
}

static arena_t *arena_live(size_t ind) {
  if (ind >= ARENAS_MAX || ind >= __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE)) return NULL;
  arena_t *a = __atomic_load_n(&arenas[ind], __ATOMIC_ACQUIRE);
  return a && !__atomic_load_n(&a->destroyed, __ATOMIC_ACQUIRE) ? a : NULL;
}

/* ---------------------------------------------------------------- reset and destroy */
static void arena_lock_all(arena_t *a) {
  for (unsigned b = 1; b <= SZ_NSMALL; b++) mtx_lock(&a->bins[b].lock);
  mtx_lock(&a->elock);
}

static void arena_unlock_all(arena_t *a) {
  mtx_unlock(&a->elock);
  for (unsigned b = SZ_NSMALL; b >= 1; b--) mtx_unlock(&a->bins[b].lock);
}

/* Every active extent becomes dirty: O(extents) plus the page map of each slab's pages,
 * whatever the number of objects. All of a's locks held. */
static void arena_reset_locked(arena_t *a) {
  edata_t *e = a->active_head;
  a->active_head = NULL;
  while (e != NULL) {
    edata_t *next = e->lru_next;
    e->lru_next = e->lru_prev = NULL;
    if (e->slab) {
      bitmap_free(a, e->szind, e->bitmap);
      e->bitmap = NULL;
      extent_deregister_interior(e);
    }
    extent_dalloc(a, e);
    e = next;
  }
  for (unsigned b = 1; b <= SZ_NSMALL; b++) {
    bin_t *bin = &a->bins[b];
    bin->cur = bin->spare = NULL;
    bin->nonfull = NULL;
    bin->nrchain = 0;
    bin->remote_count = 0;
    bin->curregs = 0;
    bin->curslabs = 0;
  }
  a->large_allocated = 0;
}

/* ---------------------------------------------------------------- handlers */
#define CTL_READONLY() \
  if (newp != NULL || newlen != 0) return EPERM
#define CTL_VOID() \
  if (newp != NULL || newlen != 0 || oldp != NULL || oldlenp != NULL) return EPERM


/* A reused arena's spare descriptors and bitmaps came from the shared pools: they go back
 * there before the arena takes a base of its own, whose free lists hold only its blocks. */
static void arena_meta_to_pools(arena_t *a) {
  for (unsigned b = 1; b <= SZ_NSMALL; b++) {
    bin_t *bin = &a->bins[b];
    mtx_lock(&bin->lock);
    bitmap_free(a, b, bin->bm_spare);
    bin->bm_spare = NULL;
    mtx_unlock(&bin->lock);
  }
  mtx_lock(&a->elock);
  edata_cache_flush(a, 0);
  mtx_unlock(&a->elock);
}

int au_arenas_create(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib;
  (void)miblen;
  if (newp != NULL && newlen != sizeof(extent_hooks_t *)) return EINVAL;
  /* jemalloc's arena_config_default: metadata_use_hooks true */
  return au_create(oldp, oldlenp, newp != NULL ? (extent_hooks_t **)newp : NULL, true);
}

/* arenas.create and experimental.arenas_create_ext: hp NULL for no hooks. With hooks and
 * metadata_use_hooks, the arena's descriptors and bitmaps come from its alloc hook (meta.c,
 * meta_base_new), whose first call is made here: if it fails the arena is not created and
 * the answer is EAGAIN, as jemalloc's (its arena_new fails in base_new). */
int au_create(void *oldp, size_t *oldlenp, extent_hooks_t *const *hp, bool metadata_use_hooks) {
  if (oldp == NULL || oldlenp == NULL || *oldlenp != sizeof(unsigned)) return EINVAL;
  extent_hooks_t *h = NULL;
  if (hp != NULL) {
    h = *hp;
    /* alloc is the one mandatory member; a misaligned pointer is none (cheap to catch). */
    if (h == NULL || ((uintptr_t)h & (_Alignof(extent_hooks_t) - 1)) != 0 || h->alloc == NULL) return EINVAL;
    if (h == &ehooks_default) h = NULL;
  }
  /* A destroyed user arena's index (and structure, with its edata pool) first. */
  mtx_lock(&arenas_lock);
  unsigned ind = ARENAS_MAX;
  for (unsigned i = narenas + 1; i < narenas_total; i++) {
    if (arenas[i] != NULL && arenas[i]->destroyed == 1) {
      ind = i;
      arenas[i]->destroyed = 2; /* reserved: no other create takes it, arena_live skips it */
      break;
    }
  }
  if (ind == ARENAS_MAX && narenas_total < ARENAS_MAX) ind = narenas_total;
  if (ind == ARENAS_MAX) {
    mtx_unlock(&arenas_lock);
    return EAGAIN;
  }
  if (ind == narenas_total) __atomic_store_n(&narenas_total, ind + 1, __ATOMIC_RELEASE);
  mtx_unlock(&arenas_lock);
  arena_t *a = arena_get(ind); /* the slot is reserved: creates, or returns the old one */
  if (a == NULL) return EAGAIN; /* the index stays free (arenas[ind] NULL is skipped) */
  meta_base_t *mb = NULL;
  if (h != NULL && metadata_use_hooks) {
    arena_meta_to_pools(a);
    mb = meta_base_new(a, h);
    if (mb == NULL) { /* the index awaits reuse, as after a destroy */
      mtx_lock(&a->elock);
      a->user = 1;
      __atomic_store_n(&a->destroyed, 1, __ATOMIC_RELEASE);
      mtx_unlock(&a->elock);
      return EAGAIN;
    }
  }
  mtx_lock(&a->elock);
  a->user = 1;
  mtx_lock(&a->mlock);
  a->mbase = mb;
  mtx_unlock(&a->mlock);
  a->grow_next = (size_t)2 << 20;
  uint64_t now = decay_now();
  decay_init(&a->ddecay, __atomic_load_n(&arenas_dirty_decay_ms, __ATOMIC_RELAXED), now);
  decay_init(&a->mdecay, __atomic_load_n(&arenas_muzzy_decay_ms, __ATOMIC_RELAXED), now);
  __atomic_store_n(&a->hooks, h, __ATOMIC_RELEASE);
  __atomic_store_n(&a->destroyed, 0, __ATOMIC_RELEASE);
  mtx_unlock(&a->elock);
  return ctl_copy_out(oldp, oldlenp, &ind, sizeof(ind));
}


/* arena.<i>.reset and arena.<i>.destroy: user arenas only (EFAULT otherwise). */
static int reset_destroy(const size_t *mib, void *oldp, size_t *oldlenp, void *newp, size_t newlen,
                         bool destroy) {
  CTL_VOID();
  arena_t *a = arena_live(mib[1]);
  if (a == NULL || !a->user) return EFAULT;
  if (destroy && __atomic_load_n(&a->nthreads, __ATOMIC_RELAXED) != 0) return EFAULT; /* bound */
  arena_lock_all(a);
  __atomic_fetch_add(&a->gen, 1, __ATOMIC_RELEASE); /* every thread's reserve is stale */
  arena_reset_locked(a);
  if (!destroy) {
    arena_unlock_all(a);
    arena_maybe_purge(a);
    return 0;
  }
  /* Another thread's purge (a background thread's decay, a trim) may hold extents of this
   * arena outside the elock: wait until they are back in a set, so that they are
   * destroyed with the rest instead of coming back to a destroyed arena. The purges and
   * extent_destroy_all below drop the elock too, and such a thread may take a batch of
   * what is still in the sets meanwhile: so again until none is out when they are done
   * (the elock then held, none can start). Purge what the hooks allow, then hand every
   * page back (destroy hook or munmap). */
  do {
    while (a->npurging) {
      mtx_unlock(&a->elock);
      sched_yield();
      mtx_lock(&a->elock);
    }
    extent_purge(a, ES_DIRTY, 0, false);
    extent_purge(a, ES_MUZZY, 0, false);
    extent_destroy_all(a);
  } while (a->npurging);
  arena_counts_t c;
  counts_read(a, &c, true);
  for (unsigned b = 1; b <= SZ_NSMALL; b++) a->bins[b].nmalloc = a->bins[b].ndalloc = 0;
  a->nlarge_malloc = a->nlarge_dalloc = a->npurged = 0;
  a->purge_pending = false;
  __atomic_store_n(&a->hooks, NULL, __ATOMIC_RELEASE);
  /* Its own metadata: nothing of the arena points into it once its cached descriptors and
   * spare bitmaps are dropped with it (the page map's entries went with the extents). */
  meta_base_t *mb = a->mbase;
  if (mb != NULL) {
    mtx_lock(&a->mlock);
    a->mbase = NULL;
    mtx_unlock(&a->mlock);
    a->edata_free = NULL;
    a->edata_nfree = 0;
    for (unsigned b = 1; b <= SZ_NSMALL; b++) a->bins[b].bm_spare = NULL;
  }
  __atomic_store_n(&a->destroyed, 1, __ATOMIC_RELEASE);
  arena_unlock_all(a);
  if (mb != NULL) meta_base_delete(a, mb); /* its blocks back through the hooks it had at creation */
  mtx_lock(&arenas_lock);
  counts_add(&destroyed_counts, &c);
  destroyed_any = true;
  mtx_unlock(&arenas_lock);
  return 0;
}

int au_arena_reset(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                         size_t newlen) {
  (void)miblen;
  return reset_destroy(mib, oldp, oldlenp, newp, newlen, false);
}

int au_arena_destroy(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)miblen;
  return reset_destroy(mib, oldp, oldlenp, newp, newlen, true);
}

int au_arena_initialized(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                               size_t newlen) {
  (void)miblen;
  CTL_READONLY();
  bool init;
  if (mib[1] == MALLCTL_ARENAS_ALL) {
    init = true;
  } else if (mib[1] == MALLCTL_ARENAS_DESTROYED) {
    mtx_lock(&arenas_lock);
    init = destroyed_any;
    mtx_unlock(&arenas_lock);
  } else if (mib[1] < ARENAS_MAX) {
    init = arena_live(mib[1]) != NULL;
  } else {
    return EFAULT;
  }
  return ctl_copy_out(oldp, oldlenp, &init, sizeof(init));
}

int au_arena_extent_hooks(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                                size_t newlen) {
  (void)miblen;
  arena_t *a = arena_live(mib[1]);
  if (a == NULL && mib[1] <= narenas) a = arena_get((unsigned)mib[1]); /* ordinary: made on use */
  if (a == NULL) return EFAULT;
  extent_hooks_t *old = arena_hooks(a);
  if (newp != NULL) {
    if (newlen != sizeof(extent_hooks_t *)) return EINVAL;
    extent_hooks_t *h = *(extent_hooks_t **)newp;
    if (h == NULL || ((uintptr_t)h & (_Alignof(extent_hooks_t) - 1)) != 0 || h->alloc == NULL) return EINVAL;
    old = __atomic_exchange_n(&a->hooks, h == &ehooks_default ? NULL : h, __ATOMIC_ACQ_REL);
  }
  if (old == NULL) old = &ehooks_default;
  return ctl_copy_out(oldp, oldlenp, &old, sizeof(old));
}

/* thread.arena: reading binds the thread (as jemalloc does); writing moves it. A thread
 * bound to a user arena gives up its cache (see tcache_release). */
int au_thread_arena(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen) {
  (void)mib;
  (void)miblen;
  tsd_t *tsd = &strata_tsd;
  if (tsd->arena == NULL) tsd->arena = arena_choose();
  if (tsd->arena == NULL) return EAGAIN;
  unsigned old = tsd->arena->ind;
  if (newp != NULL) {
    if (newlen != sizeof(unsigned)) return EINVAL;
    unsigned want = *(unsigned *)newp;
    arena_t *a = want <= narenas ? arena_get(want) : arena_live(want);
    if (a == NULL) return EFAULT;
    if (a != tsd->arena) {
      __atomic_fetch_add(&a->nthreads, 1, __ATOMIC_RELAXED);
      arena_unbind(tsd->arena);
      tsd->arena = a;
      tsd->arena_pinned = 1; /* the program chose: arena spreading leaves it there */
      if (a->user) {
        tcache_release(tsd);
      } else if (tsd->state == TSD_ACTIVE) {
        tsd->tcache->arena = a; /* cached blocks still go home to their owners */
      }
    }
  }
  return ctl_copy_out(oldp, oldlenp, &old, sizeof(old));
}

int au_tcache_create(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib;
  (void)miblen;
  CTL_READONLY();
  if (oldp == NULL || oldlenp == NULL || *oldlenp != sizeof(unsigned)) return EINVAL;
  unsigned ind;
  int err = tcache_explicit_create(&ind);
  return err ? err : ctl_copy_out(oldp, oldlenp, &ind, sizeof(ind));
}

static int tcache_write(void *oldp, size_t *oldlenp, void *newp, size_t newlen, bool destroy) {
  if (oldp != NULL || oldlenp != NULL) return EPERM;
  if (newp == NULL) return EFAULT; /* jemalloc: no index is index UINT_MAX */
  if (newlen != sizeof(unsigned)) return EINVAL;
  return tcache_explicit_flush(*(unsigned *)newp, destroy);
}

int au_tcache_flush(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen) {
  (void)mib;
  (void)miblen;
  return tcache_write(oldp, oldlenp, newp, newlen, false);
}

int au_tcache_destroy(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                            size_t newlen) {
  (void)mib;
  (void)miblen;
  return tcache_write(oldp, oldlenp, newp, newlen, true);
}

/* MALLCTL_ARENAS_DESTROYED: the counters of destroyed arenas, for ctl.c's snapshot;
 * false while none was destroyed. */
bool arenas_destroyed_read(arena_counts_t *c) {
  mtx_lock(&arenas_lock);
  *c = destroyed_counts;
  bool any = destroyed_any;
  mtx_unlock(&arenas_lock);
  return any;
}
/* ---------------------------------------------------------------- reserves */
/* Reserves of exited threads, linked through arena; guarded by tcache_list_lock (taken with
 * nothing else held, and in fork's lock order). */
static ureserve_t *ureserve_pool;

static void ureserve_flush(ureserve_t *r) {
  if (r->arena == NULL) return;
  for (szind_t i = 1; i <= SZ_NSMALL; i++) {
    if (r->head[i]) bin_return_chain(r->arena, i, r->head[i], r->gen);
    r->head[i] = NULL;
  }
  r->arena = NULL;
  r->code = ~0u;
}

/* The reserve's list for class ind is empty or stale: fill UR_BATCH regions, return one. */
void *ureserve_refill(tsd_t *tsd, arena_t *a, szind_t ind) {
  ureserve_t *r = tsd->ureserve;
  if (opt.zero || opt.junk != JUNK_NONE) return arena_small_alloc(a, ind, false); /* every block filled */
  if (r == NULL) {
    mtx_lock(&tcache_list_lock);
    r = ureserve_pool;
    if (r) ureserve_pool = (ureserve_t *)(void *)r->arena;
    mtx_unlock(&tcache_list_lock);
    if (r == NULL && (r = meta_alloc(sizeof(*r))) == NULL) return arena_small_alloc(a, ind, false);
    memset(r, 0, sizeof(*r));
    r->code = ~0u;
    tsd->ureserve = r;
    /* The key's destructor gives the reserve back at thread exit (tcache_empty: no cache). */
    if (tsd_key_ready && tsd->state == TSD_NOMINAL) pthread_setspecific(tsd_key, &tcache_empty);
  }
  uint64_t gen = __atomic_load_n(&a->gen, __ATOMIC_ACQUIRE); /* before the fill: stale at worst */
  if (r->arena != a || r->gen != gen) {
    ureserve_flush(r);
    r->arena = a;
    r->gen = gen;
    r->code = a->ind + 1;
    memset(r->batch, 0, sizeof(r->batch));
  }
  unsigned n = r->batch[ind] ? r->batch[ind] : 2;
  r->batch[ind] = (uint8_t)(n * 2 < UR_BATCH ? n * 2 : UR_BATCH);
  void *head;
  if (bin_fill_list(a, ind, &head, n) == 0) return NULL;
  r->head[ind] = link_next(head, ind);
  return head;
}

void ureserve_thread_exit(tsd_t *tsd) {
  ureserve_t *r = tsd->ureserve;
  if (r == NULL) return;
  tsd->ureserve = NULL;
  ureserve_flush(r);
  mtx_lock(&tcache_list_lock);
  r->arena = (arena_t *)(void *)ureserve_pool;
  ureserve_pool = r;
  mtx_unlock(&tcache_list_lock);
}

void strata_bad_flag(const char *func, const char *what, unsigned ind) {
  char num[24];
  const char *parts[] = {"<strata>: ", func, "(): ", what, "(", fmt_u64(num, ind),
                         "): no such ", what[8] == 'A' ? "arena (see arenas.create)\n" : "cache (see tcache.create)\n"};
  msg_parts(parts, 8);
  abort();
}

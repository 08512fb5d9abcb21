/*
 * extent.c - page extents of one arena: spans of whole pages that split on allocation
 * and coalesce with free neighbours on release. Free extents are kept by state (dirty:
 * freed and resident; muzzy: purged lazily; retained: address space without memory) in buckets of page
 * count (4 per doubling), each a pairing heap by address, so the fit is near-best by
 * size and lowest address first. Neighbours are found through the rtree. Everything
 * here runs under the arena's elock. Pages come from os.c, or from the arena's extent
 * hooks (ehooks.c): then splits and merges ask the hooks first, and the alloc, commit
 * and purge hooks run with the elock dropped.
 */
#include <string.h>

#include "internal.h"
#include "probes.h"

_Static_assert(sizeof(edata_t) % 16 == 0, "edata must keep the rtree's low pointer bits free");

/* Mappings grow exponentially from 2 MiB (one huge page) up to 64 MiB, like jemalloc's
 * retained growth: few mmaps and VMAs, and untouched address space costs no RSS. */
#define GROW_MIN ((size_t)2 << 20)
#define GROW_MAX ((size_t)64 << 20)
/* Edata come from the metadata pool (meta.c) 32 at a time; an arena keeps at most 64 free
 * ones, so one pool lock serves about 32 extent changes, and an idle arena keeps at most
 * 5 KiB of them (none once its background thread found it idle: edata_cache_flush). */
#define EDATA_BATCH 32
#define EDATA_CACHE_MAX 64

size_t extent_resident_pages;

/* ---------------------------------------------------------------- pairing heap */
static inline uintptr_t ph_key(ph_node_t *n) { return ph_edata(n)->addr; }

static ph_node_t *ph_merge(ph_node_t *a, ph_node_t *b) {
  if (a == NULL) return b;
  if (b == NULL) return a;
  if (ph_key(b) < ph_key(a)) {
    ph_node_t *t = a;
    a = b;
    b = t;
  }
  b->prev = a;
  b->next = a->child;
  if (a->child) a->child->prev = b;
  a->child = b;
  a->next = a->prev = NULL;
  return a;
}

/* Two-pass combine of a sibling list, iteratively (no recursion on allocator paths). */
static ph_node_t *ph_combine(ph_node_t *first) {
  ph_node_t *list = NULL;
  for (ph_node_t *a = first; a != NULL;) {
    ph_node_t *b = a->next, *rest = b ? b->next : NULL;
    a->next = a->prev = NULL;
    if (b) {
      b->next = b->prev = NULL;
      a = ph_merge(a, b);
    }
    a->next = list;
    list = a;
    a = rest;
  }
  if (list == NULL) return NULL;
  ph_node_t *r = list;
  list = list->next;
  r->next = NULL;
  while (list) {
    ph_node_t *nx = list->next;
    list->next = NULL;
    r = ph_merge(r, list);
    list = nx;
  }
  return r;
}

void ph_insert(ph_node_t **root, ph_node_t *n) {
  n->child = n->next = n->prev = NULL;
  *root = ph_merge(*root, n);
}

void ph_remove(ph_node_t **root, ph_node_t *n) {
  if (*root == n) {
    *root = ph_combine(n->child);
  } else {
    if (n->prev->child == n) {
      n->prev->child = n->next;
    } else {
      n->prev->next = n->next;
    }
    if (n->next) n->next->prev = n->prev;
    *root = ph_merge(*root, ph_combine(n->child));
  }
  n->child = n->next = n->prev = NULL;
}

/* ---------------------------------------------------------------- edata pool */
/* A free edata is in no arena (arena_id 0): it is written 0 under the elock of the arena
 * that had it, and the arena's id under the elock of the arena that takes it, so a stale
 * page-map read in another arena never finds its own id on an edata that is not its own
 * (see mergeable); a purged pool page reads as arena_id 0 too. */
static edata_t *edata_get(arena_t *a) {
  edata_t *e = a->edata_free;
  if (e == NULL) {
    void *objs[EDATA_BATCH];
    unsigned n = arena_meta_get(a, META_POOL_EDATA, objs, EDATA_BATCH);
    if (n == 0) return NULL;
    for (unsigned i = n; i-- > 1;) {
      edata_t *f = objs[i];
      f->lru_next = a->edata_free;
      a->edata_free = f;
    }
    a->edata_nfree += n - 1;
    e = objs[0];
  } else {
    a->edata_free = e->lru_next;
    a->edata_nfree--;
  }
  /* Every field but arena_id, which stale readers in other arenas may be loading. */
  const size_t at = offsetof(edata_t, arena_id), after = at + sizeof(e->arena_id);
  memset(e, 0, at);
  memset((char *)e + after, 0, sizeof(*e) - after);
  __atomic_store_n(&e->arena_id, (uint16_t)(a->ind + 1), __ATOMIC_RELAXED);
  return e;
}

/* elock held: gives the arena's free edata beyond keep back to the pool. */
void edata_cache_flush(arena_t *a, unsigned keep) {
  while (a->edata_nfree > keep) {
    void *objs[EDATA_BATCH];
    unsigned n = 0;
    while (n < EDATA_BATCH && a->edata_nfree > keep) {
      edata_t *e = a->edata_free;
      a->edata_free = e->lru_next;
      a->edata_nfree--;
      objs[n++] = e;
    }
    arena_meta_put(a, META_POOL_EDATA, objs, n);
  }
}

static void edata_put(arena_t *a, edata_t *e) {
  e->state = ES_ACTIVE; /* no longer a free extent: stale rtree reads must not merge it */
  __atomic_store_n(&e->arena_id, 0, __ATOMIC_RELAXED);
  e->lru_next = a->edata_free;
  a->edata_free = e;
  if (++a->edata_nfree > EDATA_CACHE_MAX) edata_cache_flush(a, EDATA_CACHE_MAX / 2);
}

/* ---------------------------------------------------------------- rtree registration */
static inline uintptr_t last_gran(const edata_t *e) { return e->addr + e->size - GRAN; }

void extent_register(edata_t *e, unsigned szind, bool slab) {
  if (slab) {
    rtree_write_range(e->addr, e->size / GRAN, rt_make(e, szind, 1));
    /* free()'s region-start test (internal.h, rtree_chk): base x c, for every granule. */
    if (szind != 0) rtree_write_chk(e->addr, e->size / GRAN, (uint32_t)(e->addr * bin_info[szind].div_magic));
    return;
  }
  /* Large and free extents: the first entry carries szind, which arena.c gives only a
   * block free() may cache (large_rt_ind); the last one class 0. */
  rtree_write(last_gran(e), rt_make(e, 0, 0));
  rtree_write(e->addr, rt_make(e, szind, 0));
  /* A cached large class's c32 is 2^20 and its start page-aligned: base x c is 0 mod 2^32. */
  if (szind != 0) rtree_write_chk(e->addr, 1, 0);
}

void extent_deregister_interior(edata_t *e) {
  if (e->size > 2 * GRAN) rtree_write_range(e->addr + GRAN, e->size / GRAN - 2, 0);
}

/* ---------------------------------------------------------------- extent sets */
static void eset_insert(eset_t *es, edata_t *e) {
  sassert(e->size > 0 && e->size % os_page == 0 && e->addr % os_page == 0);
  sassert(e->state == ES_DIRTY || e->state == ES_MUZZY || e->state == ES_RETAINED);
  size_t np = e->size / os_page;
  unsigned b = psz_floor_fast(np);
  e->bucket = (uint8_t)b;
  ph_insert(&es->heaps[b], &e->ph);
  /* Atomic stores (under the elock): extent_steal reads both without it. */
  __atomic_store_n(&es->nonempty[b / 64], es->nonempty[b / 64] | (uint64_t)1 << (b % 64), __ATOMIC_RELAXED);
  __atomic_store_n(&es->npages, es->npages + np, __ATOMIC_RELAXED);
  es->nextents[b]++;
  es->bpages[b] += np;
}

static void eset_remove(eset_t *es, edata_t *e) {
  unsigned b = e->bucket;
  sassert(es->heaps[b] != NULL && es->npages >= e->size / os_page);
  ph_remove(&es->heaps[b], &e->ph);
  if (es->heaps[b] == NULL)
    __atomic_store_n(&es->nonempty[b / 64], es->nonempty[b / 64] & ~((uint64_t)1 << (b % 64)), __ATOMIC_RELAXED);
  __atomic_store_n(&es->npages, es->npages - e->size / os_page, __ATOMIC_RELAXED);
  es->nextents[b]--;
  es->bpages[b] -= e->size / os_page;
}

static edata_t *eset_fit(eset_t *es, size_t np) {
  unsigned f = psz_floor_fast(np), c = psz_ceil_fast(np);
  /* The lowest extent of the floor bucket may fit exactly: cheap to check. */
  if (f != c && es->heaps[f] && ph_edata(es->heaps[f])->size / os_page >= np) return ph_edata(es->heaps[f]);
  for (unsigned w = c / 64; w < (PSZ_N + 63) / 64; w++) {
    uint64_t m = es->nonempty[w];
    if (w == c / 64) m &= ~(uint64_t)0 << (c % 64);
    if (m) return ph_edata(es->heaps[w * 64 + (unsigned)__builtin_ctzll(m)]);
  }
  return NULL;
}

/* Without the set's lock (extent_steal): whether eset_fit may find an extent of np pages,
 * from the nonempty words alone. A stale answer only costs a trylock and a failed fit, or
 * one steal not made. The floor bucket counts: its lowest extent may fit. */
static inline __attribute__((always_inline)) bool eset_may_fit(const eset_t *es, size_t np) {
  unsigned f = psz_floor_fast(np), c = psz_ceil_fast(np);
  if (f != c && (__atomic_load_n(&es->nonempty[f / 64], __ATOMIC_RELAXED) >> (f % 64) & 1)) return true;
  for (unsigned w = c / 64; w < (PSZ_N + 63) / 64; w++) {
    uint64_t m = __atomic_load_n(&es->nonempty[w], __ATOMIC_RELAXED);
    if (w == c / 64) m &= ~(uint64_t)0 << (c % 64);
    if (m) return true;
  }
  return false;
}

/* The purge order of the dirty and muzzy sets (the retained set keeps none). */
static void lru_append(eset_t *a, edata_t *e) {
  e->lru_next = NULL;
  e->lru_prev = a->lru_tail;
  if (a->lru_tail) {
    a->lru_tail->lru_next = e;
  } else {
    a->lru_head = e;
  }
  a->lru_tail = e;
}

static void lru_insert_after(eset_t *a, edata_t *pos, edata_t *e) {
  e->lru_prev = pos;
  e->lru_next = pos->lru_next;
  if (pos->lru_next) {
    pos->lru_next->lru_prev = e;
  } else {
    a->lru_tail = e;
  }
  pos->lru_next = e;
}

static void lru_remove(eset_t *a, edata_t *e) {
  if (e->lru_prev) {
    e->lru_prev->lru_next = e->lru_next;
  } else {
    a->lru_head = e->lru_next;
  }
  if (e->lru_next) {
    e->lru_next->lru_prev = e->lru_prev;
  } else {
    a->lru_tail = e->lru_prev;
  }
  e->lru_next = e->lru_prev = NULL;
}

static eset_t *eset_of(arena_t *a, unsigned state) {
  return state == ES_DIRTY ? &a->dirty : state == ES_MUZZY ? &a->muzzy : &a->retained;
}
static inline bool has_lru(unsigned state) { return state != ES_RETAINED; }

/* A neighbour can merge when it is a free extent of this arena in the same state. The
 * arena check comes first: an edata carries this arena's id only while it is this arena's
 * (edata_get), so reading the id of another arena's edata, or of one in the pool, is safe,
 * and its other fields are then never read. */
static edata_t *mergeable(arena_t *a, uint64_t ent, unsigned state) {
  edata_t *n = rt_edata(ent);
  if (n == NULL || (ent & RT_SLAB) || __atomic_load_n(&n->arena_id, __ATOMIC_RELAXED) != a->ind + 1 ||
      n->state != state)
    return NULL;
  return n;
}

/* Hooked arenas: two free neighbours merge only in the same commit state and when the
 * merge hook agrees (called under the elock, as jemalloc calls it under its ecache lock). */
static bool can_merge(arena_t *a, const edata_t *lo, const edata_t *hi) {
  extent_hooks_t *h = arena_hooks(a);
  if (h == NULL) return true;
  if (lo->committed != hi->committed) return false;
  return !ehooks_merge(a, h, (void *)lo->addr, lo->size, (void *)hi->addr, hi->size, lo->committed);
}

/* User arenas list their active extents (through the lru links, which only free extents
 * use) so that arena.<i>.reset finds them in time proportional to their number. */
static void active_link(arena_t *a, edata_t *e) {
  e->lru_prev = NULL;
  e->lru_next = a->active_head;
  if (a->active_head) a->active_head->lru_prev = e;
  a->active_head = e;
}

static void active_unlink(arena_t *a, edata_t *e) {
  if (e->lru_prev) {
    e->lru_prev->lru_next = e->lru_next;
  } else if (a->active_head == e) {
    a->active_head = e->lru_next;
  }
  if (e->lru_next) e->lru_next->lru_prev = e->lru_prev;
  e->lru_next = e->lru_prev = NULL;
}

/* Coalesce e (not in any set) with free neighbours, register it and insert it. */
static void extent_insert_free(arena_t *a, edata_t *e, unsigned state) {
  eset_t *es = eset_of(a, state);
  sassert(edata_arena_ind(e) == a->ind && e->size % os_page == 0);
  e->state = (uint8_t)state;
  e->slab = 0;
  if (e->addr >= GRAN) {
    edata_t *n = mergeable(a, rtree_read_near(e->addr - GRAN), state);
    if (n && n->addr + n->size == e->addr && can_merge(a, n, e)) {
      eset_remove(es, n);
      if (has_lru(state)) lru_remove(es, n);
      rtree_write(last_gran(n), 0);
      rtree_write(e->addr, 0);
      e->addr = n->addr;
      e->size += n->size;
      e->zeroed = e->zeroed && n->zeroed;
      edata_put(a, n);
    }
  }
  edata_t *n = mergeable(a, rtree_read_near(e->addr + e->size), state);
  if (n && n->addr == e->addr + e->size && can_merge(a, e, n)) {
    eset_remove(es, n);
    if (has_lru(state)) lru_remove(es, n);
    rtree_write(last_gran(e), 0);
    rtree_write(n->addr, 0);
    e->size += n->size;
    e->zeroed = e->zeroed && n->zeroed;
    edata_put(a, n);
  }
  extent_register(e, 0, false);
  eset_insert(es, e);
  if (has_lru(state)) {
    e->dirty_ns = decay_now();
    lru_append(es, e);
  }
}

/* Map more address space into the retained set. A hook is called with the elock dropped
 * (the caller re-searches); a hook that cannot split gets asked for exactly what is needed. */
static bool extent_grow(arena_t *a, size_t need) {
  extent_hooks_t *h = arena_hooks(a);
  size_t size = (need + os_page - 1) & ~(os_page - 1);
  if (size < need) return true;
  if (!a->huge && (h == NULL || h->split != NULL)) {
    size = (size + GROW_MIN - 1) & ~(GROW_MIN - 1);
    if (size < a->grow_next) size = a->grow_next;
    if (a->grow_next < GROW_MAX) a->grow_next *= 2;
  }
  edata_t *e = edata_get(a);
  if (e == NULL) return true;
  bool zero = true, commit = true;
  void *p;
  if (h == NULL) {
    /* Shared reservations once a second ordinary arena exists (threads); a one-arena heap
     * maps its chunks alone, each placed by the kernel below the last, as before. */
    bool shared = !a->huge && narenas > 1 && __atomic_load_n(&arenas[1], __ATOMIC_ACQUIRE) != NULL;
    p = shared ? os_chunk_map(size, GROW_MIN) : os_map(size, size >= GROW_MIN ? GROW_MIN : os_page);
  } else {
    zero = commit = false; /* as jemalloc asks: take what the hook has */
    mtx_unlock(&a->elock);
    p = ehooks_alloc(a, h, size, os_page, &zero, &commit);
    mtx_lock(&a->elock);
  }
  if (p == NULL) {
    edata_put(a, e);
    return true;
  }
  os_thp_apply(p, size, false);
  if (rtree_ensure((uintptr_t)p, size)) {
    if (h == NULL) {
      os_unmap(p, size);
    } else if (ehooks_dalloc(a, h, p, size, commit)) {
      ehooks_destroy(a, h, p, size, commit);
    }
    edata_put(a, e);
    return true;
  }
  a->mapped += size;
  e->addr = (uintptr_t)p;
  e->size = size;
  e->zeroed = zero;
  e->committed = commit;
  extent_insert_free(a, e, ES_RETAINED);
  return false;
}

/* A hooked arena whose split hook refuses (or is NULL) cannot carve a larger free
 * extent: ask the alloc hook for exactly this extent instead, as jemalloc falls back to
 * growing. elock held, dropped around the hook. */
static edata_t *extent_alloc_fresh(arena_t *a, extent_hooks_t *h, size_t size, size_t align) {
  edata_t *e = edata_get(a);
  if (e == NULL) return NULL;
  bool zero = false, commit = false;
  mtx_unlock(&a->elock);
  void *p = ehooks_alloc(a, h, size, align, &zero, &commit);
  mtx_lock(&a->elock);
  if (p != NULL && rtree_ensure((uintptr_t)p, size)) {
    if (ehooks_dalloc(a, h, p, size, commit)) ehooks_destroy(a, h, p, size, commit);
    p = NULL;
  }
  if (p == NULL) {
    edata_put(a, e);
    return NULL;
  }
  a->mapped += size;
  e->addr = (uintptr_t)p;
  e->size = size;
  e->zeroed = zero;
  e->committed = commit;
  e->state = ES_ACTIVE;
  return e;
}

/* Over the commit budget: purge this arena's dirty pages, then those of every other arena
 * whose lock is free (trylock: holding a's lock, waiting for another's could deadlock),
 * and try again. True if the budget still has no room. */
static bool commit_or_purge(arena_t *a, size_t size) {
  if (likely(!os_commit(size))) return false;
  extent_purge(a, ES_DIRTY, 0, false);
  extent_purge(a, ES_MUZZY, 0, false);
  if (!os_commit(size)) return false;
  for (unsigned i = 0; i < __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE); i++) {
    arena_t *o = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (o == NULL || o == a || mtx_trylock(&o->elock)) continue;
    extent_purge(o, ES_DIRTY, 0, false);
    extent_purge(o, ES_MUZZY, 0, false);
    mtx_unlock(&o->elock);
    if (!os_commit(size)) return false;
  }
  return true;
}

/* Cross-arena reuse (docs/design.md, "Arenas"). Each ordinary arena keeps the dirty (and
 * muzzy) pages its slabs and large blocks leave, and reused only those; with every thread
 * on its own arena the arenas together held far more free resident pages than any one
 * needed (wl_xthread: 16 MiB dirty at the peak spread over 8 arenas while others faulted
 * in fresh pages). An ordinary arena that needs pages and has none of its own that fit
 * now takes np pages from another ordinary arena's dirty or muzzy set before it touches retained
 * memory: the lowest np pages of that arena's best fit move to this arena (edata, page
 * map boundaries, mapped bytes) and join its set, where the caller finds them, or with
 * take (a request of exactly np pages) go to *take as an active extent. Only
 * arenas whose elock is free are asked (trylock: a's elock is held, and waiting for a
 * second arena's could deadlock), so no thread waits on another arena. User arenas,
 * hooked arenas and the oversize arena neither give nor take: their pages may come from
 * another source or have their own reuse rules. Returns the state of the pages that
 * came (ES_DIRTY or ES_MUZZY), ES_ACTIVE if none. */
uint64_t extent_nsteals; /* atomic: stats, and the unit test's witness */
uint64_t extent_nsteal_locks; /* atomic: other arenas' elocks taken to look (unit tests) */
static unsigned extent_steal(arena_t *a, size_t np, edata_t **take) {
  unsigned n = narenas;
  for (unsigned k = 1; k < n; k++) {
    arena_t *o = __atomic_load_n(&arenas[(a->ind + k) % n], __ATOMIC_ACQUIRE);
    if (o == NULL || o->user || o->huge || arena_hooks(o) != NULL) continue;
    /* Not even enough pages: no lock (a growing program's arenas mostly have none). */
    bool dirty = __atomic_load_n(&o->dirty.npages, __ATOMIC_RELAXED) >= np && eset_may_fit(&o->dirty, np);
    if (!dirty && (__atomic_load_n(&o->muzzy.npages, __ATOMIC_RELAXED) < np || !eset_may_fit(&o->muzzy, np)))
      continue; /* no extent that fits, only fragments: no lock */
    if (mtx_trylock(&o->elock)) continue;
    __atomic_fetch_add(&extent_nsteal_locks, 1, __ATOMIC_RELAXED);
    /* Its dirty pages first (resident for sure), then its muzzy ones: one trylock each. */
    unsigned state = ES_DIRTY;
    eset_t *oes = &o->dirty;
    edata_t *f = oes->npages >= np ? eset_fit(oes, np) : NULL;
    if (f == NULL && o->muzzy.npages >= np) {
      state = ES_MUZZY;
      oes = &o->muzzy;
      f = eset_fit(oes, np);
    }
    edata_t *e = f != NULL ? edata_get(a) : NULL;
    if (e == NULL) {
      mtx_unlock(&o->elock);
      if (f != NULL) return ES_ACTIVE; /* no edata: the caller's own path will fail alike */
      continue;
    }
    size_t size = np * os_page;
    eset_remove(oes, f);
    e->addr = f->addr;
    e->size = size;
    e->zeroed = f->zeroed;
    e->committed = f->committed;
    if (f->size > size) { /* the rest stays the other arena's, at its age in the purge order */
      f->addr += size;
      f->size -= size;
      extent_register(f, 0, false);
      eset_insert(oes, f);
    } else {
      lru_remove(oes, f);
      edata_put(o, f);
    }
    o->mapped -= size;
    a->mapped += size;
    if (take != NULL) {
      /* The request itself (take: a page-aligned request of exactly np pages): e is
       * handed to extent_alloc active, instead of joining this arena's set only to be
       * found, removed and cut again there (~350 instructions a steal).
       * Its boundaries name e before o's lock goes, as below. */
      e->state = ES_ACTIVE;
      if (state == ES_MUZZY) e->zeroed = 0; /* MADV_FREE pages may keep their contents */
      extent_register(e, 0, false);
      mtx_unlock(&o->elock);
      __atomic_fetch_add(&extent_nsteals, 1, __ATOMIC_RELAXED);
      *take = e;
      return state;
    }
    /* e's boundaries now name this arena's edata: o, which holds its lock only while
     * reading them, sees another arena's id there and does not merge with it. */
    extent_insert_free(a, e, state);
    mtx_unlock(&o->elock);
    __atomic_fetch_add(&extent_nsteals, 1, __ATOMIC_RELAXED);
    return state;
  }
  return ES_ACTIVE;
}

/* The oversize arena, when no dirty extent is big enough for `size`: the request is
 * built from dirty extents' resident pages moved with mremap (page-table moves: no fault
 * and no zeroing), so a loop of huge blocks of varying sizes faults in only what its
 * live set outgrows. The largest dirty extent is grown in place or moved (MREMAP_MAYMOVE)
 * to `size`; then further dirty extents, largest first, are moved into the grown part
 * (MREMAP_FIXED, same length: a moved range never needs to be one VMA on kernels that
 * move several, and a refusal only leaves that part to fault in). Only what no dirty
 * page covers faults in. NULL when there is no dirty extent, the commit budget refuses
 * the growth or the kernel refuses the first move. */
#define GATHER_MAX_PIECES 8                /* mremap calls per request, beyond the first */
#define GATHER_MIN_PIECE ((size_t)256 << 10) /* smaller remainders are not worth a VMA */
/* The largest dirty extent (the first of equals in purge order); NULL if none. */
static edata_t *largest_dirty(arena_t *a) {
  edata_t *d = NULL;
  for (edata_t *e = a->dirty.lru_head; e; e = e->lru_next)
    if (d == NULL || e->size > d->size) d = e;
  return d;
}

size_t extent_fill_from_dirty(arena_t *a, uintptr_t end, size_t fresh) {
  for (unsigned n = 0; n < GATHER_MAX_PIECES && fresh >= GATHER_MIN_PIECE; n++) {
    edata_t *s = largest_dirty(a);
    if (s == NULL || s->size < GATHER_MIN_PIECE) break;
    size_t take = s->size < fresh ? s->size : fresh;
    if (!os_remap_fixed((void *)s->addr, take, take, (void *)(end - fresh))) break;
    eset_remove(&a->dirty, s);
    rtree_write(s->addr, 0);
    rtree_write(last_gran(s), 0);
    if (take < s->size) { /* the rest stays dirty, at its place in the purge order */
      s->addr += take;
      s->size -= take;
      extent_register(s, 0, false);
      eset_insert(&a->dirty, s);
    } else {
      lru_remove(&a->dirty, s);
      edata_put(a, s);
    }
    a->mapped -= take; /* its old range is gone; its pages are the block's now */
    os_decommit(take); /* committed already, as dirty pages */
    __atomic_fetch_sub(&extent_resident_pages, take / os_page, __ATOMIC_RELAXED);
    fresh -= take;
  }
  return fresh;
}

static edata_t *extent_gather_dirty(arena_t *a, size_t size) {
  edata_t *d = largest_dirty(a);
  if (d == NULL || d->size >= size || d->size < GATHER_MIN_PIECE) return NULL;
  size_t grow = size - d->size;
  if (os_commit(grow)) return NULL;
  void *p = os_remap((void *)d->addr, d->size, size);
  size_t fresh = grow; /* bytes of the block no dirty page backs (yet) */
  if (p != NULL) {
    eset_remove(&a->dirty, d);
    lru_remove(&a->dirty, d);
    rtree_write(d->addr, 0);
    rtree_write(last_gran(d), 0);
    a->mapped += grow;
    __atomic_fetch_sub(&extent_resident_pages, d->size / os_page, __ATOMIC_RELAXED);
  } else {
    /* The extent spans two mappings (an earlier gather's pieces): growing needs one.
     * Map the block afresh and move every piece, this one included, into it. */
    edata_t *n = edata_get(a);
    if (n == NULL || (p = os_map(size, GROW_MIN)) == NULL) {
      if (n) edata_put(a, n);
      os_decommit(grow);
      return NULL;
    }
    os_decommit(grow);
    if (os_commit(size)) { /* the pieces moved in give their commitment back below */
      os_unmap(p, size);
      edata_put(a, n);
      return NULL;
    }
    a->mapped += size;
    d = n;
    fresh = size;
  }
  d->addr = (uintptr_t)p;
  d->size = size;
  d->zeroed = 0;
  if (rtree_ensure((uintptr_t)p, size)) {
    os_unmap(p, size);
    a->mapped -= size;
    os_decommit(size);
    edata_put(a, d);
    return NULL;
  }
  fresh = extent_fill_from_dirty(a, (uintptr_t)p + size, fresh);
  d->state = ES_ACTIVE;
  a->nactive += size / os_page;
  __atomic_fetch_add(&extent_resident_pages, size / os_page, __ATOMIC_RELAXED);
  limit_check(a);
  return d;
}

/* Fragmented dirty pages give way to fresh ones. An arena that
 * holds np dirty pages or more, none of which fit a request of np pages (nor did any
 * other arena's, see extent_steal), is about to fault in np fresh pages beside them. Its
 * dirty pages are then fragments between live blocks: while every arena's dirty pages
 * together are FRAG_DIRTY_DIV-th or more of the resident pages, the arena's oldest np
 * dirty pages are purged once the caller has unlocked, so its resident memory stays where
 * it was instead of growing by np. wl_nativethreads (100 threads, blocks of 16 B..256
 * KiB) faulted in 34-46 MiB per run, 90% of it for requests that found enough dirty pages,
 * in pieces (docs/design.md, "Extents and the page map"). Below the share, fragments are kept for
 * later small requests: purges and refaults would cost time for nothing (wl_drift,
 * wl_halffree and wl_xthread take fresh pages with dirty pages under an eighth of
 * resident, nearly always; mstress made most of its purges with dirty pages between an
 * eighth and a quarter of resident, and faulted the purged pages back in: docs/design.md).
 * Decay disabled (dirty_decay_ms -1) means keep them. */
uint64_t extent_nfrag_purges; /* atomic: the decisions; the unit tests' witness */
static void extent_purge_fragments(arena_t *a, size_t np) {
  if (a->dirty.npages < np || decay_ms(&a->ddecay) < 0) return;
  size_t dirty = 0, resident = __atomic_load_n(&extent_resident_pages, __ATOMIC_RELAXED);
  for (unsigned i = 0; i < narenas; i++) {
    arena_t *o = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (o != NULL) dirty += __atomic_load_n(&o->dirty.npages, __ATOMIC_RELAXED);
  }
  if (dirty * FRAG_DIRTY_DIV < resident) return;
  __atomic_fetch_add(&extent_nfrag_purges, 1, __ATOMIC_RELAXED);
  /* The caller purges after unlocking (arena_maybe_purge), as for the container limit:
   * no bin lock is held across the madvise calls. */
  a->frag_purge += np;
  __atomic_store_n(&a->purge_pending, true, __ATOMIC_RELAXED);
}

/* A piece [addr, addr + size) of free extent f becomes extent e in f's set, with f's
 * contents state and its age in the purge order. */
static void extent_carve(eset_t *es, edata_t *f, edata_t *e, uintptr_t addr, size_t size, unsigned state) {
  e->addr = addr;
  e->size = size;
  e->state = (uint8_t)state;
  e->zeroed = f->zeroed;
  e->committed = f->committed;
  e->dirty_ns = f->dirty_ns;
  extent_register(e, 0, false);
  eset_insert(es, e);
  if (has_lru(state)) lru_insert_after(es, f, e);
}

/* elock held: pages just became active. The oversize arena's peak window (decay.c);
 * another arena's current half window turns in decay.c. */
static void note_active_peak(arena_t *a) {
  if (a->huge) {
    arena_note_peak(a);
  } else if (a->nactive > a->peak_active[0]) {
    a->peak_active[0] = a->nactive;
  }
}

edata_t *extent_alloc(arena_t *a, size_t size, size_t align) {
  if (align < os_page) align = os_page;
  size_t search = size + (align - os_page);
  if (search < size) return NULL;
  size_t np = search / os_page;
  /* A hooked arena's pages come from the user's page source: not in the commit budget
   * nor in the resident count (they may not be process memory at all). */
  extent_hooks_t *h = arena_hooks(a);
  unsigned state = ES_DIRTY;
  edata_t *f = eset_fit(&a->dirty, np);
  if (f == NULL && a->muzzy.npages) {
    state = ES_MUZZY;
    f = eset_fit(&a->muzzy, np);
  }
  if (f == NULL && !a->huge && !a->user && h == NULL && a->ind < narenas) {
    edata_t *taken = NULL;
    unsigned got = extent_steal(a, np, align == os_page ? &taken : NULL);
    if (taken != NULL) { /* active already; an ordinary arena's pages: no hook, no user list */
      a->nactive += np;
      note_active_peak(a);
      return taken;
    }
    if (got != ES_ACTIVE) {
      state = got;
      f = eset_fit(eset_of(a, got), np);
    }
  }
  if (f == NULL && a->huge && h == NULL && align == os_page && (f = extent_gather_dirty(a, size)) != NULL) {
    arena_note_peak(a);
    return f;
  }
  if (f == NULL && h == NULL && !a->huge && !a->user) extent_purge_fragments(a, np);
  if (f == NULL) {
    /* Retained pages become memory: within the commit budget, after giving back dirty
     * pages if that is what it takes. */
    if (h == NULL && commit_or_purge(a, size)) return NULL;
    state = ES_RETAINED;
    f = eset_fit(&a->retained, np);
    if (f == NULL) {
      if (extent_grow(a, search) || (f = eset_fit(&a->retained, np)) == NULL) {
        if (h == NULL) os_decommit(size);
        return NULL;
      }
    }
  }
  /* Take the edata for the lead and trail first, so failure leaves f untouched. */
  uintptr_t body = (f->addr + align - 1) & ~(uintptr_t)(align - 1);
  size_t lead = body - f->addr, trail = f->size - lead - size;
  edata_t *l = NULL, *t = NULL;
  if ((lead && (l = edata_get(a)) == NULL) || (trail && (t = edata_get(a)) == NULL)) {
    if (l) edata_put(a, l);
    if (state == ES_RETAINED && h == NULL) os_decommit(size);
    return NULL;
  }
  eset_t *es = eset_of(a, state);
  if (h != NULL && lead && ehooks_split(a, h, (void *)f->addr, f->size, lead, f->committed)) {
    if (l) edata_put(a, l);
    if (t) edata_put(a, t);
    goto fresh;
  }
  if (h != NULL && trail && ehooks_split(a, h, (void *)body, f->size - lead, size, f->committed)) {
    if (l) { /* the lead is its own extent now: keep the two apart */
      eset_remove(es, f);
      extent_carve(es, f, l, f->addr, lead, state);
      f->addr = body;
      f->size -= lead;
      extent_register(f, 0, false);
      eset_insert(es, f);
    }
    if (t) edata_put(a, t);
    goto fresh;
  }
  if (l == NULL && t != NULL && h == NULL) {
    /* Only a trail, in f's bucket: f stays where it is as the trail (in its heap, whose
     * order by address holds, no other extent lying inside f; at its age in the purge
     * order) and t takes the front, which the caller registers. The slab and large
     * extents cut from a big free extent (retained pages as the heap grows) skipped a
     * heap removal and insertion, an LRU move and a boundary write: ~150 instructions of
     * ~800. A trail in a lower bucket: f is still the trail, at
     * its age in the purge order, and only changes heaps (wl_halffree: 47% of its slab
     * cuts, ~50 instructions each). */
    unsigned b = f->bucket;
    bool move = psz_floor_fast(trail / os_page) != b;
    if (move) eset_remove(es, f);
    t->addr = f->addr;
    t->size = size;
    t->zeroed = state == ES_MUZZY ? 0 : f->zeroed; /* MADV_FREE pages may keep their contents */
    t->committed = f->committed;
    f->addr += size;
    f->size = trail;
    rtree_write(f->addr, rt_make(f, 0, 0)); /* its last page's entry names f already */
    if (move) {
      eset_insert(es, f);
    } else {
      __atomic_store_n(&es->npages, es->npages - size / os_page, __ATOMIC_RELAXED);
      es->bpages[b] -= size / os_page;
    }
    f = t;
  } else {
    eset_remove(es, f);
    /* Lead and trail keep f's age in the purge order. */
    if (l) extent_carve(es, f, l, f->addr, lead, state);
    if (t) extent_carve(es, f, t, body + size, trail, state);
    if (has_lru(state)) lru_remove(es, f);
    f->addr = body;
    f->size = size;
    if (state == ES_MUZZY) f->zeroed = 0; /* MADV_FREE pages may keep their contents */
  }
  f->state = ES_ACTIVE;
  sassert(f->addr % align == 0);
  if (0) {
  fresh:
    if ((f = extent_alloc_fresh(a, h, size, align)) == NULL) return NULL;
  }
  if (h != NULL && !f->committed) {
    /* Retained pages the hook left uncommitted: commit them outside the lock (f is in no
     * set and ES_ACTIVE, so no neighbour merges with it meanwhile). */
    mtx_unlock(&a->elock);
    bool fail = ehooks_commit(a, h, (void *)f->addr, f->size);
    mtx_lock(&a->elock);
    if (fail) {
      extent_insert_free(a, f, ES_RETAINED);
      return NULL;
    }
    f->committed = 1;
    f->zeroed = 1; /* commit gives zeroed pages */
  }
  a->nactive += size / os_page;
  note_active_peak(a);
  if (a->user) active_link(a, f);
  if (state == ES_RETAINED && h == NULL) {
    __atomic_fetch_add(&extent_resident_pages, size / os_page, __ATOMIC_RELAXED);
    limit_check(a);
  }
  return f;
}

void extent_dalloc(arena_t *a, edata_t *e) {
  if (a->user) active_unlink(a, e);
  a->nactive -= e->size / os_page;
  e->zeroed = 0;
  extent_insert_free(a, e, ES_DIRTY);
  arena_note_dirty(a, e->dirty_ns);
}

bool extent_grow_inplace(arena_t *a, edata_t *e, size_t new_size) {
  extent_hooks_t *h = arena_hooks(a);
  size_t need = new_size - e->size;
  uint64_t ent = rtree_read_near(e->addr + e->size);
  edata_t *n = mergeable(a, ent, ES_DIRTY);
  if (n == NULL) n = mergeable(a, ent, ES_MUZZY);
  /* A hooked arena's retained pages may be decommitted by its hooks: copy instead. */
  if (n == NULL && h == NULL) n = mergeable(a, ent, ES_RETAINED);
  if (n == NULL || n->addr != e->addr + e->size || n->size < need) return true;
  if (h != NULL) {
    /* jemalloc's order: the free neighbour split to what is needed, then merged into e,
     * both under the elock; a hook that refuses either keeps the block where it is (the
     * caller copies). Uncommitted pages are not taken: committing them would call a
     * hook under the elock. */
    if (!n->committed || !e->committed) return true;
    if (n->size > need && ehooks_split(a, h, (void *)n->addr, n->size, need, true)) return true;
    if (ehooks_merge(a, h, (void *)e->addr, e->size, (void *)n->addr, need, true)) return true;
  }
  unsigned state = n->state;
  if (state == ES_RETAINED && os_commit(need)) return true;
  eset_t *es = eset_of(a, state);
  eset_remove(es, n);
  rtree_write(last_gran(e), 0);
  rtree_write(n->addr, 0);
  if (n->size > need) {
    n->addr += need;
    n->size -= need;
    extent_register(n, 0, false);
    eset_insert(es, n); /* same place in the purge order */
  } else {
    if (has_lru(state)) lru_remove(es, n);
    edata_put(a, n);
  }
  e->size = new_size;
  a->nactive += need / os_page;
  note_active_peak(a);
  if (state == ES_MUZZY) e->zeroed = 0;
  if (state == ES_RETAINED) {
    __atomic_fetch_add(&extent_resident_pages, need / os_page, __ATOMIC_RELAXED);
    limit_check(a);
  }
  return false;
}

bool extent_shrink_inplace(arena_t *a, edata_t *e, size_t new_size) {
  extent_hooks_t *h = arena_hooks(a);
  /* A split hook that refuses keeps the block as it was: the shrink fails (jemalloc's
   * xallocx then answers the old size). */
  if (h != NULL && ehooks_split(a, h, (void *)e->addr, e->size, new_size, e->committed)) return true;
  edata_t *t = edata_get(a);
  if (t == NULL) return true; /* out of metadata: the block stays whole */
  t->committed = e->committed;
  t->addr = e->addr + new_size;
  t->size = e->size - new_size;
  e->size = new_size;
  a->nactive -= t->size / os_page;
  extent_insert_free(a, t, ES_DIRTY);
  arena_note_dirty(a, t->dirty_ns);
  return false;
}

size_t extent_purge(arena_t *a, unsigned from, size_t target_pages, bool lazy) {
  extent_hooks_t *h = arena_hooks(a);
  /* A hooked arena's dirty pages go through its hooks (never muzzy: jemalloc's
   * purge_lazy is the hooks' last resort, not a stage). */
  if (h != NULL) return from == ES_DIRTY ? extent_purge_hooked(a, h, target_pages) : 0;
  eset_t *es = eset_of(a, from);
  lazy = lazy && from == ES_DIRTY;
  size_t purged = 0;
  if (es->npages > target_pages && es->lru_head != NULL) a->npurge_passes++;
  while (es->npages > target_pages && es->lru_head != NULL) {
    /* Take a batch out of the set (oldest first), purge it without the lock. */
    edata_t *batch = NULL;
    size_t n = 0;
    while (es->npages > target_pages && es->lru_head != NULL && n < 64) {
      edata_t *e = es->lru_head;
      eset_remove(es, e);
      lru_remove(es, e);
      e->state = ES_PURGING;
      /* Forced purges give their commitment back before the madvise: an allocation
       * that meets the commit budget (commit_or_purge) while this batch is in flight
       * on another thread (a background thread) must not fail for pages on their way
       * out. */
      if (!lazy) os_decommit(e->size);
      e->lru_next = batch;
      batch = e;
      n++;
    }
    a->nmadvise += n;
    a->npurging++;
    mtx_unlock(&a->elock);
    for (edata_t *e = batch; e; e = e->lru_next) {
      if (lazy) {
        os_purge_lazy((void *)e->addr, e->size);
      } else if (opt.retain) {
        os_purge((void *)e->addr, e->size);
      } else {
        os_unmap((void *)e->addr, e->size);
      }
    }
    mtx_lock(&a->elock);
    a->npurging--;
    while (batch) {
      edata_t *e = batch;
      batch = e->lru_next;
      purged += e->size / os_page;
      rtree_write(e->addr, 0);
      rtree_write(last_gran(e), 0);
      if (lazy) { /* still counted resident: the kernel takes MADV_FREE pages only when it must */
        e->zeroed = 0;
        extent_insert_free(a, e, ES_MUZZY);
        continue;
      }
      a->npurged += e->size / os_page;
      __atomic_fetch_sub(&extent_resident_pages, e->size / os_page, __ATOMIC_RELAXED);
      if (opt.retain) {
        e->zeroed = 1;
        extent_insert_free(a, e, ES_RETAINED);
      } else {
        a->mapped -= e->size;
        edata_put(a, e);
      }
    }
  }
  if (purged) ev_note_resident(mem_resident()); /* a level crossed downward (events.c) */
  if (PROBE_ON(strata, purge) && purged) PROBE3(strata, purge, a->ind, (from == ES_DIRTY ? "dirty" : "muzzy"), (uint64_t)purged * os_page);
  return purged;
}

/* Destroy every free extent of a hooked or plain arena being destroyed: the destroy hook
 * (or munmap) gets each, outside the elock. elock held on entry and exit. */
void extent_destroy_all(arena_t *a) {
  extent_hooks_t *h = arena_hooks(a);
  for (;;) {
    edata_t *batch = NULL;
    for (unsigned n = 0; n < 64; n++) {
      eset_t *es = a->retained.npages ? &a->retained
                   : a->dirty.npages  ? &a->dirty
                   : a->muzzy.npages  ? &a->muzzy
                                      : NULL;
      if (es == NULL) break;
      edata_t *e = eset_fit(es, 1);
      eset_remove(es, e);
      if (es != &a->retained) {
        lru_remove(es, e);
        if (h == NULL) {
          __atomic_fetch_sub(&extent_resident_pages, e->size / os_page, __ATOMIC_RELAXED);
          os_decommit(e->size);
        }
      }
      rtree_write(e->addr, 0);
      rtree_write(last_gran(e), 0);
      e->state = ES_PURGING;
      a->mapped -= e->size;
      e->lru_next = batch;
      batch = e;
    }
    if (batch == NULL) return;
    mtx_unlock(&a->elock);
    for (edata_t *e = batch; e; e = e->lru_next) {
      if (h == NULL) {
        os_unmap((void *)e->addr, e->size);
      } else {
        ehooks_destroy(a, h, (void *)e->addr, e->size, e->committed);
      }
    }
    mtx_lock(&a->elock);
    while (batch) {
      edata_t *e = batch;
      batch = e->lru_next;
      edata_put(a, e);
    }
  }
}

/* What purging a dirty extent through hooks did, in jemalloc's order of preference
 * (extent_dalloc_wrapper): gave the pages back, or kept the address space decommitted,
 * purged (zero), purged lazily or as it was. No elock held. */
enum { REL_UNMAPPED, REL_DECOMMITTED, REL_ZEROED, REL_KEPT };
static unsigned extent_release_hooked(arena_t *a, extent_hooks_t *h, edata_t *e) {
  void *p = (void *)e->addr;
  if (!ehooks_dalloc(a, h, p, e->size, e->committed)) return REL_UNMAPPED;
  if (!e->committed || !ehooks_decommit(a, h, p, e->size)) return REL_DECOMMITTED;
  if (!ehooks_purge_forced(a, h, p, e->size)) return REL_ZEROED;
  (void)ehooks_purge_lazy(a, h, p, e->size); /* contents may survive either way */
  return REL_KEPT;
}

/* extent_purge for an arena with extent hooks: the same batches, oldest first, each
 * extent released through the hooks outside the elock. Kept apart from the OS path so
 * that each can change (muzzy pages) without the other. */
size_t extent_purge_hooked(arena_t *a, extent_hooks_t *h, size_t target_pages) {
  size_t purged = 0;
  while (a->dirty.npages > target_pages && a->dirty.lru_head != NULL) {
    edata_t *batch = NULL;
    size_t n = 0;
    while (a->dirty.npages > target_pages && a->dirty.lru_head != NULL && n < 64) {
      edata_t *e = a->dirty.lru_head;
      eset_remove(&a->dirty, e);
      lru_remove(&a->dirty, e);
      e->state = ES_PURGING;
      e->lru_next = batch;
      batch = e;
      n++;
    }
    a->npurging++;
    mtx_unlock(&a->elock);
    for (edata_t *e = batch; e; e = e->lru_next) e->bucket = (uint8_t)extent_release_hooked(a, h, e);
    mtx_lock(&a->elock);
    a->npurging--;
    while (batch) {
      edata_t *e = batch;
      batch = e->lru_next;
      purged += e->size / os_page;
      a->npurged += e->size / os_page;
      rtree_write(e->addr, 0);
      rtree_write(last_gran(e), 0);
      if (e->bucket == REL_UNMAPPED) {
        a->mapped -= e->size;
        edata_put(a, e);
        continue;
      }
      e->zeroed = e->bucket != REL_KEPT;
      e->committed = e->bucket != REL_DECOMMITTED;
      extent_insert_free(a, e, ES_RETAINED);
    }
  }
  if (PROBE_ON(strata, purge) && purged) PROBE3(strata, purge, a->ind, "dirty", (uint64_t)purged * os_page);
  return purged;
}

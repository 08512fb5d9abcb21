/*
 * extent.c - page extents of one arena: spans of whole pages that split on allocation
 * and coalesce with free neighbours on release. Free extents are kept by state (dirty:
 * freed and resident; retained: address space without memory) in buckets of page
 * count (4 per doubling), each a pairing heap by address, so the fit is near-best by
 * size and lowest address first. Neighbours are found through the rtree. Everything
 * here runs under the arena's elock.
 */
#include <string.h>

#include "internal.h"

_Static_assert(sizeof(edata_t) % 16 == 0, "edata must keep the rtree's low pointer bits free");

/* Mappings grow exponentially from 2 MiB (one huge page) up to 64 MiB, like jemalloc's
 * retained growth: few mmaps and VMAs, and untouched address space costs no RSS. */
#define GROW_MIN ((size_t)2 << 20)
#define GROW_MAX ((size_t)64 << 20)
#define EDATA_BATCH 64

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
/* arena_ind is written once, when the edata is created, and never again: other arenas
 * read it through stale rtree entries without a lock (see mergeable), so recycling
 * must not even zero it for an instant. */
static edata_t *edata_get(arena_t *a) {
  edata_t *e = a->edata_free;
  if (e == NULL) {
    edata_t *block = meta_alloc(EDATA_BATCH * sizeof(edata_t));
    if (block == NULL) return NULL;
    for (int i = EDATA_BATCH - 1; i >= 0; i--) block[i].arena_ind = (uint16_t)a->ind;
    for (int i = EDATA_BATCH - 1; i >= 1; i--) {
      block[i].lru_next = a->edata_free;
      a->edata_free = &block[i];
    }
    e = &block[0];
  } else {
    a->edata_free = e->lru_next;
  }
  sassert(e->arena_ind == a->ind);
  const size_t at = offsetof(edata_t, arena_ind), after = at + sizeof(e->arena_ind);
  memset(e, 0, at);
  memset((char *)e + after, 0, sizeof(*e) - after);
  return e;
}

static void edata_put(arena_t *a, edata_t *e) {
  e->state = ES_ACTIVE; /* no longer a free extent: stale rtree reads must not merge it */
  e->lru_next = a->edata_free;
  a->edata_free = e;
}

/* ---------------------------------------------------------------- rtree registration */
static inline uintptr_t last_gran(const edata_t *e) { return e->addr + e->size - GRAN; }

void extent_register(edata_t *e, unsigned szind, bool slab) {
  if (slab) {
    uint64_t v = rt_make(e, szind, 1);
    for (uintptr_t g = e->addr; g < e->addr + e->size; g += GRAN) rtree_write(g, v);
    return;
  }
  (void)szind; /* large and free extents: class 0, see the rtree entry layout */
  rtree_write(last_gran(e), rt_make(e, 0, 0));
  rtree_write(e->addr, rt_make(e, 0, 0));
}

void extent_deregister_interior(edata_t *e) {
  for (uintptr_t g = e->addr + GRAN; g < last_gran(e); g += GRAN) rtree_write(g, 0);
}

/* ---------------------------------------------------------------- extent sets */
static void eset_insert(eset_t *es, edata_t *e) {
  sassert(e->size > 0 && e->size % os_page == 0 && e->addr % os_page == 0);
  sassert(e->state == ES_DIRTY || e->state == ES_RETAINED);
  size_t np = e->size / os_page;
  unsigned b = psz_floor(np);
  e->bucket = (uint8_t)b;
  ph_insert(&es->heaps[b], &e->ph);
  es->nonempty[b / 64] |= (uint64_t)1 << (b % 64);
  es->npages += np;
}

static void eset_remove(eset_t *es, edata_t *e) {
  unsigned b = e->bucket;
  sassert(es->heaps[b] != NULL && es->npages >= e->size / os_page);
  ph_remove(&es->heaps[b], &e->ph);
  if (es->heaps[b] == NULL) es->nonempty[b / 64] &= ~((uint64_t)1 << (b % 64));
  es->npages -= e->size / os_page;
}

static edata_t *eset_fit(eset_t *es, size_t np) {
  unsigned f = psz_floor(np), c = psz_ceil(np);
  /* The lowest extent of the floor bucket may fit exactly: cheap to check. */
  if (f != c && es->heaps[f] && ph_edata(es->heaps[f])->size / os_page >= np) return ph_edata(es->heaps[f]);
  for (unsigned w = c / 64; w < (PSZ_N + 63) / 64; w++) {
    uint64_t m = es->nonempty[w];
    if (w == c / 64) m &= ~(uint64_t)0 << (c % 64);
    if (m) return ph_edata(es->heaps[w * 64 + (unsigned)__builtin_ctzll(m)]);
  }
  return NULL;
}

static void lru_append(arena_t *a, edata_t *e) {
  e->lru_next = NULL;
  e->lru_prev = a->lru_tail;
  if (a->lru_tail) {
    a->lru_tail->lru_next = e;
  } else {
    a->lru_head = e;
  }
  a->lru_tail = e;
}

static void lru_insert_after(arena_t *a, edata_t *pos, edata_t *e) {
  e->lru_prev = pos;
  e->lru_next = pos->lru_next;
  if (pos->lru_next) {
    pos->lru_next->lru_prev = e;
  } else {
    a->lru_tail = e;
  }
  pos->lru_next = e;
}

static void lru_remove(arena_t *a, edata_t *e) {
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

static eset_t *eset_of(arena_t *a, unsigned state) { return state == ES_DIRTY ? &a->dirty : &a->retained; }

/* A neighbour can merge when it is a free extent of this arena in the same state. The
 * arena check comes first: edata never change arena, so reading arena_ind of another
 * arena's edata is safe, and its other fields are then never read. */
static edata_t *mergeable(arena_t *a, uint64_t ent, unsigned state) {
  edata_t *n = rt_edata(ent);
  if (n == NULL || (ent & RT_SLAB) || n->arena_ind != a->ind || n->state != state) return NULL;
  return n;
}

/* Coalesce e (not in any set) with free neighbours, register it and insert it. */
static void extent_insert_free(arena_t *a, edata_t *e, unsigned state) {
  eset_t *es = eset_of(a, state);
  sassert(e->arena_ind == a->ind && e->size % os_page == 0);
  e->state = (uint8_t)state;
  e->slab = 0;
  if (e->addr >= GRAN) {
    edata_t *n = mergeable(a, rtree_read(e->addr - GRAN), state);
    if (n && n->addr + n->size == e->addr) {
      eset_remove(es, n);
      if (state == ES_DIRTY) lru_remove(a, n);
      rtree_write(last_gran(n), 0);
      rtree_write(e->addr, 0);
      e->addr = n->addr;
      e->size += n->size;
      e->zeroed = e->zeroed && n->zeroed;
      edata_put(a, n);
    }
  }
  edata_t *n = mergeable(a, rtree_read(e->addr + e->size), state);
  if (n && n->addr == e->addr + e->size) {
    eset_remove(es, n);
    if (state == ES_DIRTY) lru_remove(a, n);
    rtree_write(last_gran(e), 0);
    rtree_write(n->addr, 0);
    e->size += n->size;
    e->zeroed = e->zeroed && n->zeroed;
    edata_put(a, n);
  }
  extent_register(e, 0, false);
  eset_insert(es, e);
  if (state == ES_DIRTY) {
    e->dirty_ns = decay_now();
    lru_append(a, e);
  }
}

/* Map more address space into the retained set. */
static bool extent_grow(arena_t *a, size_t need) {
  size_t size = (need + os_page - 1) & ~(os_page - 1);
  if (size < need) return true;
  if (!a->huge) {
    size = (size + GROW_MIN - 1) & ~(GROW_MIN - 1);
    if (size < a->grow_next) size = a->grow_next;
    if (a->grow_next < GROW_MAX) a->grow_next *= 2;
  }
  edata_t *e = edata_get(a);
  if (e == NULL) return true;
  void *p = os_map(size, size >= GROW_MIN ? GROW_MIN : os_page);
  if (p == NULL) {
    edata_put(a, e);
    return true;
  }
  if (rtree_ensure((uintptr_t)p, size)) {
    os_unmap(p, size);
    edata_put(a, e);
    return true;
  }
  a->mapped += size;
  e->addr = (uintptr_t)p;
  e->size = size;
  e->zeroed = 1;
  extent_insert_free(a, e, ES_RETAINED);
  return false;
}

/* The oversize arena, when no dirty extent is big enough: the most recently freed one
 * is moved and grown to `size` with mremap, which keeps its resident pages, so only the
 * growth faults in (a new mapping would fault every page while the dirty one waited for
 * decay). NULL when there is none or the kernel refuses (a range over two mappings). */
static edata_t *extent_remap_dirty(arena_t *a, size_t size) {
  edata_t *d = a->lru_tail;
  if (d == NULL || d->size >= size) return NULL;
  void *p = os_remap((void *)d->addr, d->size, size);
  if (p == NULL) return NULL;
  eset_remove(&a->dirty, d);
  lru_remove(a, d);
  rtree_write(d->addr, 0);
  rtree_write(last_gran(d), 0);
  a->mapped += size - d->size;
  d->addr = (uintptr_t)p;
  d->size = size;
  d->zeroed = 0;
  if (rtree_ensure((uintptr_t)p, size)) {
    os_unmap(p, size);
    a->mapped -= size;
    edata_put(a, d);
    return NULL;
  }
  d->state = ES_ACTIVE;
  a->nactive += size / os_page;
  return d;
}

edata_t *extent_alloc(arena_t *a, size_t size, size_t align) {
  if (align < os_page) align = os_page;
  size_t search = size + (align - os_page);
  if (search < size) return NULL;
  size_t np = search / os_page;
  unsigned state = ES_DIRTY;
  edata_t *f = eset_fit(&a->dirty, np);
  if (f == NULL && a->huge && align == os_page && (f = extent_remap_dirty(a, size)) != NULL) return f;
  if (f == NULL) {
    state = ES_RETAINED;
    f = eset_fit(&a->retained, np);
    if (f == NULL) {
      if (extent_grow(a, search)) return NULL;
      f = eset_fit(&a->retained, np);
      if (f == NULL) return NULL;
    }
  }
  /* Take the edata for the lead and trail first, so failure leaves f untouched. */
  uintptr_t body = (f->addr + align - 1) & ~(uintptr_t)(align - 1);
  size_t lead = body - f->addr, trail = f->size - lead - size;
  edata_t *l = NULL, *t = NULL;
  if (lead && (l = edata_get(a)) == NULL) return NULL;
  if (trail && (t = edata_get(a)) == NULL) {
    if (l) edata_put(a, l);
    return NULL;
  }
  eset_t *es = eset_of(a, state);
  eset_remove(es, f);
  /* Lead and trail keep f's age in the purge order. */
  if (l) {
    l->addr = f->addr;
    l->size = lead;
    l->state = (uint8_t)state;
    l->zeroed = f->zeroed;
    l->dirty_ns = f->dirty_ns;
    extent_register(l, 0, false);
    eset_insert(es, l);
    if (state == ES_DIRTY) lru_insert_after(a, f, l);
  }
  if (t) {
    t->addr = body + size;
    t->size = trail;
    t->state = (uint8_t)state;
    t->zeroed = f->zeroed;
    t->dirty_ns = f->dirty_ns;
    extent_register(t, 0, false);
    eset_insert(es, t);
    if (state == ES_DIRTY) lru_insert_after(a, f, t);
  }
  if (state == ES_DIRTY) lru_remove(a, f);
  f->addr = body;
  f->size = size;
  f->state = ES_ACTIVE;
  sassert(f->addr % align == 0);
  a->nactive += size / os_page;
  return f;
}

void extent_dalloc(arena_t *a, edata_t *e) {
  a->nactive -= e->size / os_page;
  e->zeroed = 0;
  extent_insert_free(a, e, ES_DIRTY);
  arena_note_dirty(a);
}

bool extent_grow_inplace(arena_t *a, edata_t *e, size_t new_size) {
  size_t need = new_size - e->size;
  uint64_t ent = rtree_read(e->addr + e->size);
  edata_t *n = mergeable(a, ent, ES_DIRTY);
  if (n == NULL) n = mergeable(a, ent, ES_RETAINED);
  if (n == NULL || n->addr != e->addr + e->size || n->size < need) return true;
  unsigned state = n->state;
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
    if (state == ES_DIRTY) lru_remove(a, n);
    edata_put(a, n);
  }
  e->size = new_size;
  a->nactive += need / os_page;
  return false;
}

void extent_shrink_inplace(arena_t *a, edata_t *e, size_t new_size) {
  edata_t *t = edata_get(a);
  if (t == NULL) return; /* keep the extent whole: correct, only less compact */
  t->addr = e->addr + new_size;
  t->size = e->size - new_size;
  e->size = new_size;
  a->nactive -= t->size / os_page;
  extent_insert_free(a, t, ES_DIRTY);
  arena_note_dirty(a);
}

size_t extent_purge(arena_t *a, size_t target_pages) {
  size_t purged = 0;
  while (a->dirty.npages > target_pages && a->lru_head != NULL) {
    /* Take a batch out of the dirty set (oldest first), purge it without the lock. */
    edata_t *batch = NULL;
    size_t n = 0;
    while (a->dirty.npages > target_pages && a->lru_head != NULL && n < 64) {
      edata_t *e = a->lru_head;
      eset_remove(&a->dirty, e);
      lru_remove(a, e);
      e->state = ES_PURGING;
      e->lru_next = batch;
      batch = e;
      n++;
    }
    mtx_unlock(&a->elock);
    for (edata_t *e = batch; e; e = e->lru_next) {
      if (opt.retain) {
        os_purge((void *)e->addr, e->size);
      } else {
        os_unmap((void *)e->addr, e->size);
      }
    }
    mtx_lock(&a->elock);
    while (batch) {
      edata_t *e = batch;
      batch = e->lru_next;
      purged += e->size / os_page;
      a->npurged += e->size / os_page;
      rtree_write(e->addr, 0);
      rtree_write(last_gran(e), 0);
      if (opt.retain) {
        e->zeroed = 1;
        extent_insert_free(a, e, ES_RETAINED);
      } else {
        a->mapped -= e->size;
        edata_put(a, e);
      }
    }
  }
  return purged;
}

/* Extents: split, coalesce with free neighbours, in-place grow/shrink, purge to retained,
 * and the rtree entries that make it work. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "unit.h"

static arena_t *a;

static edata_t *entry_edata(uintptr_t p) { return rt_edata(rtree_read(p)); }

static void test_rtree_unknown_addresses_read_zero(void) {
  CHECK_EQ(rtree_read(0), 0);
  CHECK_EQ(rtree_read((uintptr_t)1 << 47), 0);
  CHECK_EQ(rtree_read(~(uintptr_t)0), 0);
  int local;
  CHECK_EQ(rtree_read((uintptr_t)&local), 0);
}

static void test_alloc_registers_first_and_last(void) {
  mtx_lock(&a->elock);
  edata_t *e = extent_alloc(a, 8 * os_page, os_page);
  CHECK(e != NULL);
  e->szind = (uint16_t)sz_size2index(8 * os_page);
  extent_register(e, e->szind, false);
  CHECK(entry_edata(e->addr) == e);
  CHECK(entry_edata(e->addr + e->size - GRAN) == e);
  /* The first entry carries the class it is given (arena.c gives one only to blocks free()
   * may cache), the last one none: an interior or end pointer reads class 0. */
  CHECK_EQ(rt_szind(rtree_read(e->addr)), e->szind);
  CHECK_EQ(rt_szind(rtree_read(e->addr + e->size - GRAN)), 0);
  CHECK_EQ(e->state, ES_ACTIVE);
  uintptr_t at = e->addr;
  extent_dalloc(a, e);
  CHECK_EQ(rt_szind(rtree_read(at)), 0); /* free (or merged away): no class */
  mtx_unlock(&a->elock);
}

/* free()'s fast path reads an entry's class field as the fast word's low half
 * (rtree_field_read): the field must come back alone, whatever the class and the check
 * word beside it. */
static void test_class_field_reads_alone_as_low_half(void) {
  mtx_lock(&a->elock);
  edata_t *e = extent_alloc(a, 2 * os_page, os_page);
  CHECK(e != NULL);
  const szind_t inds[] = {1, SZ_NSMALL, TCACHE_NBINS_MAX - 1};
  for (size_t k = 0; k < sizeof(inds) / sizeof(inds[0]); k++) {
    e->szind = (uint16_t)inds[k];
    extent_register(e, e->szind, false);
    for (uint32_t chk = 0; chk < 2; chk++) {
      rtree_write_chk(e->addr, 1, chk ? 0xffffffffu : 0x12345678u);
      const uint64_t *s = rtree_slot(e->addr);
      CHECK(s != NULL);
      CHECK_EQ(rtree_field_read(s, 0), inds[k] * TBIN_SIZE);
      CHECK_EQ(rtree_field_read(s, 0), rt_field(rtree_read(e->addr)));
      CHECK_EQ(rtree_chk(s, 0), chk ? 0xffffffffu : 0x12345678u);
    }
  }
  e->szind = (uint16_t)sz_size2index(2 * os_page);
  extent_register(e, e->szind, false);
  extent_dalloc(a, e);
  mtx_unlock(&a->elock);
}

static void test_neighbours_coalesce_when_freed(void) {
  mtx_lock(&a->elock);
  /* Start from nothing dirty so the three pieces come out of one retained span. */
  extent_purge(a, ES_DIRTY, 0, false);
  edata_t *x = extent_alloc(a, 4 * os_page, os_page);
  edata_t *y = extent_alloc(a, 4 * os_page, os_page);
  edata_t *z = extent_alloc(a, 4 * os_page, os_page);
  CHECK(x && y && z);
  CHECK_EQ(y->addr, x->addr + x->size); /* lowest address first: consecutive */
  CHECK_EQ(z->addr, y->addr + y->size);
  uintptr_t base = x->addr;
  size_t dirty0 = a->dirty.npages;
  extent_dalloc(a, x);
  extent_dalloc(a, z);
  CHECK_EQ(a->dirty.npages, dirty0 + 8);
  extent_dalloc(a, y); /* bridges x and z */
  edata_t *m = entry_edata(base);
  CHECK(m != NULL && m->state == ES_DIRTY);
  CHECK(m->addr == base && m->size >= 12 * os_page);
  CHECK(entry_edata(base + 4 * os_page) == NULL); /* former boundaries are interior now */
  /* The merged extent is found again (dirty first, lowest address). */
  edata_t *again = extent_alloc(a, 12 * os_page, os_page);
  CHECK(again && again->addr == base);
  extent_dalloc(a, again);
  mtx_unlock(&a->elock);
}

static void test_aligned_alloc_splits_lead_and_trail(void) {
  mtx_lock(&a->elock);
  size_t align = (size_t)1 << 20;
  edata_t *e = extent_alloc(a, 3 * os_page, align);
  CHECK(e && e->addr % align == 0 && e->size == 3 * os_page);
  extent_dalloc(a, e);
  mtx_unlock(&a->elock);
}

static void test_grow_and_shrink_in_place(void) {
  mtx_lock(&a->elock);
  extent_purge(a, ES_DIRTY, 0, false);
  edata_t *e = extent_alloc(a, 4 * os_page, os_page);
  CHECK(e != NULL);
  uintptr_t addr = e->addr;
  CHECK(!extent_grow_inplace(a, e, 16 * os_page)); /* the retained span continues after it */
  CHECK(e->addr == addr && e->size == 16 * os_page);
  extent_register(e, 0, false);
  extent_shrink_inplace(a, e, 2 * os_page);
  extent_register(e, 0, false);
  CHECK_EQ(e->size, 2 * os_page);
  edata_t *t = entry_edata(addr + 2 * os_page);
  CHECK(t && t->state == ES_DIRTY && t->addr == addr + 2 * os_page);
  extent_dalloc(a, e);
  mtx_unlock(&a->elock);
}

static void test_purge_moves_dirty_to_retained(void) {
  mtx_lock(&a->elock);
  edata_t *e = extent_alloc(a, 32 * os_page, os_page);
  CHECK(e != NULL);
  memset((void *)e->addr, 0xab, e->size);
  extent_dalloc(a, e);
  CHECK(a->dirty.npages >= 32);
  size_t retained0 = a->retained.npages;
  size_t purged = extent_purge(a, ES_DIRTY, 0, false);
  CHECK(purged >= 32);
  CHECK_EQ(a->dirty.npages, 0);
  CHECK(a->retained.npages >= retained0 + 32);
  /* Purged pages read back as zero, and are known to be. */
  edata_t *f = extent_alloc(a, 32 * os_page, os_page);
  CHECK(f && f->zeroed);
  CHECK(((unsigned char *)f->addr)[100] == 0);
  extent_dalloc(a, f);
  mtx_unlock(&a->elock);
}

static void test_pairing_heap_orders_by_address(void) {
  edata_t nodes[64];
  ph_node_t *root = NULL;
  memset(nodes, 0, sizeof(nodes));
  for (int i = 0; i < 64; i++) {
    nodes[i].addr = (uintptr_t)((i * 37) % 64 + 1) * 4096;
    ph_insert(&root, &nodes[i].ph);
  }
  ph_remove(&root, &nodes[5].ph); /* an arbitrary node */
  uintptr_t last = 0;
  int n = 0;
  while (root) {
    edata_t *e = ph_edata(root);
    CHECK(e->addr > last);
    last = e->addr;
    ph_remove(&root, root);
    n++;
  }
  CHECK_EQ(n, 63);
}

/* A huge calloc after the arena reused freed, written pages: every page reads zero. */
static void check_calloc_zero(size_t size) {
  char *z = strata_calloc(1, size);
  CHECK(z != NULL);
  size_t nonzero = 0;
  for (size_t i = 0; i < size; i += 4096) nonzero += z[i] != 0;
  CHECK_EQ(nonzero, 0);
  strata_free(z);
}

/* The oversize arena grows the most recently freed block with mremap when none is big
 * enough: the mapping grows by the difference only, the old pages (and their contents)
 * come along, and calloc still gets zeros. Fails on the old design, which mapped the
 * whole new block (mapped grew by 12 MiB). */
static void test_huge_reuse_grows_freed_block(void) {
  arena_t *h = arena_get(narenas);
  size_t mib = (size_t)1 << 20;
  char *p = strata_malloc(10 * mib);
  CHECK(p != NULL && edata_arena_ind(entry_edata((uintptr_t)p)) == narenas);
  memset(p, 0x5c, 10 * mib);
  strata_free(p);
  mtx_lock(&h->elock);
  size_t mapped0 = h->mapped;
  mtx_unlock(&h->elock);
  char *q = strata_malloc(12 * mib);
  CHECK(q != NULL);
  mtx_lock(&h->elock);
  size_t grown = h->mapped - mapped0;
  mtx_unlock(&h->elock);
  CHECK_EQ(grown, 2 * mib);
  CHECK(q[0] == 0x5c && q[10 * mib - 1] == 0x5c); /* the freed block's pages, moved */
  strata_free(q);
  check_calloc_zero(14 * mib);
}

/* When no freed block is big enough, the oversize arena builds the request out of
 * several freed blocks' pages (mremap, no fault): the largest grows, the next moves into
 * the growth (or both move into a new mapping when they had coalesced across two), and
 * only the rest is new memory. Fails on the previous design, which grew only the most
 * recently freed block (mapped +12 MiB and the other block's pages left dirty). */
static void test_huge_request_gathers_freed_blocks(void) {
  arena_t *h = arena_get(narenas);
  size_t mib = (size_t)1 << 20;
  arena_purge(h); /* earlier tests' freed blocks out of the way */
  char *p1 = strata_malloc(10 * mib), *p2 = strata_malloc(8 * mib);
  CHECK(p1 != NULL && p2 != NULL);
  memset(p1, 0x11, 10 * mib);
  memset(p2, 0x22, 8 * mib);
  strata_free(p1);
  strata_free(p2);
  mtx_lock(&h->elock);
  size_t mapped0 = h->mapped, dirty0 = h->dirty.npages;
  mtx_unlock(&h->elock);
  CHECK_EQ(dirty0, 18 * mib / os_page);
  char *q = strata_malloc(20 * mib); /* no single freed block fits */
  CHECK(q != NULL);
  mtx_lock(&h->elock);
  size_t grown = h->mapped - mapped0, dirty1 = h->dirty.npages;
  mtx_unlock(&h->elock);
  CHECK_EQ(grown, 2 * mib);
  CHECK_EQ(dirty1, 0);
  /* Both blocks' pages came along (in address order when the two had coalesced), and
   * the new 2 MiB at the end are zero. */
  size_t n11 = 0, n22 = 0, n0 = 0;
  for (size_t i = 0; i < 20 * mib; i += 4096) {
    n11 += q[i] == 0x11 && q[i + 4095] == 0x11;
    n22 += q[i] == 0x22 && q[i + 4095] == 0x22;
    n0 += i >= 18 * mib && q[i] == 0 && q[i + 4095] == 0;
  }
  CHECK_EQ(n11, 10 * mib / 4096);
  CHECK_EQ(n22, 8 * mib / 4096);
  CHECK_EQ(n0, 2 * mib / 4096);
  strata_free(q);
  check_calloc_zero(24 * mib);
}

/* Cross-arena reuse (extent_steal): an ordinary arena with no dirty or muzzy pages of its
 * own takes the pages it needs from another ordinary arena's dirty set before it touches
 * retained memory; the pages change owner whole (edata id, page map, mapped bytes), and
 * the rest of the other arena's extent stays that arena's. */
static void purge_arena(arena_t *x) {
  mtx_lock(&x->elock);
  extent_purge(x, ES_DIRTY, 0, false);
  extent_purge(x, ES_MUZZY, 0, false);
  mtx_unlock(&x->elock);
}

static void purge_ordinary(void) {
  for (unsigned i = 0; i < narenas; i++)
    if (arenas[i] != NULL) purge_arena(arenas[i]);
}

/* A freed 16-page extent in arena x (dirty, alone in the ordinary arenas' sets). */
static uintptr_t dirty_extent_in(arena_t *x) {
  purge_ordinary();
  mtx_lock(&x->elock);
  edata_t *e = extent_alloc(x, 16 * os_page, os_page);
  CHECK(e != NULL);
  uintptr_t addr = e ? e->addr : 0;
  if (e) extent_dalloc(x, e);
  CHECK_EQ(x->dirty.npages, 16);
  mtx_unlock(&x->elock);
  return addr;
}

static void test_arena_takes_another_arenas_dirty_pages(void) {
  arena_t *x = arena_get(1), *y = arena_get(2);
  CHECK(x != NULL && y != NULL);
  uintptr_t addr = dirty_extent_in(x);
  size_t xmapped = x->mapped, ymapped = y->mapped;
  uint64_t steals = extent_nsteals;
  mtx_lock(&y->elock);
  edata_t *f = extent_alloc(y, 4 * os_page, os_page);
  CHECK(f != NULL);
  CHECK_EQ(f->addr, addr); /* x's pages, the lowest of its extent: no fresh page */
  CHECK_EQ(edata_arena_ind(f), y->ind);
  CHECK_EQ(y->dirty.npages, 0);
  CHECK_EQ(y->mapped, ymapped + 4 * os_page);
  mtx_unlock(&y->elock);
  CHECK_EQ(extent_nsteals, steals + 1);
  mtx_lock(&x->elock);
  CHECK_EQ(x->dirty.npages, 12); /* the rest stays x's, registered at its new start */
  CHECK_EQ(x->mapped, xmapped - 4 * os_page);
  edata_t *rest = entry_edata(addr + 4 * os_page);
  CHECK(rest != NULL && rest->state == ES_DIRTY && edata_arena_ind(rest) == x->ind);
  CHECK(rest != NULL && rest->addr == addr + 4 * os_page && rest->size == 12 * os_page);
  mtx_unlock(&x->elock);
  /* Freed in y, the pages stay y's: the two arenas' neighbouring extents never merge. */
  mtx_lock(&y->elock);
  extent_dalloc(y, f);
  CHECK(entry_edata(addr) == f && f->state == ES_DIRTY && f->size == 4 * os_page);
  mtx_unlock(&y->elock);
  mtx_lock(&x->elock);
  edata_t *again = extent_alloc(x, 12 * os_page, os_page); /* x's own rest, found first */
  CHECK(again != NULL && again->addr == addr + 4 * os_page);
  if (again) extent_dalloc(x, again);
  CHECK(entry_edata(addr + 4 * os_page) != NULL && entry_edata(addr + 4 * os_page)->size == 12 * os_page);
  mtx_unlock(&x->elock);
  purge_ordinary();
}

/* A request cut from the front of a bigger free extent whose rest stays in the same
 * bucket leaves that extent's edata in its set as the rest (its address moved up, its
 * age kept); the request gets a new edata (no heap removal and
 * insertion). The rest coalesces with the request again when it is freed. */
static void test_front_cut_keeps_the_free_edata_as_the_rest(void) {
  arena_t *x = arena_get(1);
  purge_ordinary();
  mtx_lock(&x->elock);
  edata_t *e = extent_alloc(x, 1000 * os_page, os_page);
  CHECK(e != NULL);
  if (e == NULL) {
    mtx_unlock(&x->elock);
    return;
  }
  uintptr_t addr = e->addr;
  extent_dalloc(x, e);
  edata_t *fe = entry_edata(addr);
  CHECK(fe != NULL && fe->state == ES_DIRTY && fe->size == 1000 * os_page);
  CHECK_EQ(psz_floor_fast(996), psz_floor_fast(1000)); /* the rest's bucket is the same */
  edata_t *g = extent_alloc(x, 4 * os_page, os_page);
  CHECK(g != NULL && g->addr == addr && g->size == 4 * os_page && g->state == ES_ACTIVE);
  CHECK(g != fe);
  CHECK(entry_edata(addr + 4 * os_page) == fe && entry_edata(addr + 999 * os_page) == fe);
  CHECK(fe->addr == addr + 4 * os_page && fe->size == 996 * os_page && fe->state == ES_DIRTY);
  CHECK_EQ(x->dirty.npages, 996);
  CHECK(x->dirty.lru_head == fe);
  edata_t *h = extent_alloc(x, 8 * os_page, os_page); /* the rest is found again */
  CHECK(h != NULL && h->addr == addr + 4 * os_page);
  if (h) extent_dalloc(x, h);
  if (g) extent_dalloc(x, g);
  edata_t *w = entry_edata(addr);
  CHECK(w != NULL && w->state == ES_DIRTY && w->addr == addr && w->size == 1000 * os_page);
  CHECK_EQ(x->dirty.npages, 1000);
  mtx_unlock(&x->elock);
  purge_ordinary();
}

/* A front cut whose rest falls into a lower bucket (wl_halffree's slabs: 47% of cuts)
 * keeps the free edata as the rest too: it moves heaps, keeps its age in the purge order
 * behind an older extent, and the bucket statistics follow. */
static void test_front_cut_moves_the_rest_to_a_lower_bucket(void) {
  arena_t *x = arena_get(1);
  purge_ordinary();
  mtx_lock(&x->elock);
  edata_t *old = extent_alloc(x, 2 * os_page, os_page); /* too small for the cut below */
  edata_t *sep = extent_alloc(x, os_page, os_page);     /* keeps old and e apart */
  edata_t *e = extent_alloc(x, 12 * os_page, os_page);
  CHECK(old != NULL && sep != NULL && e != NULL);
  if (old == NULL || sep == NULL || e == NULL) {
    mtx_unlock(&x->elock);
    return;
  }
  unsigned b12 = psz_floor_fast(12), b8 = psz_floor_fast(8);
  CHECK(b8 != b12); /* the rest changes buckets */
  uintptr_t addr = e->addr;
  extent_dalloc(x, old);
  extent_dalloc(x, e);
  edata_t *fe = entry_edata(addr), *fo = entry_edata(old->addr);
  CHECK(fe != NULL && fe->state == ES_DIRTY && fe->size == 12 * os_page && fo != NULL && fo != fe);
  CHECK_EQ(x->dirty.npages, 14);
  uint32_t n12 = x->dirty.nextents[b12], n8 = x->dirty.nextents[b8];
  size_t p12 = x->dirty.bpages[b12], p8 = x->dirty.bpages[b8];
  edata_t *g = extent_alloc(x, 4 * os_page, os_page);
  CHECK(g != NULL && g->addr == addr && g->size == 4 * os_page && g->state == ES_ACTIVE);
  CHECK(g != fe);
  CHECK(entry_edata(addr + 4 * os_page) == fe && entry_edata(addr + 11 * os_page) == fe);
  CHECK(fe->addr == addr + 4 * os_page && fe->size == 8 * os_page && fe->state == ES_DIRTY);
  CHECK_EQ(fe->bucket, b8);
  CHECK_EQ(x->dirty.npages, 10);
  CHECK_EQ(x->dirty.nextents[b12], n12 - 1);
  CHECK_EQ(x->dirty.nextents[b8], n8 + 1);
  CHECK_EQ(x->dirty.bpages[b12], p12 - 12);
  CHECK_EQ(x->dirty.bpages[b8], p8 + 8);
  CHECK(x->dirty.lru_head == fo && fo->lru_next == fe && x->dirty.lru_tail == fe);
  edata_t *h = extent_alloc(x, 8 * os_page, os_page); /* the rest is found in its new heap */
  CHECK(h != NULL && h->addr == addr + 4 * os_page);
  CHECK_EQ(x->dirty.npages, 2);
  if (h) extent_dalloc(x, h);
  if (g) extent_dalloc(x, g);
  edata_t *w = entry_edata(addr);
  CHECK(w != NULL && w->state == ES_DIRTY && w->addr == addr && w->size == 12 * os_page);
  extent_dalloc(x, sep);
  mtx_unlock(&x->elock);
  purge_ordinary();
}

/* A steal that takes a whole extent of exactly the pages asked for hands it to the caller
 * active (it does not join the taker's dirty set to be found and
 * cut there): both page-map boundaries name the taker's edata before the other arena's
 * lock goes (the last one named the giver's edata, now back in its pool), the giver keeps
 * nothing of it and the taker's set stays empty. A request aligned beyond a page takes
 * more pages and cuts them in the taker's set, as before. */
static void test_whole_stolen_extent_is_handed_over(void) {
  arena_t *x = arena_get(1), *y = arena_get(2);
  CHECK(x != NULL && y != NULL);
  purge_ordinary();
  mtx_lock(&x->elock);
  edata_t *e1 = extent_alloc(x, 4 * os_page, os_page), *e2 = extent_alloc(x, 12 * os_page, os_page);
  CHECK(e1 != NULL && e2 != NULL);
  uintptr_t addr = e1 ? e1->addr : 0;
  if (e1) extent_dalloc(x, e1); /* alone: its neighbours are active or retained */
  CHECK_EQ(x->dirty.npages, 4);
  mtx_unlock(&x->elock);
  uint64_t steals = extent_nsteals;
  mtx_lock(&y->elock);
  edata_t *f = extent_alloc(y, 4 * os_page, os_page);
  CHECK(f != NULL && f->addr == addr && f->size == 4 * os_page);
  CHECK(f != NULL && f->state == ES_ACTIVE && edata_arena_ind(f) == y->ind);
  CHECK(entry_edata(addr) == f);
  CHECK(entry_edata(addr + 4 * os_page - GRAN) == f);
  CHECK_EQ(y->dirty.npages, 0);
  CHECK_EQ(y->dirty.nextents[psz_floor_fast(4)], 0);
  mtx_unlock(&y->elock);
  CHECK_EQ(extent_nsteals, steals + 1);
  mtx_lock(&x->elock);
  CHECK_EQ(x->dirty.npages, 0);
  if (e2) extent_dalloc(x, e2);
  mtx_unlock(&x->elock);
  /* Freed in y, the pages are y's dirty pages, at their own boundaries. */
  mtx_lock(&y->elock);
  if (f) extent_dalloc(y, f);
  CHECK(entry_edata(addr) == f && entry_edata(addr + 4 * os_page - GRAN) == f);
  CHECK_EQ(y->dirty.npages, 4);
  mtx_unlock(&y->elock);
  /* Aligned to 8 pages: 11 pages move to y's set and the aligned 4 are cut there. */
  uintptr_t base = dirty_extent_in(x);
  steals = extent_nsteals;
  mtx_lock(&y->elock);
  edata_t *g = extent_alloc(y, 4 * os_page, 8 * os_page);
  CHECK(g != NULL && g->addr % (8 * os_page) == 0 && g->size == 4 * os_page);
  CHECK(g != NULL && g->addr >= base && g->addr + g->size <= base + 11 * os_page);
  CHECK(g != NULL && edata_arena_ind(g) == y->ind && g->state == ES_ACTIVE);
  CHECK_EQ(y->dirty.npages, 7); /* the 11 pages' lead and trail */
  if (g) extent_dalloc(y, g);
  mtx_unlock(&y->elock);
  CHECK_EQ(extent_nsteals, steals + 1);
  purge_ordinary();
}

/* Muzzy pages (purged lazily) move too, when no arena has dirty pages that fit. */
static void test_arena_takes_another_arenas_muzzy_pages(void) {
  arena_t *x = arena_get(1), *y = arena_get(2);
  uintptr_t addr = dirty_extent_in(x);
  mtx_lock(&x->elock);
  extent_purge(x, ES_DIRTY, 0, true); /* dirty -> muzzy (MADV_FREE) */
  CHECK_EQ(x->dirty.npages, 0);
  CHECK_EQ(x->muzzy.npages, 16);
  mtx_unlock(&x->elock);
  uint64_t steals = extent_nsteals;
  mtx_lock(&y->elock);
  edata_t *f = extent_alloc(y, 4 * os_page, os_page);
  CHECK(f != NULL && f->addr == addr && edata_arena_ind(f) == y->ind);
  CHECK(f != NULL && !f->zeroed); /* MADV_FREE pages may keep their contents */
  if (f) extent_dalloc(y, f);
  mtx_unlock(&y->elock);
  CHECK_EQ(extent_nsteals, steals + 1);
  CHECK_EQ(x->muzzy.npages, 12);
  purge_ordinary();
}

/* Fragmented dirty pages give way (extent_purge_fragments): an ordinary arena whose dirty
 * pages are pieces too small for a request purges as many of its oldest pages as it is
 * about to take fresh, while dirty pages are a FRAG_DIRTY_DIV-th (a quarter) or more of
 * all resident pages; not below that share, and not with decay disabled. x gets FRAG_N
 * 8-page pieces of dirty pages between live extents of its own; everything else is
 * purged first. */
#define FRAG_N 64
static edata_t *frag_live[FRAG_N];
static uintptr_t frag_free[FRAG_N]; /* the freed pieces' addresses, 8 pages each */
static void fragment_arena(arena_t *x) {
  arena_purge_all(); /* the oversize arena's dirty pages from the tests above too */
  mtx_lock(&x->elock);
  edata_t *e[2 * FRAG_N];
  for (int i = 0; i < 2 * FRAG_N; i++) {
    e[i] = extent_alloc(x, 8 * os_page, os_page);
    CHECK(e[i] != NULL);
  }
  for (int i = 0; i < FRAG_N; i++) {
    frag_live[i] = e[2 * i + 1];
    frag_free[i] = e[2 * i] ? e[2 * i]->addr : 0;
    if (e[2 * i]) extent_dalloc(x, e[2 * i]);
  }
  CHECK_EQ(x->dirty.npages, FRAG_N * 8);
  mtx_unlock(&x->elock);
}
/* Whether [addr, addr + size) overlaps one of the freed pieces. x's pieces need not be
 * contiguous: other arenas' free pages may lie between them, so a bounding range is no
 * test (CI's TSan build once got such pages from between them). */
static bool on_a_piece(uintptr_t addr, size_t size) {
  for (int i = 0; i < FRAG_N; i++)
    if (frag_free[i] && addr < frag_free[i] + 8 * os_page && frag_free[i] < addr + size) return true;
  return false;
}
static void unfragment_arena(arena_t *x) {
  mtx_lock(&x->elock);
  for (int i = 0; i < FRAG_N; i++)
    if (frag_live[i]) extent_dalloc(x, frag_live[i]);
  mtx_unlock(&x->elock);
  purge_ordinary();
}
/* Takes 16 pages in x (no 8-page piece fits); returns x's dirty pages after. */
static size_t take_16_pages(arena_t *x) {
  mtx_lock(&x->elock);
  edata_t *f = extent_alloc(x, 16 * os_page, os_page);
  CHECK(f != NULL);
  mtx_unlock(&x->elock);
  arena_maybe_purge(x); /* what arena_large_alloc and slab fills do after unlocking */
  mtx_lock(&x->elock);
  size_t left = x->dirty.npages;
  if (f) extent_dalloc(x, f);
  mtx_unlock(&x->elock);
  return left;
}

static void test_fragmented_dirty_pages_give_way(void) {
  arena_t *x = arena_get(1);
  fragment_arena(x);
  CHECK(FRAG_N * 8 * FRAG_DIRTY_DIV >= __atomic_load_n(&extent_resident_pages, __ATOMIC_RELAXED)); /* the share holds */
  uint64_t n0 = extent_nfrag_purges, purged0 = x->npurged;
  CHECK_EQ(take_16_pages(x), FRAG_N * 8 - 16); /* the two oldest pieces went */
  CHECK_EQ(extent_nfrag_purges, n0 + 1);
  CHECK_EQ(x->npurged, purged0 + 16);
  unfragment_arena(x);
}

static void test_fragments_under_the_share_stay(void) {
  arena_t *x = arena_get(1);
  fragment_arena(x);
  /* 64 MiB active elsewhere in x (never touched: committed, not faulted in). */
  mtx_lock(&x->elock);
  edata_t *big = extent_alloc(x, (size_t)16384 * os_page, os_page);
  CHECK(big != NULL);
  mtx_unlock(&x->elock);
  CHECK(FRAG_N * 8 * FRAG_DIRTY_DIV < __atomic_load_n(&extent_resident_pages, __ATOMIC_RELAXED));
  uint64_t n0 = extent_nfrag_purges;
  CHECK_EQ(take_16_pages(x), FRAG_N * 8);
  CHECK_EQ(extent_nfrag_purges, n0);
  mtx_lock(&x->elock);
  if (big) extent_dalloc(x, big);
  mtx_unlock(&x->elock);
  unfragment_arena(x);
}

static void test_fragments_stay_with_decay_disabled(void) {
  arena_t *x = arena_get(1);
  fragment_arena(x);
  int64_t ms = decay_ms(&x->ddecay);
  __atomic_store_n(&x->ddecay.ms, -1, __ATOMIC_RELAXED);
  uint64_t n0 = extent_nfrag_purges;
  CHECK_EQ(take_16_pages(x), FRAG_N * 8);
  CHECK_EQ(extent_nfrag_purges, n0);
  __atomic_store_n(&x->ddecay.ms, ms, __ATOMIC_RELAXED);
  unfragment_arena(x);
}

/* Another arena's dirty pages in pieces too small for a request are passed over without
 * taking its lock (eset_may_fit reads the set's bucket words): wl_xthread's arenas took
 * 19,690 other elocks to steal 4,704 times; a lock now leads to a steal.
 * A piece that fits is still taken, with one lock. */
static void test_steal_skips_fragments_without_locking(void) {
  arena_t *x = arena_get(1), *y = arena_get(2);
  fragment_arena(x); /* 32 dirty pieces of 8 pages in x, 256 pages: none fits 16 */
  for (unsigned i = 0; i < narenas; i++) /* x's pieces are the only free pages to take */
    if (arenas[i] != NULL && arenas[i] != x) purge_arena(arenas[i]);
  uint64_t locks = extent_nsteal_locks, steals = extent_nsteals;
  mtx_lock(&y->elock);
  edata_t *f = extent_alloc(y, 16 * os_page, os_page);
  CHECK(f != NULL);
  CHECK(f == NULL || !on_a_piece(f->addr, f->size)); /* not from x's pieces */
  mtx_unlock(&y->elock);
  CHECK_EQ(x->dirty.npages, FRAG_N * 8);
  CHECK_EQ(extent_nsteal_locks - locks, extent_nsteals - steals); /* no lock without a steal */
  locks = extent_nsteal_locks, steals = extent_nsteals;
  mtx_lock(&y->elock);
  edata_t *g = extent_alloc(y, 8 * os_page, os_page); /* a piece fits: taken */
  CHECK(g != NULL && on_a_piece(g->addr, g->size));
  mtx_unlock(&y->elock);
  CHECK_EQ(extent_nsteals, steals + 1);
  CHECK_EQ(extent_nsteal_locks, locks + 1);
  CHECK_EQ(x->dirty.npages, FRAG_N * 8 - 8);
  mtx_lock(&y->elock);
  if (f) extent_dalloc(y, f);
  if (g) extent_dalloc(y, g);
  mtx_unlock(&y->elock);
  unfragment_arena(x);
  purge_ordinary();
}

/* No thread waits on another arena: an arena whose extent lock is held is passed over. */
static int hold_state; /* atomic: 1 take the lock, 2 held, 3 release */
static void hold_wait(int state) {
  while (__atomic_load_n(&hold_state, __ATOMIC_ACQUIRE) != state) sched_yield();
}
static void *hold_elock(void *arg) {
  arena_t *x = arg;
  hold_wait(1);
  mtx_lock(&x->elock);
  __atomic_store_n(&hold_state, 2, __ATOMIC_RELEASE);
  hold_wait(3);
  mtx_unlock(&x->elock);
  return NULL;
}

static void test_arena_passes_over_a_locked_arena(void) {
  arena_t *x = arena_get(1), *y = arena_get(2);
  hold_state = 0;
  pthread_t t; /* started first: a new thread's own first slabs may take pages too */
  pthread_create(&t, NULL, hold_elock, x);
  uintptr_t addr = dirty_extent_in(x);
  uint64_t steals = extent_nsteals;
  __atomic_store_n(&hold_state, 1, __ATOMIC_RELEASE);
  hold_wait(2);
  mtx_lock(&y->elock);
  edata_t *f = extent_alloc(y, 4 * os_page, os_page); /* returns: fresh (retained) pages */
  CHECK(f != NULL && f->addr != addr);
  if (f) extent_dalloc(y, f);
  mtx_unlock(&y->elock);
  CHECK_EQ(extent_nsteals, steals);
  __atomic_store_n(&hold_state, 3, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  CHECK_EQ(x->dirty.npages, 16);
  purge_ordinary();
}

/* User arenas (arenas.create) neither give pages to the ordinary arenas nor take theirs:
 * their pages may be reset, destroyed or come from a hook. */
static void test_user_arenas_keep_their_pages_apart(void) {
  unsigned ind;
  size_t sz = sizeof ind;
  CHECK_EQ(au_arenas_create(NULL, 0, &ind, &sz, NULL, 0), 0);
  arena_t *u = arena_get(ind), *x = arena_get(1), *y = arena_get(2);
  CHECK(u != NULL && u->user);
  if (u == NULL) return;
  uint64_t steals = extent_nsteals;
  /* The user arena's freed pages stay its own. */
  purge_ordinary();
  purge_arena(u);
  mtx_lock(&u->elock);
  edata_t *e = extent_alloc(u, 16 * os_page, os_page);
  CHECK(e != NULL);
  uintptr_t uaddr = e ? e->addr : 0;
  if (e) extent_dalloc(u, e);
  mtx_unlock(&u->elock);
  mtx_lock(&y->elock);
  edata_t *f = extent_alloc(y, 4 * os_page, os_page);
  CHECK(f != NULL && f->addr != uaddr);
  if (f) extent_dalloc(y, f);
  mtx_unlock(&y->elock);
  CHECK_EQ(u->dirty.npages, 16);
  /* Nor does it take an ordinary arena's: every one of them has 16 dirty pages. */
  purge_arena(u);
  (void)x;
  purge_ordinary();
  edata_t *d[64] = {0}; /* all allocated before any is freed: none takes another's */
  for (unsigned i = 0; i < narenas && i < 64; i++) {
    arena_t *o = arena_get(i);
    mtx_lock(&o->elock);
    d[i] = extent_alloc(o, 16 * os_page, os_page);
    CHECK(d[i] != NULL);
    mtx_unlock(&o->elock);
  }
  for (unsigned i = 0; i < narenas && i < 64; i++) {
    mtx_lock(&arenas[i]->elock);
    if (d[i]) extent_dalloc(arenas[i], d[i]);
    mtx_unlock(&arenas[i]->elock);
  }
  mtx_lock(&u->elock);
  edata_t *g = extent_alloc(u, 4 * os_page, os_page);
  CHECK(g != NULL && edata_arena_ind(g) == u->ind);
  if (g) extent_dalloc(u, g);
  mtx_unlock(&u->elock);
  for (unsigned i = 0; i < narenas && i < 64; i++) CHECK_EQ(arenas[i]->dirty.npages, 16);
  CHECK_EQ(extent_nsteals, steals);
  purge_arena(u);
  purge_ordinary();
}

/* Threads on different arenas allocate and free extents of varying sizes at once, so
 * that pages keep moving between arenas while their neighbours are freed and merged in
 * the arena that gave them (TSan runs this too). Afterwards every free extent is in the
 * set of the arena its edata names, with both page-map boundaries pointing at it, and
 * each set's page count is the sum of its extents. */
#define STEAL_THREADS 4
static void *steal_churn(void *arg) {
  arena_t *x = arena_get((unsigned)(uintptr_t)arg);
  edata_t *held[16] = {0};
  uint64_t rnd = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < 4000; i++) {
    rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
    unsigned k = (unsigned)(rnd % 16);
    mtx_lock(&x->elock);
    if (held[k]) {
      extent_dalloc(x, held[k]);
      held[k] = NULL;
    } else {
      held[k] = extent_alloc(x, (1 + (rnd >> 8) % 24) * os_page, os_page);
    }
    if (i % 500 == 499) extent_purge(x, ES_DIRTY, 0, false);
    mtx_unlock(&x->elock);
  }
  mtx_lock(&x->elock);
  for (unsigned k = 0; k < 16; k++)
    if (held[k]) extent_dalloc(x, held[k]);
  mtx_unlock(&x->elock);
  return NULL;
}

static void test_threads_move_pages_between_arenas_consistently(void) {
  CHECK(narenas >= STEAL_THREADS);
  if (narenas < STEAL_THREADS) return;
  purge_ordinary();
  uint64_t steals = extent_nsteals;
  pthread_t t[STEAL_THREADS];
  /* On a loaded machine the threads may run one after another and take no pages from
   * each other in a round (CI's TSan build once did): run rounds until one steal came. */
  for (int round = 0; round < 50 && extent_nsteals == steals; round++) {
    for (uintptr_t i = 0; i < STEAL_THREADS; i++) pthread_create(&t[i], NULL, steal_churn, (void *)i);
    for (unsigned i = 0; i < STEAL_THREADS; i++) pthread_join(t[i], NULL);
  }
  CHECK(extent_nsteals > steals);
  for (unsigned i = 0; i < STEAL_THREADS; i++) {
    arena_t *x = arenas[i];
    mtx_lock(&x->elock);
    size_t np = 0;
    unsigned bad = 0;
    for (edata_t *e = x->dirty.lru_head; e; e = e->lru_next) {
      np += e->size / os_page;
      bad += edata_arena_ind(e) != x->ind || e->state != ES_DIRTY || entry_edata(e->addr) != e ||
             entry_edata(e->addr + e->size - GRAN) != e;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(np, x->dirty.npages);
    mtx_unlock(&x->elock);
  }
  purge_ordinary();
}

/* Lock stress: threads take one arena's extent lock many times and change an unguarded
 * counter under it; every acquisition (the trylock, the spin, the sleep) must exclude the
 * others, and be counted. Two phases: as many threads as CPUs with a holder that keeps
 * the lock about a microsecond (the others spin), then 8 threads whose holders yield
 * now and then (the others spin, then sleep). */
static uint64_t lk_counter;
static unsigned lk_rounds, lk_yield_every;
static void *lock_stress_body(void *arg) {
  arena_t *ar = arg;
  for (unsigned i = 0; i < lk_rounds; i++) {
    mtx_lock(&ar->elock);
    uint64_t v = lk_counter;
    if (lk_yield_every && i % lk_yield_every == 0) {
      sched_yield(); /* a holder preempted */
    } else {
      for (volatile int k = 0; k < 100; k++) {
      }
    }
    lk_counter = v + 1;
    mtx_unlock(&ar->elock);
    for (volatile int k = 0; k < 300; k++) { /* work between acquisitions, as an allocator's */
    }
  }
  return NULL;
}

static uint64_t lock_stress(arena_t *ar, unsigned nthreads, unsigned yield_every) {
  lk_yield_every = yield_every;
  mtx_lock(&ar->elock);
  uint64_t ops0 = ar->elock.n_lock_ops, spin0 = ar->elock.n_spin, wait0 = ar->elock.n_wait;
  mtx_unlock(&ar->elock);
  lk_counter = 0;
  pthread_t t[8];
  for (unsigned i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, lock_stress_body, ar);
  for (unsigned i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  mtx_lock(&ar->elock);
  uint64_t ops = ar->elock.n_lock_ops - ops0, spun = ar->elock.n_spin - spin0, slept = ar->elock.n_wait - wait0;
  mtx_unlock(&ar->elock);
  printf("     %u threads x %u on %u CPUs: %llu spun, %llu slept\n", nthreads, lk_rounds, os_ncpus,
         (unsigned long long)spun, (unsigned long long)slept);
  CHECK_EQ(lk_counter, (uint64_t)nthreads * lk_rounds);
  CHECK_EQ(ops, (uint64_t)nthreads * lk_rounds + 1); /* + the read above */
  if (yield_every) CHECK(spun + slept > 0); /* the test did meet contention */
  return spun;
}

static void test_extent_lock_excludes_under_contention(void) {
  arena_t *ar = arena_get(1);
  CHECK(ar != NULL);
  const char *sc = getenv("STRATA_TEST_SCALE");
  lk_rounds = sc && atof(sc) < 1 ? 20000 : 200000;
  /* Spinning needs the threads on CPUs at once: on a loaded machine, try a few times. */
  for (int i = 0; i < 5 && lock_stress(ar, os_ncpus < 8 ? os_ncpus : 8, 0) == 0; i++) {
  }
  lk_rounds /= 4;
  lock_stress(ar, 8, 64);
}

/* The ordinary arenas' chunks come from shared reservations (os_chunk_map;
 * docs/design.md, "Arenas"): every arena growing in turn makes one or two mappings in all, not one (and
 * its alignment trims) per arena, and each chunk is usable memory of its own. */
static void test_arenas_grow_from_shared_reservations(void) {
  enum { MAXA = 64 };
  unsigned n = narenas < MAXA ? narenas : MAXA;
  size_t free_np = 0;
  for (unsigned i = 0; i < n; i++) {
    arena_t *o = arena_get(i);
    CHECK(o != NULL);
    if (o == NULL) return;
    mtx_lock(&o->elock);
    size_t np = o->dirty.npages + o->muzzy.npages + o->retained.npages;
    mtx_unlock(&o->elock);
    if (np > free_np) free_np = np;
  }
  /* More pages than any arena holds free: no set of its own, nor another's, fits. */
  size_t size = (free_np + 1) * os_page;
  uint64_t r0 = __atomic_load_n(&os_chunk_nresv, __ATOMIC_RELAXED);
  edata_t *e[MAXA];
  for (unsigned i = 0; i < n; i++) {
    arena_t *o = arena_get(i);
    mtx_lock(&o->elock);
    size_t mapped = o->mapped;
    e[i] = extent_alloc(o, size, os_page);
    CHECK(o->mapped > mapped); /* it grew */
    mtx_unlock(&o->elock);
    CHECK(e[i] != NULL);
    if (e[i] == NULL) return;
    char *p = (char *)e[i]->addr;
    CHECK(p[0] == 0 && p[size - 1] == 0); /* fresh pages */
    p[0] = p[size - 1] = (char)(i + 1);
  }
  uint64_t made = __atomic_load_n(&os_chunk_nresv, __ATOMIC_RELAXED) - r0;
  CHECK(made <= 2 && made < n);
  for (unsigned i = 0; i < n; i++) {
    CHECK(((char *)e[i]->addr)[0] == (char)(i + 1));
    for (unsigned j = 0; j < i; j++) /* disjoint */
      CHECK(e[i]->addr + size <= e[j]->addr || e[j]->addr + size <= e[i]->addr);
  }
  for (unsigned i = 0; i < n; i++) {
    arena_t *o = arena_get(i);
    mtx_lock(&o->elock);
    extent_dalloc(o, e[i]);
    extent_purge(o, ES_DIRTY, 0, false);
    mtx_unlock(&o->elock);
  }
}


/* os_chunk_map from several threads at once: every chunk is handed out once (the carving
 * reads the reservation's end under meta_lock; a read after the unlock gave two arenas one
 * chunk in 2-5% of wl_nativethreads runs, and TSan reports it here). */
enum { CARVE_THREADS = 4, CARVE_EACH = 48 };
static char *carved[CARVE_THREADS][CARVE_EACH];
static pthread_barrier_t carve_bar;
static void *carve_thread(void *arg) {
  unsigned t = (unsigned)(uintptr_t)arg;
  pthread_barrier_wait(&carve_bar);
  for (unsigned i = 0; i < CARVE_EACH; i++) {
    char *c = os_chunk_map((size_t)2 << 20, (size_t)2 << 20);
    carved[t][i] = c;
    if (c != NULL) c[0] = (char)(t + 1);
  }
  return NULL;
}
static int cmp_ptr(const void *x, const void *y) {
  uintptr_t a = (uintptr_t) * (char *const *)x, b = (uintptr_t) * (char *const *)y;
  return a < b ? -1 : a > b;
}
static void test_concurrent_carving_hands_out_each_chunk_once(void) {
  const size_t csz = (size_t)2 << 20;
  pthread_t th[CARVE_THREADS];
  pthread_barrier_init(&carve_bar, NULL, CARVE_THREADS);
  for (unsigned t = 0; t < CARVE_THREADS; t++) pthread_create(&th[t], NULL, carve_thread, (void *)(uintptr_t)t);
  for (unsigned t = 0; t < CARVE_THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&carve_bar);
  static char *all[CARVE_THREADS * CARVE_EACH];
  unsigned n = 0;
  for (unsigned t = 0; t < CARVE_THREADS; t++)
    for (unsigned i = 0; i < CARVE_EACH; i++) {
      CHECK(carved[t][i] != NULL && (uintptr_t)carved[t][i] % csz == 0);
      if (carved[t][i] == NULL) return;
      CHECK_EQ(carved[t][i][0], (char)(t + 1)); /* no other thread wrote its mark here */
      all[n++] = carved[t][i];
    }
  qsort(all, n, sizeof all[0], cmp_ptr);
  for (unsigned i = 1; i < n; i++) CHECK((uintptr_t)all[i - 1] + csz <= (uintptr_t)all[i]); /* disjoint */
  for (unsigned i = 0; i < n; i++) os_unmap(all[i], csz);
}

int main(void) {
  if (strata_init()) return 1;
  /* An arena no thread is bound to: this thread's own allocations (stdio) stay out of it. */
  printf("unit: extent\n");
  a = arena_get(narenas - 1);
  RUN(test_rtree_unknown_addresses_read_zero);
  RUN(test_arenas_grow_from_shared_reservations); /* first: the arenas hold little yet */
  RUN(test_concurrent_carving_hands_out_each_chunk_once);
  RUN(test_alloc_registers_first_and_last);
  RUN(test_class_field_reads_alone_as_low_half);
  RUN(test_neighbours_coalesce_when_freed);
  RUN(test_aligned_alloc_splits_lead_and_trail);
  RUN(test_grow_and_shrink_in_place);
  RUN(test_purge_moves_dirty_to_retained);
  RUN(test_pairing_heap_orders_by_address);
  RUN(test_huge_reuse_grows_freed_block);
  RUN(test_huge_request_gathers_freed_blocks);
  RUN(test_arena_takes_another_arenas_dirty_pages);
  RUN(test_arena_takes_another_arenas_muzzy_pages);
  RUN(test_whole_stolen_extent_is_handed_over);
  RUN(test_front_cut_keeps_the_free_edata_as_the_rest);
  RUN(test_front_cut_moves_the_rest_to_a_lower_bucket);
  RUN(test_arena_passes_over_a_locked_arena);
  RUN(test_fragmented_dirty_pages_give_way);
  RUN(test_fragments_under_the_share_stay);
  RUN(test_fragments_stay_with_decay_disabled);
  RUN(test_steal_skips_fragments_without_locking);
  RUN(test_user_arenas_keep_their_pages_apart);
  RUN(test_threads_move_pages_between_arenas_consistently);
  RUN(test_extent_lock_excludes_under_contention);
  UNIT_EXIT();
}

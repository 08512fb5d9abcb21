/*
 * meta.c - the metadata allocator, never through malloc, counted as stats.metadata. Two
 * parts: a bump allocator over 2 MiB mappings for structures that live as long as the
 * process (arenas, tcaches, tables), and pools of fixed-size objects whose number follows
 * the heap's peak (extent descriptors, slab bitmaps). Pool objects are packed into pages,
 * lowest address first, so that after a peak whole pages empty out; meta_purge gives
 * those pages back to the kernel (MADV_DONTNEED, with meta_lock dropped) and the pools
 * take them again, zeroed, on the next growth.
 */
#include <string.h>

#include "internal.h"

/* 2 MiB per block: large enough that mapping is rare, and untouched pages cost no RSS. */
#define META_BLOCK ((size_t)2 << 20)

mtx_t meta_lock = MTX_INITIALIZER;
static char *meta_cur;      /* guarded by meta_lock */
static size_t meta_left;
static size_t meta_bump_mapped;  /* atomic: bytes of bump blocks */
static size_t meta_pool_bytes;   /* atomic: chunk headers and pool pages in use or being purged */
static size_t meta_hooked_bytes; /* atomic: blocks hooked arenas took from their hooks (below) */

void *meta_alloc(size_t size) {
  size_t align = size >= 64 ? 64 : 16;
  size = (size + align - 1) & ~(align - 1);
  mtx_lock(&meta_lock);
  uintptr_t cur = (uintptr_t)meta_cur;
  size_t pad = ((cur + align - 1) & ~(uintptr_t)(align - 1)) - cur;
  if (meta_cur == NULL || meta_left < size + pad) {
    size_t bsize = size > META_BLOCK ? (size + os_page - 1) & ~(os_page - 1) : META_BLOCK;
    char *b = os_map(bsize, os_page);
    if (b == NULL) {
      mtx_unlock(&meta_lock);
      return NULL;
    }
    __atomic_fetch_add(&meta_bump_mapped, bsize, __ATOMIC_RELAXED);
    os_thp_apply(b, bsize, true);
    if (size > META_BLOCK) { /* a one-off large block: do not abandon the current one */
      mtx_unlock(&meta_lock);
      return b;
    }
    meta_cur = b;
    meta_left = bsize;
    pad = 0;
  }
  void *p = meta_cur + pad;
  meta_cur += pad + size;
  meta_left -= pad + size;
  mtx_unlock(&meta_lock);
  return p;
}

/* ---------------------------------------------------------------- pools */
/*
 * A chunk is a 2 MiB-aligned mapping: its first pages hold the header (never purged),
 * the others are pool pages. A page belongs to one pool while it holds objects and is
 * free for any pool once purged. Free objects of a page form a list through their first
 * word (offsets within the page); a page with free objects has its bit in its pool's
 * avail map, and the lowest such page is used first, so that live objects gather at low
 * addresses and the pages above them empty out. All fields: meta_lock.
 */
#define META_CHUNK ((size_t)2 << 20)
#define META_CHUNK_PAGES_MAX 512 /* 2 MiB / 4 KiB; fewer on 16K and 64K kernels */
#define META_MAP_WORDS (META_CHUNK_PAGES_MAX / 64)
#define META_NO_OBJ 0xffffu

enum { MP_UNUSED = 0, MP_USED, MP_PURGING }; /* MP_UNUSED pages are zero (fresh or purged) */

typedef struct {
  uint16_t free;  /* offset / 16 of the first free object, META_NO_OBJ if none */
  uint16_t nfree;
  uint8_t pool;   /* while unused: the pool it last served, META_NPOOLS if none */
  uint8_t state;  /* MP_* */
} meta_page_t;

typedef struct meta_chunk_s meta_chunk_t;
struct meta_chunk_s {
  meta_chunk_t *next;                    /* chunks by address, lowest first */
  uint32_t npages, first;                /* pool pages are [first, npages) */
  uint64_t unused[META_MAP_WORDS];       /* MP_UNUSED pages */
  uint64_t avail[META_NPOOLS][META_MAP_WORDS]; /* pool pages with a free object */
  meta_page_t page[META_CHUNK_PAGES_MAX];
};

typedef struct {
  uint32_t size, per_page;
  size_t nused;  /* objects handed out (stats and tests) */
} meta_pool_t;

static meta_chunk_t *meta_chunks;
static meta_pool_t meta_pools[META_NPOOLS];
static bool meta_purge_running; /* atomic: one meta_purge at a time */

static inline bool map_get(const uint64_t *m, size_t i) { return (m[i / 64] >> (i % 64)) & 1; }
static inline void map_set(uint64_t *m, size_t i) { m[i / 64] |= (uint64_t)1 << (i % 64); }
static inline void map_clear(uint64_t *m, size_t i) { m[i / 64] &= ~((uint64_t)1 << (i % 64)); }
/* Lowest set bit of m (npages bits), or -1. */
static long map_first(const uint64_t *m) {
  for (size_t w = 0; w < META_MAP_WORDS; w++)
    if (m[w]) return (long)(w * 64 + (size_t)__builtin_ctzll(m[w]));
  return -1;
}

static inline char *chunk_page(meta_chunk_t *c, size_t i) { return (char *)c + i * os_page; }
static inline meta_chunk_t *chunk_of(const void *p) {
  return (meta_chunk_t *)((uintptr_t)p & ~(uintptr_t)(META_CHUNK - 1));
}

void meta_pool_init(unsigned pool, size_t size) {
  sassert(pool < META_NPOOLS && size >= 16 && size % 16 == 0 && size <= os_page);
  meta_pools[pool].size = (uint32_t)size;
  meta_pools[pool].per_page = (uint32_t)(os_page / size);
}

/* meta_lock held. A new chunk, kept in address order. */
static meta_chunk_t *chunk_new(void) {
  meta_chunk_t *c = os_map(META_CHUNK, META_CHUNK);
  if (c == NULL) return NULL;
  os_thp_apply(c, META_CHUNK, true);
  c->npages = (uint32_t)(META_CHUNK / os_page);
  c->first = (uint32_t)((sizeof(meta_chunk_t) + os_page - 1) / os_page);
  __atomic_fetch_add(&meta_pool_bytes, c->first * os_page, __ATOMIC_RELAXED);
  for (size_t i = c->first; i < c->npages; i++) {
    map_set(c->unused, i);
    c->page[i].pool = META_NPOOLS;
  }
  meta_chunk_t **pp = &meta_chunks;
  while (*pp && *pp < c) pp = &(*pp)->next;
  c->next = *pp;
  *pp = c;
  return c;
}

/* meta_lock held. The lowest unused page the pool may take: a page that held edata only
 * ever holds edata again (or zeros), so that a stale page-map read of an edata's arena_id
 * (extent.c, mergeable) finds an id or 0 there, never a bitmap's bits; -1 if none. */
static long first_unused(meta_chunk_t *c, unsigned pool) {
  for (size_t w = 0; w < META_MAP_WORDS; w++) {
    for (uint64_t m = c->unused[w]; m; m &= m - 1) {
      size_t i = w * 64 + (size_t)__builtin_ctzll(m);
      unsigned last = c->page[i].pool;
      if (last == META_NPOOLS || (last == META_POOL_EDATA) == (pool == META_POOL_EDATA)) return (long)i;
    }
  }
  return -1;
}

/* meta_lock held. The lowest page with a free object of the pool, making one of the
 * lowest unused page (or a new chunk's) if none; NULL on OOM. */
static meta_page_t *pool_page(unsigned pool, meta_chunk_t **cp, size_t *ip) {
  for (meta_chunk_t *c = meta_chunks; c; c = c->next) {
    long i = map_first(c->avail[pool]);
    if (i >= 0) {
      *cp = c;
      *ip = (size_t)i;
      return &c->page[i];
    }
  }
  meta_chunk_t *c = meta_chunks;
  long i = -1;
  for (; c; c = c->next)
    if ((i = first_unused(c, pool)) >= 0) break;
  if (c == NULL) {
    if ((c = chunk_new()) == NULL) return NULL;
    i = (long)c->first;
  }
  /* The page is zero: link its objects, lowest first. */
  const meta_pool_t *mp = &meta_pools[pool];
  char *base = chunk_page(c, (size_t)i);
  for (uint32_t k = 0; k < mp->per_page; k++)
    *(uint16_t *)(base + k * mp->size) = k + 1 < mp->per_page ? (uint16_t)((k + 1) * mp->size / 16) : META_NO_OBJ;
  meta_page_t *pg = &c->page[i];
  pg->free = 0;
  pg->nfree = (uint16_t)mp->per_page;
  pg->pool = (uint8_t)pool;
  pg->state = MP_USED;
  __atomic_fetch_add(&meta_pool_bytes, os_page, __ATOMIC_RELAXED);
  map_clear(c->unused, (size_t)i);
  map_set(c->avail[pool], (size_t)i);
  *cp = c;
  *ip = (size_t)i;
  return pg;
}

unsigned meta_pool_get(unsigned pool, void **out, unsigned n) {
  unsigned got = 0;
  mtx_lock(&meta_lock);
  while (got < n) {
    meta_chunk_t *c;
    size_t i;
    meta_page_t *pg = pool_page(pool, &c, &i);
    if (pg == NULL) break;
    char *base = chunk_page(c, i);
    while (got < n && pg->nfree) {
      char *o = base + (size_t)pg->free * 16;
      pg->free = *(uint16_t *)o;
      pg->nfree--;
      out[got++] = o;
    }
    if (pg->nfree == 0) map_clear(c->avail[pool], i);
  }
  meta_pools[pool].nused += got;
  mtx_unlock(&meta_lock);
  return got;
}

void meta_pool_put(unsigned pool, void *const *objs, unsigned n) {
  meta_pool_t *mp = &meta_pools[pool];
  mtx_lock(&meta_lock);
  for (unsigned k = 0; k < n; k++) {
    char *o = objs[k];
    meta_chunk_t *c = chunk_of(o);
    size_t i = ((uintptr_t)o - (uintptr_t)c) / os_page;
    meta_page_t *pg = &c->page[i];
    sassert(pg->state == MP_USED && pg->pool == pool && pg->nfree < mp->per_page);
    *(uint16_t *)o = pg->free;
    pg->free = (uint16_t)((o - chunk_page(c, i)) / 16);
    if (pg->nfree++ == 0) map_set(c->avail[pool], i);
  }
  mp->nused -= n;
  mtx_unlock(&meta_lock);
}

size_t meta_pool_used(unsigned pool) {
  mtx_lock(&meta_lock);
  size_t n = meta_pools[pool].nused;
  mtx_unlock(&meta_lock);
  return n;
}

/* Pool pages with no object in use go back to the kernel, a batch at a time: taken out of
 * the pools under meta_lock (MP_PURGING: no pool sees them), purged without it, then
 * unused (zero) for any pool. Returns bytes purged. */
static size_t pool_purge(void) {
  size_t purged = 0;
  mtx_lock(&meta_lock);
  for (meta_chunk_t *c = meta_chunks; c; c = c->next) {
    for (size_t i = c->first; i < c->npages;) {
      meta_page_t *pg = &c->page[i];
      if (pg->state != MP_USED || pg->nfree != meta_pools[pg->pool].per_page) {
        i++;
        continue;
      }
      /* A run of empty pages: one madvise. */
      size_t j = i;
      while (j < c->npages && c->page[j].state == MP_USED && c->page[j].nfree == meta_pools[c->page[j].pool].per_page) {
        map_clear(c->avail[c->page[j].pool], j);
        c->page[j].state = MP_PURGING;
        j++;
      }
      mtx_unlock(&meta_lock);
      os_purge(chunk_page(c, i), (j - i) * os_page);
      mtx_lock(&meta_lock);
      for (size_t k = i; k < j; k++) {
        c->page[k] = (meta_page_t){.pool = c->page[k].pool};
        map_set(c->unused, k);
      }
      purged += (j - i) * os_page;
      __atomic_fetch_sub(&meta_pool_bytes, (j - i) * os_page, __ATOMIC_RELAXED);
      i = j;
    }
  }
  mtx_unlock(&meta_lock);
  return purged;
}

/* Metadata that may be resident (stats.metadata, and the container limit's count): bump
 * blocks, chunk headers, pool pages not purged, page-map pages not purged, and the blocks
 * hooked arenas took from their hooks (as jemalloc counts every base). */
size_t meta_mapped(void) {
  return __atomic_load_n(&meta_bump_mapped, __ATOMIC_RELAXED) + __atomic_load_n(&meta_pool_bytes, __ATOMIC_RELAXED) +
         __atomic_load_n(&meta_hooked_bytes, __ATOMIC_RELAXED) + rtree_resident_bytes();
}

/* The child of a fork: a purge another thread had in flight is over (its thread is gone);
 * pool pages it had taken out are unused again (their contents do not matter: pool_page
 * relinks every object, and objects are handed out uninitialised). The page map's purge holds
 * rtree_lock over each run, which fork takes, so no page-map page is caught mid-purge. */
void meta_postfork_child(void) {
  for (meta_chunk_t *c = meta_chunks; c; c = c->next) {
    for (size_t i = c->first; i < c->npages; i++) {
      if (c->page[i].state != MP_PURGING) continue;
      c->page[i] = (meta_page_t){.pool = c->page[i].pool};
      map_set(c->unused, i);
      meta_pool_bytes -= os_page;
    }
  }
  meta_purge_running = false;
}

size_t meta_purge(void) {
  if (__atomic_exchange_n(&meta_purge_running, true, __ATOMIC_ACQUIRE)) return 0;
  size_t n = pool_purge() + rtree_purge();
  __atomic_store_n(&meta_purge_running, false, __ATOMIC_RELEASE);
  return n;
}

/* ---------------------------------------------------------------- an arena's own metadata */
/*
 * An arena created with extent hooks and metadata_use_hooks (jemalloc's default for
 * arenas.create with hooks and for experimental.arenas_create_ext) takes its extent
 * descriptors and slab bitmaps from blocks its alloc hook supplies, as jemalloc's
 * per-arena base does, and arena.<i>.destroy gives the blocks back through the hooks.
 * The first block is taken when the arena is created (a hook that cannot supply it fails
 * the creation) and holds the meta_base_t; objects are bumped from the newest block and
 * kept on per-pool free lists, so an address that held an edata only ever holds an edata
 * until the block goes (see first_unused for why). Nothing is purged before destroy: the
 * memory is the program's. Guarded by the arena's mlock, a leaf taken under its bin locks
 * and its elock; the hook is called with mlock held (jemalloc calls it under its base
 * mutex), the thread in_hook as for every hook.
 */
#define MB_FIRST ((size_t)64 << 10) /* first block: the header and some 800 descriptors (80 B) */
#define MB_MAX META_BLOCK          /* blocks double up to this, as jemalloc's base grows */

typedef struct meta_hblock_s meta_hblock_t;
struct meta_hblock_s {
  meta_hblock_t *next; /* newest first; the first block (holding the base) last */
  size_t size;
};

struct meta_base_s {
  extent_hooks_t *hooks; /* the hooks at creation: later arena.<i>.extent_hooks writes do not move it */
  meta_hblock_t *blocks;
  char *cur;
  size_t left, next_size;
  void *free[META_NPOOLS]; /* free objects by pool, linked through their first word */
};

/* A block of at least size bytes from the hooks, committed; NULL if the hook fails. */
static meta_hblock_t *mb_block(arena_t *a, extent_hooks_t *h, size_t size) {
  bool zero = true, commit = true;
  void *p = ehooks_alloc(a, h, size, os_page, &zero, &commit);
  if (p == NULL) return NULL;
  if (!commit && ehooks_commit(a, h, p, size)) {
    if (ehooks_dalloc(a, h, p, size, false)) ehooks_destroy(a, h, p, size, false);
    return NULL;
  }
  meta_hblock_t *b = p;
  b->next = NULL;
  b->size = size;
  __atomic_fetch_add(&meta_hooked_bytes, size, __ATOMIC_RELAXED);
  return b;
}

/* jemalloc's base_unmap: dalloc, else decommit, else purge_forced, else purge_lazy; the
 * first that succeeds ends it, and if none does the pages stay the program's. */
static void mb_unmap(arena_t *a, extent_hooks_t *h, meta_hblock_t *b) {
  size_t size = b->size;
  __atomic_fetch_sub(&meta_hooked_bytes, size, __ATOMIC_RELAXED);
  if (!ehooks_dalloc(a, h, b, size, true)) return;
  if (!ehooks_decommit(a, h, b, size)) return;
  if (!ehooks_purge_forced(a, h, b, size)) return;
  (void)ehooks_purge_lazy(a, h, b, size);
}

meta_base_t *meta_base_new(arena_t *a, extent_hooks_t *h) {
  meta_hblock_t *b = mb_block(a, h, MB_FIRST);
  if (b == NULL) return NULL;
  size_t hdr = (sizeof(meta_hblock_t) + sizeof(meta_base_t) + 63) & ~(size_t)63;
  meta_base_t *mb = (meta_base_t *)(b + 1);
  memset(mb, 0, sizeof(*mb));
  mb->hooks = h;
  mb->blocks = b;
  mb->cur = (char *)b + hdr;
  mb->left = MB_FIRST - hdr;
  mb->next_size = MB_FIRST * 2;
  return mb;
}

/* mlock held: one object of the pool, from its free list or bumped; NULL if the hook
 * cannot supply a new block. */
static void *mb_obj(arena_t *a, meta_base_t *mb, unsigned pool) {
  void *o = mb->free[pool];
  if (o != NULL) {
    mb->free[pool] = *(void **)o;
    return o;
  }
  size_t size = meta_pools[pool].size; /* a multiple of 16: objects stay 16-byte aligned */
  if (mb->left < size) {
    meta_hblock_t *b = mb_block(a, mb->hooks, mb->next_size);
    if (b == NULL) return NULL;
    b->next = mb->blocks;
    mb->blocks = b;
    mb->cur = (char *)b + ((sizeof(*b) + 63) & ~(size_t)63);
    mb->left = b->size - (size_t)(mb->cur - (char *)b);
    if (mb->next_size < MB_MAX) mb->next_size *= 2;
  }
  o = mb->cur;
  mb->cur += size;
  mb->left -= size;
  return o;
}

unsigned meta_base_get(arena_t *a, unsigned pool, void **out, unsigned n) {
  mtx_lock(&a->mlock);
  meta_base_t *mb = a->mbase;
  unsigned got = 0;
  while (got < n && (out[got] = mb_obj(a, mb, pool)) != NULL) got++;
  mtx_unlock(&a->mlock);
  return got;
}

void meta_base_put(arena_t *a, unsigned pool, void *const *objs, unsigned n) {
  mtx_lock(&a->mlock);
  meta_base_t *mb = a->mbase;
  for (unsigned k = 0; k < n; k++) {
    *(void **)objs[k] = mb->free[pool];
    mb->free[pool] = objs[k];
  }
  mtx_unlock(&a->mlock);
}

/* No lock: a destroyed arena's base, already detached from it (arenas_user.c). Another
 * arena's thread may have read one of its descriptors through a stale page-map entry
 * (extent.c, mergeable: always under that arena's elock), so every other arena's elock is
 * taken once before the blocks go back: a reader that saw an entry of this arena has
 * finished with it, and the entries are gone from the page map. */
void meta_base_delete(arena_t *a, meta_base_t *mb) {
  unsigned n = __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE);
  for (unsigned i = 0; i < n; i++) {
    arena_t *o = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (o == NULL || o == a) continue;
    mtx_lock(&o->elock);
    mtx_unlock(&o->elock);
  }
  extent_hooks_t *h = mb->hooks;
  meta_hblock_t *b = mb->blocks; /* the first block, which holds mb, comes last */
  while (b != NULL) {
    meta_hblock_t *next = b->next;
    mb_unmap(a, h, b);
    b = next;
  }
}

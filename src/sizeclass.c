/*
 * sizeclass.c - size classes (jemalloc's spacing), the size -> class lookup table, the
 * slab geometry of each small class, and the page-count buckets of free extents.
 */
#include "internal.h"

uint8_t sz_lookup[(SZ_LOOKUP_MAX >> 3) + 1];
uint8_t sz_lookup_k[SZ_LOOKUP_K_MAX >> 10]; /* [(size - 1) >> 10], size in (SZ_LOOKUP_MAX, 32 KiB] */
uint8_t psz_floor_tab[PSZ_TAB_N], psz_ceil_tab[PSZ_TAB_N];
uint16_t sz_malloc_lookup[SZ_MALLOC_FAST_MAX + 1];
uint64_t sz_link_mask[TCACHE_NBINS_MAX];
uint8_t sz_prof_ind[(SZ_LOOKUP_MAX >> 3) + 1];
size_t sz_size[SZ_NCLASSES + 1];
bin_info_t bin_info[SZ_NSMALL + 1];

/* Smallest slab: 16 KiB keeps per-slab metadata (edata + bitmap) near 1% for 16..128 B
 * objects; a slab grows (up to 16 of them) until the tail waste is under 1/64. */
#define SLAB_MIN ((size_t)16 << 10)
#define SLAB_MAX_MULT 16
/* Classes up to 128 B start at 64 KiB: one 80-byte edata per 16 KiB cost 0.5% of RSS
 * for 32-48 B objects, the largest out-of-band overhead left (Redis with 1M small keys,
 * strata bench's redis_frag: 0.5 MiB of 128 MiB, which put strata behind mimalloc).
 * Pages of a slab are touched only as its regions are handed out. */
#define SLAB_MIN_TINY ((size_t)64 << 10)
#define SLAB_TINY_MAX ((size_t)128)
/* The busy geometry (slab_new, docs/design.md "Size classes and slab geometry"): classes
 * up to SLAB_BIG_CLASS_MAX take k usual slabs in one, k as large as SLAB_BIG_MAX and their
 * bitmap block allow. 96 KiB: wl_halffree 332 M instructions (64 KiB: 343 M), peak RSS
 * 1.07x glibc's (128 KiB: 1.1x); classes of 5-14 KiB (2-4 regions) raised wl_frag's peak
 * RSS 0.9%. */
#define SLAB_BIG_MAX ((size_t)96 << 10)
#define SLAB_BIG_CLASS_MAX ((size_t)4096)

/* Classes 1..9: 8, 16, 32, ..., 128; then 4 per doubling: base + k * base/4. */
static size_t class_size(szind_t ind) {
  if (ind == 1) return 8;
  if (ind <= 9) return (size_t)(ind - 1) * 16;
  unsigned lg = 7 + (ind - 10) / 4, k = (ind - 10) % 4 + 1;
  return ((size_t)1 << lg) + (size_t)k * ((size_t)1 << (lg - 2));
}

szind_t sz_size2index_compute(size_t size) {
  /* The thread caches' large classes (14-32 KiB) by the 1 KiB table: the computation below
   * took ~28 instructions on every miss of their bins (wl_xthread). */
  if (size > SZ_LOOKUP_MAX && size <= SZ_LOOKUP_K_MAX) return sz_lookup_k[(size - 1) >> 10];
  if (size <= 8 && opt.tiny_class) return SZ_TINY_IND;
  if (size <= 16) return SZ_MIN_IND;
  if (size <= 128) return (szind_t)((size + 15) >> 4) + 1;
  if (size > SZ_MAX) return 0;
  unsigned lg = 63 - (unsigned)__builtin_clzll(size - 1); /* size in (2^lg, 2^(lg+1)] */
  size_t delta = (size_t)1 << (lg - 2);
  unsigned k = (unsigned)((size - ((size_t)1 << lg) + delta - 1) >> (lg - 2));
  return 10 + (lg - 7) * 4 + k - 1;
}

size_t sz_sa2u(size_t size, size_t align) {
  if (size > SZ_MAX || align > SZ_MAX) return 0;
  if (align <= 8) align = 1;
  szind_t ind = sz_size2index(size ? size : 1);
  if (ind == 0 || ind > SZ_NCLASSES) return 0;
  if (align <= os_page) {
    /* A class whose size is a multiple of align is naturally aligned in its slab. */
    for (szind_t i = ind; i <= SZ_NSMALL; i++) {
      if ((sz_size[i] & (align - 1)) == 0) return sz_size[i];
    }
    if (ind <= SZ_NSMALL) ind = SZ_NSMALL + 1;
    return sz_size[ind];
  }
  /* Larger alignments: a page extent of the class, carved aligned out of a bigger one. */
  if (ind <= SZ_NSMALL) ind = SZ_NSMALL + 1;
  return sz_size[ind];
}

/* A slab size for regions of size: the first multiple of the page from minp to maxp pages
 * whose tail waste is under 1/64, else the one that wastes least; 0 if the range is empty. */
static size_t slab_fit(size_t size, size_t minp, size_t maxp) {
  size_t best = 0, best_waste = (size_t)-1;
  for (size_t p = minp; p <= maxp; p++) {
    size_t bytes = p * os_page, waste = bytes % size;
    if (waste < best_waste) {
      best = bytes;
      best_waste = waste;
    }
    if (waste * 64 <= bytes) break;
  }
  return best;
}

/* slab_sizes (jemalloc's option): the usual slab of a class in a range gets that many pages,
 * clamped as jemalloc clamps them (sc.c): at least the pages one region needs, at most what
 * the slab bitmap holds (8,192 regions: slab.c's largest bitmap block, jemalloc's
 * BITMAP_MAXBITS plays that part) and what free()'s region-start test is exact for. The
 * crowded and busy geometries follow from the usual one as without the option. */
static size_t slab_sizes_apply(size_t size, size_t best) {
  for (unsigned r = 0; r < opt.n_slab_sizes; r++) {
    if (size < opt.slab_sizes[r].begin || size > opt.slab_sizes[r].end) continue;
    size_t minp = (size + os_page - 1) / os_page, maxp = 8192 * size / os_page;
    while (maxp > minp && ((uint64_t)(maxp * os_page + size) * size >= ((uint64_t)1 << 32) ||
                           maxp * os_page / size > 8192))
      maxp--;
    size_t pg = opt.slab_sizes[r].pages < minp ? minp : opt.slab_sizes[r].pages > maxp ? maxp : opt.slab_sizes[r].pages;
    best = pg * os_page;
  }
  return best;
}

void sz_init(void) {
  for (szind_t i = 1; i <= SZ_NCLASSES; i++) sz_size[i] = class_size(i);
  /* The tables by walking the classes and buckets once (the smallest class that holds s;
   * the buckets around n pages), not a computation per entry: startup is every program's. */
  szind_t c = opt.tiny_class ? SZ_TINY_IND : SZ_MIN_IND; /* sizes 0..8 */
  for (size_t s = 0; s <= SZ_LOOKUP_MAX; s += 8) {
    while (sz_size[c] < s) c++;
    __atomic_store_n(&sz_lookup[s >> 3], (uint8_t)c, __ATOMIC_RELAXED);
    /* prof:true (prof_boot ran first) leaves malloc's copy all 0: see sz_malloc_lookup.
     * malloc_prof's own copy is filled whatever prof says: a tracer can turn the sampler
     * on at run time (prof.c, prof_trace_switch). */
    for (size_t b = s < 8 ? 0 : s - 7; b <= s; b++)
      __atomic_store_n(&sz_malloc_lookup[b], prof_on ? 0 : (uint16_t)(c * TBIN_SIZE), __ATOMIC_RELAXED);
    __atomic_store_n(&sz_prof_ind[s >> 3], (uint8_t)c, __ATOMIC_RELAXED);
  }
  for (size_t b = SZ_LOOKUP_MAX + 1; b <= SZ_MALLOC_FAST_MAX; b++) /* malloc's copy goes on */
    __atomic_store_n(&sz_malloc_lookup[b], prof_on ? 0 : (uint16_t)(SZ_MALLOC_FAST_IND * TBIN_SIZE),
                     __ATOMIC_RELAXED);
  for (size_t k = SZ_LOOKUP_MAX >> 10; k < (SZ_LOOKUP_K_MAX >> 10); k++) { /* (k KiB, k+1 KiB] */
    while (sz_size[c] < (k + 1) << 10) c++;
    sz_lookup_k[k] = (uint8_t)c;
  }
  malloc_prof_on = prof_on;
  __atomic_store_n(&malloc_divert, prof_on, __ATOMIC_RELEASE); /* malloc_slow to malloc_prof */
  _Static_assert(PSZ_N <= 256 && PSZ_TAB_N < 4096, "psz tables hold bucket indices in a byte");
  unsigned b = 0;
  for (size_t n = 0; n < PSZ_TAB_N; n++) {
    while (psz_pages(b) < n) b++; /* the smallest bucket whose pages reach n */
    psz_ceil_tab[n] = (uint8_t)b;
    psz_floor_tab[n] = (uint8_t)(psz_pages(b) > n && b > 0 ? b - 1 : b);
  }
  for (szind_t i = 1; i <= SZ_NSMALL; i++) {
    size_t size = sz_size[i];
    size_t smin = size <= SLAB_TINY_MAX ? SLAB_MIN_TINY : SLAB_MIN;
    size_t minp = smin > os_page ? smin / os_page : 1;
    size_t best = slab_fit(size, minp, minp * SLAB_MAX_MULT);
    best = slab_sizes_apply(size, best);
    bin_info_t *bi = &bin_info[i];
    bi->size = size;
    bi->slab_size = best;
    bi->nregs = (uint32_t)(best / size);
    if (bi->nregs > UINT16_MAX) strata_fatal("slab geometry: more regions than edata_t.nfree holds");
    bi->bm_words = (bi->nregs + 63) / 64;
    bi->div_magic = (((uint64_t)1 << 32) + size - 1) / size;
    /* The crowded geometry: from the first page multiple that holds a region up, never
     * more than the usual slab (slab_new). */
    size_t minc = (size + os_page - 1) / os_page, maxc = best / os_page;
    size_t cbest = slab_fit(size, minc, maxc < SLAB_MAX_MULT ? maxc : SLAB_MAX_MULT);
    bi->slab_size_crowd = cbest ? cbest : best;
    bi->nregs_crowd = (uint32_t)(bi->slab_size_crowd / size);
    bi->used = (uint64_t)bi->nregs * size;
    bi->used_crowd = (uint64_t)bi->nregs_crowd * size;
    bi->pow2 = (size & (size - 1)) == 0 && size <= os_page;
    /* The busy geometry: one pool serves every geometry of a class, so the bitmap block
     * of the usual one bounds k (classes of up to 64 regions: 16-byte blocks hold 128).
     * Its regions are as many as fit (k usual slabs' tails can hold one: 448 B, 896 B),
     * so that its tail, like every geometry's, is shorter than a region: slab_last then
     * bounds the region starts exactly, and a free into the tail is caught. */
    size_t k = SLAB_BIG_MAX / best, bits = slab_bitmap_block(i) * 8;
    if (size > SLAB_BIG_CLASS_MAX) k = 1;
    while (k > 1 && best * k / size > bits) k--;
    if (k < 2) k = 1;
    bi->slab_size_big = best * k;
    bi->nregs_big = (uint32_t)(bi->slab_size_big / size);
    bi->used_big = (uint64_t)bi->nregs_big * size;
    bi->bm_words = (bi->nregs_big + 63) / 64;
    /* free()'s region-start test (rtree_chk) is exact while (slab bytes + size) x size
     * < 2^32 (Lemire: q x e + (d - 1) x c must not wrap): 14 KiB regions in 256 KiB slabs. */
    size_t smax = bi->slab_size_big > bi->slab_size ? bi->slab_size_big : bi->slab_size;
    if ((uint64_t)(smax + size) * size >= ((uint64_t)1 << 32))
      strata_fatal("slab geometry: a slab too large for free()'s region-start test");
  }
  /* Links: canonical and aligned as their class's regions are (natural alignment, capped
   * at a page: slab regions and large blocks both). */
  for (szind_t i = 1; i < TCACHE_NBINS_MAX; i++) {
    size_t nat = sz_size[i] & -sz_size[i];
    if (nat > os_page) nat = os_page;
    sz_link_mask[i] = ~(((uint64_t)1 << 47) - 1) | (nat - 1);
  }
  sz_link_mask[0] = ~(((uint64_t)1 << 47) - 1);
}

/* Page-count buckets: 1, 2, 3, 4, then 4 per doubling (5..8, 10..16, 20..32, ...). */
size_t psz_pages(unsigned idx) {
  if (idx < 4) return idx + 1;
  unsigned lg = 2 + (idx - 4) / 4, k = (idx - 4) % 4 + 1;
  return ((size_t)1 << lg) + (size_t)k * ((size_t)1 << (lg - 2));
}

unsigned psz_ceil(size_t n) {
  if (n <= 4) return n ? (unsigned)n - 1 : 0;
  unsigned lg = 63 - (unsigned)__builtin_clzll(n - 1);
  size_t delta = (size_t)1 << (lg - 2);
  unsigned k = (unsigned)((n - ((size_t)1 << lg) + delta - 1) >> (lg - 2));
  unsigned idx = 4 + (lg - 2) * 4 + k - 1;
  return idx < PSZ_N ? idx : PSZ_N - 1;
}

unsigned psz_floor(size_t n) {
  unsigned c = psz_ceil(n);
  if (psz_pages(c) > n && c > 0) c--;
  return c;
}

/* malloc's size table is emptied (every malloc to malloc_slow, which sees malloc_divert)
 * for two reasons: allocation hooks are installed (hooks.c), or malloc_prof samples
 * (prof:true from the start, or a tracer attached to otel_memory:alloc: prof.c,
 * prof_trace_switch). Each sets its own reason under divert_lock; the table is refilled
 * only when neither holds. */
bool malloc_divert;
bool malloc_prof_on;
static bool divert_hooks;
static mtx_t divert_lock = MTX_INITIALIZER;

static void malloc_table_apply(void) {
  bool divert = divert_hooks || malloc_prof_on;
  for (size_t s = 0; s <= SZ_MALLOC_FAST_MAX; s++) {
    /* malloc's table holds the bin's byte offset (class x TBIN_SIZE), as sz_init writes it */
    szind_t c = divert ? 0 : s <= SZ_LOOKUP_MAX ? sz_lookup[(s + 7) >> 3] : SZ_MALLOC_FAST_IND;
    __atomic_store_n(&sz_malloc_lookup[s], (uint16_t)(c * TBIN_SIZE), __ATOMIC_RELAXED);
  }
  __atomic_store_n(&malloc_divert, divert, __ATOMIC_RELEASE);
}

void sz_malloc_divert(bool divert) {
  mtx_lock(&divert_lock);
  divert_hooks = divert;
  malloc_table_apply();
  mtx_unlock(&divert_lock);
}

/* malloc_prof_on is set before the table changes: a malloc that misses meanwhile goes to
 * malloc_prof or to malloc_general, both right (malloc_prof's class table, sz_prof_ind,
 * is always filled). */
void sz_malloc_prof(bool on) {
  mtx_lock(&divert_lock);
  __atomic_store_n(&malloc_prof_on, on, __ATOMIC_RELEASE);
  malloc_table_apply();
  mtx_unlock(&divert_lock);
}

/* A fork while another thread changed the table: the child's only thread sets it whole. */
void sz_postfork_child(void) {
  mtx_init(&divert_lock);
  malloc_table_apply();
}

/*
 * slab.c - slabs and bins: a slab is an extent cut into equal regions with a bitmap
 * (1 = free) kept outside the slab so regions stay naturally aligned. Each arena has a
 * bin per small class with its own lock; a bin serves regions from its current slab,
 * then from its non-full slabs lowest address first, and keeps one empty slab spare so
 * bursts do not bounce slabs to the extent layer. Fills and flushes come in batches.
 */
#include <string.h>

#include "internal.h"

static void bitmap_init(uint64_t *bm, const bin_info_t *bi) {
  for (uint32_t w = 0; w < bi->bm_words; w++) bm[w] = ~(uint64_t)0;
  uint32_t tail = bi->nregs % 64;
  if (tail) bm[bi->bm_words - 1] = ((uint64_t)1 << tail) - 1;
}

/* bin lock held; takes the arena's elock inside (lock order bin -> elock). */
static edata_t *slab_new(arena_t *a, bin_t *bin, szind_t ind) {
  const bin_info_t *bi = &bin_info[ind];
  uint64_t *bm = bin->bitmap_free;
  if (bm) {
    bin->bitmap_free = *(void **)bm;
  } else if ((bm = meta_alloc(bi->bm_words * sizeof(uint64_t))) == NULL) {
    return NULL;
  }
  mtx_lock(&a->elock);
  edata_t *s = extent_alloc(a, bi->slab_size, os_page);
  if (s) {
    s->slab = 1;
    s->szind = (uint16_t)ind;
    extent_register(s, ind, true);
  }
  mtx_unlock(&a->elock);
  if (s == NULL) {
    *(void **)bm = bin->bitmap_free;
    bin->bitmap_free = bm;
    return NULL;
  }
  bitmap_init(bm, bi);
  s->bitmap = bm;
  s->nfree = bi->nregs;
  s->bm_hint = 0;
  bin->curslabs++;
  return s;
}

/* bin lock held. */
static void slab_release(arena_t *a, bin_t *bin, edata_t *s) {
  *(void **)s->bitmap = bin->bitmap_free;
  bin->bitmap_free = s->bitmap;
  s->bitmap = NULL;
  bin->curslabs--;
  mtx_lock(&a->elock);
  extent_deregister_interior(s);
  extent_dalloc(a, s);
  mtx_unlock(&a->elock);
}

static inline void *slab_take(edata_t *s, const bin_info_t *bi) {
  unsigned w = s->bm_hint;
  while (s->bitmap[w] == 0) w++;
  uint64_t word = s->bitmap[w];
  unsigned bit = (unsigned)__builtin_ctzll(word);
  s->bitmap[w] = word & (word - 1);
  s->bm_hint = (uint16_t)w;
  s->nfree--;
  return (void *)(s->addr + ((size_t)w * 64 + bit) * bi->size);
}

/* The next slab to serve from: lowest non-full, else the spare, else a new one. */
static edata_t *bin_next_slab(arena_t *a, bin_t *bin, szind_t ind) {
  edata_t *s;
  if (bin->nonfull) {
    s = ph_edata(bin->nonfull);
    ph_remove(&bin->nonfull, bin->nonfull);
  } else if (bin->spare) {
    s = bin->spare;
    bin->spare = NULL;
  } else {
    s = slab_new(a, bin, ind);
  }
  bin->cur = s;
  return s;
}

unsigned bin_fill_list(arena_t *a, szind_t ind, void **head, unsigned n) {
  const bin_info_t *bi = &bin_info[ind];
  const size_t size = bi->size;
  bin_t *bin = &a->bins[ind];
  void **tail = head;
  unsigned got = 0;
  mtx_lock(&bin->lock);
  while (got < n) {
    edata_t *s = bin->cur;
    if (s == NULL || s->nfree == 0) {
      s = bin_next_slab(a, bin, ind);
      if (s == NULL) break;
    }
    sassert(s->slab && s->szind == ind && s->nfree <= bi->nregs);
    unsigned take = n - got < s->nfree ? n - got : s->nfree;
    s->nfree -= take;
    got += take;
    /* Take set bits a word at a time: lowest regions first. */
    uint64_t *bm = s->bitmap;
    unsigned w = s->bm_hint;
    while (take) {
      while (bm[w] == 0) w++;
      uint64_t word = bm[w];
      uintptr_t wbase = s->addr + (size_t)w * 64 * size;
      do {
        void *r = (void *)(wbase + (size_t)__builtin_ctzll(word) * size);
        word &= word - 1;
        *tail = r;
        tail = (void **)r;
      } while (--take && word);
      bm[w] = word;
    }
    s->bm_hint = (uint16_t)w;
  }
  *tail = NULL;
  bin->curregs += got;
  bin->nmalloc += got;
  bin->nfills++;
  mtx_unlock(&bin->lock);
  return got;
}

unsigned bin_fill(arena_t *a, szind_t ind, void **out, unsigned n) {
  void *head;
  unsigned got = bin_fill_list(a, ind, &head, n);
  for (unsigned i = 0; i < got; i++) {
    out[i] = head;
    head = *(void **)head;
  }
  return got;
}

/* A slab whose free count just changed: move it between untracked (full), the nonfull
 * heap, and the spare/extents (empty). bin lock held. */
static void slab_note_free(arena_t *a, bin_t *bin, const bin_info_t *bi, edata_t *s, uint32_t before) {
  if (s == bin->cur) return;
  if (s->nfree == bi->nregs) {
    if (before > 0) ph_remove(&bin->nonfull, &s->ph);
    if (bin->spare == NULL) {
      bin->spare = s;
    } else {
      slab_release(a, bin, s);
    }
  } else if (before == 0) {
    ph_insert(&bin->nonfull, &s->ph);
  }
}

/* Return runs of regions to their slabs. Detects pointers not at a region start and
 * regions already free: both are reported with the address before aborting. The
 * per-region work is the bitmap; the slab's state changes once per run. */
void bin_dalloc_runs(arena_t *a, szind_t ind, void **ptrs, slab_run_t *runs, unsigned nruns) {
  const bin_info_t *bi = &bin_info[ind];
  const uint64_t magic = bi->div_magic, size = bi->size, nregs = bi->nregs;
  bin_t *bin = &a->bins[ind];
  size_t n = 0;
  mtx_lock(&bin->lock);
  for (unsigned r = 0; r < nruns; r++) {
    edata_t *s = runs[r].slab;
    if (s == NULL || s->arena_ind != a->ind) continue;
    runs[r].slab = NULL;
    uintptr_t base = s->addr;
    uint64_t *bm = s->bitmap;
    void **p = &ptrs[runs[r].start], **end = p + runs[r].len;
    for (; p < end; p++) {
      uint64_t diff = (uintptr_t)*p - base;
      uint64_t regind = (diff * magic) >> 32;
      uint64_t bit = (uint64_t)1 << (regind % 64);
      if (unlikely(regind * size != diff || regind >= nregs || (bm[regind / 64] & bit))) {
        mtx_unlock(&bin->lock);
        strata_invalid_free("free", *p);
      }
      bm[regind / 64] |= bit;
    }
    uint32_t before = s->nfree;
    s->nfree += runs[r].len;
    sassert(s->nfree <= nregs && s->slab && s->szind == ind);
    s->bm_hint = 0; /* the next fill scans from the first word: bounded by bm_words */
    n += runs[r].len;
    slab_note_free(a, bin, bi, s, before);
  }
  bin->curregs -= n;
  bin->ndalloc += n;
  bin->nflushes++;
  mtx_unlock(&bin->lock);
  arena_maybe_purge(a);
}

void bin_dalloc_batch(arena_t *a, szind_t ind, void **ptrs, edata_t **eds, unsigned n) {
  slab_run_t runs[256];
  unsigned nruns = 0;
  for (unsigned i = 0; i < n; i++) {
    if (nruns > 0 && runs[nruns - 1].slab == eds[i]) {
      runs[nruns - 1].len++;
      continue;
    }
    if (nruns == 256) {
      bin_dalloc_runs(a, ind, ptrs, runs, nruns);
      nruns = 0;
    }
    runs[nruns++] = (slab_run_t){eds[i], i, 1};
  }
  bin_dalloc_runs(a, ind, ptrs, runs, nruns);
}

/* malloc_trim: give back the spare slab, and the current one if it is empty too. */
void bin_release_spare(arena_t *a, szind_t ind) {
  bin_t *bin = &a->bins[ind];
  mtx_lock(&bin->lock);
  edata_t *s = bin->spare;
  bin->spare = NULL;
  if (s) slab_release(a, bin, s);
  s = bin->cur;
  if (s && s->nfree == bin_info[ind].nregs) {
    bin->cur = NULL;
    slab_release(a, bin, s);
  }
  mtx_unlock(&bin->lock);
  arena_maybe_purge(a);
}

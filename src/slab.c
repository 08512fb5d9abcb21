/*
 * slab.c - slabs and bins: a slab is an extent cut into equal regions with a bitmap
 * (1 = free) kept outside the slab so regions stay naturally aligned. Each arena has a
 * bin per small class with its own lock; a bin serves regions from its current slab,
 * then from its non-full slabs lowest address first, and keeps one empty slab spare so
 * bursts do not bounce slabs to the extent layer. Fills and flushes come in batches.
 */
#include <string.h>

#include "internal.h"

_Static_assert(SZ_NSMALL < 64, "arena_t.bins_used has a bit per small class");

bool slab_bitmap_test_fail; /* unit tests: the pools cannot give a bitmap back */

/* Bitmaps come from the metadata pools (meta.c), one pool per block size 16, 32, 48, 64,
 * 96, 128, ..., 768, 1024 bytes (2^k and 3 x 2^(k-1); 1024: 8192 regions, the 8-byte
 * class's 64 KiB slab), so that they are returned after a peak. Power-of-two blocks alone
 * put the 48-byte class's 176-byte bitmaps in 256 bytes: after Redis deleted half of its
 * small keys (every slab partly free, so every slab holding a bitmap) that was 57 KiB of
 * 426; a block now wastes under a third, that one 16 bytes. */
unsigned slab_bitmap_pool(szind_t ind) {
  size_t bytes = bin_info[ind].bm_words * sizeof(uint64_t);
  if (bytes <= 32) return META_POOL_BITMAP0 + (bytes > 16);
  unsigned lg = 63 - (unsigned)__builtin_clzll(bytes - 1); /* 2^lg < bytes <= 2^(lg+1) */
  return META_POOL_BITMAP0 + 2 * lg - (bytes <= ((size_t)3 << (lg - 1)) ? 8 : 7);
}

/* The block size of bitmap pool META_POOL_BITMAP0 + i. */
static size_t bitmap_block(unsigned i) {
  if (i == 0) return 16;
  return i % 2 ? (size_t)32 << (i - 1) / 2 : (size_t)48 << (i - 2) / 2;
}

size_t slab_bitmap_block(szind_t ind) { return bitmap_block(slab_bitmap_pool(ind) - META_POOL_BITMAP0); }

/* slab_bitmap_pool by class, for the fill and free paths: one load. */
static uint8_t bitmap_pool_of[SZ_NSMALL + 1];
static inline unsigned bitmap_pool(szind_t ind) { return bitmap_pool_of[ind]; }

void slab_boot(void) {
  for (unsigned p = 0; META_POOL_BITMAP0 + p < META_NPOOLS; p++) meta_pool_init(META_POOL_BITMAP0 + p, bitmap_block(p));
  for (szind_t i = 1; i <= SZ_NSMALL; i++) {
    if (slab_bitmap_pool(i) >= META_NPOOLS) strata_assert_fail("slab bitmap over 1 KiB", __FILE__, __LINE__);
    bitmap_pool_of[i] = (uint8_t)slab_bitmap_pool(i);
  }
}

void bitmap_free(arena_t *a, szind_t ind, uint64_t *bm) {
  if (bm == NULL) return; /* a full slab's, dropped (slab_bitmap_drop) */
  void *p = bm;
  arena_meta_put(a, bitmap_pool(ind), &p, 1);
}

/*
 * A full slab needs no bitmap (it would be all zeros): the fill that takes its last
 * region gives the bitmap to the bin's empty bm_spare, which the next new slab takes,
 * and the first free into the slab takes one again (the spare, else the pool), zeroed.
 * A heap of small objects that stays allocated (Redis's keys) then holds bitmaps only for
 * its partly used slabs: 1 bit per region, 369 KiB for 3 million regions (docs/design.md,
 * "Metadata"). Only into an empty spare, never to the pool: with slabs that
 * keep filling up and getting frees (wl_server), dropping every time cost 0.7% of the
 * instructions in meta pool traffic. Invariant: s->bitmap == NULL only while
 * s->nfree == 0. bin lock held.
 */
static void slab_bitmap_drop(bin_t *bin, edata_t *s) {
  sassert(s->nfree == 0);
  if (bin->bm_spare != NULL) return;
  bin->bm_spare = s->bitmap;
  s->bitmap = NULL;
}

/* The bitmap of a full slab that had dropped it, every region taken; NULL if the pools
 * cannot grow (out of memory: the caller keeps the regions on a remote chain). */
static uint64_t *slab_bitmap_regain(arena_t *a, bin_t *bin, szind_t ind, edata_t *s) {
  void *bm = bin->bm_spare;
  bin->bm_spare = NULL;
  if (bm == NULL && (slab_bitmap_test_fail || arena_meta_get(a, bitmap_pool(ind), &bm, 1) == 0)) return NULL;
  memset(bm, 0, bin_info[ind].bm_words * sizeof(uint64_t));
  s->bitmap = bm;
  return bm;
}

/* nregs bits set; a crowded slab's bitmap is its class's size, the words past its
 * regions zero (no free region there). */
static void bitmap_init(uint64_t *bm, const bin_info_t *bi, uint32_t nregs) {
  uint32_t full = nregs / 64, tail = nregs % 64, w = 0;
  for (; w < full; w++) bm[w] = ~(uint64_t)0;
  if (tail) bm[w++] = ((uint64_t)1 << tail) - 1;
  for (; w < bi->bm_words; w++) bm[w] = 0;
}

/* Crowded thread caches (tcache_crowd: more than tcache_crowd_nlive live) mean many
 * threads spread over every arena, each arena's bins holding a current slab of every class
 * its threads use with a few regions taken: new slabs of ordinary arenas then take the
 * crowded geometry (a page for the classes up to 128 B instead of 64 KiB, as jemalloc's).
 * docs/design.md, "Size classes and slab geometry".
 * A bin that has made SLAB_BIG_AFTER slabs in a row with none of its class freed, to it or
 * to the filling thread's cache (cfrees: that cache's ndalloc of the class), while its
 * arena gave back at least half as many slab bytes, is one class's memory passing to
 * another (wl_halffree: a class retired, the next filled): its next slabs take the busy
 * geometry, k usual slabs in one, and so k times fewer round trips through the extents. A bin that only grows, or
 * whose class is freed as it grows (wl_drift's rising types, whose long-lived objects
 * would pin the bigger slabs), keeps the usual one. docs/design.md, "Size classes and slab
 * geometry". */
static inline size_t slab_size_for(const arena_t *a, const bin_t *bin, const bin_info_t *bi, uint64_t cfrees) {
  if (bi->slab_size_crowd != bi->slab_size && !a->user &&
      (__atomic_load_n(&tcache_nlive, __ATOMIC_RELAXED) > tcache_crowd_nlive ||
       __atomic_load_n(&tcache_nthreads_seen, __ATOMIC_RELAXED) > tcache_crowd_nlive))
    return bi->slab_size_crowd;
  if (bin->grow_run >= SLAB_BIG_AFTER && bin->ndalloc == bin->grow_mark &&
      cfrees == bin->grow_cmark &&
      (__atomic_load_n(&a->slab_bytes_released, __ATOMIC_RELAXED) - bin->grow_rel) * 2 >= bin->grow_bytes)
    return bi->slab_size_big;
  return bi->slab_size;
}

/* bin lock held; takes the arena's elock inside (lock order bin -> elock). An arena with
 * extent hooks drops the bin lock around it, as jemalloc allocates slabs: the alloc hook
 * may be slow. A reset meanwhile (gen moved) took the new slab already: NULL then. */
static edata_t *slab_new(arena_t *a, bin_t *bin, szind_t ind) {
  /* The calling thread's cache's frees of the class (its fast path counts them), read
   * here rather than passed down the fill path: slab_size_for's growth run. */
  uint64_t cfrees = ind < TCACHE_NBINS_MAX ? tbin_ndalloc(strata_tsd.tcache, ind) : 0;
  const bin_info_t *bi = &bin_info[ind];
  void *bmp = bin->bm_spare;
  bin->bm_spare = NULL;
  if (bmp == NULL && arena_meta_get(a, bitmap_pool(ind), &bmp, 1) == 0) return NULL;
  uint64_t *bm = bmp;
  /* The 8-byte class's free map (internal.h, tiny_fmap): ordinary arenas' slabs. */
  void *fmp = NULL;
  if (ind == SZ_TINY_IND && !a->user && arena_meta_get(a, bitmap_pool(ind), &fmp, 1) == 0) {
    bitmap_free(a, ind, bm);
    return NULL;
  }
  bool hooked = arena_hooks(a) != NULL;
  uint64_t gen = __atomic_load_n(&a->gen, __ATOMIC_ACQUIRE);
  size_t ssize = slab_size_for(a, bin, bi, cfrees); /* reads the growth run: bin lock held */
  if (hooked) mtx_unlock(&bin->lock);
  mtx_lock(&a->elock);
  edata_t *s = extent_alloc(a, ssize, os_page);
  if (s) {
    s->slab = 1;
    s->szind = (uint16_t)ind;
    s->bitmap = bm; /* before the elock goes: a reset may find the slab */
    if (fmp != NULL) s->lru_prev = fmp;
    /* class 0: free() of a user arena's block skips the caches */
    extent_register(s, a->user ? 0 : ind, true);
  }
  mtx_unlock(&a->elock);
  if (hooked) {
    mtx_lock(&bin->lock);
    if (s != NULL && __atomic_load_n(&a->gen, __ATOMIC_ACQUIRE) != gen) return NULL; /* reset took s, bm */
  }
  if (s == NULL) {
    if (fmp != NULL) bitmap_free(a, ind, fmp);
    if (bin->bm_spare == NULL) {
      bin->bm_spare = bm;
    } else {
      bitmap_free(a, ind, bm);
    }
    return NULL;
  }
  uint32_t nregs = slab_nregs(s, bi);
  bitmap_init(bm, bi, nregs);
  if (fmp != NULL) bitmap_init(fmp, bi, nregs); /* every region free; published by the bin lock */
  s->nfree = (uint16_t)nregs;
  s->bm_hint = 0;
  if (bin->grow_run == 0 || bin->ndalloc != bin->grow_mark || cfrees != bin->grow_cmark) {
    bin->grow_mark = bin->ndalloc;
    bin->grow_cmark = cfrees;
    bin->grow_rel = __atomic_load_n(&a->slab_bytes_released, __ATOMIC_RELAXED);
    bin->grow_run = 0;
    bin->grow_bytes = 0;
  }
  bin->grow_run++;
  bin->grow_bytes += s->size;
  bin->curslabs++;
  if (bin->nslabs++ == 0) __atomic_fetch_or(&a->bins_used, (uint64_t)1 << ind, __ATOMIC_RELEASE);
  return s;
}

/* bin lock held. */
static void slab_release(arena_t *a, bin_t *bin, edata_t *s) {
  if (s->szind == SZ_TINY_IND && !a->user && s->lru_prev != NULL) { /* its free map */
    bitmap_free(a, SZ_TINY_IND, (uint64_t *)(void *)s->lru_prev);
    s->lru_prev = NULL;
  }
  if (bin->bm_spare == NULL) {
    bin->bm_spare = s->bitmap;
  } else {
    bitmap_free(a, s->szind, s->bitmap);
  }
  s->bitmap = NULL;
  bin->curslabs--;
  mtx_lock(&a->elock);
  __atomic_store_n(&a->slab_bytes_released, a->slab_bytes_released + s->size, __ATOMIC_RELAXED);
  extent_deregister_interior(s);
  extent_dalloc(a, s);
  mtx_unlock(&a->elock);
}

/* The next slab to serve from: lowest non-full, else the spare, else a new one. */
static edata_t *bin_next_slab(arena_t *a, bin_t *bin, szind_t ind) {
  edata_t *s;
  if (bin->nonfull) {
    s = ph_edata(bin->nonfull);
    ph_remove(&bin->nonfull, bin->nonfull);
    bin->nonfull_slabs--;
  } else if (bin->spare) {
    s = bin->spare;
    bin->spare = NULL;
  } else {
    s = slab_new(a, bin, ind);
    if (s != NULL && bin->cur != NULL && bin->cur->nfree != 0) {
      /* The bin lock was dropped (hooked arena) and another thread's fill or free left
       * room in the current slab: keep it, the new one waits among the non-full. */
      ph_insert(&bin->nonfull, &s->ph);
      return bin->cur;
    }
  }
  bin->cur = s;
  bin->nreslabs++;
  return s;
}

unsigned bin_fill_list(arena_t *a, szind_t ind, void **head, unsigned n) {
  return bin_fill_list_upto(a, ind, head, n, n, NULL);
}

/* end: the last region's link (NULL, or TBIN_END for a thread-cache bin). */
unsigned bin_fill_list_upto(arena_t *a, szind_t ind, void **head, unsigned n, unsigned nmax, void *end) {
  const bin_info_t *bi = &bin_info[ind];
  const size_t size = bi->size;
  bin_t *bin = &a->bins[ind];
  /* The word the next region's link goes to, and its mask: *head first (a plain
   * pointer, mask 0), then each region's link (mask tcache_key ^ region). */
  const uintptr_t key = tcache_key;
  uintptr_t *link = (uintptr_t *)head, mask = 0;
  unsigned got = 0;
#define FILL_APPEND(r) (*link = (uintptr_t)(r) ^ mask, link = (uintptr_t *)(r), mask = key ^ (uintptr_t)(r))
  arena_tally_wait(mtx_lock(&bin->lock)); /* acquisitions: counted by the caller */
  /* Regions other arenas' threads handed back (already counted as handed out): whole
   * chains in O(1), the last one cut if it is longer than what is still wanted. */
  while (got < n && bin->nrchain) {
    rchain_t *c = &bin->rchain[bin->nrchain - 1];
    FILL_APPEND(c->head);
    if (c->n <= nmax - got) { /* whole chains while they fit under nmax: no cut walk */
      link = (uintptr_t *)c->tail;
      mask = key ^ (uintptr_t)c->tail;
      got += c->n;
      bin->remote_count -= c->n;
      bin->nrchain--;
    } else {
      void *r = c->head;
      for (unsigned i = 1; i < n - got; i++) r = link_next_k(r, key, ind);
      link = (uintptr_t *)r;
      mask = key ^ (uintptr_t)r;
      c->head = link_next_k(r, key, ind);
      c->n -= n - got;
      bin->remote_count -= n - got;
      got = n;
    }
  }
  unsigned from_remote = got;
  bool next_slab = false;
  while (got < n) {
    edata_t *s = bin->cur;
    if (s == NULL || s->nfree == 0) {
      s = bin_next_slab(a, bin, ind);
      next_slab = true;
      if (s == NULL) break;
    }
    sassert(s->slab && s->szind == ind && s->nfree <= slab_nregs(s, bi));
    unsigned take = n - got < s->nfree ? n - got : s->nfree;
    s->nfree -= take;
    got += take;
    bool full = s->nfree == 0;
    /* Take set bits a word at a time: lowest regions first. */
    uint64_t *bm = s->bitmap;
    unsigned w = s->bm_hint;
    while (take) {
      while (bm[w] == 0) w++;
      uint64_t word = bm[w];
      uintptr_t wbase = s->addr + (size_t)w * 64 * size;
      if (((word + (word & -word)) & word) == 0) {
        /* The free bits form one run (a new slab's words, or the rest of one a fill
         * stopped in): its regions by address, no bit scan and no multiply each. */
        uintptr_t r = wbase + (size_t)__builtin_ctzll(word) * size;
        do {
          FILL_APPEND(r);
          r += size;
          word &= word - 1;
        } while (--take && word);
        bm[w] = word;
        continue;
      }
      do {
        void *r = (void *)(wbase + (size_t)__builtin_ctzll(word) * size);
        word &= word - 1;
        FILL_APPEND(r);
      } while (--take && word);
      bm[w] = word;
    }
    s->bm_hint = (uint16_t)w;
    if (full) slab_bitmap_drop(bin, s);
  }
  FILL_APPEND(end);
#undef FILL_APPEND
  bin->curregs += got - from_remote; /* remote regions were never taken off */
  bin->nmalloc += got;
  bin->nfills++;
  mtx_unlock(&bin->lock);
  /* A new slab may have brought the container-limit purge due (limit_check). */
  if (unlikely(next_slab)) arena_maybe_purge(a);
  return got;
}

unsigned bin_fill(arena_t *a, szind_t ind, void **out, unsigned n) {
  void *head;
  unsigned got = bin_fill_list(a, ind, &head, n);
  for (unsigned i = 0; i < got; i++) {
    out[i] = head;
    head = LINK_DEC(head); /* NULL after the last: unused */
  }
  return got;
}

/* A slab whose free count just changed: move it between untracked (full), the nonfull
 * heap, and the spare/extents (empty). bin lock held. */
static void slab_note_free(arena_t *a, bin_t *bin, const bin_info_t *bi, edata_t *s, uint32_t before) {
  if (s == bin->cur) return;
  if (s->nfree == slab_nregs(s, bi)) {
    if (before > 0) {
      ph_remove(&bin->nonfull, &s->ph);
      bin->nonfull_slabs--;
    }
    if (bin->spare == NULL) {
      bin->spare = s;
    } else {
      slab_release(a, bin, s);
    }
  } else if (before == 0) {
    ph_insert(&bin->nonfull, &s->ph);
    bin->nonfull_slabs++;
  }
}

/* len regions linked from head (the last link unset) onto the bin's remote chains. They
 * have nowhere else to go (no bitmap), so past the slots they join the newest chain,
 * where bin_push_remote would send a batch to its bitmaps. bin lock held. */
static void bin_keep_run(bin_t *bin, szind_t ind, void *head, uint32_t len) {
  void *tail = head;
  for (uint32_t k = 1; k < len; k++) tail = link_next(tail, ind);
  if (bin->nrchain < sizeof(bin->rchain) / sizeof(bin->rchain[0])) {
    bin->rchain[bin->nrchain++] = (rchain_t){head, tail, len};
  } else {
    rchain_t *c = &bin->rchain[bin->nrchain - 1];
    LINK_SET(tail, c->head);
    c->head = head;
    c->n += len;
  }
  bin->remote_count += len;
}

/* Return runs of regions to their slabs. Detects pointers not at a region start and
 * regions already free: both are reported with the address before aborting. The
 * per-region work is the bitmap; the slab's state changes once per run. */
static void bin_dalloc_runs_locked(arena_t *a, szind_t ind, slab_run_t *runs, unsigned nruns) {
  const bin_info_t *bi = &bin_info[ind];
  const uint64_t magic = bi->div_magic, size = bi->size;
  const uintptr_t key = tcache_key;
  bin_t *bin = &a->bins[ind];
  size_t n = 0;
  for (unsigned r = 0; r < nruns; r++) {
    edata_t *s = runs[r].slab;
    if (s == NULL || edata_arena_ind(s) != a->ind) continue;
    const uint64_t last = slab_last(s, size);
    runs[r].slab = NULL;
    uintptr_t base = s->addr;
    uint64_t *bm = s->bitmap;
    void *p = runs[r].head;
    if (bm == NULL && (bm = slab_bitmap_regain(a, bin, ind, s)) == NULL) {
      /* No memory for the bitmap: the regions stay handed out (curregs) on a remote
       * chain, which the next fill takes first; a free never fails. */
      bin_keep_run(bin, ind, p, runs[r].len);
      continue;
    }
    for (uint32_t k = runs[r].len; k > 0; k--) {
      void *next = k > 1 ? link_next_k(p, key, ind) : NULL; /* a batch's last link may be unset */
      uint64_t diff = (uintptr_t)p - base;
      uint64_t regind = (diff * magic) >> 32;
      uint64_t bit = (uint64_t)1 << (regind % 64);
      if (unlikely(regind * size != diff || diff > last || (bm[regind / 64] & bit))) {
        mtx_unlock(&bin->lock);
        strata_invalid_free("free", p);
      }
      bm[regind / 64] |= bit;
      p = next;
    }
    uint32_t before = s->nfree;
    s->nfree += runs[r].len;
    sassert(s->nfree <= slab_nregs(s, bi) && s->slab && s->szind == ind);
    s->bm_hint = 0; /* the next fill scans from the first word: bounded by bm_words */
    n += runs[r].len;
    slab_note_free(a, bin, bi, s, before);
  }
  bin->curregs -= n;
  bin->ndalloc += n;
  bin->nflushes++;
}

void bin_dalloc_runs(arena_t *a, szind_t ind, slab_run_t *runs, unsigned nruns) {
  arena_tally(mtx_lock(&a->bins[ind].lock));
  bin_dalloc_runs_locked(a, ind, runs, nruns);
  mtx_unlock(&a->bins[ind].lock);
  arena_maybe_purge(a);
}

/* The walk of bin_flush_local, under the bin lock. Every region is tested for a region
 * start, power-of-two classes too: a cache link overwritten after a free can point into
 * a region, which free()'s alignment test never saw. A region of another arena's slab of
 * this class is set aside on *aside (relinked in the order met; NULL when none): one
 * such region used to send every region behind it down the general path, which cut the
 * batch into runs and walked it a second time (docs/design.md, "Thread caches"). Returns
 * how many regions it took; *pp: the first region it did not walk, or the link after the
 * n-th. */
static inline uint32_t flush_local_walk(arena_t *a, bin_t *bin, szind_t ind, szind_t rt_ind, void **pp, uint32_t n,
                                        void **aside) {
  const bin_info_t *bi = &bin_info[ind];
  const uint64_t magic = bi->div_magic, size = bi->size;
  uint64_t last = 0; /* s's last region start (slab_last); 0 before the first slab */
  const uintptr_t key = tcache_key;
  const unsigned id = a->ind + 1;
  void *p = *pp, *atail = NULL;
  edata_t *s = NULL;
  uint64_t *bm = NULL;
  uintptr_t base = 0;
  uint32_t start = 0, taken = 0; /* s's regions so far: taken - start */
  for (uint32_t walked = 0; walked < n; walked++) {
    uint64_t diff = (uintptr_t)p - base;
    if (unlikely(diff > last)) {
      unsigned field;
      uint64_t e = rtree_read_split((uintptr_t)p, &field);
      edata_t *t = rt_edata(e);
      if (!(e & RT_SLAB) || field != rt_ind * TBIN_SIZE || t == NULL || (uintptr_t)p - t->addr > slab_last(t, size))
        break;
      if (t->arena_id != id) {
        void *next = (void *)(*(const uintptr_t *)p ^ key ^ (uintptr_t)p);
        if (atail != NULL) LINK_SET(atail, p);
        else *aside = p;
        atail = p;
        p = next;
        continue;
      }
      uint64_t *tbm = t->bitmap;
      if (tbm == NULL && (tbm = slab_bitmap_regain(a, bin, ind, t)) == NULL) break;
      if (s != NULL) {
        uint32_t before = s->nfree;
        s->nfree += taken - start;
        s->bm_hint = 0;
        slab_note_free(a, bin, bi, s, before);
      }
      s = t;
      bm = tbm;
      base = t->addr;
      last = slab_last(t, size);
      diff = (uintptr_t)p - base;
      start = taken;
    }
    uint64_t regind = (diff * magic) >> 32, bit = (uint64_t)1 << (regind % 64);
    if (unlikely(regind * size != diff || (bm[regind / 64] & bit))) break;
    bm[regind / 64] |= bit;
    taken++;
    p = (void *)(*(const uintptr_t *)p ^ key ^ (uintptr_t)p); /* checked as the next region, or by the caller */
  }
  if (s != NULL && taken != start) {
    uint32_t before = s->nfree;
    s->nfree += taken - start;
    s->bm_hint = 0;
    slab_note_free(a, bin, bi, s, before);
  }
  if (atail != NULL) LINK_SET(atail, p); /* the set-aside regions lead to the rest */
  *pp = p;
  return taken;
}

/* A thread cache's flush of regions of its own arena, in one walk under the bin lock:
 * each region is checked (a region start of a slab of class rt_ind in the used part) and
 * its bit set as it is met, the page map read once per slab change. Flushes otherwise
 * walked the chain twice, once to cut it into runs (tcache.c, flush_scan) and once to set
 * the bits (bin_dalloc_runs_locked): 50 instructions a region, a third of wl_halffree's
 * allocator time. Other arenas' regions are set aside; the walk stops at the first region
 * it cannot take otherwise (a full slab whose bitmap cannot come back, anything that
 * fails a check). Returns the chain of *left regions the caller's general path takes
 * (routes, and reports what is wrong): the set-aside ones, then the rest from the stop;
 * with *left 0, the link after the n-th. */
void *bin_flush_local(arena_t *a, szind_t ind, szind_t rt_ind, void *p, uint32_t n, uint32_t *left) {
  bin_t *bin = &a->bins[ind];
  *left = n;
  /* A batch that starts in another arena's slab (remote frees) goes the general way
   * without taking this bin's lock; the walk checks again under it. */
  uint64_t e0 = rtree_read_slow((uintptr_t)p);
  if (!(e0 & RT_SLAB) || rt_edata(e0) == NULL || __atomic_load_n(&rt_edata(e0)->arena_id, __ATOMIC_RELAXED) != a->ind + 1)
    return p;
  void *aside = NULL;
  arena_tally(mtx_lock(&bin->lock));
  uint32_t taken = flush_local_walk(a, bin, ind, rt_ind, &p, n, &aside);
  bin->curregs -= taken;
  bin->ndalloc += taken;
  bin->nflushes += taken != 0;
  mtx_unlock(&bin->lock);
  if (taken) arena_maybe_purge(a);
  *left = n - taken;
  return aside ? aside : p;
}

/* Cut the chain at head (n regions) into runs of the same slab; returns the count. */
/* rest: where the region after the n-th goes, read in the same walk (the drain's next
 * piece starts there; a second walk to find it missed the cache again on long chains);
 * NULL when the n-th is the chain's last. */
static unsigned chain_runs(void *head, uint32_t n, szind_t ind, slab_run_t *runs, void **rest) {
  unsigned nruns = 0;
  void *p = head;
  for (; n > 0; n--) {
    edata_t *s = rt_edata(rtree_read_slow((uintptr_t)p));
    if (nruns > 0 && runs[nruns - 1].slab == s) {
      runs[nruns - 1].len++;
    } else {
      runs[nruns++] = (slab_run_t){s, p, 1};
    }
    if (n > 1 || rest) p = link_next(p, ind);
  }
  if (rest) *rest = p;
  return nruns;
}

/* Return every remote region to its slab's bitmap (which re-checks each one), oldest
 * chains first. bin lock held. */
static void bin_drain_remote(arena_t *a, szind_t ind) {
  bin_t *bin = &a->bins[ind];
  /* At most the chains there now: regions whose slab could not get its bitmap back
   * (bin_keep_run) go back on the chains and must not be drained again in this call. */
  for (uint32_t todo = bin->nrchain; todo && bin->remote_count && bin->nrchain; todo--) {
    void *r = bin->rchain[0].head;
    uint32_t left = bin->rchain[0].n;
    bin->remote_count -= left;
    bin->nrchain--;
    memmove(&bin->rchain[0], &bin->rchain[1], bin->nrchain * sizeof(bin->rchain[0]));
    while (left) {
      slab_run_t runs[256];
      uint32_t take = left < 256 ? left : 256;
      /* The next piece's head before the bitmap takes these regions back. */
      unsigned nruns = chain_runs(r, take, ind, runs, take < left ? &r : NULL);
      bin_dalloc_runs_locked(a, ind, runs, nruns);
      left -= take;
    }
  }
}

/* A bin holds at most this many bytes of handed-over regions (at least 64 regions), in
 * at most its 32 chain slots; a batch that would pass either goes to its slabs' bitmaps
 * instead (bin_push_remote), so an arena whose threads stopped allocating a class keeps
 * at most this much pinned. 1 MiB holds the 16 batches of 1,000 objects a producer may
 * run ahead in bench/figures' producer/consumer (when the consumer's frees come in one
 * burst, as under callgrind's serialised threads). */
#define REMOTE_MAX_BYTES ((size_t)1 << 20)

void bin_push_remote(arena_t *a, szind_t ind, void *head, void *tail, uint32_t n, slab_run_t *runs,
                     unsigned nruns) {
  bin_t *bin = &a->bins[ind];
  size_t cap = REMOTE_MAX_BYTES / bin_info[ind].size;
  if (cap < 64) cap = 64;
  mtx_lock(&bin->lock); /* not tallied: the allocating side's fills show the contention */
  if (bin->remote_count + n > cap || bin->nrchain == sizeof(bin->rchain) / sizeof(bin->rchain[0])) {
    /* Full: the batch goes to its bitmaps by the runs the flush's scan cut, so no region
     * is looked up again. Draining the oldest chain instead read the page map once per
     * region, and joining a full bin's chains made fills cut them by walking
     * (docs/design.md, "Thread caches", Flushes). */
    bin_dalloc_runs_locked(a, ind, runs, nruns);
  } else {
    bin->rchain[bin->nrchain] = (rchain_t){head, tail, n};
    bin->nrchain++;
    bin->remote_count += n;
  }
  mtx_unlock(&bin->lock);
  arena_maybe_purge(a);
}

void bin_dalloc_batch(arena_t *a, szind_t ind, void **ptrs, unsigned n) {
  /* Link the regions into a chain (they are being freed) and cut it into runs. */
  for (unsigned i = 0; i + 1 < n; i++) LINK_SET(ptrs[i], ptrs[i + 1]);
  while (n > 0) {
    slab_run_t runs[256];
    unsigned take = n < 256 ? n : 256;
    unsigned nruns = chain_runs(ptrs[0], take, ind, runs, NULL);
    bin_dalloc_runs(a, ind, runs, nruns);
    n -= take;
    ptrs += take;
  }
}

void bin_release_spare(arena_t *a, szind_t ind) {
  bin_t *bin = &a->bins[ind];
  mtx_lock(&bin->lock);
  bin_drain_remote(a, ind);
  edata_t *s = bin->spare;
  bin->spare = NULL;
  if (s) slab_release(a, bin, s);
  s = bin->cur;
  if (s && s->nfree == slab_nregs(s, &bin_info[ind])) {
    bin->cur = NULL;
    slab_release(a, bin, s);
  }
  if (bin->bm_spare) {
    bitmap_free(a, ind, bin->bm_spare);
    bin->bm_spare = NULL;
  }
  mtx_unlock(&bin->lock);
  arena_maybe_purge(a);
}

void bin_dalloc_tiny(arena_t *a, edata_t *s, void *p, const char *func) {
  const szind_t ind = SZ_TINY_IND;
  const bin_info_t *bi = &bin_info[ind];
  bin_t *bin = &a->bins[ind];
  uint64_t diff = (uintptr_t)p - s->addr, regind = (diff * bi->div_magic) >> 32;
  uint64_t bit = (uint64_t)1 << (regind % 64);
  uint64_t *fm = a->user ? NULL : (uint64_t *)(void *)s->lru_prev;
  if (fm != NULL && (__atomic_fetch_or(&fm[regind / 64], bit, __ATOMIC_RELAXED) & bit))
    strata_invalid_free(func, p); /* free to the program already: a cache, a chain or here */
  arena_tally(mtx_lock(&bin->lock));
  uint64_t *bm = s->bitmap;
  if (bm == NULL && (bm = slab_bitmap_regain(a, bin, ind, s)) == NULL) {
    bin_keep_run(bin, ind, p, 1); /* no memory for the bitmap: as bin_dalloc_runs_locked */
  } else {
    if (unlikely(regind * bi->size != diff || diff > slab_last(s, bi->size) || (bm[regind / 64] & bit))) {
      mtx_unlock(&bin->lock);
      strata_invalid_free(func, p);
    }
    bm[regind / 64] |= bit;
    uint32_t before = s->nfree;
    s->nfree++;
    /* The first word that may hold a free bit: a 64 KiB slab of 8-byte regions has 128,
     * which a reset to 0 would make the next fill scan. */
    if (regind / 64 < s->bm_hint) s->bm_hint = (uint16_t)(regind / 64);
    slab_note_free(a, bin, bi, s, before);
    bin->curregs--;
    bin->ndalloc++;
    bin->nflushes++;
  }
  mtx_unlock(&bin->lock);
  arena_maybe_purge(a); /* a slab released to the extents may have made a purge due */
}

bool bin_region_free(arena_t *a, szind_t ind, const edata_t *s, const void *p) {
  bin_t *bin = &a->bins[ind];
  uint64_t regind = (((uintptr_t)p - s->addr) * bin_info[ind].div_magic) >> 32;
  arena_tally(mtx_lock(&bin->lock));
  /* A full slab has dropped its bitmap (slab_bitmap_drop): none of its regions is free. */
  bool free = s->bitmap != NULL && (s->bitmap[regind / 64] >> (regind % 64) & 1);
  mtx_unlock(&bin->lock);
  return free;
}

void bin_return_chain(arena_t *a, szind_t ind, void *head, uint64_t gen) {
  bin_t *bin = &a->bins[ind];
  mtx_lock(&bin->lock);
  if (__atomic_load_n(&a->gen, __ATOMIC_RELAXED) == gen) { /* else reset took them already */
    while (head) {
      uint32_t n = 0;
      void *tail = head;
      while (n < 255 && LINK_DEC(tail)) tail = link_next(tail, ind), n++;
      void *next = link_next(tail, ind);
      slab_run_t runs[256];
      unsigned nruns = chain_runs(head, n + 1, ind, runs, NULL);
      bin_dalloc_runs_locked(a, ind, runs, nruns);
      head = next;
    }
  }
  mtx_unlock(&bin->lock);
}

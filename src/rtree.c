/*
 * rtree.c - the page map's leaves. Lookups and writes are inline in internal.h; a leaf is
 * mapped when an extent's range is first registered and never unmapped, so lock-free
 * readers never see a leaf disappear. Each page of a leaf counts its non-zero entries;
 * a page whose entries are all zero may be purged in place (MADV_DONTNEED): it reads back
 * as zeros, which is what it held, so readers cannot tell. A writer that makes an entry
 * non-zero pins the page first (count + 1 before the store), so no store can land in a
 * page while it is being purged and be lost with it.
 *
 * A write that finds its page clean (never written, or purged: every entry zero) stores
 * without reading the page first, and a zero store there does nothing. A read there
 * would map the kernel's zero page, and the store after it would take a copy-on-write
 * fault whose TLB shootdown interrupts every CPU running the process; reading first cost
 * two of those per page pair of a fresh leaf (mstress: 0.7 ms of a 120 ms run). Writes
 * check the count first, and neighbour reads (rtree_read_near) answer 0 from it.
 */
#include <sched.h>

#include "internal.h"

uint64_t *rtree_l1[RT_L1_SIZE];
mtx_t rtree_lock = MTX_INITIALIZER;
static size_t rtree_leaf_bytes;     /* atomic: bytes of leaf mappings (counts included) */
static size_t rtree_clean_pages;    /* atomic: leaf pages not resident (never touched or purged) */
static size_t rtree_nempty;         /* atomic: pages whose count fell to 0 since the last purge */
/* The L1 indices that have a leaf, in creation order: rtree_purge's walk (L1 has 2^17
 * entries, a process a few leaves). */
static uint32_t rtree_leaf_ind[RT_L1_SIZE];
static size_t rtree_nleaves; /* atomic; appended under rtree_lock */
void (*rtree_purge_test_hook)(void *pages, size_t n); /* tests: runs between claim and madvise */

/* Per-page word: the count of non-zero entries, and two flags. */
#define RT_CNT_PURGING 0x40000000u /* being purged: a pinning writer waits */
#define RT_CNT_CLEAN 0x20000000u   /* not resident (fresh or purged): nothing to purge */
#define RT_CNT_MASK 0x0fffffffu

/* Pages of fast words; each has a page of slow words at the same offset in the second
 * half (internal.h), counted, pinned and purged with it: "a page" below is that pair. */
static inline size_t leaf_pages(void) { return RT_LEAF_SIZE * sizeof(uint64_t) / os_page; }
/* The counts follow the leaf's fast and slow words in the same mapping. */
static inline uint32_t *leaf_counts(uint64_t *leaf) { return (uint32_t *)(leaf + 2 * RT_LEAF_SIZE); }
static inline size_t leaf_map_bytes(void) {
  return 2 * RT_LEAF_SIZE * sizeof(uint64_t) + ((leaf_pages() * sizeof(uint32_t) + os_page - 1) & ~(os_page - 1));
}
#define RT_PAIR_BYTES (2 * os_page) /* a page of fast words and its page of slow words */

bool rtree_ensure(uintptr_t a, size_t size) {
  uintptr_t end = a + size - 1;
  size_t first = a >> (LG_GRAN + RT_LG_LEAF), last = end >> (LG_GRAN + RT_LG_LEAF);
  if (last >= RT_L1_SIZE || end < a) return true;
  for (size_t i = first; i <= last; i++) {
    if (__atomic_load_n(&rtree_l1[i], __ATOMIC_ACQUIRE) != NULL) continue;
    mtx_lock(&rtree_lock);
    if (rtree_l1[i] == NULL) {
      size_t bytes = leaf_map_bytes();
      uint64_t *leaf = os_map(bytes, os_page);
      if (leaf == NULL) {
        mtx_unlock(&rtree_lock);
        return true;
      }
      if (unlikely((uintptr_t)leaf == i << (RT_LG_LEAF + 3))) { /* its bias would read as no leaf */
        uint64_t *other = os_map(bytes, os_page);
        os_unmap(leaf, bytes);
        leaf = other;
        if (leaf == NULL) {
          mtx_unlock(&rtree_lock);
          return true;
        }
      }
      uint32_t *cnt = leaf_counts(leaf);
      for (size_t p = 0; p < leaf_pages(); p++) cnt[p] = RT_CNT_CLEAN;
      __atomic_fetch_add(&rtree_leaf_bytes, bytes, __ATOMIC_RELAXED);
      __atomic_fetch_add(&rtree_clean_pages, leaf_pages(), __ATOMIC_RELAXED);
      __atomic_store_n(&rtree_l1[i], (uint64_t *)((uintptr_t)leaf - (i << (RT_LG_LEAF + 3))), __ATOMIC_RELEASE);
      rtree_leaf_ind[rtree_nleaves] = (uint32_t)i;
      __atomic_store_n(&rtree_nleaves, rtree_nleaves + 1, __ATOMIC_RELEASE);
    }
    mtx_unlock(&rtree_lock);
  }
  return false;
}

static inline uint32_t *count_of(uintptr_t a) {
  size_t i = a >> (LG_GRAN + RT_LG_LEAF);
  uint64_t *leaf = rtree_leaf(i, __atomic_load_n(&rtree_l1[i], __ATOMIC_ACQUIRE));
  size_t idx = (a >> LG_GRAN) & (RT_LEAF_SIZE - 1);
  return &leaf_counts(leaf)[idx * sizeof(uint64_t) / os_page];
}

/* An entry goes from zero to v or from non-zero to zero (the owner of the granule's
 * extent writes it, under that arena's lock: entries have one writer at a time). */
static void count_pin(uint32_t *c) {
  uint32_t old = __atomic_fetch_add(c, 1, __ATOMIC_ACQ_REL);
  if (unlikely(old & (RT_CNT_PURGING | RT_CNT_CLEAN))) {
    /* The purge of this page is in flight: the store must come after it (a few µs). */
    while (__atomic_load_n(c, __ATOMIC_ACQUIRE) & RT_CNT_PURGING) sched_yield();
    if (__atomic_fetch_and(c, ~RT_CNT_CLEAN, __ATOMIC_ACQ_REL) & RT_CNT_CLEAN)
      __atomic_fetch_sub(&rtree_clean_pages, 1, __ATOMIC_RELAXED);
  }
}

static void count_sub(uint32_t *c, uint32_t n) {
  if ((__atomic_sub_fetch(c, n, __ATOMIC_ACQ_REL) & RT_CNT_MASK) == 0)
    __atomic_fetch_add(&rtree_nempty, 1, __ATOMIC_RELAXED);
}

/* Whether the page pair of count c is clean: every entry zero, nothing resident. Only
 * the owner of an entry writes it, so an owner that finds the page clean knows its entry
 * is zero until it writes it (a page turns clean again only in a purge, which needs every
 * entry zero). */
static inline bool page_clean(const uint32_t *c) { return __atomic_load_n(c, __ATOMIC_ACQUIRE) & RT_CNT_CLEAN; }

/* A zero entry's fast and slow words from v (not 0), with no read: the check word of a
 * zero entry is 0 (rtree_store). */
static inline void store_fresh(uint64_t *s, uint64_t v) {
  __atomic_store_n(rtree_slow(s), v & RT_SLOW_MASK, __ATOMIC_RELEASE);
  __atomic_store_n(s, (uint64_t)rt_field(v), __ATOMIC_RELEASE);
}

/* A slab's granules, registered or cleared at once: one pin and one count update per
 * page of entries instead of per entry (the same rules as rtree_write). */
void rtree_write_range(uintptr_t a, size_t n, uint64_t v) {
  const size_t per_page = os_page / sizeof(uint64_t);
  while (n) {
    uint64_t *s = rtree_slot(a);
    sassert(s != NULL);
    uint32_t *c = count_of(a);
    size_t k = per_page - ((a >> LG_GRAN) & (per_page - 1));
    if (k > n) k = n;
    uint32_t changed = 0;
    if (page_clean(c)) { /* every entry zero: no read (see the top of this file) */
      if (v != 0) {
        count_pin(c);
        for (size_t i = 0; i < k; i++) store_fresh(&s[i], v);
        if (k > 1) __atomic_fetch_add(c, (uint32_t)(k - 1), __ATOMIC_ACQ_REL);
      }
    } else if (v != 0) {
      count_pin(c);
      for (size_t i = 0; i < k; i++) {
        changed += __atomic_load_n(rtree_slow(&s[i]), __ATOMIC_RELAXED) == 0;
        rtree_store(&s[i], v);
      }
      if (changed != 1) { /* the pin counted one */
        if (changed > 1) {
          __atomic_fetch_add(c, changed - 1, __ATOMIC_ACQ_REL);
        } else {
          count_sub(c, 1);
        }
      }
    } else {
      for (size_t i = 0; i < k; i++) {
        if (__atomic_load_n(rtree_slow(&s[i]), __ATOMIC_RELAXED) == 0) continue;
        rtree_store(&s[i], 0);
        changed++;
      }
      if (changed) count_sub(c, changed);
    }
    a += k * GRAN;
    n -= k;
  }
}

void rtree_write_chk(uintptr_t a, size_t n, uint32_t chk) {
  for (; n; n--, a += GRAN) {
    uint64_t *s = rtree_slot(a);
    sassert(s != NULL && __atomic_load_n(rtree_slow(s), __ATOMIC_RELAXED) != 0);
    uint64_t f = (__atomic_load_n(s, __ATOMIC_RELAXED) & ~RT_CHK_MASK) | (uint64_t)chk << 32;
    __atomic_store_n(s, f, __ATOMIC_RELEASE);
  }
}

void rtree_write(uintptr_t a, uint64_t v) {
  uint64_t *s = rtree_slot(a);
  sassert(s != NULL);
  sassert(v == 0 || (v & RT_PTR_MASK) != 0);
  uint32_t *c = count_of(a);
  if (page_clean(c)) {
    if (v == 0) return; /* zero already */
    count_pin(c);
    store_fresh(s, v);
    return;
  }
  bool was_zero = __atomic_load_n(rtree_slow(s), __ATOMIC_RELAXED) == 0;
  if (was_zero == (v == 0)) {
    rtree_store(s, v);
  } else if (v == 0) {
    rtree_store(s, 0);
    count_sub(c, 1);
  } else {
    count_pin(c);
    rtree_store(s, v);
  }
}

uint64_t rtree_read_near(uintptr_t a) {
  if (rtree_slot(a) == NULL || page_clean(count_of(a))) return 0;
  return rtree_read(a);
}

/* Purges the leaf pages whose entries are all zero and that may be resident; pages, in
 * runs, claimed by a CAS from 0 (no entry, no pinning writer, not clean) to PURGING. Holds
 * no lock. Returns bytes purged. */
size_t rtree_purge(void) {
  if (__atomic_exchange_n(&rtree_nempty, 0, __ATOMIC_ACQ_REL) == 0) return 0;
  size_t purged = 0, np = leaf_pages();
  for (size_t l = 0, nl = __atomic_load_n(&rtree_nleaves, __ATOMIC_ACQUIRE); l < nl; l++) {
    uint64_t *leaf = rtree_leaf(rtree_leaf_ind[l], __atomic_load_n(&rtree_l1[rtree_leaf_ind[l]], __ATOMIC_ACQUIRE));
    uint32_t *cnt = leaf_counts(leaf);
    for (size_t p = 0; p < np;) {
      /* rtree_lock over each run (claim, madvise, release): fork takes it, so a child never
       * inherits a page left PURGING, which would stop its writers for ever. Writers do not
       * take it (they wait on the page's flag); only leaf creation does. */
      if (__atomic_load_n(&cnt[p], __ATOMIC_RELAXED) != 0) { /* the common case: skip unlocked */
        p++;
        continue;
      }
      mtx_lock(&rtree_lock);
      size_t q = p;
      for (uint32_t zero = 0; q < np; q++, zero = 0)
        if (!__atomic_compare_exchange_n(&cnt[q], &zero, RT_CNT_PURGING, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
          break;
      if (q == p) {
        mtx_unlock(&rtree_lock);
        p++;
        continue;
      }
      if (unlikely(rtree_purge_test_hook != NULL)) rtree_purge_test_hook((char *)leaf + p * os_page, q - p);
      os_purge((char *)leaf + p * os_page, (q - p) * os_page);
      os_purge((char *)(leaf + RT_LEAF_SIZE) + p * os_page, (q - p) * os_page);
      for (size_t k = p; k < q; k++) __atomic_fetch_add(&cnt[k], RT_CNT_CLEAN - RT_CNT_PURGING, __ATOMIC_ACQ_REL);
      __atomic_fetch_add(&rtree_clean_pages, q - p, __ATOMIC_RELAXED);
      mtx_unlock(&rtree_lock);
      purged += (q - p) * RT_PAIR_BYTES;
      p = q;
    }
  }
  return purged;
}

size_t rtree_resident_bytes(void) {
  size_t m = __atomic_load_n(&rtree_leaf_bytes, __ATOMIC_RELAXED);
  size_t c = __atomic_load_n(&rtree_clean_pages, __ATOMIC_RELAXED) * RT_PAIR_BYTES;
  return c < m ? m - c : 0;
}

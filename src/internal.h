/*
 * internal.h - strata's types and the functions each layer offers the ones above it.
 * Layers, bottom to top: os, meta, rtree, sizeclass, extent, slab/bin, arena, tcache,
 * entry points (alloc.c). A layer includes this header but calls only downward.
 * The hot inline paths (rtree lookup, size lookup) live here.
 */
#ifndef STRATA_INTERNAL_H
#define STRATA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/types.h>

#include "strata.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define HIDDEN __attribute__((visibility("hidden")))
#define NOINLINE __attribute__((noinline))
#define NORETURN __attribute__((noreturn))
#define CACHELINE 64

#ifdef STRATA_DEBUG
#define sassert(c) ((c) ? (void)0 : strata_assert_fail(#c, __FILE__, __LINE__))
#else
#define sassert(c) ((void)0)
#endif

/* ------------------------------------------------------------------ report.c */
/* Messages go to stderr by raw write(2), never through stdio, or to the program's
 * malloc_message when it sets one; prefixed "<strata>: ". */
HIDDEN void msg_write(const char *s);
/* msg_write with a cbopaque for the program's malloc_message: malloc_stats_print's
 * default writer. */
HIDDEN void msg_cb(void *cbopaque, const char *s);
HIDDEN void msg_parts(const char *const *parts, int n);
HIDDEN char *fmt_u64(char *buf, uint64_t v);  /* returns buf, NUL-terminated */
HIDDEN char *fmt_hex(char *buf, uint64_t v);  /* "0x..." */
HIDDEN NORETURN void strata_invalid_free(const char *func, const void *p);
HIDDEN NORETURN void strata_fatal(const char *what);
HIDDEN void strata_overflow(const void *p, size_t usize, size_t at); /* a sampled block's redzone */
HIDDEN void strata_zero_realloc_abort(void); /* returns only where a safety_check_abort hook is set */
/* A sized free whose size (and alignment) names another class than the block's. */
HIDDEN void strata_size_mismatch(const char *func, const void *p, size_t size, size_t align,
                                          size_t usize);
/* A free-list link that decodes to no possible region: "heap corruption detected at
 * <slot> (free list of class N)", then abort. */
HIDDEN NORETURN void strata_heap_corruption(const void *at, unsigned ind);
typedef void safety_check_hook_t(const char *message);
HIDDEN extern safety_check_hook_t *safety_check_hook; /* experimental.hooks.safety_check_abort (atomic) */
HIDDEN NORETURN void strata_assert_fail(const char *cond, const char *file, int line);
/* backtrace.c: up to max return addresses of the calling program, innermost first,
 * strata's own leading frames dropped; never mallocs, holds no strata lock. */
HIDDEN unsigned strata_backtrace(uintptr_t *frames, unsigned max); /* holds only bt_lock, a leaf */
HIDDEN void bt_prefork(void); /* fork: the unwinders' lock, taken last (backtrace.c) */
HIDDEN void bt_postfork(bool child);

/* ------------------------------------------------------------------ os.c */
/* The only layer that talks to the kernel about memory. */
HIDDEN extern size_t os_page;      /* run-time page size (4K, 16K, 64K) */
/* log2(os_page). Elsewhere than os.c and ctl.c (which define OS_PAGE_VARIABLE: they set
 * os_page and take its address), os_page reads as 1 << os_lg_page, so that the extent
 * code's x / os_page and x % os_page compile to a shift and a mask instead of a 64-bit
 * division (~25-90 cycles on x86: ~15 per slab made and released). */
HIDDEN extern unsigned os_lg_page;
#ifndef OS_PAGE_VARIABLE
#define os_page ((size_t)1 << os_lg_page)
#endif
HIDDEN extern unsigned os_ncpus;   /* CPUs this process may use: affinity and cgroup cpu.max */
HIDDEN extern uint64_t os_mem_limit; /* cgroup memory.max in bytes, 0 if none */
HIDDEN void os_init(void);
HIDDEN void *os_map(size_t size, size_t align); /* NULL on failure; zeroed */
HIDDEN void os_unmap(void *addr, size_t size);
/* Arena chunks (extent_grow) from shared reservations: size a multiple of align. */
HIDDEN void *os_chunk_map(size_t size, size_t align);
HIDDEN extern uint64_t os_chunk_nresv; /* reservations made */
HIDDEN void os_purge(void *addr, size_t size); /* MADV_DONTNEED: contents become zero */
/* MADV_FREE: the kernel takes the pages when it needs them (contents zero or kept);
 * falls back to os_purge on kernels without it. */
HIDDEN void os_purge_lazy(void *addr, size_t size);
enum { THP_DEFAULT = 0, THP_ALWAYS, THP_NEVER };        /* opt.thp */
enum { MTHP_DISABLED = 0, MTHP_AUTO, MTHP_ALWAYS };     /* opt.metadata_thp */
HIDDEN void os_thp_apply(void *addr, size_t size, bool metadata); /* MADV_(NO)HUGEPAGE per opt */
HIDDEN uint64_t os_mem_limit_read(void); /* re-reads the cgroup limit; 0 if none */
HIDDEN void *os_remap(void *addr, size_t old, size_t new_size); /* mremap MAYMOVE; NULL on failure */
/* mremap onto dest (a mapping of new_size made by the caller, which it replaces); false on
 * failure, dest then still mapped. */
HIDDEN bool os_remap_fixed(void *addr, size_t old, size_t new_size, void *dest);
HIDDEN int os_read_file(const char *path, char *buf, size_t cap); /* bytes read, -1 on error */
HIDDEN pid_t os_gettid(void);
/* Commit budget under a cgroup memory limit (or commit_limit): bytes of active, dirty and
 * muzzy pages (memory the kernel charges) stay under it, so that allocation fails with
 * ENOMEM instead of the kernel OOM-killing the process. */
HIDDEN bool os_commit(size_t bytes); /* true (and nothing reserved) if over the budget */
HIDDEN void os_decommit(size_t bytes);

/* ------------------------------------------------------------------ locks */
/* strata's own lock: one futex word (0 free, 1 held, 2 held and a thread may sleep on
 * it). Taking a free lock is one `lock cmpxchg`, releasing one `xchg` and a wake only when
 * the word says a thread sleeps: glibc's pthread_mutex_trylock/unlock cost ~55
 * instructions a pair in calls and type checks (70 K pairs in wl_xthread; docs/design.md,
 * "Lock order"). It never allocates; an all-zero lock is a free one
 * (arenas' bins need no init); fork's child releases what the prepare handler took
 * (mtx_init on a held lock). Under ThreadSanitizer the lock is annotated
 * (__tsan_mutex_*), so TSan still sees strata's critical sections and lock order.
 * Each keeps the part of jemalloc's mutex profile (stats.mutexes.*) that costs nothing
 * measurable: acquisitions, those got by spinning and those that slept, counted by the
 * owner under the lock. Timing waits costs 0.2-0.3 instructions per object in the
 * prodcons figure, so wait times are not kept. */
#if defined(__SANITIZE_THREAD__)
#define STRATA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TSAN 1
#endif
#endif
#ifdef STRATA_TSAN
#include <sanitizer/tsan_interface.h>
#define MTX_TSAN(call) call
#else
#define MTX_TSAN(call) ((void)0)
#endif
typedef struct {
  uint32_t word;                       /* atomic: 0 free, 1 held, 2 held, maybe sleepers */
  uint64_t n_lock_ops, n_wait, n_spin; /* acquisitions; of them slept; of them spun */
} mtx_t;
#define MTX_INITIALIZER {0, 0, 0, 0}
static inline void mtx_init(mtx_t *m) {
#ifdef STRATA_TSAN
  if (__atomic_load_n(&m->word, __ATOMIC_RELAXED) != 0) { /* fork's child: the prepare handler took it */
    __tsan_mutex_pre_unlock(m, 0);
    __tsan_mutex_post_unlock(m, 0);
  }
  __tsan_mutex_create(m, 0);
#endif
  __atomic_store_n(&m->word, 0, __ATOMIC_RELAXED);
}
static inline bool mtx_cas(mtx_t *m) {
  uint32_t z = 0;
  return __atomic_compare_exchange_n(&m->word, &z, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}
HIDDEN bool mtx_lock_slow(mtx_t *m);
HIDDEN void mtx_wake(mtx_t *m);
/* Returns whether the acquisition met contention (the arena spreading reads it): a lock
 * that is taken is spun on for a while before the thread sleeps (mtx_lock_slow). */
static inline bool mtx_lock(mtx_t *m) {
  MTX_TSAN(__tsan_mutex_pre_lock(m, 0));
  if (unlikely(!mtx_cas(m))) return mtx_lock_slow(m);
  m->n_lock_ops++;
  MTX_TSAN(__tsan_mutex_post_lock(m, 0, 0));
  return false;
}
/* pthread_mutex_trylock's sense: true if the lock is held elsewhere (not taken); counts
 * nothing (its callers count what they took). */
static inline bool mtx_trylock(mtx_t *m) {
  MTX_TSAN(__tsan_mutex_pre_lock(m, __tsan_mutex_try_lock));
  bool got = mtx_cas(m);
  MTX_TSAN(__tsan_mutex_post_lock(
      m, got ? __tsan_mutex_try_lock : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed, 0));
  return !got;
}
static inline void mtx_unlock(mtx_t *m) {
  MTX_TSAN(__tsan_mutex_pre_unlock(m, 0));
  if (unlikely(__atomic_exchange_n(&m->word, 0, __ATOMIC_RELEASE) == 2)) mtx_wake(m);
  MTX_TSAN(__tsan_mutex_post_unlock(m, 0));
}

/* ------------------------------------------------------------------ meta.c */
/* Bump allocator for strata's own long-lived structures; never returns memory, never
 * calls malloc. */
HIDDEN void *meta_alloc(size_t size); /* zeroed, 64-byte aligned when size >= 64; NULL on OOM */
HIDDEN size_t meta_mapped(void);      /* metadata bytes that may be resident (stats.metadata) */
HIDDEN extern mtx_t meta_lock;
/* Pools of fixed-size objects (a multiple of 16 bytes, at most a page) whose number follows
 * the heap's peak: packed lowest address first, so pages empty out after a peak and
 * meta_purge returns them. Objects come 16-byte aligned, not initialised. */
#define META_NPOOLS 13 /* edata, then 12 bitmap block sizes 16..1024 (slab.c) */
enum { META_POOL_EDATA = 0, META_POOL_BITMAP0 = 1 }; /* bitmaps: pools 1.. by size (slab.c) */
HIDDEN void meta_pool_init(unsigned pool, size_t size);
HIDDEN unsigned meta_pool_get(unsigned pool, void **out, unsigned n); /* how many were got */
HIDDEN void meta_pool_put(unsigned pool, void *const *objs, unsigned n);
HIDDEN size_t meta_pool_used(unsigned pool);
/* Gives back empty pool pages and empty page-map pages, holding no lock across madvise.
 * Returns bytes purged. Called when the heap went idle (background threads), by purges
 * of every arena (malloc_trim, arena.<i>.purge) and by the container-limit purge. */
HIDDEN size_t meta_purge(void);
HIDDEN void meta_postfork_child(void);
/* An arena's own metadata (metadata_use_hooks): descriptors and bitmaps from blocks of its
 * extent hooks, given back at arena.<i>.destroy. Get and put take the arena's mlock;
 * arena_meta_get and arena_meta_put (below) choose between these and the pools. */
typedef struct meta_base_s meta_base_t;
typedef struct arena_s arena_t;
HIDDEN meta_base_t *meta_base_new(arena_t *a, extent_hooks_t *h); /* NULL: the hook failed */
HIDDEN unsigned meta_base_get(arena_t *a, unsigned pool, void **out, unsigned n);
HIDDEN void meta_base_put(arena_t *a, unsigned pool, void *const *objs, unsigned n);
HIDDEN void meta_base_delete(arena_t *a, meta_base_t *mb); /* detached from a, which is destroyed */

/* ------------------------------------------------------------------ rtree.c */
/*
 * Page map: a 2-level radix tree over 47-bit addresses keyed by 4 KiB granule (fixed,
 * whatever the OS page size, so the shifts are constants). An entry, as rtree_read
 * returns it, packs
 *   bits 48..63  the size class of a slab granule, 0 for every other entry (large
 *                extents, free extents), as the byte offset of the class's bin in a
 *                thread cache (class x TBIN_SIZE): the free fast path adds it to the
 *                cache's address directly, and bin 0 never has room, so no bounds check
 *   bits  4..47  edata pointer (16-byte aligned)
 *   bit   0      slab
 * Slabs map every granule; other extents map their first and last granule (for free()
 * and for coalescing with neighbours).
 * It is stored as two words at the same index, one in each half of the leaf:
 *   the fast word (first 2 MiB): bits 0..15 the class field, bits 32..63 the check word;
 *   the slow word (second 2 MiB): the edata pointer and the slab bit (bits 0..47).
 * The check word, for a granule whose entry names a class, is the low 32 bits of
 * base x c, base the address of the slab (or large block) and c the class's
 * region-start multiplier (tbin_t.c32). p is a region start iff
 * (p x c - chk) mod 2^32 < c (Lemire's divisibility test on p - base; exact while
 * slab size x region size stays under 2^32, which sz_init checks): free()'s exact
 * interior-pointer test, one multiply and one compare, its operands already at hand.
 * The free fast path needs only the class and the check word, so it reads one cache line
 * of the map, not two (docs/design.md, "Hot paths"). Writers store the slow word before
 * a fast word that names a class, and clear the fast word first; rtree_read reads the
 * fast word first, so a class it sees comes with its edata.
 * L1 lives in .bss (1 MiB, untouched pages cost nothing); leaves (4 MiB, 1 GiB of
 * address space each) are mapped on demand and never unmapped; their pages whose entries
 * are all zero are purged in place (rtree_purge). L1 holds each leaf's address biased by
 * minus its first granule's index (rtree_leaf undoes it), so that an address's entry is
 * L1[a >> 30][a >> 12]: free() takes its index with one shift, no mask. A bias of 0 (a
 * leaf mapped where its bias cancels) is never stored (rtree_ensure).
 */
#define LG_GRAN 12
#define GRAN ((size_t)1 << LG_GRAN)
#define RT_LG_LEAF 18
#define RT_LG_VA 47
#define RT_L1_SIZE ((size_t)1 << (RT_LG_VA - LG_GRAN - RT_LG_LEAF))
#define RT_LEAF_SIZE ((size_t)1 << RT_LG_LEAF)
HIDDEN extern uint64_t *rtree_l1[RT_L1_SIZE]; /* biased: see above */
static inline uint64_t *rtree_leaf(size_t i, uint64_t *biased) {
  return (uint64_t *)((uintptr_t)biased + (i << (RT_LG_LEAF + 3)));
}
HIDDEN extern mtx_t rtree_lock;

#define RT_SZ_SHIFT 48
#define RT_SLAB ((uint64_t)1)
#define RT_PTR_MASK ((((uint64_t)1) << RT_SZ_SHIFT) - 16)
#define RT_SLOW_MASK ((((uint64_t)1) << RT_SZ_SHIFT) - 1)
#define RT_CHK_MASK (~(uint64_t)0 << 32)
#define TBIN_SIZE 40 /* sizeof(tbin_t), checked there: the entries' class field is in its units */
#define rt_field(e) ((unsigned)((e) >> RT_SZ_SHIFT)) /* class x TBIN_SIZE */
#define rt_szind(e) (rt_field(e) / TBIN_SIZE)
#define rt_edata(e) ((edata_t *)(uintptr_t)((e) & RT_PTR_MASK))
#define rt_make(ed, ind, slab) \
  (((uint64_t)(ind) * TBIN_SIZE << RT_SZ_SHIFT) | (uint64_t)(uintptr_t)(ed) | ((slab) ? RT_SLAB : 0))
/* A fast word's class field (free's fast path), and an entry from a class field and a
 * slow word. */
#define rt_fast_field(f) ((unsigned)(uint16_t)(f))
#define rt_join(field, slow) ((uint64_t)(field) << RT_SZ_SHIFT | (slow))
/* The slow word of the entry whose fast word is at s. */
#define rtree_slow(s) ((s) + RT_LEAF_SIZE)
/* The check word of entry j of a leaf: the fast word's high half, read as uint32_t so
 * that the free fast path subtracts it from memory (its line is the entry's). */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the page map's fast word is laid out for little-endian"
#endif
#define rtree_chk(leaf, j) (((const uint32_t *)&(leaf)[j])[1])
/* The class field of entry j of a leaf, read as the fast word's low half: rtree_store keeps
 * its bits 16..31 zero, so free's fast path loads the field with one 32-bit load (a
 * 64-bit load needs a zero-extension of its low 16 bits: one instruction more a free). */
#define rtree_field_read(leaf, j) __atomic_load_n(&((const uint32_t *)&(leaf)[j])[0], __ATOMIC_RELAXED)

/* The fast word of address a, or NULL when a is outside the map. */
static inline uint64_t *rtree_slot(uintptr_t a) {
  size_t i = a >> (LG_GRAN + RT_LG_LEAF);
  if (unlikely(i >= RT_L1_SIZE)) return NULL;
  uint64_t *biased = __atomic_load_n(&rtree_l1[i], __ATOMIC_ACQUIRE);
  if (unlikely(biased == NULL)) return NULL;
  return &biased[a >> LG_GRAN];
}
/* Both words, unjoined: the slow word returned, the class field in *field (flushes test
 * the slab bit and the class without joining them into an entry). */
static inline uint64_t rtree_read_split(uintptr_t a, unsigned *field) {
  uint64_t *s = rtree_slot(a);
  if (s == NULL) {
    *field = 0;
    return 0;
  }
  *field = rt_fast_field(__atomic_load_n(s, __ATOMIC_ACQUIRE));
  return __atomic_load_n(rtree_slow(s), __ATOMIC_ACQUIRE);
}
/* The entry: the fast word first, so that a class it sees comes with its edata. */
static inline uint64_t rtree_read(uintptr_t a) {
  unsigned field;
  uint64_t e = rtree_read_split(a, &field);
  return rt_join(field, e);
}
/* The slow word alone: the entry without its class field (edata and slab bit), one load,
 * for paths that need no class. */
static inline uint64_t rtree_read_slow(uintptr_t a) {
  uint64_t *s = rtree_slot(a);
  return s ? __atomic_load_n(rtree_slow(s), __ATOMIC_ACQUIRE) : 0;
}
/* Stores entry v at fast word s, keeping the check word while v is not 0 (prof.c takes a
 * granule's class away and gives it back while its slab lives). */
static inline void rtree_store(uint64_t *s, uint64_t v) {
  if (v == 0) {
    __atomic_store_n(s, 0, __ATOMIC_RELEASE);
    __atomic_store_n(rtree_slow(s), 0, __ATOMIC_RELEASE);
    return;
  }
  __atomic_store_n(rtree_slow(s), v & RT_SLOW_MASK, __ATOMIC_RELEASE);
  uint64_t f = (__atomic_load_n(s, __ATOMIC_RELAXED) & RT_CHK_MASK) | rt_field(v);
  __atomic_store_n(s, f, __ATOMIC_RELEASE);
}
/* Writes: only for granules whose leaves exist (rtree_ensure at map time), by the owner of
 * the granule's extent. An entry that becomes zero or non-zero updates its page's count
 * (rtree.c: empty pages are purged in place). Every non-zero entry has an edata, so its
 * slow word tells zero from non-zero. */
HIDDEN void rtree_write(uintptr_t a, uint64_t v);
HIDDEN void rtree_write_range(uintptr_t a, size_t n, uint64_t v); /* n granules from a */
/* The entry of an extent's neighbour (coalescing, growing in place): as rtree_read, but a
 * page of entries never written (or purged since) is answered 0 from its count, unread
 * (rtree.c: a read maps the zero page there, and the first write then takes a
 * copy-on-write fault and a TLB shootdown). */
HIDDEN uint64_t rtree_read_near(uintptr_t a);
HIDDEN bool rtree_ensure(uintptr_t a, size_t size); /* true on failure */
HIDDEN size_t rtree_purge(void);          /* no lock held; bytes purged */
HIDDEN size_t rtree_resident_bytes(void); /* leaf pages that may be resident */
HIDDEN extern void (*rtree_purge_test_hook)(void *pages, size_t n); /* unit tests only */
/* Check words of n granules from a, whose entries were just made non-zero (so that their
 * leaf page cannot be purged under the store). */
HIDDEN void rtree_write_chk(uintptr_t a, size_t n, uint32_t chk);

/* ------------------------------------------------------------------ sizeclass.c */
/*
 * jemalloc's spacing: 8, 16, 32, 48, ..., 128, then four classes per doubling.
 * Index 0 means "no class" so that an empty rtree entry can never pass the free fast
 * path's bounds check. Small classes (slabs) are 1..SZ_NSMALL (up to 14 KiB); larger
 * ones are page extents. Requests of 0..8 bytes get the 8-byte class (SZ_TINY_IND), as
 * in jemalloc: C17 asks no more than 8-byte alignment of them. Its regions have no second
 * word for the thread caches' double-free tag (tcache_key): its bin in every cache always
 * misses both fast paths (link mask all ones, c32 0), malloc_tiny and free_tiny pop and
 * push it, and a free map per slab (tiny_fmap) tells a double free exactly
 * (docs/design.md, "Size classes and slab geometry").
 */
typedef unsigned szind_t;
#define SZ_NSMALL 36
#define SZ_SMALL_MAX ((size_t)14336)
/* The malloc fast path's size -> class table covers every small class (1,793 bytes): the
 * 4-14 KiB classes popped their bins on malloc_slow, 43 instructions a call (wl_xthread,
 * 3 of 4 mallocs; docs/design.md, "Hot paths"). Every class it names is a slab
 * class, which the fast path's pop (tag word cleared, nmalloc counted) requires. */
#define SZ_LOOKUP_MAX SZ_SMALL_MAX
#define SZ_TINY_IND 1 /* 8 bytes: requests of 0..8 bytes; off the fast paths, untagged */
#define SZ_MIN_IND 2  /* 16 bytes: the smallest class a request above 8 bytes gets */
/* Every class from SZ_MIN_IND up is a multiple of the quantum, so its regions are aligned
 * to it; the 8-byte class serves only requests of at most 8 bytes, which an alignment
 * of 16 rounds up to 16 first (quantum_aligned, sz_sa2u). */
#define SZ_QUANTUM ((size_t)16)
#define SZ_NCLASSES 229 /* index of 2^62, the largest class */
#define SZ_MAX ((size_t)1 << 62)
HIDDEN extern uint8_t sz_lookup[(SZ_LOOKUP_MAX >> 3) + 1];
/* Classes above the table up to 32 KiB (16, 20, 24, 28, 32 KiB) are multiples of 1 KiB: a
 * second table at 1 KiB granularity, for malloc_slow's cached-class pop (wl_xthread). */
#define SZ_LOOKUP_K_MAX ((size_t)32 << 10)
HIDDEN extern uint8_t sz_lookup_k[SZ_LOOKUP_K_MAX >> 10];
HIDDEN extern size_t sz_size[SZ_NCLASSES + 1];

typedef struct {
  /* 64 bytes: an entry's address is one shift from its index (72 bytes cost the flush
   * paths' indexing an instruction; 56 cost 0.09 a producer/consumer object). */
  size_t size;        /* region size */
  uint64_t div_magic; /* ceil(2^32 / size): region index by multiply */
  size_t slab_size;   /* bytes per slab (multiple of os_page) */
  uint64_t used;      /* region bytes of a usual slab: nregs * size */
  uint32_t nregs;
  uint16_t bm_words;  /* bitmap words per slab (the largest geometry's) */
  bool pow2;          /* size is a power of two <= page: an aligned pointer is a region start */
  /* Slabs made while the thread caches are crowded (slab_new; docs/design.md, "Size classes
   * and slab geometry"): the smallest page multiple with tail waste under 1/64, as jemalloc's, never more than
   * slab_size. A slab's geometry is told by its size (slab_nregs). */
  uint32_t slab_size_crowd, nregs_crowd;
  /* Slabs made while the bin only grows and its arena gives slabs back (slab_new;
   * docs/design.md, "Size classes and slab geometry"): slab_size_big bytes, a multiple of
   * slab_size within the class's bitmap block; slab_size itself when none fits. */
  uint32_t slab_size_big, nregs_big;
  uint32_t used_crowd, used_big; /* region bytes of a slab of those geometries */
} bin_info_t;
HIDDEN extern bin_info_t bin_info[SZ_NSMALL + 1];
_Static_assert(sizeof(bin_info_t) == 64, "bin_info_t: one shift from index to entry");
/* A bin takes the busy geometry from its SLAB_BIG_AFTER-th slab made in a row while nothing
 * of its class was freed (slab_new). */
#define SLAB_BIG_AFTER 16
HIDDEN void sz_init(void);
HIDDEN szind_t sz_size2index_compute(size_t size);
/* The malloc fast path reads the table before initialisation has filled it (the empty
 * cache sends it to the slow path whatever it reads): relaxed atomics, a plain mov. */
static inline szind_t sz_lookup_read(size_t size) {
  return __atomic_load_n(&sz_lookup[(size + 7) >> 3], __ATOMIC_RELAXED);
}
/* The malloc fast path's own copy (strata_malloc only): sz_lookup with prof:false, all 0
 * with prof:true (sz_init), so that every malloc misses bin 0 to malloc_slow's prof:true
 * entry; the same instructions as reading sz_lookup, at another address. It reaches one
 * class further than sz_lookup: 16 KiB (SZ_NSMALL + 1, a large class cached by thread
 * caches), whose pop there cost ~35 instructions more in malloc_slow (wl_xthread: 1 in 8
 * mallocs; docs/design.md, "Hot paths"). The pop clears the block's
 * second word (user memory) and counts nmalloc, which tcache_counts reads up to this
 * class. */
#define SZ_MALLOC_FAST_MAX ((size_t)16384)
#define SZ_MALLOC_FAST_IND (SZ_NSMALL + 1) /* the class of SZ_MALLOC_FAST_MAX */
/* Indexed by the size itself, not by (size + 7) / 8 (32 KiB instead of 4: the two
 * instructions of the rounding gone from every malloc; docs/design.md, "Hot paths"), each
 * entry the bin's byte offset in a thread cache (class x TBIN_SIZE), which the pop adds
 * to the cache's address (8-byte units in one byte would need a scaled index, which gcc
 * turns into one lea more). */
HIDDEN extern uint16_t sz_malloc_lookup[SZ_MALLOC_FAST_MAX + 1];
/* The byte offset of size's bin in a thread cache (size <= SZ_MALLOC_FAST_MAX). */
static inline size_t sz_malloc_lookup_read(size_t size) {
  return __atomic_load_n(&sz_malloc_lookup[size], __ATOMIC_RELAXED);
}
/* malloc_prof's copy of sz_lookup (filled by sz_init with prof:true). */
HIDDEN extern uint8_t sz_prof_ind[(SZ_LOOKUP_MAX >> 3) + 1];
/* Per class (up to the cached ones): the bits a free-list link of that class must have
 * clear, those above user space (2^47) and those below the class's natural alignment
 * (capped at a page): a link that decodes to anything else is no region of the class. */
HIDDEN extern uint64_t sz_link_mask[];
static inline szind_t sz_size2index(size_t size) {
  if (likely(size <= SZ_LOOKUP_MAX)) return sz_lookup_read(size);
  return sz_size2index_compute(size);
}
/* Usable size for (size, alignment); 0 if impossible. */
HIDDEN size_t sz_sa2u(size_t size, size_t align);
/* Page-quantised bucket of a free extent (4 per doubling of the page count). */
#define PSZ_N 160
HIDDEN unsigned psz_floor(size_t npages);
HIDDEN unsigned psz_ceil(size_t npages);
HIDDEN size_t psz_pages(unsigned idx); /* smallest page count of bucket idx */
/* psz_floor and psz_ceil of page counts below PSZ_TAB_N by table (sizeclass.c): slabs
 * and most large blocks; the extent sets look both up on every insert and fit. */
#define PSZ_TAB_N 512
HIDDEN extern uint8_t psz_floor_tab[PSZ_TAB_N], psz_ceil_tab[PSZ_TAB_N];
static inline unsigned psz_floor_fast(size_t np) { return np < PSZ_TAB_N ? psz_floor_tab[np] : psz_floor(np); }
static inline unsigned psz_ceil_fast(size_t np) { return np < PSZ_TAB_N ? psz_ceil_tab[np] : psz_ceil(np); }

/* ------------------------------------------------------------------ extent.c */
/* A pairing heap keyed by address: lowest address first, O(1) insert. */
typedef struct ph_node_s {
  struct ph_node_s *child, *next, *prev;
} ph_node_t;

/* ES_PURGING: taken out of the dirty/muzzy set to be purged outside the lock; never merged.
 * ES_MUZZY: purged lazily (MADV_FREE): reusable, contents unknown, may still be resident. */
enum { ES_ACTIVE = 0, ES_DIRTY = 1, ES_RETAINED = 2, ES_PURGING = 3, ES_MUZZY = 4 };

typedef struct edata_s edata_t;
struct edata_s {
  uintptr_t addr;
  size_t size;         /* bytes, multiple of os_page */
  ph_node_t ph;        /* free extent: in eset bucket; slab: in bin's nonfull heap */
  edata_t *lru_next;   /* dirty and muzzy extents, oldest first (purge order) */
  edata_t *lru_prev;
  union {
    uint64_t *bitmap;  /* slab: 1 bit per region, 1 = free */
    uint64_t dirty_ns; /* dirty/muzzy extent: when it entered its state */
  };
  uint16_t nfree;      /* slab: free regions (nregs <= 4096: sz_init checks) */
  uint16_t szind;      /* active: size class */
  /* Arena index + 1 (edata_arena_ind); 0: in no arena (in the metadata pool, or a purged
   * pool page, which reads as zeros). Written only under the elock of the arena it names
   * or names after the write, so a thread holding arena A's elock that reads A's id here
   * through a stale page-map entry knows the edata is A's (extent.c, mergeable). */
  uint16_t arena_id;
  uint16_t bm_hint;    /* slab: first bitmap word that may hold a free bit */
  uint16_t prof_nsampled; /* prof: sampled live blocks in this extent (atomic); 0 unless prof:true */
  uint8_t state;       /* ES_* */
  uint8_t slab;
  uint8_t zeroed;      /* contents known to be zero (fresh or purged pages) */
  uint8_t bucket;      /* eset bucket while free */
  uint8_t committed;   /* hooked arenas: pages committed (always 1 for the OS source) */
};
/* Regions of slab s (either geometry of its class), and the bytes they cover. */
static inline uint32_t slab_nregs(const edata_t *s, const bin_info_t *bi) {
  if (likely(s->size == bi->slab_size)) return bi->nregs;
  return s->size == bi->slab_size_big ? bi->nregs_big : bi->nregs_crowd;
}
static inline uint64_t slab_used(const edata_t *s, const bin_info_t *bi) {
  if (likely(s->size == bi->slab_size)) return bi->used;
  return s->size == bi->slab_size_big ? bi->used_big : bi->used_crowd;
}
/* The offset of a slab's last region start, for either geometry: a region start's offset
 * (a multiple of the size) is in the slab iff it is at most this; an offset above it is
 * in the last region or the tail (the flush paths' one compare per region and one
 * subtraction per slab). */
static inline uint64_t slab_last(const edata_t *s, uint64_t size) { return s->size - size; }

typedef struct {
  ph_node_t *heaps[PSZ_N];
  uint64_t nonempty[(PSZ_N + 63) / 64];
  size_t npages;
  uint32_t nextents[PSZ_N]; /* stats: extents per bucket (elock) */
  size_t bpages[PSZ_N];     /* stats: pages per bucket (elock) */
  edata_t *lru_head, *lru_tail; /* dirty and muzzy sets: oldest first (purge order) */
} eset_t;

typedef struct arena_s arena_t;
/* All take the arena's extent lock (elock) as noted. */
HIDDEN edata_t *extent_alloc(arena_t *a, size_t size, size_t align); /* elock held */
HIDDEN void extent_dalloc(arena_t *a, edata_t *e);                   /* elock held */
/* The oversize arena: dirty extents' pages moved (mremap) into the last `fresh` bytes
 * before `end` of an active block, largest first; returns the bytes still not backed.
 * Those pieces' commitment and resident count pass to the block (elock held). */
HIDDEN size_t extent_fill_from_dirty(arena_t *a, uintptr_t end, size_t fresh);
HIDDEN bool extent_grow_inplace(arena_t *a, edata_t *e, size_t new_size); /* elock held; true on failure */
HIDDEN bool extent_shrink_inplace(arena_t *a, edata_t *e, size_t new_size); /* elock held; true: not shrunk */
/* Purges the oldest extents of the dirty or muzzy set (from: ES_DIRTY, ES_MUZZY) down to
 * target_pages: dirty pages go muzzy (MADV_FREE) when lazy, else retained (MADV_DONTNEED)
 * or unmapped (retain:false). elock held on entry and exit, dropped around the
 * madvise/munmap calls; returns pages. */
HIDDEN size_t extent_purge(arena_t *a, unsigned from, size_t target_pages, bool lazy);
/* Pages of every arena's extents that may be resident (active, dirty, muzzy): the limit
 * check's figure. Changes only when pages leave or join the retained/unmapped state. */
HIDDEN extern size_t extent_resident_pages;
/* Times an ordinary arena took another's dirty or muzzy pages (extent.c, extent_steal). */
HIDDEN extern uint64_t extent_nsteals;
HIDDEN extern uint64_t extent_nsteal_locks; /* other arenas' elocks extent_steal took to look */
HIDDEN extern uint64_t extent_nfrag_purges; /* fragmented dirty pages purged before fresh ones */
/* Fragmented dirty pages are purged before fresh pages are taken while all ordinary
 * arenas' dirty pages are at least 1/FRAG_DIRTY_DIV of the resident pages (extent.c,
 * extent_purge_fragments). */
#define FRAG_DIRTY_DIV 4
HIDDEN void extent_register(edata_t *e, unsigned szind, bool slab); /* boundary (or all, for slabs) */
HIDDEN void extent_deregister_interior(edata_t *e);
HIDDEN void edata_cache_flush(arena_t *a, unsigned keep); /* elock held */
HIDDEN void ph_insert(ph_node_t **root, ph_node_t *n);
HIDDEN void ph_remove(ph_node_t **root, ph_node_t *n);
#define ph_edata(n) ((edata_t *)((char *)(n) - offsetof(edata_t, ph)))

/* ------------------------------------------------------------------ slab.c / bins */
/* A chain of n free regions linked through their first word, head to tail. */
typedef struct {
  void *head, *tail;
  uint32_t n;
} rchain_t;

typedef struct {
  mtx_t lock;           /* guards everything below and the bitmaps of this bin's slabs */
  edata_t *cur;         /* slab regions are taken from */
  ph_node_t *nonfull;   /* other slabs with free regions, lowest address first */
  edata_t *spare;       /* one empty slab kept so bursts do not bounce slabs */
  uint64_t *bm_spare;   /* one bitmap kept for the next slab (slabs come and go in pairs) */
  /* Regions freed by threads of other arenas, handed over as whole chains (tagged, still
   * in curregs); the next fill takes whole chains first. 32: a consumer's burst fills up
   * to 16 producer batches' worth; past them a batch goes to its bitmaps (docs/design.md,
   * "Thread caches"). */
  rchain_t rchain[32];
  uint32_t nrchain;
  uint32_t remote_count;
  size_t curregs;       /* regions handed out (to threads or caches) */
  size_t curslabs;
  uint64_t nmalloc, ndalloc, nfills, nflushes;
  /* stats: kept under the bin lock on the slab paths only */
  uint64_t nslabs, nreslabs; /* slabs created; times the current slab changed */
  size_t nonfull_slabs;      /* slabs in the nonfull heap */
  /* The growth run (slab_new): grow_run slabs of grow_bytes made in a row while the bin's
   * ndalloc stayed grow_mark and the filling thread's cache's frees of the class
   * grow_cmark; the arena's slab_bytes_released was grow_rel at its start. */
  uint64_t grow_mark, grow_cmark, grow_rel;
  size_t grow_run, grow_bytes;
} __attribute__((aligned(CACHELINE))) bin_t;
HIDDEN unsigned bin_fill(arena_t *a, szind_t ind, void **out, unsigned n);
/* Up to n regions linked into a NULL-terminated list, lowest address first. */
HIDDEN unsigned bin_fill_list(arena_t *a, szind_t ind, void **head, unsigned n);
/* The same, but whole remote chains are taken while the total stays under nmax (>= n),
 * so a small fill does not cut a chain a flush handed over whole. */
HIDDEN unsigned bin_fill_list_upto(arena_t *a, szind_t ind, void **head, unsigned n, unsigned nmax, void *end);
/* Frees n regions of class ind that all belong to arena a (a chain is made of them). */
HIDDEN void bin_dalloc_batch(arena_t *a, szind_t ind, void **ptrs, unsigned n);
/* len regions of one slab, linked through their first word from head. */
typedef struct {
  edata_t *slab;
  void *head;
  uint32_t len;
} slab_run_t;
/* Frees the runs whose slab belongs to arena a and clears their slab field. */
HIDDEN void bin_dalloc_runs(arena_t *a, szind_t ind, slab_run_t *runs, unsigned nruns);
/* A cache's flush of n regions from p: arena a's are checked and returned to the bitmaps
 * in one walk, other arenas' set aside; returns the chain of *left regions it leaves (the
 * set-aside ones, then the rest from where it stopped), or the link after the n-th when
 * *left is 0 (slab.c). */
HIDDEN void *bin_flush_local(arena_t *a, szind_t ind, szind_t rt_ind, void *p, uint32_t n, uint32_t *left);
/* Hands a chain of n validated regions (head..tail, linked through their first word) of
 * arena a's class ind over to that bin in O(1); when the bin holds too many already, the
 * regions go to their bitmaps by runs, which must cover the same chain. */
HIDDEN void bin_push_remote(arena_t *a, szind_t ind, void *head, void *tail, uint32_t n, slab_run_t *runs,
                            unsigned nruns);
HIDDEN void bin_release_spare(arena_t *a, szind_t ind);
/* The 8-byte class's free: region p of slab s (arena a) back to its bitmap alone, without
 * bin_dalloc_batch's chain walk. Reports (as func) a pointer that is no region start or a
 * region already free in the bitmap. */
HIDDEN void bin_dalloc_tiny(arena_t *a, edata_t *s, void *p, const char *func);
/* Whether region p of slab s (arena a, class ind) is free in its slab's bitmap (bin lock
 * taken inside): the 8-byte class's double-free test outside a free (realloc). */
HIDDEN bool bin_region_free(arena_t *a, szind_t ind, const edata_t *s, const void *p);
HIDDEN void slab_boot(void);                          /* the bitmap pools */
HIDDEN void bitmap_free(arena_t *a, szind_t ind, uint64_t *bm); /* a slab's bitmap back to a's pool */
HIDDEN unsigned slab_bitmap_pool(szind_t ind);        /* the meta pool of class ind's bitmaps */
HIDDEN size_t slab_bitmap_block(szind_t ind);         /* and its block size */
HIDDEN extern bool slab_bitmap_test_fail; /* unit tests: a full slab cannot get its bitmap back */

/* ------------------------------------------------------------------ arena.c */
/*
 * Lock order (fork takes them all in this order): bg_lock, init_lock, tcache_list_lock,
 * arenas_lock, then per arena in index order: bins[1..SZ_NSMALL].lock, elock;
 * then guard_lock, rtree_lock, meta_lock. Code may go right in this list while holding a lock
 * (bin -> elock -> rtree/meta), never left, and holds at most one arena's locks (a second
 * arena's elock only by trylock: extent.c's commit_or_purge and extent_steal).
 */
/* One decay clock (decay.c): dirty pages age into muzzy (or purged), muzzy into purged. */
#define DECAY_STEPS 100 /* jemalloc's SMOOTHSTEP_NSTEPS */
typedef struct {
  int64_t ms;               /* atomic: -1 never, 0 at once (arena.<i>.*_decay_ms) */
  uint64_t epoch_ns;        /* start of the current step */
  size_t nunpurged;         /* pages in the set after the last step */
  size_t backlog[DECAY_STEPS]; /* pages newly added per step, newest first */
} decay_t;
static inline int64_t decay_ms(const decay_t *d) { return __atomic_load_n(&d->ms, __ATOMIC_RELAXED); }

struct arena_s {
  mtx_t elock;            /* guards the fields up to the bins */
  eset_t dirty;           /* freed, still resident */
  eset_t muzzy;           /* lazily purged (MADV_FREE): reusable, the kernel may take them */
  eset_t retained;        /* address space kept, no memory (purged or never touched) */
  edata_t *edata_free;    /* free edata (arena_id 0), at most EDATA_CACHE_MAX */
  unsigned edata_nfree;
  unsigned npurging;       /* purge batches in flight (elock dropped): destroy waits for 0 */
  size_t grow_next;       /* next mapping size when growing */
  size_t nactive;         /* pages in active extents (slabs and large) */
  size_t mapped;          /* bytes mapped from the OS */
  size_t large_allocated; /* usable bytes of active large extents */
  uint64_t nlarge_malloc, nlarge_dalloc, npurged;
  unsigned ind;
  bool huge;              /* the oversize arena */
  unsigned nthreads;      /* threads bound (atomic) */
  bool purge_pending;     /* atomic: a decay step is due, purge after unlocking */
  size_t frag_purge;      /* elock: fragmented dirty pages to purge after unlocking (extent.c) */
  decay_t ddecay, mdecay; /* dirty -> muzzy/purged, muzzy -> purged */
  bool bg_scheduled;      /* its background thread knows it has pages to decay */
  size_t bg_seen_npages;  /* dirty pages when that thread was last told */
  uint64_t slab_bytes_released; /* slab bytes given to the extents (elock; read relaxed) */
  bin_t bins[SZ_NSMALL + 1];
  /* stats, under elock: per large class, purge passes and madvise calls */
  uint64_t lext_nmalloc[SZ_NCLASSES - SZ_NSMALL], lext_ndalloc[SZ_NCLASSES - SZ_NSMALL];
  uint64_t npurge_passes, nmadvise;
  uint64_t created_ns; /* uptime origin */
  /* User arenas and page sources (ehooks.c, arenas_user.c). */
  extent_hooks_t *hooks;  /* atomic; NULL: pages from os.c */
  uint8_t user;           /* made by arenas.create: never cached, may be reset */
  uint8_t destroyed;      /* arena.<i>.destroy'ed: its index awaits reuse */
  edata_t *active_head;   /* user arenas: active extents through lru_next/prev (elock) */
  uint64_t gen;           /* atomic; advanced by reset and destroy with every bin lock held */
  /* metadata_use_hooks: the arena's own metadata (meta.c), set at creation before the arena
   * is live and cleared by destroy with every lock held; NULL: the shared pools. */
  meta_base_t *mbase;
  mtx_t mlock;            /* guards *mbase; a leaf, after the bin locks and the elock */
  /* The arena's active pages at their highest in this half decay time and in the one
   * before (elock): its dirty cap (decay.c). */
  size_t peak_active[2];
  uint64_t peak_ns;
  /* Atomic: bit b set when bin b made its first slab. Statistics skip the other bins
   * (all zero), so that reading them does not fault in their pages (slab.c, ctl.c). */
  uint64_t bins_used;
};
HIDDEN extern arena_t **arenas;   /* [narenas + 1]; the last is the oversize arena */
HIDDEN extern unsigned narenas;   /* ordinary arenas */
HIDDEN extern mtx_t arenas_lock;
HIDDEN arena_t *arena_get(unsigned ind); /* creates on first use; NULL on OOM */
HIDDEN arena_t *arena_choose(void);       /* least loaded of the live ones, binds the thread */
HIDDEN void arena_unbind(arena_t *a);
/* Threads bind to the first narenas_live (atomic) ordinary arenas: all of them, or with
 * opt.arena_spread (and no opt.narenas) 1 at start, growing with contention. A thread
 * whose bin and extent locks keep meeting contention moves to a less loaded arena, or
 * opens the next one (arena_spread_check, from its cache's slow paths). */
HIDDEN extern unsigned narenas_live;
HIDDEN void *arena_large_alloc(arena_t *a, size_t usize, size_t align, bool zero);
HIDDEN void arena_large_dalloc(edata_t *e);
HIDDEN void *arena_small_alloc(arena_t *a, szind_t ind, bool zero);
HIDDEN bool arena_large_resize(edata_t *e, size_t usize); /* in place; true on failure */
HIDDEN void *arena_large_remap(edata_t *e, size_t usize); /* mremap; NULL on failure */
HIDDEN size_t arena_purge_all(void); /* pages purged */
/* Heap profiling's promoted blocks (alloc.c): a page extent of small class ind, counted
 * as its pages in large.allocated; and its release. */
HIDDEN edata_t *arena_prof_page_alloc(arena_t *a, size_t esize, szind_t ind);
HIDDEN void arena_prof_page_dalloc(edata_t *e);
/* decay.c: dirty pages age out over dirty_decay_ms along a smooth curve, oldest first,
 * then muzzy pages over muzzy_decay_ms; and the container-limit purge. */
HIDDEN uint64_t decay_now(void);
/* elock held: sets purge_pending if a step is due; now: the clock just read (the freed
 * extent's dirty_ns), which saves a second read on every page-extent free. */
HIDDEN void arena_note_dirty(arena_t *a, uint64_t now);
HIDDEN void arena_maybe_purge(arena_t *a); /* no lock held */
HIDDEN void arena_note_peak(arena_t *a);  /* elock held: the oversize arena's active peak */
HIDDEN void decay_init(decay_t *d, int64_t ms, uint64_t now);
/* Advances d's clock to now with npages in its set; returns how many may stay. */
HIDDEN size_t decay_step(decay_t *d, size_t npages, uint64_t now);
/* When d's next step is due (UINT64_MAX: nothing to decay by age). */
HIDDEN uint64_t decay_deadline(const decay_t *d, size_t npages);
/* One decay pass of both stages; no lock held. Returns the arena's next deadline
 * (UINT64_MAX if nothing is left to decay by age). The background threads' step. */
HIDDEN uint64_t arena_decay(arena_t *a);
HIDDEN size_t arena_purge(arena_t *a); /* every dirty and muzzy page now, forced; pages */
HIDDEN extern int64_t arenas_dirty_decay_ms, arenas_muzzy_decay_ms; /* atomic: new arenas' */
/* Container limit: resident (extent_resident_pages + metadata) within the headroom of the
 * limit sets a pending purge of every arena, done by the next arena_maybe_purge. */
HIDDEN uint64_t limit_headroom(uint64_t limit);
HIDDEN bool limit_due(uint64_t resident, uint64_t limit, uint64_t headroom, uint64_t rearm);
HIDDEN void limit_check(arena_t *a); /* elock held: pages just became resident */
HIDDEN size_t limit_purge(void);     /* no lock held: purge every arena now; pages */
HIDDEN extern uint64_t limit_npurges; /* atomic: stats.mem_limit_purges */
HIDDEN extern bool limit_pending;     /* atomic */
HIDDEN uint64_t mem_resident(void);   /* bytes of extent pages that may be resident + metadata */
/* The limit in force: the cgroup's or hard_limit, the lower (0: none). */
HIDDEN uint64_t limit_effective(void);
HIDDEN void limit_rearm_reset(void);  /* a limit changed: the next check may purge at once */

/* ------------------------------------------------------------------ events.c */
/* The program's limits (soft_limit, hard_limit: bytes, 0 none), the kernel's memory
 * pressure and the callbacks of strata.h's strata_event_register, served by one monitor
 * thread. Allocator paths only compare resident bytes with two armed levels. */
HIDDEN extern uint64_t limit_soft, limit_hard; /* atomic */
HIDDEN extern uint64_t limit_hard_nfails;      /* atomic: commits the hard limit refused */
HIDDEN extern uint64_t limit_soft_npurges;     /* atomic */
HIDDEN extern uint64_t ev_up, ev_down;         /* atomic: armed levels (UINT64_MAX, 0: none) */
HIDDEN void ev_kick(void);                     /* wake the monitor (a write to its eventfd) */
static inline void ev_note_resident(uint64_t resident) {
  if (unlikely(resident >= __atomic_load_n(&ev_up, __ATOMIC_RELAXED) ||
               resident < __atomic_load_n(&ev_down, __ATOMIC_RELAXED)))
    ev_kick();
}
HIDDEN void ev_start_wanted(void);  /* bg_create_wanted: the monitor if pressure or callbacks want it */
HIDDEN void ev_postfork_child(void);
HIDDEN uint64_t mem_purge_all(void); /* every arena's free pages, spare slabs, metadata; bytes */
static inline unsigned edata_arena_ind(const edata_t *e) { return (unsigned)e->arena_id - 1; }
static inline arena_t *arena_of(const edata_t *e) { return arenas[edata_arena_ind(e)]; }

/* ------------------------------------------------------------------ tcache.c */
typedef struct {
  void *head;          /* intrusive LIFO of free regions */
  uint32_t avail;      /* room left: tcache_t.max[ind] - cached (0 for classes not cached) */
  /* Region-start multiplier: ceil(2^32 / size) (bin_info's div_magic) for small classes,
   * 2^20 for large ones (whose first granule alone names the class, and whose start is
   * page-aligned): free() takes p only when (p x c32 - chk) mod 2^32 < c32 (rtree). */
  uint32_t c32;
  uint64_t nmalloc;    /* malloc's fast-path pops, for thread.allocated */
  /* free()'s fast path counts nothing (one instruction less on every free): its pushes are
   * tbin_ndalloc = pops + dbase - avail, every other change of avail moving dbase with it
   * (tbin_avail_move, tbin_avail_set). */
  uint64_t dbase;
  uint64_t link_mask;  /* sz_link_mask[class]: malloc pops a head only when it has none set */
} tbin_t;
_Static_assert(sizeof(tbin_t) == TBIN_SIZE, "TBIN_SIZE is the rtree class field's unit");
/* A class's starting capacity (tcache_nslots_small_min/max, lg_tcache_nslots_mul; large
 * classes by bytes): a new cache's bins, and where the GC shrinks a grown bin back to. */
HIDDEN extern uint32_t tbin_nslots[];
#define TCACHE_NBINS_MAX 74 /* classes 1..73: up to 8 MiB, jemalloc's tcache_max limit */
#define TCACHE_NSLOTS_MAX 8192 /* tcache_nslots_small_min/max's bound (tcache_t.max is 16 bits) */
typedef struct tcache_s tcache_t;
struct tcache_s {
  tbin_t bins[TCACHE_NBINS_MAX];
  arena_t *arena;
  tcache_t *next, *prev;         /* registry, for fork and stats */
  uint32_t gc_ticks, gc_bin;
  uint32_t gc_every;             /* events between GC visits: 32, or 1 over the global cap */
  uint8_t events[TCACHE_NBINS_MAX]; /* fills/flushes since the GC last looked */
  /* Global cap (opt.tcache_total_max): each bin's count as last added to tcache_total,
   * refreshed at that bin's fills, flushes and GC visits (never on the fast paths). */
  uint32_t published[TCACHE_NBINS_MAX];
  /* Regions a miss fills: starts at 32 KiB's worth (at most half the bin), doubles on
   * each miss up to half of it, halves when the GC finds the bin idle (not below the
   * start), back to the start over the global cap (jemalloc's lg_fill_div idea). */
  uint16_t fill[TCACHE_NBINS_MAX];
  /* Each bin's capacity (its avail is max - cached; 0 while closed): tbin_nslots[ind] at
   * first, doubled when the bin makes round trips (a flush of regions its fills brought),
   * halved back when the GC finds it idle (tcache.c, tcache_bin_grow). */
  uint16_t max[TCACHE_NBINS_MAX];
  uint16_t keep[TCACHE_NBINS_MAX]; /* what an overflow keeps: max >> lg_tcache_flush_{small,large}_div */
  uint8_t trips[TCACHE_NBINS_MAX]; /* round trips since the GC last looked; TRIP_FILLED: filled since its last flush */
  uint32_t gc_pops[TCACHE_NBINS_MAX]; /* the bin's pops (low bits) when the GC last looked */
  size_t grown;                  /* bytes of capacity above tbin_nslots, all bins: at most TCACHE_GROW_BYTES */
  size_t bytes;                  /* this cache's share of tcache_total */
  size_t gc_bytes;               /* uncached bytes allocated since the last byte-driven GC visit */
  szind_t nbins_open;            /* bins from here up are closed: no room (tcache_crowd) */
  /* prof:true: malloc_prof keeps each bin's nmalloc biased by its class's sample countdown
   * (prof_class_take): the bin's pops are nmalloc + prof_nm_off[ind] (tbin_nmalloc);
   * prof_nm_gen is odd while the owner changes both (snap_tcaches reads other threads'). All
   * 0 with prof:false. */
  uint64_t prof_nm_off[TCACHE_NBINS_MAX];
  uint32_t prof_nm_gen;
};
/* Regions bin ind of cache tc holds. */
static inline uint32_t tbin_count(const tcache_t *tc, unsigned ind) { return tc->max[ind] - tc->bins[ind].avail; }
static inline uint64_t tbin_nmalloc(const tcache_t *tc, unsigned ind) {
  return tc->bins[ind].nmalloc + tc->prof_nm_off[ind];
}
/* free()'s fast-path pushes into bin ind (see tbin_t.dbase). */
static inline uint64_t tbin_ndalloc(const tcache_t *tc, unsigned ind) {
  return tbin_nmalloc(tc, ind) + tc->bins[ind].dbase - tc->bins[ind].avail;
}
/* A change of a bin's room that is neither a fast-path pop (counted in nmalloc) nor a
 * fast-path push: fills, flushes, slow-path pops and pushes, closing and opening. */
static inline void tbin_avail_move(tbin_t *b, int64_t d) {
  b->avail = (uint32_t)((int64_t)b->avail + d);
  b->dbase += (uint64_t)d;
}
static inline void tbin_avail_set(tbin_t *b, uint32_t v) { tbin_avail_move(b, (int64_t)v - (int64_t)b->avail); }
enum { TSD_NOMINAL = 0, TSD_ACTIVE, TSD_NOCACHE, TSD_DEAD };
typedef struct {
  tcache_t *tcache;        /* never NULL: &tcache_empty until the thread has one */
  uint64_t allocated;      /* thread.allocated: slow paths (plus the caches' counts) */
  uint64_t deallocated;    /* thread.deallocated: likewise */
  arena_t *arena;          /* bound arena (NULL until first slow path) */
  uint8_t state;
  uint8_t reentrant;       /* inside a locked slow path (signal re-entry guard) */
  uint8_t in_hook;         /* inside an extent hook: allocations go to arena 0, uncached */
  struct ureserve_s *ureserve; /* regions reserved from one user arena (arenas_user.c) */
  /* Arena spreading (arena.c): this thread's bin and extent lock acquisitions since its
   * last look, and how many met contention; pinned: bound by thread.arena, never moved. */
  uint32_t lk_ops, lk_waits;
  uint8_t arena_pinned;
  int64_t prof_cdn; /* prof:true: minus the bytes left before this thread's next sample (prof.c); 0: not drawn */
} tsd_t;
HIDDEN extern __thread tsd_t strata_tsd __attribute__((tls_model("initial-exec")));
/* A bin or extent lock taken for this thread (waited: mtx_lock's result). */
static inline void arena_tally(bool waited) {
  strata_tsd.lk_ops++;
  strata_tsd.lk_waits += waited;
}
/* Only the wait: for fills, whose acquisitions the caller counts (a thread cache's at
 * its GC visits, an uncached thread's in arena_small_alloc). */
static inline void arena_tally_wait(bool waited) {
  if (unlikely(waited)) strata_tsd.lk_waits++;
}
#define ARENA_SPREAD_WINDOW 64 /* lock acquisitions per look */
HIDDEN void arena_spread(tsd_t *tsd);
static inline void arena_spread_check(tsd_t *tsd) {
  if (unlikely(tsd->lk_ops >= ARENA_SPREAD_WINDOW)) arena_spread(tsd);
}
HIDDEN extern tcache_t tcache_empty;
/* Free small regions carry tcache_key ^ address in their second word; malloc clears it.
 * free() finding its own tag there is a double free, reported at once. Random per
 * process, so a program's data matches it by chance with probability 2^-64. */
HIDDEN extern uintptr_t tcache_key;
#define TAG_WORD(p) (((uintptr_t *)(p))[1])
#define TAG_OF(p) (tcache_key ^ (uintptr_t)(p))
/* Whether block p of class ind carries its free tag: never for the 8-byte class, whose
 * second word is its neighbour's (nothing reads or writes it); its double frees are the
 * slab bitmap's to tell (bin_dalloc_tiny, bin_region_free). */
static inline bool tag_is_set(const void *p, unsigned ind) {
  return ind != SZ_TINY_IND && TAG_WORD(p) == TAG_OF(p);
}
HIDDEN extern unsigned tcache_nbins; /* classes cached: 1..tcache_nbins-1 */
/* The classes malloc_slow pops above the lookup table: below tcache_nbins; none with
 * prof:true (ialloc counts those allocations' bytes). */
HIDDEN extern unsigned tcache_nbins_malloc;
HIDDEN size_t tcache_grown_bytes(void); /* every cache's bins' growth above their start, in bytes */
/*
 * Free-list links (docs/design.md, "Hardening"). Every in-band link (thread caches, fill lists, remote
 * chains) is stored as next ^ tcache_key ^ slot, the slot being the free region that
 * holds it (glibc's safe-linking, with a 64-bit secret instead of ASLR's bits), so an
 * overflow that writes an address over a freed neighbour's link decodes to noise. A
 * decoded link is followed only when it is NULL or a canonical user address (below
 * 2^47) aligned as its class's regions (link_ok; malloc's fast path tests the bin's copy
 * of the mask): noise passes with probability 2^-21 or less, a one-byte change unless it
 * keeps the alignment (init.c fixes the key's low nibble for that), and the flush and
 * drain walks also check that it is a region start of the same class. The free fast
 * path pays one xor (its tag is the mask), malloc two xors, a NULL test and a mask test.
 */
#define LINK_SET(slot, next) (*(uintptr_t *)(slot) = (uintptr_t)(next) ^ TAG_OF(slot))
#define LINK_DEC(slot) ((void *)(*(const uintptr_t *)(slot) ^ TAG_OF(slot)))
/* NULL, or canonical and aligned as a region of class ind must be: a one-byte change to
 * a link (an off-by-one write from the neighbour, a use after free of its low byte) moves
 * the decoded pointer off the alignment unless the change is a multiple of it. */
static inline bool link_ok(const void *p, unsigned ind) { return ((uintptr_t)p & sz_link_mask[ind]) == 0; }
/* The link held by slot (a free region of class ind), checked before anyone follows it;
 * key is tcache_key, passed in so that loops keep it in a register. */
static inline void *link_next_k(const void *slot, uintptr_t key, unsigned ind) {
  void *n = (void *)(*(const uintptr_t *)slot ^ key ^ (uintptr_t)slot);
  if (unlikely(!link_ok(n, ind))) strata_heap_corruption(slot, ind);
  return n;
}
static inline void *link_next(const void *slot, unsigned ind) { return link_next_k(slot, tcache_key, ind); }
/* An empty thread-cache bin's head, and the link its last region holds: not aligned as any
 * class's regions, so malloc's one mask test (link_fits) refuses it as it refuses a
 * corrupted link, with no NULL test (docs/design.md, "Hot paths"). Bins that must always
 * miss (bin 0, classes not cached, tcache_empty) have every bit of their mask set. Only
 * thread-cache bins end with it; fill lists, remote chains and reserves end with NULL. */
#define TBIN_END ((void *)(uintptr_t)1)
/* link_next for a thread-cache bin's list, which ends with TBIN_END. */
static inline void *tbin_next(const void *slot, unsigned ind) {
  void *n = LINK_DEC(slot);
  if (unlikely(n != TBIN_END && !link_ok(n, ind))) strata_heap_corruption(slot, ind);
  return n;
}
HIDDEN void tcache_boot(void);
HIDDEN tcache_t *tcache_get_slow(tsd_t *tsd); /* creates the thread's cache; NULL if none */
HIDDEN extern unsigned tcache_nthreads_seen; /* the process's threads, as last read (tcache.c) */
HIDDEN extern unsigned tcache_nlive; /* thread caches listed (tcache_list_lock; fork resets it) */
HIDDEN extern unsigned tcache_crowd_nlive; /* more live caches than this: crowded (tcache.c) */
HIDDEN extern szind_t tcache_crowd_nbins;  /* crowded caches keep only the classes below it */
HIDDEN void *tcache_alloc_hard(tcache_t *tc, szind_t ind);
HIDDEN void tcache_dalloc_hard(tcache_t *tc, szind_t ind, void *p);
HIDDEN void tcache_flush_all(tcache_t *tc);
HIDDEN void tcache_large_tick(tcache_t *tc, size_t usize); /* a GC visit per opt.tcache_gc_incr_bytes */
HIDDEN void tcache_thread_exit(void *arg);
HIDDEN void tcache_counts(const tsd_t *tsd, uint64_t *allocated, uint64_t *deallocated);
HIDDEN extern size_t tcache_total; /* bytes cached by all threads, as published (atomic) */
/* mallctl handlers (the team's convention; ctl.c lists them by name). */
/* The mallctl handler type: numeric name components (the <i> of arena.<i>.purge) are in
 * mib at their position. Other modules' handlers plug into ctl.c's table as rows. */
typedef int ctl_handler_t(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen);
/* A bool written through mallctl: its byte must be 0 or 1 (any other is no bool, and
 * loading it as one is undefined: the mallctl fuzzer found it). false if it is not. */
static inline bool ctl_bool_in(const void *newp, bool *out) {
  unsigned char c;
  __builtin_memcpy(&c, newp, 1);
  if (c > 1) return false;
  *out = c != 0;
  return true;
}
HIDDEN ctl_handler_t tcache_ctl_total_max; /* opt.tcache_total_max */
HIDDEN ctl_handler_t tcache_ctl_bytes;     /* stats.tcache_bytes */
HIDDEN ctl_handler_t arena_ctl_nlive;      /* arenas.nlive (arena.c) */
HIDDEN extern mtx_t tcache_list_lock;
HIDDEN extern tcache_t *tcache_list;

/* ------------------------------------------------------------------ guard.c */
/* Sampled guarded allocations (opt.guard_sample_interval). A guarded block's rtree entry
 * points at an edata of arena GUARD_ARENA, which idalloc hands to guard_free. */
#define GUARD_ARENA 0xffff /* an edata arena_id: no arena has index 0xfffe */
HIDDEN extern bool guard_enabled;
HIDDEN extern mtx_t guard_lock; /* after arenas_lock, before rtree_lock and meta_lock */
HIDDEN void guard_boot(void);
/* From the cache fill (no lock held): a guarded block for this allocation, or NULL after
 * clamping *want so that the fill ends where the thread's countdown does. */
HIDDEN void *guard_fill_hook(szind_t ind, unsigned *want);
HIDDEN void guard_free(void *p, edata_t *ed);
HIDDEN void guard_describe(const void *p); /* fatal reports: what the pool knows of p */
HIDDEN uint64_t guard_count(void);         /* guarded blocks handed out */
HIDDEN ctl_handler_t guard_ctl_sample_interval; /* opt.guard_sample_interval: size_t, read-only */
HIDDEN ctl_handler_t guard_ctl_allocs;          /* stats.guard.allocs: uint64_t, read-only */

/* ------------------------------------------------------------------ conf.c */
enum { JUNK_NONE = 0, JUNK_ALLOC = 1, JUNK_FREE = 2 };
typedef struct {
  unsigned narenas;          /* 0: 4 x CPUs */
  bool tcache;
  size_t tcache_max;
  size_t oversize_threshold;
  bool retain;
  bool arena_spread;         /* threads share arenas until lock contention opens more */
  bool tiny_class;           /* requests of 0..8 bytes get the 8-byte class (else 16 bytes) */
  unsigned junk;             /* JUNK_* bits */
  bool zero;
  bool abort;
  bool abort_conf;
  bool confirm_conf;
  int64_t dirty_decay_ms;    /* -1: never purge by age; 0: purge at once */
  /* statistics output */
  bool stats_print;          /* malloc_stats_print at exit */
  char stats_print_opts[32];
  char stats_file[256];      /* OpenMetrics textfile; %p is the pid */
  uint64_t stats_interval_ms; /* rewrite period of stats_file */
  char stats_labels[256];    /* name=value;name=value: extra labels on every stats_file series */
  bool stats_metrics_detail; /* per-arena and per-size-class series */
  int64_t muzzy_decay_ms;    /* 0 (default): dirty pages are purged, never made muzzy */
  bool background_thread;
  unsigned max_background_threads; /* 0: one per usable CPU */
  unsigned thp;              /* THP_* */
  unsigned metadata_thp;     /* MTHP_* */
  uint64_t limit_headroom;   /* bytes under the cgroup limit where purging starts; 0: auto */
  size_t guard_sample_interval; /* guard.c: 1 in N cache fills guarded; 0 off */
  size_t commit_limit;       /* os.c: bytes of active + dirty pages; 0 off; COMMIT_AUTO */
#define COMMIT_AUTO SIZE_MAX /* the cgroup memory limit less a headroom, if there is one */
  size_t tcache_total_max;   /* bytes all thread caches may hold together; 0: no cap */
  /* jemalloc's bin sizing (tcache.c): a small class starts with its slab's regions
   * << lg_tcache_nslots_mul, clamped to [tcache_nslots_small_min, _max]; an overflow keeps
   * capacity >> lg_tcache_flush_{small,large}_div; uncached allocations make a GC visit
   * every tcache_gc_incr_bytes. */
  unsigned tcache_nslots_small_min, tcache_nslots_small_max;
  int64_t lg_tcache_nslots_mul;
  unsigned lg_tcache_flush_small_div, lg_tcache_flush_large_div;
  size_t tcache_gc_incr_bytes;
  uint64_t soft_limit;       /* events.c: resident bytes past which strata purges everything; 0 none */
  uint64_t hard_limit;       /* events.c: committed bytes allocations may not pass; 0 none */
  bool pressure_purge;       /* events.c: purge at once when the kernel reports memory stalls */
  /* jemalloc's options with a meaning here (docs/jemalloc-compat.md) */
  bool xmalloc;              /* out of memory aborts instead of returning NULL */
  bool infallible_new;       /* experimental_infallible_new: operator new aborts, never throws */
  unsigned zero_realloc;     /* ZR_*: what realloc(p, 0) does */
  int64_t stats_interval;    /* print statistics every N bytes allocated; -1 off */
  char stats_interval_opts[32];
  /* slab_sizes: for the small classes of size begin..end, slabs of pages pages (jemalloc's
   * "begin-end:pages|..."; later ranges win); sz_init applies them to the usual geometry. */
  unsigned n_slab_sizes;
  struct { uint64_t begin, end, pages; } slab_sizes[16];
} opt_t;
enum { ZR_FREE, ZR_ALLOC, ZR_ABORT };
/* Out of memory in an allocating call: errno, and opt.xmalloc's abort (alloc.c). */
HIDDEN void alloc_oom(void);
HIDDEN void stats_interval_tick(tsd_t *tsd); /* opt.stats_interval >= 0: from slow_tick (stats.c) */
/* ------------------------------------------------------------------ hooks.c */
/* jemalloc's experimental allocation hooks (experimental.hooks.install): its types. */
typedef enum {
  hook_alloc_malloc, hook_alloc_posix_memalign, hook_alloc_aligned_alloc, hook_alloc_calloc,
  hook_alloc_memalign, hook_alloc_valloc, hook_alloc_pvalloc, hook_alloc_mallocx, hook_alloc_realloc,
  hook_alloc_rallocx
} hook_alloc_t;
typedef enum { hook_dalloc_free, hook_dalloc_dallocx, hook_dalloc_sdallocx, hook_dalloc_realloc, hook_dalloc_rallocx } hook_dalloc_t;
typedef enum { hook_expand_realloc, hook_expand_rallocx, hook_expand_xallocx } hook_expand_t;
typedef void (*hook_alloc)(void *extra, hook_alloc_t type, void *result, uintptr_t result_raw, uintptr_t args_raw[3]);
typedef void (*hook_dalloc)(void *extra, hook_dalloc_t type, void *address, uintptr_t args_raw[3]);
typedef void (*hook_expand)(void *extra, hook_expand_t type, void *address, size_t old_usize, size_t new_usize,
                            uintptr_t result_raw, uintptr_t args_raw[4]);
typedef struct {
  hook_alloc alloc_hook;
  hook_dalloc dalloc_hook;
  hook_expand expand_hook;
  void *extra;
} hooks_t;
HIDDEN extern unsigned hooks_n;  /* atomic: hooks installed; entry points call hook_invoke_* when not 0 */
HIDDEN extern bool slow_tick_on; /* atomic: bg_create_wanted calls slow_tick (and bg_create_pending stays set) */
HIDDEN void slow_tick(tsd_t *tsd); /* nothing of strata's held */
HIDDEN void hooks_publish(tsd_t *tsd);
HIDDEN void hook_invoke_alloc(int type, void *result, uintptr_t result_raw, uintptr_t a0, uintptr_t a1, uintptr_t a2);
HIDDEN void hook_invoke_dalloc(int type, void *address, uintptr_t a0, uintptr_t a1, uintptr_t a2);
HIDDEN void hook_invoke_expand(int type, void *address, size_t old_usize, size_t new_usize, uintptr_t result_raw,
                               uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3);
static inline bool hooks_on(void) { return __atomic_load_n(&hooks_n, __ATOMIC_RELAXED) != 0; }
HIDDEN void hooks_postfork_child(void);
/* sizeclass.c: empty malloc's size table (every malloc to malloc_slow) or refill it, for
 * allocation hooks (sz_malloc_divert) and for malloc_prof's sampling (sz_malloc_prof). */
HIDDEN void sz_malloc_divert(bool divert);
HIDDEN void sz_malloc_prof(bool on);
HIDDEN void sz_postfork_child(void);
/* malloc_slow's one test for malloc_prof and the hooks' malloc (alloc.c). */
HIDDEN extern bool malloc_divert;
/* malloc_diverted's choice: malloc_prof (prof:true, or a tracer attached), else hooks. */
HIDDEN extern bool malloc_prof_on;
HIDDEN extern opt_t opt;
HIDDEN void conf_init(void);
/* Parses one MALLOC_CONF-syntax string; returns the number of problems reported. */
HIDDEN int conf_parse(opt_t *o, const char *s, const char *source);
HIDDEN void conf_print(const opt_t *o);
/* The program's options strings (malloc_conf, strata_malloc_conf) that are set, in the
 * order they apply, with their names; returns how many. */
HIDDEN unsigned conf_program_strings(const char *str[2], const char *name[2]);
enum { CONF_SRC_FILE, CONF_SRC_ENV, CONF_SRC_GLOBAL, CONF_SRC_GLOBAL2, CONF_SRC_N }; /* opt.malloc_conf.* positions */
HIDDEN const char *conf_source_string(unsigned src); /* "" if that source gave nothing */

/* ------------------------------------------------------------------ init.c */
HIDDEN extern bool strata_ready;
HIDDEN bool strata_init(void); /* true on failure */
HIDDEN tsd_t *tsd_fetch(void); /* initialised process, this thread's state */
HIDDEN extern pthread_key_t tsd_key;
HIDDEN extern bool tsd_key_ready;
HIDDEN extern uint64_t ctl_epoch;

/* ------------------------------------------------------------------ introspection (ctl.c) */
HIDDEN void tcache_set_enabled(tsd_t *tsd, bool on); /* thread.tcache.enabled */
HIDDEN extern uint64_t stats_zero_reallocs;           /* realloc(p, 0) calls (atomic) */
HIDDEN void ctl_prefork(void); /* fork handlers of ctl_lock (first in the lock order) */
HIDDEN void ctl_postfork_parent(void);
HIDDEN void ctl_postfork_child(void);

typedef struct {
  size_t allocated, active, metadata, resident, mapped, retained, dirty;
  size_t small_allocated, large_allocated;
  size_t muzzy;
} stats_t;
HIDDEN void stats_merge(stats_t *s);

/* ------------------------------------------------------------------ ehooks.c */
/*
 * The page source under extent.c: the OS (os.c) unless an arena has extent hooks. Each
 * wrapper calls the user's hook with the thread marked in_hook (its own mallocs go to
 * arena 0, uncached) and returns true on failure or when the hook is NULL.
 */
HIDDEN extern extent_hooks_t ehooks_default;
static inline extent_hooks_t *arena_hooks(const arena_t *a) {
  return __atomic_load_n(&a->hooks, __ATOMIC_ACQUIRE);
}
HIDDEN void *ehooks_alloc(arena_t *a, extent_hooks_t *h, size_t size, size_t align, bool *zero, bool *commit);
/* Descriptors and bitmaps of arena a: its own base if it has one, else the shared pools.
 * Slow paths only (edata caches, new slabs, bitmaps of slabs that were full). */
static inline unsigned arena_meta_get(arena_t *a, unsigned pool, void **out, unsigned n) {
  if (unlikely(a->mbase != NULL)) return meta_base_get(a, pool, out, n);
  return meta_pool_get(pool, out, n);
}
static inline void arena_meta_put(arena_t *a, unsigned pool, void *const *objs, unsigned n) {
  if (unlikely(a->mbase != NULL)) {
    meta_base_put(a, pool, objs, n);
  } else {
    meta_pool_put(pool, objs, n);
  }
}
HIDDEN bool ehooks_dalloc(arena_t *a, extent_hooks_t *h, void *addr, size_t size, bool committed);
HIDDEN void ehooks_destroy(arena_t *a, extent_hooks_t *h, void *addr, size_t size, bool committed);
HIDDEN bool ehooks_commit(arena_t *a, extent_hooks_t *h, void *addr, size_t size);
HIDDEN bool ehooks_decommit(arena_t *a, extent_hooks_t *h, void *addr, size_t size);
HIDDEN bool ehooks_purge_lazy(arena_t *a, extent_hooks_t *h, void *addr, size_t size);
HIDDEN bool ehooks_purge_forced(arena_t *a, extent_hooks_t *h, void *addr, size_t size);
HIDDEN bool ehooks_split(arena_t *a, extent_hooks_t *h, void *addr, size_t size, size_t size_a, bool committed);
HIDDEN bool ehooks_merge(arena_t *a, extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b,
                         size_t size_b, bool committed);

/* ------------------------------------------------------------------ arenas_user.c */
/* Arena indices: 0..narenas-1 ordinary, narenas the oversize arena, then user arenas up
 * to ARENAS_MAX - 1 (MALLCTL_ARENAS_ALL is the first index that names none). */
#define ARENAS_MAX 4096
HIDDEN extern unsigned narenas_total; /* atomic: 1 + the highest index ever used */
#define arena_ind_is_user(i) ((i) > narenas)
/* The 8-byte class's free map: for each slab of an ordinary arena, a bitmap (slab.c makes
 * it with the slab, in a block of the slab bitmaps' pool) whose bit is set while the region
 * is free to the program, wherever it waits (its slab's bitmap, a thread cache, a remote
 * chain). Every free sets its bit atomically, and finding it set is a double free, by any
 * thread, exact; every hand-out to the program clears it. Fills and flushes leave it alone.
 * Held in the slab's lru_prev, which only user arenas' active extents use (none of theirs
 * has a map). */
static inline uint64_t *tiny_fmap(const edata_t *s) {
  return arena_ind_is_user(edata_arena_ind(s)) ? NULL : (uint64_t *)(void *)s->lru_prev;
}
/* mallctl names of arenas_user.c and tcache.c: ENOENT if none matches. */
/* mallctl handlers (rows of ctl.c's table) */
/* arenas.create's work: hp NULL for no hooks (experimental.arenas_create_ext calls it too). */
HIDDEN int au_create(void *oldp, size_t *oldlenp, extent_hooks_t *const *hp, bool metadata_use_hooks);
HIDDEN ctl_handler_t au_arenas_create, au_arena_reset, au_arena_destroy, au_arena_initialized,
    au_arena_extent_hooks, au_thread_arena, au_tcache_create, au_tcache_flush, au_tcache_destroy;
/* Counters of destroyed arenas (MALLCTL_ARENAS_DESTROYED); false while none was destroyed. */
typedef struct {
  uint64_t small_nmalloc, small_ndalloc, large_nmalloc, large_ndalloc, npurged;
  size_t pactive, pdirty, mapped;
} arena_counts_t;
HIDDEN bool arenas_destroyed_read(arena_counts_t *c);
/* Extents (elock held): destroy every free extent of a (after a reset and a purge). */
HIDDEN void extent_destroy_all(arena_t *a);
/* extent_purge of an arena with hooks (elock held, dropped around the hooks). */
HIDDEN size_t extent_purge_hooked(arena_t *a, extent_hooks_t *h, size_t target_pages);
/* The explicit caches (tcache.c). */
#define TCACHES_MAX 4093 /* jemalloc's MALLOCX_TCACHE_MAX + 1: 12 bits less two codes */
HIDDEN tcache_t *tcache_explicit(unsigned ind); /* NULL if no such cache */
HIDDEN int tcache_explicit_create(unsigned *ind);
HIDDEN int tcache_explicit_flush(unsigned ind, bool destroy);
HIDDEN void tcache_release(tsd_t *tsd);
/* MALLOCX_ARENA(user arena) allocations: a per-thread reserve of small regions, filled in
 * batches and valid while the arena's gen is the one it was filled under (a reset or a
 * destroy makes every reserve stale: its regions are never handed out). */
#define UR_BATCH 32 /* most regions per fill: one bin lock per 32 allocations (callgrind: 16 ->
                     * 32 saves 8 instructions per mallocx, 64 only 2 more) */
typedef struct ureserve_s {
  arena_t *arena;
  uint64_t gen;
  unsigned code;             /* MALLOCX_ARENA's field for arena (ind + 1); ~0u: none */
  void *head[SZ_NSMALL + 1]; /* NULL-terminated lists */
  uint8_t batch[SZ_NSMALL + 1]; /* next fill: doubles from 2 up to UR_BATCH within a gen, so a
                                 * request that takes one block of a class reserves few */
} ureserve_t;
HIDDEN void *ureserve_refill(tsd_t *tsd, arena_t *a, szind_t ind);
HIDDEN void ureserve_thread_exit(tsd_t *tsd);
/* slab.c: give a chain of regions back unless a's gen moved on (checked under the lock). */
HIDDEN void bin_return_chain(arena_t *a, szind_t ind, void *head, uint64_t gen); /* flush and give up the thread's cache */
HIDDEN NORETURN void strata_bad_flag(const char *func, const char *what, unsigned ind);
HIDDEN int ctl_rw(void *oldp, size_t *oldlenp, void *newp, size_t newlen, const void *val, size_t len);
/* jemalloc's READ: a *oldlenp that is not len copies what fits and is EINVAL (ctl.c). */
HIDDEN int ctl_copy_out(void *oldp, size_t *oldlenp, const void *val, size_t len);
/* decay.c */
HIDDEN ctl_handler_t ctl_arena_decay, ctl_arena_purge, ctl_arena_dirty_decay_ms, ctl_arena_muzzy_decay_ms,
    ctl_arenas_dirty_decay_ms, ctl_arenas_muzzy_decay_ms, ctl_opt_dirty_decay_ms, ctl_opt_muzzy_decay_ms,
    ctl_stats_mem_limit, ctl_stats_mem_limit_purges,
    ctl_opt_limit_headroom;
/* background.c */
HIDDEN ctl_handler_t ctl_background_thread, ctl_max_background_threads, ctl_opt_background_thread,
    ctl_opt_max_background_threads, ctl_opt_thp, ctl_opt_metadata_thp, ctl_stats_bg_num_threads,
    ctl_stats_bg_num_runs, ctl_stats_bg_run_interval;
/* events.c */
HIDDEN ctl_handler_t ctl_soft_limit, ctl_hard_limit, ctl_opt_soft_limit, ctl_opt_hard_limit, ctl_opt_pressure_purge,
    ctl_stats_soft_limit, ctl_stats_hard_limit, ctl_stats_soft_limit_purges, ctl_stats_hard_limit_refusals,
    ctl_stats_pressure_events, ctl_stats_pressure_purged, ctl_stats_events_fired, ctl_stats_pressure_watched;
/* Per-arena page counts for the stats code (elock taken inside). */
HIDDEN void arena_page_counts(arena_t *a, size_t *ndirty, size_t *nmuzzy);

/* ------------------------------------------------------------------ background.c */
/* Background purging threads: created lazily when an arena has pages to decay, never
 * inside the first malloc; each sleeps until its arenas' earliest decay deadline. */
HIDDEN extern bool bg_enabled;          /* atomic */
HIDDEN extern mtx_t bg_lock;            /* stats.mutexes.background_thread */
/* No lock held: wake a's thread, or mark it wanted (bg_create_pending). pthread_create
 * may call malloc, so a wanted thread is created later by bg_create_wanted, which the
 * entry points call on their slow paths once nothing of strata's is in progress. */
HIDDEN void bg_wake(arena_t *a);
HIDDEN extern bool bg_create_pending;   /* atomic */
HIDDEN void bg_create_wanted(void);
HIDDEN bool bg_set_enabled(bool on);    /* true on failure */
HIDDEN void bg_boot(void);              /* strata_init: background_thread from the options */
HIDDEN void bg_prefork(void);
HIDDEN void bg_postfork_parent(void);
HIDDEN void bg_postfork_child(void);

/* ------------------------------------------------------------------ prof.c, prof_dump.c */
/*
 * Heap profiling. With opt.prof (fixed at start) strata_malloc's entry is patched into a
 * jump to malloc_prof (prof_entry_patch); unpatched, its fast path reads its class from
 * sz_malloc_lookup, which then holds 0 (bin 0 is always empty), so every malloc goes to
 * malloc_prof through malloc_slow. malloc_prof pops the real class's bin (LIFO, the bin
 * free pushes onto) and counts the pop on the bin's nmalloc, biased by the class's
 * geometric countdown (prof_class_take), leaving for the sampling path only when that
 * reaches zero. Every other allocation path counts its bytes on the thread's byte countdown
 * (prof_cdn: prof_alloc, prof_take). Frees are prof:false's; a sampled
 * small block's granule carries class 0 so that its free takes the slow path; see
 * prof.c. With prof:false nothing here runs.
 */
enum { PROF_FMT_JEMALLOC = 1, PROF_FMT_PPROF = 2 };
#define PROF_THR_NAME 16 /* thread.prof.name, NUL included: jemalloc 5.3.1's PROF_THREAD_NAME_MAX_LEN */
typedef struct prof_thr_s prof_thr_t;
typedef struct { /* a thread's line in heap_v2 dumps, copied under prof_lock */
  uint64_t uid, cur_objs, cur_bytes, acc_objs, acc_bytes;
  char name[PROF_THR_NAME];
} prof_thr_snap_t;
typedef struct {
  bool prof, active, thread_active_init, gdump, final, leak, accum, leak_error;
  unsigned lg_sample;   /* 0..62 */
  int lg_interval;      /* -1: no interval dumps */
  unsigned format;      /* PROF_FMT_* bits */
  int signal;           /* 0: none */
  char prefix[256];
} prof_opt_t;
HIDDEN extern prof_opt_t prof_opt;
HIDDEN extern bool prof_on;
/* A tracer attached to or left otel_memory:alloc (its USDT semaphore) since the last look:
 * prof_trace_switch turns the sampler on or off in a prof:false process (prof.c). On
 * allocation slow paths only. */
HIDDEN extern bool prof_trace_seen;
HIDDEN extern uint64_t prof_trace_switches;
HIDDEN void prof_trace_switch(void);
#if defined(STRATA_USDT) && STRATA_USDT
HIDDEN extern volatile unsigned short otel_memory_alloc_semaphore;
#endif
static inline void prof_trace_tick(void) {
#if defined(STRATA_USDT) && STRATA_USDT
  if (unlikely((__atomic_load_n(&otel_memory_alloc_semaphore, __ATOMIC_RELAXED) != 0) !=
               __atomic_load_n(&prof_trace_seen, __ATOMIC_RELAXED)))
    prof_trace_switch();
#endif
}
HIDDEN void prof_boot(void);      /* in strata_init, before tcache_boot */
HIDDEN int prof_entry_patch(void); /* alloc.c: strata_malloc jumps to malloc_prof; 0 or why not */
HIDDEN extern int prof_entry_state; /* 1 patched, else 0 or -errno (prof_boot) */
HIDDEN void prof_boot_late(void); /* after strata is ready: atexit, signal handler */
HIDDEN void prof_boot_thread(void); /* from a constructor: prof_signal's dump thread */
HIDDEN void prof_take(size_t usize); /* every allocation but malloc_prof's pops: its bytes */
HIDDEN bool prof_class_take(tcache_t *tc, szind_t ind); /* malloc_prof's pop left its fast path */
HIDDEN bool prof_take_record(size_t usize); /* ialloc: counts usize; true: record this one */
HIDDEN bool prof_pending(void);             /* prof_class_take's pop is to be recorded */
HIDDEN void prof_class_unpop(tcache_t *tc, szind_t ind); /* that pop was given back */
/* A few freed one-page promoted extents kept by each thread for its next samples (prof.c):
 * get: one (its szind still 0) or NULL; put: false when full (szind is set to 0: a second
 * free of the block then finds no class and is reported). */
HIDDEN edata_t *prof_page_get(void);
HIDDEN bool prof_page_put(edata_t *e);
HIDDEN extern bool prof_want_thread;            /* the dump thread is to be created */
HIDDEN void prof_free_hook(void);               /* a free's slow path, outside strata: may malloc */
HIDDEN void prof_after(tsd_t *tsd, void *p, size_t usize); /* records p if prof_take chose it */
HIDDEN bool prof_free_sampled(tsd_t *tsd, void *p, edata_t *ed); /* true: leak p (re-entered) */
static inline bool prof_is_sampled(const edata_t *ed) {
  return __atomic_load_n(&ed->prof_nsampled, __ATOMIC_RELAXED) != 0;
}
/* Whether p (class ind, extent ed) may be a sampled block: a small one only in a granule
 * whose rtree class is 0 (prof.c sets it while a sampled block starts there). */
static inline bool prof_maybe_sampled(const void *p, const edata_t *ed, szind_t ind) {
  if (!prof_is_sampled(ed)) return false;
  return ind > SZ_NSMALL || rt_szind(rtree_read((uintptr_t)p)) == 0;
}
HIDDEN extern mtx_t prof_lock; /* stack table and live set (stats.mutexes.prof) */
HIDDEN void prof_prefork(void);
HIDDEN void prof_postfork(bool child);
HIDDEN ctl_handler_t hooks_ctl_install, hooks_ctl_remove, hooks_ctl_safety_check_abort, hooks_ctl_thread_countp,
    hooks_ctl_batch_alloc, hooks_ctl_arenas_create_ext, hooks_ctl_arena_dss;
HIDDEN ctl_handler_t compat_thread_tcache_max, compat_ncached_max_read, compat_ncached_max_write,
    compat_thread_peak_read, compat_thread_peak_reset, compat_arena_oversize_threshold,
    compat_arena_retain_grow_limit, compat_arena_name, compat_approximate_active, compat_arena_pactivep,
    compat_prof_hook, compat_thread_event_hook, compat_prof_recent, prof_ctl_thread_active_init,
    prof_ctl_prefix, prof_ctl_log, compat_utilization_query, compat_utilization_batch_query;
HIDDEN void compat_postfork_child(void);
HIDDEN ctl_handler_t prof_ctl_active, prof_ctl_dump, prof_ctl_dump_request, prof_ctl_gdump, prof_ctl_reset, prof_ctl_lg_sample,
    prof_ctl_interval, prof_ctl_thread_name, prof_ctl_thread_active, prof_ctl_opt_prof,
    prof_ctl_opt_prof_active, prof_ctl_opt_thread_active_init, prof_ctl_opt_lg_sample, prof_ctl_opt_prefix,
    prof_ctl_opt_lg_interval, prof_ctl_opt_gdump, prof_ctl_opt_final, prof_ctl_opt_leak, prof_ctl_opt_accum,
    prof_ctl_opt_leak_error;
/* prof_dump.c: the writers. The caller holds prof_dump_lock; nothing here mallocs. */
typedef struct prof_stack_s prof_stack_t;
struct prof_stack_s {
  prof_stack_t *next;      /* hash chain */
  prof_stack_t *all_next;  /* every stack, newest first (dumps walk it) */
  uint64_t hash;
  uint32_t depth;
  /* Guarded by prof_lock. Raw sample counts (heap_v2) and unbiased estimates (pprof). */
  uint64_t cur_objs, cur_bytes, acc_objs, acc_bytes;
  double w_cur_objs, w_cur_bytes, w_acc_objs, w_acc_bytes;
  uintptr_t frames[];      /* return addresses, innermost first */
};
typedef struct {           /* one stack's counters copied under prof_lock for a dump */
  const prof_stack_t *st;
  uint64_t cur_objs, cur_bytes, acc_objs, acc_bytes;
  double w_cur_objs, w_cur_bytes, w_acc_objs, w_acc_bytes;
} prof_snap_t;
HIDDEN extern mtx_t prof_dump_lock;
HIDDEN uint64_t prof_exp_draw(uint64_t *rng, uint64_t mean); /* for the unit tests too */
HIDDEN double prof_ln(double x);                 /* libm's log(x), x > 0 normal */
HIDDEN double prof_one_minus_exp_neg(double x); /* 1 - exp(-x), x >= 0 */
HIDDEN prof_stack_t *prof_stack_intern(const uintptr_t *frames, unsigned n); /* prof_lock held */
HIDDEN prof_snap_t *prof_snapshot(size_t *n, size_t *map_bytes); /* os_map'ed; os_unmap(map_bytes) */
HIDDEN bool prof_dump_heap_v2(const char *path, const prof_snap_t *s, size_t n, const prof_thr_snap_t *t, size_t nt,
                              uint64_t period);
HIDDEN prof_thr_snap_t *prof_thr_snapshot(size_t *n, size_t *map_bytes); /* os_map'ed */
HIDDEN void prof_thread_exit(tsd_t *tsd); /* tcache.c's thread destructor */
HIDDEN bool prof_dump_pprof(const char *path, const prof_snap_t *s, size_t n, uint64_t period);
HIDDEN bool prof_leak_report(const prof_snap_t *s, size_t n, uint64_t period); /* true: leaks */

#endif /* STRATA_INTERNAL_H */

/*
 * alloc.c - the entry points: malloc & co, the glibc extras and jemalloc's *allocx.
 * malloc and free are a short inline fast path (size -> class by table, pop from the
 * thread cache; rtree lookup, push) with one exit each to an out-of-line slow path.
 * With STRATA_OVERRIDE the standard names are aliases of the strata_ functions.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "probes.h"

#define EXPORT __attribute__((visibility("default")))
/* mremap beats copying from about this size (page-table moves vs a 4 MiB memcpy). */
#define REMAP_MIN ((size_t)4 << 20)

/* ---------------------------------------------------------------- core */
/* A free on a slow path into cache tc (the thread's or an explicit one): tagged and
 * linked as the fast path does, or handed to the cache's flush when the bin is full. */
static inline void tcache_push_slow(tsd_t *tsd, tcache_t *tc, szind_t ind, void *p) {
  tbin_t *b = &tc->bins[ind];
  sassert(ind != SZ_TINY_IND); /* no tag word: free_tiny pushes that class */
  tsd->reentrant = 1;
  if (ind <= SZ_NSMALL) TAG_WORD(p) = TAG_OF(p);
  else if (unlikely(p == b->head)) strata_invalid_free("free", p); /* large: freed twice in a row */
  if (likely(b->avail != 0)) {
    LINK_SET(p, b->head);
    b->head = p;
    tbin_avail_move(b, -1);
  } else {
    tcache_dalloc_hard(tc, ind, p);
  }
  tsd->reentrant = 0;
}

HIDDEN void strata_delete_sized(void *p, size_t size);
HIDDEN void strata_delete_sized_aligned(void *p, size_t size, size_t alignment);

static inline arena_t *tsd_arena(tsd_t *tsd, size_t usize) {
  if (unlikely(tsd->in_hook)) return arena_get(0); /* an extent hook's own allocations */
  if (unlikely(usize >= opt.oversize_threshold) && !(tsd->arena && tsd->arena->user))
    return arena_get(narenas);
  if (unlikely(tsd->arena == NULL)) tsd->arena = arena_choose();
  arena_spread_check(tsd); /* uncached paths: the tally moves the thread too */
  return tsd->arena;
}

/* An 8-byte region handed to the program: its free-map bit (internal.h, tiny_fmap) goes.
 * A bit already clear means the region was handed out twice: a free list was corrupted. */
static inline void tiny_mark_used(void *p) {
  edata_t *ed = rt_edata(rtree_read_slow((uintptr_t)p));
  uint64_t *fm = ed->slab ? tiny_fmap(ed) : NULL; /* not a sampled block's page */
  if (fm == NULL) return;
  uint64_t regind = ((uintptr_t)p - ed->addr) >> 3, bit = (uint64_t)1 << (regind % 64);
  if (unlikely(!(__atomic_fetch_and(&fm[regind / 64], ~bit, __ATOMIC_RELAXED) & bit)))
    strata_heap_corruption(p, SZ_TINY_IND);
}

static inline void alloc_fill(void *p, size_t usize, bool zero) {
  if (unlikely(opt.junk & JUNK_ALLOC) && !zero) memset(p, 0xa5, usize);
}

/* ---------------------------------------------------------------- sampled blocks' pages */
/* Heap profiling (docs/design.md, "Profiling"): a sampled small block is served from a page
 * extent of its own, jemalloc's promotion, so that no slab granule is marked for it and the
 * small fast paths never meet a sampled block. The extent is a large one whose class is the
 * small class (szind <= SZ_NSMALL, slab 0; guard.c's blocks are the only others, told
 * apart by their arena id): malloc_usable_size, sized frees and realloc see the small
 * class; its page-map entry carries class 0 (large_rt_ind: no cached large class with
 * prof:true), so free() takes the slow path, where idalloc_prof recognises it by its
 * extent. The arena counts it as a large allocation of its pages (stats.allocated,
 * large.allocated, large.nmalloc: arena_prof_page_alloc), thread.allocated as the small
 * class's usable size. A thread keeps up to PROF_PAGES freed one-page extents for its next
 * samples (prof.c: prof_page_get, prof_page_put), still counted as allocated, as cached
 * blocks are. */
/* A promoted sample's redzone: the bytes after it on its page, from its usable size up to
 * PROF_REDZONE of them (no path writes a promoted 8-byte block's tag word), hold
 * REDZONE_BYTE while it lives; its free checks them, so a write past the end of a sampled
 * block is reported (jemalloc's redzones for sampled allocations, opt_safety_checks).
 * Sampled blocks are rare (one per 512 KiB allocated by default): the fill and the check
 * cost nothing measurable, and a profiled fleet finds overflows as it samples. */
#define PROF_REDZONE 256
#define REDZONE_BYTE 0xbc
static inline size_t redzone_at(size_t usize) { return usize; }
static inline size_t redzone_len(size_t usize) {
  size_t at = redzone_at(usize), end = (usize + os_page - 1) & ~(os_page - 1);
  return end > at ? (end - at < PROF_REDZONE ? end - at : PROF_REDZONE) : 0;
}

static NOINLINE void *prof_promote(tsd_t *tsd, szind_t ind, arena_t *a, bool zero) {
  sassert(ind <= SZ_NSMALL);
  size_t usize = sz_size[ind], esize = (usize + os_page - 1) & ~(os_page - 1);
  edata_t *e = !a->user && esize == os_page && !tsd->in_hook ? prof_page_get() : NULL;
  if (e != NULL) { /* a page this thread kept from a freed sample */
    e->szind = (uint16_t)ind;
    if (zero) memset((void *)e->addr, 0, usize);
  } else {
    if ((e = arena_prof_page_alloc(a, esize, ind)) == NULL) return NULL;
    if (zero && !e->zeroed) memset((void *)e->addr, 0, usize);
  }
  memset((char *)e->addr + redzone_at(usize), REDZONE_BYTE, redzone_len(usize));
  return (void *)e->addr;
}

/* The offset of the first byte of promoted block p's redzone that was written over, or -1. */
static ptrdiff_t redzone_damage(const void *p, size_t usize) {
  const unsigned char *z = (const unsigned char *)p + redzone_at(usize);
  for (size_t i = 0, n = redzone_len(usize); i < n; i++) {
    if (z[i] != REDZONE_BYTE) return (ptrdiff_t)(redzone_at(usize) + i);
  }
  return -1;
}

/* ialloc's prof:true tail (reentrant held): counts p's bytes and records it when it holds
 * the sampling point; a small slab block is first exchanged for a promoted page of its
 * arena (an explicit arena's, or the thread's), and goes back to its slab. Where no page
 * can be had, the block is sampled in its slab (prof.c marks its granule). Only (p, ind,
 * zero): ialloc keeps no more registers live across the allocation than prof:false needs
 * (passing use_tcache and the arena cost the producer/consumer figure 0.1 an object). */
static NOINLINE void *ialloc_prof(tsd_t *tsd, void *p, szind_t ind, bool zero) {
  if (p == NULL) return NULL;
  size_t usize = sz_size[ind];
  if (prof_take_record(usize) && ind <= SZ_NSMALL) {
    edata_t *ed = rt_edata(rtree_read_slow((uintptr_t)p));
    void *q = ed->slab ? prof_promote(tsd, ind, arena_of(ed), zero || opt.zero) : NULL;
    if (q != NULL) {
      bin_dalloc_batch(arena_of(ed), ind, &p, 1);
      p = q;
    }
  }
  prof_after(tsd, p, usize);
  return p;
}

/* Allocate class ind; explicit is the MALLOCX_ARENA arena or NULL; use_tcache false for
 * MALLOCX_TCACHE_NONE. */
static void *ialloc(tsd_t *tsd, szind_t ind, bool zero, bool use_tcache, arena_t *explicit) {
  size_t usize = sz_size[ind];
  void *p;
  if (unlikely(tsd->reentrant)) return NULL;
  tsd->reentrant = 1;
  if (unlikely(tsd->in_hook)) explicit = NULL, use_tcache = false;
  /* The 8-byte class: malloc_tiny pops its bin; here (explicit arenas and caches, threads
   * inside strata) it comes from the arena's bin. */
  if (likely(ind < tcache_nbins && use_tcache && explicit == NULL && ind != SZ_TINY_IND)) {
    tcache_t *tc = tsd->state == TSD_ACTIVE ? tsd->tcache : NULL;
    if (tc == NULL) {
      tsd->reentrant = 0;
      tc = tcache_get_slow(tsd);
      tsd->reentrant = 1;
    }
    if (tc) {
      tbin_t *b = &tc->bins[ind];
      p = b->head;
      if (p != TBIN_END) {
        if (unlikely(!link_ok(p, ind))) strata_heap_corruption(p, ind);
        b->head = LINK_DEC(p);
        tbin_avail_move(b, 1);
      } else {
        p = tcache_alloc_hard(tc, ind);
      }
      if (p && zero) memset(p, 0, usize);
      goto done;
    }
  }
  {
    /* A tracer attached or left (prof.c; a cache's misses look in tcache_gc_visit) */
    prof_trace_tick();
    arena_t *a = explicit ? explicit : tsd_arena(tsd, usize);
    if (a == NULL) {
      p = NULL;
    } else if (ind <= SZ_NSMALL) {
      p = arena_small_alloc(a, ind, zero || opt.zero);
    } else {
      p = arena_large_alloc(a, usize, 0, zero || opt.zero);
      if (tsd->state == TSD_ACTIVE && tsd->tcache) tcache_large_tick(tsd->tcache, usize);
    }
  }
done:
  /* Heap profiling: this allocation's bytes, whichever way it was served (prof.c); a
   * sampled small block is exchanged for a page of its own (ialloc_prof). */
  if (unlikely(prof_on)) p = ialloc_prof(tsd, p, ind, zero);
  if (unlikely(ind == SZ_TINY_IND) && p != NULL) tiny_mark_used(p);
  tsd->reentrant = 0;
  if (likely(p != NULL)) {
    /* allocated: untagged (cached large classes too: free()'s fast path tags them) */
    if ((ind <= SZ_NSMALL || ind < tcache_nbins) && ind != SZ_TINY_IND) TAG_WORD(p) = 0;
    tsd->allocated += usize;
    alloc_fill(p, usize, zero || opt.zero);
  }
  /* after p is counted: hooks.c's tick (thread.allocatedp) rides on this flag too */
  if (unlikely(__atomic_load_n(&bg_create_pending, __ATOMIC_RELAXED))) bg_create_wanted();
  return p;
}

/* Aligned allocation beyond a class's natural alignment: a page extent carved aligned. */
static void *ialloc_aligned(tsd_t *tsd, size_t size, size_t align, bool zero, bool use_tcache,
                            arena_t *explicit) {
  size_t usize = sz_sa2u(size, align);
  if (usize == 0) return NULL;
  if (align <= os_page) return ialloc(tsd, sz_size2index(usize), zero, use_tcache, explicit);
  if (tsd->reentrant) return NULL;
  arena_t *a = explicit && !tsd->in_hook ? explicit : tsd_arena(tsd, usize);
  if (a == NULL) return NULL;
  tsd->reentrant = 1;
  if (unlikely(prof_on)) prof_take(usize);
  void *p = arena_large_alloc(a, usize, align, zero || opt.zero);
  if (unlikely(prof_on)) prof_after(tsd, p, usize);
  tsd->reentrant = 0;
  if (p) {
    tsd->allocated += usize;
    alloc_fill(p, usize, zero || opt.zero);
  }
  return p;
}

/* The class of a block strata owns, or 0: slab granules carry it in the rtree entry;
 * a large block must be an active extent and p its first byte. */
static inline szind_t owned_szind(const void *p, edata_t **edp) {
  uint64_t e = rtree_read_slow((uintptr_t)p); /* the class comes from the edata */
  edata_t *ed = rt_edata(e);
  *edp = ed;
  if (ed == NULL) return 0;
  if (e & RT_SLAB) {
    /* The rtree class may be 0 (a user arena's slab; a granule holding a sampled block):
     * the slab's own is the one. */
    szind_t ind = ed->szind;
    uint64_t diff = (uintptr_t)p - ed->addr, regind = (diff * bin_info[ind].div_magic) >> 32;
    return regind * bin_info[ind].size == diff ? ind : 0; /* a region's start, exactly */
  }
  if (ed->state != ES_ACTIVE || ed->slab || (uintptr_t)p != ed->addr) return 0;
  return ed->szind;
}

/* Look up p for a deallocating call; reports and aborts if strata does not own it. */
static inline edata_t *lookup_owned(const void *p, szind_t *ind, const char *func) {
  edata_t *ed;
  *ind = owned_szind(p, &ed);
  if (unlikely(*ind == 0)) strata_invalid_free(func, p);
  return ed;
}

static inline __attribute__((always_inline)) void idalloc_body(tsd_t *tsd, void *p, edata_t *ed, szind_t ind,
                                                               bool use_tcache, const char *func) {
  size_t usize = sz_size[ind];
  if (ind <= SZ_NSMALL && unlikely(tag_is_set(p, ind))) strata_invalid_free("free", p);
  if (unlikely(opt.junk & JUNK_FREE)) memset(p, 0x5a, usize);
  tsd->deallocated += usize;
  if (unlikely(ed->arena_id == GUARD_ARENA)) { /* a sampled guarded block (guard.c) */
    guard_free(p, ed);
    return;
  }
  if (likely(ind < tcache_nbins && use_tcache && !tsd->reentrant && !tsd->in_hook && ind != SZ_TINY_IND &&
             !arena_ind_is_user(edata_arena_ind(ed)))) {
    /* A thread whose first call is a free gets its cache now, but that block goes back
     * to its arena: it was allocated elsewhere, next to other threads' blocks, and
     * caching it would hand it to this thread's next malloc (Hoard's cache-scratch). */
    bool first = tsd->state != TSD_ACTIVE;
    tcache_t *tc = first ? tcache_get_slow(tsd) : tsd->tcache;
    if (tc && !first) {
      tcache_push_slow(tsd, tc, ind, p);
      if (unlikely(__atomic_load_n(&bg_create_pending, __ATOMIC_RELAXED))) bg_create_wanted();
      return;
    }
  }
  if (unlikely(tsd->reentrant)) {
    /* A signal handler freed while this thread was inside strata: leaking is the only
     * safe answer; say so once. */
    static bool said;
    if (!said) {
      said = true;
      msg_write("<strata>: free() re-entered from a signal handler: block leaked\n");
      if (opt.abort) strata_fatal("warning with abort:true");
    }
    return;
  }
  /* Allocation hooks: a thread gives up its cache while any is installed (hooks.c), so
   * its frees come here, off the paths a thread cache's flushes take. */
  if (unlikely(hooks_on())) hook_invoke_dalloc(hook_dalloc_free, p, (uintptr_t)p, 0, 0);
  tsd->reentrant = 1;
  if (ind <= SZ_NSMALL) {
    /* Tagged as a cached region is: a second free of it, by any thread, before a malloc
     * hands it out again finds the tag and is reported (a thread whose first call is
     * this free, an uncached thread, a user arena's block). The 8-byte class has no tag
     * word: its free map and slab bitmap (bin_dalloc_tiny) report a second free. */
    if (unlikely(ind == SZ_TINY_IND)) {
      bin_dalloc_tiny(arena_of(ed), ed, p, func);
    } else {
      TAG_WORD(p) = TAG_OF(p);
      bin_dalloc_batch(arena_of(ed), ind, &p, 1);
    }
  } else {
    arena_large_dalloc(ed);
  }
  tsd->reentrant = 0;
  /* Background threads are created here, with no strata state in progress on this
   * thread (pthread_create may call malloc). */
  if (unlikely(__atomic_load_n(&bg_create_pending, __ATOMIC_RELAXED))) bg_create_wanted();
}

/* Heap profiling: a sampled block leaves the live set (re-entered from a signal handler,
 * the block is kept, leaked, so the set never names freed memory); then the block goes
 * where prof:false's would. Reached by the frees the fast path leaves (a sampled block's
 * granule, large blocks, full bins, ...). Out of line, so that idalloc's code does not
 * change with prof:false. */
static NOINLINE void idalloc_prof(tsd_t *tsd, void *p, edata_t *ed, szind_t ind, bool use_tcache,
                                  const char *func) {
  if (ind <= SZ_NSMALL && unlikely(tag_is_set(p, ind))) strata_invalid_free("free", p);
  if (unlikely(prof_maybe_sampled(p, ed, ind)) && prof_free_sampled(tsd, p, ed)) return;
  if (unlikely(prof_want_thread)) prof_free_hook();
  if (ind <= SZ_NSMALL && !ed->slab && ed->arena_id != GUARD_ARENA) {
    /* A promoted sampled block (prof_promote): its redzone checked, then its page extent
     * goes back to its arena (also after a safety_check_abort hook returned, as jemalloc). */
    ptrdiff_t bad = redzone_damage(p, sz_size[ind]);
    if (unlikely(bad >= 0)) strata_overflow(p, sz_size[ind], (size_t)bad);
    if (unlikely(opt.junk & JUNK_FREE)) memset(p, 0x5a, sz_size[ind]);
    tsd->deallocated += sz_size[ind];
    if (unlikely(tsd->reentrant)) return; /* a signal handler's free inside strata: leaked */
    /* One-page extents of ordinary arenas stay with the thread for its next samples. */
    if (ed->size == os_page && tsd->state == TSD_ACTIVE && !tsd->in_hook && !arena_of(ed)->user &&
        prof_page_put(ed))
      return;
    tsd->reentrant = 1;
    arena_prof_page_dalloc(ed);
    tsd->reentrant = 0;
    if (unlikely(__atomic_load_n(&bg_create_pending, __ATOMIC_RELAXED))) bg_create_wanted();
    return;
  }
  idalloc_body(tsd, p, ed, ind, use_tcache, func);
}

/* func: the program's call, for the 8-byte class's double-free report (bin_dalloc_tiny). */
static void idalloc(tsd_t *tsd, void *p, edata_t *ed, szind_t ind, bool use_tcache, const char *func) {
  if (unlikely(prof_on)) {
    idalloc_prof(tsd, p, ed, ind, use_tcache, func);
    return;
  }
  idalloc_body(tsd, p, ed, ind, use_tcache, func);
}

/* ---------------------------------------------------------------- malloc / free */
/* Every allocating call's failure: ENOMEM, and with xmalloc:true jemalloc's abort (for
 * programs that would rather stop than check for NULL). Out of line: failures only. */
NOINLINE void alloc_oom(void) {
  if (unlikely(opt.xmalloc)) strata_fatal("out of memory (xmalloc:true)");
  errno = ENOMEM;
}

/* malloc's general path: ialloc (which counts the bytes with prof:true). */
static inline __attribute__((always_inline)) void *malloc_general(size_t size) {
  tsd_t *tsd = tsd_fetch();
  szind_t ind = sz_size2index(size);
  void *p = (tsd && ind) ? ialloc(tsd, ind, false, true, NULL) : NULL;
  if (unlikely(p == NULL)) {
    PROBE_OOM(size, 0);
    alloc_oom();
  }
  return p;
}

/* malloc_prof's way out: malloc_general out of line, reached by a tail jump, so that
 * malloc_prof keeps no stack frame (inlined, its saved registers cost every prof:true
 * malloc 6 instructions: wl_churn 1.077 -> 1.044 prof:true/prof:false). */
static NOINLINE void *malloc_prof_general(size_t size) { return malloc_general(size); }

/* malloc_prof's pop that left its fast path (prof_class_take): the block is popped and
 * counted as the fast path's, then recorded if it holds its class's sampling point. */
static NOINLINE void *malloc_prof_class(size_t size) {
  /* The class again, not passed: malloc_prof would keep it in a second register (a move
   * on every prof:true malloc). */
  size_t ind = __atomic_load_n(&sz_prof_ind[(size + 7) >> 3], __ATOMIC_RELAXED);
  tsd_t *tsd = &strata_tsd;
  tcache_t *tc = tsd->tcache;
  tbin_t *b = &tc->bins[ind];
  if (unlikely(tsd->reentrant)) { /* a signal handler inside strata: ialloc's answer (NULL) */
    b->nmalloc--;
    return malloc_prof_general(size);
  }
  void *p = b->head; /* canonical: malloc_prof tested it */
  b->head = LINK_DEC(p);
  TAG_WORD(p) = 0; /* allocated: untagged */
  b->avail++;
  tsd->reentrant = 1;
  if (prof_class_take(tc, (szind_t)ind)) {
    if (prof_pending()) { /* to be recorded: on a page of its own, p back to the bin */
      arena_t *a = unlikely(tsd->in_hook) ? arena_get(0) : tc->arena; /* where its pops come from */
      void *q = a ? prof_promote(tsd, (szind_t)ind, a, false) : NULL;
      if (q != NULL) {
        TAG_WORD(p) = TAG_OF(p);
        LINK_SET(p, b->head); /* room: p was just popped */
        b->head = p;
        b->avail--;
        prof_class_unpop(tc, (szind_t)ind);
        tsd->allocated += sz_size[ind];
        TAG_WORD(q) = 0; /* allocated: untagged (the page may hold an old region's tag) */
        p = q;
      }
    }
    prof_after(tsd, p, sz_size[ind]);
  }
  tsd->reentrant = 0;
  if (unlikely(__atomic_load_n(&bg_create_pending, __ATOMIC_RELAXED))) bg_create_wanted();
  return p;
}

/* Heap profiling's malloc (prof.c). With prof:true strata_malloc's first instruction is a
 * jump here (prof_entry_patch, below); where the code cannot be patched, strata_malloc's
 * own fast path always misses to here instead (its table, sz_malloc_lookup, is all 0). The
 * class's bin is popped as the fast path would (an empty cache, tcache_empty, misses) and
 * its bytes spent from the thread's countdown; the allocation that would reach zero, a
 * miss and the sizes above the table take ialloc, which counts it (prof_alloc) and samples
 * it if it holds the sampling point. */
static NOINLINE void *malloc_prof(size_t size) {
  if (likely(size <= SZ_LOOKUP_MAX)) {
    /* Shaped as strata_malloc's pop, with one more instruction (the jns below) and the jump. */
    size_t ind = __atomic_load_n(&sz_prof_ind[(size + 7) >> 3], __ATOMIC_RELAXED);
    tbin_t *b = &strata_tsd.tcache->bins[ind];
    void *p = b->head;
    if (likely(((uintptr_t)p & b->link_mask) == 0)) { /* TBIN_END fails it */
      /* nmalloc, biased by the class's countdown (prof_class_take), stays negative until
       * the pop that holds the class's sampling point: the increment's sign flag is the test. */
      int64_t n = (int64_t)b->nmalloc + 1;
      b->nmalloc = (uint64_t)n;
      if (likely(n < 0)) {
        b->head = LINK_DEC(p);
        TAG_WORD(p) = 0; /* allocated: untagged */
        b->avail++;
        return p;
      }
      return malloc_prof_class(size);
    }
  }
  return malloc_prof_general(size);
}

/* malloc_slow's way when malloc_divert is set: malloc_prof (prof:true, or a tracer
 * sampling: prof.c, prof_trace_switch), or malloc with the allocation hooks (hooks.c). Out
 * of line: malloc_slow pays one test for both. */
static NOINLINE void *malloc_diverted(size_t size) {
  if (__atomic_load_n(&malloc_prof_on, __ATOMIC_ACQUIRE) && size <= SZ_LOOKUP_MAX) return malloc_prof(size);
  void *p = malloc_general(size);
  if (hooks_on()) hook_invoke_alloc(hook_alloc_malloc, p, (uintptr_t)p, size, 0, 0);
  return p;
}

/* The 8-byte class's malloc (internal.h, SZ_TINY_IND). Its thread-cache bin always misses
 * malloc's fast path (a full link mask), whose pop would clear a second word the region does
 * not have; here it is popped with its link checked and no tag, and the region's free-map
 * bit cleared (tiny_mark_used). A miss fills the bin as other classes' misses do. A thread
 * without its cache (tcache:false, junk, zero, a user arena) or inside strata goes the
 * general way (ialloc, uncached). */
static NOINLINE void *malloc_tiny(size_t size) {
  tsd_t *tsd = &strata_tsd;
  /* A thread's cache is made by its first cached allocation (ialloc): here too, or a thread
   * that only allocates 8-byte blocks would never get one (2 M mallocs and frees of 7
   * bytes: 54 instructions each with one, 292 without). */
  if (unlikely(tsd->state == TSD_NOMINAL) && __atomic_load_n(&strata_ready, __ATOMIC_ACQUIRE) &&
      !tsd->reentrant)
    tcache_get_slow(tsd);
  if (likely(tsd->state == TSD_ACTIVE && !tsd->reentrant && !tsd->in_hook)) {
    tbin_t *b = &tsd->tcache->bins[SZ_TINY_IND];
    void *p = b->head;
    tsd->reentrant = 1; /* a signal handler's malloc meanwhile gets NULL */
    if (likely(p != TBIN_END)) {
      b->head = tbin_next(p, SZ_TINY_IND);
      tbin_avail_move(b, 1);
    } else {
      p = tcache_alloc_hard(tsd->tcache, SZ_TINY_IND);
    }
    if (likely(p != NULL)) {
      tiny_mark_used(p);
      tsd->reentrant = 0;
      tsd->allocated += 8;
      if (unlikely(__atomic_load_n(&bg_create_pending, __ATOMIC_RELAXED))) bg_create_wanted();
      return p;
    }
    tsd->reentrant = 0;
  }
  return malloc_general(size);
}

static NOINLINE void *malloc_slow(size_t size) {
  if (size <= SZ_LOOKUP_MAX) {
    /* Atomic: a thread can get here before strata_init (prof_boot) has finished. */
    if (unlikely(__atomic_load_n(&malloc_divert, __ATOMIC_RELAXED))) return malloc_diverted(size);
    if (size <= 8 && opt.tiny_class) return malloc_tiny(size);
  } else if (likely(strata_tsd.state == TSD_ACTIVE) && !strata_tsd.reentrant) {
    /* Cached classes above the lookup table (14-32 KiB): a hit pops the bin here, without
     * ialloc's general path (wl_xthread's 16 KiB blocks; about 110 instructions there). A
     * miss, or a thread without its cache, goes the long way, as do these classes with
     * prof:true (tcache_nbins_malloc 0: ialloc counts them). The class by
     * sz_size2index_compute's own first test, inline: a hit makes no call. */
    szind_t ind = likely(size <= SZ_LOOKUP_K_MAX) ? sz_lookup_k[(size - 1) >> 10] : sz_size2index_compute(size);
    if (ind < __atomic_load_n(&tcache_nbins_malloc, __ATOMIC_RELAXED)) {
      tbin_t *b = &strata_tsd.tcache->bins[ind];
      void *p = b->head;
      if (likely(p != TBIN_END)) {
        if (unlikely(!link_ok(p, ind))) strata_heap_corruption(p, ind);
        b->head = LINK_DEC(p);
        TAG_WORD(p) = 0; /* allocated: untagged (free()'s fast path tags large classes too) */
        if (ind <= SZ_NSMALL) {
          b->avail++;
          b->nmalloc++; /* counted into thread.allocated as the fast path's are */
        } else {
          tbin_avail_move(b, 1);
          strata_tsd.allocated += sz_size[ind];
        }
        return p;
      }
      /* A miss: ialloc with the class found here (malloc_general would work it out again);
       * class 0 (no class: an impossible size) goes on to malloc_general's ENOMEM. */
      if (likely(ind != 0)) {
        p = ialloc(&strata_tsd, ind, false, true, NULL);
        if (unlikely(p == NULL)) {
          PROBE_OOM(size, 0);
          alloc_oom();
        }
        return p;
      }
    }
    /* A thread gives up its cache while hooks are installed (hooks.c): its large
     * mallocs come here. */
    if (unlikely(__atomic_load_n(&malloc_divert, __ATOMIC_RELAXED))) return malloc_diverted(size);
  } else if (unlikely(__atomic_load_n(&malloc_divert, __ATOMIC_RELAXED))) {
    return malloc_diverted(size);
  }
  return malloc_general(size);
}

/* (p & *mask) == 0, as one test of p against the bin's word (gcc otherwise copies p and
 * ands it: one instruction more on every malloc). */
static inline bool link_fits(const void *p, const uint64_t *mask) {
#if defined(__x86_64__)
  bool zero;
  __asm__("testq %2, %1" : "=@ccz"(zero) : "r"(p), "m"(*mask));
  return zero;
#else
  return ((uintptr_t)p & *mask) == 0;
#endif
}

/* A bin's head straight into the return register: gcc otherwise loads it elsewhere and
 * moves it at the end (one instruction more on every malloc). */
#if defined(__x86_64__)
#define HEAD_TO_RET(p, b) __asm__("movq %1, %0" : "=a"(p) : "m"((b)->head))
#else
#define HEAD_TO_RET(p, b) ((p) = (b)->head)
#endif

/* malloc's fast path: a hit ends the function it is written in with HIT(p_) (malloc
 * and operator new return the region, calloc its memset), so that neither costs more than
 * malloc's own. The head must be canonical and
 * aligned as the class's regions: an empty bin's TBIN_END fails this, and so does a
 * corrupted link, which decodes to noise or, changed in a byte, off the alignment; the
 * slow path reports it (ialloc). With prof:true the table is all 0: to malloc_prof.
 * The new head is prefetched: the next pop reads its link, and a bin refilled from slabs
 * or fed by frees long ago holds regions out of cache (mstress: 65% of malloc's samples
 * were that load). A prefetch of TBIN_END or of a corrupted link does not fault. */
#define MALLOC_FAST(size, HIT)                                              \
  do {                                                                      \
    if (likely((size) <= SZ_MALLOC_FAST_MAX)) {                             \
      size_t off_ = sz_malloc_lookup_read(size);                            \
      tbin_t *b_ = (tbin_t *)((char *)strata_tsd.tcache + off_);            \
      void *p_;                                                             \
      HEAD_TO_RET(p_, b_);                                                  \
      if (likely(link_fits(p_, &b_->link_mask))) {                          \
        void *n_ = LINK_DEC(p_);                                            \
        b_->head = n_;                                                      \
        __builtin_prefetch(n_); /* the next pop's link: see the comment above */ \
        TAG_WORD(p_) = 0; /* allocated: untagged */                         \
        b_->avail++;                                                        \
        b_->nmalloc++;                                                      \
        HIT(p_);                                                            \
      }                                                                     \
    }                                                                       \
  } while (0)

#define RETURN_IT(p) return (p)

EXPORT void *strata_malloc(size_t size) {
  MALLOC_FAST(size, RETURN_IT);
  return malloc_slow(size);
}

#ifdef STRATA_OVERRIDE
/* operator new's throwing forms (_Znwm, _Znam: aliases below): malloc's fast path in place,
 * not a call through malloc (11 instructions more a new: C++ programs allocate this way);
 * a miss is malloc's slow path, and a failure the new_handler loop (newdelete.c). */
HIDDEN void *strata_new_fail(size_t size);
static NOINLINE void *new_miss(size_t size) {
  void *p = malloc_slow(size);
  return likely(p != NULL) ? p : strata_new_fail(size);
}
HIDDEN void *strata_new(size_t size) {
  MALLOC_FAST(size, RETURN_IT);
  return new_miss(size);
}
#endif

/* Whether the calling thread's cache holds large block p (class ind) already: a large
 * block's tag is no proof of a free (free_slow_large), so its list is walked, at most the
 * bin's capacity in links (8 or fewer for large classes). */
static bool tcache_holds_large(tsd_t *tsd, szind_t ind, const void *p) {
  if (ind >= tcache_nbins || tsd->state != TSD_ACTIVE) return false;
  const tbin_t *b = &tsd->tcache->bins[ind];
  const void *q = b->head;
  for (uint32_t n = tbin_count(tsd->tcache, ind); q != TBIN_END && n > 0; n--) {
    if (q == p) return true;
    q = tbin_next(q, ind);
  }
  return false;
}

/* free_slow for a large class. A cached one (16-32 KiB by default) has its class in its
 * first page-map entry (large_rt_ind, arena.c) and free()'s fast path pushes it; it gets
 * here when that push was refused (a full bin, a thread without its cache, a block still
 * carrying its free tag: freed twice, or a stale tag from an earlier life at that address,
 * which is why the tag is no proof here) or when its entry has class 0 (prof:true, user
 * arenas, a block made before the cache was booted). It goes into the thread's bin when it
 * has room, without idalloc's other cases; a block that is the bin's head is freed twice;
 * anything else through idalloc. Out of line and a tail call, so that free_slow's
 * registers stay as they were for its other callers (full bins of small classes: the
 * producer/consumer figure). */
static NOINLINE void free_slow_large(void *p, edata_t *ed, szind_t ind, bool use_tcache, int saved) {
  tsd_t *tsd = &strata_tsd;
  if (ind < tcache_nbins && use_tcache && tsd->state == TSD_ACTIVE && !tsd->reentrant && !tsd->in_hook &&
      !__atomic_load_n(&prof_on, __ATOMIC_RELAXED) && !(opt.junk & JUNK_FREE) && ed->arena_id != GUARD_ARENA &&
      !arena_ind_is_user(edata_arena_ind(ed))) {
    tbin_t *b = &tsd->tcache->bins[ind];
    if (unlikely(TAG_WORD(p) == TAG_OF(p)) && tcache_holds_large(tsd, ind, p)) strata_invalid_free("free", p);
    if (likely(b->avail != 0)) {
      tsd->deallocated += sz_size[ind];
      LINK_SET(p, b->head);
      b->head = p;
      tbin_avail_move(b, -1);
      if (unlikely(__atomic_load_n(&bg_create_pending, __ATOMIC_RELAXED))) bg_create_wanted();
      return;
    }
  }
  idalloc(tsd, p, ed, ind, use_tcache, "free");
  errno = saved;
}

/* ---------------------------------------------------------------- prof:true's malloc entry */
/* With prof:true, strata_init (prof_boot) overwrites strata_malloc's first instruction (after
 * an endbr64, where indirect calls land) with a 5-byte `jmp rel32` to malloc_prof, so a
 * prof:true malloc costs the jump and the countdown (about 7 instructions) instead of a
 * failed fast path and a dispatch (about 27; bench/results/prof-figures.md). malloc,
 * __libc_malloc and operator new (which calls strata_malloc) share that entry; no other
 * path reads sz_malloc_lookup (the zero table), so nothing else has a copy to patch.
 * When any step fails (mprotect refused by a W^X policy: SELinux execmod, PaX; a target out
 * of rel32 range) the code is left alone and the zero table keeps prof:true correct, only
 * slower; with confirm_conf:true strata says which it is, once, on stderr.
 * Threads: strata_init holds init_lock and strata is not ready, so every other thread that
 * reaches strata waits in tsd_fetch; with glibc no thread can be running strata_malloc's
 * entry yet (pthread_create callocs the new thread's DTV first, which initialises strata),
 * except when libstrata is dlopened into a threaded program. For that case the 5 bytes go in
 * one aligned 8-byte store (one lock cmpxchg16b when they straddle 8 bytes of an aligned 16,
 * as after an endbr64): x86 keeps instruction fetch coherent with stores (no cache to
 * clear), and a thread fetching the entry sees the old instruction or the whole jump. Under
 * valgrind a translation made before the patch stays in use unless --smc-check=all (it then
 * runs the unpatched, zero-table path: still correct). STRATA_PROF_NOPATCH=1 in the
 * environment keeps the code unpatched (tests of the fallback, tests/CMakeLists.txt). */
extern __typeof(strata_malloc) strata_malloc_entry __attribute__((alias("strata_malloc"), visibility("hidden"), malloc));

#if defined(__x86_64__)
/* Stores into strata's own text, in asm: a sanitizer would check (TSan: write) the shadow
 * of a code address, which it does not map (the prefixed TSan build crashed there). An
 * aligned 8-byte mov is atomic on x86, as the release store it replaces. */
static void text_store8(uint64_t *q, uint64_t v) { __asm__ volatile("movq %1, %0" : "=m"(*q) : "r"(v) : "memory"); }
static void text_copy(uint8_t *at, const uint8_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) __asm__ volatile("movb %1, %0" : "=m"(at[i]) : "q"(src[i]) : "memory");
}

static bool cas16(volatile void *p, uint64_t olo, uint64_t ohi, uint64_t nlo, uint64_t nhi) {
  bool ok;
  __asm__ volatile("lock cmpxchg16b %1"
                   : "=@ccz"(ok), "+m"(*(volatile unsigned __int128 *)p), "+a"(olo), "+d"(ohi)
                   : "b"(nlo), "c"(nhi)
                   : "memory");
  return ok;
}
#endif

/* 0 when the entry now jumps to malloc_prof; an errno value when the code was left alone
 * (the zero table serves); minus an errno value when patched but the page stayed writable. */
int prof_entry_patch(void) {
#if defined(__x86_64__) /* elsewhere the zero table serves */
  uint8_t *at = (uint8_t *)(uintptr_t)&strata_malloc_entry;
  static const uint8_t endbr64[4] = {0xf3, 0x0f, 0x1e, 0xfa};
  if (memcmp(at, endbr64, 4) == 0) at += 4;
  intptr_t rel = (intptr_t)((uintptr_t)&malloc_prof - ((uintptr_t)at + 5));
  if (rel != (intptr_t)(int32_t)rel) return ERANGE; /* same DSO: cannot happen, but check */
  uint8_t jmp[5] = {0xe9, (uint8_t)rel, (uint8_t)(rel >> 8), (uint8_t)(rel >> 16), (uint8_t)(rel >> 24)};
  uintptr_t pg = (uintptr_t)at & ~(uintptr_t)(os_page - 1);
  size_t len = ((uintptr_t)at + 5 - pg + os_page - 1) & ~(os_page - 1);
  /* Writable and still executable: this function may share the page. */
  if (mprotect((void *)pg, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return errno ? errno : EACCES;
  uintptr_t off8 = (uintptr_t)at & 7, off16 = (uintptr_t)at & 15;
  if (off8 <= 3) {
    uint64_t *q = (uint64_t *)((uintptr_t)at - off8), v = *q;
    memcpy((uint8_t *)&v + off8, jmp, 5);
    text_store8(q, v);
  } else if (off16 <= 11) {
    uint64_t *q = (uint64_t *)((uintptr_t)at - off16), w[2] = {q[0], q[1]}, n[2];
    memcpy(n, w, 16);
    memcpy((uint8_t *)n + off16, jmp, 5);
    if (!cas16(q, w[0], w[1], n[0], n[1])) text_copy(at, jmp, 5); /* cannot fail: single writer */
  } else {
    text_copy(at, jmp, 5); /* never with 16-byte aligned functions; init is single-threaded */
  }
  int err = mprotect((void *)pg, len, PROT_READ | PROT_EXEC) != 0 ? (errno ? errno : EACCES) : 0;
  return err ? -err : 0; /* -errno: patched, but the page stayed writable */
#else
  return ENOSYS;
#endif
}

/* free_slow for the 8-byte class, which free()'s fast path always refuses (its bin's c32
 * is 0: the push would tag a second word the region does not have). The region's free-map
 * bit is set, atomically: set already, it is a second free, reported by any thread wherever
 * the first copy waits (internal.h, tiny_fmap); then it is pushed onto the thread's bin,
 * linked through its first word alone, or handed to the bin's flush when full. Without a
 * cache (or for a user arena's block) it goes back to its slab (bin_dalloc_tiny). Sampled,
 * junk-filled and hooked frees, and one from a signal handler inside strata, go through
 * idalloc. */
static NOINLINE void free_tiny(void *p, edata_t *ed, const char *func, int saved) {
  tsd_t *tsd = &strata_tsd;
  if (likely(ed->slab && !tsd->reentrant && !__atomic_load_n(&prof_on, __ATOMIC_RELAXED) &&
             !(opt.junk & JUNK_FREE) && !hooks_on())) {
    tsd->reentrant = 1;
    tsd->deallocated += 8;
    uint64_t *fm = tiny_fmap(ed);
    if (likely(fm != NULL && tsd->state == TSD_ACTIVE && !tsd->in_hook)) {
      uint64_t regind = ((uintptr_t)p - ed->addr) >> 3, bit = (uint64_t)1 << (regind % 64);
      if (unlikely(__atomic_fetch_or(&fm[regind / 64], bit, __ATOMIC_RELAXED) & bit))
        strata_invalid_free(func, p);
      tbin_t *b = &tsd->tcache->bins[SZ_TINY_IND];
      if (likely(b->avail != 0)) {
        LINK_SET(p, b->head);
        b->head = p;
        tbin_avail_move(b, -1);
      } else {
        tcache_dalloc_hard(tsd->tcache, SZ_TINY_IND, p);
      }
    } else {
      bin_dalloc_tiny(arena_of(ed), ed, p, func);
    }
    tsd->reentrant = 0;
    if (unlikely(__atomic_load_n(&bg_create_pending, __ATOMIC_RELAXED))) bg_create_wanted();
  } else {
    idalloc(tsd, p, ed, SZ_TINY_IND, true, func);
  }
  errno = saved;
}

/* func: the call the program made, for the report ("free", "dallocx"). */
static NOINLINE void free_slow(void *p, bool use_tcache, const char *func) {
  if (p == NULL) return;
  int saved = errno;
  szind_t ind;
  edata_t *ed = lookup_owned(p, &ind, func);
  if (ind > SZ_NSMALL) {
    free_slow_large(p, ed, ind, use_tcache, saved);
    return;
  }
  if (ind == SZ_TINY_IND) {
    free_tiny(p, ed, func, saved);
    return;
  }
  if (unlikely(TAG_WORD(p) == TAG_OF(p))) strata_invalid_free(func, p); /* freed twice */
  idalloc(&strata_tsd, p, ed, ind, use_tcache, func);
  errno = saved;
}

/* The free fast path's push: true when p went into the thread cache. field is the class
 * field of p's page-map entry (entry j of leaf, rtree_field_read): the bin's offset (0
 * unless p is in a slab or starts a cached large block; bin 0 never has room). */
static inline bool free_fast(void *p, const uint64_t *leaf, size_t j, unsigned field) {
  tbin_t *b = (tbin_t *)((char *)strata_tsd.tcache + field);
  /* p must be a region start: (p - base) x c32 mod 2^32 < c32, base x c32 being the
   * granule's check word (internal.h, rtree_chk): exact for every class and offset. A
   * region that already carries its free tag is freed twice. Both go to the slow path,
   * which reports them. */
  uint32_t start = (uint32_t)(uintptr_t)p;
#if defined(__x86_64__)
  /* One imul from memory into a copy of p: gcc otherwise loads c32 into a register first
   * and moves the product (two instructions more on every free). */
  __asm__("imull %1, %0" : "+r"(start) : "m"(b->c32));
#else
  start *= b->c32;
#endif
  /* A sub from memory, the fast word's high half (the line e came from; no slot address).
   * A plain read (an atomic one would not fold into the sub): the block's owner wrote the
   * word before the block could reach this thread, and nobody changes it while the block
   * is live. */
  start -= rtree_chk(leaf, j);
  uintptr_t tag = TAG_OF(p);
  if (likely(start < b->c32 && TAG_WORD(p) != tag)) {
#if defined(__x86_64__)
    /* The room test is the decrement's borrow: a full bin (avail 0) wraps, which the slow
     * path undoes (two instructions fewer than a load, a test and a branch before it). */
    __asm__ goto("subl $1, %0\n\tjc %l[full]" : "+m"(b->avail) : : "cc" : full);
#else
    if (unlikely(b->avail == 0)) return false;
    b->avail--;
#endif
    TAG_WORD(p) = tag;
    *(uintptr_t *)p = (uintptr_t)b->head ^ tag; /* LINK_SET(p, b->head): the tag is the mask */
    b->head = p; /* counted by nobody: tbin_ndalloc */
    return true;
  }
  return false;
#if defined(__x86_64__)
full:
  b->avail = 0;
  return false;
#endif
}

/* rtree_slot's lookup, as the leaf and the index in it (free_fast reads the fast word at that
 * index); NULL when p is outside the map. */
static inline const uint64_t *free_leaf(const void *p, size_t *j) {
  size_t i = (uintptr_t)p >> (LG_GRAN + RT_LG_LEAF);
  if (unlikely(i >= RT_L1_SIZE)) return NULL;
  *j = (uintptr_t)p >> LG_GRAN; /* L1 holds biased leaves: no mask */
  return __atomic_load_n(&rtree_l1[i], __ATOMIC_ACQUIRE);
}

EXPORT void strata_free(void *p) {
  size_t j;
  const uint64_t *leaf = free_leaf(p, &j);
  if (likely(leaf != NULL)) {
    /* The entry's class is 0 unless p is in a slab or starts a large block free() may
     * cache (arena.c, large_rt_ind: whose first granule alone carries it, and whose
     * other entries read 0), and bin 0 never has room: other large blocks, free extents
     * and foreign pages all take the slow path, which validates. */
    if (likely(free_fast(p, leaf, j, rtree_field_read(leaf, j)))) return;
  }
  free_slow(p, true, "free");
}

/* dallocx(p, 0): free's fast path, with its own name in reports. */
static void dallocx_default(void *p) {
  size_t j;
  const uint64_t *leaf = free_leaf(p, &j);
  if (likely(leaf != NULL) && likely(free_fast(p, leaf, j, rtree_field_read(leaf, j)))) return;
  free_slow(p, true, "dallocx");
}

/* ---------------------------------------------------------------- sized frees */
/* free_sized, free_aligned_sized, sdallocx and sized operator delete: the size (and
 * alignment) must name the block's class, as nallocx would compute it. The fast path
 * compares the class the rtree entry gives with the size's class from the table it
 * already reads for malloc: one load and one compare more than free(). Everything else
 * (other large blocks, aligned ones, sizes above 16 KiB) is checked on the slow path, where the
 * block's class is known from its lookup. A mismatch is reported with the address. */
static NOINLINE void sized_free_slow(void *p, size_t size, size_t align, bool use_tcache,
                                     const char *func) {
  if (p == NULL) return;
  int saved = errno;
  szind_t ind;
  edata_t *ed = lookup_owned(p, &ind, func);
  size_t want = sz_sa2u(size ? size : 1, align);
  if (unlikely(want == 0 || sz_size2index(want) != ind)) {
    strata_size_mismatch(func, p, size, align, sz_size[ind]); /* returns where a hook is set */
    errno = saved;
    return;
  }
  if (ind == SZ_TINY_IND && use_tcache) { /* its bin's push (sdallocx(p, 1..8, 0), sized delete) */
    free_tiny(p, ed, func, saved);
    return;
  }
  if (ind <= SZ_NSMALL && unlikely(tag_is_set(p, ind))) strata_invalid_free(func, p); /* freed twice */
  idalloc(&strata_tsd, p, ed, ind, use_tcache, func);
  errno = saved;
}

static inline void free_sized_impl(void *p, size_t size, const char *func) {
  size_t j;
  const uint64_t *leaf = free_leaf(p, &j);
  if (likely(leaf != NULL && size <= SZ_MALLOC_FAST_MAX)) {
    unsigned field = rtree_field_read(leaf, j);
    /* malloc's table gives the size's bin offset, the page map's field the block's: one
     * compare (with prof:true the table is all 0, and sized frees take the slow path). */
    if (likely(field == sz_malloc_lookup_read(size)) && likely(free_fast(p, leaf, j, field))) return;
  }
  sized_free_slow(p, size, 0, true, func);
}

EXPORT void strata_free_sized(void *p, size_t size) { free_sized_impl(p, size, "free_sized"); }

EXPORT void strata_free_aligned_sized(void *p, size_t alignment, size_t size) {
  sized_free_slow(p, size, alignment, true, "free_aligned_sized");
}

EXPORT void *strata_calloc(size_t n, size_t size) {
  size_t total;
  if (unlikely(__builtin_mul_overflow(n, size, &total))) {
    alloc_oom();
    return NULL;
  }
  if (likely(!hooks_on())) {
#define RETURN_ZEROED(p) return memset((p), 0, total)
    MALLOC_FAST(total, RETURN_ZEROED);
#undef RETURN_ZEROED
    if (likely(total <= SZ_LOOKUP_MAX)) { /* the fast path was tried: malloc's miss */
      void *p = malloc_slow(total);
      if (p) memset(p, 0, total);
      return p;
    }
  }
  tsd_t *tsd = tsd_fetch();
  szind_t ind = sz_size2index(total);
  void *p = (tsd && ind) ? ialloc(tsd, ind, true, true, NULL) : NULL;
  if (p == NULL) {
    PROBE_OOM(total, 0);
    alloc_oom();
  }
  if (unlikely(hooks_on())) hook_invoke_alloc(hook_alloc_calloc, p, (uintptr_t)p, n, size, 0);
  return p;
}

static size_t usable_size(const void *p) {
  edata_t *ed;
  szind_t ind = owned_szind(p, &ed);
  return ind ? sz_size[ind] : 0;
}

/* realloc and rallocx: resize keeping contents; NULL on failure with p intact. */
static void *irealloc(tsd_t *tsd, void *p, size_t size, size_t align, bool zero, bool use_tcache,
                      arena_t *explicit, const char *func) {
  szind_t old_ind;
  edata_t *ed = lookup_owned(p, &old_ind, func);
  /* Freed already (a small block with its tag; a large one in this thread's cache): reported
   * as this call's misuse. */
  if (unlikely(tag_is_set(p, old_ind)) && (old_ind <= SZ_NSMALL || tcache_holds_large(tsd, old_ind, p)))
    strata_invalid_free(func, p);
  if (unlikely(old_ind == SZ_TINY_IND) && ed->slab) { /* the 8-byte class: its free map or bitmap says */
    uint64_t *fm = tiny_fmap(ed), regind = ((uintptr_t)p - ed->addr) >> 3;
    if (fm ? (__atomic_load_n(&fm[regind / 64], __ATOMIC_RELAXED) >> (regind % 64) & 1)
           : bin_region_free(arena_of(ed), old_ind, ed, p))
      strata_invalid_free(func, p);
  }
  size_t old_usize = sz_size[old_ind];
  size_t usize = align ? sz_sa2u(size, align) : (sz_size2index(size) ? sz_size[sz_size2index(size)] : 0);
  if (usize == 0) return NULL;
  bool aligned_ok = align == 0 || ((uintptr_t)p & (align - 1)) == 0;
  if (aligned_ok && explicit == NULL) {
    if (usize == old_usize) {
      /* Counted as jemalloc counts every resize, in place or not: thread.allocated grows by
       * the new size and thread.deallocated by the old one. */
      tsd->allocated += usize;
      tsd->deallocated += old_usize;
      return p;
    }
    /* In place only for blocks the profiler does not hold (a sampled one moves). */
    if (old_ind > SZ_NSMALL && usize > SZ_SMALL_MAX && !tsd->reentrant && !(prof_on && prof_is_sampled(ed))) {
      tsd->reentrant = 1;
      if (unlikely(prof_on)) prof_take(usize);
      bool fail = arena_large_resize(ed, usize);
      void *q = NULL;
      if (fail && usize > old_usize && old_usize >= REMAP_MIN)
        q = arena_large_remap(ed, usize);
      if (unlikely(prof_on)) prof_after(tsd, (!fail || q) ? (q ? q : p) : NULL, usize);
      tsd->reentrant = 0;
      if (!fail || q) {
        tsd->allocated += usize;
        tsd->deallocated += old_usize;
        void *r = q ? q : p;
        if ((zero || opt.zero) && usize > old_usize) memset((char *)r + old_usize, 0, usize - old_usize);
        return r;
      }
    }
  }
  void *q = align > 8 ? ialloc_aligned(tsd, size, align, zero, use_tcache, explicit)
                      : ialloc(tsd, sz_size2index(usize), zero, use_tcache, explicit);
  if (q == NULL) return NULL;
  memcpy(q, p, old_usize < size ? old_usize : size);
  idalloc(tsd, p, ed, old_ind, use_tcache, func);
  return q;
}

/* The hooks of a reallocation (jemalloc's): in place, the expand hook; moved, the alloc
 * hook for the new block and the dalloc hook for the old one. */
static NOINLINE void realloc_hooks(int type, void *p, void *q, size_t old_usize, size_t size, int flags) {
  bool rallocx = type == hook_alloc_rallocx;
  if (q == NULL) {
    hook_invoke_alloc(type, NULL, 0, (uintptr_t)p, size, (uintptr_t)flags);
  } else if (q == p) {
    hook_invoke_expand(rallocx ? hook_expand_rallocx : hook_expand_realloc, p, old_usize, usable_size(p),
                       (uintptr_t)q, (uintptr_t)p, size, (uintptr_t)flags, 0);
  } else {
    hook_invoke_alloc(type, q, (uintptr_t)q, (uintptr_t)p, size, (uintptr_t)flags);
    hook_invoke_dalloc(rallocx ? hook_dalloc_rallocx : hook_dalloc_realloc, p, (uintptr_t)p, size,
                       (uintptr_t)flags);
  }
}

EXPORT void *strata_realloc(void *p, size_t size) {
  if (p == NULL) return strata_malloc(size);
  if (size == 0) {
    __atomic_fetch_add(&stats_zero_reallocs, 1, __ATOMIC_RELAXED); /* stats.zero_reallocs */
    if (opt.zero_realloc == ZR_FREE) { /* the default, as glibc: frees and returns NULL */
      if (unlikely(hooks_on())) hook_invoke_dalloc(hook_dalloc_realloc, p, (uintptr_t)p, 0, 0);
      strata_free(p);
      return NULL;
    }
    if (opt.zero_realloc == ZR_ABORT) {
      strata_zero_realloc_abort();
      return NULL;
    }
    size = 1; /* zero_realloc:alloc: a minimal block, as realloc(p, 1) */
  }
  tsd_t *tsd = tsd_fetch();
  size_t old_usize = unlikely(hooks_on()) ? usable_size(p) : 0;
  void *q = tsd ? irealloc(tsd, p, size, 0, false, true, NULL, "realloc") : NULL;
  if (q == NULL) {
    PROBE_OOM(size, 0);
    alloc_oom();
  }
  if (unlikely(hooks_on())) realloc_hooks(hook_alloc_realloc, p, q, old_usize, size, 0);
  return q;
}

EXPORT void *strata_reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (unlikely(__builtin_mul_overflow(n, size, &total))) {
    alloc_oom();
    return NULL;
  }
  return strata_realloc(p, total);
}

/* ---------------------------------------------------------------- aligned */
/* Every class from the quantum up is a multiple of it, so an alignment up to the quantum
 * is the class's own: such a request is malloc's, fast path included (rptest's
 * memalign(16, n): about 225 instructions the general way, 58 this way). Not with hooks
 * installed: they must see the aligned call, not a malloc. Each entry point tests this
 * first, before its own checks' work, and tail-calls malloc. */
static inline bool quantum_aligned(size_t align, size_t size) {
  return likely(align <= SZ_QUANTUM && size <= SZ_MALLOC_FAST_MAX) && likely(!hooks_on());
}

static void *aligned_common(size_t align, size_t size) {
  /* Above the quantum (quantum_aligned) and up to a page, sz_sa2u names the first class
   * whose size is a multiple of the alignment: its regions have it, so this is malloc of
   * that class, fast path included. Hooks see the aligned call itself. */
  if (likely(!hooks_on()) && align <= os_page) {
    size_t usize = sz_sa2u(size ? size : 1, align);
    if (usize != 0 && usize <= SZ_MALLOC_FAST_MAX) return strata_malloc(usize);
  }
  tsd_t *tsd = tsd_fetch();
  void *p = tsd ? ialloc_aligned(tsd, size ? size : 1, align, false, true, NULL) : NULL;
  return p;
}

EXPORT int strata_posix_memalign(void **memptr, size_t alignment, size_t size) {
  if (unlikely(alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0)) return EINVAL;
  if (quantum_aligned(alignment, size)) {
    int saved = errno;
    void *p = strata_malloc(size < alignment ? alignment : size);
    if (unlikely(p == NULL)) {
      errno = saved;
      return ENOMEM;
    }
    *memptr = p;
    return 0;
  }
  int saved = errno;
  void *p = aligned_common(alignment, size);
  if (p == NULL) alloc_oom();
  errno = saved;
  if (unlikely(hooks_on()))
    hook_invoke_alloc(hook_alloc_posix_memalign, p, (uintptr_t)(p ? 0 : ENOMEM), (uintptr_t)memptr, alignment, size);
  if (p == NULL) {
    PROBE_OOM(size, alignment);
    return ENOMEM;
  }
  *memptr = p;
  return 0;
}

EXPORT void *strata_aligned_alloc(size_t alignment, size_t size) {
  if (unlikely(alignment == 0 || (alignment & (alignment - 1)) != 0)) {
    errno = EINVAL;
    return NULL;
  }
  if (quantum_aligned(alignment, size)) return strata_malloc(size < alignment ? alignment : size);
  void *p = aligned_common(alignment, size);
  if (p == NULL) {
    PROBE_OOM(size, alignment);
    alloc_oom();
  }
  if (unlikely(hooks_on())) hook_invoke_alloc(hook_alloc_aligned_alloc, p, (uintptr_t)p, alignment, size, 0);
  return p;
}

static void *memalign_impl(size_t alignment, size_t size);
EXPORT void *strata_memalign(size_t alignment, size_t size) {
  /* glibc rounds an alignment that is not a power of two up to one: at most the quantum. */
  if (quantum_aligned(alignment, size)) return strata_malloc(size < alignment ? alignment : size);
  void *p = memalign_impl(alignment, size);
  if (unlikely(hooks_on())) hook_invoke_alloc(hook_alloc_memalign, p, (uintptr_t)p, alignment, size, 0);
  return p;
}

static void *memalign_impl(size_t alignment, size_t size) {
  /* glibc: an alignment that is not a power of two is rounded up to one. */
  if (alignment & (alignment - 1)) {
    if (alignment > ((size_t)1 << 62)) {
      errno = EINVAL;
      return NULL;
    }
    alignment = (size_t)1 << (64 - __builtin_clzll(alignment));
  }
  void *p = aligned_common(alignment ? alignment : 1, size);
  if (p == NULL) {
    PROBE_OOM(size, alignment);
    alloc_oom();
  }
  return p;
}

EXPORT void *strata_valloc(size_t size) {
  if (!strata_ready && strata_init()) return NULL;
  void *p = memalign_impl(os_page, size);
  if (unlikely(hooks_on())) hook_invoke_alloc(hook_alloc_valloc, p, (uintptr_t)p, size, 0, 0);
  return p;
}

EXPORT void *strata_pvalloc(size_t size) {
  if (!strata_ready && strata_init()) return NULL;
  size_t rounded = (size + os_page - 1) & ~(os_page - 1);
  if (rounded < size) {
    alloc_oom();
    return NULL;
  }
  void *p = memalign_impl(os_page, rounded ? rounded : os_page);
  if (unlikely(hooks_on())) hook_invoke_alloc(hook_alloc_pvalloc, p, (uintptr_t)p, size, 0, 0);
  return p;
}

EXPORT size_t strata_malloc_usable_size(const void *p) { return p ? usable_size(p) : 0; }

EXPORT int strata_malloc_trim(size_t pad) {
  (void)pad;
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return 0;
  if (tsd->state == TSD_ACTIVE) tcache_flush_all(tsd->tcache);
  return arena_purge_all() > 0;
}

/* ---------------------------------------------------------------- *allocx */
#define FLAG_LG_ALIGN(f) ((unsigned)(f) & 0x3f)
#define FLAG_ZERO(f) (((f) & MALLOCX_ZERO) != 0)
#define FLAG_TCACHE(f) (((unsigned)(f) >> 8) & 0xfff) /* 0 default, 1 none, n+2 explicit */
#define FLAG_ARENA(f) ((unsigned)(f) >> 20)           /* 0 default, a+1 arena a */

static inline size_t flag_align(int flags) {
  unsigned la = FLAG_LG_ALIGN(flags);
  return la ? (size_t)1 << la : 0;
}

/* Explicit arena, or NULL for the default; *bad set when an ordinary arena cannot be
 * created (out of memory). An index that names no arena (never created, or destroyed)
 * is a program error: reported and fatal, as in jemalloc. */
static arena_t *flag_arena(int flags, bool *bad, const char *func) {
  unsigned a = FLAG_ARENA(flags);
  *bad = false;
  if (a == 0) return NULL;
  a--;
  if (a <= narenas) {
    arena_t *ar = arena_get(a);
    *bad = ar == NULL;
    return ar;
  }
  arena_t *ar = a < ARENAS_MAX ? __atomic_load_n(&arenas[a], __ATOMIC_ACQUIRE) : NULL;
  if (ar == NULL || !ar->user || __atomic_load_n(&ar->destroyed, __ATOMIC_ACQUIRE))
    strata_bad_flag(func, "MALLOCX_ARENA", a);
  return ar;
}

/* The explicit cache of MALLOCX_TCACHE(tc), or NULL for the other codes; fatal if tc
 * names no cache. */
static tcache_t *flag_tcache(int flags, const char *func) {
  unsigned t = FLAG_TCACHE(flags);
  if (t < 2) return NULL;
  tcache_t *tc = tcache_explicit(t - 2);
  if (tc == NULL) strata_bad_flag(func, "MALLOCX_TCACHE", t - 2);
  return tc;
}

/* Allocation from an explicit cache (classes it holds; anything else goes uncached). */
static void *ialloc_tc(tsd_t *tsd, szind_t ind, bool zero, tcache_t *tc) {
  if (ind >= tcache_nbins || ind == SZ_TINY_IND || tsd->reentrant || tsd->in_hook)
    return ialloc(tsd, ind, zero, false, NULL);
  size_t usize = sz_size[ind];
  tsd->reentrant = 1;
  tbin_t *b = &tc->bins[ind];
  void *p = b->head;
  if (p != TBIN_END) {
    b->head = tbin_next(p, ind);
    tbin_avail_move(b, 1);
  } else {
    p = tcache_alloc_hard(tc, ind);
  }
  tsd->reentrant = 0;
  if (p == NULL) return NULL;
  TAG_WORD(p) = 0; /* cached classes only: small, or large that free() may have tagged */
  if (zero) memset(p, 0, usize);
  tsd->allocated += usize;
  alloc_fill(p, usize, zero);
  return p;
}

/* Free into an explicit cache; a user arena's block (never cached) goes to its arena. */
static void idalloc_tc(tsd_t *tsd, void *p, tcache_t *tc) {
  szind_t ind;
  edata_t *ed = lookup_owned(p, &ind, "dallocx");
  if (ind >= tcache_nbins || ind == SZ_TINY_IND || tsd->reentrant || tsd->in_hook ||
      arena_ind_is_user(edata_arena_ind(ed))) {
    idalloc(tsd, p, ed, ind, false, "dallocx");
    return;
  }
  if (ind <= SZ_NSMALL && unlikely(TAG_WORD(p) == TAG_OF(p))) strata_invalid_free("dallocx", p);
  if (unlikely(opt.junk & JUNK_FREE)) memset(p, 0x5a, sz_size[ind]);
  tsd->deallocated += sz_size[ind];
  tcache_push_slow(tsd, tc, ind, p);
}

/* User arenas' thread reserves serve classes up to 4 KiB (up to UR_BATCH regions each);
 * larger ones go to the arena per call, as before the size table grew to 14 KiB. */
#define UR_SIZE_MAX ((size_t)4096)

static void *mallocx_impl(tsd_t *tsd, size_t size, int flags) {
  bool bad;
  arena_t *ar = flag_arena(flags, &bad, "mallocx");
  if (bad) return NULL;
  tcache_t *tc = flag_tcache(flags, "mallocx");
  size_t align = flag_align(flags);
  bool use_tcache = FLAG_TCACHE(flags) != 1;
  /* (prof:true: ialloc, which counts the bytes; the reserve is never made, so
   * strata_mallocx's reserve path never serves either.) */
  /* Not the 8-byte class: a reserved region is free to the program, which only a tag
   * tells a second free of; that class has none, so its blocks come from the bin. */
  if (ar != NULL && ar->user && align <= 8 && likely(size <= UR_SIZE_MAX) && size > 8 && !tsd->in_hook &&
      !tsd->reentrant && likely(!prof_on)) {
    /* A user arena's small classes: the thread's reserve, checked against the arena's
     * generation, so a reset or destroy never lets a stale region out. */
    szind_t ind = sz_lookup_read(size);
    ureserve_t *r = tsd->ureserve;
    void *p;
    if (likely(r != NULL && r->arena == ar && r->gen == __atomic_load_n(&ar->gen, __ATOMIC_ACQUIRE) &&
               (p = r->head[ind]) != NULL)) {
      r->head[ind] = link_next(p, ind);
    } else {
      tsd->reentrant = 1;
      p = ureserve_refill(tsd, ar, ind);
      tsd->reentrant = 0;
      if (p == NULL) return NULL;
    }
    size_t usize = sz_size[ind];
    TAG_WORD(p) = 0;
    tsd->allocated += usize;
    if (FLAG_ZERO(flags) || opt.zero) memset(p, 0, usize);
    alloc_fill(p, usize, FLAG_ZERO(flags) || opt.zero);
    return p;
  }
  /* Heap profiling: the explicit caches' paths (ialloc_tc, idalloc_tc) neither count bytes
   * nor look for sampled blocks, so with prof:true MALLOCX_TCACHE(tc) uses the thread's
   * cache (as dallocx does). */
  if (unlikely(prof_on)) tc = NULL;
  if (tc != NULL && ar == NULL && align <= os_page) { /* MALLOCX_ARENA always bypasses caches */
    size_t usize = align > 8 ? sz_sa2u(size, align) : size;
    szind_t ind = usize ? sz_size2index(usize) : 0;
    return ind ? ialloc_tc(tsd, ind, FLAG_ZERO(flags), tc) : NULL;
  }
  /* mallocx(1..8, 0) and experimental.batch_alloc's 8-byte items: malloc's own pop of the
   * 8-byte bin (ialloc serves that class from the arena's bin, a lock per call). */
  if (size <= 8 && opt.tiny_class && ar == NULL && tc == NULL && use_tcache && align <= 8 && !FLAG_ZERO(flags) &&
      likely(!__atomic_load_n(&prof_on, __ATOMIC_RELAXED)))
    return malloc_tiny(size);
  if (align > 8) return ialloc_aligned(tsd, size, align, FLAG_ZERO(flags), use_tcache, ar);
  szind_t ind = sz_size2index(size);
  return ind ? ialloc(tsd, ind, FLAG_ZERO(flags), use_tcache, ar) : NULL;
}

static NOINLINE void *mallocx_slow(size_t size, int flags) {
  tsd_t *tsd = tsd_fetch();
  void *p = tsd ? mallocx_impl(tsd, size, flags) : NULL;
  if (unlikely(p == NULL)) {
    PROBE_OOM(size, FLAG_LG_ALIGN(flags) ? (size_t)1 << FLAG_LG_ALIGN(flags) : 0);
    alloc_oom();
  }
  if (unlikely(hooks_on())) hook_invoke_alloc(hook_alloc_mallocx, p, (uintptr_t)p, size, (uintptr_t)flags, 0);
  return p;
}

/* Flag bits the reserve path serves without looking further: no alignment, no zeroing,
 * and MALLOCX_TCACHE at most NONE (bits 9..19 clear). */
#define FLAG_RESERVE_MASK 0x000ffe7fu

EXPORT void *strata_mallocx(size_t size, int flags) {
  /* MALLOCX_ARENA(user arena) of a small size, with at most MALLOCX_TCACHE_NONE: the
   * thread's reserve for that arena, unless a reset or destroy made it stale. */
  ureserve_t *r = strata_tsd.ureserve;
  if (r != NULL && FLAG_ARENA(flags) == r->code && ((unsigned)flags & FLAG_RESERVE_MASK) == 0 &&
      likely(size <= UR_SIZE_MAX)) {
    szind_t ind = sz_lookup_read(size);
    void *p = r->head[ind];
    /* (junk and zero never fill a reserve: see ureserve_refill) */
    if (likely(p != NULL && r->gen == __atomic_load_n(&r->arena->gen, __ATOMIC_ACQUIRE) &&
               !strata_tsd.in_hook && !strata_tsd.reentrant)) {
      r->head[ind] = link_next(p, ind);
      TAG_WORD(p) = 0;
      strata_tsd.allocated += sz_size[ind];
      return p;
    }
  }
  return mallocx_slow(size, flags);
}

EXPORT void *strata_rallocx(void *p, size_t size, int flags) {
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return NULL;
  bool bad;
  arena_t *ar = flag_arena(flags, &bad, "rallocx");
  if (bad) return NULL;
  (void)flag_tcache(flags, "rallocx"); /* checked; the copy goes through the thread's cache */
  size_t old_usize = unlikely(hooks_on()) ? usable_size(p) : 0;
  void *q = irealloc(tsd, p, size, flag_align(flags), FLAG_ZERO(flags), FLAG_TCACHE(flags) != 1, ar, "rallocx");
  if (unlikely(q == NULL) && opt.xmalloc) alloc_oom();
  if (unlikely(hooks_on())) realloc_hooks(hook_alloc_rallocx, p, q, old_usize, size, flags);
  return q;
}

/* Heap profiling: a block resized in place counts as a new allocation of its new size,
 * as realloc's copy would (jemalloc's prof_realloc): a sample of the old size leaves the
 * live set, and the new size may be sampled. */
static NOINLINE void xallocx_prof(tsd_t *tsd, void *p, edata_t *ed, size_t usize) {
  if (prof_is_sampled(ed) && prof_free_sampled(tsd, p, ed)) return;
  tsd->reentrant = 1;
  prof_take(usize);
  prof_after(tsd, p, usize);
  tsd->reentrant = 0;
}

EXPORT size_t strata_xallocx(void *p, size_t size, size_t extra, int flags) {
  tsd_t *tsd = tsd_fetch();
  szind_t old_ind;
  edata_t *ed = lookup_owned(p, &old_ind, "xallocx");
  size_t old_usize = sz_size[old_ind];
  if (tsd == NULL) return old_usize;
  size_t align = flag_align(flags);
  if (align && ((uintptr_t)p & (align - 1))) return old_usize;
  if (size > SZ_MAX) return old_usize;
  size_t want = (extra > SZ_MAX - size) ? SZ_MAX : size + extra;
  size_t lo = sz_size[sz_size2index(size ? size : 1)], hi = sz_size[sz_size2index(want ? want : 1)];
  if (old_usize >= lo && old_usize <= hi) return old_usize;
  if (old_ind <= SZ_NSMALL || lo <= SZ_SMALL_MAX || tsd->reentrant) return old_usize;
  /* Large: try the largest target first, then the smallest. */
  tsd->reentrant = 1;
  size_t got = old_usize;
  if (!arena_large_resize(ed, hi)) {
    got = hi;
  } else if (hi != lo && !arena_large_resize(ed, lo)) {
    got = lo;
  }
  tsd->reentrant = 0;
  if (got != old_usize) {
    if (unlikely(prof_on)) xallocx_prof(tsd, p, ed, got);
    tsd->allocated += got;
    tsd->deallocated += old_usize;
    /* zero:true fills every new byte, as the flag does: the grown pages may be reused dirty ones */
    if ((FLAG_ZERO(flags) || opt.zero) && got > old_usize) memset((char *)p + old_usize, 0, got - old_usize);
    if (unlikely(hooks_on()))
      hook_invoke_expand(hook_expand_xallocx, p, old_usize, got, got, (uintptr_t)p, size, extra, (uintptr_t)flags);
  }
  return got;
}

EXPORT size_t strata_sallocx(const void *p, int flags) {
  (void)flags;
  return usable_size(p);
}

EXPORT void strata_dallocx(void *p, int flags) {
  tcache_t *tc = flag_tcache(flags, "dallocx");
  if (tc != NULL && !prof_on) { /* prof:true: the thread's cache, as mallocx */
    if (p != NULL) {
      int saved = errno;
      idalloc_tc(&strata_tsd, p, tc);
      errno = saved;
    }
  } else if (FLAG_TCACHE(flags) == 1) {
    free_slow(p, false, "dallocx");
  } else {
    dallocx_default(p);
  }
}

EXPORT void strata_sdallocx(void *p, size_t size, int flags) {
  if (likely(flags == 0)) {
    free_sized_impl(p, size, "sdallocx");
    return;
  }
  sized_free_slow(p, size, flag_align(flags), FLAG_TCACHE(flags) != 1, "sdallocx");
}

/* C++ sized operator delete: (pointer, size) is free_sized's signature; the aligned
 * forms pass (pointer, size, alignment). */
HIDDEN void strata_delete_sized(void *p, size_t size) { free_sized_impl(p, size, "operator delete"); }
HIDDEN void strata_delete_sized_aligned(void *p, size_t size, size_t alignment) {
  sized_free_slow(p, size, alignment, true, "operator delete");
}

EXPORT size_t strata_nallocx(size_t size, int flags) {
  if (!strata_ready && strata_init()) return 0;
  size_t align = flag_align(flags);
  if (size > SZ_MAX) return 0;
  return sz_sa2u(size ? size : 1, align);
}

/* ---------------------------------------------------------------- glibc extras */
EXPORT int strata_mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 1;
}

EXPORT struct mallinfo2 strata_mallinfo2(void) {
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof(mi));
  stats_t s;
  stats_merge(&s);
  mi.arena = s.mapped;
  mi.hblkhd = s.large_allocated;
  mi.uordblks = s.allocated;
  mi.fordblks = s.active > s.allocated ? s.active - s.allocated : 0;
  mi.keepcost = s.dirty;
  return mi;
}

static int clamp_int(size_t v) { return v > 0x7fffffff ? 0x7fffffff : (int)v; }

EXPORT struct mallinfo strata_mallinfo(void) {
  struct mallinfo2 m2 = strata_mallinfo2();
  struct mallinfo mi;
  memset(&mi, 0, sizeof(mi));
  mi.arena = clamp_int(m2.arena);
  mi.hblkhd = clamp_int(m2.hblkhd);
  mi.uordblks = clamp_int(m2.uordblks);
  mi.fordblks = clamp_int(m2.fordblks);
  mi.keepcost = clamp_int(m2.keepcost);
  return mi;
}

EXPORT void strata_malloc_stats(void) { strata_malloc_stats_print(NULL, NULL, NULL); }

EXPORT int strata_malloc_info(int options, FILE *fp) {
  if (options != 0 || fp == NULL) {
    errno = EINVAL;
    return -1;
  }
  stats_t s;
  stats_merge(&s);
  char a[24], b[24], c[24], d[24];
  char buf[512];
  snprintf(buf, sizeof(buf),
           "<malloc version=\"strata-%s\">\n<total type=\"allocated\" size=\"%s\"/>\n"
           "<total type=\"active\" size=\"%s\"/>\n<total type=\"mapped\" size=\"%s\"/>\n"
           "<total type=\"retained\" size=\"%s\"/>\n</malloc>\n",
           STRATA_VERSION, fmt_u64(a, s.allocated), fmt_u64(b, s.active), fmt_u64(c, s.mapped),
           fmt_u64(d, s.retained));
  return fputs(buf, fp) < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- the standard names */
#ifdef STRATA_OVERRIDE
#define ALIAS(name, target) extern __typeof(target) name __attribute__((alias(#target), visibility("default")))
#define ALIAS_M(name, target) \
  extern __typeof(target) name __attribute__((alias(#target), visibility("default"), malloc))
ALIAS_M(malloc, strata_malloc);
ALIAS(free, strata_free);
ALIAS_M(calloc, strata_calloc);
ALIAS(realloc, strata_realloc);
ALIAS(reallocarray, strata_reallocarray);
ALIAS(posix_memalign, strata_posix_memalign);
ALIAS_M(aligned_alloc, strata_aligned_alloc);
ALIAS_M(memalign, strata_memalign);
ALIAS_M(valloc, strata_valloc);
ALIAS_M(pvalloc, strata_pvalloc);
size_t malloc_usable_size(void *) __attribute__((alias("strata_malloc_usable_size"), visibility("default")));
ALIAS(malloc_trim, strata_malloc_trim);
ALIAS(mallopt, strata_mallopt);
ALIAS(mallinfo, strata_mallinfo);
ALIAS(mallinfo2, strata_mallinfo2);
ALIAS(malloc_stats, strata_malloc_stats);
ALIAS(malloc_info, strata_malloc_info);
void free_sized(void *, size_t) __attribute__((alias("strata_free_sized"), visibility("default")));
void free_aligned_sized(void *, size_t, size_t) __attribute__((alias("strata_free_aligned_sized"), visibility("default")));
void cfree(void *) __attribute__((alias("strata_free"), visibility("default")));
/* glibc's internal names, which some libraries and the loader call directly. */
void *__libc_malloc(size_t) __attribute__((malloc, alias("strata_malloc"), visibility("default")));
void __libc_free(void *) __attribute__((alias("strata_free"), visibility("default")));
void *__libc_calloc(size_t, size_t) __attribute__((malloc, alias("strata_calloc"), visibility("default")));
void *__libc_realloc(void *, size_t) __attribute__((alias("strata_realloc"), visibility("default")));
void *__libc_memalign(size_t, size_t) __attribute__((malloc, alias("strata_memalign"), visibility("default")));
void *__libc_valloc(size_t) __attribute__((malloc, alias("strata_valloc"), visibility("default")));
void *__libc_pvalloc(size_t) __attribute__((malloc, alias("strata_pvalloc"), visibility("default")));
int __posix_memalign(void **, size_t, size_t) __attribute__((alias("strata_posix_memalign"), visibility("default")));
/* jemalloc's API under its own names. */
ALIAS_M(mallocx, strata_mallocx);
ALIAS(rallocx, strata_rallocx);
ALIAS(xallocx, strata_xallocx);
ALIAS(sallocx, strata_sallocx);
ALIAS(dallocx, strata_dallocx);
ALIAS(sdallocx, strata_sdallocx);
ALIAS(nallocx, strata_nallocx);
/* C++ operator new, the throwing forms (the others are in newdelete.c). */
void *_Znwm(size_t) __attribute__((malloc, alias("strata_new"), visibility("default")));
void *_Znam(size_t) __attribute__((malloc, alias("strata_new"), visibility("default")));
/* C++ operator delete, every form. */
/* Every form ignores its extra arguments: aliases of free share its fast path
 * 
 * (the System V ABI lets a callee ignore trailing arguments). */
#define DELETE_ALIAS(name) void name(void *) __attribute__((alias("strata_free"), visibility("default")))
DELETE_ALIAS(_ZdlPv);
DELETE_ALIAS(_ZdaPv);
DELETE_ALIAS(_ZdlPvRKSt9nothrow_t);
DELETE_ALIAS(_ZdaPvRKSt9nothrow_t);
DELETE_ALIAS(_ZdlPvSt11align_val_t);
DELETE_ALIAS(_ZdaPvSt11align_val_t);
DELETE_ALIAS(_ZdlPvSt11align_val_tRKSt9nothrow_t);
DELETE_ALIAS(_ZdaPvSt11align_val_tRKSt9nothrow_t);
/* Sized forms check the size (see sized_free_slow). */
void _ZdlPvm(void *, size_t) __attribute__((alias("strata_delete_sized"), visibility("default")));
void _ZdaPvm(void *, size_t) __attribute__((alias("strata_delete_sized"), visibility("default")));
void _ZdlPvmSt11align_val_t(void *, size_t, size_t)
    __attribute__((alias("strata_delete_sized_aligned"), visibility("default")));
void _ZdaPvmSt11align_val_t(void *, size_t, size_t)
    __attribute__((alias("strata_delete_sized_aligned"), visibility("default")));
#endif

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
/* Messages go to stderr by raw write(2), prefixed "<strata>: ", never through stdio. */
HIDDEN void msg_write(const char *s);
HIDDEN void msg_parts(const char *const *parts, int n);
HIDDEN char *fmt_u64(char *buf, uint64_t v);  /* returns buf, NUL-terminated */
HIDDEN char *fmt_hex(char *buf, uint64_t v);  /* "0x..." */
HIDDEN NORETURN void strata_invalid_free(const char *func, const void *p);
HIDDEN NORETURN void strata_fatal(const char *what);
HIDDEN NORETURN void strata_assert_fail(const char *cond, const char *file, int line);

/* ------------------------------------------------------------------ os.c */
/* The only layer that talks to the kernel about memory. */
HIDDEN extern size_t os_page;      /* run-time page size (4K, 16K, 64K) */
HIDDEN extern unsigned os_ncpus;   /* CPUs this process may use: affinity and cgroup cpu.max */
HIDDEN extern uint64_t os_mem_limit; /* cgroup memory.max in bytes, 0 if none */
HIDDEN void os_init(void);
HIDDEN void *os_map(size_t size, size_t align); /* NULL on failure; zeroed */
HIDDEN void os_unmap(void *addr, size_t size);
HIDDEN void os_purge(void *addr, size_t size); /* MADV_DONTNEED: contents become zero */
HIDDEN void *os_remap(void *addr, size_t old, size_t new_size); /* mremap MAYMOVE; NULL on failure */
HIDDEN int os_read_file(const char *path, char *buf, size_t cap); /* bytes read, -1 on error */
HIDDEN pid_t os_gettid(void);

/* ------------------------------------------------------------------ locks */
/* pthread mutexes: they never allocate, TSan understands them, fork reinitialises them. */
typedef struct {
  pthread_mutex_t m;
} mtx_t;
#define MTX_INITIALIZER {PTHREAD_MUTEX_INITIALIZER}
static inline void mtx_init(mtx_t *m) { pthread_mutex_init(&m->m, NULL); }
static inline void mtx_lock(mtx_t *m) { pthread_mutex_lock(&m->m); }
static inline void mtx_unlock(mtx_t *m) { pthread_mutex_unlock(&m->m); }

/* ------------------------------------------------------------------ meta.c */
/* Bump allocator for strata's own structures; never returns memory, never calls malloc. */
HIDDEN void *meta_alloc(size_t size); /* zeroed, 64-byte aligned when size >= 64; NULL on OOM */
HIDDEN size_t meta_mapped(void);
HIDDEN extern mtx_t meta_lock;

/* ------------------------------------------------------------------ rtree.c */
/*
 * Page map: a 2-level radix tree over 47-bit addresses keyed by 4 KiB granule (fixed,
 * whatever the OS page size, so the shifts are constants). An entry packs
 *   bits 48..63  the size class of a slab granule, 0 for every other entry (large
 *                extents, free extents): the free fast path indexes the thread cache
 *                with it directly, and bin 0 never has room, so no bounds check
 *   bits  4..47  edata pointer (16-byte aligned)
 *   bit   0      slab
 * Slabs map every granule; other extents map their first and last granule (for free()
 * and for coalescing with neighbours).
 * L1 lives in .bss (1 MiB, untouched pages cost nothing); leaves (2 MiB, 1 GiB of
 * address space each) are mapped on demand and never freed.
 */
#define LG_GRAN 12
#define GRAN ((size_t)1 << LG_GRAN)
#define RT_LG_LEAF 18
#define RT_LG_VA 47
#define RT_L1_SIZE ((size_t)1 << (RT_LG_VA - LG_GRAN - RT_LG_LEAF))
#define RT_LEAF_SIZE ((size_t)1 << RT_LG_LEAF)
HIDDEN extern uint64_t *rtree_l1[RT_L1_SIZE];
HIDDEN extern mtx_t rtree_lock;

static inline uint64_t *rtree_slot(uintptr_t a) {
  size_t i = a >> (LG_GRAN + RT_LG_LEAF);
  if (unlikely(i >= RT_L1_SIZE)) return NULL;
  uint64_t *leaf = __atomic_load_n(&rtree_l1[i], __ATOMIC_ACQUIRE);
  if (unlikely(leaf == NULL)) return NULL;
  return &leaf[(a >> LG_GRAN) & (RT_LEAF_SIZE - 1)];
}
static inline uint64_t rtree_read(uintptr_t a) {
  uint64_t *s = rtree_slot(a);
  return s ? __atomic_load_n(s, __ATOMIC_ACQUIRE) : 0;
}
/* Writes: only for granules whose leaves exist (rtree_ensure at map time). */
static inline void rtree_write(uintptr_t a, uint64_t v) {
  uint64_t *s = rtree_slot(a);
  sassert(s != NULL);
  __atomic_store_n(s, v, __ATOMIC_RELEASE);
}
HIDDEN bool rtree_ensure(uintptr_t a, size_t size); /* true on failure */
#define RT_SZ_SHIFT 48
#define RT_SLAB ((uint64_t)1)
#define RT_PTR_MASK ((((uint64_t)1) << RT_SZ_SHIFT) - 16)
#define rt_szind(e) ((unsigned)((e) >> RT_SZ_SHIFT))
#define rt_edata(e) ((edata_t *)(uintptr_t)((e) & RT_PTR_MASK))
#define rt_make(ed, ind, slab) \
  (((uint64_t)(ind) << RT_SZ_SHIFT) | (uint64_t)(uintptr_t)(ed) | ((slab) ? RT_SLAB : 0))

/* ------------------------------------------------------------------ sizeclass.c */
/*
 * jemalloc's spacing: 8, 16, 32, 48, ..., 128, then four classes per doubling.
 * Index 0 means "no class" so that an empty rtree entry can never pass the free fast
 * path's bounds check. Small classes (slabs) are 1..SZ_NSMALL (up to 14 KiB); larger
 * ones are page extents. The 8-byte class (index 1) is kept in the tables but never
 * chosen: the smallest block is 16 bytes, so that every free region holds the cache's
 * link and its double-free tag (see tcache_key).
 */
typedef unsigned szind_t;
#define SZ_NSMALL 36
#define SZ_SMALL_MAX ((size_t)14336)
#define SZ_LOOKUP_MAX ((size_t)4096)
#define SZ_MIN_IND 2 /* 16 bytes */
#define SZ_NCLASSES 229 /* index of 2^62, the largest class */
#define SZ_MAX ((size_t)1 << 62)
HIDDEN extern uint8_t sz_lookup[(SZ_LOOKUP_MAX >> 3) + 1];
HIDDEN extern size_t sz_size[SZ_NCLASSES + 1];

typedef struct {
  size_t size;       /* region size */
  size_t slab_size;  /* bytes per slab (multiple of os_page) */
  uint32_t nregs;
  uint32_t bm_words; /* bitmap words per slab */
  bool pow2;         /* size is a power of two <= page: an aligned pointer is a region start */
  uint64_t div_magic; /* ceil(2^32 / size): region index by multiply */
} bin_info_t;
HIDDEN extern bin_info_t bin_info[SZ_NSMALL + 1];
HIDDEN void sz_init(void);
HIDDEN szind_t sz_size2index_compute(size_t size);
/* The malloc fast path reads the table before initialisation has filled it (the empty
 * cache sends it to the slow path whatever it reads): relaxed atomics, a plain mov. */
static inline szind_t sz_lookup_read(size_t size) {
  return __atomic_load_n(&sz_lookup[(size + 7) >> 3], __ATOMIC_RELAXED);
}
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

/* ------------------------------------------------------------------ extent.c */
/* A pairing heap keyed by address: lowest address first, O(1) insert. */
typedef struct ph_node_s {
  struct ph_node_s *child, *next, *prev;
} ph_node_t;

/* ES_PURGING: taken out of the dirty set to be purged outside the lock; never merged. */
enum { ES_ACTIVE = 0, ES_DIRTY = 1, ES_RETAINED = 2, ES_PURGING = 3 };

typedef struct edata_s edata_t;
struct edata_s {
  uintptr_t addr;
  size_t size;         /* bytes, multiple of os_page */
  ph_node_t ph;        /* free extent: in eset bucket; slab: in bin's nonfull heap */
  edata_t *lru_next;   /* dirty extents, oldest first (purge order) */
  edata_t *lru_prev;
  union {
    uint64_t *bitmap;  /* slab: 1 bit per region, 1 = free */
    uint64_t dirty_ns; /* dirty extent: when it became dirty (decay clock) */
  };
  uint32_t nfree;      /* slab: free regions */
  uint16_t szind;      /* active: size class */
  uint16_t arena_ind;  /* fixed for the edata's life: pools are per arena */
  uint8_t state;       /* ES_* */
  uint8_t slab;
  uint8_t zeroed;      /* contents known to be zero (fresh or purged pages) */
  uint8_t bucket;      /* eset bucket while free */
  uint16_t bm_hint;    /* slab: first bitmap word that may hold a free bit */
  uint16_t prof_nsampled; /* prof: sampled live blocks in this extent (atomic); 0 unless prof:true */
};

typedef struct {
  ph_node_t *heaps[PSZ_N];
  uint64_t nonempty[(PSZ_N + 63) / 64];
  size_t npages;
} eset_t;

typedef struct arena_s arena_t;
/* All take the arena's extent lock (elock) as noted. */
HIDDEN edata_t *extent_alloc(arena_t *a, size_t size, size_t align); /* elock held */
HIDDEN void extent_dalloc(arena_t *a, edata_t *e);                   /* elock held */
HIDDEN bool extent_grow_inplace(arena_t *a, edata_t *e, size_t new_size); /* elock held; true on failure */
HIDDEN void extent_shrink_inplace(arena_t *a, edata_t *e, size_t new_size); /* elock held */
/* elock held on entry and exit, dropped around the madvise/munmap calls; returns pages. */
HIDDEN size_t extent_purge(arena_t *a, size_t target_pages);
HIDDEN void extent_register(edata_t *e, unsigned szind, bool slab); /* boundary (or all, for slabs) */
HIDDEN void extent_deregister_interior(edata_t *e);
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
  void *bitmap_free;    /* recycled bitmaps (intrusive list) */
  /* Regions freed by threads of other arenas, handed over as whole chains (tagged, still
   * in curregs); the next fill takes whole chains first. */
  rchain_t rchain[8];
  uint32_t nrchain;
  uint32_t remote_count;
  size_t curregs;       /* regions handed out (to threads or caches) */
  size_t curslabs;
  uint64_t nmalloc, ndalloc, nfills, nflushes;
} __attribute__((aligned(CACHELINE))) bin_t;
HIDDEN unsigned bin_fill(arena_t *a, szind_t ind, void **out, unsigned n);
/* Up to n regions linked into a NULL-terminated list, lowest address first. */
HIDDEN unsigned bin_fill_list(arena_t *a, szind_t ind, void **head, unsigned n);
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
/* Hands a chain of n validated regions (head..tail, linked through their first word) of
 * arena a's class ind over to that bin, in O(1) unless the bin holds too many already. */
HIDDEN void bin_push_remote(arena_t *a, szind_t ind, void *head, void *tail, uint32_t n);
HIDDEN void bin_release_spare(arena_t *a, szind_t ind);

/* ------------------------------------------------------------------ arena.c */
/*
 * Lock order (fork takes them all in this order): init_lock, tcache_list_lock,
 * arenas_lock, then per arena in index order: bins[1..SZ_NSMALL].lock, elock;
 * then rtree_lock, meta_lock. Code may go right in this list while holding a lock
 * (bin -> elock -> rtree/meta), never left, and holds at most one arena's locks.
 */
struct arena_s {
  mtx_t elock;            /* guards the fields up to the bins */
  eset_t dirty;           /* freed, still resident */
  eset_t retained;        /* address space kept, no memory (purged or never touched) */
  edata_t *lru_head, *lru_tail; /* dirty extents, oldest first */
  edata_t *edata_free;
  size_t grow_next;       /* next mapping size when growing */
  size_t nactive;         /* pages in active extents (slabs and large) */
  size_t mapped;          /* bytes mapped from the OS */
  size_t large_allocated; /* usable bytes of active large extents */
  uint64_t nlarge_malloc, nlarge_dalloc, npurged;
  unsigned ind;
  bool huge;              /* the oversize arena */
  unsigned nthreads;      /* threads bound (atomic) */
  bool purge_pending;     /* atomic: a decay step is due, purge after unlocking */
  uint64_t decay_epoch_ns;  /* start of the current decay step */
  size_t decay_nunpurged;   /* dirty pages after the last step */
  size_t decay_backlog[100]; /* pages newly dirtied per step, newest first (DECAY_STEPS) */
  bin_t bins[SZ_NSMALL + 1];
};
HIDDEN extern arena_t **arenas;   /* [narenas + 1]; the last is the oversize arena */
HIDDEN extern unsigned narenas;   /* ordinary arenas */
HIDDEN extern mtx_t arenas_lock;
HIDDEN arena_t *arena_get(unsigned ind); /* creates on first use; NULL on OOM */
HIDDEN arena_t *arena_choose(void);       /* least loaded, binds the thread */
HIDDEN void arena_unbind(arena_t *a);
HIDDEN void *arena_large_alloc(arena_t *a, size_t usize, size_t align, bool zero);
HIDDEN void arena_large_dalloc(edata_t *e);
HIDDEN void *arena_small_alloc(arena_t *a, szind_t ind, bool zero);
HIDDEN bool arena_large_resize(edata_t *e, size_t usize); /* in place; true on failure */
HIDDEN void *arena_large_remap(edata_t *e, size_t usize); /* mremap; NULL on failure */
HIDDEN size_t arena_purge_all(void); /* pages purged */
/* decay.c: dirty pages age out over dirty_decay_ms along a linear curve, oldest first. */
HIDDEN uint64_t decay_now(void);
HIDDEN void arena_note_dirty(arena_t *a);  /* elock held: sets purge_pending if a step is due */
HIDDEN void arena_maybe_purge(arena_t *a); /* no lock held */
static inline arena_t *arena_of(const edata_t *e) { return arenas[e->arena_ind]; }

/* ------------------------------------------------------------------ tcache.c */
typedef struct {
  void *head;          /* intrusive LIFO of free regions */
  uint32_t avail;      /* room left: tbin_max[ind] - cached (0 for classes not cached) */
  uint32_t align_mask; /* natural alignment - 1: a misaligned free is an interior pointer */
  uint64_t nmalloc;    /* fast-path counts, for thread.allocated / deallocated */
  uint64_t ndalloc;
} tbin_t;
HIDDEN extern uint32_t tbin_max[];
static inline uint32_t tbin_count(const tbin_t *b, unsigned ind) { return tbin_max[ind] - b->avail; }
#define TCACHE_NBINS_MAX 74 /* classes 1..73: up to 8 MiB, jemalloc's tcache_max limit */
typedef struct tcache_s tcache_t;
struct tcache_s {
  tbin_t bins[TCACHE_NBINS_MAX];
  arena_t *arena;
  tcache_t *next, *prev;         /* registry, for fork and stats */
  uint32_t gc_ticks, gc_bin;
  uint8_t events[TCACHE_NBINS_MAX]; /* fills/flushes since the GC last looked */
  void *prof_stash;              /* heap profiling only: freed blocks not yet poppable (tcache.c) */
};
enum { TSD_NOMINAL = 0, TSD_ACTIVE, TSD_NOCACHE, TSD_DEAD };
typedef struct {
  tcache_t *tcache;        /* never NULL: &tcache_empty until the thread has one */
  uint64_t allocated;      /* thread.allocated: slow paths (plus the caches' counts) */
  uint64_t deallocated;    /* thread.deallocated: likewise */
  arena_t *arena;          /* bound arena (NULL until first slow path) */
  uint8_t state;
  uint8_t reentrant;       /* inside a locked slow path (signal re-entry guard) */
} tsd_t;
HIDDEN extern __thread tsd_t strata_tsd __attribute__((tls_model("initial-exec")));
HIDDEN extern tcache_t tcache_empty;
/* Free small regions carry tcache_key ^ address in their second word; malloc clears it.
 * free() finding its own tag there is a double free, reported at once. Random per
 * process, so a program's data matches it by chance with probability 2^-64. */
HIDDEN extern uintptr_t tcache_key;
#define TAG_WORD(p) (((uintptr_t *)(p))[1])
#define TAG_OF(p) (tcache_key ^ (uintptr_t)(p))
HIDDEN extern unsigned tcache_nbins; /* classes cached: 1..tcache_nbins-1 */
HIDDEN void tcache_boot(void);
HIDDEN tcache_t *tcache_get_slow(tsd_t *tsd); /* creates the thread's cache; NULL if none */
HIDDEN void *tcache_alloc_hard(tcache_t *tc, szind_t ind);
HIDDEN void tcache_dalloc_hard(tcache_t *tc, szind_t ind, void *p);
HIDDEN void tcache_flush_all(tcache_t *tc);
HIDDEN void tcache_thread_exit(void *arg);
HIDDEN void tcache_counts(const tsd_t *tsd, uint64_t *allocated, uint64_t *deallocated);
HIDDEN extern mtx_t tcache_list_lock;
HIDDEN extern tcache_t *tcache_list;

/* ------------------------------------------------------------------ conf.c */
enum { JUNK_NONE = 0, JUNK_ALLOC = 1, JUNK_FREE = 2 };
typedef struct {
  unsigned narenas;          /* 0: 4 x CPUs */
  bool tcache;
  size_t tcache_max;
  size_t oversize_threshold;
  bool retain;
  unsigned junk;             /* JUNK_* bits */
  bool zero;
  bool abort;
  bool abort_conf;
  bool confirm_conf;
  int64_t dirty_decay_ms;    /* -1: never purge by age; 0: purge at once */
} opt_t;
HIDDEN extern opt_t opt;
HIDDEN void conf_init(void);
/* Parses one MALLOC_CONF-syntax string; returns the number of problems reported. */
HIDDEN int conf_parse(opt_t *o, const char *s, const char *source);
HIDDEN void conf_print(const opt_t *o);

/* ------------------------------------------------------------------ init.c */
HIDDEN extern bool strata_ready;
HIDDEN bool strata_init(void); /* true on failure */
HIDDEN tsd_t *tsd_fetch(void); /* initialised process, this thread's state */
HIDDEN extern pthread_key_t tsd_key;
HIDDEN extern bool tsd_key_ready;
HIDDEN extern uint64_t ctl_epoch;

/* ------------------------------------------------------------------ stats (ctl.c) */
typedef struct {
  size_t allocated, active, metadata, resident, mapped, retained, dirty;
  size_t small_allocated, large_allocated;
} stats_t;
HIDDEN void stats_merge(stats_t *s);

/* ------------------------------------------------------------------ mallctl handlers */
/* Handlers that live in their own modules; numeric name components are in mib at their
 * position. (C11 allows this identical typedef to be repeated.) */
typedef int ctl_handler_t(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen);

/* ------------------------------------------------------------------ prof.c, prof_dump.c */
/*
 * Heap profiling. With opt.prof (fixed at start) every free takes the slow path (the
 * caches' align masks are all ones) and every byte a thread can pop from its cache is
 * reserved against the bytes left before its next sample, so the fast malloc path needs
 * no counter; see prof.c. With prof:false nothing here runs.
 */
enum { PROF_FMT_JEMALLOC = 1, PROF_FMT_PPROF = 2 };
typedef struct {
  bool prof, active, thread_active_init, gdump, final, leak, accum;
  unsigned lg_sample;   /* 0..62 */
  int lg_interval;      /* -1: no interval dumps */
  unsigned format;      /* PROF_FMT_* bits */
  int signal;           /* 0: none */
  char prefix[256];
} prof_opt_t;
HIDDEN extern prof_opt_t prof_opt;
HIDDEN extern bool prof_on;
HIDDEN void prof_boot(void);      /* in strata_init, before tcache_boot */
HIDDEN void prof_boot_late(void); /* after strata is ready: atexit, signal handler */
HIDDEN void prof_take(size_t usize); /* an allocation not served from reserved cache bytes */
HIDDEN unsigned prof_fill_limit(szind_t ind, unsigned want); /* takes the first; reserves the rest */
HIDDEN void prof_credit_return(size_t bytes);   /* reserved bytes not used after all */
HIDDEN extern bool prof_want_thread;            /* the dump thread is to be created */
HIDDEN void prof_free_hook(void);               /* a free's slow path, outside strata: may malloc */
/* tcache.c, for the profiler: frees go to a per-bin stash the fast path cannot pop; fills
 * take from it; unreserve moves every cached block back to it. */
typedef struct {
  void *head[TCACHE_NBINS_MAX];
  uint32_t n[TCACHE_NBINS_MAX];
} prof_stash_t;
HIDDEN prof_stash_t *tcache_prof_stash(tcache_t *tc); /* created on first use; NULL on OOM */
static inline bool tcache_prof_stash_push(tcache_t *tc, szind_t ind, void *p) { /* false: full */
  prof_stash_t *s = tc->prof_stash;
  if (unlikely(s == NULL) && (s = tcache_prof_stash(tc)) == NULL) return false;
  if (unlikely(s->n[ind] >= 2 * tbin_max[ind])) return false; /* full: to the arena */
  if (ind <= SZ_NSMALL) TAG_WORD(p) = TAG_OF(p);
  *(void **)p = s->head[ind];
  s->head[ind] = p;
  s->n[ind]++;
  return true;
}
HIDDEN void tcache_prof_unreserve(tcache_t *tc);
HIDDEN void prof_after(tsd_t *tsd, void *p, size_t usize); /* records p if prof_take chose it */
HIDDEN bool prof_free_sampled(tsd_t *tsd, void *p, edata_t *ed); /* true: leak p (re-entered) */
static inline bool prof_is_sampled(const edata_t *ed) {
  return __atomic_load_n(&ed->prof_nsampled, __ATOMIC_RELAXED) != 0;
}
HIDDEN void prof_prefork(void);
HIDDEN void prof_postfork(bool child);
HIDDEN ctl_handler_t prof_ctl_active, prof_ctl_dump, prof_ctl_gdump, prof_ctl_reset, prof_ctl_lg_sample,
    prof_ctl_interval, prof_ctl_thread_name, prof_ctl_thread_active, prof_ctl_opt_prof,
    prof_ctl_opt_prof_active, prof_ctl_opt_thread_active_init, prof_ctl_opt_lg_sample, prof_ctl_opt_prefix,
    prof_ctl_opt_lg_interval, prof_ctl_opt_gdump, prof_ctl_opt_final, prof_ctl_opt_leak, prof_ctl_opt_accum;
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
HIDDEN prof_stack_t *prof_stack_intern(const uintptr_t *frames, unsigned n); /* prof_lock held */
HIDDEN prof_snap_t *prof_snapshot(size_t *n, size_t *map_bytes); /* os_map'ed; os_unmap(map_bytes) */
HIDDEN bool prof_dump_heap_v2(const char *path, const prof_snap_t *s, size_t n, uint64_t period);
HIDDEN bool prof_dump_pprof(const char *path, const prof_snap_t *s, size_t n, uint64_t period);
HIDDEN void prof_leak_report(const prof_snap_t *s, size_t n, uint64_t period);

#endif /* STRATA_INTERNAL_H */

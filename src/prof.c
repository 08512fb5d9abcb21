/*
 * prof.c - heap profiling: the sampler, backtraces, the stack table and the live set of
 * sampled blocks, prof.reset, dump triggers (prof.dump, interval, high-water mark,
 * signal, exit) and the prof mallctls. The writers are in prof_dump.c.
 *
 * Sampling: jemalloc's byte countdown. Each thread counts every allocated byte down from
 * an exponential interval of mean 2^lg_prof_sample (prof_cdn, negated); an allocation
 * that reaches zero within its bytes is sampled and a new interval starts, so each block
 * of size s is sampled with probability 1 - exp(-s/rate). With prof:true prof_boot
 * patches malloc's entry into a jump to malloc_prof (alloc.c; where it cannot, malloc's
 * fast path misses to it on its all-0 table, sz_malloc_lookup), which pops the real
 * class's bin and counts the pop on the bin's nmalloc, biased by a per-class countdown of
 * pops with the same law per block (prof_class_take, class_draw); it leaves for the
 * sampling path only when that reaches zero. Every other allocation path counts its bytes
 * (prof_alloc in ialloc, prof_take elsewhere). Frees are prof:false's: LIFO onto the same bins, so a block freed now is
 * the next one malloc gets (an earlier design reserved cached bytes against per-class
 * countdowns and kept frees in separate stash bins, which cost the cache misses of FIFO-like
 * reuse; docs/design.md, "Profiling"). A sampled small block is served from a page extent of its own
 * (alloc.c, prof_promote: jemalloc's promotion), whose page-map class 0 sends its free to the
 * slow path, which finds it in the live set; slab granules are never marked, so the small
 * fast paths never meet a sampled block. Only where no page can be had is a sample kept in
 * its slab, its granule carrying class 0 while it lives (gran_poison / gran_restore).
 * prof:false changes nothing. An extent counts its sampled blocks (prof_nsampled), so a
 * free looks in the live set only when its extent holds one.
 * Lock order: prof_dump_lock, then prof_lock, then meta_lock. prof_lock is held only with
 * tsd->reentrant set, so a signal handler's free leaks rather than deadlocks.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>
#include <link.h>
#include <linux/futex.h>

#include "internal.h"
#include "probes.h"

prof_opt_t prof_opt = {
    .prof = false,
    .active = true,
    .thread_active_init = true,
    .lg_sample = 19, /* jemalloc's default: 512 KiB */
    .lg_interval = -1,
    .format = PROF_FMT_JEMALLOC,
    .signal = 0,
    .prefix = "jeprof",
};
bool prof_on;
uint64_t prof_trace_switches; /* times a tracer turned the sampler on or off (prof:false) */
int prof_entry_state; /* 1: strata_malloc jumps to malloc_prof; 0 not tried; -errno failed */

/* Frames kept per stack: deep enough for real call chains, bounded so a sample costs a
 * known time (jemalloc keeps 128; 64 covered every stack of the test programs). */
#define PROF_DEPTH 64
/* Stack table: chained hash, 64K heads (512 KiB of untouched-until-used metadata). */
#define STACK_LG_HEADS 16

/* Per-thread records for heap_v2's "  t<uid>: ... [name]" lines: raw sample counts of the
 * thread's live (and, with prof_accum, all) samples. Made at a thread's first sample, kept
 * after it exits while its samples live (others free them), then reused with a new uid.
 * Guarded by prof_lock; in strata's metadata. */
struct prof_thr_s {
  prof_thr_t *next;
  uint64_t uid;
  uint64_t cur_objs, cur_bytes, acc_objs, acc_bytes;
  bool dead;
  char name[PROF_THR_NAME];
};
static prof_thr_t *thr_all;
static uint64_t thr_uid_next;

/* Freed one-page extents of promoted samples a thread keeps (alloc.c, prof_promote): an
 * extent allocation and free per sample cost about 740 instructions (wl_churn). */
#define PROF_PAGES 4
typedef struct {
  uint64_t cdlen; /* the length prof_cd was drawn with (for lg_prof_interval) */
  uint64_t rng;
  bool init, active, pending, busy;
  char name[PROF_THR_NAME]; /* thread.prof.name */
  prof_thr_t *thr;       /* this thread's record in dumps, made at its first sample */
  unsigned npages;       /* freed promoted one-page extents kept for the next samples */
  edata_t *pages[PROF_PAGES];
} prof_tdata_t;
static __thread prof_tdata_t prof_td __attribute__((tls_model("initial-exec")));
/* The byte countdown itself is strata_tsd.prof_cdn, negated. */
static inline int64_t cd_left(void) { return -strata_tsd.prof_cdn; }
static inline void cd_set(int64_t left) { strata_tsd.prof_cdn = -left; }

static bool prof_active_now;        /* prof.active (atomic) */
static unsigned prof_lg_sample_now; /* prof.lg_sample, set by prof.reset (atomic) */
static bool prof_gdump_now;         /* prof.gdump (atomic) */

mtx_t prof_lock = MTX_INITIALIZER; /* the stack table and the live set */
mtx_t prof_dump_lock = MTX_INITIALIZER;   /* one dump at a time; sequence numbers */

static prof_stack_t **stack_heads;  /* [1 << STACK_LG_HEADS] */
static prof_stack_t *stack_all;
static size_t stack_count;

typedef struct {
  uintptr_t p;           /* 0 empty, 1 deleted */
  prof_stack_t *st;
  size_t usize;
  double w;              /* 1 / P(sampled) at the rate of the sample */
  uint64_t gen;          /* prof.reset generation */
  prof_thr_t *thr;       /* the allocating thread's record */
} live_t;
static live_t *live;
static size_t live_cap, live_used, live_tomb;
/* The table as published for live_maybe, which reads it without prof_lock: the table and
 * its capacity in one object, so a reader never probes one table with another's mask. */
typedef struct {
  size_t cap;
  live_t e[];
} live_tab_t;
static live_tab_t *live_pub; /* atomic */
static uint64_t live_gen;
static double live_w_bytes, live_w_peak; /* unbiased in-use bytes and its high-water mark */

/* Interval dumps ride on the sampler: each finished sampling interval adds its length. */
static uint64_t interval_bytes, interval_next;
static uint32_t dump_req;   /* futex word: REQ_* bits for the dump thread */
enum { REQ_INTERVAL = 1, REQ_GDUMP = 2, REQ_SIGNAL = 4 };
static bool dump_thread_started;
static pid_t dump_thread_pid;

/* Per-process uniquifiers: <prefix>.<pid>.<seq>.<kind><kseq>.heap (guarded by prof_dump_lock). */
static uint64_t dump_seq, dump_mseq, dump_iseq, dump_useq;

static void dump_thread_start(void);
static void dump_wake(void);

/* ---------------------------------------------------------------- sampler */
static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dULL;
}

static uint64_t sample_mean(void) {
  return (uint64_t)1 << __atomic_load_n(&prof_lg_sample_now, __ATOMIC_RELAXED);
}

/* The sampler's two transcendental functions, written here so that libstrata.a needs no
 * libm (a static link with the usual `-lstrata -lpthread` then resolves). Both are within
 * a few units in the last place of libm's over the sampler's domain (unit_prof compares). */
union dbits {
  double d;
  uint64_t u;
};

/* ln(x) for a normal x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), and
 * ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1) / (m + 1), |s| < 0.172:
 * twelve terms reach 2^-53. */
double prof_ln(double x) {
  union dbits v = {.d = x};
  int e = (int)((v.u >> 52) & 0x7ff) - 1023;
  v.u = (v.u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL; /* m in [1, 2) */
  double m = v.d;
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e++;
  }
  double s = (m - 1.0) / (m + 1.0), s2 = s * s, term = s, sum = 0.0;
  for (int k = 1; k <= 23; k += 2) {
    sum += term / k;
    term *= s2;
  }
  return 2.0 * sum + (double)e * 0.6931471805599453;
}

/* 1 - exp(-x) for x >= 0: the probability that a block of x sampling means holds a
 * sampling point. Below 1 by the series of -expm1(-x) (no cancellation for small blocks);
 * above, exp(-x) = 2^-k exp(-r) with x = k ln 2 + r, 0 <= r < ln 2. */
double prof_one_minus_exp_neg(double x) {
  if (x < 1.0) {
    double term = x, sum = 0.0;
    for (int n = 1; n <= 20; n++) { /* alternating: sum of (-1)^(n+1) x^n / n! */
      sum += term;
      term *= -x / (n + 1);
    }
    return sum;
  }
  if (x > 40.0) return 1.0; /* exp(-40) < 2^-57 */
  int k = (int)(x / 0.6931471805599453);
  double r = x - k * 0.6931471805599453, term = 1.0, e = 0.0;
  for (int n = 1; n <= 20; n++) { /* exp(-r), r < ln 2 */
    e += term;
    term *= -r / n;
  }
  union dbits scale = {.u = (uint64_t)(1023 - k) << 52}; /* 2^-k, k <= 57 */
  return 1.0 - e * scale.d;
}

/* An Exp(1) draw: -ln(u), u uniform in (0, 1]. */
static double exp_unit(uint64_t *rng) {
  double u = ((double)(rng_next(rng) >> 11) + 1.0) / 9007199254740993.0;
  return -prof_ln(u);
}

/* An exponentially distributed interval with the given mean, at least 1 byte. */
uint64_t prof_exp_draw(uint64_t *rng, uint64_t mean) {
  if (mean == 1) return 1;
  double v = exp_unit(rng) * (double)mean;
  if (v < 1.0) v = 1.0;
  if (v > 4e18) v = 4e18;
  return (uint64_t)v;
}

static uint64_t draw_interval(prof_tdata_t *td) { return prof_exp_draw(&td->rng, sample_mean()); }

static void td_init(prof_tdata_t *td) {
  uint64_t seed = 0;
  if (syscall(SYS_getrandom, &seed, sizeof(seed), 0) != (long)sizeof(seed)) seed = (uintptr_t)td;
  seed ^= (uint64_t)os_gettid() * 0x9e3779b97f4a7c15ULL;
  td->rng = seed ? seed : 1;
  td->active = prof_opt.thread_active_init;
  td->init = true;
}

static void interval_note(uint64_t bytes) {
  if (prof_opt.lg_interval < 0) return;
  uint64_t step = (uint64_t)1 << prof_opt.lg_interval;
  uint64_t total = __atomic_add_fetch(&interval_bytes, bytes, __ATOMIC_RELAXED);
  uint64_t next = __atomic_load_n(&interval_next, __ATOMIC_RELAXED);
  if (total < next) return;
  if (__atomic_compare_exchange_n(&interval_next, &next, (total / step + 1) * step, false, __ATOMIC_RELAXED,
                                  __ATOMIC_RELAXED))
    __atomic_or_fetch(&dump_req, REQ_INTERVAL, __ATOMIC_RELEASE);
}

bool prof_want_thread;

/* The dump thread is created by the next slow path with no strata state in progress:
 * the background threads' hook (bg_create_wanted), which malloc's and free's slow paths
 * call when bg_create_pending is set (frees mostly stay on the fast path). */
static void want_thread(void) {
  __atomic_store_n(&prof_want_thread, true, __ATOMIC_RELEASE);
  __atomic_store_n(&bg_create_pending, true, __ATOMIC_RELEASE);
}

void prof_free_hook(void) { /* called from idalloc, outside strata: may malloc */
  if (__atomic_exchange_n(&prof_want_thread, false, __ATOMIC_ACQ_REL)) dump_thread_start();
}

/* Whether a sampling point is recorded: prof.active, or a tracer attached to
 * otel_memory:alloc (its semaphore is raised while it is), so that attaching turns the
 * sampler on at run time whatever prof_active says. */
static inline bool sampling_wanted(void) {
  return __atomic_load_n(&prof_active_now, __ATOMIC_RELAXED) || PROBE_ON(otel_memory, alloc);
}

/* ---------------------------------------------------------------- a tracer's sampler
 * In a process started with prof:false, a tracer attached to otel_memory:alloc turns the
 * sampler on at run time: nothing notifies the process (the kernel only raises the
 * probe's semaphore), so the allocation slow paths compare the semaphore with what was
 * last acted on (prof_trace_tick: on GC visits of thread caches, every 32 fills and
 * flushes, and on allocations no cache serves) and the first to see a change
 * switches. On: prof_on (sticky: the frees of the samples must find them in the live set
 * whatever happens later), the large classes stop being cached by malloc's slow path and
 * by free's fast path for new blocks (tcache_nbins_malloc 0, as prof:true boots), and
 * malloc's table empties so that every malloc takes malloc_prof (the zero-table path of
 * prof:true: no code is patched at run time). Off (the tracer detached): malloc's table and
 * the large classes come back; prof_on stays, so the remaining samples' frees still take
 * the prof path (slow paths only: the fast paths cost what they cost before). The records
 * keep no stack (prof_after: the tracer unwinds at the probe); prof.* mallctls and dumps
 * stay off (opt.prof). */
bool prof_trace_seen;
static mtx_t trace_lock = MTX_INITIALIZER;

void prof_trace_switch(void) {
#if defined(STRATA_USDT) && STRATA_USDT
  mtx_lock(&trace_lock);
  bool want = __atomic_load_n(&otel_memory_alloc_semaphore, __ATOMIC_RELAXED) != 0;
  if (want != __atomic_load_n(&prof_trace_seen, __ATOMIC_RELAXED)) {
    if (!prof_opt.prof) { /* with prof:true the sampler reads the semaphore itself */
      if (want) {
        __atomic_store_n(&tcache_nbins_malloc, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&prof_on, true, __ATOMIC_RELEASE);
        sz_malloc_prof(true);
      } else {
        sz_malloc_prof(false);
        __atomic_store_n(&tcache_nbins_malloc, tcache_nbins, __ATOMIC_RELAXED);
      }
      __atomic_fetch_add(&prof_trace_switches, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&prof_trace_seen, want, __ATOMIC_RELEASE);
  }
  mtx_unlock(&trace_lock);
#endif
}

/* The countdown spends usize bytes; true when this allocation holds the sampling point
 * (jemalloc's decision: the countdown reaches zero within its bytes), after which a new
 * exponential interval starts at its end. */
static bool cd_take(prof_tdata_t *td, size_t usize) {
  if (unlikely(!td->init)) td_init(td);
  int64_t left = cd_left();
  if (unlikely(left <= 0)) left = (int64_t)(td->cdlen = draw_interval(td));
  if (likely(left > (int64_t)usize)) {
    cd_set(left - (int64_t)usize);
    return false;
  }
  interval_note(td->cdlen);
  cd_set((int64_t)(td->cdlen = draw_interval(td)));
  td->pending = !td->busy && td->active && sampling_wanted();
  return true;
}

void prof_take(size_t usize) { cd_take(&prof_td, usize); }

/* malloc_prof's pops count blocks, not bytes: each cached class has its own countdown, a
 * geometric number of pops (each pop of a block of size s holds a sampling point with
 * probability 1 - exp(-s/rate), independently: the same law as the byte countdown's, over
 * disjoint streams), kept in the bin's nmalloc biased so that malloc_prof's increment sets
 * the sign flag it tests (one instruction a pop, where the byte countdown's load, add, test
 * and store were four). ceil(E rate / s) with E ~ Exp(1) is that geometric law. The
 * interval's bytes go to lg_prof_interval's count when it is drawn. */
static uint64_t class_draw(prof_tdata_t *td, size_t usize) {
  uint64_t mean = sample_mean();
  uint64_t k = 1;
  if (mean != 1) {
    double v = exp_unit(&td->rng) * (double)mean / (double)usize, cap = 4e18 / (double)usize;
    if (v >= cap) {
      k = (uint64_t)cap;
    } else { /* ceil(v), at least 1 */
      k = (uint64_t)v;
      if ((double)k < v || k == 0) k++;
    }
  }
  interval_note(k * usize);
  return k;
}

/* malloc_prof's pop of class ind left its fast path: it holds the class's sampling point
 * (nmalloc reached 0), or the class's countdown was never drawn (prof_nm_off 0). Draws the
 * next countdown and says whether this pop is sampled (prof_after then records it). The
 * pop is counted either way (tbin_nmalloc stays the bin's pops). */
bool prof_class_take(tcache_t *tc, szind_t ind) {
  prof_tdata_t *td = &prof_td;
  if (unlikely(!td->init)) td_init(td);
  size_t usize = sz_size[ind];
  tbin_t *b = &tc->bins[ind];
  uint64_t n = tbin_nmalloc(tc, ind); /* this pop included */
  uint64_t k = class_draw(td, usize);
  bool hit = true;
  if (tc->prof_nm_off[ind] == 0) { /* the first pop of this class: the first of k */
    hit = k == 1;
    k = hit ? class_draw(td, usize) : k - 1;
  }
  /* Seqlock for snap_tcaches, which sums other threads' nmalloc + prof_nm_off. */
  uint32_t g = tc->prof_nm_gen;
  __atomic_store_n(&tc->prof_nm_gen, g + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  tc->prof_nm_off[ind] = n + k;
  b->nmalloc = (uint64_t)0 - k; /* the k-th pop from now reaches 0 */
  __atomic_store_n(&tc->prof_nm_gen, g + 2, __ATOMIC_RELEASE);
  if (hit) td->pending = !td->busy && td->active && sampling_wanted();
  return hit;
}

/* ialloc's count: true when this allocation is to be recorded (prof_after), so that the
 * caller can first move a small one onto a page of its own (alloc.c, prof_promote). */
bool prof_take_record(size_t usize) { return cd_take(&prof_td, usize) && prof_td.pending; }

/* Whether the pop prof_class_take just chose is to be recorded (prof.active, the thread's
 * active flag, not inside a sample). */
bool prof_pending(void) { return prof_td.pending; }

/* malloc_prof_class handed out a promoted page instead of the block it popped, which went
 * back to the bin: the pop leaves the bin's count (the caller counts the bytes in
 * tsd->allocated); the countdown (nmalloc) is unchanged. */
void prof_class_unpop(tcache_t *tc, szind_t ind) {
  uint32_t g = tc->prof_nm_gen;
  __atomic_store_n(&tc->prof_nm_gen, g + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  tc->prof_nm_off[ind]--;
  __atomic_store_n(&tc->prof_nm_gen, g + 2, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- tables (prof_lock held) */
static uint64_t hash_frames(const uintptr_t *f, unsigned n) {
  uint64_t h = 0xcbf29ce484222325ULL ^ n;
  for (unsigned i = 0; i < n; i++) {
    h ^= f[i];
    h *= 0x100000001b3ULL;
    h ^= h >> 29;
  }
  return h;
}

prof_stack_t *prof_stack_intern(const uintptr_t *f, unsigned n) {
  if (stack_heads == NULL) {
    stack_heads = meta_alloc(sizeof(prof_stack_t *) << STACK_LG_HEADS);
    if (stack_heads == NULL) return NULL;
  }
  uint64_t h = hash_frames(f, n);
  prof_stack_t **head = &stack_heads[h >> (64 - STACK_LG_HEADS)];
  for (prof_stack_t *s = *head; s; s = s->next) {
    if (s->hash == h && s->depth == n && memcmp(s->frames, f, n * sizeof(*f)) == 0) return s;
  }
  prof_stack_t *s = meta_alloc(sizeof(prof_stack_t) + n * sizeof(uintptr_t));
  if (s == NULL) return NULL;
  s->hash = h;
  s->depth = n;
  memcpy(s->frames, f, n * sizeof(*f));
  s->next = *head;
  *head = s;
  s->all_next = stack_all;
  __atomic_store_n(&stack_all, s, __ATOMIC_RELEASE);
  stack_count++;
  return s;
}

static size_t live_hash(uintptr_t p, size_t cap) { return (size_t)((p >> 4) * 0x9e3779b97f4a7c15ULL >> 20) & (cap - 1); }

static live_t *live_find(uintptr_t p) {
  if (live == NULL) return NULL;
  for (size_t i = live_hash(p, live_cap);; i = (i + 1) & (live_cap - 1)) {
    if (live[i].p == p) return &live[i];
    if (live[i].p == 0) return NULL;
  }
}

/* Room for one more entry; the table doubles into fresh metadata (the old one is
 * abandoned: metadata is never returned, so the waste is at most the final size). */
static bool live_grow(void) {
  if (live != NULL && (live_used + live_tomb + 1) * 4 < live_cap * 3) return false;
  size_t cap = live_cap ? live_cap : 1024;
  if ((live_used + 1) * 2 >= cap) cap *= 2;
  live_tab_t *h = meta_alloc(sizeof(live_tab_t) + cap * sizeof(live_t));
  if (h == NULL) return true;
  live_t *t = h->e;
  h->cap = cap;
  for (size_t i = 0; i < live_cap; i++) {
    if (live[i].p <= 1) continue;
    size_t j = live_hash(live[i].p, cap);
    while (t[j].p) j = (j + 1) & (cap - 1);
    t[j] = live[i];
  }
  live = t;
  live_cap = cap;
  live_tomb = 0;
  __atomic_store_n(&live_pub, h, __ATOMIC_RELEASE);
  return false;
}

/* Whether p may be a live sample, read without prof_lock (the frees of a sampled block's
 * granule neighbours ask it first: they are not in the set, and on 4 threads the lock
 * cost them 2,700 cycles each where the probe costs 300). Never a false "no" for a block
 * sampled before the caller got it: the sample's insert (a release store of its key into
 * the table then current) happened before, so the acquire loads here see that table or
 * a later one, and growth copies every live key into fresh metadata, never moving one
 * within a table. Slots go from empty to a key, to deleted (1), to another key, never back
 * to empty, so no probe chain is cut short under a reader. Abandoned tables stay mapped
 * (metadata is never returned) and stay readable; a stale "yes" only sends the caller to
 * the locked lookup. */
static bool live_maybe(uintptr_t p) {
  live_tab_t *h = __atomic_load_n(&live_pub, __ATOMIC_ACQUIRE);
  if (h == NULL) return false;
  for (size_t i = live_hash(p, h->cap);; i = (i + 1) & (h->cap - 1)) {
    uintptr_t q = __atomic_load_n(&h->e[i].p, __ATOMIC_ACQUIRE);
    if (q == p) return true;
    if (q == 0) return false;
  }
}

static void live_remove(live_t *e) {
  if (e->gen == live_gen) {
    if (e->thr) {
      e->thr->cur_objs--;
      e->thr->cur_bytes -= e->usize;
    }
    prof_stack_t *st = e->st;
    st->cur_objs--;
    st->cur_bytes -= e->usize;
    st->w_cur_objs -= e->w;
    st->w_cur_bytes -= e->w * (double)e->usize;
    live_w_bytes -= e->w * (double)e->usize;
  }
  __atomic_store_n(&e->p, 1, __ATOMIC_RELAXED); /* live_maybe reads keys without the lock */
  live_used--;
  live_tomb++;
}

/* ---------------------------------------------------------------- routing (prof_lock held) */
/* A sampled small block's granule carries class 0 in the rtree while the block lives, so
 * that its free leaves the fast path and reaches prof_free_sampled; the other blocks of
 * that granule take the slow path meanwhile (prof_free_sampled sends them on without the
 * lock unless the live set may hold them: live_maybe). Changed only under prof_lock: a
 * sample and a sampled free of the same granule cannot interleave. */
static void gran_poison(edata_t *ed, uintptr_t p) {
  if (!ed->slab) {
    /* A large block made before a tracer turned the sampler on may carry its cached class
     * (large_rt_ind), which would let free()'s fast path cache it past the live set. */
    if (rt_szind(rtree_read(p)) != 0) rtree_write(p, rt_make(ed, 0, 0));
    return;
  }
  rtree_write(p & ~(GRAN - 1), rt_make(ed, 0, 1));
}

/* After p's record left the set and ed's count was decremented: give the granule its
 * class back unless another sampled block starts in it. */
static void gran_restore(edata_t *ed, uintptr_t p) {
  if (!ed->slab) return;
  uintptr_t g = p & ~(GRAN - 1);
  szind_t ind = ed->szind;
  if (prof_is_sampled(ed)) {
    size_t sz = bin_info[ind].size;
    uintptr_t end = ed->addr + (uintptr_t)slab_used(ed, &bin_info[ind]);
    for (uintptr_t q = ed->addr + (g - ed->addr + sz - 1) / sz * sz; q < g + GRAN && q < end; q += sz) {
      if (q != p && live_find(q) != NULL) return;
    }
  }
  rtree_write(g, rt_make(ed, arena_of(ed)->user ? 0 : ind, 1));
}

/* This thread's record: a dead one with no live samples is reused (prof_lock held). */
static prof_thr_t *thr_get(prof_tdata_t *td) {
  if (td->thr) return td->thr;
  prof_thr_t *t = thr_all;
  while (t && !(t->dead && t->cur_objs == 0)) t = t->next;
  if (t == NULL) {
    t = meta_alloc(sizeof(*t));
    if (t == NULL) return NULL;
    t->next = thr_all;
    __atomic_store_n(&thr_all, t, __ATOMIC_RELEASE);
  }
  t->uid = thr_uid_next++;
  t->cur_objs = t->cur_bytes = t->acc_objs = t->acc_bytes = 0;
  t->dead = false;
  memcpy(t->name, td->name, sizeof(t->name));
  td->thr = t;
  return t;
}

edata_t *prof_page_get(void) {
  prof_tdata_t *td = &prof_td;
  return td->npages ? td->pages[--td->npages] : NULL;
}

bool prof_page_put(edata_t *e) {
  prof_tdata_t *td = &prof_td;
  if (td->npages == PROF_PAGES) return false;
  e->szind = 0;
  td->pages[td->npages++] = e;
  return true;
}

/* Thread exit (tcache.c's destructor): its kept pages go back to their arenas; its record
 * stays while its samples live. */
void prof_thread_exit(tsd_t *tsd) {
  prof_tdata_t *td = &prof_td;
  if (td->npages) {
    uint8_t saved = tsd->reentrant;
    tsd->reentrant = 1;
    while (td->npages) arena_prof_page_dalloc(td->pages[--td->npages]);
    tsd->reentrant = saved;
  }
  if (td->thr == NULL) return;
  uint8_t saved = tsd->reentrant;
  tsd->reentrant = 1;
  mtx_lock(&prof_lock);
  td->thr->dead = true;
  td->thr = NULL;
  mtx_unlock(&prof_lock);
  tsd->reentrant = saved;
}

/* ---------------------------------------------------------------- sample and free */
void prof_after(tsd_t *tsd, void *p, size_t usize) {
  prof_tdata_t *td = &prof_td;
  if (likely(!td->pending)) return;
  td->pending = false;
  if (p == NULL) return;
  uintptr_t frames[PROF_DEPTH];
  /* The caller (an allocation path) holds tsd->reentrant: a signal handler's malloc or
   * free cannot enter strata, and so neither prof_lock, while this thread holds it. */
  sassert(tsd->reentrant);
  (void)tsd;
  td->busy = true;
  /* Sampled for a tracer only (prof.active off): it unwinds the stack itself, at the
   * probe; the record keeps an empty stack, for the free probe and the statistics. */
  unsigned n = __atomic_load_n(&prof_active_now, __ATOMIC_RELAXED) ? strata_backtrace(frames, PROF_DEPTH) : 0;
  bool recorded = false;
  double rate = (double)sample_mean();
  double w = 1.0 / prof_one_minus_exp_neg((double)usize / rate);
  edata_t *ed = rt_edata(rtree_read_slow((uintptr_t)p));
  bool gdump = false;
  mtx_lock(&prof_lock);
  prof_stack_t *st = prof_stack_intern(frames, n);
  live_t *old = live_find((uintptr_t)p);
  if (old) live_remove(old); /* cannot happen (every sampled free is seen): be safe */
  if (st && !live_grow()) {
    size_t i = live_hash((uintptr_t)p, live_cap);
    while (live[i].p > 1) i = (i + 1) & (live_cap - 1);
    if (live[i].p == 1) live_tomb--;
    prof_thr_t *thr = thr_get(td);
    live[i].st = st;
    live[i].usize = usize;
    live[i].w = w;
    live[i].gen = live_gen;
    live[i].thr = thr;
    __atomic_store_n(&live[i].p, (uintptr_t)p, __ATOMIC_RELEASE); /* the key last: live_maybe */
    live_used++;
    if (thr) {
      thr->cur_objs++;
      thr->cur_bytes += usize;
      thr->acc_objs++;
      thr->acc_bytes += usize;
    }
    st->cur_objs++;
    st->cur_bytes += usize;
    st->acc_objs++;
    st->acc_bytes += usize;
    st->w_cur_objs += w;
    st->w_cur_bytes += w * (double)usize;
    st->w_acc_objs += w;
    st->w_acc_bytes += w * (double)usize;
    live_w_bytes += w * (double)usize;
    recorded = true;
    if (!old) __atomic_add_fetch(&ed->prof_nsampled, 1, __ATOMIC_RELAXED);
    gran_poison(ed, (uintptr_t)p);
    if (live_w_bytes > live_w_peak) {
      live_w_peak = live_w_bytes;
      gdump = __atomic_load_n(&prof_gdump_now, __ATOMIC_RELAXED);
    }
  } else if (old) {
    __atomic_sub_fetch(&ed->prof_nsampled, 1, __ATOMIC_RELAXED);
    gran_restore(ed, (uintptr_t)p);
  }
  mtx_unlock(&prof_lock);
  /* weight: the bytes this sample stands for (w samples' worth of usize), as
   * OpenTelemetry's contract asks (nsamples * interval, the same unbiased estimate). */
  if (recorded && PROBE_ON(otel_memory, alloc)) PROBE3(otel_memory, alloc, p, usize, (uint64_t)(w * (double)usize));
  if (gdump) __atomic_or_fetch(&dump_req, REQ_GDUMP, __ATOMIC_RELEASE);
  td->busy = false;
  if (__atomic_load_n(&dump_req, __ATOMIC_ACQUIRE)) {
    /* Creating the thread mallocs: left to this thread's next free (prof_free_hook). */
    if (__atomic_load_n(&dump_thread_started, __ATOMIC_ACQUIRE) && dump_thread_pid == getpid()) {
      dump_wake();
    } else {
      want_thread();
    }
  }
}

bool prof_free_sampled(tsd_t *tsd, void *p, edata_t *ed) {
  if (tsd->reentrant) return true; /* a signal handler inside strata: keep p and its record */
  if (!live_maybe((uintptr_t)p)) return false; /* a neighbour: no lock */
  tsd->reentrant = 1;
  mtx_lock(&prof_lock);
  live_t *e = live_find((uintptr_t)p);
  if (e) {
    live_remove(e);
    __atomic_sub_fetch(&ed->prof_nsampled, 1, __ATOMIC_RELAXED);
    gran_restore(ed, (uintptr_t)p);
  }
  mtx_unlock(&prof_lock);
  if (e && PROBE_ON(otel_memory, free)) PROBE1(otel_memory, free, p);
  tsd->reentrant = 0;
  return false;
}

/* Counters of every stack, copied under prof_lock (frames are immutable). */
prof_snap_t *prof_snapshot(size_t *n, size_t *map_bytes) {
  tsd_t *tsd = tsd_fetch();
  *n = 0;
  if (tsd == NULL) return NULL;
  uint8_t saved = tsd->reentrant;
  tsd->reentrant = 1;
  mtx_lock(&prof_lock);
  size_t cap = stack_count + 1;
  size_t bytes = (cap * sizeof(prof_snap_t) + os_page - 1) & ~(os_page - 1);
  prof_snap_t *s = os_map(bytes, 0);
  if (s) {
    for (prof_stack_t *st = stack_all; st && *n < cap; st = st->all_next) {
      if (st->cur_objs == 0 && st->acc_objs == 0) continue;
      s[(*n)++] = (prof_snap_t){st, st->cur_objs, st->cur_bytes, st->acc_objs, st->acc_bytes,
                                st->w_cur_objs, st->w_cur_bytes, st->w_acc_objs, st->w_acc_bytes};
    }
  }
  mtx_unlock(&prof_lock);
  tsd->reentrant = saved;
  *map_bytes = bytes;
  return s;
}

/* The records worth a line (a live thread, or live samples), copied under prof_lock. */
prof_thr_snap_t *prof_thr_snapshot(size_t *n, size_t *map_bytes) {
  tsd_t *tsd = tsd_fetch();
  *n = 0;
  *map_bytes = 0;
  if (tsd == NULL) return NULL;
  uint8_t saved = tsd->reentrant;
  tsd->reentrant = 1;
  mtx_lock(&prof_lock);
  size_t cap = 0;
  for (prof_thr_t *t = thr_all; t; t = t->next) cap++;
  size_t bytes = ((cap + 1) * sizeof(prof_thr_snap_t) + os_page - 1) & ~(os_page - 1);
  prof_thr_snap_t *s = os_map(bytes, 0);
  if (s) {
    for (prof_thr_t *t = thr_all; t; t = t->next) {
      if (t->dead && t->cur_objs == 0) continue;
      prof_thr_snap_t *d = &s[(*n)++];
      d->uid = t->uid, d->cur_objs = t->cur_objs, d->cur_bytes = t->cur_bytes;
      d->acc_objs = t->acc_objs, d->acc_bytes = t->acc_bytes;
      memcpy(d->name, t->name, sizeof(d->name));
    }
  }
  mtx_unlock(&prof_lock);
  tsd->reentrant = saved;
  *map_bytes = bytes;
  return s;
}

/* ---------------------------------------------------------------- dumps */
static char *put_str(char *d, const char *s) {
  while (*s) *d++ = *s++;
  *d = '\0';
  return d;
}

/* kind: 'm', 'i', 'u' (followed by their sequence) or 'f'. */
static void dump_name(char *buf, size_t cap, char kind, uint64_t kseq) {
  char num[24];
  if (strlen(prof_opt.prefix) + 80 > cap) {
    buf[0] = '\0';
    return;
  }
  char *d = put_str(buf, prof_opt.prefix);
  d = put_str(d, ".");
  d = put_str(d, fmt_u64(num, (uint64_t)getpid()));
  d = put_str(d, ".");
  d = put_str(d, fmt_u64(num, dump_seq++));
  *d++ = '.';
  *d++ = kind;
  *d = '\0';
  if (kind != 'f') d = put_str(d, fmt_u64(num, kseq));
  put_str(d, ".heap");
}

/* Writes the dump(s) for path in the configured formats; prof_dump_lock held. */
static bool dump_write(const char *path) {
  size_t n, bytes;
  prof_snap_t *s = prof_snapshot(&n, &bytes);
  if (s == NULL) return false;
  uint64_t period = sample_mean();
  bool fail = false;
  if (prof_opt.format & PROF_FMT_JEMALLOC) {
    size_t nt = 0, tbytes = 0;
    prof_thr_snap_t *t = prof_thr_snapshot(&nt, &tbytes);
    fail |= prof_dump_heap_v2(path, s, n, t, nt, period);
    if (t) os_unmap(t, tbytes);
  }
  if (prof_opt.format & PROF_FMT_PPROF) {
    char pb[512];
    const char *target = path;
    if (prof_opt.format & PROF_FMT_JEMALLOC) { /* both: the proto goes next to it */
      size_t l = strlen(path);
      if (l + 7 > sizeof(pb)) {
        fail = true;
        goto out;
      }
      memcpy(pb, path, l);
      memcpy(pb + l, ".pb.gz", 7);
      target = pb;
    }
    fail |= prof_dump_pprof(target, s, n, period);
  }
out:
  os_unmap(s, bytes);
  return fail;
}

static bool dump_kind(char kind) {
  char path[512];
  mtx_lock(&prof_dump_lock);
  uint64_t k = kind == 'm' ? dump_mseq++ : kind == 'i' ? dump_iseq++ : kind == 'u' ? dump_useq++ : 0;
  dump_name(path, sizeof(path), kind, k);
  bool fail = path[0] == '\0' || dump_write(path);
  mtx_unlock(&prof_dump_lock);
  return fail;
}

/* The dump thread: interval, high-water and signal dumps are written here, never on an
 * allocation path. Waits on a futex (async-signal-safe to wake). */
static void *dump_thread(void *arg) {
  (void)arg;
  for (;;) {
    uint32_t r = __atomic_exchange_n(&dump_req, 0, __ATOMIC_ACQ_REL);
    if (r == 0) {
      syscall(SYS_futex, &dump_req, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
      continue;
    }
    if (r & REQ_INTERVAL) dump_kind('i');
    if (r & REQ_GDUMP) dump_kind('u');
    if (r & REQ_SIGNAL) dump_kind('m');
  }
  return NULL;
}

static void dump_wake(void) { syscall(SYS_futex, &dump_req, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }

/* Created on the first request (never inside the first malloc), again after fork. */
static void dump_thread_start(void) {
  pid_t pid = getpid();
  if (__atomic_load_n(&dump_thread_started, __ATOMIC_ACQUIRE) && dump_thread_pid == pid) {
    dump_wake();
    return;
  }
  if (__atomic_exchange_n(&dump_thread_started, true, __ATOMIC_ACQ_REL) && dump_thread_pid == pid) {
    dump_wake();
    return;
  }
  dump_thread_pid = pid;
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  /* No signals for the dump thread: the program's handlers run on its own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  if (pthread_create(&t, &at, dump_thread, NULL) != 0) __atomic_store_n(&dump_thread_started, false, __ATOMIC_RELEASE);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&at);
}

/* Every prof.* name except opt.* needs opt.prof, as in jemalloc (ENOENT otherwise): a
 * process whose sampler a tracer turned on (prof_trace_switch) has no profile to dump. */
#define NEED_PROF() \
  do { \
    if (!strata_ready && strata_init()) return EAGAIN; \
    if (!prof_opt.prof) return ENOENT; \
  } while (0)

/* prof_signal: the dump thread is started when the library loads (metrics.c's
 * constructor, never inside a malloc call), so a signal dumps at once even in a process
 * that makes no more allocator calls; the handler only sets a bit and wakes the futex,
 * both async-signal-safe. A forked child starts its thread at its first allocator call. */
void prof_boot_thread(void) {
  if (prof_on && prof_opt.signal) dump_thread_start();
}

/* prof.dump_request (strata): the same request as prof_signal, from code: the dump
 * thread writes the next 'm' dump and the caller does not wait for it. */
int prof_ctl_dump_request(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)oldlenp, (void)newp, (void)newlen;
  NEED_PROF();
  if (oldp != NULL) return EPERM; /* write-only */
  __atomic_or_fetch(&dump_req, REQ_SIGNAL, __ATOMIC_RELEASE);
  dump_thread_start();
  return __atomic_load_n(&dump_thread_started, __ATOMIC_ACQUIRE) ? 0 : EAGAIN;
}

static void signal_handler(int sig) {
  (void)sig;
  int saved = errno;
  __atomic_or_fetch(&dump_req, REQ_SIGNAL, __ATOMIC_RELEASE);
  dump_wake();
  errno = saved;
}

static void prof_exit(void) {
  if (prof_opt.final) dump_kind('f');
  if (prof_opt.leak) {
    mtx_lock(&prof_dump_lock);
    size_t n, bytes;
    prof_snap_t *s = prof_snapshot(&n, &bytes);
    bool leaked = false;
    if (s) {
      leaked = prof_leak_report(s, n, sample_mean());
      os_unmap(s, bytes);
    }
    mtx_unlock(&prof_dump_lock);
    if (leaked && prof_opt.leak_error) {
      msg_write("<strata>: Exiting with error code because memory leaks were detected\n");
      _exit(1); /* as jemalloc: not exit(), which would run atexit handlers again */
    }
  }
}

/* ---------------------------------------------------------------- boot, fork */
void prof_boot(void) {
  __atomic_store_n(&prof_on, prof_opt.prof, __ATOMIC_RELAXED); /* read before init: malloc_slow */
  prof_active_now = prof_opt.prof && prof_opt.active; /* prof:false: sampled only for a tracer */
  prof_lg_sample_now = prof_opt.lg_sample;
  prof_gdump_now = prof_opt.gdump;
  if (prof_opt.lg_interval >= 0) interval_next = (uint64_t)1 << prof_opt.lg_interval;
  /* strata_malloc's entry becomes a jump to malloc_prof (alloc.c says why it is safe here:
   * init_lock is held and strata is not ready). Unpatched, the zero table still sends
   * every malloc to malloc_prof, through malloc's failed fast path. */
  const char *nopatch = getenv("STRATA_PROF_NOPATCH");
  if (prof_on && !(nopatch && nopatch[0] == '1')) {
    int r = prof_entry_patch();
    prof_entry_state = r <= 0 ? 1 : -r;
    if (opt.confirm_conf) {
      char b[24];
      const char *m[] = {"<strata>: ", r == 0   ? "prof:true: malloc's entry jumps to the profiling malloc\n"
                         : r < 0  ? "prof:true: malloc's entry patched; its page stays writable, errno "
                                  : "prof:true: malloc's entry not patched (slower table path), errno ",
                         r ? fmt_u64(b, (uint64_t)(r < 0 ? -r : r)) : "", r ? "\n" : ""};
      msg_parts(m, 4);
    }
  }
}

void prof_boot_late(void) {
  if (!prof_on) return;
  if (prof_opt.final || prof_opt.leak) atexit(prof_exit);
  if (prof_opt.signal) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = signal_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(prof_opt.signal, &sa, NULL);
  }
}

void prof_prefork(void) {
  mtx_lock(&prof_dump_lock);
  mtx_lock(&prof_lock);
}

void prof_postfork(bool child) {
  if (child) {
    mtx_init(&prof_lock);
    mtx_init(&prof_dump_lock);
    mtx_init(&trace_lock);
    sz_postfork_child();
    /* The dump thread is not in the child: the next request starts one. */
    __atomic_store_n(&dump_thread_started, false, __ATOMIC_RELEASE);
    if (__atomic_load_n(&dump_req, __ATOMIC_RELAXED) || prof_opt.signal) want_thread();
    dump_seq = dump_mseq = dump_iseq = dump_useq = 0;
    /* Only this thread lives on: the others' records stay while their samples do. */
    for (prof_thr_t *t = thr_all; t; t = t->next) t->dead |= t != prof_td.thr;
  } else {
    mtx_unlock(&prof_lock);
    mtx_unlock(&prof_dump_lock);
  }
}

/* ---------------------------------------------------------------- mallctl handlers */

/* A read-write bool: reads the old value, then writes the new one. */
static int rw_bool(bool *var, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  bool old = __atomic_load_n(var, __ATOMIC_RELAXED);
  if (newp != NULL && newlen != sizeof(bool)) return EINVAL;
  int r = ctl_copy_out(oldp, oldlenp, &old, sizeof(old));
  if (r) return r;
  bool v;
  if (newp != NULL && !ctl_bool_in(newp, &v)) return EINVAL;
  if (newp != NULL) __atomic_store_n(var, v, __ATOMIC_RELAXED);
  return 0;
}

#define RO(newp) \
  do { \
    if ((newp) != NULL) return EPERM; \
  } while (0)


int prof_ctl_active(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  NEED_PROF();
  return rw_bool(&prof_active_now, oldp, oldlenp, newp, newlen);
}

int prof_ctl_gdump(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  NEED_PROF();
  return rw_bool(&prof_gdump_now, oldp, oldlenp, newp, newlen);
}

int prof_ctl_dump(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)oldlenp;
  NEED_PROF();
  if (oldp != NULL) return EPERM; /* write-only */
  const char *path = NULL;
  if (newp != NULL) {
    if (newlen != sizeof(const char *)) return EINVAL;
    path = *(const char **)newp;
  }
  if (path == NULL) return dump_kind('m') ? EFAULT : 0;
  mtx_lock(&prof_dump_lock);
  bool fail = dump_write(path);
  mtx_unlock(&prof_dump_lock);
  return fail ? EFAULT : 0;
}

int prof_ctl_reset(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)oldlenp;
  NEED_PROF();
  if (oldp != NULL) return EPERM;
  size_t lg = __atomic_load_n(&prof_lg_sample_now, __ATOMIC_RELAXED);
  if (newp != NULL) {
    if (newlen != sizeof(size_t)) return EINVAL;
    lg = *(size_t *)newp;
    if (lg > 62) return EINVAL;
  }
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return EAGAIN;
  uint8_t saved = tsd->reentrant;
  tsd->reentrant = 1;
  mtx_lock(&prof_lock);
  /* Live samples of the old generation stay in the set (their frees find them) but no
   * longer count; every stack starts from zero. */
  live_gen++;
  for (prof_stack_t *st = stack_all; st; st = st->all_next) {
    st->cur_objs = st->cur_bytes = st->acc_objs = st->acc_bytes = 0;
    st->w_cur_objs = st->w_cur_bytes = st->w_acc_objs = st->w_acc_bytes = 0;
  }
  for (prof_thr_t *t = thr_all; t; t = t->next) t->cur_objs = t->cur_bytes = t->acc_objs = t->acc_bytes = 0;
  live_w_bytes = live_w_peak = 0;
  __atomic_store_n(&prof_lg_sample_now, (unsigned)lg, __ATOMIC_RELAXED);
  mtx_unlock(&prof_lock);
  tsd->reentrant = saved;
  return 0;
}

int prof_ctl_lg_sample(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  NEED_PROF();
  RO(newp);
  size_t v = __atomic_load_n(&prof_lg_sample_now, __ATOMIC_RELAXED);
  return ctl_copy_out(oldp, oldlenp, &v, sizeof(v));
}

int prof_ctl_interval(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  NEED_PROF();
  RO(newp);
  uint64_t v = prof_opt.lg_interval >= 0 ? (uint64_t)1 << prof_opt.lg_interval : 0;
  return ctl_copy_out(oldp, oldlenp, &v, sizeof(v));
}

int prof_ctl_thread_name(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                         size_t newlen) {
  (void)mib, (void)miblen;
  NEED_PROF();
  /* jemalloc: a read or a write, not both in one call. */
  if (newp != NULL && oldp != NULL) return EPERM;
  const char *cur = prof_td.name;
  int r = ctl_copy_out(oldp, oldlenp, &cur, sizeof(cur));
  if (r) return r;
  if (newp != NULL) {
    if (newlen != sizeof(const char *)) return EINVAL;
    const char *s = *(const char **)newp;
    if (s == NULL) return EINVAL; /* jemalloc 5.3.1's answers (5.3.0 said EFAULT) */
    size_t l = strlen(s);
    /* jemalloc: every character isgraph or isblank in the C locale, or EINVAL */
    for (size_t i = 0; i < l; i++) {
      unsigned char c = (unsigned char)s[i];
      if (!((c > 0x20 && c < 0x7f) || c == ' ' || c == '\t')) return EINVAL;
    }
    /* A longer name is cut to fit, as jemalloc cuts it (PROF_THREAD_NAME_MAX_LEN, 16). */
    if (l >= sizeof(prof_td.name)) l = sizeof(prof_td.name) - 1;
    memcpy(prof_td.name, s, l);
    prof_td.name[l] = '\0';
    if (prof_td.thr) { /* this thread's record in dumps */
      tsd_t *tsd = tsd_fetch();
      if (tsd == NULL) return EAGAIN;
      uint8_t saved = tsd->reentrant;
      tsd->reentrant = 1;
      mtx_lock(&prof_lock);
      memcpy(prof_td.thr->name, prof_td.name, sizeof(prof_td.name));
      mtx_unlock(&prof_lock);
      tsd->reentrant = saved;
    }
  }
  return 0;
}

int prof_ctl_thread_active(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib, (void)miblen;
  NEED_PROF();
  if (!prof_td.init) td_init(&prof_td);
  return rw_bool(&prof_td.active, oldp, oldlenp, newp, newlen);
}

/* opt.*: read-only copies of the start-up options. */
#define OPT_HANDLER(fn, type, expr) \
  int fn(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) { \
    (void)mib, (void)miblen, (void)newlen; \
    if (!strata_ready && strata_init()) return EAGAIN; \
    RO(newp); \
    type v = (expr); \
    return ctl_copy_out(oldp, oldlenp, &v, sizeof(v)); \
  }
OPT_HANDLER(prof_ctl_opt_prof, bool, prof_opt.prof)
OPT_HANDLER(prof_ctl_opt_prof_active, bool, prof_opt.active)
OPT_HANDLER(prof_ctl_opt_thread_active_init, bool, prof_opt.thread_active_init)
OPT_HANDLER(prof_ctl_opt_lg_sample, size_t, prof_opt.lg_sample)
OPT_HANDLER(prof_ctl_opt_prefix, const char *, prof_opt.prefix)
OPT_HANDLER(prof_ctl_opt_lg_interval, ssize_t, prof_opt.lg_interval)
OPT_HANDLER(prof_ctl_opt_gdump, bool, prof_opt.gdump)
OPT_HANDLER(prof_ctl_opt_final, bool, prof_opt.final)
OPT_HANDLER(prof_ctl_opt_leak, bool, prof_opt.leak)
OPT_HANDLER(prof_ctl_opt_accum, bool, prof_opt.accum)
OPT_HANDLER(prof_ctl_opt_leak_error, bool, prof_opt.leak_error)

/* prof.thread_active_init: whether threads created from now on sample (jemalloc's rw). */
int prof_ctl_thread_active_init(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                                size_t newlen) {
  (void)mib, (void)miblen;
  if (!strata_ready && strata_init()) return EAGAIN;
  return rw_bool(&prof_opt.thread_active_init, oldp, oldlenp, newp, newlen);
}

/* prof.prefix: the dump file prefix from now on (write-only, as jemalloc's). */
int prof_ctl_prefix(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  NEED_PROF();
  if (oldp != NULL || oldlenp != NULL) return EPERM;
  const char *v;
  if (newp == NULL || newlen != sizeof(v)) return EINVAL;
  memcpy(&v, newp, sizeof(v));
  if (v == NULL || v[0] == '\0' || strlen(v) >= sizeof(prof_opt.prefix) - 128) return EINVAL;
  mtx_lock(&prof_dump_lock);
  memcpy(prof_opt.prefix, v, strlen(v) + 1);
  mtx_unlock(&prof_dump_lock);
  return 0;
}

/* prof.log_start / prof.log_stop: jemalloc's allocation event log, which strata's
 * profiler does not keep: ENOENT without prof (as jemalloc), EFAULT with it (jemalloc's
 * answer when the log cannot start). */
int prof_ctl_log(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)oldp, (void)oldlenp, (void)newp, (void)newlen;
  NEED_PROF();
  return EFAULT;
}

/*
 * decay.c - time-based purging (jemalloc's decay) in two stages, each on its own clock:
 * dirty pages (freed, resident) decay over dirty_decay_ms, to muzzy (MADV_FREE) when
 * muzzy_decay_ms is not 0, else straight to purged (MADV_DONTNEED); muzzy pages decay
 * over muzzy_decay_ms to purged. The pages added in each step (1/100 of the decay time)
 * form a backlog, and pages added k steps ago may stay in proportion h(k) = 1 -
 * smoothstep(k/100), so a burst fades out smoothly instead of being purged at once or
 * all at the deadline. Purging takes the oldest extents first, on allocator events, or
 * in the background threads (background.c) when they are on. A hard cap (the active
 * pages, at least DIRTY_CAP_MIN, or what the recent peak had active and is not now, up
 * to PEAK_KEEP_MAX) bounds what a free storm leaves resident. Near a
 * container's memory limit every arena is purged at once (limit_*).
 */
#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "internal.h"
#include "probes.h"

_Static_assert(DECAY_STEPS == sizeof(((decay_t *)0)->backlog) / sizeof(size_t), "backlog size");
/* A free storm may leave this much dirty per arena (a few large blocks' worth for
 * reuse), or as much as is active, whichever is more. */
#define DIRTY_CAP_MIN ((size_t)32 << 20)
/* The oversize arena keeps at most this much more dirty than it has active (see
 * dirty_cap). */
#define HUGE_STORM_SLACK ((size_t)256 << 20)
/* An ordinary arena keeps at most this much dirty beyond DIRTY_CAP_MIN's rule for its
 * recent peak of active pages (see dirty_cap). */
#define PEAK_KEEP_MAX ((size_t)96 << 20)
static void huge_note(const arena_t *a);
static bool huge_over_floor;   /* atomic: the oversize arena's dirty pages passed the floor */
static uint64_t huge_alloc_ns; /* atomic: the oversize arena's last allocation */
static bool huge_trim_pending; /* atomic */
#define HUGE_IDLE_NS ((uint64_t)100 * 1000000u) /* one decay step at the default 10 s */
/* The background thread is woken early when an arena's dirty pages grew by this many
 * since it last looked (jemalloc's BACKGROUND_THREAD_NPAGES_THRESHOLD). */
#define BG_WAKE_NPAGES 1024
/* The cgroup limit is re-read at most this often (a container's limit can change). */
#define LIMIT_REREAD_NS 1000000000ULL

int64_t arenas_dirty_decay_ms, arenas_muzzy_decay_ms; /* from opt at init; arenas.*_decay_ms */

/* Resident memory is past the program's soft limit (soft_limit): frees purge at once. */
static bool soft_over(void) {
  uint64_t soft = __atomic_load_n(&limit_soft, __ATOMIC_RELAXED);
  return soft != 0 && mem_resident() >= soft;
}

uint64_t decay_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no syscall */
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The window of the oversize arena's active peak: half the decay time (two halves are
 * kept), 10 s's worth when decay is off or immediate. */
static uint64_t peak_half_ns(const arena_t *a) {
  int64_t ms = decay_ms(&a->ddecay);
  return (uint64_t)(ms > 0 ? ms : 10000) * 500000u;
}

/* Start a new half window when the current one is over (elock held). */
static void peak_rotate(arena_t *a, uint64_t now) {
  uint64_t half = peak_half_ns(a);
  if (a->peak_ns == 0) a->peak_ns = now; /* a new arena's first window: keep its climb */
  if (now - a->peak_ns >= half) {
    a->peak_active[1] = now - a->peak_ns >= 2 * half ? 0 : a->peak_active[0];
    a->peak_active[0] = 0;
    a->peak_ns = now;
  }
  if (a->nactive > a->peak_active[0]) a->peak_active[0] = a->nactive;
}

void arena_note_peak(arena_t *a) {
  uint64_t now = decay_now();
  peak_rotate(a, now);
  __atomic_store_n(&huge_alloc_ns, now, __ATOMIC_RELAXED);
}

static size_t dirty_cap(const arena_t *a) {
  size_t floor = DIRTY_CAP_MIN / os_page;
  if (a->huge) {
    /* The oversize arena builds a request out of freed blocks' pages with mremap
     * (extent.c), so what its live set may need again is what was active at the recent
     * peak and is not now: resident stays under that peak (or 32 MiB), and decay, the
     * background threads and the container limit give the rest back. Capping it at the
     * active pages (the other arenas' free-storm rule) doubled wl_hugeblocks' faults:
     * three small live blocks then forced out the big freed one; active + 64 MiB still
     * cost 25% more faults. Active + 256 MiB leaves that loop alone and still gives a
     * freed 1 GiB buffer back at once, down to 256 MiB. */
    size_t peak = a->peak_active[0] > a->peak_active[1] ? a->peak_active[0] : a->peak_active[1];
    size_t want = peak > a->nactive ? peak - a->nactive : 0;
    if (want > a->nactive + HUGE_STORM_SLACK / os_page) want = a->nactive + HUGE_STORM_SLACK / os_page;
    return want > floor ? want : floor;
  }
  /* An ordinary arena may keep as many dirty pages as it had active at its recent peak,
   * up to PEAK_KEEP_MAX: a live set that falls and climbs again (wl_halffree: 75 MiB of
   * 4 KiB blocks replaced by 16 B ones, round after round) then refaults nothing; capping
   * at the active pages purged 60 MiB per climb (3x mimalloc's page faults), and at the
   * peak less the active pages still purged in small batches on the way up. Dirty pages
   * are reused before fresh ones, so this does not raise the arena's resident peak; a
   * free storm that ends a phase (wl_memreturn) leaves at most PEAK_KEEP_MAX resident
   * until decay. */
  size_t want = a->peak_active[0] > a->peak_active[1] ? a->peak_active[0] : a->peak_active[1];
  if (want > PEAK_KEEP_MAX / os_page) want = PEAK_KEEP_MAX / os_page;
  if (want < a->nactive) want = a->nactive;
  return want > floor ? want : floor;
}

static uint64_t step_ns(int64_t ms) { return (uint64_t)ms * 1000000u / DECAY_STEPS; }

void decay_init(decay_t *d, int64_t ms, uint64_t now) {
  __atomic_store_n(&d->ms, ms, __ATOMIC_RELAXED);
  d->epoch_ns = now;
  d->nunpurged = 0; /* what the set holds now counts as new at the next step */
  memset(d->backlog, 0, sizeof(d->backlog));
}

/* h(k) = 1 - smoothstep(k / DECAY_STEPS): the share of a step's pages still allowed. */
static double decay_h(unsigned k) {
  double x = (double)k / DECAY_STEPS;
  return 1.0 - x * x * (3.0 - 2.0 * x);
}

size_t decay_step(decay_t *d, size_t npages, uint64_t now) {
  int64_t ms = decay_ms(d);
  if (ms == 0) return 0;
  if (ms < 0) return npages;
  uint64_t step = step_ns(ms);
  uint64_t n = step ? (now - d->epoch_ns) / step : DECAY_STEPS;
  if (now < d->epoch_ns || n == 0) return npages;
  d->epoch_ns = (n >= DECAY_STEPS) ? now : d->epoch_ns + n * step;
  if (n >= DECAY_STEPS) {
    memset(d->backlog, 0, sizeof(d->backlog));
  } else {
    memmove(&d->backlog[n], &d->backlog[0], (DECAY_STEPS - n) * sizeof(size_t));
    memset(&d->backlog[0], 0, n * sizeof(size_t));
  }
  d->backlog[0] = npages > d->nunpurged ? npages - d->nunpurged : 0;
  double limit = 0;
  for (unsigned k = 0; k < DECAY_STEPS; k++) {
    if (d->backlog[k]) limit += (double)d->backlog[k] * decay_h(k);
  }
  return (double)npages > limit ? (size_t)limit : npages;
}

/* While the set holds pages, or held some within the last decay time (the backlog is not
 * empty yet), the next step; else never. Keeping a recently busy arena on the clock for
 * one decay time costs its thread a wake-up per step, but spares the application threads
 * a wake-up call every time the set empties and fills again (wl_server). */
uint64_t decay_deadline(const decay_t *d, size_t npages) {
  int64_t ms = decay_ms(d);
  if (ms <= 0) return UINT64_MAX; /* 0 purges at once, -1 never */
  bool recent = npages != 0;
  for (unsigned k = 0; k < DECAY_STEPS && !recent; k++) recent = d->backlog[k] != 0;
  return recent ? d->epoch_ns + step_ns(ms) : UINT64_MAX;
}

/* Both stages, elock held (dropped around madvise by extent_purge). */
static void decay_arena_locked(arena_t *a) {
  uint64_t now = decay_now();
  if (a->huge) {
    arena_note_peak(a); /* an idle arena's peak ages out too */
  } else {
    peak_rotate(a, now);
  }
  uint64_t dirty_epoch = a->ddecay.epoch_ns, muzzy_epoch = a->mdecay.epoch_ns;
  size_t keep = decay_step(&a->ddecay, a->dirty.npages, now);
  size_t cap = dirty_cap(a);
  /* Batch: well under the cap; when the cap comes from a recent peak only down to it
   * (each purged page faults in again on reuse). */
  bool from_peak = a->huge || cap > (a->nactive > DIRTY_CAP_MIN / os_page ? a->nactive : DIRTY_CAP_MIN / os_page);
  if (a->dirty.npages > cap && keep > cap / 2) keep = a->huge ? cap : from_peak ? cap - cap / 4 : cap / 2;
  /* The step's new pages are measured from the set as the last step (or purge) left it,
   * not as the last call saw it: a call between two steps (a background wake per 4 MiB of
   * frees, a free over the cap) would otherwise hide what came before it, and a set that
   * rises and falls with reuse (malloc-large: 5-25 MiB blocks replaced in turn) would be
   * purged from a backlog that never recorded its frees, each purged page faulting in
   * again at its next use. */
  bool purged = keep < a->dirty.npages;
  if (purged) extent_purge(a, ES_DIRTY, keep, decay_ms(&a->mdecay) != 0);
  if (purged || a->ddecay.epoch_ns != dirty_epoch) a->ddecay.nunpurged = a->dirty.npages;
  if (a->huge) huge_note(a);
  purged = false;
  if (a->muzzy.npages) {
    keep = decay_step(&a->mdecay, a->muzzy.npages, now);
    purged = keep < a->muzzy.npages;
    if (purged) extent_purge(a, ES_MUZZY, keep, false);
  }
  if (purged || a->mdecay.epoch_ns != muzzy_epoch || a->muzzy.npages == 0) a->mdecay.nunpurged = a->muzzy.npages;
}

/* The oversize arena's dirty pages beyond DIRTY_CAP_MIN are kept for its own reuse; when
 * another arena's pages grow meanwhile (limit_check), the excess goes (huge_trim), so a
 * program whose huge blocks are done does not carry them into its next phase
 * (wl_sizesweep: 64 MiB more at its 1 GiB realloc peak without this). */

static void huge_note(const arena_t *a) {
  bool over = a->dirty.npages > DIRTY_CAP_MIN / os_page;
  if (over != __atomic_load_n(&huge_over_floor, __ATOMIC_RELAXED)) __atomic_store_n(&huge_over_floor, over, __ATOMIC_RELAXED);
}

static void huge_trim(void) {
  arena_t *h = __atomic_load_n(&arenas[narenas], __ATOMIC_ACQUIRE);
  if (h == NULL) return;
  mtx_lock(&h->elock);
  if (h->dirty.npages > DIRTY_CAP_MIN / os_page) extent_purge(h, ES_DIRTY, DIRTY_CAP_MIN / os_page, false);
  h->ddecay.nunpurged = h->dirty.npages;
  huge_note(h);
  mtx_unlock(&h->elock);
}

void arena_note_dirty(arena_t *a, uint64_t now) {
  if (a->huge) huge_note(a);
  size_t nd = a->dirty.npages;
  if (nd == 0 && a->muzzy.npages == 0) return;
  if (unlikely(soft_over())) { /* past the soft limit nothing freed stays: purge after unlocking */
    __atomic_store_n(&a->purge_pending, true, __ATOMIC_RELAXED);
    return;
  }
  int64_t ms = decay_ms(&a->ddecay);
  /* The cap is never below DIRTY_CAP_MIN: under it, no need to work the cap out. */
  bool due = ms == 0 || (nd > DIRTY_CAP_MIN / os_page && nd > dirty_cap(a));
  /* Whether a clock runs for the background thread: with both stages' decay disabled (or
   * no muzzy pages to age) it has nothing to do here, and its pass would clear
   * bg_scheduled (no deadline) only for the next free to wake it again: with
   * dirty_decay_ms:-1, mstress made 2,800 context switches a run instead of 57. */
  bool clock = ms > 0 || (a->muzzy.npages && decay_ms(&a->mdecay) > 0);
  if (!due && clock && __atomic_load_n(&bg_enabled, __ATOMIC_RELAXED)) {
    /* The background thread decays: tell it only when it does not know of this arena's
     * pages yet, or when they grew fast since it last looked. */
    if (a->bg_scheduled && nd <= a->bg_seen_npages + BG_WAKE_NPAGES) return;
    a->bg_scheduled = true;
    a->bg_seen_npages = nd;
    due = true;
  } else if (!due) {
    due = (ms > 0 && now - a->ddecay.epoch_ns >= step_ns(ms)) ||
          (a->muzzy.npages && decay_ms(&a->mdecay) >= 0 &&
           now - a->mdecay.epoch_ns >= step_ns(decay_ms(&a->mdecay)));
  }
  if (due) __atomic_store_n(&a->purge_pending, true, __ATOMIC_RELAXED);
}

void arena_maybe_purge(arena_t *a) {
  if (likely(!__atomic_load_n(&a->purge_pending, __ATOMIC_RELAXED))) return;
  if (__atomic_load_n(&limit_pending, __ATOMIC_RELAXED)) limit_purge();
  if (__atomic_load_n(&huge_trim_pending, __ATOMIC_RELAXED) && __atomic_exchange_n(&huge_trim_pending, false, __ATOMIC_ACQ_REL))
    huge_trim();
  bool bg = __atomic_load_n(&bg_enabled, __ATOMIC_RELAXED);
  mtx_lock(&a->elock);
  if (a->purge_pending) {
    __atomic_store_n(&a->purge_pending, false, __ATOMIC_RELAXED);
    /* With background threads, the caller purges only what cannot wait: a free storm
     * over the cap, or decay time 0. */
    if (!bg || a->dirty.npages > dirty_cap(a) || decay_ms(&a->ddecay) == 0) decay_arena_locked(a);
  }
  if (unlikely(soft_over())) {
    extent_purge(a, ES_DIRTY, 0, false);
    extent_purge(a, ES_MUZZY, 0, false);
    a->ddecay.nunpurged = a->dirty.npages;
    a->mdecay.nunpurged = a->muzzy.npages;
  }
  if (a->frag_purge) { /* fresh pages taken beside fragmented dirty ones (extent.c) */
    size_t n = a->frag_purge;
    a->frag_purge = 0;
    extent_purge(a, ES_DIRTY, a->dirty.npages > n ? a->dirty.npages - n : 0, decay_ms(&a->mdecay) != 0);
  }
  mtx_unlock(&a->elock);
  if (bg) bg_wake(a);
}

uint64_t arena_decay(arena_t *a) {
  mtx_lock(&a->elock);
  if (__atomic_load_n(&a->destroyed, __ATOMIC_ACQUIRE)) { /* its pages went back with it */
    mtx_unlock(&a->elock);
    return UINT64_MAX;
  }
  decay_arena_locked(a);
  uint64_t d = decay_deadline(&a->ddecay, a->dirty.npages);
  uint64_t m = decay_deadline(&a->mdecay, a->muzzy.npages);
  if (m < d) d = m;
  a->bg_scheduled = d != UINT64_MAX;
  a->bg_seen_npages = a->dirty.npages;
  if (d == UINT64_MAX) edata_cache_flush(a, 0); /* idle: its spare edata back to the pool */
  mtx_unlock(&a->elock);
  return d;
}

static size_t arena_purge_extents(arena_t *a) {
  mtx_lock(&a->elock);
  size_t n = extent_purge(a, ES_DIRTY, 0, false);
  n += extent_purge(a, ES_MUZZY, 0, false);
  edata_cache_flush(a, 0);
  a->ddecay.nunpurged = a->dirty.npages;
  a->mdecay.nunpurged = a->muzzy.npages;
  mtx_unlock(&a->elock);
  return n;
}

size_t arena_purge(arena_t *a) { return arena_purge_extents(a); }

void arena_page_counts(arena_t *a, size_t *ndirty, size_t *nmuzzy) {
  mtx_lock(&a->elock);
  *ndirty = a->dirty.npages;
  *nmuzzy = a->muzzy.npages;
  mtx_unlock(&a->elock);
}

/* ---------------------------------------------------------------- container limit */
uint64_t limit_npurges;
bool limit_pending;
static uint64_t limit_rearm;   /* atomic: resident after the last limit purge + a quarter headroom */
static uint64_t limit_read_ns; /* atomic: when the limit was last read */

/* Default headroom: 1/32 of the limit (the resident figure misses the program's own
 * stacks and text, and other threads fault pages in while one purges), at least 4 MiB,
 * at most a quarter of the limit. */
uint64_t limit_headroom(uint64_t limit) {
  if (opt.limit_headroom) return opt.limit_headroom < limit ? opt.limit_headroom : limit;
  uint64_t h = limit / 32;
  if (h < ((uint64_t)4 << 20)) h = (uint64_t)4 << 20;
  if (h > limit / 4) h = limit / 4;
  return h;
}

/* Purge when resident comes within the headroom; but, to keep a process whose live data
 * sits near the limit from walking every arena at each new page, only again after
 * resident grew by a quarter headroom since the last purge, or within half the headroom. */
bool limit_due(uint64_t resident, uint64_t limit, uint64_t headroom, uint64_t rearm) {
  if (limit == 0 || resident + headroom < limit) return false;
  return resident >= rearm || resident + headroom / 2 >= limit;
}

uint64_t mem_resident(void) {
  return (uint64_t)__atomic_load_n(&extent_resident_pages, __ATOMIC_RELAXED) * os_page + meta_mapped();
}
#define resident_bytes mem_resident

uint64_t limit_effective(void) {
  uint64_t lim = __atomic_load_n(&os_mem_limit, __ATOMIC_RELAXED);
  uint64_t hard = __atomic_load_n(&limit_hard, __ATOMIC_RELAXED);
  return hard && (lim == 0 || hard < lim) ? hard : lim;
}

/* The soft limit: past it every arena is purged (as near the cgroup limit), and again
 * each time resident grew by SOFT_STEP of it since, so that a live set above the soft
 * limit keeps nothing free resident without walking the arenas at every new page. */
#define SOFT_STEP_SHIFT 6 /* 1/64 of the limit */
static uint64_t soft_rearm; /* atomic: resident from which the next soft purge is due */
static bool soft_pending;   /* atomic: the pending limit purge is (also) the soft limit's */

void limit_rearm_reset(void) {
  __atomic_store_n(&soft_rearm, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&limit_rearm, 0, __ATOMIC_RELAXED);
}

void limit_check(arena_t *a) {
  uint64_t now = decay_now(), last = __atomic_load_n(&limit_read_ns, __ATOMIC_RELAXED);
  /* Another arena grows while the oversize arena, idle for HUGE_IDLE_NS, holds pages past
   * its floor: give them back (the caller trims after unlocking). */
  if (!a->huge && __atomic_load_n(&huge_over_floor, __ATOMIC_RELAXED) &&
      now - __atomic_load_n(&huge_alloc_ns, __ATOMIC_RELAXED) >= HUGE_IDLE_NS &&
      !__atomic_load_n(&huge_trim_pending, __ATOMIC_RELAXED)) {
    __atomic_store_n(&huge_trim_pending, true, __ATOMIC_RELAXED);
    __atomic_store_n(&a->purge_pending, true, __ATOMIC_RELAXED);
  }
  if (now - last >= LIMIT_REREAD_NS &&
      __atomic_compare_exchange_n(&limit_read_ns, &last, now, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    __atomic_store_n(&os_mem_limit, os_mem_limit_read(), __ATOMIC_RELAXED);
  }
  uint64_t lim = limit_effective(), soft = __atomic_load_n(&limit_soft, __ATOMIC_RELAXED);
  uint64_t up = __atomic_load_n(&ev_up, __ATOMIC_RELAXED);
  if (lim == 0 && soft == 0 && up == UINT64_MAX) return;
  uint64_t res = resident_bytes();
  ev_note_resident(res);
  bool due = lim && limit_due(res, lim, limit_headroom(lim), __atomic_load_n(&limit_rearm, __ATOMIC_RELAXED));
  if (soft && res >= soft && res >= __atomic_load_n(&soft_rearm, __ATOMIC_RELAXED)) {
    __atomic_store_n(&soft_pending, true, __ATOMIC_RELAXED);
    due = true;
  }
  if (due) {
    __atomic_store_n(&limit_pending, true, __ATOMIC_RELAXED);
    __atomic_store_n(&a->purge_pending, true, __ATOMIC_RELAXED); /* the caller purges after unlocking */
  }
}

size_t limit_purge(void) {
  if (!__atomic_exchange_n(&limit_pending, false, __ATOMIC_ACQ_REL)) return 0;
  size_t n = 0;
  for (unsigned i = 0; i < __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE); i++) {
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (a && !__atomic_load_n(&a->destroyed, __ATOMIC_ACQUIRE)) n += arena_purge_extents(a);
  }
  uint64_t lim = limit_effective();
  meta_purge();
  uint64_t res = resident_bytes();
  if (lim) __atomic_store_n(&limit_rearm, res + limit_headroom(lim) / 4, __ATOMIC_RELAXED);
  if (__atomic_exchange_n(&soft_pending, false, __ATOMIC_RELAXED)) {
    uint64_t soft = __atomic_load_n(&limit_soft, __ATOMIC_RELAXED);
    __atomic_store_n(&soft_rearm, res >= soft ? res + (soft >> SOFT_STEP_SHIFT) : soft, __ATOMIC_RELAXED);
    __atomic_fetch_add(&limit_soft_npurges, 1, __ATOMIC_RELAXED);
  } else {
    __atomic_fetch_add(&limit_npurges, 1, __ATOMIC_RELAXED);
  }
  ev_note_resident(res);
  if (PROBE_ON(strata, limit_purge)) PROBE2(strata, limit_purge, (uint64_t)n * os_page, lim);
  return n;
}

/* ---------------------------------------------------------------- mallctl handlers */
/* arena.<i>: an ordinary arena (made on first use) or a live user arena; else EFAULT. */
static arena_t *ctl_arena(const size_t *mib, size_t miblen, int *err) {
  arena_t *a = NULL;
  if (miblen >= 2 && mib[1] <= narenas) {
    a = arena_get((unsigned)mib[1]);
    *err = a ? 0 : EAGAIN;
    return a;
  }
  if (miblen >= 2 && mib[1] < __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE))
    a = __atomic_load_n(&arenas[mib[1]], __ATOMIC_ACQUIRE);
  if (a != NULL && __atomic_load_n(&a->destroyed, __ATOMIC_ACQUIRE)) a = NULL;
  *err = a ? 0 : EFAULT;
  return a;
}

/* arena.<i>.decay / arena.<i>.purge: neither read nor written; <i> = 4096 is every arena. */
static int ctl_arena_each(const size_t *mib, size_t miblen, void *oldp, void *newp, bool purge) {
  if (oldp != NULL || newp != NULL) return EPERM;
  if (tsd_fetch() == NULL) return EAGAIN;
  /* jemalloc also takes arenas.narenas for "all" (the pre-5.0 spelling Redis's MEMORY PURGE uses). */
  unsigned total = __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE);
  if (miblen >= 2 && (mib[1] == MALLCTL_ARENAS_ALL || mib[1] == total)) {
    for (unsigned i = 0; i < total; i++) {
      arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
      if (a == NULL || __atomic_load_n(&a->destroyed, __ATOMIC_ACQUIRE)) continue;
      if (purge) {
        arena_purge(a);
      } else {
        arena_decay(a);
      }
    }
    if (purge) meta_purge();
    return 0;
  }
  int err;
  arena_t *a = ctl_arena(mib, miblen, &err);
  if (a == NULL) return err;
  if (purge) {
    arena_purge(a);
    meta_purge();
  } else {
    arena_decay(a);
  }
  return 0;
}

int ctl_arena_decay(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)oldlenp, (void)newlen;
  return ctl_arena_each(mib, miblen, oldp, newp, false);
}

int ctl_arena_purge(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)oldlenp, (void)newlen;
  return ctl_arena_each(mib, miblen, oldp, newp, true);
}

/* jemalloc's decay times are ssize_t: -1 (never) or milliseconds. */
static bool decay_ms_valid(const void *newp) { return *(const ssize_t *)newp >= -1; }

static int ctl_arena_decay_ms(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                              size_t newlen, bool muzzy) {
  if (tsd_fetch() == NULL) return EAGAIN;
  int err;
  arena_t *a = ctl_arena(mib, miblen, &err);
  if (a == NULL) return err;
  decay_t *d = muzzy ? &a->mdecay : &a->ddecay;
  ssize_t cur = (ssize_t)decay_ms(d);
  if ((err = ctl_rw(oldp, oldlenp, newp, newlen, &cur, sizeof(cur))) != 0 || newp == NULL) return err;
  if (!decay_ms_valid(newp)) return EINVAL;
  mtx_lock(&a->elock);
  decay_init(d, *(ssize_t *)newp, decay_now());
  __atomic_store_n(&a->purge_pending, true, __ATOMIC_RELAXED); /* apply at the next event */
  a->bg_scheduled = false;
  mtx_unlock(&a->elock);
  arena_maybe_purge(a);
  return 0;
}

int ctl_arena_dirty_decay_ms(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  return ctl_arena_decay_ms(mib, miblen, oldp, oldlenp, newp, newlen, false);
}

int ctl_arena_muzzy_decay_ms(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  return ctl_arena_decay_ms(mib, miblen, oldp, oldlenp, newp, newlen, true);
}

static int ctl_default_decay_ms(void *oldp, size_t *oldlenp, void *newp, size_t newlen, int64_t *dst) {
  if (tsd_fetch() == NULL) return EAGAIN;
  ssize_t cur = (ssize_t)__atomic_load_n(dst, __ATOMIC_RELAXED);
  int err = ctl_rw(oldp, oldlenp, newp, newlen, &cur, sizeof(cur));
  if (err || newp == NULL) return err;
  if (!decay_ms_valid(newp)) return EINVAL;
  __atomic_store_n(dst, (int64_t)*(ssize_t *)newp, __ATOMIC_RELAXED);
  return 0;
}

int ctl_arenas_dirty_decay_ms(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                              size_t newlen) {
  (void)mib, (void)miblen;
  return ctl_default_decay_ms(oldp, oldlenp, newp, newlen, &arenas_dirty_decay_ms);
}

int ctl_arenas_muzzy_decay_ms(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                              size_t newlen) {
  (void)mib, (void)miblen;
  return ctl_default_decay_ms(oldp, oldlenp, newp, newlen, &arenas_muzzy_decay_ms);
}

static int ctl_ro(void *oldp, size_t *oldlenp, void *newp, const void *val, size_t len) {
  if (newp != NULL) return EPERM;
  if (tsd_fetch() == NULL) return EAGAIN;
  return ctl_rw(oldp, oldlenp, NULL, 0, val, len);
}

int ctl_opt_dirty_decay_ms(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  ssize_t v = (ssize_t)opt.dirty_decay_ms;
  return ctl_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_opt_muzzy_decay_ms(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  ssize_t v = (ssize_t)opt.muzzy_decay_ms;
  return ctl_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_opt_limit_headroom(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  size_t v = (size_t)opt.limit_headroom;
  return ctl_ro(oldp, oldlenp, newp, &v, sizeof(v));
}


/* stats.mem_limit: the cgroup limit strata sees (0: none); stats.mem_limit_purges: how
 * often it purged every arena because resident memory came near it. */
int ctl_stats_mem_limit(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  uint64_t v = __atomic_load_n(&os_mem_limit, __ATOMIC_RELAXED);
  return ctl_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_stats_mem_limit_purges(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                               size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  uint64_t v = __atomic_load_n(&limit_npurges, __ATOMIC_RELAXED);
  return ctl_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

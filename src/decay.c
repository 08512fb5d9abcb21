/*
 * decay.c - time-based purging of dirty pages (jemalloc's decay). A freed extent stays
 * resident for reuse; the pages newly dirtied in each step (1/100 of dirty_decay_ms) form
 * a backlog, and pages dirtied k steps ago may stay dirty in proportion h(k) = 1 -
 * smoothstep(k/100), so a burst fades out smoothly instead of being purged at once or
 * all at the deadline. Purging takes the oldest extents first, on allocator events. A
 * hard cap (the active pages, at least DIRTY_CAP_MIN) bounds what a free storm leaves
 * resident. Purging an idle process (no events) needs the background threads of a later
 * version.
 */
#include <string.h>
#include <time.h>

#include "internal.h"

#define DECAY_STEPS 100 /* jemalloc's SMOOTHSTEP_NSTEPS */
_Static_assert(DECAY_STEPS == sizeof(((arena_t *)0)->decay_backlog) / sizeof(size_t), "backlog size");
/* A free storm may leave this much dirty per arena (a few large blocks' worth for
 * reuse), or as much as is active, whichever is more. */
#define DIRTY_CAP_MIN ((size_t)32 << 20)

uint64_t decay_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no syscall */
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t dirty_cap(const arena_t *a) {
  size_t floor = DIRTY_CAP_MIN / os_page;
  /* The oversize arena grows a freed block with mremap instead of needing one as big
   * as the request (extent.c), so a few blocks' worth is all its reuse needs. */
  if (a->huge) return floor;
  return a->nactive > floor ? a->nactive : floor;
}

static uint64_t step_ns(void) { return (uint64_t)opt.dirty_decay_ms * 1000000u / DECAY_STEPS; }

void arena_note_dirty(arena_t *a) {
  if (a->dirty.npages == 0) return;
  bool due = a->dirty.npages > dirty_cap(a) || opt.dirty_decay_ms == 0;
  if (!due && opt.dirty_decay_ms > 0) due = decay_now() - a->decay_epoch_ns >= step_ns();
  if (due) __atomic_store_n(&a->purge_pending, true, __ATOMIC_RELAXED);
}

/* h(k) = 1 - smoothstep(k / DECAY_STEPS): the share of a step's pages still allowed. */
static double decay_h(unsigned k) {
  double x = (double)k / DECAY_STEPS;
  return 1.0 - x * x * (3.0 - 2.0 * x);
}

/* Advance the clock and return how many dirty pages may stay. elock held. */
static size_t decay_step(arena_t *a) {
  if (opt.dirty_decay_ms == 0) return 0;
  size_t keep = a->dirty.npages;
  if (opt.dirty_decay_ms > 0) {
    uint64_t now = decay_now(), step = step_ns();
    uint64_t n = step ? (now - a->decay_epoch_ns) / step : DECAY_STEPS;
    if (n > 0) {
      a->decay_epoch_ns = (n >= DECAY_STEPS) ? now : a->decay_epoch_ns + n * step;
      if (n >= DECAY_STEPS) {
        memset(a->decay_backlog, 0, sizeof(a->decay_backlog));
      } else {
        memmove(&a->decay_backlog[n], &a->decay_backlog[0], (DECAY_STEPS - n) * sizeof(size_t));
        memset(&a->decay_backlog[0], 0, n * sizeof(size_t));
      }
      size_t cur = a->dirty.npages;
      a->decay_backlog[0] = cur > a->decay_nunpurged ? cur - a->decay_nunpurged : 0;
      double limit = 0;
      for (unsigned k = 0; k < DECAY_STEPS; k++) {
        if (a->decay_backlog[k]) limit += (double)a->decay_backlog[k] * decay_h(k);
      }
      if ((double)keep > limit) keep = (size_t)limit;
    }
  }
  size_t cap = dirty_cap(a);
  /* Batch: well under the cap; the oversize arena only down to it (its extents are few
   * and big, and each purged page faults in again on reuse). */
  if (a->dirty.npages > cap && keep > cap / 2) keep = a->huge ? cap : cap / 2;
  return keep;
}

void arena_maybe_purge(arena_t *a) {
  if (likely(!__atomic_load_n(&a->purge_pending, __ATOMIC_RELAXED))) return;
  mtx_lock(&a->elock);
  if (a->purge_pending) {
    __atomic_store_n(&a->purge_pending, false, __ATOMIC_RELAXED);
    size_t keep = decay_step(a);
    if (keep < a->dirty.npages) extent_purge(a, keep);
    a->decay_nunpurged = a->dirty.npages;
  }
  mtx_unlock(&a->elock);
}

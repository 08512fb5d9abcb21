/*
 * background.c - background purging threads (jemalloc's background_thread). Off by
 * default. Up to max_background_threads threads; arena i (user arenas included) belongs
 * to thread i % n. A
 * thread runs one decay pass over its arenas (decay.c, which drops the arena lock around
 * madvise), then sleeps until their earliest decay deadline, or without a timeout when
 * nothing is left to decay: an idle process with nothing dirty wakes no thread. An arena
 * wakes its thread when it first has pages to decay or they grew fast (arena_note_dirty).
 * Threads are created lazily: only once an arena has pages to decay, never inside the
 * first malloc, and (because pthread_create may call malloc) only from an entry point's
 * slow path with no strata state in progress (bg_create_wanted). A forked child has none;
 * they come back the same lazy way if they were on. Turning them off joins them.
 * Lock order: bg_lock before everything else (init_lock, arenas); a thread's mtx is a
 * leaf taken with an arena's elock held (arena_note_dirty -> bg_wake is not; the wake
 * runs after unlocking, but nothing is taken while holding mtx).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* The shortest sleep (a decay step of a short decay time would wake the thread too
 * often to be worth it; 10 ms keeps a 1 s decay time to 100 runs). */
#define BG_MIN_SLEEP_NS 10000000ULL

typedef struct {
  pthread_mutex_t mtx;  /* guards seq and run; a pthread mutex for the condition variable */
  pthread_cond_t cond;  /* CLOCK_MONOTONIC */
  pthread_t thread;
  uint64_t seq;         /* wake requests: a wake between a pass and the wait is not lost */
  bool run;             /* false: exit */
  bool started;         /* atomic: created and not yet joined */
  bool wanted;          /* atomic: an arena of this thread has pages to decay */
  unsigned id;
} bg_thread_t;

bool bg_enabled;
bool bg_create_pending;     /* slow paths call bg_create_wanted (for the reasons there) */
static bool bg_create_real; /* atomic: a background thread is wanted */
mtx_t bg_lock = MTX_INITIALIZER; /* guards creation, joining and the fields below; stats.mutexes.background_thread */
static bg_thread_t *bg_threads;         /* atomic pointer: [narenas + 1], from meta_alloc */
static size_t bg_max;                   /* atomic: max_background_threads as set */
static size_t bg_running;               /* atomic: stats.background_thread.num_threads */
static uint64_t bg_nruns, bg_interval_ns; /* atomic: num_runs; run_interval = ns / runs */

/* Threads in use: max_background_threads, at most one per arena. */
static unsigned bg_nslots(void) {
  size_t m = __atomic_load_n(&bg_max, __ATOMIC_RELAXED);
  if (m == 0) m = opt.max_background_threads ? opt.max_background_threads : os_ncpus;
  if (m > (size_t)narenas + 1) m = (size_t)narenas + 1;
  return m ? (unsigned)m : 1;
}

static void bg_slot_init(bg_thread_t *t, unsigned id) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&t->mtx, NULL);
  t->id = id;
  t->seq = 0;
  t->run = false;
  __atomic_store_n(&t->started, false, __ATOMIC_RELAXED);
  __atomic_store_n(&t->wanted, false, __ATOMIC_RELAXED);
}

/* bg_lock held. */
static bg_thread_t *bg_slots_locked(void) {
  if (bg_threads == NULL) {
    bg_thread_t *ts = meta_alloc(sizeof(bg_thread_t) * ((size_t)narenas + 1));
    if (ts == NULL) return NULL;
    for (unsigned i = 0; i <= narenas; i++) bg_slot_init(&ts[i], i);
    __atomic_store_n(&bg_threads, ts, __ATOMIC_RELEASE);
  }
  return bg_threads;
}

static void *bg_main(void *arg) {
  bg_thread_t *t = arg;
  uint64_t last = decay_now();
  pthread_mutex_lock(&t->mtx);
  while (t->run) {
    uint64_t seq = t->seq;
    pthread_mutex_unlock(&t->mtx);
    uint64_t next = UINT64_MAX;
    unsigned n = bg_nslots();
    /* User arenas too (arena_decay skips destroyed ones; hooked ones purge through their hooks). */
    unsigned total = __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE);
    for (unsigned i = t->id; i < total; i += n) {
      arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
      if (a == NULL) continue;
      uint64_t d = arena_decay(a);
      if (d < next) next = d;
    }
    /* Its arenas went idle (nothing left to decay): the metadata a peak left (extent
     * descriptors, bitmaps, page-map pages) goes back too, before the untimed sleep. */
    if (next == UINT64_MAX) meta_purge();
    /* A tracer on otel_memory:alloc (prof.c, prof_trace_switch): looked for on each pass,
     * with no wake of its own (an idle process sleeps until woken). */
    if (t->id == 0) prof_trace_tick();
    uint64_t now = decay_now();
    __atomic_fetch_add(&bg_nruns, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&bg_interval_ns, now - last, __ATOMIC_RELAXED);
    last = now;
    pthread_mutex_lock(&t->mtx);
    if (!t->run) break;
    if (t->seq != seq) continue; /* woken during the pass: look again */
    if (next == UINT64_MAX) {
      pthread_cond_wait(&t->cond, &t->mtx); /* nothing to decay: sleep until woken */
    } else {
      uint64_t sleep = next > now ? next - now : 0;
      if (sleep < BG_MIN_SLEEP_NS) sleep = BG_MIN_SLEEP_NS;
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t at = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + sleep;
      ts.tv_sec = (time_t)(at / 1000000000u);
      ts.tv_nsec = (long)(at % 1000000000u);
      pthread_cond_timedwait(&t->cond, &t->mtx, &ts);
    }
  }
  pthread_mutex_unlock(&t->mtx);
  return NULL;
}

/* bg_lock held; no other strata lock, no strata state in progress on this thread. */
static bool bg_start_locked(bg_thread_t *t) {
  if (__atomic_load_n(&t->started, __ATOMIC_RELAXED)) return false;
  pthread_mutex_lock(&t->mtx);
  t->run = true;
  pthread_mutex_unlock(&t->mtx);
  /* Signals go to the program's threads, never to a purging thread. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&t->thread, NULL, bg_main, t);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err != 0) {
    t->run = false;
    return true;
  }
  __atomic_store_n(&t->started, true, __ATOMIC_RELEASE);
  __atomic_fetch_add(&bg_running, 1, __ATOMIC_RELAXED);
  return false;
}

/* bg_lock held: ask every thread to stop and join it. */
static void bg_stop_all_locked(void) {
  if (bg_threads == NULL) return;
  for (unsigned i = 0; i <= narenas; i++) {
    bg_thread_t *t = &bg_threads[i];
    __atomic_store_n(&t->wanted, false, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&t->started, __ATOMIC_ACQUIRE)) continue;
    pthread_mutex_lock(&t->mtx);
    t->run = false;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->mtx);
    pthread_join(t->thread, NULL);
    __atomic_store_n(&t->started, false, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&bg_running, 1, __ATOMIC_RELAXED);
  }
}

void bg_wake(arena_t *a) {
  if (!__atomic_load_n(&bg_enabled, __ATOMIC_RELAXED)) return;
  bg_thread_t *ts = __atomic_load_n(&bg_threads, __ATOMIC_ACQUIRE);
  bg_thread_t *t = ts ? &ts[a->ind % bg_nslots()] : NULL;
  if (t == NULL || !__atomic_load_n(&t->started, __ATOMIC_ACQUIRE)) {
    if (t) __atomic_store_n(&t->wanted, true, __ATOMIC_RELAXED);
    __atomic_store_n(&bg_create_real, true, __ATOMIC_RELAXED);
    __atomic_store_n(&bg_create_pending, true, __ATOMIC_RELEASE);
    return;
  }
  pthread_mutex_lock(&t->mtx);
  t->seq++;
  pthread_cond_signal(&t->cond);
  pthread_mutex_unlock(&t->mtx);
}

void bg_create_wanted(void) {
  /* hooks.c's slow-path tick (allocation hooks, thread.allocatedp, stats_interval) keeps
   * the flag set while it is on, so that it costs the slow paths nothing when off. */
  if (unlikely(__atomic_load_n(&slow_tick_on, __ATOMIC_ACQUIRE))) {
    slow_tick(&strata_tsd);
  } else if (!__atomic_exchange_n(&bg_create_pending, false, __ATOMIC_ACQ_REL)) {
    return;
  }
  if (unlikely(prof_want_thread)) prof_free_hook(); /* the heap profiler's dump thread (prof.c) */
  if (!__atomic_exchange_n(&bg_create_real, false, __ATOMIC_ACQ_REL)) return;
  bool started = false;
  for (;;) {
    /* Busy: another thread is creating, toggling or forking (or pthread_create called
     * malloc from inside this function). The request is left for the holder, which looks
     * again after it unlocks; one more try covers a holder that had already looked. If
     * both lost the request, a process whose last allocating threads had exited kept
     * its dirty pages: no slow path came to create the thread. */
    if (mtx_trylock(&bg_lock)) {
      __atomic_store_n(&bg_create_real, true, __ATOMIC_SEQ_CST);
      __atomic_store_n(&bg_create_pending, true, __ATOMIC_RELAXED);
      if (mtx_trylock(&bg_lock)) break;
      /* Taken after all: the scan below serves the request, the check after the unlock
       * any that came meanwhile. */
    }
    bg_thread_t *ts = bg_slots_locked();
    if (ts != NULL && __atomic_load_n(&bg_enabled, __ATOMIC_RELAXED)) {
      unsigned n = bg_nslots();
      for (unsigned i = 0; i < n; i++) {
        if (__atomic_load_n(&ts[i].wanted, __ATOMIC_RELAXED) && !bg_start_locked(&ts[i])) {
          __atomic_store_n(&ts[i].wanted, false, __ATOMIC_RELAXED);
          started = true;
        }
      }
    }
    mtx_unlock(&bg_lock);
    if (!__atomic_exchange_n(&bg_create_real, false, __ATOMIC_SEQ_CST)) break; /* none came meanwhile */
  }
  /* The monitor (pressure, events) comes with the first background thread: a process
   * that never had pages to decay, or a child that only execs, gets neither. */
  if (started) ev_start_wanted();
}

/* The arenas with pages to decay are told again, so that their threads come (back). */
static void bg_wake_all(void) {
  for (unsigned i = 0; i < __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE); i++) {
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (a == NULL) continue;
    mtx_lock(&a->elock);
    bool pages = a->dirty.npages || a->muzzy.npages;
    a->bg_scheduled = pages;
    a->bg_seen_npages = a->dirty.npages;
    mtx_unlock(&a->elock);
    if (pages) bg_wake(a);
  }
}

bool bg_set_enabled(bool on) {
  mtx_lock(&bg_lock);
  if (on == __atomic_load_n(&bg_enabled, __ATOMIC_RELAXED)) {
    mtx_unlock(&bg_lock);
    return false;
  }
  if (on && bg_slots_locked() == NULL) {
    mtx_unlock(&bg_lock);
    return true;
  }
  __atomic_store_n(&bg_enabled, on, __ATOMIC_RELEASE);
  if (!on) bg_stop_all_locked();
  mtx_unlock(&bg_lock);
  if (on) {
    bg_wake_all();
    bg_create_wanted(); /* the caller (a mallctl) is at top level: create them now */
  }
  return false;
}

/* During initialisation (single-threaded, so without bg_lock, which comes before
 * init_lock): background_thread:true from the configuration. No thread yet. */
void bg_boot(void) {
  if (!opt.background_thread || bg_slots_locked() == NULL) return;
  __atomic_store_n(&bg_enabled, true, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- fork */
void bg_prefork(void) { mtx_lock(&bg_lock); }
void bg_postfork_parent(void) { mtx_unlock(&bg_lock); }

/* The child has no background threads: forget them; if they were on, the child's first
 * arena with pages to decay brings its thread back (and a child that only calls exec
 * never gets one). */
void bg_postfork_child(void) {
  mtx_init(&bg_lock);
  if (bg_threads != NULL) {
    for (unsigned i = 0; i <= narenas; i++) bg_slot_init(&bg_threads[i], i);
  }
  __atomic_store_n(&bg_running, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&bg_create_real, false, __ATOMIC_RELAXED);
  __atomic_store_n(&bg_create_pending, __atomic_load_n(&slow_tick_on, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
  for (unsigned i = 0; i < narenas_total; i++) {
    arena_t *a = arenas[i];
    if (a) a->bg_scheduled = false;
  }
}

/* ---------------------------------------------------------------- mallctl handlers */
static int bg_ro(void *oldp, size_t *oldlenp, void *newp, const void *val, size_t len) {
  if (newp != NULL) return EPERM;
  if (tsd_fetch() == NULL) return EAGAIN;
  return ctl_rw(oldp, oldlenp, NULL, 0, val, len);
}

int ctl_background_thread(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen) {
  (void)mib, (void)miblen;
  if (tsd_fetch() == NULL) return EAGAIN;
  bool cur = __atomic_load_n(&bg_enabled, __ATOMIC_RELAXED);
  int err = ctl_rw(oldp, oldlenp, newp, newlen, &cur, sizeof(cur));
  if (err || newp == NULL) return err;
  bool on;
  if (!ctl_bool_in(newp, &on)) return EINVAL;
  return bg_set_enabled(on) ? EAGAIN : 0;
}

int ctl_max_background_threads(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                               size_t newlen) {
  (void)mib, (void)miblen;
  if (tsd_fetch() == NULL) return EAGAIN;
  size_t cur = __atomic_load_n(&bg_max, __ATOMIC_RELAXED);
  if (cur == 0) cur = opt.max_background_threads ? opt.max_background_threads : os_ncpus;
  int err = ctl_rw(oldp, oldlenp, newp, newlen, &cur, sizeof(cur));
  if (err || newp == NULL) return err;
  size_t v = *(size_t *)newp;
  if (v == 0) return EINVAL;
  /* Arenas move between threads: stop them, change, let them come back lazily. */
  bool on = __atomic_load_n(&bg_enabled, __ATOMIC_RELAXED);
  if (on) bg_set_enabled(false);
  __atomic_store_n(&bg_max, v, __ATOMIC_RELAXED);
  if (on && bg_set_enabled(true)) return EAGAIN;
  return 0;
}

int ctl_opt_background_thread(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                              size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  return bg_ro(oldp, oldlenp, newp, &opt.background_thread, sizeof(bool));
}

int ctl_opt_max_background_threads(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                                   size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  size_t v = opt.max_background_threads ? opt.max_background_threads : os_ncpus;
  return bg_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_opt_thp(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  static const char *const names[] = {"default", "always", "never"};
  const char *v = names[opt.thp];
  return bg_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_opt_metadata_thp(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                         size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  static const char *const names[] = {"disabled", "auto", "always"};
  const char *v = names[opt.metadata_thp];
  return bg_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_stats_bg_num_threads(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  size_t v = __atomic_load_n(&bg_running, __ATOMIC_RELAXED);
  return bg_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_stats_bg_num_runs(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  uint64_t v = __atomic_load_n(&bg_nruns, __ATOMIC_RELAXED);
  return bg_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

/* Mean nanoseconds between two runs of a thread (jemalloc's run_interval). */
int ctl_stats_bg_run_interval(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                              size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  uint64_t runs = __atomic_load_n(&bg_nruns, __ATOMIC_RELAXED);
  uint64_t v = runs ? __atomic_load_n(&bg_interval_ns, __ATOMIC_RELAXED) / runs : 0;
  return bg_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

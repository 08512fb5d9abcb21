/*
 * events.c - memory a program can hear about and bound: its own soft and hard limits,
 * the kernel's memory pressure (Linux PSI poll triggers), and callbacks for resident
 * memory crossing a level, the limit's headroom reached, and pressure. One monitor thread
 * (created lazily: at the first registration, or with the background threads when PSI is
 * there) waits in poll() on the pressure file and an eventfd, with no timeout: it wakes
 * only when the kernel reports a stall or an allocator path saw resident memory cross an
 * armed level. Callbacks run on it, never inside malloc, with no strata lock held.
 * Relies on decay.c (resident figure, purges), os.c (cgroup paths, commit budget).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

/* PSI trigger: 50 ms of "some" stall (a task waiting on memory) within 1 s. Purging
 * costs strata only refaults later, so it reacts early: a cgroup that thrashes its page
 * cache past 5% stall is already losing time to reclaim (bench/pressure/run.sh), and an
 * idle machine reports 0. Unprivileged writers must use a multiple of 2 s windows
 * (kernel 6.x): 100 ms in 2 s is the same share. */
static const char *const psi_triggers[] = {"some 50000 1000000", "some 100000 2000000"};
/* Up to this many registrations (static storage: registering never allocates). */
#define EV_MAX 64
/* A level crossed upward is crossed downward again only 1/32 of it lower, so that a
 * resident figure hovering at the level does not fire on every page. */
#define EV_HYST_SHIFT 5

uint64_t limit_soft, limit_hard;   /* atomic; 0: none */
uint64_t ev_up = UINT64_MAX;        /* atomic: resident at or above wakes the monitor */
uint64_t ev_down;                   /* atomic: resident below wakes the monitor */
uint64_t limit_hard_nfails;         /* atomic: commits refused by the hard limit */
uint64_t limit_soft_npurges;        /* atomic */
static uint64_t psi_nevents, psi_purged, ev_nfired; /* atomic: stats */

typedef struct {
  strata_event_cb_t cb;
  void *arg;
  uint64_t level;
  unsigned kind;
  unsigned id;   /* 0: free slot */
  bool above;    /* resident is above the level (as last dispatched) */
} ev_reg_t;

static pthread_mutex_t ev_mtx = PTHREAD_MUTEX_INITIALIZER; /* a leaf: guards the fields below */
static pthread_cond_t ev_idle_cond = PTHREAD_COND_INITIALIZER;
static ev_reg_t ev_regs[EV_MAX];
static unsigned ev_next_id = 1;
static bool ev_dispatching;        /* callbacks are running (unregister waits for them) */
static bool ev_running;            /* atomic */
static int ev_efd = -1, psi_fd = -1;
static bool psi_tried;             /* the pressure file was looked for */
static uint64_t psi_total_us;      /* "some total=" at the last report */
static char psi_path[256];

/* ---------------------------------------------------------------- wake-ups */
void ev_kick(void) {
  int fd = __atomic_load_n(&ev_efd, __ATOMIC_RELAXED);
  if (fd < 0) return;
  uint64_t one = 1;
  ssize_t r = syscall(SYS_write, fd, &one, sizeof(one));
  (void)r;
}

/* The level a registration is crossed at now (0: none). */
static uint64_t ev_threshold(const ev_reg_t *r) {
  switch (r->kind) {
  case STRATA_EVENT_RESIDENT:
    return r->level;
  case STRATA_EVENT_SOFT_LIMIT:
    return __atomic_load_n(&limit_soft, __ATOMIC_RELAXED);
  case STRATA_EVENT_LIMIT_HEADROOM: {
    uint64_t lim = limit_effective();
    uint64_t head = r->level ? r->level : (lim ? limit_headroom(lim) : 0);
    return lim > head ? lim - head : 0;
  }
  default:
    return 0;
  }
}

/* ev_mtx held: the armed levels from every registration's state. */
static void ev_arm_locked(void) {
  uint64_t up = UINT64_MAX, down = 0;
  for (unsigned i = 0; i < EV_MAX; i++) {
    const ev_reg_t *r = &ev_regs[i];
    uint64_t t = r->id ? ev_threshold(r) : 0;
    if (t == 0) continue;
    if (!r->above && t < up) up = t;
    if (r->above && t - (t >> EV_HYST_SHIFT) > down) down = t - (t >> EV_HYST_SHIFT);
  }
  __atomic_store_n(&ev_up, up, __ATOMIC_RELAXED);
  __atomic_store_n(&ev_down, down, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- dispatch */
typedef struct {
  strata_event_cb_t cb;
  void *arg;
  strata_event_t ev;
} ev_fire_t;

static void ev_fill(strata_event_t *e, const ev_reg_t *r, int dir, uint64_t resident) {
  memset(e, 0, sizeof(*e));
  e->kind = r->kind;
  e->id = r->id;
  e->direction = dir;
  e->level = ev_threshold(r);
  e->resident = resident;
  e->limit = limit_effective();
  e->soft_limit = __atomic_load_n(&limit_soft, __ATOMIC_RELAXED);
}

/* Monitor thread: fire what changed (crossings; pressure when psi), then re-arm. The
 * callbacks run with no lock held; they may malloc, register and unregister. */
static void ev_dispatch(bool psi, uint64_t purged, uint64_t stall_us) {
  static ev_fire_t fire[EV_MAX];
  unsigned n = 0;
  pthread_mutex_lock(&ev_mtx);
  uint64_t res = mem_resident();
  for (unsigned i = 0; i < EV_MAX; i++) {
    ev_reg_t *r = &ev_regs[i];
    if (r->id == 0) continue;
    int dir = 0;
    if (r->kind == STRATA_EVENT_PRESSURE) {
      if (!psi) continue;
      dir = 1;
    } else {
      uint64_t t = ev_threshold(r);
      if (t == 0) { /* no such limit (any more): nothing is crossed, start from below */
        r->above = false;
        continue;
      }
      if (!r->above && res >= t) {
        r->above = true, dir = 1;
      } else if (r->above && res < t - (t >> EV_HYST_SHIFT)) {
        r->above = false, dir = -1;
      } else {
        continue;
      }
    }
    fire[n].cb = r->cb;
    fire[n].arg = r->arg;
    ev_fill(&fire[n].ev, r, dir, res);
    fire[n].ev.purged = purged;
    fire[n].ev.stall_us = stall_us;
    n++;
  }
  ev_arm_locked();
  ev_dispatching = n != 0;
  pthread_mutex_unlock(&ev_mtx);
  if (n == 0) return;
  for (unsigned i = 0; i < n; i++) fire[i].cb(&fire[i].ev, fire[i].arg);
  __atomic_fetch_add(&ev_nfired, n, __ATOMIC_RELAXED);
  pthread_mutex_lock(&ev_mtx);
  ev_dispatching = false;
  pthread_cond_broadcast(&ev_idle_cond);
  pthread_mutex_unlock(&ev_mtx);
}

/* ---------------------------------------------------------------- pressure (PSI) */
/* The pressure file of this process's cgroup v2 (or, at the root or with cgroup v1 only,
 * the system's, which counts every stall, a v1 memory cgroup's reclaim included). */
static void psi_find_path(void) {
  char buf[512];
  int n = os_read_file("/proc/self/cgroup", buf, sizeof(buf) - 1);
  psi_path[0] = '\0';
  if (n > 0) {
    buf[n] = '\0';
    char *l = strstr(buf, "0::");
    if (l && (l == buf || l[-1] == '\n')) {
      char *p = l + 3, *e = strchr(p, '\n');
      if (e) *e = '\0';
      if (strcmp(p, "/") != 0 && strlen(p) < 160) {
        static const char *const roots[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
        for (unsigned i = 0; i < 2 && !psi_path[0]; i++) {
          char t[256];
          strcpy(t, roots[i]);
          strcat(t, p);
          strcat(t, "/memory.pressure");
          if (access(t, R_OK) == 0) strcpy(psi_path, t);
        }
      }
    }
  }
  if (!psi_path[0]) strcpy(psi_path, "/proc/pressure/memory");
}

/* Opens the pressure file with a trigger; -1 if this kernel or sandbox offers none. */
static int psi_open(void) {
  psi_find_path();
  for (unsigned i = 0; i < sizeof(psi_triggers) / sizeof(psi_triggers[0]); i++) {
    int fd = (int)syscall(SYS_openat, AT_FDCWD, psi_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t len = strlen(psi_triggers[i]) + 1; /* the kernel takes the NUL too */
    if (syscall(SYS_write, fd, psi_triggers[i], len) == (long)len) return fd;
    syscall(SYS_close, fd);
  }
  return -1;
}

/* "some ... total=N": microseconds some task stalled, since boot. */
static uint64_t psi_read_total(void) {
  char buf[256];
  int n = os_read_file(psi_path, buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char *t = strstr(buf, "total=");
  uint64_t v = 0;
  for (t = t ? t + 6 : NULL; t && *t >= '0' && *t <= '9'; t++) v = v * 10 + (uint64_t)(*t - '0');
  return v;
}

/* Everything strata can give back now: dirty and muzzy pages of every arena, their spare
 * slabs and extent structures, empty metadata pages. Thread caches stay: only their
 * owners may touch them (tcache_total_max bounds them together). Returns bytes. */
uint64_t mem_purge_all(void) {
  uint64_t before = mem_resident();
  arena_purge_all();
  uint64_t after = mem_resident();
  return before > after ? before - after : 0;
}

static void psi_react(void) {
  uint64_t purged = mem_purge_all();
  uint64_t total = psi_read_total();
  uint64_t stall = total > psi_total_us ? total - psi_total_us : 0;
  psi_total_us = total;
  __atomic_fetch_add(&psi_nevents, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&psi_purged, purged, __ATOMIC_RELAXED);
  ev_dispatch(true, purged, stall);
}

/* ---------------------------------------------------------------- the monitor thread */
static __thread bool ev_on_monitor; /* this thread is the monitor (callbacks run here) */

static void *ev_main(void *arg) {
  (void)arg;
  ev_on_monitor = true;
  for (;;) {
    struct pollfd p[2];
    int n = 0, efd = __atomic_load_n(&ev_efd, __ATOMIC_RELAXED);
    p[n++] = (struct pollfd){.fd = efd, .events = POLLIN};
    int pfd = __atomic_load_n(&psi_fd, __ATOMIC_RELAXED);
    if (pfd >= 0) p[n++] = (struct pollfd){.fd = pfd, .events = POLLPRI};
    if (poll(p, (nfds_t)n, -1) < 0) continue; /* EINTR */
    if (p[0].revents & POLLNVAL) { /* the program closed it: stop (never reuse the number) */
      __atomic_store_n(&ev_efd, -1, __ATOMIC_RELAXED);
      __atomic_store_n(&ev_running, false, __ATOMIC_RELEASE);
      break;
    }
    if (p[0].revents & POLLIN) {
      uint64_t v;
      ssize_t r = syscall(SYS_read, efd, &v, sizeof(v));
      (void)r;
    }
    if (!__atomic_load_n(&ev_running, __ATOMIC_ACQUIRE)) break;
    if (n > 1 && (p[1].revents & (POLLERR | POLLNVAL))) /* gone: stop watching */
      __atomic_store_n(&psi_fd, -1, __ATOMIC_RELAXED);
    if (n > 1 && (p[1].revents & POLLPRI)) {
      psi_react();
    } else {
      ev_dispatch(false, 0, 0);
    }
  }
  return NULL;
}

/* No strata lock held, not inside malloc: may call pthread_create, which may malloc and
 * so come back here through bg_create_wanted: ev_mtx is not held across it. */
static int ev_start(bool want_psi) {
  pthread_mutex_lock(&ev_mtx);
  if (want_psi && !psi_tried) {
    psi_tried = true;
    int fd = psi_open();
    if (fd >= 0) psi_total_us = psi_read_total();
    __atomic_store_n(&psi_fd, fd, __ATOMIC_RELEASE);
  }
  if (__atomic_load_n(&ev_running, __ATOMIC_RELAXED)) {
    pthread_mutex_unlock(&ev_mtx);
    return 0;
  }
  if (ev_efd < 0) {
    int fd = (int)syscall(SYS_eventfd2, 0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
      pthread_mutex_unlock(&ev_mtx);
      return EAGAIN;
    }
    __atomic_store_n(&ev_efd, fd, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&ev_running, true, __ATOMIC_RELEASE); /* claimed: nobody else creates it */
  pthread_mutex_unlock(&ev_mtx);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t th;
  int err = pthread_create(&th, NULL, ev_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    __atomic_store_n(&ev_running, false, __ATOMIC_RELEASE);
    return EAGAIN;
  }
  pthread_detach(th); /* it runs for the life of the process */
  return 0;
}

/* From bg_create_wanted (a slow path, nothing of strata's in progress), when background
 * threads start: the monitor too if pressure_purge is on and the kernel has PSI, or if the
 * program registered callbacks (a forked child's first background thread brings it back). */
void ev_start_wanted(void) {
  if (__atomic_load_n(&ev_running, __ATOMIC_RELAXED)) return;
  bool regs = false;
  if (pthread_mutex_trylock(&ev_mtx) != 0) return; /* being started, or a registration in progress */
  for (unsigned i = 0; i < EV_MAX && !regs; i++) regs = ev_regs[i].id != 0;
  bool tried = psi_tried, have = __atomic_load_n(&psi_fd, __ATOMIC_RELAXED) >= 0;
  pthread_mutex_unlock(&ev_mtx);
  bool psi = opt.pressure_purge && (!tried || have);
  if (psi || regs) {
    ev_start(opt.pressure_purge);
    ev_kick();
  }
}

/* ---------------------------------------------------------------- fork */
/* The child has no monitor; its fds are the parent's (inherited, O_CLOEXEC): forgotten
 * without closing (the child may have reused the numbers), opened again if it is started. */
void ev_postfork_child(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  memcpy(&ev_mtx, &m, sizeof(m));
  memcpy(&ev_idle_cond, &c, sizeof(c));
  ev_dispatching = false;
  __atomic_store_n(&ev_running, false, __ATOMIC_RELAXED);
  __atomic_store_n(&ev_efd, -1, __ATOMIC_RELAXED);
  __atomic_store_n(&psi_fd, -1, __ATOMIC_RELAXED);
  psi_tried = false;
  for (unsigned i = 0; i < EV_MAX; i++) ev_regs[i].above = false;
  __atomic_store_n(&ev_up, UINT64_MAX, __ATOMIC_RELAXED);
  __atomic_store_n(&ev_down, 0, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- public API */
int strata_event_register(unsigned kind, unsigned long long level, strata_event_cb_t cb, void *arg, unsigned *id) {
  if (cb == NULL || kind < STRATA_EVENT_RESIDENT || kind > STRATA_EVENT_PRESSURE) return EINVAL;
  if (kind == STRATA_EVENT_RESIDENT && level == 0) return EINVAL;
  if ((kind == STRATA_EVENT_SOFT_LIMIT || kind == STRATA_EVENT_PRESSURE) && level != 0) return EINVAL;
  if (tsd_fetch() == NULL) return EAGAIN;
  pthread_mutex_lock(&ev_mtx);
  unsigned slot = EV_MAX;
  for (unsigned i = 0; i < EV_MAX && slot == EV_MAX; i++)
    if (ev_regs[i].id == 0) slot = i;
  if (slot == EV_MAX) {
    pthread_mutex_unlock(&ev_mtx);
    return ENOMEM;
  }
  ev_regs[slot] = (ev_reg_t){.cb = cb, .arg = arg, .level = level, .kind = kind, .id = ev_next_id++};
  if (ev_next_id == 0) ev_next_id = 1;
  if (id) *id = ev_regs[slot].id;
  ev_arm_locked();
  pthread_mutex_unlock(&ev_mtx);
  int err = ev_start(kind == STRATA_EVENT_PRESSURE || opt.pressure_purge);
  if (err) {
    strata_event_unregister(ev_regs[slot].id);
    return err;
  }
  ev_kick(); /* a level already crossed fires now */
  return 0;
}

int strata_event_unregister(unsigned id) {
  if (id == 0) return EINVAL;
  bool self = ev_on_monitor;
  pthread_mutex_lock(&ev_mtx);
  unsigned i = 0;
  while (i < EV_MAX && ev_regs[i].id != id) i++;
  if (i == EV_MAX) {
    pthread_mutex_unlock(&ev_mtx);
    return ENOENT;
  }
  ev_regs[i].id = 0;
  ev_arm_locked();
  /* After this returns the callback is not running and will not run (unless called from
   * a callback, which would wait for itself). */
  while (ev_dispatching && !self) pthread_cond_wait(&ev_idle_cond, &ev_mtx);
  pthread_mutex_unlock(&ev_mtx);
  return 0;
}

/* ---------------------------------------------------------------- mallctl handlers */
static int ev_ro(void *oldp, size_t *oldlenp, void *newp, const void *val, size_t len) {
  if (newp != NULL) return EPERM;
  if (tsd_fetch() == NULL) return EAGAIN;
  return ctl_rw(oldp, oldlenp, NULL, 0, val, len);
}

/* soft_limit / hard_limit: bytes, 0 for none; a new level re-arms the events. */
static int ev_limit_rw(uint64_t *dst, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  if (tsd_fetch() == NULL) return EAGAIN;
  size_t cur = (size_t)__atomic_load_n(dst, __ATOMIC_RELAXED);
  int err = ctl_rw(oldp, oldlenp, newp, newlen, &cur, sizeof(cur));
  if (err || newp == NULL) return err;
  size_t v = *(size_t *)newp;
  if (v != 0 && v < ((size_t)1 << 20)) return EINVAL; /* as the options: 0 or >= 1 MiB */
  __atomic_store_n(dst, (uint64_t)v, __ATOMIC_RELAXED);
  pthread_mutex_lock(&ev_mtx);
  ev_arm_locked();
  pthread_mutex_unlock(&ev_mtx);
  limit_rearm_reset();
  ev_kick();
  return 0;
}

int ctl_soft_limit(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  return ev_limit_rw(&limit_soft, oldp, oldlenp, newp, newlen);
}

int ctl_hard_limit(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  return ev_limit_rw(&limit_hard, oldp, oldlenp, newp, newlen);
}

int ctl_opt_soft_limit(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  size_t v = (size_t)opt.soft_limit;
  return ev_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_opt_hard_limit(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  size_t v = (size_t)opt.hard_limit;
  return ev_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

int ctl_opt_pressure_purge(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  return ev_ro(oldp, oldlenp, newp, &opt.pressure_purge, sizeof(bool));
}

#define EV_STAT(fn, var)                                                                                    \
  int fn(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {        \
    (void)mib, (void)miblen, (void)newlen;                                                                  \
    uint64_t v = __atomic_load_n(&(var), __ATOMIC_RELAXED);                                                 \
    return ev_ro(oldp, oldlenp, newp, &v, sizeof(v));                                                       \
  }
EV_STAT(ctl_stats_soft_limit, limit_soft)
EV_STAT(ctl_stats_hard_limit, limit_hard)
EV_STAT(ctl_stats_soft_limit_purges, limit_soft_npurges)
EV_STAT(ctl_stats_hard_limit_refusals, limit_hard_nfails)
EV_STAT(ctl_stats_pressure_events, psi_nevents)
EV_STAT(ctl_stats_pressure_purged, psi_purged)
EV_STAT(ctl_stats_events_fired, ev_nfired)

/* stats.pressure_watched: 1 while the monitor watches a pressure file. */
int ctl_stats_pressure_watched(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                               size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  bool v = __atomic_load_n(&ev_running, __ATOMIC_RELAXED) && __atomic_load_n(&psi_fd, __ATOMIC_RELAXED) >= 0;
  return ev_ro(oldp, oldlenp, newp, &v, sizeof(v));
}

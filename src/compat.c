/*
 * compat.c - mallctl names jemalloc 5.3 has for things strata keeps differently: per-thread
 * cache limits and peaks, per-arena names and limits, the approximate active count, the
 * profiler's hook points. Each answers with jemalloc's type; where strata has no such
 * knob the answer is the one jemalloc gives when the feature is off, or the process-wide
 * value (docs/jemalloc-compat.md says which). Table rows in ctl.c.
 */
#include <errno.h>
#include <string.h>

#include "ctl.h"

#define READONLY() \
  do { \
    if (newp != NULL || newlen != 0) return EPERM; \
  } while (0)

static bool arena_exists(size_t ind) {
  if (ind >= ARENAS_MAX || ind >= __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE)) return false;
  arena_t *a = __atomic_load_n(&arenas[ind], __ATOMIC_ACQUIRE);
  return a && !__atomic_load_n(&a->destroyed, __ATOMIC_ACQUIRE);
}

/* thread.tcache.max: strata's cache limit is per process (opt.tcache_max): it reads
 * here; writing it unchanged succeeds, another value is EINVAL. */
int compat_thread_tcache_max(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  (void)mib, (void)miblen;
  size_t cur = tcache_nbins > 1 ? sz_size[tcache_nbins - 1] : 0, v;
  if (newp != NULL) {
    if (newlen != sizeof(v)) return EINVAL;
    memcpy(&v, newp, sizeof(v));
    if (v != cur && sz_size[sz_size2index(v ? v : 1)] != cur) return EINVAL;
  }
  return ctl_copy_out(oldp, oldlenp, &cur, sizeof(cur));
}

/* thread.tcache.ncached_max.read_sizeclass: a size in, the most blocks of its class the
 * thread's cache holds now out (its bin's capacity, which follows the thread's bursts;
 * the class's starting capacity for a thread without a cache yet). */
int compat_ncached_max_read(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                            size_t newlen) {
  (void)mib, (void)miblen;
  size_t size;
  if (newp == NULL || newlen != sizeof(size) || oldp == NULL || oldlenp == NULL) return EINVAL;
  memcpy(&size, newp, sizeof(size));
  if (size == 0 || size > SZ_MAX) return EINVAL;
  szind_t ind = sz_size2index(size);
  tsd_t *tsd = &strata_tsd;
  size_t n = ind >= tcache_nbins ? 0 : tsd->state == TSD_ACTIVE ? tsd->tcache->max[ind] : tbin_nslots[ind];
  return ctl_copy_out(oldp, oldlenp, &n, sizeof(n));
}

/* thread.tcache.ncached_max.write: jemalloc's per-class limits ("lo-hi:n|..."); strata
 * sizes its bins itself: a well-formed string is accepted with no effect. */
int compat_ncached_max_write(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  (void)mib, (void)miblen;
  if (oldp != NULL || oldlenp != NULL) return EPERM;
  const char *v;
  if (newp == NULL || newlen != sizeof(v)) return EINVAL;
  memcpy(&v, newp, sizeof(v));
  if (v == NULL) return EINVAL;
  for (const char *c = v; *c; c++) {
    if (!((*c >= '0' && *c <= '9') || *c == '-' || *c == ':' || *c == '|')) return EINVAL;
  }
  return 0;
}

/* thread.peak.read / reset: the highest net figure (allocated less deallocated since the
 * last reset) seen at this thread's reads. jemalloc updates it at its allocation events;
 * strata's fast paths keep no such event, so a peak between two reads is not seen. */
static __thread struct {
  uint64_t base, peak;
} thr_peak __attribute__((tls_model("initial-exec")));

int compat_thread_peak_read(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                            size_t newlen) {
  (void)mib, (void)miblen;
  READONLY();
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return EAGAIN;
  uint64_t al, de;
  tcache_counts(tsd, &al, &de);
  uint64_t net = al - de - thr_peak.base;
  if ((int64_t)net > 0 && net > thr_peak.peak) thr_peak.peak = net;
  return ctl_copy_out(oldp, oldlenp, &thr_peak.peak, sizeof(thr_peak.peak));
}

int compat_thread_peak_reset(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  (void)mib, (void)miblen;
  if (oldp != NULL || oldlenp != NULL || newp != NULL || newlen != 0) return EPERM;
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return EAGAIN;
  uint64_t al, de;
  tcache_counts(tsd, &al, &de);
  thr_peak.base = al - de;
  thr_peak.peak = 0;
  return 0;
}

/* arena.<i>.oversize_threshold: strata's is per process (opt.oversize_threshold); it
 * reads here, and may not be changed at run time (EFAULT, jemalloc's answer for an
 * arena that cannot take the value). */
int compat_arena_oversize_threshold(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                                    size_t newlen) {
  (void)miblen;
  if (mib[1] != CTL_ARENAS_ALL && !arena_exists(mib[1])) return EFAULT;
  size_t v = opt.oversize_threshold;
  if (newp != NULL) {
    size_t w;
    if (newlen != sizeof(w)) return EINVAL;
    memcpy(&w, newp, sizeof(w));
    if (w != v) return EFAULT;
  }
  return ctl_copy_out(oldp, oldlenp, &v, sizeof(v));
}

/* arena.<i>.retain_grow_limit: strata grows an arena's retained address space by
 * doubling, up to the largest size class; writes are checked (at least a page) and have
 * no effect. ENOENT with retain:false, as jemalloc. */
int compat_arena_retain_grow_limit(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                                   size_t newlen) {
  (void)miblen;
  if (!opt.retain) return ENOENT;
  if (!arena_exists(mib[1])) return EFAULT;
  size_t v = SZ_MAX;
  if (newp != NULL) {
    size_t w;
    if (newlen != sizeof(w)) return EINVAL;
    memcpy(&w, newp, sizeof(w));
    if (w < os_page) return EFAULT;
  }
  return ctl_copy_out(oldp, oldlenp, &v, sizeof(v));
}

/* arena.<i>.name (and stats.arenas.<i>.name): jemalloc's default "auto_<i>" for the
 * arenas strata makes itself, "manual_<i>" for arenas.create's; a program may set its
 * own (at most 31 bytes). The table is metadata, made on the first use of a name. */
#define ARENA_NAME_LEN 32
static char (*arena_names)[ARENA_NAME_LEN]; /* [ARENAS_MAX]; atomic pointer */
static mtx_t names_lock = MTX_INITIALIZER;  /* a leaf lock */

static char *arena_name_slot(size_t ind) {
  char(*t)[ARENA_NAME_LEN] = __atomic_load_n(&arena_names, __ATOMIC_ACQUIRE);
  if (t == NULL) {
    mtx_lock(&names_lock);
    if ((t = arena_names) == NULL) {
      t = meta_alloc(ARENAS_MAX * ARENA_NAME_LEN);
      __atomic_store_n(&arena_names, t, __ATOMIC_RELEASE);
    }
    mtx_unlock(&names_lock);
    if (t == NULL) return NULL;
  }
  return t[ind];
}

int compat_arena_name(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  /* arena.<i>.name: i at mib[1]; stats.arenas.<i>.name: at mib[2] */
  size_t ind = miblen == 3 ? mib[1] : mib[2];
  if (miblen != 3 && newp != NULL) return EPERM;
  if (!arena_exists(ind)) return EFAULT;
  char *slot = arena_name_slot(ind);
  if (slot == NULL) return EAGAIN;
  const char *v = NULL;
  if (newp != NULL) {
    if (newlen != sizeof(v)) return EINVAL;
    memcpy(&v, newp, sizeof(v));
    if (v == NULL || strlen(v) >= ARENA_NAME_LEN) return EINVAL;
  }
  mtx_lock(&names_lock);
  if (v != NULL) {
    memcpy(slot, v, strlen(v) + 1);
  } else if (slot[0] == '\0') {
    char num[24];
    const char *pre = arena_ind_is_user(ind) ? "manual_" : "auto_";
    size_t n = strlen(pre);
    memcpy(slot, pre, n);
    fmt_u64(num, ind);
    memcpy(slot + n, num, strlen(num) + 1);
  }
  mtx_unlock(&names_lock);
  const char *r = slot;
  return ctl_copy_out(oldp, oldlenp, &r, sizeof(r));
}

/* approximate_stats.active: active bytes summed now, without the snapshot (no epoch). */
int compat_approximate_active(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                              size_t newlen) {
  (void)mib, (void)miblen;
  READONLY();
  size_t pages = 0, n = __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE);
  for (size_t i = 0; i < n; i++) {
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (a) pages += __atomic_load_n(&a->nactive, __ATOMIC_RELAXED);
  }
  size_t v = pages * os_page;
  return ctl_copy_out(oldp, oldlenp, &v, sizeof(v));
}

/* experimental.arenas.<i>.pactivep: a pointer to the arena's active page count. */
int compat_arena_pactivep(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen) {
  (void)miblen;
  READONLY();
  if (!arena_exists(mib[2])) return EFAULT;
  size_t *p = &arenas[mib[2]]->nactive;
  return ctl_copy_out(oldp, oldlenp, &p, sizeof(p));
}

/* experimental.hooks.prof_backtrace, prof_dump, prof_sample, prof_sample_free: jemalloc's
 * profiler hook points. strata's profiler has none: the hook reads as NULL; installing
 * one is ENOENT without prof (jemalloc's answer) and EINVAL with it. */
int compat_prof_hook(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  if (oldp == NULL && newp == NULL) return EINVAL;
  void *none = NULL;
  if (newp != NULL) {
    if (newlen != sizeof(void *)) return EINVAL;
    return prof_opt.prof ? EINVAL : ENOENT;
  }
  return ctl_copy_out(oldp, oldlenp, &none, sizeof(none));
}

/* experimental.hooks.thread_event: jemalloc's per-thread event callback, which needs an
 * event counter on the fast paths strata does not keep: EINVAL. */
int compat_thread_event_hook(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  (void)mib, (void)miblen, (void)oldp, (void)oldlenp, (void)newp, (void)newlen;
  return EINVAL;
}

/* experimental.prof_recent.alloc_max / alloc_dump: jemalloc's record of recent
 * allocations, which strata's profiler does not keep: ENOENT without prof (as jemalloc);
 * with prof, alloc_max reads -1 (no limit: nothing recorded) and takes no other value,
 * and alloc_dump is EFAULT. */
int compat_prof_recent(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)miblen;
  if (!prof_opt.prof) return ENOENT;
  if (mib[2] == 1) return EFAULT; /* alloc_dump */
  ssize_t v = -1, w;
  if (newp != NULL) {
    if (newlen != sizeof(w)) return EINVAL;
    memcpy(&w, newp, sizeof(w));
    if (w != -1) return EINVAL;
  }
  return ctl_copy_out(oldp, oldlenp, &v, sizeof(v));
}

void compat_postfork_child(void) { mtx_init(&names_lock); }

/* experimental.utilization.query and batch_query: how full the extent holding a pointer
 * is (jemalloc's inspect.c: a large extent is one region; an unknown pointer all zeros). */
typedef struct {
  size_t nfree, nregs, size;
} util_t;
typedef struct {
  void *slabcur_addr;
  size_t nfree, nregs, size, bin_nfree, bin_nregs;
} util_verbose_t;

/* bv NULL: the short form. */
static void util_get(const void *p, util_t *u, util_verbose_t *bv) {
  edata_t *ed = rt_edata(rtree_read_slow((uintptr_t)p));
  memset(u, 0, sizeof(*u));
  if (bv) memset(bv, 0, sizeof(*bv));
  if (ed == NULL || ed->state != ES_ACTIVE || ed->arena_id == 0) return;
  arena_t *a = arenas[edata_arena_ind(ed)];
  u->size = ed->size;
  if (!ed->slab) {
    u->nregs = 1;
  } else {
    bin_t *bin = &a->bins[ed->szind];
    const bin_info_t *bi = &bin_info[ed->szind];
    mtx_lock(&bin->lock);
    u->nfree = ed->nfree;
    u->nregs = slab_nregs(ed, bi);
    if (bv) {
      /* curregs counts remote chains' regions as handed out: they are free */
      size_t used = bin->curregs - bin->remote_count;
      bv->bin_nregs = bin->curslabs * bi->nregs;
      bv->bin_nfree = bv->bin_nregs > used ? bv->bin_nregs - used : 0;
      edata_t *cur = bin->cur ? bin->cur : bin->nonfull ? ph_edata(bin->nonfull) : NULL;
      bv->slabcur_addr = cur ? (void *)cur->addr : NULL;
    }
    mtx_unlock(&bin->lock);
  }
  if (bv) bv->nfree = u->nfree, bv->nregs = u->nregs, bv->size = u->size;
}

int compat_utilization_query(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  (void)mib, (void)miblen;
  void *p;
  if (oldp == NULL || oldlenp == NULL || *oldlenp != sizeof(util_verbose_t) || newp == NULL ||
      newlen != sizeof(p))
    return EINVAL;
  memcpy(&p, newp, sizeof(p));
  util_t u;
  util_verbose_t v;
  util_get(p, &u, &v);
  return ctl_copy_out(oldp, oldlenp, &v, sizeof(v));
}

int compat_utilization_batch_query(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                                   size_t newlen) {
  (void)mib, (void)miblen;
  size_t n = newlen / sizeof(void *);
  if (oldp == NULL || oldlenp == NULL || newp == NULL || n == 0 || newlen != n * sizeof(void *) ||
      *oldlenp != n * sizeof(util_t))
    return EINVAL;
  for (size_t i = 0; i < n; i++) {
    void *p;
    memcpy(&p, (char *)newp + i * sizeof(p), sizeof(p));
    util_t u;
    util_get(p, &u, NULL);
    memcpy((char *)oldp + i * sizeof(u), &u, sizeof(u));
  }
  return 0;
}

/*
 * ctl.c - introspection: merged statistics, a mallctl name tree with jemalloc's names
 * (the subset this version keeps; unknown names answer ENOENT as jemalloc does), and
 * malloc_stats_print in text and JSON ("J"). Statistics are merged when "epoch" is
 * written, as in jemalloc; per-thread counters are read live.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static stats_t ctl_stats; /* snapshot at the last epoch; guarded by ctl_lock */
static mtx_t ctl_lock = MTX_INITIALIZER;

void stats_merge(stats_t *s) {
  memset(s, 0, sizeof(*s));
  if (!strata_ready) return;
  for (unsigned i = 0; i <= narenas; i++) {
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (a == NULL) continue;
    for (unsigned b = 1; b <= SZ_NSMALL; b++) {
      mtx_lock(&a->bins[b].lock);
      s->small_allocated += (a->bins[b].curregs - a->bins[b].remote_count) * bin_info[b].size;
      mtx_unlock(&a->bins[b].lock);
    }
    mtx_lock(&a->elock);
    s->large_allocated += a->large_allocated;
    s->active += a->nactive * os_page;
    s->dirty += a->dirty.npages * os_page;
    s->retained += a->retained.npages * os_page;
    s->mapped += a->mapped;
    mtx_unlock(&a->elock);
  }
  s->allocated = s->small_allocated + s->large_allocated;
  s->metadata = meta_mapped();
  /* Retained pages are mapped but hold no memory. */
  s->mapped -= s->retained;
  s->resident = s->active + s->dirty + s->metadata;
}

typedef enum { T_SIZE, T_U64, T_UNSIGNED, T_BOOL, T_STR } ctl_type_t;

static int ctl_read(void *oldp, size_t *oldlenp, const void *val, size_t len) {
  if (oldp == NULL || oldlenp == NULL) return 0;
  if (*oldlenp != len) {
    size_t n = *oldlenp < len ? *oldlenp : len;
    memcpy(oldp, val, n);
    *oldlenp = n;
    return EINVAL;
  }
  memcpy(oldp, val, len);
  return 0;
}

enum {
  N_VERSION, N_EPOCH, N_NARENAS, N_ST_ALLOCATED, N_ST_ACTIVE, N_ST_METADATA, N_ST_RESIDENT,
  N_ST_MAPPED, N_ST_RETAINED, N_TH_ALLOCATED, N_TH_DEALLOCATED, N_OPT_NARENAS, N_OPT_TCACHE,
  N_OPT_TCACHE_MAX, N_OPT_OVERSIZE, N_OPT_RETAIN, N_OPT_ZERO, N_OPT_ABORT, N_PAGE, N_QUANTUM,
  N_NBINS, N_TCACHE_FLUSH, N_ARENAS_PURGE, N_COUNT
};
static const char *const ctl_names[N_COUNT] = {
    "version", "epoch", "arenas.narenas", "stats.allocated", "stats.active", "stats.metadata",
    "stats.resident", "stats.mapped", "stats.retained", "thread.allocated", "thread.deallocated",
    "opt.narenas", "opt.tcache", "opt.tcache_max", "opt.oversize_threshold", "opt.retain",
    "opt.zero", "opt.abort", "arenas.page", "arenas.quantum", "arenas.nbins", "thread.tcache.flush",
    "arena.purge"};

static int ctl_by_index(size_t i, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return EAGAIN;
  stats_t s;
  mtx_lock(&ctl_lock);
  s = ctl_stats;
  mtx_unlock(&ctl_lock);
  if (newp != NULL && i != N_EPOCH && i != N_TCACHE_FLUSH && i != N_ARENAS_PURGE) return EPERM;
  switch (i) {
  case N_VERSION: {
    const char *v = STRATA_VERSION;
    return ctl_read(oldp, oldlenp, &v, sizeof(v));
  }
  case N_EPOCH: {
    if (newp != NULL) {
      if (newlen != sizeof(uint64_t)) return EINVAL;
      stats_t fresh;
      stats_merge(&fresh);
      mtx_lock(&ctl_lock);
      ctl_stats = fresh;
      ctl_epoch++;
      mtx_unlock(&ctl_lock);
    }
    uint64_t e = __atomic_load_n(&ctl_epoch, __ATOMIC_RELAXED);
    return ctl_read(oldp, oldlenp, &e, sizeof(e));
  }
  case N_NARENAS: {
    unsigned n = narenas;
    return ctl_read(oldp, oldlenp, &n, sizeof(n));
  }
  case N_ST_ALLOCATED: return ctl_read(oldp, oldlenp, &s.allocated, sizeof(size_t));
  case N_ST_ACTIVE: return ctl_read(oldp, oldlenp, &s.active, sizeof(size_t));
  case N_ST_METADATA: return ctl_read(oldp, oldlenp, &s.metadata, sizeof(size_t));
  case N_ST_RESIDENT: return ctl_read(oldp, oldlenp, &s.resident, sizeof(size_t));
  case N_ST_MAPPED: return ctl_read(oldp, oldlenp, &s.mapped, sizeof(size_t));
  case N_ST_RETAINED: return ctl_read(oldp, oldlenp, &s.retained, sizeof(size_t));
  case N_TH_ALLOCATED:
  case N_TH_DEALLOCATED: {
    uint64_t al, de;
    tcache_counts(tsd, &al, &de);
    return ctl_read(oldp, oldlenp, i == N_TH_ALLOCATED ? &al : &de, sizeof(uint64_t));
  }
  case N_OPT_NARENAS: {
    unsigned n = narenas;
    return ctl_read(oldp, oldlenp, &n, sizeof(n));
  }
  case N_OPT_TCACHE: return ctl_read(oldp, oldlenp, &opt.tcache, sizeof(bool));
  case N_OPT_TCACHE_MAX: return ctl_read(oldp, oldlenp, &opt.tcache_max, sizeof(size_t));
  case N_OPT_OVERSIZE: return ctl_read(oldp, oldlenp, &opt.oversize_threshold, sizeof(size_t));
  case N_OPT_RETAIN: return ctl_read(oldp, oldlenp, &opt.retain, sizeof(bool));
  case N_OPT_ZERO: return ctl_read(oldp, oldlenp, &opt.zero, sizeof(bool));
  case N_OPT_ABORT: return ctl_read(oldp, oldlenp, &opt.abort, sizeof(bool));
  case N_PAGE: return ctl_read(oldp, oldlenp, &os_page, sizeof(size_t));
  case N_QUANTUM: {
    size_t q = 16;
    return ctl_read(oldp, oldlenp, &q, sizeof(q));
  }
  case N_NBINS: {
    unsigned n = SZ_NSMALL;
    return ctl_read(oldp, oldlenp, &n, sizeof(n));
  }
  case N_TCACHE_FLUSH:
    if (tsd->state == TSD_ACTIVE) tcache_flush_all(tsd->tcache);
    return 0;
  case N_ARENAS_PURGE:
    arena_purge_all();
    return 0;
  }
  return ENOENT;
}

/* jemalloc spells "purge every arena" as arena.<narenas>.purge (MALLCTL_ARENAS_ALL). */
static size_t ctl_lookup(const char *name) {
  if (strncmp(name, "arena.", 6) == 0) {
    const char *dot = strchr(name + 6, '.');
    if (dot && strcmp(dot, ".purge") == 0) return N_ARENAS_PURGE;
    return N_COUNT;
  }
  for (size_t i = 0; i < N_COUNT; i++) {
    if (strcmp(ctl_names[i], name) == 0) return i;
  }
  return N_COUNT;
}


/* Handlers that live in other modules (ctl_handler_t): name -> handler. Their MIBs are
 * N_COUNT + their index here. */
static const struct {
  const char *name;
  ctl_handler_t *fn;
} ctl_ext[] = {
    {"prof.active", prof_ctl_active}, {"prof.dump", prof_ctl_dump}, {"prof.gdump", prof_ctl_gdump},
    {"prof.reset", prof_ctl_reset}, {"prof.lg_sample", prof_ctl_lg_sample}, {"prof.interval", prof_ctl_interval},
    {"thread.prof.name", prof_ctl_thread_name}, {"thread.prof.active", prof_ctl_thread_active},
    {"opt.prof", prof_ctl_opt_prof}, {"opt.prof_active", prof_ctl_opt_prof_active},
    {"opt.prof_thread_active_init", prof_ctl_opt_thread_active_init}, {"opt.lg_prof_sample", prof_ctl_opt_lg_sample},
    {"opt.prof_prefix", prof_ctl_opt_prefix}, {"opt.lg_prof_interval", prof_ctl_opt_lg_interval},
    {"opt.prof_gdump", prof_ctl_opt_gdump}, {"opt.prof_final", prof_ctl_opt_final},
    {"opt.prof_leak", prof_ctl_opt_leak}, {"opt.prof_accum", prof_ctl_opt_accum},
};
#define N_EXT (sizeof(ctl_ext) / sizeof(ctl_ext[0]))

static size_t ctl_ext_lookup(const char *name) {
  for (size_t i = 0; i < N_EXT; i++) {
    if (strcmp(ctl_ext[i].name, name) == 0) return N_COUNT + i;
  }
  return (size_t)-1;
}

__attribute__((visibility("default"))) int strata_mallctl(const char *name, void *oldp, size_t *oldlenp,
                                                          void *newp, size_t newlen) {
  if (name == NULL) return EINVAL;
  size_t e = ctl_ext_lookup(name);
  if (e != (size_t)-1) return ctl_ext[e - N_COUNT].fn(&e, 1, oldp, oldlenp, newp, newlen);
  size_t i = ctl_lookup(name);
  if (i == N_COUNT) return ENOENT;
  return ctl_by_index(i, oldp, oldlenp, newp, newlen);
}

__attribute__((visibility("default"))) int strata_mallctlnametomib(const char *name, size_t *mibp,
                                                                  size_t *miblenp) {
  if (name == NULL || mibp == NULL || miblenp == NULL || *miblenp < 1) return EINVAL;
  size_t i = ctl_ext_lookup(name);
  if (i == (size_t)-1) i = ctl_lookup(name);
  if (i == N_COUNT) return ENOENT;
  mibp[0] = i;
  *miblenp = 1;
  return 0;
}

__attribute__((visibility("default"))) int strata_mallctlbymib(const size_t *mib, size_t miblen, void *oldp,
                                                              size_t *oldlenp, void *newp, size_t newlen) {
  if (mib != NULL && miblen == 1 && mib[0] >= N_COUNT && mib[0] < N_COUNT + N_EXT)
    return ctl_ext[mib[0] - N_COUNT].fn(mib, miblen, oldp, oldlenp, newp, newlen);
  if (mib == NULL || miblen != 1 || mib[0] >= N_COUNT) return ENOENT;
  return ctl_by_index(mib[0], oldp, oldlenp, newp, newlen);
}

static void write_stderr(void *opaque, const char *s) {
  (void)opaque;
  msg_write(s);
}

__attribute__((visibility("default"))) void strata_malloc_stats_print(void (*write_cb)(void *, const char *),
                                                                     void *cbopaque, const char *opts) {
  if (write_cb == NULL) write_cb = write_stderr;
  bool json = opts && strchr(opts, 'J');
  stats_t s;
  if (tsd_fetch() == NULL) return;
  stats_merge(&s);
  char buf[4096];
  if (json) {
    snprintf(buf, sizeof(buf),
             "{\"jemalloc\":{\"version\":\"strata-%s\",\"config\":{\"allocator\":\"strata\"},"
             "\"opt\":{\"narenas\":%u,\"tcache\":%s,\"tcache_max\":%zu,\"oversize_threshold\":%zu,"
             "\"retain\":%s},"
             "\"arenas\":{\"narenas\":%u,\"page\":%zu,\"quantum\":16,\"nbins\":%u},"
             "\"stats\":{\"allocated\":%zu,\"active\":%zu,\"metadata\":%zu,\"resident\":%zu,"
             "\"mapped\":%zu,\"retained\":%zu}}}\n",
             STRATA_VERSION, narenas, opt.tcache ? "true" : "false", opt.tcache_max,
             opt.oversize_threshold, opt.retain ? "true" : "false", narenas, os_page, SZ_NSMALL,
             s.allocated, s.active, s.metadata, s.resident, s.mapped, s.retained);
    write_cb(cbopaque, buf);
    return;
  }
  snprintf(buf, sizeof(buf),
           "___ Begin strata statistics ___\nVersion: \"%s\"\n"
           "Run-time option settings:\n  opt.narenas: %u\n  opt.tcache: %s\n  opt.tcache_max: %zu\n"
           "  opt.oversize_threshold: %zu\n  opt.retain: %s\n"
           "Arenas: %u\nPage size: %zu\n"
           "Allocated: %zu, active: %zu, metadata: %zu, resident: %zu, mapped: %zu, retained: %zu\n"
           "  (small: %zu, large: %zu, dirty: %zu)\n",
           STRATA_VERSION, narenas, opt.tcache ? "true" : "false", opt.tcache_max, opt.oversize_threshold,
           opt.retain ? "true" : "false", narenas, os_page, s.allocated, s.active, s.metadata, s.resident,
           s.mapped, s.retained, s.small_allocated, s.large_allocated, s.dirty);
  write_cb(cbopaque, buf);
  write_cb(cbopaque, "bins:           size  regs/slab  slab_size      curregs     nmalloc     ndalloc\n");
  for (unsigned b = 1; b <= SZ_NSMALL; b++) {
    size_t curregs = 0;
    uint64_t nmalloc = 0, ndalloc = 0;
    for (unsigned i = 0; i <= narenas; i++) {
      arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
      if (a == NULL) continue;
      mtx_lock(&a->bins[b].lock);
      curregs += a->bins[b].curregs;
      nmalloc += a->bins[b].nmalloc;
      ndalloc += a->bins[b].ndalloc;
      mtx_unlock(&a->bins[b].lock);
    }
    if (nmalloc == 0) continue;
    snprintf(buf, sizeof(buf), "  %20zu %10u %10zu %12zu %11llu %11llu\n", bin_info[b].size,
             bin_info[b].nregs, bin_info[b].slab_size, curregs, (unsigned long long)nmalloc,
             (unsigned long long)ndalloc);
    write_cb(cbopaque, buf);
  }
  write_cb(cbopaque, "___ End strata statistics ___\n");
}

#ifdef STRATA_OVERRIDE
#define ALIAS(name, target) extern __typeof(target) name __attribute__((alias(#target), visibility("default")))
ALIAS(mallctl, strata_mallctl);
ALIAS(mallctlnametomib, strata_mallctlnametomib);
ALIAS(mallctlbymib, strata_mallctlbymib);
ALIAS(malloc_stats_print, strata_malloc_stats_print);
#endif

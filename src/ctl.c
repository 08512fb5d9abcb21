/*
 * ctl.c - the mallctl tree as one table (jemalloc's names, types, read/write rules and
 * error codes), name and multi-component MIB lookup, and the statistics snapshot that
 * writing "epoch" refreshes. Printers (stats.c, metrics.c) walk the same table. A new
 * statistic is one row: a field in the snapshot record (filled in ctl_refresh) and a
 * LEAF_* line below. Other modules' handlers (ctl_handler_t) plug in as LEAF_H rows.
 * Counters are kept where the allocator already holds a lock (bin fills and flushes,
 * extent changes); reading them takes those locks once per epoch, never the fast path.
 */
#define OS_PAGE_VARIABLE /* arenas.page reads the variable */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include "ctl.h"

/* ---------------------------------------------------------------- mutex profiling */
/* Lock held by the caller. */
static void mutex_read(const mtx_t *m, ctl_mutex_stats_t *o) {
  *o = (ctl_mutex_stats_t){.num_ops = m->n_lock_ops, .num_wait = m->n_wait, .num_spin_acq = m->n_spin};
}

/* Snapshot records are 19 KiB, mostly zeros (bins never used, extent buckets never filled):
 * clearing and summing them store only words that change, so that their pages a program's
 * statistics reads never need (Redis's cron) stay untouched, as in .bss or fresh metadata
 * (docs/design.md, "Introspection"). */
static void snap_zero(void *p, size_t bytes) { /* bytes: a multiple of 8 (the records' alignment) */
  unsigned char *c = p;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t w;
    memcpy(&w, c + i, 8);
    if (w != 0) memset(c + i, 0, 8);
  }
}

static void mutex_add(ctl_mutex_stats_t *a, const ctl_mutex_stats_t *b) {
  if (b->num_ops == 0 && b->max_num_thds == 0) return; /* never locked: all zero */
  a->num_ops += b->num_ops;
  a->num_wait += b->num_wait;
  a->num_spin_acq += b->num_spin_acq;
  a->num_owner_switch += b->num_owner_switch;
  a->total_wait_time += b->total_wait_time;
  if (a->max_wait_time < b->max_wait_time) a->max_wait_time = b->max_wait_time;
  if (a->max_num_thds < b->max_num_thds) a->max_num_thds = b->max_num_thds;
}

static void mutex_reset(mtx_t *m) {
  mtx_lock(m);
  m->n_lock_ops = m->n_wait = m->n_spin = 0;
  mtx_unlock(m);
}

/* ---------------------------------------------------------------- snapshot */
static mtx_t ctl_lock = MTX_INITIALIZER; /* guards the snapshot; taken before any arena lock */
static ctl_global_stats_t snap_global;
static ctl_arena_stats_t snap_merged, snap_destroyed;
static ctl_arena_stats_t **snap_arenas; /* [ARENAS_MAX], records from meta_alloc as arenas appear */
/* stats.mutexes.<name>, in the order of the table's rows */
enum { GM_CTL, GM_ARENAS, GM_TCACHE_LIST, GM_BASE, GM_RTREE, GM_BG, GM_PROF, GM_MAX_PER_BG_THD, GM_PROF_THDS_DATA,
       GM_PROF_DUMP, GM_PROF_RECENT_ALLOC, GM_PROF_RECENT_DUMP, GM_PROF_STATS, GM_N };
static ctl_mutex_stats_t snap_gmutex[GM_N];
/* jemalloc's names for locks strata has under another name read that lock; names for
 * locks strata has no counterpart of (NULL) read zeros. */
static mtx_t *const gmutex[GM_N] = {&ctl_lock, &arenas_lock, &tcache_list_lock, &meta_lock, &rtree_lock, &bg_lock,
                                    &prof_lock,
                                    &bg_lock,   /* max_per_bg_thd: every background thread sleeps on bg_lock */
                                    &prof_lock, /* prof_thds_data: threads' profiling names live under prof_lock */
                                    &prof_dump_lock, NULL, NULL, NULL};

uint64_t stats_zero_reallocs;

/* ctl_lock comes first in the lock order: fork takes it before the allocator's locks
 * (init.c registers these after its own handlers, so they run in that order). */
void ctl_prefork(void) { mtx_lock(&ctl_lock); }
void ctl_postfork_parent(void) { mtx_unlock(&ctl_lock); }
void ctl_postfork_child(void) { mtx_init(&ctl_lock); }

size_t ctl_narenas_total(void) { return __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE); }

static ctl_arena_stats_t *snap_arena(size_t i) {
  if (i == CTL_ARENAS_ALL) return &snap_merged;
  if (i == CTL_ARENAS_DESTROYED) return &snap_destroyed;
  if (snap_arenas == NULL || i >= ctl_narenas_total()) return NULL;
  return snap_arenas[i];
}

const void *ctl_snap_record(size_t i) { return snap_arenas && i < ARENAS_MAX ? snap_arenas[i] : NULL; }

bool ctl_arena_present(size_t i) {
  if (i == CTL_ARENAS_ALL || i == CTL_ARENAS_DESTROYED) return true;
  mtx_lock(&ctl_lock);
  ctl_arena_stats_t *s = snap_arena(i);
  bool r = s != NULL && s->initialized;
  mtx_unlock(&ctl_lock);
  return r;
}

/* Bytes and request counts of the thread caches, per arena: read without their owners'
 * cooperation (as jemalloc does), so a figure may be a few objects stale. */
__attribute__((no_sanitize("thread"))) static void snap_tcaches(void) {
  mtx_lock(&tcache_list_lock);
  for (tcache_t *tc = tcache_list; tc; tc = tc->next) {
    if (tc->arena == NULL) continue;
    ctl_arena_stats_t *s = snap_arenas[tc->arena->ind];
    if (s == NULL) continue;
    for (szind_t i = 1; i < tcache_nbins; i++) {
      const tbin_t *b = &tc->bins[i];
      /* not tbin_count: it would be instrumented; closed bins (tcache_crowd) hold nothing */
      size_t cached = i < tc->nbins_open ? (uint32_t)(tc->max[i] - b->avail) : 0;
      s->tcache_bytes += cached * sz_size[i];
      if (i > SZ_NSMALL) continue;
      /* prof:true: nmalloc + prof_nm_off, both changed at a sample by the owner (odd gen). */
      uint64_t n;
      for (;;) {
        uint32_t g = __atomic_load_n(&tc->prof_nm_gen, __ATOMIC_ACQUIRE);
        n = b->nmalloc + tc->prof_nm_off[i];
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (!(g & 1) && g == __atomic_load_n(&tc->prof_nm_gen, __ATOMIC_RELAXED)) break;
      }
      s->bins[i - 1].nrequests += n;
    }
  }
  mtx_unlock(&tcache_list_lock);
}

static void snap_read_arena(arena_t *a, ctl_arena_stats_t *s) {
  snap_zero(s, sizeof(*s));
  s->initialized = true;
  s->nthreads = __atomic_load_n(&a->nthreads, __ATOMIC_RELAXED);
  uint64_t used = __atomic_load_n(&a->bins_used, __ATOMIC_ACQUIRE);
  for (unsigned b = 1; b <= SZ_NSMALL; b++) {
    bin_t *bin = &a->bins[b];
    ctl_bin_stats_t *o = &s->bins[b - 1];
    if (!(used >> b & 1)) continue; /* never made a slab: all zero, pages left untouched */
    mtx_lock(&bin->lock);
    o->nmalloc = bin->nmalloc;
    o->ndalloc = bin->ndalloc;
    o->nfills = bin->nfills;
    o->nflushes = bin->nflushes;
    o->nslabs = bin->nslabs;
    o->nreslabs = bin->nreslabs;
    o->curregs = bin->curregs - bin->remote_count; /* remote chains are free regions */
    o->curslabs = bin->curslabs;
    o->nonfull_slabs = bin->nonfull_slabs;
    mutex_read(&bin->lock, &o->mutex);
    mtx_unlock(&bin->lock);
  }
  mtx_lock(&a->elock);
  s->uptime = decay_now() - a->created_ns;
  s->pactive = a->nactive;
  s->pdirty = a->dirty.npages;
  s->pmuzzy = a->muzzy.npages;
  s->dirty_decay_ms = (ssize_t)decay_ms(&a->ddecay);
  s->muzzy_decay_ms = (ssize_t)decay_ms(&a->mdecay);
  s->retained = a->retained.npages * os_page;
  s->mapped = a->mapped - s->retained;
  s->dirty_npurge = a->npurge_passes;
  s->dirty_nmadvise = a->nmadvise;
  s->dirty_purged = a->npurged;
  s->large.allocated = a->large_allocated;
  s->large.nmalloc = a->nlarge_malloc;
  s->large.ndalloc = a->nlarge_dalloc;
#define SETNZ(f, v) do { if ((v) != 0) (f) = (v); } while (0) /* s is all zeros here */
  for (unsigned j = 0; j < CTL_NLEXT; j++) {
    SETNZ(s->lext[j].nmalloc, a->lext_nmalloc[j]);
    SETNZ(s->lext[j].ndalloc, a->lext_ndalloc[j]);
  }
  for (unsigned j = 0; j < PSZ_N; j++) {
    SETNZ(s->ext[j].ndirty, a->dirty.nextents[j]);
    SETNZ(s->ext[j].dirty_bytes, a->dirty.bpages[j] * os_page);
    SETNZ(s->ext[j].nretained, a->retained.nextents[j]);
    SETNZ(s->ext[j].retained_bytes, a->retained.bpages[j] * os_page);
    SETNZ(s->ext[j].nmuzzy, a->muzzy.nextents[j]);
    SETNZ(s->ext[j].muzzy_bytes, a->muzzy.bpages[j] * os_page);
  }
#undef SETNZ
  mutex_read(&a->elock, &s->mutexes[0]);
  mtx_unlock(&a->elock);
}

/* Sums and derived fields of one arena's record (also of the merged one). */
static void snap_finish(ctl_arena_stats_t *s) {
  s->small = (ctl_class_stats_t){0};
  for (unsigned b = 0; b < SZ_NSMALL; b++) {
    ctl_bin_stats_t *o = &s->bins[b];
    s->small.allocated += o->curregs * bin_info[b + 1].size;
    s->small.nmalloc += o->nmalloc;
    s->small.ndalloc += o->ndalloc;
    s->small.nfills += o->nfills;
    s->small.nflushes += o->nflushes;
    if (o->nmalloc) o->nrequests += o->nmalloc; /* cache hits (added by snap_tcaches) plus fills */
    s->small.nrequests += o->nrequests;
  }
  for (unsigned j = 0; j < CTL_NLEXT; j++) {
    ctl_lext_stats_t *l = &s->lext[j];
    if (l->nmalloc == 0 && l->nrequests == 0) continue; /* never used: all zero */
    l->nrequests = l->nmalloc;
    l->curlextents = (size_t)(l->nmalloc - l->ndalloc);
  }
  s->large.nrequests = s->large.nmalloc;
  s->resident = (s->pactive + s->pdirty + s->pmuzzy) * os_page + s->base + s->internal;
}

static void snap_add(ctl_arena_stats_t *m, const ctl_arena_stats_t *s) {
  m->initialized = true;
  m->nthreads += s->nthreads;
  if (m->uptime < s->uptime) m->uptime = s->uptime;
#define ADD(f) do { if (s->f) m->f += s->f; } while (0)
  ADD(pactive); ADD(pdirty); ADD(pmuzzy); ADD(mapped); ADD(retained); ADD(tcache_bytes);
  ADD(dirty_npurge); ADD(dirty_nmadvise); ADD(dirty_purged);
  ADD(large.allocated); ADD(large.nmalloc); ADD(large.ndalloc);
  for (unsigned b = 0; b < SZ_NSMALL; b++) {
    ADD(bins[b].nmalloc); ADD(bins[b].ndalloc); ADD(bins[b].nrequests); ADD(bins[b].nfills);
    ADD(bins[b].nflushes); ADD(bins[b].nslabs); ADD(bins[b].nreslabs); ADD(bins[b].curregs);
    ADD(bins[b].curslabs); ADD(bins[b].nonfull_slabs);
    mutex_add(&m->bins[b].mutex, &s->bins[b].mutex);
  }
  mutex_add(&m->mutexes[0], &s->mutexes[0]);
  for (unsigned j = 0; j < CTL_NLEXT; j++) {
    ADD(lext[j].nmalloc); ADD(lext[j].ndalloc);
  }
  for (unsigned j = 0; j < PSZ_N; j++) {
    ADD(ext[j].ndirty); ADD(ext[j].dirty_bytes); ADD(ext[j].nmuzzy); ADD(ext[j].muzzy_bytes); ADD(ext[j].nretained); ADD(ext[j].retained_bytes);
  }
#undef ADD
}

void ctl_refresh(void) {
  mtx_lock(&ctl_lock);
  size_t n = ctl_narenas_total();
  if (snap_arenas == NULL) __atomic_store_n(&snap_arenas, meta_alloc(ARENAS_MAX * sizeof(*snap_arenas)), __ATOMIC_RELEASE);
  if (snap_arenas == NULL) goto out;
  for (size_t i = 0; i < n; i++) {
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (a == NULL || __atomic_load_n(&a->destroyed, __ATOMIC_ACQUIRE)) {
      if (snap_arenas[i]) snap_arenas[i]->initialized = false; /* destroyed: index awaits reuse */
      continue;
    }
    if (snap_arenas[i] == NULL && (snap_arenas[i] = meta_alloc(sizeof(ctl_arena_stats_t))) == NULL) continue;
    snap_read_arena(a, snap_arenas[i]);
  }
  snap_tcaches();
  for (int g = 0; g < GM_N; g++) {
    if (gmutex[g] == NULL) continue;
    if (g != GM_CTL) mtx_lock(gmutex[g]);
    mutex_read(gmutex[g], &snap_gmutex[g]);
    if (g != GM_CTL) mtx_unlock(gmutex[g]);
  }
  snap_zero(&snap_merged, sizeof(snap_merged));
  for (size_t i = 0; i < n; i++) {
    if (snap_arenas[i] == NULL || !snap_arenas[i]->initialized) continue;
    snap_finish(snap_arenas[i]);
    snap_add(&snap_merged, snap_arenas[i]);
  }
  /* strata's metadata is one pool for every arena: it is the merged record's base. */
  snap_merged.base = meta_mapped();
  snap_merged.uptime = snap_arenas[0] ? snap_arenas[0]->uptime : 0;
  snap_finish(&snap_merged);
  snap_merged.dirty_decay_ms = (ssize_t)__atomic_load_n(&arenas_dirty_decay_ms, __ATOMIC_RELAXED);
  snap_merged.muzzy_decay_ms = (ssize_t)__atomic_load_n(&arenas_muzzy_decay_ms, __ATOMIC_RELAXED);
  /* Destroyed arenas keep their counters (arena.<i>.destroy); the merged record has them
   * too, as jemalloc's does. */
  arena_counts_t dc;
  /* Until an arena is destroyed the record is all zeros, as in .bss: left unwritten, so
   * that a program reading statistics (Redis's cron) does not fault in its 19 KiB. */
  if (arenas_destroyed_read(&dc)) {
    memset(&snap_destroyed, 0, sizeof(snap_destroyed));
    snap_finish(&snap_destroyed);
    snap_destroyed.initialized = true;
    snap_destroyed.dirty_decay_ms = snap_destroyed.muzzy_decay_ms = 0;
    snap_destroyed.small.nmalloc = dc.small_nmalloc;
    snap_destroyed.small.ndalloc = dc.small_ndalloc;
    snap_destroyed.large.nmalloc = dc.large_nmalloc;
    snap_destroyed.large.ndalloc = dc.large_ndalloc;
    snap_destroyed.dirty_purged = dc.npurged;
  }
  snap_merged.small.nmalloc += dc.small_nmalloc;
  snap_merged.small.ndalloc += dc.small_ndalloc;
  snap_merged.large.nmalloc += dc.large_nmalloc;
  snap_merged.large.ndalloc += dc.large_ndalloc;
  snap_merged.dirty_purged += dc.npurged;
  snap_global = (ctl_global_stats_t){
      .allocated = snap_merged.small.allocated + snap_merged.large.allocated,
      .active = snap_merged.pactive * os_page,
      .metadata = snap_merged.base,
      .resident = snap_merged.resident,
      .mapped = snap_merged.mapped,
      .retained = snap_merged.retained,
      .zero_reallocs = (size_t)__atomic_load_n(&stats_zero_reallocs, __ATOMIC_RELAXED),
  };
  ctl_epoch++;
out:
  mtx_unlock(&ctl_lock);
}

/* mallinfo2 and malloc_info's figures, without the snapshot (no allocation). */
void stats_merge(stats_t *s) {
  memset(s, 0, sizeof(*s));
  if (!strata_ready) return;
  for (unsigned i = 0; i < __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE); i++) {
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (a == NULL) continue;
    uint64_t used = __atomic_load_n(&a->bins_used, __ATOMIC_ACQUIRE);
    for (unsigned b = 1; b <= SZ_NSMALL; b++) {
      if (!(used >> b & 1)) continue; /* never made a slab: nothing allocated */
      mtx_lock(&a->bins[b].lock);
      s->small_allocated += (a->bins[b].curregs - a->bins[b].remote_count) * bin_info[b].size;
      mtx_unlock(&a->bins[b].lock);
    }
    mtx_lock(&a->elock);
    s->large_allocated += a->large_allocated;
    s->active += a->nactive * os_page;
    s->dirty += a->dirty.npages * os_page;
    s->muzzy += a->muzzy.npages * os_page;
    s->retained += a->retained.npages * os_page;
    s->mapped += a->mapped;
    mtx_unlock(&a->elock);
  }
  s->allocated = s->small_allocated + s->large_allocated;
  s->metadata = meta_mapped();
  /* Retained pages are mapped but hold no memory. */
  s->mapped -= s->retained;
  s->resident = s->active + s->dirty + s->muzzy + s->metadata; /* MADV_FREE pages may still be resident */
}

/* ---------------------------------------------------------------- value transfer */
static size_t type_size(unsigned t) {
  switch (t) {
  case CT_BOOL: return sizeof(bool);
  case CT_UNSIGNED: return sizeof(unsigned);
  case CT_U32: return sizeof(uint32_t);
  case CT_SIZE: return sizeof(size_t);
  case CT_SSIZE: return sizeof(ssize_t);
  case CT_U64: return sizeof(uint64_t);
  case CT_STR: return sizeof(const char *);
  default: return 0;
  }
}

/* jemalloc's rule: a length that is not the type's size copies what fits and is EINVAL. */
int ctl_copy_out(void *oldp, size_t *oldlenp, const void *val, size_t len) {
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
#define READONLY() \
  do { \
    if (newp != NULL || newlen != 0) return EPERM; \
  } while (0)
#define NEITHER_READ_NOR_WRITE() \
  do { \
    if (oldp != NULL || oldlenp != NULL || newp != NULL || newlen != 0) return EPERM; \
  } while (0)
#define WRITE_IN(var) \
  do { \
    if (newp != NULL) { \
      if (newlen != sizeof(var)) return EINVAL; \
      memcpy(&(var), newp, sizeof(var)); \
    } \
  } while (0)
#define RETURN_OUT(var) return ctl_copy_out(oldp, oldlenp, &(var), sizeof(var))

/* stats.arenas.<i>.mutexes.<name>: the record slot of each row of n_amutexes. strata's
 * arena has one lock (elock) for what jemalloc guards with eight: each of those names
 * reads it. base and tcache_list are process-wide locks in strata (stats.mutexes.base,
 * stats.mutexes.tcache_list) and the hpa locks have no counterpart: slot 1, zeros. */
static const uint8_t amutex_slot[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};

/* The address of a table leaf's value (ctl_lock held for snapshot sources). */
static const void *leaf_addr(const ctl_node_t *n, const size_t *mib) {
  const ctl_arena_stats_t *s;
  switch (n->src) {
  case S_CONST: return n->ptr;
  case S_GLOBAL: return (const char *)&snap_global + n->off;
  case S_GMUTEX: return (const char *)&snap_gmutex[mib[2]] + n->off;
  case S_BININFO: return (const char *)&bin_info[mib[2] + 1] + n->off;
  case S_ARENA: case S_BIN: case S_LEXT: case S_EXT: case S_AMUTEX:
    if ((s = snap_arena(mib[2])) == NULL || !s->initialized) return NULL;
    if (n->src == S_ARENA) return (const char *)s + n->off;
    if (n->src == S_BIN) return (const char *)&s->bins[mib[4]] + n->off;
    if (n->src == S_LEXT) return (const char *)&s->lext[mib[4]] + n->off;
    if (n->src == S_AMUTEX) return (const char *)&s->mutexes[amutex_slot[mib[4]]] + n->off;
    return (const char *)&s->ext[mib[4]] + n->off;
  }
  return NULL;
}

/* For handlers in other modules (ctl_handler_t): read the current value, check a new
 * one's size; the handler validates and applies it. */
int ctl_rw(void *oldp, size_t *oldlenp, void *newp, size_t newlen, const void *val, size_t len) {
  if (newp != NULL && newlen != len) return EINVAL;
  return ctl_copy_out(oldp, oldlenp, val, len);
}

static int leaf_read(const ctl_node_t *n, const size_t *mib, void *oldp, size_t *oldlenp, void *newp,
                     size_t newlen) {
  READONLY();
  /* The first statistics read takes the first snapshot, as jemalloc's start-up does. */
  if (n->src != S_CONST && n->src != S_BININFO && __atomic_load_n(&snap_arenas, __ATOMIC_ACQUIRE) == NULL)
    ctl_refresh();
  uint64_t buf[1];
  size_t len = type_size(n->type);
  mtx_lock(&ctl_lock);
  const void *p = leaf_addr(n, mib);
  if (p) memcpy(buf, p, len);
  mtx_unlock(&ctl_lock);
  if (p == NULL) return ENOENT;
  return ctl_copy_out(oldp, oldlenp, buf, len);
}

/* ---------------------------------------------------------------- handlers */
static int h_epoch(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  uint64_t v;
  WRITE_IN(v);
  if (newp != NULL) ctl_refresh();
  v = __atomic_load_n(&ctl_epoch, __ATOMIC_RELAXED);
  RETURN_OUT(v);
}

static int h_thread_counts(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)miblen;
  READONLY();
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return EAGAIN;
  uint64_t al, de;
  tcache_counts(tsd, &al, &de);
  hooks_publish(tsd);
  return ctl_copy_out(oldp, oldlenp, mib[1] == 1 ? &al : &de, sizeof(uint64_t));
}

static int h_tcache_enabled(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                            size_t newlen) {
  (void)mib, (void)miblen;
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return EAGAIN;
  bool old = tcache_nbins > 0 && (tsd->state == TSD_ACTIVE || tsd->state == TSD_NOMINAL), v = old;
  if (newp != NULL && (newlen != sizeof(bool) || !ctl_bool_in(newp, &v))) return EINVAL;
  if (v != old) tcache_set_enabled(tsd, v);
  RETURN_OUT(old);
}

static int h_tcache_flush(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen) {
  (void)mib, (void)miblen;
  NEITHER_READ_NOR_WRITE();
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return EAGAIN;
  if (tsd->state == TSD_ACTIVE) tcache_flush_all(tsd->tcache);
  return 0;
}

/* thread.idle: the thread will not allocate for a while: give back its cache and let its
 * arena purge what decay allows. */
static int h_thread_idle(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                         size_t newlen) {
  int r = h_tcache_flush(mib, miblen, oldp, oldlenp, newp, newlen);
  if (r == 0 && strata_tsd.arena) arena_maybe_purge(strata_tsd.arena);
  return r;
}

/* Values computed from the configuration: one handler, the leaf picked by mib. */
enum { V_NARENAS, V_TCACHE_MAX, V_NHBINS, V_OPT_JUNK };
static int h_computed(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen,
                      int which) {
  (void)mib, (void)miblen;
  READONLY();
  if (tsd_fetch() == NULL) return EAGAIN;
  switch (which) {
  case V_NARENAS: {
    unsigned v = (unsigned)ctl_narenas_total();
    RETURN_OUT(v);
  }
  case V_TCACHE_MAX: {
    size_t v = tcache_nbins > 1 ? sz_size[tcache_nbins - 1] : 0;
    RETURN_OUT(v);
  }
  case V_NHBINS: {
    unsigned v = tcache_nbins > 0 ? tcache_nbins - 1 : 0;
    RETURN_OUT(v);
  }
  default: {
    const char *v = opt.junk == (JUNK_ALLOC | JUNK_FREE) ? "true"
                    : opt.junk == JUNK_ALLOC             ? "alloc"
                    : opt.junk == JUNK_FREE              ? "free"
                                                         : "false";
    RETURN_OUT(v);
  }
  }
}
#define COMPUTED(fn, which) \
  static int fn(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) { \
    return h_computed(mib, miblen, oldp, oldlenp, newp, newlen, which); \
  }
COMPUTED(h_arenas_narenas, V_NARENAS)
COMPUTED(h_arenas_tcache_max, V_TCACHE_MAX)
COMPUTED(h_arenas_nhbins, V_NHBINS)
COMPUTED(h_opt_junk, V_OPT_JUNK)

static int h_lextent_size(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                          size_t newlen) {
  (void)miblen;
  READONLY();
  size_t v = sz_size[SZ_NSMALL + 1 + mib[2]];
  RETURN_OUT(v);
}

/* arenas.lookup: write a pointer, read the index of the arena that owns it. */
static int h_arenas_lookup(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib, (void)miblen;
  void *p;
  if (newp == NULL || newlen != sizeof(p)) return EINVAL;
  memcpy(&p, newp, sizeof(p));
  if (p == NULL) return EINVAL;
  uint64_t e = rtree_read((uintptr_t)p);
  edata_t *ed = rt_edata(e);
  /* Slab granules map every page; a large extent maps its first page (p's start). */
  if (ed == NULL || (!(e & RT_SLAB) && (ed->state != ES_ACTIVE || ed->addr != (uintptr_t)p))) return EINVAL;
  unsigned v = edata_arena_ind(ed);
  RETURN_OUT(v);
}

/* stats.mutexes.reset: zero every mutex profile (each under its lock). */
static int h_mutexes_reset(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib, (void)miblen;
  NEITHER_READ_NOR_WRITE();
  for (int g = 0; g < GM_N; g++) {
    if (gmutex[g] != NULL && (g == 0 || gmutex[g] != gmutex[g - 1])) mutex_reset(gmutex[g]);
  }
  for (size_t i = 0; i < ctl_narenas_total(); i++) {
    arena_t *a = __atomic_load_n(&arenas[i], __ATOMIC_ACQUIRE);
    if (a == NULL) continue;
    for (unsigned b = 1; b <= SZ_NSMALL; b++) mutex_reset(&a->bins[b].lock);
    mutex_reset(&a->elock);
  }
  return 0;
}

/* stats.zero_reallocs: live, as jemalloc's (not from the snapshot). */
static int h_zero_reallocs(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                           size_t newlen) {
  (void)mib, (void)miblen;
  READONLY();
  size_t v = (size_t)__atomic_load_n(&stats_zero_reallocs, __ATOMIC_RELAXED);
  RETURN_OUT(v);
}

/* ---------------------------------------------------------------- index checks */
static int idx_any(const size_t *mib, size_t pos, size_t i) { return (void)mib, (void)pos, (void)i, 0; }
static int idx_stats_arena(const size_t *mib, size_t pos, size_t i) {
  (void)mib, (void)pos;
  if (__atomic_load_n(&snap_arenas, __ATOMIC_ACQUIRE) == NULL) ctl_refresh();
  return ctl_arena_present(i) ? 0 : ENOENT;
}
static int idx_bin(const size_t *mib, size_t pos, size_t i) { return (void)mib, (void)pos, i < SZ_NSMALL ? 0 : ENOENT; }
static int idx_lext(const size_t *mib, size_t pos, size_t i) { return (void)mib, (void)pos, i < CTL_NLEXT ? 0 : ENOENT; }
static int idx_ext(const size_t *mib, size_t pos, size_t i) { return (void)mib, (void)pos, i < PSZ_N ? 0 : ENOENT; }
static size_t cnt_bins(void) { return SZ_NSMALL; }
static size_t cnt_lext(void) { return CTL_NLEXT; }
static size_t cnt_ext(void) { return PSZ_N; }
static const ctl_index_t I_ARENA = {idx_any, ctl_narenas_total};
static const ctl_index_t I_STATS_ARENA = {idx_stats_arena, ctl_narenas_total};
static const ctl_index_t I_BIN = {idx_bin, cnt_bins};
static const ctl_index_t I_LEXT = {idx_lext, cnt_lext};
static const ctl_index_t I_EXT = {idx_ext, cnt_ext};
static int idx_one(const size_t *mib, size_t pos, size_t i) { return (void)mib, (void)pos, i < 1 ? 0 : ENOENT; }
static size_t cnt_one(void) { return 1; }
static const ctl_index_t I_ONE = {idx_one, cnt_one}; /* hpa_shard.nonfull_slabs: one bucket of zeros */

/* ---------------------------------------------------------------- the table */
#define END {.name = NULL}
#define NKIDS(arr) ((uint16_t)(sizeof(arr) / sizeof(arr[0]) - 1))
#define DIR(nm, arr) {.name = nm, .kids = arr, .nkids = NKIDS(arr)}
#define DIR_COMPAT(nm, arr) {.name = nm, .kids = arr, .nkids = NKIDS(arr), .flags = F_COMPAT}
/* A constant row that is jemalloc's name only (F_COMPAT). */
#define LEAF_COMPAT(nm, T, addr, hp) {.name = nm, .type = T, .src = S_CONST, .ptr = addr, .help = hp, .flags = F_COMPAT}
#define IDX(nm, ix, node) {.name = nm, .ikid = &node, .index = &ix}
#define LEAF_H(nm, T, fn, fl, hp) {.name = nm, .type = T, .src = S_HANDLER, .handler = fn, .flags = fl, .help = hp}
#define LEAF_C(nm, T, addr, hp) {.name = nm, .type = T, .src = S_CONST, .ptr = addr, .help = hp}
#define LEAF_S(nm, T, S, rec, field, fl, hp) \
  {.name = nm, .type = T, .src = S, .off = offsetof(rec, field), .flags = fl, .help = hp}
#define LEAF_G(nm, T, f, fl, hp) LEAF_S(nm, T, S_GLOBAL, ctl_global_stats_t, f, fl, hp)
#define LEAF_A(nm, T, f, fl, hp) LEAF_S(nm, T, S_ARENA, ctl_arena_stats_t, f, fl, hp)
#define LEAF_B(nm, T, f, fl, hp) LEAF_S(nm, T, S_BIN, ctl_bin_stats_t, f, fl, hp)
#define LEAF_L(nm, T, f, fl, hp) LEAF_S(nm, T, S_LEXT, ctl_lext_stats_t, f, fl, hp)
#define LEAF_E(nm, T, f, fl, hp) LEAF_S(nm, T, S_EXT, ctl_ext_stats_t, f, fl, hp)
/* jemalloc's seven mutex profile fields, for a record type and a source. */
#define MUTEX_ROWS(S, rec, pre) \
  LEAF_S("num_ops", CT_U64, S, rec, pre num_ops, F_COUNTER, "lock acquisitions"), \
  LEAF_S("num_wait", CT_U64, S, rec, pre num_wait, F_COUNTER, "acquisitions that slept on the futex"), \
  LEAF_S("num_spin_acq", CT_U64, S, rec, pre num_spin_acq, F_COUNTER, "acquisitions that found the lock taken and got it by spinning"), \
  LEAF_S("num_owner_switch", CT_U64, S, rec, pre num_owner_switch, F_COUNTER, "not kept (always 0)"), \
  LEAF_S("total_wait_time", CT_U64, S, rec, pre total_wait_time, F_COUNTER | F_NS, "not kept (always 0): timing waits costs the fast paths"), \
  LEAF_S("max_wait_time", CT_U64, S, rec, pre max_wait_time, F_NS, "not kept (always 0)"), \
  LEAF_S("max_num_thds", CT_U32, S, rec, pre max_num_thds, 0, "not kept (always 0)"), END
#define C F_COUNTER
#define B F_BYTES
#define P F_PAGES

static const char *const version_str = STRATA_VERSION;
static const char *const str_disabled = "disabled", *const str_empty = "";
static const char *const opt_spo = opt.stats_print_opts, *const opt_sfile = opt.stats_file,
                        *const opt_slabels = opt.stats_labels;
static const bool b_true = true, b_false = false;
#ifdef STRATA_DEBUG
#define B_DEBUG (&b_true)
#else
#define B_DEBUG (&b_false)
#endif
static const uint32_t u32_one = 1;
static const unsigned u_nbins = SZ_NSMALL, u_nlextents = CTL_NLEXT;
static const size_t z_quantum = 16, z_hugepage = (size_t)2 << 20;
static const uint64_t u64_zero = 0; /* CT_SIZE and CT_U64 zeros (both 8 bytes) */

static const ctl_node_t n_config[] = {
    LEAF_C("cache_oblivious", CT_BOOL, &b_false, "large allocations are not offset by a random cache line"),
    LEAF_C("debug", CT_BOOL, B_DEBUG, "built with STRATA_DEBUG assertions"),
    LEAF_C("fill", CT_BOOL, &b_true, "opt.junk and opt.zero are supported"),
    LEAF_C("lazy_lock", CT_BOOL, &b_false, "locks are always taken"),
    LEAF_C("malloc_conf", CT_STR, &str_empty, "built-in options string"),
    LEAF_C("opt_safety_checks", CT_BOOL, &b_true, "frees of anything but a live block's start are reported (docs/hardening.md)"),
    LEAF_C("prof", CT_BOOL, &b_true, "heap profiling built in (always: opt.prof turns it on)"),
    LEAF_C("prof_libgcc", CT_BOOL, &b_false, "profiling backtraces by libgcc"),
    LEAF_C("prof_libunwind", CT_BOOL, &b_false, "profiling backtraces by libunwind"),
    LEAF_C("stats", CT_BOOL, &b_true, "statistics are kept"),
    LEAF_C("utrace", CT_BOOL, &b_false, "utrace(2) tracing"),
    LEAF_C("xmalloc", CT_BOOL, &b_true, "opt.xmalloc is supported"),
    LEAF_C("prof_frameptr", CT_BOOL, &b_false, "profiling backtraces by frame pointers (strata unwinds)"),
    END};

#define NOOP_C(nm, T, addr) LEAF_C(nm, T, addr, "jemalloc option with no effect in strata (docs/jemalloc-compat.md)")
static const char *const opt_sio = opt.stats_interval_opts;
static const char *const str_025 = "0.25", *const str_lazy = "lazy", *const str_default = "default";
static const int64_t i64_600 = 600, i64_m1 = -1;
static const size_t z_6 = 6, z_64k = 65536, z_hpa_thr = 1992294, z_4096 = 4096, z_2 = 2, z_32k = 32768,
                    z_256k = 262144, z_3 = 3;
static const uint64_t u64_10000 = 10000, u64_5000 = 5000;
static const unsigned u_20 = 20, u_0 = 0, u_128 = 128;

static int h_opt_zero_realloc(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                              size_t newlen) {
  (void)mib, (void)miblen;
  READONLY();
  static const char *const names[] = {"free", "alloc", "abort"};
  const char *v = names[opt.zero_realloc];
  RETURN_OUT(v);
}

/* opt.malloc_conf.*: the option strings strata read at start, by source. */
static int h_opt_malloc_conf(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                             size_t newlen) {
  (void)miblen;
  READONLY();
  const char *v = conf_source_string((unsigned)mib[2]);
  RETURN_OUT(v);
}
/* positions = CONF_SRC_* (conf.c) */
static const ctl_node_t n_opt_malloc_conf[] = {
    LEAF_H("symlink", CT_STR, h_opt_malloc_conf, F_NOPRINT, "/etc/strata.conf (strata reads no /etc/malloc.conf link)"),
    LEAF_H("env_var", CT_STR, h_opt_malloc_conf, F_NOPRINT, "MALLOC_CONF as read at start"),
    LEAF_H("global_var", CT_STR, h_opt_malloc_conf, F_NOPRINT, "the program's malloc_conf"),
    LEAF_H("global_var_2_conf_harder", CT_STR, h_opt_malloc_conf, F_NOPRINT, "the program's malloc_conf_2_conf_harder"),
    END};

static const ctl_node_t n_opt[] = {
    LEAF_C("abort", CT_BOOL, &opt.abort, "abort on warnings"),
    LEAF_C("abort_conf", CT_BOOL, &opt.abort_conf, "abort on invalid options"),
    LEAF_C("cache_oblivious", CT_BOOL, &b_false, "see config.cache_oblivious"),
    LEAF_C("confirm_conf", CT_BOOL, &opt.confirm_conf, "print the options at start"),
    LEAF_C("retain", CT_BOOL, &opt.retain, "keep address space of purged extents"),
    LEAF_C("arena_spread", CT_BOOL, &opt.arena_spread, "threads share arenas until lock contention opens more (strata)"),
    LEAF_C("tiny_class", CT_BOOL, &opt.tiny_class, "requests of 0..8 bytes get 8-byte blocks (strata)"),
    LEAF_C("dss", CT_STR, &str_disabled, "sbrk precedence: strata never uses sbrk"),
    LEAF_C("narenas", CT_UNSIGNED, &narenas, "ordinary arenas"),
    LEAF_C("percpu_arena", CT_STR, &str_disabled, "per-CPU arenas: not used"),
    LEAF_C("oversize_threshold", CT_SIZE, &opt.oversize_threshold, "size from which the oversize arena serves"),
    LEAF_H("metadata_thp", CT_STR, ctl_opt_metadata_thp, 0, "transparent huge pages for metadata"),
    LEAF_H("thp", CT_STR, ctl_opt_thp, 0, "transparent huge pages for extents"),
    LEAF_H("dirty_decay_ms", CT_SSIZE, ctl_opt_dirty_decay_ms, 0, "dirty page decay time"),
    LEAF_H("muzzy_decay_ms", CT_SSIZE, ctl_opt_muzzy_decay_ms, 0, "muzzy page decay time"),
    LEAF_H("background_thread", CT_BOOL, ctl_opt_background_thread, 0, "background purging threads at start"),
    LEAF_H("max_background_threads", CT_SIZE, ctl_opt_max_background_threads, 0, "most background threads"),
    LEAF_H("limit_headroom", CT_SIZE, ctl_opt_limit_headroom, 0, "bytes under the cgroup limit where purging starts (strata)"),
    LEAF_H("soft_limit", CT_SIZE, ctl_opt_soft_limit, 0, "resident bytes past which everything free is purged, 0 none (strata)"),
    LEAF_H("hard_limit", CT_SIZE, ctl_opt_hard_limit, 0, "committed bytes allocations may not pass, 0 none (strata)"),
    LEAF_H("pressure_purge", CT_BOOL, ctl_opt_pressure_purge, 0, "purge at once on kernel memory pressure (strata)"),
    LEAF_H("guard_sample_interval", CT_SIZE, guard_ctl_sample_interval, 0, "1 in N fresh allocations guarded, 0 off (strata)"),
    LEAF_H("tcache_total_max", CT_SIZE, tcache_ctl_total_max, 0, "bytes all thread caches may hold together, 0 no cap (strata)"),
    LEAF_H("prof", CT_BOOL, prof_ctl_opt_prof, 0, "heap profiling"),
    LEAF_H("prof_active", CT_BOOL, prof_ctl_opt_prof_active, 0, "sampling active at start"),
    LEAF_H("prof_thread_active_init", CT_BOOL, prof_ctl_opt_thread_active_init, 0, "sampling active for new threads"),
    LEAF_H("lg_prof_sample", CT_SIZE, prof_ctl_opt_lg_sample, 0, "mean bytes between samples, log2"),
    LEAF_H("prof_prefix", CT_STR, prof_ctl_opt_prefix, 0, "dump file prefix"),
    LEAF_H("lg_prof_interval", CT_SSIZE, prof_ctl_opt_lg_interval, 0, "a dump every 2^N bytes allocated, -1 none"),
    LEAF_H("prof_gdump", CT_BOOL, prof_ctl_opt_gdump, 0, "a dump at each new high-water mark"),
    LEAF_H("prof_final", CT_BOOL, prof_ctl_opt_final, 0, "a dump at exit"),
    LEAF_H("prof_leak", CT_BOOL, prof_ctl_opt_leak, 0, "a leak summary at exit"),
    LEAF_H("prof_accum", CT_BOOL, prof_ctl_opt_accum, 0, "accumulated counts in dumps"),
    LEAF_H("junk", CT_STR, h_opt_junk, 0, "junk filling"),
    LEAF_C("zero", CT_BOOL, &opt.zero, "zero every allocation"),
    LEAF_C("experimental_infallible_new", CT_BOOL, &opt.infallible_new, "abort when operator new fails"),
    LEAF_C("tcache", CT_BOOL, &opt.tcache, "thread caches"),
    LEAF_C("tcache_max", CT_SIZE, &opt.tcache_max, "largest size class cached per thread"),
    LEAF_C("tcache_nslots_small_min", CT_UNSIGNED, &opt.tcache_nslots_small_min, "fewest slots a small class's bin starts with"),
    LEAF_C("tcache_nslots_small_max", CT_UNSIGNED, &opt.tcache_nslots_small_max, "most slots a small class's bin starts with"),
    LEAF_C("lg_tcache_nslots_mul", CT_SSIZE, &opt.lg_tcache_nslots_mul, "a small bin starts with its slab's regions << N"),
    LEAF_C("lg_tcache_flush_small_div", CT_UNSIGNED, &opt.lg_tcache_flush_small_div, "a small bin's overflow keeps capacity >> N"),
    LEAF_C("lg_tcache_flush_large_div", CT_UNSIGNED, &opt.lg_tcache_flush_large_div, "a large bin's overflow keeps capacity >> N"),
    LEAF_C("tcache_gc_incr_bytes", CT_SIZE, &opt.tcache_gc_incr_bytes, "uncached bytes allocated between GC visits"),
    LEAF_C("stats_print", CT_BOOL, &opt.stats_print, "malloc_stats_print at exit"),
    LEAF_C("stats_print_opts", CT_STR, &opt_spo, "options of the print at exit"),
    LEAF_H("zero_realloc", CT_STR, h_opt_zero_realloc, 0, "what realloc(p, 0) does: free, alloc, abort"),
    LEAF_C("xmalloc", CT_BOOL, &opt.xmalloc, "abort on out-of-memory"),
    LEAF_C("stats_interval", CT_SSIZE, &opt.stats_interval, "bytes allocated between statistics prints, -1 off"),
    LEAF_C("stats_interval_opts", CT_STR, &opt_sio, "options of the interval prints"),
    LEAF_H("prof_leak_error", CT_BOOL, prof_ctl_opt_leak_error, 0, "exit 1 when prof_leak finds leaks"),
    /* jemalloc's options with no effect in strata (docs/jemalloc-compat.md): jemalloc's
     * type and default, so that readers get what they expect. */
    NOOP_C("trust_madvise", CT_BOOL, &b_false), NOOP_C("utrace", CT_BOOL, &b_false),
    NOOP_C("mutex_max_spin", CT_SSIZE, &i64_600), NOOP_C("lg_extent_max_active_fit", CT_SIZE, &z_6),
    NOOP_C("hpa", CT_BOOL, &b_false), NOOP_C("hpa_slab_max_alloc", CT_SIZE, &z_64k),
    NOOP_C("hpa_hugification_threshold", CT_SIZE, &z_hpa_thr), NOOP_C("hpa_hugify_delay_ms", CT_U64, &u64_10000),
    NOOP_C("hpa_hugify_sync", CT_BOOL, &b_false), NOOP_C("hpa_min_purge_interval_ms", CT_U64, &u64_5000),
    NOOP_C("experimental_hpa_max_purge_nhp", CT_SSIZE, &i64_m1), NOOP_C("hpa_dirty_mult", CT_STR, &str_025),
    NOOP_C("hpa_purge_threshold", CT_SIZE, &z_4096), NOOP_C("hpa_min_purge_delay_ms", CT_U64, &u64_zero),
    NOOP_C("hpa_hugify_style", CT_STR, &str_lazy), NOOP_C("hpa_sec_nshards", CT_SIZE, &z_2),
    NOOP_C("hpa_sec_max_alloc", CT_SIZE, &z_32k), NOOP_C("hpa_sec_max_bytes", CT_SIZE, &z_256k),
    NOOP_C("hpa_sec_batch_fill_extra", CT_SIZE, &z_3), NOOP_C("hpa_sec_bytes_after_flush", CT_SIZE, &z_256k),
    NOOP_C("experimental_hpa_start_huge_if_thp_always", CT_BOOL, &b_true),
    NOOP_C("experimental_hpa_enforce_hugify", CT_BOOL, &b_false), NOOP_C("huge_arena_pac_thp", CT_BOOL, &b_false),
    NOOP_C("experimental_tcache_gc", CT_BOOL, &b_true), NOOP_C("tcache_nslots_large", CT_UNSIGNED, &u_20),
    NOOP_C("tcache_gc_delay_bytes", CT_SIZE, &u64_zero),
    NOOP_C("debug_double_free_max_scan", CT_UNSIGNED, &u_0),
    NOOP_C("disable_large_size_classes", CT_BOOL, &b_true), NOOP_C("process_madvise_max_batch", CT_SIZE, &u64_zero),
    NOOP_C("prof_bt_max", CT_UNSIGNED, &u_128), NOOP_C("prof_pid_namespace", CT_BOOL, &b_false),
    NOOP_C("prof_recent_alloc_max", CT_SSIZE, &i64_m1), NOOP_C("prof_stats", CT_BOOL, &b_false),
    NOOP_C("prof_sys_thread_name", CT_BOOL, &b_false), NOOP_C("prof_time_resolution", CT_STR, &str_default),
    NOOP_C("lg_san_uaf_align", CT_SSIZE, &i64_m1),
    {.name = "malloc_conf", .kids = n_opt_malloc_conf, .nkids = NKIDS(n_opt_malloc_conf), .flags = F_NOPRINT},
    LEAF_C("stats_file", CT_STR, &opt_sfile, "OpenMetrics textfile (strata)"),
    LEAF_C("stats_labels", CT_STR, &opt_slabels, "extra labels of stats_file series, name=value;... (strata)"),
    LEAF_C("stats_interval_ms", CT_U64, &opt.stats_interval_ms, "rewrite period of stats_file (strata)"),
    LEAF_C("stats_metrics_detail", CT_BOOL, &opt.stats_metrics_detail, "per-arena and per-class series (strata)"),
    END};

static const ctl_node_t n_thread_ncached_max[] = {
    LEAF_H("read_sizeclass", CT_SIZE, compat_ncached_max_read, F_NOPRINT, "blocks of a size's class the cache holds"),
    LEAF_H("write", CT_STR, compat_ncached_max_write, F_NOPRINT, "per-class limits (accepted, no effect)"),
    END};
static const ctl_node_t n_thread_tcache[] = {
    LEAF_H("enabled", CT_BOOL, h_tcache_enabled, F_NOPRINT, "this thread's cache is on"),
    LEAF_H("flush", CT_VOID, h_tcache_flush, F_NOPRINT, "flush this thread's cache"),
    LEAF_H("max", CT_SIZE, compat_thread_tcache_max, F_NOPRINT, "largest cached size (per process in strata)"),
    DIR("ncached_max", n_thread_ncached_max),
    END};
static const ctl_node_t n_thread_peak[] = {
    LEAF_H("read", CT_U64, compat_thread_peak_read, F_NOPRINT, "highest net bytes seen since the last reset"),
    LEAF_H("reset", CT_VOID, compat_thread_peak_reset, F_NOPRINT, "start a new peak"),
    END};
static const ctl_node_t n_thread_prof[] = {
    LEAF_H("name", CT_STR, prof_ctl_thread_name, F_NOPRINT, "this thread's name in heap profiles"),
    LEAF_H("active", CT_BOOL, prof_ctl_thread_active, F_NOPRINT, "sampling on for this thread"),
    END};
/* thread.allocated and thread.deallocated are positions 1 and 2: h_thread_counts tells
 * them apart by mib[1]. */
static const ctl_node_t n_thread[] = {
    LEAF_H("arena", CT_UNSIGNED, au_thread_arena, F_NOPRINT, "this thread's arena (read binds, write moves)"),
    LEAF_H("allocated", CT_U64, h_thread_counts, F_NOPRINT, "bytes this thread allocated"),
    LEAF_H("deallocated", CT_U64, h_thread_counts, F_NOPRINT, "bytes this thread freed"),
    DIR("tcache", n_thread_tcache),
    LEAF_H("idle", CT_VOID, h_thread_idle, F_NOPRINT, "flush the cache and purge what decay allows"),
    DIR("prof", n_thread_prof),
    LEAF_H("allocatedp", CT_VOID, hooks_ctl_thread_countp, F_NOPRINT, "pointer to this thread's allocated bytes (uint64_t *)"),
    LEAF_H("deallocatedp", CT_VOID, hooks_ctl_thread_countp, F_NOPRINT, "pointer to this thread's freed bytes (uint64_t *)"),
    DIR("peak", n_thread_peak),
    END};
_Static_assert(CTL_THREAD_ALLOCATEDP == 6, "thread.allocatedp's position");

static const ctl_node_t n_arena_i_kids[] = {
    LEAF_H("initialized", CT_BOOL, au_arena_initialized, F_NOPRINT, "the arena exists"),
    LEAF_H("reset", CT_VOID, au_arena_reset, F_NOPRINT, "free everything a user arena holds"),
    LEAF_H("destroy", CT_VOID, au_arena_destroy, F_NOPRINT, "reset a user arena and return its index"),
    LEAF_H("extent_hooks", CT_VOID, au_arena_extent_hooks, F_NOPRINT, "the arena's page source (extent_hooks_t *)"),
    LEAF_H("purge", CT_VOID, ctl_arena_purge, F_NOPRINT, "purge every dirty and muzzy page (4096 or arenas.narenas: all arenas)"),
    LEAF_H("decay", CT_VOID, ctl_arena_decay, F_NOPRINT, "purge what the decay curve allows now"),
    LEAF_H("dirty_decay_ms", CT_SSIZE, ctl_arena_dirty_decay_ms, F_NOPRINT, "this arena's dirty decay time"),
    LEAF_H("muzzy_decay_ms", CT_SSIZE, ctl_arena_muzzy_decay_ms, F_NOPRINT, "this arena's muzzy decay time"),
    LEAF_H("dss", CT_STR, hooks_ctl_arena_dss, F_NOPRINT, "sbrk precedence: always disabled"),
    LEAF_H("oversize_threshold", CT_SIZE, compat_arena_oversize_threshold, F_NOPRINT, "opt.oversize_threshold (per process)"),
    LEAF_H("retain_grow_limit", CT_SIZE, compat_arena_retain_grow_limit, F_NOPRINT, "largest growth of retained space"),
    LEAF_H("name", CT_STR, compat_arena_name, F_NOPRINT, "the arena's name"),
    END};
static const ctl_node_t n_arena_i = DIR("<i>", n_arena_i_kids);

static const ctl_node_t n_bin_j_kids[] = {
    LEAF_S("size", CT_SIZE, S_BININFO, bin_info_t, size, B, "region size"),
    LEAF_S("nregs", CT_U32, S_BININFO, bin_info_t, nregs, 0, "regions per slab"),
    LEAF_S("slab_size", CT_SIZE, S_BININFO, bin_info_t, slab_size, B, "bytes per slab"),
    LEAF_C("nshards", CT_U32, &u32_one, "bin shards per arena"),
    END};
static const ctl_node_t n_bin_j = DIR("<j>", n_bin_j_kids);
static const ctl_node_t n_lextent_j_kids[] = {
    LEAF_H("size", CT_SIZE, h_lextent_size, B, "large size class"),
    END};
static const ctl_node_t n_lextent_j = DIR("<j>", n_lextent_j_kids);
static const ctl_node_t n_arenas[] = {
    LEAF_H("narenas", CT_UNSIGNED, h_arenas_narenas, 0, "arenas, the oversize arena included"),
    LEAF_H("nlive", CT_UNSIGNED, arena_ctl_nlive, 0, "ordinary arenas threads are spread over now (strata)"),
    LEAF_C("quantum", CT_SIZE, &z_quantum, "quantum"),
    LEAF_C("page", CT_SIZE, &os_page, "page size"),
    LEAF_C("hugepage", CT_SIZE, &z_hugepage, "huge page size"),
    LEAF_H("tcache_max", CT_SIZE, h_arenas_tcache_max, 0, "largest cached size class"),
    LEAF_C("nbins", CT_UNSIGNED, &u_nbins, "small size classes"),
    LEAF_H("nhbins", CT_UNSIGNED, h_arenas_nhbins, 0, "cached size classes"),
    IDX("bin", I_BIN, n_bin_j),
    LEAF_C("nlextents", CT_UNSIGNED, &u_nlextents, "large size classes"),
    IDX("lextent", I_LEXT, n_lextent_j),
    LEAF_H("lookup", CT_UNSIGNED, h_arenas_lookup, F_NOPRINT, "arena owning a pointer"),
    LEAF_H("create", CT_UNSIGNED, au_arenas_create, F_NOPRINT, "make a user arena (optionally with extent hooks)"),
    LEAF_H("dirty_decay_ms", CT_SSIZE, ctl_arenas_dirty_decay_ms, 0, "dirty decay time of arenas made from now on"),
    LEAF_H("muzzy_decay_ms", CT_SSIZE, ctl_arenas_muzzy_decay_ms, 0, "muzzy decay time of arenas made from now on"),
    END};
static const ctl_node_t n_prof[] = {
    LEAF_H("active", CT_BOOL, prof_ctl_active, F_NOPRINT, "sampling on"),
    LEAF_H("dump", CT_STR, prof_ctl_dump, F_NOPRINT, "write a heap profile (a path, or NULL for the next default name)"),
    LEAF_H("dump_request", CT_VOID, prof_ctl_dump_request, F_NOPRINT, "ask the dump thread for the next prof_signal dump, without waiting (strata)"),
    LEAF_H("gdump", CT_BOOL, prof_ctl_gdump, F_NOPRINT, "a dump at each new high-water mark"),
    LEAF_H("reset", CT_SIZE, prof_ctl_reset, F_NOPRINT, "forget every sample (optionally a new lg_sample)"),
    LEAF_H("lg_sample", CT_SIZE, prof_ctl_lg_sample, F_NOPRINT, "mean bytes between samples, log2"),
    LEAF_H("interval", CT_U64, prof_ctl_interval, F_NOPRINT, "bytes between interval dumps"),
    LEAF_H("thread_active_init", CT_BOOL, prof_ctl_thread_active_init, F_NOPRINT, "sampling on for threads made from now on"),
    LEAF_H("prefix", CT_STR, prof_ctl_prefix, F_NOPRINT, "dump file prefix from now on (write-only)"),
    LEAF_H("log_start", CT_STR, prof_ctl_log, F_NOPRINT, "allocation log (not kept: EFAULT)"),
    LEAF_H("log_stop", CT_VOID, prof_ctl_log, F_NOPRINT, "allocation log (not kept: EFAULT)"),
    END};
static const ctl_node_t n_tcache[] = {
    LEAF_H("create", CT_UNSIGNED, au_tcache_create, F_NOPRINT, "make an explicit cache (MALLOCX_TCACHE)"),
    LEAF_H("flush", CT_VOID, au_tcache_flush, F_NOPRINT, "flush an explicit cache"),
    LEAF_H("destroy", CT_VOID, au_tcache_destroy, F_NOPRINT, "flush and free an explicit cache"),
    END};

static const ctl_node_t n_class_small[] = {
    LEAF_A("allocated", CT_SIZE, small.allocated, B, "bytes in small regions handed out"),
    LEAF_A("nmalloc", CT_U64, small.nmalloc, C, "small regions taken from bins"),
    LEAF_A("ndalloc", CT_U64, small.ndalloc, C, "small regions returned to bins"),
    LEAF_A("nrequests", CT_U64, small.nrequests, C, "small allocation requests"),
    LEAF_A("nfills", CT_U64, small.nfills, C, "thread cache fills"),
    LEAF_A("nflushes", CT_U64, small.nflushes, C, "thread cache flushes"),
    END};
static const ctl_node_t n_class_large[] = {
    LEAF_A("allocated", CT_SIZE, large.allocated, B, "bytes in large extents handed out"),
    LEAF_A("nmalloc", CT_U64, large.nmalloc, C, "large extents allocated"),
    LEAF_A("ndalloc", CT_U64, large.ndalloc, C, "large extents freed"),
    LEAF_A("nrequests", CT_U64, large.nrequests, C, "large allocation requests"),
    LEAF_A("nfills", CT_U64, large.nfills, C, "thread cache fills of large classes"),
    LEAF_A("nflushes", CT_U64, large.nflushes, C, "thread cache flushes of large classes"),
    END};
static const ctl_node_t n_bin_mutex[] = {MUTEX_ROWS(S_BIN, ctl_bin_stats_t, mutex.)};
static const ctl_node_t n_amutex_fields[] = {MUTEX_ROWS(S_AMUTEX, ctl_mutex_stats_t, )};
static const ctl_node_t n_gmutex_fields[] = {MUTEX_ROWS(S_GMUTEX, ctl_mutex_stats_t, )};
/* stats.arenas.<i>.mutexes.<name>: position = index in ctl_arena_stats_t.mutexes */
static const ctl_node_t n_amutexes[] = {
    DIR("extents", n_amutex_fields), DIR_COMPAT("large", n_amutex_fields), DIR_COMPAT("extent_avail", n_amutex_fields),
    DIR_COMPAT("extents_dirty", n_amutex_fields), DIR_COMPAT("extents_muzzy", n_amutex_fields),
    DIR_COMPAT("extents_retained", n_amutex_fields), DIR_COMPAT("decay_dirty", n_amutex_fields),
    DIR_COMPAT("decay_muzzy", n_amutex_fields), DIR_COMPAT("base", n_amutex_fields), DIR_COMPAT("tcache_list", n_amutex_fields),
    DIR_COMPAT("hpa_shard", n_amutex_fields), DIR_COMPAT("hpa_shard_grow", n_amutex_fields), DIR_COMPAT("hpa_sec", n_amutex_fields),
    END};
_Static_assert(sizeof(amutex_slot) == NKIDS(n_amutexes), "a slot per stats.arenas.<i>.mutexes row");
/* stats.mutexes.<name>: position = GM_* */
static const ctl_node_t n_gmutexes[] = {
    DIR("ctl", n_gmutex_fields), DIR("arenas", n_gmutex_fields), DIR("tcache_list", n_gmutex_fields),
    DIR("base", n_gmutex_fields), DIR("rtree", n_gmutex_fields),
    DIR("background_thread", n_gmutex_fields), /* bg_lock: creating, toggling, joining the threads */
    DIR("prof", n_gmutex_fields),              /* prof_lock: samples, sampled frees, dumps' copies */
    DIR_COMPAT("max_per_bg_thd", n_gmutex_fields), DIR_COMPAT("prof_thds_data", n_gmutex_fields),
    DIR_COMPAT("prof_dump", n_gmutex_fields), DIR_COMPAT("prof_recent_alloc", n_gmutex_fields),
    DIR_COMPAT("prof_recent_dump", n_gmutex_fields), DIR_COMPAT("prof_stats", n_gmutex_fields),
    LEAF_H("reset", CT_VOID, h_mutexes_reset, F_NOPRINT, "zero every mutex profile"), END};
static const ctl_node_t n_sbin_j_kids[] = {
    LEAF_B("nmalloc", CT_U64, nmalloc, C, "regions taken from the bin"),
    LEAF_B("ndalloc", CT_U64, ndalloc, C, "regions returned to the bin"),
    LEAF_B("nrequests", CT_U64, nrequests, C, "allocation requests, thread cache hits included"),
    LEAF_B("curregs", CT_SIZE, curregs, 0, "regions handed out"),
    LEAF_B("nfills", CT_U64, nfills, C, "thread cache fills"),
    LEAF_B("nflushes", CT_U64, nflushes, C, "thread cache flushes"),
    LEAF_B("nslabs", CT_U64, nslabs, C, "slabs created"),
    LEAF_B("nreslabs", CT_U64, nreslabs, C, "times the current slab changed"),
    LEAF_B("curslabs", CT_SIZE, curslabs, 0, "slabs"),
    LEAF_B("nonfull_slabs", CT_SIZE, nonfull_slabs, 0, "slabs neither full nor current"),
    DIR("mutex", n_bin_mutex),
    END};
static const ctl_node_t n_sbin_j = DIR("<j>", n_sbin_j_kids);
static const ctl_node_t n_slext_j_kids[] = {
    LEAF_L("nmalloc", CT_U64, nmalloc, C, "extents of this class allocated"),
    LEAF_L("ndalloc", CT_U64, ndalloc, C, "extents of this class freed"),
    LEAF_L("nrequests", CT_U64, nrequests, C, "requests of this class"),
    LEAF_L("curlextents", CT_SIZE, curlextents, 0, "extents of this class in use"),
    END};
static const ctl_node_t n_slext_j = DIR("<j>", n_slext_j_kids);
static const ctl_node_t n_sext_j_kids[] = {
    LEAF_E("ndirty", CT_SIZE, ndirty, 0, "dirty free extents in this page bucket"),
    LEAF_E("nmuzzy", CT_SIZE, nmuzzy, 0, "muzzy free extents"),
    LEAF_E("nretained", CT_SIZE, nretained, 0, "retained extents in this page bucket"),
    LEAF_E("dirty_bytes", CT_SIZE, dirty_bytes, B, "bytes of dirty extents"),
    LEAF_E("muzzy_bytes", CT_SIZE, muzzy_bytes, B, "bytes of muzzy extents"),
    LEAF_E("retained_bytes", CT_SIZE, retained_bytes, B, "bytes of retained extents"),
    END};
static const ctl_node_t n_sext_j = DIR("<j>", n_sext_j_kids);
/* stats.arenas.<i>.hpa_shard: jemalloc's hugepage allocator, which strata does not have
 * (opt.hpa is false): every figure is 0, as jemalloc's own with hpa:false. */
#define HPA_SLAB_ROWS \
  LEAF_C("npageslabs_nonhuge", CT_SIZE, &u64_zero, "hugepage slabs (no HPA: 0)"), \
  LEAF_C("npageslabs_huge", CT_SIZE, &u64_zero, "hugepage slabs (no HPA: 0)"), \
  LEAF_C("nactive_nonhuge", CT_SIZE, &u64_zero, "no HPA: 0"), LEAF_C("nactive_huge", CT_SIZE, &u64_zero, "no HPA: 0"), \
  LEAF_C("ndirty_nonhuge", CT_SIZE, &u64_zero, "no HPA: 0"), LEAF_C("ndirty_huge", CT_SIZE, &u64_zero, "no HPA: 0"), \
  LEAF_C("nretained_nonhuge", CT_SIZE, &u64_zero, "no HPA: 0"), END
static const ctl_node_t n_hpa_slabs[] = {HPA_SLAB_ROWS};
static const ctl_node_t n_hpa_nonfull_j = DIR("<j>", n_hpa_slabs);
static const ctl_node_t n_hpa_shard[] = {
    LEAF_COMPAT("sec_bytes", CT_SIZE, &u64_zero, "small extent cache bytes (no HPA: 0)"),
    LEAF_COMPAT("sec_hits", CT_U64, &u64_zero, "no HPA: 0"), LEAF_COMPAT("sec_misses", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("sec_dalloc_noflush", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("sec_dalloc_flush", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("sec_overfills", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("npageslabs", CT_SIZE, &u64_zero, "no HPA: 0"), LEAF_COMPAT("nactive", CT_SIZE, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("ndirty", CT_SIZE, &u64_zero, "no HPA: 0"), LEAF_COMPAT("npurge_passes", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("npurges", CT_U64, &u64_zero, "no HPA: 0"), LEAF_COMPAT("nhugifies", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("nhugify_failures", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("ndehugifies", CT_U64, &u64_zero, "no HPA: 0"),
    DIR("slabs", n_hpa_slabs), DIR("full_slabs", n_hpa_slabs), DIR("empty_slabs", n_hpa_slabs),
    IDX("nonfull_slabs", I_ONE, n_hpa_nonfull_j),
    END};
static const ctl_node_t n_sarena_i_kids[] = {
    LEAF_A("nthreads", CT_UNSIGNED, nthreads, 0, "threads bound"),
    {.name = "uptime", .type = CT_U64, .src = S_ARENA, .off = offsetof(ctl_arena_stats_t, uptime),
     .flags = F_NS, .help = "time since the arena was created", .jname = "uptime_ns"},
    LEAF_C("dss", CT_STR, &str_disabled, "sbrk precedence"),
    LEAF_A("dirty_decay_ms", CT_SSIZE, dirty_decay_ms, 0, "dirty decay time"),
    LEAF_A("muzzy_decay_ms", CT_SSIZE, muzzy_decay_ms, 0, "muzzy decay time"),
    LEAF_A("pactive", CT_SIZE, pactive, P, "pages in active extents"),
    LEAF_A("pdirty", CT_SIZE, pdirty, P, "pages in dirty extents"),
    LEAF_A("pmuzzy", CT_SIZE, pmuzzy, P, "pages in muzzy extents (MADV_FREE, still counted resident)"),
    LEAF_A("dirty_npurge", CT_U64, dirty_npurge, C, "dirty purge passes"),
    LEAF_A("dirty_nmadvise", CT_U64, dirty_nmadvise, C, "madvise or munmap calls purging dirty pages"),
    LEAF_A("dirty_purged", CT_U64, dirty_purged, C | P, "pages purged from dirty extents"),
    LEAF_A("muzzy_npurge", CT_U64, muzzy_npurge, C, "muzzy purge passes (counted with dirty_npurge)"),
    LEAF_A("muzzy_nmadvise", CT_U64, muzzy_nmadvise, C, "muzzy madvise calls (counted with dirty_nmadvise)"),
    LEAF_A("muzzy_purged", CT_U64, muzzy_purged, C | P, "pages purged from muzzy extents (counted with dirty_purged)"),
    DIR("small", n_class_small),
    DIR("large", n_class_large),
    LEAF_A("mapped", CT_SIZE, mapped, B, "bytes mapped, retained excluded"),
    LEAF_A("retained", CT_SIZE, retained, B, "bytes of address space kept without memory"),
    LEAF_A("base", CT_SIZE, base, B, "metadata bytes (one pool: merged record only)"),
    LEAF_A("internal", CT_SIZE, internal, B, "internal allocations (none)"),
    LEAF_A("metadata_thp", CT_SIZE, metadata_thp, B, "metadata on huge pages (none)"),
    LEAF_A("tcache_bytes", CT_SIZE, tcache_bytes, B, "bytes cached in thread caches"),
    LEAF_A("tcache_stashed_bytes", CT_SIZE, tcache_stashed_bytes, B, "stashed cache bytes (none)"),
    LEAF_A("resident", CT_SIZE, resident, B, "resident bytes: active, dirty and metadata pages"),
    LEAF_A("abandoned_vm", CT_SIZE, abandoned_vm, B, "leaked address space (none)"),
    LEAF_A("extent_avail", CT_SIZE, extent_avail, 0, "spare extent structures"),
    LEAF_H("name", CT_STR, compat_arena_name, 0, "the arena's name"),
    LEAF_COMPAT("sec_bytes", CT_SIZE, &u64_zero, "jemalloc 5.3.0's name of hpa_sec_bytes: 0"),
    LEAF_COMPAT("hpa_sec_bytes", CT_SIZE, &u64_zero, "no HPA: 0"), LEAF_COMPAT("hpa_sec_hits", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("hpa_sec_misses", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("hpa_sec_dalloc_noflush", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("hpa_sec_dalloc_flush", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("hpa_sec_overfills", CT_U64, &u64_zero, "no HPA: 0"),
    LEAF_COMPAT("metadata_edata", CT_SIZE, &u64_zero, "not kept apart: see base"),
    LEAF_COMPAT("metadata_rtree", CT_SIZE, &u64_zero, "not kept apart: see base"),
    DIR_COMPAT("hpa_shard", n_hpa_shard),
    DIR("mutexes", n_amutexes),
    IDX("bins", I_BIN, n_sbin_j),
    IDX("lextents", I_LEXT, n_slext_j),
    IDX("extents", I_EXT, n_sext_j),
    END};
static const ctl_node_t n_sarena_i = DIR("<i>", n_sarena_i_kids);

static const ctl_node_t n_sbg[] = {
    LEAF_H("num_threads", CT_SIZE, ctl_stats_bg_num_threads, 0, "background threads running"),
    LEAF_H("num_runs", CT_U64, ctl_stats_bg_num_runs, F_COUNTER, "background thread wake-ups"),
    LEAF_H("run_interval", CT_U64, ctl_stats_bg_run_interval, F_NS, "mean time between wake-ups"),
    END};
static const ctl_node_t n_sguard[] = {
    LEAF_H("allocs", CT_U64, guard_ctl_allocs, F_COUNTER, "guarded allocations made (strata)"),
    END};
static const ctl_node_t n_stats[] = {
    LEAF_G("allocated", CT_SIZE, allocated, B, "bytes allocated by the application"),
    LEAF_G("active", CT_SIZE, active, B, "bytes in active pages"),
    LEAF_G("metadata", CT_SIZE, metadata, B, "bytes of allocator metadata"),
    LEAF_G("metadata_thp", CT_SIZE, metadata_thp, B, "metadata on huge pages"),
    LEAF_G("resident", CT_SIZE, resident, B, "bytes in resident pages"),
    LEAF_G("mapped", CT_SIZE, mapped, B, "bytes mapped, retained excluded"),
    LEAF_G("retained", CT_SIZE, retained, B, "bytes of address space kept without memory"),
    LEAF_COMPAT("metadata_edata", CT_SIZE, &u64_zero, "not kept apart: see metadata"),
    LEAF_COMPAT("metadata_rtree", CT_SIZE, &u64_zero, "not kept apart: see metadata"),
    LEAF_H("zero_reallocs", CT_SIZE, h_zero_reallocs, F_COUNTER, "realloc(p, 0) calls (live)"),
    DIR("background_thread", n_sbg),
    DIR("guard", n_sguard),
    LEAF_H("tcache_bytes", CT_SIZE, tcache_ctl_bytes, F_BYTES, "bytes all thread caches hold, as last published (live, strata)"),
    LEAF_H("mem_limit", CT_U64, ctl_stats_mem_limit, F_BYTES, "cgroup memory limit strata sees, 0 if none (strata)"),
    LEAF_H("mem_limit_purges", CT_U64, ctl_stats_mem_limit_purges, F_COUNTER, "purges of every arena near the limit (strata)"),
    LEAF_H("soft_limit", CT_U64, ctl_stats_soft_limit, F_BYTES, "soft limit in force, 0 if none (strata)"),
    LEAF_H("hard_limit", CT_U64, ctl_stats_hard_limit, F_BYTES, "hard limit in force, 0 if none (strata)"),
    LEAF_H("soft_limit_purges", CT_U64, ctl_stats_soft_limit_purges, F_COUNTER, "purges of every arena past the soft limit (strata)"),
    LEAF_H("hard_limit_refusals", CT_U64, ctl_stats_hard_limit_refusals, F_COUNTER, "page commits the hard limit refused (strata)"),
    LEAF_H("pressure_watched", CT_BOOL, ctl_stats_pressure_watched, 0, "the kernel's memory pressure is watched (strata)"),
    LEAF_H("pressure_events", CT_U64, ctl_stats_pressure_events, F_COUNTER, "memory pressure reports from the kernel (strata)"),
    LEAF_H("pressure_purged", CT_U64, ctl_stats_pressure_purged, F_COUNTER | F_BYTES, "bytes purged on memory pressure (strata)"),
    LEAF_H("events_fired", CT_U64, ctl_stats_events_fired, F_COUNTER, "event callbacks run (strata)"),
    IDX("arenas", I_STATS_ARENA, n_sarena_i),
    DIR("mutexes", n_gmutexes),
    END};

static const ctl_node_t n_exp_hooks[] = {
    LEAF_H("install", CT_VOID, hooks_ctl_install, F_NOPRINT, "install allocation hooks (hooks_t in, handle out)"),
    LEAF_H("remove", CT_VOID, hooks_ctl_remove, F_NOPRINT, "remove allocation hooks by handle"),
    LEAF_H("safety_check_abort", CT_VOID, hooks_ctl_safety_check_abort, F_NOPRINT,
           "function called with the message of a failed safety check, before the abort"),
    LEAF_H("prof_backtrace", CT_VOID, compat_prof_hook, F_NOPRINT, "profiler hook point (none in strata)"),
    LEAF_H("prof_dump", CT_VOID, compat_prof_hook, F_NOPRINT, "profiler hook point (none in strata)"),
    LEAF_H("prof_sample", CT_VOID, compat_prof_hook, F_NOPRINT, "profiler hook point (none in strata)"),
    LEAF_H("prof_sample_free", CT_VOID, compat_prof_hook, F_NOPRINT, "profiler hook point (none in strata)"),
    LEAF_H("thread_event", CT_VOID, compat_thread_event_hook, F_NOPRINT, "per-thread event hook (EINVAL)"),
    END};
static const ctl_node_t n_exp_arena_i_kids[] = {
    LEAF_H("pactivep", CT_VOID, compat_arena_pactivep, F_NOPRINT, "pointer to the arena's active pages (size_t *)"),
    END};
static const ctl_node_t n_exp_arena_i = DIR("<i>", n_exp_arena_i_kids);
static const ctl_node_t n_exp_prof_recent[] = {
    LEAF_H("alloc_max", CT_SSIZE, compat_prof_recent, F_NOPRINT, "recent allocations kept (none: -1)"),
    LEAF_H("alloc_dump", CT_VOID, compat_prof_recent, F_NOPRINT, "not kept: EFAULT"),
    END};
static const ctl_node_t n_exp_util[] = {
    LEAF_H("query", CT_VOID, compat_utilization_query, F_NOPRINT, "how full a pointer's extent and bin are"),
    LEAF_H("batch_query", CT_VOID, compat_utilization_batch_query, F_NOPRINT, "how full each pointer's extent is"),
    END};
static const ctl_node_t n_experimental[] = {
    DIR("hooks", n_exp_hooks),
    IDX("arenas", I_ARENA, n_exp_arena_i),
    DIR("prof_recent", n_exp_prof_recent),
    DIR("utilization", n_exp_util),
    LEAF_H("batch_alloc", CT_SIZE, hooks_ctl_batch_alloc, F_NOPRINT, "allocate many blocks of one size"),
    LEAF_H("arenas_create_ext", CT_UNSIGNED, hooks_ctl_arenas_create_ext, F_NOPRINT,
           "arenas.create with an arena_config_t"),
    END};

static const ctl_node_t n_approx[] = {
    LEAF_H("active", CT_SIZE, compat_approximate_active, F_NOPRINT, "active bytes now, without an epoch"),
    END};

static const ctl_node_t n_root[] = {
    LEAF_C("version", CT_STR, &version_str, "strata version"),
    LEAF_H("epoch", CT_U64, h_epoch, F_NOPRINT, "write to refresh the statistics"),
    {.name = "thread", .kids = n_thread, .nkids = NKIDS(n_thread), .flags = F_NOPRINT},
    DIR("config", n_config),
    DIR("opt", n_opt),
    {.name = "arena", .ikid = &n_arena_i, .index = &I_ARENA, .flags = F_NOPRINT},
    DIR("arenas", n_arenas),
    DIR("stats", n_stats),
    {.name = "tcache", .kids = n_tcache, .nkids = NKIDS(n_tcache), .flags = F_NOPRINT},
    {.name = "prof", .kids = n_prof, .nkids = NKIDS(n_prof), .flags = F_NOPRINT},
    LEAF_H("background_thread", CT_BOOL, ctl_background_thread, 0, "background purging threads are on"),
    LEAF_H("max_background_threads", CT_SIZE, ctl_max_background_threads, 0, "most background threads"),
    LEAF_H("soft_limit", CT_SIZE, ctl_soft_limit, 0, "resident bytes past which everything free is purged, 0 none (strata)"),
    LEAF_H("hard_limit", CT_SIZE, ctl_hard_limit, 0, "committed bytes allocations may not pass, 0 none (strata)"),
    {.name = "experimental", .kids = n_experimental, .nkids = NKIDS(n_experimental), .flags = F_NOPRINT},
    {.name = "approximate_stats", .kids = n_approx, .nkids = NKIDS(n_approx), .flags = F_NOPRINT},
    /* Rows for other branches go here (see docs/introspection.md, "Adding a name"). */
    END};
const ctl_node_t ctl_root = DIR("", n_root);

/* ---------------------------------------------------------------- lookup */
static const ctl_node_t *child_at(const ctl_node_t *n, const size_t *mib, size_t pos, int *err) {
  if (n->kids) return mib[pos] < n->nkids ? &n->kids[mib[pos]] : NULL;
  if (n->ikid) {
    int r = n->index->check(mib, pos, mib[pos]);
    if (r) {
      *err = r;
      return NULL;
    }
    return n->ikid;
  }
  return NULL;
}

const ctl_node_t *ctl_node_of(const size_t *mib, size_t miblen) {
  const ctl_node_t *n = &ctl_root;
  int err = ENOENT;
  for (size_t d = 0; d < miblen && n; d++) n = child_at(n, mib, d, &err);
  return n;
}

static int ctl_call(const ctl_node_t *n, const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp,
                    void *newp, size_t newlen) {
  if (n->type == CT_NONE) return ENOENT; /* an inner node */
  if (n->src == S_HANDLER) return n->handler(mib, miblen, oldp, oldlenp, newp, newlen);
  return leaf_read(n, mib, oldp, oldlenp, newp, newlen);
}

int ctl_by_mib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  if (mib == NULL || miblen == 0 || miblen > CTL_MAX_DEPTH) return ENOENT;
  if (tsd_fetch() == NULL) return EAGAIN;
  const ctl_node_t *n = &ctl_root;
  int err = ENOENT;
  for (size_t d = 0; d < miblen; d++) {
    if ((n = child_at(n, mib, d, &err)) == NULL) return err;
  }
  return ctl_call(n, mib, miblen, oldp, oldlenp, newp, newlen);
}

/* Translates up to *depth components of name into mib; *depth becomes the count. */
static int ctl_lookup(const char *name, size_t *mib, size_t *depth) {
  const ctl_node_t *n = &ctl_root;
  size_t d = 0;
  const char *s = name;
  while (d < *depth) {
    const char *e = s;
    while (*e && *e != '.') e++;
    size_t len = (size_t)(e - s);
    if (len == 0) return ENOENT;
    if (n->kids) {
      size_t k = 0;
      for (; n->kids[k].name; k++) {
        if (strlen(n->kids[k].name) == len && memcmp(n->kids[k].name, s, len) == 0) break;
      }
      if (n->kids[k].name == NULL) return ENOENT;
      mib[d] = k;
      n = &n->kids[k];
    } else if (n->ikid) {
      size_t v = 0;
      for (const char *c = s; c < e; c++) {
        if (*c < '0' || *c > '9' || v > (SIZE_MAX - 9) / 10) return ENOENT;
        v = v * 10 + (size_t)(*c - '0');
      }
      int r = n->index->check(mib, d, v);
      if (r) return r;
      mib[d] = v;
      n = n->ikid;
    } else {
      return ENOENT; /* a component after a leaf */
    }
    d++;
    if (*e == '\0') break;
    s = e + 1;
  }
  *depth = d;
  return 0;
}

int ctl_value(const ctl_node_t *leaf, const size_t *mib, size_t miblen, ctl_value_t *v) {
  union {
    bool b;
    unsigned u;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    const char *s;
  } buf = {.u64 = 0};
  size_t len = type_size(leaf->type);
  v->type = leaf->type;
  v->u = 0;
  if (len == 0) return ENOENT;
  int r = ctl_call(leaf, mib, miblen, &buf, &len, NULL, 0);
  if (r) return r;
  switch (leaf->type) {
  case CT_BOOL: v->b = buf.b; break;
  case CT_UNSIGNED: v->u = buf.u; break;
  case CT_U32: v->u = buf.u32; break;
  case CT_SSIZE: v->i = buf.i64; break;
  case CT_STR: v->s = buf.s; break;
  default: v->u = buf.u64; break;
  }
  return 0;
}

/* ---------------------------------------------------------------- public entry points */
#define EXPORT __attribute__((visibility("default")))

EXPORT int strata_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  if (name == NULL) return EINVAL;
  if (tsd_fetch() == NULL) return EAGAIN;
  size_t mib[CTL_MAX_DEPTH], depth = CTL_MAX_DEPTH;
  int r = ctl_lookup(name, mib, &depth);
  if (r) return r;
  /* A name longer than the deepest node cannot exist. */
  const char *s = name;
  size_t dots = 0;
  for (; *s; s++) dots += *s == '.';
  if (dots + 1 != depth) return ENOENT;
  return ctl_by_mib(mib, depth, oldp, oldlenp, newp, newlen);
}

EXPORT int strata_mallctlnametomib(const char *name, size_t *mibp, size_t *miblenp) {
  if (name == NULL || mibp == NULL || miblenp == NULL || *miblenp == 0) return EINVAL;
  if (tsd_fetch() == NULL) return EAGAIN;
  size_t depth = *miblenp < CTL_MAX_DEPTH ? *miblenp : CTL_MAX_DEPTH;
  int r = ctl_lookup(name, mibp, &depth);
  if (r == 0) *miblenp = depth;
  return r;
}

EXPORT int strata_mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                               size_t newlen) {
  return ctl_by_mib(mib, miblen, oldp, oldlenp, newp, newlen);
}

/* Without write_cb the output goes where strata's messages go (stderr, or the program's
 * malloc_message with this cbopaque), as jemalloc's does. */
EXPORT void strata_malloc_stats_print(void (*write_cb)(void *, const char *), void *cbopaque, const char *opts) {
  if (tsd_fetch() == NULL) return;
  stats_print(write_cb ? write_cb : msg_cb, cbopaque, opts ? opts : "");
}

#ifdef STRATA_OVERRIDE
#define ALIAS(name, target) extern __typeof(target) name __attribute__((alias(#target), visibility("default")))
ALIAS(mallctl, strata_mallctl);
ALIAS(mallctlnametomib, strata_mallctlnametomib);
ALIAS(mallctlbymib, strata_mallctlbymib);
ALIAS(malloc_stats_print, strata_malloc_stats_print);
#endif

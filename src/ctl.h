/*
 * ctl.h - the mallctl tree as data, shared by its three readers: ctl.c (name and MIB
 * lookup), stats.c (malloc_stats_print text and JSON) and metrics.c (OpenMetrics). A
 * node is a name with named children, or one indexed child (the <i> of arena.<i>), or a
 * leaf: a typed value read from the statistics snapshot by offset, or a handler.
 */
#ifndef STRATA_CTL_H
#define STRATA_CTL_H

#include "internal.h"

#define CTL_ARENAS_ALL 4096       /* MALLCTL_ARENAS_ALL: the merged statistics */
#define CTL_ARENAS_DESTROYED 4097 /* MALLCTL_ARENAS_DESTROYED: strata destroys none */
#define CTL_MAX_DEPTH 8
#define CTL_NLEXT (SZ_NCLASSES - SZ_NSMALL)
#define CTL_THREAD_ALLOCATEDP 6 /* position of thread.allocatedp in n_thread (deallocatedp: 7) */

/* Leaf value types, as jemalloc's manual gives them. */
enum { CT_NONE, CT_BOOL, CT_UNSIGNED, CT_U32, CT_SIZE, CT_SSIZE, CT_U64, CT_STR, CT_VOID };
/* Where a table leaf's value lives: a fixed address, or a field of a snapshot record. */
enum { S_HANDLER, S_CONST, S_GLOBAL, S_ARENA, S_BIN, S_LEXT, S_EXT, S_BININFO, S_AMUTEX, S_GMUTEX };
/* Flags: how printers treat a leaf. */
#define F_COUNTER 1u /* monotonic: an OpenMetrics counter (_total) */
#define F_BYTES 2u   /* unit bytes */
#define F_PAGES 4u   /* unit pages (OpenMetrics converts to bytes) */
#define F_NOPRINT 8u /* an action or a per-thread value: not in malloc_stats_print */
#define F_NS 16u     /* unit nanoseconds (OpenMetrics converts to seconds) */
/* jemalloc's name for something strata lacks or keeps under another name (always 0, or
 * an alias of another lock): answered by mallctl and printed in JSON for jemalloc's
 * readers, left out of OpenMetrics, where it would only add series of zeros or copies. */
#define F_COMPAT 32u

typedef struct ctl_index_s ctl_index_t;
typedef struct ctl_node_s ctl_node_t;
struct ctl_index_s {
  /* 0 if i may follow the components mib[0..pos-1], else the error (ENOENT, EFAULT). */
  int (*check)(const size_t *mib, size_t pos, size_t i);
  size_t (*count)(void); /* printers walk 0..count-1 */
};
struct ctl_node_s {
  const char *name;
  const ctl_node_t *kids;     /* named children, ended by a row with name NULL */
  const ctl_node_t *ikid;     /* or: the one indexed child */
  const ctl_index_t *index;
  ctl_handler_t *handler;     /* leaf with code (src S_HANDLER) */
  const void *ptr;            /* S_CONST */
  uint16_t off;               /* S_GLOBAL..S_EXT: offset in the snapshot record */
  uint16_t nkids;             /* rows in kids (MIB components index them directly) */
  uint8_t type, src, flags;
  const char *help;           /* one line, for OpenMetrics HELP and the docs */
  const char *jname;          /* JSON key where jemalloc's differs from the name */
};

/* The statistics snapshot, refreshed by writing "epoch". */
typedef struct {
  uint64_t num_ops, num_wait, num_spin_acq, num_owner_switch, total_wait_time, max_wait_time;
  uint32_t max_num_thds;
} ctl_mutex_stats_t;
typedef struct {
  uint64_t nmalloc, ndalloc, nrequests, nfills, nflushes, nslabs, nreslabs;
  size_t curregs, curslabs, nonfull_slabs;
  ctl_mutex_stats_t mutex;
} ctl_bin_stats_t;
typedef struct {
  uint64_t nmalloc, ndalloc, nrequests;
  size_t curlextents;
} ctl_lext_stats_t;
typedef struct {
  size_t ndirty, nmuzzy, nretained, dirty_bytes, muzzy_bytes, retained_bytes;
} ctl_ext_stats_t;
typedef struct {
  size_t allocated;
  uint64_t nmalloc, ndalloc, nrequests, nfills, nflushes;
} ctl_class_stats_t;
typedef struct {
  bool initialized;
  unsigned nthreads;
  uint64_t uptime;
  ssize_t dirty_decay_ms, muzzy_decay_ms;
  size_t pactive, pdirty, pmuzzy, mapped, retained, base, internal, metadata_thp, tcache_bytes,
      tcache_stashed_bytes, resident, abandoned_vm, extent_avail;
  uint64_t dirty_npurge, dirty_nmadvise, dirty_purged, muzzy_npurge, muzzy_nmadvise, muzzy_purged;
  ctl_class_stats_t small, large;
  ctl_mutex_stats_t mutexes[2]; /* [0] the arena's elock; [1] zeros: jemalloc locks strata has no per-arena match for */
  ctl_bin_stats_t bins[SZ_NSMALL];
  ctl_lext_stats_t lext[CTL_NLEXT];
  ctl_ext_stats_t ext[PSZ_N];
} ctl_arena_stats_t;
typedef struct {
  size_t allocated, active, metadata, metadata_thp, resident, mapped, retained, zero_reallocs;
} ctl_global_stats_t;

/* A value read from a leaf, for the printers. */
typedef struct {
  uint8_t type;
  union {
    uint64_t u;
    int64_t i;
    bool b;
    const char *s;
  };
} ctl_value_t;

HIDDEN extern const ctl_node_t ctl_root;
HIDDEN int ctl_by_mib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                      size_t newlen);
/* The node a MIB names (inner or leaf), or NULL. */
HIDDEN const ctl_node_t *ctl_node_of(const size_t *mib, size_t miblen);
HIDDEN int ctl_value(const ctl_node_t *leaf, const size_t *mib, size_t miblen, ctl_value_t *v);
HIDDEN void ctl_refresh(void); /* "epoch": take a new snapshot */
HIDDEN const void *ctl_snap_record(size_t ind); /* unit tests: arena ind's ctl_arena_stats_t */
HIDDEN bool ctl_arena_present(size_t i); /* snapshot holds arena i (or 4096 / 4097) */
HIDDEN size_t ctl_narenas_total(void);   /* ordinary arenas plus the oversize arena */

/* stats.c and metrics.c */
typedef void ctl_write_cb(void *opaque, const char *s);
HIDDEN void stats_print(ctl_write_cb *cb, void *opaque, const char *opts);
/* opts: 'T' the Prometheus text format (textfile collector) instead of OpenMetrics,
 * 'D' per-arena and per-size-class series (also opt.stats_metrics_detail). */
HIDDEN void metrics_write(ctl_write_cb *cb, void *opaque, const char *opts);

/* A small output buffer over a write callback; no allocation, no stdio. */
typedef struct {
  ctl_write_cb *cb;
  void *opaque;
  size_t len;
  char buf[4096];
} out_t;
HIDDEN void out_init(out_t *o, ctl_write_cb *cb, void *opaque);
HIDDEN void out_str(out_t *o, const char *s);
HIDDEN void out_u64(out_t *o, uint64_t v);
HIDDEN void out_i64(out_t *o, int64_t v);
HIDDEN void out_col(out_t *o, const char *s, int width); /* right-aligned; width < 0: left */
HIDDEN void out_colu(out_t *o, uint64_t v, int width);
HIDDEN void out_value(out_t *o, const ctl_value_t *v, bool json);
HIDDEN void out_flush(out_t *o);

#endif /* STRATA_CTL_H */

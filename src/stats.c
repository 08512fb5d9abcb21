/*
 * stats.c - malloc_stats_print: jemalloc 5.3's text layout, section for section, and its
 * JSON key tree ("J"), both by walking ctl.c's table (a row added there shows up here).
 * Omission letters as jemalloc: g general, m merged, d destroyed, a per-arena, b bins,
 * l large classes, x mutexes, e extents. Output goes through a fixed buffer: no malloc.
 */
#include <string.h>

#include "ctl.h"

/* ---------------------------------------------------------------- output buffer */
void out_init(out_t *o, ctl_write_cb *cb, void *opaque) {
  o->cb = cb;
  o->opaque = opaque;
  o->len = 0;
}

void out_flush(out_t *o) {
  if (o->len == 0) return;
  o->buf[o->len] = '\0';
  o->cb(o->opaque, o->buf);
  o->len = 0;
}

void out_str(out_t *o, const char *s) {
  while (*s) {
    if (o->len + 1 >= sizeof(o->buf)) out_flush(o);
    o->buf[o->len++] = *s++;
  }
}

void out_u64(out_t *o, uint64_t v) {
  char b[24];
  out_str(o, fmt_u64(b, v));
}

void out_i64(out_t *o, int64_t v) {
  if (v < 0) {
    out_str(o, "-");
    out_u64(o, (uint64_t)0 - (uint64_t)v);
  } else {
    out_u64(o, (uint64_t)v);
  }
}

void out_col(out_t *o, const char *s, int width) {
  int n = (int)strlen(s), w = width < 0 ? -width : width;
  if (width > 0) {
    for (int i = n; i < w; i++) out_str(o, " ");
  }
  out_str(o, s);
  if (width < 0) {
    for (int i = n; i < w; i++) out_str(o, " ");
  }
}

void out_colu(out_t *o, uint64_t v, int width) {
  char b[24];
  out_col(o, fmt_u64(b, v), width);
}

void out_value(out_t *o, const ctl_value_t *v, bool json) {
  switch (v->type) {
  case CT_BOOL: out_str(o, v->b ? "true" : "false"); break;
  case CT_SSIZE: out_i64(o, v->i); break;
  case CT_STR:
    out_str(o, "\"");
    for (const char *s = v->s ? v->s : ""; *s; s++) {
      char c[2] = {*s, 0};
      if (json && (*s == '"' || *s == '\\')) out_str(o, "\\");
      out_str(o, (unsigned char)*s < 0x20 ? "?" : c);
    }
    out_str(o, "\"");
    break;
  default: out_u64(o, v->u); break;
  }
}

/* ---------------------------------------------------------------- walking helpers */
static bool is_leaf(const ctl_node_t *n) { return n->type != CT_NONE; }
static bool printable(const ctl_node_t *n) { return !(n->flags & F_NOPRINT) && n->type != CT_VOID; }

static const ctl_node_t *kid(const ctl_node_t *n, const char *name, size_t *pos) {
  for (size_t k = 0; n->kids && n->kids[k].name; k++) {
    if (strcmp(n->kids[k].name, name) == 0) {
      *pos = k;
      return &n->kids[k];
    }
  }
  return NULL;
}

/* The node at a dotted path of named components from root, with its MIB prefix. */
static const ctl_node_t *path(const char *p, size_t *mib, size_t *depth) {
  const ctl_node_t *n = &ctl_root;
  char comp[32];
  *depth = 0;
  while (*p && n) {
    size_t l = 0;
    while (*p && *p != '.' && l + 1 < sizeof(comp)) comp[l++] = *p++;
    comp[l] = '\0';
    if (*p == '.') p++;
    n = kid(n, comp, &mib[*depth]);
    (*depth)++;
  }
  return n;
}

static bool opt_has(const char *opts, char c) { return strchr(opts, c) != NULL; }

/* Omitted subtrees: 'b' bins, 'l' large classes, 'e' extents. */
static bool omitted(const char *name, const char *opts) {
  return (opt_has(opts, 'b') && (!strcmp(name, "bins") || !strcmp(name, "bin"))) ||
         (opt_has(opts, 'l') && (!strcmp(name, "lextents") || !strcmp(name, "lextent"))) ||
         (opt_has(opts, 'e') && !strcmp(name, "extents")) ||
         (opt_has(opts, 'x') && (!strcmp(name, "mutexes") || !strcmp(name, "mutex")));
}

/* ---------------------------------------------------------------- JSON */
static void json_indent(out_t *o, int d) {
  out_str(o, "\n");
  for (int i = 0; i < d; i++) out_str(o, "\t");
}

static void json_key(out_t *o, const char *k, int d, bool *first) {
  if (!*first) out_str(o, ",");
  *first = false;
  json_indent(o, d);
  out_str(o, "\"");
  out_str(o, k);
  out_str(o, "\": ");
}

static void json_node(out_t *o, const ctl_node_t *n, size_t *mib, size_t depth, int d, const char *opts);

static void json_kids(out_t *o, const ctl_node_t *n, size_t *mib, size_t depth, int d, const char *opts) {
  bool first = true;
  out_str(o, "{");
  for (size_t k = 0; n->kids[k].name; k++) {
    const ctl_node_t *c = &n->kids[k];
    if (!printable(c) || omitted(c->name, opts)) continue;
    mib[depth] = k;
    json_key(o, c->jname ? c->jname : c->name, d + 1, &first);
    json_node(o, c, mib, depth + 1, d + 1, opts);
  }
  json_indent(o, d);
  out_str(o, "}");
}

static void json_node(out_t *o, const ctl_node_t *n, size_t *mib, size_t depth, int d, const char *opts) {
  if (is_leaf(n)) {
    ctl_value_t v;
    if (ctl_value(n, mib, depth, &v) == 0) {
      out_value(o, &v, true);
    } else {
      out_str(o, "null");
    }
  } else if (n->kids) {
    json_kids(o, n, mib, depth, d, opts);
  } else if (n->ikid) {
    size_t cnt = n->index->count();
    out_str(o, "[");
    for (size_t i = 0; i < cnt; i++) {
      mib[depth] = i;
      if (i) out_str(o, ",");
      json_indent(o, d + 1);
      json_node(o, n->ikid, mib, depth + 1, d + 1, opts);
    }
    json_indent(o, d);
    out_str(o, "]");
  }
}

/* The arenas to print: merged when more than one is in use, then each one in use. */
static size_t arenas_in_use(void) {
  size_t n = 0;
  for (size_t i = 0; i < ctl_narenas_total(); i++) n += ctl_arena_present(i);
  return n;
}

static void json_print(out_t *o, const char *opts) {
  size_t mib[CTL_MAX_DEPTH], depth;
  const ctl_node_t *root = &ctl_root;
  bool first = true;
  out_str(o, "{\n\t\"jemalloc\": {");
  for (size_t k = 0; root->kids[k].name; k++) {
    const ctl_node_t *c = &root->kids[k];
    bool general = strcmp(c->name, "stats") != 0;
    if (!printable(c) || (general && opt_has(opts, 'g'))) continue;
    mib[0] = k;
    json_key(o, c->name, 2, &first);
    if (!general) {
      /* "stats" without its arenas child, which jemalloc prints beside it */
      bool f2 = true;
      out_str(o, "{");
      for (size_t s = 0; c->kids[s].name; s++) {
        const ctl_node_t *sc = &c->kids[s];
        if (sc->ikid) continue;
        mib[1] = s;
        json_key(o, sc->name, 3, &f2);
        json_node(o, sc, mib, 2, 3, opts);
      }
      json_indent(o, 2);
      out_str(o, "}");
    } else {
      json_node(o, c, mib, 1, 2, opts);
    }
  }
  /* "stats.arenas": {"merged": ..., "0": ...} */
  const ctl_node_t *sa = path("stats.arenas", mib, &depth);
  bool merged = !opt_has(opts, 'm'), unmerged = !opt_has(opts, 'a');
  size_t used = arenas_in_use();
  if (sa && (merged || unmerged)) {
    json_key(o, "stats.arenas", 2, &first);
    bool f2 = true;
    out_str(o, "{");
    if (merged && (used > 1 || !unmerged)) {
      mib[depth] = CTL_ARENAS_ALL;
      json_key(o, "merged", 3, &f2);
      json_node(o, sa->ikid, mib, depth + 1, 3, opts);
    }
    for (size_t i = 0; unmerged && i < ctl_narenas_total(); i++) {
      if (!ctl_arena_present(i)) continue;
      char key[24];
      mib[depth] = i;
      json_key(o, fmt_u64(key, i), 3, &f2);
      json_node(o, sa->ikid, mib, depth + 1, 3, opts);
    }
    json_indent(o, 2);
    out_str(o, "}");
  }
  out_str(o, "\n\t}\n}\n");
}

/* ---------------------------------------------------------------- text */
static void text_leaves(out_t *o, const char *prefix, const ctl_node_t *n, size_t *mib, size_t depth) {
  for (size_t k = 0; n->kids[k].name; k++) {
    const ctl_node_t *c = &n->kids[k];
    if (!is_leaf(c) || !printable(c)) continue;
    ctl_value_t v;
    mib[depth] = k;
    if (ctl_value(c, mib, depth + 1, &v)) continue;
    out_str(o, prefix);
    out_str(o, c->name);
    out_str(o, ": ");
    out_value(o, &v, false);
    out_str(o, "\n");
  }
}

static uint64_t read_u(const char *name) {
  uint64_t v = 0;
  size_t mib[CTL_MAX_DEPTH], depth;
  const ctl_node_t *n = path(name, mib, &depth);
  ctl_value_t val;
  if (n && ctl_value(n, mib, depth, &val) == 0) v = val.u;
  return v;
}

/* Read leaf `name` of the node at mib[0..depth-1]. */
static ctl_value_t leaf_of(const ctl_node_t *n, size_t *mib, size_t depth, const char *name) {
  ctl_value_t v = {.type = CT_NONE, .u = 0};
  size_t pos;
  const ctl_node_t *c = kid(n, name, &pos);
  if (c) {
    mib[depth] = pos;
    if (ctl_value(c, mib, depth + 1, &v)) v.u = 0;
  }
  return v;
}

/* A table of an indexed child (bins, lextents, extents): one column per leaf, a row per
 * index with activity; the size column comes from the class tables. */
static void text_table(out_t *o, const char *title, const ctl_node_t *ix, size_t *mib, size_t depth,
                       const char *skip_if_zero, size_t class_base) {
  const ctl_node_t *row = ix->ikid;
  out_col(o, title, -10);
  out_col(o, "size", 10);
  out_col(o, "ind", 4);
  for (size_t k = 0; row->kids[k].name; k++) {
    if (is_leaf(&row->kids[k])) out_col(o, row->kids[k].name, 15);
  }
  out_str(o, "\n");
  bool gap = false;
  for (size_t i = 0; i < ix->index->count(); i++) {
    mib[depth] = i;
    ctl_value_t z = leaf_of(row, mib, depth + 1, skip_if_zero);
    if (z.u == 0) {
      if (!gap) out_str(o, "                     ---\n");
      gap = true;
      continue;
    }
    gap = false;
    out_col(o, "", -10);
    out_colu(o, class_base ? sz_size[class_base + i] : psz_pages((unsigned)i) * os_page, 10);
    out_colu(o, class_base ? class_base + i - 1 : i, 4);
    for (size_t k = 0; row->kids[k].name; k++) {
      ctl_value_t v;
      if (!is_leaf(&row->kids[k])) continue;
      mib[depth + 1] = k;
      if (ctl_value(&row->kids[k], mib, depth + 2, &v)) v.u = 0;
      out_colu(o, v.u, 15);
    }
    out_str(o, "\n");
  }
}

/* A mutex table: a row per named mutex under n (at mib[0..depth-1]), a column per field. */
static void text_mutexes(out_t *o, const ctl_node_t *n, size_t *mib, size_t depth) {
  const ctl_node_t *first = NULL;
  for (size_t k = 0; n->kids[k].name && !first; k++) first = n->kids[k].kids ? &n->kids[k] : NULL;
  if (first == NULL) return;
  out_col(o, "", -20);
  for (size_t f = 0; first->kids[f].name; f++) out_col(o, first->kids[f].name, 17);
  out_str(o, "\n");
  for (size_t k = 0; n->kids[k].name; k++) {
    const ctl_node_t *m = &n->kids[k];
    if (!m->kids) continue;
    mib[depth] = k;
    out_col(o, m->name, -20);
    for (size_t f = 0; m->kids[f].name; f++) {
      ctl_value_t v;
      mib[depth + 1] = f;
      if (ctl_value(&m->kids[f], mib, depth + 2, &v)) v.u = 0;
      out_colu(o, v.u, 17);
    }
    out_str(o, "\n");
  }
}

static void text_class_row(out_t *o, const char *label, const ctl_node_t *cls, size_t *mib, size_t depth) {
  out_col(o, label, -20);
  for (size_t k = 0; cls->kids[k].name; k++) {
    ctl_value_t v;
    mib[depth] = k;
    if (ctl_value(&cls->kids[k], mib, depth + 1, &v)) v.u = 0;
    out_colu(o, v.u, 16);
  }
  out_str(o, "\n");
}

static void text_arena(out_t *o, const char *title, size_t i, const char *opts) {
  size_t mib[CTL_MAX_DEPTH], depth;
  const ctl_node_t *sa = path("stats.arenas", mib, &depth);
  const ctl_node_t *a = sa->ikid;
  mib[depth++] = i;
  out_str(o, title);
  out_str(o, "\n");
  out_str(o, "assigned threads: ");
  out_u64(o, leaf_of(a, mib, depth, "nthreads").u);
  out_str(o, "\nuptime: ");
  out_u64(o, leaf_of(a, mib, depth, "uptime").u);
  out_str(o, "\ndss allocation precedence: \"disabled\"\n");
  out_str(o, "decaying:  time       npages       sweeps     madvises       purged\n   dirty: ");
  char dms[24];
  int64_t d = leaf_of(a, mib, depth, "dirty_decay_ms").i;
  out_col(o, d < 0 ? "N/A" : fmt_u64(dms, (uint64_t)d), -5);
  out_colu(o, leaf_of(a, mib, depth, "pdirty").u, 13);
  out_colu(o, leaf_of(a, mib, depth, "dirty_npurge").u, 13);
  out_colu(o, leaf_of(a, mib, depth, "dirty_nmadvise").u, 13);
  out_colu(o, leaf_of(a, mib, depth, "dirty_purged").u, 13);
  out_str(o, "\n   muzzy: N/A              0            0            0            0\n");
  /* small / large / total */
  size_t ps = 0, pl = 0;
  const ctl_node_t *small = kid(a, "small", &ps), *large = kid(a, "large", &pl);
  out_col(o, "", -20);
  for (size_t k = 0; small->kids[k].name; k++) out_col(o, small->kids[k].name, 16);
  out_str(o, "\n");
  mib[depth] = ps;
  text_class_row(o, "small:", small, mib, depth + 1);
  mib[depth] = pl;
  text_class_row(o, "large:", large, mib, depth + 1);
  /* the remaining scalar leaves, "name: value" */
  static const char *const shown[] = {"nthreads", "uptime", "dss", "dirty_decay_ms", "muzzy_decay_ms", "pdirty",
                                      "pmuzzy", "dirty_npurge", "dirty_nmadvise", "dirty_purged", "muzzy_npurge",
                                      "muzzy_nmadvise", "muzzy_purged", NULL};
  for (size_t k = 0; a->kids[k].name; k++) {
    const ctl_node_t *c = &a->kids[k];
    bool skip = !is_leaf(c);
    for (int s = 0; shown[s] && !skip; s++) skip = !strcmp(shown[s], c->name);
    if (skip) continue;
    ctl_value_t v;
    mib[depth] = k;
    if (ctl_value(c, mib, depth + 1, &v)) continue;
    out_col(o, c->name, -1);
    out_str(o, ":");
    if (v.type == CT_STR || v.type == CT_BOOL || v.type == CT_SSIZE) { /* the arena's name: quoted, as "dss" */
      out_col(o, "", 28 - (int)strlen(c->name) - 1);
      out_value(o, &v, false);
      out_str(o, "\n");
      continue;
    }
    char b[24];
    uint64_t x = v.u;
    if (c->flags & F_PAGES) x *= os_page; /* jemalloc prints active in bytes */
    out_col(o, fmt_u64(b, x), 28 - (int)strlen(c->name));
    out_str(o, "\n");
  }
  size_t pos;
  const ctl_node_t *ix;
  if (!opt_has(opts, 'x') && (ix = kid(a, "mutexes", &pos))) {
    mib[depth] = pos;
    text_mutexes(o, ix, mib, depth + 1);
  }
  if (!opt_has(opts, 'b') && (ix = kid(a, "bins", &pos))) {
    mib[depth] = pos;
    text_table(o, "bins:", ix, mib, depth + 1, "nmalloc", 1);
  }
  if (!opt_has(opts, 'l') && (ix = kid(a, "lextents", &pos))) {
    mib[depth] = pos;
    text_table(o, "large:", ix, mib, depth + 1, "nmalloc", SZ_NSMALL + 1);
  }
  if (!opt_has(opts, 'e') && (ix = kid(a, "extents", &pos))) {
    mib[depth] = pos;
    out_str(o, "extents (size: smallest extent of the page bucket)\n");
    text_table(o, "", ix, mib, depth + 1, "nretained", 0);
  }
}

static void text_print(out_t *o, const char *opts) {
  size_t mib[CTL_MAX_DEPTH], depth;
  const ctl_node_t *n;
  out_str(o, "___ Begin jemalloc statistics ___\n");
  if (!opt_has(opts, 'g')) {
    ctl_value_t v;
    n = path("version", mib, &depth);
    ctl_value(n, mib, depth, &v);
    out_str(o, "Version: \"");
    out_str(o, v.s);
    out_str(o, "\" (strata)\nBuild-time option settings\n");
    n = path("config", mib, &depth);
    text_leaves(o, "  config.", n, mib, depth);
    out_str(o, "Run-time option settings\n");
    n = path("opt", mib, &depth);
    text_leaves(o, "  opt.", n, mib, depth);
    out_str(o, "Arenas: ");
    out_u64(o, read_u("arenas.narenas"));
    out_str(o, "\nQuantum size: ");
    out_u64(o, read_u("arenas.quantum"));
    out_str(o, "\nPage size: ");
    out_u64(o, read_u("arenas.page"));
    out_str(o, "\nMaximum thread-cached size class: ");
    out_u64(o, read_u("arenas.tcache_max"));
    out_str(o, "\nNumber of bin size classes: ");
    out_u64(o, read_u("arenas.nbins"));
    out_str(o, "\nNumber of thread-cache bin size classes: ");
    out_u64(o, read_u("arenas.nhbins"));
    out_str(o, "\nNumber of large size classes: ");
    out_u64(o, read_u("arenas.nlextents"));
    out_str(o, "\n");
  }
  out_str(o, "Allocated: ");
  out_u64(o, read_u("stats.allocated"));
  out_str(o, ", active: ");
  out_u64(o, read_u("stats.active"));
  out_str(o, ", metadata: ");
  out_u64(o, read_u("stats.metadata"));
  out_str(o, " (n_thp 0), resident: ");
  out_u64(o, read_u("stats.resident"));
  out_str(o, ", mapped: ");
  out_u64(o, read_u("stats.mapped"));
  out_str(o, ", retained: ");
  out_u64(o, read_u("stats.retained"));
  out_str(o, "\nCount of realloc(non-null-ptr, 0) calls: ");
  out_u64(o, read_u("stats.zero_reallocs"));
  out_str(o, "\n");
  if (!opt_has(opts, 'x') && (n = path("stats.mutexes", mib, &depth)) != NULL) text_mutexes(o, n, mib, depth);
  bool merged = !opt_has(opts, 'm'), unmerged = !opt_has(opts, 'a');
  if (merged && (arenas_in_use() > 1 || !unmerged)) text_arena(o, "Merged arenas stats:", CTL_ARENAS_ALL, opts);
  for (size_t i = 0; unmerged && i < ctl_narenas_total(); i++) {
    if (!ctl_arena_present(i)) continue;
    char title[40] = "arenas[", b[24];
    strcat(title, fmt_u64(b, i));
    strcat(title, "]:");
    text_arena(o, title, i, opts);
  }
  out_str(o, "--- End jemalloc statistics ---\n");
}

void stats_print(ctl_write_cb *cb, void *opaque, const char *opts) {
  out_t o;
  if (opt_has(opts, 'P') || opt_has(opts, 'T')) {
    metrics_write(cb, opaque, opts); /* takes its own epoch */
    return;
  }
  uint64_t e = 1;
  size_t len = sizeof(e);
  strata_mallctl("epoch", &e, &len, &e, sizeof(e)); /* as jemalloc: print fresh figures */
  out_init(&o, cb, opaque);
  if (opt_has(opts, 'J')) {
    json_print(&o, opts);
  } else {
    text_print(&o, opts);
  }
  out_flush(&o);
}

/* ---------------------------------------------------------------- stats_interval */
/* opt.stats_interval: statistics printed (to stderr, with stats_interval_opts) each time
 * the program has allocated that many more bytes. Threads add what they allocated since
 * their last look, read from their counters (thread.allocated) on ialloc's slow path, so
 * the fast paths pay nothing and a print comes at most a cache fill late. */
static __thread uint64_t si_seen __attribute__((tls_model("initial-exec")));
static uint64_t si_accum; /* atomic: bytes since the last print */

static void si_write(void *opaque, const char *s) {
  (void)opaque;
  msg_write(s);
}

void stats_interval_tick(tsd_t *tsd) {
  uint64_t al, de;
  tcache_counts(tsd, &al, &de);
  uint64_t d = al - si_seen;
  si_seen = al;
  if (d == 0) return;
  uint64_t iv = (uint64_t)opt.stats_interval;
  uint64_t n = __atomic_add_fetch(&si_accum, d, __ATOMIC_RELAXED);
  if (n < iv) return;
  /* one thread prints: the one whose exchange took the whole count */
  if (__atomic_exchange_n(&si_accum, 0, __ATOMIC_RELAXED) < iv) return;
  stats_print(si_write, NULL, opt.stats_interval_opts);
}

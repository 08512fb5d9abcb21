/*
 * conf.c - options in MALLOC_CONF syntax ("key:value,key:value") from, in order, the
 * program's malloc_conf (and strata_malloc_conf) symbol, /etc/strata.conf, STRATA_CONF
 * and MALLOC_CONF; later sources win. Every unknown key or bad value is reported once,
 * naming the key, the value, the source and what is accepted; abort_conf:true makes any
 * problem fatal.
 * Runs during initialisation: no stdio, no getenv-before-libc assumptions, no malloc.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

opt_t opt = {
    .narenas = 0,
    .tcache = true,
    .tcache_max = (size_t)32 << 10, /* jemalloc's default */
    .oversize_threshold = (size_t)8 << 20,
    .retain = true,
    .arena_spread = false, /* off: a thread per arena up to narenas, as jemalloc (docs/design.md, "Arenas") */
    .tiny_class = false,   /* true: requests of 0..8 bytes get 8-byte blocks, as jemalloc's (off the fast paths) */
    .junk = JUNK_NONE,
    .zero = false,
    .abort = false,
    .abort_conf = false,
    .confirm_conf = false,
    .dirty_decay_ms = 10000, /* jemalloc's default */
    .stats_interval_ms = 10000, /* Prometheus' usual scrape interval is 15 s or more */
    .muzzy_decay_ms = 0,     /* jemalloc 5.3's default */
    .background_thread = true, /* idle processes return memory without tuning; threads start lazily */
    .max_background_threads = 0,
    .thp = THP_DEFAULT,
    .metadata_thp = MTHP_DISABLED,
    .limit_headroom = 0,
    .guard_sample_interval = 0,
    .commit_limit = COMMIT_AUTO,
    /* 16 MiB: 64 busy threads' worth of a typical cache (256 KiB, wl_nativethreads);
     * a single thread's full cache is far below it, so only thread-heavy programs meet it. */
    .tcache_total_max = (size_t)16 << 20,
    /* jemalloc 5.3's bin sizing defaults (tcache.c, tcache_boot) */
    .tcache_nslots_small_min = 20,
    .tcache_nslots_small_max = 200,
    .lg_tcache_nslots_mul = 1,
    .lg_tcache_flush_small_div = 1,
    .lg_tcache_flush_large_div = 1,
    .tcache_gc_incr_bytes = (size_t)64 << 10,
    .soft_limit = 0,
    .hard_limit = 0,
    .pressure_purge = true, /* only where the kernel offers PSI triggers, on the monitor thread */
    .zero_realloc = ZR_FREE, /* jemalloc 5.3's default, and glibc's behaviour */
    .stats_interval = -1,    /* jemalloc's default: off */
};

/* The program's options strings (jemalloc's malloc_conf): weak definitions, so that the
 * program's own definition takes their place in a static link and a dynamic one. */
STRATA_EXPORT __attribute__((weak)) const char *strata_malloc_conf = NULL;
#ifdef STRATA_OVERRIDE
__attribute__((weak, visibility("default"))) const char *malloc_conf = NULL;
#endif
/* jemalloc 5.3's second program string: read after MALLOC_CONF, so that it wins over
 * every other source (a program that must keep a setting whatever the environment says). */
STRATA_EXPORT __attribute__((weak)) const char *strata_malloc_conf_2_conf_harder = NULL;
#ifdef STRATA_OVERRIDE
__attribute__((weak, visibility("default"))) const char *malloc_conf_2_conf_harder = NULL;
#endif
extern char **environ;

unsigned conf_program_strings(const char *str[2], const char *name[2]) {
  unsigned n = 0;
#ifdef STRATA_OVERRIDE
  if (malloc_conf != NULL) str[n] = malloc_conf, name[n++] = "malloc_conf";
#endif
  if (strata_malloc_conf != NULL) str[n] = strata_malloc_conf, name[n++] = "strata_malloc_conf";
  return n;
}

#define MAX_NARENAS 4095 /* the rtree's edata keeps arena indices in 16 bits; one is the oversize arena */

/* strata's own options and the jemalloc options it implements: the names an unknown
 * key is compared with for a suggestion (the whole list: docs/jemalloc-compat.md). */
static const char *const known_keys[] = {
    "narenas", "tcache", "tcache_max", "oversize_threshold", "retain", "arena_spread", "tiny_class", "junk",
    "zero", "abort",
    "abort_conf", "confirm_conf", "dirty_decay_ms", "muzzy_decay_ms", "background_thread",
    "max_background_threads", "thp", "metadata_thp", "limit_headroom", "stats_print", "stats_print_opts",
    "stats_file", "stats_labels", "stats_interval_ms", "stats_metrics_detail", "guard_sample_interval", "commit_limit",
    "tcache_total_max", "prof", "prof_active", "prof_thread_active_init", "lg_prof_sample", "prof_prefix",
    "lg_prof_interval", "prof_gdump", "prof_final", "prof_leak", "prof_accum", "prof_format", "prof_signal",
    "xmalloc", "zero_realloc", "slab_sizes", "experimental_infallible_new", "prof_leak_error", "stats_interval",
    "stats_interval_opts", "lg_tcache_max", "soft_limit", "hard_limit", "pressure_purge", "tcache_nslots_small_min",
    "tcache_nslots_small_max", "lg_tcache_nslots_mul", "lg_tcache_flush_small_div", "lg_tcache_flush_large_div",
    "tcache_gc_incr_bytes", NULL};

/* jemalloc 5.3's options that mean nothing in strata: accepted (never a problem, even
 * under abort_conf: jemalloc knows them), their value checked for its kind, and noted in
 * one line saying why. */
enum { NV_BOOL, NV_INT, NV_STR, NV_NUM };
typedef struct {
  const char *name;
  uint8_t kind;
  const char *why;
} conf_noop_t;
#define WHY_HPA "strata has no hugepage allocator (HPA): extents come from arenas"
#define WHY_TC "strata sizes large classes' bins by bytes and grows small ones with the thread's bursts"
#define WHY_PROF "not kept by strata's profiler"
static const conf_noop_t noop_keys[] = {
    {"dss", NV_STR, "strata never uses sbrk: every extent is mmapped"},
    {"percpu_arena", NV_STR, "threads are spread over arenas by lock contention (arena_spread), not by CPU"},
    {"narenas_ratio", NV_NUM, "use narenas (default 4 per CPU)"},
    {"bin_shards", NV_STR, "one lock per bin; arenas are spread by contention instead"},
    {"cache_oblivious", NV_BOOL, "large blocks are never offset by a random cache line"},
    {"trust_madvise", NV_BOOL, "purging checks madvise's result on every call"},
    {"mutex_max_spin", NV_INT, "strata's locks spin a fixed, CPU-count-scaled time"},
    {"lg_extent_max_active_fit", NV_INT, "extent reuse is best-fit within a page-size bucket"},
    {"utrace", NV_BOOL, "no utrace(2) on Linux"},
    {"log", NV_STR, "strata has no internal event log"},
    {"process_madvise_max_batch", NV_INT, "pages are purged one extent per madvise call"},
    {"calloc_madvise_threshold", NV_INT, "calloc zeroes only what fresh pages do not"},
    {"debug_double_free_max_scan", NV_INT, "every double free is caught by the region's tag, no scan"},
    {"disable_large_size_classes", NV_BOOL, "large size classes are fixed"},
    {"huge_arena_pac_thp", NV_BOOL, "the oversize arena follows thp"},
    {"san_guard_small", NV_INT, "use guard_sample_interval"},
    {"san_guard_large", NV_INT, "use guard_sample_interval"},
    {"lg_san_uaf_align", NV_INT, "use guard_sample_interval"},
    {"tcache_nslots_large", NV_INT, WHY_TC},
    {"tcache_gc_delay_bytes", NV_INT, WHY_TC},
    {"tcache_ncached_max", NV_STR, WHY_TC},
    {"experimental_tcache_gc", NV_BOOL, WHY_TC},
    {"hpa", NV_BOOL, WHY_HPA},
    {"hpa_slab_max_alloc", NV_INT, WHY_HPA},
    {"hpa_hugification_threshold", NV_INT, WHY_HPA},
    {"hpa_hugification_threshold_ratio", NV_NUM, WHY_HPA},
    {"hpa_hugify_delay_ms", NV_INT, WHY_HPA},
    {"hpa_hugify_sync", NV_BOOL, WHY_HPA},
    {"hpa_hugify_style", NV_STR, WHY_HPA},
    {"hpa_min_purge_interval_ms", NV_INT, WHY_HPA},
    {"hpa_min_purge_delay_ms", NV_INT, WHY_HPA},
    {"hpa_purge_threshold", NV_INT, WHY_HPA},
    {"hpa_purge_threshold_ratio", NV_NUM, WHY_HPA},
    {"hpa_dirty_mult", NV_NUM, WHY_HPA},
    {"hpa_sec_nshards", NV_INT, WHY_HPA},
    {"hpa_sec_max_alloc", NV_INT, WHY_HPA},
    {"hpa_sec_max_bytes", NV_INT, WHY_HPA},
    {"hpa_sec_bytes_after_flush", NV_INT, WHY_HPA},
    {"hpa_sec_batch_fill_extra", NV_INT, WHY_HPA},
    {"experimental_hpa_start_huge_if_thp_always", NV_BOOL, WHY_HPA},
    {"experimental_hpa_enforce_hugify", NV_BOOL, WHY_HPA},
    {"experimental_hpa_max_purge_nhp", NV_INT, WHY_HPA},
    {"prof_bt_max", NV_INT, "backtraces keep up to 128 frames"},
    {"prof_recent_alloc_max", NV_INT, WHY_PROF},
    {"prof_stats", NV_BOOL, WHY_PROF},
    {"prof_sys_thread_name", NV_BOOL, "use thread.prof.name"},
    {"prof_time_resolution", NV_STR, WHY_PROF},
    {"prof_unbias", NV_BOOL, "dumps are always unbiased"},
    {"prof_log", NV_BOOL, WHY_PROF},
    {"prof_pid_namespace", NV_BOOL, "dump names carry the pid only"},
    {NULL, 0, NULL}};
#undef WHY_HPA
#undef WHY_TC
#undef WHY_PROF
/* stats_labels: name=value;name=value (',' and ':' are MALLOC_CONF's own separators).
 * Names as Prometheus allows, neither the exporter's own (pid, program) nor reserved
 * (__*), each once; values non-empty and free of what the text format would have to
 * escape. */
static bool stats_labels_valid(const char *v, size_t vlen) {
  if (vlen == 0 || vlen >= sizeof(opt.stats_labels)) return false;
  size_t i = 0, npairs = 0;
  const char *names[32];
  size_t nlens[32];
  while (i < vlen) {
    size_t n0 = i;
    while (i < vlen && v[i] != '=' && v[i] != ';') {
      char c = v[i];
      bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > n0 && c >= '0' && c <= '9');
      if (!ok) return false;
      i++;
    }
    size_t nlen = i - n0;
    if (nlen == 0 || i >= vlen || v[i] != '=') return false;
    if ((nlen == 3 && !memcmp(v + n0, "pid", 3)) || (nlen == 7 && !memcmp(v + n0, "program", 7)) ||
        (nlen >= 2 && v[n0] == '_' && v[n0 + 1] == '_'))
      return false;
    for (size_t k = 0; k < npairs; k++) {
      if (nlens[k] == nlen && !memcmp(names[k], v + n0, nlen)) return false;
    }
    if (npairs == 32) return false;
    names[npairs] = v + n0;
    nlens[npairs++] = nlen;
    size_t v0 = ++i;
    while (i < vlen && v[i] != ';') {
      if (v[i] == '"' || v[i] == '\\' || v[i] == '\n') return false;
      i++;
    }
    if (i == v0) return false;
    if (i < vlen) {
      i++;
      if (i == vlen) return false; /* a trailing ';' */
    }
  }
  return true;
}

static void report_as(const char *what, const char *key, size_t klen, const char *val, size_t vlen,
                      const char *source, const char *label, const char *accepted) {
  char k[64], v[128];
  if (klen >= sizeof(k)) klen = sizeof(k) - 1;
  if (vlen >= sizeof(v)) vlen = sizeof(v) - 1;
  memcpy(k, key, klen);
  k[klen] = '\0';
  if (val) memcpy(v, val, vlen);
  v[val ? vlen : 0] = '\0';
  if (val == NULL) {
    const char *parts[] = {"<strata>: conf: ", what, " \"", k, "\" in ", source, " (", label, accepted, ")\n"};
    msg_parts(parts, 10);
  } else {
    const char *parts[] = {"<strata>: conf: ", what, " \"", v, "\" for \"", k, "\" in ", source,
                           " (", label, accepted, ")\n"};
    msg_parts(parts, 12);
  }
}

static void report(const char *what, const char *key, size_t klen, const char *val, size_t vlen,
                   const char *source, const char *accepted) {
  report_as(what, key, klen, val, vlen, source, "accepted: ", accepted);
}

static bool parse_bool(const char *v, size_t n, bool *out);

/* Edit distance of a key to a name (both short: at most 63 bytes compared). */
static unsigned edit_distance(const char *a, size_t n, const char *b) {
  unsigned row[64];
  size_t m = strlen(b);
  if (n > 63) n = 63;
  if (m > 63) m = 63;
  for (size_t j = 0; j <= m; j++) row[j] = (unsigned)j;
  for (size_t i = 1; i <= n; i++) {
    unsigned diag = row[0];
    row[0] = (unsigned)i;
    for (size_t j = 1; j <= m; j++) {
      unsigned up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[m];
}

/* An unknown key: named, with the closest known name when one is near (a typo), and
 * where the list of every option is. */
static void report_unknown(const char *k, size_t klen, const char *source) {
  const char *best = NULL;
  unsigned bd = ~0u;
  for (int i = 0; known_keys[i]; i++) {
    unsigned d = edit_distance(k, klen, known_keys[i]);
    if (d < bd) bd = d, best = known_keys[i];
  }
  for (int i = 0; noop_keys[i].name; i++) {
    unsigned d = edit_distance(k, klen, noop_keys[i].name);
    if (d < bd) bd = d, best = noop_keys[i].name;
  }
  unsigned near = klen / 3 < 3 ? (unsigned)(klen / 3) : 3; /* a third of the key, at most 3 edits */
  if (best && bd > 0 && bd <= (near ? near : 1)) {
    char hint[96];
    size_t l = strlen(best);
    hint[0] = '"';
    memcpy(hint + 1, best, l);
    memcpy(hint + 1 + l, "\"?", 3);
    report_as("unknown option", k, klen, NULL, 0, source, "did you mean ", hint);
  } else {
    report_as("unknown option", k, klen, NULL, 0, source, "", "every option: docs/jemalloc-compat.md");
  }
}

/* A value of a no-effect option: the kind jemalloc would accept. */
static bool noop_value_ok(uint8_t kind, const char *v, size_t n) {
  bool b;
  size_t i = 0;
  switch (kind) {
  case NV_BOOL: return parse_bool(v, n, &b);
  case NV_INT:
    if (n > 0 && v[0] == '-') i = 1;
    if (i == n) return false;
    for (; i < n; i++) {
      if ((v[i] < '0' || v[i] > '9') && !(i + 1 == n && strchr("kKmMgG", v[i]))) return false;
    }
    return true;
  case NV_NUM:
    if (n > 0 && v[0] == '-') i = 1;
    if (i == n) return false;
    for (; i < n; i++) {
      if ((v[i] < '0' || v[i] > '9') && v[i] != '.') return false;
    }
    return true;
  default: return true;
  }
}

static bool key_is(const char *k, size_t klen, const char *name) {
  return strlen(name) == klen && memcmp(k, name, klen) == 0;
}

static bool parse_bool(const char *v, size_t n, bool *out) {
  if (n == 4 && memcmp(v, "true", 4) == 0) return *out = true, true;
  if (n == 5 && memcmp(v, "false", 5) == 0) return *out = false, true;
  return false;
}

/* Decimal with an optional binary suffix (k, m, g; jemalloc takes plain numbers only). */
static bool parse_size(const char *v, size_t n, uint64_t max, uint64_t *out) {
  uint64_t x = 0;
  size_t i = 0;
  if (n == 0) return false;
  for (; i < n && v[i] >= '0' && v[i] <= '9'; i++) {
    if (x > (UINT64_MAX - 9) / 10) return false;
    x = x * 10 + (uint64_t)(v[i] - '0');
  }
  if (i == 0) return false;
  if (i < n) {
    unsigned sh;
    switch (v[i]) {
    case 'k': case 'K': sh = 10; break;
    case 'm': case 'M': sh = 20; break;
    case 'g': case 'G': sh = 30; break;
    default: return false;
    }
    i++;
    if (i < n && (v[i] == 'b' || v[i] == 'B')) i++;
    if (i != n || x > (max >> sh)) return false;
    x <<= sh;
  }
  if (x > max) return false;
  *out = x;
  return true;
}

/* Heap profiling options (prof.c); true if k is one of them. Kept in one block. */
static bool conf_parse_prof(const char *k, size_t klen, const char *v, size_t vlen, const char *source,
                            int *problems) {
  prof_opt_t *po = &prof_opt;
  bool b;
  uint64_t x;
  bool *dst = key_is(k, klen, "prof")                      ? &po->prof
              : key_is(k, klen, "prof_active")             ? &po->active
              : key_is(k, klen, "prof_thread_active_init") ? &po->thread_active_init
              : key_is(k, klen, "prof_gdump")              ? &po->gdump
              : key_is(k, klen, "prof_final")              ? &po->final
              : key_is(k, klen, "prof_leak")               ? &po->leak
              : key_is(k, klen, "prof_accum")              ? &po->accum
                                                           : NULL;
  if (dst) {
    if (parse_bool(v, vlen, &b)) {
      *dst = b;
    } else {
      report("invalid value", k, klen, v, vlen, source, "true, false");
      (*problems)++;
    }
  } else if (key_is(k, klen, "lg_prof_sample")) {
    if (vlen <= 2 && parse_size(v, vlen, 62, &x)) {
      po->lg_sample = (unsigned)x;
    } else {
      report("invalid value", k, klen, v, vlen, source, "an integer from 0 to 62 (log2 of the mean bytes between samples)");
      (*problems)++;
    }
  } else if (key_is(k, klen, "lg_prof_interval")) {
    if (vlen == 2 && memcmp(v, "-1", 2) == 0) {
      po->lg_interval = -1;
    } else if (vlen <= 2 && parse_size(v, vlen, 62, &x)) {
      po->lg_interval = (int)x;
    } else {
      report("invalid value", k, klen, v, vlen, source, "-1 (off) or an integer from 0 to 62 (log2 of bytes between dumps)");
      (*problems)++;
    }
  } else if (key_is(k, klen, "prof_prefix")) {
    if (vlen > 0 && vlen < sizeof(po->prefix) - 128) {
      memcpy(po->prefix, v, vlen);
      po->prefix[vlen] = '\0';
    } else {
      report("invalid value", k, klen, v, vlen, source, "a non-empty path prefix of at most 127 characters");
      (*problems)++;
    }
  } else if (key_is(k, klen, "prof_format")) {
    if (vlen == 8 && memcmp(v, "jemalloc", 8) == 0) {
      po->format = PROF_FMT_JEMALLOC;
    } else if (vlen == 5 && memcmp(v, "pprof", 5) == 0) {
      po->format = PROF_FMT_PPROF;
    } else if (vlen == 4 && memcmp(v, "both", 4) == 0) {
      po->format = PROF_FMT_JEMALLOC | PROF_FMT_PPROF;
    } else {
      report("invalid value", k, klen, v, vlen, source, "jemalloc, pprof, both");
      (*problems)++;
    }
  } else if (key_is(k, klen, "prof_signal")) {
    static const struct { const char *name; int sig; } sigs[] = {
        {"off", 0}, {"false", 0}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGPROF", SIGPROF},
        {"SIGURG", SIGURG}, {"SIGWINCH", SIGWINCH}, {"SIGHUP", SIGHUP}, {"SIGTTIN", SIGTTIN},
        {"SIGTTOU", SIGTTOU}, {NULL, 0}};
    int found = -1;
    for (int i = 0; sigs[i].name; i++) {
      const char *n = sigs[i].name;
      if (key_is(v, vlen, n) || (n[0] == 'S' && key_is(v, vlen, n + 3))) found = sigs[i].sig;
    }
    if (found < 0 && parse_size(v, vlen, 64, &x) && x >= 1 && x != SIGKILL && x != SIGSTOP) found = (int)x;
    if (found >= 0) {
      po->signal = found;
    } else {
      report("invalid value", k, klen, v, vlen, source,
             "off, SIGUSR1, SIGUSR2, SIGPROF, SIGURG, SIGWINCH, SIGHUP, SIGTTIN, SIGTTOU or a signal number");
      (*problems)++;
    }
  } else {
    return false;
  }
  return true;
}

int conf_parse(opt_t *o, const char *s, const char *source) {
  int problems = 0;
  while (s && *s) {
    while (*s == ',' || *s == ' ' || *s == '\n' || *s == '\t') s++;
    if (!*s) break;
    const char *k = s;
    while (*s && *s != ':' && *s != ',' && *s != '\n') s++; /* a key never spans lines */
    size_t klen = (size_t)(s - k);
    if (*s != ':') {
      report("missing value for option", k, klen, NULL, 0, source, "key:value");
      problems++;
      continue;
    }
    s++;
    const char *v = s;
    while (*s && *s != ',' && *s != '\n') s++;
    size_t vlen = (size_t)(s - v);
    while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t' || v[vlen - 1] == '\r')) vlen--;
    bool b;
    uint64_t x;
    if (key_is(k, klen, "narenas")) {
      if (parse_size(v, vlen, MAX_NARENAS, &x) && x >= 1) {
        o->narenas = (unsigned)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "an integer from 1 to 4095");
        problems++;
      }
    } else if (key_is(k, klen, "tcache_max")) {
      if (parse_size(v, vlen, (uint64_t)8 << 20, &x)) {
        o->tcache_max = (size_t)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "bytes from 0 to 8388608 (8M)");
        problems++;
      }
    } else if (key_is(k, klen, "tcache_nslots_small_min") || key_is(k, klen, "tcache_nslots_small_max")) {
      if (parse_size(v, vlen, TCACHE_NSLOTS_MAX, &x) && x >= 1) {
        *(key_is(k, klen, "tcache_nslots_small_min") ? &o->tcache_nslots_small_min : &o->tcache_nslots_small_max) =
            (unsigned)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "an integer from 1 to 8192 (slots of a small class's bin)");
        problems++;
      }
    } else if (key_is(k, klen, "lg_tcache_nslots_mul")) {
      bool neg = vlen > 1 && v[0] == '-';
      if (vlen - neg <= 2 && parse_size(v + neg, vlen - neg, 16, &x)) {
        o->lg_tcache_nslots_mul = neg ? -(int64_t)x : (int64_t)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "an integer from -16 to 16 (log2 of slots per slab region)");
        problems++;
      }
    } else if (key_is(k, klen, "lg_tcache_flush_small_div") || key_is(k, klen, "lg_tcache_flush_large_div")) {
      if (vlen <= 2 && parse_size(v, vlen, 16, &x) && x >= 1) {
        *(key_is(k, klen, "lg_tcache_flush_small_div") ? &o->lg_tcache_flush_small_div
                                                       : &o->lg_tcache_flush_large_div) = (unsigned)x;
      } else {
        report("invalid value", k, klen, v, vlen, source,
               "an integer from 1 to 16 (an overflow keeps the bin's capacity >> N)");
        problems++;
      }
    } else if (key_is(k, klen, "tcache_gc_incr_bytes")) {
      if (parse_size(v, vlen, (uint64_t)1 << 62, &x) && x >= 1) {
        o->tcache_gc_incr_bytes = (size_t)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "bytes from 1, e.g. 65536 or 64K");
        problems++;
      }
    } else if (key_is(k, klen, "tcache_total_max")) {
      if (parse_size(v, vlen, (uint64_t)1 << 62, &x)) {
        o->tcache_total_max = (size_t)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "bytes, e.g. 16777216 or 16M; 0: no cap");
        problems++;
      }
    } else if (key_is(k, klen, "oversize_threshold")) {
      if (parse_size(v, vlen, (uint64_t)1 << 62, &x)) {
        o->oversize_threshold = x ? (size_t)x : (size_t)1 << 62; /* 0 disables, as in jemalloc */
      } else {
        report("invalid value", k, klen, v, vlen, source, "bytes, e.g. 8388608 or 8M; 0 disables");
        problems++;
      }
    } else if (key_is(k, klen, "dirty_decay_ms") || key_is(k, klen, "muzzy_decay_ms")) {
      int64_t *dst = key_is(k, klen, "dirty_decay_ms") ? &o->dirty_decay_ms : &o->muzzy_decay_ms;
      if (vlen == 2 && memcmp(v, "-1", 2) == 0) {
        *dst = -1;
      } else if (parse_size(v, vlen, (uint64_t)1 << 40, &x) && x == (uint64_t)(int64_t)x) {
        *dst = (int64_t)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "milliseconds >= 0, or -1 to never purge by age");
        problems++;
      }
    } else if (key_is(k, klen, "stats_print_opts") || key_is(k, klen, "stats_file") ||
               key_is(k, klen, "stats_interval_opts")) {
      /* statistics output: strings kept in fixed buffers */
      bool file = key_is(k, klen, "stats_file");
      char *dst = file ? o->stats_file
                  : key_is(k, klen, "stats_interval_opts") ? o->stats_interval_opts
                                                           : o->stats_print_opts;
      size_t cap = file ? sizeof(o->stats_file) : sizeof(o->stats_print_opts);
      size_t bad = 0;
      for (size_t i = 0; i < vlen && !file; i++) bad += strchr("JgmdablxePDT", v[i]) == NULL;
      if (vlen < cap && !bad && (vlen > 0 || !file)) {
        memcpy(dst, v, vlen);
        dst[vlen] = '\0';
      } else {
        report("invalid value", k, klen, v, vlen, source,
               file ? "a path of 1 to 255 bytes; %p is replaced by the pid"
                    : "up to 31 of the letters J g m d a b l x e, P (OpenMetrics), T, D");
        problems++;
      }
    } else if (key_is(k, klen, "stats_labels")) {
      if (stats_labels_valid(v, vlen)) {
        memcpy(o->stats_labels, v, vlen);
        o->stats_labels[vlen] = '\0';
      } else {
        report("invalid value", k, klen, v, vlen, source,
               "name=value pairs separated by ';' (at most 255 bytes): names [a-zA-Z_][a-zA-Z0-9_]*, "
               "not pid, program or __*, each once; values without '\"', '\\' or ';'");
        problems++;
      }
    } else if (key_is(k, klen, "stats_interval_ms")) {
      if (parse_size(v, vlen, (uint64_t)1 << 40, &x) && x >= 10) {
        o->stats_interval_ms = x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "milliseconds from 10 to 2^40");
        problems++;
      }
    } else if (key_is(k, klen, "stats_interval")) {
      if (vlen == 2 && memcmp(v, "-1", 2) == 0) {
        o->stats_interval = -1;
      } else if (parse_size(v, vlen, (uint64_t)1 << 62, &x)) {
        o->stats_interval = (int64_t)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "-1 (off) or bytes allocated between statistics prints");
        problems++;
      }
    } else if (key_is(k, klen, "lg_tcache_max")) {
      /* jemalloc's older spelling of tcache_max: log2 of the largest cached size */
      if (vlen <= 2 && parse_size(v, vlen, 23, &x)) {
        o->tcache_max = (size_t)1 << x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "an integer from 0 to 23 (log2 of tcache_max)");
        problems++;
      }
    } else if (key_is(k, klen, "slab_sizes")) {
      /* jemalloc's syntax: begin-end:pages, '|'-separated; checked whole before any is kept. */
      unsigned n = 0;
      bool ok = vlen > 0;
      for (size_t i = 0; ok && i < vlen;) {
        size_t j = i;
        while (j < vlen && v[j] != '|') j++;
        const char *seg = v + i, *dash = memchr(seg, '-', j - i), *colon = memchr(seg, ':', j - i);
        uint64_t b0, e0, pg;
        ok = n < sizeof(o->slab_sizes) / sizeof(o->slab_sizes[0]) && dash && colon && dash < colon &&
             parse_size(seg, (size_t)(dash - seg), UINT64_MAX, &b0) &&
             parse_size(dash + 1, (size_t)(colon - dash - 1), UINT64_MAX, &e0) &&
             parse_size(colon + 1, (size_t)(v + j - colon - 1), 1u << 20, &pg) && b0 <= e0 && pg >= 1;
        if (ok) o->slab_sizes[n].begin = b0, o->slab_sizes[n].end = e0, o->slab_sizes[n++].pages = pg;
        i = j + 1;
        if (j + 1 == vlen) ok = false; /* a trailing '|' */
      }
      if (ok) {
        o->n_slab_sizes = n;
      } else {
        report("invalid value", k, klen, v, vlen, source,
               "<begin>-<end>:<pages>[|<begin>-<end>:<pages>...], sizes in bytes, begin <= end, pages >= 1, "
               "at most 16 ranges");
        problems++;
      }
    } else if (key_is(k, klen, "zero_realloc")) {
      if (key_is(v, vlen, "free")) {
        o->zero_realloc = ZR_FREE;
      } else if (key_is(v, vlen, "alloc")) {
        o->zero_realloc = ZR_ALLOC;
      } else if (key_is(v, vlen, "abort")) {
        o->zero_realloc = ZR_ABORT;
      } else {
        report("invalid value", k, klen, v, vlen, source, "free, alloc, abort");
        problems++;
      }
    } else if (key_is(k, klen, "max_background_threads")) {
      if (parse_size(v, vlen, MAX_NARENAS + 1, &x) && x >= 1) {
        o->max_background_threads = (unsigned)x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "an integer from 1 to 4096");
        problems++;
      }
    } else if (key_is(k, klen, "limit_headroom")) {
      if (parse_size(v, vlen, (uint64_t)1 << 50, &x)) {
        o->limit_headroom = x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "bytes, e.g. 67108864 or 64M; 0 for 1/32 of the limit");
        problems++;
      }
    } else if (key_is(k, klen, "thp")) {
      if (vlen == 7 && memcmp(v, "default", 7) == 0) {
        o->thp = THP_DEFAULT;
      } else if (vlen == 6 && memcmp(v, "always", 6) == 0) {
        o->thp = THP_ALWAYS;
      } else if (vlen == 5 && memcmp(v, "never", 5) == 0) {
        o->thp = THP_NEVER;
      } else {
        report("invalid value", k, klen, v, vlen, source, "default, always, never");
        problems++;
      }
    } else if (key_is(k, klen, "metadata_thp")) {
      if (vlen == 8 && memcmp(v, "disabled", 8) == 0) {
        o->metadata_thp = MTHP_DISABLED;
      } else if (vlen == 4 && memcmp(v, "auto", 4) == 0) {
        o->metadata_thp = MTHP_AUTO;
      } else if (vlen == 6 && memcmp(v, "always", 6) == 0) {
        o->metadata_thp = MTHP_ALWAYS;
      } else {
        report("invalid value", k, klen, v, vlen, source, "disabled, auto, always");
        problems++;
      }
    } else if (key_is(k, klen, "guard_sample_interval")) {
      if (parse_size(v, vlen, (uint64_t)1 << 40, &x) && (vlen == 0 || (v[vlen - 1] >= '0' && v[vlen - 1] <= '9'))) {
        o->guard_sample_interval = (size_t)x;
      } else {
        report("invalid value", k, klen, v, vlen, source,
               "an integer from 0 (off) to 1099511627776: one in N fresh allocations is guarded");
        problems++;
      }
    } else if (key_is(k, klen, "commit_limit")) {
      if (vlen == 4 && memcmp(v, "auto", 4) == 0) {
        o->commit_limit = COMMIT_AUTO;
      } else if (vlen == 3 && memcmp(v, "off", 3) == 0) {
        o->commit_limit = 0;
      } else if (parse_size(v, vlen, (uint64_t)1 << 62, &x) && x >= ((uint64_t)1 << 20)) {
        o->commit_limit = (size_t)x;
      } else {
        report("invalid value", k, klen, v, vlen, source,
               "auto (the cgroup memory limit, checked against its usage), off, or bytes >= 1M, e.g. 900M");
        problems++;
      }
    } else if (key_is(k, klen, "soft_limit") || key_is(k, klen, "hard_limit")) {
      uint64_t *dst = key_is(k, klen, "soft_limit") ? &o->soft_limit : &o->hard_limit;
      if (parse_size(v, vlen, (uint64_t)1 << 62, &x) && (x == 0 || x >= ((uint64_t)1 << 20))) {
        *dst = x;
      } else {
        report("invalid value", k, klen, v, vlen, source, "bytes >= 1M, e.g. 512M or 2G; 0: none");
        problems++;
      }
    } else if (key_is(k, klen, "junk")) {
      if (vlen == 4 && memcmp(v, "true", 4) == 0) {
        o->junk = JUNK_ALLOC | JUNK_FREE;
      } else if (vlen == 5 && memcmp(v, "false", 5) == 0) {
        o->junk = JUNK_NONE;
      } else if (vlen == 5 && memcmp(v, "alloc", 5) == 0) {
        o->junk = JUNK_ALLOC;
      } else if (vlen == 4 && memcmp(v, "free", 4) == 0) {
        o->junk = JUNK_FREE;
      } else {
        report("invalid value", k, klen, v, vlen, source, "true, false, alloc, free");
        problems++;
      }
    } else if (conf_parse_prof(k, klen, v, vlen, source, &problems)) {
      /* done */
    } else {
      bool *dst = key_is(k, klen, "tcache")         ? &o->tcache
                  : key_is(k, klen, "retain")       ? &o->retain
                  : key_is(k, klen, "arena_spread") ? &o->arena_spread
                  : key_is(k, klen, "tiny_class")   ? &o->tiny_class
                  : key_is(k, klen, "zero")         ? &o->zero
                  : key_is(k, klen, "abort")        ? &o->abort
                  : key_is(k, klen, "abort_conf")   ? &o->abort_conf
                  : key_is(k, klen, "confirm_conf") ? &o->confirm_conf
                  : key_is(k, klen, "stats_print")  ? &o->stats_print
                  : key_is(k, klen, "stats_metrics_detail") ? &o->stats_metrics_detail
                  : key_is(k, klen, "background_thread") ? &o->background_thread
                  : key_is(k, klen, "pressure_purge") ? &o->pressure_purge
                  : key_is(k, klen, "xmalloc") ? &o->xmalloc
                  : key_is(k, klen, "experimental_infallible_new") ? &o->infallible_new
                  : key_is(k, klen, "prof_leak_error") ? &prof_opt.leak_error
                                                    : NULL;
      if (dst) {
        if (parse_bool(v, vlen, &b)) {
          *dst = b;
        } else {
          report("invalid value", k, klen, v, vlen, source, "true, false");
          problems++;
        }
      } else {
        const conf_noop_t *nk = NULL;
        for (int i = 0; noop_keys[i].name && !nk; i++) {
          if (key_is(k, klen, noop_keys[i].name)) nk = &noop_keys[i];
        }
        if (nk && !noop_value_ok(nk->kind, v, vlen)) {
          report("invalid value", k, klen, v, vlen, source,
                 nk->kind == NV_BOOL ? "true, false" : nk->kind == NV_INT ? "an integer" : "a number");
          problems++;
        } else if (nk) {
          report_as("no effect in strata: option", k, klen, NULL, 0, source, "", nk->why);
        } else if (klen > 13 && memcmp(k, "experimental_", 13) == 0) {
          /* jemalloc tolerates experimental options it does not know: so does strata */
          report_as("no effect in strata: option", k, klen, NULL, 0, source, "", "an unknown experimental option");
        } else {
          report_unknown(k, klen, source);
          problems++;
        }
      }
    }
  }
  return problems;
}

/* getenv without libc: environ may not be set when the loader makes its first call. */
static const char *env_get(const char *name, char *buf, size_t cap) {
  size_t n = strlen(name);
  if (environ != NULL) {
    for (char **e = environ; *e; e++) {
      if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    }
    return NULL;
  }
  int len = os_read_file("/proc/self/environ", buf, cap);
  for (int i = 0; i < len;) {
    const char *e = buf + i;
    size_t l = strlen(e);
    if (strncmp(e, name, n) == 0 && e[n] == '=') return e + n + 1;
    i += (int)l + 1;
  }
  return NULL;
}

void conf_print(const opt_t *o) {
  char a[24], b[24], c[24], d[24], e[24], f[24], g[24], h[24], i[24], j[24], k[24], l[24], m[24], n[24], q[24],
      r[24], s[24], t[24];
  static const char *const thp[] = {"default", "always", "never"};
  static const char *const mthp[] = {"disabled", "auto", "always"};
  static const char *const zr[] = {"free", "alloc", "abort"};
  const char *junk = o->junk == (JUNK_ALLOC | JUNK_FREE) ? "true"
                     : o->junk == JUNK_ALLOC             ? "alloc"
                     : o->junk == JUNK_FREE              ? "free"
                                                         : "false";
  const char *parts[] = {"<strata>: conf: narenas:", fmt_u64(a, narenas),
                         ",tcache:", o->tcache ? "true" : "false",
                         ",tcache_max:", fmt_u64(b, o->tcache_max),
                         ",oversize_threshold:", fmt_u64(c, o->oversize_threshold),
                         ",retain:", o->retain ? "true" : "false",
                         ",arena_spread:", o->arena_spread ? "true" : "false",
                         ",tiny_class:", o->tiny_class ? "true" : "false",
                         ",junk:", junk,
                         ",zero:", o->zero ? "true" : "false",
                         ",abort:", o->abort ? "true" : "false",
                         ",abort_conf:", o->abort_conf ? "true" : "false",
                         ",dirty_decay_ms:", o->dirty_decay_ms < 0 ? "-1" : fmt_u64(d, (uint64_t)o->dirty_decay_ms),
                         ",muzzy_decay_ms:", o->muzzy_decay_ms < 0 ? "-1" : fmt_u64(e, (uint64_t)o->muzzy_decay_ms),
                         ",background_thread:", o->background_thread ? "true" : "false",
                         ",max_background_threads:",
                         fmt_u64(f, o->max_background_threads ? o->max_background_threads : os_ncpus),
                         ",thp:", thp[o->thp], ",metadata_thp:", mthp[o->metadata_thp],
                         ",limit_headroom:", fmt_u64(g, o->limit_headroom),
                         ",guard_sample_interval:", fmt_u64(h, o->guard_sample_interval),
                         ",commit_limit:", o->commit_limit == COMMIT_AUTO ? "auto" : o->commit_limit ? fmt_u64(i, o->commit_limit) : "off",
                         ",tcache_total_max:", fmt_u64(j, o->tcache_total_max),
                         ",tcache_nslots_small_min:", fmt_u64(m, o->tcache_nslots_small_min),
                         ",tcache_nslots_small_max:", fmt_u64(n, o->tcache_nslots_small_max),
                         ",lg_tcache_nslots_mul:", o->lg_tcache_nslots_mul < 0 ? "-" : "",
                         fmt_u64(q, (uint64_t)(o->lg_tcache_nslots_mul < 0 ? -o->lg_tcache_nslots_mul
                                                                           : o->lg_tcache_nslots_mul)),
                         ",lg_tcache_flush_small_div:", fmt_u64(r, o->lg_tcache_flush_small_div),
                         ",lg_tcache_flush_large_div:", fmt_u64(s, o->lg_tcache_flush_large_div),
                         ",tcache_gc_incr_bytes:", fmt_u64(t, o->tcache_gc_incr_bytes),
                         ",soft_limit:", fmt_u64(k, o->soft_limit), ",hard_limit:", fmt_u64(l, o->hard_limit),
                         ",pressure_purge:", o->pressure_purge ? "true" : "false",
                         ",xmalloc:", o->xmalloc ? "true" : "false",
                         ",zero_realloc:", zr[o->zero_realloc],
                         ",confirm_conf:true\n"};
  msg_parts(parts, (int)(sizeof(parts) / sizeof(parts[0])));
}

/* opt.malloc_conf.*: each source's string as read (pointers into the environment, the
 * program's data or filebuf, never freed). */
static const char *conf_sources[CONF_SRC_N];
const char *conf_source_string(unsigned src) {
  const char *s = src < CONF_SRC_N ? __atomic_load_n(&conf_sources[src], __ATOMIC_ACQUIRE) : NULL;
  return s ? s : "";
}

void conf_init(void) {
  static char envbuf[65536], filebuf[4096];
  int problems = 0;
  const char *prog[2], *prog_name[2];
  unsigned nprog = conf_program_strings(prog, prog_name);
  if (nprog > 0) conf_sources[CONF_SRC_GLOBAL] = prog[0]; /* opt.malloc_conf.global_var */
  for (unsigned i = 0; i < nprog; i++) problems += conf_parse(&opt, prog[i], prog_name[i]);
  if (os_read_file("/etc/strata.conf", filebuf, sizeof(filebuf)) > 0) {
    /* One option per line or comma-separated; '#' starts a comment line. */
    for (char *p = filebuf; *p; p++) {
      if (*p == '#' && (p == filebuf || p[-1] == '\n')) {
        while (*p && *p != '\n') *p++ = ' ';
      }
    }
    conf_sources[CONF_SRC_FILE] = filebuf;
    problems += conf_parse(&opt, filebuf, "/etc/strata.conf");
  }
  const char *s = env_get("STRATA_CONF", envbuf, sizeof(envbuf));
  if (s) problems += conf_parse(&opt, s, "STRATA_CONF");
  s = env_get("MALLOC_CONF", envbuf, sizeof(envbuf));
  if (s) conf_sources[CONF_SRC_ENV] = s, problems += conf_parse(&opt, s, "MALLOC_CONF");
  const char *harder = strata_malloc_conf_2_conf_harder, *harder_name = "strata_malloc_conf_2_conf_harder";
#ifdef STRATA_OVERRIDE
  if (malloc_conf_2_conf_harder != NULL) harder = malloc_conf_2_conf_harder, harder_name = "malloc_conf_2_conf_harder";
#endif
  if (harder != NULL) {
    conf_sources[CONF_SRC_GLOBAL2] = harder; /* opt.malloc_conf.global_var_2_conf_harder */
    problems += conf_parse(&opt, harder, harder_name);
  }
  if (opt.stats_interval >= 0) { /* hooks.c's tick, which rides on bg_create_pending */
    __atomic_store_n(&slow_tick_on, true, __ATOMIC_RELEASE);
    __atomic_store_n(&bg_create_pending, true, __ATOMIC_RELEASE);
  }
  if (problems && opt.abort_conf) strata_fatal("invalid configuration (abort_conf:true)");
  if (problems && opt.abort) strata_fatal("invalid configuration (abort:true aborts on every warning)");
}

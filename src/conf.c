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
    .junk = JUNK_NONE,
    .zero = false,
    .abort = false,
    .abort_conf = false,
    .confirm_conf = false,
    .dirty_decay_ms = 10000, /* jemalloc's default */
    .stats_interval_ms = 10000, /* Prometheus' usual scrape interval is 15 s or more */
    .muzzy_decay_ms = 0,     /* jemalloc 5.3's default */
    .background_thread = false,
    .max_background_threads = 0,
    .thp = THP_DEFAULT,
    .metadata_thp = MTHP_DISABLED,
    .limit_headroom = 0,
    .guard_sample_interval = 0,
    .commit_limit = COMMIT_AUTO,
    /* 16 MiB: 64 busy threads' worth of a typical cache (256 KiB, wl_nativethreads);
     * a single thread's full cache is far below it, so only thread-heavy programs meet it. */
    .tcache_total_max = (size_t)16 << 20,
};

/* The program's options strings (jemalloc's malloc_conf): weak definitions, so that the
 * program's own definition takes their place in a static link and a dynamic one. */
STRATA_EXPORT __attribute__((weak)) const char *strata_malloc_conf = NULL;
#ifdef STRATA_OVERRIDE
__attribute__((weak, visibility("default"))) const char *malloc_conf = NULL;
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

static const char *const known_keys =
    "narenas, tcache, tcache_max, oversize_threshold, retain, arena_spread, junk, zero, abort, abort_conf, confirm_conf, "
    "dirty_decay_ms, muzzy_decay_ms, background_thread, max_background_threads, thp, metadata_thp, "
    "limit_headroom, stats_print, stats_print_opts, stats_file, stats_labels, stats_interval_ms, stats_metrics_detail, "
    "guard_sample_interval, commit_limit, tcache_total_max, prof, prof_active, prof_thread_active_init, "
    "lg_prof_sample, prof_prefix, lg_prof_interval, prof_gdump, prof_final, prof_leak, prof_accum, "
    "prof_format, prof_signal";
/* jemalloc options a later version of strata implements: accepted and ignored, with a note. */
static const char *const later_keys[] = {"percpu_arena", "lg_tcache_max", NULL};

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

static void report(const char *what, const char *key, size_t klen, const char *val, size_t vlen,
                   const char *source, const char *accepted) {
  char k[64], v[128];
  if (klen >= sizeof(k)) klen = sizeof(k) - 1;
  if (vlen >= sizeof(v)) vlen = sizeof(v) - 1;
  memcpy(k, key, klen);
  k[klen] = '\0';
  if (val) memcpy(v, val, vlen);
  v[val ? vlen : 0] = '\0';
  if (val == NULL) {
    const char *parts[] = {"<strata>: conf: ", what, " \"", k, "\" in ", source, " (accepted: ", accepted, ")\n"};
    msg_parts(parts, 9);
  } else {
    const char *parts[] = {"<strata>: conf: ", what, " \"", v, "\" for \"", k, "\" in ", source,
                           " (accepted: ", accepted, ")\n"};
    msg_parts(parts, 11);
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
      report("missing value (key:value) for option", k, klen, NULL, 0, source, known_keys);
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
    } else if (key_is(k, klen, "stats_print_opts") || key_is(k, klen, "stats_file")) {
      /* statistics output: strings kept in fixed buffers */
      bool file = key_is(k, klen, "stats_file");
      char *dst = file ? o->stats_file : o->stats_print_opts;
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
                  : key_is(k, klen, "zero")         ? &o->zero
                  : key_is(k, klen, "abort")        ? &o->abort
                  : key_is(k, klen, "abort_conf")   ? &o->abort_conf
                  : key_is(k, klen, "confirm_conf") ? &o->confirm_conf
                  : key_is(k, klen, "stats_print")  ? &o->stats_print
                  : key_is(k, klen, "stats_metrics_detail") ? &o->stats_metrics_detail
                  : key_is(k, klen, "background_thread") ? &o->background_thread
                                                    : NULL;
      if (dst) {
        if (parse_bool(v, vlen, &b)) {
          *dst = b;
        } else {
          report("invalid value", k, klen, v, vlen, source, "true, false");
          problems++;
        }
      } else {
        bool later = false;
        for (int i = 0; later_keys[i]; i++) later |= key_is(k, klen, later_keys[i]);
        if (later) {
          report("not supported yet, ignored: option", k, klen, NULL, 0, source, known_keys);
        } else {
          report("unknown option", k, klen, NULL, 0, source, known_keys);
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
  char a[24], b[24], c[24], d[24], e[24], f[24], g[24], h[24], i[24], j[24];
  static const char *const thp[] = {"default", "always", "never"};
  static const char *const mthp[] = {"disabled", "auto", "always"};
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
                         ",confirm_conf:true\n"};
  msg_parts(parts, (int)(sizeof(parts) / sizeof(parts[0])));
}

void conf_init(void) {
  static char envbuf[65536], filebuf[4096];
  int problems = 0;
  const char *prog[2], *prog_name[2];
  for (unsigned i = 0, n = conf_program_strings(prog, prog_name); i < n; i++)
    problems += conf_parse(&opt, prog[i], prog_name[i]);
  if (os_read_file("/etc/strata.conf", filebuf, sizeof(filebuf)) > 0) {
    /* One option per line or comma-separated; '#' starts a comment line. */
    for (char *p = filebuf; *p; p++) {
      if (*p == '#' && (p == filebuf || p[-1] == '\n')) {
        while (*p && *p != '\n') *p++ = ' ';
      }
    }
    problems += conf_parse(&opt, filebuf, "/etc/strata.conf");
  }
  const char *s = env_get("STRATA_CONF", envbuf, sizeof(envbuf));
  if (s) problems += conf_parse(&opt, s, "STRATA_CONF");
  s = env_get("MALLOC_CONF", envbuf, sizeof(envbuf));
  if (s) problems += conf_parse(&opt, s, "MALLOC_CONF");
  if (problems && opt.abort_conf) strata_fatal("invalid configuration (abort_conf:true)");
  if (problems && opt.abort) strata_fatal("invalid configuration (abort:true aborts on every warning)");
}

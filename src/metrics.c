/*
 * metrics.c - statistics for Prometheus: the OpenMetrics text format (malloc_stats_print
 * letter "P") and the Prometheus text format a node_exporter textfile collector reads
 * ("T"), generated from ctl.c's table: every stats.* leaf and every scalar
 * stats.arenas.<i>.* leaf is a family; per-arena and per-size-class series (bounded:
 * arenas in use, 36 small classes, large classes in use) only with "D" or
 * stats_metrics_detail:true. Also the textfile exporter (stats_file, stats_interval_ms):
 * its own thread, started from a constructor (never inside malloc), rewrites the file
 * atomically (temporary name, then rename) with raw syscalls and no malloc, labels every
 * series with the pid, program and stats_labels, and removes the file at normal exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

typedef struct {
  out_t *o;
  bool om;            /* OpenMetrics; else Prometheus text 0.0.4 */
  bool detail;
  const char *labels; /* name="value",... on every series (the exporter's pid, program...), or "" */
} mw_t;

/* The base unit of a leaf's metric: values in pages and nanoseconds are converted. */
static const char *leaf_unit(const ctl_node_t *c) {
  if (c->flags & (F_BYTES | F_PAGES)) return "bytes";
  if (c->flags & F_NS) return "seconds";
  return NULL;
}

/* "# TYPE"/"# UNIT"/"# HELP" lines of a family; name has no _total. */
static void family(mw_t *w, const char *name, bool counter, const char *unit, const char *help) {
  out_t *o = w->o;
  out_str(o, "# TYPE ");
  out_str(o, name);
  if (counter && !w->om) out_str(o, "_total");
  out_str(o, counter ? " counter\n" : " gauge\n");
  if (unit && w->om) {
    out_str(o, "# UNIT ");
    out_str(o, name);
    out_str(o, " ");
    out_str(o, unit);
    out_str(o, "\n");
  }
  out_str(o, "# HELP ");
  out_str(o, name);
  if (counter && !w->om) out_str(o, "_total");
  out_str(o, " ");
  out_str(o, help);
  out_str(o, "\n");
}

/* HELP says what the value is: a leaf counted in pages is written in bytes. */
static void leaf_family(mw_t *w, const char *name, const ctl_node_t *c) {
  char help[160];
  const char *h = c->help;
  if ((c->flags & F_PAGES) && !strncmp(h, "pages ", 6) && strlen(h) + 1 < sizeof(help)) {
    memcpy(help, "bytes ", 6);
    strcpy(help + 6, h + 6);
    h = help;
  }
  family(w, name, c->flags & F_COUNTER, leaf_unit(c), h);
}

/* A value in its base unit: pages to bytes, nanoseconds to seconds (9 decimals, without
 * floating-point formatting). */
static void value(out_t *o, const ctl_node_t *c, uint64_t v) {
  if (c && (c->flags & F_PAGES)) v *= os_page;
  if (c && (c->flags & F_NS)) {
    char b[24];
    out_u64(o, v / 1000000000u);
    out_str(o, ".");
    fmt_u64(b, v % 1000000000u + 1000000000u);
    out_str(o, b + 1);
    return;
  }
  out_u64(o, v);
}

static void labels_open(mw_t *w, const char *lk, const char *lv) {
  out_t *o = w->o;
  if (!lk && !w->labels[0]) return;
  out_str(o, "{");
  out_str(o, w->labels);
  if (lk) {
    if (w->labels[0]) out_str(o, ",");
    out_str(o, lk);
    out_str(o, "=\"");
    out_str(o, lv);
    out_str(o, "\"");
  }
  out_str(o, "}");
}

static void sample(mw_t *w, const char *name, const ctl_node_t *c, const char *lk, const char *lv, uint64_t v) {
  out_t *o = w->o;
  out_str(o, name);
  if (c && (c->flags & F_COUNTER)) out_str(o, "_total");
  labels_open(w, lk, lv);
  out_str(o, " ");
  value(o, c, v);
  out_str(o, "\n");
}

/* name = prefix + leaf name (+ "_bytes" or "_seconds": the base unit, converted). */
static void metric_name(char *buf, size_t cap, const char *prefix, const char *sub, const ctl_node_t *leaf) {
  size_t n = 0;
  const char *parts[4] = {prefix, sub ? sub : "", sub ? "_" : "", leaf->name};
  for (int i = 0; i < 4; i++)
    for (const char *p = parts[i]; *p && n + 16 < cap; p++) buf[n++] = *p;
  buf[n] = '\0';
  const char *unit = leaf_unit(leaf);
  if (!unit) return;
  size_t l = strlen(buf), u = strlen(unit);
  if (l > u && buf[l - u - 1] == '_' && !strcmp(buf + l - u, unit)) return;
  strcat(buf, "_");
  strcat(buf, unit);
}

static bool metric_leaf(const ctl_node_t *c) {
  return c->type != CT_NONE && c->type != CT_STR && c->type != CT_VOID && c->type != CT_BOOL &&
         !(c->flags & F_NOPRINT);
}

/* Families of the scalar leaves under node n (stats.arenas.<i> or one of its children),
 * named strata_arena_<path>. */
static void arena_families(mw_t *w, const ctl_node_t *n, size_t *mib, size_t depth, size_t ipos,
                           const char *sub) {
  for (size_t k = 0; n->kids[k].name; k++) {
    const ctl_node_t *c = &n->kids[k];
    mib[depth] = k;
    if (c->flags & F_COMPAT) continue;
    if (c->kids && c->type == CT_NONE) {
      char path[64] = "";
      if (sub) {
        strcat(path, sub);
        strcat(path, "_");
      }
      if (strlen(path) + strlen(c->name) < sizeof(path)) strcat(path, c->name);
      arena_families(w, c, mib, depth + 1, ipos, path);
      continue;
    }
    if (!metric_leaf(c) || c->type == CT_SSIZE) continue;
    char name[96];
    metric_name(name, sizeof(name), "strata_arena_", sub, c);
    leaf_family(w, name, c);
    ctl_value_t v;
    if (!w->detail) {
      mib[ipos] = CTL_ARENAS_ALL;
      if (ctl_value(c, mib, depth + 1, &v) == 0) sample(w, name, c, NULL, NULL, v.u);
      continue;
    }
    for (size_t i = 0; i < ctl_narenas_total(); i++) {
      if (!ctl_arena_present(i)) continue;
      char lv[24];
      mib[ipos] = i;
      if (ctl_value(c, mib, depth + 1, &v) == 0) sample(w, name, c, "arena", fmt_u64(lv, i), v.u);
    }
  }
}

/* stats.mutexes.<name>.<field>: strata_mutex_<field>{mutex="<name>"}. */
static void mutex_families(mw_t *w, const ctl_node_t *n, size_t *mib) {
  const ctl_node_t *first = n->kids[0].kids ? &n->kids[0] : NULL;
  for (size_t f = 0; first && first->kids[f].name; f++) {
    const ctl_node_t *c = &first->kids[f];
    char name[96];
    metric_name(name, sizeof(name), "strata_mutex_", NULL, c);
    leaf_family(w, name, c);
    for (size_t k = 0; n->kids[k].name; k++) {
      ctl_value_t v;
      if (!n->kids[k].kids || (n->kids[k].flags & F_COMPAT)) continue;
      mib[2] = k;
      mib[3] = f;
      if (ctl_value(&n->kids[k].kids[f], mib, 4, &v) == 0) sample(w, name, c, "mutex", n->kids[k].name, v.u);
    }
  }
}

/* Per size class (merged over arenas): bins.<j> and lextents.<j> leaves, label size. */
static void class_families(mw_t *w, const ctl_node_t *ix, size_t *mib, size_t depth, const char *prefix,
                           size_t class_base) {
  const ctl_node_t *row = ix->ikid;
  for (size_t k = 0; row->kids[k].name; k++) {
    const ctl_node_t *c = &row->kids[k];
    if (!metric_leaf(c)) continue;
    char name[96];
    metric_name(name, sizeof(name), prefix, NULL, c);
    leaf_family(w, name, c);
    for (size_t i = 0; i < ix->index->count(); i++) {
      ctl_value_t v, nm;
      mib[depth] = i;
      mib[depth + 1] = 0; /* nmalloc: classes never used are left out */
      if (ctl_value(&row->kids[0], mib, depth + 2, &nm) || nm.u == 0) continue;
      mib[depth + 1] = k;
      char lv[24];
      if (ctl_value(c, mib, depth + 2, &v) == 0)
        sample(w, name, c, "size", fmt_u64(lv, sz_size[class_base + i]), v.u);
    }
  }
}

/* A ratio with 4 decimals, without floating-point formatting. */
static void ratio(mw_t *w, const char *name, const char *help, uint64_t num, uint64_t den) {
  family(w, name, false, NULL, help);
  out_str(w->o, name);
  labels_open(w, NULL, NULL);
  out_str(w->o, " ");
  if (den == 0) {
    out_str(w->o, "0\n");
    return;
  }
  uint64_t x = (uint64_t)((__uint128_t)num * 10000 / den);
  char b[24];
  out_u64(w->o, x / 10000);
  out_str(w->o, ".");
  fmt_u64(b, x % 10000 + 10000);
  out_str(w->o, b + 1);
  out_str(w->o, "\n");
}

static void metrics_write_labelled(ctl_write_cb *cb, void *opaque, const char *opts, const char *labels) {
  out_t o;
  mw_t w = {&o, strchr(opts, 'T') == NULL, strchr(opts, 'D') != NULL || opt.stats_metrics_detail, labels};
  uint64_t e = 1;
  size_t len = sizeof(e);
  strata_mallctl("epoch", &e, &len, &e, sizeof(e)); /* users forget it: fresh figures */
  out_init(&o, cb, opaque);
  size_t mib[CTL_MAX_DEPTH];
  const ctl_node_t *root = &ctl_root, *stats = NULL, *sa = NULL;
  for (size_t k = 0; root->kids[k].name; k++) {
    if (!strcmp(root->kids[k].name, "stats")) stats = &root->kids[k], mib[0] = k;
  }
  uint64_t allocated = 0, active = 0, resident = 0;
  for (size_t k = 0; stats && stats->kids[k].name; k++) {
    const ctl_node_t *c = &stats->kids[k];
    mib[1] = k;
    if (c->ikid) {
      sa = c;
      continue;
    }
    if (c->kids && !strcmp(c->name, "mutexes")) {
      mutex_families(&w, c, mib);
      continue;
    }
    if (c->kids) { /* stats.<dir>.<leaf>: strata_<dir>_<leaf> */
      for (size_t j = 0; c->kids[j].name; j++) {
        const ctl_node_t *l = &c->kids[j];
        ctl_value_t v;
        char name[96], pre[48] = "strata_";
        if (!metric_leaf(l) || strlen(c->name) + 9 > sizeof(pre)) continue;
        strcat(pre, c->name);
        strcat(pre, "_");
        metric_name(name, sizeof(name), pre, NULL, l);
        mib[2] = j;
        if (ctl_value(l, mib, 3, &v)) continue;
        leaf_family(&w, name, l);
        sample(&w, name, l, NULL, NULL, v.u);
      }
      continue;
    }
    if (!metric_leaf(c)) continue;
    char name[96];
    metric_name(name, sizeof(name), "strata_", NULL, c);
    leaf_family(&w, name, c);
    ctl_value_t v;
    if (ctl_value(c, mib, 2, &v)) continue;
    sample(&w, name, c, NULL, NULL, v.u);
    if (!strcmp(c->name, "allocated")) allocated = v.u;
    if (!strcmp(c->name, "active")) active = v.u;
    if (!strcmp(c->name, "resident")) resident = v.u;
  }
  ratio(&w, "strata_fragmentation_active_ratio", "active / allocated bytes (page-level fragmentation)", active,
        allocated);
  ratio(&w, "strata_fragmentation_resident_ratio", "resident / allocated bytes (what the OS sees)", resident,
        allocated);
  if (sa) {
    for (size_t k = 0; stats->kids[k].name; k++) {
      if (&stats->kids[k] == sa) mib[1] = k;
    }
    arena_families(&w, sa->ikid, mib, 3, 2, NULL);
    if (w.detail) {
      mib[2] = CTL_ARENAS_ALL;
      for (size_t k = 0; sa->ikid->kids[k].name; k++) {
        const ctl_node_t *c = &sa->ikid->kids[k];
        mib[3] = k;
        if (!strcmp(c->name, "bins")) class_families(&w, c, mib, 4, "strata_bin_", 1);
        if (!strcmp(c->name, "lextents")) class_families(&w, c, mib, 4, "strata_lextent_", SZ_NSMALL + 1);
      }
    }
  }
  if (w.om) out_str(&o, "# EOF\n");
  out_flush(&o);
}

void metrics_write(ctl_write_cb *cb, void *opaque, const char *opts) { metrics_write_labelled(cb, opaque, opts, ""); }

/* ---------------------------------------------------------------- textfile exporter */
static pid_t exporter_pid; /* the process that asked: a forked child does not write */
static char exporter_path[300], exporter_tmp[320];
/* pid="<pid>",program="<name>"[,<stats_labels>]: many processes write into one textfile
 * directory, and node_exporter refuses series that two files give the same labels. */
static char exporter_labels[640];

static void fd_write_cb(void *opaque, const char *s) {
  int *fd = opaque;
  size_t n = strlen(s);
  while (n > 0 && fd[1] == 0) {
    ssize_t r = syscall(SYS_write, fd[0], s, n);
    if (r <= 0) {
      fd[1] = r < 0 ? errno : ENOSPC;
      return;
    }
    s += r;
    n -= (size_t)r;
  }
}

/* Expands %p to the pid; false if it does not fit. */
static bool expand_path(char *out, size_t cap, const char *tmpl, pid_t pid, const char *suffix) {
  size_t n = 0;
  char num[24];
  for (const char *p = tmpl; *p; p++) {
    const char *ins = NULL;
    char one[2] = {*p, 0};
    if (p[0] == '%' && p[1] == 'p') {
      ins = fmt_u64(num, (uint64_t)pid);
      p++;
    } else {
      ins = one;
    }
    for (; *ins; ins++) {
      if (n + 1 >= cap) return false;
      out[n++] = *ins;
    }
  }
  for (; suffix && *suffix; suffix++) {
    if (n + 1 >= cap) return false;
    out[n++] = *suffix;
  }
  out[n] = '\0';
  return true;
}

/* Appends s to buf (cap bytes), escaped for a label value (\\, \", \n). */
static void label_append(char *buf, size_t cap, const char *s, bool escape) {
  size_t n = strlen(buf);
  for (; *s && n + 3 < cap; s++) {
    if (escape && (*s == '\\' || *s == '"' || *s == '\n')) {
      buf[n++] = '\\';
      buf[n++] = *s == '\n' ? 'n' : *s;
    } else {
      buf[n++] = *s;
    }
  }
  buf[n] = '\0';
}

/* The program name: the executable's base name (comm is cut to 15 bytes). */
static void program_name(char *out, size_t cap) {
  char exe[512];
  ssize_t r = syscall(SYS_readlinkat, AT_FDCWD, "/proc/self/exe", exe, sizeof(exe) - 1);
  out[0] = '\0';
  if (r > 0) {
    exe[r] = '\0';
    const char *b = strrchr(exe, '/');
    b = b ? b + 1 : exe;
    size_t l = strlen(b);
    if (l > 10 && !strcmp(b + l - 10, " (deleted)")) exe[(b - exe) + (ptrdiff_t)l - 10] = '\0';
    if (l + 1 <= cap) strcpy(out, b);
  }
  if (out[0] == '\0') {
    int n = os_read_file("/proc/self/comm", out, cap);
    if (n > 0 && out[n - 1] == '\n') n--;
    out[n > 0 ? n : 0] = '\0';
  }
}

static void exporter_labels_make(pid_t pid) {
  char num[24], prog[256];
  program_name(prog, sizeof(prog));
  char *b = exporter_labels;
  size_t cap = sizeof(exporter_labels);
  b[0] = '\0';
  label_append(b, cap, "pid=\"", false);
  label_append(b, cap, fmt_u64(num, (uint64_t)pid), false);
  label_append(b, cap, "\",program=\"", false);
  label_append(b, cap, prog, true);
  label_append(b, cap, "\"", false);
  /* stats_labels (conf.c validated it): name=value;name=value */
  for (const char *p = opt.stats_labels; *p;) {
    const char *eq = strchr(p, '='), *end = strchr(p, ';');
    if (!end) end = p + strlen(p);
    if (!eq || eq > end) break;
    char part[256];
    size_t nl = (size_t)(eq - p), vl = (size_t)(end - eq - 1);
    if (nl + vl + 8 > sizeof(part)) break;
    label_append(b, cap, ",", false);
    memcpy(part, p, nl);
    part[nl] = '\0';
    label_append(b, cap, part, false);
    label_append(b, cap, "=\"", false);
    memcpy(part, eq + 1, vl);
    part[vl] = '\0';
    label_append(b, cap, part, true);
    label_append(b, cap, "\"", false);
    p = *end ? end + 1 : end;
  }
}

/* A failed write is reported once (a full disk or a removed directory would otherwise
 * print every interval); the thread keeps trying, so the file returns when the cause
 * goes away. */
static bool exporter_reported;

static void exporter_fail(const char *what, const char *path, int err) {
  if (exporter_reported) return;
  exporter_reported = true;
  char e[24];
  const char *name = err == ENOENT ? " (ENOENT: no such directory)" : err == EACCES ? " (EACCES: permission denied)"
                   : err == EROFS  ? " (EROFS: read-only file system)" : err == ENOSPC ? " (ENOSPC: no space left)"
                   : err == ENOTDIR ? " (ENOTDIR: a path component is not a directory)" : "";
  const char *m[] = {"<strata>: stats_file: cannot ", what, " ", path, ": errno ", fmt_u64(e, (uint64_t)err), name,
                     "; retrying every stats_interval_ms, reported once\n"};
  msg_parts(m, 8);
}

/* One writer at a time (the thread, or the exit handler, after which the thread writes
 * no more): a write cut short by exit would leave the temporary file. */
static pthread_mutex_t exporter_lock = PTHREAD_MUTEX_INITIALIZER;
static bool exporter_done;

static void exporter_write(void) {
  if ((pid_t)syscall(SYS_getpid) != exporter_pid) return;
  pthread_mutex_lock(&exporter_lock);
  if (!exporter_done) {
    int fd[2] = {(int)syscall(SYS_openat, AT_FDCWD, exporter_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), 0};
    if (fd[0] < 0) {
      exporter_fail("create", exporter_tmp, errno);
    } else {
      metrics_write_labelled(fd_write_cb, fd, "T", exporter_labels);
      syscall(SYS_close, fd[0]);
      if (fd[1]) {
        exporter_fail("write", exporter_tmp, fd[1]);
        syscall(SYS_unlinkat, AT_FDCWD, exporter_tmp, 0);
      } else if (syscall(SYS_rename, exporter_tmp, exporter_path) != 0) {
        exporter_fail("rename to", exporter_path, errno);
        syscall(SYS_unlinkat, AT_FDCWD, exporter_tmp, 0);
      }
    }
  }
  pthread_mutex_unlock(&exporter_lock);
}

/* At normal exit the file goes: a process that is gone has no series. A crash leaves it;
 * node_textfile_mtime_seconds then stops advancing (docs/introspection.md's alert). */
static void exporter_remove(void) {
  if ((pid_t)syscall(SYS_getpid) != exporter_pid) return;
  pthread_mutex_lock(&exporter_lock);
  exporter_done = true;
  syscall(SYS_unlinkat, AT_FDCWD, exporter_path, 0);
  pthread_mutex_unlock(&exporter_lock);
}

static void *exporter_main(void *arg) {
  (void)arg;
  for (;;) {
    struct timespec ts = {(time_t)(opt.stats_interval_ms / 1000), (long)(opt.stats_interval_ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
    exporter_write();
  }
  return NULL;
}

static void stats_atexit(void) {
  if (opt.stats_file[0]) exporter_remove();
  if (opt.stats_print) strata_malloc_stats_print(NULL, NULL, opt.stats_print_opts);
}

extern char **environ;

/* Whether an option source mentions an option that needs a thread or an exit handler
 * from the start (statistics output, prof_signal), without parsing (conf.c reports
 * problems once, at initialisation). The constructor initialises strata early only then:
 * a process that asks for nothing is initialised by its first malloc, as before. */
static bool stats_options_requested(void) {
  static const char *const keys[] = {"stats_print", "stats_file", "prof_signal"};
  const char *srcs[5] = {NULL, NULL, NULL, NULL, NULL}, *names[2];
  conf_program_strings(srcs + 3, names);
  char file[4096];
  if (os_read_file("/etc/strata.conf", file, sizeof(file)) > 0) srcs[0] = file;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "STRATA_CONF=", 12) == 0) srcs[1] = *e;
    if (strncmp(*e, "MALLOC_CONF=", 12) == 0) srcs[2] = *e;
  }
  for (int i = 0; i < 5; i++) {
    for (int k = 0; srcs[i] && k < 3; k++) {
      if (strstr(srcs[i], keys[k])) return true;
    }
  }
  return false;
}

__attribute__((constructor)) static void metrics_boot(void) {
  if (!__atomic_load_n(&strata_ready, __ATOMIC_ACQUIRE) && !stats_options_requested()) return;
  if (tsd_fetch() == NULL) return;
  prof_boot_thread();
  if (!opt.stats_print && !opt.stats_file[0]) return;
  atexit(stats_atexit);
  if (!opt.stats_file[0]) return;
  exporter_pid = (pid_t)syscall(SYS_getpid);
  if (!expand_path(exporter_path, sizeof(exporter_path), opt.stats_file, exporter_pid, NULL) ||
      !expand_path(exporter_tmp, sizeof(exporter_tmp), opt.stats_file, exporter_pid, ".tmp")) {
    msg_write("<strata>: stats_file: path too long after expanding %p; no statistics file\n");
    exporter_pid = 0;
    return;
  }
  exporter_labels_make(exporter_pid);
  exporter_write(); /* at once: a missing or unwritable directory is reported at start */
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, exporter_main, NULL) != 0) {
    msg_write("<strata>: stats_file: cannot start the exporter thread; written at exit only\n");
  }
  pthread_attr_destroy(&attr);
}

/*
 * common.c - out-of-line parts of the workloads' shared support (see common.h):
 * argument parsing, timer calibration, histogram quantiles, /proc readers that use
 * raw open/read (so reading RSS never allocates), and the static-buffer JSON writer.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *wl_prog = "wl";
uint64_t wl_timer_overhead_ns;

/* ---- Failure reporting ---- */
void wl_die(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "wl_%s: FAILED: ", wl_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  exit(1);
}

void wl_oom(size_t size) {
  fprintf(stderr, "wl_%s: FAILED: out of memory allocating %zu bytes\n", wl_prog, size);
  exit(3);
}

void wl_info(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "wl_%s: ", wl_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void wl_stamp_fail(const void *p, size_t size, size_t off, uint64_t want, uint64_t got, const char *what) {
  wl_die("%s: block %p of %zu bytes corrupted at offset %zu: expected 0x%016llx, found "
         "0x%016llx",
         what, p, size, off, (unsigned long long)want, (unsigned long long)got);
}

void *wl_malloc(size_t size) {
  void *p = malloc(size);
  if (!p) wl_oom(size);
  return p;
}

/* ---- Arguments ---- */
const char *wl_preset_name(enum wl_preset p) {
  return p == WL_TINY ? "tiny" : p == WL_DEFAULT ? "default" : "full";
}

static void wl_usage(FILE *f) {
  fprintf(f,
          "usage: wl_%s [--preset tiny|default|full] [--threads N] [--seed S]\n"
          "  tiny: < 1 s and < 256 MiB; default: a few seconds; full: 10-30 s.\n"
          "  Progress goes to stderr; the last stdout line is `RESULT {json}`.\n",
          wl_prog);
}

static bool wl_parse_u64(const char *s, uint64_t *out) {
  char *end;
  if (!s || !*s || *s == '-') return false;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end) return false;
  *out = v;
  return true;
}

void wl_parse_args(wl_args_t *a, const char *name, int argc, char **argv, const int default_threads[3]) {
  wl_prog = name;
  a->name = name;
  a->preset = WL_DEFAULT;
  a->threads = 0;
  a->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = NULL;
    const char *eq = strchr(arg, '=');
    size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      wl_usage(stdout);
      exit(0);
    }
#define WL_KEY(k) (klen == strlen(k) && !strncmp(arg, k, klen))
    if (!WL_KEY("--preset") && !WL_KEY("--threads") && !WL_KEY("--seed")) {
      fprintf(stderr, "wl_%s: unknown argument \"%s\"\n", name, arg);
      wl_usage(stderr);
      exit(2);
    }
    if (eq) {
      val = eq + 1;
    } else if (i + 1 < argc) {
      val = argv[++i];
    } else {
      fprintf(stderr, "wl_%s: %s needs a value\n", name, arg);
      exit(2);
    }
    uint64_t v;
    if (WL_KEY("--preset")) {
      if (!strcmp(val, "tiny"))
        a->preset = WL_TINY;
      else if (!strcmp(val, "default"))
        a->preset = WL_DEFAULT;
      else if (!strcmp(val, "full"))
        a->preset = WL_FULL;
      else {
        fprintf(stderr, "wl_%s: invalid preset \"%s\" (accepted: tiny, default, full)\n", name, val);
        exit(2);
      }
    } else if (WL_KEY("--threads")) {
      if (!wl_parse_u64(val, &v) || v < 1 || v > 1024) {
        fprintf(stderr, "wl_%s: invalid thread count \"%s\" (1..1024)\n", name, val);
        exit(2);
      }
      a->threads = (int)v;
    } else {
      if (!wl_parse_u64(val, &v)) {
        fprintf(stderr, "wl_%s: invalid seed \"%s\" (an unsigned integer)\n", name, val);
        exit(2);
      }
      a->seed = v;
    }
#undef WL_KEY
  }
  if (a->threads == 0) a->threads = default_threads[a->preset];
  wl_timer_calibrate();
  const char *pre = getenv("LD_PRELOAD");
  wl_info("preset %s, %d thread%s, seed %llu, allocator %s", wl_preset_name(a->preset), a->threads,
          a->threads == 1 ? "" : "s", (unsigned long long)a->seed, pre && *pre ? pre : "(default)");
}

/* ---- Threads ---- */
void wl_run(int n, void *(*fn)(void *), void *arg, size_t stride) {
  pthread_t tids[1024];
  if (n < 1 || n > 1024) wl_die("thread count %d out of range", n);
  for (int i = 1; i < n; i++) {
    int err = pthread_create(&tids[i], NULL, fn, (char *)arg + (size_t)i * stride);
    if (err) wl_die("pthread_create: %s", strerror(err));
  }
  fn(arg);
  for (int i = 1; i < n; i++) pthread_join(tids[i], NULL);
}

/* ---- PRNG helpers ---- */
uint64_t wl_log_range(wl_rng_t *r, uint64_t lo, uint64_t hi) {
  if (lo < 1) lo = 1;
  if (hi <= lo) return lo;
  double l = log((double)lo), h = log((double)hi + 1.0);
  uint64_t v = (uint64_t)exp(l + wl_unit(r) * (h - l));
  return v < lo ? lo : v > hi ? hi : v;
}

/* ---- Time ---- */
void wl_sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void wl_timer_calibrate(void) {
  /* The smallest of many back-to-back reads: what a sampled interval pays for itself. */
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 2000; i++) {
    uint64_t t0 = wl_now_ns(), t1 = wl_now_ns();
    if (t1 - t0 < best) best = t1 - t0;
  }
  wl_timer_overhead_ns = best;
}

/* ---- Histogram ---- */
void wl_hist_init(wl_hist_t *h) {
  memset(h, 0, sizeof(*h));
  h->min = UINT64_MAX;
}

void wl_hist_merge(wl_hist_t *dst, const wl_hist_t *src) {
  for (unsigned i = 0; i < WL_HIST_BUCKETS; i++) dst->b[i] += src->b[i];
  dst->count += src->count;
  dst->sum += src->sum;
  if (src->min < dst->min) dst->min = src->min;
  if (src->max > dst->max) dst->max = src->max;
}

/* Largest value that lands in bucket idx. */
static uint64_t wl_hist_upper(unsigned idx) {
  if (idx < WL_HIST_SUB) return idx;
  unsigned shift = (idx - WL_HIST_SUB) / WL_HIST_SUB;
  uint64_t sub = (idx - WL_HIST_SUB) % WL_HIST_SUB;
  uint64_t low = ((uint64_t)WL_HIST_SUB + sub) << shift;
  return low + ((uint64_t)1 << shift) - 1;
}

void wl_sampler_init(wl_sampler_t *s, uint64_t seed, uint64_t stream) {
  wl_rng_init(&s->rng, seed ^ 0x5a3c0ffee, stream);
  s->countdown = 1 + (uint32_t)wl_below(&s->rng, 2 * WL_SAMPLE_EVERY - 1);
  wl_hist_init(&s->hist);
}

uint64_t wl_hist_quantile(const wl_hist_t *h, double q) {
  if (h->count == 0) return 0;
  uint64_t rank = (uint64_t)ceil(q * (double)h->count);
  if (rank < 1) rank = 1;
  uint64_t seen = 0;
  for (unsigned i = 0; i < WL_HIST_BUCKETS; i++) {
    seen += h->b[i];
    if (seen >= rank) {
      uint64_t v = wl_hist_upper(i);
      return v > h->max ? h->max : v < h->min ? h->min : v;
    }
  }
  return h->max;
}

/* ---- /proc readers ---- */
size_t wl_page_size(void) {
  static size_t ps;
  if (!ps) ps = (size_t)sysconf(_SC_PAGESIZE);
  return ps;
}

/* Reads a small /proc file into buf (NUL-terminated); returns its length or -1. */
static ssize_t wl_read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  while (len + 1 < cap) {
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(fd);
  buf[len] = '\0';
  return (ssize_t)len;
}

long wl_rss_kb(void) {
  char buf[256];
  if (wl_read_file("/proc/self/statm", buf, sizeof(buf)) <= 0) return -1;
  char *s = buf;
  strtol(s, &s, 10); /* size */
  long resident = strtol(s, NULL, 10);
  return (long)((unsigned long)resident * (wl_page_size() / 1024));
}

long wl_peak_rss_kb(void) {
  char buf[8192];
  if (wl_read_file("/proc/self/status", buf, sizeof(buf)) <= 0) return -1;
  char *s = strstr(buf, "\nVmHWM:");
  return s ? strtol(s + 7, NULL, 10) : -1;
}

/* ---- Range stamps (realloc) ---- */
void wl_stamp_range(void *p, size_t from, size_t to, uint64_t key) {
  unsigned char *c = p;
  size_t o = (from + WL_STAMP_STRIDE - 1) / WL_STAMP_STRIDE * WL_STAMP_STRIDE;
  for (; o + 8 <= to; o += WL_STAMP_STRIDE) wl_store64(c + o, wl_stamp_val(key, o));
}

void wl_check_range(const void *p, size_t from, size_t to, uint64_t key, const char *what) {
  const unsigned char *c = p;
  size_t o = (from + WL_STAMP_STRIDE - 1) / WL_STAMP_STRIDE * WL_STAMP_STRIDE;
  for (; o + 8 <= to; o += WL_STAMP_STRIDE) {
    uint64_t got = wl_load64(c + o);
    if (got != wl_stamp_val(key, o)) wl_stamp_fail(p, to, o, wl_stamp_val(key, o), got, what);
  }
}

/* ---- Anonymous memory ---- */
void *wl_map(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) wl_oom(bytes);
  return p;
}

void wl_unmap(void *p, size_t bytes) {
  if (p) munmap(p, bytes);
}

/* ---- JSON ---- */
#define WL_JSON_CAP (1u << 20)
#define WL_JSON_DEPTH 16

struct wl_json {
  size_t len;
  int depth;
  bool comma[WL_JSON_DEPTH]; /* an element was written at this level */
  char buf[WL_JSON_CAP];
};
static struct wl_json wl_json_static;

static void wl_json_raw(wl_json_t *j, const char *s, size_t n) {
  if (j->len + n + 1 >= WL_JSON_CAP) wl_die("result JSON exceeds %u bytes", WL_JSON_CAP);
  memcpy(j->buf + j->len, s, n);
  j->len += n;
  j->buf[j->len] = '\0';
}

static void wl_json_fmt(wl_json_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wl_json_fmt(wl_json_t *j, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  wl_json_raw(j, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void wl_json_string(wl_json_t *j, const char *s) {
  wl_json_raw(j, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      wl_json_raw(j, e, 2);
    } else if (c < 0x20) {
      wl_json_fmt(j, "\\u%04x", c);
    } else {
      wl_json_raw(j, (const char *)&c, 1);
    }
  }
  wl_json_raw(j, "\"", 1);
}

/* Separator and key before a value at the current level. */
static void wl_json_key(wl_json_t *j, const char *key) {
  if (j->comma[j->depth]) wl_json_raw(j, ",", 1);
  j->comma[j->depth] = true;
  if (key) {
    wl_json_string(j, key);
    wl_json_raw(j, ":", 1);
  }
}

static void wl_json_open(wl_json_t *j, const char *key, char c) {
  if (j->depth + 1 >= WL_JSON_DEPTH) wl_die("result JSON nested too deeply");
  wl_json_key(j, key);
  wl_json_raw(j, &c, 1);
  j->comma[++j->depth] = false;
}

static void wl_json_close(wl_json_t *j, char c) {
  if (j->depth == 0) wl_die("result JSON closed too often");
  j->depth--;
  wl_json_raw(j, &c, 1);
}

wl_json_t *wl_json_begin(void) {
  wl_json_t *j = &wl_json_static;
  j->len = 0;
  j->depth = 0;
  j->comma[0] = false;
  wl_json_raw(j, "{", 1);
  j->comma[++j->depth] = false;
  return j;
}

void wl_json_obj(wl_json_t *j, const char *key) {
  wl_json_open(j, key, '{');
}
void wl_json_obj_end(wl_json_t *j) {
  wl_json_close(j, '}');
}
void wl_json_arr(wl_json_t *j, const char *key) {
  wl_json_open(j, key, '[');
}
void wl_json_arr_end(wl_json_t *j) {
  wl_json_close(j, ']');
}

void wl_json_str(wl_json_t *j, const char *key, const char *v) {
  wl_json_key(j, key);
  if (v)
    wl_json_string(j, v);
  else
    wl_json_raw(j, "null", 4);
}

void wl_json_int(wl_json_t *j, const char *key, int64_t v) {
  wl_json_key(j, key);
  wl_json_fmt(j, "%lld", (long long)v);
}

static void wl_json_double(wl_json_t *j, double v) {
  if (!isfinite(v))
    wl_json_raw(j, "null", 4);
  else if (v == floor(v) && fabs(v) < 1e15)
    wl_json_fmt(j, "%.0f", v);
  else
    wl_json_fmt(j, "%.9g", v);
}

void wl_json_u64(wl_json_t *j, const char *key, uint64_t v) {
  wl_json_key(j, key);
  wl_json_fmt(j, "%llu", (unsigned long long)v);
}

void wl_json_num(wl_json_t *j, const char *key, double v) {
  wl_json_key(j, key);
  wl_json_double(j, v);
}

void wl_json_null(wl_json_t *j, const char *key) {
  wl_json_key(j, key);
  wl_json_raw(j, "null", 4);
}

void wl_json_pair(wl_json_t *j, double t, double v) {
  wl_json_key(j, NULL);
  wl_json_raw(j, "[", 1);
  wl_json_double(j, t);
  wl_json_raw(j, ",", 1);
  wl_json_double(j, v);
  wl_json_raw(j, "]", 1);
}

wl_json_t *wl_result_begin(const wl_args_t *a, uint64_t ops, double seconds) {
  long rss = wl_rss_kb(), peak = wl_peak_rss_kb();
  wl_json_t *j = wl_json_begin();
  wl_json_str(j, "workload", a->name);
  wl_json_str(j, "preset", wl_preset_name(a->preset));
  wl_json_int(j, "threads", a->threads);
  wl_json_u64(j, "seed", a->seed);
  wl_json_int(j, "ops", (int64_t)ops);
  wl_json_num(j, "seconds", seconds);
  wl_json_num(j, "ops_per_sec", seconds > 0 ? (double)ops / seconds : NAN);
  wl_json_int(j, "peak_rss_kb", peak);
  wl_json_int(j, "final_rss_kb", rss);
  const char *pre = getenv("LD_PRELOAD");
  wl_json_str(j, "ld_preload", pre && *pre ? pre : NULL);
  return j;
}

void wl_json_latency(wl_json_t *j, const char *key, const wl_hist_t *h) {
  wl_json_obj(j, key);
  wl_json_int(j, "p50", (int64_t)wl_hist_quantile(h, 0.50));
  wl_json_int(j, "p90", (int64_t)wl_hist_quantile(h, 0.90));
  wl_json_int(j, "p99", (int64_t)wl_hist_quantile(h, 0.99));
  wl_json_int(j, "p999", (int64_t)wl_hist_quantile(h, 0.999));
  wl_json_int(j, "max", (int64_t)(h->count ? h->max : 0));
  wl_json_num(j, "mean", h->count ? (double)h->sum / (double)h->count : NAN);
  wl_json_int(j, "samples", (int64_t)h->count);
  wl_json_int(j, "sample_every", WL_SAMPLE_EVERY);
  wl_json_int(j, "timer_overhead_ns", (int64_t)wl_timer_overhead_ns);
  wl_json_obj_end(j);
}

void wl_json_latency_hist(wl_json_t *j, const char *key, const wl_hist_t *h) {
  wl_json_arr(j, key);
  for (unsigned i = 0; i < WL_HIST_BUCKETS; i++)
    if (h->b[i]) wl_json_pair(j, (double)wl_hist_upper(i), (double)h->b[i]);
  wl_json_arr_end(j);
}

void wl_result_end(wl_json_t *j) {
  wl_json_close(j, '}');
  fflush(stderr);
  fputs("RESULT ", stdout);
  fputs(j->buf, stdout);
  fputc('\n', stdout);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "wl_%s: cannot write the result to stdout\n", wl_prog);
    exit(1);
  }
}

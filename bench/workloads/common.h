/*
 * common.h - shared support for the wl_* benchmark workloads: argument parsing
 * (--preset/--threads/--seed), a deterministic PRNG, a log-linear latency histogram,
 * RSS readers that never call malloc, block stamping/verification, and the one-line
 * `RESULT {json}` emitter the harness in tools/ parses. Allocator-neutral: plain libc.
 */
#ifndef WL_COMMON_H
#define WL_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---- Arguments ---- */
enum wl_preset { WL_TINY = 0, WL_DEFAULT = 1, WL_FULL = 2 };

typedef struct wl_args {
  const char *name;      /* workload name, without the wl_ prefix */
  enum wl_preset preset; /* --preset tiny|default|full (default: default) */
  int threads;           /* --threads N, or the preset's default */
  uint64_t seed;         /* --seed S (default 1) */
} wl_args_t;

/*
 * Parses argv; default_threads[] gives the thread count per preset (tiny, default,
 * full). Prints usage and exits 0 on --help, 2 on a bad argument.
 */
void wl_parse_args(wl_args_t *a, const char *name, int argc, char **argv, const int default_threads[3]);
const char *wl_preset_name(enum wl_preset p);
/* Picks the value for the current preset. */
#define WL_PICK(a, tiny, dflt, full)                                                                         \
  ((a)->preset == WL_TINY ? (tiny) : (a)->preset == WL_DEFAULT ? (dflt) : (full))

/* ---- Failure reporting: message on stderr, exit status 1 (verification) or 3 (OOM) ---- */
__attribute__((noreturn, format(printf, 1, 2))) void wl_die(const char *fmt, ...);
__attribute__((noreturn)) void wl_oom(size_t size);
void wl_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- PRNG: splitmix64 (passes BigCrush, one add and three mixes per draw) ---- */
typedef struct wl_rng {
  uint64_t s;
} wl_rng_t;

static inline uint64_t wl_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
/* A stream derived from (seed, stream id), so that threads get independent sequences. */
static inline void wl_rng_init(wl_rng_t *r, uint64_t seed, uint64_t stream) {
  r->s = wl_mix64(seed * 0x9e3779b97f4a7c15ULL + wl_mix64(stream + 0x632be59bd9b4e019ULL));
}
static inline uint64_t wl_rand(wl_rng_t *r) {
  return wl_mix64(r->s += 0x9e3779b97f4a7c15ULL);
}
/* Uniform in [0, n) by multiply-shift (bias < n / 2^64, negligible). */
static inline uint64_t wl_below(wl_rng_t *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)wl_rand(r) * n) >> 64);
}
/* Uniform in [lo, hi]. */
static inline uint64_t wl_range(wl_rng_t *r, uint64_t lo, uint64_t hi) {
  return lo + wl_below(r, hi - lo + 1);
}
/* Uniform double in [0, 1). */
static inline double wl_unit(wl_rng_t *r) {
  return (double)(wl_rand(r) >> 11) * 0x1.0p-53;
}
/* Log-uniform integer in [lo, hi]: as many blocks per doubling, as allocators see in practice. */
uint64_t wl_log_range(wl_rng_t *r, uint64_t lo, uint64_t hi);

/* ---- Time ---- */
static inline uint64_t wl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
void wl_sleep_ns(uint64_t ns);

/* ---- Latency histogram: log-linear, 32 sub-buckets per power of two (<= 3.2% error) ---- */
#define WL_HIST_SUB_BITS 5
#define WL_HIST_SUB (1u << WL_HIST_SUB_BITS)
#define WL_HIST_BUCKETS (WL_HIST_SUB + (64 - WL_HIST_SUB_BITS) * WL_HIST_SUB)

typedef struct wl_hist {
  uint64_t count, sum, min, max;
  uint64_t b[WL_HIST_BUCKETS];
} wl_hist_t;

void wl_hist_init(wl_hist_t *h);
static inline void wl_hist_add(wl_hist_t *h, uint64_t v) {
  unsigned idx;
  if (v < WL_HIST_SUB) {
    idx = (unsigned)v;
  } else {
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - WL_HIST_SUB_BITS;
    idx = WL_HIST_SUB + shift * WL_HIST_SUB + (unsigned)((v >> shift) & (WL_HIST_SUB - 1));
  }
  h->b[idx]++;
  h->count++;
  h->sum += v;
  if (v < h->min) h->min = v;
  if (v > h->max) h->max = v;
}
void wl_hist_merge(wl_hist_t *dst, const wl_hist_t *src);
/* Value at quantile q (0..1): the upper bound of the bucket holding it, capped at max. */
uint64_t wl_hist_quantile(const wl_hist_t *h, double q);

/*
 * Latency sampler: times one operation in every `WL_SAMPLE_EVERY` on average, at
 * random intervals (1 .. 2K-1) so that sampling cannot alias with periodic allocator
 * work (cache flushes, GC ticks). The calibrated cost of the two clock reads is
 * subtracted from each sample.
 */
#define WL_SAMPLE_EVERY 16
typedef struct wl_sampler {
  uint32_t countdown;
  wl_rng_t rng;
  wl_hist_t hist;
} wl_sampler_t;

void wl_sampler_init(wl_sampler_t *s, uint64_t seed, uint64_t stream);
/* True if the next operation should be timed. */
static inline bool wl_sample_now(wl_sampler_t *s) {
  if (--s->countdown) return false;
  s->countdown = 1 + (uint32_t)wl_below(&s->rng, 2 * WL_SAMPLE_EVERY - 1);
  return true;
}
extern uint64_t wl_timer_overhead_ns;
static inline void wl_sample_record(wl_sampler_t *s, uint64_t ns) {
  wl_hist_add(&s->hist, ns > wl_timer_overhead_ns ? ns - wl_timer_overhead_ns : 0);
}
/* Measures the cost of back-to-back clock reads (called by wl_parse_args). */
void wl_timer_calibrate(void);

/* ---- Memory figures, read with open/read (no malloc, no stdio) ---- */
long wl_rss_kb(void);      /* VmRSS, from /proc/self/statm */
long wl_peak_rss_kb(void); /* VmHWM, from /proc/self/status */
size_t wl_page_size(void);

/* ---- Block stamping: detects overlapping blocks, lost writes and copy errors ---- */
/*
 * Writes values derived from (tag, size, offset) in the first and last word of the
 * block and in one word per 4 KiB in between (so every page is touched); blocks under
 * 16 bytes are filled byte by byte. wl_check verifies them and dies naming `what`.
 * The tag must differ between live blocks (e.g. a per-thread counter): two blocks
 * handed out at the same address then show as a mismatch.
 */
#define WL_STAMP_STRIDE 4096
__attribute__((noreturn)) void wl_stamp_fail(const void *p, size_t size, size_t off, uint64_t want,
                                             uint64_t got, const char *what);
static inline uint64_t wl_stamp_key(uint64_t tag, size_t size) {
  return wl_mix64(tag * 0x9e3779b97f4a7c15ULL ^ (uint64_t)size);
}
static inline uint64_t wl_stamp_val(uint64_t key, size_t off) {
  return key ^ ((uint64_t)off * 0xd6e8feb86659fd93ULL);
}
static inline void wl_store64(unsigned char *c, uint64_t v) {
  memcpy(c, &v, 8);
}
static inline uint64_t wl_load64(const unsigned char *c) {
  uint64_t v;
  memcpy(&v, c, 8);
  return v;
}
static inline void wl_stamp(void *p, size_t size, uint64_t tag) {
  unsigned char *c = p;
  uint64_t key = wl_stamp_key(tag, size);
  if (size < 16) {
    for (size_t i = 0; i < size; i++) c[i] = (unsigned char)((key >> ((i & 7) * 8)) ^ i);
    return;
  }
  wl_store64(c, key);
  for (size_t o = WL_STAMP_STRIDE; o + 16 <= size; o += WL_STAMP_STRIDE)
    wl_store64(c + o, wl_stamp_val(key, o));
  wl_store64(c + size - 8, wl_stamp_val(key, size - 8));
}
static inline void wl_check(const void *p, size_t size, uint64_t tag, const char *what) {
  const unsigned char *c = p;
  uint64_t key = wl_stamp_key(tag, size), got;
  if (size < 16) {
    for (size_t i = 0; i < size; i++)
      if (c[i] != (unsigned char)((key >> ((i & 7) * 8)) ^ i))
        wl_stamp_fail(p, size, i, (unsigned char)((key >> ((i & 7) * 8)) ^ i), c[i], what);
    return;
  }
  if ((got = wl_load64(c)) != key) wl_stamp_fail(p, size, 0, key, got, what);
  for (size_t o = WL_STAMP_STRIDE; o + 16 <= size; o += WL_STAMP_STRIDE)
    if ((got = wl_load64(c + o)) != wl_stamp_val(key, o))
      wl_stamp_fail(p, size, o, wl_stamp_val(key, o), got, what);
  if ((got = wl_load64(c + size - 8)) != wl_stamp_val(key, size - 8))
    wl_stamp_fail(p, size, size - 8, wl_stamp_val(key, size - 8), got, what);
}
/*
 * Self-describing blocks (>= 16 bytes) for workloads that pass blocks between threads:
 * the size and tag in the first two words, the rest stamped as above. wl_hdr_check
 * verifies a block knowing only its address and returns its size.
 */
static inline void wl_hdr_stamp(void *p, size_t size, uint64_t tag) {
  unsigned char *c = p;
  wl_store64(c, (uint64_t)size);
  wl_store64(c + 8, tag);
  if (size > 16) wl_stamp(c + 16, size - 16, tag);
}
static inline size_t wl_hdr_check(const void *p, size_t max_size, const char *what) {
  const unsigned char *c = p;
  uint64_t size = wl_load64(c), tag = wl_load64(c + 8);
  if (size < 16 || size > max_size) wl_stamp_fail(p, 16, 0, 16, size, what);
  if (size > 16) wl_check(c + 16, size - 16, tag, what);
  return (size_t)size;
}
/* One word per 4 KiB of [from, to), values from (key, offset): they survive realloc. */
void wl_stamp_range(void *p, size_t from, size_t to, uint64_t key);
void wl_check_range(const void *p, size_t from, size_t to, uint64_t key, const char *what);

/* ---- Threads ---- */
/*
 * Runs fn(arg + i * stride) for i in 0..n-1: i = 0 on the calling thread (so a
 * single-threaded run stays on the main thread, as a real program's would), the
 * others on new threads; returns when all are done.
 */
void wl_run(int n, void *(*fn)(void *), void *arg, size_t stride);

/* malloc that dies on NULL (the workloads never expect allocation failure). */
void *wl_malloc(size_t size);

/* ---- Anonymous memory for bookkeeping that must not go through the allocator ---- */
void *wl_map(size_t bytes);
void wl_unmap(void *p, size_t bytes);

/* ---- JSON result (fixed static buffer, no malloc) ---- */
typedef struct wl_json wl_json_t;
wl_json_t *wl_json_begin(void);
void wl_json_obj(wl_json_t *j, const char *key); /* opens an object; key NULL in arrays */
void wl_json_obj_end(wl_json_t *j);
void wl_json_arr(wl_json_t *j, const char *key);
void wl_json_arr_end(wl_json_t *j);
void wl_json_str(wl_json_t *j, const char *key, const char *v); /* v NULL -> null */
void wl_json_int(wl_json_t *j, const char *key, int64_t v);
void wl_json_u64(wl_json_t *j, const char *key, uint64_t v);
void wl_json_num(wl_json_t *j, const char *key, double v); /* non-finite -> null */
void wl_json_null(wl_json_t *j, const char *key);
void wl_json_pair(wl_json_t *j, double t, double v); /* [t, v] element of an array */

/*
 * Opens the result and writes the contract's fields: workload, preset, threads, seed,
 * ops, seconds, ops_per_sec, peak_rss_kb, final_rss_kb (read now), ld_preload.
 */
wl_json_t *wl_result_begin(const wl_args_t *a, uint64_t ops, double seconds);
/* "latency_ns": {p50, p90, p99, p999, max, mean, samples, sample_every, timer_overhead_ns} */
void wl_json_latency(wl_json_t *j, const char *key, const wl_hist_t *h);
/*
 * "latency_hist": [[upper_ns, count], ...] for the non-empty buckets (bucket i holds the
 * samples in (upper[i-1], upper[i]]), so a harness can merge rounds exactly.
 */
void wl_json_latency_hist(wl_json_t *j, const char *key, const wl_hist_t *h);
/* Closes the object and prints `RESULT {...}` as the last line on stdout. */
void wl_result_end(wl_json_t *j);

#endif

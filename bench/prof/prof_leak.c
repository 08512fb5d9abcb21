/*
 * prof_leak.c - a long-running "server" with a planted leak, for the leak figure: every
 * request allocates and frees buffers of 32..4096 bytes (handle_request), a config table
 * of 8 MiB stays live from start-up (load_config), and session_cache_insert keeps 200
 * bytes per request that are never freed. With lg_prof_interval the interval dumps show
 * the leak growing; `strata prof diff FIRST LAST` must put session_cache_insert on top.
 * Usage: prof_leak [requests]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOIN __attribute__((noinline))

static NOIN void *load_config(void) {
  void *t = malloc(8u << 20);
  memset(t, 1, 8u << 20);
  return t;
}

typedef struct sess {
  struct sess *next;
  char data[192];
} sess_t;
static sess_t *cache;

static NOIN void session_cache_insert(uint64_t id) {
  sess_t *s = malloc(sizeof *s); /* the leak: never evicted */
  memset(s->data, (int)id, sizeof s->data);
  s->next = cache;
  cache = s;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static NOIN size_t handle_request(uint64_t id) {
  void *bufs[64];
  size_t sum = 0;
  for (int i = 0; i < 64; i++) {
    size_t n = 32 + next() % 4064;
    bufs[i] = malloc(n);
    memset(bufs[i], i, 16);
    sum += n;
  }
  for (int i = 0; i < 64; i++) free(bufs[i]);
  session_cache_insert(id);
  return sum;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  void *cfg = load_config();
  size_t total = 0;
  for (long i = 0; i < n; i++) total += handle_request((uint64_t)i);
  printf("{\"requests\": %ld, \"churn_bytes\": %zu, \"leaked_bytes\": %zu}\n", n, total, (size_t)n * sizeof(sess_t));
  free(cfg);
  return 0;
}

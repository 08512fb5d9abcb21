/*
 * prof_accuracy.c - known allocations from known functions, for the heap profiler's
 * accuracy figure: f allocates 64 MiB in 1 KiB blocks, g 16 MiB in 100 KiB blocks, h 1 MiB
 * in 64-byte blocks; all stay live, then the profile is dumped (prof.dump) to argv[1].
 * Truth is the usable size of each block (printed as JSON on stdout).
 */
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>

int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) __attribute__((weak));

#define NOIN __attribute__((noinline))
static void *keep[200000];
static size_t nkeep;

static NOIN size_t f(void) {
  size_t t = 0;
  for (size_t i = 0; i < (64u << 20) / 1024; i++) {
    void *p = malloc(1024);
    t += malloc_usable_size(p);
    keep[nkeep++] = p;
  }
  return t;
}
static NOIN size_t g(void) {
  size_t t = 0;
  for (size_t i = 0; i < (16u << 20) / (100 * 1024); i++) {
    void *p = malloc(100 * 1024);
    t += malloc_usable_size(p);
    keep[nkeep++] = p;
  }
  return t;
}
static NOIN size_t h(void) {
  size_t t = 0;
  for (size_t i = 0; i < (1u << 20) / 64; i++) {
    void *p = malloc(64);
    t += malloc_usable_size(p);
    keep[nkeep++] = p;
  }
  return t;
}

int main(int argc, char **argv) {
  if (!mallctl) {
    fprintf(stderr, "prof_accuracy: run with LD_PRELOAD=libstrata.so and MALLOC_CONF=prof:true\n");
    return 2;
  }
  size_t tf = f(), tg = g(), th = h();
  const char *path = argc > 1 ? argv[1] : NULL;
  int r = mallctl("prof.dump", NULL, NULL, path ? (void *)&path : NULL, path ? sizeof(path) : 0);
  printf("{\"f\": %zu, \"g\": %zu, \"h\": %zu, \"dump\": %d}\n", tf, tg, th, r);
  for (size_t i = 0; i < nkeep; i++) free(keep[i]);
  return r != 0;
}

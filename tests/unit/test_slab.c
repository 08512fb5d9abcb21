/* Slabs and bins: batched fill hands out distinct, aligned regions lowest address first;
 * batched free returns them; empty slabs go back to the extents; bad frees are caught. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "unit.h"

static arena_t *a;

static edata_t *slab_of(void *p) {
  uint64_t e = rtree_read((uintptr_t)p);
  return (e & RT_SLAB) ? rt_edata(e) : NULL;
}

static void test_fill_gives_distinct_aligned_regions(void) {
  for (szind_t ind = 1; ind <= SZ_NSMALL; ind++) {
    void *buf[300];
    unsigned n = bin_fill(a, ind, buf, 300);
    CHECK_EQ(n, 300);
    size_t size = sz_size[ind];
    size_t nat = size & -size; /* natural alignment of the class */
    for (unsigned i = 0; i < n; i++) {
      edata_t *s = slab_of(buf[i]);
      CHECK(s != NULL && s->szind == ind);
      CHECK(((uintptr_t)buf[i] - s->addr) % size == 0);
      CHECK((uintptr_t)buf[i] % (nat < 4096 ? nat : 4096) == 0);
      CHECK_EQ(rt_szind(rtree_read((uintptr_t)buf[i])), ind);
      memset(buf[i], (int)i, size);
      if (i > 0 && slab_of(buf[i - 1]) == s) CHECK(buf[i] > buf[i - 1]); /* lowest first */
    }
    bin_dalloc_batch(a, ind, buf, n);
    CHECK_EQ(a->bins[ind].curregs, 0);
  }
}

static void test_empty_slabs_return_to_extents(void) {
  szind_t ind = sz_size2index(1024);
  unsigned per = bin_info[ind].nregs;
  void *buf[2000];
  unsigned n = bin_fill(a, ind, buf, per * 4);
  CHECK_EQ(n, per * 4);
  size_t slabs = a->bins[ind].curslabs;
  CHECK(slabs >= 4);
  bin_dalloc_batch(a, ind, buf, n);
  /* Only the current slab and one spare may stay. */
  CHECK(a->bins[ind].curslabs <= 2);
  bin_release_spare(a, ind);
  CHECK(a->bins[ind].curslabs <= 1);
}

/* Runs f in a child and expects it to die by SIGABRT after strata's report. */
static int dies_with_abort(void (*f)(void)) {
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", 1);
    dup2(devnull, 2);
    f();
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void free_twice(void) {
  void *p;
  szind_t ind = sz_size2index(64);
  bin_fill(a, ind, &p, 1);
  bin_dalloc_batch(a, ind, &p, 1);
  bin_dalloc_batch(a, ind, &p, 1);
}

static void free_interior(void) {
  void *p;
  szind_t ind = sz_size2index(64);
  bin_fill(a, ind, &p, 1);
  void *q = (char *)p + 8;
  bin_dalloc_batch(a, ind, &q, 1);
}

static void test_double_and_interior_frees_abort(void) {
  CHECK(dies_with_abort(free_twice));
  CHECK(dies_with_abort(free_interior));
}

int main(void) {
  if (strata_init()) return 1;
  printf("unit: slab\n");
  a = arena_get(narenas - 1);
  RUN(test_fill_gives_distinct_aligned_regions);
  RUN(test_empty_slabs_return_to_extents);
  RUN(test_double_and_interior_frees_abort);
  UNIT_EXIT();
}

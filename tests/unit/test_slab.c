/* Slabs and bins: batched fill hands out distinct, aligned regions lowest address first;
 * batched free returns them; empty slabs go back to the extents; bad frees are caught;
 * full slabs drop their bitmaps and take them again on the first free. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "ctl.h"
#include <stddef.h>
#include "unit.h"

static arena_t *a;

static edata_t *slab_of(void *p) {
  uint64_t e = rtree_read((uintptr_t)p);
  return (e & RT_SLAB) ? rt_edata(e) : NULL;
}

/* Links buf[0..n) into a cache-style chain (each link encoded with its slot's tag). */
static void *chain_of(void **buf, unsigned n) {
  for (unsigned i = 0; i + 1 < n; i++) LINK_SET(buf[i], buf[i + 1]);
  LINK_SET(buf[n - 1], NULL);
  return buf[0];
}

/* chain_of, cut into runs of one slab as a flush's scan does before it hands a chain
 * over (bin_push_remote). */
static unsigned chain_with_runs(void **buf, unsigned n, slab_run_t *runs) {
  chain_of(buf, n);
  unsigned nruns = 0;
  for (unsigned i = 0; i < n; i++) {
    edata_t *s = slab_of(buf[i]);
    if (nruns > 0 && runs[nruns - 1].slab == s) {
      runs[nruns - 1].len++;
    } else {
      runs[nruns++] = (slab_run_t){s, buf[i], 1};
    }
  }
  return nruns;
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


/* A slab of class ind whose every region is in buf[0..n) (NULL if none), and where. */
static edata_t *whole_slab_in(void **buf, unsigned n, szind_t ind, unsigned *first) {
  unsigned per = bin_info[ind].nregs;
  for (unsigned i = 0; i < n;) {
    edata_t *s = slab_of(buf[i]);
    unsigned j = i;
    while (j < n && slab_of(buf[j]) == s) j++;
    if (j - i == per) {
      *first = i;
      return s;
    }
    i = j;
  }
  return NULL;
}

/* A full slab holds no bitmap; its first free takes one again, zeroed but for the freed
 * region, which the next fill hands out; a double free into it is still caught. */
static void test_full_slab_drops_bitmap_and_regains_it(void) {
  szind_t ind = sz_size2index(64);
  unsigned per = bin_info[ind].nregs, first;
  static void *buf[3 * 1024];
  CHECK(2 * per <= 3 * 1024);
  unsigned n = bin_fill(a, ind, buf, 2 * per);
  CHECK_EQ(n, 2 * per);
  edata_t *s = whole_slab_in(buf, n, ind, &first);
  CHECK(s != NULL);
  if (s == NULL) return;
  CHECK_EQ(s->nfree, 0);
  CHECK(s->bitmap == NULL);
  /* The bin's spare bitmap, which the first free takes, holds stale bits (as one from an
   * emptied slab would): the slab must get it zeroed. */
  bin_t *bin = &a->bins[ind];
  size_t bytes = bin_info[ind].bm_words * sizeof(uint64_t);
  if (bin->bm_spare == NULL) {
    void *o;
    CHECK_EQ(meta_pool_get(slab_bitmap_pool(ind), &o, 1), 1);
    bin->bm_spare = o;
  }
  memset(bin->bm_spare, 0xff, bytes);
  void *mid = buf[first + per / 2];
  buf[first + per / 2] = buf[--n];
  bin_dalloc_batch(a, ind, &mid, 1);
  CHECK(s->bitmap != NULL);
  CHECK_EQ(s->nfree, 1);
  for (unsigned w = 0; s->bitmap && w < bin_info[ind].bm_words; w++) {
    uint64_t want = w == (per / 2) / 64 ? (uint64_t)1 << ((per / 2) % 64) : 0;
    CHECK_EQ(s->bitmap[w], want);
  }
  /* Empty the other slabs' room so that the next fill comes from s: drain the bin. */
  void *p;
  bool seen = false;
  for (unsigned k = 0; k < 4 * per && !seen; k++) {
    CHECK_EQ(bin_fill(a, ind, &p, 1), 1);
    if (p == mid) seen = true; else buf[n++] = p;
    if (n >= 3 * 1024) break;
  }
  CHECK(seen);
  CHECK(s->bitmap == NULL); /* full again */
  bin_dalloc_batch(a, ind, buf, n);
  bin_dalloc_batch(a, ind, &mid, 1);
  CHECK_EQ(a->bins[ind].curregs, 0);
}

static void free_twice_full(void) {
  szind_t ind = sz_size2index(64);
  unsigned per = bin_info[ind].nregs, first;
  static void *buf[3 * 1024];
  unsigned n = bin_fill(a, ind, buf, 2 * per);
  if (whole_slab_in(buf, n, ind, &first) == NULL) _exit(0);
  bin_dalloc_batch(a, ind, &buf[first], 1); /* regains the bitmap */
  bin_dalloc_batch(a, ind, &buf[first], 1);
}

static void free_interior_full(void) {
  szind_t ind = sz_size2index(64);
  unsigned per = bin_info[ind].nregs, first;
  static void *buf[3 * 1024];
  unsigned n = bin_fill(a, ind, buf, 2 * per);
  if (whole_slab_in(buf, n, ind, &first) == NULL) _exit(0);
  void *q = (char *)buf[first] + 8;
  bin_dalloc_batch(a, ind, &q, 1);
}

/* Every class's bitmap block holds its bitmap and wastes under a third of the block; the
 * 48-byte class (Redis's embedded strings: 1,365 regions, 176 bytes) under a tenth (it had
 * 256-byte blocks, 31% waste, with power-of-two pools only). Two classes of one block size
 * share a pool. */
static void test_bitmap_blocks_fit_their_bitmaps(void) {
  for (szind_t ind = 1; ind <= SZ_NSMALL; ind++) {
    size_t bytes = bin_info[ind].bm_words * sizeof(uint64_t), block = slab_bitmap_block(ind);
    CHECK(slab_bitmap_pool(ind) >= META_POOL_BITMAP0 && slab_bitmap_pool(ind) < META_NPOOLS);
    CHECK(block >= bytes && block % 16 == 0);
    CHECK((block - bytes) * 3 < block || block == 16);
    for (szind_t j = 1; j <= SZ_NSMALL; j++)
      CHECK((slab_bitmap_pool(j) == slab_bitmap_pool(ind)) == (slab_bitmap_block(j) == block));
  }
  szind_t i48 = sz_size2index(48);
  size_t b48 = bin_info[i48].bm_words * sizeof(uint64_t);
  CHECK((slab_bitmap_block(i48) - b48) * 10 < slab_bitmap_block(i48));
  /* The pool hands out blocks of that size: at multiples of it within their page. */
  void *o[2];
  CHECK_EQ(meta_pool_get(slab_bitmap_pool(i48), o, 2), 2);
  for (int k = 0; k < 2; k++) CHECK((uintptr_t)o[k] % os_page % slab_bitmap_block(i48) == 0);
  meta_pool_put(slab_bitmap_pool(i48), o, 2);
}

static void test_bad_frees_into_full_slab_abort(void) {
  CHECK(dies_with_abort(free_twice_full));
  CHECK(dies_with_abort(free_interior_full));
}

/* A remote chain longer than a drain's 256-region piece: the drain goes piece by piece
 * (each piece's walk hands over the next one's head) and every region gets home. */
static void test_long_remote_chain_drains_every_piece(void) {
  szind_t ind = sz_size2index(64);
  bin_t *bin = &a->bins[ind];
  enum { N = 1000 };
  static void *buf[N];
  static slab_run_t runs[N];
  size_t curregs = bin->curregs;
  uint32_t remote = bin->remote_count;
  unsigned n = bin_fill(a, ind, buf, N);
  CHECK_EQ(n, N);
  unsigned nruns = chain_with_runs(buf, n, runs);
  bin_push_remote(a, ind, buf[0], buf[n - 1], n, runs, nruns);
  CHECK_EQ(bin->remote_count, remote + n);
  bin_release_spare(a, ind);
  CHECK_EQ(bin->remote_count, 0);
  CHECK_EQ(bin->curregs, curregs > remote ? curregs - remote : 0);
  /* Each region is free in its slab again: the bin hands all of them out again. */
  unsigned again = bin_fill(a, ind, buf, N);
  CHECK_EQ(again, N);
  bin_dalloc_batch(a, ind, buf, again);
}

/* More chains than the bin has slots: the chains that found a slot stay as they came (a
 * fill takes them whole, with no walk to a cut point), and the batches past the slots go
 * straight to their bitmaps; every region gets home. */
static void test_chains_past_the_slots_go_to_the_bitmaps(void) {
  szind_t ind = sz_size2index(64);
  bin_t *bin = &a->bins[ind];
  bin_release_spare(a, ind);
  enum { SLOTS = sizeof(bin->rchain) / sizeof(bin->rchain[0]), PER = 8, CHAINS = SLOTS + 4 };
  static void *buf[CHAINS * PER];
  size_t curregs = bin->curregs;
  CHECK_EQ(bin->remote_count, 0);
  unsigned n = bin_fill(a, ind, buf, CHAINS * PER);
  CHECK_EQ(n, CHAINS * PER);
  for (unsigned c = 0; c < CHAINS; c++) {
    void **r = &buf[c * PER];
    slab_run_t runs[PER];
    unsigned nruns = chain_with_runs(r, PER, runs);
    bin_push_remote(a, ind, r[0], r[PER - 1], PER, runs, nruns);
  }
  CHECK_EQ(bin->nrchain, SLOTS);
  CHECK_EQ(bin->remote_count, SLOTS * PER);
  CHECK_EQ(bin->rchain[0].n, PER);                                /* the oldest: as pushed */
  CHECK_EQ(bin->rchain[SLOTS - 1].n, PER);                        /* the newest: as pushed */
  CHECK(bin->rchain[SLOTS - 1].head == buf[(SLOTS - 1) * PER]);   /* the last that found a slot */
  CHECK_EQ(bin->curregs, curregs + SLOTS * PER);                  /* the rest is free again */
  for (unsigned i = SLOTS * PER; i < CHAINS * PER; i++) { /* (a slab emptied whole went back) */
    edata_t *s = slab_of(buf[i]);
    CHECK(s == NULL || bin_region_free(a, ind, s, buf[i]));
  }
  /* A fill of two chains' worth takes the two newest whole. */
  void *head;
  CHECK_EQ(bin_fill_list_upto(a, ind, &head, 2 * PER, 2 * PER, NULL), 2 * PER);
  CHECK_EQ(bin->nrchain, SLOTS - 2);
  CHECK_EQ(bin->remote_count, (SLOTS - 2) * PER);
  unsigned k = 0;
  for (void *r = head; r; r = link_next(r, ind)) buf[k++] = r;
  CHECK_EQ(k, 2 * PER);
  bin_dalloc_batch(a, ind, buf, k);
  bin_release_spare(a, ind);
  CHECK_EQ(bin->remote_count, 0);
  CHECK_EQ(bin->curregs, curregs);
}

/* A bin's chains hold at most REMOTE_MAX_BYTES (at least 64 regions): a batch that would
 * pass it goes to its bitmaps, each region checked there, and the chains stay whole. */
static void test_remote_cap_sends_the_batch_to_the_bitmaps(void) {
  szind_t ind = sz_size2index(14336); /* 1 MiB holds 73 of them */
  bin_t *bin = &a->bins[ind];
  bin_release_spare(a, ind);
  enum { PER = 40 };
  static void *buf[2 * PER];
  static slab_run_t runs[PER];
  size_t curregs = bin->curregs;
  CHECK_EQ(bin_fill(a, ind, buf, 2 * PER), 2 * PER);
  unsigned nruns = chain_with_runs(buf, PER, runs);
  bin_push_remote(a, ind, buf[0], buf[PER - 1], PER, runs, nruns);
  CHECK_EQ(bin->nrchain, 1);
  CHECK_EQ(bin->remote_count, PER);
  nruns = chain_with_runs(&buf[PER], PER, runs);
  bin_push_remote(a, ind, buf[PER], buf[2 * PER - 1], PER, runs, nruns); /* 80 > 73 */
  CHECK_EQ(bin->nrchain, 1);
  CHECK_EQ(bin->remote_count, PER);
  CHECK_EQ(bin->curregs, curregs + PER);
  for (unsigned i = PER; i < 2 * PER; i++) { /* (a slab emptied whole went back) */
    edata_t *s = slab_of(buf[i]);
    CHECK(s == NULL || bin_region_free(a, ind, s, buf[i]));
  }
  for (unsigned i = 0; i < PER; i++) CHECK(!bin_region_free(a, ind, slab_of(buf[i]), buf[i]));
  bin_release_spare(a, ind);
  CHECK_EQ(bin->remote_count, 0);
  CHECK_EQ(bin->curregs, curregs);
}

/* No memory for a bitmap: frees into a full slab never fail; the regions wait on the
 * bin's remote chains (still counted as handed out), the next fill hands them out, and
 * a drain that cannot place them ends. */
static void test_bitmap_pool_exhausted_never_fails_a_free(void) {
  szind_t ind = sz_size2index(48);
  bin_t *bin = &a->bins[ind];
  unsigned per = bin_info[ind].nregs, first;
  static void *buf[3 * 1400];
  CHECK(2 * per <= 3 * 1400);
  unsigned n = bin_fill(a, ind, buf, 2 * per);
  edata_t *s = whole_slab_in(buf, n, ind, &first);
  CHECK(s != NULL && s->bitmap == NULL);
  if (s == NULL) return;
  if (bin->bm_spare) { /* no bitmap to regain but from the pools */
    bitmap_free(a, ind, bin->bm_spare);
    bin->bm_spare = NULL;
  }
  size_t curregs = bin->curregs;
  uint32_t remote = bin->remote_count;
  slab_bitmap_test_fail = true;
  bin_dalloc_batch(a, ind, &buf[first], 10);
  CHECK(s->bitmap == NULL);
  CHECK_EQ(s->nfree, 0);
  CHECK_EQ(bin->curregs, curregs);
  CHECK_EQ(bin->remote_count, remote + 10);
  bin_release_spare(a, ind); /* drains every chain: must end, keeping the 10 */
  CHECK_EQ(bin->remote_count, remote + 10);
  /* The next fill takes them first. */
  void *got[10];
  CHECK_EQ(bin_fill(a, ind, got, 10), 10);
  unsigned found = 0;
  for (unsigned i = 0; i < 10; i++)
    for (unsigned j = 0; j < 10; j++) found += got[i] == buf[first + j];
  CHECK_EQ(found, 10);
  slab_bitmap_test_fail = false;
  bin_dalloc_batch(a, ind, got, 10);
  CHECK(s->bitmap != NULL);
  CHECK_EQ(s->nfree, 10);
  bin_dalloc_batch(a, ind, buf, first);
  bin_dalloc_batch(a, ind, buf + first + 10, n - first - 10);
  CHECK_EQ(bin->curregs, 0);
}

/* bin_flush_local as the cache calls it: *pp becomes the chain it leaves; returns how
 * many it took. */
static uint32_t flush_local(arena_t *ar, szind_t ind, void **pp, uint32_t n) {
  uint32_t left;
  *pp = bin_flush_local(ar, ind, ind, *pp, n, &left);
  return n - left;
}

/* A cache's flush of its own arena's regions (bin_flush_local, tcache.c's flush): every
 * region's bit is set in one walk, slabs left empty leave the bin (only the current one
 * and a spare stay), a region of another arena is set aside and the walk goes on past
 * it, and the walk stops, taking nothing more, at a region freed twice, an interior
 * pointer or another class's region, so that the general path behind it reports that
 * one. */
static void test_flush_local_takes_own_regions_and_stops_at_others(void) {
  szind_t ind = sz_size2index(64), other = sz_size2index(128);
  unsigned per = bin_info[ind].nregs;
  bin_t *bin = &a->bins[ind];
  static void *buf[4 * 1024 + 8];
  CHECK(4 * per <= 4 * 1024);
  unsigned n = bin_fill(a, ind, buf, 4 * per);
  CHECK_EQ(n, 4 * per);
  size_t curregs = bin->curregs;
  /* Every other region first (the half-free pattern: each slab is met twice). */
  static void *order[4 * 1024 + 8];
  unsigned k = 0;
  for (unsigned i = 0; i < n; i += 2) order[k++] = buf[i];
  for (unsigned i = 1; i < n; i += 2) order[k++] = buf[i];
  void *p = chain_of(order, n);
  CHECK_EQ(flush_local(a, ind, &p, n), n);
  CHECK(p == NULL);
  CHECK_EQ(bin->curregs, curregs - n);
  CHECK(bin->curslabs <= 2); /* the current slab and one spare */
  for (unsigned i = 0; i < n; i++) {
    edata_t *s = slab_of(buf[i]);
    if (s == NULL) continue; /* released to the extents */
    uint64_t regind = ((uintptr_t)buf[i] - s->addr) / sz_size[ind];
    CHECK(s->bitmap != NULL && (s->bitmap[regind / 64] >> (regind % 64) & 1));
  }

  /* Set aside: another arena's regions. Stops: a double free, an interior pointer,
   * another class. */
  void *mine[13], *theirs[2] = {NULL, NULL}, *cls;
  CHECK_EQ(bin_fill(a, ind, mine, 13), 13);
  arena_t *b = narenas > 1 ? arena_get(narenas - 2) : NULL;
  if (b != NULL) CHECK_EQ(bin_fill(b, ind, theirs, 2), 2);
  CHECK_EQ(bin_fill(a, other, &cls, 1), 1);
  curregs = bin->curregs;
  if (b != NULL) {
    /* Both of b's regions are passed over and relinked, in order, ahead of the rest (the
     * link after the last region walked: the chain's end here). */
    void *c[5] = {mine[8], theirs[0], mine[9], theirs[1], mine[10]};
    p = chain_of(c, 5);
    CHECK_EQ(flush_local(a, ind, &p, 5), 3);
    CHECK(p == theirs[0]);
    CHECK(LINK_DEC(theirs[0]) == theirs[1]);
    CHECK(LINK_DEC(theirs[1]) == NULL);
    CHECK_EQ(bin->curregs, curregs - 3);
    /* A batch that starts in b's slab is not walked. */
    void *d[2] = {theirs[0], mine[11]};
    p = chain_of(d, 2);
    CHECK_EQ(flush_local(a, ind, &p, 2), 0);
    CHECK(p == theirs[0]);
    /* Regions set aside before a stop lead to the stopping region, which leads on to
     * the regions never walked. */
    void *e[5] = {mine[11], theirs[0], theirs[1], (char *)mine[12] + 16, mine[12]};
    p = chain_of(e, 5);
    CHECK_EQ(flush_local(a, ind, &p, 5), 1);
    CHECK(p == theirs[0]);
    CHECK(LINK_DEC(theirs[0]) == theirs[1]);
    CHECK(LINK_DEC(theirs[1]) == e[3]);
    CHECK(LINK_DEC(e[3]) == mine[12]);
    CHECK_EQ(bin->curregs, curregs - 4);
    bin_dalloc_batch(b, ind, theirs, 2);
  } else {
    void *c[4] = {mine[8], mine[9], mine[10], mine[11]};
    p = chain_of(c, 4);
    CHECK_EQ(flush_local(a, ind, &p, 4), 4);
  }
  bin_dalloc_batch(a, ind, &mine[12], 1);
  void *c2[2] = {mine[0], mine[1]};
  p = chain_of(c2, 2);
  CHECK_EQ(flush_local(a, ind, &p, 2), 2);
  curregs = bin->curregs;
  void *twice[3] = {mine[3], mine[0], mine[4]}; /* mine[0] went back above */
  p = chain_of(twice, 3);
  CHECK_EQ(flush_local(a, ind, &p, 3), 1);
  CHECK(p == mine[0]);
  void *inner[2] = {mine[5], (char *)mine[6] + 16};
  LINK_SET(inner[0], inner[1]);
  p = inner[0];
  CHECK_EQ(flush_local(a, ind, &p, 2), 1);
  CHECK(p == inner[1]);
  void *mixed[2] = {mine[7], cls};
  p = chain_of(mixed, 2);
  CHECK_EQ(flush_local(a, ind, &p, 2), 1);
  CHECK(p == cls);
  CHECK_EQ(bin->curregs, curregs - 3);
  bin_dalloc_batch(a, ind, &mine[2], 1);
  bin_dalloc_batch(a, ind, &mine[4], 1); /* behind the stop: never reached */
  bin_dalloc_batch(a, ind, &mine[6], 1);
  bin_dalloc_batch(a, other, &cls, 1);
  CHECK_EQ(bin->curregs, 0);
}

/* Threads fill and free regions of one bin at once, each freeing blocks another thread
 * took (slabs fill up, drop their bitmaps and regain them under contention): every
 * region handed out is distinct and untouched by others, and the bin ends balanced. */
#define XT_THREADS 4
#define XT_BATCH 700
#define XT_ROUNDS 60
static void *xt_slots[XT_THREADS][XT_BATCH];
static pthread_barrier_t xt_bar;
static atomic_int xt_bad;

static void *xt_main(void *arg) {
  unsigned me = (unsigned)(uintptr_t)arg;
  szind_t ind = sz_size2index(32);
  for (unsigned r = 0; r < XT_ROUNDS; r++) {
    void **mine = xt_slots[me];
    unsigned got = bin_fill(a, ind, mine, XT_BATCH);
    if (got != XT_BATCH) atomic_fetch_add(&xt_bad, 1);
    for (unsigned i = 0; i < got; i++) memset(mine[i], (int)(me * 16 + 1 + (r & 7)), 32);
    pthread_barrier_wait(&xt_bar);
    /* free a neighbour's batch, half of it now and half after the next barrier */
    void **theirs = xt_slots[(me + 1) % XT_THREADS];
    unsigned them = (me + 1) % XT_THREADS;
    for (unsigned i = 0; i < XT_BATCH; i++) {
      unsigned char *c = theirs[i];
      if (c[31] != (unsigned char)(them * 16 + 1 + (r & 7))) atomic_fetch_add(&xt_bad, 1);
    }
    bin_dalloc_batch(a, ind, theirs, XT_BATCH / 2);
    pthread_barrier_wait(&xt_bar);
    bin_dalloc_batch(a, ind, theirs + XT_BATCH / 2, XT_BATCH - XT_BATCH / 2);
    pthread_barrier_wait(&xt_bar);
  }
  return NULL;
}

static void test_concurrent_frees_into_full_slabs(void) {
  szind_t ind = sz_size2index(32);
  size_t before = a->bins[ind].curregs;
  pthread_barrier_init(&xt_bar, NULL, XT_THREADS);
  pthread_t t[XT_THREADS];
  for (uintptr_t i = 0; i < XT_THREADS; i++) CHECK(pthread_create(&t[i], NULL, xt_main, (void *)i) == 0);
  for (int i = 0; i < XT_THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&xt_bar);
  CHECK_EQ(atomic_load(&xt_bad), 0);
  CHECK_EQ(a->bins[ind].curregs, before);
}

/* THP "always": metadata may sit on huge pages, so residency checks say nothing. */
static bool thp_always(void) {
  char thp[128] = {0};
  int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY);
  if (fd >= 0) {
    if (read(fd, thp, sizeof(thp) - 1) < 0) thp[0] = 0;
    close(fd);
  }
  return strstr(thp, "[always]") != NULL;
}

/* The first arena index not created yet; narenas when every one is. */
static unsigned first_unused_arena(void) {
  unsigned ind = 0;
  while (ind < narenas && __atomic_load_n(&arenas[ind], __ATOMIC_ACQUIRE) != NULL) ind++;
  return ind;
}

/* A new arena faults in none of its bins' pages until a class is used, statistics read
 * or not: the oversize arena, and an arena whose threads use a few classes, stay small. */
static void test_new_arena_leaves_unused_bins_untouched(void) {
  if (thp_always()) {
    printf("skip test_new_arena_leaves_unused_bins_untouched: THP always (metadata may be huge pages)\n");
    return;
  }
  unsigned ind = first_unused_arena();
  if (ind == narenas) {
    printf("skip test_new_arena_leaves_unused_bins_untouched: every arena is in use\n");
    return;
  }
  arena_t *na = arena_get(ind);
  CHECK(na != NULL);
  if (na == NULL) return;
  stats_t st; /* statistics read every arena's bins: not those never used */
  stats_merge(&st);
  uintptr_t lo = ((uintptr_t)&na->bins[1] + os_page - 1) & ~(os_page - 1);
  uintptr_t hi = (uintptr_t)&na->bins[SZ_NSMALL + 1] & ~(os_page - 1);
  size_t npages = (hi - lo) / os_page, res = 0;
  unsigned char vec[64];
  CHECK(npages >= 4 && npages <= 64);
  CHECK(mincore((void *)lo, npages * os_page, vec) == 0);
  for (size_t i = 0; i < npages; i++) res += vec[i] & 1;
  CHECK_EQ(res, 0);
  /* Using one class brings in its bin's page(s) only, and the locks work. */
  szind_t ind64 = sz_size2index(64);
  void *p;
  CHECK_EQ(bin_fill(na, ind64, &p, 1), 1);
  bin_dalloc_batch(na, ind64, &p, 1);
  CHECK(mincore((void *)lo, npages * os_page, vec) == 0);
  res = 0;
  for (size_t i = 0; i < npages; i++) res += vec[i] & 1;
  CHECK(res >= 1 && res <= 2);
}

/* Resident KiB of the whole process, counted by a page-table walk (smaps_rollup): exact, and
 * it leaves out pages that were only read (mapped to the shared zero page), which mincore
 * would count. -1 if unreadable. */
static long rollup_rss_kb(void) {
  static char buf[4096];
  int fd = open("/proc/self/smaps_rollup", O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *r = strstr(buf, "\nRss:");
  return r ? strtol(r + 5, NULL, 10) : -1;
}

/* A statistics refresh (Redis's cron writes "epoch" ten times a second) stores only the
 * words of a snapshot record that are not zero: a new arena's 19 KiB record costs the page
 * or two of its header, not 5 pages (as it did when every word was written). */
static void test_statistics_refresh_leaves_zero_pages_of_a_record_untouched(void) {
  if (thp_always() || rollup_rss_kb() < 0 || UNDER_SANITIZER) {
    printf("skip test_statistics_refresh_leaves_zero_pages_of_a_record_untouched: THP always, no "
           "smaps_rollup, or a sanitizer (its shadow pages count in RSS)\n");
    return;
  }
  unsigned ind = first_unused_arena();
  if (ind == narenas) {
    printf("skip test_statistics_refresh_leaves_zero_pages_of_a_record_untouched: every arena is in use\n");
    return;
  }
  ctl_refresh(); /* the records of the arenas there are, and the merged one */
  CHECK(arena_get(ind) != NULL);
  long before = rollup_rss_kb();
  for (int k = 0; k < 3; k++) ctl_refresh(); /* the new arena's record: created and filled */
  long grew = rollup_rss_kb() - before;
  CHECK(ctl_snap_record(ind) != NULL && ((const ctl_arena_stats_t *)ctl_snap_record(ind))->initialized);
  if (grew * 1024 >= (long)sizeof(ctl_arena_stats_t) / 2)
    printf("a refresh made %ld KiB resident (record: %zu bytes)\n", grew, sizeof(ctl_arena_stats_t));
  CHECK(grew * 1024 < (long)sizeof(ctl_arena_stats_t) / 2);
}

/* Every geometry of every class (usual, crowded, busy) holds as many regions as fit, its
 * bits within the class's bitmap block: its tail is shorter than a region, so slab_last
 * (the slab's size less one region) bounds the region starts exactly and a pointer into
 * the tail is never taken for a region (the busy geometry of 448 B and 896 B once left a
 * whole region's room in its tail). */
static void test_every_geometry_has_a_tail_shorter_than_a_region(void) {
  for (szind_t i = 1; i <= SZ_NSMALL; i++) {
    const bin_info_t *bi = &bin_info[i];
    size_t bits = slab_bitmap_block(i) * 8;
    const size_t sizes[3] = {bi->slab_size, bi->slab_size_crowd, bi->slab_size_big};
    const uint32_t nregs[3] = {bi->nregs, bi->nregs_crowd, bi->nregs_big};
    for (int g = 0; g < 3; g++) {
      CHECK(sizes[g] % os_page == 0 && nregs[g] >= 1);
      CHECK((uint64_t)nregs[g] * bi->size <= sizes[g]);
      CHECK(sizes[g] - (uint64_t)nregs[g] * bi->size < bi->size); /* no region's room left */
      CHECK(nregs[g] <= bits && nregs[g] <= (uint32_t)bi->bm_words * 64);
    }
    CHECK_EQ(bi->used_big, (uint64_t)bi->nregs_big * bi->size);
  }
}

/* Busy bins take the big geometry (docs/design.md, "Size classes and slab geometry"): a bin
 * that makes SLAB_BIG_AFTER slabs in a row with no region freed to it, while its arena
 * gives back at least half as many slab bytes (one class's memory moving to another, the
 * half-free loop), makes its next slabs slab_size_big; a bin that only grows keeps the
 * usual size, and so does one that was freed to. Big slabs count their own regions: they
 * go back to the extents when all are free, and a double free in one is caught. */
static void test_busy_bin_takes_big_slabs(void) {
  szind_t ind = sz_size2index(4096), old = sz_size2index(3072), grow = sz_size2index(2048);
  const bin_info_t *bi = &bin_info[ind];
  CHECK(bi->slab_size_big > bi->slab_size && bi->slab_size_big % bi->slab_size == 0);
  CHECK_EQ(bi->nregs_big, bi->slab_size_big / bi->size);
  CHECK(bi->nregs_big <= slab_bitmap_block(ind) * 8);
  CHECK_EQ(bin_info[sz_size2index(8192)].slab_size_big, bin_info[sz_size2index(8192)].slab_size);
  enum { NB = 4 * SLAB_BIG_AFTER * 16 };
  static void *buf[NB], *olds[NB], *grows[NB];
  /* A bin that only grows (no slabs come back): usual slabs. */
  unsigned ng = (SLAB_BIG_AFTER + 8) * bin_info[grow].nregs;
  CHECK(ng <= NB);
  bin_release_spare(a, grow);
  edata_t *cur0 = a->bins[grow].cur; /* an earlier test's slab: regions may come from it first */
  CHECK_EQ(bin_fill(a, grow, grows, ng), ng);
  for (unsigned i = 0; i < ng; i++)
    if (slab_of(grows[i]) != cur0) CHECK_EQ(slab_of(grows[i])->size, bin_info[grow].slab_size);
  /* One class's slabs go back while another's bin grows: big slabs after SLAB_BIG_AFTER. */
  unsigned per = bi->nregs, nold = NB;
  CHECK_EQ(bin_fill(a, old, olds, nold), nold);
  unsigned n = 0, k = 0, nbig = 0;
  while (n + per <= NB && k + bin_info[old].nregs <= nold) {
    CHECK_EQ(bin_fill(a, ind, buf + n, per), per);
    n += per;
    bin_dalloc_batch(a, old, olds + k, bin_info[old].nregs);
    k += bin_info[old].nregs;
  }
  for (unsigned i = 0; i < n; i++) {
    edata_t *s = slab_of(buf[i]);
    CHECK(s != NULL && (s->size == bi->slab_size || s->size == bi->slab_size_big));
    if (s->size == bi->slab_size_big) {
      nbig++;
      CHECK(((uintptr_t)buf[i] - s->addr) % bi->size == 0);
      CHECK_EQ(slab_nregs(s, bi), bi->nregs_big);
      CHECK_EQ(slab_used(s, bi), bi->used_big);
    }
  }
  CHECK(nbig >= n / 2);
  /* A double free into a big slab stops the flush walk there. */
  edata_t *bs = slab_of(buf[n - 1]);
  CHECK(bs->size == bi->slab_size_big && slab_of(buf[n - 2]) == bs && slab_of(buf[n - 3]) == bs);
  void *p = chain_of(buf + n - 2, 1);
  CHECK_EQ(flush_local(a, ind, &p, 1), 1);
  void *twice[2] = {buf[n - 3], buf[n - 2]};
  p = chain_of(twice, 2);
  CHECK_EQ(flush_local(a, ind, &p, 2), 1);
  CHECK(p == buf[n - 2]);
  CHECK(bs->bitmap != NULL);
  LINK_SET(buf[n - 1], NULL);
  p = buf[n - 1];
  CHECK_EQ(flush_local(a, ind, &p, 1), 1);
  /* Every region back: big slabs leave the bin like usual ones. */
  bin_dalloc_batch(a, ind, buf, n - 3);
  CHECK_EQ(a->bins[ind].curregs, 0);
  CHECK(a->bins[ind].curslabs <= 2);
  /* A free into the bin restarts the run: its next slab is a usual one. */
  bin_release_spare(a, ind);
  CHECK_EQ(bin_fill(a, ind, buf, bi->nregs_big + 1), bi->nregs_big + 1);
  edata_t *last = slab_of(buf[bi->nregs_big]);
  CHECK(last != NULL && last->size == bi->slab_size);
  bin_dalloc_batch(a, ind, buf, bi->nregs_big + 1);
  bin_dalloc_batch(a, old, olds + k, nold - k);
  bin_dalloc_batch(a, grow, grows, ng);
}

int main(void) {
  if (strata_init()) return 1;
  printf("unit: slab\n");
  a = arena_get(narenas - 1);
  RUN(test_fill_gives_distinct_aligned_regions);
  RUN(test_empty_slabs_return_to_extents);
  RUN(test_double_and_interior_frees_abort);
  RUN(test_full_slab_drops_bitmap_and_regains_it);
  RUN(test_flush_local_takes_own_regions_and_stops_at_others);
  RUN(test_bad_frees_into_full_slab_abort);
  RUN(test_long_remote_chain_drains_every_piece);
  RUN(test_chains_past_the_slots_go_to_the_bitmaps);
  RUN(test_remote_cap_sends_the_batch_to_the_bitmaps);
  RUN(test_bitmap_pool_exhausted_never_fails_a_free);
  RUN(test_bitmap_blocks_fit_their_bitmaps);
  RUN(test_statistics_refresh_leaves_zero_pages_of_a_record_untouched);
  RUN(test_concurrent_frees_into_full_slabs);
  RUN(test_new_arena_leaves_unused_bins_untouched);
  RUN(test_every_geometry_has_a_tail_shorter_than_a_region);
  RUN(test_busy_bin_takes_big_slabs);
  UNIT_EXIT();
}

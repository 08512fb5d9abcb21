/* Size classes: round trips, spacing, alignment classes and slab geometry. */
#include "internal.h"
#include "unit.h"

static void test_size_roundtrip_is_tight(void) {
  for (size_t s = 1; s <= ((size_t)4 << 20); s += (s < 20000 ? 1 : 4093)) {
    szind_t i = sz_size2index(s);
    CHECK(i >= 1 && i <= SZ_NCLASSES);
    CHECK(sz_size[i] >= s);
    CHECK(s <= 8 ? i == SZ_TINY_IND : i >= SZ_MIN_IND); /* 8 bytes only up to 8 */
    if (i > SZ_TINY_IND) CHECK(sz_size[i - 1] < s); /* the smallest class that fits */
  }
  for (szind_t i = SZ_TINY_IND; i <= SZ_NCLASSES; i++) CHECK_EQ(sz_size2index(sz_size[i]), i);
  CHECK_EQ(sz_size[SZ_TINY_IND], 8);
  CHECK_EQ(sz_size2index(0), SZ_TINY_IND);
  CHECK_EQ(sz_size2index(1), SZ_TINY_IND);
  CHECK_EQ(sz_size2index(8), SZ_TINY_IND);
  CHECK_EQ(sz_size2index(9), SZ_MIN_IND);
  CHECK_EQ(sz_size2index_compute(8), SZ_TINY_IND);
  for (size_t s = 0; s <= 8; s++) CHECK_EQ(sz_malloc_lookup_read(s), (size_t)SZ_TINY_IND * TBIN_SIZE);
  CHECK_EQ(sz_size2index(SZ_MAX + 1), 0);
}

/* malloc_slow's second table (4-32 KiB, 1 KiB steps) names the class the computation does,
 * at every byte: a class boundary that is not a multiple of 1 KiB would break it. */
static void test_kib_table_matches_computation(void) {
  for (size_t s = SZ_LOOKUP_MAX + 1; s <= SZ_LOOKUP_K_MAX; s++) {
    szind_t i = sz_lookup_k[(s - 1) >> 10];
    if (i != sz_size2index_compute(s)) {
      CHECK_EQ(i, sz_size2index_compute(s));
      break;
    }
  }
  CHECK_EQ(sz_lookup_k[(SZ_LOOKUP_MAX + 1 - 1) >> 10], sz_size2index_compute(SZ_LOOKUP_MAX + 1));
  CHECK_EQ(sz_size[sz_lookup_k[(SZ_LOOKUP_K_MAX - 1) >> 10]], SZ_LOOKUP_K_MAX);
  /* The malloc fast path pops what the first table names as a slab region: every class
   * it names must be small, and it must cover every small class. */
  CHECK_EQ(sz_lookup_read(SZ_LOOKUP_MAX), SZ_NSMALL);
  CHECK(sz_size2index(SZ_LOOKUP_MAX + 1) > SZ_NSMALL);
}

/* strata_malloc's own table goes on to 16 KiB: the one large class whose pop there counts
 * nmalloc (tcache_counts reads it), the size's class at every byte (as its bin's offset in a
 * thread cache), and no further. */
static void test_malloc_table_names_each_size_class(void) {
  CHECK_EQ(sz_size[SZ_MALLOC_FAST_IND], SZ_MALLOC_FAST_MAX);
  for (size_t s = 1; s <= SZ_MALLOC_FAST_MAX; s++) {
    size_t off = sz_malloc_lookup_read(s);
    if (off != sz_size2index_compute(s) * TBIN_SIZE) {
      CHECK_EQ(off, sz_size2index_compute(s) * TBIN_SIZE);
      break;
    }
  }
  CHECK_EQ(sz_malloc_lookup_read(SZ_MALLOC_FAST_MAX), SZ_MALLOC_FAST_IND * TBIN_SIZE);
  CHECK_EQ(sz_malloc_lookup_read(SZ_LOOKUP_MAX + 1), SZ_MALLOC_FAST_IND * TBIN_SIZE);
}

/* free()'s region-start test (internal.h, rtree_chk) on every offset of every geometry of
 * every small class, with the slab at any page: (p x c - base x c) mod 2^32 < c exactly
 * when p - base is a multiple of the size. */
static void test_region_start_test_is_exact_for_every_class_and_offset(void) {
  for (szind_t i = 1; i <= SZ_NSMALL; i++) {
    const bin_info_t *bi = &bin_info[i];
    uint32_t c = (uint32_t)bi->div_magic;
    size_t sizes[3] = {bi->slab_size, bi->slab_size_crowd, bi->slab_size_big};
    for (int g = 0; g < 3; g++) {
      uintptr_t base = (uintptr_t)0x7f0000000000 + (uintptr_t)(i * 7 + g) * 4096;
      uint32_t chk = (uint32_t)(base * bi->div_magic);
      size_t bad = 0;
      for (size_t off = 0; off < sizes[g]; off++) {
        uint32_t t = (uint32_t)(base + off) * c - chk;
        bad += (t < c) != (off % bi->size == 0);
      }
      if (bad) printf("class %u (%zu B), slab of %zu B: %zu wrong\n", i, bi->size, sizes[g], bad);
      CHECK_EQ(bad, 0);
    }
  }
}

/* The extent sets' bucket tables agree with the computation at every page count. */
static void test_page_bucket_tables_match(void) {
  for (size_t n = 0; n < PSZ_TAB_N; n++) {
    if (psz_floor_tab[n] != psz_floor(n) || psz_ceil_tab[n] != psz_ceil(n)) {
      CHECK_EQ(psz_floor_tab[n], psz_floor(n));
      CHECK_EQ(psz_ceil_tab[n], psz_ceil(n));
      break;
    }
  }
  CHECK_EQ(psz_floor_fast(PSZ_TAB_N - 1), psz_floor(PSZ_TAB_N - 1));
  CHECK_EQ(psz_ceil_fast(PSZ_TAB_N + 1), psz_ceil(PSZ_TAB_N + 1));
  CHECK(psz_ceil_fast(5) > psz_floor_fast(5) || psz_pages(psz_floor_fast(5)) == 5);
}

static void test_classes_follow_jemalloc_spacing(void) {
  size_t expect[] = {8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640};
  for (unsigned i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) CHECK_EQ(sz_size[i + 1], expect[i]);
  CHECK_EQ(sz_size[SZ_NSMALL], SZ_SMALL_MAX);
  /* Four classes per doubling above 128. */
  for (szind_t i = 10; i + 4 <= SZ_NCLASSES; i++) CHECK_EQ(sz_size[i + 4], 2 * sz_size[i]);
}

static void test_aligned_classes_are_multiples(void) {
  for (size_t align = 1; align <= os_page; align *= 2) {
    for (size_t s = 1; s <= 20000; s += 7) {
      size_t u = sz_sa2u(s, align);
      CHECK(u >= s);
      if (u <= SZ_SMALL_MAX && align > 8) CHECK(u % align == 0);
    }
  }
  CHECK_EQ(sz_sa2u(SZ_MAX + 1, 8), 0);
}

/* aligned_common hands an alignment up to the quantum to malloc: that is only right if
 * such a request's aligned class is the plain class of max(size, align). */
static void test_quantum_alignment_is_the_plain_class(void) {
  for (size_t align = 1; align <= SZ_QUANTUM; align *= 2) {
    for (size_t s = 0; s <= SZ_MALLOC_FAST_MAX; s++) {
      size_t want = sz_size[sz_size2index(s < align ? align : s)];
      CHECK_EQ(sz_sa2u(s ? s : 1, align), want);
      /* the 8-byte class only for requests of at most 8 bytes aligned to at most 8 */
      CHECK(want % SZ_QUANTUM == 0 || (want == 8 && s <= 8 && align <= 8));
    }
  }
  for (size_t s = 0; s <= 16; s++) CHECK_EQ(sz_sa2u(s ? s : 1, 16), 16);
}

static void test_slab_geometry_wastes_little(void) {
  for (szind_t i = 1; i <= SZ_NSMALL; i++) {
    const bin_info_t *bi = &bin_info[i];
    CHECK(bi->slab_size % os_page == 0);
    CHECK(bi->nregs >= 1 && (size_t)bi->nregs * bi->size <= bi->slab_size);
    CHECK(bi->bm_words * 64 >= bi->nregs);
    size_t waste = bi->slab_size - (size_t)bi->nregs * bi->size;
    CHECK(waste * 8 <= bi->slab_size); /* under 12.5% for every class */
    /* Division by multiply is exact on region boundaries. */
    for (uint64_t r = 0; r < bi->nregs; r++) CHECK_EQ((r * bi->size * bi->div_magic) >> 32, r);
    /* Small objects: the slab's edata is at most 1/800 of it (Redis's 32-48 B keys). */
    if (bi->size <= 128) CHECK(sizeof(edata_t) * 800 <= bi->slab_size);
  }
}

static void test_page_buckets_bracket_sizes(void) {
  for (size_t n = 1; n < 100000; n += (n < 100 ? 1 : 97)) {
    unsigned f = psz_floor(n), c = psz_ceil(n);
    CHECK(f <= c && c - f <= 1);
  }
  CHECK_EQ(psz_ceil(1), 0);
  CHECK_EQ(psz_ceil(5), 4);
  CHECK_EQ(psz_floor(9), 7); /* 8 pages: the class below 10 */
}

int main(void) {
  if (strata_init()) return 1;
  RUN(test_size_roundtrip_is_tight);
  RUN(test_kib_table_matches_computation);
  RUN(test_malloc_table_names_each_size_class);
  RUN(test_region_start_test_is_exact_for_every_class_and_offset);
  RUN(test_page_bucket_tables_match);
  RUN(test_classes_follow_jemalloc_spacing);
  RUN(test_aligned_classes_are_multiples);
  RUN(test_quantum_alignment_is_the_plain_class);
  RUN(test_slab_geometry_wastes_little);
  RUN(test_page_buckets_bracket_sizes);
  UNIT_EXIT();
}

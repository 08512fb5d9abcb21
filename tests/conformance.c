/*
 * conformance.c - API conformance of strata: C11/POSIX/glibc semantics of the malloc
 * family, jemalloc's *allocx family and mallctl, and the invalid/double free reports.
 * Built twice: with the standard names in the override build (group "api") and with the
 * strata_ names (STRATA_TEST_PREFIXED, group "prefixed", also run under sanitizers).
 */
#define _GNU_SOURCE
#include "strata_names.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Deterministic byte pattern for block number id: detects overlap between blocks. */
static uint8_t pattern_byte(uint64_t id, size_t i)
{
    uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)(i >> 3) * 0xD1B54A32D192ED03ull;
    x ^= x >> 29;
    return (uint8_t)(x >> (8 * (i & 7)));
}
static void fill(void *p, size_t n, uint64_t id)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = pattern_byte(id, i);
}
/* Returns the first offset that does not hold the pattern, or SIZE_MAX. */
static size_t verify(const void *p, size_t n, uint64_t id)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern_byte(id, i))
            return i;
    return SIZE_MAX;
}
#define CHECK_PATTERN(p, n, id)                                                           \
    do {                                                                                  \
        size_t bad_ = verify((p), (n), (id));                                             \
        CHECK(bad_ == SIZE_MAX, "block %p (id %ju, %zu bytes checked) corrupted at offset %zu", \
              (void *)(p), (uintmax_t)(id), (size_t)(n), bad_);                           \
    } while (0)

static size_t first_nonzero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return i;
    return SIZE_MAX;
}

/* Sizes across every small class, the large classes and the oversize arena. */
static size_t test_sizes(size_t *out, size_t max)
{
    size_t n = 0;
    for (size_t s = 1; s <= 1024 && n < max; s++)
        out[n++] = s;
    for (size_t s = 1025; s <= 64 * KiB && n < max; s += s / 16 + 1)
        out[n++] = s;
    for (size_t s = 64 * KiB + 1; s <= 12 * MiB && n < max; s += s / 3 + 4096 - 5)
        out[n++] = s;
    return n;
}

/* Sizes that no allocator can serve: each must fail with NULL and errno ENOMEM. */
static const size_t huge_sizes[] = {
    SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4096, SIZE_MAX - (1 << 20), SIZE_MAX / 2 + 1,
    (size_t)PTRDIFF_MAX, (size_t)1 << 62,
};
#define NHUGE (sizeof huge_sizes / sizeof huge_sizes[0])

/* ---------------------------------------------------------------- served by strata */

#ifndef STRATA_TEST_PREFIXED
/* The object that defines name must be libstrata (not glibc, not libstdc++). */
static void check_symbol_in_libstrata(const char *name)
{
    void *sym = dlsym(RTLD_DEFAULT, name);
    CHECK(sym != NULL, "symbol %s not found", name);
    Dl_info info;
    CHECK(dladdr(sym, &info) && info.dli_fname, "dladdr failed for %s", name);
    CHECK(strstr(info.dli_fname, "libstrata") != NULL, "%s resolves to %s, not libstrata", name,
          info.dli_fname);
}
#endif

OVERRIDE_TEST(test_standard_names_resolve_to_libstrata)
{
#ifndef STRATA_TEST_PREFIXED
    static const char *names[] = {
        "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign",
        "aligned_alloc", "memalign", "valloc", "pvalloc", "malloc_usable_size", "free_sized",
        "free_aligned_sized", "malloc_trim", "mallopt", "mallinfo2", "mallocx", "rallocx",
        "xallocx", "sallocx", "dallocx", "sdallocx", "nallocx", "mallctl", "mallctlnametomib",
        "mallctlbymib", "malloc_stats_print",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        check_symbol_in_libstrata(names[i]);
#endif
}

OVERRIDE_TEST(test_glibc_introspection_names_resolve_to_libstrata)
{
#ifndef STRATA_TEST_PREFIXED
    /* PITFALLS.md: glibc's versions would report glibc's empty heap or walk it. */
    check_symbol_in_libstrata("mallinfo");
    check_symbol_in_libstrata("malloc_stats");
    check_symbol_in_libstrata("malloc_info");
#endif
}

TEST(test_malloc_is_served_by_strata)
{
    const char *version = CTL_READ("version", const char *);
    CHECK(version && strcmp(version, STRATA_VERSION) == 0, "mallctl version \"%s\", want %s",
          version ? version : "(null)", STRATA_VERSION);
    uint64_t a0 = thread_allocated();
    void *p = malloc(MiB);
    CHECK(p != NULL);
    uint64_t a1 = thread_allocated();
    CHECK(a1 - a0 >= MiB, STRATA_TEST_API "malloc(1 MiB) moved thread.allocated by %ju only",
          (uintmax_t)(a1 - a0));
    free(p);
    CHECK(thread_deallocated() > 0);
    /* Usable sizes are strata's size classes, not glibc's chunk sizes. */
    for (size_t n = 1; n < 20000; n = n * 3 / 2 + 1) {
        void *q = malloc(n);
        CHECK_EQ(malloc_usable_size(q), nallocx(n, 0));
        free(q);
    }
}

OVERRIDE_TEST(test_libc_aliases_resolve_to_libstrata)
{
#ifndef STRATA_TEST_PREFIXED
    static const char *names[] = {"__libc_malloc", "__libc_calloc", "__libc_realloc",
                                  "__libc_free", "__libc_memalign", "__libc_valloc",
                                  "__libc_pvalloc"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        check_symbol_in_libstrata(names[i]);
#endif
}

#ifndef STRATA_TEST_PREFIXED
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
#endif

OVERRIDE_TEST(test_libc_alias_blocks_are_freed_by_free)
{
#ifndef STRATA_TEST_PREFIXED
    uint64_t a0 = thread_allocated();
    void *p = __libc_malloc(MiB);
    CHECK(p && thread_allocated() - a0 >= MiB, "__libc_malloc not served by strata");
    free(p);
    p = __libc_malloc(100);
    CHECK_EQ(malloc_usable_size(p), nallocx(100, 0));
    fill(p, 100, 1);
    p = __libc_realloc(p, 5000);
    CHECK_PATTERN(p, 100, 1);
    free(p);
    uint8_t *z = __libc_calloc(100, 10);
    CHECK(z && first_nonzero(z, 1000) == SIZE_MAX);
    free(z);
    p = __libc_memalign(4096, 100);
    CHECK_ALIGNED(p, 4096);
    free(p);
    p = malloc(300);
    __libc_free(p);
#endif
}

OVERRIDE_TEST(test_cfree_if_exported_is_strata)
{
#ifndef STRATA_TEST_PREFIXED
    /* glibc 2.26+ keeps cfree only as a compat symbol, invisible to dlsym and the linker;
     * if a cfree is visible, it must be strata's. */
    void (*cfree_fn)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "cfree");
    if (!cfree_fn) {
        printf("cfree is not exported (nothing to check)\n");
        return;
    }
    check_symbol_in_libstrata("cfree");
    cfree_fn(malloc(100));
#endif
}

/* ---------------------------------------------------------------- POSIX and C semantics */

TEST(test_malloc_zero_returns_unique_freeable_pointers)
{
    enum { N = 512 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(0);
        CHECK(p[i] != NULL, "malloc(0) returned NULL at %d", i);
        for (int j = 0; j < i; j++)
            CHECK(p[j] != p[i], "malloc(0) returned %p twice", p[i]);
    }
    for (int i = 0; i < N; i++)
        free(p[i]);
    for (int i = 0; i < N; i++)
        p[i] = malloc(0);
    for (int i = 0; i < N; i++)
        free(p[i]);
}

TEST(test_realloc_to_zero_frees_and_returns_null)
{
    static const size_t sizes[] = {1, 100, 1000, 20000, 3 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        size_t usable = malloc_usable_size(p);
        uint64_t d0 = thread_deallocated();
        void *q = realloc(p, 0);
        CHECK(q == NULL, "realloc(p, 0) returned %p; glibc frees p and returns NULL", q);
        uint64_t d1 = thread_deallocated();
        CHECK(d1 - d0 >= usable, "realloc(p of %zu, 0) did not free p (deallocated +%ju)",
              sizes[i], (uintmax_t)(d1 - d0));
    }
}

TEST(test_realloc_null_acts_as_malloc)
{
    void *p = realloc(NULL, 100);
    CHECK(p != NULL && malloc_usable_size(p) >= 100);
    fill(p, 100, 7);
    CHECK_PATTERN(p, 100, 7);
    free(p);
    p = realloc(NULL, 0);
    CHECK(p != NULL, "realloc(NULL, 0) must act as malloc(0)");
    free(p);
    p = realloc(NULL, 5 * MiB);
    CHECK(p != NULL && malloc_usable_size(p) >= 5 * MiB);
    free(p);
}

TEST(test_realloc_grow_and_shrink_keeps_contents)
{
    static const size_t steps[] = {1,      8,       24,      100,     1000,     4096, 14 * KiB,
                                   20000,  100000,  MiB + 1, 5 * MiB, 20 * MiB, 3 * MiB,
                                   70000,  16000,   3000,    200,     9,        1};
    size_t old = 0;
    void *p = NULL;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        void *q = realloc(p, steps[i]);
        CHECK(q != NULL, "realloc to %zu failed", steps[i]);
        size_t keep = old < steps[i] ? old : steps[i];
        CHECK_PATTERN(q, keep, i - 1);
        CHECK(malloc_usable_size(q) >= steps[i]);
        fill(q, steps[i], i);
        p = q;
        old = steps[i];
    }
    free(p);
}

TEST(test_failed_realloc_keeps_old_block_and_sets_enomem)
{
    static const size_t sizes[] = {64, 5000, 2 * MiB};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        void *p = malloc(sizes[s]);
        fill(p, sizes[s], s);
        for (size_t h = 0; h < NHUGE; h++) {
            errno = 0;
            void *q = realloc(p, check_opaque(huge_sizes[h]));
            CHECK(q == NULL, "realloc(p, %zu) returned %p", huge_sizes[h], q);
            CHECK(errno == ENOMEM, "realloc(p, %zu): errno %d, want ENOMEM", huge_sizes[h], errno);
            CHECK_PATTERN(p, sizes[s], s);
        }
        p = realloc(p, sizes[s] * 2);
        CHECK_PATTERN(p, sizes[s], s);
        free(p);
    }
}

TEST(test_malloc_huge_size_fails_with_enomem)
{
    for (size_t h = 0; h < NHUGE; h++) {
        errno = 0;
        void *p = malloc(check_opaque(huge_sizes[h]));
        CHECK(p == NULL && errno == ENOMEM, "malloc(%zu) = %p, errno %d", huge_sizes[h], p, errno);
        errno = 0;
        p = calloc(1, check_opaque(huge_sizes[h]));
        CHECK(p == NULL && errno == ENOMEM, "calloc(1, %zu) = %p, errno %d", huge_sizes[h], p,
              errno);
        errno = 0;
        p = aligned_alloc(64, check_opaque(huge_sizes[h]));
        CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(64, %zu) = %p, errno %d",
              huge_sizes[h], p, errno);
        errno = 0;
        p = memalign(4096, check_opaque(huge_sizes[h]));
        CHECK(p == NULL && errno == ENOMEM, "memalign(4096, %zu) = %p, errno %d", huge_sizes[h],
              p, errno);
        errno = 0;
        p = valloc(check_opaque(huge_sizes[h]));
        CHECK(p == NULL && errno == ENOMEM, "valloc(%zu) = %p, errno %d", huge_sizes[h], p, errno);
        errno = 0;
        p = pvalloc(check_opaque(huge_sizes[h]));
        CHECK(p == NULL && errno == ENOMEM, "pvalloc(%zu) = %p, errno %d", huge_sizes[h], p,
              errno);
    }
    /* Still healthy afterwards. */
    void *p = malloc(100);
    CHECK(p != NULL);
    free(p);
}

TEST(test_calloc_overflow_sets_enomem)
{
    static const size_t pairs[][2] = {
        {SIZE_MAX, 2},          {2, SIZE_MAX},          {(size_t)1 << 32, (size_t)1 << 32},
        {SIZE_MAX / 2 + 1, 2},  {SIZE_MAX / 16 + 1, 16}, {SIZE_MAX, SIZE_MAX},
        {(size_t)1 << 33, (size_t)1 << 31}, {SIZE_MAX / 3 + 1, 3}, {65537, SIZE_MAX / 65536},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        errno = 0;
        void *p = calloc(check_opaque(pairs[i][0]), check_opaque(pairs[i][1]));
        CHECK(p == NULL && errno == ENOMEM, "calloc(%zu, %zu) = %p, errno %d", pairs[i][0],
              pairs[i][1], p, errno);
    }
    /* A zero product is not an overflow: calloc(0, huge) is calloc of 0 bytes. */
    void *p = calloc(0, check_opaque(SIZE_MAX));
    CHECK(p != NULL, "calloc(0, SIZE_MAX) must act as calloc of 0 bytes");
    free(p);
    p = calloc(check_opaque(SIZE_MAX), 0);
    CHECK(p != NULL, "calloc(SIZE_MAX, 0) must act as calloc of 0 bytes");
    free(p);
}

TEST(test_reallocarray_overflow_sets_enomem_and_keeps_block)
{
    void *p = malloc(64);
    fill(p, 64, 3);
    static const size_t pairs[][2] = {{SIZE_MAX / 2 + 1, 2}, {(size_t)1 << 32, (size_t)1 << 32},
                                      {SIZE_MAX, SIZE_MAX}, {3, SIZE_MAX / 3 + 1}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        errno = 0;
        void *q = reallocarray(p, check_opaque(pairs[i][0]), check_opaque(pairs[i][1]));
        CHECK(q == NULL && errno == ENOMEM, "reallocarray(p, %zu, %zu) = %p, errno %d",
              pairs[i][0], pairs[i][1], q, errno);
        CHECK_PATTERN(p, 64, 3);
    }
    void *q = reallocarray(p, 100, 100);
    CHECK(q != NULL && malloc_usable_size(q) >= 10000);
    CHECK_PATTERN(q, 64, 3);
    free(q);
    q = reallocarray(NULL, 10, 10);
    CHECK(q != NULL && malloc_usable_size(q) >= 100);
    free(q);
}

/* An alignment a class already has (up to 16 bytes) is a plain request: the block just
 * freed into the thread cache's bin comes back, with malloc's usable size. */
TEST(test_quantum_aligned_requests_share_mallocs_bins)
{
    size_t sizes[] = {0, 1, 8, 16, 17, 100, 1000, 4096, 14336, 16384};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        for (size_t a = 1; a <= 16; a *= 2) {
            for (int kind = 0; kind < 3; kind++) {
                if (kind == 0 && a < sizeof(void *))
                    continue;
                void *p = malloc(check_opaque(n < a ? a : n)), *q = NULL;
                CHECK(p != NULL);
                size_t u = malloc_usable_size(p);
                free(p);
                if (kind == 0)
                    CHECK(posix_memalign(&q, a, n) == 0);
                else if (kind == 1)
                    q = aligned_alloc(a, n);
                else
                    q = memalign(a, n);
                CHECK(q == p, "kind %d (%zu, %zu) = %p, not the block just freed %p", kind, a, n, q, p);
                CHECK_EQ(malloc_usable_size(q), u);
                free(q);
            }
        }
    }
}

TEST(test_posix_memalign_bad_alignment_is_einval_and_touches_nothing)
{
    static const size_t bad[] = {0,  1,  2,  3,  sizeof(void *) / 2, 12, 24, 48,
                                 96, 9,  65535, 4097, SIZE_MAX,       SIZE_MAX - 7,
                                 ((size_t)1 << 40) + 8};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *m = (void *)0x1234;
        errno = 4321;
        int rc = posix_memalign(&m, check_opaque(bad[i]), 64);
        CHECK(rc == EINVAL, "posix_memalign(alignment %zu) returned %d, want EINVAL", bad[i], rc);
        CHECK(m == (void *)0x1234, "posix_memalign(alignment %zu) changed *memptr to %p", bad[i], m);
        CHECK(errno == 4321, "posix_memalign(alignment %zu) changed errno to %d", bad[i], errno);
    }
}

TEST(test_posix_memalign_huge_is_enomem_and_touches_nothing)
{
    static const size_t cases[][2] = {
        {64, SIZE_MAX}, {4096, SIZE_MAX - 4096}, {8, (size_t)PTRDIFF_MAX + 1},
        {(size_t)1 << 63, 64}, {2 * MiB, SIZE_MAX - 2 * MiB + 1}, {16, (size_t)1 << 62},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *m = (void *)0x1234;
        errno = 4321;
        int rc = posix_memalign(&m, check_opaque(cases[i][0]), check_opaque(cases[i][1]));
        CHECK(rc == ENOMEM, "posix_memalign(%zu, %zu) returned %d, want ENOMEM", cases[i][0],
              cases[i][1], rc);
        CHECK(m == (void *)0x1234, "posix_memalign(%zu, %zu) changed *memptr", cases[i][0],
              cases[i][1]);
        CHECK(errno == 4321, "posix_memalign(%zu, %zu) changed errno to %d", cases[i][0],
              cases[i][1], errno);
    }
}

/* Allocates with each alignment and size, checks alignment and usable size, writes every
 * usable byte, keeps all blocks live and checks none was overwritten by another. */
static void check_aligned_family(const char *what, int kind)
{
    enum { MAXB = 1024 };
    static void *blk[MAXB];
    static size_t len[MAXB];
    int n = 0;
    for (size_t a = 1; a <= 4 * MiB; a *= 2) {
        if (kind == 0 && a < sizeof(void *))
            continue; /* posix_memalign: multiples of sizeof(void *) only */
        size_t sizes[] = {0, 1, 7, 100, a - 1, a, a + 1, 3 * a + 5};
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t size = sizes[s];
            if (size > 8 * MiB || (size == 0 && kind != 1))
                continue;
            void *p = NULL;
            if (kind == 0) {
                int rc = posix_memalign(&p, a, size);
                CHECK(rc == 0, "posix_memalign(%zu, %zu) = %d", a, size, rc);
            } else if (kind == 1) {
                p = aligned_alloc(a, size);
            } else {
                p = memalign(a, size);
            }
            CHECK(p != NULL, "%s(%zu, %zu) returned NULL", what, a, size);
            CHECK(((uintptr_t)p & (a - 1)) == 0, "%s(%zu, %zu) = %p misaligned", what, a, size, p);
            size_t u = malloc_usable_size(p);
            CHECK(u >= size, "%s(%zu, %zu): usable %zu", what, a, size, u);
            if (size)
                CHECK_EQ(u, nallocx(size, MALLOCX_ALIGN(a)));
            fill(p, u, (uint64_t)n);
            CHECK(n < MAXB);
            blk[n] = p;
            len[n++] = u;
        }
    }
    for (int i = 0; i < n; i++) {
        CHECK_PATTERN(blk[i], len[i], (uint64_t)i);
        free(blk[i]);
    }
}

TEST(test_posix_memalign_any_valid_alignment)
{
    check_aligned_family(STRATA_TEST_API "posix_memalign", 0);
}

TEST(test_aligned_alloc_any_power_of_two_alignment_and_size)
{
    check_aligned_family(STRATA_TEST_API "aligned_alloc", 1);
}

TEST(test_memalign_any_power_of_two_alignment)
{
    check_aligned_family(STRATA_TEST_API "memalign", 2);
}

TEST(test_aligned_alloc_one_gib_alignment_small_size)
{
    for (int i = 0; i < 4; i++) {
        uint8_t *p = aligned_alloc((size_t)1 << 30, 64);
        CHECK(p != NULL, "aligned_alloc(1 GiB, 64) failed (round %d)", i);
        CHECK_ALIGNED(p, (size_t)1 << 30);
        memset(p, 0x5a, malloc_usable_size(p));
        void *q = malloc(64); /* the rest of the reservation must stay usable */
        CHECK(q != NULL);
        free(q);
        free(p);
    }
    void *p = NULL;
    CHECK(posix_memalign(&p, (size_t)1 << 30, 1000) == 0);
    CHECK_ALIGNED(p, (size_t)1 << 30);
    free(p);
}

TEST(test_valloc_is_page_aligned)
{
    size_t pg = page_size();
    static const size_t sizes[] = {1, 100, 4095, 4096, 4097, 5000, 70000, MiB, 9 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *p = valloc(sizes[i]);
        CHECK(p != NULL);
        CHECK_ALIGNED(p, pg);
        size_t u = malloc_usable_size(p);
        CHECK(u >= sizes[i]);
        memset(p, 0x11, u);
        free(p);
    }
}

TEST(test_pvalloc_rounds_up_to_whole_pages)
{
    size_t pg = page_size();
    static const size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, 12345, MiB + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t want = sizes[i] ? (sizes[i] + pg - 1) / pg * pg : pg;
        uint8_t *p = pvalloc(sizes[i]);
        CHECK(p != NULL, "pvalloc(%zu) failed", sizes[i]);
        CHECK_ALIGNED(p, pg);
        size_t u = malloc_usable_size(p);
        CHECK(u >= want, "pvalloc(%zu): usable %zu, want >= %zu (whole pages%s)", sizes[i], u,
              want, sizes[i] ? "" : "; pvalloc(0) is one page");
        memset(p, 0x22, u);
        free(p);
    }
}

TEST(test_malloc_usable_size_is_exact_and_fully_writable)
{
    enum { MAXS = 2048 };
    static size_t sizes[MAXS];
    static void *blk[2 * MAXS];
    static size_t len[2 * MAXS];
    size_t ns = test_sizes(sizes, MAXS);
    CHECK_EQ(malloc_usable_size(NULL), 0);
    /* Two live blocks of every size, each filled over its whole usable size, so a usable
     * size that overstates the block overwrites a neighbour and is caught below. */
    for (size_t i = 0; i < 2 * ns; i++) {
        size_t n = sizes[i % ns];
        blk[i] = malloc(n);
        CHECK(blk[i] != NULL, "malloc(%zu) failed", n);
        len[i] = malloc_usable_size(blk[i]);
        CHECK(len[i] >= n, "malloc_usable_size(malloc(%zu)) = %zu", n, len[i]);
        CHECK_EQ(len[i], nallocx(n, 0));
        CHECK_EQ(len[i], sallocx(blk[i], 0));
        fill(blk[i], len[i], i);
    }
    for (size_t i = 0; i < 2 * ns; i++)
        CHECK_PATTERN(blk[i], len[i], i);
    for (size_t i = 0; i < 2 * ns; i++)
        free(blk[i]);
}

TEST(test_calloc_zeroes_fresh_and_reused_memory)
{
    static const size_t sizes[] = {1,     8,     16,    24,   48,     100,     256,
                                   1000,  4000,  12000, 20000, 70000, 300000, MiB,
                                   3 * MiB + 5, 9 * MiB};
    enum { K = 8 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        void *p[K];
        for (int k = 0; k < K; k++) {
            p[k] = malloc(n);
            memset(p[k], 0xA5, malloc_usable_size(p[k]));
        }
        for (int k = 0; k < K; k++)
            free(p[k]);
        for (int k = 0; k < K; k++) {
            /* calloc(n, 1), calloc(1, n) and a split product all land on the dirty blocks. */
            p[k] = k % 3 == 0 ? calloc(n, 1) : k % 3 == 1 ? calloc(1, n) : calloc(n / 8 + 1, 8);
            size_t want = k % 3 == 2 ? (n / 8 + 1) * 8 : n;
            CHECK(p[k] != NULL);
            size_t bad = first_nonzero(p[k], want);
            CHECK(bad == SIZE_MAX, "calloc of %zu bytes: byte %zu not zero", want, bad);
        }
        for (int k = 0; k < K; k++)
            free(p[k]);
    }
}

TEST(test_free_null_is_a_no_op)
{
    errno = 99;
    free(NULL);
    free_sized(NULL, 0);
    free_aligned_sized(NULL, 64, 0);
    CHECK(errno == 99);
}

TEST(test_free_preserves_errno)
{
    static const size_t sizes[] = {8, 100, 5000, 20000, 200000, MiB, 16 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        memset(p, 1, sizes[i]);
        errno = 4242;
        free(p);
        CHECK(errno == 4242, "free of a %zu-byte block changed errno to %d", sizes[i], errno);
    }
    /* Enough small frees to overflow the thread cache and flush it to the arena. */
    enum { N = 20000 };
    static void *q[N];
    for (int i = 0; i < N; i++)
        q[i] = malloc(16 + (size_t)(i % 7) * 16);
    errno = 4242;
    for (int i = 0; i < N; i++) {
        free(q[i]);
        CHECK(errno == 4242, "free #%d changed errno to %d", i, errno);
    }
    void *p = malloc(64);
    errno = 4242;
    malloc_trim(0);
    free(p);
    CHECK(errno == 4242);
}

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    CHECK(f && fscanf(f, "%lu %lu", &size, &resident) == 2);
    fclose(f);
    return (size_t)resident * page_size();
}

/* Frees `total` bytes in blocks of `block` bytes, then checks that malloc_trim gives them
 * back, both by the process's RSS (not under TSan, whose shadow of the touched memory stays
 * resident) and by strata's own stats.resident. */
static void check_trim_releases(size_t block, size_t total)
{
#if defined(__SANITIZE_THREAD__)
    const bool use_rss = false;
#else
    const bool use_rss = true;
#endif
    size_t n = total / block;
    void **p = malloc(n * sizeof *p);
    malloc_trim(0);
    size_t base = rss_bytes(), sbase = stat_read("stats.resident");
    for (size_t i = 0; i < n; i++) {
        p[i] = malloc(block);
        CHECK(p[i] != NULL);
        memset(p[i], 0x77, block);
    }
    for (size_t i = 0; i < n; i++)
        free(p[i]);
    size_t before = rss_bytes(), sbefore = stat_read("stats.resident");
    int r = malloc_trim(0);
    size_t after = rss_bytes(), safter = stat_read("stats.resident");
    free(p);
    CHECK(r == 0 || r == 1, "malloc_trim returned %d", r);
    if (use_rss)
        CHECK(after <= base + total / 4,
              "after freeing %zu MiB in %zu-byte blocks and malloc_trim(0) (returned %d), RSS "
              "is %zu KiB above the start (was %zu KiB above before the trim)",
              total / MiB, block, r, (after - base) / KiB, (before - base) / KiB);
    CHECK(safter <= sbase + total / 4,
          "after freeing %zu MiB in %zu-byte blocks and malloc_trim(0) (returned %d), "
          "stats.resident is %zu KiB (%zu KiB at the start, %zu KiB before the trim)",
          total / MiB, block, r, safter / KiB, sbase / KiB, sbefore / KiB);
    if ((use_rss && before > base + total / 2) || sbefore > sbase + total / 2)
        CHECK(r == 1, "malloc_trim released memory but returned 0");
}

TEST(test_malloc_trim_returns_large_block_memory)
{
    check_trim_releases(64 * KiB, 64 * MiB);
}

TEST(test_malloc_trim_returns_small_object_memory)
{
    check_trim_releases(256, 48 * MiB);
}

OVERRIDE_TEST(test_mallopt_returns_1)
{
#ifndef STRATA_TEST_PREFIXED
    CHECK_EQ(mallopt(M_TRIM_THRESHOLD, 128 * 1024), 1);
    CHECK_EQ(mallopt(M_TOP_PAD, 0), 1);
    CHECK_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
    CHECK_EQ(mallopt(M_ARENA_MAX, 8), 1);
    void *p = malloc(100);
    CHECK(p != NULL);
    free(p);
#endif
}

OVERRIDE_TEST(test_mallinfo2_grows_after_allocating_100_mib)
{
#ifndef STRATA_TEST_PREFIXED
    enum { N = 1600 };
    static void *p[N];
    struct mallinfo2 m0 = mallinfo2();
    for (int i = 0; i < N; i++) {
        p[i] = malloc(64 * KiB);
        memset(p[i], 3, 64 * KiB);
    }
    struct mallinfo2 m1 = mallinfo2();
    /* glibc reports mmapped blocks in hblkhd, strata in arena/uordblks: accept either. */
    size_t used0 = m0.uordblks + m0.hblkhd, used1 = m1.uordblks + m1.hblkhd;
    size_t sys0 = m0.arena + m0.hblkhd, sys1 = m1.arena + m1.hblkhd;
    CHECK(used1 >= used0 + 95 * MiB, "mallinfo2 in-use figure grew by %zu KiB, want ~100 MiB",
          (used1 - used0) / KiB);
    CHECK(sys1 >= sys0 + 95 * MiB, "mallinfo2 arena figure grew by %zu KiB, want ~100 MiB",
          (sys1 - sys0) / KiB);
    CHECK(m1.uordblks <= m1.arena + m1.hblkhd, "in use %zu exceeds obtained %zu", m1.uordblks,
          m1.arena + m1.hblkhd);
    for (int i = 0; i < N; i++)
        free(p[i]);
    struct mallinfo2 m2 = mallinfo2();
    CHECK(m2.uordblks + m2.hblkhd <= used0 + 8 * MiB,
          "mallinfo2 in-use figure did not drop after freeing: %zu KiB", (m2.uordblks + m2.hblkhd) / KiB);
#endif
}

TEST(test_free_sized_and_free_aligned_sized_release_blocks)
{
    size_t sizes[64];
    size_t ns = 0;
    for (size_t s = 1; s <= 8 * MiB; s = s * 2 + 3)
        sizes[ns++] = s;
    for (size_t i = 0; i < ns; i++) {
        void *p = malloc(sizes[i]);
        uint64_t d0 = thread_deallocated();
        free_sized(p, sizes[i]);
        CHECK(thread_deallocated() - d0 >= sizes[i], "free_sized(p, %zu) did not free", sizes[i]);
        /* Any size between the requested and the usable size is accepted too. */
        p = malloc(sizes[i]);
        free_sized(p, malloc_usable_size(p));
    }
    for (size_t a = 16; a <= 2 * MiB; a *= 4) {
        for (size_t i = 0; i < ns; i += 3) {
            void *p = aligned_alloc(a, sizes[i]);
            CHECK_ALIGNED(p, a);
            uint64_t d0 = thread_deallocated();
            free_aligned_sized(p, a, sizes[i]);
            CHECK(thread_deallocated() - d0 >= sizes[i], "free_aligned_sized(p, %zu, %zu)", a,
                  sizes[i]);
        }
    }
}

#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
/* Real exhaustion, not just impossible sizes: under RLIMIT_AS every allocation function
 * must return NULL with ENOMEM (never crash or hang), keep old blocks on a failed realloc,
 * and work again once memory is freed. Skipped under sanitizers (they need the address
 * space for their shadow memory). */
static void exhaust_address_space(void *arg)
{
    (void)arg;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long vm_pages = 0;
    CHECK(f && fscanf(f, "%lu", &vm_pages) == 1);
    fclose(f);
    struct rlimit rl = {(rlim_t)vm_pages * page_size() + 256 * MiB, RLIM_INFINITY};
    rl.rlim_max = rl.rlim_cur;
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
    enum { MAXB = 1 << 16 };
    static void *blk[MAXB];
    size_t n = 0, sizes[] = {MiB, 64 * 1024, 3000, 64};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (;;) {
            CHECK(n < MAXB, "%zu blocks allocated under a 256 MiB limit", n);
            errno = 0;
            void *p = s % 2 ? calloc(1, sizes[s]) : malloc(sizes[s]);
            if (!p) {
                CHECK(errno == ENOMEM, "allocation of %zu failed with errno %d", sizes[s], errno);
                break;
            }
            memset(p, 1, sizes[s] < 4096 ? sizes[s] : 4096);
            blk[n++] = p;
            if (sizes[s] < 4096 && n % 4096 == 0 && n > MAXB / 2)
                break; /* small classes may find room for a long time: enough */
        }
    }
    CHECK(n > 100, "only %zu blocks fit under the limit", n);
    printf("%zu blocks allocated before ENOMEM under a 256 MiB address-space limit\n", n);
    void *keep = blk[0];
    memset(keep, 0x3c, MiB);
    errno = 0;
    CHECK(realloc(keep, 512 * MiB) == NULL && errno == ENOMEM);
    CHECK(((uint8_t *)keep)[MiB - 1] == 0x3c, "failed realloc damaged the block");
    void *m = NULL;
    CHECK(posix_memalign(&m, 4096, 512 * MiB) == ENOMEM && m == NULL);
    CHECK(aligned_alloc(2 * MiB, 300 * MiB) == NULL && errno == ENOMEM);
    for (size_t i = 0; i < n; i++)
        free(blk[i]);
    malloc_trim(0);
    /* Recovered: the freed memory is usable again. */
    for (size_t i = 0; i < 64; i++) {
        blk[i] = malloc(MiB);
        CHECK(blk[i] != NULL, "malloc(1 MiB) #%zu failed after everything was freed", i);
    }
    for (size_t i = 0; i < 64; i++)
        free(blk[i]);
}
#endif

TEST(test_exhaustion_under_rlimit_as_fails_cleanly_and_recovers)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    printf("skipped under sanitizers\n");
#else
    static check_child_t r;
    CHECK(check_child(exhaust_address_space, NULL, 60, &r) == 0);
    CHECK_CHILD_EXITED_0(&r);
    fputs(r.out, stdout);
#endif
}

/* ---------------------------------------------------------------- *allocx family */

TEST(test_mallocx_alignment_flags)
{
    for (int la = 0; la <= 22; la++) {
        size_t a = (size_t)1 << la;
        static const size_t sizes[] = {1, 8, 100, 4096, 70000, 3 * MiB};
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            void *p = mallocx(sizes[s], MALLOCX_LG_ALIGN(la));
            CHECK(p != NULL, "mallocx(%zu, LG_ALIGN(%d)) failed", sizes[s], la);
            CHECK_ALIGNED(p, a);
            CHECK_EQ(sallocx(p, 0), nallocx(sizes[s], MALLOCX_LG_ALIGN(la)));
            memset(p, 0x33, sallocx(p, 0));
            dallocx(p, MALLOCX_LG_ALIGN(la));
            p = mallocx(sizes[s], MALLOCX_ALIGN(a));
            CHECK(p != NULL);
            CHECK_ALIGNED(p, a);
            sdallocx(p, sizes[s], MALLOCX_ALIGN(a));
        }
    }
}

TEST(test_mallocx_zero_flag_zeroes_reused_memory)
{
    static const size_t sizes[] = {8, 100, 1000, 10000, 100000, 2 * MiB, 9 * MiB};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        void *p[4];
        for (int k = 0; k < 4; k++) {
            p[k] = mallocx(sizes[s], 0);
            memset(p[k], 0xEE, sallocx(p[k], 0));
        }
        for (int k = 0; k < 4; k++)
            dallocx(p[k], 0);
        for (int k = 0; k < 4; k++) {
            p[k] = mallocx(sizes[s], MALLOCX_ZERO | (k & 1 ? MALLOCX_LG_ALIGN(6) : 0));
            CHECK(p[k] != NULL);
            size_t bad = first_nonzero(p[k], sizes[s]);
            CHECK(bad == SIZE_MAX, "mallocx(%zu, ZERO): byte %zu not zero", sizes[s], bad);
        }
        for (int k = 0; k < 4; k++)
            dallocx(p[k], 0);
    }
}

TEST(test_mallocx_tcache_none_allocates_and_frees)
{
    for (size_t n = 8; n <= 4 * MiB; n = n * 3 / 2) {
        void *p = mallocx(n, MALLOCX_TCACHE_NONE);
        CHECK(p != NULL && sallocx(p, 0) >= n);
        memset(p, 0x44, n);
        if (n & 1)
            dallocx(p, MALLOCX_TCACHE_NONE);
        else
            sdallocx(p, n, MALLOCX_TCACHE_NONE);
    }
    /* A block cached by the thread, then freed bypassing the cache, and vice versa. */
    void *a = mallocx(64, 0), *b = mallocx(64, MALLOCX_TCACHE_NONE);
    dallocx(a, MALLOCX_TCACHE_NONE);
    dallocx(b, 0);
}

TEST(test_rallocx_grows_shrinks_and_keeps_contents)
{
    static const size_t steps[] = {16, 100, 3000, 40000, 600000, 5 * MiB, 12 * MiB,
                                   70000, 500, 24, 8};
    void *p = mallocx(8, 0);
    size_t old = 8;
    fill(p, 8, 100);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        void *q = rallocx(p, steps[i], 0);
        CHECK(q != NULL, "rallocx to %zu failed", steps[i]);
        CHECK_PATTERN(q, old < steps[i] ? old : steps[i], 100 + i);
        CHECK(sallocx(q, 0) >= steps[i]);
        CHECK_EQ(sallocx(q, 0), nallocx(steps[i], 0));
        fill(q, steps[i], 101 + i);
        p = q;
        old = steps[i];
    }
    dallocx(p, 0);
}

TEST(test_rallocx_zero_flag_zeroes_the_grown_tail)
{
    static const size_t steps[][2] = {{8, 100},      {100, 3000},     {3000, 20000},
                                      {20000, 300000}, {300000, 4 * MiB}, {100, 100000}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t from = steps[i][0], to = steps[i][1];
        /* Leave dirty blocks of the target size around so the new block is likely reused. */
        for (int k = 0; k < 4; k++) {
            void *d = mallocx(to, 0);
            memset(d, 0xDD, to);
            dallocx(d, 0);
        }
        uint8_t *p = mallocx(from, 0);
        size_t old_usable = sallocx(p, 0);
        memset(p, 0xAB, old_usable);
        uint8_t *q = rallocx(p, to, MALLOCX_ZERO);
        CHECK(q != NULL);
        for (size_t b = 0; b < from; b++)
            CHECK(q[b] == 0xAB, "rallocx(ZERO) %zu->%zu lost byte %zu", from, to, b);
        size_t bad = first_nonzero(q + old_usable, to - old_usable);
        CHECK(bad == SIZE_MAX, "rallocx(ZERO) %zu->%zu: byte %zu not zero", from, to,
              old_usable + bad);
        dallocx(q, 0);
    }
}

TEST(test_rallocx_keeps_requested_alignment)
{
    static const size_t aligns[] = {64, 4096, 65536, 2 * MiB};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        int fl = MALLOCX_ALIGN(aligns[a]);
        void *p = mallocx(100, fl);
        CHECK_ALIGNED(p, aligns[a]);
        fill(p, 100, a);
        static const size_t steps[] = {1000, 50000, 3 * MiB, 200, 9 * MiB, 64};
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            void *q = rallocx(p, steps[i], fl);
            CHECK(q != NULL);
            CHECK_ALIGNED(q, aligns[a]);
            CHECK_PATTERN(q, 64, a);
            CHECK_EQ(sallocx(q, 0), nallocx(steps[i], fl));
            p = q;
        }
        dallocx(p, fl);
    }
}

TEST(test_xallocx_resizes_in_place_only)
{
    static const size_t cases[][3] = {
        /* from, size, extra */
        {100, 100, 0},       {100, 110, 0},        {100, 5000, 0},      {5000, 100, 0},
        {20000, 40000, 0},   {40000, 20000, 0},    {MiB, 2 * MiB, 0},   {2 * MiB, MiB, 0},
        {MiB, MiB, MiB},     {5 * MiB, 4 * MiB, 0}, {300000, 310000, 10000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t from = cases[i][0], size = cases[i][1], extra = cases[i][2];
        uint8_t *p = mallocx(from, 0);
        size_t before = sallocx(p, 0);
        fill(p, from, i);
        size_t r = xallocx(p, size, extra, 0);
        CHECK_EQ(r, sallocx(p, 0)); /* the returned size is the block's real size */
        size_t lo = before < size ? before : size;
        CHECK(r >= lo, "xallocx(%zu -> %zu) returned %zu", from, size, r);
        CHECK(r <= nallocx(size + extra, 0) || r == before,
              "xallocx(%zu -> %zu+%zu) returned %zu", from, size, extra, r);
        CHECK_PATTERN(p, from < r ? from : r, i);
        memset(p, 0x5c, r); /* every byte of the reported size is ours */
        dallocx(p, 0);
    }
    /* A block with a live neighbour cannot grow in place past its class but still
     * reports its size; and a grow into free space after a large block may succeed. */
    void *a = mallocx(64, 0), *b = mallocx(64, 0);
    CHECK(xallocx(a, 64, 0, 0) == sallocx(a, 0));
    dallocx(a, 0);
    dallocx(b, 0);
}

/* Requests of 0..8 bytes get jemalloc's 8-byte class, 8-byte aligned (C17 asks no more of
 * them); anything above 8 bytes, or aligned to 16, stays 16-byte aligned. The 8-byte
 * regions are packed: every byte of a block is the program's, and no free or malloc writes
 * past it into the neighbour (no free tag in a second word). */
TEST(test_requests_up_to_8_bytes_get_the_8_byte_class)
{
    bool tiny = false;
    size_t blen = sizeof tiny;
    CHECK(mallctl("opt.tiny_class", &tiny, &blen, NULL, 0) == 0);
    if (!tiny) { /* the default; ctest runs this test again with MALLOC_CONF=tiny_class:true */
        for (size_t n = 0; n <= 16; n++) {
            CHECK_EQ(nallocx(n ? n : 1, 0), 16);
            void *p = malloc(check_opaque(n));
            CHECK(p != NULL && ((uintptr_t)p & 15) == 0 && malloc_usable_size(p) == 16);
            free(p);
        }
        return;
    }
    for (size_t n = 0; n <= 8; n++) {
        CHECK_EQ(nallocx(n ? n : 1, 0), 8);
        void *p = malloc(check_opaque(n));
        CHECK(p != NULL && ((uintptr_t)p & 7) == 0, "malloc(%zu) = %p", n, p);
        CHECK_EQ(malloc_usable_size(p), 8);
        CHECK_EQ(sallocx(p, 0), 8);
        CHECK_EQ(xallocx(p, 1, 0, 0), 8); /* jemalloc's integration test xallocx */
        free(p);
        p = calloc(1, n);
        CHECK(p != NULL && malloc_usable_size(p) == 8);
        for (size_t i = 0; i < n; i++)
            CHECK_EQ(((unsigned char *)p)[i], 0);
        free(p);
        p = mallocx(n ? n : 1, 0);
        CHECK_EQ(sallocx(p, 0), 8);
        sdallocx(p, n ? n : 1, 0);
        /* An alignment of 16 never gets an 8-byte region, on any path. */
        void *q = NULL;
        CHECK(posix_memalign(&q, 16, n) == 0 && ((uintptr_t)q & 15) == 0 && malloc_usable_size(q) == 16);
        free(q);
        q = aligned_alloc(16, n);
        CHECK(q != NULL && ((uintptr_t)q & 15) == 0 && malloc_usable_size(q) == 16);
        free(q);
        q = memalign(16, n);
        CHECK(q != NULL && ((uintptr_t)q & 15) == 0 && malloc_usable_size(q) == 16);
        free(q);
        q = mallocx(n ? n : 1, MALLOCX_LG_ALIGN(4));
        CHECK(q != NULL && ((uintptr_t)q & 15) == 0 && sallocx(q, 0) == 16);
        CHECK_EQ(nallocx(n ? n : 1, MALLOCX_LG_ALIGN(4)), 16);
        dallocx(q, 0);
        /* ... while an alignment of 8 or less keeps the 8-byte class. */
        CHECK(posix_memalign(&q, 8, n) == 0 && ((uintptr_t)q & 7) == 0 && malloc_usable_size(q) == 8);
        free(q);
    }
    for (size_t n = 9; n <= 16; n++) {
        void *p = malloc(check_opaque(n));
        CHECK(((uintptr_t)p & 15) == 0 && malloc_usable_size(p) == 16, "malloc(%zu) = %p", n, p);
        free(p);
    }
    /* realloc within the class stays in place; past it moves to 16 bytes, contents kept. */
    char *p = malloc(3);
    memcpy(p, "abcdefg", 8);
    CHECK(realloc(p, 8) == p);
    char *q = realloc(p, 9);
    CHECK(q != NULL && malloc_usable_size(q) == 16 && memcmp(q, "abcdefg", 8) == 0);
    q = realloc(q, 2);
    CHECK(q != NULL && malloc_usable_size(q) == 8 && memcmp(q, "ab", 2) == 0);
    free(q);
    /* Packed neighbours, every byte written, half freed and reallocated: none changes. */
    enum { N = 4096 };
    static uint64_t *blk[N];
    for (size_t i = 0; i < N; i++) {
        blk[i] = malloc(8);
        *blk[i] = i * 0x9E3779B97F4A7C15ull;
    }
    size_t adjacent = 0;
    for (size_t i = 1; i < N; i++)
        adjacent += blk[i] == blk[i - 1] + 1;
    CHECK(adjacent > N / 2, "8-byte blocks are not packed: %zu of %d adjacent", adjacent, N);
    for (size_t i = 0; i < N; i += 2)
        free(blk[i]);
    for (size_t i = 0; i < N; i += 2) {
        blk[i] = malloc(8);
        *blk[i] = i * 0x9E3779B97F4A7C15ull;
    }
    for (size_t i = 0; i < N; i++)
        CHECK_EQ(*blk[i], i * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < N; i++)
        free(blk[i]);
    /* jemalloc's bin 0 is the 8-byte class. */
    size_t bsz = 0, len = sizeof bsz;
    CHECK(mallctl("arenas.bin.0.size", &bsz, &len, NULL, 0) == 0 && bsz == 8);
}

static uint64_t tiny_fills(void)
{
    uint64_t epoch = 1, v = 0;
    size_t len = sizeof epoch;
    CHECK(mallctl("epoch", &epoch, &len, &epoch, len) == 0);
    len = sizeof v;
    CHECK(mallctl("stats.arenas.4096.bins.0.nfills", &v, &len, NULL, 0) == 0);
    return v;
}

static void *tiny_only_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        void *p = malloc(check_opaque(1 + i % 8));
        CHECK(p != NULL);
        free(p);
    }
    return NULL;
}

/* A thread that only ever allocates 8-byte blocks still gets its thread cache: its 20,000
 * mallocs take a few fills of the 8-byte bin, not one trip to the arena each. */
TEST(test_a_thread_of_8_byte_blocks_only_is_cached)
{
    bool tiny = false, tcache = false;
    size_t blen = sizeof tiny;
    CHECK(mallctl("opt.tiny_class", &tiny, &blen, NULL, 0) == 0);
    CHECK(mallctl("opt.tcache", &tcache, &blen, NULL, 0) == 0);
    if (!tiny || !tcache)
        return;
    uint64_t before = tiny_fills();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, tiny_only_thread, NULL) == 0);
    pthread_join(t, NULL);
    uint64_t fills = tiny_fills() - before;
    CHECK(fills < 1000, "%llu fills of the 8-byte bin for 20,000 mallocs", (unsigned long long)fills);
}

TEST(test_sallocx_equals_malloc_usable_size)
{
    for (size_t n = 1; n <= 10 * MiB; n = n * 5 / 4 + 1) {
        void *p = mallocx(n, 0);
        CHECK_EQ(sallocx(p, 0), malloc_usable_size(p));
        dallocx(p, 0);
        p = malloc(n);
        CHECK_EQ(sallocx(p, 0), malloc_usable_size(p));
        free(p);
    }
}

TEST(test_nallocx_matches_sallocx_of_mallocx)
{
    static const int flags[] = {0, MALLOCX_LG_ALIGN(4), MALLOCX_LG_ALIGN(5), MALLOCX_LG_ALIGN(6),
                                MALLOCX_LG_ALIGN(8), MALLOCX_LG_ALIGN(12), MALLOCX_LG_ALIGN(13),
                                MALLOCX_LG_ALIGN(16), MALLOCX_LG_ALIGN(21)};
    for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
        for (size_t n = 1; n <= 12 * MiB; n += n < 4096 ? 1 + n / 64 : n / 7) {
            size_t want = nallocx(n, flags[f]);
            void *p = mallocx(n, flags[f]);
            CHECK(p != NULL && want >= n, "nallocx(%zu, 0x%x) = %zu", n, flags[f], want);
            CHECK(sallocx(p, 0) == want, "nallocx(%zu, 0x%x) = %zu but sallocx = %zu", n,
                  flags[f], want, sallocx(p, 0));
            dallocx(p, flags[f]);
        }
    }
}

TEST(test_nallocx_impossible_size_returns_zero)
{
    static const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 4095, (size_t)PTRDIFF_MAX + 1,
                                   SIZE_MAX / 2 + 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        CHECK_EQ(nallocx(check_opaque(sizes[i]), 0), 0);
        CHECK_EQ(nallocx(check_opaque(sizes[i]), MALLOCX_LG_ALIGN(12)), 0);
        errno = 0;
        void *p = mallocx(check_opaque(sizes[i]), 0);
        CHECK(p == NULL, "mallocx(%zu) returned %p", sizes[i], p);
    }
    CHECK_EQ(nallocx(16, MALLOCX_LG_ALIGN(63)), 0);
    CHECK(mallocx(16, MALLOCX_LG_ALIGN(63)) == NULL);
    void *p = mallocx(64, 0);
    CHECK(rallocx(p, check_opaque(SIZE_MAX), 0) == NULL);
    CHECK_EQ(sallocx(p, 0), nallocx(64, 0)); /* the old block is intact */
    dallocx(p, 0);
}

TEST(test_dallocx_and_sdallocx_release_blocks)
{
    for (size_t n = 8; n <= 8 * MiB; n = n * 2 + 8) {
        void *p = mallocx(n, 0);
        uint64_t d0 = thread_deallocated();
        dallocx(p, 0);
        uint64_t d1 = thread_deallocated();
        CHECK(d1 - d0 >= n, "dallocx of %zu bytes: deallocated +%ju", n, (uintmax_t)(d1 - d0));
        p = mallocx(n, MALLOCX_LG_ALIGN(6));
        sdallocx(p, n, MALLOCX_LG_ALIGN(6));
        CHECK(thread_deallocated() - d1 >= n, "sdallocx of %zu bytes", n);
    }
}

/* ---------------------------------------------------------------- mallctl */

TEST(test_mallctl_guaranteed_names_are_readable)
{
    static const char *size_names[] = {"stats.allocated", "stats.active",   "stats.mapped",
                                       "stats.resident",  "stats.metadata", "stats.retained"};
    void *keep = malloc(3 * MiB);
    memset(keep, 1, 3 * MiB);
    size_t v[6];
    for (int i = 0; i < 6; i++)
        v[i] = stat_read(size_names[i]);
    CHECK(v[0] >= 3 * MiB, "stats.allocated %zu", v[0]);
    CHECK(v[1] >= v[0], "stats.active %zu < stats.allocated %zu", v[1], v[0]);
    CHECK(v[2] >= v[1], "stats.mapped %zu < stats.active %zu", v[2], v[1]);
    CHECK(v[3] >= v[1] && v[3] <= v[2] + v[4], "stats.resident %zu outside [active %zu, mapped %zu]",
          v[3], v[1], v[2]);
    CHECK(v[4] > 0 && v[4] < v[2], "stats.metadata %zu", v[4]);
    CHECK(CTL_READ("arenas.narenas", unsigned) >= 1);
    CHECK(CTL_READ("opt.narenas", unsigned) >= 1);
    (void)CTL_READ("opt.tcache", bool);
    CHECK(thread_allocated() >= 3 * MiB);
    (void)thread_deallocated();
    free(keep);
}

TEST(test_mallctl_epoch_advances_and_refreshes_stats)
{
    uint64_t e0 = 0, e1 = 0, one = 1;
    size_t len = sizeof e0;
    CHECK(mallctl("epoch", &e0, &len, &one, sizeof one) == 0);
    len = sizeof e1;
    CHECK(mallctl("epoch", &e1, &len, &one, sizeof one) == 0);
    CHECK(e1 > e0, "epoch did not advance: %ju then %ju", (uintmax_t)e0, (uintmax_t)e1);
    size_t a0 = stat_read("stats.allocated");
    enum { N = 32 };
    void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = malloc(MiB);
    size_t a1 = stat_read("stats.allocated");
    CHECK(a1 >= a0 + N * MiB, "stats.allocated %zu -> %zu after 32 MiB", a0, a1);
    for (int i = 0; i < N; i++)
        free(p[i]);
    size_t a2 = stat_read("stats.allocated");
    CHECK(a2 <= a0 + MiB, "stats.allocated %zu -> %zu -> %zu after freeing", a0, a1, a2);
}

TEST(test_mallctl_rejects_unknown_names_and_bad_lengths)
{
    size_t v, len = sizeof v;
    CHECK_EQ(mallctl("no.such.name", &v, &len, NULL, 0), ENOENT);
    CHECK_EQ(mallctl("stats.allocated.more", &v, &len, NULL, 0), ENOENT);
    uint32_t small;
    len = sizeof small;
    CHECK_EQ(mallctl("stats.allocated", &small, &len, NULL, 0), EINVAL);
    /* Read-only names refuse writes. */
    size_t nv = 5;
    len = sizeof v;
    CHECK(mallctl("stats.allocated", &v, &len, &nv, sizeof nv) != 0);
}

TEST(test_mallctl_mib_lookup_matches_name_lookup)
{
    size_t mib[8], miblen = 8;
    CHECK(mallctlnametomib("stats.allocated", mib, &miblen) == 0);
    CHECK(miblen >= 1 && miblen <= 8, "miblen %zu", miblen);
    void *p = malloc(2 * MiB);
    size_t by_name = stat_read("stats.allocated"), by_mib = 0, len = sizeof by_mib;
    CHECK(mallctlbymib(mib, miblen, &by_mib, &len, NULL, 0) == 0);
    CHECK_EQ(by_mib, by_name);
    free(p);
    miblen = 8;
    CHECK(mallctlnametomib("no.such", mib, &miblen) == ENOENT);
}

/* Arenas open under contention (docs/design.md, "Arenas"): one live arena at
 * start; threads that keep waiting on its locks (uncached, so every malloc and free
 * takes a bin lock) open more, never past opt.narenas; a thread bound by thread.arena
 * stays where it was put. */
static int spread_stop; /* atomic */
static void *spread_hammer(void *arg)
{
    (void)arg;
    bool off = false;
    CHECK(mallctl("thread.tcache.enabled", NULL, NULL, &off, sizeof off) == 0);
    while (!__atomic_load_n(&spread_stop, __ATOMIC_RELAXED)) {
        void *p[16];
        for (int i = 0; i < 16; i++)
            CHECK((p[i] = malloc(64)) != NULL);
        for (int i = 0; i < 16; i++)
            free(p[i]);
    }
    return NULL;
}
TEST(test_arenas_open_under_contention)
{
    unsigned live = 0, max = 0, pinned = 0;
    bool spread = false;
    size_t len = sizeof live, blen = sizeof spread;
    CHECK(mallctl("opt.arena_spread", &spread, &blen, NULL, 0) == 0);
    CHECK(mallctl("opt.narenas", &max, &len, NULL, 0) == 0);
    CHECK(mallctl("arenas.nlive", &live, &len, NULL, 0) == 0);
    CHECK_EQ(mallctl("arenas.nlive", NULL, NULL, &live, sizeof live), EPERM);
    size_t bad = sizeof live + 1;
    CHECK_EQ(mallctl("arenas.nlive", &live, &bad, NULL, 0), EINVAL);
    if (!spread) { /* the default: every arena is live from the start, as in jemalloc */
        CHECK_EQ(live, max);
        return;
    }
    CHECK_EQ(live, 1u); /* ctest runs this test again with MALLOC_CONF=arena_spread:true */
    CHECK(mallctl("thread.arena", NULL, NULL, &pinned, sizeof pinned) == 0); /* main: arena 0, pinned */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    /* The sanitizers' interceptors serialise the threads enough that the bin lock is
     * rarely contended: the growth part runs in the normal build only. */
    printf("growth under contention: skipped under sanitizers\n");
    return;
#endif
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || max < 2) {
        printf("skipped: one CPU, no lock contention to see\n");
        return;
    }
    enum { NT = 8 };
    pthread_t t[NT];
    __atomic_store_n(&spread_stop, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < NT; i++)
        CHECK(pthread_create(&t[i], NULL, spread_hammer, NULL) == 0);
    for (int ms = 0; ms < 10000 && live < 2; ms += 10) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
        len = sizeof live;
        CHECK(mallctl("arenas.nlive", &live, &len, NULL, 0) == 0);
    }
    __atomic_store_n(&spread_stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < NT; i++)
        pthread_join(t[i], NULL);
    len = sizeof live;
    CHECK(mallctl("arenas.nlive", &live, &len, NULL, 0) == 0);
    CHECK(live >= 2 && live <= max, "arenas.nlive %u after 8 contending threads (opt.narenas %u)", live, max);
    unsigned now = 99;
    len = sizeof now;
    CHECK(mallctl("thread.arena", &now, &len, NULL, 0) == 0);
    CHECK_EQ(now, 0u);
}

/* The global cap on thread caches (tcache_total_max): its option and what the caches hold, by
 * name and by MIB; a fill publishes bytes, the thread's flush takes them back out. */
TEST(test_mallctl_tcache_total_max_and_tcache_bytes)
{
    size_t cap = 0, len = sizeof cap;
    CHECK(mallctl("opt.tcache_total_max", &cap, &len, NULL, 0) == 0);
    CHECK_EQ(cap, (size_t)16 << 20);
    CHECK_EQ(mallctl("opt.tcache_total_max", NULL, NULL, &cap, sizeof cap), EPERM);
    void *p = malloc(300); /* a fill (classes up to 320 B fill their half bin at once) */
    size_t held = 0;
    len = sizeof held;
    CHECK(mallctl("stats.tcache_bytes", &held, &len, NULL, 0) == 0);
    CHECK(held > 0, "stats.tcache_bytes %zu after a fill", held);
    size_t mib[4], miblen = 4, by_mib = 0;
    CHECK(mallctlnametomib("stats.tcache_bytes", mib, &miblen) == 0 && miblen == 2);
    CHECK(mallctlbymib(mib, miblen, &by_mib, &len, NULL, 0) == 0);
    CHECK_EQ(by_mib, held);
    free(p);
    CHECK(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0) == 0);
    size_t after = 0;
    CHECK(mallctl("stats.tcache_bytes", &after, &len, NULL, 0) == 0);
    CHECK(after < held, "stats.tcache_bytes %zu after the flush, %zu before", after, held);
}

static struct {
    char text[1 << 16];
    size_t len, total;
    int bad_opaque;
} stats_out;
static int stats_tag;

static void stats_cb(void *opaque, const char *s)
{
    size_t n = strlen(s);
    stats_out.bad_opaque |= opaque != &stats_tag;
    if (stats_out.len + n < sizeof stats_out.text) {
        memcpy(stats_out.text + stats_out.len, s, n);
        stats_out.len += n;
        stats_out.text[stats_out.len] = '\0';
    }
    stats_out.total += n;
}

TEST(test_malloc_stats_print_writes_through_callback)
{
    void *p = malloc(MiB);
    memset(&stats_out, 0, sizeof stats_out);
    malloc_stats_print(stats_cb, &stats_tag, NULL);
    CHECK(stats_out.total > 100, "malloc_stats_print wrote %zu bytes", stats_out.total);
    CHECK(!stats_out.bad_opaque, "the callback did not get cbopaque");
    memset(&stats_out, 0, sizeof stats_out);
    malloc_stats_print(stats_cb, &stats_tag, "J");
    const char *t = stats_out.text;
    while (*t == ' ' || *t == '\n')
        t++;
    CHECK(*t == '{', "JSON output (\"J\") does not start with '{': %.60s", t);
    free(p);
}

/* ---------------------------------------------------------------- invalid and double free */

static char global_block[256] __attribute__((aligned(64)));

/* Runs fn in a child; it must print strata's report naming the address it wrote to stdout
 * ("addr=0x...") and die of SIGABRT. */
static void expect_invalid_free(void (*fn)(void *), void *arg)
{
    static check_child_t r;
    CHECK(check_child(fn, arg, 20, &r) == 0, "fork failed");
    const char *a = strstr(r.out, "addr=");
    CHECK(a != NULL, "child did not report its address; %s; stderr:\n%s",
          check_status_str(r.status), r.err);
    uintptr_t addr = (uintptr_t)strtoull(a + 5, NULL, 16);
    const char *needle = "<strata>: free(): invalid pointer 0x";
    const char *m = strstr(r.err, needle);
    CHECK(m != NULL, "no \"%s...\" report for 0x%jx (child: %s); stderr:\n%s", needle,
          (uintmax_t)addr, check_status_str(r.status), r.err);
    uintptr_t named = (uintptr_t)strtoull(m + strlen(needle) - 2, NULL, 16);
    CHECK(named == addr, "report names 0x%jx, the bad pointer was 0x%jx", (uintmax_t)named,
          (uintmax_t)addr);
    CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT,
          "child ended with %s, want SIGABRT; stderr:\n%s", check_status_str(r.status), r.err);
}

static void say_addr(const void *p)
{
    char buf[64];
    int n = snprintf(buf, sizeof buf, "addr=%p\n", p);
    if (write(1, buf, (size_t)n) < 0)
        _exit(3);
}

static void free_stack(void *arg)
{
    (void)arg;
    char local[128] __attribute__((aligned(64)));
    memset(local, 0, sizeof local);
    say_addr(local);
    free((void *)check_opaque((size_t)local));
}
TEST(test_free_of_stack_address_aborts_with_report) { expect_invalid_free(free_stack, NULL); }

static void free_global(void *arg)
{
    (void)arg;
    void *p = (void *)check_opaque((size_t)global_block);
    say_addr(p);
    free(p);
}
TEST(test_free_of_global_address_aborts_with_report) { expect_invalid_free(free_global, NULL); }

/* A foreign mapping at a 2 MiB boundary: where a chunk-based allocator looks for a header. */
static uint8_t *foreign_mapping(void)
{
    uint8_t *m = mmap(NULL, 8 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    return (uint8_t *)(((uintptr_t)m + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
}
static void free_foreign_mmap(void *arg)
{
    uint8_t *m = foreign_mapping() + (arg ? 4096 : 0);
    say_addr(m);
    free(m);
}
TEST(test_free_of_foreign_mmap_address_aborts_with_report)
{
    expect_invalid_free(free_foreign_mmap, NULL);
    expect_invalid_free(free_foreign_mmap, (void *)1);
}

static void free_unmapped(void *arg)
{
    (void)arg;
    uint8_t *m = foreign_mapping();
    munmap(m - 2 * MiB, 8 * MiB); /* the whole neighbourhood is gone */
    say_addr(m + 64);
    free(m + 64);
}
TEST(test_free_of_unmapped_address_aborts_with_report)
{
    /* PITFALLS.md: the ownership lookup must be safe for any address (no SIGSEGV). */
    expect_invalid_free(free_unmapped, NULL);
}

static void free_interior(void *arg)
{
    size_t n = (size_t)arg;
    uint8_t *p = malloc(n);
    memset(p, 0, n);
    size_t off = n > 64 ? 4096 : 8;
    say_addr(p + off);
    free(p + off);
    malloc_trim(0); /* small blocks: found when the thread cache is flushed at the latest */
}
TEST(test_free_of_interior_pointer_aborts_with_report)
{
    expect_invalid_free(free_interior, (void *)(size_t)64);
    expect_invalid_free(free_interior, (void *)(size_t)(MiB));
}

static void free_interior_then_malloc(void *arg)
{
    (void)arg;
    uint8_t *p = malloc(64);
    memset(p, 0, 64);
    say_addr(p + 8);
    free(p + 8);
    uint8_t *q = malloc(64);
    if (q == p + 8) {
        static const char msg[] = "malloc(64) returned the interior pointer p+8 (overlaps p)\n";
        if (write(2, msg, sizeof msg - 1) < 0)
            _exit(3);
        _exit(4);
    }
    malloc_trim(0);
}
TEST(test_free_of_interior_pointer_is_never_handed_out_again)
{
    /* Deferring the check to the cache flush is allowed, handing p+8 to the next malloc
     * (a block overlapping a live one) is not. */
    expect_invalid_free(free_interior_then_malloc, NULL);
}

static void double_free_large(void *arg)
{
    size_t n = (size_t)arg;
    /* A background thread created between the two frees (its pthread_create allocates)
     * could take the freed pages for a new slab: the second free would then be a valid
     * one. This test is about the free that follows at once. */
    bool off = false;
    if (mallctl("background_thread", NULL, NULL, &off, sizeof off) != 0)
        _exit(4);
    void *p = malloc(n);
    memset(p, 0, n);
    free(p);
    say_addr(p);
    free(p); /* blocks above 14 KiB: detected at once */
    _exit(0);
}
TEST(test_double_free_of_large_block_aborts_at_once)
{
    /* 16-32 KiB blocks are cached: free()'s fast path tags one, the second free misses it
     * and finds the block at the head of its bin. */
    expect_invalid_free(double_free_large, (void *)(size_t)(16 * KiB));
    expect_invalid_free(double_free_large, (void *)(size_t)(20 * KiB));
    expect_invalid_free(double_free_large, (void *)(size_t)(64 * KiB));
    expect_invalid_free(double_free_large, (void *)(size_t)(3 * MiB));
    expect_invalid_free(double_free_large, (void *)(size_t)(20 * MiB));
}

static void double_free_small_trim(void *arg)
{
    size_t n = (size_t)arg;
    void *keep = malloc(n); /* a live neighbour keeps the slab alive */
    void *p = malloc(n);
    free(p);
    say_addr(p);
    free(p);
    malloc_trim(0); /* flushes the thread cache: the double free is found here at the latest */
    free(keep);
    malloc_trim(0);
}
TEST(test_double_free_of_small_block_found_by_malloc_trim)
{
    expect_invalid_free(double_free_small_trim, (void *)(size_t)64);
    expect_invalid_free(double_free_small_trim, (void *)(size_t)8);
    expect_invalid_free(double_free_small_trim, (void *)(size_t)3000);
}

static void *double_free_thread(void *arg)
{
    void *p = malloc((size_t)arg);
    free(p);
    say_addr(p);
    free(p);
    return NULL; /* thread exit flushes the cache */
}
static void double_free_small_thread_exit(void *arg)
{
    void *keep = malloc((size_t)arg);
    pthread_t t;
    pthread_create(&t, NULL, double_free_thread, arg);
    pthread_join(t, NULL);
    free(keep);
    malloc_trim(0);
}
TEST(test_double_free_of_small_block_found_at_thread_exit)
{
    expect_invalid_free(double_free_small_thread_exit, (void *)(size_t)48);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

/*
 * strata_names.h - lets one test source call the allocator by the standard names (override
 * build: malloc, mallocx, mallctl, ...) or, with STRATA_TEST_PREFIXED, by the strata_ names
 * (prefixed build, sanitizers). Also declares the non-glibc names and mallctl helpers.
 */
#ifndef STRATA_TEST_NAMES_H
#define STRATA_TEST_NAMES_H

#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "strata.h"

#ifdef STRATA_TEST_PREFIXED
#define STRATA_TEST_API "strata_"
#define malloc strata_malloc
#define calloc strata_calloc
#define realloc strata_realloc
#define reallocarray strata_reallocarray
#define free strata_free
#define free_sized strata_free_sized
#define free_aligned_sized strata_free_aligned_sized
#define posix_memalign strata_posix_memalign
#define aligned_alloc strata_aligned_alloc
#define memalign strata_memalign
#define valloc strata_valloc
#define pvalloc strata_pvalloc
#define malloc_usable_size strata_malloc_usable_size
#define malloc_trim strata_malloc_trim
#define mallocx strata_mallocx
#define rallocx strata_rallocx
#define xallocx strata_xallocx
#define sallocx strata_sallocx
#define dallocx strata_dallocx
#define sdallocx strata_sdallocx
#define nallocx strata_nallocx
#define mallctl strata_mallctl
#define mallctlnametomib strata_mallctlnametomib
#define mallctlbymib strata_mallctlbymib
#define malloc_stats_print strata_malloc_stats_print
#define malloc_conf strata_malloc_conf
#define malloc_conf_2_conf_harder strata_malloc_conf_2_conf_harder
#define malloc_message strata_malloc_message
#else
#define STRATA_TEST_API ""
#ifdef __cplusplus
extern "C" {
#endif
/* Exported by the override build; glibc 2.36's headers lack them. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);
void *mallocx(size_t size, int flags);
void *rallocx(void *ptr, size_t size, int flags);
size_t xallocx(void *ptr, size_t size, size_t extra, int flags);
size_t sallocx(const void *ptr, int flags);
void dallocx(void *ptr, int flags);
void sdallocx(void *ptr, size_t size, int flags);
size_t nallocx(size_t size, int flags);
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
int mallctlnametomib(const char *name, size_t *mibp, size_t *miblenp);
int mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                 size_t newlen);
void malloc_stats_print(void (*write_cb)(void *, const char *), void *cbopaque,
                        const char *opts);
#ifdef __cplusplus
}
#endif
#endif

/* mallctl readers: fail the test if the name does not resolve or has another size. */
#define CTL_READ(name, type)                                                              \
    __extension__({                                                                       \
        type ctl_v_ = 0;                                                                  \
        size_t ctl_len_ = sizeof ctl_v_;                                                  \
        int ctl_rc_ = mallctl(name, &ctl_v_, &ctl_len_, NULL, 0);                         \
        CHECK(ctl_rc_ == 0 && ctl_len_ == sizeof(type),                                   \
              "mallctl(\"%s\") returned %d, length %zu (want %zu)", name, ctl_rc_,        \
              ctl_len_, sizeof(type));                                                    \
        ctl_v_;                                                                           \
    })

/* Refreshes the merged statistics ("epoch") and reads a size_t statistic. */
static CHECK_UNUSED size_t stat_read(const char *name)
{
    uint64_t epoch = 1;
    size_t len = sizeof epoch;
    int rc = mallctl("epoch", &epoch, &len, &epoch, sizeof epoch);
    CHECK(rc == 0, "mallctl(\"epoch\") returned %d", rc);
    return CTL_READ(name, size_t);
}

static CHECK_UNUSED uint64_t thread_allocated(void)
{
    return CTL_READ("thread.allocated", uint64_t);
}
static CHECK_UNUSED uint64_t thread_deallocated(void)
{
    return CTL_READ("thread.deallocated", uint64_t);
}

#endif /* STRATA_TEST_NAMES_H */

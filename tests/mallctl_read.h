/*
 * mallctl_read.h - typed mallctl reads for the tests: each fails the test (CHECK) when the
 * name does not answer. Include after strata_names.h (which brings check.h and mallctl).
 */
#ifndef STRATA_TESTS_MALLCTL_READ_H
#define STRATA_TESTS_MALLCTL_READ_H

#include <stdbool.h>
#include <stdint.h>

static inline size_t read_size(const char *name)
{
    size_t v = 0, sz = sizeof v;
    int err = mallctl(name, &v, &sz, NULL, 0);
    CHECK(err == 0, "mallctl(%s) = %d", name, err);
    return v;
}

static inline uint64_t read_u64(const char *name)
{
    uint64_t v = 0;
    size_t sz = sizeof v;
    int err = mallctl(name, &v, &sz, NULL, 0);
    CHECK(err == 0, "mallctl(%s) = %d", name, err);
    return v;
}

static inline bool read_bool(const char *name)
{
    bool v = false;
    size_t sz = sizeof v;
    int err = mallctl(name, &v, &sz, NULL, 0);
    CHECK(err == 0, "mallctl(%s) = %d", name, err);
    return v;
}

#endif

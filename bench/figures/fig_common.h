/*
 * fig_common.h - helpers shared by the core figure programs (fig_pair, fig_prodcons,
 * fig_keep): command-line numbers, a PRNG kept out of the measured functions, callgrind
 * client requests when <valgrind/callgrind.h> exists, /proc/self/status readers.
 * The programs use plain malloc/free so that any allocator can be measured by LD_PRELOAD.
 */
#ifndef FIG_COMMON_H
#define FIG_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define FIG_HAVE_CALLGRIND 1
#endif
#endif
#ifndef FIG_HAVE_CALLGRIND
#define FIG_HAVE_CALLGRIND 0
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

/*
 * A measured function: never inlined or cloned, so callgrind sees it under its own name
 * and the inclusive cost of its calls to malloc/free can be read from the call arcs.
 */
#if defined(__clang__)
#define FIG_MEASURED __attribute__((noinline, used))
#else
#define FIG_MEASURED __attribute__((noinline, noclone, used))
#endif

/* Keeps the compiler from eliding a malloc/free pair whose block is never used. */
#define FIG_ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

/* splitmix64: a tiny, well-mixed generator; only ever called outside measured code. */
static inline uint64_t fig_rand(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi] (inclusive); the modulo bias is below 2^-50 for these ranges. */
static inline size_t fig_rand_range(uint64_t *state, size_t lo, size_t hi) {
    return lo + (size_t)(fig_rand(state) % (uint64_t)(hi - lo + 1));
}

static inline void fig_die(const char *prog, const char *msg, const char *arg) {
    fprintf(stderr, "%s: %s%s%s\n", prog, msg, arg ? " " : "", arg ? arg : "");
    exit(2);
}

/* Parses "--name value" at argv[*i]; returns 1 and advances *i on a match. */
static inline int fig_arg_u64(int argc, char **argv, int *i, const char *name, uint64_t *out) {
    if (strcmp(argv[*i], name) != 0)
        return 0;
    if (*i + 1 >= argc)
        fig_die(argv[0], "missing value for", name);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(argv[*i + 1], &end, 0);
    if (errno || *end || end == argv[*i + 1] || argv[*i + 1][0] == '-')
        fig_die(argv[0], "bad number for", name);
    *out = v;
    *i += 2;
    return 1;
}

static inline double fig_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Reads a "Key:   N kB" line of /proc/self/status, in bytes; 0 if absent. stdio may
 * malloc a few KiB, which is harmless: it is only called outside measured phases.
 */
static inline uint64_t fig_status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t klen = strlen(key);
    uint64_t v = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtoull(line + klen + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

#endif /* FIG_COMMON_H */

/*
 * arena_cost.c - the two figures of user arenas, one JSON line per run:
 *   arena_cost pair|arena_pair|malloc_only|arena_only [N]
 *       N allocations in a never-inlined measured_* function, run under callgrind with
 *       --toggle-collect='measured_*' (bench/arenas/run.sh): instructions per call of
 *       malloc(+free) against mallocx(MALLOCX_ARENA|MALLOCX_TCACHE_NONE)(+dallocx).
 *   arena_cost reset SIZE [BYTES]
 *       fills a user arena with BYTES (default 1 GiB) of SIZE-byte blocks, then times
 *       arena.<i>.reset (wall clock, best of 3) and reports the arena's extents (slabs).
 * Sizes cycle through 16..256 bytes for the instruction figures, as in fig_pair.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jemalloc/jemalloc.h>

static unsigned arena;
static int aflags;
static void *sink[1 << 16];

#define SIZE_OF(i) (16 + ((i) * 48 % 241))

__attribute__((noinline)) static void measured_pair(long n)
{
    for (long i = 0; i < n; i++) {
        void *p = malloc(SIZE_OF(i));
        sink[i & 0xffff] = p;
        free(p);
    }
}

__attribute__((noinline)) static void measured_arena_pair(long n)
{
    for (long i = 0; i < n; i++) {
        void *p = mallocx(SIZE_OF(i), aflags);
        sink[i & 0xffff] = p;
        dallocx(p, MALLOCX_TCACHE_NONE);
    }
}

__attribute__((noinline)) static void measured_malloc_only(void **out, long n)
{
    for (long i = 0; i < n; i++)
        out[i] = malloc(SIZE_OF(i));
}

__attribute__((noinline)) static void measured_arena_only(void **out, long n)
{
    for (long i = 0; i < n; i++)
        out[i] = mallocx(SIZE_OF(i), aflags);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void arena_ctl(const char *what)
{
    char name[64];
    snprintf(name, sizeof name, "arena.%u.%s", arena, what);
    if (mallctl(name, NULL, NULL, NULL, 0) != 0) {
        fprintf(stderr, "arena_cost: %s failed\n", name);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "pair";
    size_t sz = sizeof arena;
    if (mallctl("arenas.create", &arena, &sz, NULL, 0) != 0)
        return 1;
    aflags = MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
    if (strcmp(mode, "reset") == 0) {
        size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 64;
        size_t bytes = argc > 3 ? strtoul(argv[3], NULL, 0) : (size_t)1 << 30;
        size_t n = bytes / size;
        double best = 1e9, fill = 0;
        size_t pactive = 0;
        for (int round = 0; round < 3; round++) {
            double t0 = now();
            for (size_t i = 0; i < n; i++) {
                char *p = mallocx(size, aflags);
                if (p == NULL)
                    return 1;
                *p = 1;
            }
            fill = now() - t0;
            char name[64];
            snprintf(name, sizeof name, "stats.arenas.%u.pactive", arena);
            sz = sizeof pactive;
            mallctl(name, &pactive, &sz, NULL, 0);
            double t1 = now();
            arena_ctl("reset");
            double t = now() - t1;
            if (t < best)
                best = t;
        }
        printf("{\"mode\":\"reset\",\"size\":%zu,\"bytes\":%zu,\"objects\":%zu,\"pages\":%zu,"
               "\"fill_s\":%.3f,\"reset_ms\":%.3f,\"ns_per_object\":%.3f,\"ns_per_page\":%.1f}\n",
               size, bytes, n, pactive, fill, best * 1e3, best * 1e9 / (double)n, best * 1e9 / (double)pactive);
        return 0;
    }
    long n = argc > 2 ? atol(argv[2]) : 100000;
    void **out = malloc(sizeof(void *) * (size_t)n);
    /* warm both paths so that the measured loops see steady state */
    measured_pair(0);
    for (long i = 0; i < 10000; i++)
        free(malloc(SIZE_OF(i))), dallocx(mallocx(SIZE_OF(i), aflags), MALLOCX_TCACHE_NONE);
    if (strcmp(mode, "pair") == 0)
        measured_pair(n);
    else if (strcmp(mode, "arena_pair") == 0)
        measured_arena_pair(n);
    else if (strcmp(mode, "malloc_only") == 0) {
        measured_malloc_only(out, n);
        for (long i = 0; i < n; i++)
            free(out[i]);
    } else if (strcmp(mode, "arena_only") == 0) {
        measured_arena_only(out, n);
        arena_ctl("reset");
    } else {
        fprintf(stderr, "arena_cost: unknown mode %s\n", mode);
        return 2;
    }
    printf("{\"mode\":\"%s\",\"n\":%ld}\n", mode, n);
    free(out);
    return 0;
}

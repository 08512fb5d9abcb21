/*
 * request_arena.c - the server pattern: every request allocates its objects from its own
 * arena (MALLOCX_ARENA, bypassing the thread cache with MALLOCX_TCACHE_NONE) and never
 * frees them one by one; when the request ends, arena.<i>.reset discards them all at once
 * and the arena serves the next request. Written against jemalloc's API only.
 *
 * Checks (exit status 0 when they hold): RSS stays flat over the run (no more than 8 MiB
 * above what it was after the first 1% of requests), and each request's blocks are usable.
 * Usage: request_arena [requests]   (default 1000000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jemalloc/jemalloc.h>

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv)
{
    long requests = argc > 1 ? atol(argv[1]) : 1000000;
    unsigned arena;
    size_t sz = sizeof arena;
    if (mallctl("arenas.create", &arena, &sz, NULL, 0) != 0) {
        fprintf(stderr, "request_arena: FAIL: arenas.create\n");
        return 1;
    }
    char reset[64];
    snprintf(reset, sizeof reset, "arena.%u.reset", arena);
    size_t mib[4], miblen = 4;
    if (mallctlnametomib(reset, mib, &miblen) != 0) {
        fprintf(stderr, "request_arena: FAIL: mallctlnametomib(%s)\n", reset);
        return 1;
    }
    int flags = MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
    long rss_warm = 0, rss_max = 0;
    unsigned long long seed = 88172645463325252ull, bytes = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long r = 0; r < requests; r++) {
        /* a request: a header, a few buffers, a list of small nodes, now and then a big body */
        char *hdr = mallocx(256, flags);
        if (hdr == NULL)
            goto oom;
        memset(hdr, 'h', 256);
        int nodes = 8 + (int)(seed % 24);
        for (int i = 0; i < nodes; i++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            size_t n = 16 + seed % 1000;
            if (r % 1000 == 0 && i == 0)
                n = 256 * 1024; /* an occasional large body */
            char *p = mallocx(n, flags);
            if (p == NULL)
                goto oom;
            p[0] = p[n - 1] = (char)i;
            bytes += n;
        }
        if (mallctlbymib(mib, miblen, NULL, NULL, NULL, 0) != 0) {
            fprintf(stderr, "request_arena: FAIL: %s\n", reset);
            return 1;
        }
        if (r == requests / 100)
            rss_warm = rss_kib();
        if (r % 10000 == 0) {
            long rss = rss_kib();
            if (rss > rss_max)
                rss_max = rss;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long rss_end = rss_kib();
    if (rss_end > rss_max)
        rss_max = rss_end;
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("request_arena: %ld requests, %llu MiB allocated, %.2f s (%.0f ns/request); RSS %ld KiB after 1%%, "
           "max %ld KiB, end %ld KiB\n",
           requests, bytes >> 20, s, s * 1e9 / (double)requests, rss_warm, rss_max, rss_end);
    if (rss_max > rss_warm + 8 * 1024) {
        fprintf(stderr, "request_arena: FAIL: RSS grew by %ld KiB\n", rss_max - rss_warm);
        return 1;
    }
    return 0;
oom:
    fprintf(stderr, "request_arena: FAIL: mallocx returned NULL\n");
    return 1;
}

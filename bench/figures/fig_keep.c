/*
 * fig_keep - the space figure: keeps 10 million objects of sizes uniform in 16..128 alive
 * (each written in full and chained through its first word, so no side array inflates
 * RSS), then reports peak RSS (VmHWM), the bytes requested and the sum of
 * malloc_usable_size, looked up with dlsym(RTLD_DEFAULT) so it is the preloaded allocator's.
 * Run natively, never under valgrind.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>

#include "fig_common.h"

typedef size_t (*usable_fn)(void *);
typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

int main(int argc, char **argv) {
    uint64_t objects = 10000000, seed = 3, min = 16, max = 128, keep_at_exit = 0;
    for (int i = 1; i < argc;) {
        if (fig_arg_u64(argc, argv, &i, "--objects", &objects) ||
            fig_arg_u64(argc, argv, &i, "--seed", &seed) ||
            fig_arg_u64(argc, argv, &i, "--min", &min) ||
            fig_arg_u64(argc, argv, &i, "--max", &max) ||
            fig_arg_u64(argc, argv, &i, "--keep-at-exit", &keep_at_exit))
            continue;
        fprintf(stderr,
                "usage: %s [--objects N] [--seed S] [--min B] [--max B] [--keep-at-exit 0|1]\n",
                argv[0]);
        return 2;
    }
    if (min < sizeof(void *) || max < min)
        fig_die(argv[0], "need sizeof(void *) <= min <= max", NULL);

    /* POSIX's idiom for dlsym of a function, clean under -Wpedantic. */
    usable_fn usable;
    *(void **)&usable = dlsym(RTLD_DEFAULT, "malloc_usable_size");
    if (!usable)
        fig_die(argv[0], "malloc_usable_size not found by dlsym", NULL);
    /* jemalloc-family allocators (jemalloc, strata) name themselves through mallctl. */
    const char *version = NULL;
    mallctl_fn mallctl;
    *(void **)&mallctl = dlsym(RTLD_DEFAULT, "mallctl");
    if (mallctl) {
        size_t len = sizeof version;
        if (mallctl("version", &version, &len, NULL, 0) != 0)
            version = NULL;
    }

    uint64_t hwm_start = fig_status_bytes("VmHWM");
    uint64_t st = seed, requested = 0, usable_sum = 0;
    void *head = NULL;
    double t0 = fig_now();
    for (uint64_t i = 0; i < objects; i++) {
        size_t n = fig_rand_range(&st, (size_t)min, (size_t)max);
        void **p = malloc(n);
        if (!p)
            fig_die(argv[0], "malloc failed", NULL);
        memset(p, 0x5a, n); /* resident, as a live object is */
        *p = head;
        head = p;
        requested += n;
        usable_sum += usable(p);
    }
    double t1 = fig_now();
    uint64_t hwm = fig_status_bytes("VmHWM"), rss = fig_status_bytes("VmRSS");

    double t2 = fig_now();
    uint64_t freed = 0;
    if (!keep_at_exit) {
        while (head) {
            void *next = *(void **)head;
            free(head);
            head = next;
            freed++;
        }
    }
    double t3 = fig_now();

    printf("{\"fig\":\"keep\",\"objects\":%llu,\"min\":%llu,\"max\":%llu,\"requested_bytes\":%llu,"
           "\"usable_bytes\":%llu,\"vmhwm_bytes\":%llu,\"vmrss_bytes\":%llu,"
           "\"vmhwm_start_bytes\":%llu,\"alloc_seconds\":%.3f,\"free_seconds\":%.3f,\"freed\":%llu,"
           "\"mallctl_version\":",
           (unsigned long long)objects, (unsigned long long)min, (unsigned long long)max,
           (unsigned long long)requested, (unsigned long long)usable_sum, (unsigned long long)hwm,
           (unsigned long long)rss, (unsigned long long)hwm_start, t1 - t0, t3 - t2,
           (unsigned long long)freed);
    if (version) {
        putchar('"');
        for (const char *c = version; *c; c++)
            if (*c >= 0x20 && *c != '"' && *c != '\\')
                putchar(*c);
        putchar('"');
    } else {
        fputs("null", stdout);
    }
    puts("}");
    return 0;
}

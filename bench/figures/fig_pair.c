/*
 * fig_pair - the fast-path figure: malloc(n) + free pairs with n uniform in 8..264.
 * Sizes are precomputed so the PRNG stays outside the measured function
 * fig_pair_measured(); 1,000 live objects are allocated and a warm-up (a separately
 * named copy of the loop) runs first.
 * run_figures.py runs it under callgrind and reads the inclusive cost of the calls that
 * fig_pair_measured makes to malloc and free. Natively it prints ns per pair as a hint.
 */
#include "fig_common.h"

#define SIZES_LEN 65536 /* power of two; cycled by mask, large enough to look random */

static inline void pair_loop(const uint16_t *sizes, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        void *p = malloc(sizes[i & (SIZES_LEN - 1)]);
        FIG_ESCAPE(p);
        free(p);
    }
}

/* Warm-up: fills the allocator's caches and faults in its first pages. */
FIG_MEASURED void fig_pair_warmup(const uint16_t *sizes, uint64_t n) { pair_loop(sizes, n); }

/* The measured phase: nothing but the loop, malloc and free. */
FIG_MEASURED void fig_pair_measured(const uint16_t *sizes, uint64_t n) { pair_loop(sizes, n); }

int main(int argc, char **argv) {
    CALLGRIND_STOP_INSTRUMENTATION; /* start-up and warm-up run uninstrumented (faster) */
    uint64_t pairs = 200000, warmup = 100000, seed = 1, min = 8, max = 264, live = 1000;
    for (int i = 1; i < argc;) {
        if (fig_arg_u64(argc, argv, &i, "--pairs", &pairs) ||
            fig_arg_u64(argc, argv, &i, "--warmup", &warmup) ||
            fig_arg_u64(argc, argv, &i, "--seed", &seed) ||
            fig_arg_u64(argc, argv, &i, "--live", &live) ||
            fig_arg_u64(argc, argv, &i, "--min", &min) ||
            fig_arg_u64(argc, argv, &i, "--max", &max))
            continue;
        fprintf(stderr,
                "usage: %s [--pairs N] [--warmup N] [--live N] [--seed S] [--min B] [--max B]\n",
                argv[0]);
        return 2;
    }
    if (min < 1 || max < min || max > UINT16_MAX || pairs == 0)
        fig_die(argv[0], "need 1 <= min <= max <= 65535 and pairs > 0", NULL);

    static uint16_t sizes[SIZES_LEN];
    uint64_t st = seed;
    for (size_t i = 0; i < SIZES_LEN; i++)
        sizes[i] = (uint16_t)fig_rand_range(&st, (size_t)min, (size_t)max);

    /*
     * A background of live objects, as any real heap has: without it every free empties
     * its page, and allocators that retire empty pages (mimalloc: 114 instead of ~56
     * instructions per pair) are measured on that path instead of their fast path.
     */
    void **kept = live ? malloc(live * sizeof(void *)) : NULL;
    if (live && !kept)
        fig_die(argv[0], "out of memory", NULL);
    for (uint64_t i = 0; i < live; i++)
        kept[i] = malloc(sizes[(i * 7919) & (SIZES_LEN - 1)]);
    fig_pair_warmup(sizes, warmup);
    CALLGRIND_START_INSTRUMENTATION;
    double t0 = fig_now();
    fig_pair_measured(sizes, pairs);
    double t1 = fig_now();
    CALLGRIND_STOP_INSTRUMENTATION;
    for (uint64_t i = 0; i < live; i++)
        free(kept[i]);
    free(kept);

    printf("{\"fig\":\"pair\",\"pairs\":%llu,\"warmup\":%llu,\"min\":%llu,\"max\":%llu,"
           "\"live\":%llu,\"measured_fn\":\"fig_pair_measured\",\"client_requests\":%d,"
           "\"ns_per_pair\":%.2f}\n",
           (unsigned long long)pairs, (unsigned long long)warmup, (unsigned long long)min,
           (unsigned long long)max, (unsigned long long)live, FIG_HAVE_CALLGRIND,
           (t1 - t0) * 1e9 / (double)pairs);
    return 0;
}

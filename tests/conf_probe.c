/*
 * conf_probe.c - helper program of conf_options.c: starts strata (options from the
 * environment, or from the malloc_conf symbol when built with CONF_PROBE_MALLOC_CONF),
 * runs a small multi-threaded workload and prints the effective options read by mallctl.
 * With argument "zero" it also checks that reused blocks come back zeroed (zero:true).
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "strata_names.h"

#ifdef CONF_PROBE_MALLOC_CONF
const char *malloc_conf = CONF_PROBE_MALLOC_CONF;
#endif
#ifdef CONF_PROBE_MALLOC_CONF_2
const char *malloc_conf_2_conf_harder = CONF_PROBE_MALLOC_CONF_2;
#endif

static void *work(void *arg)
{
    size_t seed = (size_t)(uintptr_t)arg;
    void *p[256] = {0};
    for (size_t i = 0; i < 20000; i++) {
        size_t k = (i * 7 + seed) % 256;
        free(p[k]);
        p[k] = malloc(1 + (i * 37 + seed) % (k < 8 ? 300000 : 4000));
        CHECK(p[k] != NULL);
        memset(p[k], 1, 1);
    }
    for (int k = 0; k < 256; k++)
        free(p[k]);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, work, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    if (argc > 1 && strcmp(argv[1], "zero") == 0) {
        void *p[64];
        for (int i = 0; i < 64; i++) {
            p[i] = malloc(100 + (size_t)i * 1000);
            memset(p[i], 0xff, 100 + (size_t)i * 1000);
        }
        for (int i = 0; i < 64; i++)
            free(p[i]);
        int bad = 0;
        for (int i = 0; i < 64; i++) {
            uint8_t *q = malloc(100 + (size_t)i * 1000);
            for (size_t b = 0; b < 100 + (size_t)i * 1000; b++)
                bad |= q[b] != 0;
            free(q);
        }
        printf("zero %s\n", bad ? "FAIL" : "ok");
    }
    if (argc > 1 && strcmp(argv[1], "nslots") == 0) {
        /* The main thread's bins as it starts (jemalloc's tcache_nslots_* options). */
        free(malloc(64));
        static const size_t sizes[] = {64, 4096};
        for (int i = 0; i < 2; i++) {
            size_t n = 0, len = sizeof n;
            CHECK(mallctl("thread.tcache.ncached_max.read_sizeclass", &n, &len, (void *)&sizes[i], sizeof sizes[i]) == 0);
            printf("nslots %zu=%zu\n", sizes[i], n);
        }
    }
    printf("probe: narenas=%u arenas=%u tcache=%d ok\n", CTL_READ("opt.narenas", unsigned),
           CTL_READ("arenas.narenas", unsigned), (int)CTL_READ("opt.tcache", bool));
    return 0;
}

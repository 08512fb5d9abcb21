/*
 * lib_resident.c - libstrata.so's own resident pages (docs/design.md, "Hot paths"): the
 * functions a typical program runs are grouped at the start of .text
 * (cmake/strata-hot.ld), so the kernel's fault-around (64 KiB around each touched file
 * page) leaves the cold code (statistics printing, the profiler, hooks) unmapped.
 * Exits 77 (skip) where the build has no such layout or /proc/self/pagemap is unreadable.
 */
#define _GNU_SOURCE
#include "strata_names.h"

#include <dlfcn.h>
#include <pthread.h>

#define KiB ((size_t)1 << 10)

/* A typical program's allocator traffic: small and large blocks, realloc growth,
 * aligned blocks, a thread that allocates, frees the main thread's blocks and exits, and
 * the statistics reads Redis's cron makes. */
static void *worker(void *arg)
{
    void **v = arg;
    for (int i = 0; i < 20000; i++) {
        free(v[i]);
        v[i] = malloc((size_t)(i % 300) + 1);
    }
    for (int i = 0; i < 20000; i++)
        free(v[i]);
    return NULL;
}

static void typical_run(void)
{
    static void *v[20000];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 20000; i++)
            v[i] = malloc((size_t)(i * 7 % 5000) + 1);
        for (int i = 0; i < 20000; i += 2)
            free(v[i]);
        for (int i = 0; i < 20000; i += 2)
            v[i] = calloc(1, (size_t)(i % 100) + 1);
        pthread_t t;
        CHECK(pthread_create(&t, NULL, worker, v) == 0, "pthread_create");
        pthread_join(t, NULL);
    }
    char *s = NULL;
    for (size_t n = 16; n <= 4 << 20; n *= 2) {
        s = realloc(s, n);
        CHECK(s != NULL, "realloc(%zu)", n);
        s[n - 1] = 1;
    }
    free(s);
    void *a = NULL;
    CHECK(posix_memalign(&a, 4096, 10000) == 0, "posix_memalign");
    free(a);
    uint64_t epoch = 1;
    size_t sz = sizeof(epoch), allocated = 0, asz = sizeof(allocated);
    CHECK(mallctl("epoch", &epoch, &sz, &epoch, sz) == 0, "mallctl epoch");
    CHECK(mallctl("stats.allocated", &allocated, &asz, NULL, 0) == 0, "stats.allocated");
}

TEST(test_library_text_of_a_typical_run_stays_in_the_hot_group)
{
#ifndef STRATA_TEST_HOT_LAYOUT
    printf("SKIP: this build has no hot-function layout (linker without INSERT scripts)\n");
    exit(77);
#else
    typical_run();
    Dl_info info;
    CHECK(dladdr((void *)malloc, &info) && info.dli_fname, "dladdr(malloc)");
    FILE *maps = fopen("/proc/self/maps", "r");
    CHECK(maps != NULL, "/proc/self/maps");
    char line[512];
    unsigned long lo = 0, hi = 0;
    while (fgets(line, sizeof(line), maps)) {
        unsigned long a, b;
        char perms[8];
        if (strstr(line, "libstrata.so") && sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3
            && strcmp(perms, "r-xp") == 0) {
            lo = a, hi = b;
        }
    }
    fclose(maps);
    CHECK(hi > lo, "no r-xp mapping of libstrata.so in /proc/self/maps");
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0) {
        printf("SKIP: /proc/self/pagemap unreadable\n");
        exit(77);
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), npages = (hi - lo) / page, resident = 0;
    int last_resident = -1;
    for (size_t i = 0; i < npages; i++) {
        uint64_t e = 0;
        CHECK(pread(fd, &e, sizeof(e), (off_t)((lo / page + i) * sizeof(e))) == sizeof(e),
              "pagemap read");
        if (e >> 63) {
            resident++;
            last_resident = (int)i;
        }
    }
    close(fd);
    printf("libstrata.so text: %zu of %zu pages resident, last resident page %d\n", resident,
           npages, last_resident);
    /* The group is ~52 KiB from the mapping's start: one 64 KiB fault-around window (kernels
     * from 6.4 start it at the mapping), at most two where windows are 64 KiB aligned; the
     * tail of .text (the profiler's dump and unwinder code) is never touched. Without the
     * layout every page is resident (atexit and pthread_atfork, called at start, sit at
     * the end). */
    CHECK(resident * page <= 116 * KiB, "%zu KiB of text resident (at most 116 expected)",
          resident * page / KiB);
    CHECK(last_resident >= 0 && (size_t)last_resident + 4 < npages,
          "the last 16 KiB of text are resident: cold code was touched or not grouped");
#endif
}

int main(int argc, char **argv) { return check_main(argc, argv); }

/*
 * link_check.c - a program linked against libstrata.so (LINK_CHECK_SHARED) or libstrata.a
 * (STRATA_TEST_STATIC, fully static when libc.a exists): its malloc and libc's internal
 * allocations (strdup, getline, stdio, opendir, realpath...) are strata's and mix freely.
 */
#define _GNU_SOURCE
#include "strata_names.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>

#define MiB ((size_t)1 << 20)

TEST(test_malloc_is_served_by_strata)
{
    const char *version = CTL_READ("version", const char *);
    CHECK(version && strcmp(version, STRATA_VERSION) == 0, "mallctl version %s", version);
    uint64_t a0 = thread_allocated();
    void *p = malloc(2 * MiB);
    CHECK(p && thread_allocated() - a0 >= 2 * MiB, "malloc(2 MiB) not counted by strata");
    free(p);
    for (size_t n = 1; n < 100000; n = n * 2 + 1) {
        void *q = malloc(n);
        CHECK_EQ(malloc_usable_size(q), nallocx(n, 0));
        free(q);
    }
#ifdef LINK_CHECK_SHARED
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    CHECK(sym && dladdr(sym, &info) && strstr(info.dli_fname, "libstrata"),
          "malloc resolves to %s", sym && info.dli_fname ? info.dli_fname : "?");
#endif
}

TEST(test_libc_internal_allocations_are_freed_by_strata)
{
    uint64_t a0 = thread_allocated();
    char *s = strdup("a string duplicated by libc");
    CHECK(s && malloc_usable_size(s) >= strlen(s) + 1);
    s = realloc(s, 4000);
    free(s);
    char *a = NULL;
    CHECK(asprintf(&a, "%d-%s", 42, "formatted") > 0 && strcmp(a, "42-formatted") == 0);
    free(a);
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    int lines = 0;
    while (getline(&line, &cap, f) > 0)
        lines++;
    CHECK(lines > 0 && malloc_usable_size(line) >= cap);
    free(line);
    fclose(f);
    char *rp = realpath("/proc/self/exe", NULL);
    CHECK(rp != NULL);
    free(rp);
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    while (readdir(d))
        ;
    closedir(d);
    char *big = NULL;
    size_t big_len = 0;
    FILE *m = open_memstream(&big, &big_len);
    for (int i = 0; i < 20000; i++)
        fprintf(m, "%d ", i);
    fclose(m);
    CHECK(big_len > 100000 && malloc_usable_size(big) > big_len);
    free(big);
    CHECK(thread_allocated() - a0 > 100000, "libc's allocations did not reach strata");
}

static void *worker(void *arg)
{
    uintptr_t seed = (uintptr_t)arg;
    void *p[128] = {0};
    for (unsigned i = 0; i < 50000; i++) {
        unsigned k = (i * 13 + (unsigned)seed) % 128;
        free(p[k]);
        p[k] = malloc((i * 31 + seed) % 5000 + 1);
        CHECK(p[k] != NULL);
        *(volatile char *)p[k] = 1;
    }
    for (int k = 0; k < 128; k++)
        free(p[k]);
    return NULL;
}

TEST(test_threads_allocate_and_free)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

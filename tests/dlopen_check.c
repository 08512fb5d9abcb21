/*
 * dlopen_check.c - dlopen("libstrata.so") into a running program that does not link it.
 * strata uses initial-exec TLS, so dlopen may either work (the loader had static TLS room)
 * or fail cleanly with an error such as "cannot allocate memory in static TLS block": both
 * pass; a crash or a broken program allocator afterwards fails. The outcome is printed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/wait.h>

#include "check.h"

#ifndef STRATA_LIB
#error "STRATA_LIB must name libstrata.so"
#endif

/* The program's own allocator (glibc) must keep working, threads and fork included. */
static void *program_allocates(void *arg)
{
    for (int i = 0; i < 20000; i++) {
        char *p = malloc((size_t)(i % 3000) + 1);
        CHECK(p != NULL);
        p[0] = 1;
        free(p);
    }
    return arg;
}

static void check_program_still_works(void)
{
    char *s = strdup("still fine");
    CHECK(s && strcmp(s, "still fine") == 0);
    free(s);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, program_allocates, NULL) == 0);
    pthread_join(t, NULL);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        program_allocates(NULL);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "child after dlopen: %s", check_status_str(status));
}

static void try_dlopen(int mode, const char *mode_name)
{
    void *h = dlopen(STRATA_LIB, mode);
    if (!h) {
        const char *err = dlerror();
        CHECK(err != NULL && *err, "dlopen failed without an error message");
        printf("dlopen(%s) failed cleanly: %s\n", mode_name, err);
        check_program_still_works();
        return;
    }
    void *(*s_malloc)(size_t) = (void *(*)(size_t))dlsym(h, "strata_malloc");
    void (*s_free)(void *) = (void (*)(void *))dlsym(h, "strata_free");
    size_t (*s_usable)(const void *) = (size_t (*)(const void *))dlsym(h, "strata_malloc_usable_size");
    int (*s_ctl)(const char *, void *, size_t *, void *, size_t) =
        (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(h, "strata_mallctl");
    CHECK(s_malloc && s_free && s_usable && s_ctl, "strata_* symbols missing after dlopen");
    void *p[1000];
    for (int i = 0; i < 1000; i++) {
        p[i] = s_malloc((size_t)i * 97 + 1);
        CHECK(p[i] && s_usable(p[i]) >= (size_t)i * 97 + 1);
        memset(p[i], i, (size_t)i * 97 + 1);
    }
    for (int i = 0; i < 1000; i++)
        s_free(p[i]);
    const char *version = NULL;
    size_t len = sizeof version;
    CHECK(s_ctl("version", &version, &len, NULL, 0) == 0 && version);
    printf("dlopen(%s) works: strata %s usable from a dlopened library\n", mode_name, version);
    check_program_still_works();
    /* strata stays loaded: unloading a malloc is not something programs can rely on. */
}

TEST(test_dlopen_local_works_or_fails_cleanly) { try_dlopen(RTLD_NOW | RTLD_LOCAL, "RTLD_LOCAL"); }

TEST(test_dlopen_global_works_or_fails_cleanly)
{
    try_dlopen(RTLD_NOW | RTLD_GLOBAL, "RTLD_GLOBAL");
}

TEST(test_dlopen_lazy_twice_works_or_fails_cleanly)
{
    try_dlopen(RTLD_LAZY | RTLD_LOCAL, "RTLD_LAZY");
    try_dlopen(RTLD_LAZY | RTLD_LOCAL, "RTLD_LAZY again");
}

int main(int argc, char **argv) { return check_main(argc, argv); }

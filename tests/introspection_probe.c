/*
 * introspection_probe.c - a program that does not link strata: run under LD_PRELOAD of
 * strata or of libjemalloc2, it allocates from two threads and prints
 * malloc_stats_print(opts) to stdout (argv[1]), or with "sleep MS" keeps allocating for MS
 * milliseconds (for the stats_file exporter; SIGTERM ends it early through a normal exit).
 */
#include <dlfcn.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *main_array;
static volatile sig_atomic_t stop;

static void on_term(int sig) { (void)sig; stop = 1; }

static void *work(void *arg)
{
    void **p = arg;
    /* The second thread binds to arena 1, so that per-arena figures have two arenas to
     * show (strata opens arenas only under contention, jemalloc from the start). */
    int (*mctl)(const char *, void *, size_t *, void *, size_t) =
        (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
    unsigned one = 1;
    if (arg != main_array && mctl) mctl("thread.arena", NULL, NULL, &one, sizeof one);
    for (int i = 0; i < 2000; i++) p[i] = malloc((size_t)(i % 300) * 16 + 8 + (i % 97 == 0 ? 100000 : 0));
    return NULL;
}

static void out(void *opaque, const char *s) { fputs(s, (FILE *)opaque); }

int main(int argc, char **argv)
{
    static void *a[2000], *b[2000];
    main_array = b; /* main stays where it is */
    pthread_t t;
    pthread_create(&t, NULL, work, a);
    work(b);
    pthread_join(t, NULL);
    for (int i = 0; i < 2000; i += 2) free(a[i]);
    if (argc > 2 && strcmp(argv[1], "sleep") == 0) {
        struct timespec ts = {0, 10 * 1000000};
        signal(SIGTERM, on_term);
        for (int ms = atoi(argv[2]); ms > 0 && !stop; ms -= 10) {
            free(malloc(1000));
            nanosleep(&ts, NULL);
        }
        return 0;
    }
    void (*msp)(void (*)(void *, const char *), void *, const char *) =
        (void (*)(void (*)(void *, const char *), void *, const char *))dlsym(RTLD_DEFAULT, "malloc_stats_print");
    if (msp == NULL) {
        fprintf(stderr, "no malloc_stats_print: run with LD_PRELOAD\n");
        return 2;
    }
    msp(out, stdout, argc > 1 ? argv[1] : "J");
    return 0;
}

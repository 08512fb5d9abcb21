/*
 * app.c - the program the documented link recipes build (tests/recipes/recipes.sh): it
 * calls no strata function directly (mallctl is a weak reference, which pulls nothing
 * from an archive) and, unless built with APP_CALLS_FREE, no malloc function either, so it
 * passes only if the recipe itself makes strata the program's malloc, also for the
 * allocations libc makes on its own (strdup).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata.h>

extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));

int main(void)
{
    if (mallctl == NULL) {
        puts("FAIL: strata is not in the program (no mallctl)");
        return 1;
    }
    const char *version = NULL;
    uint64_t a0 = 0, a1 = 0;
    size_t vlen = sizeof version, len = sizeof a0;
    if (mallctl("version", &version, &vlen, NULL, 0) != 0 || strcmp(version, STRATA_VERSION) != 0 ||
        mallctl("thread.allocated", &a0, &len, NULL, 0) != 0) {
        puts("FAIL: mallctl does not answer as strata " STRATA_VERSION);
        return 1;
    }
    char *s = strdup("a string that libc's strdup allocates");
    len = sizeof a1;
    mallctl("thread.allocated", &a1, &len, NULL, 0);
    if (s == NULL || a1 - a0 < strlen(s) + 1) {
        puts("FAIL: libc's own allocation did not reach strata");
        return 1;
    }
#ifdef APP_CALLS_FREE
    free(s);
#endif
    /* Without APP_CALLS_FREE, s is not freed: the program then names no malloc function, so
     * the recipe itself must bring strata in (libstrata.a's object into a static link;
     * libstrata.so past --as-needed). */
    printf("ok: strata %s serves malloc\n", version);
    return 0;
}

/*
 * link_extern.c - a program that reads jemalloc's malloc_conf and sets malloc_message as
 * extern variables without defining them (as Rust's tikv-jemalloc-sys users do) links
 * with strata, finds malloc_conf NULL, and gets strata's output through the malloc_message
 * it sets (by the strata_ names with STRATA_TEST_PREFIXED: strata_malloc_conf, ...).
 */
#define _GNU_SOURCE
#include "strata_names.h"

/* Declared by strata.h; the program only reads or assigns them. */
static const char *volatile *const conf_var = &malloc_conf;

static char captured[1 << 16];
static size_t ncaptured;
static void *seen_opaque;
static void capture(void *cbopaque, const char *s)
{
    seen_opaque = cbopaque;
    size_t n = strlen(s);
    if (ncaptured + n < sizeof captured) {
        memcpy(captured + ncaptured, s, n);
        ncaptured += n;
    }
}

TEST(test_extern_malloc_conf_and_malloc_message_link_and_work)
{
    free(malloc(1));
    CHECK(*conf_var == NULL, "malloc_conf is %s, not strata's NULL", *conf_var);
    CHECK(malloc_message == NULL);
    int tag = 0;
    malloc_message = capture;
    malloc_stats_print(NULL, &tag, "J");
    malloc_message = NULL;
    CHECK(seen_opaque == &tag, "malloc_message got cbopaque %p, want %p", seen_opaque, (void *)&tag);
    captured[ncaptured] = '\0';
    CHECK(strstr(captured, "\"jemalloc\"") != NULL && strstr(captured, "\"stats\"") != NULL,
          "malloc_stats_print without write_cb wrote %zu bytes to malloc_message: %.200s", ncaptured,
          captured);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

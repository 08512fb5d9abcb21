/*
 * prof_redzone.c - sampled blocks carry a redzone (docs/hardening.md, "Sampled redzones"):
 * with every allocation sampled (lg_prof_sample:0), a write one byte past a small block is
 * reported when the block is freed, on every freeing path (free, sized frees, dallocx,
 * realloc, rallocx), with the block's address; a safety_check_abort hook gets the message
 * and the free goes on, as in jemalloc; writes within the usable size never report.
 * Built for both builds (prefixed: strata_* names, run under the sanitizers).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "strata_names.h"

/* Every allocation sampled, so every small block is promoted and has a redzone; no
 * background thread (its creation allocates in a child that must stay predictable). */
const char *malloc_conf = "prof:true,prof_active:true,lg_prof_sample:0,background_thread:false";

static int hook_calls;
static char hook_msg[512];
static void on_safety(const char *msg)
{
    hook_calls++;
    snprintf(hook_msg, sizeof hook_msg, "%s", msg);
}

static void set_hook(void (*h)(const char *))
{
    CHECK_EQ(mallctl("experimental.hooks.safety_check_abort", NULL, NULL, &h, sizeof h), 0);
}

static void overflow(char *p, size_t at)
{
    volatile size_t i = at; /* no compiler warning about the write past the end */
    p[i] = 0;
}

enum { BY_FREE, BY_FREE_SIZED, BY_SDALLOCX, BY_DALLOCX, BY_REALLOC, BY_RALLOCX, BY_N };
static const char *const by_name[BY_N] = {"free", "free_sized", "sdallocx", "dallocx", "realloc", "rallocx"};

static void release(char *p, size_t size, int by)
{
    switch (by) {
    case BY_FREE: free(p); break;
    case BY_FREE_SIZED: free_sized(p, size); break;
    case BY_SDALLOCX: sdallocx(p, size, 0); break;
    case BY_DALLOCX: dallocx(p, 0); break;
    case BY_REALLOC: free(realloc(p, size * 2 + 1)); break;
    case BY_RALLOCX: dallocx(rallocx(p, size * 2 + 1, 0), 0); break;
    }
}

TEST(test_a_write_past_a_sampled_block_is_reported_on_every_freeing_path)
{
    set_hook(on_safety);
    static const size_t sizes[] = {1, 16, 100, 128, 1000, 3000, 10000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int by = 0; by < BY_N; by++) {
            char *p = malloc(sizes[i]);
            CHECK(p != NULL);
            size_t usable = malloc_usable_size(p);
            hook_calls = 0;
            overflow(p, usable);
            char want[32];
            snprintf(want, sizeof want, "%p", (void *)p);
            release(p, sizes[i], by);
            CHECK(hook_calls == 1, "%s of a %zu-byte block written at offset %zu: %d reports", by_name[by], sizes[i],
                  usable, hook_calls);
            CHECK(strstr(hook_msg, "overflow") && strstr(hook_msg, want + 2), "%s: message \"%s\"", by_name[by],
                  hook_msg);
        }
    }
    set_hook(NULL);
}

TEST(test_writes_within_the_usable_size_never_report)
{
    set_hook(on_safety);
    hook_calls = 0;
    for (size_t size = 1; size <= 14336; size += size < 256 ? 1 : 97) {
        char *p = malloc(size);
        CHECK(p != NULL);
        memset(p, 0xbc ^ 0xff, malloc_usable_size(p));
        free(p);
    }
    CHECK(hook_calls == 0, "last message \"%s\"", hook_msg);
    set_hook(NULL);
}

static void overflow_child(void *arg)
{
    (void)arg;
    char *p = malloc(128);
    printf("block=%p\n", (void *)p);
    fflush(stdout);
    overflow(p, 128);
    free(p);
    printf("RESULT: ignored\n");
}

TEST(test_without_a_hook_the_overflow_aborts_naming_the_block)
{
    check_child_t *r = malloc(sizeof *r);
    CHECK(r != NULL);
    CHECK(check_child(overflow_child, NULL, 30, r) == 0);
    const char *b = strstr(r->out, "block=");
    CHECK(b != NULL, "stderr: %s", r->err);
    char want[64];
    snprintf(want, sizeof want, "heap buffer overflow detected: the block at %p", (void *)strtoull(b + 6, NULL, 16));
    CHECK(strstr(r->err, want) != NULL && strstr(r->out, "RESULT: ignored") == NULL, "stderr: %s", r->err);
    CHECK(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT, "%s", check_status_str(r->status));
    free(r);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

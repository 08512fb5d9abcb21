/*
 * misuse.c - frees of pointers that are not the start of a live block, on every path,
 * reported before any memory is handed out twice: interior pointers of every class at
 * offsets that are multiples of 16, 64 and the class's alignment; double frees across
 * threads (the first freeing thread alive or exited); a one-byte change to a free block's
 * link (an overflow from its neighbour, a use after free); realloc's own message. Each
 * case runs in a forked child that must die of SIGABRT with strata's report naming the
 * address. Built for both builds (prefixed: strata_* names, run under the sanitizers).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "strata_names.h"

#define KiB ((size_t)1 << 10)

/* No background thread: starting one allocates (glibc's pthread_create mallocs the new
 * thread's TLS vector), and a free of a large block is what first makes it wanted, so in a
 * child whose first frees these are, that allocation could take the freed pages back
 * between the two frees: memory reused, which no allocator can tell from a new block
 * (docs/hardening.md, "Limits"). The cases here are the ones with nothing in
 * between. */
const char *malloc_conf = "background_thread:false,tiny_class:true"; /* 8-byte blocks too */

static void say(const char *what, const void *p)
{
    printf("%s=%p\n", what, p);
    fflush(stdout);
}

/* The child must have aborted with "<strata>: FUNC(): invalid pointer ADDR". */
static void expect_invalid(const check_child_t *r, const char *func, const void *addr, const char *what)
{
    char needle[128];
    snprintf(needle, sizeof needle, "<strata>: %s(): invalid pointer %p", func, addr);
    CHECK(strstr(r->out, "RESULT: ignored") == NULL && strstr(r->err, needle) != NULL,
          "%s: no \"%s\"; %s; stdout:\n%s\nstderr:\n%s", what, needle, check_status_str(r->status), r->out,
          r->err);
    CHECK(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT, "%s: %s", what, check_status_str(r->status));
}

/* ---------------------------------------------------------------- interior frees */

enum { VIA_FREE, VIA_FREE_SIZED, VIA_SDALLOCX, VIA_REALLOC, VIA_DALLOCX, VIA_DALLOCX_NOCACHE, VIA_TCACHE,
       VIA_REMOTE, VIA_N };
static const char *const via_name[VIA_N] = {"free",    "free_sized", "sdallocx", "realloc",
                                            "dallocx", "dallocx",    "dallocx",  "free"};

typedef struct {
    size_t size, off;
    int via;
} interior_t;

static void *remote_free(void *p)
{
    free(p);
    return NULL;
}

static void interior_child(void *arg)
{
    const interior_t *c = arg;
    /* A few blocks of the class first, so the block is not alone in a fresh slab. */
    void *keep[4];
    for (int i = 0; i < 4; i++)
        keep[i] = malloc(c->size);
    unsigned tc = 0;
    size_t sz = sizeof tc;
    if (c->via == VIA_TCACHE && mallctl("tcache.create", &tc, &sz, NULL, 0) != 0)
        _exit(3);
    char *p = c->via == VIA_TCACHE ? mallocx(c->size, MALLOCX_TCACHE(tc)) : malloc(c->size);
    char *q = p + c->off;
    say("interior", q);
    switch (c->via) {
    case VIA_FREE: free(q); break;
    case VIA_FREE_SIZED: free_sized(q, c->size); break;
    case VIA_SDALLOCX: sdallocx(q, c->size, 0); break;
    case VIA_REALLOC: q = realloc(q, c->size * 2); break;
    case VIA_DALLOCX: dallocx(q, 0); break;
    case VIA_DALLOCX_NOCACHE: dallocx(q, MALLOCX_TCACHE_NONE); break;
    case VIA_TCACHE: dallocx(q, MALLOCX_TCACHE(tc)); break;
    case VIA_REMOTE: {
        pthread_t t;
        if (pthread_create(&t, NULL, remote_free, q) != 0 || pthread_join(t, NULL) != 0)
            _exit(3);
        break;
    }
    }
    /* Not reported: show whether the next allocations overlap the live block. */
    for (int i = 0; i < 4; i++) {
        char *n = malloc(c->size);
        if (n > p && n < p + c->size)
            printf("RESULT: exploited\n");
    }
    printf("RESULT: ignored\n");
    (void)keep;
}

static void check_interior(size_t size, size_t off, int via)
{
    static check_child_t r;
    interior_t c = {size, off, via};
    CHECK(check_child(interior_child, &c, 20, &r) == 0);
    char what[96];
    snprintf(what, sizeof what, "%s(malloc(%zu) + %zu)", via_name[via], size, off);
    CHECK(strstr(r.out, "interior=") != NULL, "%s: the child did not get there; %s; stderr:\n%s", what,
          check_status_str(r.status), r.err);
    void *q = (void *)strtoull(strstr(r.out, "interior=") + 9, NULL, 16);
    expect_invalid(&r, via_name[via], q, what);
}

/* The small classes (and the cached large ones up to 32 KiB) by size: nallocx's classes. */
static size_t next_class(size_t s) { return nallocx(s + 1, 0); }

static size_t natural_alignment(size_t size)
{
    size_t a = size & -size;
    return a > 4096 ? 4096 : a;
}

TEST(test_interior_free_of_every_class_and_offset_is_reported)
{
    /* Every class up to 32 KiB; offsets: 16, 64, the class's alignment and twice it, 4 KiB,
     * and the last multiple of 16, 64 and the alignment below the size. */
    unsigned n = 0;
    for (size_t s = 16; s <= 32 * KiB; s = next_class(s)) {
        size_t a = natural_alignment(s);
        size_t offs[] = {16, 64, a, 2 * a, 4096, (s - 1) / 16 * 16, (s - 1) / 64 * 64, (s - 1) / a * a};
        for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
            size_t o = offs[i];
            int dup = o == 0 || o >= s;
            for (size_t k = 0; k < i && !dup; k++)
                dup = offs[k] == o;
            if (dup)
                continue;
            check_interior(s, o, VIA_FREE);
            n++;
        }
    }
    printf("%u interior frees reported\n", n);
}

TEST(test_interior_free_is_reported_on_every_path)
{
    /* The cases: 12000 B (a 12 KiB slab class) + 4096, 48 + 16, and a cached
     * large block (20 KiB) + 4096 and a page extent (100 KiB) + 4096; every path. */
    static const size_t cases[][2] = {{12000, 4096}, {48, 16},  {20 * KiB, 4096}, {100 * KiB, 4096},
                                      {3072, 1024},  {8, 4},   {8, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int via = 0; via < VIA_N; via++)
            check_interior(cases[i][0], cases[i][1], via);
}

/* ---------------------------------------------------------------- double frees across threads */

typedef struct {
    size_t size;
    int alive;    /* the first freeing thread still runs at the second free */
    int warm;     /* it allocated before (it has a cache: the block goes into it) */
} xfree_t;

static pthread_mutex_t xf_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t xf_cv = PTHREAD_COND_INITIALIZER;
static int xf_stage;

static void xf_wait(int stage)
{
    pthread_mutex_lock(&xf_mu);
    while (xf_stage < stage)
        pthread_cond_wait(&xf_cv, &xf_mu);
    pthread_mutex_unlock(&xf_mu);
}

static void xf_set(int stage)
{
    pthread_mutex_lock(&xf_mu);
    xf_stage = stage;
    pthread_cond_broadcast(&xf_cv);
    pthread_mutex_unlock(&xf_mu);
}

static void *xf_first(void *arg)
{
    void **pp = arg;
    const xfree_t *c = pp[1];
    if (c->warm)
        free(malloc(c->size));
    free(pp[0]);
    xf_set(1);
    if (c->alive)
        xf_wait(2);
    return NULL;
}

static void xfree_child(void *arg)
{
    const xfree_t *c = arg;
    void *p = malloc(c->size);
    say("block", p); /* now: stdio's buffer must not take the freed pages before the second free */
    void *pp[2] = {p, (void *)c};
    pthread_t t;
    if (pthread_create(&t, NULL, xf_first, pp) != 0)
        _exit(3);
    xf_wait(1);
    if (!c->alive && pthread_join(t, NULL) != 0)
        _exit(3);
    free(p); /* the owner frees it again */
    void *a = malloc(c->size), *b = malloc(c->size);
    if (a == b)
        printf("RESULT: exploited\n");
    printf("RESULT: ignored\n");
    xf_set(2);
}

TEST(test_double_free_across_threads_is_reported_with_the_first_freer_alive_or_exited)
{
    /* (Not the cached large classes, 16-32 KiB: a large block's tag may be stale, so the
     * second free is reported only when the block is in the freeing thread's own cache.) */
    static const size_t sizes[] = {8, 64, 2048, 12 * KiB, 1 << 20, 16 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int alive = 0; alive < 2; alive++)
            for (int warm = 0; warm < 2; warm++) {
                static check_child_t r;
                xfree_t c = {sizes[i], alive, warm};
                xf_stage = 0;
                CHECK(check_child(xfree_child, &c, 20, &r) == 0);
                char what[96];
                snprintf(what, sizeof what, "%zu B, first freer %s, %s", sizes[i], alive ? "alive" : "exited",
                         warm ? "with a cache" : "whose first call it was");
                CHECK(strstr(r.out, "block=") != NULL, "%s: %s; stderr:\n%s", what, check_status_str(r.status),
                      r.err);
                expect_invalid(&r, "free", (void *)strtoull(strstr(r.out, "block=") + 6, NULL, 16), what);
            }
}

/* ---------------------------------------------------------------- the 8-byte class */

/* 8-byte blocks have no second word for the free tag: their double frees are the slab
 * bitmap's to tell. Each way a second free can meet the block: at once, after other blocks
 * of the class went back around it (and a malloc of the class), on every freeing call. */
typedef struct {
    int when; /* 0: at once; 1: after 300 other 8-byte frees and mallocs; 2: after the thread's
               * cache went back to the slabs (malloc_trim) */
    int via;  /* 0 free, 1 free_sized, 2 sdallocx, 3 dallocx, 4 dallocx(TCACHE_NONE) */
} tiny_t;
static const char *const tiny_func[] = {"free", "free_sized", "sdallocx", "dallocx", "dallocx"};

static void tiny_free(void *p, int via)
{
    switch (via) {
    case 0: free(p); break;
    case 1: free_sized(p, 8); break;
    case 2: sdallocx(p, 5, 0); break;
    case 3: dallocx(p, 0); break;
    default: dallocx(p, MALLOCX_TCACHE_NONE); break;
    }
}

static void tiny_child(void *arg)
{
    const tiny_t *c = arg;
    enum { N = 300 };
    static void *other[N];
    for (int i = 0; i < N; i++)
        other[i] = malloc(1 + i % 8);
    void *p = malloc(4);
    say("block", p);
    tiny_free(p, c->via);
    if (c->when == 2)
        malloc_trim(0); /* the first free's block leaves this thread's cache for its slab */
    if (c->when == 1) {
        for (int i = 0; i < N; i += 2)
            free(other[i]);
        for (int i = 0; i < N; i += 2)
            other[i] = malloc(8); /* p's slab hands blocks out again: p stays free */
        for (int i = 0; i < N; i++)
            if (other[i] == p)
                printf("RESULT: reused\n"); /* a new block at p: a second free is no misuse */
    }
    tiny_free(p, c->via);
    void *a = malloc(8), *b = malloc(8);
    if (a == b)
        printf("RESULT: exploited\n");
    printf("RESULT: ignored\n");
}

TEST(test_double_free_of_an_8_byte_block_is_reported_on_every_path)
{
    for (int when = 0; when < 3; when++)
        for (int via = 0; via < 5; via++) {
            static check_child_t r;
            tiny_t c = {when, via};
            CHECK(check_child(tiny_child, &c, 20, &r) == 0);
            char what[96];
            snprintf(what, sizeof what, "8-byte block freed twice by %s, %s", tiny_func[via],
                     when == 2   ? "its cache flushed between"
                     : when == 1 ? "other blocks freed and reused between"
                                 : "at once");
            CHECK(strstr(r.out, "block=") != NULL, "%s: %s; stderr:\n%s", what, check_status_str(r.status),
                  r.err);
            if (strstr(r.out, "RESULT: reused"))
                continue;
            expect_invalid(&r, tiny_func[via], (void *)strtoull(strstr(r.out, "block=") + 6, NULL, 16), what);
        }
}

/* ---------------------------------------------------------------- one-byte link changes */

typedef struct {
    size_t size;
    int form;          /* 0: overflow from the lower neighbour, 1: use after free */
    unsigned char byte; /* the byte written (form 0), or the change (form 1: 0 zero, 1 +1, 2 -1) */
} link_t;

static void link_child(void *arg)
{
    const link_t *c = arg;
    enum { N = 16 };
    char *blk[N];
    for (int i = 0; i < N; i++)
        blk[i] = malloc(c->size);
    /* Two neighbours: victim right after the block that overflows. */
    int v = -1;
    for (int i = 0; i < N && v < 0; i++)
        for (int k = 0; k < N; k++)
            if (blk[k] == blk[i] + c->size) {
                v = k;
                break;
            }
    if (v < 0) {
        printf("RESULT: no neighbours\n");
        return;
    }
    char *victim = blk[v];
    char *below = victim - c->size;
    for (int i = 0; i < N; i++)
        if (blk[i] != victim && blk[i] != below)
            free(blk[i]);
    free(victim); /* the head of the cache: its link names the next free block */
    volatile unsigned char *b0 = c->form == 0 ? (unsigned char *)below + c->size : (unsigned char *)victim;
    if (c->form == 0 || c->byte == 0)
        *b0 = c->form == 0 ? c->byte : 0;
    else
        *b0 = (unsigned char)(*b0 + (c->byte == 1 ? 1 : -1));
    say("victim", victim);
    /* Every block these mallocs return must be one of ours, at a region start. */
    for (int i = 0; i < N; i++) {
        char *p = malloc(c->size);
        int ours = 0;
        for (int k = 0; k < N; k++)
            ours |= p == blk[k];
        printf("got=%p%s\n", (void *)p, ours ? "" : " BAD");
        fflush(stdout);
        if (!ours) {
            printf("RESULT: exploited\n");
            return;
        }
    }
    printf("RESULT: ignored\n");
}

TEST(test_one_byte_change_to_a_free_link_is_caught_before_a_bad_pointer_is_returned)
{
    static const size_t sizes[] = {16, 48, 64, 96, 256, 1024, 2048, 3072};
    static const link_t forms[] = {{0, 0, 0x00}, {0, 0, 0x41}, {0, 0, 0xff}, {0, 1, 0}, {0, 1, 1}, {0, 1, 2}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
            static check_child_t r;
            link_t c = forms[f];
            c.size = sizes[i];
            CHECK(check_child(link_child, &c, 20, &r) == 0);
            char what[96];
            snprintf(what, sizeof what, "%zu B, %s, byte %u", c.size, c.form ? "use after free" : "overflow",
                     c.byte);
            if (strstr(r.out, "RESULT: no neighbours"))
                continue;
            CHECK(strstr(r.out, " BAD") == NULL && strstr(r.out, "RESULT: ignored") == NULL,
                  "%s: a bad pointer was returned or nothing was caught; stdout:\n%s\nstderr:\n%s", what, r.out,
                  r.err);
            CHECK(strstr(r.err, "<strata>: heap corruption detected at 0x") != NULL && WIFSIGNALED(r.status) &&
                      WTERMSIG(r.status) == SIGABRT,
                  "%s: %s; stderr:\n%s", what, check_status_str(r.status), r.err);
        }
}

/* ---------------------------------------------------------------- messages */

static void realloc_freed_child(void *arg)
{
    size_t size = *(const size_t *)arg;
    void *keep = malloc(size);
    void *p = malloc(size);
    say("block", p); /* before the free: stdio's buffer must not take the freed pages */
    free(p);
    void *q = realloc(p, size * 2);
    printf("RESULT: ignored %p\n", q);
    (void)keep;
}

TEST(test_realloc_of_a_freed_block_names_realloc)
{
    static const size_t sizes[] = {3, 8, 24, 100, 3000, 12 * KiB, 100 * KiB, 16 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        static check_child_t r;
        CHECK(check_child(realloc_freed_child, (void *)&sizes[i], 20, &r) == 0);
        char what[64];
        snprintf(what, sizeof what, "realloc of a freed %zu B block", sizes[i]);
        CHECK(strstr(r.out, "block=") != NULL, "%s: %s", what, r.err);
        expect_invalid(&r, "realloc", (void *)strtoull(strstr(r.out, "block=") + 6, NULL, 16), what);
    }
}

int main(int argc, char **argv) { return check_main(argc, argv); }

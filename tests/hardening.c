/*
 * hardening.c - misuse and hostile conditions: sized frees with a wrong size,
 * sampled guarded allocations (overflow, use after free, double free: reported with both
 * stacks), exhaustion under RLIMIT_AS and under a memory cgroup (NULL + ENOMEM, then
 * recovery), and thread storms (caches bounded and returned, RSS back afterwards).
 * Helpers named helper_* run in a re-executed child (with MALLOC_CONF set) and are not
 * ctest entries.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "strata_names.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define HELPER(name) TEST(name) /* registered, but not a ctest entry (see the header) */

/* C++ sized delete and nothrow new under their ABI names (libstrata exports them). */
void _ZdlPvm(void *, size_t);
void _ZdlPvmSt11align_val_t(void *, size_t, size_t);
void *_ZnwmRKSt9nothrow_t(size_t, const void *);

/* Runs this binary's helper in a child with extra environment entries. */
static void run_helper(const char *helper, const char *const env[], check_child_t *r)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    char *argv[] = {self, (char *)helper, NULL};
    CHECK(check_exec(argv, env, 60, r) == 0, "fork failed");
}

static void say_addr(const char *what, const void *p)
{
    char buf[96];
    int n = snprintf(buf, sizeof buf, "%s=%p\n", what, p);
    if (write(1, buf, (size_t)n) < 0)
        _exit(3);
}

static uintptr_t read_addr(const char *text, const char *what)
{
    char key[64];
    snprintf(key, sizeof key, "%s=", what);
    const char *a = strstr(text, key);
    CHECK(a != NULL, "child did not print %s", key);
    return (uintptr_t)strtoull(a + strlen(key), NULL, 16);
}

static unsigned long read_num(const char *text, const char *what)
{
    char key[64];
    snprintf(key, sizeof key, "%s=", what);
    const char *a = strstr(text, key);
    CHECK(a != NULL, "child did not print %s", key);
    return strtoul(a + strlen(key), NULL, 10);
}

/* ---------------------------------------------------------------- sized frees */

typedef struct {
    int kind;
    size_t alloc_size, free_size, align;
} sized_case_t;

static void sized_free_wrong(void *arg)
{
    const sized_case_t *c = arg;
    void *p = c->align ? aligned_alloc(c->align, c->alloc_size) : malloc(c->alloc_size);
    say_addr("addr", p);
    switch (c->kind) {
    case 0: free_sized(p, c->free_size); break;
    case 1: free_aligned_sized(p, c->align, c->free_size); break;
    case 2: sdallocx(p, c->free_size, 0); break;
    case 3: sdallocx(p, c->free_size, MALLOCX_TCACHE_NONE); break;
    case 4: _ZdlPvm(p, c->free_size); break;
    case 5: _ZdlPvmSt11align_val_t(p, c->free_size, c->align); break;
    case 6: free_aligned_sized(p, 16, c->free_size); break;
    }
    _exit(0); /* not reported: the test fails */
}

/* ---------------------------------------------------------------- encoded free-list links */
/* The classic attack on in-band free lists: overwrite the link of a freed block (an
 * overflow from its neighbour, or a write through a dangling pointer) with an address,
 * then malloc until the list hands that address out. */
static char link_target[4096] __attribute__((aligned(4096)));

static void *link_opaque(void *p)
{
    __asm__ volatile("" : "+r"(p));
    return p;
}

static void link_result(void *x)
{
    char *t = link_target;
    if ((char *)x >= t && (char *)x < t + sizeof link_target) {
        printf("RESULT: exploited\n");
        fflush(stdout);
        _exit(0);
    }
}

/* A freed block in the thread's own cache (size from arg). */
static void link_attack_local(void *arg)
{
    size_t size = *(const size_t *)arg;
    void *keep[8];
    for (int i = 0; i < 8; i++)
        keep[i] = malloc(size);
    char *a = malloc(size), *b = malloc(size);
    free(b);
    printf("addr=%p\n", (void *)b);
    fflush(stdout);
    *(void **)link_opaque(b) = link_target + 64;
    for (int i = 0; i < 4; i++)
        link_result(malloc(size));
    (void)a, (void)keep;
    printf("RESULT: ignored\n");
    fflush(stdout);
    _exit(0);
}

static void *link_remote_freer(void *arg)
{
    void **blocks = arg;
    for (int i = 0; i < 64; i++)
        free(blocks[i]);
    mallctl("thread.tcache.flush", NULL, NULL, NULL, 0); /* hand them back as a chain */
    return NULL;
}

/* Blocks freed by another thread and handed back to their arena as a remote chain; the
 * link of one of them is then forged before the owner's next fill takes the chain. */
static void link_attack_remote(void *arg)
{
    (void)arg;
    void *blocks[64];
    for (int i = 0; i < 64; i++)
        blocks[i] = malloc(64);
    mallctl("thread.tcache.flush", NULL, NULL, NULL, 0); /* the next malloc(64) fills */
    pthread_t t;
    if (pthread_create(&t, NULL, link_remote_freer, blocks) != 0 || pthread_join(t, NULL) != 0)
        _exit(3);
    char *victim = blocks[10];
    printf("addr=%p\n", (void *)victim);
    fflush(stdout);
    *(void **)link_opaque(victim) = link_target + 64;
    for (int i = 0; i < 256; i++)
        link_result(malloc(64));
    printf("RESULT: ignored\n");
    fflush(stdout);
    _exit(0);
}

static void check_link_attack(void (*fn)(void *), void *arg, const char *what)
{
    static check_child_t r;
    CHECK(check_child(fn, arg, 20, &r) == 0);
    CHECK(strstr(r.out, "RESULT: exploited") == NULL, "%s: malloc returned the attacker's address", what);
    /* The report names the link as it decoded (the malloc fast path moves a block's link
     * into the cache head and the next malloc checks it), and the size class. */
    (void)read_addr(r.out, "addr"); /* the child got as far as the forgery */
    const char *m = strstr(r.err, "<strata>: heap corruption detected at 0x");
    CHECK(m != NULL && strstr(m, " (free list of class ") != NULL, "%s: no report; %s; stdout:\n%s\nstderr:\n%s",
          what, check_status_str(r.status), r.out, r.err);
    CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "%s: %s", what, check_status_str(r.status));
}

TEST(test_forged_link_in_a_freed_small_block_is_detected_before_use)
{
    static const size_t size = 64;
    check_link_attack(link_attack_local, (void *)&size, "64-byte block");
}

TEST(test_forged_link_in_a_freed_medium_block_is_detected_before_use)
{
    static const size_t size = 2048;
    check_link_attack(link_attack_local, (void *)&size, "2 KiB block");
}

TEST(test_forged_link_in_a_remote_chain_is_detected_before_use)
{
    check_link_attack(link_attack_remote, NULL, "remote chain");
}

TEST(test_sized_free_with_a_wrong_size_aborts_with_the_address)
{
    static const char *const names[] = {"free_sized", "free_aligned_sized", "sdallocx", "sdallocx",
                                        "operator delete", "operator delete", "free_aligned_sized"};
    static const sized_case_t cases[] = {
        {0, 100, 16, 0},           /* small, fast path: 112-byte block freed as 16 */
        {0, 100, 200, 0},          /* small, larger class */
        {0, 5000, 100, 0},         /* size above the lookup table: slow path */
        {0, 100000, 40000, 0},     /* large block */
        {0, 40, 100000, 0},        /* small block, large size */
        {1, 256, 64, 64},          /* aligned */
        {6, 100, 100, 4096},       /* right size, wrong alignment (class 4096 vs 112) */
        {2, 64, 1000, 0},          /* sdallocx, no flags: free_sized's path */
        {3, 3000, 64, 0},          /* sdallocx with flags: slow path */
        {4, 48, 4000, 0},          /* sized operator delete */
        {5, 200, 20, 32},          /* sized aligned operator delete */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static check_child_t r;
        CHECK(check_child(sized_free_wrong, (void *)&cases[i], 20, &r) == 0);
        uintptr_t addr = read_addr(r.out, "addr");
        char needle[128];
        snprintf(needle, sizeof needle, "<strata>: %s(): size %zu", names[cases[i].kind],
                 cases[i].free_size);
        const char *m = strstr(r.err, needle);
        CHECK(m != NULL, "case %zu: no \"%s\" report; %s; stderr:\n%s", i, needle,
              check_status_str(r.status), r.err);
        const char *at = strstr(m, "block at 0x");
        CHECK(at && (uintptr_t)strtoull(at + 9, NULL, 16) == addr,
              "case %zu: report does not name 0x%jx: %s", i, (uintmax_t)addr, m);
        CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "case %zu: %s", i,
              check_status_str(r.status));
    }
}

TEST(test_sized_free_accepts_every_size_of_the_class)
{
    for (size_t s = 1; s <= 70000; s += s < 600 ? 1 : 97) {
        void *p = malloc(s);
        size_t u = malloc_usable_size(p);
        free_sized(p, s);
        p = malloc(s);
        free_sized(p, u);
        p = malloc(s);
        sdallocx(p, s, MALLOCX_TCACHE_NONE);
        if (s % 16 == 0) {
            p = aligned_alloc(64, s);
            free_aligned_sized(p, 64, s);
            p = malloc(s);
            _ZdlPvm(p, s);
        }
    }
    free_sized(NULL, 12345);
}

/* ---------------------------------------------------------------- guarded allocations */

__attribute__((noinline)) static char *guard_alloc_site(size_t n)
{
    char *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void guard_free_site(char *p)
{
    free(p);
    __asm__ volatile("" ::: "memory");
}

static void print_sites(char *p)
{
    say_addr("addr", p);
    say_addr("alloc_site", (void *)guard_alloc_site);
    say_addr("free_site", (void *)guard_free_site);
}

HELPER(helper_guard_overflow)
{
    char *p = guard_alloc_site(100);
    print_sites(p);
    size_t u = malloc_usable_size(p);
    memset(p, 1, u); /* the whole usable block is fine */
    ((volatile char *)p)[u] = 1; /* one past its end: faults */
    _exit(0);
}

HELPER(helper_guard_use_after_free)
{
    char *p = guard_alloc_site(48);
    print_sites(p);
    guard_free_site(p);
    ((volatile char *)p)[8] = 1;
    _exit(0);
}

HELPER(helper_guard_double_free)
{
    char *p = guard_alloc_site(300);
    print_sites(p);
    guard_free_site(p);
    guard_free_site(p);
    _exit(0);
}

/* Some frame of stack `which` ("allocated" or "freed") returns into fn (within 64 bytes). */
static bool stack_has(const char *err, const char *which, uintptr_t fn)
{
    char head[32];
    snprintf(head, sizeof head, "<strata>: %s by thread", which);
    const char *s = strstr(err, head);
    if (!s)
        return false;
    s = strchr(s, '\n');
    while (s && strncmp(s + 1, "<strata>:   #", 13) == 0) {
        const char *x = strstr(s + 1, " 0x");
        uintptr_t pc = x ? (uintptr_t)strtoull(x + 1, NULL, 16) : 0;
        if (pc > fn && pc - fn < 64)
            return true;
        s = strchr(s + 1, '\n');
    }
    return false;
}

static void expect_guard_report(const char *helper, const char *kind, int sig, bool freed)
{
    static check_child_t r;
    const char *env[] = {"MALLOC_CONF=guard_sample_interval:1", NULL};
    run_helper(helper, env, &r);
    CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == sig, "%s: child ended with %s; stderr:\n%s",
          helper, check_status_str(r.status), r.err);
    uintptr_t addr = read_addr(r.out, "addr");
    char needle[160];
    snprintf(needle, sizeof needle, "<strata>: guarded allocation: %s at ", kind);
    const char *m = strstr(r.err, needle);
    CHECK(m != NULL, "%s: no \"%s\"; stderr:\n%s", helper, needle, r.err);
    const char *b = strstr(m, "block at 0x");
    CHECK(b && (uintptr_t)strtoull(b + 9, NULL, 16) == addr, "%s: report names another block: %s",
          helper, m);
    CHECK(stack_has(r.err, "allocated", read_addr(r.out, "alloc_site")),
          "%s: the allocation stack does not show guard_alloc_site; stderr:\n%s", helper, r.err);
    if (freed)
        CHECK(stack_has(r.err, "freed", read_addr(r.out, "free_site")),
              "%s: the free stack does not show guard_free_site; stderr:\n%s", helper, r.err);
}

TEST(test_guarded_overflow_faults_with_the_allocation_stack)
{
    expect_guard_report("helper_guard_overflow", "heap-buffer-overflow", SIGSEGV, false);
}

TEST(test_guarded_use_after_free_faults_with_both_stacks)
{
    expect_guard_report("helper_guard_use_after_free", "use-after-free", SIGSEGV, true);
}

TEST(test_guarded_double_free_is_reported_with_both_stacks)
{
    expect_guard_report("helper_guard_double_free", "double free", SIGABRT, true);
}

static sigjmp_buf segv_jump;
static void program_segv_handler(int sig)
{
    (void)sig;
    siglongjmp(segv_jump, 1);
}

/* A program that handles SIGSEGV itself (installed before strata's handler) still gets
 * the faults outside the guard pool, more than once; a guarded overflow is still ours. */
HELPER(helper_guard_chains_the_program_handler)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = program_segv_handler;
    sigaction(SIGSEGV, &sa, NULL);
    char *p = guard_alloc_site(64); /* creates the pool: strata's handler goes in */
    for (int i = 0; i < 3; i++) {
        if (sigsetjmp(segv_jump, 1) == 0)
            *(volatile int *)check_opaque(16) = 1;
        else
            printf("recovered=%d\n", i);
    }
    fflush(stdout);
    print_sites(p);
    ((volatile char *)p)[malloc_usable_size(p)] = 1;
    _exit(0);
}

TEST(test_guard_handler_chains_to_the_programs_own_sigsegv_handler)
{
    static check_child_t r;
    const char *env[] = {"MALLOC_CONF=guard_sample_interval:1", NULL};
    run_helper("helper_guard_chains_the_program_handler", env, &r);
    CHECK(strstr(r.out, "recovered=2") != NULL, "the program's handler did not see 3 faults: %s; %s",
          r.out, r.err);
    CHECK(strstr(r.err, "heap-buffer-overflow") != NULL, "overflow not reported; stderr:\n%s", r.err);
}

/* A guarded block: its end is a page end and the next page faults (write(2) from it gives
 * EFAULT instead of a signal). */
static bool is_guarded(int fd, const void *p)
{
    uintptr_t end = (uintptr_t)p + malloc_usable_size((void *)p);
    if (end % (uintptr_t)sysconf(_SC_PAGESIZE))
        return false;
    return write(fd, (const void *)end, 1) < 0 && errno == EFAULT;
}

HELPER(helper_guard_count)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    enum { N = 20000 };
    static void *p[N];
    unsigned guarded = 0;
    for (int i = 0; i < N; i++) {
        p[i] = malloc(16 + (size_t)(i % 64) * 16);
        char junk[64];
        while (read(fds[0], junk, sizeof junk) > 0) {
        }
        guarded += is_guarded(fds[1], p[i]);
    }
    /* Freed ones are quarantined: their pages fault. */
    for (int i = 0; i < N; i++)
        free(p[i]);
    printf("guarded=%u\n", guarded);
    printf("ctl_interval=%zu\n", CTL_READ("opt.guard_sample_interval", size_t));
    printf("ctl_allocs=%ju\n", (uintmax_t)CTL_READ("stats.guard.allocs", uint64_t));
    size_t v = 5;
    CHECK(mallctl("opt.guard_sample_interval", NULL, NULL, &v, sizeof v) == EPERM);
    size_t mib[3], miblen = 3; /* stats.guard.allocs: one component per name part */
    uint64_t n = 0;
    size_t len = sizeof n;
    CHECK(mallctlnametomib("stats.guard.allocs", mib, &miblen) == 0 && miblen == 3);
    CHECK(mallctlbymib(mib, miblen, &n, &len, NULL, 0) == 0 && n >= guarded);
}

TEST(test_guard_samples_one_in_n_and_is_off_by_default)
{
    static check_child_t r;
    const char *on[] = {"MALLOC_CONF=guard_sample_interval:200", NULL};
    run_helper("helper_guard_count", on, &r);
    CHECK_CHILD_EXITED_0(&r);
    unsigned g = (unsigned)read_num(r.out, "guarded");
    /* 20,000 fresh regions at 1 in 200: about 100 (every fill of every class counts). */
    CHECK(g >= 50 && g <= 150, "guard_sample_interval:200 guarded %u of 20000 blocks", g);
    CHECK(read_num(r.out, "ctl_interval") == 200);
    CHECK(read_num(r.out, "ctl_allocs") >= g, "stats.guard.allocs %lu < %u", read_num(r.out, "ctl_allocs"), g);
    const char *off[] = {"MALLOC_CONF", NULL};
    run_helper("helper_guard_count", off, &r);
    CHECK_CHILD_EXITED_0(&r);
    g = (unsigned)read_num(r.out, "guarded");
    CHECK(g == 0, "%u blocks guarded with the option off", g);
    CHECK(read_num(r.out, "ctl_allocs") == 0 && read_num(r.out, "ctl_interval") == 0);
}

TEST(test_guard_sample_interval_rejects_bad_values_naming_the_key)
{
    static const char *const bad[] = {"x", "-1", "10k", "", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        static check_child_t r;
        char conf[128];
        snprintf(conf, sizeof conf, "MALLOC_CONF=guard_sample_interval:%s", bad[i]);
        const char *env[] = {conf, NULL};
        run_helper("helper_guard_count", env, &r);
        CHECK(strstr(r.err, "for \"guard_sample_interval\" in MALLOC_CONF (accepted: an integer") != NULL,
              "value \"%s\": no message naming the option; stderr:\n%s", bad[i], r.err);
    }
}

/* ---------------------------------------------------------------- exhaustion */

/* Every allocating call, one after another, until each has failed at least once; each
 * failure must be NULL (or ENOMEM from posix_memalign) with errno ENOMEM. */
static size_t exhaust_all_calls(void **blk, size_t max)
{
    size_t n = 0;
    int failed = 0;
    for (int round = 0; round < 100000 && failed != 0x3fff; round++) {
        for (int k = 0; k < 14; k++) {
            size_t sz = (round & 1) ? 3 * MiB : (size_t)(64 << (round % 12));
            void *p = NULL;
            int rc = 0;
            errno = 0;
            switch (k) {
            case 0: p = malloc(sz); break;
            case 1: p = calloc(1, sz); break;
            case 2: p = realloc(NULL, sz); break;
            case 3: p = reallocarray(NULL, 1, sz); break;
            case 4: rc = posix_memalign(&p, 64, sz); if (rc) { CHECK(rc == ENOMEM && p == NULL); errno = ENOMEM; } break;
            case 5: p = aligned_alloc(4096, sz); break;
            case 6: p = memalign(2 * MiB, sz); break;
            case 7: p = valloc(sz); break;
            case 8: p = pvalloc(sz); break;
            case 9: p = mallocx(sz, 0); if (!p) errno = ENOMEM; break;
            case 10: p = mallocx(sz, MALLOCX_ZERO | MALLOCX_LG_ALIGN(12)); if (!p) errno = ENOMEM; break;
            case 11: p = _ZnwmRKSt9nothrow_t(sz, NULL); if (!p) errno = ENOMEM; break;
            case 12: sz = sz / 64 + 1; p = malloc(sz); break; /* small classes too */
            case 13: {
                void *q = malloc(64);
                if (!q) { errno = ENOMEM; break; }
                p = realloc(q, sz);
                if (!p) { CHECK(errno == ENOMEM); free(q); }
                break;
            }
            }
            if (p == NULL) {
                CHECK(errno == ENOMEM, "call %d (size %zu) failed with errno %d", k, sz, errno);
                failed |= 1 << k;
                continue;
            }
            memset(p, 7, sz < 8192 ? sz : 8192);
            CHECK(n < max, "too many blocks fit");
            blk[n++] = p;
        }
    }
    CHECK(failed == 0x3fff, "not every call failed (mask 0x%x) after %zu blocks", failed, n);
    return n;
}

static void release_and_retry(void **blk, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(blk[i]);
    malloc_trim(0);
    for (size_t i = 0; i < 32; i++) {
        blk[i] = malloc(MiB);
        CHECK(blk[i] != NULL, "malloc(1 MiB) #%zu failed after everything was freed", i);
        memset(blk[i], 1, MiB);
        void *s = malloc(100);
        CHECK(s != NULL);
        free(s);
    }
    for (size_t i = 0; i < 32; i++)
        free(blk[i]);
}

static void *thread_alloc(void *arg)
{
    (void)arg;
    void *p = malloc(200);
    free(p);
    return p;
}

static void exhaust_rlimit(void *arg)
{
    (void)arg;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long vm_pages = 0;
    CHECK(f && fscanf(f, "%lu", &vm_pages) == 1);
    fclose(f);
    struct rlimit rl = {(rlim_t)vm_pages * (rlim_t)sysconf(_SC_PAGESIZE) + 192 * MiB, 0};
    rl.rlim_max = rl.rlim_cur;
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
    static void *blk[1 << 17];
    size_t n = exhaust_all_calls(blk, sizeof blk / sizeof blk[0]);
    /* A new thread while exhausted: creating it may fail, allocating in it may fail, but
     * nothing crashes or hangs. */
    pthread_t t;
    if (pthread_create(&t, NULL, thread_alloc, NULL) == 0)
        pthread_join(t, NULL);
    release_and_retry(blk, n);
    printf("%zu blocks before every call failed\n", n);
}

TEST(test_every_allocating_call_fails_cleanly_under_rlimit_as_and_recovers)
{
    static check_child_t r;
    CHECK(check_child(exhaust_rlimit, NULL, 120, &r) == 0);
    CHECK_CHILD_EXITED_0(&r);
    fputs(r.out, stdout);
}

static void *fill_and_free_80_mib(void *arg)
{
    (void)arg;
    void *b[80];
    for (int i = 0; i < 80; i++) {
        b[i] = malloc(MiB);
        CHECK(b[i] != NULL, "block %d of 80 MiB in a fresh 128 MiB group", i);
        memset(b[i], 1, MiB);
    }
    for (int i = 0; i < 80; i++)
        free(b[i]);
    return NULL;
}

HELPER(helper_exhaust_in_cgroup)
{
    /* Another thread's arena keeps the pages it freed resident (dirty, up to its cap of
     * 32 MiB): this thread's 100 MiB, which fits the budget (112 MiB) only without them,
     * must be served by purging them, not refused. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fill_and_free_80_mib, NULL) == 0);
    pthread_join(t, NULL);
    CHECK(mallinfo2().keepcost >= 8 * MiB, "the other arena kept only %zu KiB dirty",
          mallinfo2().keepcost / KiB);
    void *mine[100];
    for (int i = 0; i < 100; i++) {
        mine[i] = malloc(MiB);
        CHECK(mine[i] != NULL, "block %d of 100 MiB refused while another arena held %zu KiB of dirty pages",
              i, mallinfo2().keepcost / KiB);
        memset(mine[i], 2, MiB);
    }
    for (int i = 0; i < 100; i++)
        free(mine[i]);
    static void *blk[1 << 17];
    size_t n = exhaust_all_calls(blk, sizeof blk / sizeof blk[0]);
    release_and_retry(blk, n);
    printf("%zu blocks before every call failed\n", n);
}

TEST(test_every_allocating_call_fails_cleanly_under_a_memory_cgroup_and_recovers)
{
    char dir[128];
    snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory/strata-test-%d", (int)getpid());
    if (mkdir(dir, 0755) != 0) {
        printf("SKIP: cannot create a cgroup v1 memory group (%s: %s)\n", dir, strerror(errno));
        exit(77);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
    FILE *f = fopen(path, "w");
    bool ok = f && fprintf(f, "%zu\n", 128 * MiB) > 0;
    if (f)
        ok &= fclose(f) == 0;
    if (!ok) {
        rmdir(dir);
        printf("SKIP: cannot set %s\n", path);
        exit(77);
    }
    /* The child joins the group before exec, so strata reads the limit at start. */
    static check_child_t r;
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    self[len] = '\0';
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        snprintf(path, sizeof path, "%s/cgroup.procs", dir);
        FILE *g = fopen(path, "w");
        if (!g || fprintf(g, "%d\n", (int)getpid()) < 0 || fclose(g) != 0)
            _exit(70);
        char *argv[] = {self, "helper_exhaust_in_cgroup", NULL};
        unsetenv("MALLOC_CONF");
        alarm(120);
        execv(self, argv);
        _exit(71);
    }
    while (waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
    }
    rmdir(dir);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
          "child under a 128 MiB memory cgroup ended with %s", check_status_str(r.status));
}

/* Large blocks that cannot grow in place move by mremap (onto a reserved destination):
 * contents kept, the moved block is known to the page map (usable size, free). */
TEST(test_large_realloc_that_moves_keeps_contents_and_ownership)
{
    for (int round = 0; round < 4; round++) {
        size_t n = (size_t)(6 + round) * MiB;
        uint32_t *p = malloc(n);
        void *blocker = malloc(n); /* likely right after p: in-place growth fails */
        CHECK(p && blocker);
        for (size_t i = 0; i < n / 4; i += 1024)
            p[i] = (uint32_t)(i * 2654435761u);
        size_t m = n * 5;
        uint32_t *q = realloc(p, m);
        CHECK(q != NULL);
        for (size_t i = 0; i < n / 4; i += 1024)
            CHECK(q[i] == (uint32_t)(i * 2654435761u), "word %zu lost in the move", i);
        CHECK(malloc_usable_size(q) >= m);
        memset((char *)q + n, 1, m - n);
        free(q);
        free(blocker);
    }
}

/* commit_limit:64M: the commit budget without a cgroup (it runs everywhere). */
HELPER(helper_commit_limit)
{
    static void *blk[256];
    size_t n = 0;
    for (;;) {
        CHECK(n < 256, "256 MiB allocated under commit_limit:64M");
        errno = 0;
        void *p = malloc(MiB);
        if (p == NULL) {
            CHECK(errno == ENOMEM, "errno %d", errno);
            break;
        }
        memset(p, 1, MiB);
        blk[n++] = p;
    }
    void *m = NULL;
    CHECK(posix_memalign(&m, 2 * MiB, 8 * MiB) == ENOMEM && m == NULL);
    printf("blocks=%zu\n", n);
    for (size_t i = 0; i < n; i++)
        free(blk[i]);
    for (size_t i = 0; i < n; i++) {
        blk[i] = malloc(MiB);
        CHECK(blk[i] != NULL, "block %zu refused after everything was freed", i);
    }
}

TEST(test_commit_limit_option_caps_committed_memory_and_recovers)
{
    static check_child_t r;
    const char *env[] = {"MALLOC_CONF=commit_limit:64M", NULL};
    run_helper("helper_commit_limit", env, &r);
    CHECK_CHILD_EXITED_0(&r);
    unsigned long n = read_num(r.out, "blocks");
    CHECK(n >= 48 && n <= 64, "%lu blocks of 1 MiB under commit_limit:64M", n);
    static const char *const bad[] = {"64", "x", "-1", "auto1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char conf[96];
        snprintf(conf, sizeof conf, "MALLOC_CONF=commit_limit:%s", bad[i]);
        const char *e2[] = {conf, NULL};
        run_helper("helper_guard_count", e2, &r);
        CHECK(strstr(r.err, "for \"commit_limit\" in MALLOC_CONF (accepted: auto") != NULL,
              "value \"%s\": no message naming the option; stderr:\n%s", bad[i], r.err);
    }
}

/* ---------------------------------------------------------------- thread storms */

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    CHECK(f && fscanf(f, "%lu %lu", &size, &res) == 2);
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

static pthread_barrier_t storm_barrier;
static _Atomic(void *) storm_handoff[4096];

/* Each thread allocates and frees blocks of 8 small classes (its cache fills), frees a
 * block another thread allocated (cross-thread), then waits for the whole wave to be
 * alive at once before it exits. */
static void *storm_thread(void *arg)
{
    size_t id = (size_t)arg;
    void *p[64];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 64; i++)
            p[i] = malloc(16 + (size_t)(i % 8) * 48);
        for (int i = 0; i < 64; i++)
            free(p[i]);
    }
    void *mine = malloc(512);
    void *theirs = atomic_exchange(&storm_handoff[id % 4096], mine);
    free(theirs);
    pthread_barrier_wait(&storm_barrier);
    pthread_barrier_wait(&storm_barrier);
    return NULL;
}

HELPER(helper_thread_storm)
{
    const size_t wave = 200;
    const long waves = check_scaled(100); /* 20,000 threads at scale 1 */
    CHECK(pthread_barrier_init(&storm_barrier, NULL, (unsigned)wave + 1) == 0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * KiB);
    /* What caches hold stays under the global cap (opt.tcache_total_max, 2 MiB here: the
     * test below sets it) plus what each live thread freed into its cache since its last
     * fill (64 blocks of at most 400 bytes here); over the cap a fill brings only the
     * region asked for. The 4096 handoff slots hold 512-byte blocks the program owns. */
    size_t cap = 0, cap_len = sizeof cap;
    CHECK(mallctl("opt.tcache_total_max", &cap, &cap_len, NULL, 0) == 0 && cap > 0);
    const size_t bound = cap + wave * 32 * KiB + 4096 * 512;
    malloc_trim(0); /* the main thread's cache counts as allocated: empty it first */
    size_t base_alloc = stat_read("stats.allocated");
    size_t rss0 = 0, worst = 0;
    for (long w = 0; w < waves; w++) {
        pthread_t t[200];
        for (size_t i = 0; i < wave; i++)
            CHECK(pthread_create(&t[i], &attr, storm_thread, (void *)(w * wave + i)) == 0,
                  "pthread_create failed in wave %ld", w);
        pthread_barrier_wait(&storm_barrier); /* the whole wave is alive, caches full */
        size_t held = stat_read("stats.allocated") - base_alloc;
        if (held > worst)
            worst = held;
        CHECK(held <= bound, "wave %ld: %zu KiB held with %zu threads alive (bound %zu KiB)", w,
              held / KiB, wave, bound / KiB);
        pthread_barrier_wait(&storm_barrier);
        for (size_t i = 0; i < wave; i++)
            pthread_join(t[i], NULL);
        if (w == 0) {
            malloc_trim(0);
            rss0 = rss_bytes();
        }
    }
    for (size_t i = 0; i < 4096; i++)
        free(atomic_exchange(&storm_handoff[i], NULL));
    malloc_trim(0);
    size_t after = stat_read("stats.allocated") - base_alloc;
    size_t rss1 = rss_bytes();
    printf("%ld waves of %zu threads: at most %zu KiB in caches with a wave alive; after: %zu KiB "
           "allocated, RSS %zu -> %zu KiB\n", waves, wave, worst / KiB, after / KiB, rss0 / KiB,
           rss1 / KiB);
    /* Exited threads' caches went back: what stays allocated is what the program holds. */
    CHECK(after <= 64 * KiB, "%zu KiB still allocated after every thread exited", after / KiB);
    CHECK(rss1 <= rss0 + 16 * MiB, "RSS grew from %zu to %zu KiB over the storm", rss0 / KiB,
          rss1 / KiB);
    pthread_barrier_destroy(&storm_barrier);
}

TEST(test_thread_storms_keep_caches_bounded_and_return_memory)
{
    static check_child_t r;
    const char *env[] = {"MALLOC_CONF=tcache_total_max:2M", NULL};
    run_helper("helper_thread_storm", env, &r);
    printf("%s", r.out);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "%s; stdout:\n%s\nstderr:\n%s",
          check_status_str(r.status), r.out, r.err);
}

/* Without arguments: every test_*, never the helpers (they are meant for a child). */
int main(int argc, char **argv)
{
    if (argc > 1)
        return check_main(argc, argv);
    static char *all[512];
    int n = 0;
    all[n++] = argv[0];
    for (int i = 0; i < check_registry.n; i++)
        if (strncmp(check_registry.name[i], "test_", 5) == 0)
            all[n++] = (char *)check_registry.name[i];
    return check_main(n, all);
}

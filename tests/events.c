/*
 * events.c - memory that follows the live heap with no tuning, and a program that hears
 * about it: idle return with the default options, no wake-ups once nothing is dirty,
 * background_thread:false keeping a process single-threaded, the soft and hard limits
 * (options, mallctls, statistics), and strata_event_register's callbacks.
 */
#define _GNU_SOURCE
#include "strata_names.h"
#include "mallctl_read.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>

#define MiB ((size_t)1 << 20)
#define HELPER(name) TEST(name) /* registered, but not a ctest entry */

static void run_helper(const char *helper, const char *const env[], check_child_t *r)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    char *argv[] = {self, (char *)helper, NULL};
    CHECK(check_exec(argv, env, 60, r) == 0, "fork failed");
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Resident set from /proc/self/statm with raw read(2): no allocator call. */
static size_t rss_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    CHECK(n > 0);
    buf[n] = '\0';
    const char *p = strchr(buf, ' ');
    CHECK(p != NULL);
    return (size_t)strtoull(p + 1, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

static void write_size(const char *name, size_t v)
{
    int err = mallctl(name, NULL, NULL, &v, sizeof v);
    CHECK(err == 0, "mallctl(%s, %zu) = %d", name, v, err);
}

static size_t resident(void)
{
    uint64_t e = 1;
    size_t sz = sizeof e;
    CHECK(mallctl("epoch", &e, &sz, &e, sz) == 0);
    return read_size("stats.resident");
}

/* A burst like a request spike: half small blocks, half large ones, touched, all freed. */
static void burst(size_t total)
{
    size_t nsmall = total / 2 / 256, nlarge = total / 2 / (256 * 1024);
    void **small = malloc(nsmall * sizeof(void *)), **large = malloc(nlarge * sizeof(void *));
    CHECK(small && large);
    for (size_t i = 0; i < nsmall; i++) {
        CHECK((small[i] = malloc(256)) != NULL);
        memset(small[i], 1, 256);
    }
    for (size_t i = 0; i < nlarge; i++) {
        CHECK((large[i] = malloc(256 * 1024)) != NULL);
        memset(large[i], 1, 256 * 1024);
    }
    for (size_t i = 0; i < nsmall; i++)
        free(small[i]);
    for (size_t i = 0; i < nlarge; i++)
        free(large[i]);
    free(small);
    free(large);
}

/* The thread ids of /proc/self/task, read with getdents64: opendir would allocate, and
 * the measurement must not make pages dirty itself. */
static int task_ids(int *ids, int cap)
{
    static char buf[16384];
    int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY), n = 0;
    CHECK(fd >= 0);
    long len;
    while ((len = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < len;) {
            struct {
                uint64_t ino;
                int64_t off;
                unsigned short reclen;
                unsigned char type;
                char name[];
            } *d = (void *)(buf + off);
            if (d->name[0] != '.' && n < cap)
                ids[n++] = atoi(d->name);
            off += d->reclen;
        }
    }
    close(fd);
    return n;
}

static int count_threads(void)
{
    int ids[256];
    return task_ids(ids, 256);
}

/* Sum of voluntary context switches (sleeps and wake-ups) of every thread but the
 * caller: what strata's own threads cost while the program is idle. */
static unsigned long others_switches(void)
{
    char path[96], buf[4096];
    unsigned long sum = 0;
    int ids[256], n = task_ids(ids, 256);
    pid_t self = (pid_t)syscall(SYS_gettid);
    for (int i = 0; i < n; i++) {
        if (ids[i] == self)
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%d/status", ids[i]);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        const char *v = strstr(buf, "\nvoluntary_ctxt_switches:");
        if (v)
            sum += strtoul(v + 25, NULL, 10);
    }
    return sum;
}

/* With no option but a short decay time (so the test is short): after a 256 MiB burst,
 * with no allocator call, RSS comes back within 8 MiB of where it was before the burst
 * by dirty_decay_ms + 1 s. */
HELPER(helper_idle_return_by_default)
{
    void *warm = malloc(100);
    free(warm);
    size_t before = rss_bytes();
    burst(256 * MiB);
    size_t peak_after_free = rss_bytes();
    uint64_t t0 = now_ms();
    size_t rss = peak_after_free;
    while (now_ms() - t0 < 1000 + 1000 && rss > before + 8 * MiB) {
        sleep_ms(50);
        rss = rss_bytes();
    }
    printf("before=%zu after_free=%zu end=%zu ms=%lu\n", before >> 10, peak_after_free >> 10, rss >> 10,
           (unsigned long)(now_ms() - t0));
    CHECK(rss <= before + 8 * MiB, "RSS %zu KiB, %zu KiB before the burst, 2 s after its frees",
          rss >> 10, before >> 10);
    /* Idle cost: once nothing is dirty, strata's threads sleep without a timeout. */
    sleep_ms(1200); /* the decay clock's last step passes */
    uint64_t runs = read_u64("stats.background_thread.num_runs");
    unsigned long sw = others_switches();
    sleep_ms(1500);
    unsigned long sw2 = others_switches();
    CHECK_EQ(read_u64("stats.background_thread.num_runs"), runs);
    CHECK(sw2 == sw, "strata's threads woke %lu times in 1.5 s idle", sw2 - sw);
    printf("idle_wakeups=%lu\n", sw2 - sw);
}

/* Override build only: a sanitizer's runtime has threads and shadow memory of its own. */
OVERRIDE_TEST(test_idle_process_returns_memory_by_default_and_then_never_wakes)
{
    static check_child_t r;
    const char *env[] = {"MALLOC_CONF=dirty_decay_ms:1000", NULL};
    run_helper("helper_idle_return_by_default", env, &r);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "%s\nstdout: %s\nstderr: %s", check_status_str(r.status),
          r.out, r.err);
}

HELPER(helper_single_threaded)
{
    burst(64 * MiB);
    for (int i = 0; i < 20; i++) {
        void *p = malloc(1 << 20);
        free(p);
        sleep_ms(10);
    }
    printf("threads=%d\n", count_threads());
    CHECK_EQ(count_threads(), 1);
    CHECK_EQ(read_size("stats.background_thread.num_threads"), 0);
}

OVERRIDE_TEST(test_background_thread_false_keeps_the_process_single_threaded)
{
    static check_child_t r;
    const char *env[] = {"MALLOC_CONF=background_thread:false,dirty_decay_ms:100", NULL};
    run_helper("helper_single_threaded", env, &r);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "%s\nstdout: %s\nstderr: %s", check_status_str(r.status),
          r.out, r.err);
}

/* ---------------------------------------------------------------- the hard limit */
static void hard_limit_allocs(void)
{
    static void *blk[1024];
    size_t n = 0;
    for (;;) {
        CHECK(n < 1024, "1 GiB allocated under a 64 MiB hard limit");
        errno = 0;
        void *p = malloc(MiB);
        if (p == NULL) {
            CHECK(errno == ENOMEM, "errno %d", errno);
            break;
        }
        memset(p, 1, MiB);
        blk[n++] = p;
    }
    CHECK(n >= 40 && n <= 72, "%zu blocks of 1 MiB under a 64 MiB hard limit", n);
    CHECK(read_u64("stats.hard_limit_refusals") > 0);
    /* Small allocations keep working for a margin: code can unwind, log, build an error. */
    static void *small[2000];
    for (int i = 0; i < 2000; i++) {
        small[i] = malloc(200);
        CHECK(small[i] != NULL, "small allocation %d refused at the hard limit", i);
        memset(small[i], 2, 200);
    }
    for (int i = 0; i < 2000; i++)
        free(small[i]);
    for (size_t i = 0; i < n; i++)
        free(blk[i]);
    for (size_t i = 0; i + 4 < n; i++) {
        blk[i] = malloc(MiB);
        CHECK(blk[i] != NULL, "block %zu refused after everything was freed", i);
    }
    for (size_t i = 0; i + 4 < n; i++)
        free(blk[i]);
}

HELPER(helper_hard_limit_option)
{
    CHECK_EQ(read_size("opt.hard_limit"), 64 * MiB);
    CHECK_EQ(read_size("hard_limit"), 64 * MiB);
    hard_limit_allocs();
}

TEST(test_hard_limit_option_returns_enomem_and_leaves_a_margin_for_small_blocks)
{
    static check_child_t r;
    const char *env[] = {"MALLOC_CONF=hard_limit:64M", NULL};
    run_helper("helper_hard_limit_option", env, &r);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "%s\nstdout: %s\nstderr: %s", check_status_str(r.status),
          r.out, r.err);
    const char *bad[] = {"MALLOC_CONF=hard_limit:12", "MALLOC_CONF=soft_limit:lots", NULL};
    for (int i = 0; bad[i]; i++) {
        const char *e2[] = {bad[i], NULL};
        run_helper("helper_noop", e2, &r);
        CHECK(strstr(r.err, "bytes >= 1M") != NULL, "%s: no clear message: %s", bad[i], r.err);
    }
}

HELPER(helper_noop)
{
    free(malloc(1)); /* strata reads its options at its first call */
}

static char out[1 << 20];
static size_t out_len;
static void out_cb(void *o, const char *t)
{
    (void)o;
    size_t n = strlen(t);
    if (out_len + n < sizeof out) {
        memcpy(out + out_len, t, n + 1);
        out_len += n;
    }
}

TEST(test_hard_limit_set_at_run_time_and_reported)
{
    CHECK_EQ(read_size("hard_limit"), 0);
    size_t small = 4096;
    CHECK(mallctl("hard_limit", NULL, NULL, &small, sizeof small) == EINVAL);
    write_size("hard_limit", 64 * MiB + (size_t)(resident() & ~(MiB - 1)));
    CHECK(read_u64("stats.hard_limit") >= 64 * MiB);
    /* Set at run time, it bounds what is allocated from now on. */
    size_t base = resident();
    write_size("hard_limit", base + 64 * MiB);
    hard_limit_allocs();
    write_size("hard_limit", 0);
    void *p = malloc(128 * MiB);
    CHECK(p != NULL, "no hard limit any more");
    free(p);
    /* In malloc_stats_print's JSON and in OpenMetrics. */
    out_len = 0;
    malloc_stats_print(out_cb, NULL, "J");
    CHECK(strstr(out, "\"hard_limit_refusals\"") != NULL, "JSON lacks hard_limit_refusals");
    out_len = 0;
    malloc_stats_print(out_cb, NULL, "P");
    CHECK(strstr(out, "strata_hard_limit_bytes") != NULL, "OpenMetrics lacks strata_hard_limit_bytes");
    CHECK(strstr(out, "strata_soft_limit_purges_total") != NULL, "OpenMetrics lacks the soft limit purges");
}

/* ---------------------------------------------------------------- events */
typedef struct {
    atomic_int up, down;
    atomic_ullong resident, level;
    atomic_int on_main;
    atomic_int mallocs_ok;
} seen_t;
static pid_t main_tid;

static void on_event(const strata_event_t *e, void *arg)
{
    seen_t *s = arg;
    if ((pid_t)syscall(SYS_gettid) == main_tid)
        atomic_fetch_add(&s->on_main, 1);
    void *p = malloc(1000); /* callbacks may allocate */
    if (p) {
        memset(p, 0, 1000);
        atomic_fetch_add(&s->mallocs_ok, 1);
    }
    free(p);
    atomic_store(&s->resident, e->resident);
    atomic_store(&s->level, e->level);
    atomic_fetch_add(e->direction > 0 ? &s->up : &s->down, 1);
}

static bool wait_int(atomic_int *v, int want, long ms)
{
    for (long t = 0; t < ms; t += 10) {
        if (atomic_load(v) >= want)
            return true;
        sleep_ms(10);
    }
    return atomic_load(v) >= want;
}

TEST(test_event_register_rejects_bad_arguments)
{
    static seen_t s;
    unsigned id = 0;
    CHECK(strata_event_register(0, 1, on_event, &s, &id) == EINVAL);
    CHECK(strata_event_register(99, 1, on_event, &s, &id) == EINVAL);
    CHECK(strata_event_register(STRATA_EVENT_RESIDENT, 0, on_event, &s, &id) == EINVAL);
    CHECK(strata_event_register(STRATA_EVENT_RESIDENT, 1 << 30, NULL, &s, &id) == EINVAL);
    CHECK(strata_event_register(STRATA_EVENT_PRESSURE, 5, on_event, &s, &id) == EINVAL);
    CHECK(strata_event_register(STRATA_EVENT_SOFT_LIMIT, 5, on_event, &s, &id) == EINVAL);
    CHECK(strata_event_unregister(0) == EINVAL);
    CHECK(strata_event_unregister(12345) == ENOENT);
    CHECK(strata_event_register(STRATA_EVENT_PRESSURE, 0, on_event, &s, &id) == 0 && id != 0);
    CHECK(strata_event_unregister(id) == 0);
    CHECK(strata_event_unregister(id) == ENOENT);
}

TEST(test_resident_level_event_fires_up_and_down_on_a_strata_thread)
{
    static seen_t s;
    main_tid = (pid_t)syscall(SYS_gettid);
    size_t level = resident() + 48 * MiB;
    unsigned id = 0;
    CHECK(strata_event_register(STRATA_EVENT_RESIDENT, level, on_event, &s, &id) == 0);
    sleep_ms(50);
    CHECK_EQ(atomic_load(&s.up), 0);
    void *p = malloc(80 * MiB);
    CHECK(p != NULL);
    memset(p, 1, 80 * MiB);
    CHECK(wait_int(&s.up, 1, 3000), "no upward event");
    CHECK_EQ(atomic_load(&s.level), level);
    CHECK(atomic_load(&s.resident) >= level);
    free(p);
    CHECK(mallctl("arena.4096.purge", NULL, NULL, NULL, 0) == 0);
    CHECK(wait_int(&s.down, 1, 3000), "no downward event");
    CHECK(atomic_load(&s.resident) < level);
    CHECK_EQ(atomic_load(&s.on_main), 0);
    CHECK(atomic_load(&s.mallocs_ok) >= 2);
    CHECK(read_u64("stats.events_fired") >= 2);
    CHECK(strata_event_unregister(id) == 0);
    /* No longer registered: nothing fires. */
    int up = atomic_load(&s.up);
    p = malloc(80 * MiB);
    memset(p, 1, 80 * MiB);
    sleep_ms(100);
    CHECK_EQ(atomic_load(&s.up), up);
    free(p);
}

TEST(test_soft_limit_purges_and_fires_its_event)
{
    static seen_t s;
    size_t soft = (resident() & ~(MiB - 1)) + 64 * MiB;
    write_size("soft_limit", soft);
    CHECK_EQ(read_size("soft_limit"), soft);
    unsigned id;
    CHECK(strata_event_register(STRATA_EVENT_SOFT_LIMIT, 0, on_event, &s, &id) == 0);
    /* Past the soft limit, every arena is purged, and what is freed while resident stays
     * past it goes back at once, not after the decay time. */
    static void *blk[100];
    for (int i = 0; i < 100; i++) {
        blk[i] = malloc(MiB);
        CHECK(blk[i] != NULL);
        memset(blk[i], 1, MiB);
    }
    CHECK(read_u64("stats.soft_limit_purges") > 0);
    CHECK(wait_int(&s.up, 1, 3000), "no soft-limit event");
    for (int i = 0; i < 100; i += 2)
        free(blk[i]), blk[i] = NULL;
    CHECK(resident() < soft, "resident %zu MiB after freeing half, soft limit %zu MiB", resident() >> 20,
          soft >> 20);
    CHECK(wait_int(&s.down, 1, 3000), "no event back under the soft limit");
    for (int i = 0; i < 100; i++)
        free(blk[i]);
    CHECK(strata_event_unregister(id) == 0);
    write_size("soft_limit", 0);
}

TEST(test_headroom_event_fires_near_the_hard_limit)
{
    static seen_t s;
    size_t hard = (resident() & ~(MiB - 1)) + 96 * MiB;
    write_size("hard_limit", hard);
    unsigned id;
    CHECK(strata_event_register(STRATA_EVENT_LIMIT_HEADROOM, 32 * MiB, on_event, &s, &id) == 0);
    sleep_ms(50);
    CHECK_EQ(atomic_load(&s.up), 0);
    void *p = malloc(72 * MiB);
    CHECK(p != NULL);
    memset(p, 1, 72 * MiB);
    CHECK(wait_int(&s.up, 1, 3000), "no headroom event");
    CHECK_EQ(atomic_load(&s.level), hard - 32 * MiB);
    free(p);
    CHECK(strata_event_unregister(id) == 0);
    write_size("hard_limit", 0);
}

TEST(test_pressure_is_watched_where_the_kernel_offers_triggers)
{
    /* Background threads come with the first pages to decay, the monitor with them. */
    burst(16 * MiB);
    for (int i = 0; i < 100 && read_size("stats.background_thread.num_threads") == 0; i++) {
        void *p = malloc(1 << 20);
        free(p);
        sleep_ms(10);
    }
    bool on = false;
    size_t sz = sizeof on;
    CHECK(mallctl("opt.pressure_purge", &on, &sz, NULL, 0) == 0 && on);
    sleep_ms(50);
    CHECK(mallctl("stats.pressure_watched", &on, &sz, NULL, 0) == 0);
    int fd = open("/proc/pressure/memory", O_RDWR | O_NONBLOCK);
    bool psi = false;
    if (fd >= 0) {
        psi = write(fd, "some 200000 2000000", 20) == 20;
        close(fd);
    }
    if (!psi) {
        CHECK(!on);
        printf("SKIP: no PSI triggers here\n");
        exit(77);
    }
    CHECK(on, "the kernel offers PSI triggers but strata does not watch them");
}

/* A forked child that only prepares an exec (small allocations, an environment, argv)
 * gets neither a background thread nor the monitor, although the parent has both and
 * callbacks registered; the child's first pages to decay bring them back. */
OVERRIDE_TEST(test_forked_child_that_only_execs_starts_no_strata_thread)
{
    static seen_t s;
    unsigned id;
    CHECK(strata_event_register(STRATA_EVENT_RESIDENT, (size_t)1 << 40, on_event, &s, &id) == 0);
    burst(16 * MiB);
    for (int i = 0; i < 200 && read_size("stats.background_thread.num_threads") == 0; i++) {
        free(malloc(1 << 20));
        sleep_ms(10);
    }
    CHECK(read_size("stats.background_thread.num_threads") >= 1);
    CHECK(count_threads() >= 3, "%d threads: main, a background thread, the monitor", count_threads());
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char *argv[8];
        for (int i = 0; i < 7; i++) {
            argv[i] = malloc(32);
            snprintf(argv[i], 32, "arg%d", i);
        }
        argv[7] = NULL;
        char *env = strdup("PATH=/bin:/usr/bin");
        int n = count_threads();
        for (int i = 0; i < 7; i++)
            free(argv[i]);
        free(env);
        _exit(n == 1 ? 0 : 10 + n);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x (exit 10 + its threads)", st);
    CHECK(strata_event_unregister(id) == 0);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

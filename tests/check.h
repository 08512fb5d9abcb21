/*
 * check.h - the test suite's assertion and test-registry header (header only, C11/C++17).
 * TEST(name) defines a self-registering test; CHECK*() print file:line, the failed
 * expression and a message, then _exit(1). check_main() lists, runs one test or all.
 * check_child()/check_exec() run code or a program in a child and capture its output.
 */
#ifndef STRATA_TEST_CHECK_H
#define STRATA_TEST_CHECK_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK_UNUSED __attribute__((unused))

typedef void (*check_fn_t)(void);
static struct {
    const char *name[512];
    check_fn_t fn[512];
    int n;
    const char *current;
} check_registry;

static CHECK_UNUSED void check_register(const char *name, check_fn_t fn)
{
    if (check_registry.n < 512) {
        check_registry.name[check_registry.n] = name;
        check_registry.fn[check_registry.n++] = fn;
    }
}

/* TEST(test_x) { ... } - one test; tests/CMakeLists.txt turns each into a ctest entry.
 * OVERRIDE_TEST(test_x) - a test that needs the standard names (override build only). */
#define TEST(name)                                                                        \
    static void name(void);                                                               \
    __attribute__((constructor)) static void name##_register(void) { check_register(#name, name); } \
    static void name(void)
#ifdef STRATA_TEST_PREFIXED
#define OVERRIDE_TEST(name) static CHECK_UNUSED void name(void)
#else
#define OVERRIDE_TEST(name) TEST(name)
#endif

static CHECK_UNUSED __attribute__((noreturn, format(printf, 4, 5))) void
check_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    char msg[2048];
    int n = snprintf(msg, sizeof msg, "FAIL %s:%d: %s: CHECK(%s)", file, line,
                     check_registry.current ? check_registry.current : "?", expr);
    if (n < 0 || n >= (int)sizeof msg)
        n = (int)sizeof msg - 1;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    n = m < 0 ? n : (n + m >= (int)sizeof msg - 1 ? (int)sizeof msg - 2 : n + m);
    msg[n++] = '\n';
    /* write(2), not stdio: the failure may happen in a thread or a forked child. */
    if (write(2, msg, (size_t)n) < 0) {
    }
    _exit(1);
}

/* CHECK(cond) or CHECK(cond, "printf format", args...). */
#define CHECK(cond, ...)                                                                  \
    ((cond) ? (void)0 : check_fail(__FILE__, __LINE__, #cond, " " __VA_ARGS__))
/* Compare as unsigned integers (sizes, pointers as uintptr_t) and print both values. */
#define CHECK_EQ(a, b)                                                                    \
    do {                                                                                  \
        uintmax_t check_a_ = (uintmax_t)(a), check_b_ = (uintmax_t)(b);                   \
        if (check_a_ != check_b_)                                                         \
            check_fail(__FILE__, __LINE__, #a " == " #b, "%ju (0x%jx) != %ju (0x%jx)",     \
                       check_a_, check_a_, check_b_, check_b_);                           \
    } while (0)
#define CHECK_ALIGNED(p, align)                                                           \
    CHECK(((uintptr_t)(p) & ((uintptr_t)(align) - 1)) == 0, "%p not aligned to %zu",      \
          (void *)(p), (size_t)(align))

/* Scale factor for loop counts: env STRATA_TEST_SCALE (set by ctest under sanitizers). */
static CHECK_UNUSED double check_scale(void)
{
    const char *s = getenv("STRATA_TEST_SCALE");
    double v = s ? strtod(s, NULL) : 1.0;
    return v > 0 ? v : 1.0;
}
static CHECK_UNUSED long check_scaled(long n)
{
    long v = (long)((double)n * check_scale());
    return v < 1 ? 1 : v;
}

/* A value the compiler cannot fold, so that malloc(SIZE_MAX) and friends reach the
 * allocator instead of being diagnosed or optimised at compile time. */
/* size bytes at an align boundary (a power of two), mapped fresh with prot: what an extent
 * hook's alloc hands strata. NULL when mmap fails. */
static CHECK_UNUSED char *check_map_aligned(size_t size, size_t align, int prot)
{
    size_t total = size + align;
    char *p = (char *)mmap(NULL, total, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    munmap(a + size, (size_t)(p + total - (a + size)));
    return a;
}

static CHECK_UNUSED size_t check_opaque(size_t v)
{
    volatile size_t x = v;
    return x;
}

/* Result of a child run: wait status and captured output (NUL-terminated). */
typedef struct {
    int status;
    size_t out_len, err_len;
    char out[1 << 16];
    char err[1 << 16];
} check_child_t;

static CHECK_UNUSED void check_drain(int out_fd, int err_fd, check_child_t *r)
{
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = (out_fd >= 0) + (err_fd >= 0);
    if (out_fd < 0)
        fds[0].fd = -1;
    if (err_fd < 0)
        fds[1].fd = -1;
    r->out_len = r->err_len = 0;
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char *buf = i == 0 ? r->out : r->err;
            size_t *len = i == 0 ? &r->out_len : &r->err_len;
            char scratch[4096];
            size_t room = sizeof r->out - 1 - *len;
            ssize_t k = read(fds[i].fd, room ? buf + *len : scratch, room ? room : sizeof scratch);
            if (k <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (room) {
                *len += (size_t)k;
            }
        }
    }
    r->out[r->out_len] = '\0';
    r->err[r->err_len] = '\0';
}

/* Runs fn(arg) in a forked child (stdout and stderr captured, alarm(timeout_s) so a hang
 * becomes SIGALRM); the child exits 0 if fn returns. Returns 0, or -1 if fork failed. */
static CHECK_UNUSED int check_child(void (*fn)(void *), void *arg, unsigned timeout_s,
                                    check_child_t *r)
{
    int po[2], pe[2];
    fflush(NULL);
    if (pipe(po) || pipe(pe))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]), close(pe[0]), close(po[1]), close(pe[1]);
        alarm(timeout_s);
        fn(arg);
        fflush(NULL);
        _exit(0);
    }
    close(po[1]), close(pe[1]);
    check_drain(po[0], pe[0], r);
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR) {
    }
    return 0;
}

/* Runs argv[0] with argv and extra environment entries ("NAME=value" or "NAME" to unset)
 * added to the current environment; captures output like check_child. */
static CHECK_UNUSED int check_exec(char *const argv[], const char *const env_changes[],
                                   unsigned timeout_s, check_child_t *r)
{
    int po[2], pe[2];
    fflush(NULL);
    if (pipe(po) || pipe(pe))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]), close(pe[0]), close(po[1]), close(pe[1]);
        for (int i = 0; env_changes && env_changes[i]; i++) {
            char name[256];
            const char *eq = strchr(env_changes[i], '=');
            if (!eq) {
                unsetenv(env_changes[i]);
                continue;
            }
            size_t n = (size_t)(eq - env_changes[i]);
            if (n >= sizeof name)
                _exit(126);
            memcpy(name, env_changes[i], n);
            name[n] = '\0';
            setenv(name, eq + 1, 1);
        }
        alarm(timeout_s);
        execv(argv[0], argv);
        _exit(127);
    }
    close(po[1]), close(pe[1]);
    check_drain(po[0], pe[0], r);
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR) {
    }
    return 0;
}

/* Describes a wait status for messages ("exit 1", "signal 6 (Aborted)"). */
static CHECK_UNUSED const char *check_status_str(int status)
{
    static char buf[96];
    if (WIFEXITED(status))
        snprintf(buf, sizeof buf, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, sizeof buf, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, sizeof buf, "status 0x%x", status);
    return buf;
}

#define CHECK_CHILD_EXITED_0(r)                                                           \
    CHECK(WIFEXITED((r)->status) && WEXITSTATUS((r)->status) == 0,                        \
          "child ended with %s; stderr:\n%s", check_status_str((r)->status), (r)->err)

/* Lists (--list), runs the named tests, or all tests when none is named. */
static CHECK_UNUSED int check_main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < check_registry.n; i++)
            printf("%s\n", check_registry.name[i]);
        return 0;
    }
    int ran = 0;
    for (int i = 0; i < check_registry.n; i++) {
        int wanted = argc <= 1;
        for (int a = 1; a < argc; a++)
            wanted |= strcmp(argv[a], check_registry.name[i]) == 0;
        if (!wanted)
            continue;
        check_registry.current = check_registry.name[i];
        check_registry.fn[i]();
        printf("ok %s\n", check_registry.name[i]);
        fflush(stdout);
        ran++;
    }
    if (ran == 0 || (argc > 1 && ran != argc - 1)) {
        fprintf(stderr, "FAIL: no test or an unknown test named (%d run); --list shows them\n",
                ran);
        return 1;
    }
    return 0;
}

#endif /* STRATA_TEST_CHECK_H */

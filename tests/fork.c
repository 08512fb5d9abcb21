/*
 * fork.c - fork while other threads allocate and free: every child must be able to
 * allocate (many sizes), free blocks inherited from the parent's threads, start threads,
 * and exit 0. Also fork from a thread other than main. alarm() turns a deadlock (a lock
 * held across fork) into a failure instead of a hang.
 */
#define _GNU_SOURCE
#include "strata_names.h"

/* TSan cannot start a thread in the child of a multi-threaded fork ("starting new threads
 * after multi-threaded fork is not supported"), and strata starts its background thread in
 * a child once the child has pages to decay: the TSan build runs without it. */
#if defined(__SANITIZE_THREAD__)
const char *malloc_conf = "background_thread:false";
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define MiB ((size_t)1 << 20)
#define NTHREADS 4
#define NSLOTS 256

static _Atomic(uint8_t *) slots[NSLOTS];
static atomic_bool stop_flag;
static atomic_long thread_ops;

/* Block contents: first byte and last byte hold the size's low bits: checked by frees. */
static uint8_t *block_new(size_t n)
{
    uint8_t *p = malloc(n);
    CHECK(p != NULL, "malloc(%zu) failed", n);
    memset(p, (int)(n & 0xff), n < 64 ? n : 64);
    memcpy(p, &n, n >= sizeof n ? sizeof n : 0);
    return p;
}
static void block_free(uint8_t *p)
{
    size_t n = 0;
    memcpy(&n, p, sizeof n); /* every slot block is at least 8 bytes */
    CHECK(n >= sizeof n && n <= 8 * MiB && malloc_usable_size(p) >= n,
          "slot block %p corrupted (size field %zu)", (void *)p, n);
    free(p);
}

static size_t pick(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    unsigned r = (unsigned)(*s % 1000);
    if (r < 900)
        return 8 + (size_t)(*s >> 20) % 2048;
    if (r < 995)
        return 2048 + (size_t)(*s >> 20) % 100000;
    return 100000 + (size_t)(*s >> 20) % (6 * MiB);
}

static void *allocator_thread(void *arg)
{
    uint64_t s = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull | 1;
    void *local[64] = {0};
    while (!atomic_load(&stop_flag)) {
        size_t n = pick(&s);
        uint8_t *p = block_new(n);
        uint8_t *old = atomic_exchange(&slots[s % NSLOTS], p);
        if (old)
            block_free(old);
        unsigned i = (unsigned)(s >> 40) % 64;
        free(local[i]);
        local[i] = (s & 1) ? calloc(1, n / 4 + 1) : realloc(malloc(n / 8 + 1), n / 2 + 1);
        atomic_fetch_add(&thread_ops, 1);
    }
    for (int i = 0; i < 64; i++)
        free(local[i]);
    return NULL;
}

static void *child_thread(void *arg)
{
    uint64_t s = (uint64_t)(uintptr_t)arg | 1;
    for (int i = 0; i < 2000; i++) {
        void *p = malloc(pick(&s));
        CHECK(p != NULL);
        free(p);
    }
    return NULL;
}

/* What a child does: allocate many sizes, free what the parent's threads left in the
 * slots (their caches were forgotten, the blocks still belong to the heap), maybe start
 * threads, and exit quickly. */
static void child_work(unsigned round, bool threads)
{
    alarm(20);
    uint64_t s = round * 2654435761u + 1;
    void *keep[200];
    for (int i = 0; i < 200; i++) {
        size_t n = i < 190 ? pick(&s) : (size_t)(i - 189) * 3 * MiB; /* a few huge too */
        keep[i] = malloc(n);
        CHECK(keep[i] != NULL, "child: malloc(%zu) failed", n);
        memset(keep[i], i, n < 4096 ? n : 4096);
    }
    for (int i = 0; i < NSLOTS; i++) {
        uint8_t *p = atomic_exchange(&slots[i], NULL);
        if (p)
            block_free(p);
    }
    for (int i = 0; i < 200; i++)
        free(keep[i]);
    if (threads) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&t[i], NULL, child_thread, (void *)(uintptr_t)(round + i)) == 0);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
    }
    exit(0);
}

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer's exit-time scan in a child of a multi-threaded process tries to stop the
 * parent's threads (absent in the child) and can hang: no leak check in this binary. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }
/* gcc 12's ASan does not hold its own allocator lock across fork: a child thread can block
 * forever on it (seen in pthread_getattr_np at thread start). No threads in children. */
#define CHILD_THREADS_OK false
#endif

#if defined(__SANITIZE_THREAD__)
/* strata's atfork handler holds every allocator lock at once, more than the 64 that TSan's
 * deadlock detector can track (it aborts with a CHECK failure): turn that detector off. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "detect_deadlocks=0"; }
#define CHILD_THREADS_OK false /* TSan does not support threads after a multi-threaded fork */
#endif
#ifndef CHILD_THREADS_OK
#define CHILD_THREADS_OK true
#endif

/* Forks `rounds` times from the calling thread while the allocator threads run. */
static void fork_rounds(long rounds)
{
    for (long i = 0; i < rounds; i++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0, "fork failed: %s", strerror(errno));
        if (pid == 0)
            child_work((unsigned)i, CHILD_THREADS_OK && i % 4 == 0);
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "child %ld ended with %s%s", i, check_status_str(status),
              WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " (deadlock in the child?)" : "");
        /* The parent goes on allocating too. */
        free(malloc((size_t)(i % 5000) + 1));
    }
}

static void start_threads(pthread_t *th)
{
    atomic_store(&stop_flag, false);
    for (int i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&th[i], NULL, allocator_thread, (void *)(uintptr_t)(i + 1)) == 0);
    while (atomic_load(&thread_ops) < 1000)
        sched_yield();
}

static void stop_threads(pthread_t *th)
{
    atomic_store(&stop_flag, true);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NSLOTS; i++) {
        uint8_t *p = atomic_exchange(&slots[i], NULL);
        if (p)
            block_free(p);
    }
}

TEST(test_fork_while_threads_allocate)
{
    alarm(check_scale() < 1 ? 240 : 80);
    pthread_t th[NTHREADS];
    start_threads(th);
    fork_rounds(check_scaled(150));
    stop_threads(th);
    printf("parent threads did %ld operations during the forks\n", atomic_load(&thread_ops));
}

static void *forking_thread(void *arg)
{
    fork_rounds((long)(intptr_t)arg);
    return NULL;
}

TEST(test_fork_from_non_main_thread)
{
    alarm(check_scale() < 1 ? 240 : 80);
    pthread_t th[NTHREADS], f;
    start_threads(th);
    CHECK(pthread_create(&f, NULL, forking_thread, (void *)(intptr_t)check_scaled(80)) == 0);
    pthread_join(f, NULL);
    stop_threads(th);
}

TEST(test_fork_after_threads_exited_child_allocates)
{
    alarm(60);
    /* Threads that allocated and exited before the fork: the child must not trip over
     * their caches or arenas. */
    for (int round = 0; round < 8; round++) {
        pthread_t th[NTHREADS];
        start_threads(th);
        stop_threads(th);
    }
    fork_rounds(10);
}

int main(int argc, char **argv) { return check_main(argc, argv); }

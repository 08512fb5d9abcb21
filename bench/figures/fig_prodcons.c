/*
 * fig_prodcons - the cross-thread figure: one thread mallocs (sizes uniform in 8..264),
 * hands the pointers over in batches of 1,000 through a bounded queue, another frees them.
 * The mallocs happen in fig_prodcons_malloc() and the frees in fig_prodcons_free(), so
 * callgrind's call arcs from those two functions give the instructions spent inside
 * malloc and free per object; warm-up batches use separately named copies.
 */
#include <pthread.h>

#include "fig_common.h"

#define SIZES_LEN 65536 /* power of two; cycled by mask */
#define QDEPTH 16       /* batches in flight: enough that both threads rarely wait */

static uint16_t sizes[SIZES_LEN];
static uint64_t batch_len;
static void **slot_ptrs[QDEPTH];
static int slot_measured[QDEPTH];

/* Guards filled and done; a slot is owned by the consumer from push until it is drained. */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t q_not_full = PTHREAD_COND_INITIALIZER;
static unsigned q_filled; /* batches pushed and not yet drained */
static int q_done;

static inline void fill(void **ptrs, uint64_t first, uint64_t n) {
    for (uint64_t j = 0; j < n; j++) {
        void *p = malloc(sizes[(first + j) & (SIZES_LEN - 1)]);
        FIG_ESCAPE(p);
        ptrs[j] = p;
    }
}

static inline void drain(void **ptrs, uint64_t n) {
    for (uint64_t j = 0; j < n; j++)
        free(ptrs[j]);
}

FIG_MEASURED void fig_prodcons_malloc_warmup(void **ptrs, uint64_t first, uint64_t n) {
    fill(ptrs, first, n);
}
FIG_MEASURED void fig_prodcons_free_warmup(void **ptrs, uint64_t n) { drain(ptrs, n); }
FIG_MEASURED void fig_prodcons_malloc(void **ptrs, uint64_t first, uint64_t n) {
    fill(ptrs, first, n);
}
FIG_MEASURED void fig_prodcons_free(void **ptrs, uint64_t n) { drain(ptrs, n); }

static void *consumer(void *arg) {
    (void)arg;
    for (unsigned head = 0;; head = (head + 1) % QDEPTH) {
        pthread_mutex_lock(&q_lock);
        while (q_filled == 0 && !q_done)
            pthread_cond_wait(&q_not_empty, &q_lock);
        if (q_filled == 0) { /* done and nothing left */
            pthread_mutex_unlock(&q_lock);
            return NULL;
        }
        pthread_mutex_unlock(&q_lock);
        if (slot_measured[head])
            fig_prodcons_free(slot_ptrs[head], batch_len);
        else
            fig_prodcons_free_warmup(slot_ptrs[head], batch_len);
        pthread_mutex_lock(&q_lock);
        q_filled--;
        pthread_cond_signal(&q_not_full);
        pthread_mutex_unlock(&q_lock);
    }
}

int main(int argc, char **argv) {
    CALLGRIND_STOP_INSTRUMENTATION; /* start-up and warm-up run uninstrumented (faster) */
    uint64_t objects = 1000000, warmup = 100000, seed = 2, min = 8, max = 264;
    batch_len = 1000;
    for (int i = 1; i < argc;) {
        if (fig_arg_u64(argc, argv, &i, "--objects", &objects) ||
            fig_arg_u64(argc, argv, &i, "--warmup", &warmup) ||
            fig_arg_u64(argc, argv, &i, "--batch", &batch_len) ||
            fig_arg_u64(argc, argv, &i, "--seed", &seed) ||
            fig_arg_u64(argc, argv, &i, "--min", &min) ||
            fig_arg_u64(argc, argv, &i, "--max", &max))
            continue;
        fprintf(stderr,
                "usage: %s [--objects N] [--warmup N] [--batch N] [--seed S] [--min B] [--max B]\n",
                argv[0]);
        return 2;
    }
    if (min < 1 || max < min || max > UINT16_MAX || batch_len == 0 || objects < batch_len)
        fig_die(argv[0], "need 1 <= min <= max <= 65535 and objects >= batch > 0", NULL);

    uint64_t st = seed;
    for (size_t i = 0; i < SIZES_LEN; i++)
        sizes[i] = (uint16_t)fig_rand_range(&st, (size_t)min, (size_t)max);
    for (unsigned s = 0; s < QDEPTH; s++)
        if (!(slot_ptrs[s] = calloc(batch_len, sizeof(void *))))
            fig_die(argv[0], "out of memory", NULL);

    uint64_t warm_batches = warmup / batch_len, batches = objects / batch_len;
    pthread_t cons;
    if (pthread_create(&cons, NULL, consumer, NULL) != 0)
        fig_die(argv[0], "pthread_create failed", NULL);

    double t0 = 0;
    unsigned tail = 0;
    for (uint64_t b = 0; b < warm_batches + batches; b++, tail = (tail + 1) % QDEPTH) {
        int measured = b >= warm_batches;
        pthread_mutex_lock(&q_lock);
        if (b == warm_batches) { /* quiesce: the measured phase starts with an empty queue */
            while (q_filled > 0)
                pthread_cond_wait(&q_not_full, &q_lock);
            CALLGRIND_START_INSTRUMENTATION;
            t0 = fig_now();
        }
        while (q_filled == QDEPTH)
            pthread_cond_wait(&q_not_full, &q_lock);
        pthread_mutex_unlock(&q_lock);
        slot_measured[tail] = measured;
        if (measured)
            fig_prodcons_malloc(slot_ptrs[tail], b * batch_len, batch_len);
        else
            fig_prodcons_malloc_warmup(slot_ptrs[tail], b * batch_len, batch_len);
        pthread_mutex_lock(&q_lock);
        q_filled++;
        pthread_cond_signal(&q_not_empty);
        pthread_mutex_unlock(&q_lock);
    }
    pthread_mutex_lock(&q_lock);
    q_done = 1;
    pthread_cond_signal(&q_not_empty);
    pthread_mutex_unlock(&q_lock);
    pthread_join(cons, NULL);
    double t1 = fig_now();
    CALLGRIND_STOP_INSTRUMENTATION;

    for (unsigned s = 0; s < QDEPTH; s++)
        free(slot_ptrs[s]);
    printf("{\"fig\":\"prodcons\",\"objects\":%llu,\"warmup\":%llu,\"batch\":%llu,\"min\":%llu,"
           "\"max\":%llu,\"malloc_fn\":\"fig_prodcons_malloc\",\"free_fn\":\"fig_prodcons_free\","
           "\"client_requests\":%d,\"ns_per_object\":%.2f}\n",
           (unsigned long long)(batches * batch_len),
           (unsigned long long)(warm_batches * batch_len),
           (unsigned long long)batch_len, (unsigned long long)min, (unsigned long long)max,
           FIG_HAVE_CALLGRIND, (t1 - t0) * 1e9 / (double)(batches * batch_len));
    return 0;
}

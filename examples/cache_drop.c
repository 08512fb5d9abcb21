/*
 * cache_drop.c - an application cache that gives memory back when strata says so. The
 * program keeps a cache of computed strings (here: a hash table of rendered "pages") and
 * grows it freely; it registers strata_event_register callbacks for its own resident
 * level (STRATA_EVENT_RESIDENT) and for the kernel's memory pressure
 * (STRATA_EVENT_PRESSURE). When one fires (on strata's monitor thread, never inside
 * malloc), the callback asks the cache to drop its colder half; the program's thread does
 * the dropping at its next request, as a real server would, under its own lock.
 *
 * Checks (exit status 0 when they hold): the resident event fired; the cache was cut each
 * time; strata's resident memory ends below the level although the program kept inserting
 * three times the level's worth. After each drop the program purges (arena.<all>.purge), so
 * resident falls back under the level and the event fires again when the cache regrows.
 * Usage: cache_drop [level_mib]   (default 64)
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata.h>

typedef struct entry {
    struct entry *next;
    uint64_t key, stamp;
    size_t len;
    char data[];
} entry_t;

#define NBUCKETS 65536
static entry_t *buckets[NBUCKETS];
static size_t cache_bytes, cache_entries;
static uint64_t clock_now;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int drop_requests, events_seen;
static atomic_ullong last_resident;

static size_t strata_resident(void)
{
    uint64_t e = 1;
    size_t v = 0, sz = sizeof e;
    mallctl("epoch", &e, &sz, &e, sz);
    sz = sizeof v;
    mallctl("stats.resident", &v, &sz, NULL, 0);
    return v;
}

/* Drops every entry older than the median stamp: the colder half. */
static size_t cache_drop_cold(void)
{
    pthread_mutex_lock(&cache_lock);
    uint64_t oldest = clock_now;
    for (size_t b = 0; b < NBUCKETS; b++)
        for (entry_t *e = buckets[b]; e; e = e->next)
            if (e->stamp < oldest)
                oldest = e->stamp;
    uint64_t cut = oldest + (clock_now - oldest) / 2;
    size_t freed = 0;
    for (size_t b = 0; b < NBUCKETS; b++) {
        entry_t **pp = &buckets[b];
        while (*pp) {
            entry_t *e = *pp;
            if (e->stamp < cut) {
                *pp = e->next;
                freed += e->len;
                cache_bytes -= e->len;
                cache_entries--;
                free(e);
            } else {
                pp = &e->next;
            }
        }
    }
    pthread_mutex_unlock(&cache_lock);
    /* Give the pages back now rather than after the decay time: resident falls under the
     * level, which re-arms the event for the next time the cache grows. */
    mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
    return freed;
}

static void cache_put(uint64_t key, size_t len)
{
    entry_t *e = malloc(sizeof(entry_t) + len);
    if (e == NULL)
        return; /* a cache may always refuse */
    e->key = key;
    e->len = len;
    for (size_t i = 0; i < len; i++)
        e->data[i] = (char)('a' + (key + i) % 26);
    pthread_mutex_lock(&cache_lock);
    e->stamp = ++clock_now;
    e->next = buckets[key % NBUCKETS];
    buckets[key % NBUCKETS] = e;
    cache_bytes += len;
    cache_entries++;
    pthread_mutex_unlock(&cache_lock);
}

/* strata's monitor thread: no strata lock is held, malloc is allowed; the cache is the
 * program's, so the callback only asks for a drop (it could also drop here). */
static void on_memory_event(const strata_event_t *ev, void *arg)
{
    (void)arg;
    atomic_fetch_add(&events_seen, 1);
    atomic_store(&last_resident, ev->resident);
    if (ev->direction > 0)
        atomic_fetch_add(&drop_requests, 1);
    char *note = malloc(128); /* allowed here */
    if (note) {
        snprintf(note, 128, "event kind %u dir %d resident %llu MiB level %llu MiB", ev->kind, ev->direction,
                 ev->resident >> 20, ev->level >> 20);
        fprintf(stderr, "cache_drop: %s\n", note);
        free(note);
    }
}

int main(int argc, char **argv)
{
    size_t level = (size_t)(argc > 1 ? atol(argv[1]) : 64) << 20;
    if (level < (16u << 20)) {
        fprintf(stderr, "cache_drop: level_mib must be at least 16\n");
        return 2;
    }
    unsigned id_res, id_psi;
    int err = strata_event_register(STRATA_EVENT_RESIDENT, strata_resident() + level, on_memory_event, NULL, &id_res);
    if (err) {
        fprintf(stderr, "cache_drop: strata_event_register: %s\n", strerror(err));
        return 1;
    }
    err = strata_event_register(STRATA_EVENT_PRESSURE, 0, on_memory_event, NULL, &id_psi);
    if (err) {
        fprintf(stderr, "cache_drop: strata_event_register(PRESSURE): %s\n", strerror(err));
        return 1;
    }
    size_t base = strata_resident();
    size_t inserted = 0, drops = 0, dropped = 0;
    for (uint64_t key = 1; inserted < 3 * level; key++) {
        /* A request: serve it, and honour a drop asked for since the last one. */
        if (atomic_load(&drop_requests) > (int)drops) {
            drops++;
            dropped += cache_drop_cold();
        }
        size_t len = 200 + (key * 2654435761u) % 3000;
        cache_put(key, len);
        inserted += len;
        if (key % 4096 == 0) {
            struct timespec ts = {0, 1000000}; /* 1 ms: the monitor runs beside the program */
            nanosleep(&ts, NULL);
        }
    }
    /* The last request after the last event. */
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
    while (atomic_load(&drop_requests) > (int)drops) {
        drops++;
        dropped += cache_drop_cold();
    }
    size_t end = strata_resident();
    printf("level=%zu MiB inserted=%zu MiB cache=%zu MiB entries=%zu drops=%zu dropped=%zu MiB events=%d "
           "resident=%zu MiB (base %zu MiB)\n",
           level >> 20, inserted >> 20, cache_bytes >> 20, cache_entries, drops, dropped >> 20,
           atomic_load(&events_seen), end >> 20, base >> 20);
    strata_event_unregister(id_res);
    strata_event_unregister(id_psi);
    if (drops == 0 || dropped == 0) {
        fprintf(stderr, "cache_drop: the cache was never asked to drop\n");
        return 1;
    }
    if (end > base + level + (level >> 3)) {
        fprintf(stderr, "cache_drop: resident %zu MiB, more than the level above %zu MiB\n", end >> 20, base >> 20);
        return 1;
    }
    return 0;
}

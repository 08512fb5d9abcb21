/*
 * strata.h - the public interface of strata, a jemalloc-family malloc for Linux.
 *
 * Every entry point exists under a strata_ name. A build with STRATA_OVERRIDE=ON
 * (the default) also exports the standard C/glibc names (malloc, free, ...) and
 * jemalloc's names (mallocx, mallctl, ...); a prefixed build (STRATA_OVERRIDE=OFF)
 * exports only the strata_ names, so sanitizers can check strata beside glibc.
 */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_VERSION "0.1.0"
#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0

#if defined(__GNUC__)
#define STRATA_EXPORT __attribute__((visibility("default")))
#define STRATA_MALLOC_ATTR __attribute__((malloc))
#else
#define STRATA_EXPORT
#define STRATA_MALLOC_ATTR
#endif

/* ---- Flags of the *allocx family: bit layout identical to jemalloc's. ---- */
/* Alignment 2^la (la in 1..63); 0 means the natural alignment of the size. */
#define MALLOCX_LG_ALIGN(la) ((int)(la))
/* Alignment a (a power of two); MALLOCX_ALIGN(0) is no request. */
#define MALLOCX_ALIGN(a) ((int)(((size_t)(a) < (size_t)2147483648ULL) ? __builtin_ctz((unsigned)(a)) : 31))
/* Zero the new bytes (all of them for mallocx, the grown tail for rallocx/xallocx). */
#define MALLOCX_ZERO ((int)0x40)
/* Bypass the calling thread's cache. */
#define MALLOCX_TCACHE_NONE (MALLOCX_TCACHE(-1))
/* Use explicit thread cache tc (from mallctl "tcache.create"); -1 means none. */
#define MALLOCX_TCACHE(tc) ((int)(((unsigned)((tc) + 2)) << 8))
/* Allocate from arena a (from mallctl "arenas.create" or 0..narenas-1). */
#define MALLOCX_ARENA(a) ((int)(((unsigned)((a) + 1)) << 20))

/* ---- Extent hooks: a per-arena page source, jemalloc 5.3's extent_hooks_t exactly
 * (arenas.create, arena.<i>.extent_hooks). Every function returns false on success;
 * a NULL member means "not supported". See docs/design.md, "Arenas". */
#include <stdbool.h>
typedef struct extent_hooks_s extent_hooks_t;
/* Pages for arena_ind, aligned to alignment; *zero and *commit: in, required; out, what
 * the pages are. new_addr non-NULL: exactly there or NULL. */
typedef void *(extent_alloc_t)(extent_hooks_t *, void *, size_t, size_t, bool *, bool *, unsigned);
/* (addr, size, committed, arena_ind): give the pages back; true keeps them (retained). */
typedef bool(extent_dalloc_t)(extent_hooks_t *, void *, size_t, bool, unsigned);
/* (addr, size, committed, arena_ind): the arena is destroyed; the pages are the hook's. */
typedef void(extent_destroy_t)(extent_hooks_t *, void *, size_t, bool, unsigned);
/* (addr, size, offset, length, arena_ind) */
typedef bool(extent_commit_t)(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
typedef bool(extent_decommit_t)(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
typedef bool(extent_purge_t)(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
/* (addr, size, size_a, size_b, committed, arena_ind) */
typedef bool(extent_split_t)(extent_hooks_t *, void *, size_t, size_t, size_t, bool, unsigned);
/* (addr_a, size_a, addr_b, size_b, committed, arena_ind) */
typedef bool(extent_merge_t)(extent_hooks_t *, void *, size_t, void *, size_t, bool, unsigned);
struct extent_hooks_s {
  extent_alloc_t *alloc;
  extent_dalloc_t *dalloc;
  extent_destroy_t *destroy;
  extent_commit_t *commit;
  extent_decommit_t *decommit;
  extent_purge_t *purge_lazy;
  extent_purge_t *purge_forced;
  extent_split_t *split;
  extent_merge_t *merge;
};
/* mallctl indices standing for every arena / the merged statistics of destroyed ones. */
#define MALLCTL_ARENAS_ALL 4096
#define MALLCTL_ARENAS_DESTROYED 4097

/* ---- Standard names, prefixed. Semantics are those of C11/POSIX/glibc. ---- */
STRATA_EXPORT STRATA_MALLOC_ATTR void *strata_malloc(size_t size);
STRATA_EXPORT STRATA_MALLOC_ATTR void *strata_calloc(size_t n, size_t size);
STRATA_EXPORT void *strata_realloc(void *ptr, size_t size);
STRATA_EXPORT void *strata_reallocarray(void *ptr, size_t n, size_t size);
STRATA_EXPORT void strata_free(void *ptr);
/* C23: size must be the size requested (or any value between that and the usable size). */
STRATA_EXPORT void strata_free_sized(void *ptr, size_t size);
STRATA_EXPORT void strata_free_aligned_sized(void *ptr, size_t alignment, size_t size);
STRATA_EXPORT int strata_posix_memalign(void **memptr, size_t alignment, size_t size);
STRATA_EXPORT STRATA_MALLOC_ATTR void *strata_aligned_alloc(size_t alignment, size_t size);
STRATA_EXPORT STRATA_MALLOC_ATTR void *strata_memalign(size_t alignment, size_t size);
STRATA_EXPORT STRATA_MALLOC_ATTR void *strata_valloc(size_t size);
STRATA_EXPORT STRATA_MALLOC_ATTR void *strata_pvalloc(size_t size);
STRATA_EXPORT size_t strata_malloc_usable_size(const void *ptr);
/* Purges every arena and the caller's cache; returns 1 if memory was released. */
STRATA_EXPORT int strata_malloc_trim(size_t pad);

/* ---- jemalloc's non-standard API, prefixed. ---- */
STRATA_EXPORT STRATA_MALLOC_ATTR void *strata_mallocx(size_t size, int flags);
STRATA_EXPORT void *strata_rallocx(void *ptr, size_t size, int flags);
STRATA_EXPORT size_t strata_xallocx(void *ptr, size_t size, size_t extra, int flags);
STRATA_EXPORT size_t strata_sallocx(const void *ptr, int flags);
STRATA_EXPORT void strata_dallocx(void *ptr, int flags);
STRATA_EXPORT void strata_sdallocx(void *ptr, size_t size, int flags);
STRATA_EXPORT size_t strata_nallocx(size_t size, int flags);
STRATA_EXPORT int strata_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
                                 size_t newlen);
STRATA_EXPORT int strata_mallctlnametomib(const char *name, size_t *mibp, size_t *miblenp);
STRATA_EXPORT int strata_mallctlbymib(const size_t *mib, size_t miblen, void *oldp,
                                      size_t *oldlenp, void *newp, size_t newlen);
/* opts: jemalloc's characters ("J" for JSON, ...); write_cb NULL writes to stderr. */
STRATA_EXPORT void strata_malloc_stats_print(void (*write_cb)(void *, const char *),
                                             void *cbopaque, const char *opts);

/* ---- Variables a program defines or sets, as jemalloc's (every build has the strata_
 * names; the default build also jemalloc's, below).
 * strata_malloc_conf / malloc_conf: an options string in MALLOC_CONF syntax that the
 * program compiles in, `const char *malloc_conf = "narenas:2,dirty_decay_ms:5000";`,
 * read at initialisation before /etc/strata.conf, STRATA_CONF and MALLOC_CONF (later
 * sources win; where a program defines both names, strata_malloc_conf is read second).
 * strata_malloc_conf_2_conf_harder / malloc_conf_2_conf_harder: a second such string,
 * read after MALLOC_CONF, so that its settings win over every other source.
 * strata's own definitions are weak and NULL: the program's definition replaces them in a
 * static link and in a dynamic one (under LD_PRELOAD only if the program exports it).
 * strata_malloc_message / malloc_message: when the program sets it, strata's messages
 * (option reports, warnings, fatal errors, and malloc_stats_print without a write_cb) go
 * to it, with cbopaque NULL (malloc_stats_print's cbopaque for its output), instead of
 * to stderr by write(2). It may be called early, from a failing free or a signal-handler
 * re-entry, or with strata's locks held: it must not allocate. */
STRATA_EXPORT extern const char *strata_malloc_conf;
STRATA_EXPORT extern const char *strata_malloc_conf_2_conf_harder;
STRATA_EXPORT extern void (*strata_malloc_message)(void *cbopaque, const char *s);

/* ---- Memory events (strata's own). A callback runs on strata's monitor thread, never
 * inside malloc and with no strata lock held: it may malloc, free, register and
 * unregister. Kinds and their level:
 *   STRATA_EVENT_RESIDENT        resident bytes crossed `level` upward (direction 1) or
 *                                back below it (-1; 1/32 of the level lower, hysteresis)
 *   STRATA_EVENT_LIMIT_HEADROOM  resident came within `level` bytes of the limit in force
 *                                (the cgroup's or hard_limit, the lower; level 0: strata's
 *                                own limit headroom), and left it again
 *   STRATA_EVENT_SOFT_LIMIT      resident crossed soft_limit (level 0), up and down
 *   STRATA_EVENT_PRESSURE        the kernel reported memory stalls (Linux PSI; level 0);
 *                                strata has purged what it could before the call
 * strata_event_register returns 0 (and *id, may be NULL) or EINVAL (bad kind, level or
 * NULL cb), ENOMEM (64 registrations) or EAGAIN (no thread could be started). After
 * strata_event_unregister returns, the callback is not running and will not run again
 * (0, or ENOENT for an unknown id). A registration starts the monitor thread even with
 * background_thread:false. */
enum {
  STRATA_EVENT_RESIDENT = 1,
  STRATA_EVENT_LIMIT_HEADROOM = 2,
  STRATA_EVENT_SOFT_LIMIT = 3,
  STRATA_EVENT_PRESSURE = 4
};
typedef struct {
  unsigned kind;          /* STRATA_EVENT_* */
  unsigned id;            /* the registration's id */
  int direction;          /* 1: crossed upward (pressure: always 1), -1: back below */
  unsigned long long level;      /* the level crossed, in bytes of resident memory */
  unsigned long long resident;   /* strata's resident bytes at the check */
  unsigned long long limit;      /* limit in force (cgroup or hard_limit), 0 if none */
  unsigned long long soft_limit; /* 0 if none */
  unsigned long long purged;     /* pressure: bytes strata purged before the call */
  unsigned long long stall_us;   /* pressure: microseconds tasks stalled since the last report */
} strata_event_t;
typedef void (*strata_event_cb_t)(const strata_event_t *event, void *arg);
STRATA_EXPORT int strata_event_register(unsigned kind, unsigned long long level, strata_event_cb_t cb, void *arg,
                                        unsigned *id);
STRATA_EXPORT int strata_event_unregister(unsigned id);

/* ---- jemalloc's names: exported by the default build (STRATA_OVERRIDE=ON). Define
 * STRATA_PREFIX_ONLY when using a prefixed build, where only the strata_ names exist. */
#ifndef STRATA_PREFIX_ONLY
STRATA_MALLOC_ATTR void *mallocx(size_t size, int flags);
void *rallocx(void *ptr, size_t size, int flags);
size_t xallocx(void *ptr, size_t size, size_t extra, int flags);
size_t sallocx(const void *ptr, int flags);
void dallocx(void *ptr, int flags);
void sdallocx(void *ptr, size_t size, int flags);
size_t nallocx(size_t size, int flags);
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
int mallctlnametomib(const char *name, size_t *mibp, size_t *miblenp);
int mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
void malloc_stats_print(void (*write_cb)(void *, const char *), void *cbopaque, const char *opts);
extern const char *malloc_conf;
extern const char *malloc_conf_2_conf_harder;
extern void (*malloc_message)(void *cbopaque, const char *s);
#endif

#ifdef __cplusplus
}
#endif
#endif /* STRATA_H */

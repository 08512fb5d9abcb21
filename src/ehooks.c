/*
 * ehooks.c - the page source of an arena: os.c by default, or the program's extent hooks
 * (jemalloc 5.3's extent_hooks_t). extent.c asks here only when an arena has hooks; each
 * wrapper marks the thread in_hook around the call, so that a hook's own malloc and free
 * are served by arena 0 without a cache (jemalloc's reentrancy rule), and treats a NULL
 * member as "not supported" (true, as a failing hook). Relies on os.c only.
 */
#include <errno.h>
#include <sys/mman.h>

#include "internal.h"

/* ---------------------------------------------------------------- the defaults */
/* What arena.<i>.extent_hooks reads for an arena without hooks; a program may call these
 * from its own hooks (a hook that wraps the defaults, as jemalloc's tests do). */
static void *default_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero,
                           bool *commit, unsigned ind) {
  (void)h;
  (void)ind;
  void *p;
  if (new_addr != NULL) {
    p = mmap(new_addr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (p != new_addr) {
      munmap(p, size);
      return NULL;
    }
  } else {
    p = os_map(size, align);
    if (p == NULL) return NULL;
  }
  *zero = true;
  *commit = true;
  return p;
}

/* With opt.retain the address space is kept (true: "not released"), as jemalloc does. */
static bool default_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind) {
  (void)h;
  (void)committed;
  (void)ind;
  if (opt.retain) return true;
  os_unmap(addr, size);
  return false;
}

static void default_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind) {
  (void)h;
  (void)committed;
  (void)ind;
  os_unmap(addr, size);
}

static bool default_commit(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len, unsigned ind) {
  (void)h;
  (void)size;
  (void)ind;
  return mprotect((char *)addr + off, len, PROT_READ | PROT_WRITE) != 0;
}

/* Linux overcommits: like jemalloc there, decommit is not offered (purge_forced follows). */
static bool default_decommit(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len, unsigned ind) {
  (void)h;
  (void)addr;
  (void)size;
  (void)off;
  (void)len;
  (void)ind;
  return true;
}

static bool default_purge_lazy(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
                               unsigned ind) {
  (void)h;
  (void)size;
  (void)ind;
#ifdef MADV_FREE
  return madvise((char *)addr + off, len, MADV_FREE) != 0;
#else
  return true;
#endif
}

static bool default_purge_forced(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
                                 unsigned ind) {
  (void)h;
  (void)size;
  (void)ind;
  return madvise((char *)addr + off, len, MADV_DONTNEED) != 0;
}

static bool default_split(extent_hooks_t *h, void *addr, size_t size, size_t a, size_t b, bool c, unsigned ind) {
  (void)h;
  (void)addr;
  (void)size;
  (void)a;
  (void)b;
  (void)c;
  (void)ind;
  return false;
}

static bool default_merge(extent_hooks_t *h, void *a, size_t sa, void *b, size_t sb, bool c, unsigned ind) {
  (void)h;
  (void)a;
  (void)sa;
  (void)b;
  (void)sb;
  (void)c;
  (void)ind;
  return false;
}

extent_hooks_t ehooks_default = {default_alloc,      default_dalloc,       default_destroy,
                                 default_commit,     default_decommit,     default_purge_lazy,
                                 default_purge_forced, default_split,      default_merge};

/* ---------------------------------------------------------------- calling a hook */
/* The thread is in_hook for the call: its allocations go to arena 0 uncached, and the
 * signal re-entry guard (reentrant) is lifted so that they are served at all. errno is
 * the program's business, not the hook's. */
typedef struct {
  uint8_t reentrant, in_hook;
  int err;
} hook_state_t;

static inline hook_state_t hook_enter(void) {
  tsd_t *t = &strata_tsd;
  hook_state_t s = {t->reentrant, t->in_hook, errno};
  t->reentrant = 0;
  t->in_hook = 1;
  return s;
}

static inline void hook_leave(hook_state_t s) {
  tsd_t *t = &strata_tsd;
  t->reentrant = s.reentrant;
  t->in_hook = s.in_hook;
  errno = s.err;
}

void *ehooks_alloc(arena_t *a, extent_hooks_t *h, size_t size, size_t align, bool *zero, bool *commit) {
  hook_state_t s = hook_enter();
  void *p = h->alloc(h, NULL, size, align, zero, commit, a->ind);
  hook_leave(s);
  /* A misaligned or unaligned answer would corrupt the page map: refuse it, loudly. */
  if (p != NULL && ((uintptr_t)p & (align - 1)) != 0) {
    msg_write("<strata>: extent hook alloc returned a misaligned address: extent given back\n");
    if (ehooks_dalloc(a, h, p, size, *commit)) ehooks_destroy(a, h, p, size, *commit);
    return NULL;
  }
  return p;
}

#define HOOK_CALL(member, ...)          \
  do {                                  \
    if (h->member == NULL) return true; \
    hook_state_t s = hook_enter();      \
    bool r = h->member(h, __VA_ARGS__); \
    hook_leave(s);                      \
    return r;                           \
  } while (0)

bool ehooks_dalloc(arena_t *a, extent_hooks_t *h, void *addr, size_t size, bool committed) {
  HOOK_CALL(dalloc, addr, size, committed, a->ind);
}

void ehooks_destroy(arena_t *a, extent_hooks_t *h, void *addr, size_t size, bool committed) {
  if (h->destroy == NULL) return; /* the address space stays the hook's */
  hook_state_t s = hook_enter();
  h->destroy(h, addr, size, committed, a->ind);
  hook_leave(s);
}

bool ehooks_commit(arena_t *a, extent_hooks_t *h, void *addr, size_t size) {
  HOOK_CALL(commit, addr, size, 0, size, a->ind);
}

bool ehooks_decommit(arena_t *a, extent_hooks_t *h, void *addr, size_t size) {
  HOOK_CALL(decommit, addr, size, 0, size, a->ind);
}

bool ehooks_purge_lazy(arena_t *a, extent_hooks_t *h, void *addr, size_t size) {
  HOOK_CALL(purge_lazy, addr, size, 0, size, a->ind);
}

bool ehooks_purge_forced(arena_t *a, extent_hooks_t *h, void *addr, size_t size) {
  HOOK_CALL(purge_forced, addr, size, 0, size, a->ind);
}

bool ehooks_split(arena_t *a, extent_hooks_t *h, void *addr, size_t size, size_t size_a, bool committed) {
  HOOK_CALL(split, addr, size, size_a, size - size_a, committed, a->ind);
}

bool ehooks_merge(arena_t *a, extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
                  bool committed) {
  HOOK_CALL(merge, addr_a, size_a, addr_b, size_b, committed, a->ind);
}

/*
 * hooks.c - jemalloc's experimental allocation hooks (experimental.hooks.install and
 * remove: the program's alloc, dalloc and expand functions called after each call), and
 * the slow-path tick that serves them, thread.allocatedp and opt.stats_interval. Nothing
 * here is on the malloc or free fast paths: while a hook is installed, malloc's size table
 * is emptied (as prof:true does) so every malloc takes its slow path, and each thread
 * gives up its cache at its next slow path, so that its frees take free's slow path too.
 */
#include <errno.h>
#include <string.h>

#include "ctl.h"

/* ---------------------------------------------------------------- the registry */
#define HOOK_MAX 4 /* jemalloc's limit: a fifth install answers EAGAIN */
typedef struct {
  uint32_t gen;   /* odd while the slot is written (readers retry) */
  bool in_use;
  hooks_t h;
} hook_slot_t;
static hook_slot_t hook_slots[HOOK_MAX];
static mtx_t hooks_lock = MTX_INITIALIZER; /* install and remove; a leaf lock */
unsigned hooks_n;   /* atomic: hooks installed */
bool slow_tick_on;  /* atomic: ialloc and free's slow path call slow_tick */
static unsigned hooks_epoch; /* atomic: changes at each install and remove */

/* Per thread: its place in hooks_epoch, whether it gave up its cache for the hooks, the
 * guard that keeps a hook's own mallocs from calling hooks again, and the counters
 * thread.allocatedp and deallocatedp point at. */
typedef struct {
  unsigned epoch;
  bool cache_given_up, in_hook, published;
  uint64_t allocated, deallocated;
} hooks_tsd_t;
static __thread hooks_tsd_t hooks_tsd __attribute__((tls_model("initial-exec")));

static void tick_update(void) {
  bool on = __atomic_load_n(&hooks_n, __ATOMIC_RELAXED) != 0 || opt.stats_interval >= 0 ||
            __atomic_load_n(&slow_tick_on, __ATOMIC_RELAXED);
  __atomic_store_n(&slow_tick_on, on, __ATOMIC_RELEASE);
  if (on) __atomic_store_n(&bg_create_pending, true, __ATOMIC_RELEASE); /* the tick rides on it */
}

static bool slot_read(unsigned i, hooks_t *out) {
  hook_slot_t *s = &hook_slots[i];
  for (;;) {
    uint32_t g = __atomic_load_n(&s->gen, __ATOMIC_ACQUIRE);
    if (g & 1) continue;
    bool used = __atomic_load_n(&s->in_use, __ATOMIC_RELAXED);
    memcpy(out, &s->h, sizeof(*out));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&s->gen, __ATOMIC_RELAXED) == g) return used;
  }
}

static void *hooks_install(const hooks_t *h) {
  mtx_lock(&hooks_lock);
  hook_slot_t *s = NULL;
  for (unsigned i = 0; i < HOOK_MAX && !s; i++) {
    if (!hook_slots[i].in_use) s = &hook_slots[i];
  }
  if (s) {
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    s->h = *h;
    s->in_use = true;
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
    if (__atomic_add_fetch(&hooks_n, 1, __ATOMIC_RELEASE) == 1) sz_malloc_divert(true);
    __atomic_add_fetch(&hooks_epoch, 1, __ATOMIC_RELEASE);
    tick_update();
  }
  mtx_unlock(&hooks_lock);
  return s;
}

static bool hooks_remove(void *handle) {
  mtx_lock(&hooks_lock);
  hook_slot_t *s = handle;
  bool bad = s < hook_slots || s >= hook_slots + HOOK_MAX || (uintptr_t)((char *)s - (char *)hook_slots) % sizeof(*s) ||
             !s->in_use;
  if (!bad) {
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
    s->in_use = false;
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
    if (__atomic_sub_fetch(&hooks_n, 1, __ATOMIC_RELEASE) == 0) sz_malloc_divert(false);
    __atomic_add_fetch(&hooks_epoch, 1, __ATOMIC_RELEASE);
  }
  mtx_unlock(&hooks_lock);
  return bad;
}

/* ---------------------------------------------------------------- invocation */
void hook_invoke_alloc(int type, void *result, uintptr_t result_raw, uintptr_t a0, uintptr_t a1, uintptr_t a2) {
  if (hooks_tsd.in_hook) return;
  hooks_tsd.in_hook = true;
  for (unsigned i = 0; i < HOOK_MAX; i++) {
    hooks_t h;
    if (!slot_read(i, &h) || h.alloc_hook == NULL) continue;
    uintptr_t args[3] = {a0, a1, a2};
    h.alloc_hook(h.extra, (hook_alloc_t)type, result, result_raw, args);
  }
  hooks_tsd.in_hook = false;
}

void hook_invoke_dalloc(int type, void *address, uintptr_t a0, uintptr_t a1, uintptr_t a2) {
  if (hooks_tsd.in_hook) return;
  hooks_tsd.in_hook = true;
  for (unsigned i = 0; i < HOOK_MAX; i++) {
    hooks_t h;
    if (!slot_read(i, &h) || h.dalloc_hook == NULL) continue;
    uintptr_t args[3] = {a0, a1, a2};
    h.dalloc_hook(h.extra, (hook_dalloc_t)type, address, args);
  }
  hooks_tsd.in_hook = false;
}

void hook_invoke_expand(int type, void *address, size_t old_usize, size_t new_usize, uintptr_t result_raw,
                        uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3) {
  if (hooks_tsd.in_hook) return;
  hooks_tsd.in_hook = true;
  for (unsigned i = 0; i < HOOK_MAX; i++) {
    hooks_t h;
    if (!slot_read(i, &h) || h.expand_hook == NULL) continue;
    uintptr_t args[4] = {a0, a1, a2, a3};
    h.expand_hook(h.extra, (hook_expand_t)type, address, old_usize, new_usize, result_raw, args);
  }
  hooks_tsd.in_hook = false;
}

/* ---------------------------------------------------------------- the slow-path tick */
/* The slow paths' bg_create_wanted (background.c), with nothing of strata's held, while
 * slow_tick_on: ialloc after each allocation it counts, free's slow path after each free. */
void slow_tick(tsd_t *tsd) {
  unsigned ep = __atomic_load_n(&hooks_epoch, __ATOMIC_ACQUIRE);
  if (unlikely(ep != hooks_tsd.epoch)) {
    hooks_tsd.epoch = ep;
    bool want_off = __atomic_load_n(&hooks_n, __ATOMIC_ACQUIRE) != 0;
    if (want_off && tsd->state == TSD_ACTIVE) {
      /* frees must reach free's slow path, where the dalloc hook is called */
      tcache_set_enabled(tsd, false);
      hooks_tsd.cache_given_up = true;
    } else if (!want_off && hooks_tsd.cache_given_up) {
      tcache_set_enabled(tsd, true);
      hooks_tsd.cache_given_up = false;
    }
  }
  if (hooks_tsd.published) tcache_counts(tsd, &hooks_tsd.allocated, &hooks_tsd.deallocated);
  if (opt.stats_interval >= 0) stats_interval_tick(tsd);
}

/* ---------------------------------------------------------------- mallctl handlers */
#define READONLY() \
  do { \
    if (newp != NULL || newlen != 0) return EPERM; \
  } while (0)

int hooks_ctl_install(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  if (oldp == NULL || oldlenp == NULL || newp == NULL) return EINVAL;
  if (newlen != sizeof(hooks_t) || *oldlenp != sizeof(void *)) return EINVAL;
  void *handle = hooks_install((const hooks_t *)newp);
  if (handle == NULL) return EAGAIN;
  return ctl_copy_out(oldp, oldlenp, &handle, sizeof(handle));
}

int hooks_ctl_remove(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  if (oldp != NULL || oldlenp != NULL) return EPERM;
  void *handle;
  if (newp == NULL || newlen != sizeof(handle)) return EINVAL;
  memcpy(&handle, newp, sizeof(handle));
  if (handle == NULL || hooks_remove(handle)) return EINVAL;
  return 0;
}

int hooks_ctl_safety_check_abort(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                                 size_t newlen) {
  (void)mib, (void)miblen;
  if (oldp != NULL || oldlenp != NULL) return EPERM;
  if (newp != NULL) {
    safety_check_hook_t *h;
    if (newlen != sizeof(h)) return EINVAL;
    memcpy(&h, newp, sizeof(h));
    __atomic_store_n(&safety_check_hook, h, __ATOMIC_RELEASE);
  }
  return 0;
}

/* thread.allocatedp / thread.deallocatedp: pointers to this thread's counters. They are
 * brought up to date at the thread's slow paths (cache misses and fills, flushes, large
 * blocks) and at each read of thread.allocated: the fast paths keep their counts per
 * cache bin, and summing the bins on every malloc and free would cost both fast paths
 * (docs/jemalloc-compat.md gives the bound). */
int hooks_ctl_thread_countp(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                            size_t newlen) {
  (void)miblen;
  READONLY();
  tsd_t *tsd = tsd_fetch();
  if (tsd == NULL) return EAGAIN;
  if (!hooks_tsd.published) {
    hooks_tsd.published = true;
    __atomic_store_n(&slow_tick_on, true, __ATOMIC_RELEASE);
    __atomic_store_n(&bg_create_pending, true, __ATOMIC_RELEASE);
  }
  tcache_counts(tsd, &hooks_tsd.allocated, &hooks_tsd.deallocated);
  uint64_t *p = mib[1] == CTL_THREAD_ALLOCATEDP ? &hooks_tsd.allocated : &hooks_tsd.deallocated;
  return ctl_copy_out(oldp, oldlenp, &p, sizeof(p));
}

/* thread.allocated and deallocated read refresh the published pair too. */
void hooks_publish(tsd_t *tsd) {
  if (hooks_tsd.published) tcache_counts(tsd, &hooks_tsd.allocated, &hooks_tsd.deallocated);
}

/* experimental.batch_alloc: jemalloc's packet in, the number of blocks filled out. */
typedef struct {
  void **ptrs;
  size_t num, size;
  int flags;
} batch_alloc_packet_t;
int hooks_ctl_batch_alloc(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)mib, (void)miblen;
  if (oldp == NULL || oldlenp == NULL || *oldlenp != sizeof(size_t)) return EINVAL;
  batch_alloc_packet_t b;
  if (newp == NULL || newlen != sizeof(b)) return EINVAL;
  memcpy(&b, newp, sizeof(b));
  size_t filled = 0;
  for (; filled < b.num; filled++) {
    void *p = strata_mallocx(b.size, b.flags);
    if (p == NULL) break;
    b.ptrs[filled] = p;
  }
  return ctl_copy_out(oldp, oldlenp, &filled, sizeof(filled));
}

/* experimental.arenas_create_ext: arenas.create with jemalloc's arena_config_t. No new
 * value is jemalloc's arena_config_default: default hooks, metadata_use_hooks true. With
 * hooks and metadata_use_hooks, the arena's metadata comes from its alloc hook
 * (arenas_user.c, au_create); with the default hooks it comes from strata's own pools,
 * which take their pages from the OS as the default hooks would. */
typedef struct {
  extent_hooks_t *extent_hooks;
  bool metadata_use_hooks;
} arena_config_t;
int hooks_ctl_arenas_create_ext(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                                size_t newlen) {
  (void)mib, (void)miblen;
  arena_config_t c = {NULL, true};
  if (newp != NULL) {
    if (newlen != sizeof(c)) return EINVAL;
    memcpy(&c, newp, sizeof(c));
  }
  if (c.extent_hooks == NULL) return au_create(oldp, oldlenp, NULL, c.metadata_use_hooks);
  return au_create(oldp, oldlenp, &c.extent_hooks, c.metadata_use_hooks);
}

static bool arena_exists(size_t ind) {
  if (ind >= ARENAS_MAX || ind >= __atomic_load_n(&narenas_total, __ATOMIC_ACQUIRE)) return false;
  arena_t *a = __atomic_load_n(&arenas[ind], __ATOMIC_ACQUIRE);
  return a && !__atomic_load_n(&a->destroyed, __ATOMIC_ACQUIRE);
}

/* arena.<i>.dss: strata never uses sbrk: it reads "disabled" always. jemalloc's three
 * settings are accepted (a program built for jemalloc on Linux, where sbrk is supported,
 * expects them to succeed) with no effect; another string is EINVAL. */
int hooks_ctl_arena_dss(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
  (void)miblen;
  if (mib[1] != CTL_ARENAS_ALL && mib[1] != __atomic_load_n(&narenas_total, __ATOMIC_RELAXED) && !arena_exists(mib[1]))
    return EFAULT;
  if (newp != NULL) {
    const char *v;
    if (newlen != sizeof(v)) return EINVAL;
    memcpy(&v, newp, sizeof(v));
    if (v == NULL) return EINVAL;
    if (strcmp(v, "primary") != 0 && strcmp(v, "secondary") != 0 && strcmp(v, "disabled") != 0) return EINVAL;
  }
  const char *r = "disabled";
  return ctl_copy_out(oldp, oldlenp, &r, sizeof(r));
}

/* fork: hooks_lock in the child */
void hooks_postfork_child(void) { mtx_init(&hooks_lock); }

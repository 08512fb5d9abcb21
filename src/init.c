/*
 * init.c - lazy, re-entrant initialisation (safe before main, from the dynamic loader and
 * under dlsym), the thread state, and fork handling. Lock order, which prefork follows:
 * bg_lock (background.c), init_lock, tcache_list_lock, arenas_lock, then per arena in index
 * order its bin locks (by class), its elock and its mlock, then guard_lock, rtree_lock, meta_lock,
 * and last bt_lock (backtrace.c: a leaf, held only while unwinding).
 */
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

bool strata_ready;
__thread tsd_t strata_tsd __attribute__((tls_model("initial-exec"))) = {.tcache = &tcache_empty};
pthread_key_t tsd_key;
bool tsd_key_ready;
uint64_t ctl_epoch = 1;

static mtx_t init_lock = MTX_INITIALIZER;
static pid_t init_owner;

static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

bool strata_init(void) {
  if (__atomic_load_n(&strata_ready, __ATOMIC_ACQUIRE)) return false;
  pid_t tid = os_gettid();
  /* Nothing below allocates, so re-entry means a signal handler interrupted us. */
  if (__atomic_load_n(&init_owner, __ATOMIC_RELAXED) == tid) return true;
  mtx_lock(&init_lock);
  if (strata_ready) {
    mtx_unlock(&init_lock);
    return false;
  }
  __atomic_store_n(&init_owner, tid, __ATOMIC_RELAXED);
  os_init();
  /* The double-free tag key: random, never zero. */
  if (syscall(SYS_getrandom, &tcache_key, sizeof(tcache_key), 0) != (long)sizeof(tcache_key)) {
    tcache_key = (uintptr_t)&tcache_key ^ (uintptr_t)decay_now() * 0x9e3779b97f4a7c15u;
  }
  /* Low nibble fixed at 0xb: a free block's encoded link then ends in that nibble (its
   * next and its slot are 16-aligned), so a one-byte write of 0, of a letter, digit or
   * space other than + K [ k {, or any +-1 change moves the decoded link off its class's
   * alignment, which malloc checks before it returns it (60 bits of the key stay secret). */
  tcache_key = (tcache_key & ~(uintptr_t)0xf) | 0xb;
  conf_init();
  arenas_dirty_decay_ms = opt.dirty_decay_ms;
  arenas_muzzy_decay_ms = opt.muzzy_decay_ms;
  limit_soft = opt.soft_limit;
  limit_hard = opt.hard_limit;
  prof_boot();
  sz_init();
  meta_pool_init(META_POOL_EDATA, sizeof(edata_t));
  slab_boot();
  narenas = opt.narenas ? opt.narenas : 4 * os_ncpus;
  if (narenas > 4095) narenas = 4095;
  /* arena_spread opens arenas on contention (arena.c); otherwise all are live at once. */
  narenas_live = opt.arena_spread && !opt.narenas ? 1 : narenas;
  tcache_boot();
  guard_boot();
  arenas = meta_alloc(sizeof(arena_t *) * ARENAS_MAX); /* user arenas follow the oversize one */
  narenas_total = narenas + 1;
  if (arenas == NULL || arena_get(0) == NULL) {
    __atomic_store_n(&init_owner, 0, __ATOMIC_RELAXED);
    mtx_unlock(&init_lock);
    return true;
  }
  bg_boot();
  if (opt.confirm_conf) conf_print(&opt);
  __atomic_store_n(&strata_ready, true, __ATOMIC_RELEASE);
  __atomic_store_n(&init_owner, 0, __ATOMIC_RELAXED);
  mtx_unlock(&init_lock);
  /* These may call malloc: strata is ready, so that is served normally. */
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  /* Registered after: its prepare runs first, so ctl_lock precedes every lock above. */
  pthread_atfork(ctl_prefork, ctl_postfork_parent, ctl_postfork_child);
  if (pthread_key_create(&tsd_key, tcache_thread_exit) == 0) {
    __atomic_store_n(&tsd_key_ready, true, __ATOMIC_RELEASE);
  }
  prof_boot_late();
  return false;
}

tsd_t *tsd_fetch(void) {
  if (unlikely(!__atomic_load_n(&strata_ready, __ATOMIC_ACQUIRE)) && strata_init()) return NULL;
  return &strata_tsd;
}

/* ---------------------------------------------------------------- fork */
static void fork_locks(void (*op)(mtx_t *), bool reverse) {
  mtx_t *order[3] = {&init_lock, &tcache_list_lock, &arenas_lock};
  mtx_t *tail[3] = {&guard_lock, &rtree_lock, &meta_lock};
  if (!reverse) {
    for (int i = 0; i < 3; i++) op(order[i]);
    for (unsigned i = 0; i < narenas_total; i++) {
      arena_t *a = arenas[i];
      if (a == NULL) continue;
      for (unsigned b = 1; b <= SZ_NSMALL; b++) op(&a->bins[b].lock);
      op(&a->elock);
      op(&a->mlock);
    }
    for (int i = 0; i < 3; i++) op(tail[i]);
  } else {
    for (int i = 2; i >= 0; i--) op(tail[i]);
    for (unsigned i = narenas_total; i-- > 0;) {
      arena_t *a = arenas[i];
      if (a == NULL) continue;
      op(&a->mlock);
      op(&a->elock);
      for (unsigned b = SZ_NSMALL; b >= 1; b--) op(&a->bins[b].lock);
    }
    for (int i = 2; i >= 0; i--) op(order[i]);
  }
}

static void op_lock(mtx_t *m) { mtx_lock(m); }
static void op_unlock(mtx_t *m) { mtx_unlock(m); }
static void op_reinit(mtx_t *m) { mtx_init(m); }

/* The profiler's locks (prof_dump_lock, prof_lock; prof.c nests meta_lock) come right
 * after bg_lock. */
static void fork_prepare(void) {
  bg_prefork(); /* bg_lock comes first: toggling holds it while it joins threads */
  prof_prefork();
  fork_locks(op_lock, false);
  bt_prefork(); /* a leaf: last (backtrace.c) */
}
static void fork_parent(void) {
  bt_postfork(false);
  fork_locks(op_unlock, true);
  bg_postfork_parent();
  prof_postfork(false);
}

static void fork_child(void) {
  bt_postfork(true);
  fork_locks(op_reinit, true);
  meta_postfork_child();
  bg_postfork_child();
  ev_postfork_child();
  hooks_postfork_child();
  compat_postfork_child();
  prof_postfork(true);
  /* Only the forking thread exists in the child: other threads' caches stay allocated
   * (their regions are lost to the child, as with every allocator) but are unlisted so
   * that nothing walks them. The caller's own cache stays live. */
  tcache_t *self = strata_tsd.state == TSD_ACTIVE ? strata_tsd.tcache : NULL;
  tcache_list = self;
  if (self) self->next = self->prev = NULL;
  tcache_total = self ? self->bytes : 0; /* the other caches are gone */
  tcache_nlive = self ? 1 : 0;
  for (unsigned i = 0; i < narenas_total; i++) {
    if (arenas[i]) arenas[i]->nthreads = 0;
  }
  if (strata_tsd.arena) strata_tsd.arena->nthreads = 1;
}

/*
 * guard.c - sampled guarded allocations (in the spirit of GWP-ASan), off by default.
 * With guard_sample_interval:N, one in N regions a thread cache takes from the arenas is
 * served instead from a pool slot: its own page, the block aligned to the page's end,
 * then an inaccessible guard page. A freed slot is made inaccessible again and queued
 * behind every other free slot (a bounded quarantine), so an overflow or a use after free
 * faults at once; the SIGSEGV handler below prints the block and both stacks with raw
 * write(2), then lets the fault take its default action. Relies on os (mmap), rtree
 * (the block's entry points at the slot's own edata) and meta; hooked from the cache fill.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unwind.h>

#include "internal.h"

/* Slots in the pool: 256 x 2 pages is 2 MiB of address space with 4 KiB pages, at most
 * 1 MiB resident; it bounds both the live guarded blocks and the quarantine (GWP-ASan
 * defaults to 16 live ones; more slots keep freed ones inaccessible for longer). */
#define GUARD_SLOTS 256
#define GUARD_FRAMES 16

enum { SLOT_UNUSED = 0, SLOT_LIVE, SLOT_FREED };

typedef struct {
  edata_t ed;         /* what the rtree entry of a live block points at (16-byte aligned) */
  uintptr_t block;    /* the last block handed out of this slot */
  size_t usize;
  uint8_t state;
  pid_t alloc_tid, free_tid;
  uint32_t nalloc, nfree; /* frames captured */
  uintptr_t alloc_stack[GUARD_FRAMES];
  uintptr_t free_stack[GUARD_FRAMES];
} __attribute__((aligned(16))) guard_slot_t;

bool guard_enabled;
mtx_t guard_lock = MTX_INITIALIZER;
/* Guarded by guard_lock; the pool's bounds and slots are read by the signal handler. */
static uintptr_t guard_pool;
static size_t guard_pool_size;
static guard_slot_t *guard_slots;
static uint16_t guard_queue[GUARD_SLOTS]; /* free slots, oldest freed first */
static unsigned guard_qhead, guard_qlen;
static bool guard_pool_failed;
static uint64_t guard_nallocs;
static struct sigaction guard_old_segv;
static __thread size_t guard_countdown; /* regions left before this thread's next sample */

void guard_boot(void) { guard_enabled = opt.guard_sample_interval != 0; }

/* ---------------------------------------------------------------- stacks */
/* The caller's stack, without strata's own frames (backtrace.c). */
static inline uint32_t guard_backtrace(uintptr_t *pcs) { return strata_backtrace(pcs, GUARD_FRAMES); }

/* ---------------------------------------------------------------- reports */
static void print_stack(const char *what, pid_t tid, const uintptr_t *pcs, uint32_t n) {
  char t[24];
  const char *head[] = {"<strata>: ", what, " by thread ", fmt_u64(t, (uint64_t)tid), " at:\n"};
  msg_parts(head, 5);
  for (uint32_t i = 0; i < n; i++) {
    char num[24], pc[24];
    const char *parts[] = {"<strata>:   #", fmt_u64(num, i), " ", fmt_hex(pc, pcs[i]), "\n"};
    msg_parts(parts, 5);
  }
}

/* What is known about address a inside the pool: the slot it falls in and its block. */
static void describe(uintptr_t a, const char *kind_live, const char *kind_freed) {
  size_t slot_size = 2 * os_page;
  size_t i = (a - guard_pool) / slot_size;
  guard_slot_t *s = &guard_slots[i];
  uintptr_t page = guard_pool + i * slot_size;
  char h1[24], h2[24], n1[24], n2[24];
  if (s->state == SLOT_UNUSED) {
    const char *parts[] = {"<strata>: guarded allocation: wild access at ", fmt_hex(h1, a),
                           " (an unused slot of the guard pool)\n"};
    msg_parts(parts, 3);
    return;
  }
  const char *kind = s->state == SLOT_LIVE ? kind_live : kind_freed;
  const char *where;
  uintptr_t off;
  if (a >= s->block + s->usize) {
    where = " bytes after the ";
    off = a - (s->block + s->usize);
  } else if (a >= s->block) {
    where = " bytes inside the ";
    off = a - s->block;
  } else {
    where = " bytes before the ";
    off = s->block - a;
  }
  (void)page;
  const char *parts[] = {"<strata>: guarded allocation: ", kind, " at ", fmt_hex(h1, a), ", ",
                         fmt_u64(n1, off), where, fmt_u64(n2, s->usize), "-byte block at ",
                         fmt_hex(h2, s->block), s->state == SLOT_LIVE ? " (live)\n" : " (freed)\n"};
  msg_parts(parts, 11);
  print_stack("allocated", s->alloc_tid, s->alloc_stack, s->nalloc);
  if (s->state == SLOT_FREED) print_stack("freed", s->free_tid, s->free_stack, s->nfree);
}

static bool in_pool(uintptr_t a) {
  uintptr_t pool = __atomic_load_n(&guard_pool, __ATOMIC_ACQUIRE);
  return pool != 0 && a >= pool && a - pool < guard_pool_size;
}

void guard_describe(const void *p) {
  if (in_pool((uintptr_t)p)) describe((uintptr_t)p, "invalid free", "double free");
}

/* Async-signal-safe: reads the slots (no lock: the faulting thread may hold it), writes
 * with write(2). A fault in the pool is reported, then the default action is restored
 * and the faulting instruction runs again, so the process dies of SIGSEGV as it would
 * have; any other fault goes to the handler that was installed before strata's. */
static void guard_segv(int sig, siginfo_t *si, void *uc) {
  uintptr_t a = (uintptr_t)si->si_addr;
  if (in_pool(a)) {
    describe(a, "heap-buffer-overflow", "use-after-free");
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    return;
  }
  /* Not ours: the previous handler runs (and stays chained for later faults), or, if
   * there was none, its disposition is restored and the fault repeats under it. */
  if ((guard_old_segv.sa_flags & SA_SIGINFO) && guard_old_segv.sa_sigaction != NULL) {
    guard_old_segv.sa_sigaction(sig, si, uc);
  } else if (!(guard_old_segv.sa_flags & SA_SIGINFO) && guard_old_segv.sa_handler != SIG_DFL &&
             guard_old_segv.sa_handler != SIG_IGN) {
    guard_old_segv.sa_handler(sig);
  } else {
    sigaction(sig, &guard_old_segv, NULL);
  }
}

/* ---------------------------------------------------------------- pool */
static bool pool_create(void) { /* guard_lock held */
  size_t size = (size_t)GUARD_SLOTS * 2 * os_page;
  void *m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
  guard_slots = meta_alloc(sizeof(guard_slot_t) * GUARD_SLOTS);
  if (guard_slots == NULL || rtree_ensure((uintptr_t)m, size)) {
    munmap(m, size);
    return false;
  }
  for (unsigned i = 0; i < GUARD_SLOTS; i++) guard_queue[i] = (uint16_t)i;
  guard_qhead = 0;
  guard_qlen = GUARD_SLOTS;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = guard_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &guard_old_segv);
  guard_pool_size = size;
  __atomic_store_n(&guard_pool, (uintptr_t)m, __ATOMIC_RELEASE);
  return true;
}

static void *guard_alloc(szind_t ind) {
  size_t usize = sz_size[ind];
  uintptr_t pcs[GUARD_FRAMES];
  uint32_t n = guard_backtrace(pcs); /* outside the lock: the unwinder takes the loader's */
  mtx_lock(&guard_lock);
  if (guard_pool == 0 && (guard_pool_failed || (guard_pool_failed = !pool_create()))) {
    mtx_unlock(&guard_lock);
    return NULL;
  }
  if (guard_qlen == 0) { /* every slot live: this one is not sampled */
    mtx_unlock(&guard_lock);
    return NULL;
  }
  unsigned i = guard_queue[guard_qhead];
  uintptr_t page = guard_pool + (uintptr_t)i * 2 * os_page;
  if (mprotect((void *)page, os_page, PROT_READ | PROT_WRITE) != 0) {
    mtx_unlock(&guard_lock);
    return NULL; /* out of memory (map count or commit limit): not sampled */
  }
  guard_qhead = (guard_qhead + 1) % GUARD_SLOTS;
  guard_qlen--;
  guard_slot_t *s = &guard_slots[i];
  uintptr_t block = page + os_page - usize; /* naturally aligned: usize's low bits */
  s->block = block;
  s->usize = usize;
  s->state = SLOT_LIVE;
  s->alloc_tid = os_gettid();
  s->nalloc = n;
  memcpy(s->alloc_stack, pcs, sizeof(pcs[0]) * n);
  s->nfree = 0;
  s->ed.addr = block;
  s->ed.size = os_page;
  s->ed.szind = (uint16_t)ind;
  s->ed.arena_id = GUARD_ARENA;
  s->ed.slab = 0;
  __atomic_store_n(&s->ed.state, ES_ACTIVE, __ATOMIC_RELEASE);
  rtree_write(block, rt_make(&s->ed, 0, false));
  __atomic_store_n(&guard_nallocs, guard_nallocs + 1, __ATOMIC_RELAXED);
  mtx_unlock(&guard_lock);
  return (void *)block;
}

void *guard_fill_hook(szind_t ind, unsigned *want) {
  if (guard_countdown == 0) {
    guard_countdown = opt.guard_sample_interval - 1;
    if (sz_size[ind] <= os_page) {
      void *p = guard_alloc(ind);
      if (p) return p;
    }
  }
  /* The fill serves this allocation and the next want - 1: stop it where the countdown
   * ends, so the next sample is exactly interval regions later. */
  if (guard_countdown > 0 && *want > guard_countdown) *want = (unsigned)guard_countdown;
  guard_countdown -= guard_countdown >= *want ? *want : guard_countdown;
  return NULL;
}

void guard_free(void *p, edata_t *ed) {
  guard_slot_t *s = (guard_slot_t *)((char *)ed - offsetof(guard_slot_t, ed));
  uintptr_t pcs[GUARD_FRAMES];
  uint32_t n = guard_backtrace(pcs);
  mtx_lock(&guard_lock);
  if (s->state != SLOT_LIVE || s->block != (uintptr_t)p) {
    mtx_unlock(&guard_lock);
    strata_invalid_free("free", p);
  }
  uintptr_t page = s->block & ~(uintptr_t)(os_page - 1);
  __atomic_store_n(&s->ed.state, ES_DIRTY, __ATOMIC_RELEASE); /* lookups fail from now on */
  s->state = SLOT_FREED;
  s->free_tid = os_gettid();
  s->nfree = n;
  memcpy(s->free_stack, pcs, sizeof(pcs[0]) * n);
  /* Contents go (the page reads as zero when reused); the page faults until then. */
  madvise((void *)page, os_page, MADV_DONTNEED);
  mprotect((void *)page, os_page, PROT_NONE);
  unsigned i = (unsigned)((page - guard_pool) / (2 * os_page));
  guard_queue[(guard_qhead + guard_qlen) % GUARD_SLOTS] = (uint16_t)i;
  guard_qlen++;
  mtx_unlock(&guard_lock);
}

uint64_t guard_count(void) { return __atomic_load_n(&guard_nallocs, __ATOMIC_RELAXED); }

/* ---------------------------------------------------------------- mallctl */
static int ctl_read_only(void *oldp, size_t *oldlenp, const void *newp, const void *val, size_t len) {
  if (newp != NULL) return EPERM;
  if (oldp == NULL || oldlenp == NULL) return 0;
  if (*oldlenp != len) return EINVAL;
  memcpy(oldp, val, len);
  return 0;
}

int guard_ctl_sample_interval(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                              size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  size_t v = opt.guard_sample_interval;
  return ctl_read_only(oldp, oldlenp, newp, &v, sizeof(v));
}

int guard_ctl_allocs(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                     size_t newlen) {
  (void)mib, (void)miblen, (void)newlen;
  uint64_t v = guard_count();
  return ctl_read_only(oldp, oldlenp, newp, &v, sizeof(v));
}

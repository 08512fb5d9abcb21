/*
 * os.c - the OS page layer: run-time page size, mapping, purging, remapping, and the
 * facts about the machine the allocator sizes itself by (usable CPUs from the affinity
 * mask and cgroup cpu.max, the cgroup memory limit). Raw syscalls only: this runs
 * before libc is ready and must never allocate.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OS_PAGE_VARIABLE
#include "internal.h"
#include "probes.h"

size_t os_page = 4096;
unsigned os_lg_page = 12;
unsigned os_ncpus = 1;
uint64_t os_mem_limit = 0;
static size_t os_committed; /* atomic: active + dirty bytes of every arena */

pid_t os_gettid(void) { return (pid_t)syscall(SYS_gettid); }

int os_read_file(const char *path, char *buf, size_t cap) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = syscall(SYS_read, fd, buf + n, cap - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
  }
  syscall(SYS_close, fd);
  buf[n] = '\0';
  return (int)n;
}

static uint64_t parse_u64(const char **s, bool *ok) {
  uint64_t v = 0;
  *ok = false;
  while (**s >= '0' && **s <= '9') {
    v = v * 10 + (uint64_t)(**s - '0');
    (*s)++;
    *ok = true;
  }
  return v;
}

/* The cgroup v2 directory of this process ("0::/path"), or the v1 one for a controller. */
static bool cgroup_dir(const char *controller, char *out, size_t cap) {
  char buf[4096];
  if (os_read_file("/proc/self/cgroup", buf, sizeof(buf)) <= 0) return false;
  const char *line = buf;
  while (*line) {
    const char *end = line;
    while (*end && *end != '\n') end++;
    /* v2: "0::/path"; v1: "N:ctrl1,ctrl2:/path" */
    const char *c1 = line;
    while (c1 < end && *c1 != ':') c1++;
    const char *c2 = c1 + 1;
    while (c2 < end && *c2 != ':') c2++;
    if (c2 < end) {
      bool match;
      if (controller == NULL) {
        match = (c2 == c1 + 1);
      } else {
        size_t cl = 0;
        while (controller[cl]) cl++;
        match = false;
        for (const char *p = c1 + 1; p + cl <= c2; p++) {
          bool eq = true;
          for (size_t i = 0; i < cl; i++) eq &= (p[i] == controller[i]);
          if (eq && (p == c1 + 1 || p[-1] == ',') && (p + cl == c2 || p[cl] == ',')) match = true;
        }
      }
      if (match) {
        const char *base = controller ? "/sys/fs/cgroup/" : "/sys/fs/cgroup";
        size_t n = 0;
        for (const char *p = base; *p && n + 1 < cap; p++) out[n++] = *p;
        if (controller) {
          for (const char *p = controller; *p && n + 1 < cap; p++) out[n++] = *p;
        }
        for (const char *p = c2 + 1; p < end && n + 1 < cap; p++) out[n++] = *p;
        out[n] = '\0';
        return true;
      }
    }
    line = *end ? end + 1 : end;
  }
  return false;
}

static bool path_join(char *out, size_t cap, const char *dir, const char *file) {
  size_t n = 0;
  for (const char *p = dir; *p; p++) {
    if (n + 2 >= cap) return false;
    out[n++] = *p;
  }
  if (n && out[n - 1] != '/') out[n++] = '/';
  for (const char *p = file; *p; p++) {
    if (n + 1 >= cap) return false;
    out[n++] = *p;
  }
  out[n] = '\0';
  return true;
}

static unsigned cgroup_cpu_limit(void) {
  char dir[512], path[600], buf[128];
  bool ok;
  if (cgroup_dir(NULL, dir, sizeof(dir)) && path_join(path, sizeof(path), dir, "cpu.max") &&
      os_read_file(path, buf, sizeof(buf)) > 0) {
    if (buf[0] == 'm') return 0; /* "max" */
    const char *s = buf;
    uint64_t quota = parse_u64(&s, &ok);
    if (!ok) return 0;
    while (*s == ' ') s++;
    uint64_t period = parse_u64(&s, &ok);
    if (!ok || period == 0) return 0;
    return (unsigned)((quota + period - 1) / period);
  }
  if (cgroup_dir("cpu", dir, sizeof(dir)) && path_join(path, sizeof(path), dir, "cpu.cfs_quota_us") &&
      os_read_file(path, buf, sizeof(buf)) > 0 && buf[0] != '-') {
    const char *s = buf;
    uint64_t quota = parse_u64(&s, &ok);
    if (!ok) return 0;
    if (!path_join(path, sizeof(path), dir, "cpu.cfs_period_us") || os_read_file(path, buf, sizeof(buf)) <= 0)
      return 0;
    s = buf;
    uint64_t period = parse_u64(&s, &ok);
    if (!ok || period == 0) return 0;
    return (unsigned)((quota + period - 1) / period);
  }
  return 0;
}

/* A memory cgroup figure in bytes (v2 name, else v1 name), 0 if none or unlimited. */
static uint64_t cgroup_mem_read(const char *v2, const char *v1) {
  char dir[512], path[600], buf[128];
  bool ok;
  if (cgroup_dir(NULL, dir, sizeof(dir)) && path_join(path, sizeof(path), dir, v2) &&
      os_read_file(path, buf, sizeof(buf)) > 0 && buf[0] != 'm') {
    const char *s = buf;
    uint64_t v = parse_u64(&s, &ok);
    return ok ? v : 0;
  }
  if (cgroup_dir("memory", dir, sizeof(dir)) && path_join(path, sizeof(path), dir, v1) &&
      os_read_file(path, buf, sizeof(buf)) > 0) {
    const char *s = buf;
    uint64_t v = parse_u64(&s, &ok);
    /* v1 reports "no limit" as a huge page-rounded number. */
    return (ok && v < ((uint64_t)1 << 62)) ? v : 0;
  }
  return 0;
}
static uint64_t cgroup_mem_limit(void) { return cgroup_mem_read("memory.max", "memory.limit_in_bytes"); }

/* One "key value" line of the cgroup's memory.stat (v2 key, else v1 key), 0 if none. */
static uint64_t cgroup_mem_stat(const char *k2, const char *k1) {
  char dir[512], path[600], buf[4096];
  bool ok;
  const char *key = k2;
  int n = -1;
  if (cgroup_dir(NULL, dir, sizeof(dir)) && path_join(path, sizeof(path), dir, "memory.stat"))
    n = os_read_file(path, buf, sizeof(buf));
  if (n <= 0 && cgroup_dir("memory", dir, sizeof(dir)) && path_join(path, sizeof(path), dir, "memory.stat")) {
    n = os_read_file(path, buf, sizeof(buf));
    key = k1;
  }
  if (n <= 0) return 0;
  buf[n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1] = '\0';
  size_t klen = strlen(key);
  for (const char *l = buf; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
    if (strncmp(l, key, klen) == 0 && l[klen] == ' ') {
      const char *v = l + klen + 1;
      uint64_t x = parse_u64(&v, &ok);
      return ok ? x : 0;
    }
  }
  return 0;
}

void os_init(void) {
  unsigned long pg = getauxval(AT_PAGESZ);
  if (pg >= 4096 && (pg & (pg - 1)) == 0) {
    os_page = pg;
    os_lg_page = (unsigned)__builtin_ctzl(pg);
  }

  /* CPUs in the affinity mask: the kernel fills as many bytes as it uses. */
  uint64_t mask[128];
  long n = syscall(SYS_sched_getaffinity, 0, sizeof(mask), mask);
  unsigned cpus = 0;
  if (n > 0) {
    for (long i = 0; i < n / 8; i++) cpus += (unsigned)__builtin_popcountll(mask[i]);
  }
  if (cpus == 0) cpus = 1;
  unsigned lim = cgroup_cpu_limit();
  if (lim > 0 && lim < cpus) cpus = lim;
  __atomic_store_n(&os_ncpus, cpus, __ATOMIC_RELAXED); /* mtx_lock_slow reads it, even before init ends */
  os_mem_limit = cgroup_mem_limit();
}

uint64_t os_mem_limit_read(void) { return cgroup_mem_limit(); }

/* The commit budget: opt.commit_limit, or (auto) the cgroup limit, which may change while
 * the process runs (decay.c re-reads it), less a headroom for what the cgroup charges
 * besides strata's pages (binary, stacks, page tables, kernel memory): an eighth of the
 * limit, at least 16 MiB. 0: no budget. */
static size_t commit_budget(void) {
  if (opt.commit_limit != COMMIT_AUTO) return opt.commit_limit;
  uint64_t lim = __atomic_load_n(&os_mem_limit, __ATOMIC_RELAXED);
  uint64_t head = lim / 8 > ((uint64_t)16 << 20) ? lim / 8 : (uint64_t)16 << 20;
  return lim > 2 * head ? (size_t)(lim - head) : 0;
}

/* In auto mode the budget is only a cheap trigger: past it, the cgroup's own usage
 * decides (a process whose other memory is small may use its limit nearly whole, as
 * the container test does at 1.1x one phase's peak; inactive page cache counts as free, the
 * kernel reclaims it first), with a margin for what the kernel charges between this check
 * and the pages' first touch: 1/64 of the limit, at least 2 MiB. */
static bool commit_fits_cgroup(size_t bytes) {
  uint64_t lim = __atomic_load_n(&os_mem_limit, __ATOMIC_RELAXED);
  uint64_t use = cgroup_mem_read("memory.current", "memory.usage_in_bytes");
  uint64_t cache = cgroup_mem_stat("inactive_file", "total_inactive_file"); /* reclaimable */
  use = use > cache ? use - cache : 0;
  uint64_t margin = lim / 64 > ((uint64_t)2 << 20) ? lim / 64 : (uint64_t)2 << 20;
  return lim != 0 && use != 0 && use + bytes + margin <= lim;
}

/* The count is kept whatever the budget, so that a limit that appears later (a
 * container resized while it runs) starts from the truth. */
/* The program's hard limit (hard_limit) bounds the same count. Commits of at most
 * HARD_SMALL (a slab, a small large block) may pass it by a margin, 1/32 of the limit
 * (at least 1 MiB), so that code refused a big block can still unwind, log and free.
 * Callers purge dirty pages and retry before they give up (extent.c, commit_or_purge). */
#define HARD_SMALL ((size_t)256 << 10)
static bool hard_refuses(size_t now, size_t bytes) {
  uint64_t hard = __atomic_load_n(&limit_hard, __ATOMIC_RELAXED);
  if (likely(hard == 0) || now <= hard) return false;
  uint64_t margin = hard / 32 > ((uint64_t)1 << 20) ? hard / 32 : (uint64_t)1 << 20;
  if (bytes <= HARD_SMALL && now <= hard + margin) return false;
  __atomic_fetch_add(&limit_hard_nfails, 1, __ATOMIC_RELAXED);
  return true;
}

bool os_commit(size_t bytes) {
  size_t now = __atomic_add_fetch(&os_committed, bytes, __ATOMIC_RELAXED);
  if (unlikely(hard_refuses(now, bytes))) {
    __atomic_sub_fetch(&os_committed, bytes, __ATOMIC_RELAXED);
    return true;
  }
  size_t budget = commit_budget();
  if (likely(budget == 0) || (now <= budget && now >= bytes)) return false;
  if (opt.commit_limit == COMMIT_AUTO && commit_fits_cgroup(bytes)) return false;
  __atomic_sub_fetch(&os_committed, bytes, __ATOMIC_RELAXED);
  return true;
}

void os_decommit(size_t bytes) { __atomic_sub_fetch(&os_committed, bytes, __ATOMIC_RELAXED); }

void *os_map(size_t size, size_t align) {
  if (align <= os_page) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  /* Over-map and trim to get the alignment (2 MiB alignment lets THP back whole chunks). */
  size_t total = size + align - os_page;
  if (total < size) return NULL;
  char *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
  size_t lead = a - (uintptr_t)p;
  size_t trail = total - lead - size;
  if (lead) munmap(p, lead);
  if (trail) munmap((char *)a + size, trail);
  return (void *)a;
}

void os_unmap(void *addr, size_t size) { munmap(addr, size); }

/* Address space for the arenas' retained memory (extent_grow), carved from shared
 * reservations (docs/design.md, "Arenas"). Each arena used to map its own chunks (2 MiB, then
 * doubling), three system calls each with the alignment trims, and every arena makes its
 * first ones when threads first use it: a crowded program's threads released at once
 * (wl_nativethreads: 100 on 2 CPUs) made 8 arenas map at the same instant. Each mmap and
 * munmap holds the process's mmap_lock for writing and write-locks the heap's VMA as it
 * merges, so the other threads' page faults and madvise calls slept behind it while
 * holding a bin or extent lock, every thread of that arena then slept on the lock, and
 * the CPUs went to threads that had not started yet: each such round ran most of the 100
 * threads at once, with a peak RSS of 30-40 MiB instead of 15-20. A reservation is one mapping, aligned to `align`, that
 * serves the arenas' chunks in turn: the first is one chunk per arena (4 to 32), each
 * next one twice the last (at most CHUNK_RESV_MAX), so a heap of any size makes a few
 * mappings in all. Chunks are carved from the top down, as the kernel places new
 * mappings: each newer chunk lies below the older ones, so an arena's
 * lowest-address-first fit prefers its newest chunk as before. Untouched reserved pages
 * cost address space only (MAP_NORESERVE), and the unused part of a reservation that
 * gives way is unmapped. Sizes are multiples of `align`; larger requests than a
 * reservation would be are mapped alone. meta_lock guards it (taken under an elock, as
 * the metadata's own bump allocator is; the lock order has elocks first). */
#define CHUNK_RESV_MAX ((size_t)1 << 30)
static uintptr_t chunk_base, chunk_end; /* meta_lock: the unused part of the reservation */
static size_t chunk_resv_last;          /* meta_lock: the size of the last reservation */
uint64_t os_chunk_nresv;                /* atomic: reservations made (unit tests) */

void *os_chunk_map(size_t size, size_t align) {
  mtx_lock(&meta_lock);
  if (chunk_end - chunk_base < size) {
    size_t r = chunk_resv_last ? chunk_resv_last * 2 : (size_t)narenas * align;
    if (r < 4 * align) r = 4 * align;
    if (!chunk_resv_last && r > 32 * align) r = 32 * align;
    if (r > CHUNK_RESV_MAX) r = CHUNK_RESV_MAX;
    while (r < 4 * size && r < CHUNK_RESV_MAX) r *= 2;
    char *p = size <= r / 4 ? os_map(r, align) : NULL;
    if (p == NULL) { /* too large for a reservation, or no room for one: this chunk alone */
      mtx_unlock(&meta_lock);
      return os_map(size, align);
    }
    if (chunk_end != chunk_base) munmap((void *)chunk_base, chunk_end - chunk_base);
    chunk_base = (uintptr_t)p;
    chunk_end = (uintptr_t)p + r;
    chunk_resv_last = r;
    __atomic_fetch_add(&os_chunk_nresv, 1, __ATOMIC_RELAXED);
  }
  chunk_end -= size;
  void *p = (void *)chunk_end; /* read under the lock: another arena may carve next */
  mtx_unlock(&meta_lock);
  return p;
}

void os_purge(void *addr, size_t size) { madvise(addr, size, MADV_DONTNEED); }

#ifndef MADV_FREE
#define MADV_FREE 8
#endif
static bool os_no_madv_free; /* the kernel said EINVAL once (before 4.5): stop asking */

void os_purge_lazy(void *addr, size_t size) {
  if (!__atomic_load_n(&os_no_madv_free, __ATOMIC_RELAXED) && madvise(addr, size, MADV_FREE) == 0) return;
  __atomic_store_n(&os_no_madv_free, true, __ATOMIC_RELAXED);
  madvise(addr, size, MADV_DONTNEED);
}

/* thp:always asks for huge pages on strata's extents (mappings of 2 MiB and more are
 * 2 MiB aligned, see extent_grow), thp:never refuses them, thp:default leaves the
 * system's setting. metadata_thp:always asks for them on metadata blocks, auto once the
 * metadata passes a few blocks (jemalloc's auto waits for the same reason: a small
 * program should not pay 2 MiB of RSS for a few KiB of metadata). */
#define META_THP_AUTO_BYTES ((size_t)8 << 20)
void os_thp_apply(void *addr, size_t size, bool metadata) {
  int advice = -1;
  if (metadata) {
    if (opt.metadata_thp == MTHP_ALWAYS || (opt.metadata_thp == MTHP_AUTO && meta_mapped() >= META_THP_AUTO_BYTES))
      advice = MADV_HUGEPAGE;
    else if (opt.thp == THP_NEVER)
      advice = MADV_NOHUGEPAGE;
  } else if (opt.thp == THP_ALWAYS) {
    advice = MADV_HUGEPAGE;
  } else if (opt.thp == THP_NEVER) {
    advice = MADV_NOHUGEPAGE;
  }
  if (advice >= 0) madvise(addr, size, advice);
}

bool os_remap_fixed(void *addr, size_t old, size_t new_size, void *dest) {
  return mremap(addr, old, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, dest) == dest;
}

void *os_remap(void *addr, size_t old, size_t new_size) {
  void *p = mremap(addr, old, new_size, MREMAP_MAYMOVE);
  return p == MAP_FAILED ? NULL : p;
}

/* ---------------------------------------------------------------- lock contention */
/* A taken lock is spun on (up to MTX_SPIN pauses, a few microseconds: a page fault, a
 * short system call) before the thread sleeps on the futex, as jemalloc's mutexes do
 * (opt.mutex_max_spin 600). A sleep hands the CPU to another runnable thread; with many
 * more threads than CPUs each sleep starts another thread's working set, and one wait
 * at thread start-up (a new thread's cache, a new arena) set off hundreds more
 * (wl_nativethreads: docs/design.md, "Lock order"). On one CPU the
 * holder cannot run while we spin: no spinning there. */
#define MTX_SPIN 1000
static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
/* Drepper's "Futexes are tricky" mutex 3: a sleeper marks the word 2 so that the owner's
 * unlock wakes one thread; a thread woken takes the lock as 2 (another may still sleep). */
static void mtx_futex(uint32_t *w, int op, uint32_t val) {
  int e = errno; /* EAGAIN, EINTR: free preserves errno */
  syscall(SYS_futex, w, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
  errno = e;
}
bool mtx_lock_slow(mtx_t *m) { /* mtx_lock made the TSan pre-lock annotation */
  if (__atomic_load_n(&os_ncpus, __ATOMIC_RELAXED) > 1) { /* a waiter on init_lock reads it while os_init writes it */
    for (unsigned i = 0; i < MTX_SPIN; i++) {
      cpu_pause();
      if (__atomic_load_n(&m->word, __ATOMIC_RELAXED) == 0 && mtx_cas(m)) { /* read first: no cmpxchg storm */
        m->n_lock_ops++;
        m->n_spin++;
        MTX_TSAN(__tsan_mutex_post_lock(m, 0, 0));
        if (PROBE_ON(strata, lock_wait)) PROBE2(strata, lock_wait, m, 0);
        return true;
      }
    }
  }
  while (__atomic_exchange_n(&m->word, 2, __ATOMIC_ACQUIRE) != 0) mtx_futex(&m->word, FUTEX_WAIT, 2);
  m->n_lock_ops++;
  m->n_wait++;
  MTX_TSAN(__tsan_mutex_post_lock(m, 0, 0));
  if (PROBE_ON(strata, lock_wait)) PROBE2(strata, lock_wait, m, 1);
  return true;
}
void mtx_wake(mtx_t *m) { mtx_futex(&m->word, FUTEX_WAKE, 1); }

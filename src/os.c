/*
 * os.c - the OS page layer: run-time page size, mapping, purging, remapping, and the
 * facts about the machine the allocator sizes itself by (usable CPUs from the affinity
 * mask and cgroup cpu.max, the cgroup memory limit). Raw syscalls only: this runs
 * before libc is ready and must never allocate.
 */
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

size_t os_page = 4096;
unsigned os_ncpus = 1;
uint64_t os_mem_limit = 0;
size_t os_commit_limit = 0;
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

static uint64_t cgroup_mem_limit(void) {
  char dir[512], path[600], buf[128];
  bool ok;
  if (cgroup_dir(NULL, dir, sizeof(dir)) && path_join(path, sizeof(path), dir, "memory.max") &&
      os_read_file(path, buf, sizeof(buf)) > 0 && buf[0] != 'm') {
    const char *s = buf;
    uint64_t v = parse_u64(&s, &ok);
    return ok ? v : 0;
  }
  if (cgroup_dir("memory", dir, sizeof(dir)) && path_join(path, sizeof(path), dir, "memory.limit_in_bytes") &&
      os_read_file(path, buf, sizeof(buf)) > 0) {
    const char *s = buf;
    uint64_t v = parse_u64(&s, &ok);
    /* v1 reports "no limit" as a huge page-rounded number. */
    return (ok && v < ((uint64_t)1 << 62)) ? v : 0;
  }
  return 0;
}

void os_init(void) {
  unsigned long pg = getauxval(AT_PAGESZ);
  if (pg >= 4096 && (pg & (pg - 1)) == 0) os_page = pg;

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
  os_ncpus = cpus;
  os_mem_limit = cgroup_mem_limit();
}

void os_commit_init(void) {
  if (opt.commit_limit != COMMIT_AUTO) {
    os_commit_limit = opt.commit_limit;
    return;
  }
  /* Headroom for what the cgroup charges besides strata's pages (binary, stacks, page
   * tables, kernel memory): an eighth of the limit, at least 16 MiB. */
  uint64_t head = os_mem_limit / 8 > ((uint64_t)16 << 20) ? os_mem_limit / 8 : (uint64_t)16 << 20;
  if (os_mem_limit > 2 * head) os_commit_limit = (size_t)(os_mem_limit - head);
}

bool os_commit(size_t bytes) {
  if (likely(os_commit_limit == 0)) return false;
  size_t now = __atomic_add_fetch(&os_committed, bytes, __ATOMIC_RELAXED);
  if (now <= os_commit_limit && now >= bytes) return false;
  __atomic_sub_fetch(&os_committed, bytes, __ATOMIC_RELAXED);
  return true;
}

void os_decommit(size_t bytes) {
  if (os_commit_limit != 0) __atomic_sub_fetch(&os_committed, bytes, __ATOMIC_RELAXED);
}

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

void os_purge(void *addr, size_t size) { madvise(addr, size, MADV_DONTNEED); }

bool os_remap_fixed(void *addr, size_t old, size_t new_size, void *dest) {
  return mremap(addr, old, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, dest) == dest;
}

void *os_remap(void *addr, size_t old, size_t new_size) {
  void *p = mremap(addr, old, new_size, MREMAP_MAYMOVE);
  return p == MAP_FAILED ? NULL : p;
}

/*
 * report.c - messages to stderr by raw write(2), never through stdio (which may
 * allocate), or to the program's malloc_message when it sets one, and the fatal paths:
 * invalid free, out of metadata, failed assertion.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

static void write_all(const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = syscall(SYS_write, 2, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

/* Where messages go when the program sets it (jemalloc's malloc_message; weak, so that a
 * program may also define it). Unset, they go to stderr by raw write(2): async-signal-safe
 * and allocation-free, since messages come from failing frees and signal-handler re-entry. */
STRATA_EXPORT __attribute__((weak)) void (*strata_malloc_message)(void *cbopaque, const char *s) = NULL;
#ifdef STRATA_OVERRIDE
__attribute__((weak, visibility("default"))) void (*malloc_message)(void *cbopaque, const char *s) = NULL;
#endif

void msg_cb(void *cbopaque, const char *s) {
  void (*fn)(void *, const char *) = NULL;
#ifdef STRATA_OVERRIDE
  fn = __atomic_load_n(&malloc_message, __ATOMIC_ACQUIRE);
#endif
  if (fn == NULL) fn = __atomic_load_n(&strata_malloc_message, __ATOMIC_ACQUIRE);
  if (fn != NULL) {
    fn(cbopaque, s);
  } else {
    write_all(s, strlen(s));
  }
}

void msg_parts(const char *const *parts, int n) {
  char buf[1024];
  size_t len = 0;
  for (int i = 0; i < n; i++) {
    for (const char *p = parts[i]; *p && len < sizeof(buf) - 1; p++) buf[len++] = *p;
  }
  buf[len] = '\0';
  msg_cb(NULL, buf);
}

void msg_write(const char *s) { msg_cb(NULL, s); }

char *fmt_u64(char *buf, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (int i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  buf[n] = '\0';
  return buf;
}

char *fmt_hex(char *buf, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = digits[v & 15];
    v >>= 4;
  } while (v);
  buf[0] = '0';
  buf[1] = 'x';
  for (int i = 0; i < n; i++) buf[2 + i] = tmp[n - 1 - i];
  buf[2 + n] = '\0';
  return buf;
}

/* experimental.hooks.safety_check_abort: the program's function, called with the
 * message of a failed safety check (invalid or double free, size mismatch, corrupted free
 * list) before strata aborts. jemalloc returns to the caller when the hook returns;
 * strata cannot go on safely from those paths and aborts after it. */
safety_check_hook_t *safety_check_hook;

/* The message's parts joined into buf (cut to fit). */
static void join_parts(char *buf, size_t cap, const char *const *parts, int n) {
  size_t len = 0;
  for (int i = 0; i < n; i++) {
    for (const char *c = parts[i]; *c && len < cap - 1; c++) buf[len++] = *c;
  }
  buf[len] = '\0';
}

static NORETURN void safety_fail(const char *const *parts, int n, const void *p) {
  char buf[512];
  join_parts(buf, sizeof(buf), parts, n);
  msg_write(buf);
  if (p) guard_describe(p);
  safety_check_hook_t *h = __atomic_load_n(&safety_check_hook, __ATOMIC_ACQUIRE);
  if (h) h(buf);
  abort();
}

/* A failed check after which the call can go on safely (nothing was changed yet, or the
 * block is intact): a program's safety_check_abort hook gets the message and the call
 * returns, as jemalloc; without a hook, strata reports it and aborts. */
static void safety_report(const char *const *parts, int n) {
  safety_check_hook_t *h = __atomic_load_n(&safety_check_hook, __ATOMIC_ACQUIRE);
  if (h == NULL) safety_fail(parts, n, NULL);
  char buf[512];
  join_parts(buf, sizeof(buf), parts, n);
  h(buf);
}

void strata_invalid_free(const char *func, const void *p) {
  char hex[24];
  const char *parts[] = {"<strata>: ", func, "(): invalid pointer ", fmt_hex(hex, (uintptr_t)p), "\n"};
  safety_fail(parts, 5, p);
}

/* A sized free whose size names another class: nothing is freed yet, so, as jemalloc, a
 * program's safety_check_abort hook gets the message and the call returns, leaving the block
 * allocated (a leak is safe; freeing it into the wrong bin is not). Without a hook: abort. */
void strata_size_mismatch(const char *func, const void *p, size_t size, size_t align, size_t usize) {
  char hex[24], sz[24], al[24], us[24];
  const char *parts[] = {"<strata>: ", func, "(): size ", fmt_u64(sz, size), align ? " (alignment " : "",
                         align ? fmt_u64(al, align) : "", align ? ")" : "",
                         " does not match the block at ", fmt_hex(hex, (uintptr_t)p), " (usable size ",
                         fmt_u64(us, usize), ")\n"};
  safety_report(parts, 12);
}

/* A write past the end of a sampled block, found by its redzone when it was freed (alloc.c,
 * prof_promote). The block is intact and can be freed, so, as jemalloc, a program's
 * safety_check_abort hook gets the message and the free goes on; without a hook: abort. */
void strata_overflow(const void *p, size_t usize, size_t at) {
  char hex[24], us[24], off[24];
  const char *parts[] = {"<strata>: heap buffer overflow detected: the block at ", fmt_hex(hex, (uintptr_t)p),
                         " (usable size ", fmt_u64(us, usize), ") was written at offset ", fmt_u64(off, at),
                         " (a sampled block's redzone, checked at its free)\n"};
  safety_report(parts, 7);
}

void strata_heap_corruption(const void *at, unsigned ind) {
  char hex[24], num[24];
  const char *parts[] = {"<strata>: heap corruption detected at ", fmt_hex(hex, (uintptr_t)at), " (free list of class ",
                         fmt_u64(num, ind), ")\n"};
  safety_fail(parts, 5, NULL);
}

/* realloc(p, 0) under zero_realloc:abort. Nothing has changed yet, so, as jemalloc, a
 * program's safety_check_abort hook gets the message and realloc goes on (returning NULL,
 * p intact); without a hook strata prints it and aborts. */
void strata_zero_realloc_abort(void) {
  const char *parts[] = {"<strata>: realloc(non-null pointer, 0) with zero_realloc:abort\n"};
  safety_report(parts, 1);
}

void strata_fatal(const char *what) {
  const char *parts[] = {"<strata>: fatal: ", what, "\n"};
  msg_parts(parts, 3);
  abort();
}

void strata_assert_fail(const char *cond, const char *file, int line) {
  char num[24];
  const char *parts[] = {"<strata>: assertion failed: ", cond, " at ", file, ":", fmt_u64(num, (uint64_t)line), "\n"};
  msg_parts(parts, 7);
  abort();
}

/*
 * newdelete.c - every C++ operator new/delete form, written in C under their Itanium
 * ABI names so that libstrata needs no libstdc++ (C programs that preload it do not
 * load one). Failure follows the standard: call the new_handler and retry, throw
 * std::bad_alloc (via libstdc++'s own __throw_bad_alloc, resolved in C++ programs) or
 * return NULL for the nothrow forms.
 */
#include <stddef.h>

#include "internal.h"

#ifdef STRATA_OVERRIDE
typedef void (*new_handler_t)(void);
/* Weak: present whenever a C++ program (hence libstdc++) is loaded. */
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

#define EXPORT __attribute__((visibility("default")))

/* experimental_infallible_new:true: a failed operator new is a failed safety check, in
 * jemalloc's words (a program's experimental.hooks.safety_check_abort may look for them);
 * when that hook returns, operator new returns NULL, as jemalloc's does. */
static NOINLINE void *new_infallible_fail(size_t size) {
  char num[24], buf[160];
  const char *parts[] = {"<jemalloc>: Allocation of size ", fmt_u64(num, size),
                         " failed. opt.experimental_infallible_new is true. Aborting.\n"};
  size_t len = 0;
  for (int i = 0; i < 3; i++) {
    for (const char *c = parts[i]; *c && len < sizeof(buf) - 1; c++) buf[len++] = *c;
  }
  buf[len] = '\0';
  safety_check_hook_t *h = __atomic_load_n(&safety_check_hook, __ATOMIC_ACQUIRE);
  if (h == NULL) strata_fatal("operator new: out of memory (experimental_infallible_new:true)");
  h(buf);
  return NULL;
}

static NOINLINE void *new_slow(size_t size, size_t align, bool nothrow) {
  for (;;) {
    void *p = NULL;
    if (align <= 16) {
      p = strata_malloc(size);
    } else if (strata_posix_memalign(&p, align, size) != 0) {
      p = NULL;
    }
    if (p) return p;
    /* jemalloc's rule: before any new_handler, whatever the form */
    if (opt.infallible_new) return new_infallible_fail(size);
    new_handler_t h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (h == NULL) {
      if (nothrow) return NULL;
      if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
      strata_fatal("operator new: out of memory and no C++ runtime to throw std::bad_alloc");
    }
    /* A handler that throws from a nothrow new propagates: documented deviation. */
    h();
  }
}

/* _Znwm and _Znam are malloc's fast path (alloc.c); a failed allocation comes here. */
HIDDEN void *strata_new_fail(size_t size) { return new_slow(size, 0, false); }

EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *t) {
  (void)t;
  void *p = strata_malloc(n);
  return p ? p : new_slow(n, 0, true);
}
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *t) { return _ZnwmRKSt9nothrow_t(n, t); }
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t al) { return new_slow(n, al, false); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t al) { return new_slow(n, al, false); }
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *t) {
  (void)t;
  return new_slow(n, al, true);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *t) {
  (void)t;
  return new_slow(n, al, true);
}

/* The delete forms are aliases of free, in alloc.c. */
#endif

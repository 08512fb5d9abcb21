/*
 * backtrace.c - the calling program's stack for the heap profiler (prof.c) and guarded
 * allocations (guard.c): libgcc's unwinder (.eh_frame), not a frame-pointer walk, since
 * Debian builds programs and libraries without frame pointers, where a frame-pointer walk
 * stops at the first such frame or follows garbage (bench/prof/bt_cost.c measures both).
 * _Unwind_Backtrace is called directly (glibc's backtrace() dlopens libgcc_s and
 * mallocs). Callers hold no strata lock: the unwinder takes the loader's.
 */
#include <link.h>
#include <unwind.h>

#include "internal.h"

/* libstrata.so's executable segments: the leading frames there are strata's own and are
 * dropped. Found once from the program headers (dladdr per frame cost 13,000
 * instructions per stack); empty (nothing skipped) when strata is linked into the
 * executable, whose frames cannot be told from the program's by module. */
static uintptr_t self_lo, self_hi;
static bool self_known;

static int self_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t me = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (me < lo || me >= hi) continue;
    if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') { /* a shared object */
      __atomic_store_n(&self_lo, lo, __ATOMIC_RELAXED);
      __atomic_store_n(&self_hi, hi, __ATOMIC_RELAXED);
    }
    return 1;
  }
  return 0;
}

typedef struct {
  uintptr_t *frames;
  unsigned n, max;
  bool skipping; /* still in strata's own frames */
  uintptr_t lo, hi;
} bt_state_t;

static _Unwind_Reason_Code bt_cb(struct _Unwind_Context *ctx, void *arg) {
  bt_state_t *s = arg;
  uintptr_t ip = (uintptr_t)_Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  if (s->skipping) {
    if (ip - 1 >= s->lo && ip - 1 < s->hi) return _URC_NO_REASON;
    s->skipping = false; /* the first frame outside strata: keep everything from here */
  }
  s->frames[s->n++] = ip;
  return s->n >= s->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

NOINLINE unsigned strata_backtrace(uintptr_t *frames, unsigned max) {
  if (max == 0) return 0;
  if (!__atomic_load_n(&self_known, __ATOMIC_ACQUIRE)) {
    dl_iterate_phdr(self_cb, (void *)(uintptr_t)&strata_backtrace); /* idempotent */
    __atomic_store_n(&self_known, true, __ATOMIC_RELEASE);
  }
  bt_state_t s = {frames, 0, max, true, __atomic_load_n(&self_lo, __ATOMIC_RELAXED),
                  __atomic_load_n(&self_hi, __ATOMIC_RELAXED)};
  _Unwind_Backtrace(bt_cb, &s);
  return s.n;
}

/*
 * probes.c - the USDT semaphores of probes.h. A tracer that attaches to a probe raises its
 * semaphore (the kernel increments the word the note names); the probe sites test it.
 * Kept in .probes, as systemtap's tools expect.
 */
#include "probes.h"

#if defined(STRATA_USDT) && STRATA_USDT
#define SEMAPHORE(prov, name) \
  __attribute__((visibility("hidden"), section(".probes"))) volatile unsigned short prov##_##name##_semaphore
SEMAPHORE(otel_memory, alloc);
SEMAPHORE(otel_memory, free);
SEMAPHORE(strata, purge);
SEMAPHORE(strata, limit_purge);
SEMAPHORE(strata, lock_wait);
SEMAPHORE(strata, oom);
#else
typedef int probes_none; /* ISO C: a translation unit is not empty */
#endif

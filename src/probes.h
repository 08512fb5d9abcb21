/*
 * probes.h - USDT probes for eBPF tracers (bpftrace, the OpenTelemetry eBPF profiler):
 * systemtap's <sys/sdt.h> notes, each behind a semaphore the kernel raises while a tracer
 * is attached, so a probe site costs one load and a branch when nothing is attached (and
 * sits only on slow paths: sampled allocations, purges, contended locks, failures).
 * Without <sys/sdt.h> (or with -DSTRATA_USDT=OFF) every probe compiles to nothing.
 */
#ifndef STRATA_PROBES_H
#define STRATA_PROBES_H

#if defined(STRATA_USDT) && STRATA_USDT
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
/* The semaphores live in .probes (probes.c); the notes record their addresses. */
#define PROBE_SEMAPHORE(prov, name) \
  __attribute__((visibility("hidden"))) extern volatile unsigned short prov##_##name##_semaphore
#define PROBE_ON(prov, name) __builtin_expect(prov##_##name##_semaphore != 0, 0)
#define PROBE1(prov, name, a) STAP_PROBE1(prov, name, a)
#define PROBE2(prov, name, a, b) STAP_PROBE2(prov, name, a, b)
#define PROBE3(prov, name, a, b, c) STAP_PROBE3(prov, name, a, b, c)
#define PROBE4(prov, name, a, b, c, d) STAP_PROBE4(prov, name, a, b, c, d)
#else
#define PROBE_SEMAPHORE(prov, name) extern int strata_no_probe_##prov##_##name
#define PROBE_ON(prov, name) 0
#define PROBE1(prov, name, a) ((void)0)
#define PROBE2(prov, name, a, b) ((void)0)
#define PROBE3(prov, name, a, b, c) ((void)0)
#define PROBE4(prov, name, a, b, c, d) ((void)0)
#endif

/* OpenTelemetry's memory-profiling contract: alloc(ptr, size, weight) for each sampled
 * allocation, weight the unbiased estimate of the bytes it stands for; free(ptr) when a
 * sampled pointer is freed. */
PROBE_SEMAPHORE(otel_memory, alloc);
PROBE_SEMAPHORE(otel_memory, free);
/* strata's own: purge(arena, state, bytes), limit_purge(bytes, resident),
 * lock_wait(mutex, slept), oom(size, alignment). */
PROBE_SEMAPHORE(strata, purge);
PROBE_SEMAPHORE(strata, limit_purge);
PROBE_SEMAPHORE(strata, lock_wait);
PROBE_SEMAPHORE(strata, oom);

#define PROBE_OOM(size, align)                                              \
  do {                                                                      \
    if (PROBE_ON(strata, oom)) PROBE2(strata, oom, (size_t)(size), (size_t)(align)); \
  } while (0)

#endif /* STRATA_PROBES_H */

/* unit.h - the few assertion macros the internal-module unit tests share. */
#ifndef STRATA_UNIT_H
#define STRATA_UNIT_H
#include <stdio.h>
#include <stdlib.h>

static int unit_failures;
#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stdout, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);             \
      unit_failures++;                                                         \
    }                                                                          \
  } while (0)
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    unsigned long long _a = (unsigned long long)(a), _b = (unsigned long long)(b); \
    if (_a != _b) {                                                            \
      fprintf(stdout, "FAIL %s:%d: %s == %s (%llu != %llu)\n", __FILE__, __LINE__, #a, #b, _a, _b); \
      unit_failures++;                                                         \
    }                                                                          \
  } while (0)
#define RUN(t)                                                                 \
  do {                                                                         \
    int _before = unit_failures;                                               \
    t();                                                                       \
    printf("%s %s\n", unit_failures == _before ? "ok  " : "FAIL", #t);        \
  } while (0)
/* Sanitizer builds: their shadow memory adds pages and faults of its own, so tests that
 * count a process's pages or faults check them in plain builds only. */
#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || \
    __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif
#define UNIT_EXIT() return unit_failures ? (printf("%d check(s) failed\n", unit_failures), 1) : 0
#endif

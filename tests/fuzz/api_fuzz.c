/*
 * api_fuzz.c - libFuzzer target: the input is a program of allocator calls on 64 slots,
 * run against the prefixed build (strata_* names) under ASan+UBSan and checked against a
 * shadow model: contents survive realloc, alignment is honoured, the usable size covers
 * the request, live blocks never overlap. A second thread frees blocks handed to it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata.h"

/* The model's byte loops are not what is fuzzed: no coverage instrumentation there
 * (it cost 80% of the run time). */
#define NOCOV __attribute__((no_sanitize("coverage")))
#define NSLOTS 64
typedef struct {
  unsigned char *p;
  size_t size, align; /* requested; align 0 = default */
  unsigned char seed;
  int kind;           /* 0 malloc family, 1 aligned (free_aligned_sized ok) */
} slot_t;
static slot_t slots[NSLOTS];

NOCOV static int zero_at(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i += i < 4096 ? 1 : 4093) /* the head, then sparse */
    if (p[i]) return (int)(i + 1);
  return 0;
}

static void die(const char *what, size_t a, size_t b) {
  fprintf(stderr, "api_fuzz: %s (%zu, %zu)\n", what, a, b);
  abort();
}

typedef struct {
  const uint8_t *d;
  size_t n;
} in_t;
static unsigned u8(in_t *in) {
  if (in->n == 0) return 0;
  in->n--;
  return *in->d++;
}
static size_t pick_size(in_t *in) {
  unsigned a = u8(in), b = u8(in);
  switch (a & 7) {
  case 0: return 0;
  case 1: case 2: case 3: return b;                         /* tiny */
  case 4: case 5: return ((size_t)b << 4) | (a >> 4);       /* up to 4 KiB */
  case 6: return ((size_t)b << 9) | a;                      /* up to 128 KiB */
  default: return ((size_t)(b & 31) << 17) + a;             /* up to 4 MiB */
  }
}

static size_t checked_len(const slot_t *s) { return s->size < 4096 ? s->size : 4096; }
NOCOV static void fill(slot_t *s) {
  size_t n = checked_len(s);
  for (size_t i = 0; i < n; i++) s->p[i] = (unsigned char)(s->seed + i);
  if (s->size > n) s->p[s->size - 1] = (unsigned char)(s->seed ^ 0x5a);
}
NOCOV static void verify(const slot_t *s, size_t upto) {
  size_t n = checked_len(s) < upto ? checked_len(s) : upto;
  for (size_t i = 0; i < n; i++)
    if (s->p[i] != (unsigned char)(s->seed + i)) die("contents changed", i, s->size);
  if (s->size > checked_len(s) && s->size <= upto && s->p[s->size - 1] != (unsigned char)(s->seed ^ 0x5a))
    die("last byte changed", s->size, upto);
}

NOCOV static void admit(slot_t *s, unsigned char *p, size_t size, size_t align, int kind, unsigned seed) {
  size_t us = strata_malloc_usable_size(p);
  if (us < size) die("usable size below request", us, size);
  if (align && ((uintptr_t)p & (align - 1))) die("misaligned", (uintptr_t)p, align);
  if ((uintptr_t)p & 7) die("not 8-aligned", (uintptr_t)p, 8);
  for (int i = 0; i < NSLOTS; i++) {
    slot_t *o = &slots[i];
    if (o == s || o->p == NULL) continue;
    size_t ou = strata_malloc_usable_size(o->p);
    if (p < o->p + ou && o->p < p + us) die("overlapping live blocks", (uintptr_t)p, (uintptr_t)o->p);
  }
  s->p = p;
  s->size = size;
  s->align = align;
  s->kind = kind;
  s->seed = (unsigned char)seed;
  fill(s);
}

static void release(slot_t *s, unsigned how) {
  verify(s, s->size);
  switch (how % 4) {
  case 0: strata_free(s->p); break;
  case 1:
    if (s->kind == 1) strata_free_aligned_sized(s->p, s->align, s->size);
    else strata_free_sized(s->p, s->size);
    break;
  case 2: strata_sdallocx(s->p, s->size, s->kind == 1 ? MALLOCX_ALIGN(s->align) : 0); break;
  default: strata_dallocx(s->p, MALLOCX_TCACHE_NONE); break;
  }
  s->p = NULL;
}

/* A second thread that frees what it is given (cross-thread frees). */
static void *freer(void *arg) {
  slot_t *batch = arg;
  for (int i = 0; i < NSLOTS && batch[i].p; i++) release(&batch[i], (unsigned)i);
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  in_t in = {data, size};
  slot_t handoff[NSLOTS + 1];
  int nhand = 0;
  memset(slots, 0, sizeof(slots));
  while (in.n > 0) {
    unsigned op = u8(&in), si = u8(&in) % NSLOTS;
    slot_t *s = &slots[si];
    if (s->p && op % 16 < 9) { /* allocating ops on a live slot free it first */
      release(s, op >> 4);
    }
    size_t sz = op % 16 < 12 ? pick_size(&in) : 0;
    unsigned seed = u8(&in);
    void *p = NULL;
    switch (op % 16) {
    case 0: p = strata_malloc(sz); if (p) admit(s, p, sz, 0, 0, seed); break;
    case 1: {
      size_t n = (u8(&in) & 7) + 1;
      p = strata_calloc(n, sz / n);
      if (p) {
        if (zero_at(p, n * (sz / n))) die("calloc not zero", 0, sz);
        admit(s, p, n * (sz / n), 0, 0, seed);
      }
      break;
    }
    case 2: case 3: { /* realloc / reallocarray of a fresh block, then of itself */
      p = strata_malloc(sz);
      if (!p) break;
      admit(s, p, sz, 0, 0, seed);
      size_t nsz = pick_size(&in);
      void *q = op % 16 == 2 ? strata_realloc(s->p, nsz ? nsz : 1) : strata_reallocarray(s->p, 1, nsz ? nsz : 1);
      if (!q) break;
      s->p = q;
      verify(s, nsz ? nsz : 1);
      admit(s, q, nsz ? nsz : 1, 0, 0, seed + 1);
      break;
    }
    case 4: {
      size_t al = (size_t)8 << (u8(&in) % 14);
      if (strata_posix_memalign(&p, al, sz) == 0) admit(s, p, sz, al, 1, seed);
      break;
    }
    case 5: {
      size_t al = (size_t)1 << (u8(&in) % 22);
      p = strata_aligned_alloc(al, sz);
      if (p) admit(s, p, sz, al, 1, seed);
      break;
    }
    case 6: case 7: {
      unsigned f = u8(&in);
      int lg = (int)(f % 16), flags = (lg > 0 ? MALLOCX_LG_ALIGN(lg) : 0) | (f & 16 ? MALLOCX_ZERO : 0) |
                               (f & 32 ? MALLOCX_TCACHE_NONE : 0) | (f & 64 ? MALLOCX_ARENA(f >> 7) : 0);
      p = strata_mallocx(sz ? sz : 1, flags);
      if (!p) break;
      if (strata_sallocx(p, 0) != strata_nallocx(sz ? sz : 1, flags))
        die("sallocx != nallocx", strata_sallocx(p, 0), sz);
      if (flags & MALLOCX_ZERO)
        if (zero_at(p, sz ? sz : 1)) die("MALLOCX_ZERO not zero", 0, sz);
      admit(s, p, sz ? sz : 1, lg ? (size_t)1 << lg : 0, lg ? 1 : 0, seed);
      break;
    }
    case 8: { /* rallocx with alignment, then xallocx */
      p = strata_malloc(sz ? sz : 1);
      if (!p) break;
      admit(s, p, sz ? sz : 1, 0, 0, seed);
      size_t nsz = pick_size(&in);
      int lg = (int)(u8(&in) % 13);
      void *q = strata_rallocx(s->p, nsz ? nsz : 1, MALLOCX_LG_ALIGN(lg));
      if (!q) break;
      s->p = q;
      verify(s, nsz ? nsz : 1);
      admit(s, q, nsz ? nsz : 1, (size_t)1 << lg, 1, seed + 3);
      size_t x = strata_xallocx(s->p, pick_size(&in), pick_size(&in), 0);
      if (x != strata_malloc_usable_size(s->p)) die("xallocx result is not the usable size", x, s->size);
      verify(s, x);
      admit(s, s->p, x, s->align, 1, seed + 5); /* sized frees now name the new size */
      break;
    }
    case 9: case 10: case 11:
      if (s->p) release(s, op >> 4);
      break;
    case 12:
      if (s->p && strata_malloc_usable_size(s->p) < s->size) die("usable size shrank", 0, s->size);
      break;
    case 13: /* hand this block to the second thread */
      if (s->p && nhand < NSLOTS) {
        handoff[nhand++] = *s;
        s->p = NULL;
      }
      break;
    case 14:
      strata_malloc_trim(0);
      break;
    default:
      if (nhand) {
        handoff[nhand].p = NULL;
        pthread_t t;
        if (pthread_create(&t, NULL, freer, handoff) == 0) {
          pthread_join(t, NULL);
        } else {
          freer(handoff);
        }
        nhand = 0;
      }
      break;
    }
  }
  for (int i = 0; i < nhand; i++) release(&handoff[i], 0);
  for (int i = 0; i < NSLOTS; i++) if (slots[i].p) release(&slots[i], (unsigned)i);
  return 0;
}

/*
 * attacks.c - one heap attack or misuse per run, against whatever allocator is loaded
 * (LD_PRELOAD): `attacks NAME`. It prints "RESULT: <word>" when the program survives:
 * exploited (malloc returned the attacker's address), ignored (the misuse went by
 * unnoticed), refused (NULL/ENOMEM or the like, as the API says). A report and abort or
 * a fault is seen by the driver (run_attacks.py) from the exit status and stderr.
 * Built without the allocator (plain malloc/free, found at run time).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <malloc.h>
#include <unistd.h>

static char target[4096] __attribute__((aligned(4096)));

static void result(const char *word) {
  printf("RESULT: %s\n", word);
  fflush(stdout);
  _exit(0);
}

static void *opaque(void *p) {
  __asm__ volatile("" : "+r"(p));
  return p;
}

/* Overwrite the first word of a freed block of `size` with an address (what an overflow
 * from the block before it, or a write through a dangling pointer, does), then malloc
 * twice: the second result is the attacker's address if links are followed unchecked. */
static void link_overwrite(size_t size) {
  void *keep[8];
  for (int i = 0; i < 8; i++) keep[i] = malloc(size); /* neighbours: the class is in use */
  char *a = malloc(size), *b = malloc(size);
  free(b);
  *(void **)opaque(b) = target + 64; /* the attacker's address, suitably aligned */
  void *x = malloc(size), *y = malloc(size);
  (void)a;
  (void)keep;
  if (x == target + 64 || y == target + 64) result("exploited");
  /* glibc's safe-linking stores (slot >> 12) ^ link: forged plain addresses decode to
   * garbage and are caught as misaligned, or (rarely) returned. */
  if ((uintptr_t)x >= (uintptr_t)target && (uintptr_t)x < (uintptr_t)target + sizeof target) result("exploited");
  if ((uintptr_t)y >= (uintptr_t)target && (uintptr_t)y < (uintptr_t)target + sizeof target) result("exploited");
  result("ignored");
}

/* NB blocks of one class; *below one of them and *victim the block that follows it in
 * memory (none: NULL), past its usable size plus at most a header. */
enum { NB = 16 };
static char *blk[NB];
static void neighbours(size_t size, char **below, char **victim) {
  for (int i = 0; i < NB; i++) blk[i] = malloc(size);
  *below = blk[0];
  *victim = NULL;
  for (int i = 0; i < NB; i++)
    for (int k = 0; k < NB; k++) {
      size_t u = malloc_usable_size(blk[i]);
      if (blk[k] >= blk[i] + u && blk[k] <= blk[i] + u + 32) {
        *below = blk[i];
        *victim = blk[k];
        return;
      }
    }
}

/* After a block's link or header was changed: mallocs of its class must hand out no block
 * that overlaps a live one or another result (an abort before is the allocator's catch). */
static void check_pops(size_t size, char *live) {
  char *got[NB];
  for (int i = 0; i < NB; i++) {
    char *p = got[i] = malloc(size);
    if (p == NULL) continue;
    if (live && p + size > live && p < live + size) result("exploited");
    for (int k = 0; k < i; k++)
      if (got[k] && p + size > got[k] && p < got[k] + size) result("exploited");
    if ((uintptr_t)p >= (uintptr_t)target && (uintptr_t)p < (uintptr_t)target + sizeof target) result("exploited");
  }
  result("ignored");
}

/* Change a free block's first byte (0 written) or first word (an address): by an overflow
 * past the usable size of the block below it (form 0), or through a dangling pointer
 * (form 1). */
static void link_change(size_t size, int form, int word) {
  char *below, *victim;
  neighbours(size, &below, &victim);
  if (form == 1) victim = blk[NB - 1], below = blk[0];
  for (int i = 0; i < NB; i++)
    if (blk[i] != below && blk[i] != victim) free(blk[i]);
  if (victim) free(victim);
  char *at = form == 0 ? below + malloc_usable_size(below) : victim;
  if (word)
    *(void **)opaque(at) = target + 64;
  else
    *(volatile char *)opaque(at) = 0;
  check_pops(size, below);
}

/* The same overflow into a live neighbour, then both are freed. */
static void overflow_live(size_t size, int word) {
  char *below, *victim;
  neighbours(size, &below, &victim);
  char *at = below + malloc_usable_size(below);
  if (word)
    *(void **)opaque(at) = target + 64;
  else
    *(volatile char *)opaque(at) = 0;
  if (victim) free(victim);
  free(below);
  check_pops(size, NULL);
}

static void interior(size_t size, size_t off) {
  char *p = malloc(size);
  free(opaque(p + off));
  for (int i = 0; i < 4; i++) {
    char *q = malloc(size);
    if (q > p && q < p + size) result("exploited");
  }
  result("ignored");
}

static void *xt_block;
static int xt_live;
static void *xt_free(void *arg) {
  free(xt_block);
  if (xt_live) usleep(300000);
  return arg;
}

/* Thread B frees, then the owner frees again (B still running or exited). */
static void double_free_thread(size_t size, int live) {
  xt_block = malloc(size);
  xt_live = live;
  printf("block=%p\n", xt_block); /* stdio's buffer now, not between the frees */
  fflush(stdout);
  pthread_t t;
  pthread_create(&t, NULL, xt_free, NULL);
  if (live)
    usleep(50000); /* B has freed and still runs (it sleeps 300 ms after its free) */
  else
    pthread_join(t, NULL);
  free(opaque(xt_block));
  void *x = malloc(size), *y = malloc(size);
  result(x == y ? "exploited" : "ignored");
}

static char global_buf[256] __attribute__((aligned(64)));

typedef void (*sized_free_t)(void *, size_t);
typedef void (*sdallocx_t)(void *, size_t, int);

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *a = argv[1];
  if (!strcmp(a, "double_free")) {
    void *p = malloc(64);
    free(p);
    free(opaque(p));
    result("ignored");
  } else if (!strcmp(a, "double_free_interleaved")) {
    void *p = malloc(64), *q = malloc(64);
    free(p);
    free(q);
    free(opaque(p));
    void *x = malloc(64), *y = malloc(64), *z = malloc(64);
    result(x == z || x == y || y == z ? "exploited" : "ignored"); /* one block handed out twice */
  } else if (!strcmp(a, "double_free_large")) {
    void *p = malloc(1 << 20);
    free(p);
    free(opaque(p));
    result("ignored");
  } else if (!strcmp(a, "invalid_free_stack")) {
    char buf[128] __attribute__((aligned(64)));
    free(opaque(buf));
    result("ignored");
  } else if (!strcmp(a, "invalid_free_interior")) {
    char *p = malloc(256);
    free(opaque(p + 64));
    result("ignored");
  } else if (!strcmp(a, "invalid_free_mmap")) {
    void *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    free(opaque((char *)m + 4096));
    result("ignored");
  } else if (!strcmp(a, "wrong_size_free")) {
    void *p = malloc(100);
    sized_free_t fs = (sized_free_t)dlsym(RTLD_DEFAULT, "free_sized");
    sdallocx_t sd = (sdallocx_t)dlsym(RTLD_DEFAULT, "sdallocx");
    sized_free_t tc = (sized_free_t)dlsym(RTLD_DEFAULT, "tc_free_sized");
    sized_free_t mi = (sized_free_t)dlsym(RTLD_DEFAULT, "mi_free_size");
    if (fs) fs(p, 16);
    else if (sd) sd(p, 16, 0);
    else if (tc) tc(p, 16);
    else if (mi) mi(p, 16);
    else result("n/a");
    /* a wrong size may file the block under the 16-byte class: see if two 16-byte
     * mallocs then overlap the 100-byte block's range */
    result("ignored");
  } else if (!strcmp(a, "link_overwrite_small")) {
    link_overwrite(64);
  } else if (!strcmp(a, "link_overwrite_medium")) {
    link_overwrite(2048);
  } else if (!strcmp(a, "overflow_past_end")) {
    char *p = malloc(100);
    size_t u = malloc_usable_size(p);
    ((volatile char *)p)[u] = 1; /* one byte past the usable size */
    ((volatile char *)p)[u + 16] = 1;
    free(p);
    result("ignored");
  } else if (!strcmp(a, "use_after_free_write")) {
    char *p = malloc(100);
    free(p);
    ((volatile char *)opaque(p))[40] = 1;
    result("ignored");
  } else if (!strcmp(a, "double_free_medium")) {
    void *p = malloc(12000);
    free(p);
    free(opaque(p));
    result("ignored");
  } else if (!strcmp(a, "double_free_huge")) {
    void *p = malloc(64 << 20);
    free(p);
    free(opaque(p));
    result("ignored");
  } else if (!strcmp(a, "double_free_thread_live")) {
    double_free_thread(64, 1);
  } else if (!strcmp(a, "double_free_thread_live_large")) {
    double_free_thread(1 << 20, 1);
  } else if (!strcmp(a, "double_free_thread_exited")) {
    double_free_thread(64, 0);
  } else if (!strcmp(a, "double_free_thread_exited_large")) {
    double_free_thread(1 << 20, 0);
  } else if (!strcmp(a, "interior_48_16")) {
    interior(48, 16);
  } else if (!strcmp(a, "interior_160_32")) {
    interior(160, 32);
  } else if (!strcmp(a, "interior_3072_1024")) {
    interior(3072, 1024);
  } else if (!strcmp(a, "interior_8192_4096")) {
    interior(8192, 4096);
  } else if (!strcmp(a, "interior_12000_4096")) {
    interior(12000, 4096);
  } else if (!strcmp(a, "interior_1m_4096")) {
    interior(1 << 20, 4096);
  } else if (!strcmp(a, "invalid_free_plus1")) {
    char *p = malloc(64);
    free(opaque(p + 1));
    result("ignored");
  } else if (!strcmp(a, "invalid_free_global")) {
    free(opaque(global_buf));
    result("ignored");
  } else if (!strcmp(a, "realloc_freed_small")) {
    void *p = malloc(100);
    free(p);
    opaque(realloc(opaque(p), 200));
    result("ignored");
  } else if (!strcmp(a, "realloc_freed_large")) {
    void *p = malloc(1 << 20);
    free(p);
    opaque(realloc(opaque(p), 2 << 20));
    result("ignored");
  } else if (!strcmp(a, "uaf_link_low_byte")) {
    link_change(64, 1, 0);
  } else if (!strcmp(a, "uaf_link_word")) {
    link_change(64, 1, 1);
  } else if (!strcmp(a, "overflow_byte_into_free")) {
    link_change(64, 0, 0);
  } else if (!strcmp(a, "overflow_word_into_free")) {
    link_change(64, 0, 1);
  } else if (!strcmp(a, "overflow_byte_into_live")) {
    overflow_live(64, 0);
  } else if (!strcmp(a, "overflow_word_into_live")) {
    overflow_live(64, 1);
  } else if (!strcmp(a, "huge_request")) {
    errno = 0;
    void *p = malloc((size_t)opaque((void *)(SIZE_MAX - 4096)));
    void *q = calloc((size_t)1 << 33, (size_t)opaque((void *)((size_t)1 << 33)));
    if (p || q) result("returned a block");
    char buf[64];
    snprintf(buf, sizeof buf, "NULL, errno %s", errno == ENOMEM ? "ENOMEM" : strerror(errno));
    result(buf);
  }
  return 2;
}

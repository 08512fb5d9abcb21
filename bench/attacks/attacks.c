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

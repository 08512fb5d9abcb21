/*
 * ctl_fuzz.c - libFuzzer target for mallctl over the current names: the input is a
 * name (up to the first NUL), then an old-length byte and new-value bytes. Any answer is
 * fine; a crash, an out-of-bounds read or write (ASan) or a write beyond *oldlenp is not.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "strata.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char name[128];
  size_t i = 0;
  while (i < size && i < sizeof(name) - 1 && data[i]) {
    name[i] = (char)data[i];
    i++;
  }
  name[i] = '\0';
  data += i < size ? i + 1 : i;
  size -= i < size ? i + 1 : i;
  size_t oldlen = size ? data[0] % 24 : 8;
  if (size) data++, size--;
  unsigned char old[40];
  memset(old, 0xcd, sizeof(old));
  size_t len = oldlen;
  unsigned char newv[32];
  size_t newlen = size < sizeof(newv) ? size : sizeof(newv);
  memcpy(newv, data, newlen);
  /* Writes of pointers the callee must follow are not fuzzed: jemalloc's contract, like
   * strata's, is that they point at valid memory. Those are every string and opaque
   * pointer leaf (names, prefixes, hooks tables, callbacks), found by the leaf's type so a
   * new one is covered without a list, plus the leaves whose value is a structure holding
   * pointers (arenas.create's hooks, batch_alloc's array, arenas_create_ext's config). */
  size_t tmib[8], tmiblen = 8;
  if (strata_mallctlnametomib(name, tmib, &tmiblen) == 0) {
    const ctl_node_t *leaf = ctl_node_of(tmib, tmiblen);
    if (leaf != NULL && (leaf->type == CT_STR || leaf->type == CT_VOID)) newlen = 0;
  }
  static const char *const pointer_names[] = {"arenas.create", "batch_alloc", "arenas_create_ext",
                                              "extent_hooks", "prof.dump", "prof.name"};
  for (size_t k = 0; k < sizeof(pointer_names) / sizeof(pointer_names[0]); k++)
    if (strstr(name, pointer_names[k])) newlen = 0;
  int rc = strata_mallctl(name, old, &len, newlen ? newv : NULL, newlen);
  (void)rc;
  for (size_t k = oldlen; k < sizeof(old); k++)
    if (old[k] != 0xcd) abort(); /* wrote past *oldlenp */
  size_t mib[8], miblen = 8;
  if (strata_mallctlnametomib(name, mib, &miblen) == 0) {
    len = oldlen;
    strata_mallctlbymib(mib, miblen, old, &len, NULL, 0);
    for (size_t k = oldlen; k < sizeof(old); k++)
      if (old[k] != 0xcd) abort();
  }
  return 0;
}

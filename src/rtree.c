/*
 * rtree.c - creation of the page map's leaves. Lookups and writes are inline in
 * internal.h; a leaf is mapped when an extent's range is first registered and is
 * never freed, so readers need no lock and never see a leaf disappear.
 */
#include "internal.h"

uint64_t *rtree_l1[RT_L1_SIZE];
mtx_t rtree_lock = MTX_INITIALIZER;
static size_t rtree_leaf_bytes; /* guarded by rtree_lock; part of stats.metadata */

bool rtree_ensure(uintptr_t a, size_t size) {
  uintptr_t end = a + size - 1;
  size_t first = a >> (LG_GRAN + RT_LG_LEAF), last = end >> (LG_GRAN + RT_LG_LEAF);
  if (last >= RT_L1_SIZE || end < a) return true;
  for (size_t i = first; i <= last; i++) {
    if (__atomic_load_n(&rtree_l1[i], __ATOMIC_ACQUIRE) != NULL) continue;
    mtx_lock(&rtree_lock);
    if (rtree_l1[i] == NULL) {
      size_t bytes = RT_LEAF_SIZE * sizeof(uint64_t);
      uint64_t *leaf = os_map(bytes, os_page);
      if (leaf == NULL) {
        mtx_unlock(&rtree_lock);
        return true;
      }
      rtree_leaf_bytes += bytes;
      __atomic_store_n(&rtree_l1[i], leaf, __ATOMIC_RELEASE);
    }
    mtx_unlock(&rtree_lock);
  }
  return false;
}

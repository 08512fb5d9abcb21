/*
 * meta.c - the metadata allocator: a bump allocator over 2 MiB mappings for strata's
 * own structures (arenas, edata, tcaches, bitmaps). Never goes through malloc; callers
 * recycle what they free through their own free lists. Counted as stats.metadata.
 */
#include "internal.h"

/* 2 MiB per block: large enough that mapping is rare, and untouched pages cost no RSS. */
#define META_BLOCK ((size_t)2 << 20)

mtx_t meta_lock = MTX_INITIALIZER;
static char *meta_cur;      /* guarded by meta_lock */
static size_t meta_left;
static size_t meta_total_mapped;

void *meta_alloc(size_t size) {
  size_t align = size >= 64 ? 64 : 16;
  size = (size + align - 1) & ~(align - 1);
  mtx_lock(&meta_lock);
  uintptr_t cur = (uintptr_t)meta_cur;
  size_t pad = ((cur + align - 1) & ~(uintptr_t)(align - 1)) - cur;
  if (meta_cur == NULL || meta_left < size + pad) {
    size_t bsize = size > META_BLOCK ? (size + os_page - 1) & ~(os_page - 1) : META_BLOCK;
    char *b = os_map(bsize, os_page);
    if (b == NULL) {
      mtx_unlock(&meta_lock);
      return NULL;
    }
    meta_total_mapped += bsize;
    os_thp_apply(b, bsize, true);
    if (size > META_BLOCK) { /* a one-off large block: do not abandon the current one */
      mtx_unlock(&meta_lock);
      return b;
    }
    meta_cur = b;
    meta_left = bsize;
    pad = 0;
  }
  void *p = meta_cur + pad;
  meta_cur += pad + size;
  meta_left -= pad + size;
  mtx_unlock(&meta_lock);
  return p;
}

size_t meta_mapped(void) { return __atomic_load_n(&meta_total_mapped, __ATOMIC_RELAXED); }

/*
 * pmem_arena.c - an arena whose pages come from a file: the extent hooks hand out pieces
 * of a MAP_SHARED mapping of a file (on /dev/shm here; a DAX file on real persistent
 * memory), as in the "jemalloc on persistent memory" articles. Written against jemalloc's
 * API only (<jemalloc/jemalloc.h>), so it builds unchanged against jemalloc 5.3.
 *
 * What it shows and checks (exit status 0 when all hold):
 *   - every block from the arena, small or large, lies inside the file's mapping;
 *   - purging (arena.<i>.purge) goes through the hooks: purge_forced punches the pages
 *     out of the file (MADV_REMOVE), so the file's blocks on disk drop;
 *   - the arena's own metadata (its extent descriptors and slab bitmaps) lives in the file
 *     too: arenas.create with hooks takes it from the alloc hook (jemalloc's
 *     metadata_use_hooks, true by default), so creating the arena calls alloc once;
 *   - arena.<i>.destroy hands every extent to the destroy hook and the metadata blocks to
 *     dalloc, so that all the file is back and can be unmapped.
 * Usage: pmem_arena [directory]   (default /dev/shm)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jemalloc/jemalloc.h>

#define FILE_SIZE ((size_t)256 << 20)

static struct {
    char *base;       /* the file's mapping */
    size_t size;
    size_t used;      /* bump pointer: the hooks never give the same range twice */
    size_t handed;    /* bytes handed out (used less alignment gaps) */
    size_t returned;  /* bytes handed back by arena.<i>.destroy */
    bool destroying;  /* arena.<i>.destroy is running */
    unsigned nalloc, npurge, nsplit, nmerge, ndestroy;
    int fd;
} pm;

static void *pm_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero,
                      bool *commit, unsigned arena_ind)
{
    (void)h, (void)arena_ind;
    if (new_addr != NULL) /* growing in place: not offered */
        return NULL;
    size_t at = (pm.used + align - 1) & ~(align - 1);
    if (at + size > pm.size || at + size < at)
        return NULL; /* the file is full: the allocation fails with ENOMEM */
    pm.used = at + size;
    pm.handed += size;
    pm.nalloc++;
    *zero = true; /* a fresh tmpfs/DAX file reads as zeros */
    *commit = true;
    return pm.base + at;
}

/* Returning true keeps the range in the arena (retained) instead of giving it back: a
 * bump allocator cannot take pieces back, so pages are only ever purged and destroyed.
 * At arena.<i>.destroy the arena's metadata blocks come back through dalloc (there is no
 * destroy for them, as in jemalloc): taken, since the whole arena is going. */
static bool pm_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)addr, (void)committed, (void)ind;
    if (!pm.destroying)
        return true;
    pm.returned += size;
    return false;
}

static void pm_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)addr, (void)committed, (void)ind;
    pm.ndestroy++;
    pm.returned += size;
}

/* Forced purge: free the file's blocks behind these pages (they read back as zeros). */
static bool pm_purge_forced(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
                            unsigned ind)
{
    (void)h, (void)size, (void)ind;
    pm.npurge++;
    return madvise((char *)addr + off, len, MADV_REMOVE) != 0;
}

static bool pm_split(extent_hooks_t *h, void *addr, size_t size, size_t a, size_t b, bool c, unsigned ind)
{
    (void)h, (void)addr, (void)size, (void)a, (void)b, (void)c, (void)ind;
    pm.nsplit++;
    return false; /* one file mapping: any page boundary will do */
}

static bool pm_merge(extent_hooks_t *h, void *a, size_t sa, void *b, size_t sb, bool c, unsigned ind)
{
    (void)h, (void)a, (void)sa, (void)b, (void)sb, (void)c, (void)ind;
    pm.nmerge++;
    return false;
}

static extent_hooks_t pm_hooks = {
    .alloc = pm_alloc, .dalloc = pm_dalloc, .destroy = pm_destroy,
    .commit = NULL, .decommit = NULL,            /* always committed */
    .purge_lazy = NULL, .purge_forced = pm_purge_forced,
    .split = pm_split, .merge = pm_merge,
};

static long file_kib(void)
{
    struct stat st;
    return fstat(pm.fd, &st) == 0 ? (long)st.st_blocks / 2 : -1;
}

static int fail(const char *what)
{
    fprintf(stderr, "pmem_arena: FAIL: %s\n", what);
    return 1;
}

int main(int argc, char **argv)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/pmem_arena-XXXXXX", argc > 1 ? argv[1] : "/dev/shm");
    pm.fd = mkstemp(path);
    if (pm.fd < 0) {
        fprintf(stderr, "pmem_arena: SKIP: cannot create a file in %s: %s\n", argc > 1 ? argv[1] : "/dev/shm",
                strerror(errno));
        return 77;
    }
    unlink(path);
    if (ftruncate(pm.fd, (off_t)FILE_SIZE) != 0)
        return fail("ftruncate");
    pm.base = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, pm.fd, 0);
    if (pm.base == MAP_FAILED)
        return fail("mmap");
    pm.size = FILE_SIZE;

    unsigned arena;
    size_t sz = sizeof arena;
    extent_hooks_t *hooks = &pm_hooks;
    if (mallctl("arenas.create", &arena, &sz, &hooks, sizeof hooks) != 0)
        return fail("arenas.create");
    unsigned nalloc_meta = pm.nalloc; /* the arena's metadata, in the file before any block */
    if (nalloc_meta == 0)
        return fail("arenas.create took no metadata from the alloc hook");
    int flags = MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;

    /* Small and large blocks: all inside the file. */
    enum { N = 20000 };
    static char *blocks[N];
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        size_t n = i % 100 == 0 ? 64 * 1024 + (size_t)i : 16 + (size_t)(i * 37) % 2000;
        blocks[i] = mallocx(n, flags);
        if (blocks[i] == NULL)
            return fail("mallocx from the file arena");
        if (blocks[i] < pm.base || blocks[i] + n > pm.base + pm.size)
            return fail("a block outside the file mapping");
        memset(blocks[i], i & 0xff, n);
        total += n;
    }
    long kib_full = file_kib();

    /* Free everything and purge: the pages leave the file through purge_forced. */
    for (int i = 0; i < N; i++)
        dallocx(blocks[i], 0);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "arena.%u.purge", arena);
    if (mallctl(cmd, NULL, NULL, NULL, 0) != 0)
        return fail("arena.<i>.purge");
    long kib_purged = file_kib();
    if (pm.npurge == 0 || kib_purged >= kib_full)
        return fail("purging did not go through the purge_forced hook");

    snprintf(cmd, sizeof cmd, "arena.%u.destroy", arena);
    pm.destroying = true;
    if (mallctl(cmd, NULL, NULL, NULL, 0) != 0)
        return fail("arena.<i>.destroy");
    if (pm.returned != pm.handed)
        return fail("destroy did not hand the whole file back");
    munmap(pm.base, pm.size); /* every byte the arena took is back */
    printf("pmem_arena: %d blocks (%zu bytes) in a %zu MiB file mapping; hooks: %u alloc (%u at creation, for "
           "metadata), %u split, %u merge, %u purge_forced, %u destroy; file %ld KiB full, %ld KiB after purge; "
           "unmapped after destroy\n",
           N, total, FILE_SIZE >> 20, pm.nalloc, nalloc_meta, pm.nsplit, pm.nmerge, pm.npurge, pm.ndestroy,
           kib_full, kib_purged);
    close(pm.fd);
    return 0;
}

/*
 * prof_dump.c - heap profile writers: jemalloc's heap_v2 text (with MAPPED_LIBRARIES, read
 * by jeprof), pprof's profile.proto gzipped (read by go tool pprof, Pyroscope, Parca;
 * function names from the ELF symbol tables and GNU build IDs, so no binaries are needed),
 * and the exit-time leak summary. Called with prof_dump_lock held and no other strata
 * lock; nothing here calls malloc: buffers are mmap'ed, files use raw syscalls, and the
 * gzip stream is written with deflate's "stored" blocks (no zlib).
 */
#include <elf.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* ---------------------------------------------------------------- output buffer */
/* A growable buffer in mmap'ed pages (reserved large, touched as written). */
typedef struct {
  char *p;
  size_t len, cap;
  bool fail;
} buf_t;

static void buf_init(buf_t *b, size_t cap) {
  b->cap = (cap + os_page - 1) & ~(os_page - 1);
  b->p = os_map(b->cap, 0);
  b->len = 0;
  b->fail = b->p == NULL;
}
static void buf_free(buf_t *b) {
  if (b->p) os_unmap(b->p, b->cap);
  b->p = NULL;
}
static void buf_put(buf_t *b, const void *s, size_t n) {
  if (b->fail) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap * 2;
    while (cap < b->len + n) cap *= 2;
    char *q = os_map(cap, 0);
    if (q == NULL) {
      b->fail = true;
      return;
    }
    memcpy(q, b->p, b->len);
    os_unmap(b->p, b->cap);
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}
static void buf_str(buf_t *b, const char *s) { buf_put(b, s, strlen(s)); }
static void buf_u64(buf_t *b, uint64_t v) {
  char t[24];
  buf_str(b, fmt_u64(t, v));
}
static void buf_hex(buf_t *b, uint64_t v) {
  char t[24];
  buf_str(b, fmt_hex(t, v));
}

static bool write_file(const char *path, const void *data, size_t n) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const char *parts[] = {"<strata>: prof: cannot create \"", path, "\"\n"};
    msg_parts(parts, 3);
    return true;
  }
  const char *s = data;
  bool fail = false;
  while (n > 0) {
    ssize_t w = syscall(SYS_write, fd, s, n);
    if (w <= 0) {
      fail = true;
      break;
    }
    s += w;
    n -= (size_t)w;
  }
  syscall(SYS_close, fd);
  return fail;
}

static void buf_file(buf_t *b, const char *path) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char tmp[4096];
  for (;;) {
    ssize_t r = syscall(SYS_read, fd, tmp, sizeof(tmp));
    if (r <= 0) break;
    buf_put(b, tmp, (size_t)r);
  }
  syscall(SYS_close, fd);
}

/* ---------------------------------------------------------------- heap_v2 */
/*
 * heap_v2/<period>
 *   t*: <curobjs>: <curbytes> [<accumobjs>: <accumbytes>]
 * @ 0x<ret> 0x<ret> ...
 *   t*: ...
 * (blank line)
 * MAPPED_LIBRARIES:
 * <contents of /proc/self/maps>
 * Counts are raw samples: jeprof unbiases them with the period. Accumulated counts are
 * written only with prof_accum:true, as jemalloc does.
 */
static void v2_counts_tail(buf_t *b, uint64_t co, uint64_t cb, uint64_t ao, uint64_t ab);
static void v2_counts(buf_t *b, uint64_t co, uint64_t cb, uint64_t ao, uint64_t ab) {
  buf_str(b, "  t*: ");
  v2_counts_tail(b, co, cb, ao, ab);
  buf_str(b, "\n");
}

static void v2_counts_tail(buf_t *b, uint64_t co, uint64_t cb, uint64_t ao, uint64_t ab) {
  buf_u64(b, co);
  buf_str(b, ": ");
  buf_u64(b, cb);
  buf_str(b, " [");
  buf_u64(b, prof_opt.accum ? ao : 0);
  buf_str(b, ": ");
  buf_u64(b, prof_opt.accum ? ab : 0);
  buf_str(b, "]");
}

bool prof_dump_heap_v2(const char *path, const prof_snap_t *s, size_t n, const prof_thr_snap_t *t, size_t nt,
                       uint64_t period) {
  buf_t b;
  buf_init(&b, 1 << 20);
  uint64_t co = 0, cb = 0, ao = 0, ab = 0;
  for (size_t i = 0; i < n; i++) {
    co += s[i].cur_objs, cb += s[i].cur_bytes, ao += s[i].acc_objs, ab += s[i].acc_bytes;
  }
  buf_str(&b, "heap_v2/");
  buf_u64(&b, period);
  buf_str(&b, "\n");
  v2_counts(&b, co, cb, ao, ab);
  /* jemalloc's per-thread lines: "  t<uid>: <counts>[ <thread.prof.name>]" */
  for (size_t i = 0; i < nt; i++) {
    buf_str(&b, "  t");
    buf_u64(&b, t[i].uid);
    buf_str(&b, ": ");
    v2_counts_tail(&b, t[i].cur_objs, t[i].cur_bytes, t[i].acc_objs, t[i].acc_bytes);
    if (t[i].name[0]) {
      buf_str(&b, " ");
      buf_str(&b, t[i].name);
    }
    buf_str(&b, "\n");
  }
  for (size_t i = 0; i < n; i++) {
    if (s[i].cur_objs == 0 && !(prof_opt.accum && s[i].acc_objs)) continue;
    buf_str(&b, "@");
    for (uint32_t k = 0; k < s[i].st->depth; k++) {
      buf_str(&b, " ");
      buf_hex(&b, s[i].st->frames[k]);
    }
    buf_str(&b, "\n");
    v2_counts(&b, s[i].cur_objs, s[i].cur_bytes, s[i].acc_objs, s[i].acc_bytes);
  }
  buf_str(&b, "\nMAPPED_LIBRARIES:\n");
  buf_file(&b, "/proc/self/maps");
  bool fail = b.fail || write_file(path, b.p, b.len);
  buf_free(&b);
  return fail;
}

/* ---------------------------------------------------------------- mappings and ELF symbols */
typedef struct {
  uintptr_t start, end, offset;
  char path[256];
  char build_id[41];
  /* The mapped file, read-only, for its symbols. */
  const uint8_t *file;
  size_t file_size;
  const Elf64_Sym *syms;
  size_t nsyms;
  const char *strtab;
  size_t strtab_size;
  int64_t vaddr_minus_off; /* p_vaddr - p_offset of the executable segment */
  uint64_t pb_id;
  /* Function symbols sorted by address (mmap'ed): lookups are binary searches. */
  struct fsym { uint64_t lo, hi; uint32_t name; } *fs;
  size_t nfs, fs_bytes;
} map_t;

#define MAX_MAPS 512

static bool elf_ok(const uint8_t *f, size_t n) {
  return n >= sizeof(Elf64_Ehdr) && memcmp(f, ELFMAG, SELFMAG) == 0 && f[EI_CLASS] == ELFCLASS64;
}

/* Heapsort (no qsort: glibc's may malloc) of the function symbols by address. */
static void fsym_sift(struct fsym *a, size_t i, size_t n) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && a[c + 1].lo > a[c].lo) c++;
    if (a[i].lo >= a[c].lo) return;
    struct fsym t = a[i];
    a[i] = a[c];
    a[c] = t;
    i = c;
  }
}

static void fsym_build(map_t *m) {
  size_t n = 0;
  for (size_t i = 0; i < m->nsyms; i++) {
    const Elf64_Sym *s = &m->syms[i];
    n += ELF64_ST_TYPE(s->st_info) == STT_FUNC && s->st_value != 0 && s->st_name < m->strtab_size;
  }
  if (n == 0) return;
  m->fs_bytes = (n * sizeof(struct fsym) + os_page - 1) & ~(os_page - 1);
  m->fs = os_map(m->fs_bytes, 0);
  if (m->fs == NULL) return;
  for (size_t i = 0; i < m->nsyms; i++) {
    const Elf64_Sym *s = &m->syms[i];
    if (ELF64_ST_TYPE(s->st_info) == STT_FUNC && s->st_value != 0 && s->st_name < m->strtab_size)
      m->fs[m->nfs++] = (struct fsym){s->st_value, s->st_value + s->st_size, s->st_name};
  }
  for (size_t i = m->nfs / 2; i-- > 0;) fsym_sift(m->fs, i, m->nfs);
  for (size_t k = m->nfs; k-- > 1;) {
    struct fsym t = m->fs[0];
    m->fs[0] = m->fs[k];
    m->fs[k] = t;
    fsym_sift(m->fs, 0, k);
  }
}

static void elf_load(map_t *m) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, m->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  if (syscall(SYS_fstat, fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
    syscall(SYS_close, fd);
    return;
  }
  void *f = (void *)syscall(SYS_mmap, NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  syscall(SYS_close, fd);
  if (f == MAP_FAILED) return;
  m->file = f;
  m->file_size = (size_t)st.st_size;
  const uint8_t *b = f;
  if (!elf_ok(b, m->file_size)) return;
  const Elf64_Ehdr *eh = f;
  /* Segment that holds this mapping's file offset: vaddr = offset + (p_vaddr - p_offset). */
  if (eh->e_phoff + (size_t)eh->e_phnum * sizeof(Elf64_Phdr) <= m->file_size) {
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(b + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++) {
      if (ph[i].p_type == PT_LOAD && m->offset >= ph[i].p_offset && m->offset < ph[i].p_offset + ph[i].p_filesz)
        m->vaddr_minus_off = (int64_t)ph[i].p_vaddr - (int64_t)ph[i].p_offset;
      if (ph[i].p_type == PT_NOTE && ph[i].p_offset + ph[i].p_filesz <= m->file_size) {
        /* GNU build ID: a note of type NT_GNU_BUILD_ID named "GNU". */
        size_t o = ph[i].p_offset, end = o + ph[i].p_filesz;
        while (o + sizeof(Elf64_Nhdr) <= end) {
          const Elf64_Nhdr *nh = (const Elf64_Nhdr *)(b + o);
          size_t name = o + sizeof(*nh), desc = name + ((nh->n_namesz + 3) & ~3u);
          size_t next = desc + ((nh->n_descsz + 3) & ~3u);
          if (next > end) break;
          if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(b + name, "GNU", 4) == 0 &&
              nh->n_descsz <= 20) {
            static const char hx[] = "0123456789abcdef";
            for (size_t k = 0; k < nh->n_descsz; k++) {
              m->build_id[2 * k] = hx[b[desc + k] >> 4];
              m->build_id[2 * k + 1] = hx[b[desc + k] & 15];
            }
            m->build_id[2 * nh->n_descsz] = '\0';
          }
          o = next;
        }
      }
    }
  }
  /* The full symbol table when present, else the dynamic one. */
  if (eh->e_shoff == 0 || eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > m->file_size) return;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(b + eh->e_shoff);
  for (int want = SHT_SYMTAB; want != 0; want = want == SHT_SYMTAB ? SHT_DYNSYM : 0) {
    for (int i = 0; i < eh->e_shnum; i++) {
      if (sh[i].sh_type != (Elf64_Word)want || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr *str = &sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > m->file_size || str->sh_offset + str->sh_size > m->file_size) continue;
      m->syms = (const Elf64_Sym *)(b + sh[i].sh_offset);
      m->nsyms = sh[i].sh_size / sizeof(Elf64_Sym);
      m->strtab = (const char *)(b + str->sh_offset);
      m->strtab_size = str->sh_size;
      fsym_build(m);
      return;
    }
  }
}

static void elf_unload(map_t *m) {
  if (m->file) syscall(SYS_munmap, m->file, m->file_size);
  if (m->fs) os_unmap(m->fs, m->fs_bytes);
  m->file = NULL;
  m->fs = NULL;
}

/* Name of the function containing the (link-time) address a, or NULL: the last symbol
 * starting at or below a, if a is inside it (a symbol without a size covers up to the
 * next one). */
static const char *elf_sym(const map_t *m, uint64_t a) {
  size_t lo = 0, hi = m->nfs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (m->fs[mid].lo <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  for (size_t i = lo; i-- > 0 && lo - i <= 8;) { /* aliases and nested symbols share starts */
    const struct fsym *f = &m->fs[i];
    if (a < f->hi || f->hi == f->lo) return m->strtab + f->name;
  }
  return NULL;
}

static size_t hexval(const char **p) {
  size_t v = 0;
  for (;; (*p)++) {
    char c = **p;
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 99;
    if (d == 99) return v;
    v = v * 16 + d;
  }
}

/* Executable file-backed mappings from /proc/self/maps. */
static size_t read_maps(map_t *maps, size_t max) {
  buf_t b;
  buf_init(&b, 1 << 16);
  buf_file(&b, "/proc/self/maps");
  buf_put(&b, "", 1);
  size_t n = 0;
  if (b.fail) return 0;
  for (const char *p = b.p; *p && n < max;) {
    const char *line = p;
    while (*p && *p != '\n') p++;
    const char *eol = p;
    if (*p) p++;
    const char *q = line;
    uintptr_t lo = hexval(&q);
    if (*q++ != '-') continue;
    uintptr_t hi = hexval(&q);
    if (*q++ != ' ') continue;
    bool x = q[2] == 'x';
    q += 5;
    size_t off = hexval(&q);
    /* dev, inode, then the path */
    for (int f = 0; f < 2 && q < eol; f++) {
      while (q < eol && *q == ' ') q++;
      while (q < eol && *q != ' ') q++;
    }
    while (q < eol && *q == ' ') q++;
    if (!x || q >= eol || *q != '/') continue;
    map_t *m = &maps[n];
    memset(m, 0, sizeof(*m));
    m->start = lo, m->end = hi, m->offset = off;
    size_t l = (size_t)(eol - q);
    if (l >= sizeof(m->path)) continue;
    memcpy(m->path, q, l);
    m->path[l] = '\0';
    n++;
  }
  buf_free(&b);
  return n;
}

static map_t *map_of(map_t *maps, size_t n, uintptr_t a) {
  for (size_t i = 0; i < n; i++) {
    if (a >= maps[i].start && a < maps[i].end) return &maps[i];
  }
  return NULL;
}

/* Symbol for a return address (looked up at ret - 1, the call instruction). */
static const char *symbolize(map_t *maps, size_t nmaps, uintptr_t ret, map_t **mp) {
  map_t *m = map_of(maps, nmaps, ret - 1);
  *mp = m;
  if (m == NULL) return NULL;
  uint64_t link = (uint64_t)(ret - 1 - m->start + m->offset) + (uint64_t)m->vaddr_minus_off;
  return elf_sym(m, link);
}

/* ---------------------------------------------------------------- protobuf encoding */
static void pb_varint(buf_t *b, uint64_t v) {
  uint8_t t[10];
  int n = 0;
  do {
    t[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v);
  buf_put(b, t, (size_t)n);
}
static void pb_key(buf_t *b, unsigned field, unsigned wt) { pb_varint(b, ((uint64_t)field << 3) | wt); }
static void pb_uint(buf_t *b, unsigned field, uint64_t v) {
  if (v == 0) return;
  pb_key(b, field, 0);
  pb_varint(b, v);
}
static void pb_bytes(buf_t *b, unsigned field, const void *s, size_t n) {
  pb_key(b, field, 2);
  pb_varint(b, n);
  buf_put(b, s, n);
}
/* A nested message: encode into tmp, then copy with its length. */
static void pb_msg(buf_t *b, unsigned field, buf_t *tmp) {
  pb_bytes(b, field, tmp->p, tmp->len);
  tmp->len = 0;
}

/* String table: dedup by a small open-addressing hash over the strings written so far. */
typedef struct {
  buf_t out;          /* Profile fields 6 (string_table), in order */
  const char **keys;  /* [cap] */
  uint64_t *ids;
  size_t cap, n;
} strtab_t;

static uint64_t str_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
  return h;
}

static uint64_t str_id(strtab_t *t, const char *s) {
  size_t i = str_hash(s) & (t->cap - 1);
  while (t->keys[i]) {
    if (strcmp(t->keys[i], s) == 0) return t->ids[i];
    i = (i + 1) & (t->cap - 1);
  }
  /* At most half full, so the probe above always ends; past that new strings read as
   * "" (cannot happen: cap is 8 per frame and a frame adds at most 2 strings). */
  if ((t->n + 1) * 2 >= t->cap) return 0;
  t->keys[i] = s;
  t->ids[i] = t->n++;
  pb_bytes(&t->out, 6, s, strlen(s));
  return t->ids[i];
}

/* ---------------------------------------------------------------- gzip (stored blocks) */
static uint32_t crc_table[256];
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}
static uint32_t crc32_of(const uint8_t *p, size_t n) {
  if (crc_table[1] == 0) crc_init();
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

static void gzip_stored(buf_t *out, const uint8_t *p, size_t n) {
  static const uint8_t hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}; /* deflate, no flags, Unix */
  buf_put(out, hdr, sizeof(hdr));
  size_t o = 0;
  do {
    size_t len = n - o > 65535 ? 65535 : n - o;
    uint8_t bh[5] = {(uint8_t)(o + len == n ? 1 : 0), (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len,
                     (uint8_t)(~len >> 8)};
    buf_put(out, bh, 5);
    buf_put(out, p + o, len);
    o += len;
  } while (o < n);
  uint32_t crc = crc32_of(p, n), isz = (uint32_t)n;
  uint8_t tr[8] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16), (uint8_t)(crc >> 24),
                   (uint8_t)isz, (uint8_t)(isz >> 8), (uint8_t)(isz >> 16), (uint8_t)(isz >> 24)};
  buf_put(out, tr, 8);
}

/* ---------------------------------------------------------------- profile.proto */
/*
 * One Location per distinct return address (address = ret - 1, the call), one Function
 * per distinct symbol name, one Mapping per executable file mapping (with its build ID),
 * four sample types, values unbiased: sampled bytes scaled by 1 / (1 - exp(-size/period)).
 */
static int64_t llr(double v) { return (int64_t)(v + (v >= 0 ? 0.5 : -0.5)); }

bool prof_dump_pprof(const char *path, const prof_snap_t *s, size_t n, uint64_t period) {
  size_t nmaps_cap = MAX_MAPS;
  size_t maps_bytes = (nmaps_cap * sizeof(map_t) + os_page - 1) & ~(os_page - 1);
  map_t *maps = os_map(maps_bytes, 0);
  if (maps == NULL) return true;
  size_t nmaps = read_maps(maps, nmaps_cap);
  for (size_t i = 0; i < nmaps; i++) {
    /* One file may be mapped several times; load it once (the first mapping). */
    bool dup = false;
    for (size_t j = 0; j < i && !dup; j++) {
      if (strcmp(maps[j].path, maps[i].path) == 0) {
        dup = true;
        memcpy(maps[i].build_id, maps[j].build_id, sizeof(maps[i].build_id));
      }
    }
    if (!dup) elf_load(&maps[i]);
    maps[i].pb_id = i + 1;
  }
  /* Distinct addresses: an open-addressing table of (address -> location id). */
  size_t nframes = 0;
  for (size_t i = 0; i < n; i++) nframes += s[i].st->depth;
  size_t acap = 64;
  while (acap < nframes * 2 + 2) acap *= 2;
  size_t scap = acap * 4; /* a power of two (the probes mask with scap - 1) */
  size_t tbl_bytes = acap * 2 * sizeof(uint64_t) + scap * (sizeof(char *) + sizeof(uint64_t));
  tbl_bytes = (tbl_bytes + os_page - 1) & ~(os_page - 1);
  uint8_t *tbl = os_map(tbl_bytes, 0);
  buf_t prof, tmp, line, out;
  buf_init(&prof, 1 << 20);
  buf_init(&tmp, 1 << 16);
  buf_init(&line, 1 << 12);
  strtab_t st = {.cap = scap};
  buf_init(&st.out, 1 << 16);
  bool fail = tbl == NULL;
  if (fail) goto done;
  uint64_t *akeys = (uint64_t *)tbl, *aids = akeys + acap;
  st.keys = (const char **)(aids + acap);
  st.ids = (uint64_t *)(st.keys + scap);
  str_id(&st, "");
  /* Function ids by name string id: a second table keyed by the string id. */
  uint64_t nloc = 0, nfunc = 0;
  static const char *const types[4][2] = {
      {"alloc_objects", "count"}, {"alloc_space", "bytes"}, {"inuse_objects", "count"}, {"inuse_space", "bytes"}};
  for (int i = 0; i < 4; i++) {
    pb_uint(&tmp, 1, str_id(&st, types[i][0]));
    pb_uint(&tmp, 2, str_id(&st, types[i][1]));
    pb_msg(&prof, 1, &tmp);
  }
  /* Samples, and Locations/Functions as first met. */
  buf_t locs, funcs;
  buf_init(&locs, 1 << 16);
  buf_init(&funcs, 1 << 16);
  /* function id for string id k: kept in a parallel array indexed by string id */
  size_t fmap_bytes = (scap * sizeof(uint64_t) + os_page - 1) & ~(os_page - 1);
  uint64_t *fid_of_str = os_map(fmap_bytes, 0);
  if (fid_of_str == NULL) {
    fail = true;
    goto done2;
  }
  buf_t ids, vals;
  buf_init(&ids, 4096);
  buf_init(&vals, 4096);
  for (size_t i = 0; i < n; i++) {
    const prof_stack_t *stk = s[i].st;
    ids.len = vals.len = 0;
    for (uint32_t k = 0; k < stk->depth; k++) {
      uint64_t a = stk->frames[k];
      size_t h = (size_t)(a * 0x9e3779b97f4a7c15ULL >> 17) & (acap - 1);
      while (akeys[h] && akeys[h] != a) h = (h + 1) & (acap - 1);
      if (akeys[h] == 0) {
        akeys[h] = a;
        aids[h] = ++nloc;
        map_t *m;
        const char *name = symbolize(maps, nmaps, a, &m);
        uint64_t fid = 0;
        if (name) {
          uint64_t sid = str_id(&st, name);
          if (sid < scap && fid_of_str[sid] == 0) {
            fid_of_str[sid] = ++nfunc;
            pb_uint(&tmp, 1, nfunc);
            pb_uint(&tmp, 2, sid);
            pb_uint(&tmp, 3, sid);
            if (m) pb_uint(&tmp, 4, str_id(&st, m->path));
            pb_msg(&funcs, 5, &tmp);
          }
          fid = sid < scap ? fid_of_str[sid] : 0;
        }
        pb_uint(&tmp, 1, nloc);
        if (m) pb_uint(&tmp, 2, m->pb_id);
        pb_uint(&tmp, 3, a - 1);
        if (fid) {
          pb_uint(&line, 1, fid);
          pb_msg(&tmp, 4, &line);
        }
        pb_msg(&locs, 4, &tmp);
      }
      pb_varint(&ids, aids[h]);
    }
    pb_bytes(&tmp, 1, ids.p, ids.len); /* packed location ids */
    int64_t v[4] = {llr(s[i].w_acc_objs), llr(s[i].w_acc_bytes), llr(s[i].w_cur_objs), llr(s[i].w_cur_bytes)};
    for (int k = 0; k < 4; k++) pb_varint(&vals, (uint64_t)(v[k] > 0 ? v[k] : 0)); /* rounding never goes below 0 */
    pb_bytes(&tmp, 2, vals.p, vals.len);
    pb_msg(&prof, 2, &tmp);
  }
  fail |= ids.fail || vals.fail;
  buf_free(&ids);
  buf_free(&vals);
  for (size_t i = 0; i < nmaps; i++) {
    map_t *m = &maps[i];
    pb_uint(&tmp, 1, m->pb_id);
    pb_uint(&tmp, 2, m->start);
    pb_uint(&tmp, 3, m->end);
    pb_uint(&tmp, 4, m->offset);
    pb_uint(&tmp, 5, str_id(&st, m->path));
    if (m->build_id[0]) pb_uint(&tmp, 6, str_id(&st, m->build_id));
    pb_uint(&tmp, 7, 1); /* has_functions */
    pb_msg(&prof, 3, &tmp);
  }
  buf_put(&prof, locs.p, locs.len);
  buf_put(&prof, funcs.p, funcs.len);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  pb_uint(&prof, 9, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
  pb_uint(&tmp, 1, str_id(&st, "space"));
  pb_uint(&tmp, 2, str_id(&st, "bytes"));
  pb_msg(&prof, 11, &tmp);
  pb_uint(&prof, 12, period);
  pb_uint(&prof, 14, str_id(&st, "inuse_space"));
  buf_put(&prof, st.out.p, st.out.len);
  fail |= prof.fail || tmp.fail || locs.fail || funcs.fail || st.out.fail;
  if (!fail) {
    buf_init(&out, prof.len + prof.len / 65535 * 5 + 64);
    gzip_stored(&out, (const uint8_t *)prof.p, prof.len);
    fail = out.fail || write_file(path, out.p, out.len);
    buf_free(&out);
  }
  os_unmap(fid_of_str, fmap_bytes);
done2:
  buf_free(&locs);
  buf_free(&funcs);
done:
  for (size_t i = 0; i < nmaps; i++) elf_unload(&maps[i]);
  os_unmap(maps, maps_bytes);
  if (tbl) os_unmap(tbl, tbl_bytes);
  buf_free(&prof);
  buf_free(&tmp);
  buf_free(&line);
  buf_free(&st.out);
  return fail;
}

/* ---------------------------------------------------------------- leak summary */
/* jemalloc's summary line, then the stacks holding the most (estimated) bytes, symbolized. */
#define LEAK_TOP 5
bool prof_leak_report(const prof_snap_t *s, size_t n, uint64_t period) {
  (void)period;
  double bytes = 0, objs = 0;
  size_t ctx = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i].cur_objs == 0) continue;
    bytes += s[i].w_cur_bytes;
    objs += s[i].w_cur_objs;
    ctx++;
  }
  if (ctx == 0) return false;
  char a[24], b[24], c[24];
  const char *parts[] = {"<strata>: Leak approximation summary: ~", fmt_u64(a, (uint64_t)llr(bytes)),
                         " bytes, ~", fmt_u64(b, (uint64_t)llr(objs)), " objects, >= ", fmt_u64(c, ctx),
                         " contexts\n"};
  msg_parts(parts, 7);
  map_t *maps = os_map((MAX_MAPS * sizeof(map_t) + os_page - 1) & ~(os_page - 1), 0);
  size_t nmaps = maps ? read_maps(maps, MAX_MAPS) : 0;
  for (size_t i = 0; i < nmaps; i++) elf_load(&maps[i]);
  bool done[LEAK_TOP * 4] = {false};
  const prof_snap_t *top[LEAK_TOP];
  size_t ntop = 0;
  for (; ntop < LEAK_TOP; ntop++) { /* selection of the largest, n is small */
    const prof_snap_t *best = NULL;
    for (size_t i = 0; i < n; i++) {
      if (s[i].cur_objs == 0) continue;
      bool seen = false;
      for (size_t k = 0; k < ntop; k++) seen |= top[k] == &s[i];
      if (!seen && (best == NULL || s[i].w_cur_bytes > best->w_cur_bytes)) best = &s[i];
    }
    if (best == NULL) break;
    top[ntop] = best;
  }
  (void)done;
  for (size_t k = 0; k < ntop; k++) {
    const char *p2[] = {"<strata>:   ~", fmt_u64(a, (uint64_t)llr(top[k]->w_cur_bytes)), " bytes in ~",
                        fmt_u64(b, (uint64_t)llr(top[k]->w_cur_objs)), " objects from:\n"};
    msg_parts(p2, 5);
    for (uint32_t f = 0; f < top[k]->st->depth && f < 8; f++) {
      map_t *m;
      const char *name = symbolize(maps, nmaps, top[k]->st->frames[f], &m);
      const char *p3[] = {"<strata>:     ", fmt_hex(a, top[k]->st->frames[f]), " ", name ? name : "??", "\n"};
      msg_parts(p3, 5);
    }
  }
  msg_write("<strata>: Run jeprof or `strata prof top` on a dump (prof_final:true) for leak detail\n");
  for (size_t i = 0; i < nmaps; i++) elf_unload(&maps[i]);
  if (maps) os_unmap(maps, (MAX_MAPS * sizeof(map_t) + os_page - 1) & ~(os_page - 1));
  return true;
}

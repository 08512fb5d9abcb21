/*
 * backtrace.c - the calling program's stack for the heap profiler (prof.c) and guarded
 * allocations (guard.c). Debian builds programs and libraries without frame pointers, so
 * a frame-pointer walk stops at the first such frame or follows garbage; the stack is
 * unwound with the .eh_frame CFI, as libgcc's _Unwind_Backtrace does, but with the rule of
 * each return address cached (bench/prof/bt_cost.c: libgcc re-reads and re-interprets the
 * FDE of every frame of every sample, about 1,900 instructions a frame).
 *
 * x86_64 fast unwinder. For a return address ra, the rule to reach the caller's frame is
 * CFA = rsp + off or rbp + off, the caller's return address at CFA - 8 (or none: the
 * outermost frame), the caller's rbp at CFA + k or unchanged. A missing rule is computed
 * once from the FDE covering ra - 1 (the object's PT_GNU_EH_FRAME binary-search table,
 * found with dl_iterate_phdr) by running the CIE's and the FDE's instructions up to ra, and
 * kept in a two-way set-associative table of seqlocked slots (static, no allocation; writers never
 * wait, so a signal handler's sample cannot deadlock on it). What the rule cannot say
 * (CFA or rbp by expression or another register, signal frames such as __restore_rt,
 * 64-bit or "eh" CIEs, a CFA that does not grow) marks the address "hard": that stack is
 * unwound by libgcc instead, so the frames are always libgcc's. dlclose + dlopen can put
 * other code at a cached address: the loader's dlpi_adds/dlpi_subs are compared on every
 * backtrace and a change starts a new generation of the table.
 *
 * _Unwind_Backtrace is called directly (glibc's backtrace() dlopens libgcc_s and mallocs).
 * Callers hold no strata lock: the unwinders take the loader's (a recursive lock).
 */
#include <link.h>
#include <stddef.h>
#include <string.h>
#include <unwind.h>

#include "internal.h"

/* libstrata.so's executable segments: the leading frames there are strata's own and are
 * dropped. Found once from the program headers (dladdr per frame cost 13,000
 * instructions per stack); empty (nothing skipped) when strata is linked into the
 * executable, whose frames cannot be told from the program's by module. */
static uintptr_t self_lo, self_hi;
static bool self_known;

static int self_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t me = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (me < lo || me >= hi) continue;
    if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') { /* a shared object */
      __atomic_store_n(&self_lo, lo, __ATOMIC_RELAXED);
      __atomic_store_n(&self_hi, hi, __ATOMIC_RELAXED);
    }
    return 1;
  }
  return 0;
}

typedef struct {
  uintptr_t *frames;
  unsigned n, max;
  bool skipping; /* still in strata's own frames */
  bool fallback; /* the fast unwinder met a hard frame: unwind again with libgcc */
  uintptr_t lo, hi;
} bt_state_t;

/* One frame's return address; true when the backtrace is complete. */
static inline bool bt_take(bt_state_t *s, uintptr_t ip) {
  if (ip == 0) return true;
  if (s->skipping) {
    if (ip - 1 >= s->lo && ip - 1 < s->hi) return false;
    s->skipping = false; /* the first frame outside strata: keep everything from here */
  }
  s->frames[s->n++] = ip;
  return s->n >= s->max;
}

static _Unwind_Reason_Code bt_cb(struct _Unwind_Context *ctx, void *arg) {
  return bt_take(arg, (uintptr_t)_Unwind_GetIP(ctx)) ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* Test and measurement knobs (tests/unit/test_backtrace.c, bench/prof/bt_cost.c). */
HIDDEN int strata_bt_mode;          /* 0: fast unwinder, libgcc for hard stacks; 1: libgcc only */
HIDDEN unsigned strata_backtrace_mode(uintptr_t *frames, unsigned max, int mode);
HIDDEN uint64_t strata_bt_stats[4]; /* rules computed, fallbacks to libgcc, table flushes, hard rules */

#if defined(__x86_64__) && defined(__linux__)
/* ---------------------------------------------------------------- rules */
/* A rule in one word: bits 0-1 kind, 2 CFA from rbp (else rsp), 3 rbp saved at CFA + k,
 * 4 no return address (outermost frame), 16-31 k (int16), 32-63 the CFA offset (int32). */
enum { R_NORMAL = 1, R_END = 2, R_HARD = 3 };
#define R_CFA_RBP 4u
#define R_RBP_SAVED 8u
#define R_RA_UNDEF 16u
static inline uint64_t rule_make(unsigned kind, unsigned flags, int32_t cfa_off, int16_t rbp_off) {
  return kind | flags | (uint64_t)(uint16_t)rbp_off << 16 | (uint64_t)(uint32_t)cfa_off << 32;
}

#define BT_SLOTS 4096 /* 2048 sets of 2; 128 KiB of .bss, touched only by profiling */
typedef struct {
  uint64_t seq; /* odd while written */
  uint64_t pc, gen, rule;
} bt_slot_t;
static bt_slot_t bt_table[BT_SLOTS] __attribute__((aligned(64)));
static uint64_t bt_gen = 1, bt_adds, bt_subs;
static bool bt_counts_missing; /* a loader without dlpi_adds: no caching is safe */

/* Two-way sets: a stack's return addresses rarely collide three to a set. */
static inline bt_slot_t *bt_set(uintptr_t pc) {
  return &bt_table[((pc * 0x9e3779b97f4a7c15ull) >> (64 - 11)) << 1];
}
_Static_assert(BT_SLOTS == 2u << 11, "set index width");

static inline uint64_t bt_read(bt_slot_t *sl, uintptr_t pc, uint64_t gen) {
  /* Acquire loads rather than fences (which TSan does not model): plain loads on x86. */
  uint64_t s1 = __atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE);
  uint64_t k = __atomic_load_n(&sl->pc, __ATOMIC_ACQUIRE);
  uint64_t g = __atomic_load_n(&sl->gen, __ATOMIC_ACQUIRE);
  uint64_t r = __atomic_load_n(&sl->rule, __ATOMIC_ACQUIRE);
  if ((s1 & 1) || __atomic_load_n(&sl->seq, __ATOMIC_RELAXED) != s1) return 0;
  return (k == pc && g == gen) ? r : 0;
}

/* The cached rule of return address pc in generation gen, 0 if none. */
static inline uint64_t bt_lookup(uintptr_t pc, uint64_t gen) {
  bt_slot_t *set = bt_set(pc);
  uint64_t r = bt_read(&set[0], pc, gen);
  return r != 0 ? r : bt_read(&set[1], pc, gen);
}

static void bt_store(uintptr_t pc, uint64_t gen, uint64_t rule) {
  bt_slot_t *set = bt_set(pc);
  /* A way of an older generation, else the one pc's bit 4 names. */
  bt_slot_t *sl = &set[(pc >> 4) & 1];
  if (__atomic_load_n(&set[0].gen, __ATOMIC_RELAXED) != gen) sl = &set[0];
  else if (__atomic_load_n(&set[1].gen, __ATOMIC_RELAXED) != gen) sl = &set[1];
  uint64_t s = __atomic_load_n(&sl->seq, __ATOMIC_RELAXED);
  /* Busy (another writer, perhaps the thread this signal handler interrupted): skip. */
  if ((s & 1) || !__atomic_compare_exchange_n(&sl->seq, &s, s + 1, false, __ATOMIC_ACQUIRE,
                                              __ATOMIC_RELAXED))
    return;
  /* Release stores: a reader that sees one sees the odd sequence number after it. */
  __atomic_store_n(&sl->pc, pc, __ATOMIC_RELEASE);
  __atomic_store_n(&sl->gen, gen, __ATOMIC_RELEASE);
  __atomic_store_n(&sl->rule, rule, __ATOMIC_RELEASE);
  __atomic_store_n(&sl->seq, s + 2, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- loaded objects */
typedef struct {
  unsigned long long adds, subs;
  bool ok;
} bt_counts_t;

static int counts_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  bt_counts_t *c = arg;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    c->adds = info->dlpi_adds;
    c->subs = info->dlpi_subs;
    c->ok = true;
  }
  return 1; /* the counts are the loader's, the same in every entry: the first suffices */
}

/* The table's generation for this backtrace: a new one when objects were loaded or
 * unloaded since the last look (another thread may be running the same check: at worst
 * two new generations). 0 when the loader keeps no counts. */
static uint64_t bt_generation(void) {
  bt_counts_t c = {0, 0, false};
  dl_iterate_phdr(counts_cb, &c);
  if (!c.ok) {
    __atomic_store_n(&bt_counts_missing, true, __ATOMIC_RELAXED);
    return 0;
  }
  if (c.adds != __atomic_load_n(&bt_adds, __ATOMIC_ACQUIRE) ||
      c.subs != __atomic_load_n(&bt_subs, __ATOMIC_ACQUIRE)) {
    __atomic_add_fetch(&bt_gen, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&strata_bt_stats[2], 1, __ATOMIC_RELAXED);
    __atomic_store_n(&bt_adds, c.adds, __ATOMIC_RELEASE);
    __atomic_store_n(&bt_subs, c.subs, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&bt_gen, __ATOMIC_SEQ_CST);
}

/* ---------------------------------------------------------------- DWARF reading */
/* LEB128: unsigned, or signed (sign-extended from the last byte's bit 6). */
static uint64_t leb(const uint8_t **pp, bool sign) {
  const uint8_t *p = *pp;
  uint64_t v = 0;
  unsigned shift = 0;
  uint8_t b;
  do {
    b = *p++;
    if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
  } while (b & 0x80);
  if (sign && shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
  *pp = p;
  return v;
}

static uint64_t uleb(const uint8_t **pp) { return leb(pp, false); }
static int64_t sleb(const uint8_t **pp) { return (int64_t)leb(pp, true); }

#define DW_EH_PE_omit 0xff
/* A pointer in encoding enc (absptr/udata/sdata 2, 4, 8, uleb/sleb; absolute, pcrel or
 * datarel from base); false for what .eh_frame does not use on x86_64 (indirect,
 * textrel, funcrel, aligned). */
static bool read_enc(const uint8_t **pp, uint8_t enc, uintptr_t datarel, uintptr_t *out) {
  const uint8_t *p = *pp;
  uintptr_t base = 0;
  uint64_t v;
  if (enc == DW_EH_PE_omit || (enc & 0x80)) return false;
  switch (enc & 0x70) {
  case 0x00: break;
  case 0x10: base = (uintptr_t)p; break;
  case 0x30: base = datarel; break;
  default: return false;
  }
  switch (enc & 0x0f) {
  case 0x00: case 0x04: case 0x0c: memcpy(&v, p, 8); p += 8; break;
  case 0x01: v = uleb(&p); break;
  case 0x09: v = (uint64_t)sleb(&p); break;
  case 0x02: { uint16_t x; memcpy(&x, p, 2); v = x; p += 2; break; }
  case 0x03: { uint32_t x; memcpy(&x, p, 4); v = x; p += 4; break; }
  case 0x0a: { int16_t x; memcpy(&x, p, 2); v = (uint64_t)(int64_t)x; p += 2; break; }
  case 0x0b: { int32_t x; memcpy(&x, p, 4); v = (uint64_t)(int64_t)x; p += 4; break; }
  default: return false;
  }
  *pp = p;
  *out = base + (uintptr_t)v;
  return true;
}

/* ---------------------------------------------------------------- CFI interpreter */
enum { H_SAME, H_OFFSET, H_UNDEF, H_OTHER }; /* how a register is recovered */
typedef struct {
  int cfa_reg;      /* 6 rbp, 7 rsp, -1 anything else (expression, other register) */
  int64_t cfa_off;
  uint8_t rbp_how, ra_how, rsp_how;
  int64_t rbp_off, ra_off;
} cfi_t;

#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16
#define CFI_STACK 8

/* Sets register reg's rule (only rbp, rsp and the return address matter here). */
static void cfi_set(cfi_t *st, uint64_t reg, uint8_t how, int64_t off) {
  if (reg == REG_RBP) st->rbp_how = how, st->rbp_off = off;
  else if (reg == REG_RA) st->ra_how = how, st->ra_off = off;
  else if (reg == REG_RSP) st->rsp_how = how;
}

/* Runs the instructions [p, end) while loc < target; false on what cannot be read. */
static bool cfi_run(cfi_t *st, const cfi_t *init, const uint8_t *p, const uint8_t *end,
                    uintptr_t loc, uintptr_t target, uint64_t code_align, int64_t data_align,
                    uint8_t fde_enc) {
  cfi_t stack[CFI_STACK];
  unsigned depth = 0;
  while (p < end && loc < target) {
    uint8_t op = *p++;
    uint64_t reg, u;
    int64_t s;
    switch (op & 0xc0) {
    case 0x40: loc += (op & 0x3f) * code_align; continue;
    case 0x80: reg = op & 0x3f; u = uleb(&p); cfi_set(st, reg, H_OFFSET, (int64_t)u * data_align); continue;
    case 0xc0:
      reg = op & 0x3f;
      if (init == NULL) return false;
      if (reg == REG_RBP) st->rbp_how = init->rbp_how, st->rbp_off = init->rbp_off;
      else if (reg == REG_RA) st->ra_how = init->ra_how, st->ra_off = init->ra_off;
      else if (reg == REG_RSP) st->rsp_how = init->rsp_how;
      continue;
    }
    switch (op) {
    case 0x00: break; /* nop */
    case 0x01: if (!read_enc(&p, fde_enc, 0, &loc)) return false; break; /* set_loc */
    case 0x02: loc += *p * code_align; p += 1; break;
    case 0x03: { uint16_t d; memcpy(&d, p, 2); p += 2; loc += d * code_align; break; }
    case 0x04: { uint32_t d; memcpy(&d, p, 4); p += 4; loc += d * code_align; break; }
    case 0x05: reg = uleb(&p); u = uleb(&p); cfi_set(st, reg, H_OFFSET, (int64_t)u * data_align); break;
    case 0x06: /* restore_extended */
      reg = uleb(&p);
      if (init == NULL) return false;
      if (reg == REG_RBP) st->rbp_how = init->rbp_how, st->rbp_off = init->rbp_off;
      else if (reg == REG_RA) st->ra_how = init->ra_how, st->ra_off = init->ra_off;
      else if (reg == REG_RSP) st->rsp_how = init->rsp_how;
      break;
    case 0x07: cfi_set(st, uleb(&p), H_UNDEF, 0); break;
    case 0x08: cfi_set(st, uleb(&p), H_SAME, 0); break;
    case 0x09: reg = uleb(&p); (void)uleb(&p); cfi_set(st, reg, H_OTHER, 0); break; /* register */
    case 0x0a:
      if (depth == CFI_STACK) return false;
      stack[depth++] = *st;
      break;
    case 0x0b: { /* restore_state: the CFA and the registers, as libgcc does */
      if (depth == 0) return false;
      *st = stack[--depth];
      break;
    }
    case 0x0c: st->cfa_reg = (int)uleb(&p); st->cfa_off = (int64_t)uleb(&p); break;
    case 0x0d: st->cfa_reg = (int)uleb(&p); break;
    case 0x0e: st->cfa_off = (int64_t)uleb(&p); break;
    case 0x0f: u = uleb(&p); p += u; st->cfa_reg = -1; break; /* def_cfa_expression */
    case 0x10: case 0x16: /* expression, val_expression */
      reg = uleb(&p); u = uleb(&p); p += u; cfi_set(st, reg, H_OTHER, 0);
      break;
    case 0x11: reg = uleb(&p); s = sleb(&p); cfi_set(st, reg, H_OFFSET, s * data_align); break;
    case 0x12: st->cfa_reg = (int)uleb(&p); st->cfa_off = sleb(&p) * data_align; break;
    case 0x13: st->cfa_off = sleb(&p) * data_align; break;
    case 0x14: reg = uleb(&p); (void)uleb(&p); cfi_set(st, reg, H_OTHER, 0); break; /* val_offset */
    case 0x15: reg = uleb(&p); (void)sleb(&p); cfi_set(st, reg, H_OTHER, 0); break; /* val_offset_sf */
    case 0x2e: (void)uleb(&p); break; /* GNU_args_size: landing pads only */
    case 0x2f: reg = uleb(&p); u = uleb(&p); cfi_set(st, reg, H_OFFSET, -(int64_t)u * data_align); break;
    default: return false;
    }
    if (st->cfa_reg != REG_RSP && st->cfa_reg != REG_RBP) st->cfa_reg = -1;
  }
  return true;
}

/* The rule for return address ra from the FDE at fde (covering ra - 1 or not). */
static uint64_t rule_from_fde(const uint8_t *fde, uintptr_t ra, bool *covered) {
  const uint8_t *p = fde;
  uint32_t len, cie_id;
  *covered = false;
  memcpy(&len, p, 4);
  p += 4;
  if (len == 0 || len == 0xffffffffu) return R_HARD; /* terminator or 64-bit DWARF */
  const uint8_t *fde_end = p + len;
  memcpy(&cie_id, p, 4);
  const uint8_t *cie = p - cie_id;
  p += 4;
  /* The CIE. */
  const uint8_t *c = cie;
  uint32_t clen, cid;
  memcpy(&clen, c, 4);
  c += 4;
  if (clen == 0 || clen == 0xffffffffu) return R_HARD;
  const uint8_t *cie_end = c + clen;
  memcpy(&cid, c, 4);
  c += 4;
  if (cid != 0) return R_HARD;
  uint8_t version = *c++;
  const char *aug = (const char *)c;
  c += strlen(aug) + 1;
  if (aug[0] != '\0' && aug[0] != 'z') return R_HARD; /* "eh" and other old forms */
  uint64_t code_align = uleb(&c);
  int64_t data_align = sleb(&c);
  uint64_t ra_col = version == 1 ? *c++ : uleb(&c);
  if (ra_col != REG_RA) return R_HARD;
  uint8_t fde_enc = 0; /* absptr */
  bool has_z = aug[0] == 'z';
  if (has_z) {
    uint64_t alen = uleb(&c);
    const uint8_t *aend = c + alen;
    for (const char *a = aug + 1; *a; a++) {
      if (*a == 'R') fde_enc = *c++;
      else if (*a == 'L') c++;
      else if (*a == 'P') {
        uint8_t penc = *c++;
        uintptr_t dummy;
        if (!read_enc(&c, penc & 0x7f, 0, &dummy)) return R_HARD;
      } else return R_HARD; /* 'S', a signal frame: libgcc's business; or unknown */
    }
    c = aend;
  }
  /* The FDE's range. */
  uintptr_t pc_begin, pc_range;
  if (!read_enc(&p, fde_enc, 0, &pc_begin) || !read_enc(&p, fde_enc & 0x0f, 0, &pc_range))
    return R_HARD;
  if (ra - 1 < pc_begin || ra - 1 >= pc_begin + pc_range) return R_END;
  *covered = true;
  if (has_z) {
    uint64_t alen = uleb(&p);
    p += alen;
  }
  cfi_t st = {-1, 0, H_SAME, H_OTHER, H_SAME, 0, 0};
  if (!cfi_run(&st, NULL, c, cie_end, 0, UINTPTR_MAX, code_align, data_align, fde_enc)) return R_HARD;
  cfi_t init = st;
  if (!cfi_run(&st, &init, p, fde_end, pc_begin, ra, code_align, data_align, fde_enc)) return R_HARD;
  /* What the walker can do. */
  if (st.cfa_reg < 0 || st.rsp_how != H_SAME) return R_HARD;
  if (st.cfa_off < INT32_MIN || st.cfa_off > INT32_MAX) return R_HARD;
  unsigned flags = st.cfa_reg == REG_RBP ? R_CFA_RBP : 0;
  int16_t k = 0;
  if (st.rbp_how == H_OFFSET) {
    if (st.rbp_off < INT16_MIN || st.rbp_off > INT16_MAX) return R_HARD;
    flags |= R_RBP_SAVED;
    k = (int16_t)st.rbp_off;
  } else if (st.rbp_how != H_SAME) {
    return R_HARD;
  }
  if (st.ra_how == H_UNDEF) flags |= R_RA_UNDEF;
  else if (st.ra_how != H_OFFSET || st.ra_off != -8) return R_HARD;
  return rule_make(R_NORMAL, flags, (int32_t)st.cfa_off, k);
}

/* The FDE search in an object's .eh_frame_hdr (sorted table of datarel sdata4 pairs). */
static uint64_t rule_from_hdr(const uint8_t *hdr, uintptr_t ra) {
  if (hdr[0] != 1) return R_HARD;
  uint8_t count_enc = hdr[2], table_enc = hdr[3];
  const uint8_t *p = hdr + 4;
  uintptr_t eh_frame, count;
  if (!read_enc(&p, hdr[1], (uintptr_t)hdr, &eh_frame)) return R_HARD;
  if (table_enc != 0x3b || !read_enc(&p, count_enc, (uintptr_t)hdr, &count)) return R_HARD;
  const int32_t *t = (const int32_t *)(const void *)p; /* [count][2]: initial loc, FDE */
  intptr_t pc = (intptr_t)(ra - 1) - (intptr_t)hdr;
  size_t lo = 0, hi = count;
  while (lo < hi) { /* the last entry with initial loc <= pc */
    size_t mid = lo + (hi - lo) / 2;
    int32_t v;
    memcpy(&v, &t[2 * mid], 4);
    if ((intptr_t)v <= pc) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return R_END;
  int32_t fde_off;
  memcpy(&fde_off, &t[2 * (lo - 1) + 1], 4);
  bool covered;
  return rule_from_fde(hdr + fde_off, ra, &covered);
}

typedef struct {
  uintptr_t ra;
  uint64_t rule;
} find_t;

/* glibc's __restore_rt: mov $15, %rax; syscall (libgcc's fallback for a PC without FDE). */
static const uint8_t sigreturn_code[9] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  find_t *f = arg;
  const ElfW(Phdr) *hdr = NULL, *seg = NULL;
  uintptr_t pc = f->ra - 1;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_GNU_EH_FRAME) hdr = ph;
    else if (ph->p_type == PT_LOAD && pc - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz) seg = ph;
  }
  if (seg == NULL) return 0;
  /* No table (a static program's frames may be registered with libgcc instead): libgcc. */
  f->rule = hdr != NULL ? rule_from_hdr((const uint8_t *)(info->dlpi_addr + hdr->p_vaddr), f->ra) : R_HARD;
  if (f->rule == R_END && (seg->p_flags & PF_X)) {
    uintptr_t end = info->dlpi_addr + seg->p_vaddr + seg->p_memsz;
    if (f->ra + sizeof sigreturn_code <= end && memcmp((const void *)f->ra, sigreturn_code, sizeof sigreturn_code) == 0)
      f->rule = R_HARD;
  }
  return 1;
}

static NOINLINE uint64_t bt_compute(uintptr_t ra, uint64_t gen) {
  /* In no object: JIT code, whose FDEs libgcc may know (__register_frame), or garbage. */
  find_t f = {ra, R_HARD};
  dl_iterate_phdr(find_cb, &f);
  __atomic_add_fetch(&strata_bt_stats[0], 1, __ATOMIC_RELAXED);
  if ((f.rule & 3) == R_HARD) __atomic_add_fetch(&strata_bt_stats[3], 1, __ATOMIC_RELAXED);
  if (gen != 0 && ra < ((uintptr_t)1 << 48)) bt_store(ra, gen, f.rule);
  return f.rule;
}

/* The rule of return address ra, computed afresh (tests/unit/bt_rules_check.py compares
 * it with readelf's table of every FDE row). */
HIDDEN uint64_t strata_bt_rule_of(uintptr_t ra) {
  find_t f = {ra, R_HARD};
  dl_iterate_phdr(find_cb, &f);
  return f.rule;
}

/* ---------------------------------------------------------------- the walk */
/* Entered from strata_bt_fast with the caller's return address, rsp and rbp: the frames
 * libgcc's _Unwind_Backtrace would give from the same call site, or s->fallback. */
HIDDEN __attribute__((used, no_sanitize_address)) _Unwind_Reason_Code
strata_bt_walk(_Unwind_Trace_Fn fn, void *arg, uintptr_t ra, uintptr_t sp, uintptr_t bp) {
  (void)fn;
  bt_state_t *s = arg;
  uint64_t gen = bt_generation();
  for (unsigned steps = 0; steps < s->max + 256; steps++) {
    if (ra == 0) break;
    uint64_t r = bt_lookup(ra, gen);
    if (r == 0) r = bt_compute(ra, gen);
    unsigned kind = r & 3;
    if (kind == R_HARD) {
      s->fallback = true;
      break;
    }
    if (bt_take(s, ra) || kind == R_END) break;
    uintptr_t cfa = ((r & R_CFA_RBP) ? bp : sp) + (intptr_t)(int32_t)(r >> 32);
    if (cfa <= sp || (cfa & 7)) { /* a CFA that does not grow: another stack, or garbage */
      s->fallback = true;
      break;
    }
    if (r & R_RBP_SAVED) bp = *(const uintptr_t *)(cfa + (intptr_t)(int16_t)(r >> 16));
    ra = (r & R_RA_UNDEF) ? 0 : *(const uintptr_t *)(cfa - 8);
    sp = cfa;
  }
  return _URC_END_OF_STACK;
}

/* Same type as _Unwind_Backtrace, called from the same call site (bt_unwind), so the two
 * see the same first return address: passes it, the caller's rsp and rbp to the walk. */
HIDDEN _Unwind_Reason_Code strata_bt_fast(_Unwind_Trace_Fn fn, void *arg);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl strata_bt_fast\n"
        ".hidden strata_bt_fast\n"
        ".type strata_bt_fast, @function\n"
        "strata_bt_fast:\n"
        ".cfi_startproc\n"
        "  endbr64\n"
        "  movq (%rsp), %rdx\n"
        "  leaq 8(%rsp), %rcx\n"
        "  movq %rbp, %r8\n"
        "  jmp strata_bt_walk\n"
        ".cfi_endproc\n"
        ".size strata_bt_fast, .-strata_bt_fast\n");
#define BT_FAST 1
#else
#define BT_FAST 0
HIDDEN uint64_t strata_bt_rule_of(uintptr_t ra) {
  (void)ra;
  return 3; /* hard: libgcc's */
}
#endif

typedef _Unwind_Reason_Code (*bt_unwind_fn)(_Unwind_Trace_Fn, void *);

/* One call site for both unwinders (the loop is not unrolled: fn is opaque). */
static NOINLINE __attribute__((noclone)) void bt_unwind(bt_state_t *s, int mode) {
  bt_unwind_fn fn = _Unwind_Backtrace;
  (void)mode;
#if BT_FAST
  if (mode == 0 &&
      !__atomic_load_n(&bt_counts_missing, __ATOMIC_RELAXED))
    fn = strata_bt_fast;
#endif
  for (;;) {
    __asm__ volatile("" : "+r"(fn));
    fn(bt_cb, s);
    if (!s->fallback) break;
    __atomic_add_fetch(&strata_bt_stats[1], 1, __ATOMIC_RELAXED);
    s->fallback = false;
    s->n = 0;
    s->skipping = true;
    fn = _Unwind_Backtrace;
  }
  __asm__ volatile(""); /* no tail call: the same frames whichever unwinder runs */
}

/* Fork safety. Both unwinders call dl_iterate_phdr, which holds the loader's
 * dl_load_write_lock while it runs; glibc's fork does not take that lock, so a fork while
 * another thread unwinds leaves it held for ever in the child, whose first sample then
 * hangs (prof_stress's fork test did, about 1 run in 8). Every unwind holds bt_lock, and
 * fork's prepare handler takes it last (bt_prefork, after every other strata lock): it is
 * a leaf, nothing is locked under it but the loader's and libgcc's own locks, so a
 * thread that holds it always finishes. Unwinds are rare (samples), so serialising them
 * costs nothing that dl_iterate_phdr's own lock did not already. */
static mtx_t bt_lock = MTX_INITIALIZER;
void bt_prefork(void) { mtx_lock(&bt_lock); }
void bt_postfork(bool child) {
  if (child)
    mtx_init(&bt_lock);
  else
    mtx_unlock(&bt_lock);
}

/* A signal handler that unwinds (guard_free's report of a free in the handler, a test's
 * handler) while its thread is inside an unwind, or waiting for bt_lock, must not wait on
 * itself: bt_busy is set before the lock is taken, and such a nested unwind runs without
 * it (only a fork during that rare nested unwind is unguarded, as every unwind was before
 * bt_lock). Nor may it call dl_iterate_phdr: the interrupted unwind may be inside it, with
 * the loader's lock taken but its owner not yet recorded, and the nested call then waits
 * for itself (unit_backtrace hung about 1 run in 30 so). A nested unwind therefore uses
 * libgcc's unwinder, which asks _dl_find_object (no lock), and skips the one-time look for
 * strata's own text. */
static __thread bool bt_busy __attribute__((tls_model("initial-exec")));

static inline unsigned bt_collect(uintptr_t *frames, unsigned max, int mode) {
  if (max == 0) return 0;
  bool nested = bt_busy;
  if (!nested) {
    bt_busy = true;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    mtx_lock(&bt_lock);
  }
  if (!nested && !__atomic_load_n(&self_known, __ATOMIC_ACQUIRE)) {
    dl_iterate_phdr(self_cb, (void *)(uintptr_t)&strata_backtrace); /* idempotent */
    __atomic_store_n(&self_known, true, __ATOMIC_RELEASE);
  }
  bt_state_t s = {frames, 0, max, true, false, __atomic_load_n(&self_lo, __ATOMIC_RELAXED),
                  __atomic_load_n(&self_hi, __ATOMIC_RELAXED)};
  bt_unwind(&s, nested ? 1 : mode);
  /* Opaque here, so that no compiler threads the two tests of nested into two copies of
   * the call above: both unwinders must return through one call site (bt_unwind's). */
  __asm__ volatile("" : "+r"(nested));
  if (!nested) {
    mtx_unlock(&bt_lock);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    bt_busy = false;
  }
  return s.n;
}

/* A static program sets up the loader state libgcc's unwinder asks (_dl_find_object)
 * in __libc_init_first, after its first mallocs (_dl_find_object_init's own): a sample
 * taken there crashed in _Unwind_Find_FDE. Until the program's constructors run (strata's
 * among them, after that set-up) a static program's samples keep an empty stack.
 * _DYNAMIC is undefined (weak: NULL) only in a static executable. */
extern ElfW(Dyn) _DYNAMIC[] __attribute__((weak)); /* link.h declares it; made weak here */
static bool bt_started;
__attribute__((constructor)) static void bt_start(void) { __atomic_store_n(&bt_started, true, __ATOMIC_RELEASE); }

NOINLINE unsigned strata_backtrace(uintptr_t *frames, unsigned max) {
  if (unlikely(!__atomic_load_n(&bt_started, __ATOMIC_ACQUIRE)) && _DYNAMIC == NULL) return 0;
  return bt_collect(frames, max, __atomic_load_n(&strata_bt_mode, __ATOMIC_RELAXED));
}

/* strata_backtrace with the unwinder chosen (tests, bt_cost): 0 fast, 1 libgcc. */
HIDDEN NOINLINE unsigned strata_backtrace_mode(uintptr_t *frames, unsigned max, int mode) {
  return bt_collect(frames, max, mode);
}

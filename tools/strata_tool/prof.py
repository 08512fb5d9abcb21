"""`strata prof`: record, read, compare and draw strata's heap profiles.

  strata prof record [--rate BYTES] [--interval BYTES] [--out DIR] -- CMD...
  strata prof top FILE [--alloc] [-n N]
  strata prof flame FILE -o out.svg [--alloc]
  strata prof diff OLD NEW [-n N]
  strata prof leaks [--rate BYTES] -- CMD...

Reads both of strata's formats: jemalloc's heap_v2 text (raw samples, unbiased here as
jeprof does) and pprof's gzipped profile.proto (already unbiased, names included).
Symbolization of heap_v2 addresses uses pyelftools on the files named in the dump's
MAPPED_LIBRARIES: pure Python, no binutils, one ELF parse per file (addr2line would be a
process per file and needs binutils, which is jeprof's complaint); symbol tables give the
function names, which is what these views need.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import html
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field

# Frames of the allocator itself and of the C library's start-up: hidden in views.
_HIDE = re.compile(r"^(strata_|malloc$|calloc$|realloc$|free$|_Zn[wa]m|__libc_start|_start$|ialloc|"
                   r"malloc_slow|prof_|tcache_|alloc_hard)")


@dataclass
class Stack:
    frames: tuple            # function names, innermost first
    inuse_objs: float = 0.0
    inuse_bytes: float = 0.0
    alloc_objs: float = 0.0
    alloc_bytes: float = 0.0


@dataclass
class Profile:
    path: str
    period: int
    stacks: list = field(default_factory=list)

    def total(self, key: str) -> float:
        return sum(getattr(s, key) for s in self.stacks)


# ---------------------------------------------------------------- symbolization (pyelftools)
class _ElfSyms:
    """Function symbols of one ELF file and its PT_LOAD segments (offset -> vaddr)."""

    def __init__(self, path: str):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.names: list[str] = []
        self.segs: list[tuple[int, int, int]] = []  # (p_offset, p_filesz, p_vaddr)
        try:
            from elftools.elf.elffile import ELFFile
        except ImportError:  # pragma: no cover - reported once by the caller
            raise
        try:
            with open(path, "rb") as f:
                elf = ELFFile(f)
                for seg in elf.iter_segments():
                    if seg["p_type"] == "PT_LOAD":
                        self.segs.append((seg["p_offset"], seg["p_filesz"], seg["p_vaddr"]))
                syms = []
                for name in (".symtab", ".dynsym"):
                    sec = elf.get_section_by_name(name)
                    if sec is None:
                        continue
                    for s in sec.iter_symbols():
                        if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]:
                            syms.append((s["st_value"], s["st_size"], s.name))
                    if syms:
                        break
        except (OSError, Exception):  # unreadable or not ELF: addresses stay raw
            syms = []
        syms.sort()
        for v, sz, n in syms:
            self.starts.append(v)
            self.ends.append(v + max(sz, 1))
            self.names.append(n)

    def vaddr(self, file_off: int) -> int:
        for off, sz, va in self.segs:
            if off <= file_off < off + max(sz, 1):
                return file_off - off + va
        return file_off

    def lookup(self, vaddr: int) -> str | None:
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i >= 0 and vaddr < self.ends[i]:
            return self.names[i]
        return None


class Symbolizer:
    def __init__(self, maps: list[tuple[int, int, int, str]]):
        self.maps = sorted(maps)
        self._starts = [m[0] for m in self.maps]
        self._elf: dict[str, _ElfSyms] = {}
        self._cache: dict[int, str] = {}

    def name(self, ret: int) -> str:
        if ret in self._cache:
            return self._cache[ret]
        a = ret - 1  # a return address: the call is the byte before
        i = bisect.bisect_right(self._starts, a) - 1
        out = f"0x{ret:x}"
        if i >= 0:
            lo, hi, off, path = self.maps[i]
            if a < hi and path.startswith("/"):
                e = self._elf.get(path)
                if e is None:
                    e = self._elf[path] = _ElfSyms(path)
                n = e.lookup(e.vaddr(a - lo + off))
                out = n if n else f"{os.path.basename(path)}+0x{a - lo + off:x}"
        self._cache[ret] = out
        return out


# ---------------------------------------------------------------- readers
_V2_STACK = re.compile(r"^@((?:\s+0x[0-9a-fA-F]+)*)\s*$")
# A per-thread line may end with the thread's name (thread.prof.name): "  t3: 1: 64 [0: 0] worker".
_V2_COUNTS = re.compile(r"^\s*t(\*|\d+):\s+(\d+):\s+(\d+)\s+\[\s*(\d+):\s+(\d+)\](?:\s+(.*?))?\s*$")
_MAPS = re.compile(r"^([0-9a-f]+)-([0-9a-f]+)\s+(\S{4})\s+([0-9a-f]+)\s+\S+\s+\d+\s*(.*)$")


def _unbias(n: int, s: int, period: int) -> tuple[float, float]:
    """jeprof's heap_v2 adjustment: P(sampled) = 1 - exp(-avgsize / period)."""
    if n == 0 or period <= 1:
        return float(n), float(s)
    scale = 1.0 / (1.0 - math.exp(-(s / n) / period))
    return n * scale, s * scale


def parse_heap_v2(text: str) -> tuple[int, list, list]:
    """Parses heap_v2 by its grammar; returns (period, [(addrs, co, cb, ao, ab)], maps).
    Raises ValueError on anything that does not fit."""
    lines = text.splitlines()
    if not lines or not re.match(r"^heap_v2/\d+$", lines[0]):
        raise ValueError("not a heap_v2 profile (first line must be heap_v2/<period>)")
    period = int(lines[0].split("/")[1])
    stacks, maps, cur = [], [], None
    i = 1
    while i < len(lines):
        ln = lines[i]
        i += 1
        if ln.startswith("MAPPED_LIBRARIES:"):
            for m in lines[i:]:
                mm = _MAPS.match(m)
                if mm and "x" in mm.group(3):
                    maps.append((int(mm.group(1), 16), int(mm.group(2), 16), int(mm.group(4), 16),
                                 mm.group(5).strip()))
            break
        if ln.strip() == "":
            continue
        m = _V2_STACK.match(ln)
        if m:
            cur = tuple(int(a, 16) for a in m.group(1).split())
            continue
        m = _V2_COUNTS.match(ln)
        if not m:
            raise ValueError(f"line {i}: not a heap_v2 line: {ln!r}")
        if cur is None or m.group(1) != "*":
            continue  # the header's totals, or a per-thread line
        stacks.append((cur, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))))
    return period, stacks, maps


def read_profile(path: str) -> Profile:
    with open(path, "rb") as f:
        head = f.read(2)
    if head == b"\x1f\x8b":
        return _read_pprof(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        period, raw, maps = parse_heap_v2(f.read())
    sym = Symbolizer(maps)
    prof = Profile(path, period)
    merged: dict[tuple, Stack] = {}
    for addrs, co, cb, ao, ab in raw:
        names = tuple(sym.name(a) for a in addrs)
        st = merged.setdefault(names, Stack(names))
        io, ib = _unbias(co, cb, period)
        ao2, ab2 = _unbias(ao, ab, period)
        st.inuse_objs += io
        st.inuse_bytes += ib
        st.alloc_objs += ao2
        st.alloc_bytes += ab2
    prof.stacks = list(merged.values())
    return prof


def _read_pprof(path: str) -> Profile:
    from .pprof_proto import Profile as PB
    pb = PB()
    with gzip.open(path, "rb") as f:
        pb.ParseFromString(f.read())
    strs = list(pb.string_table)
    funcs = {fn.id: strs[fn.name] for fn in pb.function}
    locs = {}
    for loc in pb.location:
        locs[loc.id] = funcs.get(loc.line[0].function_id) if loc.line else f"0x{loc.address:x}"
    idx = {strs[st.type]: k for k, st in enumerate(pb.sample_type)}
    prof = Profile(path, pb.period)
    merged: dict[tuple, Stack] = {}
    for s in pb.sample:
        names = tuple(locs.get(i, "?") for i in s.location_id)
        st = merged.setdefault(names, Stack(names))
        v = list(s.value)
        st.alloc_objs += v[idx.get("alloc_objects", 0)]
        st.alloc_bytes += v[idx.get("alloc_space", 1)]
        st.inuse_objs += v[idx.get("inuse_objects", 2)]
        st.inuse_bytes += v[idx.get("inuse_space", 3)]
    prof.stacks = list(merged.values())
    return prof


def visible(frames: tuple) -> tuple:
    out = tuple(f for f in frames if not _HIDE.match(f))
    return out or frames[:1]


# ---------------------------------------------------------------- views
def _fmt_bytes(b: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"


def top(prof: Profile, key: str, n: int, out=None) -> list:
    out = out or sys.stdout
    by_fn: dict[str, float] = defaultdict(float)
    for st in prof.stacks:
        v = visible(st.frames)
        by_fn[v[0] if v else "?"] += getattr(st, key)
    total = prof.total(key)
    rows = sorted(by_fn.items(), key=lambda kv: -kv[1])[:n]
    print(f"{prof.path}: {key.replace('_', ' ')} {_fmt_bytes(total) if 'bytes' in key else f'{total:.0f}'} "
          f"(sample period {prof.period} bytes)", file=out)
    print(f"{'estimate':>12} {'share':>6}  function (innermost frame outside the allocator)", file=out)
    for fn, v in rows:
        share = 100.0 * v / total if total else 0.0
        est = _fmt_bytes(v) if "bytes" in key else f"{v:.0f}"
        print(f"{est:>12} {share:5.1f}%  {fn}", file=out)
    return rows


def diff(old: Profile, new: Profile, n: int, out=None) -> list:
    """Growth of in-use bytes per (visible) stack between two dumps, largest first."""
    out = out or sys.stdout
    def agg(p):
        d: dict[tuple, float] = defaultdict(float)
        for st in p.stacks:
            d[visible(st.frames)] += st.inuse_bytes
        return d
    a, b = agg(old), agg(new)
    rows = sorted(((k, b.get(k, 0.0) - a.get(k, 0.0)) for k in set(a) | set(b)), key=lambda kv: -kv[1])[:n]
    print(f"in-use growth from {old.path} to {new.path}:", file=out)
    for k, v in rows:
        print(f"{_fmt_bytes(v):>12}  {' <- '.join(k[:6])}", file=out)
    return rows


def flame_svg(prof: Profile, key: str, title: str) -> str:
    """An icicle-free flame graph (root at the bottom), drawn here: one <g> per frame with a
    <title> (hover text); clicking a frame zooms to it, clicking the root resets."""
    root: dict = {"name": "all", "v": 0.0, "kids": {}}
    for st in prof.stacks:
        v = getattr(st, key)
        if v <= 0:
            continue
        node = root
        node["v"] += v
        for fn in reversed(visible(st.frames)):
            node = node["kids"].setdefault(fn, {"name": fn, "v": 0.0, "kids": {}})
            node["v"] += v
    width, row = 1200.0, 17
    rects = []

    def depth(n):
        return 1 + max((depth(k) for k in n["kids"].values()), default=0)

    nrows = depth(root)
    height = nrows * row + 40
    total = root["v"] or 1.0

    def walk(n, x, d):
        w = width * n["v"] / total
        rects.append((x, d, w, n))
        cx = x
        for k in sorted(n["kids"].values(), key=lambda k: k["name"]):
            walk(k, cx, d + 1)
            cx += width * k["v"] / total

    walk(root, 0.0, 0)
    unit = "bytes" if "bytes" in key else "objects"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
           f'viewBox="0 0 {width:.0f} {height}" font-family="monospace" font-size="11">',
           f'<text x="4" y="14" font-size="13">{html.escape(title)}</text>',
           '<text id="hint" x="4" y="30" fill="#555">click a frame to zoom, the bottom bar to reset</text>']
    for i, (x, d, w, n) in enumerate(rects):
        y = height - (d + 1) * row
        pct = 100.0 * n["v"] / total
        hue = 20 + (hash(n["name"]) % 40)
        label = html.escape(n["name"])
        tip = f"{label} ({n['v']:.0f} {unit}, {pct:.2f}%)"
        out.append(f'<g class="f" data-x="{x:.3f}" data-w="{w:.3f}" data-d="{d}">'
                   f'<title>{tip}</title><rect x="{x:.3f}" y="{y}" width="{max(w - 0.5, 0.1):.3f}" '
                   f'height="{row - 1}" fill="hsl({hue},90%,60%)" rx="2"/>'
                   f'<text x="{x + 3:.3f}" y="{y + row - 5}">{label if w > 40 else ""}</text></g>')
    out.append("""<script><![CDATA[
var W = %d;
function zoom(g) {
  var x0 = parseFloat(g.getAttribute('data-x')), w0 = parseFloat(g.getAttribute('data-w'));
  var d0 = parseInt(g.getAttribute('data-d')), s = W / w0;
  document.querySelectorAll('g.f').forEach(function (e) {
    var x = parseFloat(e.getAttribute('data-x')), w = parseFloat(e.getAttribute('data-w'));
    var d = parseInt(e.getAttribute('data-d'));
    var r = e.querySelector('rect'), t = e.querySelector('text');
    var inside = d < d0 ? (x <= x0 && x + w >= x0 + w0 - 1e-6) : (x >= x0 - 1e-6 && x + w <= x0 + w0 + 1e-6);
    e.style.display = inside ? '' : 'none';
    var nx = d < d0 ? 0 : (x - x0) * s, nw = d < d0 ? W : w * s;
    r.setAttribute('x', nx); r.setAttribute('width', Math.max(nw - 0.5, 0.1));
    t.setAttribute('x', nx + 3);
    var name = e.querySelector('title').textContent.replace(/ \\(.*$/, '');
    t.textContent = nw > 40 ? name.substring(0, Math.floor(nw / 7)) : '';
  });
}
document.querySelectorAll('g.f').forEach(function (g) {
  g.style.cursor = 'pointer';
  g.addEventListener('click', function () { zoom(g); });
});
]]></script></svg>""" % int(width))
    return "\n".join(out)


# ---------------------------------------------------------------- running programs
def find_lib(explicit: str | None) -> str:
    cands = [explicit, os.environ.get("STRATA_LIB")]
    here = os.path.dirname(os.path.abspath(__file__))
    cands += [os.path.join(here, "..", "..", "build", "libstrata.so"), "/usr/local/lib/libstrata.so",
              "/usr/lib/libstrata.so"]
    for c in cands:
        if c and os.path.exists(c):
            return os.path.abspath(c)
    raise SystemExit("strata prof: libstrata.so not found (use --lib or STRATA_LIB)")


def _lg(nbytes: int, what: str) -> int:
    if nbytes < 1 or nbytes & (nbytes - 1):
        raise SystemExit(f"strata prof: {what} must be a power of two number of bytes, got {nbytes}")
    return nbytes.bit_length() - 1


def run_profiled(cmd: list[str], out_dir: str, rate: int, interval: int | None, lib: str,
                 leak: bool = False, fmt: str = "jemalloc") -> tuple[int, list[str]]:
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(out_dir, "prof")
    conf = [f"prof:true", f"lg_prof_sample:{_lg(rate, '--rate')}", f"prof_prefix:{prefix}",
            "prof_final:true", f"prof_format:{fmt}"]
    if interval:
        conf.append(f"lg_prof_interval:{_lg(interval, '--interval')}")
    if leak:
        conf.append("prof_leak:true")
    env = dict(os.environ)
    env["LD_PRELOAD"] = (lib + " " + env.get("LD_PRELOAD", "")).strip()
    env["MALLOC_CONF"] = ",".join(conf + ([env["MALLOC_CONF"]] if env.get("MALLOC_CONF") else []))
    rc = subprocess.call(cmd, env=env)
    dumps = sorted((os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.startswith("prof.")),
                   key=os.path.getmtime)
    return rc, dumps


# ---------------------------------------------------------------- CLI
def _cmd(args) -> list[str]:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise SystemExit("strata prof: no command given (strata prof record -- CMD ...)")
    return cmd


def cmd_record(args) -> int:
    rc, dumps = run_profiled(_cmd(args), args.out, args.rate, args.interval, find_lib(args.lib),
                             fmt=args.format)
    for d in dumps:
        print(d)
    if not dumps:
        print("strata prof: the program wrote no dump", file=sys.stderr)
    return rc


def cmd_top(args) -> int:
    top(read_profile(args.file), "alloc_bytes" if args.alloc else "inuse_bytes", args.n)
    return 0


def cmd_flame(args) -> int:
    prof = read_profile(args.file)
    key = "alloc_bytes" if args.alloc else "inuse_bytes"
    with open(args.o, "w") as f:
        f.write(flame_svg(prof, key, f"{os.path.basename(args.file)}: {key.replace('_', ' ')}"))
    print(args.o)
    return 0


def cmd_diff(args) -> int:
    diff(read_profile(args.old), read_profile(args.new), args.n)
    return 0


def cmd_leaks(args) -> int:
    out = args.out or tempfile.mkdtemp(prefix="strata-leaks-")
    rc, dumps = run_profiled(_cmd(args), out, args.rate, None, find_lib(args.lib), leak=True)
    final = [d for d in dumps if d.endswith(".f.heap")]
    if not final:
        print("strata prof leaks: no final dump (did the program exit normally?)", file=sys.stderr)
        return rc or 1
    print(f"never freed (estimated from samples every ~{args.rate} bytes):")
    top(read_profile(final[-1]), "inuse_bytes", args.n)
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return rc


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="prof_command", metavar="ACTION")
    r = sub.add_parser("record", help="run CMD with profiling on and collect its dumps")
    r.add_argument("--rate", type=int, default=1 << 19, help="mean bytes between samples (power of two)")
    r.add_argument("--interval", type=int, help="also dump every INTERVAL bytes allocated (power of two)")
    r.add_argument("--out", default="strata-prof", help="directory for the dumps (default strata-prof)")
    r.add_argument("--format", choices=("jemalloc", "pprof", "both"), default="jemalloc")
    r.add_argument("--lib", help="libstrata.so to preload")
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_record)
    t = sub.add_parser("top", help="top functions by in-use (or allocated) bytes")
    t.add_argument("file")
    t.add_argument("--alloc", action="store_true", help="allocated bytes instead of in-use")
    t.add_argument("-n", type=int, default=20)
    t.set_defaults(func=cmd_top)
    f = sub.add_parser("flame", help="interactive flame graph (SVG)")
    f.add_argument("file")
    f.add_argument("-o", required=True)
    f.add_argument("--alloc", action="store_true")
    f.set_defaults(func=cmd_flame)
    d = sub.add_parser("diff", help="what grew between two dumps")
    d.add_argument("old")
    d.add_argument("new")
    d.add_argument("-n", type=int, default=20)
    d.set_defaults(func=cmd_diff)
    lk = sub.add_parser("leaks", help="run CMD and report what it never freed")
    lk.add_argument("--rate", type=int, default=1 << 14)
    lk.add_argument("--out", help="keep the dumps here")
    lk.add_argument("--lib")
    lk.add_argument("-n", type=int, default=20)
    lk.add_argument("cmd", nargs=argparse.REMAINDER)
    lk.set_defaults(func=cmd_leaks)
    p.set_defaults(func=lambda a: (p.print_help(sys.stderr), 2)[1])

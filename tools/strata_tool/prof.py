"""`strata prof`: record, read, compare and draw strata's heap profiles.

  strata prof record [--rate BYTES] [--interval BYTES] [--accum] [--out DIR] -- CMD...
  strata prof top FILE [--alloc] [-n N] [--json]
  strata prof flame FILE -o out.svg [--alloc]
  strata prof diff OLD NEW [-n N] [--json]
  strata prof leaks [--rate BYTES] -- CMD...

Sizes are those of the sampled blocks' size classes (the usable size, as jemalloc's
profiles count them), not the bytes the program asked for. Allocated totals (--alloc)
exist only in profiles written with prof_accum:true (`record --accum`).

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
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field

from . import launch
from .errors import Failure, need_action, positive_int, power_of_two

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
    # Frames left as addresses, and the files they fall in that have no symbol table.
    unresolved: int = 0
    frames: int = 0
    stripped: list = field(default_factory=list)

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
        self.has_symtab = False
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
                        self.has_symtab = name == ".symtab"
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
        self.unresolved = 0
        self.stripped: set[str] = set()

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
                if not n and not e.has_symtab:
                    self.stripped.add(path)
        if _unresolved(out):
            self.unresolved += 1
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


PROFILE_KINDS = "a heap profile (jemalloc heap_v2 text or gzipped pprof profile.proto)"


def read_profile(path: str) -> Profile:
    """Either format, by its first bytes. Raises Failure naming the file when it is
    neither (OSError for an unreadable one)."""
    with open(path, "rb") as f:
        head = f.read(2)
    if head == b"\x1f\x8b":
        return _read_pprof(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        try:
            period, raw, maps = parse_heap_v2(f.read())
        except ValueError as e:
            raise Failure(f"{path}: not {PROFILE_KINDS}: {e}") from None
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
    prof.unresolved = sym.unresolved
    prof.frames = len(sym._cache)
    prof.stripped = sorted(sym.stripped)
    return prof


def _read_pprof(path: str) -> Profile:
    try:
        from google.protobuf.message import DecodeError
        from .pprof_proto import Profile as PB
    except ImportError:
        raise Failure(f"{path}: reading pprof profiles needs the protobuf package "
                      "(python3 -m pip install protobuf, or Debian's python3-protobuf)") from None
    pb = PB()
    try:
        with gzip.open(path, "rb") as f:
            pb.ParseFromString(f.read())
    except (OSError, EOFError, DecodeError) as e:
        raise Failure(f"{path}: gzip data but not a pprof profile ({e})") from None
    if not pb.sample_type:
        raise Failure(f"{path}: not {PROFILE_KINDS}: no sample types")
    strs = list(pb.string_table)
    funcs = {fn.id: strs[fn.name] for fn in pb.function}
    locs = {}
    maps = {m.id: m for m in pb.mapping}
    unresolved, stripped = 0, set()
    for loc in pb.location:
        name = funcs.get(loc.line[0].function_id) if loc.line else None
        if not name:
            unresolved += 1
            m = maps.get(loc.mapping_id)
            mpath = strs[m.filename] if m is not None and m.filename < len(strs) else ""
            if mpath and m.memory_start <= loc.address < m.memory_limit:
                # As the heap_v2 reader names it: file+offset, the same in both views.
                stripped.add(mpath)
                name = (f"{os.path.basename(mpath)}"
                        f"+0x{loc.address - m.memory_start + m.file_offset:x}")
            else:
                name = f"0x{loc.address:x}"
        locs[loc.id] = name
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
    prof.unresolved, prof.frames, prof.stripped = unresolved, len(locs), sorted(stripped)
    return prof


def require_accum(prof: Profile, key: str) -> None:
    """Allocated totals are counted only with prof_accum:true; without it every stack's
    are zero, and a view of them would be an empty one that looks like a result."""
    if key.startswith("alloc") and prof.stacks and prof.total("alloc_objs") == 0:
        raise Failure(f"{prof.path}: no allocated totals in this profile: it was written with "
                      "prof_accum off; record with `strata prof record --accum` (MALLOC_CONF "
                      "prof_accum:true), or drop --alloc for in-use bytes")


def symbol_hint(prof: Profile) -> str | None:
    """One line when a good share of the frames stayed addresses."""
    if not prof.frames or prof.unresolved * 5 < prof.frames:
        return None
    where = (": no symbol table in " + ", ".join(prof.stripped[:3])) if prof.stripped else ""
    return (f"note: {prof.unresolved} of {prof.frames} frames did not resolve to a function"
            f"{where} (stripped?): frames show as file+offset; keep symbols (-g, no "
            "strip, or install the debug package) to see function names")


def _unresolved(name: str) -> bool:
    return name.startswith("0x") or "+0x" in name


def visible(frames: tuple) -> tuple:
    # An unresolved frame ("prog+0x125d") is never hidden: its file name may look like
    # an allocator function's (a program called prof_leak).
    out = tuple(f for f in frames if _unresolved(f) or not _HIDE.match(f))
    return out or frames[:1]


# ---------------------------------------------------------------- views
def _fmt_bytes(b: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"


def top_rows(prof: Profile, key: str, n: int) -> list:
    by_fn: dict[str, float] = defaultdict(float)
    for st in prof.stacks:
        v = visible(st.frames)
        by_fn[v[0] if v else "?"] += getattr(st, key)
    return sorted(by_fn.items(), key=lambda kv: -kv[1])[:n]


def top_json(prof: Profile, key: str, n: int) -> dict:
    total = prof.total(key)
    return {"file": prof.path, "value": key, "total": total, "period": prof.period,
            "rows": [{"function": fn, "value": v, "share": v / total if total else 0.0}
                     for fn, v in top_rows(prof, key, n)]}


def top(prof: Profile, key: str, n: int, out=None, label: str | None = None) -> list:
    out = out or sys.stdout
    total = prof.total(key)
    rows = top_rows(prof, key, n)
    print(f"{label or prof.path}: {key.replace('_', ' ')} {_fmt_bytes(total) if 'bytes' in key else f'{total:.0f}'} "
          f"(sample period {prof.period} bytes)", file=out)
    print(f"{'estimate':>12} {'share':>6}  function (innermost frame outside the allocator)", file=out)
    for fn, v in rows:
        share = 100.0 * v / total if total else 0.0
        est = _fmt_bytes(v) if "bytes" in key else f"{v:.0f}"
        print(f"{est:>12} {share:5.1f}%  {fn}", file=out)
    return rows


def diff_rows(old: Profile, new: Profile, n: int) -> list:
    def agg(p):
        d: dict[tuple, float] = defaultdict(float)
        for st in p.stacks:
            d[visible(st.frames)] += st.inuse_bytes
        return d
    a, b = agg(old), agg(new)
    return sorted(((k, b.get(k, 0.0) - a.get(k, 0.0)) for k in set(a) | set(b)),
                  key=lambda kv: -kv[1])[:n]


def diff(old: Profile, new: Profile, n: int, out=None) -> list:
    """Growth of in-use bytes per (visible) stack between two dumps, largest first."""
    out = out or sys.stdout
    rows = diff_rows(old, new, n)
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
def run_profiled(cmd: list[str], out_dir: str, rate: int, interval: int | None, lib: str,
                 leak: bool = False, fmt: str = "jemalloc",
                 accum: bool = False) -> tuple[int, list[str]]:
    """Runs cmd with profiling on; returns its status and its dumps, oldest first.
    A pprof-only dump is renamed from the library's `.heap` to `.pb.gz`, what it is."""
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(out_dir, "prof")
    conf = ["prof:true", f"lg_prof_sample:{rate.bit_length() - 1}", f"prof_prefix:{prefix}",
            "prof_final:true", f"prof_format:{fmt}"]
    if interval:
        conf.append(f"lg_prof_interval:{interval.bit_length() - 1}")
    if leak:
        conf.append("prof_leak:true")
    if accum:
        conf.append("prof_accum:true")
    env = dict(os.environ)
    env["LD_PRELOAD"] = (lib + " " + env.get("LD_PRELOAD", "")).strip()
    env["MALLOC_CONF"] = ",".join(conf + ([env["MALLOC_CONF"]] if env.get("MALLOC_CONF") else []))
    rc = launch.call(cmd, env)
    dumps = sorted((os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.startswith("prof.")),
                   key=os.path.getmtime)
    if fmt == "pprof":
        renamed = []
        for d in dumps:
            if d.endswith(".heap"):
                pb = d[:-len(".heap")] + ".pb.gz"
                os.replace(d, pb)
                d = pb
            renamed.append(d)
        dumps = renamed
    return rc, dumps


# ---------------------------------------------------------------- CLI
def _hint(prof: Profile) -> None:
    h = symbol_hint(prof)
    if h:
        print(h, file=sys.stderr)


def cmd_record(args) -> int:
    cmd = launch.command_of(args.cmd, "strata prof record [options] -- CMD ...")
    lib = str(launch.require_library(args.lib))
    rc, dumps = run_profiled(cmd, args.out, args.rate, args.interval, lib, fmt=args.format,
                             accum=args.accum)
    for d in dumps:
        print(d)
    if not dumps:
        print("strata prof record: the program wrote no dump (did it exit normally?)",
              file=sys.stderr)
        return rc or 1
    return rc


def cmd_top(args) -> int:
    key = "alloc_bytes" if args.alloc else "inuse_bytes"
    prof = read_profile(args.file)
    require_accum(prof, key)
    if args.json:
        print(json.dumps(top_json(prof, key, args.n), indent=1))
    else:
        top(prof, key, args.n)
    _hint(prof)
    return 0


def cmd_flame(args) -> int:
    prof = read_profile(args.file)
    key = "alloc_bytes" if args.alloc else "inuse_bytes"
    require_accum(prof, key)
    if prof.total(key) <= 0:
        raise Failure(f"{args.file}: no {key.replace('_', ' ')} in this profile: nothing to draw")
    with open(args.o, "w") as f:
        f.write(flame_svg(prof, key, f"{os.path.basename(args.file)}: {key.replace('_', ' ')}"))
    print(args.o)
    _hint(prof)
    return 0


def cmd_diff(args) -> int:
    old, new = read_profile(args.old), read_profile(args.new)
    if args.json:
        print(json.dumps({"old": old.path, "new": new.path, "value": "inuse_bytes",
                          "rows": [{"stack": list(k), "growth": v}
                                   for k, v in diff_rows(old, new, args.n)]}, indent=1))
    else:
        diff(old, new, args.n)
    _hint(new)
    return 0


def cmd_leaks(args) -> int:
    cmd = launch.command_of(args.cmd, "strata prof leaks [options] -- CMD ...")
    lib = str(launch.require_library(args.lib))
    out = args.out or tempfile.mkdtemp(prefix="strata-leaks-")
    try:
        rc, dumps = run_profiled(cmd, out, args.rate, None, lib, leak=True)
        final = [d for d in dumps if d.endswith(".f.heap")]
        if not final:
            raise Failure("no final dump (did the program exit normally?)", rc or 1)
        prof = read_profile(final[-1])
        if args.json:
            doc = top_json(prof, "inuse_bytes", args.n)
            if not args.out:
                doc["file"] = None      # removed below
            print(json.dumps(doc, indent=1))
        else:
            print(f"never freed (estimated from samples every ~{args.rate} bytes; sizes are "
                  "size-class bytes):")
            top(prof, "inuse_bytes", args.n,
                label=final[-1] if args.out else "final dump (not kept; --out DIR keeps it)")
        _hint(prof)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    return rc


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="prof_command", metavar="ACTION", help="the action")
    r = sub.add_parser("record", help="run CMD with profiling on and collect its dumps",
                       description="Run CMD with strata's heap profiler on; print the dumps it "
                                   "wrote (a final one at exit). Exits with CMD's status.")
    r.add_argument("--rate", type=power_of_two, default=1 << 19, metavar="BYTES",
                   help="mean bytes between samples, a power of two (default 524288)")
    r.add_argument("--interval", type=power_of_two, metavar="BYTES",
                   help="also dump every BYTES allocated, a power of two")
    r.add_argument("--accum", action="store_true",
                   help="also count allocated totals (prof_accum:true), for top/flame --alloc")
    r.add_argument("--out", default="strata-prof", metavar="DIR",
                   help="directory for the dumps (default strata-prof)")
    r.add_argument("--format", choices=("jemalloc", "pprof", "both"), default="jemalloc",
                   help="heap_v2 text (.heap), gzipped pprof profile.proto (.pb.gz), or both "
                        "(default jemalloc)")
    r.add_argument("--lib", help="libstrata.so to preload (default: found automatically)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    r.set_defaults(func=cmd_record)
    t = sub.add_parser("top", help="top functions by in-use (or allocated) bytes",
                       description="Functions (innermost frame outside the allocator) by "
                                   "estimated in-use bytes; sizes are size-class bytes.")
    t.add_argument("file", help="a dump: heap_v2 (.heap) or pprof (.pb.gz)")
    t.add_argument("--alloc", action="store_true",
                   help="bytes allocated since start instead of in use (needs prof_accum:true)")
    t.add_argument("-n", type=positive_int, default=20, help="rows to show (default 20)")
    t.add_argument("--json", action="store_true", help="print the rows as JSON")
    t.set_defaults(func=cmd_top)
    f = sub.add_parser("flame", help="interactive flame graph (SVG)",
                       description="An interactive flame graph of a dump (click to zoom).")
    f.add_argument("file", help="a dump: heap_v2 (.heap) or pprof (.pb.gz)")
    f.add_argument("-o", required=True, metavar="SVG", help="the SVG file to write")
    f.add_argument("--alloc", action="store_true",
                   help="bytes allocated since start instead of in use (needs prof_accum:true)")
    f.set_defaults(func=cmd_flame)
    d = sub.add_parser("diff", help="what grew between two dumps",
                       description="Growth of in-use bytes per stack from OLD to NEW.")
    d.add_argument("old", help="the earlier dump")
    d.add_argument("new", help="the later dump")
    d.add_argument("-n", type=positive_int, default=20, help="rows to show (default 20)")
    d.add_argument("--json", action="store_true", help="print the rows as JSON")
    d.set_defaults(func=cmd_diff)
    lk = sub.add_parser("leaks", help="run CMD and report what it never freed",
                        description="Run CMD with the profiler and prof_leak on and show what "
                                    "was still allocated at exit, by function (size-class "
                                    "bytes, estimated from samples). Exits with CMD's status.")
    lk.add_argument("--rate", type=power_of_two, default=1 << 14, metavar="BYTES",
                    help="mean bytes between samples, a power of two (default 16384)")
    lk.add_argument("--out", metavar="DIR", help="keep the dumps in DIR (default: removed)")
    lk.add_argument("--lib", help="libstrata.so to preload (default: found automatically)")
    lk.add_argument("-n", type=positive_int, default=20, help="rows to show (default 20)")
    lk.add_argument("--json", action="store_true", help="print the rows as JSON")
    lk.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    lk.set_defaults(func=cmd_leaks)
    p.set_defaults(func=need_action(p, "record, top, flame, diff or leaks"))

"""`strata stats`: reads what strata writes.
  show FILE      a summary of a malloc_stats_print JSON dump ("J") or a .prom file
                 (stats_file, or the "P"/"T" outputs)
  diff A B       the same summaries side by side, with the change
  watch -- CMD   runs CMD under strata with a stats file, shows a live table while it
                 runs, and writes a PNG of allocated/active/resident/dirty over time
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import launch
from .errors import Failure, UsageError, need_action, positive_int

# (summary key, .prom family, path in jemalloc's JSON)
FIELDS = (
    ("allocated", "strata_allocated_bytes", ("stats", "allocated")),
    ("active", "strata_active_bytes", ("stats", "active")),
    ("resident", "strata_resident_bytes", ("stats", "resident")),
    ("mapped", "strata_mapped_bytes", ("stats", "mapped")),
    ("retained", "strata_retained_bytes", ("stats", "retained")),
    ("metadata", "strata_metadata_bytes", ("stats", "metadata")),
    ("dirty", "strata_arena_pdirty_bytes", None),
    ("tcache", "strata_arena_tcache_bytes", None),
    ("purged", "strata_arena_dirty_purged_bytes_total", None),
)
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def parse_prom(text: str) -> dict[str, float]:
    """Unlabelled samples, and labelled ones summed per family (arena="..." series)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            try:
                v = float(m.group(3))
            except ValueError:
                continue        # not a sample line (a log line that looks like one)
            out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


NOT_STATS = ("no strata statistics in it (expected a malloc_stats_print JSON dump, "
             "stats_print_opts J, or a Prometheus text file written by stats_file)")


def summarize(path: str | Path) -> dict[str, float]:
    """The summary figures of one statistics file. Raises Failure, naming the file,
    when it is unreadable or holds no strata statistics."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise Failure(f"{path}: not a text file: {NOT_STATS}") from None
    s: dict[str, float] = {}
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise Failure(f"{path}: invalid JSON (line {e.lineno}: {e.msg})") from None
        j = doc.get("jemalloc") if isinstance(doc, dict) else None
        if not isinstance(j, dict) or not isinstance(j.get("stats"), dict):
            raise Failure(f'{path}: JSON without a "jemalloc"."stats" object: {NOT_STATS}')
        try:
            for key, _, jp in FIELDS:
                if jp and jp[1] in j[jp[0]]:
                    s[key] = float(j[jp[0]][jp[1]])
            page = float((j.get("arenas") or {}).get("page", 4096))
            arenas = j.get("stats.arenas") or {}
            rec = arenas.get("merged") or (next(iter(arenas.values())) if arenas else {})
            s["dirty"] = float(rec.get("pdirty", 0)) * page
            s["tcache"] = float(rec.get("tcache_bytes", 0))
            s["purged"] = float(rec.get("dirty_purged", 0)) * page
        except (TypeError, ValueError, AttributeError) as e:
            raise Failure(f"{path}: malformed statistics dump ({e})") from None
        if "allocated" not in s:
            raise Failure(f'{path}: no "allocated" figure: {NOT_STATS}')
    else:
        p = parse_prom(text)
        for key, fam, _ in FIELDS:
            if fam in p:
                s[key] = p[fam]
        if not s:
            what = "empty" if not text.strip() else "no strata_* samples"
            raise Failure(f"{path}: {what}: {NOT_STATS}")
    if s.get("allocated"):
        s["active/allocated"] = s.get("active", 0) / s["allocated"]
        s["resident/allocated"] = s.get("resident", 0) / s["allocated"]
    return s


def fmt(key: str, v: float) -> str:
    if "/" in key:
        return f"{v:.3f}"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= div:
            return f"{v / div:.1f} {unit}"
    return f"{v:.0f} B"


def show(args) -> int:
    s = summarize(args.file)
    if args.json:
        print(json.dumps({"file": str(args.file), "summary": s}, indent=1))
        return 0
    for k, v in s.items():
        print(f"{k:>20}  {fmt(k, v)}")
    return 0


def diff(args) -> int:
    a, b = summarize(args.a), summarize(args.b)
    if args.json:
        keys = list(dict.fromkeys(list(a) + list(b)))
        print(json.dumps({"a": str(args.a), "b": str(args.b),
                          "rows": {k: {"a": a.get(k), "b": b.get(k),
                                       "change": b.get(k, 0.0) - a.get(k, 0.0)}
                                   for k in keys}}, indent=1))
        return 0
    print(f"{'':>20}  {'A':>12}  {'B':>12}  {'B - A':>12}")
    for k in list(dict.fromkeys(list(a) + list(b))):
        x, y = a.get(k, 0.0), b.get(k, 0.0)
        print(f"{k:>20}  {fmt(k, x):>12}  {fmt(k, y):>12}  {fmt(k, y - x):>12}")
    return 0


def watch(args) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UsageError("no command (strata stats watch [options] -- CMD ...)")
    err = launch.validate_conf(args.conf)
    if err:
        raise UsageError(err)
    lib = launch.require_library(args.lib)
    tmp = Path(tempfile.mkdtemp(prefix="strata-watch-"))
    conf = f"stats_interval_ms:{args.interval_ms}" + (f",{args.conf}" if args.conf else "")
    env = launch.build_env(lib, conf, str(tmp / "stats-%p.prom"))
    try:
        proc = launch.start(cmd, env)
    except Failure:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    series: list[tuple[float, dict]] = []
    t0 = time.monotonic()
    cols = ("allocated", "active", "resident", "dirty")
    print(f"{'t (s)':>7}  " + "  ".join(f"{c:>12}" for c in cols), file=sys.stderr)
    last_mtime = None

    def sample():
        nonlocal last_mtime
        files = sorted(tmp.glob("stats-*.prom"), key=lambda f: f.stat().st_mtime)
        if not files:
            return
        f = files[-1]
        m = f.stat().st_mtime
        if m == last_mtime:
            return
        last_mtime = m
        try:
            s = summarize(f)
        except Failure:
            return              # caught mid-write: the next sample reads it whole
        t = time.monotonic() - t0
        series.append((t, s))
        print(f"{t:7.1f}  " + "  ".join(f"{fmt(c, s.get(c, 0)):>12}" for c in cols), file=sys.stderr)

    try:
        while proc.poll() is None:
            sample()
            time.sleep(args.interval_ms / 1000)
        sample()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.png and series:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("strata stats watch: matplotlib missing: no PNG", file=sys.stderr)
            return proc.returncode
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for c in cols:
            ax.plot([t for t, _ in series], [s.get(c, 0) / (1 << 20) for _, s in series], label=c)
        ax.set_xlabel("seconds")
        ax.set_ylabel("MiB")
        ax.set_title(" ".join(cmd)[:80])
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)
        print(f"wrote {args.png} ({len(series)} samples)", file=sys.stderr)
    return proc.returncode


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="stats_command", metavar="show|diff|watch", help="the action")
    s = sub.add_parser("show", help="summary of a JSON dump or a .prom file",
                       description="Summary of one statistics file: a malloc_stats_print "
                                   "JSON dump (stats_print_opts J) or a Prometheus text file "
                                   "(stats_file, or the P/T outputs).")
    s.add_argument("file", help="the JSON dump or .prom file")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(func=show)
    d = sub.add_parser("diff", help="two summaries side by side",
                       description="Two statistics files side by side, with B - A.")
    d.add_argument("a", help="the earlier file (JSON dump or .prom)")
    d.add_argument("b", help="the later file (JSON dump or .prom)")
    d.add_argument("--json", action="store_true", help="print the rows as JSON")
    d.set_defaults(func=diff)
    w = sub.add_parser("watch", help="run a command, show its statistics live, plot them",
                       description="Run CMD under strata with a stats file, print "
                                   "allocated/active/resident/dirty while it runs and plot "
                                   "them at the end. Exits with CMD's status.")
    w.add_argument("--interval-ms", type=positive_int, default=500,
                   help="sampling period in milliseconds (default 500)")
    w.add_argument("--png", default="strata-watch.png",
                   help="plot written at the end (default strata-watch.png; '' for none)")
    w.add_argument("--conf", help="more strata options, key:value,... (MALLOC_CONF syntax)")
    w.add_argument("--lib", help="libstrata.so to preload (default: found automatically)")
    w.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    w.set_defaults(func=watch)
    p.set_defaults(func=need_action(p, "show, diff or watch"))

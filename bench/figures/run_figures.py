#!/usr/bin/env python3
"""run_figures.py - runs the core figures (fast path, remote frees, memory kept) for every available allocator.

fig_pair and fig_prodcons run under `valgrind --tool=callgrind`; the figure is the
inclusive cost of the calls the measured functions make to malloc and free, read from
callgrind's call arcs, per object. fig_keep runs natively and reports peak RSS against
the bytes handed out. Each allocator is loaded with LD_PRELOAD into the same plain-malloc
programs. Prints a human table and writes <out>/core-figures.{json,md}. Builds nothing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

SCHEMA = "strata-core-figures/1"
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
PEERS = {
    "glibc": None,
    "jemalloc": LIBDIR / "libjemalloc.so.2",
    "tcmalloc": LIBDIR / "libtcmalloc_minimal.so.4",
    "mimalloc": LIBDIR / "libmimalloc.so.2",
}
ALLOCATORS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "strata"]
FIGURES = ["pair", "prodcons", "keep"]
PACKAGES = ["libjemalloc2", "libtcmalloc-minimal4", "libmimalloc2.0", "libc6"]
SLACK = 8 << 20  # fig_keep: the program's own pages (binary, libc, stacks) are not overhead

# Measured-phase sizes. Full: callgrind runs cost ~1-3 s each, fig_keep ~2-4 s natively.
PARAMS = {
    "full": {"pair": {"pairs": 200_000, "warmup": 100_000, "live": 1000},
             "prodcons": {"objects": 1_000_000, "warmup": 100_000, "batch": 1000},
             "keep": {"objects": 10_000_000},
             # Native runs only give a time hint: ~0.2 s and ~0.5 s per allocator.
             "native": {"pair": 20_000_000, "prodcons": 5_000_000}},
    "quick": {"pair": {"pairs": 20_000, "warmup": 10_000, "live": 1000},
              "prodcons": {"objects": 100_000, "warmup": 20_000, "batch": 1000},
              "keep": {"objects": 1_000_000},
              "native": {"pair": 1_000_000, "prodcons": 200_000}},
}
TARGETS = {
    "pair": "strata < mimalloc (Debian 12: glibc ~132, jemalloc ~72, tcmalloc ~71, mimalloc ~53)",
    "prodcons_ratio": "<= 1.5",
    "keep_ratio_usable": "<= 1.02",
}
FREE_RE = re.compile(r"free|delete|dalloc", re.I)  # callee names on the free side


class FigureError(Exception):
    pass


# ---------------------------------------------------------------- callgrind output

def parse_callgrind(path: Path) -> dict:
    """Reads a callgrind profile: self Ir per function and (caller, callee) call arcs.

    Follows the callgrind format specification: name compression "(id) name" shared by
    fn= and cfn=, a cost line after calls= is that call's inclusive cost, every other
    cost line is self cost of the current fn. Returns {"self", "arcs", "totals"}.
    """
    names: dict[str, str] = {}
    self_cost: dict[str, int] = {}
    arcs: dict[tuple[str, str], list[int]] = {}
    npos, ir_col, totals = 1, 0, None
    fn = cfn = None
    pending_calls = None

    def resolve(val: str) -> str:
        val = val.strip()
        m = re.match(r"\((\d+)\)\s*(.*)$", val)
        if not m:
            return val
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), val)

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line[0] == "#":
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                costs = parts[npos:]
                ir = int(costs[ir_col]) if len(costs) > ir_col else 0
                if pending_calls is not None:
                    arc = arcs.setdefault((fn, cfn), [0, 0])
                    arc[0] += pending_calls
                    arc[1] += ir
                    pending_calls = None
                else:
                    self_cost[fn] = self_cost.get(fn, 0) + ir
                continue
            if line.startswith("positions:"):
                npos = len(line.split()[1:])
            elif line.startswith("events:"):
                events = line.split()[1:]
                if "Ir" not in events:
                    raise FigureError(f"{path}: no Ir event")
                ir_col = events.index("Ir")
            elif line.startswith("totals:"):
                totals = int(line.split()[1 + ir_col])
            elif line.startswith("fn="):
                fn = resolve(line[3:])
            elif line.startswith("cfn="):
                cfn = resolve(line[4:])
            elif line.startswith("calls="):
                pending_calls = int(line[6:].split()[0])
    return {"self": self_cost, "arcs": arcs, "totals": totals}


def callee_costs(prof: dict, caller: str) -> dict:
    """Sums the call arcs leaving `caller` into malloc-side and free-side callees."""
    out = {"malloc_calls": 0, "malloc_ir": 0, "free_calls": 0, "free_ir": 0,
           "callees": {}, "self_ir": 0}
    found = False
    for fn, ir in prof["self"].items():
        if fn == caller or (fn or "").startswith(caller + "."):
            out["self_ir"] += ir
            found = True
    for (fn, cfn), (calls, ir) in prof["arcs"].items():
        if not (fn == caller or (fn or "").startswith(caller + ".")):
            continue
        found = True
        side = "free" if FREE_RE.search(cfn or "") else "malloc"
        out[side + "_calls"] += calls
        out[side + "_ir"] += ir
        entry = out["callees"].setdefault(cfn, [0, 0])
        entry[0] += calls
        entry[1] += ir
    if not found:
        raise FigureError(f"no callgrind data for {caller} (stripped binary?)")
    return out


# ---------------------------------------------------------------- running programs

def child_env(lib: Path | None) -> dict:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for k in ("MALLOC_CONF", "STRATA_CONF", "MIMALLOC_VERBOSE", "TCMALLOC_RELEASE_RATE"):
        env.pop(k, None)
    if lib is not None:
        env["LD_PRELOAD"] = str(lib)
        # FIG_MALLOC_CONF: strata's options for its own runs (e.g. prof:true; run_callgrind
        # then passes --smc-check=all, since prof:true patches malloc's entry at start-up).
        if os.environ.get("FIG_MALLOC_CONF") and "strata" in lib.name:
            env["MALLOC_CONF"] = os.environ["FIG_MALLOC_CONF"]
    return env


def run_json(cmd: list[str], env: dict, timeout: int) -> dict:
    """Runs a figure program and returns the JSON object it prints last on stdout."""
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise FigureError(f"timed out after {timeout}s: {' '.join(cmd)}") from None
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        how = f"exit status {p.returncode}"
        if p.returncode < 0:
            try:
                how = f"killed by {signal.Signals(-p.returncode).name}"
            except ValueError:
                pass
        raise FigureError(f"{how}: {' | '.join(tail)}".rstrip(": "))
    for line in reversed(p.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise FigureError(f"no JSON result from {cmd[0]}")


def run_callgrind(valgrind: str, binary: Path, args: list[str], lib: Path | None,
                  tmp: Path, tag: str, timeout: int, toggle: str | None = None):
    out = tmp / f"callgrind.{tag}.out"
    log = tmp / f"valgrind.{tag}.log"
    cmd = [valgrind, "--tool=callgrind", "-q", f"--callgrind-out-file={out}",
           f"--log-file={log}", "--compress-strings=no", "--compress-pos=no"]
    if toggle:
        cmd.append(f"--toggle-collect={toggle}")
    if "prof:true" in os.environ.get("FIG_MALLOC_CONF", ""):
        cmd.append("--smc-check=all")  # code patched after valgrind translated it
    cmd += ["--", str(binary)] + args
    try:
        info = run_json(cmd, child_env(lib), timeout)
    except FigureError as e:
        msg = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        raise FigureError(f"{e} {' | '.join(msg)}".strip()) from None
    if not out.exists():
        raise FigureError(f"callgrind wrote no profile ({log})")
    return info, parse_callgrind(out)


def pair_run(ctx, name: str, lib: Path | None, live: int) -> dict:
    p = ctx.params["pair"]
    args = ["--pairs", str(p["pairs"]), "--warmup", str(p["warmup"]), "--live", str(live)]
    info, prof = run_callgrind(ctx.valgrind, ctx.bins["pair"], args, lib, ctx.tmp,
                               f"pair.live{live}.{name}", ctx.timeout,
                               toggle="fig_pair_measured")
    c = callee_costs(prof, "fig_pair_measured")
    pairs = info["pairs"]
    # Each pair makes one call on each side; more arcs appear only if callgrind sees a
    # tail jump out of malloc/free as a sibling call, which the sum still counts right.
    if c["malloc_calls"] < pairs or c["free_calls"] < pairs:
        raise FigureError(f"call counts malloc={c['malloc_calls']} free={c['free_calls']}"
                          f" below {pairs} pairs (callee names: {list(c['callees'])})")
    per_pair = (c["malloc_ir"] + c["free_ir"]) / pairs
    # Cross-check: with --toggle-collect only the measured function's inclusive cost is
    # collected, so (total - loop self cost) / pairs must equal the arc sum.
    if prof["totals"] is not None:
        alt = (prof["totals"] - c["self_ir"]) / pairs
        if abs(alt - per_pair) > 0.02 * per_pair + 0.5:
            raise FigureError(f"arc sum {per_pair:.2f} and total-minus-loop {alt:.2f} disagree")
    return {"pairs": pairs, "live": info["live"], "instr_per_pair": round(per_pair, 2),
            "malloc_instr": round(c["malloc_ir"] / pairs, 2),
            "free_instr": round(c["free_ir"] / pairs, 2),
            "loop_instr": round(c["self_ir"] / pairs, 2),
            "callees": sorted(c["callees"]), "client_requests": bool(info["client_requests"])}


def fig_pair(ctx, name: str, lib: Path | None) -> dict:
    res = pair_run(ctx, name, lib, ctx.params["pair"]["live"])
    empty = pair_run(ctx, name, lib, 0)
    res["instr_per_pair_empty_heap"] = empty["instr_per_pair"]
    res["empty_heap"] = empty
    p = ctx.params["pair"]
    info = run_json([str(ctx.bins["pair"]), "--pairs", str(ctx.params["native"]["pair"]),
                     "--warmup", str(p["warmup"]), "--live", str(p["live"])],
                    child_env(lib), ctx.timeout)
    res["ns_per_pair_native"] = info["ns_per_pair"]
    return res


def fig_prodcons(ctx, name: str, lib: Path | None) -> dict:
    p = ctx.params["prodcons"]
    args = ["--objects", str(p["objects"]), "--warmup", str(p["warmup"]),
            "--batch", str(p["batch"])]
    info, prof = run_callgrind(ctx.valgrind, ctx.bins["prodcons"], args, lib, ctx.tmp,
                               f"prodcons.{name}", ctx.timeout)
    m = callee_costs(prof, "fig_prodcons_malloc")
    f = callee_costs(prof, "fig_prodcons_free")
    n = info["objects"]
    if m["malloc_calls"] + m["free_calls"] < n or f["malloc_calls"] + f["free_calls"] < n:
        raise FigureError(f"call counts malloc={m['malloc_calls']} free={f['free_calls']}"
                          f" below {n} objects (callees: {list(m['callees'])}"
                          f" {list(f['callees'])})")
    # Every arc out of fig_prodcons_malloc is malloc's cost, every arc out of
    # fig_prodcons_free is free's, whatever callgrind names the callee.
    m_ir = m["malloc_ir"] + m["free_ir"]
    f_ir = f["malloc_ir"] + f["free_ir"]
    res = {"objects": n, "batch": info["batch"], "instr_per_object": round((m_ir + f_ir) / n, 2),
           "malloc_instr": round(m_ir / n, 2), "free_instr": round(f_ir / n, 2),
           "client_requests": bool(info["client_requests"])}
    nat = ctx.params["native"]["prodcons"]
    info = run_json([str(ctx.bins["prodcons"]), "--objects", str(nat), "--warmup",
                     str(p["warmup"]), "--batch", str(p["batch"])], child_env(lib), ctx.timeout)
    res["ns_per_object_native"] = info["ns_per_object"]
    return res


def fig_keep(ctx, name: str, lib: Path | None) -> dict:
    p = ctx.params["keep"]
    info = run_json([str(ctx.bins["keep"]), "--objects", str(p["objects"])],
                    child_env(lib), ctx.timeout)
    hwm, usable, req = info["vmhwm_bytes"], info["usable_bytes"], info["requested_bytes"]
    if not hwm or not usable or not req:
        raise FigureError(f"incomplete result {info}")
    return {"objects": info["objects"], "requested_bytes": req, "usable_bytes": usable,
            "peak_rss_bytes": hwm, "start_rss_bytes": info["vmhwm_start_bytes"],
            "ratio_usable": round(hwm / (usable + SLACK), 4),
            "ratio_requested": round(hwm / req, 4),
            "usable_over_requested": round(usable / req, 4),
            "alloc_seconds": info["alloc_seconds"],
            "mallctl_version": info.get("mallctl_version")}


RUNNERS = {"pair": fig_pair, "prodcons": fig_prodcons, "keep": fig_keep}


# ---------------------------------------------------------------- machine description

def read_first(path: str, key: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine_info() -> dict:
    mem = read_first("/proc/meminfo", "MemTotal")
    thp = None
    try:
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        pass
    return {"cpu": read_first("/proc/cpuinfo", "model name") or platform.processor(),
            "cores": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
            "memory_gib": round(int(mem.split()[0]) / 2**20, 1) if mem else None,
            "kernel": platform.release(), "thp": thp}


def versions(valgrind: str | None) -> dict:
    out = {}
    try:
        p = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Version}\\n"] + PACKAGES,
                           capture_output=True, text=True, timeout=30)
        for line in p.stdout.splitlines():
            pkg, _, ver = line.partition(" ")
            out[pkg.split(":")[0]] = ver
    except (OSError, subprocess.TimeoutExpired):
        pass
    if valgrind:
        p = subprocess.run([valgrind, "--version"], capture_output=True, text=True)
        out["valgrind"] = p.stdout.strip().removeprefix("valgrind-")
    return out


# ---------------------------------------------------------------- output

def fmt(v, digits=1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def table_rows(doc: dict) -> list[tuple[str, list[str], str]]:
    cols = doc["columns"]
    res = doc["results"]

    def cell(alloc, fig, key, digits=1, scale=1.0):
        r = res.get(alloc, {}).get(fig)
        if r is None:
            return "-"
        if "error" in r:
            return "error"
        if "skipped" in r:
            return "skipped"
        v = r.get(key)
        return fmt(v / scale if isinstance(v, (int, float)) else v, digits)

    def ratio(alloc):
        a = res.get(alloc, {}).get("prodcons", {}).get("instr_per_object")
        b = res.get(alloc, {}).get("pair", {}).get("instr_per_pair")
        return fmt(a / b, 2) if a and b else "-"

    mib = float(1 << 20)
    return [
        ("pair: instructions per malloc+free", [cell(a, "pair", "instr_per_pair") for a in cols],
         "strata < mimalloc"),
        ("pair: in malloc", [cell(a, "pair", "malloc_instr") for a in cols], ""),
        ("pair: in free", [cell(a, "pair", "free_instr") for a in cols], ""),
        ("pair: empty heap (no other live objects)",
         [cell(a, "pair", "instr_per_pair_empty_heap") for a in cols], ""),
        ("prodcons: instructions per object", [cell(a, "prodcons", "instr_per_object")
                                               for a in cols], ""),
        ("prodcons: in malloc", [cell(a, "prodcons", "malloc_instr") for a in cols], ""),
        ("prodcons: in free (remote)", [cell(a, "prodcons", "free_instr") for a in cols], ""),
        ("prodcons / pair", [ratio(a) for a in cols], "<= 1.5"),
        ("native ns per pair (hint, noisy)", [cell(a, "pair", "ns_per_pair_native")
                                              for a in cols], ""),
        ("native ns per prodcons object (hint, noisy)",
         [cell(a, "prodcons", "ns_per_object_native") for a in cols], ""),
        ("keep: peak RSS / (usable + 8 MiB)", [cell(a, "keep", "ratio_usable", 3) for a in cols],
         "<= 1.02"),
        ("keep: peak RSS / requested", [cell(a, "keep", "ratio_requested", 3) for a in cols], ""),
        ("keep: usable / requested", [cell(a, "keep", "usable_over_requested", 3) for a in cols],
         ""),
        ("keep: peak RSS (MiB)", [cell(a, "keep", "peak_rss_bytes", 1, mib) for a in cols], ""),
    ]


def mimalloc_columns(doc: dict) -> list[str]:
    """The mimalloc columns the pair target is judged against: those given by path
    (name=PATH, a release the user built) when any, else Debian's."""
    cols = [c for c in doc["columns"] if c.startswith("mimalloc")]
    given = [c for c in cols if doc["allocators"].get(c, {}).get("given_by_path")]
    return given or cols


def verdicts(doc: dict) -> list[str]:
    res = doc["results"].get("strata")
    if not res:
        return []
    out = []
    sp = res.get("pair", {}).get("instr_per_pair")
    for col in mimalloc_columns(doc):
        mi = doc["results"].get(col, {}).get("pair", {}).get("instr_per_pair")
        if sp is not None and mi is not None:
            out.append(f"pair: strata {sp:.1f} vs {col} {mi:.1f} instructions: "
                       f"{'met' if sp < mi else 'NOT met'}")
    pc = res.get("prodcons", {}).get("instr_per_object")
    if pc is not None and sp:
        r = pc / sp
        out.append(f"prodcons: {r:.2f}x the pair figure: {'met' if r <= 1.5 else 'NOT met'}")
    k = res.get("keep", {}).get("ratio_usable")
    if k is not None:
        out.append(f"keep: peak RSS / (usable + 8 MiB) = {k:.3f}: "
                   f"{'met' if k <= 1.02 else 'NOT met'}")
    return out


def human_table(doc: dict) -> str:
    cols = doc["columns"]
    rows = table_rows(doc)
    w0 = max(len(r[0]) for r in rows)
    widths = [max(10, len(c)) for c in cols]
    lines = ["  ".join([f"{'figure':<{w0}}"] + [f"{c:>{w}}" for c, w in zip(cols, widths)]
                       + ["target"])]
    for label, cells, target in rows:
        lines.append("  ".join([f"{label:<{w0}}"] + [f"{v:>{w}}" for v, w in zip(cells, widths)]
                               + [target]))
    return "\n".join(lines)


def markdown(doc: dict) -> str:
    m, v, cols = doc["machine"], doc["versions"], doc["columns"]
    out = [f"# Core figures{' (quick run)' if doc['quick'] else ''}", "",
           f"- Date (UTC): {doc['date_utc']}",
           f"- Machine: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), "
           f"{m['memory_gib']} GiB, Linux {m['kernel']}, THP `{m['thp']}`",
           "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
           f"- strata: {doc['allocators'].get('strata', {}).get('lib') or 'not measured'}"
           + (f" (mallctl version {doc['strata_version']})" if doc.get("strata_version") else ""),
           f"- Generated by `bench/figures/run_figures.py"
           f"{' --quick' if doc['quick'] else ''}`; sizes: "
           f"pair {doc['params']['pair']['pairs']:,} pairs after "
           f"{doc['params']['pair']['warmup']:,} warm-up with "
           f"{doc['params']['pair']['live']:,} other live objects, prodcons "
           f"{doc['params']['prodcons']['objects']:,} objects in batches of "
           f"{doc['params']['prodcons']['batch']:,}, keep "
           f"{doc['params']['keep']['objects']:,} objects.", "",
           "| figure | " + " | ".join(cols) + " | target |",
           "|---|" + "---:|" * len(cols) + "---|"]
    for label, cells, target in table_rows(doc):
        out.append(f"| {label} | " + " | ".join(cells) + f" | {target} |")
    out.append("")
    ver = verdicts(doc)
    if ver:
        out += ["Targets for strata:", ""] + [f"- {x}" for x in ver] + [""]
    out += ["Method: instruction counts are callgrind's inclusive cost of the calls the "
            "measured loop makes to malloc and free (its call arcs), divided by the calls "
            "made in the measured phase; the warm-up runs in a separately named function "
            "with instrumentation off. fig_keep runs natively; peak RSS is VmHWM. "
            "See bench/figures/README.md.", ""]
    if doc["notes"]:
        out += ["Notes:", ""] + [f"- {n}" for n in doc["notes"]] + [""]
    return "\n".join(out)


# ---------------------------------------------------------------- checking

def check_output(json_path: Path, md_path: Path, figures: list[str]) -> list[str]:
    """Returns the problems found in a written result pair (empty when well-formed)."""
    problems = []
    try:
        doc = json.loads(json_path.read_text())
    except (OSError, ValueError) as e:
        return [f"{json_path}: {e}"]
    try:
        md = md_path.read_text()
    except OSError as e:
        return [f"{md_path}: {e}"]
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}")
    for key in ("date_utc", "machine", "versions", "columns", "results", "allocators"):
        if key not in doc:
            problems.append(f"missing key {key}")
    if problems:
        return problems
    if not doc["columns"]:
        problems.append("no allocator was measured")
    for a in doc["columns"]:
        for fig in figures:
            r = doc["results"].get(a, {}).get(fig)
            if r is None:
                problems.append(f"{a}/{fig}: missing")
            elif "error" in r:
                problems.append(f"{a}/{fig}: {r['error']}")
            elif "skipped" not in r:
                need = {"pair": "instr_per_pair", "prodcons": "instr_per_object",
                        "keep": "ratio_usable"}[fig]
                if not isinstance(r.get(need), (int, float)) or r[need] <= 0:
                    problems.append(f"{a}/{fig}: no positive {need}")
    header = next((l for l in md.splitlines() if l.startswith("| figure |")), None)
    if header is None:
        problems.append(f"{md_path}: no table")
    else:
        cells = [c.strip() for c in header.strip("|").split("|")]
        for a in doc["columns"]:
            if a not in cells:
                problems.append(f"{md_path}: no column for {a}")
    return problems


# ---------------------------------------------------------------- main

class Ctx:
    pass


def main() -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", type=Path, default=Path("/work/main/build"),
                    help="build tree holding libstrata.so (default %(default)s)")
    ap.add_argument("--bin-dir", type=Path,
                    help="where fig_pair, fig_prodcons, fig_keep are (default BUILD_DIR/bench)")
    ap.add_argument("--strata-lib", type=Path, help="default BUILD_DIR/libstrata.so")
    ap.add_argument("--allocators", default=",".join(ALLOCATORS),
                    help="comma list from " + ",".join(ALLOCATORS) + ", and NAME=PATH for a "
                         "library given by path (e.g. mimalloc3=/opt/mimalloc/lib/"
                         "libmimalloc.so); the pair target is judged against the mimalloc* "
                         "columns given by path when there are any")
    ap.add_argument("--only", help="comma list of figures from " + ",".join(FIGURES))
    ap.add_argument("--quick", action="store_true", help="small measured phases, for a test")
    ap.add_argument("--out", type=Path, default=here.parent / "results",
                    help="directory for core-figures[-quick].{json,md} (default %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the written output is missing, malformed or has errors")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per program run")
    ap.add_argument("--keep-profiles", action="store_true",
                    help="keep callgrind profiles in OUT/profiles")
    a = ap.parse_args()

    allocs, given = [], {}
    for item in (x.strip() for x in a.allocators.split(",")):
        if not item:
            continue
        name, eq, path = item.partition("=")
        if eq:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_.+-]*$", name) or name in ("glibc", "strata"):
                ap.error(f"--allocators {item}: NAME=PATH needs a name of letters, digits and "
                         "_.+- other than glibc and strata")
            lib = Path(path).expanduser()
            if not lib.is_file():
                ap.error(f"--allocators {item}: {lib}: no such file")
            given[name] = lib.resolve()
        elif name not in ALLOCATORS:
            ap.error(f"unknown allocator {name!r} (accepted: {', '.join(ALLOCATORS)}, "
                     "or NAME=PATH)")
        if name in allocs:
            ap.error(f"--allocators: {name} named twice")
        allocs.append(name)
    figures = [x for x in (a.only.split(",") if a.only else FIGURES) if x]
    for x in figures:
        if x not in FIGURES:
            ap.error(f"unknown figure {x!r} (accepted: {', '.join(FIGURES)})")
    bin_dir = a.bin_dir or a.build_dir / "bench"
    bins = {f: bin_dir / f"fig_{f}" for f in FIGURES}
    missing = [str(bins[f]) for f in figures if not os.access(bins[f], os.X_OK)]
    if missing:
        print(f"run_figures: missing {', '.join(missing)}; build them first, e.g.\n"
              f"  cmake -S bench/figures -B build-fig -G Ninja && ninja -C build-fig\n"
              f"  (then --bin-dir build-fig/bench)", file=sys.stderr)
        return 2

    notes = []
    libs = {}
    strata_lib = a.strata_lib or a.build_dir / "libstrata.so"
    for x in allocs:
        lib = strata_lib if x == "strata" else given.get(x) or PEERS[x]
        if lib is not None and not lib.exists():
            notes.append(f"{x}: {lib} not found, column skipped")
            continue
        libs[x] = lib
    valgrind = shutil.which("valgrind")
    if not valgrind and {"pair", "prodcons"} & set(figures):
        notes.append("valgrind not found: fig_pair and fig_prodcons skipped "
                     "(install valgrind for the instruction-count figures)")

    ctx = Ctx()
    ctx.valgrind, ctx.bins, ctx.timeout = valgrind, bins, a.timeout
    ctx.params = PARAMS["quick" if a.quick else "full"]
    suffix = "-quick" if a.quick else ""
    a.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {x: {} for x in libs}
    with tempfile.TemporaryDirectory(prefix="strata-figures-") as tmp:
        ctx.tmp = Path(tmp)
        for fig in figures:
            for x, lib in libs.items():
                if fig in ("pair", "prodcons") and not valgrind:
                    results[x][fig] = {"skipped": "valgrind not found"}
                    continue
                print(f"run_figures: {fig} / {x} ...", file=sys.stderr, flush=True)
                try:
                    results[x][fig] = RUNNERS[fig](ctx, x, lib)
                except (FigureError, OSError, ValueError, KeyError) as e:
                    results[x][fig] = {"error": str(e)}
                    notes.append(f"{x} {fig}: {e}")
                    print(f"run_figures: {x} {fig} failed: {e}", file=sys.stderr)
        if a.keep_profiles:
            dest = a.out / f"profiles{suffix}"
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(ctx.tmp, dest)

    doc = {"schema": SCHEMA,
           "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
           "quick": a.quick, "machine": machine_info(),
           # A library given by path is named by its file (libmimalloc.so.3.4.3, ...).
           "versions": {**versions(valgrind), **{x: l.name for x, l in given.items()}},
           "params": ctx.params, "figures": figures, "columns": list(libs),
           "allocators": {x: {"lib": str(l) if l else None, "given_by_path": x in given}
                          for x, l in libs.items()},
           "strata_version": results.get("strata", {}).get("keep", {}).get("mallctl_version"),
           "targets": TARGETS, "results": results, "notes": notes}
    json_path = a.out / f"core-figures{suffix}.json"
    md_path = a.out / f"core-figures{suffix}.md"
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    md_path.write_text(markdown(doc))
    print(human_table(doc))
    for line in verdicts(doc) + notes:
        print(line)
    print(f"wrote {json_path} and {md_path}")
    if a.check:
        problems = check_output(json_path, md_path, figures)
        for p in problems:
            print(f"run_figures: check: {p}", file=sys.stderr)
        if problems:
            return 1
        print("run_figures: check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""report.md from a results dict (as written to results.json after analysis): machine
and versions, the geometric-mean summary, a "where strata stands" paragraph written
from the numbers, one table per workload, Redis and memory-return details, plots,
verification and every failed run with its stderr tail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from . import experiments, plots, stats

DASH = "–"
LEVEL = 0.01     # |ratio - 1| below this is "level": closer than these runs can resolve


# ---- formatting ---------------------------------------------------------------------

def f_time(s: float | None) -> str:
    if s is None:
        return DASH
    if s >= 100:
        return f"{s:.0f} s"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


def f_kb(kb: float | None) -> str:
    if kb is None:
        return DASH
    mib = kb / 1024.0
    return f"{mib:.0f} MiB" if mib >= 100 else f"{mib:.1f} MiB"


def f_bytes(b: float | None) -> str:
    return DASH if b is None else f_kb(b / 1024.0)


def f_ratio(r: float | None) -> str:
    return DASH if r is None else f"{r:.2f}×"


def f_rate(r: float | None) -> str:
    if r is None:
        return DASH
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if r >= div:
            return f"{r / div:.2f} {unit}/s"
    return f"{r:.0f} /s"


def f_ns(ns: float | None) -> str:
    if ns is None:
        return DASH
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def f_spread(sp: Mapping | None) -> str:
    if not sp or sp.get("n", 0) < 2:
        return "1 run" if sp else DASH
    return f"{f_time(sp['min'])}–{f_time(sp['max'])} (±{sp['rel_halfrange'] * 100:.1f}%)"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# ---- how many runs stand behind a figure ---------------------------------------------

def workload_runs(results: Mapping) -> dict[str, int]:
    """{workload: the fewest successful runs any allocator has there}: what a median on
    that workload's row is a median of."""
    out = {}
    for wl, per in results.get("aggregate", {}).items():
        ns = [c.get("n_ok", 0) for c in per.values() if c.get("n_ok")]
        if ns:
            out[wl] = min(ns)
    return out


def runs_of(results: Mapping, wl: str) -> str:
    """"1 run", "median of 3 runs", ... for one workload's figures."""
    per = results.get("aggregate", {}).get(wl, {})
    return plots.runs_phrase([c.get("n_ok", 0) for c in per.values()])


def series_x(wl: str, meta: Mapping) -> str:
    """The x axis of a workload's RSS series: its own record, else the suite's."""
    if meta.get("series_x"):
        return meta["series_x"]
    from .workloads import BY_NAME
    w = BY_NAME.get(wl)
    return w.series_x if w is not None else "time"


# ---- tables ---------------------------------------------------------------------------

def _med_of(sp: Mapping | None) -> float | None:
    return sp.get("median") if sp else None


def workload_table(wl: str, results: Mapping) -> str:
    agg = results["aggregate"][wl]
    summ = results["summary"]
    base = summ["baseline"]
    timed = wl in summ["time"]
    allocs = [a for a in results["config"]["allocators"] if a in agg]
    times = {a: _med_of(agg[a]["time_s"]) for a in allocs}
    rss = {a: _med_of(agg[a]["peak_rss_kb"]) for a in allocs}
    best_t = min((v for v in times.values() if v is not None), default=None)
    best_r = min((v for v in rss.values() if v is not None), default=None)
    single = all((agg[a]["time_s"] or {}).get("n", 0) <= 1 for a in allocs)
    header = ["allocator", "time (1 run)" if single else "median time", "spread (min–max)",
              "ops/s", "p99", "peak RSS", f"time ×{base}", f"RSS ×{base}", "time ×best peer",
              "RSS ×best peer", "runs ok"]
    rows = []
    for a in allocs:
        c = agg[a]
        tt = summ["time"].get(wl, {}).get(a, {})
        rr = summ["rss"].get(wl, {}).get(a, {})
        t_s = f_time(times[a])
        r_s = f_kb(rss[a])
        if times[a] is not None and times[a] == best_t and timed and len(allocs) > 1:
            t_s = f"**{t_s}**"
        if rss[a] is not None and rss[a] == best_r and len(allocs) > 1:
            r_s = f"**{r_s}**"
        lat = c.get("latency_ns") or {}
        name = a if c.get("verified", True) else f"{a} ⚠ UNVERIFIED"
        rows.append([name, t_s, f_spread(c["time_s"]), f_rate(c["ops_per_sec"]),
                     f_ns(lat.get("p99")), r_s,
                     f_ratio(tt.get("vs_baseline")) if timed else DASH,
                     f_ratio(rr.get("vs_baseline")),
                     f_ratio(tt.get("vs_best_peer")) if timed else DASH,
                     f_ratio(rr.get("vs_best_peer")),
                     f"{c['n_ok']}/{c['n_runs']}"])
    if single:      # one run each: no spread to show
        header.pop(2)
        for r in rows:
            r.pop(2)
    note = ""
    if wl in experiments.NAMES:
        note = ("\n\nAn experiment of the jemalloc literature: kept out of the geomeans; "
                "its own figures follow.")
    elif not timed:
        note = ("\n\nIts time is set by its sampling schedule, so it is left out of the "
                "time ratios and the time geomean; its memory figures are below.")
    return md_table(header, rows) + note


def extras_table(wl: str, results: Mapping) -> str:
    """Medians of the workload's own extra figures and phases, if it reports any."""
    agg = results["aggregate"][wl]
    allocs = [a for a in results["config"]["allocators"] if a in agg]
    keys: list[str] = []
    for a in allocs:
        for k in list(agg[a]["extras"]) + [f"phases.{p}" for p in agg[a]["phases"]]:
            if k not in keys and k != "final_rss_kb":
                keys.append(k)
    if wl == "wl_memreturn" or not keys:
        return ""
    keys = keys[:8]                      # a readable table; the rest is in results.json
    rows = []
    for a in allocs:
        row = [a]
        for k in keys:
            v = (agg[a]["phases"].get(k[7:]) if k.startswith("phases.")
                 else agg[a]["extras"].get(k))
            row.append(_fmt_extra(k, v))
        rows.append(row)
    return f"Other figures the workload reports ({runs_of(results, wl)}):\n\n" + md_table(
        ["allocator", *keys], rows)


def _fmt_extra(key: str, v: float | None) -> str:
    if v is None:
        return DASH
    if key.endswith("_kb"):
        return f_kb(v)
    if key.endswith("bytes"):
        return f_bytes(v)
    if key.endswith("seconds") or key.endswith("_s") or "seconds" in key:
        return f_time(v)
    if "per_sec" in key:
        return f_rate(v)
    if key.endswith("_ns"):
        return f_ns(v)
    return f"{v:.4g}"


def memreturn_table(results: Mapping) -> str:
    agg = results["aggregate"].get("wl_memreturn")
    if not agg:
        return ""
    rows = []
    for a in [x for x in results["config"]["allocators"] if x in agg]:
        e = agg[a]["extras"]
        peak, after, end = e.get("rss_at_peak_kb"), e.get("rss_after_free_kb"), e.get("rss_end_kb")
        ret = (1.0 - end / peak) * 100.0 if peak and end is not None else None
        rows.append([a, f_kb(peak), f_kb(after), f_kb(end),
                     f_time(e.get("seconds_to_half")) if e.get("seconds_to_half") is not None
                     and e.get("seconds_to_half") >= 0 else "never",
                     DASH if ret is None else f"{ret:.0f}%"])
    return (f"Memory returned to the OS after the peak ({runs_of(results, 'wl_memreturn')}; "
            "\"never\": RSS did not fall to half within the sampling window):\n\n" +
            md_table(["allocator", "RSS at peak", "right after free", "at end",
                      "time to half", "returned by end"], rows))


def redis_cells(results: Mapping) -> dict:
    """Per allocator medians of the Redis memory figures (MiB) and throughputs."""
    out: dict = {}
    runs = [r for r in results["runs"] if r["workload"] == "redis" and r["status"] == "ok"]
    for a in results["config"]["allocators"]:
        rs = [r["result"] for r in runs if r["allocator"] == a]
        if not rs:
            continue

        def med(fn):
            vals = [v for v in (fn(x) for x in rs) if isinstance(v, (int, float))]
            return stats.median(vals) if vals else None

        m = lambda x: x.get("memory", {})  # noqa: E731
        cell = {
            "used_memory_mib": med(lambda x: m(x).get("after_load", {}).get("used_memory")),
            # VmRSS like the after-FLUSHALL figure; INFO's used_memory_rss as a fallback.
            "rss_load_mib": med(lambda x: m(x).get("vmrss_after_load_kb") * 1024
                                if m(x).get("vmrss_after_load_kb") is not None
                                else m(x).get("after_load", {}).get("used_memory_rss")),
            "frag_load": med(lambda x: m(x).get("after_load", {}).get("mem_fragmentation_ratio")),
            "rss_flush_mib": med(lambda x: m(x).get("vmrss_after_flush_kb")),
            "frag_flush": med(lambda x: m(x).get("after_flush", {}).get("mem_fragmentation_ratio")),
            "verified": sorted({str(x.get("verified_allocator")) for x in rs}),
            "rps": {},
        }
        for k in ("used_memory_mib", "rss_load_mib"):
            if cell[k] is not None:
                cell[k] /= 1024.0 * 1024.0
        if cell["rss_flush_mib"] is not None:
            cell["rss_flush_mib"] /= 1024.0
        tests = sorted({(size, t) for x in rs for size, d in x.get("tests", {}).items()
                        for t in d}, key=lambda st: (int(st[0][1:]), st[1]))
        for size, t in tests:
            cell["rps"][f"{t} {size[1:]}B"] = med(
                lambda x: x.get("tests", {}).get(size, {}).get(t, {}).get("rps"))
        out[a] = cell
    return out


def redis_section(results: Mapping, cells: Mapping) -> str:
    if not cells:
        return ""
    cfg = results["config"].get("redis", {})
    cols: list[str] = []
    for c in cells.values():
        cols += [k for k in c["rps"] if k not in cols]
    order = ["SET", "GET", "LPUSH", "LPOP"]
    cols.sort(key=lambda k: (int(k.split()[1][:-1]),
                             order.index(k.split()[0]) if k.split()[0] in order else 9))
    thr = md_table(["allocator", *cols],
                   [[a, *[f_rate(c["rps"].get(k)) for k in cols]] for a, c in cells.items()])
    mem = md_table(
        ["allocator", "used_memory", "RSS after load", "mem_fragmentation_ratio",
         "RSS 1 s after FLUSHALL", "frag. ratio after FLUSHALL", "served by"],
        [[a, _mib(c["used_memory_mib"]), _mib(c["rss_load_mib"]), _num(c["frag_load"]),
          _mib(c["rss_flush_mib"]), _num(c["frag_flush"]),
          ", ".join(c["verified"]) + ("" if c["verified"] == [a] else " ⚠ MISMATCH")]
         for a, c in cells.items()])
    return (f"redis-benchmark: {cfg.get('requests_per_test')} requests per test and value "
            f"size, key space as large, {cfg.get('clients')} clients, pipeline "
            f"{cfg.get('pipeline')}, server on 127.0.0.1 with the allocator preloaded into "
            f"it only. Requests per second ({runs_of(results, 'redis')}):\n\n{thr}\n\n"
            f"Server memory ({runs_of(results, 'redis')}; INFO memory and /proc/PID/status):"
            f"\n\n{mem}\n\n"
            "The glibc row preloads libc.so.6 and the jemalloc row nothing, because "
            "Debian's redis-server links libjemalloc. In the glibc, tcmalloc and mimalloc "
            "rows Redis still calls libjemalloc's mallctl/nallocx for its statistics "
            "(those libraries have no such symbols); data allocations go to the "
            "allocator shown in \"served by\".")


def _mib(v: float | None) -> str:
    return DASH if v is None else (f"{v:.0f} MiB" if v >= 100 else f"{v:.1f} MiB")


def _num(v: float | None) -> str:
    return DASH if v is None else f"{v:.2f}"


# ---- where strata stands ---------------------------------------------------------------

def _overlap(a: Mapping | None, b: Mapping | None) -> bool:
    """True when two spreads of >= 2 runs each contain the other's median."""
    if not a or not b or a.get("n", 0) < 2 or b.get("n", 0) < 2:
        return False
    return a["min"] <= b["median"] <= a["max"] or b["min"] <= a["median"] <= b["max"]


def _cmp_word(r: float, better: str, worse: str) -> str:
    return better if r < 1 else worse


def standing(results: Mapping) -> str:
    """A plain-language paragraph from the numbers. Where strata is not the fastest or
    the smallest it says so, with the winner and the factor."""
    allocs = results["config"]["allocators"]
    S = stats.SUBJECT
    if S not in allocs:
        return "strata was not part of this run, so there is nothing to say about it."
    agg = results["aggregate"]
    summ = results["summary"]
    base = summ["baseline"]
    peers = [a for a in allocs if a != S]
    paras = []
    bad = sorted(w for w, per in agg.items() if S in per and not per[S].get("verified", True))
    if bad:
        paras.append("**Warning: on " + ", ".join(bad) + " the runs labelled strata were not "
                     "served by libstrata.so (see Verification); the figures below for "
                     "those workloads are another allocator's.**")
    g = summ["geomean"].get(S, {})
    if not g.get("time_workloads") and not g.get("rss_workloads"):
        return ("strata completed no workload in this run (see the failed runs below), so "
                "it cannot be ranked.")
    # Overall.
    s = []
    if g.get("time_vs_baseline") is not None and base != S:
        s.append(f"Over the {g['time_workloads']} timed workloads it completed, strata's "
                 f"geometric-mean time is {f_ratio(g['time_vs_baseline'])} {base}'s and its "
                 f"peak RSS {f_ratio(g['rss_vs_baseline'])} {base}'s "
                 f"(over {g['rss_workloads']} workloads).")
    heads = []
    for p in peers:
        h = summ["strata_vs"].get(p, {})
        if h.get("time") is not None:
            heads.append(f"{f_ratio(h['time'])} {p}'s time "
                         f"({_cmp_word(h['time'], 'faster', 'slower')}) with "
                         f"{f_ratio(h.get('rss'))} its peak RSS")
    if heads:
        s.append("Head to head over the workloads both completed, strata takes "
                 + "; ".join(heads) + ".")
    paras.append(" ".join(s))

    # Per workload: time.
    won, lost, tied, level = [], [], [], []
    for wl, row in summ["time"].items():
        if S not in row or row[S]["value"] is None:
            continue
        others = {a: c["value"] for a, c in row.items() if a != S and c["value"] is not None}
        if not others:
            continue
        best = min(others, key=others.get)
        r = row[S]["value"] / others[best]
        if abs(r - 1.0) < LEVEL:
            level.append(f"{wl} (with {best})")
        elif r < 1.0:
            won.append(f"{wl} ({f_ratio(1 / r)} ahead of {best})")
        elif _overlap(agg[wl][S]["time_s"], agg[wl][best]["time_s"]):
            tied.append(f"{wl} ({best} {f_ratio(r)} faster, within run-to-run spread)")
        else:
            lost.append(f"{wl} ({best} is {f_ratio(r)} faster)")
    s = []
    if won:
        s.append("strata is the fastest on " + ", ".join(won) + ".")
    if lost:
        s.append("It is not the fastest on " + ", ".join(lost) + ".")
    if level:
        s.append("It is level (within 1%) on " + ", ".join(level) + ".")
    if tied:
        s.append("It is marginally behind on " + ", ".join(tied) + ".")
    if s:
        paras.append(" ".join(s))

    # Per workload: memory.
    small, big, even = [], [], []
    for wl, row in summ["rss"].items():
        if S not in row or row[S]["value"] is None:
            continue
        others = {a: c["value"] for a, c in row.items() if a != S and c["value"] is not None}
        if not others:
            continue
        best = min(others, key=others.get)
        r = row[S]["value"] / others[best]
        if r < 1.0 - LEVEL:
            small.append(wl)
        elif r <= 1.0 + LEVEL:
            even.append(f"{wl} (with {best})")
        else:
            big.append(f"{wl} ({f_ratio(r)} {best}'s)")
    s = []
    if small:
        s.append("It has the smallest peak RSS on " + ", ".join(small) + ".")
    if even:
        s.append("Its peak RSS is level (within 1%) with the leanest peer on "
                 + ", ".join(even) + ".")
    if big:
        s.append("It uses more memory than the leanest peer on " + ", ".join(big) + ".")
    if s:
        paras.append(" ".join(s))

    # Redis and memory return.
    cells = redis_cells(results)
    if S in cells:
        c = cells[S]
        bits = [f"In Redis, strata's mem_fragmentation_ratio after loading is "
                f"{_num(c['frag_load'])}"]
        if "jemalloc" in cells:
            j = cells["jemalloc"]
            bits.append(f"against jemalloc's {_num(j['frag_load'])}")
        g_rss = cells.get("glibc", {}).get("rss_load_mib")
        if g_rss and c["rss_load_mib"]:
            bits.append(f"and its RSS is {c['rss_load_mib'] / g_rss:.0%} of glibc's")
            if cells.get("jemalloc", {}).get("rss_load_mib"):
                bits.append(f"(jemalloc's: {cells['jemalloc']['rss_load_mib'] / g_rss:.0%})")
        s = " ".join(bits) + "."
        flush = {a: v["rss_flush_mib"] for a, v in cells.items() if v["rss_flush_mib"]}
        if S in flush and len(flush) > 1:
            best = min(flush, key=flush.get)
            s += (f" One second after FLUSHALL it holds {_mib(flush[S])}"
                  + (" (the least)." if best == S else
                     f" ({best} holds the least, {_mib(flush[best])})."))
        paras.append(s)
    mr = agg.get("wl_memreturn", {})
    if S in mr and mr[S]["extras"].get("rss_end_kb") is not None:
        ends = {a: c["extras"].get("rss_end_kb") for a, c in mr.items()
                if c["extras"].get("rss_end_kb") is not None}
        best = min(ends, key=ends.get)
        t_half = mr[S]["extras"].get("seconds_to_half")
        s = (f"After the memory-return peak strata ends at {f_kb(ends[S])}"
             + (" (the least)" if best == S else f" ({best} ends lowest, {f_kb(ends[best])})"))
        s += (f"; it fell to half within {f_time(t_half)}." if t_half is not None and t_half >= 0
              else "; it never fell to half its peak within the sampling window.")
        paras.append(s)

    # Targets from DESIGN.md.
    tg = []
    je, mi = summ["strata_vs"].get("jemalloc", {}), summ["strata_vs"].get("mimalloc", {})
    if je.get("time") is not None:
        tg.append(f"faster than jemalloc in the geomean: {'met' if je['time'] < 1 else 'NOT met'}"
                  f" ({f_ratio(je['time'])})")
    if mi.get("time") is not None:
        tg.append(f"no slower than mimalloc: {'met' if mi['time'] <= 1 else 'NOT met'}"
                  f" ({f_ratio(mi['time'])})")
    if je.get("rss") is not None:
        tg.append(f"peak RSS no higher than jemalloc's: {'met' if je['rss'] <= 1 else 'NOT met'}"
                  f" ({f_ratio(je['rss'])})")
    if tg:
        paras.append("Design targets: " + "; ".join(tg) + ".")

    fails = [r for r in results["runs"] if r["allocator"] == S and r["status"] != "ok"]
    if fails:
        by = sorted({f"{r['workload']} ({r['status']}: {r['reason']})" for r in fails})
        paras.append(f"strata failed {len(fails)} run(s): " + "; ".join(by) + ".")
    mine = [w for w in agg if S in agg[w] and agg[w][S]["time_s"]]
    single = [w for w in mine if agg[w][S]["time_s"]["n"] < 2]
    if single:
        which = "Every workload" if len(single) == len(mine) else \
            f"{len(single)} of the {len(mine)} workloads"
        paras.append(f"{which} ran a single round here, so those figures are single "
                     "samples, not medians: differences of a few percent are noise "
                     "(`--rounds 3` or `--full` for medians and spread).")
    return "\n\n".join(p for p in paras if p)


# ---- the whole report --------------------------------------------------------------------

def _runs_note(results: Mapping) -> str:
    """How many runs each workload's figures stand on, grouped: "3 runs: wl_bulk, ...;
    1 run: wl_churn, ..." (a median where there are several, the one run otherwise)."""
    by: dict[int, list[str]] = {}
    for wl, n in workload_runs(results).items():
        if wl not in experiments.NAMES:
            by.setdefault(n, []).append(wl)
    if not by:
        return "no runs"
    if len(by) == 1:
        n = next(iter(by))
        return "one run each" if n == 1 else f"the median of {n} runs each"
    parts = [f"{'1 run' if n == 1 else f'median of {n} runs'}: {', '.join(ws)}"
             for n, ws in sorted(by.items(), reverse=True)]
    return "; ".join(parts)


def summary_rows(results: Mapping) -> tuple[list[str], list[list[str]]]:
    summ = results["summary"]
    base = summ["baseline"]
    header = ["allocator", f"time ×{base} (geomean)", "timed workloads",
              f"peak RSS ×{base} (geomean)", "workloads", "failed runs"]
    rows = []
    for a in results["config"]["allocators"]:
        g = summ["geomean"].get(a, {})
        rows.append([a, f_ratio(g.get("time_vs_baseline")), str(g.get("time_workloads", 0)),
                     f_ratio(g.get("rss_vs_baseline")), str(g.get("rss_workloads", 0)),
                     str(g.get("failed_runs", 0))])
    return header, rows


def summary_text(results: Mapping) -> str:
    """The geomean table as aligned plain text, for the terminal."""
    header, rows = summary_rows(results)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(header, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def write(out: Path, results: Mapping, draw: bool = True) -> dict:
    """Write report.md (and, when `draw`, the PNGs it embeds) into `out`. Returns
    {"notes": [...], "plots": [file names]}."""
    plots_on = draw
    notes: list[str] = []
    cfg, mach = results["config"], results["machine"]
    allocs = cfg["allocators"]
    base = results["summary"]["baseline"]
    pngs: dict[str, str] = {}
    cells = redis_cells(results)
    if plots_on and plots.available():
        n = workload_runs(results)
        if plots.ratio_bars(out / "time_ratio.png", results["summary"]["time"], allocs, base,
                            "time", n):
            pngs["time"] = "time_ratio.png"
        if plots.ratio_bars(out / "rss_ratio.png", results["summary"]["rss"], allocs, base,
                            "peak RSS", n):
            pngs["rss"] = "rss_ratio.png"
        for wl, meta in results["workloads"].items():
            if meta.get("series") and plots.rss_series(out / f"rss_{wl}.png", wl,
                                                       results["runs"], allocs,
                                                       series_x(wl, meta)):
                pngs[f"series:{wl}"] = f"rss_{wl}.png"
        if cells and plots.redis_memory(out / "redis_memory.png", cells, allocs,
                                        n.get("redis", 1)):
            pngs["redis"] = "redis_memory.png"
    elif plots_on:
        notes.append(plots.INSTALL_LINE)

    L: list[str] = []
    L.append("# strata bench report\n")
    L.append(f"{results['date']} · `{' '.join(results['command_line'])}` · preset "
             f"**{cfg['preset']}** · rounds "
             + ", ".join(f"{w} {r}" for w, r in cfg["rounds"].items()) + "\n")
    cut = {w: (cfg["rounds_planned"][w], r) for w, r in cfg["rounds"].items()
           if cfg.get("rounds_planned", {}).get(w, r) != r}
    if cut:
        L.append(f"The time budget ({cfg.get('budget_s'):.0f} s) ended these workloads early: "
                 + ", ".join(f"{w} {r} of {p} rounds" for w, (p, r) in cut.items())
                 + " (`--rounds N` or `--budget 0` runs every round).\n")
    mem_gib = (mach.get("memory_kb") or 0) / 1024 / 1024
    L.append(f"Machine: {mach.get('cpu_model')}, {mach.get('cores_usable')} usable cores "
             f"({mach.get('cores_online')} online), {mem_gib:.1f} GiB, {mach.get('os')}, "
             f"kernel {mach.get('kernel')}, THP {mach.get('thp')}, page "
             f"{mach.get('page_size')} B.\n")
    L.append(md_table(["allocator", "library", "version"],
                      [[a, f"`{results['allocators'][a]['lib']}`" if a != "glibc" else
                        "(default)", results["allocators"][a].get("version") or DASH]
                       for a in allocs]))
    skipped = [a for a, v in results["allocators"].items() if not v["available"]]
    for a in skipped:
        L.append(f"\nSkipped {a}: {results['allocators'][a]['skip_reason']}")
    for s in results.get("skipped_workloads", []):
        L.append(f"\nSkipped {s['workload']}: {s['reason']}")
    if results.get("env"):
        L.append("\nAllocator-related environment: " + ", ".join(
            f"`{k}={v}`" for k, v in results["env"].items()))
    L.append("")

    mism = _mismatches(results)
    if mism:
        L.append("> **⚠ ALLOCATOR MISMATCH** - these runs were not served by the allocator "
                 "they are labelled with; their numbers are not that allocator's:\n>")
        for m in mism:
            L.append(f"> - {m}")
        L.append("")

    L.append("## Summary\n")
    header, rows = summary_rows(results)
    L.append(md_table(header, rows))
    L.append(f"\nRatios are relative to {base} on each workload ({_runs_note(results)}), "
             "combined by geometric mean over the workloads the allocator (and the "
             "baseline) completed; below 1 is better. Time is the workload's own measured "
             "time; peak RSS is the kernel's ru_maxrss of the process (the server for "
             "Redis).\n")
    L.append("## Where strata stands\n")
    L.append(standing(results) + "\n")
    exp_sum = experiments.summary(results)
    if exp_sum:
        L.append("### The literature's experiments\n")
        L.append("Each experiment's headline figure (the median where it ran more than "
                 "once; its section below has the tables, the spread of its runs and a "
                 "plot; these stay out of the geomeans above):\n\n" + exp_sum + "\n")
    if "time" in pngs or "rss" in pngs:
        L.append("## Plots\n")
        if "time" in pngs:
            L.append(f"![time relative to {base}]({pngs['time']})\n")
        if "rss" in pngs:
            L.append(f"![peak RSS relative to {base}]({pngs['rss']})\n")
    elif plots_on and notes:
        L.append(f"_{plots.INSTALL_LINE}_\n")

    L.append("## Workloads\n")
    for wl, meta in results["workloads"].items():
        if wl not in results["aggregate"]:
            continue
        L.append(f"### {wl}\n")
        L.append(f"{meta['description']}.\n")
        L.append(workload_table(wl, results) + "\n")
        ex = extras_table(wl, results)
        if ex:
            L.append(ex + "\n")
        if wl == "wl_memreturn":
            mt = memreturn_table(results)
            if mt:
                L.append(mt + "\n")
        if wl == "redis":
            rs = redis_section(results, cells)
            if rs:
                L.append(rs + "\n")
            if "redis" in pngs:
                L.append(f"![Redis memory]({pngs['redis']})\n")
        if f"series:{wl}" in pngs:
            L.append(f"![{wl} RSS over time]({pngs[f'series:{wl}']})\n")
        exp = experiments.section(wl, results, out, plots_on)
        if exp:
            L.append(exp + "\n")

    L.append("## Verification\n")
    L.append(_verification_text(results) + "\n")
    fails = [r for r in results["runs"] if r["status"] != "ok"]
    L.append("## Failed runs\n")
    if not fails:
        L.append("None: every run exited 0 with a valid RESULT line.\n")
    for r in fails:
        L.append(f"- **{r['workload']} / {r['allocator']} / round {r['round']}**: "
                 f"{r['status']} - {r['reason']}")
        tail = "\n".join((r.get("stderr_tail") or "").splitlines()[-15:])
        if tail.strip():
            L.append("\n  ```\n" + "\n".join("  " + ln for ln in tail.splitlines())
                     + "\n  ```")
    warns = [(r, w) for r in results["runs"] for w in r.get("warnings", [])]
    if warns:
        L.append("\n## Warnings\n")
        for r, w in warns:
            L.append(f"- {r['workload']} / {r['allocator']} / round {r['round']}: {w}")
    L.append(f"\nRaw measurements: `results.json` (schema {results['schema']}).")
    (out / "report.md").write_text("\n".join(L) + "\n", encoding="utf-8")
    return {"notes": notes, "plots": list(pngs.values())}


def _mismatches(results: Mapping) -> list[str]:
    out = []
    for wl, per in results.get("verification", {}).items():
        for a, v in per.items():
            if not v.get("ok"):
                out.append(f"{wl} under {a}: malloc resolves to {v.get('verified_allocator')}")
    seen = set()
    for r in results["runs"]:
        if r["workload"] == "redis" and r.get("verification") and \
                not r["verification"].get("ok"):
            key = (r["allocator"], r["verification"].get("verified_allocator"))
            if key not in seen:
                seen.add(key)
                out.append(f"redis under {key[0]}: redis-server's malloc resolves to {key[1]}"
                           + ("" if r["verification"].get("preload_mapped", True)
                              else " and the preloaded library is not mapped"))
    return out


def _verification_text(results: Mapping) -> str:
    ver = results.get("verification", {})
    n_pairs = sum(len(v) for v in ver.values())
    n_ok = sum(1 for v in ver.values() for x in v.values() if x.get("ok"))
    redis_runs = [r for r in results["runs"] if r["workload"] == "redis" and r.get("verification")]
    r_ok = sum(1 for r in redis_runs if r["verification"].get("ok"))
    lines = ["Each (workload, allocator) pair was checked with the dynamic loader's own "
             "symbol bindings (`LD_DEBUG=bindings` in trace mode, so nothing runs): the "
             "library that malloc, free, calloc and realloc of the program bind to must be "
             "the allocator the row is labelled with. Redis servers were also checked "
             "live: the preloaded library must appear in /proc/PID/maps.", ""]
    if n_pairs:
        lines.append(f"- workload binaries: {n_ok}/{n_pairs} pairs verified")
    if redis_runs:
        lines.append(f"- redis-server runs: {r_ok}/{len(redis_runs)} verified")
    return "\n".join(lines)

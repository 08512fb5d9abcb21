"""Turns the raw run records of results.json into the figures of the report: per
workload and allocator medians and spread, ratio tables against glibc (or the first
allocator when glibc was not run) and the best peer, and the geometric-mean summary.
Pure functions over plain dicts, so a results.json can be re-analysed offline.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from . import stats

# Numeric extras of a RESULT worth a median in the report (when a workload has them).
# Measurements only: counts and parameters that the seed fixes are left to results.json.
EXTRA_KEYS = ("live_bytes", "rss_per_live", "heap_per_live", "final_rss_kb",
              "rss_at_peak_kb", "rss_after_free_kb", "rss_end_kb", "seconds_to_half")


def run_time(run: Mapping) -> float | None:
    """The time of one run: the workload's own measured `seconds` (no exec or loader
    time in it) when it reports one, else the wall time seen by the harness."""
    r = run.get("result") or {}
    s = r.get("seconds")
    if isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0:
        return float(s)
    w = run.get("wall_s")
    return float(w) if isinstance(w, (int, float)) and w > 0 else None


def run_rss_kb(run: Mapping) -> float | None:
    """Peak RSS of one run in KiB: the kernel's ru_maxrss from wait4, falling back on
    the workload's own peak_rss_kb."""
    v = run.get("maxrss_kb")
    if isinstance(v, (int, float)) and v > 0:
        return float(v)
    r = (run.get("result") or {}).get("peak_rss_kb")
    return float(r) if isinstance(r, (int, float)) and r > 0 else None


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def flatten_numeric(d: Mapping, prefix: str = "", depth: int = 2) -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1.0}: numeric leaves of a nested dict, `depth` deep."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and depth > 0:
            out.update(flatten_numeric(v, key + ".", depth - 1))
        elif _num(v) is not None:
            out[key] = float(v)
    return out


def aggregate(runs: Iterable[Mapping]) -> dict:
    """{workload: {allocator: cell}} where a cell has n_runs, n_ok, time (spread),
    wall/cpu/rss medians, ops_per_sec, latency, extras and phases medians, and the
    failure reasons of the failed runs."""
    groups: dict[str, dict[str, list]] = {}
    for r in runs:
        groups.setdefault(r["workload"], {}).setdefault(r["allocator"], []).append(r)
    out: dict = {}
    for wl, per in groups.items():
        out[wl] = {}
        for alloc, rs in per.items():
            ok = [r for r in rs if r.get("status") == "ok"]
            results = [r.get("result") or {} for r in ok]
            times = [t for t in (run_time(r) for r in ok) if t is not None]
            rss = [v for v in (run_rss_kb(r) for r in ok) if v is not None]
            cell = {
                "n_runs": len(rs), "n_ok": len(ok),
                "failures": [{"round": r.get("round"), "status": r.get("status"),
                              "reason": r.get("reason")} for r in rs if r.get("status") != "ok"],
                "time_s": stats.spread(times),
                "wall_s": _med(r.get("wall_s") for r in ok),
                "cpu_s": _med((r.get("user_s") or 0) + (r.get("sys_s") or 0) for r in ok),
                "peak_rss_kb": stats.spread(rss),
                "ops_per_sec": _med(_ops_per_sec(x) for x in results),
                "latency_ns": stats.combine_latency(results),
                "extras": {},
                "phases": {},
                # Every run served by the allocator it is labelled with (where checked).
                "verified": all(r.get("verified_allocator") in (None, alloc) and
                                (r.get("verification") or {}).get("ok", True) for r in rs),
            }
            for k in EXTRA_KEYS:
                m = _med(_num(x.get(k)) for x in results)
                if m is not None:
                    cell["extras"][k] = m
            phase_vals: dict[str, list[float]] = {}
            for x in results:
                if isinstance(x.get("phases"), Mapping):
                    for k, v in flatten_numeric(x["phases"]).items():
                        if k.endswith("per_sec"):     # throughput per phase
                            phase_vals.setdefault(k, []).append(v)
            cell["phases"] = {k: stats.median(v) for k, v in sorted(phase_vals.items())}
            out[wl][alloc] = cell
    return out


def _ops_per_sec(res: Mapping) -> float | None:
    v = _num(res.get("ops_per_sec"))
    if v is not None and v > 0:
        return v
    ops, sec = _num(res.get("ops")), _num(res.get("seconds"))
    return ops / sec if ops is not None and sec else None


def _med(values) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return stats.median(xs) if xs else None


def baseline_of(allocators: list[str]) -> str | None:
    """glibc when it was run, else the first allocator."""
    if "glibc" in allocators:
        return "glibc"
    return allocators[0] if allocators else None


def summarize(agg: Mapping, allocators: list[str], timed: set[str]) -> dict:
    """Ratio tables and geomeans from aggregate(): time (over the `timed` workloads)
    and peak RSS (over all), each against the baseline and the best peer."""
    base = baseline_of(allocators)
    t_med = {wl: {a: (c["time_s"] or {}).get("median") for a, c in per.items()}
             for wl, per in agg.items() if wl in timed}
    r_med = {wl: {a: (c["peak_rss_kb"] or {}).get("median") for a, c in per.items()}
             for wl, per in agg.items()}
    t_tab = stats.ratio_table(t_med, base) if base else {}
    r_tab = stats.ratio_table(r_med, base) if base else {}
    gm_t = stats.geomean_summary(t_tab)
    gm_r = stats.geomean_summary(r_tab)
    geo = {}
    for a in allocators:
        geo[a] = {
            "time_vs_baseline": gm_t.get(a, {}).get("geomean"),
            "time_workloads": gm_t.get(a, {}).get("n", 0),
            "rss_vs_baseline": gm_r.get(a, {}).get("geomean"),
            "rss_workloads": gm_r.get(a, {}).get("n", 0),
            "failed_runs": sum(len(per.get(a, {}).get("failures", []))
                               for per in agg.values()),
        }
    head = {}
    if stats.SUBJECT in allocators:
        for a in allocators:
            if a == stats.SUBJECT:
                continue
            gt, nt = stats.relative_geomean(t_tab, stats.SUBJECT, a)
            gr, nr = stats.relative_geomean(r_tab, stats.SUBJECT, a)
            head[a] = {"time": gt, "time_workloads": nt, "rss": gr, "rss_workloads": nr}
    return {"baseline": base, "time": t_tab, "rss": r_tab, "geomean": geo,
            "strata_vs": head}

"""Pure statistics for the benchmark harness: percentiles, spread, geometric means,
latency-histogram merging and the ratio tables of the report.

Nothing here does I/O; every function is deterministic and unit-tested in
tools/tests/test_stats.py.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

# The allocator the comparison is about: "best peer" means the best of the others.
SUBJECT = "strata"


def percentile(values: Iterable[float], q: float) -> float:
    """q-th percentile (0..100) with linear interpolation between closest ranks
    (numpy's default "linear" method). Raises ValueError on an empty input."""
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} outside 0..100")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def median(values: Iterable[float]) -> float:
    return percentile(values, 50.0)


def spread(values: Iterable[float]) -> dict | None:
    """Summary of repeated measurements: n, median, min, max, q1, q3, iqr and the
    relative half-range ((max-min)/2/median), or None when there are none."""
    xs = [float(v) for v in values]
    if not xs:
        return None
    med = median(xs)
    q1, q3 = percentile(xs, 25.0), percentile(xs, 75.0)
    lo, hi = min(xs), max(xs)
    rel = (hi - lo) / 2.0 / med if med > 0 else 0.0
    return {"n": len(xs), "median": med, "min": lo, "max": hi, "q1": q1, "q3": q3,
            "iqr": q3 - q1, "rel_halfrange": rel}


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive numbers; None for an empty input. A zero or
    negative value has no geometric mean: ValueError rather than a silent 0."""
    xs = [float(v) for v in values]
    if not xs:
        return None
    if any(not (x > 0.0) or math.isinf(x) for x in xs):
        raise ValueError(f"geomean needs positive finite values, got {xs}")
    return math.exp(math.fsum(math.log(x) for x in xs) / len(xs))


def ratio(num: float | None, den: float | None) -> float | None:
    """num/den, or None when either is missing or den is not positive."""
    if num is None or den is None or not den > 0:
        return None
    return float(num) / float(den)


# ---- latency histograms -------------------------------------------------------------
# A histogram is a sequence of [upper_bound_ns, count] pairs (bucket i holds samples
# in (upper[i-1], upper[i]]), the optional "latency_hist" of a workload's RESULT.
# Merging adds counts bucket by bucket, so percentiles over several rounds are exact to
# the bucket width, unlike a median of per-round percentiles.

def merge_histograms(hists: Iterable[Sequence[Sequence[float]] | Mapping]) -> list[list]:
    """Sum several histograms (lists of [upper, count] or {upper: count} mappings)
    into one list of [upper, count] sorted by upper bound. Negative counts raise."""
    acc: dict[float, int] = {}
    for h in hists:
        items = h.items() if isinstance(h, Mapping) else h
        for upper, count in items:
            c = int(count)
            if c < 0:
                raise ValueError(f"negative count {c} in histogram bucket {upper}")
            u = float(upper)
            acc[u] = acc.get(u, 0) + c
    return [[u, acc[u]] for u in sorted(acc)]


def histogram_percentile(hist: Sequence[Sequence[float]], q: float) -> float | None:
    """Upper bound of the bucket holding the sample of rank ceil(q/100 * total)
    (the nearest-rank method, as HdrHistogram reports); None if the histogram is
    empty. The histogram must be sorted (merge_histograms returns it sorted)."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} outside 0..100")
    total = sum(int(c) for _, c in hist)
    if total <= 0:
        return None
    rank = max(1, math.ceil(q / 100.0 * total))
    seen = 0
    for upper, count in hist:
        seen += int(count)
        if seen >= rank:
            return float(upper)
    return float(hist[-1][0])


LATENCY_KEYS = ("p50", "p99", "p999", "max")
_LATENCY_Q = {"p50": 50.0, "p99": 99.0, "p999": 99.9, "max": 100.0}


def combine_latency(results: Sequence[Mapping]) -> dict | None:
    """Combine the latency of several rounds of one workload under one allocator.

    If every round carries "latency_hist", the histograms are merged and p50/p99/
    p999/max read from the merge ("method": "histogram"). Otherwise each percentile
    is the median of the rounds' values and max is the maximum ("method":
    "median-of-rounds"). None when no round reports latency."""
    with_lat = [r for r in results if isinstance(r.get("latency_ns"), Mapping)
                or r.get("latency_hist")]
    if not with_lat:
        return None
    if all(r.get("latency_hist") for r in with_lat):
        merged = merge_histograms(r["latency_hist"] for r in with_lat)
        out = {k: histogram_percentile(merged, _LATENCY_Q[k]) for k in LATENCY_KEYS}
        out["method"] = "histogram"
        out["samples"] = sum(int(c) for _, c in merged)
        return out
    out: dict = {}
    for k in LATENCY_KEYS:
        vals = [float(r["latency_ns"][k]) for r in with_lat
                if isinstance(r.get("latency_ns"), Mapping)
                and isinstance(r["latency_ns"].get(k), (int, float))]
        if vals:
            out[k] = max(vals) if k == "max" else median(vals)
    out["method"] = "median-of-rounds"
    return out


# ---- ratio tables -------------------------------------------------------------------

def best_peer(values: Mapping[str, float | None], subject: str = SUBJECT,
              lower_is_better: bool = True) -> tuple[str, float] | None:
    """The best allocator other than `subject` among values {allocator: value};
    None values are ignored. Returns (name, value) or None when there is no peer."""
    peers = [(n, v) for n, v in values.items() if n != subject and v is not None]
    if not peers:
        return None
    return (min if lower_is_better else max)(peers, key=lambda nv: (nv[1], nv[0]))


def ratio_table(medians: Mapping[str, Mapping[str, float | None]], baseline: str,
                subject: str = SUBJECT) -> dict:
    """For {workload: {allocator: median}} (lower is better) return
    {workload: {allocator: {"value", "vs_baseline", "vs_best_peer", "best_peer"}}}.
    vs_baseline is value / baseline's value on that workload (None if the baseline
    has no value there); vs_best_peer is value / the best value among the allocators
    other than `subject` (so a peer's own best is 1.0 and strata < 1.0 beats every
    peer)."""
    table: dict = {}
    for wl, per_alloc in medians.items():
        base = per_alloc.get(baseline)
        bp = best_peer(per_alloc, subject)
        row = {}
        for alloc, v in per_alloc.items():
            row[alloc] = {
                "value": v,
                "vs_baseline": ratio(v, base),
                "vs_best_peer": ratio(v, bp[1]) if bp else None,
                "best_peer": bp[0] if bp else None,
            }
        table[wl] = row
    return table


def geomean_summary(table: Mapping[str, Mapping[str, Mapping]], key: str = "vs_baseline",
                    workloads: Iterable[str] | None = None) -> dict:
    """Per allocator, the geometric mean of table[wl][alloc][key] over the workloads
    where that ratio exists (the allocator and the baseline both completed it):
    {allocator: {"geomean": g or None, "n": count, "workloads": [...]}}."""
    chosen = set(workloads) if workloads is not None else None
    per: dict[str, list[tuple[str, float]]] = {}
    for wl, row in table.items():
        if chosen is not None and wl not in chosen:
            continue
        for alloc, cell in row.items():
            per.setdefault(alloc, [])
            r = cell.get(key)
            if r is not None and r > 0:
                per[alloc].append((wl, r))
    return {alloc: {"geomean": geomean(r for _, r in pairs), "n": len(pairs),
                    "workloads": [w for w, _ in pairs]}
            for alloc, pairs in per.items()}


def relative_geomean(table: Mapping[str, Mapping[str, Mapping]], a: str, b: str,
                     key: str = "value") -> tuple[float | None, int]:
    """Geometric mean over the workloads both a and b completed of a's value / b's
    value: the head-to-head figure (<1 means a is lower, i.e. better). Returns
    (geomean or None, number of workloads)."""
    rs = []
    for row in table.values():
        va = row.get(a, {}).get(key)
        vb = row.get(b, {}).get(key)
        r = ratio(va, vb)
        if r is not None and r > 0:
            rs.append(r)
    return geomean(rs), len(rs)

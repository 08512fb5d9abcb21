"""The jemalloc literature's experiments in `strata bench`: their suite
entries, how each is run (exp_redis, exp_nginx, exp_jvm; wl_drift is an ordinary
workload binary), and their report sections - one table per experiment with the
median and the spread (min-max) of its rounds, ratios against the other allocators of
the same run, and one plot each. They stay out of the headline geomeans, so that the
summary compares with earlier reports; the "Experiments" summary states where strata
leads and where it does not.

A workload registered as `wl_halffree` (the half-free loop, bench/workloads/halffree.c)
gets its section here too, whenever a run includes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from . import exp_jvm, exp_nginx, exp_redis, plots, redis_bench, stats
from .workloads import EXPERIMENTS

# Kept out of the headline geomeans. wl_halffree is not: it is an ordinary timed
# workload that only gets an extra section here.
NAMES = {w.name for w in EXPERIMENTS}

RUNNERS: dict[str, Callable] = {
    "redis_mixed": exp_redis.run_mixed,
    "redis_frag": exp_redis.run_frag,
    "nginx": exp_nginx.run,
    "jvm": exp_jvm.run,
}


def unavailable(kind: str) -> str | None:
    """Why an experiment cannot run here (a missing program), or None."""
    if kind in ("redis_mixed", "redis_frag") and redis_bench.tools() is None:
        return ("redis-server/redis-benchmark/redis-cli not installed: run "
                "scripts/install-deps.sh (or: apt-get install redis-server redis-tools)")
    if kind == "nginx" and exp_nginx.tools() is None:
        return "nginx or wrk not installed: run scripts/install-deps.sh (apt-get install nginx wrk)"
    if kind == "jvm" and exp_jvm.tools() is None:
        return ("java/javac not installed: run scripts/install-deps.sh "
                "(apt-get install openjdk-17-jdk-headless)")
    return None


def run(kind: str, alloc, preset: str, timeout: float, env: dict, out_dir: Path):
    if kind == "jvm":
        return exp_jvm.run(alloc, preset, timeout, env, out_dir)
    return RUNNERS[kind](alloc, preset, timeout, env)


def core_only(agg: Mapping) -> dict:
    """The aggregate without the experiments: what the headline geomeans run over."""
    return {k: v for k, v in agg.items() if k not in NAMES}


# ---- figures per allocator -------------------------------------------------------------

def _results(results: Mapping, wl: str, alloc: str) -> list[Mapping]:
    return [r["result"] for r in results["runs"] if r["workload"] == wl and
            r["allocator"] == alloc and r["status"] == "ok" and r.get("result")]


def _dig(d: Mapping, path: str):
    for k in path.split("."):
        if not isinstance(d, Mapping) or k not in d:
            return None
        d = d[k]
    return d if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def figure(results: Mapping, wl: str, path: str) -> dict:
    """{allocator: spread of the figure at `path` (dotted) over its ok rounds}."""
    out = {}
    for a in results["config"]["allocators"]:
        vals = [v for v in (_dig(x, path) for x in _results(results, wl, a)) if v is not None]
        sp = stats.spread(vals)
        if sp:
            out[a] = sp
    return out


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    if unit == "MiB":
        return f"{v / 1024:.0f}" if v >= 100 * 1024 else f"{v / 1024:.1f}"
    if unit == "KiB":  # exact: redis_frag's allocators differ by tenths of a percent
        return f"{v:,.0f}"
    if unit == "ms":
        return f"{v:.2f}" if v < 10 else f"{v:.1f}"
    if unit == "ns-ms":
        return f"{v / 1e6:.2f}"
    if unit == "x":
        return f"{v:.2f}"
    if unit == "s":
        return f"{v:.2f}"
    if unit == "B":
        return f"{v / 1048576:.1f}"
    if unit == "k/s":
        return f"{v / 1e3:.1f}"
    return f"{v:.0f}"


def cell(sp: Mapping | None, unit: str) -> str:
    """`median (min–max)` of a spread, or the median alone for one round."""
    if not sp:
        return "–"
    m = _fmt(sp["median"], unit)
    if sp["n"] < 2:
        return m
    return f"{m} ({_fmt(sp['min'], unit)}–{_fmt(sp['max'], unit)})"


def _ratio_col(fig: Mapping, lower_is_better: bool = True) -> dict:
    """strata's median over each peer's (and each allocator over the best), as text."""
    med = {a: sp["median"] for a, sp in fig.items() if sp.get("median")}
    if not med:
        return {}
    best = min(med.values()) if lower_is_better else max(med.values())
    return {a: f"{v / best:.2f}×" for a, v in med.items()}


def table(results: Mapping, wl: str, cols: list[tuple[str, str, str, bool]]) -> str:
    """cols: (header, dotted path in RESULT, unit, lower is better). One row per
    allocator: median (min–max over rounds); the first column also gets ×best."""
    allocs = [a for a in results["config"]["allocators"] if _results(results, wl, a)]
    if not allocs:
        return ""
    figs = [figure(results, wl, p) for _, p, _, _ in cols]
    rel = _ratio_col(figs[0], cols[0][3])
    shown = {"B": "MiB", "ns-ms": "ms"}
    header = ["allocator"] + [f"{h} ({shown.get(u, u)})" if u not in ("", "x") else h
                              for h, _, u, _ in cols] + [f"{cols[0][0]} ×best"]
    rows = []
    for a in allocs:
        rows.append([a] + [cell(f.get(a), u) for f, (_, _, u, _) in zip(figs, cols)]
                    + [rel.get(a, "–")])
    return _md(header, rows)


def _md(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def _vs_strata(results: Mapping, wl: str, path: str, lower_is_better: bool = True) -> str:
    """One sentence: strata's median figure against each peer's, as ratios."""
    fig = figure(results, wl, path)
    if "strata" not in fig:
        return ""
    s = fig["strata"]["median"]
    parts = []
    for a, sp in fig.items():
        if a != "strata" and sp["median"]:
            parts.append(f"{s / sp['median']:.2f}× {a}")
    return ", ".join(parts)


def _claim(results: Mapping, wl: str, path: str, a: str, b: str, what: str) -> str:
    """"<what>: a is X× b" from the medians, for the articles' claims; "" if either is
    missing."""
    fig = figure(results, wl, path)
    if a not in fig or b not in fig or not fig[b]["median"]:
        return ""
    return f"{what}: {a} {fig[a]['median'] / fig[b]['median']:.2f}× {b} in this run.\n"


# ---- sections --------------------------------------------------------------------------

MIXED_COLS = [("req/s", "rps", "k/s"), ("p50", "p50_ms", "ms"), ("p99", "p99_ms", "ms"),
              ("p99.9", "p999_ms", "ms")]


def _mixed_section(results: Mapping, out: Path, draw: bool) -> str:
    L = []
    for c in exp_redis.MIXED_CLIENTS:
        t = table(results, "redis_mixed",
                  [(h, f"by_clients.{c}.{k}", u, h != "req/s") for h, k, u in
                   [MIXED_COLS[3], *MIXED_COLS[:3]]])
        if t:
            L.append(f"**{c} clients** ({_runs_text(results, 'redis_mixed')}):\n\n{t}\n")
    if not L:
        return ""
    L.insert(0, f"Key space {exp_redis.MIXED_KEYS.get(results['config']['preset'])} keys "
                f"(pre-filled), {exp_redis.MIXED_VALUE}-byte values, "
                f"{exp_redis.MIXED_REQUESTS.get(results['config']['preset'])} requests per "
                "client count, half SET and half GET from two redis-benchmark processes "
                "running at once; percentiles of the merged distribution (ms).\n")
    top = exp_redis.MIXED_CLIENTS[-1]
    vs = _vs_strata(results, "redis_mixed", f"by_clients.{top}.p999_ms")
    if vs:
        L.append(f"strata's p99.9 at {top} clients: {vs}.\n")
    L.append(_claim(results, "redis_mixed", f"by_clients.{top}.p999_ms", "glibc", "jemalloc",
                    f"The article's claim (glibc's p99.9 far above jemalloc's at high "
                    f"concurrency), p99.9 at {top} clients"))
    if draw and _lines(out / "redis_mixed.png", results, "redis_mixed",
                       list(exp_redis.MIXED_CLIENTS),
                       [("p99.9 latency (ms)", "by_clients.{x}.p999_ms"),
                        ("throughput (k req/s)", "by_clients.{x}.rps")],
                       "clients", "Redis 50:50 SET/GET", scale=[1.0, 1e-3]):
        L.append("![Redis mixed load](redis_mixed.png)\n")
    return "\n".join(L)


FRAG_STAGES = (("loaded", "after the SETs"), ("deleted_half", "after DEL of half"),
               ("purged", "after MEMORY PURGE"))


def _frag_section(results: Mapping, out: Path, draw: bool) -> str:
    L = []
    for st, label in FRAG_STAGES:
        t = table(results, "redis_frag",
                  [("VmRSS", f"stages.{st}.vmrss_kb", "KiB", True),
                   ("used_memory", f"stages.{st}.used_memory", "B", True),
                   ("RSS / used_memory", f"stages.{st}.rss_per_used", "x", True),
                   ("ΔRSS / Δused_memory", f"stages.{st}.heap_per_used", "x", True),
                   ("mem_fragmentation_ratio", f"stages.{st}.mem_fragmentation_ratio", "x",
                    True)])
        if t:
            L.append(f"**{label}**:\n\n{t}\n")
    if not L:
        return ""
    keys = exp_redis.FRAG_KEYS.get(results["config"]["preset"], 0)
    L.insert(0, f"{keys:,} keys `key:%012d` with {exp_redis.FRAG_VALUE}-byte values, loaded by "
                "pipelined SET; then DEL of a random half (seeded), then MEMORY PURGE. "
                "Each reading waits 350 ms so that Redis's cron has refreshed its RSS "
                "sample (mem_fragmentation_ratio divides a 100 ms-old RSS by the live "
                "used_memory); \"RSS / used_memory\" is the harness's own ratio, VmRSS "
                "and used_memory read together. used_memory counts malloc_usable_size, "
                "so it differs by allocator; the RSS column is the one to compare.\n")
    vs = _vs_strata(results, "redis_frag", "stages.loaded.vmrss_kb")
    if vs:
        L.append(f"strata's RSS after loading: {vs}.\n")
    fr = figure(results, "redis_frag", "stages.loaded.rss_per_used")
    if fr:
        L.append("Published mem_fragmentation_ratio on this shape: tcmalloc 1.01, jemalloc "
                 "1.02, glibc 1.31; here (RSS / used_memory after the SETs): "
                 + ", ".join(f"{a} {sp['median']:.2f}" for a, sp in fr.items())
                 + ". Every RSS includes the empty server's (about 12 MiB: binary, libraries, "
                 "stacks); ΔRSS / Δused_memory compares what the data added to each over the "
                 "empty server.\n")
    if draw and _bars(out / "redis_frag.png", results, "redis_frag",
                      [(lab, f"stages.{st}.vmrss_kb") for st, lab in FRAG_STAGES],
                      "VmRSS (MiB)", "Redis: 1M small values", scale=1 / 1024):
        L.append("![Redis fragmentation](redis_frag.png)\n")
    return "\n".join(L)


def _nginx_section(results: Mapping, out: Path, draw: bool) -> str:
    L = []
    for case in ("static", "gzip"):
        t = table(results, "nginx",
                  [("req/s", f"cases.{case}.rps", "k/s", False),
                   ("p50", f"cases.{case}.latency_ns.p50", "ns-ms", True),
                   ("p90", f"cases.{case}.latency_ns.p90", "ns-ms", True),
                   ("p99", f"cases.{case}.latency_ns.p99", "ns-ms", True)])
        if t:
            L.append(f"**{case}** (latency in ms):\n\n{t}\n")
    t = table(results, "nginx", [("workers' RSS", "memory.rss_kb", "MiB", True),
                                 ("workers' peak RSS", "memory.hwm_kb", "MiB", True)])
    if not L and not t:
        return ""
    if t:
        L.append(f"**Memory** (sum over the {exp_nginx.WORKERS} workers):\n\n{t}\n")
    L.insert(0, f"wrk, {exp_nginx.WRK_THREADS} threads, {exp_nginx.CONNECTIONS} connections, "
                f"{exp_nginx.DURATION.get(results['config']['preset'])} s per case: a "
                f"{exp_nginx.STATIC_BYTES // 1024} KiB static file (sendfile) and a "
                f"{exp_nginx.GZIP_BYTES // 1024} KiB HTML page gzip-compressed per "
                "request.\n")
    if draw and _bars(out / "nginx.png", results, "nginx",
                      [("static file (k req/s)", "cases.static.rps"),
                       ("gzip page (k req/s)", "cases.gzip.rps")],
                      "", "nginx throughput, higher is better", scale=1e-3, panels=True):
        L.append("![nginx](nginx.png)\n")
    return "\n".join(L)


def _jvm_section(results: Mapping, out: Path, draw: bool) -> str:
    t = table(results, "jvm", [("peak RSS", "peak_rss_kb", "MiB", True),
                               ("final RSS", "final_rss_kb", "MiB", True),
                               ("64 MiB arena heaps", "arena_heaps", "", True),
                               ("time", "seconds", "s", True)])
    if not t:
        return ""
    L = [f"{exp_jvm.THREADS} threads, {exp_jvm.ITERS.get(results['config']['preset'])} "
         "iterations each (Deflater + Inflater of 4 KiB, one direct ByteBuffer of 1-32 KiB "
         f"kept in a window of 16), `java {' '.join(exp_jvm.JAVA_OPTS)}`; final RSS after "
         "System.gc(). Arena heaps: glibc's per-thread heaps seen in /proc/PID/maps (the "
         "maximum over samples every 50 ms).\n", t + "\n"]
    vs = _vs_strata(results, "jvm", "peak_rss_kb")
    if vs:
        L.append(f"strata's peak RSS: {vs}.\n")
    L.append(_claim(results, "jvm", "peak_rss_kb", "glibc", "jemalloc",
                    "The article's claim (glibc's per-thread arenas blow RSS up), peak RSS"))
    if draw and _bars(out / "jvm.png", results, "jvm",
                      [("peak RSS", "peak_rss_kb"), ("final RSS", "final_rss_kb")],
                      "MiB", "JVM, 100 threads of native allocation", scale=1 / 1024):
        L.append("![JVM](jvm.png)\n")
    return "\n".join(L)


def _drift_section(results: Mapping, out: Path, draw: bool) -> str:
    t = table(results, "wl_drift",
              [("heap RSS / live at the end", "heap_per_live", "x", True),
               ("mean, 2nd half", "frag_mean_2nd_half", "x", True),
               ("max, 2nd half", "frag_max_2nd_half", "x", True),
               ("peak RSS", "peak_rss_kb", "MiB", True)])
    if not t:
        return ""
    L = ["Fragmentation is (RSS - RSS at start - the harness's bookkeeping) / live bytes: "
         "1.00 is perfect. The run lasts seconds, so freed pages still inside an "
         "allocator's decay window (10 s by default for jemalloc and strata) count here; "
         "`strata bench --sweep dirty_decay_ms=0,10000 --only drift` separates the two.\n",
         t + "\n"]
    L.append(_claim(results, "wl_drift", "frag_mean_2nd_half", "glibc", "jemalloc",
                    "The article's claim (glibc ~25% over days, jemalloc under 5%), mean "
                    "fragmentation over the 2nd half"))
    if draw and _series(out / "drift_frag.png", results, "wl_drift", "frag_series",
                        "heap RSS / live bytes", "wl_drift: fragmentation over the run"):
        L.append("![drift fragmentation](drift_frag.png)\n")
    return "\n".join(L)


def _halffree_section(results: Mapping, out: Path, draw: bool) -> str:
    t = table(results, "wl_halffree", [("time", "seconds", "s", True),
                                       ("peak RSS", "peak_rss_kb", "MiB", True)])
    if not t:
        return ""
    L = [f"The half-free loop (time and peak RSS, {_runs_text(results, 'wl_halffree')}):\n",
         t + "\n"]
    if draw and _bars(out / "halffree.png", results, "wl_halffree",
                      [("time (s)", "seconds"), ("peak RSS (MiB)", "peak_rss_kb")], "",
                      "half-free loop", scale=[1.0, 1 / 1024], panels=True):
        L.append("![half-free loop](halffree.png)\n")
    return "\n".join(L)


SECTIONS = {"wl_drift": _drift_section, "redis_mixed": _mixed_section,
            "redis_frag": _frag_section, "nginx": _nginx_section, "jvm": _jvm_section,
            "wl_halffree": _halffree_section}


def section(wl: str, results: Mapping, out: Path, draw: bool) -> str:
    """The experiment's tables and plot for report.md ("" for other workloads)."""
    fn = SECTIONS.get(wl)
    return fn(results, out, draw and plots.available()) if fn else ""


def summary(results: Mapping) -> str:
    """Bullets: strata's rank and ratio to the best peer on each experiment's headline
    figure (lower is better unless noted)."""
    heads = [("redis_mixed", f"by_clients.{exp_redis.MIXED_CLIENTS[-1]}.p999_ms",
              f"Redis p99.9 at {exp_redis.MIXED_CLIENTS[-1]} clients", True),
             ("redis_mixed", f"by_clients.{exp_redis.MIXED_CLIENTS[-1]}.rps",
              f"Redis throughput at {exp_redis.MIXED_CLIENTS[-1]} clients", False),
             ("redis_frag", "stages.loaded.vmrss_kb", "Redis RSS after the small-value SETs", True),
             ("redis_frag", "stages.loaded.rss_per_used", "Redis RSS/used_memory after the SETs",
              True),
             ("redis_frag", "stages.deleted_half.vmrss_kb", "Redis RSS after DEL of half", True),
             ("nginx", "cases.static.rps", "nginx static req/s", False),
             ("nginx", "cases.gzip.rps", "nginx gzip req/s", False),
             ("nginx", "memory.rss_kb", "nginx workers' RSS", True),
             ("jvm", "peak_rss_kb", "JVM peak RSS", True),
             ("jvm", "final_rss_kb", "JVM final RSS", True),
             ("wl_drift", "heap_per_live", "drift: fragmentation at the end", True),
             ("wl_halffree", "seconds", "half-free loop time", True)]
    lines = []
    for wl, path, label, low in heads:
        fig = {a: sp["median"] for a, sp in figure(results, wl, path).items()}
        if "strata" not in fig or len(fig) < 2:
            continue
        peers = {a: v for a, v in fig.items() if a != "strata"}
        best_a = (min if low else max)(peers, key=peers.get)
        r = fig["strata"] / peers[best_a] if peers[best_a] else None
        rank = sorted(fig.values(), reverse=not low).index(fig["strata"]) + 1
        if r is None:
            continue
        word = "leads" if rank == 1 else f"is #{rank} of {len(fig)}"
        lines.append(f"- {label}: strata {word} ({r:.2f}× the best peer, {best_a}"
                     f"{'; higher is better' if not low else ''}).")
    return "\n".join(lines)


# ---- plots -------------------------------------------------------------------------------

def _runs_text(results: Mapping, wl: str) -> str:
    """"1 run" / "median of 3 runs, min–max in brackets" for an experiment's tables."""
    ns = [len(_results(results, wl, a)) for a in results["config"]["allocators"]]
    phrase = plots.runs_phrase(ns)
    return phrase if max(ns, default=0) <= 1 else phrase + ", min–max in brackets"


def _bars(path: Path, results: Mapping, wl: str, groups: list[tuple[str, str]],
          ylabel: str, title: str, scale: float | list[float] = 1.0,
          panels: bool = False) -> bool:
    """Bars of the median of each figure, one per allocator, with min-max error bars
    where an allocator has two or more differing runs (none for a single run: its label
    says "1 run"). Grouped (one group per figure on a shared axis, legend above the
    plot) or, with `panels`, one panel per figure on its own axis with the allocators
    along x (figures of different scales, or a single figure)."""
    allocs = [a for a in results["config"]["allocators"] if _results(results, wl, a)]
    if not allocs:
        return False
    scales = scale if isinstance(scale, list) else [scale] * len(groups)
    figs = [figure(results, wl, p) for _, p in groups]
    ns = [sp["n"] for f in figs for sp in f.values()]
    runs = plots.runs_phrase(ns)
    spread = any(plots.has_spread(sp) for f in figs for sp in f.values())
    note = runs + (", min-max" if spread else "")
    plt = plots._plt()

    def err(sps, k):
        lo = [(sp["median"] - sp["min"]) * k if plots.has_spread(sp) else 0 for sp in sps]
        hi = [(sp["max"] - sp["median"]) * k if plots.has_spread(sp) else 0 for sp in sps]
        return [lo, hi] if any(lo) or any(hi) else None

    if panels:
        fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups) + 0.6, 4.0),
                                 dpi=100, squeeze=False)
        for ax, (label, _), f, k in zip(axes[0], groups, figs, scales):
            names = [a for a in allocs if a in f]
            sps = [f[a] for a in names]
            ax.bar(range(len(names)), [sp["median"] * k for sp in sps], 0.7,
                   yerr=err(sps, k), capsize=3,
                   color=[plots.COLORS.get(a) for a in names])
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=20, ha="right", fontsize=9)
            ax.set_ylabel(label)
            ax.grid(axis="y", alpha=0.3)
        fig.suptitle(f"{title} ({note})", fontsize=11)
    else:
        fig, ax = plt.subplots(figsize=(8.0, 4.4), dpi=100)
        width = 0.8 / len(allocs)
        for i, a in enumerate(allocs):
            xs, sps, ks = [], [], []
            for j, f in enumerate(figs):
                if a in f:
                    xs.append(j - 0.4 + width * (i + 0.5))
                    sps.append(f[a])
                    ks.append(scales[j])
            ax.bar(xs, [sp["median"] * k for sp, k in zip(sps, ks)], width,
                   yerr=err(sps, ks[0] if ks else 1.0), capsize=2, label=a,
                   color=plots.COLORS.get(a))
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([g for g, _ in groups])
        ax.set_ylabel(f"{ylabel} ({note})")
        ax.legend(fontsize=8, ncol=len(allocs), loc="lower center",
                  bbox_to_anchor=(0.5, 1.0), frameon=False)
        ax.set_title(title, pad=24)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _lines(path: Path, results: Mapping, wl: str, xs: list, panels: list[tuple[str, str]],
           xlabel: str, title: str, scale: list[float]) -> bool:
    """One panel per figure, x = xs (log scale), a line per allocator (median) with a
    min-max band."""
    allocs = [a for a in results["config"]["allocators"] if _results(results, wl, a)]
    if not allocs:
        return False
    plt = plots._plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(10, 4.0), dpi=110)
    for ax, (label, tmpl), k in zip(axes, panels, scale):
        for a in allocs:
            pts = [(x, figure(results, wl, tmpl.format(x=x)).get(a)) for x in xs]
            pts = [(x, sp) for x, sp in pts if sp]
            if not pts:
                continue
            ax.plot([x for x, _ in pts], [sp["median"] * k for _, sp in pts], marker="o",
                    label=a, color=plots.COLORS.get(a), linewidth=1.4)
            if any(plots.has_spread(sp) for _, sp in pts):
                ax.fill_between([x for x, _ in pts], [sp["min"] * k for _, sp in pts],
                                [sp["max"] * k for _, sp in pts], color=plots.COLORS.get(a),
                                alpha=0.15)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    ns = [len(_results(results, wl, a)) for a in allocs]
    fig.suptitle(f"{title} ({plots.runs_phrase(ns)}"
                 + (", band: min-max)" if max(ns) > 1 else ")"))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _series(path: Path, results: Mapping, wl: str, key: str, ylabel: str, title: str) -> bool:
    """A line per allocator: its representative round's [[t, v], ...] series."""
    plt = plots._plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    drawn = 0
    for a in results["config"]["allocators"]:
        cands = [r for r in results["runs"] if r["workload"] == wl and r["allocator"] == a
                 and r["status"] == "ok" and (r.get("result") or {}).get(key)]
        rep = plots.representative_run(cands)
        if rep is None:
            continue
        pts = [p for p in rep["result"][key] if isinstance(p, (list, tuple)) and len(p) == 2
               and isinstance(p[1], (int, float))]
        if not pts:
            continue
        xs = [100.0 * (k + 1) / len(pts) for k in range(len(pts))]
        ax.plot(xs, [p[1] for p in pts], label=a, color=plots.COLORS.get(a),
                linestyle=plots.LINESTYLES[drawn % len(plots.LINESTYLES)],
                linewidth=2.0 if a == "strata" else 1.4)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return False
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    # Sampled at fixed points of the work, the same under every allocator.
    ax.set_xlabel("progress through the workload (%)")
    ax.set_xlim(0, 100)
    ax.set_ylabel(ylabel)
    ns = [len(_results(results, wl, a)) for a in results["config"]["allocators"]]
    ax.set_title(f"{title} ({'1 run' if max(ns) <= 1 else 'the median-time run of each'})")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True

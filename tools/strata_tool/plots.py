"""PNG plots of a bench run with matplotlib's Agg backend (no display needed): time and
peak-RSS ratios per workload, RSS over time for the workloads that sample it, and
Redis memory. Without matplotlib, available() is False and the report says how to
install it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from . import analyze

class _Colors(dict):
    """The built-in allocators' colours; a peer given by path (name=PATH) gets the next
    unused one of EXTRA, the same for the whole report."""
    EXTRA = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939")

    def get(self, key, default=None):
        if key not in self:
            used = set(self.values())
            free = [c for c in self.EXTRA if c not in used]
            self[key] = free[0] if free else default
        return self[key]


COLORS = _Colors({"glibc": "#7f7f7f", "jemalloc": "#1f77b4", "tcmalloc": "#2ca02c",
                  "mimalloc": "#ff7f0e", "strata": "#d62728"})
INSTALL_LINE = ("plots skipped: matplotlib is not installed "
                "(python3 -m pip install matplotlib, or run scripts/install-deps.sh)")


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def runs_phrase(ns) -> str:
    """What a figure is, from the number of runs behind each value: "1 run", "median of
    3 runs", "median of 1-3 runs" (a median of one run is that run, so never called one)."""
    ns = [int(n) for n in ns if n]
    if not ns:
        return "no runs"
    lo, hi = min(ns), max(ns)
    if hi <= 1:
        return "1 run"
    if lo == hi:
        return f"median of {hi} runs"
    return f"median of {lo}-{hi} runs"


def has_spread(sp: Mapping | None) -> bool:
    """A min-max worth drawing: at least two runs that differ."""
    return bool(sp) and sp.get("n", 0) >= 2 and sp["max"] > sp["min"]


def ratio_bars(path: Path, table: Mapping, allocators: list[str], baseline: str,
               what: str, runs: Mapping[str, int] | None = None) -> bool:
    """One row per workload, a horizontal bar per allocator from 1 (the baseline) to its
    ratio, on a log axis so that 4x slower and 4x faster are as long and one outlier
    cannot flatten the rest. `runs` ({workload: runs behind its medians}) labels each
    row, so a single run is never read as a median. Sized to be read at 100% (about
    900 px wide)."""
    import math
    wls = [w for w in table if any(c.get("vs_baseline") for a, c in table[w].items()
                                   if a != baseline)]
    peers = [a for a in allocators if a != baseline]
    if not wls or not peers:
        return False
    plt = _plt()
    row_h = 0.13 * len(peers) + 0.12
    fig, ax = plt.subplots(figsize=(9.0, max(2.8, 1.5 + row_h * len(wls))), dpi=100)
    h = 0.8 / len(peers)
    vals = []
    for i, a in enumerate(peers):
        ys, ws, ls = [], [], []
        for j, w in enumerate(wls):
            r = table[w].get(a, {}).get("vs_baseline")
            if r:
                ys.append(j - 0.4 + h * (i + 0.5))
                ls.append(1.0)
                ws.append(r)
                vals.append(r)
        ax.barh(ys, [w - 1.0 for w in ws], h * 0.92, left=ls, label=a, color=COLORS.get(a),
                edgecolor="black" if a == "strata" else "none", linewidth=0.6)
    lo, hi = min(vals + [1.0]), max(vals + [1.0])
    span = max(hi / 1.0, 1.0 / lo)
    ax.set_xscale("log")
    ax.set_xlim(min(lo, 1 / span) / 1.15, max(hi, span) * 1.15)
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10, 20)
             if min(lo, 1 / span) / 1.15 <= t <= max(hi, span) * 1.15]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}×" for t in ticks])
    ax.minorticks_off()
    ax.axvline(1.0, color="black", linewidth=1.0)
    n_all = [runs[w] for w in wls if w in runs] if runs else []
    # Rows say their own run count only where the counts differ; the title says it once.
    mixed = len(set(n_all)) > 1
    ax.set_yticks(range(len(wls)))
    ax.set_yticklabels([f"{w} ({'1 run' if runs[w] == 1 else f'{runs[w]} runs'})"
                        if mixed and w in runs else w for w in wls], fontsize=9)
    ax.set_ylim(len(wls) - 0.5, -0.5)
    ax.set_xlabel(f"{what} / {baseline}'s {what} (log scale; left of 1× is better)")
    ax.set_title(f"{what} relative to {baseline}"
                 + (f" ({runs_phrase(n_all)} per workload)" if n_all else ""), fontsize=11,
                 pad=24)
    ax.legend(fontsize=9, ncol=len(peers), loc="lower center", bbox_to_anchor=(0.5, 1.0),
              frameon=False, handlelength=1.2)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def representative_run(runs: list[Mapping]) -> Mapping | None:
    """Of the successful runs, the one with the median time (the lower middle for an
    even count), so a plotted series is a typical round, not the best or worst."""
    ok = [r for r in runs if r.get("status") == "ok" and analyze.run_time(r) is not None]
    if not ok:
        return None
    ok.sort(key=analyze.run_time)
    return ok[(len(ok) - 1) // 2]


LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (1, 1)))


def _label_ends(ax, ends: list[tuple[float, float, str, str]], gap_px: float = 11.0) -> None:
    """Name each line just right of the axes at the height where it ends, pushed apart
    to stay legible; lines ending within 1% of each other share one label ("a ≈ b"),
    so two that coincide are both named."""
    ends = sorted(ends)
    groups: list[list] = []
    for e in ends:
        if groups and e[0] <= groups[-1][-1][0] * 1.01 + 1e-9:
            groups[-1].append(e)
        else:
            groups.append([e])
    to_px = ax.transData.transform
    from_px = ax.transData.inverted().transform
    x_right = ax.get_xlim()[1]
    placed: list[float] = []
    for g in groups:
        y_px = to_px((x_right, g[-1][0]))[1]
        if placed and y_px < placed[-1] + gap_px:
            y_px = placed[-1] + gap_px
        placed.append(y_px)
        y = from_px((0, y_px))[1]
        ax.annotate(" ≈ ".join(n for _, _, n, _ in g), (x_right, y), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8, annotation_clip=False,
                    color=g[0][3] if len(g) == 1 else "black")


def rss_series(path: Path, workload: str, runs: list[Mapping], allocators: list[str],
               x_axis: str = "time") -> bool:
    """RSS over the run, one line per allocator (its median-time run). x_axis "time":
    seconds (a workload that samples on a clock, such as an idle period); "progress":
    the sample's position in the workload (samples taken at the same points of the work
    under every allocator, so a faster allocator's curve does not end earlier). Each
    allocator has its own line style and its last value in the legend, so lines that
    coincide stay told apart; a log axis when the values span more than 50x."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.0, 4.4), dpi=100)
    drawn, ns, allv = 0, [], []
    ends: list[tuple[float, float, str, str]] = []     # (y, x, name, colour) of line ends
    live_drawn = False
    for i, a in enumerate(allocators):
        cands = [r for r in runs if r["workload"] == workload and r["allocator"] == a
                 and (r.get("result") or {}).get("rss_series")]
        rep = representative_run(cands)
        if rep is None:
            continue
        pts = [p for p in rep["result"]["rss_series"]
               if isinstance(p, (list, tuple)) and len(p) >= 2]
        if not pts:
            continue
        ns.append(len([r for r in cands if r.get("status") == "ok"]))
        xs = ([p[0] for p in pts] if x_axis == "time"
              else [100.0 * (k + 1) / len(pts) for k in range(len(pts))])
        ys = [p[1] / 1024.0 for p in pts]
        allv += [y for y in ys if y > 0]
        ends.append((ys[-1], xs[-1], a, COLORS.get(a)))
        ax.plot(xs, ys, label=f"{a} (end {ys[-1]:.0f} MiB)", color=COLORS.get(a),
                linestyle=LINESTYLES[i % len(LINESTYLES)],
                linewidth=2.2 if a == "strata" else 1.6)
        drawn += 1
        live = rep["result"].get("live_kb_series")
        if not live_drawn and isinstance(live, list) and len(live) == len(pts):
            # The live data is the same under every allocator (same seed): draw it once.
            ax.plot(xs, [v / 1024.0 for v in live], label="live data",
                    color="black", linestyle=(0, (2, 2)), linewidth=1.0)
            live_drawn = True
    if not drawn:
        plt.close(fig)
        return False
    if x_axis == "time":
        ax.set_xlabel("time (s)")
    else:
        ax.set_xlabel("progress through the workload (%; the same points under every "
                      "allocator)")
        ax.set_xlim(0, 100)
    if allv and max(allv) / min(allv) > 50:
        from matplotlib.ticker import FuncFormatter
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_ylabel("RSS (MiB, log scale)")
    else:
        ax.set_ylim(bottom=0)
        ax.set_ylabel("RSS (MiB)")
    which = "1 run" if max(ns) <= 1 else "the median-time run of each"
    ax.set_title(f"{workload}: resident memory ({which})")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3,
              frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.subplots_adjust(right=0.84)
    _label_ends(ax, ends)
    fig.savefig(path)
    plt.close(fig)
    return True


def redis_memory(path: Path, cells: Mapping[str, Mapping], allocators: list[str],
                 n_runs: int = 1) -> bool:
    """Bars per allocator: used_memory and RSS after loading, RSS after FLUSHALL (MiB)."""
    groups = ("used_memory", "RSS after load", "RSS after FLUSHALL")
    data = {a: cells[a] for a in allocators if a in cells}
    if not data:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    width = 0.8 / len(data)
    for i, (a, c) in enumerate(data.items()):
        vals = [c.get("used_memory_mib"), c.get("rss_load_mib"), c.get("rss_flush_mib")]
        xs = [j - 0.4 + width * (i + 0.5) for j, v in enumerate(vals) if v is not None]
        ys = [v for v in vals if v is not None]
        ax.bar(xs, ys, width, label=a, color=COLORS.get(a))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(f"MiB ({runs_phrase([n_runs])})")
    ax.set_title("Redis memory: after loading, and 1 s after FLUSHALL")
    ax.legend(fontsize=8, ncol=len(data), loc="lower center", bbox_to_anchor=(0.5, 1.0),
              frameon=False)
    ax.set_title(ax.get_title(), pad=22)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True

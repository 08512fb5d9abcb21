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


def ratio_bars(path: Path, table: Mapping, allocators: list[str], baseline: str,
               what: str) -> bool:
    """Grouped bars: one group per workload, one bar per allocator, value / baseline."""
    wls = [w for w in table if any(c.get("vs_baseline") for c in table[w].values())]
    if not wls:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(wls) + 2), 4.2), dpi=110)
    width = 0.8 / max(1, len(allocators))
    for i, a in enumerate(allocators):
        xs, ys = [], []
        for j, w in enumerate(wls):
            r = table[w].get(a, {}).get("vs_baseline")
            if r:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(r)
        ax.bar(xs, ys, width, label=a, color=COLORS.get(a))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(wls)))
    ax.set_xticklabels(wls, rotation=30, ha="right")
    ax.set_ylabel(f"{what} / {baseline} (lower is better)")
    ax.set_title(f"{what} relative to {baseline}, median of rounds")
    ax.legend(fontsize=8, ncol=min(5, len(allocators)))
    ax.grid(axis="y", alpha=0.3)
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


def rss_series(path: Path, workload: str, runs: list[Mapping], allocators: list[str]) -> bool:
    """RSS over time, one line per allocator (its representative round)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    drawn = 0
    live_drawn = False
    for a in allocators:
        cands = [r for r in runs if r["workload"] == workload and r["allocator"] == a
                 and (r.get("result") or {}).get("rss_series")]
        rep = representative_run(cands)
        if rep is None:
            continue
        pts = [p for p in rep["result"]["rss_series"]
               if isinstance(p, (list, tuple)) and len(p) >= 2]
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] / 1024.0 for p in pts], label=a,
                color=COLORS.get(a), linewidth=1.4)
        drawn += 1
        live = rep["result"].get("live_kb_series")
        if not live_drawn and isinstance(live, list) and len(live) == len(pts):
            # The live data is the same under every allocator (same seed): draw it once.
            ax.plot([p[0] for p in pts], [v / 1024.0 for v in live], label="live data",
                    color="black", linestyle="--", linewidth=1.0)
            live_drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("time (s)")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title(f"{workload}: resident memory over time")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def redis_memory(path: Path, cells: Mapping[str, Mapping], allocators: list[str]) -> bool:
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
    ax.set_ylabel("MiB (median of rounds)")
    ax.set_title("Redis memory: after loading, and 1 s after FLUSHALL")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True

"""`strata bench --sweep KEY=V1,V2,...`: a tuning sweep. Runs the chosen workloads
(`--only`, default wl_server) under strata and jemalloc (both read MALLOC_CONF with the
same option names) once per value, in interleaved rounds (round > value > allocator),
and writes sweep.md with a table (median time and peak RSS, min-max over rounds) and a
plot of time and RSS against the setting per workload.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Mapping

from . import allocators as al
from . import plots, runner, stats, sysinfo
from .workloads import select

SCHEMA = "strata-bench-sweep/1"
SWEEP_ALLOCATORS = ("jemalloc", "strata")
DEFAULT_WORKLOAD = "wl_server"
_SIZE = re.compile(r"^(\d+)([kKmMgG]?)$")


def _int_range(lo: int, hi: int | None):
    def check(v: str) -> int:
        if not re.fullmatch(r"-?\d+", v):
            raise ValueError
        n = int(v)
        if n < lo or (hi is not None and n > hi):
            raise ValueError
        return n
    return check


def _size_max(hi: int):
    def check(v: str) -> int:
        m = _SIZE.match(v)
        if not m:
            raise ValueError
        n = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]
        if n > hi:
            raise ValueError
        return n
    return check


# Option -> (validator, accepted values in words). Both allocators accept these names.
KEYS = {
    "narenas": (_int_range(1, 4095), "an integer from 1 to 4095"),
    "tcache_max": (_size_max(8 << 20), "a size up to 8M (k/M suffixes allowed)"),
    "dirty_decay_ms": (_int_range(-1, None), "-1 (never by age) or a number of ms >= 0"),
}


def parse_spec(spec: str) -> tuple[str, list[str]]:
    """"narenas=1,2,8,32" -> ("narenas", ["1", "2", "8", "32"]); ValueError with a
    message naming the option and its accepted values."""
    if "=" not in spec:
        raise ValueError(f"--sweep {spec!r}: expected KEY=V1,V2,... with KEY one of "
                         f"{', '.join(KEYS)}")
    key, _, vals = spec.partition("=")
    key = key.strip()
    if key not in KEYS:
        raise ValueError(f"--sweep: unknown option {key!r} (accepted: {', '.join(KEYS)})")
    check, words = KEYS[key]
    values = [v.strip() for v in vals.split(",") if v.strip()]
    if not values:
        raise ValueError(f"--sweep {key}: no values given (accepted: {words})")
    for v in values:
        try:
            check(v)
        except ValueError:
            raise ValueError(f"--sweep: invalid value {v!r} for {key} (accepted: {words})") \
                from None
    if len(set(values)) != len(values):
        raise ValueError(f"--sweep {key}: a value is repeated")
    return key, values


def conf_value(key: str, value: str) -> str:
    """The MALLOC_CONF spelling of a checked value: sizes in plain bytes."""
    return str(KEYS[key][0](value))


CONF_COMPLAINTS = ("<jemalloc>: Invalid conf", "<strata>: conf: invalid",
                   "<strata>: conf: unknown")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(args, build: Path, repo: Path | None) -> int:
    try:
        key, values = parse_spec(args.sweep)
        wls = select(args.only or DEFAULT_WORKLOAD)
    except ValueError as ex:
        log(f"strata bench: {ex}")
        return 2
    bad = [w.name for w in wls if w.kind != "binary"]
    if bad:
        log(f"strata bench: --sweep runs workload binaries only, not {', '.join(bad)}")
        return 2
    wanted = [a for a in (args.allocators or ",".join(SWEEP_ALLOCATORS)).split(",") if a]
    try:
        allocs = [a for a in al.discover(build, wanted) if a.name in SWEEP_ALLOCATORS]
    except ValueError as ex:
        log(f"strata bench: {ex}")
        return 2
    for a in allocs:
        if not a.available:
            log(f"skip allocator {a.name}: {a.skip_reason}")
    allocs = [a for a in allocs if a.available]
    missing = [w.name for w in wls if not w.binary(build).is_file()]
    if not allocs or missing:
        log("strata bench: nothing to sweep" + (f" ({', '.join(missing)} not built: ninja -C "
                                                f"{build})" if missing else
                                                " (neither jemalloc nor strata available)"))
        return 2
    mode = "tiny" if args.tiny else "full" if args.full else "default"
    preset = args.preset or mode
    rounds = args.rounds or {"tiny": 1, "default": 3, "full": 5}[mode]
    timeout = args.timeout or {"tiny": 60.0, "default": 180.0, "full": 900.0}[preset]
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = (args.out or ((repo or Path.cwd()) / "bench" / "out" / f"sweep-{stamp}")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    base_env = dict(os.environ)
    base_env.pop("LD_PRELOAD", None)
    base_env.pop("MALLOC_CONF", None)
    base_env.pop("STRATA_CONF", None)
    results = {"schema": SCHEMA,
               "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
               "key": key, "values": values, "preset": preset, "rounds": rounds,
               "allocators": [a.name for a in allocs], "workloads": [w.name for w in wls],
               "machine": sysinfo.machine(), "runs": []}
    total = rounds * len(values) * len(allocs) * len(wls)
    done = 0
    t0 = time.monotonic()
    for rnd in range(1, rounds + 1):
        for w in wls:
            for v in values:
                for a in allocs:
                    done += 1
                    log(f"[sweep {done}/{total}] {w.name} {key}={v} {a.name} round {rnd}/{rounds}")
                    # Numbers only: jemalloc takes no k/M suffix.
                    env = dict(base_env, MALLOC_CONF=f"{key}:{conf_value(key, v)}")
                    argv = [str(w.binary(build)), "--preset", preset]
                    pr = runner.run_measured(argv, env, timeout, preload=a.preload())
                    rec = {"workload": w.name, "allocator": a.name, "value": v,
                           "round": rnd, "conf": env["MALLOC_CONF"], "wall_s": pr.wall_s,
                           "maxrss_kb": pr.maxrss_kb, "status": "ok", "reason": None,
                           "result": None}
                    complaint = next((ln for ln in pr.stderr.splitlines()
                                      if any(c in ln for c in CONF_COMPLAINTS)), None)
                    if not pr.ok:
                        rec["status"], rec["reason"] = "failed", pr.failure()
                    elif complaint:
                        rec["status"], rec["reason"] = "invalid", f"option refused: {complaint}"
                    else:
                        parsed = runner.parse_result(pr.stdout)
                        if parsed.data is None:
                            rec["status"], rec["reason"] = "invalid", parsed.error
                        rec["result"] = parsed.data
                    if rec["status"] != "ok":
                        rec["stderr_tail"] = pr.stderr_tail()
                        log(f"    {rec['status'].upper()}: {rec['reason']}")
                    results["runs"].append(rec)
    results["elapsed_s"] = time.monotonic() - t0
    results["aggregate"] = aggregate(results["runs"])
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n",
                                      encoding="utf-8")
    text = report(results, out, draw=not args.no_plots and plots.available())
    (out / "sweep.md").write_text(text, encoding="utf-8")
    print(text)
    print(f"report: {out / 'sweep.md'}")
    failed = [r for r in results["runs"] if r["status"] != "ok"]
    return 1 if failed else 0


def aggregate(runs: list[Mapping]) -> dict:
    """{workload: {allocator: {value: {"time_s": spread, "rss_kb": spread}}}}."""
    out: dict = {}
    for r in runs:
        if r["status"] != "ok":
            continue
        res = r["result"] or {}
        cell = out.setdefault(r["workload"], {}).setdefault(r["allocator"], {}) \
            .setdefault(r["value"], {"time": [], "rss": []})
        if isinstance(res.get("seconds"), (int, float)):
            cell["time"].append(float(res["seconds"]))
        if r.get("maxrss_kb"):
            cell["rss"].append(float(r["maxrss_kb"]))
    return {wl: {a: {v: {"time_s": stats.spread(c["time"]), "rss_kb": stats.spread(c["rss"])}
                     for v, c in per_v.items()} for a, per_v in per_a.items()}
            for wl, per_a in out.items()}


def _cell(sp: Mapping | None, kind: str) -> str:
    if not sp:
        return "–"
    f = (lambda x: f"{x:.3f}") if kind == "s" else (lambda x: f"{x / 1024:.1f}")
    if sp["n"] < 2:
        return f(sp["median"])
    return f"{f(sp['median'])} ({f(sp['min'])}–{f(sp['max'])})"


def report(results: Mapping, out: Path, draw: bool) -> str:
    key, values = results["key"], results["values"]
    L = [f"# strata bench --sweep {key}\n",
         f"{results['date']} · preset {results['preset']} · {results['rounds']} round(s) · "
         f"`MALLOC_CONF={key}:<value>` for both allocators\n"]
    for wl, per_a in results["aggregate"].items():
        L.append(f"## {wl}\n")
        header = [key] + [f"{a} {m}" for a in per_a for m in ("time (s)", "peak RSS (MiB)")]
        rows = [[v] + [_cell(per_a[a].get(v, {}).get(m), u) for a in per_a
                       for m, u in (("time_s", "s"), ("rss_kb", "kb"))] for v in values]
        L.append("| " + " | ".join(header) + " |")
        L.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        L += ["| " + " | ".join(r) + " |" for r in rows]
        ns = [sp["n"] for per_v in per_a.values() for cell in per_v.values()
              for sp in cell.values() if isinstance(sp, Mapping) and sp.get("n")]
        L.append(f"\n{plots.runs_phrase(ns).capitalize()}"
                 + (", min–max in brackets.\n" if max(ns, default=0) > 1 else ".\n"))
        if draw and _plot(out / f"sweep_{key}_{wl}.png", key, values, wl, per_a):
            L.append(f"![{wl} against {key}](sweep_{key}_{wl}.png)\n")
    fails = [r for r in results["runs"] if r["status"] != "ok"]
    if fails:
        L.append("## Failed runs\n")
        L += [f"- {r['workload']} {key}={r['value']} {r['allocator']} round {r['round']}: "
              f"{r['status']} - {r['reason']}" for r in fails]
    return "\n".join(L) + "\n"


def _plot(path: Path, key: str, values: list[str], wl: str, per_a: Mapping) -> bool:
    plt = plots._plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.0), dpi=110)
    xs = list(range(len(values)))
    for ax, (m, label, k) in zip(axes, (("time_s", "time (s)", 1.0),
                                        ("rss_kb", "peak RSS (MiB)", 1 / 1024))):
        for a, per_v in per_a.items():
            pts = [(x, per_v.get(v, {}).get(m)) for x, v in zip(xs, values)]
            pts = [(x, sp) for x, sp in pts if sp]
            if not pts:
                continue
            spread = any(plots.has_spread(sp) for _, sp in pts)
            ax.errorbar([x for x, _ in pts], [sp["median"] * k for _, sp in pts],
                        yerr=[[(sp["median"] - sp["min"]) * k for _, sp in pts],
                              [(sp["max"] - sp["median"]) * k for _, sp in pts]]
                        if spread else None,
                        marker="o", capsize=3, label=a, color=plots.COLORS.get(a))
        ax.set_xticks(xs)
        ax.set_xticklabels(values)
        ax.set_xlabel(key)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    ns = [sp["n"] for per_v in per_a.values() for cell in per_v.values()
          for sp in cell.values() if isinstance(sp, Mapping) and sp.get("n")]
    fig.suptitle(f"{wl}: time and peak RSS against {key} ({plots.runs_phrase(ns)}"
                 + (", min-max)" if max(ns, default=0) > 1 else ")"))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True

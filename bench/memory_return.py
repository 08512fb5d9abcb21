#!/usr/bin/env python3
"""memory_return.py - the memory-return figures, every allocator in one run:

  memreturn  wl_memreturn's RSS every 50 ms while idle after its 2 GiB burst, for glibc,
             jemalloc, tcmalloc, mimalloc and strata, and jemalloc and strata again with
             background_thread:true (MALLOC_CONF); plot of RSS over time
  idle       CPU time and wake-ups of strata's background thread once nothing is dirty
  server     wl_server's p99.9 latency with and without background threads
  container  the smallest memory cgroup limit each allocator survives under limit_phases,
             as a multiple of the live data and of one phase's peak
  thp        thp_random (random read-modify-writes over a 512 MiB block) under strata and
             jemalloc with thp:default and thp:always: time and AnonHugePages

  bench/memory_return.py [--build-dir build] [--out DIR] [--only memreturn,idle,server,container,thp]
                         [--preset default|tiny] [--live-mib 128]

Writes DIR/results.json, DIR/report.md and DIR/rss_memreturn.png (default
bench/results/<date>-memory-return). The container part needs root and a memory cgroup
(tests/container_limit.sh); it is reported as skipped otherwise.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from strata_tool.allocators import discover  # noqa: E402

BG = "background_thread:true"


def variants(build: Path) -> list[tuple[str, str | None, str | None]]:
    """(label, LD_PRELOAD, MALLOC_CONF) for each allocator, plus the background-thread runs."""
    out = []
    for a in discover(build):
        if not a.available:
            print(f"skip {a.name}: {a.skip_reason}", file=sys.stderr)
            continue
        out.append((a.name, a.preload(), None))
        if a.name in ("jemalloc", "strata"):
            out.append((f"{a.name}+bg", a.preload(), BG))
    return out


def env_for(preload: str | None, conf: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF", "STRATA_CONF")}
    if preload:
        env["LD_PRELOAD"] = preload
    if conf:
        env["MALLOC_CONF"] = conf
    return env


def result_line(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"no RESULT line in: {text[-500:]}")


def task_stats(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (utime+stime ticks, voluntary context switches) of every thread of pid."""
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                f = stat[stat.rindex(")") + 2:].split()
                ticks = int(f[11]) + int(f[12])
                vol = 0
                for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches"):
                        vol = int(line.split()[1])
                out[int(tid)] = (ticks, vol)
            except (OSError, ValueError):
                pass
    except OSError:
        pass
    return out


def run_memreturn(bin_dir: Path, preset: str, label: str, preload, conf, watch: bool = False) -> dict:
    """One wl_memreturn run; with watch, also the per-thread CPU and wake-ups over time."""
    p = subprocess.Popen([str(bin_dir / "wl_memreturn"), "--preset", preset], env=env_for(preload, conf),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = []
    if watch:
        def poll():
            while p.poll() is None:
                samples.append((time.monotonic(), task_stats(p.pid)))
                time.sleep(0.5)
        th = threading.Thread(target=poll)
        th.start()
    out, err = p.communicate(timeout=300)
    if watch:
        th.join()
    if p.returncode != 0:
        raise RuntimeError(f"{label}: wl_memreturn exit {p.returncode}: {err[-500:]}")
    r = result_line(out)
    r["label"] = label
    if watch:
        r["task_samples"] = [(t, {str(k): v for k, v in s.items()}) for t, s in samples]
    return r


def memreturn(args, build: Path, bin_dir: Path) -> dict:
    res = {}
    for label, preload, conf in variants(build):
        print(f"memreturn: {label} ...", file=sys.stderr)
        r = run_memreturn(bin_dir, args.preset, label, preload, conf)
        series = r["rss_series"]
        before = r["rss_before_kb"]
        # First sample from which RSS stays within 4 MiB of the pre-burst RSS.
        back = None
        for i, (t, kb) in enumerate(series):
            if all(v - before <= 4096 for _, v in series[i:]):
                back = t
                break
        res[label] = {"rss_before_kb": before, "rss_at_peak_kb": r["rss_at_peak_kb"],
                      "rss_after_free_kb": r["rss_after_free_kb"], "rss_end_kb": r["rss_end_kb"],
                      "rss_at_1s_kb": min(series, key=lambda s: abs(s[0] - 1.0))[1],
                      "rss_at_11s_kb": min(series, key=lambda s: abs(s[0] - 11.0))[1],
                      "seconds_back_within_4mib": back, "series": series}
    return res


def idle(args, build: Path, bin_dir: Path) -> dict:
    """strata+bg with dirty_decay_ms 1000: after the decay, the background thread must not
    run. wl_memreturn idles 15 s; its main thread samples RSS, every other thread is the
    allocator's: their CPU ticks and voluntary switches over the last 8 s are the figure."""
    lib = str(build / "libstrata.so")
    r = run_memreturn(bin_dir, args.preset, "strata+bg", lib, BG + ",dirty_decay_ms:1000", watch=True)
    samples = r.pop("task_samples")
    end_t = samples[-1][0]
    first = next(s for t, s in samples if t >= end_t - 8.0)
    last = samples[-1][1]
    main = None
    for tid in first:
        if int(tid) == min(int(x) for x in first):
            main = tid
    ticks = sum(last[t][0] - first[t][0] for t in last if t in first and t != main)
    wakes = sum(last[t][1] - first[t][1] for t in last if t in first and t != main)
    return {"window_s": round(end_t - next(t for t, s in samples if t >= end_t - 8.0), 2),
            "background_threads": len([t for t in last if t != main]),
            "cpu_ticks": ticks, "voluntary_switches": wakes,
            "rss_end_kb": r["rss_end_kb"], "rss_before_kb": r["rss_before_kb"]}


def server(args, build: Path, bin_dir: Path) -> dict:
    """Rounds interleaved (every variant once per round), so that the machine's load
    drifts over all of them alike; the median round per variant is reported."""
    vs = [v for v in variants(build) if v[0].startswith(("strata", "jemalloc"))]
    runs: dict[str, list] = {v[0]: [] for v in vs}
    for _ in range(args.rounds):
        for label, preload, conf in vs:
            p = subprocess.run([str(bin_dir / "wl_server"), "--preset", args.preset],
                               env=env_for(preload, conf), capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"{label}: wl_server exit {p.returncode}: {p.stderr[-300:]}")
            r = result_line(p.stdout)
            runs[label].append({"p999_ns": r["latency_ns"].get("p99.9", r["latency_ns"].get("p999")),
                                "p99_ns": r["latency_ns"].get("p99"), "ops_per_sec": r["ops_per_sec"]})
    res = {}
    for label, rs in runs.items():
        rs.sort(key=lambda x: x["p999_ns"] or 0)
        res[label] = {"median": rs[len(rs) // 2], "runs": rs}
        print(f"server: {label} p99.9 {res[label]['median']['p999_ns']} ns", file=sys.stderr)
    return res


def container(args, build: Path, lp: Path) -> dict:
    script = ROOT / "tests" / "container_limit.sh"
    probe = subprocess.run(["bash", str(script), "/bin/true", "1", "1000"], capture_output=True, text=True)
    if probe.returncode == 77:
        return {"skipped": probe.stdout.strip()}
    res = {}
    live = args.live_mib
    for a in discover(build):
        if not a.available:
            continue
        env = env_for(a.preload(), None)
        peak = 0
        for mix in range(5):
            p = subprocess.run([str(lp), str(live), "1", str(mix)], env=env, capture_output=True, text=True)
            peak = max(peak, json.loads(p.stdout)["max_phase_rss_kb"])

        def survives(f: float) -> bool:
            p = subprocess.run(["bash", str(script), str(lp), str(live), f"{f:.3f}", a.preload() or ""],
                               capture_output=True, text=True, timeout=600)
            return p.returncode == 0
        # lo dies (nothing fits under the live data itself); 12x holds every phase at once
        lo, hi = 1.0, 12.0
        if not survives(hi):
            res[a.name] = {"phase_peak_kb": peak, "smallest_factor": None}
            continue
        while hi - lo > 0.02:
            mid = (lo + hi) / 2
            if survives(mid):
                hi = mid
            else:
                lo = mid
        res[a.name] = {"phase_peak_kb": peak, "phase_peak_factor": round(peak / (live * 1024), 3),
                       "smallest_factor": round(hi, 3),
                       "smallest_over_phase_peak": round(hi * live * 1024 / peak, 3)}
        print(f"container: {a.name} survives {hi:.3f}x live", file=sys.stderr)
    res["live_mib"] = live
    return res


def thp(args, build: Path, bin_dir: Path) -> dict:
    vs = [(f"{a.name} thp:{mode}", a.preload(), f"thp:{mode}") for a in discover(build)
          if a.available and a.name in ("jemalloc", "strata") for mode in ("default", "always")]
    runs: dict[str, list] = {v[0]: [] for v in vs}
    for _ in range(args.rounds):
        for label, preload, conf in vs:
            p = subprocess.run([str(bin_dir / "thp_random"), "512", "10"], env=env_for(preload, conf),
                               capture_output=True, text=True, timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"{label}: thp_random exit {p.returncode}: {p.stderr[-300:]}")
            runs[label].append(json.loads(p.stdout.strip().splitlines()[-1]))
    res = {"mode": Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()}
    for label, rs in runs.items():
        rs.sort(key=lambda r: r["access_seconds"])
        res[label] = {"median": rs[len(rs) // 2], "runs": rs}
        print(f"thp: {label} {res[label]['median']['ns_per_access']} ns/access", file=sys.stderr)
    return res


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5))
    for label, r in res.items():
        xs = [t for t, _ in r["series"]]
        ys = [kb / 1024 for _, kb in r["series"]]
        ax.plot(xs, ys, label=label, linestyle="--" if label.endswith("+bg") else "-")
    ax.set_yscale("log")
    ax.set_xlabel("seconds idle after freeing a 2 GiB peak (no allocator call)")
    ax.set_ylabel("RSS (MiB, log)")
    ax.set_title("wl_memreturn: RSS while idle, sampled every 50 ms")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report(data: dict, out: Path) -> str:
    L = [f"# Memory return, {data['date']}", "", f"Machine: {data['machine']}", ""]
    if "memreturn" in data:
        L += ["## wl_memreturn: RSS while idle after a 2 GiB burst (MiB)", "",
              "| allocator | before | peak | after free | at 1 s | at 11 s | end (15 s) | back within 4 MiB at |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for k, r in data["memreturn"].items():
            b = r["seconds_back_within_4mib"]
            L.append(f"| {k} | {r['rss_before_kb']/1024:.1f} | {r['rss_at_peak_kb']/1024:.0f} | "
                     f"{r['rss_after_free_kb']/1024:.1f} | {r['rss_at_1s_kb']/1024:.1f} | "
                     f"{r['rss_at_11s_kb']/1024:.1f} | {r['rss_end_kb']/1024:.1f} | "
                     f"{'never' if b is None else f'{b:.2f} s'} |")
        L += ["", "![RSS over time](rss_memreturn.png)", ""]
    if "idle" in data:
        i = data["idle"]
        L += ["## Idle CPU with background threads on and nothing dirty", "",
              f"strata, background_thread:true, dirty_decay_ms:1000, last {i['window_s']} s of "
              f"wl_memreturn's idle phase: {i['background_threads']} background thread(s), "
              f"{i['cpu_ticks']} CPU ticks (10 ms each) and {i['voluntary_switches']} wake-ups.", ""]
    if "server" in data:
        L += ["## wl_server tail latency (median of rounds)", "",
              "| allocator | p99 (ns) | p99.9 (ns) | ops/s |", "|---|---:|---:|---:|"]
        for k, r in data["server"].items():
            m = r["median"]
            L.append(f"| {k} | {m['p99_ns']} | {m['p999_ns']} | {m['ops_per_sec']:.0f} |")
        L.append("")
    if "container" in data:
        c = data["container"]
        L += ["## Smallest memory cgroup limit survived (limit_phases)", ""]
        if "skipped" in c:
            L += [f"Skipped: {c['skipped']}", ""]
        else:
            L += [f"Live data {c['live_mib']} MiB per phase, 10 phases over new threads and 5 size mixes.", "",
                  "| allocator | one phase's peak / live | smallest limit / live | smallest limit / phase peak |",
                  "|---|---:|---:|---:|"]
            for k, r in c.items():
                if k == "live_mib":
                    continue
                if r.get("smallest_factor") is None:
                    L.append(f"| {k} | - | > 12 | - |")
                else:
                    L.append(f"| {k} | {r['phase_peak_factor']} | {r['smallest_factor']} | "
                             f"{r['smallest_over_phase_peak']} |")
            L.append("")
    if "thp" in data:
        t = data["thp"]
        L += ["## Transparent huge pages: random access over a 512 MiB block (median of rounds)", "",
              f"Kernel THP mode: {t['mode']}.", "",
              "| allocator, option | ns per access | touch (s) | AnonHugePages (MiB) |", "|---|---:|---:|---:|"]
        for k, r in t.items():
            if k == "mode":
                continue
            m = r["median"]
            L.append(f"| {k} | {m['ns_per_access']} | {m['touch_seconds']} | {m['anon_huge_kb'] / 1024:.0f} |")
        L.append("")
    text = "\n".join(L)
    (out / "report.md").write_text(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--out")
    ap.add_argument("--only", default="memreturn,idle,server,container,thp")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--live-mib", type=int, default=128)
    args = ap.parse_args()
    build = Path(args.build_dir).resolve()
    bin_dir = build / "bench"
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / (
        datetime.date.today().isoformat() + "-memory-return")
    out.mkdir(parents=True, exist_ok=True)
    uname = os.uname()
    data = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{uname.sysname} {uname.release} {uname.machine}, {os.cpu_count()} CPUs, THP "
                       + Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()}
    only = args.only.split(",")
    # Parts not run this time keep their earlier results; each part is saved as it ends.
    old = out / "results.json"
    if old.exists():
        prev = json.loads(old.read_text())
        data = {**{k: v for k, v in prev.items() if k not in only}, **data}

    def save():
        old.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    if "memreturn" in only:
        data["memreturn"] = memreturn(args, build, bin_dir)
        plot(data["memreturn"], out / "rss_memreturn.png")
        save()
    if "idle" in only:
        data["idle"] = idle(args, build, bin_dir)
        save()
    if "server" in only:
        data["server"] = server(args, build, bin_dir)
        save()
    if "container" in only:
        data["container"] = container(args, build, build / "tests" / "limit_phases")
        save()
    if "thp" in only:
        data["thp"] = thp(args, build, bin_dir)
        save()
    print(report(data, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The heap profiler's figures, written to bench/results/prof-figures.{md,json}:

- accuracy: prof_accuracy (f: 64 MiB in 1 KiB blocks, g: 16 MiB in 100 KiB, h: 1 MiB in
  64 B) at lg_prof_sample:14, read in both formats through jeprof, go tool pprof and
  `strata prof top`; targets: f and g within 10%, h within 35%.
- unbiasedness: the same program at the default rate (2^19) over 200 runs (seeds), the mean
  and spread of the estimates against sampling theory (relative sd ~ 1/sqrt(bytes/rate)).
- overhead: CPU time (user+sys) of wl_churn and wl_server with prof:true at the default
  rate over prof:false (the median of --reps runs each), and where perf is installed the
  cost inside each run with the workload's own code as the clock (prof_yardstick.py).
- leak: prof_leak with interval dumps; `strata prof diff FIRST LAST` top entry.
- unwinders: bt_cost (strata's unwinder vs libgcc vs frame-pointer walk; ns, and instructions under callgrind).
Usage: run_prof_figures.py [--build-dir build] [--reps 3] [--seeds 200] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from strata_tool import prof as sprof  # noqa: E402

FUNCS = ("f", "g", "h")
TARGET = {"f": 0.10, "g": 0.10, "h": 0.35}


def run_acc(build, conf, dump):
    env = dict(os.environ, LD_PRELOAD=os.path.join(build, "libstrata.so"), MALLOC_CONF=conf)
    out = subprocess.run([os.path.join(build, "bench", "prof_accuracy"), dump], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def est_strata(path):
    p = sprof.read_profile(path)
    by = {}
    for st in p.stacks:
        v = sprof.visible(st.frames)
        by[v[0]] = by.get(v[0], 0.0) + st.inuse_bytes
    return {k: by.get(k, 0.0) for k in FUNCS}


def est_jeprof(prog, path):
    if not shutil.which("jeprof"):
        return None
    out = subprocess.run(["jeprof", "--text", "--show_bytes", prog, path], capture_output=True, text=True).stdout
    got = {}
    for ln in out.splitlines():
        m = re.match(r"^\s*(\d+)\s+\S+%\s+\S+%\s+\d+\s+\S+%\s+(\S+)$", ln)
        if m and m.group(2) in FUNCS:
            got[m.group(2)] = float(m.group(1))
    return {k: got.get(k, 0.0) for k in FUNCS}


def est_pprof(path):
    go = shutil.which("go")
    if not go:
        return None
    out = subprocess.run([go, "tool", "pprof", "-top", "-unit=B", "-sample_index=inuse_space", path],
                         capture_output=True, text=True, timeout=600).stdout
    got = {}
    for ln in out.splitlines():
        m = re.match(r"^\s*(\d+)B\s+\S+%\s+\S+%\s+\S+\s+\S+%\s+(\S+)$", ln)
        if m and m.group(2) in FUNCS:
            got[m.group(2)] = float(m.group(1))
    return {k: got.get(k, 0.0) for k in FUNCS}


def accuracy(build, tmp):
    heap = os.path.join(tmp, "acc.heap")
    truth = run_acc(build, "prof:true,lg_prof_sample:14,prof_format:both", heap)
    prog = os.path.join(build, "bench", "prof_accuracy")
    rows = {"truth": {k: truth[k] for k in FUNCS}}
    rows["jeprof heap_v2"] = est_jeprof(prog, heap)
    rows["go pprof proto"] = est_pprof(heap + ".pb.gz")
    rows["strata heap_v2"] = est_strata(heap)
    rows["strata proto"] = est_strata(heap + ".pb.gz")
    errs = {}
    for name, est in rows.items():
        if name == "truth" or est is None:
            continue
        errs[name] = {k: est[k] / truth[k] - 1 for k in FUNCS}
    met = all(abs(e[k]) <= TARGET[k] for e in errs.values() for k in FUNCS)
    return {"rows": rows, "rel_error": errs, "met": met}


USABLE = {"f": 1024, "g": 114688, "h": 64}                        # usable sizes of the blocks
NBLOCKS = {"f": (64 << 20) // 1024, "g": (16 << 20) // (100 * 1024), "h": (1 << 20) // 64}


def raw_counts(path):
    """Live samples per function, told apart by usable size (no symbolization)."""
    _, stacks, _ = sprof.parse_heap_v2(open(path).read())
    got = dict.fromkeys(FUNCS, 0)
    for _addrs, co, cb, _ao, _ab in stacks:
        for k in FUNCS:
            if co and cb == co * USABLE[k]:
                got[k] += co
    return got


def unbiased(build, tmp, seeds):
    """Estimate / truth over many runs at the default rate, and the raw sample counts
    against their expectation n p (p = 1 - exp(-usable / rate) per block): the mean's
    distance from 1 in standard errors is what says biased or not, the spread against the
    binomial one sqrt((1 - p) / (n p)) (1/sqrt(bytes/rate) is its Poisson limit)."""
    rate = 1 << 19
    ests = {k: [] for k in FUNCS}
    counts = {k: [] for k in FUNCS}
    truth = None
    for i in range(seeds):
        heap = os.path.join(tmp, f"seed{i}.heap")
        truth = run_acc(build, "prof:true", heap)
        e = est_strata(heap)
        c = raw_counts(heap)
        for k in FUNCS:
            ests[k].append(e[k] / truth[k])
            counts[k].append(c[k])
        os.unlink(heap)
    out = {}
    for k in FUNCS:
        mean = statistics.mean(ests[k])
        sd = statistics.stdev(ests[k])
        p = 1 - math.exp(-USABLE[k] / rate)
        n = NBLOCKS[k]
        sd_bin = math.sqrt((1 - p) / (n * p))
        out[k] = {"mean_ratio": mean, "sd": sd, "sd_predicted": 1 / math.sqrt(truth[k] / rate),
                  "sd_binomial": sd_bin, "stderr_of_mean": sd_bin / math.sqrt(seeds),
                  "z_of_mean": (mean - 1) / (sd_bin / math.sqrt(seeds)),
                  "samples_mean": statistics.mean(counts[k]), "samples_expected": n * p,
                  "mean_within_3_stderr": abs(mean - 1) <= 3 * sd_bin / math.sqrt(seeds)}
    return out


def cpu_time(cmd, env):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def overhead(build, reps, tmp):
    out = {}
    lib = os.path.join(build, "libstrata.so")
    for wl in ("churn", "server"):
        cmd = [os.path.join(build, "bench", f"wl_{wl}"), "--preset", "default"]
        times = {"prof:false": [], "prof:true": []}
        for _ in range(reps):
            for conf in times:
                env = dict(os.environ, LD_PRELOAD=lib,
                           MALLOC_CONF=conf + (f",prof_prefix:{tmp}/ov" if conf == "prof:true" else ""))
                times[conf].append(cpu_time(cmd, env))
        off, on = statistics.median(times["prof:false"]), statistics.median(times["prof:true"])
        out[f"wl_{wl}"] = {"cpu_s_prof_false": off, "cpu_s_prof_true": on, "ratio": on / off,
                           "runs": times}
    if shutil.which("perf"):  # the cost inside each run (prof_yardstick.py): the host's noise cancels
        sys.path.insert(0, HERE)
        import prof_yardstick
        y = prof_yardstick.measure([("strata", lib)], os.path.join(build, "bench"), list(out), max(reps, 6))
        for wl in out:
            out[wl]["yardstick"] = y[wl]["strata"]
    return out


def leak(build, tmp):
    d = os.path.join(tmp, "leak")
    os.makedirs(d)
    env = dict(os.environ, LD_PRELOAD=os.path.join(build, "libstrata.so"),
               MALLOC_CONF=f"prof:true,lg_prof_interval:30,prof_prefix:{d}/leak,prof_final:true")
    subprocess.run([os.path.join(build, "bench", "prof_leak"), "300000"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    dumps = sorted((f for f in os.listdir(d) if ".i" in f), key=lambda f: int(f.split(".i")[1].split(".")[0]))
    if len(dumps) < 2:
        return {"met": False, "note": f"only {len(dumps)} interval dumps"}
    first, last = os.path.join(d, dumps[0]), os.path.join(d, dumps[-1])
    with open(os.devnull, "w") as null:
        rows = sprof.diff(sprof.read_profile(first), sprof.read_profile(last), 3, out=null)
    top = rows[0][0][0] if rows else "?"
    return {"interval_dumps": len(dumps), "top": top, "growth_bytes": rows[0][1] if rows else 0,
            "second": [r[0][0] for r in rows[1:]], "met": top == "session_cache_insert"}


def bt_instructions(prog, chain, unwinder, n):
    """callgrind's instruction count of `bt_cost count CHAIN UNWINDER n`."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", prog, "count",
                          chain, unwinder, str(n)], capture_output=True, text=True, check=True).stderr
    return int(re.search(r"refs:\s*([\d,]+)", out).group(1).replace(",", ""))


def unwinders(build):
    prog = os.path.join(build, "bench", "bt_cost")
    out = subprocess.run([prog], capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout)
    if shutil.which("valgrind"):  # instructions per backtrace, the chain's calls included
        for r in rows:
            n = 1000
            r["instructions_per_backtrace"] = (bt_instructions(prog, r["chain"], r["unwinder"], n) -
                                               bt_instructions(prog, r["chain"], r["unwinder"], 0)) / n
    return rows


def write_md(res, path):
    L = ["# Heap profiler figures", "", f"Date: {res['date']}", ""]
    a = res["accuracy"]
    L += ["## Accuracy at lg_prof_sample:14 (estimate / truth - 1; targets f, g 10%, h 35%)", "",
          "| reader | f (64 MiB, 1 KiB) | g (16 MiB, 100 KiB) | h (1 MiB, 64 B) |", "|---|---|---|---|"]
    for name, e in a["rel_error"].items():
        L.append(f"| {name} | " + " | ".join(f"{100 * e[k]:+.1f}%" for k in FUNCS) + " |")
    L += ["", f"Targets met: {a['met']}", ""]
    u = res["unbiased"]
    L += [f"## Unbiasedness at the default rate (2^19), {res['seeds']} runs", "",
          "| function | mean estimate / truth | (mean - 1) / stderr | samples per run (expected n p) | sd | sd predicted (binomial; 1/sqrt(bytes/rate)) |",
          "|---|---|---|---|---|---|"]
    for k in FUNCS:
        L.append(f"| {k} | {u[k]['mean_ratio']:.3f} | {u[k]['z_of_mean']:+.2f} | {u[k]['samples_mean']:.2f} "
                 f"({u[k]['samples_expected']:.2f}) | {u[k]['sd']:.3f} | {u[k]['sd_binomial']:.3f}; {u[k]['sd_predicted']:.3f} |")
    L += ["", "## Overhead of prof:true (default rate; target at most 1.05)", "",
          "CPU time: median of runs, one after the other (moves by 20-50% between runs on a shared VM). "
          "Workload's code as the clock: `prof_yardstick.py`, the cost inside each run (perf cpu-clock "
          "samples of the whole process over those in the workload's own code), prof:true over "
          "prof:false run by run, median (quartiles).", "",
          "| workload | prof:false (s) | prof:true (s) | CPU time ratio | workload's code as the clock |",
          "|---|---|---|---|---|"]
    for wl, o in res["overhead"].items():
        y = o.get("yardstick")
        ys = f"{y['median']:.3f} ({y['q1']:.3f}-{y['q3']:.3f}), {len(y['ratios'])} rounds" if y else "- (no perf)"
        L.append(f"| {wl} | {o['cpu_s_prof_false']:.2f} | {o['cpu_s_prof_true']:.2f} | {o['ratio']:.3f} | {ys} |")
    lk = res["leak"]
    L += ["", "## Planted leak", "",
          f"`strata prof diff` first vs last of {lk.get('interval_dumps')} interval dumps: top entry "
          f"`{lk.get('top')}` (+{lk.get('growth_bytes', 0) / 1048576:.1f} MiB); met: {lk.get('met')}", "",
          "## Unwinders (bench/prof/bt_cost, 24-deep chain)", "",
          "| chain | unwinder | frames found | ns per backtrace | instructions per backtrace |", "|---|---|---|---|---|"]
    for r in res["unwinders"]:
        ins = r.get("instructions_per_backtrace")
        L.append(f"| {r['chain']} | {r['unwinder']} | {r['frames_found']} | {r['ns_per_backtrace']:.0f} | "
                 f"{'-' if ins is None else f'{ins:.0f}'} |")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--only", default="accuracy,unbiased,overhead,leak,unwinders")
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    only = set(a.only.split(","))
    import datetime
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "seeds": a.seeds}
    with tempfile.TemporaryDirectory() as tmp:
        if "accuracy" in only:
            res["accuracy"] = accuracy(build, tmp)
            print(json.dumps(res["accuracy"]["rel_error"]), file=sys.stderr)
        if "unbiased" in only:
            res["unbiased"] = unbiased(build, tmp, a.seeds)
            print(json.dumps(res["unbiased"]), file=sys.stderr)
        if "leak" in only:
            res["leak"] = leak(build, tmp)
            print(json.dumps(res["leak"]), file=sys.stderr)
        if "unwinders" in only:
            res["unwinders"] = unwinders(build)
        if "overhead" in only:
            res["overhead"] = overhead(build, a.reps, tmp)
            print(json.dumps({k: v["ratio"] for k, v in res["overhead"].items()}), file=sys.stderr)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "prof-figures.json"), "w") as f:
        json.dump(res, f, indent=1)
    if only >= {"accuracy", "unbiased", "overhead", "leak", "unwinders"}:
        write_md(res, os.path.join(a.out, "prof-figures.md"))
    print(f"wrote {a.out}/prof-figures.json")


if __name__ == "__main__":
    main()

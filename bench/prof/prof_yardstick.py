#!/usr/bin/env python3
"""prof_yardstick.py - prof:true's CPU cost measured inside each run, with the workload's
own code as the clock.

On a shared VM the CPU time of the same binary moves by 20-50% between runs minutes apart
(the host's neighbours), so a 5% cost cannot be read from run-to-run CPU times. Inside one
run, though, the host slows the workload's code and the allocator's alike. Each run is
recorded with `perf record -e cpu-clock` (a software clock: no hardware counters needed);
its cost is all its samples divided by the samples in code that does the same work under
both options: the workload's own binary, the vDSO (its clock reads) and libm. The ratio of
that cost between a prof:true run and the prof:false run right after it is prof:true's
cost on the whole process. What it does not see: the workload's own code slowed by the
profiler's cache footprint (bench/prof/prof_cachegrind.py estimates that part).

An allocator is NAME=BUILD_DIR (strata: its libstrata.so under LD_PRELOAD) or
NAME=/path/libsomething.so (any malloc that reads MALLOC_CONF, such as Debian's jemalloc,
which is built with profiling). The workloads are the first build's bench/ programs.
Needs `perf` (Debian: linux-perf); exits 77 without it.

usage: prof_yardstick.py [--workloads wl_churn,wl_server] [--rounds 10] [--preset default]
                         [--freq 4000] [--json OUT] NAME=BUILD_OR_LIB ...
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from prof_sidebyside import parse_allocators, quartiles


def yard_dso(dso, wl):
    return dso == wl or dso == "[vdso]" or dso.startswith("libm.") or dso.startswith("libm-")


def one_run(tmp, lib, conf, cmd, wl, freq):
    data = os.path.join(tmp, "perf.data")
    env = dict(os.environ, LD_PRELOAD=lib, MALLOC_CONF=conf)
    env.pop("STRATA_CONF", None)
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq), "-o", data] + cmd,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso", "-n", "--stdio"],
                         capture_output=True, text=True, check=True).stdout
    total = yard = 0
    for line in rep.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)", line)
        if m:
            n, dso = int(m.group(1)), m.group(2)
            total += n
            if yard_dso(dso, wl):
                yard += n
    os.unlink(data)
    if yard == 0:
        raise SystemExit(f"no samples in {wl}'s own code: {cmd}")
    return total / yard, total


def measure(allocs, bench, workloads, rounds, preset="default", freq=4000, log=None):
    """{workload: {name: {ratios, cost_true, cost_false, median, q1, q3, mean}}} for the
    allocators [(name, lib.so)], the workloads taken from the bench/ directory."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="prof_yard.") as tmp:
        for wl in workloads:
            cmd = [os.path.join(bench, wl), "--preset", preset]
            for name, _ in allocs:
                out.setdefault(wl, {})[name] = {"ratios": [], "cost_true": [], "cost_false": []}
            for r in range(rounds):
                for name, lib in allocs:  # allocators interleaved, the two options in turn
                    order = ("prof:true", "prof:false") if r % 2 == 0 else ("prof:false", "prof:true")
                    cost = {conf: one_run(tmp, lib, conf, cmd, wl, freq) for conf in order}
                    ratio = cost["prof:true"][0] / cost["prof:false"][0]
                    d = out[wl][name]
                    d["ratios"].append(ratio)
                    d["cost_true"].append(cost["prof:true"][0])
                    d["cost_false"].append(cost["prof:false"][0])
                    if log:
                        print(f"{wl} round {r + 1} {name}: cost prof:true {cost['prof:true'][0]:.4f} "
                              f"({cost['prof:true'][1]} samples), prof:false {cost['prof:false'][0]:.4f} "
                              f"({cost['prof:false'][1]}), ratio {ratio:.4f}", file=log, flush=True)
            for name, _ in allocs:
                d = out[wl][name]
                lo, med, hi = quartiles(d["ratios"])
                d.update(median=med, q1=lo, q3=hi, mean=statistics.mean(d["ratios"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("allocators", nargs="+", help="NAME=BUILD_DIR or NAME=LIB.so")
    ap.add_argument("--workloads", default="wl_churn,wl_server")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--freq", type=int, default=4000, help="samples a second (perf -F)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if shutil.which("perf") is None:
        print("prof_yardstick: perf is not installed (Debian: linux-perf)", file=sys.stderr)
        return 77
    allocs, bench = parse_allocators(a.allocators)
    out = measure(allocs, bench, a.workloads.split(","), a.rounds, a.preset, a.freq, log=sys.stderr)
    for wl, per in out.items():
        for name, d in per.items():
            print(f"{wl} {name}: prof:true / prof:false cost (workload's code as the clock) median "
                  f"{d['median']:.3f} (quartiles {d['q1']:.3f}-{d['q3']:.3f}), mean {d['mean']:.3f}, {a.rounds} rounds")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

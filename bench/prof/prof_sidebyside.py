#!/usr/bin/env python3
"""prof_sidebyside.py - prof:true's CPU time against prof:false's, measured side by side:
each round runs the two at the same time, each pinned to its own CPU (taskset), the CPUs
swapped every round, so that both see the same host (a shared VM's neighbours move single
runs by 20-50% between minutes). Reports per workload the paired ratios (prof:true /
prof:false CPU time, user + sys of the process) as median and quartiles.

An allocator is NAME=BUILD_DIR (strata: its libstrata.so under LD_PRELOAD) or
NAME=/path/libsomething.so (any malloc that reads MALLOC_CONF, such as Debian's jemalloc,
which is built with profiling). The workloads are the first build's bench/ programs.

usage: prof_sidebyside.py [--workloads wl_churn,wl_server] [--rounds 20] [--preset default]
                          [--cpus 0,1] [--json OUT] NAME=BUILD_OR_LIB ...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def start(cpu, lib, conf, cmd):
    env = dict(os.environ, LD_PRELOAD=lib, MALLOC_CONF=conf)
    env.pop("STRATA_CONF", None)
    return subprocess.Popen(["taskset", "-c", str(cpu)] + cmd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cpu_time(p):
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"run failed: {p.args} exit {p.returncode}")
    return ru.ru_utime + ru.ru_stime


def quartiles(v):
    if len(v) < 2:
        return v[0], v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], statistics.median(v), q[2]


def parse_allocators(specs):
    """[(name, lib.so)] and the bench/ directory of the first build among NAME=BUILD_DIR or
    NAME=LIB.so specs (a .so is preloaded as it is; a build directory gives its libstrata.so)."""
    allocs, bench = [], None
    for spec in specs:
        name, _, path = spec.partition("=")
        if path.endswith(".so") or ".so." in path:
            allocs.append((name, path))
            continue
        allocs.append((name, os.path.join(path, "libstrata.so")))
        if bench is None and os.path.isdir(os.path.join(path, "bench")):
            bench = os.path.join(path, "bench")
    if bench is None:
        raise SystemExit("no build directory with bench/ among the allocators")
    return allocs, bench


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("allocators", nargs="+", help="NAME=BUILD_DIR or NAME=LIB.so")
    ap.add_argument("--workloads", default="wl_churn,wl_server")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--json")
    a = ap.parse_args()
    cpus = a.cpus.split(",")
    allocs, bench = parse_allocators(a.allocators)
    out = {}
    for wl in a.workloads.split(","):
        cmd = [os.path.join(bench, wl), "--preset", a.preset]
        ratios = {n: [] for n, _ in allocs}
        times = {n: ([], []) for n, _ in allocs}
        for r in range(a.rounds):
            for name, lib in allocs:  # allocators interleaved within each round
                c_on, c_off = (cpus[0], cpus[1]) if r % 2 == 0 else (cpus[1], cpus[0])
                p_on = start(c_on, lib, "prof:true", cmd)
                p_off = start(c_off, lib, "prof:false", cmd)
                t_on, t_off = cpu_time(p_on), cpu_time(p_off)
                ratios[name].append(t_on / t_off)
                times[name][0].append(t_on)
                times[name][1].append(t_off)
                print(f"{wl} round {r + 1} {name}: prof:true {t_on:.2f} s, prof:false {t_off:.2f} s, "
                      f"{t_on / t_off:.3f}", file=sys.stderr, flush=True)
        for name, _ in allocs:
            lo, med, hi = quartiles(ratios[name])
            out.setdefault(wl, {})[name] = {"ratios": ratios[name], "prof_true_s": times[name][0],
                                            "prof_false_s": times[name][1], "median": med, "q1": lo, "q3": hi}
            print(f"{wl} {name}: prof:true / prof:false paired median {med:.3f} (quartiles {lo:.3f}-{hi:.3f}), "
                  f"{a.rounds} rounds; medians {statistics.median(times[name][0]):.2f} s / "
                  f"{statistics.median(times[name][1]):.2f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""prof_cachegrind.py - the heap profiler's cost in estimated cycles: each workload
(bench/workloads, --preset tiny) under LD_PRELOAD=libstrata.so with MALLOC_CONF=prof:false
and prof:true, for each build given, in the same run, under cachegrind's cache simulation
(--cache-sim=yes). Estimated cycles = Ir + 10 x L1 misses + 100 x last-level misses
(cachegrind's usual weights; L1 misses: I1mr + D1mr + D1mw, last-level: ILmr + DLmr + DLmw).
prof_callgrind.py gives the instructions alone; this adds what the misses cost.

usage: prof_cachegrind.py [--workloads wl_churn,wl_server] NAME=BUILD_DIR ... [--json OUT]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prof_callgrind import over_builds, valgrind  # noqa: E402


def cachegrind(build, wl, conf, tmp):
    out = valgrind(build, wl, conf, tmp, ["--tool=cachegrind", "--cache-sim=yes", "--cachegrind-out-file={out}"])
    events, summary = None, None
    with open(out) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                summary = [int(x) for x in line.split()[1:]]
    os.unlink(out)
    c = dict(zip(events, summary))
    l1 = c["I1mr"] + c["D1mr"] + c["D1mw"]
    ll = c["ILmr"] + c["DLmr"] + c["DLmw"]
    return {"Ir": c["Ir"], "D1m": c["D1mr"] + c["D1mw"], "L1m": l1, "LLm": ll,
            "cycles": c["Ir"] + 10 * l1 + 100 * ll}


def measure(build, wl, tmp):
    r = {conf: cachegrind(build, wl, conf, tmp) for conf in ("prof:false", "prof:true")}
    off, on = r["prof:false"], r["prof:true"]
    r["ratio_cycles"] = on["cycles"] / off["cycles"]
    r["ratio_ir"] = on["Ir"] / off["Ir"]
    return r, (f"Ir {off['Ir']:>13,} -> {on['Ir']:>13,} ({r['ratio_ir']:.3f})  "
               f"D1m {off['D1m'] / 1e6:.2f}M -> {on['D1m'] / 1e6:.2f}M  "
               f"LLm {off['LLm'] / 1e3:.0f}K -> {on['LLm'] / 1e3:.0f}K  "
               f"cycles {off['cycles']:>13,} -> {on['cycles']:>13,} ({r['ratio_cycles']:.3f})")


if __name__ == "__main__":
    sys.exit(over_builds(measure, __doc__))

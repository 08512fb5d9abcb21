#!/usr/bin/env python3
"""prof_callgrind.py - the heap profiler's cost in instructions (callgrind, exact): each
workload (bench/workloads, --preset tiny) under LD_PRELOAD=libstrata.so with
MALLOC_CONF=prof:false and prof:true, for each build given, in the same run, and the part of
prof:true's count spent in strata_backtrace (inclusive; the "of which backtraces" column
of bench/results/prof-figures.md, as a fraction of prof:false's count).

usage: prof_callgrind.py [--workloads wl_churn,wl_server] NAME=BUILD_DIR ... [--json OUT]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def valgrind(build, wl, conf, tmp, tool_args):
    """Runs workload wl of build under valgrind (tool_args) with MALLOC_CONF=conf; returns
    the output file's path (tool_args name it with {out})."""
    out = os.path.join(tmp, f"{os.path.basename(build)}-{wl}-{conf.replace(':', '_')}.out")
    env = dict(os.environ, LD_PRELOAD=os.path.join(build, "libstrata.so"), MALLOC_CONF=conf)
    env.pop("STRATA_CONF", None)
    # prof:true patches strata_malloc's entry at start-up, after valgrind translated it
    # (libc's first mallocs): without --smc-check=all the stale, unpatched code would run.
    smc = ["--smc-check=all"] if "prof:true" in conf else []
    subprocess.run(["valgrind"] + [a.format(out=out) for a in tool_args] + smc +
                   [os.path.join(build, "bench", wl), "--preset", "tiny"],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def over_builds(measure, doc):
    """The command line both scripts share: measure(build, wl, tmp) -> (record, line) for
    each workload and NAME=BUILD_DIR, in the same run; --json writes the records."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("builds", nargs="+", help="NAME=BUILD_DIR")
    ap.add_argument("--workloads", default="wl_churn,wl_server")
    ap.add_argument("--json")
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for wl in a.workloads.split(","):
            for spec in a.builds:
                name, build = spec.split("=", 1)
                r, line = measure(build, wl, tmp)
                res.setdefault(wl, {})[name] = r
                print(f"{wl:10s} {name:8s} {line}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


def callgrind(build, wl, conf, tmp):
    out = valgrind(build, wl, conf, tmp, ["--tool=callgrind", "--callgrind-out-file={out}"])
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                         capture_output=True, text=True, check=True).stdout
    total = bt = 0
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+) \(.*\)\s+PROGRAM TOTALS", line)
        if m:
            total = int(m.group(1).replace(",", ""))
        m = re.match(r"\s*([\d,]+) \(.*\)\s+\S*:strata_backtrace \[", line)
        if m:
            bt = int(m.group(1).replace(",", ""))
    os.unlink(out)
    return total, bt


def measure(build, wl, tmp):
    off, _ = callgrind(build, wl, "prof:false", tmp)
    on, bt = callgrind(build, wl, "prof:true", tmp)
    r = {"prof_false": off, "prof_true": on, "ratio": on / off,
         "backtrace_instructions": bt, "backtraces_of_prof_false": bt / off}
    return r, (f"prof:false {off:>13,} prof:true {on:>13,} "
               f"ratio {on / off:.3f} backtraces {bt:>11,} ({bt / off:.3f})")


if __name__ == "__main__":
    sys.exit(over_builds(measure, __doc__))

#!/usr/bin/env python3
"""rust_allocators.py - the comparison Rust users make: the same allocation-heavy Rust
programs (rust/bench: serde_json parse/serialise, a multi-threaded HashMap build and
teardown, a channel pipeline of boxed messages) built once per global allocator (the
system allocator, tikv-jemallocator, mimalloc, snmalloc-rs, strata) and run in
interleaved rounds; the report gives medians and each allocator's time and peak RSS as
ratios to the system allocator's.

Usage: bench/rust_allocators.py [--rounds N] [--out PATH.md] [--no-build]
Needs cargo, a C/C++ compiler and cmake (snmalloc-rs builds with cmake); crates come
from crates.io.
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUST = os.path.join(ROOT, "rust")
ALLOCATORS = ["system", "jemalloc", "mimalloc", "snmalloc", "strata"]
CRATES = {
    "system": "std::alloc::System",
    "jemalloc": "tikv-jemallocator",
    "mimalloc": "mimalloc (default features)",
    "snmalloc": "snmalloc-rs",
    "strata": "strata",
}
WORKLOADS = {
    "json": "serde_json: 150k records (~40 MB) parsed to typed structs and to a Value tree, serialised back, 3 rounds",
    "hashmap": "4 threads each build a HashMap<String, Vec<u64>> of 300k entries, look up a third, retain half, drop; 2 rounds",
    "channel": "producer -> transform -> sink threads, 2M boxed messages (16 B-1 KiB payload grown in the middle stage, freed in the last)",
}


def crate_versions():
    """The resolved versions of the allocator crates, from Cargo.lock."""
    want = {"tikv-jemallocator", "tikv-jemalloc-sys", "mimalloc", "libmimalloc-sys", "snmalloc-rs", "snmalloc-sys",
            "serde_json"}
    found, name = {}, None
    try:
        with open(os.path.join(RUST, "Cargo.lock")) as f:
            for line in f:
                if line.startswith("name = "):
                    name = line.split('"')[1]
                elif line.startswith("version = ") and name in want:
                    found[name] = line.split('"')[1]
    except OSError:
        pass
    return found


def run_one(alloc, workload):
    exe = os.path.join(RUST, "target", "release", alloc)
    out = subprocess.run([exe, workload], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"rust_allocators: {alloc} {workload} failed (exit {out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "rust-allocators.md"))
    ap.add_argument("--no-build", action="store_true", help="use the binaries already in rust/target/release")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1 (got {a.rounds})")
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "strata-rust-bench"], cwd=RUST, check=True)
    res = {(al, w): [] for al in ALLOCATORS for w in WORKLOADS}
    load = [os.getloadavg()[0]]
    rng = random.Random(1)
    for r in range(a.rounds):
        for w in WORKLOADS:
            order = ALLOCATORS[:]
            rng.shuffle(order)  # no allocator always runs first (cold caches) or last
            for al in order:
                res[(al, w)].append(run_one(al, w))
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}/{a.rounds} done (load {load[-1]:.1f})", file=sys.stderr)
    checks = {w: {res[(al, w)][0]["check"] for al in ALLOCATORS} for w in WORKLOADS}
    for w, c in checks.items():
        if len(c) != 1:
            sys.exit(f"rust_allocators: {w}: the allocators computed different results {c}")

    med = {k: (statistics.median(x["seconds"] for x in v), statistics.median(x["peak_rss_kib"] for x in v))
           for k, v in res.items()}
    versions = crate_versions()
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    lines = [
        "# Rust global allocators: time and peak RSS",
        "",
        "The same three Rust programs (`rust/bench`) built once per global allocator, run one",
        "process at a time. Figures are medians of "
        f"{a.rounds} interleaved rounds (each round runs every allocator on each program, in a",
        "shuffled order); ratios are to the system allocator (glibc's malloc): below 1 is",
        "faster or smaller. Time is the program's wall time; peak RSS is the process's `VmHWM`.",
        "",
        "Reproduce: `python3 bench/rust_allocators.py --rounds "
        f"{a.rounds}` (builds `rust/bench` in release mode, then writes this file).",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.machine()}, Linux {platform.release()}; {rustc}.",
        f"Load average (1 min) during the run: {min(load):.1f} to {max(load):.1f}, median "
        f"{statistics.median(load):.1f}, on {os.cpu_count()} CPUs.",
        "With load above the CPU count (other jobs sharing the machine), single runs vary by 20%",
        "and more, which is why the figures are medians of interleaved rounds; read differences",
        "under about 15% as noise there, and the multi-threaded programs (hashmap: 4 threads,",
        "channel: 3) as measuring allocators under CPU contention.",
        "",
        "Crates: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + " (mimalloc with its",
        "default features, i.e. its current default line; tikv-jemallocator with its defaults, prefixed",
        "symbols; snmalloc-rs with its defaults; strata from this repository with its defaults).",
        "",
        "| program | " + " | ".join(ALLOCATORS) + " |",
        "|---|" + "---|" * len(ALLOCATORS),
    ]
    for w in WORKLOADS:
        base_t, base_r = med[("system", w)]
        lines.append(f"| {w}: time | " + " | ".join(
            f"{med[(al, w)][0] / base_t:.2f}x" + (f" ({base_t:.2f} s)" if al == "system" else "") for al in ALLOCATORS) + " |")
        lines.append(f"| {w}: peak RSS | " + " | ".join(
            f"{med[(al, w)][1] / base_r:.2f}x" + (f" ({base_r / 1024:.0f} MiB)" if al == "system" else "")
            for al in ALLOCATORS) + " |")
    gt = {al: statistics.geometric_mean(med[(al, w)][0] / med[("system", w)][0] for w in WORKLOADS) for al in ALLOCATORS}
    gr = {al: statistics.geometric_mean(med[(al, w)][1] / med[("system", w)][1] for w in WORKLOADS) for al in ALLOCATORS}
    lines.append("| geometric mean: time | " + " | ".join(f"{gt[al]:.2f}x" for al in ALLOCATORS) + " |")
    lines.append("| geometric mean: peak RSS | " + " | ".join(f"{gr[al]:.2f}x" for al in ALLOCATORS) + " |")
    lines += ["", "Programs:", ""] + [f"- `{w}`: {d}." for w, d in WORKLOADS.items()]
    lines += ["", "Medians (seconds / peak RSS MiB):", "",
              "| program | " + " | ".join(ALLOCATORS) + " |", "|---|" + "---|" * len(ALLOCATORS)]
    for w in WORKLOADS:
        lines.append(f"| {w} | " + " | ".join(
            f"{med[(al, w)][0]:.2f} s / {med[(al, w)][1] / 1024:.0f}" for al in ALLOCATORS) + " |")
    text = "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump({"rounds": a.rounds, "crates": versions, "rustc": rustc, "loadavg": load,
                   "runs": [x for v in res.values() for x in v]}, f, indent=1)
        f.write("\n")
    print(text)


if __name__ == "__main__":
    main()

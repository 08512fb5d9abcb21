#!/usr/bin/env python3
"""run_attacks.py - runs each heap attack or misuse of attacks.c under glibc, jemalloc,
tcmalloc, mimalloc and strata (LD_PRELOAD), and strata again with guarded sampling on
every allocation (guard_sample_interval:1), then writes the table between the markers of
docs/hardening.md and bench/results/attacks.json.
Usage: bench/attacks/run_attacks.py [--build-dir build] [--no-write]"""
import argparse, json, os, signal, subprocess, sys
from pathlib import Path

here = Path(__file__).resolve().parent
repo = here.parent.parent
PEERS = {
    "glibc": None,
    "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "mimalloc": "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
}
ATTACKS = [
    ("double_free", "double free (64 B, at once)"),
    ("double_free_interleaved", "double free with a free in between (a, b, a)"),
    ("double_free_medium", "double free (12 KiB)"),
    ("double_free_large", "double free (1 MiB)"),
    ("double_free_huge", "double free (64 MiB)"),
    ("double_free_thread_live", "double free, first by another thread (still running; 64 B)"),
    ("double_free_thread_live_large", "double free, first by another thread (still running; 1 MiB)"),
    ("double_free_thread_exited", "double free, first by another thread (exited; 64 B)"),
    ("double_free_thread_exited_large", "double free, first by another thread (exited; 1 MiB)"),
    ("invalid_free_stack", "free of a stack address"),
    ("invalid_free_interior", "free of an interior pointer (256 B + 64)"),
    ("interior_48_16", "interior free: 48 B + 16"),
    ("interior_160_32", "interior free: 160 B + 32"),
    ("interior_3072_1024", "interior free: 3 KiB + 1024"),
    ("interior_8192_4096", "interior free: 8 KiB + 4096"),
    ("interior_12000_4096", "interior free: malloc(12000) + 4096"),
    ("interior_1m_4096", "interior free: 1 MiB + 4096"),
    ("invalid_free_plus1", "free of p + 1"),
    ("invalid_free_global", "free of a global array"),
    ("invalid_free_mmap", "free of a foreign mmap address"),
    ("wrong_size_free", "sized free with a wrong size (100 B block freed as 16)"),
    ("link_overwrite_small", "forged free-list link in a freed 64 B block, then 2 mallocs"),
    ("link_overwrite_medium", "forged free-list link in a freed 2 KiB block, then 2 mallocs"),
    ("realloc_freed_small", "realloc of a freed 100 B block"),
    ("realloc_freed_large", "realloc of a freed 1 MiB block"),
    ("uaf_link_low_byte", "use after free: 0 written over a freed 64 B block's first byte (its link's low byte), then mallocs"),
    ("uaf_link_word", "use after free: an address written over a freed 64 B block's first word, then mallocs"),
    ("overflow_byte_into_free", "one-byte overflow (0) past a 64 B block into its free neighbour, then mallocs"),
    ("overflow_word_into_free", "one-word overflow (an address) past a 64 B block into its free neighbour, then mallocs"),
    ("overflow_byte_into_live", "one-byte overflow (0) past a 64 B block into its live neighbour, both freed, then mallocs"),
    ("overflow_word_into_live", "one-word overflow past a 64 B block into its live neighbour, both freed, then mallocs"),
    ("overflow_past_end", "write 1 and 17 bytes past the usable size"),
    ("use_after_free_write", "use after free: a byte written past the link (offset 40 of a freed 100 B block)"),
    ("huge_request", "malloc(SIZE_MAX - 4096), calloc overflow"),
]


def classify(p):
    err = p.stderr.strip().splitlines()
    first = next((l for l in err if l.strip()), "")
    if p.returncode == 0:
        for line in p.stdout.splitlines():
            if line.startswith("RESULT: "):
                return line[8:]
        return "?"
    if p.returncode < 0:
        sig = signal.Signals(-p.returncode).name
        if first:
            return f"{'aborts' if sig == 'SIGABRT' else 'faults'}, reported: `{first[:70]}`"
        return f"crashes ({sig}, no report)"
    return f"exit {p.returncode}: `{first[:60]}`"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", type=Path, default=repo / "build")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    exe = args.build_dir / "attacks"
    subprocess.run(["cc", "-O1", "-g", "-fno-builtin", "-o", str(exe), str(here / "attacks.c"), "-ldl", "-lpthread"],
                   check=True)
    libs = dict(PEERS)
    libs["strata"] = str(args.build_dir / "libstrata.so")
    cols = list(libs) + ["strata, guard N=1"]
    rows = {}
    for name, desc in ATTACKS:
        rows[name] = {}
        for col in cols:
            lib = libs.get(col, libs["strata"])
            env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF")}
            if lib:
                if not Path(lib).exists():
                    rows[name][col] = "not installed"
                    continue
                env["LD_PRELOAD"] = lib
            if col.startswith("strata, guard"):
                env["MALLOC_CONF"] = "guard_sample_interval:1"
            env["MIMALLOC_SHOW_ERRORS"] = "1"
            try:
                p = subprocess.run([str(exe), name], env=env, capture_output=True, text=True, timeout=20)
                rows[name][col] = classify(p)
            except subprocess.TimeoutExpired:
                rows[name][col] = "hangs"
    lines = ["| attack or misuse | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, desc in ATTACKS:
        lines.append(f"| {desc} (`{name}`) | " + " | ".join(rows[name][c].replace("|", "/") for c in cols) + " |")
    table = "\n".join(lines)
    print(table)
    if args.no_write:
        return
    (repo / "bench/results").mkdir(exist_ok=True)
    (repo / "bench/results/attacks.json").write_text(json.dumps(rows, indent=1) + "\n")
    doc = repo / "docs/hardening.md"
    text = doc.read_text()
    a, b = "<!-- attacks:begin -->", "<!-- attacks:end -->"
    i, j = text.index(a) + len(a), text.index(b)
    doc.write_text(text[:i] + "\n" + table + "\n" + text[j:])


if __name__ == "__main__":
    main()

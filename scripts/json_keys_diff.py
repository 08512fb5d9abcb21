#!/usr/bin/env python3
"""Compare the key sets of two malloc_stats_print("J") outputs.

    scripts/json_keys_diff.py REFERENCE.json OTHER.json [--missing] [--min-coverage PCT]

REFERENCE is usually jemalloc's output, OTHER strata's. Keys are flattened to dotted
paths; array positions (bins, lextents, extents, arena numbers) become "<i>" so that two
programs with different size-class counts or arenas compare by name. Prints the coverage
(the share of REFERENCE's keys that OTHER has) and, with --missing, each missing key.
Exit status 1 when coverage is under --min-coverage, 2 on a usage or file error.
"""
import argparse
import json
import re
import sys


def flatten(node, prefix, out):
    if isinstance(node, dict):
        for k, v in node.items():
            k = "<i>" if re.fullmatch(r"\d+|merged|destroyed", k) and prefix.endswith("stats.arenas") else k
            flatten(v, f"{prefix}.{k}" if prefix else k, out)
    elif isinstance(node, list):
        for v in node:
            flatten(v, prefix + ".<i>", out)
    else:
        out.add(prefix)
    return out


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return flatten(json.load(f), "", set())
    except OSError as e:
        sys.exit(f"json_keys_diff: cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"json_keys_diff: {path} is not JSON: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reference")
    ap.add_argument("other")
    ap.add_argument("--missing", action="store_true", help="list the reference keys the other lacks")
    ap.add_argument("--extra", action="store_true", help="list the other's keys the reference lacks")
    ap.add_argument("--min-coverage", type=float, default=0.0, metavar="PCT")
    a = ap.parse_args()
    ref, oth = load(a.reference), load(a.other)
    have = ref & oth
    pct = 100.0 * len(have) / len(ref) if ref else 100.0
    print(f"{len(have)} of {len(ref)} reference keys present ({pct:.1f}%); {len(oth - ref)} extra")
    if a.missing:
        for k in sorted(ref - oth):
            print("missing", k)
    if a.extra:
        for k in sorted(oth - ref):
            print("extra", k)
    return 1 if pct < a.min_coverage else 0


if __name__ == "__main__":
    sys.exit(main())

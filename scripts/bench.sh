#!/usr/bin/env bash
# bench.sh - the README's main command: installs the peer allocators and tools, builds
# strata in build/, and runs the allocator comparison (`strata bench`): glibc, jemalloc,
# tcmalloc, mimalloc and strata on the core workloads (the literature's experiments with
# --experiments), a summary table on stdout, and a report with plots under bench/out/.
# Extra arguments go to `strata bench` (--experiments, --full,
# --only, --allocators, --rounds, ...). Needs root (or sudo) only when packages are missing:
# scripts/install-deps.sh says so before it does anything.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/build.sh
exec bash scripts/strata bench --build-dir "$root/build" "$@"

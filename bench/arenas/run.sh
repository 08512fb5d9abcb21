#!/usr/bin/env bash
# run.sh - the figures of bench/arenas/README.md: instructions per allocation (callgrind)
# of malloc against mallocx(MALLOCX_ARENA|MALLOCX_TCACHE_NONE), and the time of
# arena.<i>.reset over 1 GiB of small blocks. Usage: bench/arenas/run.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
bin=$build/examples/arena_cost
[ -x "$bin" ] || { echo "run.sh: $bin missing (build the top level first)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "run.sh: valgrind missing: instruction figures skipped" >&2; }
tmp=$(mktemp -d)
lib() { # lib PROFILE -> instructions inside the allocator: the total less the loop's own
  local total self
  total=$(callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1; exit}')
  self=$(callgrind_annotate "$1" 2>/dev/null | awk '/arena_cost.c:measured_/ {gsub(",","",$1); print $1; exit}')
  echo $((total - self))
}
if command -v valgrind >/dev/null; then
  for m in malloc_only arena_only pair arena_pair; do
    valgrind --tool=callgrind --callgrind-out-file="$tmp/$m" --toggle-collect='measured_*' "$bin" $m 100000 >/dev/null 2>"$tmp/$m.log"
    total=$(grep -o 'Collected : [0-9]*' "$tmp/$m.log" | awk '{print $3}')
    echo "$m: $(awk -v t="$total" 'BEGIN{printf "%.1f", t/100000}') instructions per iteration (loop included)"
  done
  m=$(lib "$tmp/malloc_only"); x=$(lib "$tmp/arena_only")
  echo "inside the library: malloc $(awk -v v="$m" 'BEGIN{printf "%.1f", v/100000}'), mallocx(ARENA|TCACHE_NONE) $(awk -v v="$x" 'BEGIN{printf "%.1f", v/100000}'), ratio $(awk -v a="$x" -v b="$m" 'BEGIN{printf "%.2f", a/b}')"
fi
for s in 16 64 512 4096 14336; do "$bin" reset $s; done
rm -rf "$tmp"

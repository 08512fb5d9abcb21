#!/usr/bin/env bash
# test-build-types.sh [TYPES...] - builds the library and the unit tests in the other CMake
# build types (default: Release Debug MinSizeRel; the main suite runs RelWithDebInfo) and
# runs the tests labelled "unit" there: code generation differs between -O3, -O0 and -Os
# (inlining, unrolling, frame layout) and the unwinder and the fast paths must be right in
# each. Only tests/unit is built (about a minute per type on two cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Release Debug MinSizeRel)
status=0
for t in "${types[@]}"; do
  dir="build-$(echo "$t" | tr '[:upper:]' '[:lower:]')"
  echo "== $t ($dir)"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$t" -DSTRATA_BUILD_BENCH=OFF >/dev/null
  if ! cmake --build "$dir" --target tests/unit/all; then
    echo "test-build-types.sh: $t: build failed"; status=1; continue
  fi
  (cd "$dir" && ctest --output-on-failure -L '^unit' -j "$(nproc)") || status=1
done
exit $status

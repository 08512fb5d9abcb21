#!/usr/bin/env bash
# sanitize.sh - builds strata's prefixed configuration (STRATA_OVERRIDE=OFF: only strata_*
# names, so the sanitizers' own allocator stays in charge of the program) under
# ThreadSanitizer and under AddressSanitizer+UBSan, and runs the tests labelled "prefixed".
# Usage: scripts/sanitize.sh [BUILD_ROOT [tsan|asan ...]]
#   BUILD_ROOT (default: the repository root) receives build-tsan/ and build-asan/.
# Environment: CC/CXX pick the compiler (default gcc/g++), JOBS the ctest parallelism.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${1:-$repo}
shift || true
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(tsan asan)
jobs=${JOBS:-$(nproc)}
export CC=${CC:-gcc} CXX=${CXX:-g++}

run() { # run NAME FLAGS
    local name=$1 flags=$2 dir=$root/build-$1
    echo "=== $name: $flags -> $dir"
    cmake -S "$repo" -B "$dir" -G Ninja \
        -DSTRATA_OVERRIDE=OFF -DCMAKE_BUILD_TYPE=Debug -DSTRATA_DEBUG=ON -DSTRATA_WERROR=OFF \
        -DSTRATA_BUILD_BENCH=OFF \
        "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" \
        "-DCMAKE_EXE_LINKER_FLAGS=$flags" "-DCMAKE_SHARED_LINKER_FLAGS=$flags"
    cmake --build "$dir"
    (cd "$dir" && ctest -L prefixed --output-on-failure -j "$jobs")
}

status=0
for kind in "${kinds[@]}"; do
    case $kind in
    tsan)
        # halt_on_error: the first race fails the test instead of scrolling by.
        # detect_deadlocks=0: fork's prepare handler holds every bin lock of every arena at
        # once (the documented lock order), more than the 64 TSan's detector can track.
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 detect_deadlocks=0 ${TSAN_OPTIONS:-}" \
            run tsan "-fsanitize=thread -g -O1" || status=1
        ;;
    asan)
        ASAN_OPTIONS="${ASAN_OPTIONS:-}" \
        UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1 ${UBSAN_OPTIONS:-}" \
            run asan "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1" || status=1
        ;;
    *)
        echo "unknown kind $kind (tsan, asan)" >&2
        exit 2
        ;;
    esac
done
exit $status

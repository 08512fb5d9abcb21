#!/usr/bin/env bash
# fuzz.sh - builds strata's three libFuzzer targets (tests/fuzz/*.c) with clang against the
# prefixed sources (strata_* names, so ASan+UBSan keep their own allocator) and runs each
# for SECONDS (default 60) from its committed seed corpus tests/fuzz/<target>/seeds plus a
# scratch corpus. Crash inputs are copied to tests/fuzz/<target>/regressions/, and every
# file already there is run first as a regression test. Exits non-zero on any failure.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET ...]   (targets: api_fuzz conf_fuzz ctl_fuzz)
# Needs clang and libclang-rt-14-dev (scripts/install-deps.sh); skips with exit 77 without.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(api_fuzz conf_fuzz ctl_fuzz)
cc=${FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null || ! echo 'int LLVMFuzzerTestOneInput(const char*d,long n){return 0;}' |
        "$cc" -x c -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
    echo "fuzz.sh: SKIP: $cc with libFuzzer (libclang-rt-14-dev) is not available"
    exit 77
fi
out=${FUZZ_OUT:-$repo/build-fuzz}
mkdir -p "$out"
srcs=()
for f in "$repo"/src/*.c; do srcs+=("$f"); done
flags=(-O1 -g -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -I"$repo/include" -I"$repo/include/strata" -I"$repo/src" -pthread)
# FUZZ_SEED fixes libFuzzer's seed (scripts/test.sh sets 1, so CI replays the inputs
# already explored here); unset, every run explores afresh.
seed_arg=()
[ -n "${FUZZ_SEED:-}" ] && seed_arg=(-seed="$FUZZ_SEED")
status=0
for t in "${targets[@]}"; do
    dir=$repo/tests/fuzz/$t
    bin=$out/$t
    if [ ! -x "$bin" ] || [ -n "$(find "$repo/src" "$repo/tests/fuzz/$t.c" -newer "$bin" -print -quit)" ]; then
        echo "=== building $t"
        "$cc" "${flags[@]}" "$repo/tests/fuzz/$t.c" "${srcs[@]}" -o "$bin" -lgcc_s
    fi
    mkdir -p "$dir/seeds" "$dir/regressions" "$out/$t-corpus" "$out/$t-crashes"
    if [ -n "$(ls -A "$dir/regressions")" ]; then
        echo "=== $t: regression inputs"
        "$bin" "$dir"/regressions/* || status=1
    fi
    echo "=== $t: ${secs}s"
    if ! ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1} \
            "$bin" "${seed_arg[@]}" -max_total_time="$secs" -max_len=4096 -timeout=20 -rss_limit_mb=4096 \
            -artifact_prefix="$out/$t-crashes/" "$out/$t-corpus" "$dir/seeds" 2>"$out/$t.log"; then
        status=1
        tail -40 "$out/$t.log"
        for c in "$out/$t-crashes"/*; do
            [ -e "$c" ] && cp "$c" "$dir/regressions/" && echo "fuzz.sh: kept $dir/regressions/$(basename "$c")"
        done
    else
        grep -E "^#[0-9]+.*DONE|Done [0-9]+ runs" "$out/$t.log" | tail -1 || true
    fi
done
[ $status -eq 0 ] && echo "fuzz.sh: all targets passed" || echo "fuzz.sh: FAILED"
exit $status

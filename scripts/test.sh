#!/usr/bin/env bash
# test.sh - the README's test command. Installs what the tests need, builds strata
# (release build with tests and benchmarks) in build/, runs the whole ctest suite, then
# builds the prefixed configuration under ThreadSanitizer and AddressSanitizer+UBSan and
# runs the tests labelled "prefixed" there, the unit tests in the Release, Debug and
# MinSizeRel builds (scripts/test-build-types.sh), then the Rust crates' tests
# (rust/test.sh). Exits non-zero if anything fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/build.sh
status=0
(cd build && ctest --output-on-failure -j "$(nproc)") || status=1
bash scripts/sanitize.sh "$root" || status=1
bash scripts/test-build-types.sh || status=1
# The Rust crates (rust/): cargo test, then the packaged crates built from a clean
# directory, STRATA_OVERRIDE among them with build/libstrata.a.
bash rust/test.sh || status=1
# libFuzzer targets, 30 s each with a fixed seed, so CI replays what was explored here
# (exit 77: clang/libFuzzer missing, reported and skipped).
rc=0; FUZZ_SEED=${FUZZ_SEED:-1} bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}" || rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || status=1
if [ $status -eq 0 ]; then echo "test.sh: all test suites passed"; else echo "test.sh: FAILED"; fi
exit $status

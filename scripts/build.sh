#!/usr/bin/env bash
# build.sh - the shared first step of the README's two commands: installs what strata's
# build, tests and benchmarks need, then configures and builds the release build in
# build/ (library, tests, benchmark workloads). Idempotent and quick when done already.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build

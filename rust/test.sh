#!/usr/bin/env bash
# rust/test.sh - the Rust crates' tests: `cargo test` of strata-sys, strata and strata-ctl
# (strata-ctl also with its prometheus-client feature), then the crates as published:
# packaged with `cargo package`, unpacked in an empty directory outside the repository and
# built there by a small program (defaults; STRATA_SYS_WITH_MALLOC_CONF; the unprefixed
# feature; STRATA_OVERRIDE pointing at build/libstrata.a when the CMake build made one).
# Installs a Rust toolchain (rustup, minimal profile) only when cargo is missing.
# Usage: rust/test.sh [--no-package]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cd "$here"

if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] || {
        echo "rust/test.sh: cargo not found; installing a minimal Rust toolchain with rustup"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    }
    export PATH="$HOME/.cargo/bin:$PATH"
fi

echo "=== cargo test (strata-sys, strata, strata-ctl)"
cargo test
cargo test -p strata-ctl --features prometheus-client --test ctl prometheus

[ "${1:-}" = "--no-package" ] && exit 0

echo "=== packaged crates, built from a clean directory"
cargo package -p strata-sys -p strata -p strata-ctl --allow-dirty --no-verify
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for c in strata-sys strata strata-ctl; do
    tar -xzf "target/package/$c-0.1.0.crate" -C "$tmp"
done
# The packaged strata-sys must carry the C sources: no link may point back into the repo.
if find "$tmp/strata-sys-0.1.0" -type l | grep -q .; then
    echo "rust/test.sh: the packaged strata-sys holds symbolic links" >&2
    exit 1
fi
mkdir -p "$tmp/app/src"
cat >"$tmp/app/Cargo.toml" <<TOML
[package]
name = "app"
version = "0.0.0"
edition = "2021"
publish = false
[workspace]
[dependencies]
strata = "0.1.0"
strata-ctl = "0.1.0"
[features]
unprefixed = ["strata/unprefixed_malloc_on_supported_platforms"]
[patch.crates-io]
strata-sys = { path = "../strata-sys-0.1.0" }
strata = { path = "../strata-0.1.0" }
strata-ctl = { path = "../strata-ctl-0.1.0" }
TOML
cat >"$tmp/app/src/main.rs" <<'RS'
#[global_allocator]
static GLOBAL: strata::Strata = strata::Strata;
extern "C" {
    fn malloc(n: usize) -> *mut u8;
    fn free(p: *mut u8);
}
fn main() {
    let v = vec![1u8; 64 << 20];
    let s = strata_ctl::Stats::read().unwrap();
    assert!(s.allocated >= 64 << 20, "{s:?}");
    drop(v);
    // C's malloc comes from strata only with the unprefixed feature.
    let a0 = strata_ctl::thread::allocated::read().unwrap();
    let p = std::hint::black_box(unsafe { malloc(1000) }); // kept: LLVM elides unused pairs
    let a1 = strata_ctl::thread::allocated::read().unwrap();
    unsafe { free(std::hint::black_box(p)) };
    println!("dirty_decay_ms={}", strata_ctl::opt::dirty_decay_ms::read().unwrap());
    println!("c_malloc_from_strata={}", a1 >= a0 + 1000);
}
RS
export CARGO_TARGET_DIR="$tmp/target"
run_app() { # EXPECTED-OUTPUT-LINES... ; env and cargo flags from the caller
    local out
    out=$(cd "$tmp/app" && cargo run -q --release $APP_FLAGS)
    for want in "$@"; do
        grep -qx "$want" <<<"$out" || { echo "rust/test.sh: expected '$want' in: $out" >&2; exit 1; }
    done
    echo "ok: $APP_DESC"
}
APP_FLAGS="" APP_DESC="defaults (prefixed)" run_app "dirty_decay_ms=10000" "c_malloc_from_strata=false"
MALLOC_CONF=dirty_decay_ms:777 APP_FLAGS="" APP_DESC="MALLOC_CONF read by a prefixed build" \
    run_app "dirty_decay_ms=777"
STRATA_SYS_WITH_MALLOC_CONF=dirty_decay_ms:4321 APP_FLAGS="" APP_DESC="STRATA_SYS_WITH_MALLOC_CONF built in" \
    run_app "dirty_decay_ms=4321"
STRATA_SYS_WITH_MALLOC_CONF=dirty_decay_ms:4321 STRATA_CONF=dirty_decay_ms:888 APP_FLAGS="" \
    APP_DESC="STRATA_CONF over the built-in options" run_app "dirty_decay_ms=888"
APP_FLAGS="--features unprefixed" APP_DESC="unprefixed: C's malloc is strata's" run_app "c_malloc_from_strata=true"
if [ -f "$root/build/libstrata.a" ]; then
    STRATA_OVERRIDE="$root/build/libstrata.a" APP_FLAGS="" APP_DESC="STRATA_OVERRIDE=build/libstrata.a" \
        run_app "dirty_decay_ms=10000" "c_malloc_from_strata=true"
else
    echo "skip: STRATA_OVERRIDE (no build/libstrata.a)"
fi
echo "rust/test.sh: all Rust tests passed"

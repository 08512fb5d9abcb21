#!/usr/bin/env bash
# recipes.sh - the link recipes of docs/deployment.md, run against a `cmake --install` of
# this build into a scratch prefix. Each recipe builds tests/recipes/app.c (which calls no
# strata function directly) and runs it; app.c passes only if strata serves its malloc.
# Usage: recipes.sh RECIPE BUILD_DIR WORK_DIR LIBDIR CC
#   RECIPE: install (the fixture: installs into WORK_DIR/prefix), dynamic, preload, static,
#   pkg_config, pkg_config_static, cmake. Exit 77 (skip) where a tool the recipe needs is
#   missing (pkg-config; glibc's libc.a for a fully static program).
set -euo pipefail
recipe=$1 build=$2 work=$3 libdir=$4 cc=$5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=$work/prefix
app=$here/app.c
out=$work/$recipe
export PKG_CONFIG_PATH=$P/$libdir/pkgconfig
# The documented commands assume the default prefix (/usr/local), whose directories the
# compiler and the loader search; for the scratch prefix, say where it is.
inc=(-I"$P/include")
lib=(-L"$P/$libdir")
rpath=(-Wl,-rpath,"$P/$libdir")

skip() { echo "SKIP: $*"; exit 77; }
run() { echo "+ $*"; "$@"; }
have_libc_a() { [ -n "$("$cc" -print-file-name=libc.a | grep /)" ] && [ -f "$("$cc" -print-file-name=libc.a)" ]; }

if [ "$recipe" != install ]; then
    [ -f "$P/include/strata.h" ] || { echo "FAIL: no installed strata under $P (recipes.install)"; exit 1; }
    rm -rf "$out" && mkdir -p "$out"
fi

case $recipe in
install)
    rm -rf "$work" && mkdir -p "$work"
    run cmake --install "$build" --prefix "$P" >"$work/install.log" ||
        { cat "$work/install.log"; exit 1; }
    for f in include/strata.h include/strata/jemalloc/jemalloc.h "$libdir/libstrata.a" \
             "$libdir/libstrata.so" "$libdir/libstrata.so.0" "$libdir/pkgconfig/strata.pc" "$libdir/cmake/strata/strataConfig.cmake"; do
        [ -e "$P/$f" ] || { echo "FAIL: cmake --install did not install $f"; exit 1; }
    done
    echo "ok: installed into $P"
    ;;
dynamic) # cc app.c -lstrata (a program that calls malloc/free itself), and with
    # -Wl,--push-state,--no-as-needed -lstrata -Wl,--pop-state (one that does not)
    run "$cc" -DAPP_CALLS_FREE "$app" "${inc[@]}" "${lib[@]}" "${rpath[@]}" -lstrata -o "$out/app"
    run "$out/app"
    # grep reads all of ldd's output: grep -q would stop at the match and, under pipefail,
    # ldd's SIGPIPE on its next line would fail the pipeline (a flaky FAIL).
    ldd "$out/app" | grep "libstrata.so" >/dev/null || { echo "FAIL: app does not load libstrata.so"; exit 1; }
    run "$cc" "$app" "${inc[@]}" "${lib[@]}" "${rpath[@]}" -Wl,--push-state,--no-as-needed -lstrata \
        -Wl,--pop-state -o "$out/app2"
    run "$out/app2"
    ;;
preload) # LD_PRELOAD=/usr/local/lib/libstrata.so.0 program
    run "$cc" "$app" "${inc[@]}" -o "$out/app"
    if "$out/app" >/dev/null 2>&1; then echo "FAIL: app passes without strata"; exit 1; fi
    run env LD_PRELOAD="$P/$libdir/libstrata.so.0" "$out/app"
    err=$(env LD_PRELOAD="$P/$libdir/libstrata.so.0" MALLOC_CONF=confirm_conf:true ls / 2>&1 >/dev/null)
    echo "$err" | grep '^<strata>: conf:' >/dev/null || { echo "FAIL: ls under LD_PRELOAD: $err"; exit 1; }
    ;;
static) # cc -static app.c -Wl,--whole-archive -lstrata -Wl,--no-whole-archive -lpthread
    have_libc_a || skip "no libc.a (Debian: libc6-dev) for a fully static program"
    run "$cc" -static "$app" "${inc[@]}" "${lib[@]}" -Wl,--whole-archive -lstrata -Wl,--no-whole-archive \
        -lpthread -o "$out/app"
    run "$out/app"
    if ldd "$out/app" >/dev/null 2>&1; then echo "FAIL: app is not static"; exit 1; fi
    ;;
pkg_config) # cc app.c $(pkg-config --cflags --libs strata); app.c calls no malloc function
    command -v pkg-config >/dev/null || skip "pkg-config not installed"
    # shellcheck disable=SC2046
    run "$cc" "$app" $(pkg-config --cflags --libs strata) "${rpath[@]}" -o "$out/app"
    run "$out/app"
    ;;
pkg_config_static) # cc -static app.c $(pkg-config --static --cflags --libs strata)
    command -v pkg-config >/dev/null || skip "pkg-config not installed"
    have_libc_a || skip "no libc.a (Debian: libc6-dev) for a fully static program"
    flags=$(pkg-config --static --cflags --libs strata)
    echo "pkg-config --static --cflags --libs strata: $flags"
    case " $flags " in *" -lm "*) echo "FAIL: pkg-config asks for libm, which strata does not use"; exit 1 ;; esac
    # shellcheck disable=SC2086
    run "$cc" -static "$app" $flags -o "$out/app"
    run "$out/app"
    ;;
cmake) # find_package(strata) + target_link_libraries(app strata::strata / strata::strata_static)
    run cmake -S "$here" -B "$out" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_COMPILER="$cc" >"$out.log" 2>&1 ||
        { cat "$out.log"; exit 1; }
    run cmake --build "$out" >>"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
    run "$out/app_shared"
    run "$out/app_static"
    ;;
*)
    echo "recipes.sh: unknown recipe '$recipe' (install, dynamic, preload, static, pkg_config," \
         "pkg_config_static, cmake)" >&2
    exit 2
    ;;
esac

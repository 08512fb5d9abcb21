#!/usr/bin/env bash
# symbols.sh - the global symbols of libstrata.so (exported) and libstrata.a (defined) are
# exactly the public names of tests/public-symbols.txt (only its strata_ names in a prefixed
# build), and every global symbol libstrata.a defines has default visibility: an internal
# name (opt, arenas, stats_print...) global in the archive would collide in a static link.
# Usage: symbols.sh LIBSTRATA_SO LIBSTRATA_A PUBLIC_SYMBOLS_TXT OVERRIDE(0|1)
set -euo pipefail
so=$1 ar=$2 list=$3 override=$4
for t in nm readelf; do
    command -v "$t" >/dev/null || { echo "SKIP: $t not found"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grep -v '^#' "$list" | sed '/^$/d' | LC_ALL=C sort -u >"$tmp/all"
if [ "$override" = 1 ]; then
    cp "$tmp/all" "$tmp/want"
else
    grep '^strata_' "$tmp/all" >"$tmp/want"
fi

status=0
compare() { # compare WHAT FILE
    local what=$1 got=$2
    LC_ALL=C sort -u "$got" -o "$got"
    local extra missing
    extra=$(LC_ALL=C comm -13 "$tmp/want" "$got")
    missing=$(LC_ALL=C comm -23 "$tmp/want" "$got")
    if [ -n "$extra" ]; then
        echo "FAIL: $what: global symbols that are not public names (make them static, or"
        echo "hidden; or, if public, add them to $list):"
        echo "$extra" | sed 's/^/  /'
        status=1
    fi
    if [ -n "$missing" ]; then
        echo "FAIL: $what: public names missing:"
        echo "$missing" | sed 's/^/  /'
        status=1
    fi
    [ -n "$extra$missing" ] || echo "ok: $what: $(wc -l <"$got") global symbols, all public"
}

nm -D --defined-only "$so" | awk 'NF == 3 {print $3}' >"$tmp/so"
compare "$(basename "$so") (nm -D --defined-only)" "$tmp/so"
nm -g --defined-only "$ar" | awk 'NF == 3 {print $3}' >"$tmp/ar"
compare "$(basename "$ar") (nm -g --defined-only)" "$tmp/ar"

# readelf -sW: Num Value Size Type Bind Vis Ndx Name. Defined (Ndx not UND), global or weak,
# and not default visibility: a hidden symbol that the archive would still resolve globally.
hidden=$(readelf -sW "$ar" | awk '($5 == "GLOBAL" || $5 == "WEAK") && $7 != "UND" && $6 != "DEFAULT" {print $8}')
if [ -n "$hidden" ]; then
    echo "FAIL: $(basename "$ar"): global symbols with non-default visibility (not localized):"
    echo "$hidden" | sed 's/^/  /' | head -20
    status=1
fi
members=$(ar t "$ar" | wc -l)
echo "$(basename "$ar"): $members member(s)"
exit $status

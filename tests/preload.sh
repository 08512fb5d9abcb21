#!/usr/bin/env bash
# preload.sh - runs a real program with LD_PRELOAD=libstrata.so and checks both that strata
# was loaded (STRATA_CONF=confirm_conf:true must print "<strata>: conf:" lines) and that the
# program's result is right (known value, or identical to a run without strata).
# Usage: preload.sh CASE LIBSTRATA WORKDIR SRCDIR PYTHON STL_THREADS [SQLITE3]
set -u
case_name=$1 lib=$2 work=$3 src=$4 python=$5 stl=$6 sqlite=${7:-}
mkdir -p "$work"
out=$work/$case_name.out err=$work/$case_name.err
export LC_ALL=C
unset MALLOC_CONF STRATA_CONF LD_PRELOAD

fail() { echo "FAIL preload $case_name: $*" >&2; echo "--- stderr of the preloaded run:" >&2; head -c 4000 "$err" >&2; exit 1; }

# with_strata CMD...: runs CMD preloaded, stdout to $out, stderr to $err; returns its status.
with_strata() { env LD_PRELOAD="$lib" STRATA_CONF=confirm_conf:true "$@" >"$out" 2>"$err"; }

check_loaded() {
    grep -q '^<strata>: conf:' "$err" || fail "strata was not loaded (no '<strata>: conf:' line)"
    if grep -v '^<strata>: conf:' "$err" | grep -q '<strata>'; then
        fail "strata reported a problem"
    fi
}

expect_output() { # expect_output TEXT: stdout must contain TEXT
    grep -qF -- "$1" "$out" || fail "output lacks '$1': $(head -c 300 "$out")"
}

[ -f "$lib" ] || fail "no library at $lib"
case $case_name in
python_threads)
    with_strata "$python" "$src/workloads/py_threads.py" || fail "exit status $?"
    check_loaded
    expect_output "py_threads: OK"
    ;;
python_json_startup)
    with_strata "$python" -c 'import json; d = json.loads(json.dumps({"a": [1, 2, 3] * 1000})); print("sum", sum(d["a"]))' || fail "exit status $?"
    check_loaded
    expect_output "sum 6000"
    ;;
sort_large_file)
    # ~50 MB of random lines; sort with and without strata must agree byte for byte.
    input=$work/sort.in
    if [ ! -s "$input" ]; then
        head -c 37000000 /dev/urandom | base64 -w 68 >"$input" || fail "cannot generate input"
    fi
    sort "$input" >"$work/sort.ref" || fail "reference sort failed"
    with_strata sort "$input" || fail "exit status $?"
    check_loaded
    cmp -s "$out" "$work/sort.ref" || fail "sorted output differs from glibc's"
    # A small buffer forces temporary files and a multi-way merge.
    with_strata sort -S 4M --parallel=2 "$input" || fail "sort -S 4M: exit status $?"
    check_loaded
    cmp -s "$out" "$work/sort.ref" || fail "sort -S 4M output differs from glibc's"
    rm -f "$out" "$work/sort.ref"
    ;;
stl_threads)
    "$stl" >"$work/stl.ref" 2>&1 || fail "the program fails without strata too"
    with_strata "$stl" || fail "exit status $?"
    check_loaded
    expect_output "stl_threads: OK"
    cmp -s "$out" "$work/stl.ref" || fail "result differs from the run without strata"
    ;;
sqlite3)
    [ -n "$sqlite" ] || fail "no sqlite3"
    sql=$work/sqlite.sql
    {
        echo "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v INTEGER);"
        echo "BEGIN;"
        awk 'BEGIN { for (i = 1; i <= 5000; i++) { s = ""; for (j = 0; j < i % 90; j++) s = s "x";
            printf "INSERT INTO t(name, v) VALUES(\047name-%d-%s\047, %d);\n", i, s, i * 3 } }'
        echo "COMMIT;"
        echo "CREATE INDEX t_v ON t(v);"
        echo "SELECT count(*), sum(v), sum(length(name)) FROM t;"
        echo "SELECT name FROM t WHERE v BETWEEN 300 AND 330 ORDER BY v DESC LIMIT 3;"
        echo "SELECT v % 7, count(*) FROM t GROUP BY v % 7 ORDER BY 1;"
    } >"$sql"
    rm -f "$work/ref.db" "$work/strata.db"
    "$sqlite" "$work/ref.db" <"$sql" >"$work/sqlite.ref" 2>&1 || fail "sqlite3 fails without strata"
    with_strata "$sqlite" "$work/strata.db" <"$sql" || fail "exit status $?"
    check_loaded
    expect_output "5000|37507500|"
    cmp -s "$out" "$work/sqlite.ref" || fail "query results differ from the run without strata"
    ;;
ls)
    ls -la --time-style=+%s /usr/bin /usr/lib >"$work/ls.ref" 2>/dev/null || fail "ls fails without strata"
    with_strata ls -la --time-style=+%s /usr/bin /usr/lib || fail "exit status $?"
    check_loaded
    cmp -s "$out" "$work/ls.ref" || fail "ls output differs from the run without strata"
    ;;
bash)
    with_strata bash -c 'x=; for i in $(seq 1 2000); do x="$x$i"; done; a=(); for i in {1..3000}; do a+=("item$i"); done; echo "len ${#x} n ${#a[@]}"' || fail "exit status $?"
    check_loaded
    expect_output "len 6893 n 3000"
    ;;
*)
    fail "unknown case"
    ;;
esac
echo "ok preload $case_name"

#!/bin/bash
# check_vocabulary.sh - scripts/check-vocabulary.py on a scratch git checkout: every planted
# hit is listed as file:line and fails the check; the legitimate uses beside them (a
# benchmark's rounds, a process session, a second pass over a list, files under
# bench/results/) are left alone; a clean checkout passes.
# usage: check_vocabulary.sh SOURCE_DIR WORK_DIR [PYTHON]
set -u
src=$1 work=$2 py=${3:-python3}
command -v git >/dev/null || { echo "SKIP: git is not installed"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
repo=$work/repo out=$work/out.txt
rm -rf "$work" && mkdir -p "$repo/src" "$repo/bench/results" "$repo/docs" || fail "cannot make $work"
cd "$repo" && git init -q . || fail "git init"

# The phrases below are built from pieces, so that this file passes the check itself.
n=ninth r=round i=issue I=Issue b=s6
cat >src/clean.c <<EOF
/* Three rounds of the benchmark; the first $r warms the caches, round 2 is measured.
 * A second pass over the list frees what the first one marked. setsid() starts a new
 * session; Redis keeps a session cache. See https://github.com/jemalloc/jemalloc/issues/1234
 * and build for s390x with -s. */
EOF
cat >bench/results/notes.md <<EOF
Measured in the $n session, $i 10, branch ${b}-xthread.
EOF
git add -A
"$py" "$src/scripts/check-vocabulary.py" --root "$repo" >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$out"; fail "clean checkout: exit $rc, expected 0"; }

cat >src/dirty.c <<EOF
/* Cross-arena reuse ($i 10). */
int x; /* ${b}-xthread's fix */
/* Many threads, $n session. */
/* the sixth $r found it */
/* docs/design.md, "Many threads, $n
 * session" */
EOF
printf "see $I #12\n" >docs/notes.md
git add -A
"$py" "$src/scripts/check-vocabulary.py" --root "$repo" >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 1 ] || fail "planted hits: exit $rc, expected 1"
for want in src/dirty.c:1: src/dirty.c:2: src/dirty.c:3: src/dirty.c:4: src/dirty.c:5: docs/notes.md:1:; do
    grep -q "^$want" "$out" || fail "no hit listed for $want"
done
[ "$(grep -c '^src/dirty.c:6:' "$out")" -eq 0 ] || fail "a wrapped phrase was listed twice"
grep -q '^src/clean.c' "$out" && fail "a legitimate use was flagged"
grep -q '^bench/results' "$out" && fail "bench/results/ was checked"
echo "PASS"

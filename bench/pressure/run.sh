#!/bin/bash
# run.sh - the kernel's memory pressure and strata's reaction to it, in a real memory
# cgroup (v1 memory.limit_in_bytes or v2 memory.max, swap off). Two processes share the
# cgroup: a holder under strata that allocated HOLD_MIB, freed it and went idle (its pages
# dirty, waiting for the decay time), then a hog (plain glibc, python) that takes HOG_MIB
# of anonymous memory and reads FILE_MIB of file data five times: what the limit leaves
# beside the holder's dirty pages is too little for that file's page cache, so the
# kernel reclaims it again on each pass (stalls). strata's own
# limit check cannot see the hog; only the kernel's pressure (PSI) says the cgroup is
# reclaiming. Run with pressure_purge:true (the default) and false; prints, per run, the
# stall time the kernel recorded (/proc/pressure/memory "some" total, microseconds, over
# the run), whether the hog survived and how long it took, and the holder's RSS: after its
# frees, when it fell under 24 MiB (its pages back; -1: not within its idle time) and at the end.
# ROUNDS=n repeats the pair of runs; HOLDER_CONF adds options to the holder's MALLOC_CONF;
# VALUES="true" runs only that setting; HOLDER_IDLE_S is how long the holder idles (12).
#
#   bench/pressure/run.sh LIBSTRATA [LIMIT_MIB [HOLD_MIB [HOG_MIB [FILE_MIB]]]]
# Needs root and a memory cgroup; exits 77 otherwise.
set -u
idle=${HOLDER_IDLE_S:-12}
lib=$1 limit=${2:-256} hold=${3:-192} hog=${4:-112} file=${5:-96}
skip() { echo "SKIP: $*"; exit 77; }
[ -r /proc/pressure/memory ] || skip "no /proc/pressure/memory"

mkcg() {
  local v1=/sys/fs/cgroup/memory
  if [ -f "$v1/cgroup.procs" ]; then
    local rel; rel=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)
    local parent="$v1$rel"; [ -d "$parent" ] || parent=$v1
    cg="$parent/strata-pressure-$$"
    mkdir "$cg" 2>/dev/null || skip "cannot create a memory cgroup (need root)"
    echo $((limit << 20)) > "$cg/memory.limit_in_bytes" || skip "cannot set the limit"
    [ -f "$cg/memory.swappiness" ] && echo 0 > "$cg/memory.swappiness" 2>/dev/null
  elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cg="/sys/fs/cgroup/strata-pressure-$$"
    mkdir "$cg" 2>/dev/null || skip "cannot create a cgroup (need root)"
    echo $((limit << 20)) > "$cg/memory.max" || skip "cannot set memory.max"
    [ -f "$cg/memory.swap.max" ] && echo 0 > "$cg/memory.swap.max"
  else
    skip "no memory cgroup controller"
  fi
}

stall() { sed -n 's/^some .*total=\([0-9]*\)/\1/p' /proc/pressure/memory; }

run_one() {  # $1: pressure_purge value
  # The data file's pages leave the page cache, so that the hog's reads charge its cgroup.
  sync "$data"
  python3 -c "import os; fd = os.open('$data', os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)"
  mkcg
  local s0; s0=$(stall)
  # The holder: HOLD_MIB in 1 MiB blocks, touched, freed; then idle for 12 s, printing RSS.
  bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$cg" env LD_PRELOAD="$lib" \
    MALLOC_CONF="pressure_purge:$1${HOLDER_CONF:+,$HOLDER_CONF}" python3 -c "
import time, sys
x = [bytearray(1 << 20) for _ in range($hold)]
for b in x: b[::4096] = b'\x01' * len(b[::4096])
del x
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4
print('holder_rss_after_free_kib', rss(), flush=True)
t0 = time.time()
low = None
while time.time() - t0 < $idle:
    time.sleep(0.25)
    r = rss()
    if low is None and r < 24 * 1024:
        low = time.time() - t0
import ctypes
lib = ctypes.CDLL(None)
v = ctypes.c_uint64(0); sz = ctypes.c_size_t(8)
lib.mallctl(b'stats.pressure_events', ctypes.byref(v), ctypes.byref(sz), None, ctypes.c_size_t(0))
print('holder_rss_end_kib', rss(), 'holder_below_24mib_after_s', -1 if low is None else round(low, 2), 'pressure_events', v.value, flush=True)
" > /tmp/strata-pressure-holder.$$ 2>&1 &
  local holder=$!
  sleep 1.5
  # The hog: HOG_MIB of anonymous memory, then reads FILE_MIB of file data 5 times: its
  # page cache is charged to the cgroup and is what reclaim takes when memory is short.
  local t0; t0=$(date +%s.%N)
  bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$cg" python3 -c "
y = []
for i in range($hog // 4):
    b = bytearray(4 << 20)
    b[::4096] = b'\x02' * len(b[::4096])
    y.append(b)
for r in range(5):
    with open('$data', 'rb', buffering=0) as f:
        while f.read(1 << 20):
            pass
print('hog_ok')
" > /tmp/strata-pressure-hog.$$ 2>&1
  local hogrc=$? t1; t1=$(date +%s.%N)
  wait $holder; local holdrc=$?
  local s1; s1=$(stall)
  echo "cgroup: failcnt $(cat $cg/memory.failcnt 2>/dev/null) max_usage_mib $(( $(cat $cg/memory.max_usage_in_bytes 2>/dev/null || echo 0) >> 20 ))" >&2
  printf '| %s | %s | %s | %.2f | %s | %s |\n' "$1" "$(( (s1 - s0) / 1000 ))" \
    "$([ $hogrc -eq 0 ] && echo survived || echo "killed ($hogrc)")" "$(echo "$t1 - $t0" | bc)" \
    "$([ $holdrc -eq 0 ] && echo survived || echo "killed ($holdrc)")" \
    "$(tr '\n' ' ' < /tmp/strata-pressure-holder.$$ | sed 's/holder_//g')"
  rm -f /tmp/strata-pressure-holder.$$ /tmp/strata-pressure-hog.$$
  for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 0.3; done
}

data=$(mktemp -p "${TMPDIR:-/var/tmp}" strata-pressure-data.XXXXXX)
head -c $((file << 20)) /dev/urandom > "$data"
trap 'rm -f "$data"' EXIT
echo "limit ${limit} MiB, holder ${hold} MiB freed (strata), hog ${hog} MiB (glibc) reading ${file} MiB 5 times"
echo
echo "| pressure_purge | stall ms (PSI some) | hog | hog seconds | holder | holder RSS |"
echo "|---|---|---|---|---|---|"
rounds=${ROUNDS:-1}
for _ in $(seq "$rounds"); do
  for v in ${VALUES:-true false}; do run_one $v; done
done

#!/bin/bash
# container_limit.sh - run a program in a fresh memory cgroup with a limit of FACTOR x
# LIVE_MIB (cgroup v1 memory.limit_in_bytes, or v2 memory.max), swap off for it.
#
#   container_limit.sh PROG LIVE_MIB FACTOR [PRELOAD] [-- ARGS...]
#
# PROG is run as: PROG LIVE_MIB ARGS... (limit_phases), with LD_PRELOAD=PRELOAD when given.
# Exit: 0 it survived, 1 it was OOM-killed or failed (the reason on stderr), 77 no memory
# cgroup can be made here (not root, no controller): ctest's SKIP_RETURN_CODE.
set -u
prog=$1 live=$2 factor=$3 preload=${4:-}
shift 3
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

skip() { echo "SKIP: $*"; exit 77; }
limit=$(awk -v l="$live" -v f="$factor" 'BEGIN { printf "%d", l * f * 1048576 }')

# Where to make the child: under our own cgroup (a container may only write there).
v1root=/sys/fs/cgroup/memory
if [ -f "$v1root/cgroup.procs" ]; then
  rel=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)
  parent="$v1root${rel}"
  [ -d "$parent" ] || parent=$v1root
  cg="$parent/strata-limit-$$"
  mkdir "$cg" 2>/dev/null || skip "cannot create a memory cgroup under $parent (need root)"
  echo "$limit" > "$cg/memory.limit_in_bytes" || { rmdir "$cg"; skip "cannot set memory.limit_in_bytes"; }
  [ -f "$cg/memory.memsw.limit_in_bytes" ] && echo "$limit" > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null
  [ -f "$cg/memory.swappiness" ] && echo 0 > "$cg/memory.swappiness" 2>/dev/null
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  rel=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
  parent="/sys/fs/cgroup${rel}"
  # v2: a cgroup with processes cannot have children with controllers; use the root's child.
  grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null || parent=/sys/fs/cgroup
  cg="$parent/strata-limit-$$"
  mkdir "$cg" 2>/dev/null || skip "cannot create a cgroup under $parent (need root)"
  echo "$limit" > "$cg/memory.max" || { rmdir "$cg"; skip "cannot set memory.max"; }
  [ -f "$cg/memory.swap.max" ] && echo 0 > "$cg/memory.swap.max" 2>/dev/null
else
  skip "no memory cgroup controller mounted (v1 $v1root or v2 /sys/fs/cgroup)"
fi

out=$(mktemp)
err=$(mktemp)
bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$cg" \
  env ${preload:+LD_PRELOAD="$preload"} "$prog" "$live" "$@" > "$out" 2> "$err"
rc=$?
for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
if [ $rc -eq 0 ]; then
  cat "$out"
  rm -f "$out" "$err"
  exit 0
fi
if [ $rc -ge 128 ]; then
  echo "killed by signal $((rc - 128)) at a limit of ${factor}x ${live} MiB ($limit bytes)" >&2
else
  echo "exit $rc at a limit of ${factor}x ${live} MiB ($limit bytes)" >&2
fi
cat "$err" >&2
rm -f "$out" "$err"
exit 1

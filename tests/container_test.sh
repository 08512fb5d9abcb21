#!/bin/bash
# container_test.sh - the container-limit test: limit_phases under strata in a memory
# cgroup whose limit is 1.1x one phase's peak (the largest RSS any single phase reaches
# alone, measured first without a limit). Skips (77) where no memory cgroup can be made.
#
#   container_test.sh LIMIT_PHASES LIBSTRATA [LIVE_MIB [FACTOR]]
set -u
prog=$1 lib=$2 live=${3:-128} factor=${4:-1.1}
here=$(cd "$(dirname "$0")" && pwd)

bash "$here/container_limit.sh" /bin/true 1 1000 > /dev/null
rc=$?
if [ $rc -eq 77 ]; then
  bash "$here/container_limit.sh" /bin/true 1 1000   # prints the reason
  exit 77
fi
[ $rc -eq 0 ] || { echo "cgroup probe failed (rc $rc)"; exit 1; }

peak=0
for mix in 0 1 2 3 4 5; do
  out=$(LD_PRELOAD="$lib" "$prog" "$live" 1 "$mix") || { echo "phase $mix failed without a limit"; exit 1; }
  kb=$(echo "$out" | sed -n 's/.*"max_phase_rss_kb":\([0-9]*\).*/\1/p')
  [ "$kb" -gt "$peak" ] && peak=$kb
done
lim_factor=$(awk -v p="$peak" -v l="$live" -v f="$factor" 'BEGIN { printf "%.4f", f * p / (l * 1024) }')
echo "one phase's peak: $peak KiB; limit ${factor}x that = ${lim_factor}x the ${live} MiB live data"
bash "$here/container_limit.sh" "$prog" "$live" "$lim_factor" "$lib"

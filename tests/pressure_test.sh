#!/bin/bash
# pressure_test.sh - strata hears the kernel's memory pressure in a real memory cgroup:
# bench/pressure/run.sh's scenario (a strata process idle after freeing 128 MiB, and a
# glibc process whose page cache thrashes, in a 200 MiB cgroup) once with the default
# pressure_purge:true; the strata process must report at least one pressure event and both
# must survive. Skips (77) without root, a memory cgroup or PSI triggers. A strata without
# the reaction (pressure_purge:false) reports none: the test fails.
#
#   pressure_test.sh LIBSTRATA
set -u
lib=$1
here=$(cd "$(dirname "$0")" && pwd)
python3 -c "
import os, sys
try:
    fd = os.open('/proc/pressure/memory', os.O_RDWR | os.O_NONBLOCK)
    os.write(fd, b'some 100000 2000000\0')
except OSError as e:
    sys.exit(1)
" || { echo "SKIP: no PSI triggers on /proc/pressure/memory"; exit 77; }
# The cgroup is tight on purpose: now and then the kernel OOM-kills one of the two
# before any stall is reported (its choice, not strata's); up to three attempts.
for attempt in 1 2 3; do
  out=$(VALUES=true HOLDER_IDLE_S=5 bash "$here/../bench/pressure/run.sh" "$lib" 200 128 64 128 2>&1)
  rc=$?
  echo "$out"
  [ $rc -eq 77 ] && exit 77
  [ $rc -eq 0 ] || exit 1
  row=$(echo "$out" | grep '^| true ')
  if echo "$row" | grep -q '| survived |.*| survived |' && echo "$row" | grep -Eq 'pressure_events [1-9]'; then
    exit 0
  fi
  echo "attempt $attempt: no pressure event reached a surviving strata process"
done
exit 1

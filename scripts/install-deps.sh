#!/usr/bin/env bash
# install-deps.sh - installs what strata's build, tests and `strata bench` need on Debian 12:
# the toolchain, valgrind, the peer allocators, Redis, sqlite3, stress-ng, GNU time,
# matplotlib and pytest. It does not install strata's own `strata` command (the checkout's
# is scripts/strata; `cmake --install` installs one): a global install of one checkout
# would run its code for every other checkout on the machine.
# Idempotent: when everything is already there it only checks (about a second), and
# needs no root. Otherwise it says first what needs root and why, then installs through
# sudo when not root; waits (STRATA_APT_LOCK_WAIT seconds, default 600) for a package lock
# held by another process, naming it; and leaves the services of the packages it installs
# (nginx, redis-server, prometheus-node-exporter) as it found them: not started, and not
# enabled at boot unless they were. PYTHON=/path/to/python3 picks the interpreter.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
# shellcheck source=setup-lib.sh
source "$ROOT/scripts/setup-lib.sh"

APT_PKGS=(build-essential cmake ninja-build valgrind
          libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
          redis-server redis-tools sqlite3 stress-ng clang libclang-rt-14-dev
           time    # GNU time: the workloads' own peak RSS (see tools/README.md)
          libjemalloc-dev)  # jeprof: the heap profiler's heap_v2 dumps are checked with it
APT_PKGS+=(prometheus-node-exporter)  # introspection test: scrapes strata's stats_file
APT_PKGS+=(prometheus)         # promtool: the metric names are linted with `promtool check metrics`
APT_PKGS+=(systemtap-sdt-dev bpftrace)  # USDT probes (<sys/sdt.h>) and the test that traces them
# strata bench's experiments (nginx driven by wrk; javac/java for the JVM one).
APT_PKGS+=(nginx wrk openjdk-17-jdk-headless)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${APT_PKGS[@]}"; do
  installed "$p" || missing+=("$p")
done
# python3-pip only when the interpreter we use has no pip (pyenv's has its own).
if ! "$PY" -m pip --version >/dev/null 2>&1 && ! installed python3-pip; then
  missing+=(python3-pip)
fi

SUDO=()
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
  why="root is needed to install ${#missing[@]} missing Debian package(s) with apt-get (${missing[*]}) and to keep their services from starting"
  if command -v sudo >/dev/null 2>&1; then
    echo "install-deps.sh: $why; running those commands with sudo"
    SUDO=(sudo)
  else
    echo "install-deps.sh: $why, and sudo is not installed: run this script as root, or install" \
         "the packages yourself (apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

LOCK_WAIT=${STRATA_APT_LOCK_WAIT:-600}
apt_get() {
  # The lock may be taken again between pkg_lock_wait and apt-get: apt waits for it too.
  pkg_lock_wait "$LOCK_WAIT" || exit 1
  # RUNLEVEL=1 and policy-rc.d (svc_block_starts) keep invoke-rc.d from starting services.
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
    apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT" "$@"
}
apt_install() { apt_get install -y -qq --no-install-recommends "$@"; }

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps.sh: apt-get install ${missing[*]}"
  svc_record
  svc_block_starts "${SUDO[@]}"
  trap 'svc_allow_starts "${SUDO[@]}"' EXIT
  # apt-get update only when there are no package lists yet, or the install failed
  # (stale lists); never on a machine that already has everything.
  if ! compgen -G "/var/lib/apt/lists/*_Packages" >/dev/null; then
    apt_get update -qq
  fi
  if ! apt_install "${missing[@]}"; then
    apt_get update -qq
    apt_install "${missing[@]}"
  fi
  svc_allow_starts "${SUDO[@]}"
  trap - EXIT
  svc_restore "${SUDO[@]}"
fi

pip_install() {
  # Debian's own python3 refuses pip installs (PEP 668, "externally managed"):
  # retry with --break-system-packages only in that case.
  local err
  err=$(mktemp)
  if ! "$PY" -m pip install --quiet --disable-pip-version-check "$@" 2>"$err"; then
    if grep -q "externally-managed" "$err"; then
      "$PY" -m pip install --quiet --disable-pip-version-check --break-system-packages "$@"
    else
      cat "$err" >&2
      rm -f "$err"
      return 1
    fi
  fi
  rm -f "$err"
}

# Import checks run from / so that a checkout in the working directory does not count.
has_module() { (cd / && "$PY" -c "import $1" >/dev/null 2>&1); }

py_missing=()
has_module matplotlib || py_missing+=(matplotlib)
has_module pytest || py_missing+=(pytest)
has_module prometheus_client || py_missing+=(prometheus_client)  # introspection test's parsers
# strata prof: pprof's profile.proto (protobuf) and ELF symbol tables (pyelftools).
has_module google.protobuf || py_missing+=(protobuf)
has_module elftools || py_missing+=(pyelftools)
if [ ${#py_missing[@]} -gt 0 ]; then
  echo "install-deps.sh: pip install ${py_missing[*]}"
  pip_install "${py_missing[@]}"
fi

echo "install-deps.sh: all dependencies present (the strata command of this checkout: scripts/strata)"

#!/usr/bin/env bash
# install-deps.sh - installs what strata's build, tests and `strata bench` need on Debian 12:
# the toolchain, valgrind, the peer allocators, Redis, sqlite3, stress-ng, GNU time,
# matplotlib and pytest, then `pip install -e tools/` (the `strata` command).
# Idempotent: when everything is already there it only checks (about a second).
# Runs as root, or through sudo. PYTHON=/path/to/python3 picks the interpreter.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}

APT_PKGS=(build-essential cmake ninja-build valgrind
          libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
          redis-server redis-tools sqlite3 stress-ng clang libclang-rt-14-dev
           time    # GNU time: the workloads' own peak RSS (see tools/README.md)
          libjemalloc-dev)  # jeprof: the heap profiler's heap_v2 dumps are checked with it
APT_PKGS+=(prometheus-node-exporter)  # introspection test: scrapes strata's stats_file
APT_PKGS+=(prometheus)         # promtool: the metric names are linted with `promtool check metrics`
APT_PKGS+=(systemtap-sdt-dev bpftrace)  # USDT probes (<sys/sdt.h>) and the test that traces them
# issue 12: strata bench's experiments (nginx driven by wrk; javac/java for the JVM one).
APT_PKGS+=(nginx wrk openjdk-17-jdk-headless)

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps.sh: run as root or install sudo" >&2
    exit 1
  fi
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${APT_PKGS[@]}"; do
  installed "$p" || missing+=("$p")
done
# python3-pip only when the interpreter we use has no pip (pyenv's has its own).
if ! "$PY" -m pip --version >/dev/null 2>&1 && ! installed python3-pip; then
  missing+=(python3-pip)
fi

apt_install() {
  # RUNLEVEL=1 keeps invoke-rc.d from starting redis-server's service on port 6379.
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
    apt-get install -y -qq --no-install-recommends "$@"
}

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps.sh: apt-get install ${missing[*]}"
  # apt-get update only when there are no package lists yet, or the install failed
  # (stale lists); never on a machine that already has everything.
  if ! compgen -G "/var/lib/apt/lists/*_Packages" >/dev/null; then
    "${SUDO[@]}" apt-get update -qq
  fi
  if ! apt_install "${missing[@]}"; then
    "${SUDO[@]}" apt-get update -qq
    apt_install "${missing[@]}"
  fi
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

# strata_tool: editable install of this checkout, unless it is installed from here already.
if ! (cd / && "$PY" - "$ROOT/tools" >/dev/null 2>&1 <<'EOF'
import os, sys
import strata_tool
here = os.path.realpath(os.path.dirname(strata_tool.__file__))
sys.exit(0 if here.startswith(os.path.realpath(sys.argv[1]) + os.sep) else 1)
EOF
); then
  echo "install-deps.sh: pip install -e tools/"
  pip_install -e "$ROOT/tools"
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
fi

echo "install-deps.sh: all dependencies present"

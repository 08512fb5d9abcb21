#!/usr/bin/env bash
# setup_scripts.sh - scripts/install-deps.sh (and scripts/setup-lib.sh, which it sources)
# with stand-ins for dpkg-query, apt-get, sudo, id, systemctl, service and python3 on PATH:
# nothing is installed, no service is touched, no root is needed.
# Usage: setup_scripts.sh CASE
#   lock_wait_names_holder_and_is_bounded, services_left_as_found,
#   policy_rc_d_only_while_installing, root_need_said_before_anything,
#   no_root_no_sudo_stops_with_the_reason, nothing_missing_needs_no_root,
#   no_systemd_tools_still_installs,
#   checkout_not_installed_globally
set -euo pipefail
case_=$1
# The real python3 (hold_lock), found before the stand-ins go on PATH.
PY_REAL=$(command -v python3 || true)
[ -n "$PY_REAL" ] || { echo "SKIP: no python3 to hold a lock with"; exit 77; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- stand-ins. Their calls go to $T/calls, in order; service states live in $T/svc.
mkdir -p "$T/bin" "$T/svc" "$T/systemd"
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$T/bin/$1"; chmod +x "$T/bin/$1"; }
stub systemctl 'echo "systemctl $*" >>"$T/calls"
q=; [ "$1" = --quiet ] && shift
case $1 in
is-enabled) [ -e "$T/svc/${3:-$2}.enabled" ] ;;
is-active) [ -e "$T/svc/${3:-$2}.running" ] ;;
list-unit-files) for f in "$T"/svc/*.enabled; do [ -e "$f" ] && b=${f##*/} && echo "${b%.enabled}.service enabled enabled"; done; true ;;
disable) u=${!#}; rm -f "$T/svc/${u%.service}.enabled" ;;
stop) u=${!#}; rm -f "$T/svc/${u%.service}.running" ;;
*) exit 1 ;;
esac'
stub service 'echo "service $*" >>"$T/calls"; [ "$2" = status ] && [ -e "$T/svc/$1.running" ]'
stub sudo 'echo "sudo $1" >>"$T/calls"; exec "$@"'
stub id 'if [ "$1" = -u ]; then echo "${FAKE_UID:-1000}"; else exec /usr/bin/id "$@"; fi'
# dpkg-query: every package installed except those named in $T/missing.
stub dpkg-query 'p=${!#}; grep -qx "$p" "$T/missing" 2>/dev/null && exit 1; echo "install ok installed"'
# apt-get install: the packages' maintainer scripts enable nginx and a unit of their own,
# and start nginx unless a policy-rc.d denies it (as invoke-rc.d does).
stub apt-get 'echo "apt-get $*" >>"$T/calls"
case " $* " in *" install "*)
  touch "$T/svc/nginx.enabled" "$T/svc/extra-daemon.enabled"
  if [ -x "$POLICY_RC_D" ]; then echo "policy-rc.d present during install" >>"$T/calls"; else touch "$T/svc/nginx.running"; fi ;;
esac'
stub python3 'echo "python3 $*" >>"$T/calls"; exit 0'
export T PATH="$T/bin:$PATH" PYTHON="$T/bin/python3"
export PKG_LOCK_FILES="$T/lock-frontend $T/lock" POLICY_RC_D="$T/policy-rc.d" SYSTEMD_RUN_DIR="$T/systemd"
touch "$T/lock-frontend" "$T/lock"

hold_lock() { # holds an fcntl lock on $1 (as dpkg does) until killed; prints its pid
    "$PY_REAL" -c '
import fcntl, sys, time
f = open(sys.argv[1], "w"); fcntl.lockf(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(60)' "$1" >"$T/held" &
    for _ in $(seq 100); do grep -q locked "$T/held" 2>/dev/null && break; sleep 0.05; done
    echo $!
}

install_deps() { bash "$repo/scripts/install-deps.sh" >"$T/out" 2>&1; }

case $case_ in
lock_wait_names_holder_and_is_bounded)
    pid=$(hold_lock "$T/lock-frontend")
    # shellcheck source=../scripts/setup-lib.sh
    source "$repo/scripts/setup-lib.sh"
    holders=$(pkg_lock_holders)
    echo "$holders"
    echo "$holders" | grep -q "$T/lock-frontend: pid $pid (python3" || fail "holder not named: $holders"
    start=$(date +%s)
    if pkg_lock_wait 2 1 >"$T/out" 2>&1; then fail "pkg_lock_wait returned 0 while the lock is held"; fi
    cat "$T/out"
    [ $(($(date +%s) - start)) -le 10 ] || fail "the wait was not bounded"
    grep -q "still held after 2 s" "$T/out" && grep -q "pid $pid" "$T/out" || fail "no reason given"
    (sleep 1; kill "$pid") &
    pkg_lock_wait 20 1 || fail "pkg_lock_wait did not return once the lock was released"
    [ -z "$(pkg_lock_holders)" ] || fail "a released lock still reported"
    ;;
services_left_as_found)
    # Before: redis-server enabled and running (left so), nginx neither.
    touch "$T/svc/redis-server.enabled" "$T/svc/redis-server.running"
    echo nginx >"$T/missing"
    POLICY_RC_D=/nonexistent/dir/policy-rc.d FAKE_UID=0 install_deps || { cat "$T/out"; fail "install-deps.sh failed"; }
    cat "$T/out"
    [ ! -e "$T/svc/nginx.enabled" ] || fail "nginx left enabled"
    [ ! -e "$T/svc/nginx.running" ] || fail "nginx left running"
    [ ! -e "$T/svc/extra-daemon.enabled" ] || fail "a unit the installation enabled was left enabled"
    [ -e "$T/svc/redis-server.enabled" ] && [ -e "$T/svc/redis-server.running" ] || fail "redis-server changed"
    grep -q "disabling nginx" "$T/out" && grep -q "stopping nginx" "$T/out" || fail "not said"
    ;;
no_systemd_tools_still_installs)
    # A container image: no systemctl, no service command (both fail as a missing command).
    stub systemctl 'echo "systemctl: command not found" >&2; exit 127'
    stub service 'echo "service: command not found" >&2; exit 127'
    echo stress-ng >"$T/missing"
    FAKE_UID=0 install_deps || { cat "$T/out"; fail "install-deps.sh failed without systemctl"; }
    grep -q "apt-get -o DPkg::Lock::Timeout=600 install" "$T/calls" || fail "apt-get not run"
    ;;
policy_rc_d_only_while_installing)
    echo nginx >"$T/missing"
    FAKE_UID=0 install_deps || { cat "$T/out"; fail "install-deps.sh failed"; }
    grep -q "policy-rc.d present during install" "$T/calls" || fail "services could start during the install"
    [ ! -e "$POLICY_RC_D" ] || fail "policy-rc.d left behind"
    [ ! -e "$T/svc/nginx.running" ] || fail "nginx started"
    # One that exists already is the administrator's: kept as it is.
    printf '#!/bin/sh\nexit 0\n' >"$POLICY_RC_D" && chmod +x "$POLICY_RC_D"
    FAKE_UID=0 install_deps || fail "install-deps.sh failed"
    grep -qx "exit 0" "$POLICY_RC_D" || fail "the existing policy-rc.d was replaced or removed"
    ;;
root_need_said_before_anything)
    echo stress-ng >"$T/missing"
    pid=$(hold_lock "$T/lock")
    (sleep 2; kill "$pid") &
    install_deps || { cat "$T/out"; fail "install-deps.sh failed"; }
    cat "$T/out"
    head -1 "$T/out" | grep -q "root is needed to install 1 missing Debian package(s) with apt-get (stress-ng)" ||
        fail "the first line does not say that root is needed and why"
    grep -q "waiting for the package lock" "$T/out" || fail "no word about the held lock"
    grep -q "^sudo env" "$T/calls" || fail "apt-get not run through sudo"
    grep -q "apt-get -o DPkg::Lock::Timeout=600 install" "$T/calls" || fail "apt-get does not wait for the lock"
    ;;
no_root_no_sudo_stops_with_the_reason)
    echo stress-ng >"$T/missing"
    rm "$T/bin/sudo"
    PATH="$T/bin:/usr/bin:/bin"
    [ -z "$(command -v sudo)" ] || { echo "SKIP: sudo is in /usr/bin or /bin"; exit 77; }
    if install_deps; then fail "install-deps.sh succeeded without root or sudo"; fi
    cat "$T/out"
    grep -q "root is needed to install .*stress-ng.*sudo is not installed: run this script as root" "$T/out" ||
        fail "no reason given"
    ! grep -q apt-get "$T/calls" 2>/dev/null || fail "apt-get was run"
    ;;
nothing_missing_needs_no_root)
    rm "$T/bin/sudo"
    install_deps || { cat "$T/out"; fail "install-deps.sh failed with nothing to install"; }
    ! grep -q "root is needed" "$T/out" || fail "asked for root with nothing to install"
    ! grep -q "apt-get" "$T/calls" 2>/dev/null || fail "apt-get run with nothing to install"
    ;;
checkout_not_installed_globally)
    install_deps || { cat "$T/out"; fail "install-deps.sh failed"; }
    ! grep -E "pip install.*(-e|--editable|/tools)" "$T/calls" || fail "install-deps.sh installs the checkout"
    # The checkout's own command runs from its source.
    out=$(env -u PYTHON PATH=/usr/bin:/bin bash "$repo/scripts/strata" --help 2>&1) || fail "scripts/strata --help: $out"
    echo "$out" | grep -q "usage: strata" || fail "scripts/strata --help: $out"
    ;;
*)
    echo "setup_scripts.sh: unknown case $case_" >&2
    exit 2
    ;;
esac
echo "ok: $case_"

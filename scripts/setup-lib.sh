# setup-lib.sh - sourced by install-deps.sh: waiting for the Debian package lock (saying
# who holds it), and leaving services as they were found (the packages strata's benchmarks
# need, nginx, redis-server and prometheus-node-exporter, enable and start theirs).
# Not run directly; tests/setup_scripts.sh exercises each function with stand-ins.

SETUP_PROG=${SETUP_PROG:-install-deps.sh}
# The locks apt and dpkg take: the frontend lock first (apt-get, unattended-upgrades).
PKG_LOCK_FILES=${PKG_LOCK_FILES:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}
POLICY_RC_D=${POLICY_RC_D:-/usr/sbin/policy-rc.d}
# The services of the packages install-deps.sh installs (besides any unit newly enabled).
SETUP_SERVICES=(nginx redis-server prometheus-node-exporter)

# "pid N (comm: command line)" for a process, or "pid N" when it has gone.
setup_describe_pid() {
    local pid=$1 comm cmd
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || { echo "pid $pid"; return; }
    cmd=$(tr '\0\n' '  ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)
    echo "pid $pid (${comm}: ${cmd% })"
}

# Whether process PID has FILE open (where its fd table is readable: otherwise assumed).
setup_pid_has_open() {
    local pid=$1 f=$2 fd
    [ -r "/proc/$pid/fd" ] || return 0
    for fd in /proc/"$pid"/fd/*; do
        [ "$(readlink -f "$fd" 2>/dev/null)" = "$(readlink -f "$f")" ] && return 0
    done
    return 1
}

# Prints who holds a lock on any of PKG_LOCK_FILES, one "FILE: pid N (...)" per line;
# nothing when they are free. Reads /proc/locks (no root needed): a lock on the file's
# inode, held (not waited for) by a process that has the file open (the device numbers
# of /proc/locks and stat differ on overlay filesystems, as in containers). fuser, where
# /proc/locks is unreadable, names the processes that have the file open.
pkg_lock_holders() {
    local f ino pid dev seen=" "
    for f in $PKG_LOCK_FILES; do
        [ -e "$f" ] || continue
        ino=$(stat -L -c '%i' "$f") || continue
        local pids=""
        if [ -r /proc/locks ]; then
            # "1: POSIX  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; "1: -> POSIX ..." waits.
            while read -r pid dev; do
                [ "${dev##*:}" = "$ino" ] && [ "$pid" -gt 0 ] 2>/dev/null &&
                    setup_pid_has_open "$pid" "$f" && pids="$pids $pid"
            done < <(awk '$2 != "->" {print $5, $6}' /proc/locks 2>/dev/null)
        elif command -v fuser >/dev/null 2>&1; then
            pids=$(fuser "$f" 2>/dev/null)
        fi
        for pid in $pids; do
            case $seen in *" $f:$pid "*) continue ;; esac
            seen="$seen$f:$pid "
            echo "$f: $(setup_describe_pid "$pid")"
        done
    done
}

# Waits up to MAX seconds (STEP between looks) for the package locks to be free, saying
# who holds them; returns 1, naming the holder, if they are still held after MAX.
pkg_lock_wait() {
    local max=$1 step=${2:-5} waited=0 holders
    while holders=$(pkg_lock_holders) && [ -n "$holders" ]; do
        if [ "$waited" -ge "$max" ]; then
            echo "$SETUP_PROG: the package lock is still held after ${max} s:" >&2
            echo "$holders" | sed 's/^/  /' >&2
            echo "$SETUP_PROG: let it finish (a fresh cloud machine runs unattended-upgrades for a few" \
                 "minutes) and run again; STRATA_APT_LOCK_WAIT=SECONDS waits longer" >&2
            return 1
        fi
        if [ $((waited % 30)) -lt "$step" ]; then
            echo "$SETUP_PROG: waiting for the package lock (up to ${max} s), held by:"
            echo "$holders" | sed 's/^/  /'
        fi
        sleep "$step"
        waited=$((waited + step))
    done
    return 0
}

# Service state. systemctl answers is-enabled without a running systemd (containers);
# is-active needs one, so a SysV "service NAME status" answers otherwise.
svc_enabled() { systemctl is-enabled --quiet "$1" 2>/dev/null; }
svc_running() {
    if [ -d "${SYSTEMD_RUN_DIR:-/run/systemd/system}" ]; then
        systemctl is-active --quiet "$1" 2>/dev/null
    else
        service "$1" status >/dev/null 2>&1
    fi
}
svc_enabled_units() {
    { systemctl list-unit-files --state=enabled --no-legend --no-pager 2>/dev/null || true; } |
        awk '{print $1}' | LC_ALL=C sort
}

declare -A SVC_WAS_ENABLED SVC_WAS_RUNNING
SVC_ENABLED_BEFORE=""
# Records whether each service is enabled and running, and which units are enabled.
svc_record() {
    local u
    for u in "${SETUP_SERVICES[@]}"; do
        if svc_enabled "$u"; then SVC_WAS_ENABLED[$u]=1; else SVC_WAS_ENABLED[$u]=0; fi
        if svc_running "$u"; then SVC_WAS_RUNNING[$u]=1; else SVC_WAS_RUNNING[$u]=0; fi
    done
    SVC_ENABLED_BEFORE=$(svc_enabled_units)
}

# Disables what the installation enabled and stops what it started: every unit enabled
# now and not at svc_record, and each of SETUP_SERVICES running now and not then.
# Runs its commands through "$@" (sudo, or nothing as root).
svc_restore() {
    local u
    local -a newly=()
    while read -r u; do
        [ -n "$u" ] && newly+=("$u")
    done < <(LC_ALL=C comm -13 <(echo "$SVC_ENABLED_BEFORE") <(svc_enabled_units))
    for u in "${SETUP_SERVICES[@]}"; do
        if [ "${SVC_WAS_ENABLED[$u]:-0}" = 0 ] && svc_enabled "$u"; then
            case " ${newly[*]} " in *" $u.service "* | *" $u "*) ;; *) newly+=("$u") ;; esac
        fi
    done
    for u in "${newly[@]}"; do
        echo "$SETUP_PROG: disabling $u: its package enabled it at boot; it was not enabled before"
        "$@" systemctl disable --quiet "$u" 2>/dev/null || "$@" update-rc.d "${u%.service}" disable >/dev/null 2>&1 ||
            echo "$SETUP_PROG: could not disable $u; do it with: systemctl disable $u" >&2
    done
    for u in "${SETUP_SERVICES[@]}"; do
        if [ "${SVC_WAS_RUNNING[$u]:-0}" = 0 ] && svc_running "$u"; then
            echo "$SETUP_PROG: stopping $u: its package started it; it was not running before"
            if [ -d "${SYSTEMD_RUN_DIR:-/run/systemd/system}" ]; then
                "$@" systemctl stop "$u" 2>/dev/null
            else
                "$@" service "$u" stop >/dev/null 2>&1
            fi || echo "$SETUP_PROG: could not stop $u; do it with: systemctl stop $u" >&2
        fi
    done
}

# Keeps maintainer scripts from starting services while packages install: a policy-rc.d
# that denies every start (invoke-rc.d's hook), put in place only where none exists and
# removed by svc_allow_starts. Through "$@" like svc_restore.
SVC_POLICY_WRITTEN=0
svc_block_starts() {
    [ -e "$POLICY_RC_D" ] && return 0
    if printf '#!/bin/sh\n# Written by strata'"'"'s install-deps.sh while it installs packages; removed after.\nexit 101\n' |
        "$@" tee "$POLICY_RC_D" >/dev/null 2>&1 && "$@" chmod 755 "$POLICY_RC_D"; then
        SVC_POLICY_WRITTEN=1
    else
        echo "$SETUP_PROG: cannot write $POLICY_RC_D: services may start while packages install" \
             "(they are stopped afterwards)" >&2
    fi
    return 0
}
svc_allow_starts() {
    if [ "$SVC_POLICY_WRITTEN" = 1 ]; then
        "$@" rm -f "$POLICY_RC_D"
        SVC_POLICY_WRITTEN=0
    fi
}

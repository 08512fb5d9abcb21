"""Servers the experiments start (redis-server, nginx, a JVM): each in its own session
and process group, bound to 127.0.0.1 only, and killed whatever happens - on the normal
path (a context manager), on an exception, on Ctrl-C (KeyboardInterrupt unwinds through
the context manager) and, as a backstop, at interpreter exit and on SIGTERM/SIGHUP (every
live group is SIGKILLed). After start-up each server's listening sockets are read from
/proc and a server listening anywhere but 127.0.0.1 is killed and reported.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import threading
import time

HOST = "127.0.0.1"       # the only address a benchmark server may listen on

_live: set[int] = set()    # process-group ids of servers not yet reaped
_live_lock = threading.Lock()
_handlers_installed = False


def require_loopback(host: str) -> str:
    """`host` if it is 127.0.0.1, else ValueError: the benchmarks never leave loopback."""
    if host != HOST:
        raise ValueError(f"refusing to run a benchmark server on {host!r}: only {HOST} "
                         "is allowed")
    return host


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def kill_all() -> None:
    """SIGKILL every server group still alive (atexit and signal backstop)."""
    with _live_lock:
        groups = list(_live)
        _live.clear()
    for pg in groups:
        try:
            os.killpg(pg, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _on_signal(signum, frame):  # noqa: ARG001
    kill_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(kill_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                out.add(t[8:-1])
    except OSError:
        pass
    return out


def _hex_addr(h: str) -> str:
    """/proc/net/tcp{,6} local address (little-endian hex words) -> text address."""
    ip = h.split(":")[0]
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses of the TCP sockets in LISTEN state held by `pids`."""
    inodes: set[str] = set()
    for p in pids:
        inodes |= _socket_inodes(p)
    out: set[str] = set()
    for p in pids[:1]:
        for name in ("tcp", "tcp6"):
            try:
                with open(f"/proc/{p}/net/{name}", encoding="ascii") as f:
                    next(f, None)
                    for line in f:
                        parts = line.split()
                        if len(parts) > 9 and parts[3] == "0A" and parts[9] in inodes:
                            out.add(_hex_addr(parts[1]))
            except OSError:
                continue
    return out


def children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc/*/stat)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="ascii", errors="replace") as f:
                st = f.read()
            if int(st[st.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return out


def status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class Server:
    """A server process under a preloaded allocator. Use as a context manager:
    `with Server(argv, env, log) as s: ...`; leaving the block (normally, by exception
    or by Ctrl-C) stops the whole process group (SIGTERM, then SIGKILL after 5 s).
    `rusage` and `status` are filled once it is reaped."""

    def __init__(self, argv: list[str], env: dict, log_path: str, cwd: str | None = None):
        self.argv, self.env, self.log_path, self.cwd = argv, env, log_path, cwd
        self.proc: subprocess.Popen | None = None
        self.status: int | None = None
        self.rusage = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Server":
        _install_handlers()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
                                         start_new_session=True)
        with _live_lock:
            _live.add(self.proc.pid)

        def waiter() -> None:
            _, st, ru = os.wait4(self.proc.pid, 0)
            self.status, self.rusage = st, ru

        self._thread = threading.Thread(target=waiter, daemon=True)
        self._thread.start()
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def alive(self) -> bool:
        return self.proc is not None and self.status is None

    def check_loopback(self, pids: list[int] | None = None) -> None:
        """RuntimeError (after which the caller's `with` kills it) if the server listens
        on any address but 127.0.0.1."""
        bad = {a for a in listening_addresses(pids or [self.pid]) if a != HOST}
        if bad:
            raise RuntimeError(f"server listens on {', '.join(sorted(bad))}: only {HOST} "
                               "is allowed; killed")

    def log_text(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            if self.status is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            self._thread.join(wait)
        # Workers that outlived their master (same group): make sure none is left.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        with _live_lock:
            _live.discard(self.proc.pid)
        self.proc.returncode = -1

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_port(port: int, server: Server, timeout: float) -> str | None:
    """None once 127.0.0.1:port accepts a connection, else why not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            return "server exited during start-up: " + server.log_text(500).strip()
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return None
        except OSError:
            time.sleep(0.05)
    return f"server did not accept connections within {timeout:.0f} s"

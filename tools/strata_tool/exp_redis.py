"""Two Redis experiments of the jemalloc literature, each on Debian's redis-server with
the allocator preloaded into the server only, on 127.0.0.1:

* redis_mixed - a 50:50 SET/GET load on random keys of a pre-filled key space at 16, 64
  and 256 concurrent clients: two redis-benchmark processes run at once (SET on half the
  clients, GET on the other half); their latency distributions (redis-benchmark's
  HdrHistogram percentile lines) are merged into the mix's p50/p99/p99.9, and the
  throughput is all requests over the wall time of the pair.
* redis_frag - 1 million SET of 16-byte values (tiny: 20,000), then INFO memory; again
  after DEL of a random half of the keys and after MEMORY PURGE. Each reading waits for
  Redis's cron to refresh its RSS sample (used_memory_rss is sampled every 100 ms, while
  used_memory is live), and the harness's own ratio VmRSS / used_memory is taken at one
  instant beside Redis's mem_fragmentation_ratio.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import tempfile
import time

from . import allocators as al
from . import redis_bench, servers
from .runner import ProcResult

MIXED_CLIENTS = (16, 64, 256)
MIXED_VALUE = 16
# Requests per client count (both halves together) and the pre-filled key space.
MIXED_REQUESTS = {"tiny": 2000, "default": 40_000, "full": 400_000}
MIXED_KEYS = {"tiny": 1000, "default": 100_000, "full": 1_000_000}
FRAG_KEYS = {"tiny": 20_000, "default": 1_000_000, "full": 1_000_000}
FRAG_VALUE = 16
CRON_WAIT_S = 0.35        # > 3 of Redis's 100 ms memory-stat refreshes (hz 10)
INFO_FIELDS = ("used_memory", "used_memory_rss", "mem_fragmentation_ratio",
               "allocator_frag_ratio", "allocator_resident")


# ---- a minimal RESP client: pipelined writes, replies counted ------------------------

def resp(*args: str | bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Resp:
    def __init__(self, port: int, timeout: float = 60.0):
        self.sock = socket.create_connection((servers.HOST, port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        d = self.sock.recv(1 << 20)
        if not d:
            raise ConnectionError("redis closed the connection")
        self.buf += d

    def reply(self) -> bytes:
        """One simple, integer, error or bulk reply (no arrays: not needed here)."""
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n")
        head = self.buf[:i]
        if head[:1] == b"-":
            raise RuntimeError(f"redis error: {head[1:].decode(errors='replace')}")
        if head[:1] != b"$":
            self.buf = self.buf[i + 2:]
            return head[1:]
        n = int(head[1:])
        if n < 0:
            self.buf = self.buf[i + 2:]
            return b""
        while len(self.buf) < i + 2 + n + 2:
            self._fill()
        body = self.buf[i + 2:i + 2 + n]
        self.buf = self.buf[i + 4 + n:]
        return body

    def call(self, *args: str) -> bytes:
        self.sock.sendall(resp(*args))
        return self.reply()

    def pipeline(self, commands: list[bytes], batch: int = 10_000) -> None:
        """Send `commands` in batches and read their replies, which must all be simple
        or integer replies (one line each: SET, DEL); an error reply raises."""
        for i in range(0, len(commands), batch):
            chunk = commands[i:i + batch]
            self.sock.sendall(b"".join(chunk))
            lines = self.buf.count(b"\r\n")
            while lines < len(chunk):
                d = self.sock.recv(1 << 20)
                if not d:
                    raise ConnectionError("redis closed the connection")
                self.buf += d
                lines += d.count(b"\r\n")
            if self.buf.startswith(b"-") or b"\r\n-" in self.buf:
                raise RuntimeError("redis error: " + self.buf.decode(errors="replace")[:200])
            if self.buf.startswith(b"$") or b"\r\n$" in self.buf:
                raise RuntimeError("pipeline(): bulk reply where a one-line one was due")
            self.buf = b""


def key(i: int) -> str:
    return f"key:{i:012d}"      # redis-benchmark's key:__rand_int__ format


def set_commands(keys, value: bytes) -> list[bytes]:
    """SET key:<i> value for each i, encoded at once (a million in about a second)."""
    tmpl = b"*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$" + b"%d" % len(value) + \
        b"\r\n" + value.replace(b"%", b"%%") + b"\r\n"
    return [tmpl % i for i in keys]


def del_commands(keys) -> list[bytes]:
    return [b"*2\r\n$3\r\nDEL\r\n$16\r\nkey:%012d\r\n" % i for i in keys]


# ---- redis-benchmark's latency distribution --------------------------------------------

_PCT = re.compile(r"^\s*([\d.]+)% <= ([\d.]+) milliseconds \(cumulative count (\d+)\)")
_DONE = re.compile(r"(\d+) requests completed in ([\d.]+) seconds")
_RPS = re.compile(r"throughput summary: ([\d.]+) requests per second")


def parse_benchmark_text(text: str) -> dict:
    """redis-benchmark's human output -> {"requests", "seconds", "points": [[ms,
    cumulative count], ...]} from its "Latency by percentile distribution" and
    "Cumulative distribution of latencies" sections (sorted, deduplicated)."""
    text = text.replace("\r", "\n")
    pts: dict[float, int] = {}
    for line in text.splitlines():
        m = _PCT.match(line)
        if m:
            ms, cnt = float(m.group(2)), int(m.group(3))
            pts[ms] = max(pts.get(ms, 0), cnt)
    m = _DONE.search(text)
    r = _RPS.search(text)
    out = {"requests": int(m.group(1)) if m else None,
           "seconds": float(m.group(2)) if m else None,
           "rps": float(r.group(1)) if r else None,
           "points": sorted([ms, c] for ms, c in pts.items())}
    return out


def merged_percentile(dists: list[dict], q: float) -> float | None:
    """Smallest latency (ms) x at which the merged distribution of `dists` reaches the
    fraction q: sum of each one's cumulative count at x (a step function through its
    points) over the total. An upper bound, exact at the listed points."""
    total = sum(d["requests"] or (d["points"][-1][1] if d["points"] else 0) for d in dists)
    if total <= 0:
        return None
    xs = sorted({p[0] for d in dists for p in d["points"]})

    def cum(d: dict, x: float) -> int:
        c = 0
        for ms, n in d["points"]:
            if ms <= x:
                c = n
            else:
                break
        return c

    for x in xs:
        if sum(cum(d, x) for d in dists) >= q * total - 1e-9:
            return x
    return xs[-1] if xs else None


# ---- one server under one allocator ----------------------------------------------------

def _start(alloc: al.Allocator, env: dict, wd: str, extra: list[str] | None = None):
    t = redis_bench.tools()
    port = servers.free_port()
    senv = dict(env)
    senv.pop("LD_PRELOAD", None)
    if alloc.redis_preload():
        senv["LD_PRELOAD"] = alloc.redis_preload()
    argv = [t["redis-server"], "--port", str(port), "--bind",
            servers.require_loopback(servers.HOST), "--protected-mode", "yes",
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", wd,
            "--logfile", "", "--databases", "1", *(extra or [])]
    return t, port, senv, servers.Server(argv, senv, os.path.join(wd, "server.log"), wd)


def _finish(res: ProcResult, srv: servers.Server, result: dict | None,
            t_start: float) -> tuple[ProcResult, dict | None]:
    res.wall_s = time.perf_counter() - t_start
    if srv.rusage is not None:
        res.user_s, res.sys_s = srv.rusage.ru_utime, srv.rusage.ru_stime
    st = srv.status
    if st is not None and os.WIFSIGNALED(st) and os.WTERMSIG(st) not in (15, 9) \
            and res.error is None:
        res.error = f"redis-server killed by signal {os.WTERMSIG(st)}"
    res.stderr = srv.log_text()
    if res.error is not None:
        result = None
    if result is not None and result.get("peak_rss_kb"):
        res.maxrss_kb, res.maxrss_source = int(result["peak_rss_kb"]), "VmHWM"
    res.returncode = 0 if res.error is None else 1
    return res, result


def _verify(t: dict, alloc: al.Allocator, srv: servers.Server, senv: dict) -> dict:
    return al.verify(t["redis-server"], alloc.redis_preload(), alloc.name, pid=srv.pid,
                     env=senv, map_lib=str(alloc.lib) if alloc.lib else None)


def run_mixed(alloc: al.Allocator, preset: str, timeout: float,
              env: dict) -> tuple[ProcResult, dict | None, list[str]]:
    res = ProcResult(argv=["redis-server"])
    warnings: list[str] = []
    if redis_bench.tools() is None:
        res.error = "redis-server/redis-benchmark/redis-cli not installed"
        return res, None, warnings
    n, nkeys = MIXED_REQUESTS[preset], MIXED_KEYS[preset]
    t_start = time.perf_counter()
    deadline = time.monotonic() + timeout
    result = None
    with tempfile.TemporaryDirectory(prefix="strata-redis-mixed-") as wd:
        t, port, senv, srv = _start(alloc, env, wd)
        res.argv = srv.argv
        try:
            with srv:
                why = servers.wait_port(port, srv, 15)
                if why:
                    raise RuntimeError(why)
                srv.check_loopback()
                ver = _verify(t, alloc, srv, senv)
                c = Resp(port)
                val = "v" * MIXED_VALUE
                c.pipeline(set_commands(range(nkeys), val.encode()))
                c.close()
                by: dict = {}
                total_s, total_ops = 0.0, 0
                for clients in MIXED_CLIENTS:
                    half_c, half_n = max(1, clients // 2), max(1, n // 2)
                    procs = []
                    t0 = time.perf_counter()
                    for test in ("set", "get"):
                        argv = [t["redis-benchmark"], "-h", servers.HOST, "-p", str(port),
                                "-t", test, "-c", str(half_c), "-n", str(half_n),
                                "-r", str(nkeys), "-d", str(MIXED_VALUE)]
                        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE,
                                                      stderr=subprocess.PIPE, text=True,
                                                      start_new_session=True))
                    outs = []
                    for p in procs:
                        left = max(1.0, deadline - time.monotonic())
                        try:
                            o, e = p.communicate(timeout=left)
                        except subprocess.TimeoutExpired:
                            for q in procs:
                                q.kill()
                            raise TimeoutError("redis-benchmark ran out of time")
                        if p.returncode != 0:
                            raise RuntimeError(f"redis-benchmark exit {p.returncode}: "
                                               f"{e.strip()[-300:]}")
                        outs.append(parse_benchmark_text(o))
                    wall = time.perf_counter() - t0
                    if any(not d["points"] for d in outs):
                        raise RuntimeError("redis-benchmark printed no latency distribution")
                    reqs = sum(d["requests"] or half_n for d in outs)
                    secs = max(d["seconds"] or wall for d in outs)
                    # The two halves run side by side: the mix's rate is the sum of
                    # theirs (each measured by redis-benchmark to the microsecond).
                    rps = sum(d["rps"] for d in outs) if all(d["rps"] for d in outs) \
                        else reqs / wall
                    by[str(clients)] = {
                        "rps": rps, "requests": reqs,
                        "seconds": secs,
                        "p50_ms": merged_percentile(outs, 0.50),
                        "p99_ms": merged_percentile(outs, 0.99),
                        "p999_ms": merged_percentile(outs, 0.999),
                        "max_ms": merged_percentile(outs, 1.0),
                        "set_p999_ms": merged_percentile(outs[:1], 0.999),
                        "get_p999_ms": merged_percentile(outs[1:], 0.999),
                    }
                    total_s += secs
                    total_ops += reqs
                hwm = servers.status_kb(srv.pid, "VmHWM")
                top = by[str(MIXED_CLIENTS[-1])]
                result = {
                    "workload": "redis_mixed", "preset": preset, "threads": 1,
                    "ops": total_ops, "seconds": total_s,
                    "ops_per_sec": total_ops / total_s if total_s else 0.0,
                    "peak_rss_kb": hwm, "final_rss_kb": servers.status_kb(srv.pid, "VmRSS"),
                    "keys": nkeys, "value_size": MIXED_VALUE, "by_clients": by,
                    "latency_ns": {"p50": top["p50_ms"] * 1e6, "p99": top["p99_ms"] * 1e6,
                                   "p999": top["p999_ms"] * 1e6},
                    "verification": ver, "verified_allocator": ver["verified_allocator"],
                }
                if not ver["ok"]:
                    warnings.append(f"ALLOCATOR MISMATCH: redis-server was meant to run "
                                    f"{alloc.name} but its malloc resolved to "
                                    f"{ver['verified_allocator']}")
        except (OSError, RuntimeError, TimeoutError, subprocess.SubprocessError,
                ConnectionError) as ex:
            res.error = f"{type(ex).__name__}: {ex}"
        res, result = _finish(res, srv, result, t_start)
    return res, result, warnings


def _memory(c: Resp, pid: int, empty: dict | None = None) -> dict:
    time.sleep(CRON_WAIT_S)
    info = redis_bench.parse_info(c.call("INFO", "memory").decode(errors="replace"))
    rss_kb = servers.status_kb(pid, "VmRSS")
    out = {k: info.get(k) for k in INFO_FIELDS}
    out["vmrss_kb"] = rss_kb
    um = info.get("used_memory")
    ok = rss_kb and isinstance(um, int) and um
    out["rss_per_used"] = (rss_kb * 1024 / um) if ok else None
    # The data's own factor: what loading added to RSS over what it added to used_memory
    # (the empty server's binary, libraries, stacks and own allocations left out).
    if ok and empty and empty.get("vmrss_kb") and isinstance(empty.get("used_memory"), int) \
            and um > empty["used_memory"]:
        out["heap_per_used"] = ((rss_kb - empty["vmrss_kb"]) * 1024
                                / (um - empty["used_memory"]))
    else:
        out["heap_per_used"] = None
    return out


def run_frag(alloc: al.Allocator, preset: str, timeout: float,
             env: dict) -> tuple[ProcResult, dict | None, list[str]]:
    res = ProcResult(argv=["redis-server"])
    warnings: list[str] = []
    if redis_bench.tools() is None:
        res.error = "redis-server/redis-benchmark/redis-cli not installed"
        return res, None, warnings
    nkeys = FRAG_KEYS[preset]
    t_start = time.perf_counter()
    result = None
    with tempfile.TemporaryDirectory(prefix="strata-redis-frag-") as wd:
        t, port, senv, srv = _start(alloc, env, wd)
        res.argv = srv.argv
        try:
            with srv:
                why = servers.wait_port(port, srv, 15)
                if why:
                    raise RuntimeError(why)
                srv.check_loopback()
                ver = _verify(t, alloc, srv, senv)
                c = Resp(port, timeout=max(10.0, timeout))
                empty = _memory(c, srv.pid)
                val = "v" * FRAG_VALUE
                t0 = time.perf_counter()
                c.pipeline(set_commands(range(nkeys), val.encode()))
                load_s = time.perf_counter() - t0
                stages = {"loaded": _memory(c, srv.pid, empty)}
                victims = list(range(nkeys))
                random.Random(12).shuffle(victims)
                t0 = time.perf_counter()
                c.pipeline(del_commands(victims[:nkeys // 2]))
                del_s = time.perf_counter() - t0
                stages["deleted_half"] = _memory(c, srv.pid, empty)
                c.call("MEMORY", "PURGE")
                stages["purged"] = _memory(c, srv.pid, empty)
                dbsize = int(c.call("DBSIZE"))
                c.close()
                if dbsize != nkeys - nkeys // 2:
                    raise RuntimeError(f"DBSIZE {dbsize} after deleting half of {nkeys}")
                result = {
                    "workload": "redis_frag", "preset": preset, "threads": 1,
                    "ops": nkeys + nkeys // 2, "seconds": load_s + del_s,
                    "ops_per_sec": (nkeys + nkeys // 2) / (load_s + del_s),
                    "peak_rss_kb": servers.status_kb(srv.pid, "VmHWM"),
                    "final_rss_kb": stages["purged"]["vmrss_kb"],
                    "keys": nkeys, "value_size": FRAG_VALUE, "stages": stages,
                    "empty": empty,
                    "verification": ver, "verified_allocator": ver["verified_allocator"],
                }
                if not ver["ok"]:
                    warnings.append(f"ALLOCATOR MISMATCH: redis-server was meant to run "
                                    f"{alloc.name} but its malloc resolved to "
                                    f"{ver['verified_allocator']}")
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError,
                ConnectionError) as ex:
            res.error = f"{type(ex).__name__}: {ex}"
        res, result = _finish(res, srv, result, t_start)
    return res, result, warnings

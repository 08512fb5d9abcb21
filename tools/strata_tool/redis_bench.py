"""Workload 9: Debian's redis-server with one allocator preloaded into the server only,
driven by redis-benchmark on 127.0.0.1 (bounded request counts), then INFO memory,
FLUSHALL and the RSS left a second later. The server is always killed (finally), and
the allocator that served it is verified from the loader's bindings and its maps.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from . import allocators as al
from .runner import ProcResult, _killpg

HOST = "127.0.0.1"            # never anything else: the benchmark is loopback-only
VALUE_SIZES = (16, 1024)
TESTS = "set,get,lpush,lpop"
CLIENTS = 50
PIPELINE = 16                 # keeps the server, not the syscalls, the bottleneck
# Requests per test and size: bounded so the default run stays ~3 s per allocator
# (about 70 MB of 1 KiB values); the key space equals the request count.
REQUESTS = {"tiny": 2000, "default": 100_000, "full": 500_000}
MEMORY_FIELDS = ("used_memory", "used_memory_rss", "mem_fragmentation_ratio",
                 "mem_allocator", "allocator_frag_ratio")


def tools() -> dict | None:
    """Paths of redis-server, redis-benchmark and redis-cli, or None if any is missing."""
    out = {}
    for name in ("redis-server", "redis-benchmark", "redis-cli"):
        p = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}")
                                   else None)
        if p is None:
            return None
        out[name] = p
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def parse_benchmark_csv(text: str) -> dict:
    """redis-benchmark --csv output -> {TEST: {"rps", "avg_ms", "p50_ms", "p99_ms",
    "max_ms"}}; tolerates the older two-column format ("SET","12345.67")."""
    out: dict = {}
    rows = list(csv.reader(io.StringIO(text)))
    header = None
    for row in rows:
        if not row:
            continue
        if row[0] == "test":
            header = row
            continue
        try:
            if header and len(row) == len(header):
                rec = dict(zip(header, row))
                out[row[0]] = {"rps": float(rec["rps"]),
                               "avg_ms": float(rec.get("avg_latency_ms", "nan")),
                               "p50_ms": float(rec.get("p50_latency_ms", "nan")),
                               "p99_ms": float(rec.get("p99_latency_ms", "nan")),
                               "max_ms": float(rec.get("max_latency_ms", "nan"))}
            elif len(row) >= 2:
                out[row[0]] = {"rps": float(row[1])}
        except (KeyError, ValueError):
            continue
    return out


def parse_info(text: str) -> dict:
    """`INFO` output -> {field: int|float|str}."""
    out: dict = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        for conv in (int, float):
            try:
                out[k] = conv(v)
                break
            except ValueError:
                continue
        else:
            out[k] = v
    return out


def proc_status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cli(t: dict, port: int, *args: str, timeout: float = 30.0) -> str:
    r = subprocess.run([t["redis-cli"], "-h", HOST, "-p", str(port), *args],
                       capture_output=True, text=True, timeout=timeout, check=True)
    return r.stdout


def _wait_ready(port: int, box: dict, deadline: float) -> str | None:
    """Poll PING until +PONG; None when ready, else why not."""
    while time.monotonic() < deadline:
        if "status" in box:
            return "redis-server exited during start-up"
        try:
            with socket.create_connection((HOST, port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return None
        except OSError:
            pass
        time.sleep(0.05)
    return "redis-server did not answer PING within 15 s"


def run(alloc: al.Allocator, preset: str, timeout: float,
        env: dict) -> tuple[ProcResult, dict | None, list[str]]:
    """One Redis round under `alloc`. Returns (server process record, RESULT-like dict
    or None on failure, warnings). The process record carries the server's rusage
    (peak RSS) and the tail of its log; a failure is in its `error` field."""
    t = tools()
    preload = alloc.redis_preload()
    server_argv = [t["redis-server"] if t else "redis-server"]
    res = ProcResult(argv=server_argv)
    warnings: list[str] = []
    if t is None:
        res.error = "redis-server/redis-benchmark/redis-cli not installed"
        return res, None, warnings
    n = REQUESTS.get(preset, REQUESTS["default"])
    senv = dict(env)
    senv.pop("LD_PRELOAD", None)
    if preload:
        senv["LD_PRELOAD"] = preload
    t_start = time.perf_counter()
    deadline = time.monotonic() + timeout
    result: dict | None = None
    with tempfile.TemporaryDirectory(prefix="strata-redis-") as wd:
        port = free_port()
        res.argv = [t["redis-server"], "--port", str(port), "--bind", HOST,
                    "--protected-mode", "yes", "--save", "", "--appendonly", "no",
                    "--daemonize", "no", "--dir", wd, "--logfile", "",
                    "--databases", "1"]
        log = open(os.path.join(wd, "server.log"), "wb")
        try:
            proc = subprocess.Popen(res.argv, env=senv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=wd, start_new_session=True)
        except OSError as ex:
            log.close()
            res.error = f"cannot start redis-server: {ex}"
            return res, None, warnings
        box: dict = {}

        def waiter() -> None:
            _, st, ru = os.wait4(proc.pid, 0)
            box["status"], box["ru"] = st, ru

        th = threading.Thread(target=waiter, daemon=True)
        th.start()
        try:
            why = _wait_ready(port, box, min(deadline, time.monotonic() + 15))
            if why:
                res.error = why
                return res, None, warnings
            ver = al.verify(t["redis-server"], preload, alloc.name, pid=proc.pid, env=senv,
                            map_lib=str(alloc.lib) if alloc.lib else None)
            tests: dict = {}
            bench_s = 0.0
            ops = 0
            for size in VALUE_SIZES:
                left = deadline - time.monotonic()
                if left <= 1:
                    raise TimeoutError("redis round ran out of time")
                argv = [t["redis-benchmark"], "-h", HOST, "-p", str(port), "-t", TESTS,
                        "-d", str(size), "-n", str(n), "-r", str(n), "-c", str(CLIENTS),
                        "-P", str(PIPELINE), "--csv"]
                t0 = time.perf_counter()
                r = subprocess.run(argv, capture_output=True, text=True, timeout=left,
                                   check=False)
                bench_s += time.perf_counter() - t0
                if r.returncode != 0:
                    raise RuntimeError(f"redis-benchmark -d {size} exit {r.returncode}: "
                                       f"{r.stderr.strip()[-300:]}")
                parsed = parse_benchmark_csv(r.stdout)
                if not parsed:
                    raise RuntimeError(f"redis-benchmark -d {size}: no CSV rows in "
                                       f"{r.stdout.strip()[-300:]!r}")
                tests[f"d{size}"] = parsed
                ops += n * len(parsed)
            info_load = parse_info(_cli(t, port, "INFO", "memory"))
            rss_load_kb = proc_status_kb(proc.pid, "VmRSS")
            _cli(t, port, "FLUSHALL")
            time.sleep(1.0)
            info_flush = parse_info(_cli(t, port, "INFO", "memory"))
            rss_flush_kb = proc_status_kb(proc.pid, "VmRSS")
            hwm_kb = proc_status_kb(proc.pid, "VmHWM")
            lat = [v for d in tests.values() for v in d.values() if "p99_ms" in v]
            result = {
                "workload": "redis", "preset": preset, "threads": 1, "ops": ops,
                "seconds": bench_s, "ops_per_sec": ops / bench_s if bench_s > 0 else 0.0,
                "peak_rss_kb": hwm_kb, "final_rss_kb": rss_flush_kb,
                "requests_per_test": n, "clients": CLIENTS, "pipeline": PIPELINE,
                "tests": tests,
                "memory": {
                    "after_load": {k: info_load.get(k) for k in MEMORY_FIELDS},
                    "after_flush": {k: info_flush.get(k) for k in MEMORY_FIELDS},
                    "vmrss_after_load_kb": rss_load_kb,
                    "vmrss_after_flush_kb": rss_flush_kb,
                },
                "verification": ver,
                "verified_allocator": ver["verified_allocator"],
            }
            if lat:
                # Worst p99 over the eight tests; p50 the median test's; not a merged
                # distribution (redis-benchmark reports only percentiles).
                p50s = sorted(v["p50_ms"] for v in lat)
                result["latency_ns"] = {
                    "p50": p50s[len(p50s) // 2] * 1e6,
                    "p99": max(v["p99_ms"] for v in lat) * 1e6,
                    "max": max(v["max_ms"] for v in lat) * 1e6,
                }
            if not ver["ok"]:
                warnings.append(f"ALLOCATOR MISMATCH: redis-server was meant to run "
                                f"{alloc.name} but its malloc resolved to "
                                f"{ver['verified_allocator']}")
        except (subprocess.SubprocessError, OSError, RuntimeError, TimeoutError) as ex:
            res.error = f"{type(ex).__name__}: {ex}"
            result = None
        finally:
            _killpg(proc.pid, signal.SIGTERM)
            th.join(5.0)
            if th.is_alive():
                _killpg(proc.pid, signal.SIGKILL)
                th.join()
            proc.returncode = -1
            log.close()
            res.wall_s = time.perf_counter() - t_start
            if "status" in box:
                st, ru = box["status"], box["ru"]
                if os.WIFEXITED(st):
                    res.returncode = os.WEXITSTATUS(st)
                elif os.WIFSIGNALED(st):
                    res.signal = os.WTERMSIG(st)
                res.user_s, res.sys_s = ru.ru_utime, ru.ru_stime
                res.maxrss_kb = int(ru.ru_maxrss)
            with open(os.path.join(wd, "server.log"), "rb") as f:
                res.stderr = f.read().decode(errors="replace")
    # A clean SIGTERM shutdown exits 0; a crash during the run is a failure.
    if res.error is None and res.signal is not None and res.signal != signal.SIGTERM:
        res.error = f"redis-server killed by signal {res.signal}"
        result = None
    # The server's peak is its VmHWM (per address space), read while it ran: wait4's
    # ru_maxrss would include the harness's own RSS at fork (see runner.RUSAGE_FMT).
    if result is not None and result.get("peak_rss_kb"):
        res.maxrss_kb = int(result["peak_rss_kb"])
        res.maxrss_source = "VmHWM"
    res.returncode = 0 if res.error is None else (res.returncode or 1)
    return res, result, warnings

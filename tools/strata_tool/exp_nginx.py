"""Nginx under HTTP load: Debian's nginx (master + 2 workers, all with the allocator
preloaded; the workers are forked, so they keep the master's mappings) serving a static
file and a gzip-compressed response (gzip on, compressed per request) on 127.0.0.1,
driven by wrk with --latency for a bounded duration each. Reports requests/s, wrk's
latency distribution (p50/p75/p90/p99) per case and the workers' RSS (VmRSS and VmHWM,
summed over the workers).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import tempfile
import time

from . import allocators as al
from . import servers
from .runner import ProcResult

WORKERS = 2
CONNECTIONS = 64
WRK_THREADS = 2
# Seconds of wrk per case (static, gzip); bounded, so a run's length is known ahead.
DURATION = {"tiny": 1, "default": 2, "full": 10}
STATIC_BYTES = 16 * 1024       # a typical small asset
GZIP_BYTES = 16 * 1024         # HTML compressed on every request (gzip_comp_level 6)
CASES = (("static", "/static.bin", False), ("gzip", "/page.html", True))


def tools() -> dict | None:
    out = {}
    for name, fallback in (("nginx", "/usr/sbin/nginx"), ("wrk", "/usr/bin/wrk")):
        p = shutil.which(name) or (fallback if os.path.exists(fallback) else None)
        if p is None:
            return None
        out[name] = p
    return out


def config(root: str, port: int) -> str:
    host = servers.require_loopback(servers.HOST)
    tmp = os.path.join(root, "tmp")
    user = "user nobody nogroup;\n" if os.geteuid() == 0 else ""
    return f"""{user}worker_processes {WORKERS};
daemon off;
master_process on;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    default_type application/octet-stream;
    types {{ text/html html; }}
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    sendfile on;
    keepalive_requests 1000000;
    gzip on;
    gzip_comp_level 6;
    gzip_min_length 0;
    gzip_types text/html;
    server {{
        listen {host}:{port};
        root {root}/www;
    }}
}}
"""


def _site(root: str) -> None:
    www = os.path.join(root, "www")
    os.makedirs(www)
    os.makedirs(os.path.join(root, "tmp"))
    rnd = random.Random(7)
    with open(os.path.join(www, "static.bin"), "wb") as f:
        f.write(rnd.randbytes(STATIC_BYTES))
    words = ["allocator", "arena", "slab", "extent", "cache", "thread", "page", "purge",
             "decay", "class", "region", "bitmap", "radix", "tree", "metadata"]
    text, size = [], 0
    while size < GZIP_BYTES:
        w = " ".join(rnd.choice(words) for _ in range(12))
        text.append(f"<p>{w}</p>\n")
        size += len(text[-1])
    with open(os.path.join(www, "page.html"), "w", encoding="ascii") as f:
        f.write("".join(text)[:GZIP_BYTES])
    for d, _, files in os.walk(root):          # workers may run as nobody
        os.chmod(d, 0o755)
        for fn in files:
            os.chmod(os.path.join(d, fn), 0o644)


_UNIT = {"us": 1e3, "ms": 1e6, "s": 1e9}


def _ns(text: str) -> float | None:
    m = re.match(r"([\d.]+)(us|ms|s)$", text.strip())
    return float(m.group(1)) * _UNIT[m.group(2)] if m else None


def parse_wrk(text: str) -> dict:
    """wrk --latency output -> {"rps", "requests", "seconds", "latency_ns": {p50, p75,
    p90, p99, mean, max}, "errors": non-2xx/3xx plus socket errors}."""
    out: dict = {"latency_ns": {}, "errors": 0}
    m = re.search(r"Requests/sec:\s*([\d.]+)", text)
    out["rps"] = float(m.group(1)) if m else None
    m = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)", text)
    if m:
        out["requests"] = int(m.group(1))
        out["seconds"] = float(m.group(2)) * {"ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(3)]
    m = re.search(r"^\s*Latency\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M)
    if m:
        out["latency_ns"]["mean"] = _ns(m.group(1))
        out["latency_ns"]["max"] = _ns(m.group(3))
    for pct, val in re.findall(r"^\s*(50|75|90|99)%\s+(\S+)", text, re.M):
        out["latency_ns"][f"p{pct}"] = _ns(val)
    m = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
    if m:
        out["errors"] += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["errors"] += sum(int(x) for x in m.groups())
    return out


def workers_rss(master: int) -> dict:
    kids = servers.children(master)
    rss = [servers.status_kb(p, "VmRSS") or 0 for p in kids]
    hwm = [servers.status_kb(p, "VmHWM") or 0 for p in kids]
    return {"workers": len(kids), "pids": kids, "rss_kb": sum(rss), "hwm_kb": sum(hwm),
            "master_rss_kb": servers.status_kb(master, "VmRSS")}


def run(alloc: al.Allocator, preset: str, timeout: float,
        env: dict) -> tuple[ProcResult, dict | None, list[str]]:
    res = ProcResult(argv=["nginx"])
    warnings: list[str] = []
    t = tools()
    if t is None:
        res.error = "nginx or wrk not installed"
        return res, None, warnings
    t_start = time.perf_counter()
    result = None
    dur = DURATION[preset]
    with tempfile.TemporaryDirectory(prefix="strata-nginx-") as root:
        os.chmod(root, 0o755)
        _site(root)
        port = servers.free_port()
        conf = os.path.join(root, "nginx.conf")
        with open(conf, "w", encoding="ascii") as f:
            f.write(config(root, port))
        senv = dict(env)
        senv.pop("LD_PRELOAD", None)
        if alloc.preload():
            senv["LD_PRELOAD"] = alloc.preload()
        argv = [t["nginx"], "-p", root, "-c", conf, "-e", os.path.join(root, "error.log")]
        res.argv = argv
        srv = servers.Server(argv, senv, os.path.join(root, "stdout.log"), root)
        try:
            with srv:
                why = servers.wait_port(port, srv, 15)
                if why:
                    raise RuntimeError(why + " " + _tail(os.path.join(root, "error.log")))
                deadline = time.monotonic() + 5
                while len(servers.children(srv.pid)) < WORKERS and time.monotonic() < deadline:
                    time.sleep(0.05)
                kids = servers.children(srv.pid)
                srv.check_loopback([srv.pid, *kids])
                ver = al.verify(t["nginx"], alloc.preload(), alloc.name, pid=srv.pid,
                                env=senv)
                if alloc.preload():
                    unmapped = [p for p in kids if not al.is_mapped(p, alloc.preload())]
                    if unmapped:
                        ver["ok"] = False
                        ver["verified_allocator"] = "workers without " + alloc.name
                cases: dict = {}
                for name, path, gz in CASES:
                    cmd = [t["wrk"], f"-t{WRK_THREADS}", f"-c{CONNECTIONS}", f"-d{dur}s",
                           "--latency", "--timeout", "5s"]
                    if gz:
                        cmd += ["-H", "Accept-Encoding: gzip"]
                    cmd.append(f"http://{servers.HOST}:{port}{path}")
                    r = subprocess.run(cmd, capture_output=True, text=True,
                                       timeout=min(timeout, dur + 30), check=False)
                    if r.returncode != 0:
                        raise RuntimeError(f"wrk exit {r.returncode}: {r.stderr.strip()[-300:]}")
                    w = parse_wrk(r.stdout)
                    if not w.get("rps") or not w["latency_ns"].get("p99"):
                        raise RuntimeError(f"wrk output not understood: {r.stdout[-300:]!r}")
                    if w["errors"]:
                        warnings.append(f"{name}: {w['errors']} wrk errors")
                    cases[name] = w
                if "gzip" in cases:
                    probe = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w",
                                            "%{size_download}", "-H", "Accept-Encoding: gzip",
                                            f"http://{servers.HOST}:{port}/page.html"],
                                           capture_output=True, text=True, timeout=10,
                                           check=False) if shutil.which("curl") else None
                    if probe is not None and probe.stdout.isdigit():
                        cases["gzip"]["compressed_bytes"] = int(probe.stdout)
                mem = workers_rss(srv.pid)
                ops = sum(c.get("requests") or 0 for c in cases.values())
                secs = sum(c.get("seconds") or dur for c in cases.values())
                result = {
                    "workload": "nginx", "preset": preset, "threads": WORKERS, "ops": ops,
                    "seconds": secs, "ops_per_sec": ops / secs if secs else 0.0,
                    "peak_rss_kb": mem["hwm_kb"], "final_rss_kb": mem["rss_kb"],
                    "cases": cases, "memory": mem, "connections": CONNECTIONS,
                    "duration_s": dur,
                    "latency_ns": {k: v for k, v in cases["static"]["latency_ns"].items()
                                   if k in ("p50", "p99")},
                    "verification": ver, "verified_allocator": ver["verified_allocator"],
                }
                if not ver["ok"]:
                    warnings.append(f"ALLOCATOR MISMATCH: nginx was meant to run {alloc.name}"
                                    f" but resolved to {ver['verified_allocator']}")
        except (OSError, RuntimeError, subprocess.SubprocessError) as ex:
            res.error = f"{type(ex).__name__}: {ex}"
        res.wall_s = time.perf_counter() - t_start
        res.stderr = _tail(os.path.join(root, "error.log")) + srv.log_text(1000)
    if res.error is not None:
        result = None
    if result is not None:
        res.maxrss_kb, res.maxrss_source = int(result["peak_rss_kb"]), "VmHWM (workers)"
    res.returncode = 0 if res.error is None else 1
    return res, result, warnings


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")[-n:]
    except OSError:
        return ""

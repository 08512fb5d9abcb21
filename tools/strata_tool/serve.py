"""`strata serve [--listen HOST:PORT] [--pid PID ...]`: an HTTP sidecar for the strata
processes of a host, at the paths continuous profilers and Prometheus scrape:

  /metrics            every process's stats_file, merged into one exposition (OpenMetrics
                      when the scraper accepts it, else the Prometheus text format), each
                      series labelled with pid and program; strata_serve_process_up says
                      which processes could be read.
  /debug/pprof/heap   a fresh heap profile (gzipped pprof protobuf), taken on request
                      through the process's prof_signal: ?pid=N chooses the process (needed
                      when more than one is served).
  /                   the processes served, and what each lacks.

Processes are the --pid ones, or every process that has libstrata mapped (rescanned per
request). What it needs of a process is read from /proc/PID/environ (STRATA_CONF and
MALLOC_CONF) and /etc/strata.conf: stats_file for /metrics; prof:true, prof_signal and
prof_format:pprof or both for /debug/pprof/heap. Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

OM_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# ---------------------------------------------------------------- processes
def strata_pids() -> list[int]:
    """Processes with libstrata mapped (those this user may read)."""
    out = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/maps", "rb") as f:
                maps = f.read()
        except OSError:
            continue
        if re.search(rb"/libstrata[^/\n]*\.so", maps):
            out.append(int(d))
    return sorted(out)


def parse_conf(text: str, into: dict) -> None:
    """MALLOC_CONF syntax: key:value,key:value (a later source overrides)."""
    for item in text.strip().split(","):
        if ":" in item:
            k, v = item.split(":", 1)
            into[k.strip()] = v.strip()


class Proc:
    def __init__(self, pid: int):
        self.pid = pid
        self.conf: dict[str, str] = {}
        try:
            self.conf_text = Path("/etc/strata.conf").read_text()
            parse_conf(self.conf_text, self.conf)
        except OSError:
            pass
        env = {}
        try:
            for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                k, _, v = item.partition(b"=")
                env[k.decode(errors="replace")] = v.decode(errors="replace")
        except OSError as e:
            self.error = f"cannot read /proc/{pid}/environ: {e.strerror}"
        else:
            self.error = None
        for k in ("STRATA_CONF", "MALLOC_CONF"):
            if k in env:
                parse_conf(env[k], self.conf)
        try:
            self.program = os.path.basename(os.readlink(f"/proc/{pid}/exe")).removesuffix(" (deleted)")
        except OSError:
            try:
                self.program = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                self.program = "?"

    def path(self, p: str) -> str:
        """A path as the process sees it (relative ones from its working directory)."""
        return p if p.startswith("/") else f"/proc/{self.pid}/cwd/{p}"

    def stats_file(self) -> str | None:
        f = self.conf.get("stats_file")
        return self.path(f.replace("%p", str(self.pid))) if f else None

    def prof_signal(self) -> int | None:
        v = self.conf.get("prof_signal", "")
        if not v or v in ("off", "false"):
            return None
        if v.isdigit():
            return int(v)
        try:
            return int(signal.Signals[v if v.startswith("SIG") else "SIG" + v])
        except KeyError:
            return None

    def profile_problem(self) -> str | None:
        if self.conf.get("prof") != "true":
            return "prof:true is not set"
        if self.prof_signal() is None:
            return "prof_signal is not set (e.g. prof_signal:SIGUSR2)"
        if self.conf.get("prof_format", "jemalloc") not in ("pprof", "both"):
            return "prof_format is jemalloc: pprof needs prof_format:pprof or both"
        return None


# ---------------------------------------------------------------- /metrics
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_text(text: str):
    """Prometheus text format: {family: (type, help, [(name, labels, value)])}."""
    fams: dict[str, list] = {}
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ.strip()
        elif line.startswith("# HELP "):
            parts = line.split(" ", 3)
            helps[parts[2]] = parts[3] if len(parts) > 3 else ""
        elif line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            if not m:
                continue
            labels = [(k, v) for k, v in _LABEL.findall(m.group(3) or "")]
            fam = m.group(1)
            fams.setdefault(fam, []).append((fam, labels, m.group(4)))
    return {f: (types.get(f, "untyped"), helps.get(f, ""), s) for f, s in fams.items()}


def merge_metrics(procs: list[Proc], om: bool) -> str:
    merged: dict[str, list] = {}
    up = []
    for p in procs:
        f = p.stats_file()
        ok = 0
        if f:
            try:
                fams = parse_text(Path(f).read_text())
                ok = 1
            except OSError:
                fams = {}
            for name, (typ, help_, samples) in fams.items():
                entry = merged.setdefault(name, [typ, help_, []])
                for sname, labels, value in samples:
                    keys = {k for k, _ in labels}
                    extra = [(k, v) for k, v in (("pid", str(p.pid)), ("program", p.program)) if k not in keys]
                    entry[2].append((sname, extra + labels, value))
        up.append((p, ok))
    out = []
    for name in sorted(merged):
        typ, help_, samples = merged[name]
        base = name
        if om and typ == "counter" and base.endswith("_total"):
            base = base[: -len("_total")]
        if om and typ == "untyped":
            typ = "unknown"
        out.append(f"# TYPE {base} {typ}")
        unit = next((u for u in ("bytes", "seconds") if base.endswith("_" + u)), None)
        if om and unit:
            out.append(f"# UNIT {base} {unit}")
        out.append(f"# HELP {base} {help_}")
        for sname, labels, value in samples:
            lab = ",".join(f'{k}="{v}"' for k, v in labels)
            out.append(f"{sname}{{{lab}}} {value}")
    out.append("# TYPE strata_serve_process_up gauge")
    out.append("# HELP strata_serve_process_up 1 if the process's stats_file was read, 0 if it has none "
               "or it could not be read")
    for p, ok in up:
        prog = p.program.replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'strata_serve_process_up{{pid="{p.pid}",program="{prog}"}} {ok}')
    if om:
        out.append("# EOF")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- /debug/pprof/heap
_dump_locks: dict[int, threading.Lock] = {}
_dump_locks_lock = threading.Lock()


def take_profile(p: Proc, timeout: float) -> bytes:
    """Signals p and returns the gzipped pprof profile its dump thread writes."""
    problem = p.profile_problem()
    if problem:
        raise LookupError(f"pid {p.pid} ({p.program}): {problem}")
    prefix = p.path(p.conf.get("prof_prefix", "jeprof"))
    d, base = os.path.split(prefix)
    d = d or "."
    suffix = ".heap.pb.gz" if p.conf.get("prof_format") == "both" else ".heap"
    pat = re.compile(re.escape(base) + rf"\.{p.pid}\.\d+\.m\d+" + re.escape(suffix) + "$")
    with _dump_locks_lock:
        lock = _dump_locks.setdefault(p.pid, threading.Lock())
    with lock:
        try:
            before = {f for f in os.listdir(d) if pat.match(f)}
        except OSError as e:
            raise LookupError(f"pid {p.pid}: cannot list the dump directory {d}: {e.strerror}")
        os.kill(p.pid, p.prof_signal())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            new = sorted(f for f in os.listdir(d) if pat.match(f) and f not in before)
            for f in new:
                path = os.path.join(d, f)
                try:
                    data = Path(path).read_bytes()
                    gzip.decompress(data)  # the whole stream: the dump is complete
                except (OSError, EOFError, gzip.BadGzipFile):
                    continue
                # The dump was taken for this request: leave no file behind.
                for g in (path, path[: -len(".pb.gz")] if path.endswith(".pb.gz") else None):
                    if g:
                        try:
                            os.unlink(g)
                        except OSError:
                            pass
                return data
            time.sleep(0.01)
    raise TimeoutError(f"pid {p.pid}: no dump in {d} within {timeout:g} s of signal {p.prof_signal()}")


# ---------------------------------------------------------------- HTTP
def make_handler(pids: list[int] | None, timeout: float):
    def procs() -> list[Proc]:
        return [Proc(pid) for pid in (pids if pids else strata_pids()) if os.path.exists(f"/proc/{pid}")]

    class Handler(BaseHTTPRequestHandler):
        server_version = "strata-serve"

        def log_message(self, fmt, *a):  # quiet: one line per error only
            pass

        def send(self, code: int, body: bytes, ctype: str, extra: dict | None = None):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def text(self, code: int, msg: str):
            self.send(code, (msg + "\n").encode(), "text/plain; charset=utf-8")

        def do_GET(self):
            u = urlparse(self.path)
            q = parse_qs(u.query)
            try:
                if u.path == "/metrics":
                    fmt = q.get("format", [""])[0]
                    accept = self.headers.get("Accept", "")
                    om = fmt == "openmetrics" or (fmt != "prometheus" and
                                                  ("openmetrics" in accept or "text/plain" not in accept))
                    body = merge_metrics(procs(), om).encode()
                    self.send(200, body, OM_TYPE if om else PROM_TYPE)
                elif u.path in ("/debug/pprof/heap", "/debug/pprof/allocs"):
                    ps = procs()
                    want = q.get("pid", [None])[0]
                    if want is not None:
                        if not want.isdigit():
                            return self.text(400, f"pid={want}: not a process id")
                        ps = [p for p in ps if p.pid == int(want)]
                        if not ps:
                            return self.text(404, f"pid {want}: not a strata process served here")
                    if len(ps) != 1:
                        listing = ", ".join(f"{p.pid} ({p.program})" for p in ps) or "none"
                        return self.text(400 if ps else 404,
                                         f"choose a process with ?pid=N; strata processes: {listing}")
                    data = take_profile(ps[0], timeout)
                    self.send(200, data, "application/octet-stream",
                              {"Content-Disposition": f'attachment; filename="heap-{ps[0].pid}.pb.gz"'})
                elif u.path == "/":
                    lines = ["strata serve: /metrics, /debug/pprof/heap?pid=N", ""]
                    for p in procs():
                        f = p.stats_file()
                        lines.append(f"pid {p.pid} ({p.program}): metrics "
                                     f"{'from ' + f if f else 'none (no stats_file)'}; profiles "
                                     f"{p.profile_problem() or 'on request'}")
                    self.text(200, "\n".join(lines))
                else:
                    self.text(404, f"{u.path}: not found (/metrics, /debug/pprof/heap)")
            except LookupError as e:
                self.text(409, str(e))
            except TimeoutError as e:
                self.text(504, str(e))
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


def serve(args) -> int:
    host, _, port = args.listen.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        print(f"strata serve: --listen {args.listen}: expected HOST:PORT (e.g. 127.0.0.1:6061)", file=sys.stderr)
        return 2
    for pid in args.pid or []:
        if not os.path.exists(f"/proc/{pid}"):
            print(f"strata serve: --pid {pid}: no such process", file=sys.stderr)
            return 2
    try:
        httpd = ThreadingHTTPServer((host or "127.0.0.1", int(port)), make_handler(args.pid, args.timeout))
    except OSError as e:
        print(f"strata serve: cannot listen on {args.listen}: {e.strerror}", file=sys.stderr)
        return 1
    httpd.daemon_threads = True
    h, p = httpd.server_address[:2]
    what = ", ".join(map(str, args.pid)) if args.pid else "every process with libstrata mapped"
    print(f"strata serve: http://{h}:{p}/metrics and /debug/pprof/heap for {what}", file=sys.stderr, flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default="127.0.0.1:6061", metavar="HOST:PORT",
                   help="address to serve on (default 127.0.0.1:6061; port 0 picks a free one)")
    p.add_argument("--pid", type=int, action="append", metavar="PID",
                   help="a process to serve (repeatable); default: every process with libstrata mapped")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for a requested heap dump (default 10)")
    p.set_defaults(func=serve)

#!/usr/bin/env python3
"""serve_check.py LIB PROF_SITES WORKDIR - heap profiles on demand, with real clients:
  1. prof_signal dumps a process that makes no allocator call after the signal (its dump
     thread waits from the start; the handler only wakes it);
  2. the mallctl prof.dump_request asks the same thread for a dump;
  3. `strata serve --pid A --pid B`: curl reads / and /metrics (both processes' series,
     labelled by pid, read by prometheus_client's OpenMetrics parser; the Prometheus text
     variant passes `promtool check metrics`), and a real Prometheus server scraping it
     every second holds up == 1 and both processes' series; /debug/pprof/heap without ?pid= names the
     choices; `go tool pprof -top http://.../debug/pprof/heap?pid=A` shows site_alpha
     (16 MiB live) and site_beta (8 MiB) in their proportion, and the request leaves no
     dump file behind.
Parts whose client is missing (curl, go, prometheus_client, promtool, prometheus) say so and are
skipped."""
import os, re, shutil, signal, subprocess, sys, time, urllib.error, urllib.request

from exporter_check import free_port  # the scripts' shared helper (same directory)

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")


def start(lib, prog, mode, work, tag):
    conf = (f"prof:true,prof_signal:SIGUSR2,prof_format:both,lg_prof_sample:14,prof_prefix:{work}/{tag},"
            f"stats_file:{work}/{tag}-%p.prom,stats_interval_ms:100")
    env = dict(os.environ, LD_PRELOAD=lib, STRATA_CONF=conf)
    env.pop("MALLOC_CONF", None)
    p = subprocess.Popen([prog, mode], env=env, stdout=subprocess.PIPE, text=True)
    lines = []
    while True:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"{prog} {mode} ended before it was ready: {lines}")
        lines.append(line.strip())
        if line.startswith("ready"):
            return p, lines


def wait_for(pred, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        r = pred()
        if r:
            return r
        time.sleep(0.02)
    return None


def dumps(work, tag, pid):
    pat = re.compile(rf"{re.escape(tag)}\.{pid}\.\d+\.m\d+\.heap\.pb\.gz$")
    return sorted(f for f in os.listdir(work) if pat.match(f))


def get(url, accept=None):
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main():
    lib, prog, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    fails = []
    procs = []
    server = None
    prom_server = None
    try:
        # 1. an idle process dumps on prof_signal
        a, _ = start(lib, prog, "idle", work, "a")
        procs.append(a)
        time.sleep(0.2)  # idle: the program sleeps in nanosleep, no allocator call
        os.kill(a.pid, signal.SIGUSR2)
        got = wait_for(lambda: dumps(work, "a", a.pid), 5)
        if not got:
            fails.append("prof_signal: no dump from an idle process within 5 s")
        else:
            print(f"prof_signal: idle process {a.pid} dumped {got[0]}")
            for f in os.listdir(work):
                if f.startswith(f"a.{a.pid}.") and ".heap" in f:
                    os.unlink(os.path.join(work, f))

        # 2. prof.dump_request
        b, lines = start(lib, prog, "request", work, "b")
        procs.append(b)
        got = wait_for(lambda: dumps(work, "b", b.pid), 5)
        if "dump_request 0" not in lines or not got:
            fails.append(f"prof.dump_request: {lines}, dumps {got}")
        else:
            print(f"prof.dump_request: returned 0, dump {got[0]} written")

        # 3. strata serve
        port = free_port()
        env = dict(os.environ, PYTHONPATH=TOOLS)
        for k in ("LD_PRELOAD", "MALLOC_CONF", "STRATA_CONF"):
            env.pop(k, None)
        server = subprocess.Popen([sys.executable, "-m", "strata_tool", "serve", "--listen", f"127.0.0.1:{port}",
                                   "--pid", str(a.pid), "--pid", str(b.pid)], env=env, stderr=subprocess.PIPE,
                                  text=True)
        base = f"http://127.0.0.1:{port}"
        if not wait_for(lambda: _up(base), 20):
            raise RuntimeError(f"strata serve did not answer: {server.stderr.read() if server.poll() is not None else ''}")
        wait_for(lambda: os.path.exists(f"{work}/b-{b.pid}.prom") and os.path.exists(f"{work}/a-{a.pid}.prom"), 5)
        curl = shutil.which("curl")
        if curl:
            r = subprocess.run([curl, "-sS", "-f", base + "/metrics"], capture_output=True, text=True, timeout=60)
            body = r.stdout
            if r.returncode != 0:
                fails.append(f"curl /metrics: {r.stderr}")
            idx = subprocess.run([curl, "-sS", base + "/"], capture_output=True, text=True, timeout=60).stdout
            if str(a.pid) not in idx or "on request" not in idx:
                fails.append(f"curl /: {idx}")
        else:
            print("note: curl not installed; /metrics read with urllib")
            body = get(base + "/metrics")[1].decode()
        try:
            from prometheus_client.openmetrics import parser as om_parser
            fams = {f.name: f for f in om_parser.text_string_to_metric_families(body)}
            pids = {smp.labels.get("pid") for smp in fams["strata_allocated_bytes"].samples}
            if pids != {str(a.pid), str(b.pid)}:
                fails.append(f"/metrics: strata_allocated_bytes pids {pids}")
            else:
                print(f"/metrics: OpenMetrics, {len(fams)} families, both processes' series")
        except ImportError:
            print("note: prometheus_client not installed; OpenMetrics parse not run")
        promtool = shutil.which("promtool")
        if promtool:
            text = get(base + "/metrics?format=prometheus")[1].decode()
            r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
            if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
                fails.append(f"promtool check metrics on /metrics?format=prometheus: {r.stdout}{r.stderr}"[:1500])
            else:
                print("/metrics?format=prometheus: promtool check metrics finds nothing")
        prom = shutil.which("prometheus")
        if prom:
            prom_server = scrape_with_prometheus(prom, port, work, (a.pid, b.pid), fails)
        else:
            print("note: prometheus not installed; no real scrape")
        code, msg = get(base + "/debug/pprof/heap")
        if code != 400 or str(a.pid).encode() not in msg:
            fails.append(f"/debug/pprof/heap without pid: {code} {msg[:200]}")
        go = shutil.which("go")
        if go:
            genv = dict(os.environ, PPROF_TMPDIR=work)
            for k in ("LD_PRELOAD", "MALLOC_CONF", "STRATA_CONF"):
                genv.pop(k, None)
            t0 = time.time()
            r = subprocess.run([go, "tool", "pprof", "-top", "-unit=B", "-sample_index=inuse_space",
                                f"{base}/debug/pprof/heap?pid={a.pid}"], capture_output=True, text=True,
                               timeout=60, env=genv)
            got = {m.group(2): int(m.group(1)) for m in
                   re.finditer(r"^\s*(\d+)B\s+\S+%\s+\S+%\s+\S+\s+\S+%\s+(\w+)$", r.stdout, re.M)}
            alpha, beta = got.get("site_alpha", 0), got.get("site_beta", 0)
            if r.returncode != 0 or not alpha or not beta or not 1.4 < alpha / beta < 2.8:
                fails.append(f"go tool pprof: rc {r.returncode}\n{r.stdout}\n{r.stderr}"[:2000])
            else:
                print(f"go tool pprof {base}/debug/pprof/heap?pid={a.pid}: site_alpha {alpha} B, site_beta {beta} B "
                      f"({time.time() - t0:.2f} s)")
            left = [f for f in os.listdir(work) if f.startswith(f"a.{a.pid}.")]
            if left:
                fails.append(f"/debug/pprof/heap left dump files: {left}")
        else:
            print("note: go not installed; go tool pprof not run")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        if server:
            server.terminate()
            server.wait(timeout=30)
        if prom_server:
            prom_server.terminate()
            prom_server.wait(timeout=30)
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


def scrape_with_prometheus(prom, port, work, pids, fails):
    """A real Prometheus server scrapes `strata serve` every second; its HTTP API must
    then hold up == 1 and strata_allocated_bytes for every process, labelled by pid."""
    import json
    pport = free_port()
    cfg = os.path.join(work, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: strata\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{port}']\n")
    log = open(os.path.join(work, "prometheus.log"), "w")
    srv = subprocess.Popen([prom, f"--config.file={cfg}", f"--storage.tsdb.path={work}/tsdb",
                            f"--web.listen-address=127.0.0.1:{pport}"], stdout=log, stderr=log)
    api = f"http://127.0.0.1:{pport}/api/v1/query?query="

    def query(q):
        try:
            code, body = get(api + urllib.request.quote(q))
            return json.loads(body)["data"]["result"] if code == 200 else []
        except (OSError, ValueError, KeyError):
            return []

    t0 = time.time()
    want = {str(p) for p in pids}
    ok = wait_for(lambda: {r["metric"].get("pid") for r in query("strata_allocated_bytes")} >= want and
                  any(r["value"][1] == "1" for r in query('up{job="strata"}')), 25)
    if not ok:
        tail = open(os.path.join(work, "prometheus.log")).read()[-800:]
        fails.append(f"prometheus scrape: up {query('up')}, series {query('strata_allocated_bytes')}\n{tail}"[:2000])
    else:
        got = query("strata_allocated_bytes")
        print(f"prometheus {time.time() - t0:.1f} s after start: up == 1, strata_allocated_bytes for pids "
              f"{sorted(r['metric']['pid'] for r in got)} (programs "
              f"{sorted({r['metric'].get('program', '?') for r in got})})")
    return srv


def _up(base):
    try:
        return get(base + "/")[0] == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())

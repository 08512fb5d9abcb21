#!/usr/bin/env python3
"""exporter_check.py LIB PROBE WORKDIR - the stats_file exporter on a host running many
strata processes, checked with the tools that read it:
  1. names follow Prometheus' conventions: `promtool check metrics` finds nothing in the
     "T" and "TD" outputs, and prometheus_client's OpenMetrics parser reads "P" and "PD"
     with the units the names promise (uptime in seconds, the memory limit in bytes, HELP
     of page counts in bytes);
  2. every series of a stats_file carries pid, program and the stats_labels pairs; a bad
     stats_labels value is reported with the accepted syntax;
  3. a real node_exporter (Debian's prometheus-node-exporter, textfile collector only)
     scrapes two, then three processes writing into one directory: no duplicate-series
     error in its log, no scrape error, every process's values present; a process that
     exits normally removes its file and its series are gone from the next scrape;
  4. a stats_file in a missing directory, or under a path that is not a directory, is
     reported once on stderr with the path and errno.
Parts whose tool is missing say so and are skipped; exit 77 (ctest SKIP) when none could
run (prometheus_client missing)."""
import os, re, shutil, socket, subprocess, sys, time, urllib.request


def env_for(lib, conf):
    e = dict(os.environ, LD_PRELOAD=lib)
    for k in ("MALLOC_CONF", "STRATA_CONF"):
        e.pop(k, None)
    if conf:
        e["STRATA_CONF"] = conf
    return e


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scrape(port):
    last = None
    for _ in range(100):
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError as e:
            last = e
            time.sleep(0.1)
    raise RuntimeError(f"node_exporter did not answer on port {port}: {last}")


def main():
    lib, probe, work = sys.argv[1:4]
    try:
        from prometheus_client.openmetrics import parser as om_parser
        from prometheus_client import parser as prom_parser
    except ImportError:
        print("SKIP: python3 prometheus_client is not installed (pip install prometheus_client)")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    fails = []

    # 1. names
    promtool = shutil.which("promtool")
    for opts in ("T", "TD"):
        out = subprocess.run([probe, opts], env=env_for(lib, None), capture_output=True, text=True, timeout=60).stdout
        if promtool:
            r = subprocess.run([promtool, "check", "metrics"], input=out, capture_output=True, text=True)
            if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
                fails.append(f"promtool check metrics ({opts}):\n{r.stdout}{r.stderr}"[:2000])
            else:
                print(f"promtool check metrics {opts}: no problems")
    if not promtool:
        print("note: promtool not installed (Debian package prometheus); lint not run")
    for opts in ("P", "PD"):
        out = subprocess.run([probe, opts], env=env_for(lib, None), capture_output=True, text=True, timeout=60).stdout
        fams = {f.name: f for f in om_parser.text_string_to_metric_families(out)}
        want = {"strata_arena_uptime_seconds": "seconds", "strata_mem_limit_bytes": "bytes",
                "strata_arena_pactive_bytes": "bytes", "strata_background_thread_run_interval_seconds": "seconds",
                "strata_mutex_total_wait_time_seconds": "seconds"}
        for name, unit in want.items():
            if name not in fams or fams[name].unit != unit:
                fails.append(f"{opts}: family {name} with unit {unit} missing")
        for name in ("strata_arena_pactive_bytes", "strata_arena_pdirty_bytes", "strata_arena_pmuzzy_bytes"):
            if name in fams and not fams[name].documentation.startswith("bytes "):
                fails.append(f"{opts}: HELP of {name}: {fams[name].documentation!r}")
        old = [n for n in fams if n in ("strata_arena_uptime", "strata_mem_limit")]
        if old:
            fails.append(f"{opts}: old names still written: {old}")
        print(f"OpenMetrics {opts}: {len(fams)} families, units as named")

    # 2. labels, and a bad stats_labels
    d = os.path.join(work, "labels")
    os.makedirs(d)
    p = subprocess.Popen([probe, "sleep", "1200"], stdout=subprocess.DEVNULL,
                         env=env_for(lib, f"stats_file:{d}/strata-%p.prom,stats_interval_ms:50,"
                                          "stats_labels:service=api;team=store-1"))
    time.sleep(0.4)
    path = os.path.join(d, f"strata-{p.pid}.prom")
    try:
        text = open(path).read()
        want = {"pid": str(p.pid), "program": os.path.basename(probe), "service": "api", "team": "store-1"}
        n = 0
        for fam in prom_parser.text_string_to_metric_families(text):
            for s in fam.samples:
                n += 1
                if any(s.labels.get(k) != v for k, v in want.items()):
                    fails.append(f"labels: {s.name} {s.labels}")
                    break
        print(f"labels: {n} series, each with {want}")
    except OSError as e:
        fails.append(f"labels: {e}")
    p.wait(timeout=60)
    for bad in ("service", "pid=1", "a=1;a=2", "x=", "9x=1", "a=1;", "__x=1"):
        r = subprocess.run([probe, "sleep", "1"], env=env_for(lib, f"stats_labels:{bad}"), capture_output=True,
                           text=True, timeout=60)
        if "stats_labels" not in r.stderr or "name=value" not in r.stderr:
            fails.append(f"stats_labels:{bad} not reported: {r.stderr!r}")
    print("stats_labels: bad values reported with the accepted syntax")

    # 3. node_exporter, two then three processes
    ne = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if ne:
        tdir = os.path.join(work, "textfile")
        os.makedirs(tdir)
        port = free_port()
        log = open(os.path.join(work, "node_exporter.log"), "w+")
        nep = subprocess.Popen([ne, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                                "--collector.textfile", f"--collector.textfile.directory={tdir}"],
                               stdout=log, stderr=subprocess.STDOUT)
        procs = []
        try:
            conf = f"stats_file:{tdir}/strata-%p.prom,stats_interval_ms:50"
            for count in (2, 3):
                while len(procs) < count:
                    procs.append(subprocess.Popen([probe, "sleep", "30000"], env=env_for(lib, conf),
                                                  stdout=subprocess.DEVNULL))
                deadline = time.time() + 20
                while time.time() < deadline and not all(os.path.exists(f"{tdir}/strata-{x.pid}.prom") for x in procs):
                    time.sleep(0.05)
                body = scrape(port)
                fams = {f.name: f for f in prom_parser.text_string_to_metric_families(body)}
                fam = fams.get("strata_allocated_bytes")
                pids = {s.labels.get("pid") for s in fam.samples} if fam else set()
                if pids != {str(x.pid) for x in procs}:
                    fails.append(f"node_exporter, {count} processes: strata_allocated_bytes pids {pids}")
                if "node_textfile_scrape_error 0" not in body:
                    fails.append(f"node_exporter, {count} processes: scrape error")
                print(f"node_exporter, {count} processes: allocated bytes of pids {sorted(pids)}")
            gone = procs.pop(0)
            gone.terminate()  # SIGTERM: the probe exits normally from its handler
            gone.wait(timeout=30)
            body = scrape(port)
            if f'pid="{gone.pid}"' in body:
                fails.append("node_exporter: series of an exited process still served")
            elif not all(f'pid="{x.pid}"' in body for x in procs):
                fails.append("node_exporter: a live process's series are missing after another exited")
            else:
                print(f"node_exporter: pid {gone.pid} exited, its series are gone; the others' remain")
        finally:
            for x in procs:
                x.terminate()
                x.wait(timeout=30)
            nep.terminate()
            nep.wait(timeout=30)
        log.seek(0)
        text = log.read()
        dup = [l for l in text.splitlines() if "collected before" in l]
        if dup:
            fails.append(f"node_exporter logged {len(dup)} duplicate-series errors: {dup[0][:300]}")
        else:
            print("node_exporter log: no duplicate-series error")
    else:
        print("note: prometheus-node-exporter not installed; scrape not run")

    # 4. unwritable places, reported once
    blocker = os.path.join(work, "a-file")
    open(blocker, "w").close()
    for where, errno_name in ((os.path.join(work, "missing", "s.prom"), "ENOENT"),
                              (os.path.join(blocker, "s.prom"), "ENOTDIR")):
        r = subprocess.run([probe, "sleep", "300"], env=env_for(lib, f"stats_file:{where},stats_interval_ms:20"),
                           capture_output=True, text=True, timeout=60)
        lines = [l for l in r.stderr.splitlines() if "stats_file" in l]
        if len(lines) != 1 or where not in lines[0] or errno_name not in lines[0]:
            fails.append(f"stats_file:{where}: stderr {r.stderr!r}")
        else:
            print(f"unwritable: {lines[0]}")

    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""fleet_figures.py BUILD_DIR [OUT.md] - the costs of observing a strata process from
outside, measured with tests/prof_sites:
  1. the sampler with a tracer's semaphore raised: instructions per malloc+free of 4 KiB
     (callgrind, the difference between runs of 200k and 400k pairs, so start-up cancels)
     under prof:false, prof:true,prof_active:false (nothing attached) and the same with
     otel_memory:alloc's semaphore raised (what attaching a tracer does in the process; the
     uprobe's own trap, per sampled allocation, comes on top), at the default sampling rate;
  2. the latency of /debug/pprof/heap through `strata serve` for a process holding 100k
     live sampled blocks, each with its own stack (lg_prof_sample:0): the signal, the dump
     thread's pprof write and the sidecar's read, five requests, as seen by an HTTP client.
The fast path's own figures (pair, prodcons) come from bench/figures/run_figures.py."""
import gzip, os, re, socket, statistics, subprocess, sys, tempfile, time, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def callgrind_ir(prog, args, env):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", prog] + args, env=env,
                       capture_output=True, check=True, timeout=600)
        text = open(out).read()
        return int(re.search(r"^summary:\s+(\d+)", text, re.M).group(1))


def semaphore(lib):
    r = subprocess.run(["readelf", "-n", lib], capture_output=True, text=True, check=True)
    m = re.search(r"Provider: otel_memory\s+Name: alloc\s+Location: \S+, Base: \S+, Semaphore: (\S+)", r.stdout)
    return m.group(1) if m else None


def main():
    build = os.path.abspath(sys.argv[1])
    out_md = sys.argv[2] if len(sys.argv) > 2 else None
    lib = os.path.join(build, "libstrata.so")
    prog = os.path.join(build, "tests", "prof_sites")
    sem = semaphore(lib)
    lines = ["| configuration | instructions per malloc+free (4 KiB) |", "|---|---|"]
    rows = [("prof:false", "", []),
            ("prof:false, otel_memory:alloc semaphore raised (sampler turned on at run time)", "", [sem]),
            ("prof:true,prof_active:false (nothing attached)", "prof:true,prof_active:false", []),
            ("prof:true,prof_active:false, otel_memory:alloc semaphore raised", "prof:true,prof_active:false", [sem]),
            ("prof:true (in-process stacks, for comparison)", "prof:true", [])]
    fig = {}
    for name, conf, extra in rows:
        if extra and extra[0] is None:
            continue
        env = dict(os.environ, LD_PRELOAD=lib, STRATA_CONF=conf)
        env.pop("MALLOC_CONF", None)
        a = callgrind_ir(prog, ["churn", "200000"] + extra, env)
        b = callgrind_ir(prog, ["churn", "400000"] + extra, env)
        fig[name] = (b - a) / 200000
        lines.append(f"| {name} | {fig[name]:.1f} |")
        print(lines[-1], flush=True)

    # dump latency
    work = tempfile.mkdtemp(prefix="strata-fleet-")
    env = dict(os.environ, LD_PRELOAD=lib,
               STRATA_CONF=f"prof:true,prof_signal:SIGUSR2,prof_format:pprof,lg_prof_sample:0,prof_prefix:{work}/s")
    env.pop("MALLOC_CONF", None)
    p = subprocess.Popen([prog, "stacks", "100000"], env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    senv = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools"))
    for k in ("LD_PRELOAD", "STRATA_CONF"):
        senv.pop(k, None)
    srv = subprocess.Popen([sys.executable, "-m", "strata_tool", "serve", "--listen", f"127.0.0.1:{port}",
                            "--pid", str(p.pid), "--timeout", "120"], env=senv, stderr=subprocess.DEVNULL)
    times, size = [], 0
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
                break
            except OSError:
                time.sleep(0.1)
        for _ in range(5):
            t0 = time.monotonic()
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/pprof/heap", timeout=120).read()
            times.append(time.monotonic() - t0)
            size = len(body)
        gzip.decompress(body)
    finally:
        srv.terminate()
        srv.wait()
        p.terminate()
        p.wait()
    lat = (f"/debug/pprof/heap, 100k live sampled blocks with 100k distinct stacks: median "
           f"{statistics.median(times) * 1000:.0f} ms (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}; "
           f"{size / 1e6:.1f} MB gzipped profile)")
    print(lat)
    if out_md:
        with open(out_md, "a") as f:
            f.write("\n".join(lines) + "\n\n" + lat + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""usdt_check.py notes LIB | gate LIB PROF_SITES WORKDIR | trace LIB PROF_SITES WORKDIR -
strata's USDT probes.
  notes: `readelf -n LIB` lists otel_memory:alloc and otel_memory:free (OpenTelemetry's
         memory-profiling contract) and strata:purge, limit_purge, lock_wait and oom, each
         with a semaphore (zero cost while nothing is attached). Exit 77 when the library
         was built without <sys/sdt.h>.
  gate:  with prof:true,prof_active:false nothing is sampled until otel_memory:alloc's
         semaphore is raised (as an attaching tracer raises it, done here by the program
         itself): a dump before shows no sample, one after shows site_alpha's (about 251).
  switch: in a process started with prof:false (the default), raising the semaphore
         turns the sampler on at run time and lowering it turns it off: 48-byte blocks are
         sampled (promoted to pages of their own) only while it is raised, at the rate
         lg_prof_sample asks; prof.dump stays ENOENT (no opt.prof).
  trace [CONF]: `strata trace` (bpftrace) attached to prof_sites started with CONF
         (default prof:true,prof_active:false; "prof:false" for a process started without
         the profiler): attaching turns the sampler on; site_alpha (16 MiB live) and
         site_beta (8 MiB) come out with their samples and outstanding bytes in
         proportion. Exit 77, saying why, where bpftrace cannot attach (not root, no
         bpftrace, no tracefs/uprobes)."""
import os, re, shutil, signal, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
WANT = {("otel_memory", "alloc"), ("otel_memory", "free"), ("strata", "purge"), ("strata", "limit_purge"),
        ("strata", "lock_wait"), ("strata", "oom")}


def notes(lib):
    r = subprocess.run(["readelf", "-n", lib], capture_output=True, text=True, check=True)
    got = {}
    for m in re.finditer(r"Provider: (\S+)\s+Name: (\S+)\s+Location: \S+, Base: \S+, Semaphore: (\S+)", r.stdout):
        got.setdefault((m.group(1), m.group(2)), set()).add(int(m.group(3), 16))
    if not got:
        print("SKIP: no stapsdt notes: built without <sys/sdt.h> (Debian: systemtap-sdt-dev)")
        return 77
    missing = WANT - set(got)
    ungated = [k for k, s in got.items() if 0 in s]
    for k in sorted(got):
        print(f"{k[0]}:{k[1]}: {len(got[k])} site(s), semaphore {', '.join(hex(x) for x in sorted(got[k]))}")
    if missing or ungated:
        print(f"FAIL: missing {sorted(missing)}, without semaphore {ungated}")
        return 1
    return 0


def semaphore_of(lib, provider, name):
    r = subprocess.run(["readelf", "-n", lib], capture_output=True, text=True, check=True)
    m = re.search(rf"Provider: {provider}\s+Name: {name}\s+Location: \S+, Base: \S+, Semaphore: (\S+)", r.stdout)
    return m.group(1) if m else None


def gate(lib, prog, work):
    sem = semaphore_of(lib, "otel_memory", "alloc")
    if sem is None:
        print("SKIP: no otel_memory:alloc note: built without <sys/sdt.h>")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, LD_PRELOAD=lib, STRATA_CONF="prof:true,prof_active:false,lg_prof_sample:14")
    env.pop("MALLOC_CONF", None)
    r = subprocess.run([prog, "gate", sem, work], env=env, capture_output=True, text=True, timeout=60)
    counts = []
    for f in ("before.heap", "after.heap"):
        try:
            m = re.search(r"^\s*t\*: (\d+): (\d+)", open(os.path.join(work, f)).read(), re.M)
            counts.append(int(m.group(1)))
        except (OSError, AttributeError):
            counts.append(None)
    print(f"prof_active:false: {counts[0]} samples before the semaphore is raised, {counts[1]} after")
    if r.returncode != 0 or counts[0] != 0 or counts[1] is None or not 235 <= counts[1] <= 256:
        print(f"FAIL: rc {r.returncode} {r.stdout} {r.stderr}")
        return 1
    return 0


def switch(lib, prog):
    sem = semaphore_of(lib, "otel_memory", "alloc")
    if sem is None:
        print("SKIP: no otel_memory:alloc note: built without <sys/sdt.h>")
        return 77
    env = dict(os.environ, LD_PRELOAD=lib, STRATA_CONF="lg_prof_sample:10")
    env.pop("MALLOC_CONF", None)
    r = subprocess.run([prog, "switch", sem], env=env, capture_output=True, text=True, timeout=60)
    print(r.stdout, r.stderr)
    m = re.search(r"samples (\d+) (\d+) (\d+) (\d+) dump (\d+)", r.stdout)
    if r.returncode != 0 or not m:
        print(f"FAIL: rc {r.returncode}")
        return 1
    before, on, leaving, off, dump = (int(x) for x in m.groups())
    fails = []
    # lg_prof_sample:10: a 48-byte block is sampled with probability 1 - e^(-48/1024) = 4.6%;
    # 20,000 blocks, less the first bin's worth popped before the first refill looks: ~900.
    if before != 0:
        fails.append(f"{before} samples before the semaphore was raised")
    if not 700 <= on <= 1150:
        fails.append(f"{on} samples while raised, expected 700..1150")
    if leaving > 60:
        fails.append(f"{leaving} samples in the phase that lowered it (at most a bin's worth expected)")
    if off != 0:
        fails.append(f"{off} samples after it was lowered")
    if dump != 2:  # ENOENT: prof.* names need opt.prof, as in jemalloc
        fails.append(f"prof.dump answered {dump}, expected ENOENT (2)")
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


def trace(lib, prog, work, conf="prof:true,prof_active:false"):
    why = None
    if os.geteuid() != 0:
        why = "not root"
    elif not shutil.which("bpftrace"):
        why = "bpftrace not installed"
    elif not os.path.isdir("/sys/kernel/tracing") and \
            not os.path.exists("/sys/kernel/debug/tracing/uprobe_events"):
        why = "no tracefs (uprobes cannot be attached here)"
    if why:
        print(f"SKIP: bpftrace cannot attach: {why}")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, LD_PRELOAD=lib, STRATA_CONF=conf + ",lg_prof_sample:14")
    env.pop("MALLOC_CONF", None)
    # With the semaphore, the program allocates once the probe is attached: bpftrace says
    # "Attaching" before it attaches, so a slow attach made the sites go untraced.
    sem = semaphore_of(lib, "otel_memory", "alloc")
    p = subprocess.Popen([prog, "wait"] + ([sem] if sem else []), env=env, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("waiting"), line
    tenv = dict(os.environ, PYTHONPATH=TOOLS)
    for k in ("LD_PRELOAD", "MALLOC_CONF", "STRATA_CONF"):
        tenv.pop(k, None)
    t = subprocess.Popen([sys.executable, "-m", "strata_tool", "trace", "-p", str(p.pid), "--duration", "6",
                          "--interval", "0"], env=tenv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # bpftrace's warnings (e.g. RLIMIT_MEMLOCK it may not raise) come before "Attaching".
        seen = []
        while True:
            line = t.stderr.readline()
            seen.append(line)
            if not line or "Attaching" in line or line.startswith("strata trace:"):
                break
        if "Attaching" not in line:
            rest = t.communicate(timeout=60)
            print(f"SKIP: bpftrace did not attach: {''.join(seen)}{rest[1]}"[:800])
            return 77
        time.sleep(1.0)  # the probes are in place once bpftrace says so; margin for the semaphore
        os.kill(p.pid, signal.SIGUSR1)
        out, err = t.communicate(timeout=120)
    finally:
        # SIGKILL: a program still in sigwait (bpftrace never attached) ignores SIGTERM's handler.
        p.kill()
        p.wait(timeout=30)
        if t.poll() is None:
            t.kill()
    print(out)
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\S+ \S+)\s+(\S+ \S+)\s+(\d+)\s+(\S+)", line)
        if m:
            rows.setdefault(m.group(4), (m.group(1), int(m.group(3))))
    fails = []
    # lg_prof_sample:14 (16 KiB mean): a 64 KiB block is sampled with probability
    # 1 - e^-4 (256 blocks: about 251 samples), a 16 KiB one with 1 - e^-1 (512: about 324).
    for site, lo, hi in (("site_alpha", 235, 256), ("site_beta", 280, 370)):
        if site not in rows:
            fails.append(f"{site} not traced")
        elif not lo <= rows[site][1] <= hi:
            fails.append(f"{site}: {rows[site][1]} samples, expected {lo}..{hi}")
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    if sys.argv[1] == "notes":
        sys.exit(notes(sys.argv[2]))
    if sys.argv[1] == "switch":
        sys.exit(switch(*sys.argv[2:4]))
    sys.exit((gate if sys.argv[1] == "gate" else trace)(*sys.argv[2:6]))

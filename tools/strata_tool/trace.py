"""`strata trace -p PID [--duration S] [--top N]`: live sampled allocations of a running
strata process, by stack, with the bytes still outstanding, through the USDT probes
otel_memory:alloc(ptr, size, weight) and otel_memory:free(ptr) (bpftrace underneath; the
stacks are unwound by the kernel, not in the process).

Attaching raises the probes' semaphore, which turns strata's sampler on: in a process
started without the profiler (prof:false, the default) at its next allocation slow path,
and back off when the tracer detaches; with prof:true,prof_active:false it records without
taking stacks. Needs root (or CAP_BPF and CAP_PERFMON), bpftrace and uprobes (tracefs).
"""

from __future__ import annotations

import argparse
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

from . import serve


def library_of(pid: int) -> str | None:
    """The libstrata file the process has mapped, as a path bpftrace can open."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and re.search(r"/libstrata[^/]*\.so", parts[5]):
                    path = parts[5].strip().removesuffix(" (deleted)")
                    return path
    except OSError:
        return None
    return None


def script(lib: str, interval: float) -> str:
    """The bpftrace program: per stack, sampled allocations and their weight (the bytes
    they stand for); per sampled pointer, its stack and weight until its free."""
    tick = (f"interval:ms:{int(interval * 1000)} {{ time(\"%H:%M:%S \"); "
            "printf(\"outstanding %ld bytes\\n\", @alloc_total - @freed_total); }\n") \
        if interval > 0 else ""
    return f"""usdt:{lib}:otel_memory:alloc {{
  @alloc_bytes[ustack(perf)] = sum(arg2);
  @alloc_count[ustack(perf)] = count();
  @stack_of[arg0] = ustack(perf);
  @weight_of[arg0] = arg2;
  @alloc_total += arg2;
}}
usdt:{lib}:otel_memory:free /@weight_of[arg0]/ {{
  @freed_bytes[@stack_of[arg0]] = sum(@weight_of[arg0]);
  @freed_total += @weight_of[arg0];
  delete(@stack_of[arg0]);
  delete(@weight_of[arg0]);
}}
{tick}END {{ clear(@stack_of); clear(@weight_of); }}
"""


_FRAME = re.compile(r"^\s*([0-9a-f]+)\s+(.*?)(?:\s+\((.*)\))?$")


def parse_maps(text: str) -> dict[str, dict[tuple, int]]:
    """bpftrace's printed maps: {map: {stack (tuple of frames): value}} and scalars under ()."""
    out: dict[str, dict[tuple, int]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^@(\w+)\[$", line)
        if m:
            frames = []
            i += 1
            while i < len(lines) and not lines[i].startswith("]:"):
                f = _FRAME.match(lines[i])
                if f:
                    frames.append(f"{f.group(2)} ({f.group(3) or '?'})")
                i += 1
            if i < len(lines):
                out.setdefault(m.group(1), {})[tuple(frames)] = int(lines[i][2:].strip())
        else:
            m = re.match(r"^@(\w+): (-?\d+)$", line)
            if m:
                out.setdefault(m.group(1), {})[()] = int(m.group(2))
        i += 1
    return out


def _fmt(b: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= div:
            return f"{b / div:.1f} {unit}"
    return f"{b:.0f} B"


def report(maps: dict, top: int, out=None) -> list[dict]:
    out = out or sys.stdout
    alloc = maps.get("alloc_bytes", {})
    count = maps.get("alloc_count", {})
    freed = maps.get("freed_bytes", {})
    rows = []
    for st, b in alloc.items():
        rows.append({"stack": list(st), "samples": count.get(st, 0), "alloc_bytes": b,
                     "outstanding_bytes": b - freed.get(st, 0)})
    rows.sort(key=lambda r: -r["outstanding_bytes"])
    total = maps.get("alloc_total", {}).get((), 0) - maps.get("freed_total", {}).get((), 0)
    print(f"outstanding (sampled, weighted): {_fmt(total)} in {len(rows)} stacks", file=out)
    print(f"{'outstanding':>12} {'allocated':>12} {'samples':>8}  stack (innermost first)", file=out)
    for r in rows[:top]:
        # strata's own frames (the probe sits in its sampler) are left out
        frames = [f for f in r["stack"] if "/libstrata" not in f and not f.startswith("[unknown]")]
        shown = " <- ".join(f.split("+")[0].split(" (")[0] for f in frames[:6]) or "?"
        print(f"{_fmt(r['outstanding_bytes']):>12} {_fmt(r['alloc_bytes']):>12} {r['samples']:>8}  {shown}", file=out)
    return rows


TRACEFS = "/sys/kernel/tracing"


def ensure_tracefs() -> str | None:
    """Mounts tracefs where it is missing (bpftrace attaches uprobes through its
    uprobe_events; some systems boot without it mounted). None when uprobes can be
    attached, else why not."""
    if os.path.exists(f"{TRACEFS}/uprobe_events") or os.path.exists("/sys/kernel/debug/tracing/uprobe_events"):
        return None
    if not os.path.isdir(TRACEFS):
        return f"{TRACEFS} does not exist (a kernel without tracefs)"
    r = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], capture_output=True, text=True)
    if r.returncode != 0:
        return f"tracefs is not mounted and mounting it failed: {r.stderr.strip() or r.returncode}"
    if not os.path.exists(f"{TRACEFS}/uprobe_events"):
        return "the kernel has no uprobe events (CONFIG_UPROBE_EVENTS)"
    return None


def stop(proc: subprocess.Popen) -> bytes | None:
    """The rest of bpftrace's output once it has exited after SIGINT (it prints its maps),
    or None when it had to be killed. A SIGINT that comes while it is still attaching its
    probes may go unanswered, so it is sent again every 5 s, for 60 s at most."""
    for _ in range(12):
        try:
            rest, _ = proc.communicate(timeout=5)
            return rest or b""
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
        except KeyboardInterrupt:
            break
    proc.kill()
    proc.communicate()
    return None


def trace(args) -> int:
    if args.print_script:
        print(script(args.lib or "/usr/lib/x86_64-linux-gnu/libstrata.so", args.interval), end="")
        return 0
    if args.pid is None:
        print("strata trace: -p PID is required (the process to trace)", file=sys.stderr)
        return 2
    if not os.path.exists(f"/proc/{args.pid}"):
        print(f"strata trace: -p {args.pid}: no such process", file=sys.stderr)
        return 2
    bt = shutil.which("bpftrace")
    if not bt:
        print("strata trace: bpftrace not found (Debian: apt install bpftrace)", file=sys.stderr)
        return 2
    lib = args.lib or library_of(args.pid)
    if not lib:
        print(f"strata trace: pid {args.pid} has no libstrata mapped (a static link: pass --lib "
              "with the executable's path)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("strata trace: needs root (or CAP_BPF and CAP_PERFMON) to attach uprobes", file=sys.stderr)
        return 2
    why = ensure_tracefs()
    if why:
        print(f"strata trace: uprobes cannot be attached: {why}", file=sys.stderr)
        return 1
    proc = subprocess.Popen([bt, "-p", str(args.pid), "-e", script(lib, args.interval)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out_lines = []
    # Raw reads with select: a text stream in non-blocking mode fails when no data is ready
    # (its decoder is handed None).
    fd = proc.stdout.fileno()
    pending = ""
    try:
        deadline = time.monotonic() + args.duration if args.duration else None
        while proc.poll() is None:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                chunk = os.read(fd, 65536).decode("utf-8", "replace")
                if chunk:
                    out_lines.append(chunk)
                    pending += chunk
                    *lines, pending = pending.split("\n")
                    for line in lines:
                        if re.match(r"^(\d\d:\d\d:\d\d outstanding|Attaching|ERROR)", line):
                            print(line, file=sys.stderr, flush=True)
                        if deadline and line.startswith("Attaching"):
                            deadline = time.monotonic() + args.duration  # S seconds of tracing
            if deadline and time.monotonic() > deadline:
                proc.send_signal(signal.SIGINT)
                break
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
    rest = stop(proc)
    if rest is None:
        print("strata trace: bpftrace did not stop after SIGINT; killed it", file=sys.stderr)
        return 1
    text = "".join(out_lines) + rest.decode("utf-8", "replace")
    if args.raw:
        print(text)
    if proc.returncode not in (0, None) and "@alloc_bytes" not in text:
        err = [l for l in text.splitlines() if "ERROR" in l or "No such file" in l]
        print(f"strata trace: bpftrace failed (exit {proc.returncode}): " + ("; ".join(err[-3:]) or text[-400:]),
              file=sys.stderr)
        return 1
    report(parse_maps(text), args.top)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--pid", type=int, help="the strata process to trace")
    p.add_argument("--duration", type=float, default=0, metavar="S",
                   help="stop after S seconds (default: at Ctrl-C)")
    p.add_argument("--interval", type=float, default=5, metavar="S",
                   help="print the outstanding bytes every S seconds (0: never; default 5)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="stacks shown (default 20)")
    p.add_argument("--lib", metavar="PATH", help="the file holding the probes (default: the process's libstrata)")
    p.add_argument("--raw", action="store_true", help="also print bpftrace's own output")
    p.add_argument("--print-script", action="store_true", help="print the bpftrace program and exit")
    p.set_defaults(func=trace)

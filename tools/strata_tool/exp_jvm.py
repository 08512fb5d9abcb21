"""A JVM with 100 threads allocating native memory (bench/jvm/NativeChurn.java:
Deflater/Inflater streams and direct ByteBuffers), the allocator preloaded into the
`java` process. javac compiles the program once per output directory. While it runs the
harness samples /proc/PID/maps every 50 ms and counts glibc's per-thread arena heaps
(64 MiB-aligned anonymous reservations of exactly 64 MiB: a read-write head and a
PROT_NONE tail), the shape behind glibc's RSS growth with many threads; the program
reports its own peak (VmHWM) and final (VmRSS after a GC) RSS.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from . import allocators as al
from .runner import ProcResult, _killpg, parse_result

THREADS = 100
ITERS = {"tiny": 3, "default": 40, "full": 400}
HEAP_MAX = 64 << 20          # glibc's HEAP_MAX_SIZE on 64-bit (2 * 32 MiB mmap threshold max)
JAVA_OPTS = ["-Xmx256m", "-XX:MaxDirectMemorySize=1g", "-XX:+UseSerialGC",
             "-XX:TieredStopAtLevel=1", "-Xss512k"]
SOURCE = Path(__file__).resolve().parents[2] / "bench" / "jvm" / "NativeChurn.java"


def tools() -> dict | None:
    out = {}
    for name in ("java", "javac"):
        p = shutil.which(name)
        if p is None:
            return None
        out[name] = p
    return out if SOURCE.is_file() else None


def count_arena_heaps(maps_text: str) -> int:
    """glibc arena heaps in a /proc/PID/maps text: an anonymous read-write mapping at a
    64 MiB-aligned address, followed only by contiguous anonymous read-write and then
    PROT_NONE mappings up to exactly 64 MiB further, where a mapping boundary falls."""
    anon = []
    for line in maps_text.splitlines():
        parts = line.split()
        if len(parts) < 5 or (len(parts) > 5 and parts[5].strip()):
            continue            # file-backed or named ([stack], [heap]): not an arena heap
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        anon.append((lo, hi, parts[1]))
    starts = {lo: i for i, (lo, _, _) in enumerate(anon)}
    bounds = {hi for _, hi, _ in anon}
    n = 0
    for lo, i in starts.items():
        if lo % HEAP_MAX or not anon[i][2].startswith("rw"):
            continue
        end, j, seen_none = lo, i, False
        ok = True
        while j < len(anon) and anon[j][0] == end and end < lo + HEAP_MAX:
            perm = anon[j][2]
            if perm.startswith("---"):
                seen_none = True
            elif not perm.startswith("rw") or seen_none:
                ok = False
                break
            end = anon[j][1]
            j += 1
        if ok and end == lo + HEAP_MAX and end in bounds:
            n += 1
    return n


def _compile(out_dir: Path, javac: str) -> tuple[Path | None, str]:
    cls = out_dir / "jvm-classes"
    target = cls / "NativeChurn.class"
    if target.is_file() and target.stat().st_mtime >= SOURCE.stat().st_mtime:
        return cls, ""
    cls.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([javac, "-d", str(cls), str(SOURCE)], capture_output=True, text=True,
                       timeout=120, check=False)
    return (cls if r.returncode == 0 else None), r.stderr[-1000:]


def run(alloc: al.Allocator, preset: str, timeout: float, env: dict,
        out_dir: Path) -> tuple[ProcResult, dict | None, list[str]]:
    res = ProcResult(argv=["java"])
    warnings: list[str] = []
    t = tools()
    if t is None:
        res.error = "java/javac (openjdk-17-jdk-headless) not installed"
        return res, None, warnings
    cls, err = _compile(out_dir, t["javac"])
    if cls is None:
        res.error = f"javac failed: {err}"
        return res, None, warnings
    argv = [t["java"], *JAVA_OPTS, "-cp", str(cls), "NativeChurn", str(THREADS),
            str(ITERS[preset]), preset]
    res.argv = argv
    penv = dict(env)
    penv.pop("LD_PRELOAD", None)
    if alloc.preload():
        penv["LD_PRELOAD"] = alloc.preload()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=penv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    box = {"heaps": 0, "mapped": None, "samples": 0}
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            try:
                with open(f"/proc/{proc.pid}/maps", encoding="ascii", errors="replace") as f:
                    text = f.read()
                box["heaps"] = max(box["heaps"], count_arena_heaps(text))
                box["samples"] += 1
                # Until seen: the first sample can come before ld.so maps the preload.
                if not box["mapped"] and alloc.preload():
                    box["mapped"] = al.is_mapped(proc.pid, alloc.preload())
            except OSError:
                pass
            done.wait(0.05)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    try:
        out, errtext = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid, 9)
        out, errtext = proc.communicate()
        res.timed_out = True
    except BaseException:
        _killpg(proc.pid, 9)
        proc.wait()
        raise
    finally:
        done.set()
        th.join()
    res.wall_s = time.perf_counter() - t0
    res.stdout, res.stderr = out, errtext
    if proc.returncode is not None and proc.returncode < 0:
        res.signal = -proc.returncode
    else:
        res.returncode = proc.returncode
    if not res.ok:
        return res, None, warnings
    parsed = parse_result(out)
    if parsed.data is None:
        res.error = parsed.error or "no RESULT line"
        return res, None, warnings
    result = dict(parsed.data)
    result.update({"preset": preset, "arena_heaps": box["heaps"],
                   "maps_samples": box["samples"], "iterations": ITERS[preset]})
    ver = al.verify(t["java"], alloc.preload(), alloc.name, env=penv)
    if alloc.preload() and box["mapped"] is False:
        ver["ok"] = False
    result["verification"] = ver
    result["verified_allocator"] = ver["verified_allocator"]
    if not ver["ok"]:
        warnings.append(f"ALLOCATOR MISMATCH: java was meant to run {alloc.name} but "
                        f"resolved to {ver['verified_allocator']}")
    res.maxrss_kb, res.maxrss_source = int(result.get("peak_rss_kb") or 0), "VmHWM"
    return res, result, warnings

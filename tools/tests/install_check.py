"""The `strata` command as `cmake --install` lays it out, run from outside the checkout
with a clean environment: it must find the installed libstrata.so by itself (`strata
run` with no --lib), read what that library writes (`strata stats show`), and say where
to build when it has no build tree (`strata bench --list`).

usage: install_check.py BUILD_DIR   (exit 0 pass, 1 fail, 77 skip)
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    build = Path(sys.argv[1]).resolve()
    if not (build / "libstrata.so").exists():
        print(f"SKIP: {build}/libstrata.so not built")
        return 77
    cmake = shutil.which("cmake")
    if not cmake:
        print("SKIP: cmake not on PATH")
        return 77
    with tempfile.TemporaryDirectory(prefix="strata-install-") as td:
        prefix = Path(td) / "prefix"
        work = Path(td) / "work"
        work.mkdir()
        r = subprocess.run([cmake, "--install", str(build), "--prefix", str(prefix)],
                           capture_output=True, text=True)
        if r.returncode:
            print("FAIL: cmake --install:", r.stdout[-2000:], r.stderr[-2000:])
            return 1
        exe = prefix / "bin" / "strata"
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "STRATA_LIB", "LD_PRELOAD")}
        env["PATH"] = "/usr/bin:/bin"

        def run(*argv, ok=(0,)):
            p = subprocess.run([str(exe), *argv], cwd=work, env=env, capture_output=True,
                               text=True, timeout=60)
            if p.returncode not in ok:
                raise SystemExit(f"FAIL: strata {' '.join(argv)}: exit {p.returncode}\n"
                                 f"{p.stdout}{p.stderr}")
            if "Traceback" in p.stderr:
                raise SystemExit(f"FAIL: strata {' '.join(argv)}: traceback\n{p.stderr}")
            return p

        run("run", "--", "true")
        lib = (prefix / "lib").resolve()
        p = run("run", "--", "sh", "-c", 'echo "$LD_PRELOAD"')
        got = p.stdout.strip().split()[0] if p.stdout.strip() else ""
        if not got.startswith(str(prefix.resolve())):
            print(f"FAIL: strata run preloaded {got!r}, not the library under {prefix}")
            return 1
        # The stats file is written every stats_interval_ms while the program runs (and
        # may be removed at exit): the program copies it while alive.
        stats = work / "s.prom"
        prog = ("import shutil, time\n"
                "for _ in range(100):\n"
                "    time.sleep(0.05)\n"
                "    try:\n"
                "        shutil.copy('live.prom', 's.prom'); break\n"
                "    except OSError: pass\n")
        run("run", "--conf", "stats_interval_ms:50", "--stats-file", str(work / "live.prom"),
            "--", sys.executable, "-c", prog)
        if not stats.exists():
            print(f"FAIL: no {stats} written (files: {os.listdir(work)})")
            return 1
        p = run("stats", "show", str(stats))
        if "allocated" not in p.stdout:
            print(f"FAIL: strata stats show printed no summary:\n{p.stdout}")
            return 1
        run("stats", "show", "--json", str(stats))
        p = run("bench", "--list")
        if "no build tree" not in p.stdout or str(work / "build") in p.stdout:
            print(f"FAIL: strata bench --list outside a checkout:\n{p.stdout}")
            return 1
        p = run("stats", "show", "/nonexistent", ok=(1,))
        if len(p.stderr.strip().splitlines()) != 1:
            print(f"FAIL: expected one line:\n{p.stderr}")
            return 1
        print(f"PASS: installed strata found {lib} and ran from {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runs one measured child process: wall time, user+sys CPU and peak RSS from the
kernel's rusage (os.wait4), stdout/stderr to files (no pipe can fill and stall it),
its own process group so a timeout kills the whole tree, and the workload's
`RESULT {json}` line parsed from stdout.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

STDERR_TAIL = 2000   # characters of stderr kept for a failed run: enough for a backtrace


@dataclass
class ProcResult:
    argv: list[str]
    returncode: int | None = None     # exit status when it exited
    signal: int | None = None         # terminating signal when it was killed
    timed_out: bool = False
    wall_s: float = 0.0
    user_s: float = 0.0
    sys_s: float = 0.0
    maxrss_kb: int = 0
    stdout: str = ""
    stderr: str = ""
    error: str | None = None          # could not be started at all
    maxrss_source: str = "wait4"     # gnu-time, wait4 or VmHWM (see run_measured)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and self.returncode == 0

    def failure(self) -> str | None:
        """One line saying why the run failed, or None."""
        if self.error:
            return self.error
        if self.timed_out:
            return f"timeout after {self.wall_s:.1f} s"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = str(self.signal)
            return f"killed by {name}"
        if self.returncode:
            return f"exit status {self.returncode}"
        return None

    def stderr_tail(self, n: int = STDERR_TAIL) -> str:
        return self.stderr[-n:]


def tail_lines(text: str, n: int = 20) -> str:
    return "\n".join(text.splitlines()[-n:])


# ru_maxrss is not the program's own peak when the harness forks it: at exec the kernel
# folds the old address space's high-water mark (Python's ~15-30 MB) into the process's
# maxrss. GNU time forks the program from its own 1 MB process and reports the child's
# maxrss, so that floor drops to ~1.5 MB; /usr/bin/env sets LD_PRELOAD for the program
# only, so the allocator is never loaded into time itself.
RUSAGE_FMT = "STRATA_RUSAGE %M %x"


@functools.lru_cache(maxsize=1)
def gnu_time() -> str | None:
    """Path of GNU time (Debian package `time`), or None."""
    for cand in ("/usr/bin/time", shutil.which("time") or ""):
        if cand and os.access(cand, os.X_OK):
            try:
                r = subprocess.run([cand, "--version"], capture_output=True, text=True,
                                   timeout=5, check=False)
            except (OSError, subprocess.SubprocessError):
                continue
            if "GNU" in r.stdout + r.stderr:
                return cand
    return None


def run_measured(argv: list[str], env: dict, timeout: float, preload: str | None = None,
                 cwd: str | None = None, grace: float = 2.0) -> ProcResult:
    """Run argv with LD_PRELOAD=preload (env itself must not set LD_PRELOAD). Waits
    with os.wait4 in a helper thread (wall time ends exactly at exit; user/sys are the
    kernel's), kills the process group after `timeout` s (SIGTERM, SIGKILL after
    `grace`). Peak RSS comes from GNU time when installed (see above), else from
    wait4 with the harness's own RSS as a floor (maxrss_source says which)."""
    res = ProcResult(argv=list(argv))
    wrapper = gnu_time()
    env = dict(env)
    env.pop("LD_PRELOAD", None)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(prefix="strata-rusage-", mode="r") as ru_file:
        if wrapper:
            cmd = [wrapper, "-q", "-f", RUSAGE_FMT, "-o", ru_file.name]
            if preload:
                cmd += ["/usr/bin/env", f"LD_PRELOAD={preload}"]
            cmd += argv
            res.maxrss_source = "gnu-time"
        else:
            cmd = list(argv)
            if preload:
                env["LD_PRELOAD"] = preload
            res.maxrss_source = "wait4"
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
        except OSError as ex:
            res.error = f"cannot start {argv[0]}: {ex.strerror or ex}"
            return res
        box: dict = {}

        def waiter() -> None:
            try:
                _, status, ru = os.wait4(proc.pid, 0)
                box["t"] = time.perf_counter()
                box["status"], box["ru"] = status, ru
            except ChildProcessError as ex:          # pragma: no cover - defensive
                box["t"] = time.perf_counter()
                box["exc"] = ex

        th = threading.Thread(target=waiter, daemon=True)
        th.start()
        try:
            th.join(timeout)
        except BaseException:
            # Ctrl-C: the child is in its own session and would not see it; end it.
            _killpg(proc.pid, signal.SIGKILL)
            th.join()
            raise
        if th.is_alive():
            res.timed_out = True
            _killpg(proc.pid, signal.SIGTERM)
            th.join(grace)
            if th.is_alive():
                _killpg(proc.pid, signal.SIGKILL)
                th.join()
        proc.returncode = -1                          # reaped by wait4: keep Popen quiet
        res.wall_s = box.get("t", time.perf_counter()) - t0
        if "status" in box:
            st, ru = box["status"], box["ru"]
            if os.WIFEXITED(st):
                res.returncode = os.WEXITSTATUS(st)
            elif os.WIFSIGNALED(st):
                res.signal = os.WTERMSIG(st)
            res.user_s, res.sys_s = ru.ru_utime, ru.ru_stime
            res.maxrss_kb = int(ru.ru_maxrss)         # kilobytes on Linux
        else:
            res.error = f"wait4 failed: {box.get('exc')}"
        if wrapper and res.error is None:
            _apply_gnu_time(res, ru_file.read())
        out.seek(0)
        err.seek(0)
        res.stdout = out.read().decode(errors="replace")
        res.stderr = err.read().decode(errors="replace")
    return res


def _apply_gnu_time(res: ProcResult, text: str) -> None:
    """Take the program's peak RSS and exit status from GNU time's report. time exits
    with the program's status, or 128+N when a signal N killed it (then %x is 0)."""
    rec = None
    for ln in text.splitlines():
        if ln.startswith("STRATA_RUSAGE "):
            rec = ln.split()
    if rec is None or len(rec) < 3:
        # No report: time itself was killed (timeout); keep what wait4 saw.
        res.maxrss_source = "wait4"
        return
    res.maxrss_kb = int(rec[1])
    status = int(rec[2])
    if res.signal is None and res.returncode is not None and res.returncode > 128 \
            and status != res.returncode:
        res.signal, res.returncode = res.returncode - 128, None


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# Fields every workload's RESULT carries (bench/workloads contract).
REQUIRED_RESULT = ("workload", "preset", "threads", "ops", "seconds", "ops_per_sec",
                   "peak_rss_kb", "final_rss_kb")


@dataclass
class ParsedResult:
    data: dict | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


def parse_result(stdout: str) -> ParsedResult:
    """The last `RESULT {json}` line of stdout. A missing line or bad JSON is an
    error; missing contract fields are warnings, except ops and seconds, which the
    report cannot do without."""
    line = None
    for ln in reversed(stdout.splitlines()):
        if ln.startswith("RESULT "):
            line = ln
            break
    if line is None:
        return ParsedResult(error="no `RESULT {json}` line on stdout")
    try:
        data = json.loads(line[len("RESULT "):])
    except json.JSONDecodeError as ex:
        return ParsedResult(error=f"RESULT line is not JSON: {ex}")
    if not isinstance(data, dict):
        return ParsedResult(error="RESULT json is not an object")
    pr = ParsedResult(data=data)
    missing = [k for k in REQUIRED_RESULT if k not in data]
    if missing:
        pr.warnings.append("RESULT lacks " + ", ".join(missing))
    for k in ("ops", "seconds"):
        v = data.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            pr.error = f"RESULT field {k!r} is missing or not a non-negative number"
            break
    last = [ln for ln in stdout.splitlines() if ln.strip()]
    if last and last[-1] != line:
        pr.warnings.append("RESULT is not the last stdout line")
    return pr

"""What a result depends on besides the code: the machine (CPU model, cores, memory,
kernel, OS, transparent huge pages), the allocator versions (dpkg-query for the Debian
packages, include/strata.h and git describe for strata) and the repository layout.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path


def find_repo_root(start: Path | None = None) -> Path | None:
    """The strata checkout: the directory holding include/strata.h, searched from this
    package's location (tools/strata_tool -> repo) and then from the working directory
    upwards."""
    here = Path(__file__).resolve()
    cands = [here.parents[2]] if len(here.parents) > 2 else []
    cwd = (start or Path.cwd()).resolve()
    cands += [cwd, *cwd.parents]
    for c in cands:
        if (c / "include" / "strata.h").is_file():
            return c
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _cmd(argv: list[str], cwd: Path | None = None) -> str | None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=cwd,
                           check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def machine() -> dict:
    cpuinfo = _read("/proc/cpuinfo")
    m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    meminfo = _read("/proc/meminfo")
    mt = re.search(r"^MemTotal:\s*(\d+)", meminfo, re.M)
    osr = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', _read("/etc/os-release"), re.M))
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled").strip()
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "cpu_model": m.group(1).strip() if m else platform.processor() or platform.machine(),
        "arch": platform.machine(),
        "cores_online": os.cpu_count(),
        "cores_usable": affinity,
        "memory_kb": int(mt.group(1)) if mt else None,
        "kernel": platform.release(),
        "os": osr.get("PRETTY_NAME") or platform.platform(),
        "thp": (re.search(r"\[(\w+)\]", thp).group(1) if "[" in thp else thp) or None,
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "hostname": platform.node(),
        "python": sys.version.split()[0],
    }


def dpkg_version(package: str | None) -> str | None:
    if not package:
        return None
    out = _cmd(["dpkg-query", "-W", "-f", "${Version}", package])
    if out is None:       # multiarch packages answer under their :arch name too
        out = _cmd(["dpkg-query", "-W", "-f", "${Version}", f"{package}:amd64"])
    return out


def strata_version(repo: Path | None) -> str | None:
    """STRATA_VERSION from include/strata.h, plus `git describe` when the checkout has
    a commit (e.g. "0.1.0 (v0.1.0-3-gabc1234-dirty)")."""
    if repo is None:
        return None
    header = _read(str(repo / "include" / "strata.h"))
    m = re.search(r'#define\s+STRATA_VERSION\s+"([^"]+)"', header)
    ver = m.group(1) if m else None
    desc = _cmd(["git", "describe", "--always", "--dirty", "--tags"], cwd=repo)
    if desc:
        return f"{ver} ({desc})" if ver else desc
    return ver


def git_commit(repo: Path | None) -> str | None:
    return _cmd(["git", "rev-parse", "HEAD"], cwd=repo) if repo else None


RELEVANT_ENV = ("MALLOC_CONF", "STRATA_CONF", "GLIBC_TUNABLES", "MIMALLOC_VERBOSE",
                "MIMALLOC_SHOW_STATS", "TCMALLOC_RELEASE_RATE", "LD_PRELOAD")


def relevant_env() -> dict:
    """Environment variables that change an allocator's behaviour, as they were."""
    return {k: v for k, v in os.environ.items()
            if k in RELEVANT_ENV or k.startswith(("MIMALLOC_", "TCMALLOC_", "JE_"))}

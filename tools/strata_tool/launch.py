"""`strata run [--conf k:v,...] [--stats-file PATH] [--lib PATH] -- CMD...`: runs CMD
with libstrata.so preloaded and the given options (added to STRATA_CONF, which strata
reads after /etc/strata.conf and before MALLOC_CONF). The library is found in this
order: --lib, $STRATA_LIB, the checkout's build/ tree, the installed library
(ldconfig's cache, then the usual library directories).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def find_library(explicit: str | None = None) -> Path | None:
    cands = [explicit, os.environ.get("STRATA_LIB"), str(REPO / "build" / "libstrata.so")]
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
        cands += [line.split("=>")[-1].strip() for line in out.splitlines() if "libstrata.so" in line]
    except (OSError, subprocess.SubprocessError):
        pass
    cands += [f"{d}/libstrata.so" for d in ("/usr/local/lib", "/usr/local/lib64", "/usr/lib",
                                            "/usr/lib/x86_64-linux-gnu")]
    for c in cands:
        if c and Path(c).is_file():
            return Path(c).resolve()
    return None


def build_env(lib: Path, conf: str | None, stats_file: str | None, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    pre = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{lib} {pre}".strip()
    parts = [p for p in (env.get("STRATA_CONF"), conf) if p]
    if stats_file:
        parts.append(f"stats_file:{stats_file}")
    if parts:
        env["STRATA_CONF"] = ",".join(parts)
    return env


def validate_conf(conf: str | None) -> str | None:
    """Every item must be key:value; strata itself reports unknown keys and bad values."""
    if not conf:
        return None
    for item in conf.split(","):
        if ":" not in item or not item.split(":", 1)[0]:
            return f"--conf: '{item}' is not key:value (for example narenas:4,stats_print:true)"
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conf", help="strata options, key:value,... (MALLOC_CONF syntax)")
    p.add_argument("--stats-file", metavar="PATH",
                   help="write statistics (Prometheus text) to PATH periodically; %%p is the pid")
    p.add_argument("--lib", help="libstrata.so to preload (default: found automatically)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("strata run: no command (strata run [options] -- CMD ...)", file=sys.stderr)
        return 2
    err = validate_conf(args.conf)
    if err:
        print(f"strata run: {err}", file=sys.stderr)
        return 2
    lib = find_library(args.lib)
    if lib is None:
        print("strata run: libstrata.so not found (give --lib PATH or set STRATA_LIB)", file=sys.stderr)
        return 2
    env = build_env(lib, args.conf, args.stats_file)
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        print(f"strata run: {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127

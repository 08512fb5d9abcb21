"""`strata run [--conf k:v,...] [--stats-file PATH] [--lib PATH] -- CMD...`: runs CMD
with libstrata.so preloaded and the given options (added to STRATA_CONF, which strata
reads after /etc/strata.conf and before MALLOC_CONF). The library is found in this
order: --lib, $STRATA_LIB, the library installed beside this package (`cmake --install`
writes where in _installed.py), the build/ tree of the checkout this package is in,
then the system's (ldconfig's cache, then the usual library directories).
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from .errors import Failure, UsageError

PKG = Path(__file__).resolve().parent
REPO = PKG.parents[1]
LIB_NAME = "libstrata.so"


def installed_library() -> Path | None:
    """The libstrata.so of the install this package belongs to, if it was installed by
    `cmake --install` (which writes the library directory relative to the package)."""
    try:
        from . import _installed  # type: ignore[attr-defined]
    except ImportError:
        return None
    return (PKG / _installed.LIBDIR_FROM_PACKAGE / LIB_NAME).resolve()


def checkout_library() -> Path | None:
    """<checkout>/build/libstrata.so when this package runs from a source checkout."""
    if (REPO / "include" / "strata.h").is_file() and (REPO / "CMakeLists.txt").is_file():
        return REPO / "build" / LIB_NAME
    return None


def system_libraries() -> list[str]:
    cands: list[str] = []
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                             timeout=10).stdout
        cands += [line.split("=>")[-1].strip() for line in out.splitlines()
                  if f"{LIB_NAME} " in line or line.strip().startswith(LIB_NAME)]
    except (OSError, subprocess.SubprocessError):
        pass
    cands += [f"{d}/{LIB_NAME}" for d in ("/usr/local/lib", "/usr/local/lib64", "/usr/lib",
                                          "/usr/lib/x86_64-linux-gnu")]
    return cands


def find_library(explicit: str | None = None) -> Path | None:
    if explicit:
        p = Path(explicit)
        return p.resolve() if p.is_file() else None
    cands = [os.environ.get("STRATA_LIB"), installed_library(), checkout_library(),
             *system_libraries()]
    for c in cands:
        if c and Path(c).is_file():
            return Path(c).resolve()
    return None


def require_library(explicit: str | None = None) -> Path:
    """find_library, or a Failure that says what was tried and how to point at it."""
    lib = find_library(explicit)
    if lib is not None:
        return lib
    if explicit:
        raise Failure(f"--lib {explicit}: no such file")
    raise Failure(f"{LIB_NAME} not found (installed prefix, checkout build/, ldconfig): "
                  "give --lib PATH or set STRATA_LIB")


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


def command_of(args_cmd: list[str], usage: str) -> list[str]:
    """The program after `--` (or the remainder); a UsageError naming `usage` if none."""
    cmd = args_cmd[1:] if args_cmd[:1] == ["--"] else list(args_cmd)
    if not cmd:
        raise UsageError(f"no command ({usage})")
    return cmd


def start_failure(cmd0: str, e: OSError) -> Failure:
    """exec failed: 127 when the program does not exist, 126 otherwise, as env(1)."""
    status = 127 if isinstance(e, FileNotFoundError) else 126
    return Failure(f"{cmd0}: {e.strerror or e}", status)


def start(cmd: list[str], env: dict) -> subprocess.Popen:
    try:
        return subprocess.Popen(cmd, env=env)
    except OSError as e:
        raise start_failure(cmd[0], e) from None


def call(cmd: list[str], env: dict) -> int:
    proc = start(cmd, env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        raise


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Run CMD with libstrata.so preloaded (LD_PRELOAD) and the given "
                     "options. Exits with CMD's status; 127/126 when it cannot be started.")
    p.add_argument("--conf", help="strata options, key:value,... (MALLOC_CONF syntax)")
    p.add_argument("--stats-file", metavar="PATH",
                   help="write statistics (Prometheus text) to PATH periodically; %%p is the pid")
    p.add_argument("--lib", help="libstrata.so to preload (default: the installed one, then "
                                 "the checkout's build/, then ldconfig's)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    cmd = command_of(args.cmd, "strata run [options] -- CMD ...")
    err = validate_conf(args.conf)
    if err:
        raise UsageError(err)
    lib = require_library(args.lib)
    env = build_env(lib, args.conf, args.stats_file)
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        raise start_failure(cmd[0], e) from None
    return 0  # not reached

"""Entry point of the `strata` command: one argparse subparser per subcommand. A
subcommand module provides add_arguments(parser), which sets `func`; adding `run`,
`stats` or `prof` later is one more line in SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import sys

from . import __version__, bench, launch, prof, serve, statsview, trace

# (name, module, one-line help). Each module exposes add_arguments(parser).
SUBCOMMANDS = (
    ("bench", bench, "compare strata with glibc, jemalloc, tcmalloc and mimalloc on the "
                     "benchmark workloads and Redis; writes results.json and report.md"),
    ("run", launch, "run a command with strata preloaded and the given options"),
    ("stats", statsview, "read strata's statistics: show FILE, diff A B, watch -- CMD"),
    ("prof", prof, "heap profiles: record a program, top, flame graph, diff two dumps, leaks"),
    ("serve", serve, "HTTP sidecar: /metrics and /debug/pprof/heap for running strata processes"),
    ("trace", trace, "live sampled allocations of a process by stack (USDT probes, bpftrace)"),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strata", description="Tools for the strata allocator.")
    p.add_argument("--version", action="version", version=f"strata_tool {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod, help_ in SUBCOMMANDS:
        sp = sub.add_parser(name, help=help_, description=help_)
        mod.add_arguments(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("strata: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

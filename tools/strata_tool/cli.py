"""Entry point of the `strata` command: one argparse subparser per subcommand. A
subcommand module provides add_arguments(parser), which sets `func`; a new subcommand
is one more line in SUBCOMMANDS.

Exit status: 0 success, 1 failure (errors.Failure, an unreadable file), 2 usage error
(errors.UsageError, argparse), the program's own status for the commands that run one
(126/127 when it cannot be started, as env(1) does), 130 on Ctrl-C, 141 when the
reader of stdout went away (`strata ... | head`). Every problem is one line on stderr.
"""

from __future__ import annotations

import os
import sys

from . import __version__, bench, launch, prof, serve, statsview, trace
from .errors import Failure, Parser, UsageError

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


def build_parser() -> Parser:
    p = Parser(prog="strata", description="Tools for the strata allocator.",
               epilog="Exit status: 0 success, 1 failure, 2 usage error; `run`, `stats "
                      "watch`, `prof record` and `prof leaks` exit with the program's status "
                      "(126/127 when it cannot be started). `strata COMMAND --help` for each.")
    p.add_argument("--version", action="version", version=f"strata_tool {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", help="one of:")
    for name, mod, help_ in SUBCOMMANDS:
        sp = sub.add_parser(name, help=help_, description=help_)
        mod.add_arguments(sp)
    return p


def _prog(args) -> str:
    """`strata stats show` etc.: the prefix of a one-line message."""
    words = ["strata"]
    if args is None:
        return "strata"
    for attr in ("command", "stats_command", "prof_command"):
        v = getattr(args, attr, None) if args is not None else None
        if v:
            words.append(v)
    return " ".join(words)


def _oserror_text(e: OSError) -> str:
    what = e.filename if e.filename is not None else ""
    why = e.strerror or str(e)
    return f"{what}: {why}" if what else why


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            raise UsageError("missing command: " + ", ".join(n for n, _, _ in SUBCOMMANDS)
                             + " (see strata --help)", "strata")
        return int(args.func(args) or 0)
    except UsageError as e:
        print(f"{e.prog or _prog(args)}: {e}", file=sys.stderr)
        return 2
    except Failure as e:
        print(f"{_prog(args)}: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        print("strata: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): stop quietly, as a C tool killed by
        # SIGPIPE would; stdout goes to /dev/null so the interpreter's final flush
        # cannot raise again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except OSError as e:
        print(f"{_prog(args)}: {_oserror_text(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The two ways a subcommand reports a user-facing problem, and the argparse helpers
that share them. cli.main() turns UsageError into exit status 2 and Failure into 1,
each as one line on stderr; a traceback is left only for a defect of the tool itself.
"""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """The command line is wrong (an option's value, a missing argument): exit 2.
    `prog` names the (sub)command when the error is raised before parsing is done."""

    def __init__(self, msg: str, prog: str | None = None):
        super().__init__(msg)
        self.prog = prog


class Failure(Exception):
    """The command was right but could not be done (an unreadable or wrong file, a
    missing library, a program that would not start): exit 1, or `status` when set."""

    def __init__(self, msg: str, status: int = 1):
        super().__init__(msg)
        self.status = status


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line ("strata prof top: argument -n: ...
    (strata prof top --help)") with exit status 2, instead of the usage block."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        raise UsageError(f"{message} (see {self.prog} --help)", self.prog)


def need_action(p: argparse.ArgumentParser, actions: str):
    """`func` for a command group run without its action: a one-line usage error."""
    def missing(_args) -> int:
        raise UsageError(f"missing action: {actions} (see {p.prog} --help)", p.prog)
    return missing


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (counts such as -n, --rounds)."""
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def nonneg_float(text: str) -> float:
    """argparse type: a number >= 0 (seconds)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number >= 0")
    return v


def power_of_two(text: str) -> int:
    """argparse type: bytes, a power of two (sampling rates and intervals)."""
    v = positive_int(text)
    if v & (v - 1):
        raise argparse.ArgumentTypeError(f"{v} is not a power of two (for example 524288)")
    return v

#!/usr/bin/env python3
"""Fail when a tracked file speaks of how the work on strata was organised instead of
the product: tracker numbers ("issue" and a number), work-branch names (an "s", a
number, a hyphen and a word) and ordinal work sessions, rounds and passes. A comment
says why the code is as it is, in the code's own terms, or points at a section of
docs/design.md; the history lives in git.

usage: scripts/check-vocabulary.py [--root DIR]
Checks the files `git ls-files` lists under DIR (default: this checkout) but those under
bench/results/ (dated reports keep the notes of their day). Prints file:line: text for
each hit and exits 1 when there is one, 0 when there is none, 77 (skip) when DIR is not
a git checkout.

What is left alone: a benchmark's rounds ("3 rounds", "the first round", "round 2"),
a second pass over a list, a process or Redis session, URLs of upstream trackers
(".../issues/123"), words such as "s390x" or "-s".
"""
import argparse
import os
import re
import subprocess
import sys

EXCLUDED_DIRS = ("bench/results/",)
# This file names the patterns it looks for.
EXCLUDED_FILES = ("scripts/check-vocabulary.py",)

ORD_ALL = r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
# "first round" and "second pass" are ordinary words for a benchmark or an algorithm;
# from the third on, a round or a pass is a count of work sessions.
ORD_LATE = r"third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"

PATTERNS = [
    ("tracker number", re.compile(r"\b[Ii]ssues?[ -]#?[0-9]+\b")),
    ("work-branch name", re.compile(r"(?<![\w./-])s[0-9]+-[a-z][a-z0-9]*\b")),
    ("work session", re.compile(rf"\b(?:{ORD_ALL})[ -]sessions?\b", re.I)),
    ("work round or pass", re.compile(rf"\b(?:{ORD_LATE})[ -](?:rounds?|pass(?:es)?)\b", re.I)),
]
# An ordinal at the end of a line whose next line (comment leaders stripped) starts
# with the noun: the same phrase, wrapped.
WRAP_ALL = re.compile(rf"\b(?:{ORD_ALL})\s*$", re.I)
WRAP_LATE = re.compile(rf"\b(?:{ORD_LATE})\s*$", re.I)
LEADER = re.compile(r"^[\s*#/>|\-\"']*")
NOUN_SESSION = re.compile(r"sessions?\b", re.I)
NOUN_ROUND = re.compile(r"(?:rounds?|pass(?:es)?)\b", re.I)


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def scan_text(text):
    """(line number, kind, line) for each hit in text."""
    hits = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        for kind, rx in PATTERNS:
            if rx.search(line):
                hits.append((i + 1, kind, line))
                break
        else:
            if i + 1 < len(lines):
                nxt = LEADER.sub("", lines[i + 1])
                if (WRAP_ALL.search(line) and NOUN_SESSION.match(nxt)) or \
                   (WRAP_LATE.search(line) and NOUN_ROUND.match(nxt)):
                    hits.append((i + 1, "work session, round or pass (wrapped)", line))
    return hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    files = tracked_files(args.root)
    if files is None:
        print(f"SKIP: {args.root} is not a git checkout (the check reads `git ls-files`)")
        return 77
    nhits = 0
    for rel in files:
        if rel.startswith(EXCLUDED_DIRS) or rel in EXCLUDED_FILES:
            continue
        path = os.path.join(args.root, rel)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue  # deleted in the work tree, or a submodule
        if b"\0" in data[:8192]:
            continue  # binary
        for lineno, kind, line in scan_text(data.decode("utf-8", "replace")):
            print(f"{rel}:{lineno}: {kind}: {line.strip()[:160]}")
            nhits += 1
    if nhits:
        print(f"{nhits} line(s) speak of how the work was organised, not of the product: say why "
              "in the code's own terms, or point at a section of docs/design.md", file=sys.stderr)
        return 1
    print(f"{len(files)} tracked files checked: no tracker numbers, work-branch names or work sessions")
    return 0


if __name__ == "__main__":
    sys.exit(main())

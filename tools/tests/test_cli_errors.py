"""Every subcommand given wrong input: one line on stderr, no traceback, exit status 2
for a usage error and 1 for a failure (126/127 for a program that cannot be started),
and a closed stdout (`| head`) ends quietly. Also every subcommand and option has help.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1]
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))


def strata(*argv, cwd=None, stdout=subprocess.PIPE, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(TOOLS))
    env.pop("STRATA_LIB", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "strata_tool", *map(str, argv)], cwd=cwd,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, env=env,
                          timeout=60)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "empty.prom").write_text("")
    (d / "empty.json").write_text("{}")
    (d / "list.json").write_text("[1, 2]")
    (d / "broken.json").write_text('{"jemalloc": ')
    (d / "server.log").write_text("12:00:01 started\nready to accept connections\n")
    (d / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (d / "bad.gz").write_bytes(b"\x1f\x8b" + b"not really gzip")
    (d / "heap_bad").write_text("heap_v2/524288\nthis is not a stack line\n")
    (d / "good.prom").write_text("strata_allocated_bytes 1000\nstrata_active_bytes 2000\n")
    (d / "results.json").write_text('{"schema": "something-else"}')
    return d


# (argv, expected exit status). {d} is the scratch directory of bad files.
CASES = [
    ([], 2),
    (["frobnicate"], 2),
    (["stats"], 2),
    (["stats", "show"], 2),
    (["stats", "show", "{d}/missing.json"], 1),
    (["stats", "show", "/etc/passwd"], 1),
    (["stats", "show", "{d}/empty.json"], 1),
    (["stats", "show", "{d}/list.json"], 1),
    (["stats", "show", "{d}/broken.json"], 1),
    (["stats", "show", "{d}/empty.prom"], 1),
    (["stats", "show", "{d}/server.log"], 1),
    (["stats", "show", "{d}/binary.bin"], 1),
    (["stats", "show", "{d}"], 1),
    (["stats", "diff", "{d}/good.prom", "{d}/server.log"], 1),
    (["stats", "diff", "{d}/good.prom"], 2),
    (["stats", "watch"], 2),
    (["stats", "watch", "--interval-ms", "0", "--", "true"], 2),
    (["stats", "watch", "--conf", "narenas", "--", "true"], 2),
    (["stats", "watch", "--lib", "{d}/nolib.so", "--", "true"], 1),
    (["stats", "watch", "--png", "", "--", "/nonexistent"], 127),
    (["run"], 2),
    (["run", "--conf", "junk", "--", "true"], 2),
    (["run", "--lib", "{d}/nolib.so", "--", "true"], 1),
    (["run", "--", "/nonexistent"], 127),
    (["run", "--", "{d}"], 126),
    (["prof"], 2),
    (["prof", "top"], 2),
    (["prof", "top", "{d}/missing.heap"], 1),
    (["prof", "top", "/etc/passwd"], 1),
    (["prof", "top", "{d}/heap_bad"], 1),
    (["prof", "top", "{d}/bad.gz"], 1),
    (["prof", "top", "{d}/empty.prom"], 1),
    (["prof", "top", "-n", "-3", "{d}/heap_bad"], 2),
    (["prof", "top", "-n", "x", "{d}/heap_bad"], 2),
    (["prof", "flame", "{d}/heap_bad"], 2),
    (["prof", "flame", "{d}/heap_bad", "-o", "{d}/x.svg"], 1),
    (["prof", "diff", "{d}/heap_bad", "/etc/passwd"], 1),
    (["prof", "diff", "{d}/heap_bad"], 2),
    (["prof", "record"], 2),
    (["prof", "record", "--rate", "1000", "--", "true"], 2),
    (["prof", "record", "--interval", "0", "--", "true"], 2),
    (["prof", "record", "--format", "svg", "--", "true"], 2),
    (["prof", "record", "--lib", "{d}/nolib.so", "--", "true"], 1),
    (["prof", "leaks"], 2),
    (["prof", "leaks", "-n", "0", "--", "true"], 2),
    (["bench", "--rounds", "0"], 2),
    (["bench", "--rounds", "x"], 2),
    (["bench", "--budget", "-5"], 2),
    (["bench", "--timeout", "nan"], 2),
    (["bench", "--threads", "0"], 2),
    (["bench", "--preset", "huge"], 2),
    (["bench", "--allocators", "nosuch", "--list"], 2),
    (["bench", "--allocators", "x=", "--list"], 2),
    (["bench", "--allocators", "glibc=/lib/libc.so.6", "--list"], 2),
    (["bench", "--allocators", "strata,strata", "--list"], 2),
    (["bench", "--only", "wl_nosuch", "--list"], 2),
    (["bench", "--build-dir", "{d}/nobuild", "--list"], 2),
    (["bench", "--from-results", "{d}/missing.json"], 2),
    (["bench", "--from-results", "{d}/results.json"], 2),
    (["bench", "--from-results", "{d}/server.log"], 2),
]


@pytest.mark.parametrize("argv,status", CASES, ids=[" ".join(a) or "(none)" for a, _ in CASES])
def test_wrong_input_is_one_line_and_an_exit_status(files, argv, status, capsys, monkeypatch):
    args = [a.replace("{d}", str(files)) for a in argv]
    if args[:1] == ["run"]:
        # `strata run` execs: in a child, so that a success could not replace pytest.
        r = strata(*args, cwd=files)
        code, err = r.returncode, r.stderr
    else:
        # In-process (the same main() the command runs), to keep the test quick.
        from strata_tool import cli
        monkeypatch.chdir(files)
        monkeypatch.delenv("STRATA_LIB", raising=False)
        code = cli.main(args)
        err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert code == status, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("strata"), lines[0]


def test_closed_stdout_ends_quietly(files):
    """`strata stats diff A B | head` when head has gone: no BrokenPipeError."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        r = strata("stats", "diff", files / "good.prom", files / "good.prom", stdout=wr)
    finally:
        os.close(wr)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    assert r.stderr == ""
    assert r.returncode == 141


def test_json_views(files):
    r = strata("stats", "show", "--json", files / "good.prom")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"]["allocated"] == 1000
    r = strata("stats", "diff", "--json", files / "good.prom", files / "good.prom")
    assert json.loads(r.stdout)["rows"]["active"]["change"] == 0


def _walk(parser, path=()):
    import argparse
    yield path, parser
    for act in parser._actions:
        if isinstance(act, argparse._SubParsersAction):
            for name, sp in act.choices.items():
                yield from _walk(sp, path + (name,))


def test_every_subcommand_and_option_has_help():
    sys.path.insert(0, str(TOOLS))
    from strata_tool import cli
    missing = []
    for path, p in _walk(cli.build_parser()):
        if path and not p.description:
            missing.append(" ".join(path) + ": no description")
        for act in p._actions:
            if act.help is None and act.dest != "help":
                missing.append(f"{' '.join(path) or 'strata'} {'/'.join(act.option_strings) or act.dest}")
    assert not missing, missing


def test_budget_help_matches_the_code():
    sys.path.insert(0, str(TOOLS))
    from strata_tool import bench
    r = strata("bench", "--help")
    text = " ".join(r.stdout.split())
    assert f"default: {bench.DEFAULT_BUDGET['default']:.0f} in the default mode" in text, text

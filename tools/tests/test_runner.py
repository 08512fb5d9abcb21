"""The measured-process runner on real processes: exit status, death by signal,
timeout, peak RSS (and that GNU time removes the harness's own RSS from it), and
LD_PRELOAD reaching the program."""

import os
import sys

import pytest

from strata_tool import runner

ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


@pytest.fixture(params=["gnu-time", "wait4"])
def mode(request, monkeypatch):
    if request.param == "gnu-time":
        if runner.gnu_time() is None:
            pytest.skip("GNU time not installed (apt-get install time)")
    else:
        monkeypatch.setattr(runner, "gnu_time", lambda: None)
    return request.param


def test_exit_status_is_recorded(mode):
    r = runner.run_measured(["sh", "-c", "echo out; echo err >&2; exit 3"], ENV, 10)
    assert r.maxrss_source == mode
    assert r.returncode == 3 and r.signal is None and not r.ok
    assert r.failure() == "exit status 3"
    assert r.stdout == "out\n" and r.stderr.endswith("err\n")


def test_death_by_signal_is_recorded(mode):
    r = runner.run_measured(["sh", "-c", "kill -SEGV $$"], ENV, 10)
    assert r.signal == 11 and r.returncode is None
    assert r.failure() == "killed by SIGSEGV"


def test_timeout_kills_the_process_group(mode):
    r = runner.run_measured(["sh", "-c", "sleep 30 & sleep 30"], ENV, 0.5, grace=0.5)
    assert r.timed_out and not r.ok
    assert r.wall_s < 5
    assert r.failure().startswith("timeout after")


def test_peak_rss_and_cpu_are_measured(mode):
    code = "b = bytearray(96 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
    r = runner.run_measured([sys.executable, "-c", code], ENV, 30)
    assert r.ok, r.stderr
    assert 96 * 1024 <= r.maxrss_kb < 96 * 1024 + 64 * 1024
    assert r.user_s + r.sys_s > 0 and r.wall_s > 0


def test_gnu_time_removes_the_harness_rss_floor():
    if runner.gnu_time() is None:
        pytest.skip("GNU time not installed")
    ballast = bytearray(64 << 20)          # make this process's RSS large for sure
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    r = runner.run_measured(["/bin/true"], ENV, 10)
    assert r.ok and r.maxrss_source == "gnu-time"
    assert r.maxrss_kb < 16 * 1024, r.maxrss_kb   # not the ~80 MB of this process


def test_preload_reaches_the_program_only(mode):
    r = runner.run_measured(["sh", "-c", 'echo "[$LD_PRELOAD]"'], ENV, 10,
                            preload="/nonexistent/libx.so")
    assert r.ok
    assert r.stdout.strip() == "[/nonexistent/libx.so]"

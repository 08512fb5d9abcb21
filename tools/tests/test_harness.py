"""End-to-end tests of `strata bench`.

test_fake_build_* run the whole harness on a throw-away build tree whose workloads are
small Python scripts and whose libstrata.so is a copy of jemalloc: one workload crashes
and one hangs under "strata", which must be recorded and reported without stopping the
comparison. test_real_build_tiny runs the real workloads and libstrata.so of --build-dir
(skipped until they are built), with Redis when it is installed.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from strata_tool import allocators, plots, redis_bench

TOOLS = Path(__file__).resolve().parents[1]
JEMALLOC = allocators.libdir() / "libjemalloc.so.2"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_bench(*args, timeout=280, pythonpath=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, pythonpath), str(TOOLS)]))
    env.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-m", "strata_tool", "bench", *args],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(TOOLS))


FAKE_WORKLOAD = textwrap.dedent('''\
    #!{python}
    import json, os, signal, sys, time
    name = os.path.basename(sys.argv[0])
    preset = sys.argv[sys.argv.index("--preset") + 1]
    under_strata = "libstrata" in os.environ.get("LD_PRELOAD", "")
    if under_strata and name == "wl_frag":
        os.kill(os.getpid(), signal.SIGSEGV)
    if under_strata and name == "wl_server":
        time.sleep(60)
    t0 = time.perf_counter()
    blocks = [bytearray(256) for _ in range(20000)]
    del blocks
    secs = time.perf_counter() - t0
    print("progress on stderr", file=sys.stderr)
    res = {{"workload": name[3:], "preset": preset, "threads": 1, "ops": 20000,
           "seconds": secs, "ops_per_sec": 20000 / secs, "peak_rss_kb": 1,
           "final_rss_kb": 1, "latency_ns": {{"p50": 50, "p99": 900, "p999": 2000,
           "max": 9000}}, "rss_series": [[0.0, 1000], [0.1, 2000], [0.2, 1500]]}}
    print("RESULT " + json.dumps(res))
''')


@pytest.fixture(scope="module")
def fake_build(tmp_path_factory):
    if not JEMALLOC.exists():
        pytest.skip("libjemalloc2 not installed (scripts/install-deps.sh)")
    b = tmp_path_factory.mktemp("fakebuild")
    (b / "bench").mkdir()
    shutil.copy(JEMALLOC, b / "libstrata.so")
    for name in ("wl_churn", "wl_server", "wl_frag"):
        p = b / "bench" / name
        p.write_text(FAKE_WORKLOAD.format(python=sys.executable))
        p.chmod(0o755)
    return b


def test_fake_build_records_failures_and_keeps_going(fake_build, tmp_path):
    out = tmp_path / "out"
    r = run_bench("--tiny", "--allocators", "glibc,strata", "--only",
                  "wl_churn,wl_server,wl_frag", "--build-dir", str(fake_build),
                  "--out", str(out), "--timeout", "5")
    assert r.returncode == 1, r.stderr        # 1: report written, some runs failed
    assert "[workload 1/3] wl_churn" in r.stderr and "round 1/1" in r.stderr
    assert "left" in r.stderr
    res = json.loads((out / "results.json").read_text())
    runs = {(x["workload"], x["allocator"]): x for x in res["runs"]}
    assert len(res["runs"]) == 6 and len(runs) == 6
    for wl in ("wl_churn", "wl_server", "wl_frag"):
        g = runs[(wl, "glibc")]
        assert g["status"] == "ok", g
        assert g["verified_allocator"] == "glibc"
        assert g["result"]["ops"] == 20000 and g["maxrss_kb"] > 1000
    assert runs[("wl_churn", "strata")]["status"] == "ok"
    assert runs[("wl_churn", "strata")]["verified_allocator"] == "strata"
    crash = runs[("wl_frag", "strata")]
    assert crash["status"] == "crashed" and crash["signal"] == 11
    assert crash["reason"] == "killed by SIGSEGV" and crash["result"] is None
    hang = runs[("wl_server", "strata")]
    assert hang["status"] == "timeout" and 4.5 < hang["wall_s"] < 15
    # The summary counts only what strata completed: wl_churn.
    g = res["summary"]["geomean"]["strata"]
    assert g["time_workloads"] == 1 and g["failed_runs"] == 2
    report = (out / "report.md").read_text()
    assert "wl_frag / strata / round 1**: crashed - killed by SIGSEGV" in report
    assert "wl_server / strata / round 1**: timeout" in report
    assert "strata failed 2 run(s)" in report
    assert "## Where strata stands" in report


def test_fake_build_full_schema(fake_build, tmp_path):
    out = tmp_path / "out"
    r = run_bench("--tiny", "--rounds", "2", "--allocators", "glibc,jemalloc,strata",
                  "--only", "churn", "--build-dir", str(fake_build), "--out", str(out))
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["schema"] == "strata-bench/1"
    for key in ("date", "command_line", "config", "machine", "allocators", "runs",
                "aggregate", "summary", "verification", "env", "repo"):
        assert key in res, key
    assert res["command_line"][:2] == ["strata", "bench"]
    m = res["machine"]
    assert m["cores_online"] >= 1 and m["memory_kb"] > 0 and m["kernel"] and m["os"]
    assert m["cpu_model"]
    assert res["allocators"]["jemalloc"]["version"]          # dpkg-query answered
    assert res["allocators"]["strata"]["lib"].endswith("libstrata.so")
    # Interleaved rounds: A B C, A B C.
    order = [(x["round"], x["allocator"]) for x in res["runs"]]
    assert order == [(1, "glibc"), (1, "jemalloc"), (1, "strata"),
                     (2, "glibc"), (2, "jemalloc"), (2, "strata")]
    cell = res["aggregate"]["wl_churn"]["strata"]
    assert cell["n_ok"] == 2 and cell["time_s"]["n"] == 2
    assert cell["latency_ns"]["p99"] == 900
    assert res["summary"]["time"]["wl_churn"]["glibc"]["vs_baseline"] == 1.0
    out_lines = r.stdout.splitlines()
    assert out_lines[0].startswith("allocator") and "time ×glibc" in out_lines[0]
    assert any(ln.startswith("report: ") for ln in out_lines)


def test_report_without_matplotlib(fake_build, tmp_path):
    blocker = tmp_path / "nompl" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked by the test')\n")
    out = tmp_path / "out"
    r = run_bench("--tiny", "--allocators", "glibc,strata", "--only", "wl_churn",
                  "--build-dir", str(fake_build), "--out", str(out),
                  pythonpath=[blocker.parent])
    assert r.returncode == 0, r.stderr
    assert "matplotlib is not installed" in r.stderr
    assert "pip install matplotlib" in (out / "report.md").read_text()
    assert not list(out.glob("*.png"))


def test_allocator_mismatch_is_flagged(tmp_path):
    """A libstrata.so that exports no malloc (as a STRATA_OVERRIDE=OFF build) must not
    pass for strata: the loader's bindings say glibc, and the report says so."""
    nomalloc = allocators.libdir() / "libz.so.1"
    if not nomalloc.exists():
        pytest.skip("no libz.so.1 to stand in for a prefixed build")
    b = tmp_path / "build"
    (b / "bench").mkdir(parents=True)
    shutil.copy(nomalloc, b / "libstrata.so")
    wl = b / "bench" / "wl_churn"
    wl.write_text(FAKE_WORKLOAD.format(python=sys.executable))
    wl.chmod(0o755)
    out = tmp_path / "out"
    r = run_bench("--tiny", "--allocators", "glibc,strata", "--only", "wl_churn",
                  "--build-dir", str(b), "--out", str(out), "--no-plots")
    assert r.returncode == 1
    assert "!!! ALLOCATOR MISMATCH: wl_churn under strata" in r.stderr
    res = json.loads((out / "results.json").read_text())
    v = res["verification"]["wl_churn"]
    assert v["glibc"]["ok"] and v["glibc"]["verified_allocator"] == "glibc"
    assert not v["strata"]["ok"] and v["strata"]["verified_allocator"] == "glibc"
    run = [x for x in res["runs"] if x["allocator"] == "strata"][0]
    assert run["verified_allocator"] == "glibc"
    report = (out / "report.md").read_text()
    assert "ALLOCATOR MISMATCH" in report and "strata ⚠ UNVERIFIED" in report
    assert "Warning: on wl_churn the runs labelled strata were not served" in report


def test_cli_rejects_unknown_names_and_lists(fake_build):
    r = run_bench("--only", "wl_nope", "--build-dir", str(fake_build))
    assert r.returncode == 2 and "unknown workload" in r.stderr
    r = run_bench("--allocators", "glibc,hoard", "--build-dir", str(fake_build))
    assert r.returncode == 2 and "unknown allocator" in r.stderr
    r = run_bench("--list", "--build-dir", str(fake_build))
    assert r.returncode == 0 and "wl_churn" in r.stdout and "redis" in r.stdout


def test_missing_allocators_are_skipped_with_a_hint(tmp_path, monkeypatch):
    monkeypatch.setattr(allocators, "libdir", lambda: tmp_path / "nolib")
    found = {a.name: a for a in allocators.discover(tmp_path / "nobuild")}
    assert found["glibc"].available
    for peer in ("jemalloc", "tcmalloc", "mimalloc"):
        assert not found[peer].available
        assert "run scripts/install-deps.sh" in found[peer].skip_reason
    assert not found["strata"].available and "build it" in found["strata"].skip_reason


def _has_real_build(build_dir: Path) -> bool:
    return (build_dir / "libstrata.so").exists() and (build_dir / "bench" / "wl_churn").exists()


REAL_WORKLOADS = ("wl_churn", "wl_prodcons", "wl_frag", "wl_memreturn")


def test_real_build_tiny(build_dir, tmp_path):
    if not _has_real_build(build_dir):
        pytest.skip(f"no libstrata.so and bench/wl_churn in {build_dir}")
    wls = [w for w in REAL_WORKLOADS if (build_dir / "bench" / w).exists()]
    with_redis = redis_bench.tools() is not None
    only = ",".join(wls + (["redis"] if with_redis else []))
    out = tmp_path / "out"
    r = run_bench("--tiny", "--out", str(out), "--allocators", "glibc,strata",
                  "--only", only, "--build-dir", str(build_dir))
    assert r.returncode in (0, 1), r.stderr
    res = json.loads((out / "results.json").read_text())
    expect = {(w, a) for w in wls + (["redis"] if with_redis else [])
              for a in ("glibc", "strata")}
    got = {(x["workload"], x["allocator"]) for x in res["runs"]}
    assert got == expect and len(res["runs"]) == len(expect)
    for x in res["runs"]:
        assert x["status"] in ("ok", "failed", "crashed", "timeout", "invalid", "error")
        if x["status"] != "ok":
            assert x["reason"]
            continue
        assert x["verified_allocator"] == x["allocator"], x.get("verification")
        res_ = x["result"]
        assert res_["ops"] > 0 and res_["seconds"] > 0
        assert x["wall_s"] >= res_["seconds"] * 0.5
        assert 0 < x["maxrss_kb"] < 16 * 1024 * 1024
        if x["workload"] != "redis":
            assert res_["ops_per_sec"] == pytest.approx(res_["ops"] / res_["seconds"],
                                                        rel=0.05)
    glibc_ok = [x for x in res["runs"] if x["allocator"] == "glibc"]
    assert all(x["status"] == "ok" for x in glibc_ok), [x["reason"] for x in glibc_ok]
    if with_redis:
        red = [x for x in res["runs"] if x["workload"] == "redis" and x["status"] == "ok"]
        for x in red:
            mem = x["result"]["memory"]
            assert mem["after_load"]["used_memory"] > 0
            assert mem["vmrss_after_flush_kb"] > 0
            assert x["result"]["verification"]["ok"], x["result"]["verification"]
            assert set(x["result"]["tests"]) == {"d16", "d1024"}
    report = (out / "report.md").read_text()
    assert "## Summary" in report and "## Where strata stands" in report
    for w in wls:
        assert f"### {w}" in report
    if plots.available():
        for png in ("time_ratio.png", "rss_ratio.png"):
            assert (out / png).read_bytes()[:8] == PNG_MAGIC
            assert f"]({png})" in report
        if "wl_frag" in wls:
            assert (out / "rss_wl_frag.png").read_bytes()[:8] == PNG_MAGIC
    else:
        assert "matplotlib is not installed" in report

"""strata serve's parts that need no running process: two processes' stats files merge
into one exposition (each family once, both processes' series, counters and units as
OpenMetrics writes them), the MALLOC_CONF reading, and its argument errors (a message,
exit 2, no traceback)."""
import subprocess
import sys

from strata_tool import serve

A = """# TYPE strata_allocated_bytes gauge
# HELP strata_allocated_bytes bytes allocated by the application
strata_allocated_bytes{pid="11",program="api"} 100
# TYPE strata_arena_dirty_purged_bytes_total counter
# HELP strata_arena_dirty_purged_bytes_total bytes purged from dirty extents
strata_arena_dirty_purged_bytes_total{pid="11",program="api"} 4096
"""
B = A.replace('pid="11",program="api"', 'pid="12",program="db"').replace(" 100\n", " 200\n")


class FakeProc(serve.Proc):
    def __init__(self, pid, program, path):
        self.pid, self.program, self.conf, self.error = pid, program, {"stats_file": str(path)}, None


def test_two_files_merge_into_one_exposition(tmp_path):
    (tmp_path / "a.prom").write_text(A)
    (tmp_path / "b.prom").write_text(B)
    procs = [FakeProc(11, "api", tmp_path / "a.prom"), FakeProc(12, "db", tmp_path / "b.prom"),
             FakeProc(13, "gone", tmp_path / "missing.prom")]
    om = serve.merge_metrics(procs, om=True)
    assert om.count("# TYPE strata_allocated_bytes gauge") == 1
    assert "# UNIT strata_allocated_bytes bytes" in om
    assert "# TYPE strata_arena_dirty_purged_bytes counter" in om
    assert 'strata_allocated_bytes{pid="11",program="api"} 100' in om
    assert 'strata_allocated_bytes{pid="12",program="db"} 200' in om
    assert 'strata_serve_process_up{pid="13",program="gone"} 0' in om
    assert om.endswith("# EOF\n")
    try:
        from prometheus_client.openmetrics import parser
    except ImportError:
        return
    fams = {f.name: f for f in parser.text_string_to_metric_families(om)}
    assert len(fams["strata_allocated_bytes"].samples) == 2
    text = serve.merge_metrics(procs, om=False)
    assert "# TYPE strata_arena_dirty_purged_bytes_total counter" in text and "# EOF" not in text


def test_conf_sources_and_signal_names():
    conf = {}
    serve.parse_conf("prof:true,prof_signal:USR2", conf)
    serve.parse_conf("prof_format:both", conf)
    p = FakeProc(1, "x", "/nonexistent")
    p.conf = conf
    assert p.prof_signal() == 12 and p.profile_problem() is None
    p.conf = {"prof": "true", "prof_signal": "SIGUSR1"}
    assert "prof_format" in p.profile_problem()


def test_bad_arguments_are_reported():
    r = subprocess.run([sys.executable, "-m", "strata_tool", "serve", "--listen", "nowhere"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "HOST:PORT" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "strata_tool", "trace"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "-p PID" in r.stderr and "Traceback" not in r.stderr

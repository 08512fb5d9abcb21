"""strata run / strata stats: option plumbing, parsing of strata's two outputs, and an
end-to-end run that makes strata write its stats file."""

import json
import shutil
import subprocess
import sys
import time

import pytest

from strata_tool import launch, statsview

PROM = """# TYPE strata_allocated_bytes gauge
strata_allocated_bytes 1000
strata_active_bytes 1500
strata_resident_bytes 3000
strata_arena_pdirty_bytes{arena="0"} 4096
strata_arena_pdirty_bytes{arena="1"} 4096
# EOF
"""


def test_parse_prom_sums_labelled_series(tmp_path):
    f = tmp_path / "a.prom"
    f.write_text(PROM)
    s = statsview.summarize(f)
    assert s["allocated"] == 1000 and s["dirty"] == 8192
    assert s["active/allocated"] == pytest.approx(1.5)
    assert s["resident/allocated"] == pytest.approx(3.0)


def test_summarize_reads_jemallocs_json_tree(tmp_path):
    doc = {"jemalloc": {"arenas": {"page": 4096},
                        "stats": {"allocated": 100, "active": 200, "resident": 400, "mapped": 500,
                                  "retained": 0, "metadata": 50},
                        "stats.arenas": {"merged": {"pdirty": 2, "tcache_bytes": 10, "dirty_purged": 1}}}}
    f = tmp_path / "a.json"
    f.write_text(json.dumps(doc))
    s = statsview.summarize(f)
    assert s["dirty"] == 8192 and s["purged"] == 4096 and s["active/allocated"] == 2.0


def test_build_env_appends_options_and_preload():
    env = launch.build_env("/x/libstrata.so", "narenas:2", "/tmp/s-%p.prom",
                           base={"LD_PRELOAD": "/other.so", "STRATA_CONF": "tcache:false"})
    assert env["LD_PRELOAD"] == "/x/libstrata.so /other.so"
    assert env["STRATA_CONF"] == "tcache:false,narenas:2,stats_file:/tmp/s-%p.prom"
    assert launch.validate_conf("narenas") is not None
    assert launch.validate_conf("narenas:2,tcache:false") is None


def test_strata_run_writes_the_stats_file(build_dir, tmp_path):
    lib = build_dir / "libstrata.so"
    if not lib.exists():
        pytest.skip(f"no {lib}")
    out = tmp_path / "s-%p.prom"
    # The file lives as long as the process: read it while the program runs; a normal
    # exit removes it.
    p = subprocess.Popen([sys.executable, "-m", "strata_tool", "run", "--lib", str(lib), "--stats-file", str(out),
                          "--conf", "stats_interval_ms:50", "--", sys.executable, "-c",
                          "import time; x = [bytearray(1000) for _ in range(1000)]; time.sleep(1.5)"],
                         stderr=subprocess.PIPE, text=True)
    files = []
    deadline = time.time() + 30
    while time.time() < deadline and p.poll() is None:
        files = list(tmp_path.glob("s-*.prom"))
        if files and statsview.summarize(files[0]).get("allocated", 0) > 1e6:
            break
        time.sleep(0.05)
    assert len(files) == 1, files
    assert statsview.summarize(files[0])["allocated"] > 1e6
    shutil.copy(files[0], tmp_path / "copy.prom")
    assert p.wait(timeout=60) == 0, p.stderr.read()
    assert not list(tmp_path.glob("s-*.prom"))  # removed at exit
    files = [tmp_path / "copy.prom"]
    r = subprocess.run([sys.executable, "-m", "strata_tool", "stats", "show", str(files[0])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "allocated" in r.stdout

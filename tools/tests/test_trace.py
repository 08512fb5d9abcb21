"""strata trace's parts that need no uprobes: the bpftrace program compiles (bpftrace
--emit-elf, where bpftrace is installed) and bpftrace's printed maps become the table of
stacks with their outstanding bytes (strata's own frames left out)."""
import shutil
import subprocess
import time

import pytest

from strata_tool import trace

MAPS = """Attaching 3 probes...
@alloc_count[
    7f00000012a0 prof_after+200 (/usr/lib/libstrata.so.0)
    55550000113a site_alpha+26 (/t/prof_sites)
    55550000120a main+90 (/t/prof_sites)
]: 251
@alloc_bytes[
    7f00000012a0 prof_after+200 (/usr/lib/libstrata.so.0)
    55550000113a site_alpha+26 (/t/prof_sites)
    55550000120a main+90 (/t/prof_sites)
]: 16777216
@alloc_bytes[
    7f00000012a0 prof_after+200 (/usr/lib/libstrata.so.0)
    55550000116a site_beta+26 (/t/prof_sites)
    55550000120f main+95 (/t/prof_sites)
]: 8388608
@freed_bytes[
    7f00000012a0 prof_after+200 (/usr/lib/libstrata.so.0)
    55550000116a site_beta+26 (/t/prof_sites)
    55550000120f main+95 (/t/prof_sites)
]: 4194304
@alloc_total: 25165824
@freed_total: 4194304
"""


def test_maps_become_stacks_with_outstanding_bytes(capsys):
    rows = trace.report(trace.parse_maps(MAPS), 10)
    out = capsys.readouterr().out
    assert [r["outstanding_bytes"] for r in rows] == [16777216, 4194304]
    assert rows[0]["samples"] == 251
    assert "outstanding (sampled, weighted): 20.0 MiB in 2 stacks" in out
    assert "site_alpha <- main" in out and "prof_after" not in out


def test_bpftrace_program_compiles(build_dir, tmp_path):
    bt = shutil.which("bpftrace")
    if not bt:
        pytest.skip("bpftrace not installed")
    lib = build_dir / "libstrata.so"
    r = subprocess.run(["readelf", "-n", str(lib)], capture_output=True, text=True)
    if "otel_memory" not in r.stdout:
        pytest.skip(f"{lib} missing or built without USDT probes")
    src = tmp_path / "t.bt"
    src.write_text(trace.script(str(lib), 5))
    r = subprocess.run([bt, "--emit-elf", str(tmp_path / "t.o"), str(src)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and (tmp_path / "t.o").exists(), r.stderr


def test_stop_asks_again_when_the_first_sigint_goes_unanswered():
    # A stand-in for bpftrace still attaching its probes: the first SIGINT only prints.
    proc = subprocess.Popen(["sh", "-c", 'trap "trap - INT; echo first" INT; while :; do sleep 0.1; done'],
                            stdout=subprocess.PIPE)
    time.sleep(0.3)  # the trap is set
    proc.send_signal(trace.signal.SIGINT)
    rest = trace.stop(proc)
    assert rest is not None and b"first" in rest
    assert proc.returncode is not None

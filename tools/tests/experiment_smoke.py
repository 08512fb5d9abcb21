"""ctest driver: one experiment of `strata bench` at the tiny preset under glibc and
strata (`experiment_smoke.py NAME BUILD_DIR`). Exits 77 (ctest's SKIP_RETURN_CODE) with a
message when the program the experiment needs is missing; fails when a run fails or its
headline figures are absent from results.json and report.md."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS))

from strata_tool import experiments  # noqa: E402
from strata_tool.workloads import BY_NAME  # noqa: E402

# Figures each experiment's RESULT must carry (dotted paths), for strata and glibc.
NEEDED = {
    "redis_mixed": ["by_clients.16.p999_ms", "by_clients.256.rps", "by_clients.64.p50_ms"],
    "redis_frag": ["stages.loaded.vmrss_kb", "stages.deleted_half.used_memory",
                   "stages.purged.rss_per_used"],
    "nginx": ["cases.static.rps", "cases.gzip.latency_ns.p99", "memory.rss_kb"],
    "jvm": ["peak_rss_kb", "final_rss_kb", "arena_heaps"],
    "wl_drift": ["heap_per_live", "frag_mean_2nd_half"],
}
SECTION_TEXT = {"redis_mixed": "**256 clients**", "redis_frag": "after MEMORY PURGE",
                "nginx": "workers' RSS", "jvm": "64 MiB arena heaps",
                "wl_drift": "heap RSS / live at the end"}


def main() -> int:
    name, build = sys.argv[1], Path(sys.argv[2])
    w = BY_NAME[name]
    if w.kind in experiments.RUNNERS:
        why = experiments.unavailable(w.kind)
    else:
        why = None if w.binary(build).is_file() else f"{w.binary(build)} not built"
    if why:
        print(f"SKIP {name}: {why}")
        return 77
    with tempfile.TemporaryDirectory(prefix=f"strata-exp-{name}-") as td:
        r = subprocess.run([sys.executable, "-m", "strata_tool", "bench", "--tiny",
                            "--only", name, "--allocators", "glibc,strata",
                            "--build-dir", str(build), "--out", td],
                           cwd=TOOLS, capture_output=True, text=True, timeout=280)
        print(r.stderr[-3000:])
        if r.returncode != 0:
            print(f"FAIL: strata bench exited {r.returncode}")
            return 1
        res = json.loads((Path(td) / "results.json").read_text())
        for a in ("glibc", "strata"):
            runs = [x for x in res["runs"] if x["workload"] == name and x["allocator"] == a]
            if not runs or runs[0]["status"] != "ok":
                print(f"FAIL: {name} under {a}: {runs[0]['reason'] if runs else 'no run'}")
                return 1
            if runs[0].get("verified_allocator") != a:
                print(f"FAIL: {name} under {a} was served by {runs[0].get('verified_allocator')}")
                return 1
            for path in NEEDED[name]:
                if experiments._dig(runs[0]["result"], path) is None:
                    print(f"FAIL: {name} under {a}: no {path} in its result")
                    return 1
        report = (Path(td) / "report.md").read_text()
        if SECTION_TEXT[name] not in report:
            print(f"FAIL: report.md lacks the {name} section ({SECTION_TEXT[name]!r})")
            return 1
    print(f"OK {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

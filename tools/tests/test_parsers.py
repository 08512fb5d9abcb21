"""Parsers of what the harness reads from other programs: the workloads' RESULT line,
redis-benchmark's CSV, INFO output and the dynamic loader's binding lines."""

from strata_tool import allocators, redis_bench, runner


def test_parse_result_takes_last_result_line():
    out = "noise\nRESULT {\"ops\": 1}\nRESULT {\"workload\": \"churn\", \"preset\": \"tiny\", " \
          "\"threads\": 2, \"ops\": 10, \"seconds\": 0.5, \"ops_per_sec\": 20, " \
          "\"peak_rss_kb\": 1, \"final_rss_kb\": 1}\n"
    pr = runner.parse_result(out)
    assert pr.error is None and pr.warnings == []
    assert pr.data["ops"] == 10 and pr.data["threads"] == 2


def test_parse_result_errors_and_warnings():
    assert runner.parse_result("hello\n").error.startswith("no `RESULT")
    assert "not JSON" in runner.parse_result("RESULT {oops}\n").error
    pr = runner.parse_result('RESULT {"ops": 5, "seconds": 1}\n')
    assert pr.error is None and "lacks" in pr.warnings[0] and "peak_rss_kb" in pr.warnings[0]
    assert runner.parse_result('RESULT {"ops": 5}\n').error is not None
    assert runner.parse_result('RESULT {"ops": 5, "seconds": -1}\n').error is not None
    pr = runner.parse_result('RESULT {"ops": 5, "seconds": 1}\ntrailing\n')
    assert any("not the last" in w for w in pr.warnings)


def test_parse_benchmark_csv_redis7_and_old_format():
    text = ('"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",'
            '"p95_latency_ms","p99_latency_ms","max_latency_ms"\n'
            '"SET","787401.56","0.886","0.120","0.839","1.599","2.039","2.463"\n'
            '"LPOP","1492537.25","0.471","0.176","0.463","0.615","0.687","0.863"\n')
    p = redis_bench.parse_benchmark_csv(text)
    assert set(p) == {"SET", "LPOP"}
    assert p["SET"]["rps"] == 787401.56 and p["SET"]["p99_ms"] == 2.039
    assert p["LPOP"]["max_ms"] == 0.863
    assert redis_bench.parse_benchmark_csv('"GET","1234.5"\n') == {"GET": {"rps": 1234.5}}


def test_parse_info():
    info = redis_bench.parse_info("# Memory\r\nused_memory:74682304\r\n"
                                  "mem_fragmentation_ratio:1.44\r\n"
                                  "mem_allocator:jemalloc-5.3.0\r\n")
    assert info == {"used_memory": 74682304, "mem_fragmentation_ratio": 1.44,
                    "mem_allocator": "jemalloc-5.3.0"}


def test_identify_library_paths():
    assert allocators.identify("/lib/x86_64-linux-gnu/libc.so.6") == "glibc"
    assert allocators.identify("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2") == "jemalloc"
    assert allocators.identify("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4") == "tcmalloc"
    assert allocators.identify("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2") == "mimalloc"
    assert allocators.identify("/work/build/libstrata.so") == "strata"
    assert allocators.identify("/usr/lib/libfoo.so") == "other:libfoo.so"
    assert allocators.identify(None) == "unknown"

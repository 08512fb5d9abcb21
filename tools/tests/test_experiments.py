"""Unit tests of the experiments' harness code: redis-benchmark's latency
distribution and its merge, wrk's output, glibc arena heaps in /proc/PID/maps, the
sweep's option checks, the loopback guard and the server lifecycle (killed on failure),
and the report tables built from synthetic results."""

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from strata_tool import exp_jvm, exp_nginx, exp_redis, experiments, servers, sweep

BENCH_OUT = """====== SET ======
  1000 requests completed in 0.02 seconds
Latency by percentile distribution:
0.000% <= 0.039 milliseconds (cumulative count 1)
50.000% <= 0.191 milliseconds (cumulative count 500)
99.000% <= 0.415 milliseconds (cumulative count 990)
99.900% <= 0.791 milliseconds (cumulative count 999)
100.000% <= 1.655 milliseconds (cumulative count 1000)

Cumulative distribution of latencies:
97.420% <= 0.303 milliseconds (cumulative count 974)
Summary:
  throughput summary: 53191.49 requests per second
"""


def test_parse_benchmark_text_points_requests_and_rate():
    d = exp_redis.parse_benchmark_text(BENCH_OUT.replace("\n", "\r\n"))
    assert d["requests"] == 1000 and d["seconds"] == 0.02 and d["rps"] == 53191.49
    assert d["points"][0] == [0.039, 1] and d["points"][-1] == [1.655, 1000]
    assert [0.303, 974] in d["points"]
    assert exp_redis.parse_benchmark_text("garbage")["points"] == []


def test_merged_percentile_of_two_distributions():
    fast = {"requests": 100, "points": [[0.1, 50], [0.2, 99], [0.3, 100]]}
    slow = {"requests": 100, "points": [[1.0, 50], [2.0, 99], [5.0, 100]]}
    assert exp_redis.merged_percentile([fast], 0.5) == 0.1
    assert exp_redis.merged_percentile([fast], 0.99) == 0.2
    # Merged: half the requests are at 1 ms or more; the median is the fast tail's end.
    assert exp_redis.merged_percentile([fast, slow], 0.5) == 0.3
    assert exp_redis.merged_percentile([fast, slow], 0.75) == 1.0
    assert exp_redis.merged_percentile([fast, slow], 0.999) == 5.0
    assert exp_redis.merged_percentile([fast, slow], 1.0) == 5.0
    assert exp_redis.merged_percentile([], 0.5) is None


def test_set_and_del_commands_are_valid_resp():
    cmds = exp_redis.set_commands([7], b"x%y")
    assert cmds == [exp_redis.resp("SET", exp_redis.key(7), b"x%y")]
    assert exp_redis.del_commands([3]) == [exp_redis.resp("DEL", "key:000000000003")]


WRK_OUT = """Running 1s test @ http://127.0.0.1:8080/static.bin
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.32ms    1.90ms  14.27ms   89.06%
    Req/Sec    31.81k     3.09k   36.53k    70.00%
  Latency Distribution
     50%  744.00us
     75%    1.84ms
     90%    2.79ms
     99%   10.51ms
  63566 requests in 1.00s, 1.01GB read
  Non-2xx or 3xx responses: 3
Requests/sec:  63278.40
Transfer/sec:      1.00GB
"""


def test_parse_wrk():
    w = exp_nginx.parse_wrk(WRK_OUT)
    assert w["rps"] == 63278.40 and w["requests"] == 63566 and w["seconds"] == 1.0
    lat = w["latency_ns"]
    assert lat["p50"] == pytest.approx(744e3) and lat["p99"] == pytest.approx(10.51e6)
    assert lat["p90"] == pytest.approx(2.79e6) and lat["max"] == pytest.approx(14.27e6)
    assert w["errors"] == 3
    assert exp_nginx.parse_wrk("nothing")["rps"] is None


def test_nginx_config_is_loopback_only():
    conf = exp_nginx.config("/tmp/x", 8080)
    assert "listen 127.0.0.1:8080;" in conf and "worker_processes 2;" in conf
    assert "gzip on;" in conf


M = 1 << 20


def _line(lo: int, hi: int, perm: str, path: str = "") -> str:
    return f"{lo:x}-{hi:x} {perm} 00000000 00:00 0 {path}".rstrip()


def test_count_arena_heaps():
    base = 0x7f0000000000            # 64 MiB-aligned
    maps = "\n".join([
        _line(0x55550000, 0x55560000, "r-xp", "/usr/bin/java"),
        _line(base, base + 2 * M, "rw-p"), _line(base + 2 * M, base + 64 * M, "---p"),
        # a second heap right after the first
        _line(base + 64 * M, base + 65 * M, "rw-p"),
        _line(base + 65 * M, base + 128 * M, "---p"),
        # a 256 MiB reservation (the Java heap's shape): not an arena heap
        _line(base + 256 * M, base + 260 * M, "rw-p"),
        _line(base + 260 * M, base + 512 * M, "---p"),
        # aligned, 64 MiB, but PROT_NONE first: not one
        _line(base + 1024 * M, base + 1088 * M, "---p"),
        # aligned and 64 MiB but file-backed
        _line(base + 2048 * M, base + 2112 * M, "rw-p", "/tmp/file"),
    ])
    assert exp_jvm.count_arena_heaps(maps) == 2
    assert exp_jvm.count_arena_heaps("") == 0


def test_sweep_spec_checks_name_values_and_units():
    assert sweep.parse_spec("narenas=1,2,8,32") == ("narenas", ["1", "2", "8", "32"])
    assert sweep.parse_spec("dirty_decay_ms=-1,0,10000")[1] == ["-1", "0", "10000"]
    assert sweep.conf_value("tcache_max", "32k") == "32768"
    assert sweep.conf_value("tcache_max", "1M") == str(1 << 20)
    for bad, words in (("narenas=0", "1 to 4095"), ("narenas=5000", "1 to 4095"),
                       ("tcache_max=16M", "up to 8M"), ("dirty_decay_ms=-2", "-1"),
                       ("narenas=", "no values"), ("narenas=1,1", "repeated"),
                       ("lg_chunk=1", "unknown option"), ("narenas", "KEY=V1")):
        with pytest.raises(ValueError, match=words):
            sweep.parse_spec(bad)


def test_sweep_aggregate():
    runs = [{"workload": "wl_server", "allocator": "strata", "value": "2", "status": "ok",
             "result": {"seconds": s}, "maxrss_kb": 1000 + s} for s in (1.0, 3.0, 2.0)]
    runs.append({"workload": "wl_server", "allocator": "strata", "value": "2",
                 "status": "failed", "result": None, "maxrss_kb": 0})
    agg = sweep.aggregate(runs)["wl_server"]["strata"]["2"]
    assert agg["time_s"]["median"] == 2.0 and agg["time_s"]["n"] == 3
    assert agg["rss_kb"]["max"] == 1003.0


def test_loopback_guard():
    assert servers.require_loopback("127.0.0.1") == "127.0.0.1"
    for host in ("0.0.0.0", "localhost", "::", "10.0.0.1"):
        with pytest.raises(ValueError, match="only 127.0.0.1"):
            servers.require_loopback(host)


def test_listening_addresses_sees_a_wildcard_socket():
    lo = socket.socket()
    lo.bind(("127.0.0.1", 0))
    lo.listen()
    wild = socket.socket()
    wild.bind(("0.0.0.0", 0))
    wild.listen()
    try:
        addrs = servers.listening_addresses([os.getpid()])
        assert "127.0.0.1" in addrs and "0.0.0.0" in addrs
    finally:
        lo.close()
        wild.close()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_server_is_killed_when_the_block_fails(tmp_path: Path):
    srv = servers.Server(["sh", "-c", "sleep 60 & sleep 60; wait"], dict(os.environ),
                         str(tmp_path / "log"))
    with pytest.raises(RuntimeError):
        with srv:
            pid = srv.pid
            time.sleep(0.2)
            kids = servers.children(pid)
            assert kids
            raise RuntimeError("benchmark failed")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (_gone(pid) and all(_gone(k) for k in kids)):
        time.sleep(0.05)
    assert _gone(pid) and all(_gone(k) for k in kids)
    assert srv.pid not in servers._live


def test_kill_all_backstop(tmp_path: Path):
    srv = servers.Server(["sleep", "60"], dict(os.environ), str(tmp_path / "log"))
    srv.__enter__()
    pid = srv.pid
    servers.kill_all()
    srv._thread.join(5)
    assert srv.status is not None and os.WIFSIGNALED(srv.status)
    assert os.WTERMSIG(srv.status) == signal.SIGKILL and _gone(pid)


def _synthetic_results():
    runs = []
    for a, rss, p999 in (("glibc", 200_000, 9.0), ("jemalloc", 150_000, 4.0),
                         ("strata", 140_000, 3.0)):
        for rnd, k in ((1, 1.0), (2, 1.1)):
            runs.append({"workload": "redis_frag", "allocator": a, "round": rnd,
                         "status": "ok",
                         "result": {"stages": {"loaded": {"vmrss_kb": rss * k,
                                                          "rss_per_used": rss / 1e5},
                                               "deleted_half": {"vmrss_kb": rss},
                                               "purged": {"vmrss_kb": rss}}}})
            runs.append({"workload": "redis_mixed", "allocator": a, "round": rnd,
                         "status": "ok",
                         "result": {"by_clients": {"256": {"p999_ms": p999 * k,
                                                           "rps": 1e5 / p999}}}})
    return {"config": {"allocators": ["glibc", "jemalloc", "strata"], "preset": "default"},
            "runs": runs}


def test_report_tables_show_median_spread_and_ratio():
    res = _synthetic_results()
    t = experiments.table(res, "redis_frag",
                          [("VmRSS", "stages.loaded.vmrss_kb", "MiB", True)])
    rows = {r.split("|")[1].strip(): r for r in t.splitlines()[2:]}
    assert "144 (137–150)" in rows["strata"]        # median (min–max) in MiB
    assert rows["strata"].rstrip(" |").endswith("1.00×")
    assert "1.43×" in rows["glibc"]
    kib = experiments.table(res, "redis_frag",
                            [("VmRSS", "stages.loaded.vmrss_kb", "KiB", True)])
    assert "VmRSS (KiB)" in kib and "147,000 (140,000–154,000)" in kib  # exact KiB
    s = experiments.summary(res)
    assert "Redis RSS after the small-value SETs: strata leads" in s
    assert "Redis p99.9 at 256 clients: strata leads (0.75× the best peer, jemalloc)" in s


def test_core_only_drops_experiments():
    agg = {"wl_churn": {}, "redis": {}, "redis_frag": {}, "wl_drift": {}, "wl_halffree": {}}
    assert set(experiments.core_only(agg)) == {"wl_churn", "redis", "wl_halffree"}


def test_unavailable_names_the_package(monkeypatch):
    monkeypatch.setattr(exp_nginx, "tools", lambda: None)
    monkeypatch.setattr(exp_jvm, "tools", lambda: None)
    assert "apt-get install nginx wrk" in experiments.unavailable("nginx")
    assert "openjdk" in experiments.unavailable("jvm")

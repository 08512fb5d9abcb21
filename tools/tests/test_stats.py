"""Unit tests of the pure figures behind the report: percentiles, spread, geomean,
histogram merging, latency combination, ratio tables and geomean summaries, and the
aggregation of raw runs. Expected values are worked out by hand in each test."""

import math

import pytest

from strata_tool import analyze, stats


def test_percentile_interpolates_between_ranks():
    xs = [10, 20, 30, 40]
    assert stats.percentile(xs, 0) == 10
    assert stats.percentile(xs, 100) == 40
    assert stats.percentile(xs, 50) == pytest.approx(25.0)
    # rank (4-1)*0.25 = 0.75 -> 10 + 0.75*10
    assert stats.percentile(xs, 25) == pytest.approx(17.5)
    assert stats.percentile([3, 1, 2], 50) == 2          # unsorted input
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1], 101)


def test_spread_reports_median_iqr_and_relative_halfrange():
    sp = stats.spread([1.0, 2.0, 3.0, 4.0, 10.0])
    assert sp["n"] == 5 and sp["median"] == 3.0
    assert (sp["min"], sp["max"]) == (1.0, 10.0)
    assert (sp["q1"], sp["q3"], sp["iqr"]) == (2.0, 4.0, 2.0)
    assert sp["rel_halfrange"] == pytest.approx((10 - 1) / 2 / 3)
    assert stats.spread([]) is None


def test_geomean_matches_hand_computation_and_rejects_nonpositive():
    assert stats.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert stats.geomean([0.5, 2.0, 1.0]) == pytest.approx(1.0)
    assert stats.geomean([3.0]) == pytest.approx(3.0)
    assert stats.geomean([]) is None
    with pytest.raises(ValueError):
        stats.geomean([1.0, 0.0])
    with pytest.raises(ValueError):
        stats.geomean([1.0, -2.0])


def test_merge_histograms_sums_buckets_from_lists_and_dicts():
    a = [[100, 5], [200, 3]]
    b = {200: 2, 400: 1, 100: 0}
    merged = stats.merge_histograms([a, b])
    assert merged == [[100.0, 5], [200.0, 5], [400.0, 1]]
    with pytest.raises(ValueError):
        stats.merge_histograms([[[100, -1]]])


def test_histogram_percentile_uses_nearest_rank():
    h = [[10, 50], [20, 45], [40, 4], [80, 1]]            # 100 samples
    assert stats.histogram_percentile(h, 50) == 10       # rank 50 -> first bucket
    assert stats.histogram_percentile(h, 51) == 20
    assert stats.histogram_percentile(h, 95) == 20       # rank 95
    assert stats.histogram_percentile(h, 99) == 40       # rank 99
    assert stats.histogram_percentile(h, 99.9) == 80     # rank 100
    assert stats.histogram_percentile(h, 100) == 80
    assert stats.histogram_percentile([], 50) is None


def test_merged_histogram_percentile_differs_from_median_of_percentiles():
    # Round 1 is fast, round 2 slow: the true p99 over both lies in round 2's tail,
    # which the median of per-round p99s (two values) cannot see exactly.
    r1 = {"latency_hist": [[10, 99], [1000, 1]]}
    r2 = {"latency_hist": [[10, 90], [100, 9], [1000, 1]]}
    lat = stats.combine_latency([r1, r2])
    assert lat["method"] == "histogram" and lat["samples"] == 200
    assert lat["p50"] == 10 and lat["p99"] == 100 and lat["max"] == 1000


def test_combine_latency_without_histograms_takes_median_and_max():
    rs = [{"latency_ns": {"p50": 10, "p99": 100, "p999": 300, "max": 900}},
          {"latency_ns": {"p50": 30, "p99": 300, "p999": 500, "max": 800}},
          {"latency_ns": {"p50": 20, "p99": 200, "p999": 400, "max": 5000}},
          {"ops": 1}]                                     # a round without latency
    lat = stats.combine_latency(rs)
    assert lat == {"p50": 20, "p99": 200, "p999": 400, "max": 5000,
                   "method": "median-of-rounds"}
    assert stats.combine_latency([{"ops": 1}]) is None


def test_ratio_table_against_baseline_and_best_peer():
    medians = {"w1": {"glibc": 10.0, "jemalloc": 8.0, "mimalloc": 5.0, "strata": 4.0},
               "w2": {"glibc": 10.0, "jemalloc": 20.0, "strata": 15.0},
               "w3": {"glibc": None, "jemalloc": 2.0, "strata": 1.0}}
    t = stats.ratio_table(medians, "glibc")
    assert t["w1"]["strata"]["vs_baseline"] == pytest.approx(0.4)
    assert t["w1"]["strata"]["best_peer"] == "mimalloc"
    assert t["w1"]["strata"]["vs_best_peer"] == pytest.approx(0.8)
    assert t["w1"]["mimalloc"]["vs_best_peer"] == pytest.approx(1.0)
    assert t["w1"]["jemalloc"]["vs_best_peer"] == pytest.approx(1.6)
    # strata loses on w2: the best peer is glibc, strata takes 1.5x its time
    assert t["w2"]["strata"]["best_peer"] == "glibc"
    assert t["w2"]["strata"]["vs_best_peer"] == pytest.approx(1.5)
    # no baseline value on w3: no baseline ratio, the best-peer ratio still exists
    assert t["w3"]["strata"]["vs_baseline"] is None
    assert t["w3"]["strata"]["vs_best_peer"] == pytest.approx(0.5)


def test_geomean_summary_counts_only_workloads_with_a_ratio():
    medians = {"w1": {"glibc": 10.0, "strata": 5.0},
               "w2": {"glibc": 10.0, "strata": 20.0},
               "w3": {"glibc": 10.0, "strata": None},     # strata failed w3
               "w4": {"glibc": None, "strata": 3.0}}      # glibc failed w4
    g = stats.geomean_summary(stats.ratio_table(medians, "glibc"))
    assert g["strata"]["n"] == 2
    assert g["strata"]["geomean"] == pytest.approx(math.sqrt(0.5 * 2.0))
    assert sorted(g["strata"]["workloads"]) == ["w1", "w2"]
    assert g["glibc"]["geomean"] == pytest.approx(1.0) and g["glibc"]["n"] == 3


def test_relative_geomean_is_head_to_head():
    table = stats.ratio_table({"a": {"strata": 2.0, "jemalloc": 4.0},
                               "b": {"strata": 9.0, "jemalloc": 4.0},
                               "c": {"strata": 1.0}}, "jemalloc")
    g, n = stats.relative_geomean(table, "strata", "jemalloc")
    assert n == 2 and g == pytest.approx(math.sqrt(0.5 * 2.25))


def _run(wl, alloc, rnd, seconds, rss, status="ok", **res):
    r = {"workload": wl, "allocator": alloc, "round": rnd, "status": status,
         "wall_s": seconds + 0.01, "user_s": seconds, "sys_s": 0.0, "maxrss_kb": rss,
         "result": None if status != "ok" else {"ops": 1000, "seconds": seconds, **res}}
    if status != "ok":
        r["reason"] = "killed by SIGSEGV"
    return r


def test_aggregate_and_summarize_from_raw_runs():
    runs = [_run("w1", "glibc", i, s, 1000) for i, s in enumerate([1.0, 1.2, 1.1], 1)]
    runs += [_run("w1", "strata", i, s, 500) for i, s in enumerate([0.5, 0.7, 0.6], 1)]
    runs += [_run("w2", "glibc", 1, 2.0, 4000), _run("w2", "strata", 1, 0, 0, "crashed")]
    runs += [_run("mr", "glibc", 1, 15.0, 800, rss_end_kb=700.0),
             _run("mr", "strata", 1, 15.0, 400, rss_end_kb=100.0)]
    agg = analyze.aggregate(runs)
    c = agg["w1"]["strata"]
    assert c["n_ok"] == 3 and c["time_s"]["median"] == pytest.approx(0.6)
    assert c["time_s"]["min"] == 0.5 and c["time_s"]["max"] == 0.7
    assert c["ops_per_sec"] == pytest.approx(1000 / 0.6)
    assert agg["w2"]["strata"]["n_ok"] == 0 and agg["w2"]["strata"]["time_s"] is None
    assert agg["w2"]["strata"]["failures"][0]["status"] == "crashed"
    assert agg["mr"]["strata"]["extras"]["rss_end_kb"] == 100.0
    summ = analyze.summarize(agg, ["glibc", "strata"], timed={"w1", "w2"})
    g = summ["geomean"]["strata"]
    # time: only w1 counts (strata failed w2, mr is untimed): 0.6/1.1
    assert g["time_workloads"] == 1
    assert g["time_vs_baseline"] == pytest.approx(0.6 / 1.1)
    # RSS: w1 (0.5) and mr (0.5)
    assert g["rss_workloads"] == 2 and g["rss_vs_baseline"] == pytest.approx(0.5)
    assert g["failed_runs"] == 1
    assert "mr" not in summ["time"] and "mr" in summ["rss"]
    assert summ["strata_vs"]["glibc"]["time"] == pytest.approx(0.6 / 1.1)


def test_baseline_falls_back_to_first_allocator():
    assert analyze.baseline_of(["glibc", "strata"]) == "glibc"
    assert analyze.baseline_of(["jemalloc", "strata"]) == "jemalloc"
    assert analyze.baseline_of([]) is None


def test_run_time_prefers_workload_seconds_over_wall():
    assert analyze.run_time({"wall_s": 2.0, "result": {"seconds": 1.5}}) == 1.5
    assert analyze.run_time({"wall_s": 2.0, "result": {"seconds": 0}}) == 2.0
    assert analyze.run_time({"wall_s": 2.0, "result": None}) == 2.0

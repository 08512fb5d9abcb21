"""The report's words follow its numbers: where strata loses, the paragraph says so
with the winner and the factor; the targets of DESIGN.md read "NOT met" when missed;
tables bold the best figure."""

from strata_tool import analyze, report


def _results(times: dict, rss: dict, rounds: int = 3) -> dict:
    """results dict as bench writes it, from {wl: {alloc: seconds}} and peak RSS."""
    runs = []
    for wl, per in times.items():
        for alloc, t in per.items():
            for i in range(rounds):
                jitter = 1.0 + 0.01 * (i - 1)
                runs.append({"workload": wl, "allocator": alloc, "round": i + 1,
                             "status": "ok", "wall_s": t * jitter + 0.01, "user_s": t,
                             "sys_s": 0.0, "maxrss_kb": rss[wl][alloc],
                             "result": {"ops": 1000, "seconds": t * jitter}})
    allocs = ["glibc", "jemalloc", "mimalloc", "strata"]
    agg = analyze.aggregate(runs)
    return {"config": {"allocators": allocs, "preset": "default",
                       "rounds": {w: rounds for w in times}},
            "runs": runs, "aggregate": agg,
            "summary": analyze.summarize(agg, allocs, set(times)),
            "workloads": {w: {"description": w, "series": False} for w in times}}


TIMES = {"fast": {"glibc": 4.0, "jemalloc": 2.0, "mimalloc": 1.6, "strata": 1.0},
         "slow": {"glibc": 2.0, "jemalloc": 3.0, "mimalloc": 2.5, "strata": 3.0}}
RSS = {"fast": {"glibc": 1000, "jemalloc": 900, "mimalloc": 1100, "strata": 800},
       "slow": {"glibc": 1000, "jemalloc": 1000, "mimalloc": 1000, "strata": 2000}}


def test_standing_names_losses_with_winner_and_factor():
    text = report.standing(_results(TIMES, RSS))
    assert "strata is the fastest on fast (1.60× ahead of mimalloc)" in text
    assert "It is not the fastest on slow (glibc is 1.50× faster)" in text
    assert "It has the smallest peak RSS on fast." in text
    assert "It uses more memory than the leanest peer on slow (2.00× glibc's)" in text
    # geomean vs jemalloc: sqrt(0.5 * 1.0) = 0.71 -> met; vs mimalloc sqrt(0.625*1.2)=0.87
    assert "faster than jemalloc in the geomean: met (0.71×)" in text
    assert "no slower than mimalloc: met (0.87×)" in text
    # RSS vs jemalloc: sqrt(800/900 * 2) = 1.33 -> not met
    assert "peak RSS no higher than jemalloc's: NOT met (1.33×)" in text
    assert "single round" not in text


def test_standing_flags_single_samples_and_missing_strata():
    one = _results(TIMES, RSS, rounds=1)
    assert "Every workload ran a single round here" in report.standing(one)
    one["config"]["allocators"] = ["glibc", "jemalloc"]
    assert "strata was not part of this run" in report.standing(one)


def test_workload_table_bolds_the_best_and_shows_ratios():
    res = _results(TIMES, RSS)
    table = report.workload_table("slow", res)
    rows = {ln.split("|")[1].strip(): ln for ln in table.splitlines()[2:]}
    assert "**2.00 s**" in rows["glibc"]                  # fastest on "slow"
    assert "1.50×" in rows["strata"]                      # time vs glibc and best peer
    assert "3/3" in rows["strata"]
    assert "±1.0%" in rows["strata"]                      # spread of the 3 rounds


def test_formatters():
    assert report.f_time(0.0123) == "12.3 ms" and report.f_time(2.5) == "2.50 s"
    assert report.f_kb(2048) == "2.0 MiB" and report.f_kb(None) == "–"
    assert report.f_rate(1.5e6) == "1.50 M/s" and report.f_ns(1500) == "1.5 µs"
    assert report.f_ratio(0.5) == "0.50×"

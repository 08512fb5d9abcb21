"""The report's words follow its numbers: where strata loses, the paragraph says so
with the winner and the factor; the targets of DESIGN.md read "NOT met" when missed;
tables bold the best figure."""

import pytest

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


# ---- how many runs a figure stands on ------------------------------------------------

def test_one_round_tables_say_1_run_and_show_no_spread(tmp_path):
    one = _results(TIMES, RSS, rounds=1)
    table = report.workload_table("fast", one)
    header = table.splitlines()[0]
    assert "time (1 run)" in header
    assert "median" not in header and "spread" not in header
    one.update({"date": "d", "command_line": ["strata", "bench"], "schema": "s",
                "machine": {}, "allocators": {a: {"lib": None, "available": True}
                                              for a in one["config"]["allocators"]},
                "verification": {}})
    one["config"]["rounds_planned"] = one["config"]["rounds"]
    report.write(tmp_path, one, draw=False)
    text = (tmp_path / "report.md").read_text()
    assert "median of rounds" not in text and "min–max" not in text
    assert "(one run each)" in text


def test_mixed_round_counts_are_named_per_workload():
    res = _results(TIMES, RSS, rounds=3)
    slow = [r for r in res["runs"] if r["workload"] == "slow" and r["round"] > 1]
    res["runs"] = [r for r in res["runs"] if r not in slow]
    res["aggregate"] = analyze.aggregate(res["runs"])
    assert report._runs_note(res) == "median of 3 runs: fast; 1 run: slow"
    assert "median time" in report.workload_table("fast", res).splitlines()[0]
    assert "time (1 run)" in report.workload_table("slow", res).splitlines()[0]


def test_runs_phrase_never_calls_one_run_a_median():
    from strata_tool import plots
    assert plots.runs_phrase([1, 1]) == "1 run"
    assert plots.runs_phrase([3, 3]) == "median of 3 runs"
    assert plots.runs_phrase([1, 3]) == "median of 1-3 runs"
    assert not plots.has_spread({"n": 1, "min": 1, "max": 1, "median": 1})
    assert not plots.has_spread({"n": 3, "min": 1, "max": 1, "median": 1})
    assert plots.has_spread({"n": 3, "min": 1, "max": 2, "median": 1.5})


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plotting functions make, kept open for inspection."""
    pytest.importorskip("matplotlib")
    from strata_tool import plots
    plt = plots._plt()
    figs = []

    class Keep:
        def __getattr__(self, name):
            return getattr(plt, name)

        def close(self, fig):
            figs.append(fig)

    monkeypatch.setattr(plots, "_plt", lambda: Keep())
    yield figs
    for f in figs:
        plt.close(f)


def _errorbars(ax) -> list:
    from matplotlib.container import ErrorbarContainer
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)
            or getattr(c, "errorbar", None) is not None]


def _texts(fig) -> str:
    parts = [fig._suptitle.get_text() if fig._suptitle else ""]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_ylabel(), ax.get_xlabel()]
    return " ".join(parts)


def test_one_round_plots_say_1_run_and_draw_no_error_bars(tmp_path, drawn):
    from strata_tool import experiments, plots
    one = _results(TIMES, RSS, rounds=1)
    allocs = one["config"]["allocators"]
    assert plots.ratio_bars(tmp_path / "t.png", one["summary"]["time"], allocs, "glibc",
                            "time", report.workload_runs(one))
    ax = drawn[-1].axes[0]
    assert ax.get_xscale() == "log"
    assert "1 run" in _texts(drawn[-1]) and "median" not in _texts(drawn[-1])
    for panels in (False, True):
        assert experiments._bars(tmp_path / "b.png", one, "fast",
                                 [("time (s)", "seconds")], "s", "t", panels=panels)
        fig = drawn[-1]
        assert "1 run" in _texts(fig) and "min-max" not in _texts(fig)
        for ax in fig.axes:
            assert not _errorbars(ax), "error bars on 1 run"


def test_three_round_bars_have_error_bars_and_say_so(tmp_path, drawn):
    from strata_tool import experiments
    three = _results(TIMES, RSS, rounds=3)
    assert experiments._bars(tmp_path / "b.png", three, "fast", [("time (s)", "seconds")],
                             "s", "t", panels=True)
    fig = drawn[-1]
    assert "median of 3 runs, min-max" in _texts(fig)
    assert _errorbars(fig.axes[0])


def test_rss_series_of_a_progress_workload_is_plotted_against_progress(tmp_path, drawn):
    from strata_tool import plots
    runs = [{"workload": "wl_frag", "allocator": a, "status": "ok", "wall_s": w,
             "result": {"seconds": w, "rss_series": [[w * k / 4, 1024.0 * k] for k in
                                                     range(1, 5)]}}
            for a, w in (("glibc", 2.0), ("strata", 1.0))]
    assert plots.rss_series(tmp_path / "s.png", "wl_frag", runs, ["glibc", "strata"],
                            "progress")
    ax = drawn[-1].axes[0]
    assert "progress" in ax.get_xlabel()
    # Both curves end at 100% although one run took twice as long.
    assert {line.get_xdata()[-1] for line in ax.lines} == {100.0}
    assert "(1 run)" in ax.get_title()

"""The run schedule: round-major order, and the time budget that trims later rounds
cheapest-first while round 1 always runs whole."""

from strata_tool.schedule import Schedule
from strata_tool.workloads import Workload

W = [Workload(n, "binary", n, {"default": r}, {"default": e})
     for n, r, e in (("a", 3, 1.0), ("b", 3, 10.0), ("m", 1, 16.0))]


def test_without_budget_every_round_runs():
    s = Schedule(W, {"a": 3, "b": 3, "m": 1}, n_alloc=2, preset="default")
    assert [w.name for w in s.plan_round(1, 0)] == ["a", "b", "m"]
    assert [w.name for w in s.plan_round(2, 1e9)] == ["a", "b"]
    assert [w.name for w in s.plan_round(3, 1e9)] == ["a", "b"]
    assert s.n_rounds() == 3


def test_budget_keeps_the_cheapest_rounds_that_fit():
    s = Schedule(W, {"a": 3, "b": 3, "m": 1}, n_alloc=2, preset="default", budget_s=60)
    assert [w.name for w in s.plan_round(1, 0)] == ["a", "b", "m"]   # always whole
    for name, d in (("a", 1.0), ("a", 1.2), ("b", 10.0), ("b", 11.0), ("m", 16), ("m", 16)):
        s.record(name, d)
    # 54 s spent: 6 s left; a round of "a" costs 2 x 1.2 (median of 1.0, 1.2 -> upper), b 22
    assert [w.name for w in s.plan_round(2, 54.0)] == ["a"]
    assert s.max_rounds == {"a": 3, "b": 1, "m": 1} and s.dropped == {"b": 2}
    # 58 s spent: 2 s left, "a" (2.4 s) no longer fits
    assert s.plan_round(3, 58.0) == []
    assert s.max_rounds["a"] == 2


def test_eta_counts_the_rest_of_the_round_and_later_rounds():
    s = Schedule(W, {"a": 3, "b": 3, "m": 1}, n_alloc=2, preset="default")
    todo = s.plan_round(1, 0)
    # first run: this round 2*1 + 2*10 + 2*16 = 54, rounds 2-3 of a and b: 2*(2+20) = 44
    assert s.eta(1, todo, 0, 0, 0.0) == 54 + 44
    # last run of round 1 (m, second allocator)
    assert s.eta(1, todo, 2, 1, 0.0) == 16 + 44
    capped = Schedule(W, {"a": 3, "b": 3, "m": 1}, 2, "default", budget_s=60)
    assert capped.eta(1, capped.plan_round(1, 0), 0, 0, 0.0) == 54 + 6


def test_budget_gives_fast_workloads_all_their_rounds_before_a_slow_one_a_second():
    # After round 1 (54 s), 26 s left: a's two remaining rounds (2 x 2 s) come first; b's
    # remaining two (2 x 20 s) do not fit, so b stops at one run rather than taking
    # round 2 and leaving a without round 3.
    ws = [Workload("a", "binary", "a", {"default": 3}, {"default": 1.0}),
          Workload("b", "binary", "b", {"default": 3}, {"default": 10.0})]
    s = Schedule(ws, {"a": 3, "b": 3}, n_alloc=2, preset="default", budget_s=80)
    s.plan_round(1, 0)
    for name, d in (("a", 1.0), ("a", 1.0), ("b", 10.0), ("b", 10.0)):
        s.record(name, d)
    assert [w.name for w in s.plan_round(2, 54.0)] == ["a"]
    assert [w.name for w in s.plan_round(3, 58.0)] == ["a"]
    assert s.max_rounds == {"a": 3, "b": 1}


def test_kept_rounds_run_even_when_round_one_spent_the_budget():
    # Round 1 overran the budget (100 s of 80): "a" is kept for its 3 rounds, "b" stops.
    ws = [Workload("a", "binary", "a", {"default": 3}, {"default": 1.0}),
          Workload("b", "binary", "b", {"default": 3}, {"default": 10.0})]
    s = Schedule(ws, {"a": 3, "b": 3}, n_alloc=2, preset="default", budget_s=80,
                 keep={"a": 3})
    s.plan_round(1, 0)
    assert [w.name for w in s.plan_round(2, 100.0)] == ["a"]
    assert [w.name for w in s.plan_round(3, 104.0)] == ["a"]
    assert s.max_rounds == {"a": 3, "b": 1} and s.dropped == {"b": 2}

"""Order and number of the benchmark runs. Rounds are the outer loop (every workload
once, then every workload again), allocators the inner one (A B C D E, A B C D E), so
repeated runs of one pair are spread over the whole session and slow drift on a shared
machine hits every allocator alike. Round 1 always runs; with a time budget, a later
round keeps the workloads whose rounds are guaranteed (`keep`: the fast ones, whose
medians the report must be able to show), then those whose remaining rounds still fit
in what is left of it, cheapest first, so a slow workload gets a second sample only
when its third fits too.
"""

from __future__ import annotations

from .workloads import Workload


class Schedule:
    def __init__(self, workloads: list[Workload], max_rounds: dict[str, int], n_alloc: int,
                 preset: str, budget_s: float | None = None,
                 keep: dict[str, int] | None = None):
        self.workloads = list(workloads)
        self.max_rounds = dict(max_rounds)     # shrinks when the budget drops a workload
        self.planned = dict(max_rounds)
        self.n_alloc = n_alloc
        self.preset = preset
        self.budget_s = budget_s
        self.durations: dict[str, list[float]] = {}
        self.dropped: dict[str, int] = {}      # workload -> first round it lost to the budget
        self.keep = dict(keep or {})           # workload -> rounds the budget never cuts

    def record(self, workload: str, seconds: float) -> None:
        self.durations.setdefault(workload, []).append(seconds)

    def run_cost(self, w: Workload) -> float:
        """Expected seconds of one run: the median measured so far, else the prior."""
        d = self.durations.get(w.name)
        if d:
            return sorted(d)[len(d) // 2]
        return w.est_s.get(self.preset, 2.0)

    def round_cost(self, w: Workload) -> float:
        return self.run_cost(w) * self.n_alloc

    def n_rounds(self) -> int:
        return max(self.max_rounds.values(), default=0)

    def plan_round(self, rnd: int, elapsed_s: float) -> list[Workload]:
        """Workloads to run in round `rnd`, in suite order. Round 1: all. Later rounds:
        those with rounds left; under a budget, cheapest first, those whose remaining
        rounds (this one to their last) all fit in what is left of it. A workload left
        out stops there (its rounds stay contiguous)."""
        todo = [w for w in self.workloads if self.max_rounds[w.name] >= rnd]
        if rnd == 1 or self.budget_s is None:
            return todo
        left = self.budget_s - elapsed_s
        keep: set[str] = set()

        def rest(w: Workload) -> float:
            return self.round_cost(w) * (self.max_rounds[w.name] - rnd + 1)

        for w in todo:
            if self.keep.get(w.name, 0) >= rnd:
                keep.add(w.name)
                left -= self.round_cost(w) * (min(self.keep[w.name],
                                                  self.max_rounds[w.name]) - rnd + 1)
        for w in sorted((w for w in todo if w.name not in keep),
                        key=lambda w: (rest(w), w.name)):
            c = rest(w)
            if c <= left:
                keep.add(w.name)
                left -= c
        for w in todo:
            if w.name not in keep:
                self.max_rounds[w.name] = rnd - 1
                self.dropped[w.name] = rnd
        return [w for w in todo if w.name in keep]

    def eta(self, rnd: int, round_list: list[Workload], wi: int, ai: int,
            elapsed_s: float) -> float:
        """Seconds left, the current run included: the rest of this round (workload
        index wi in round_list, allocator index ai), then the later rounds as planned,
        which a budget caps at what is left of it."""
        now = (self.n_alloc - ai) * self.run_cost(round_list[wi])
        now += sum(self.round_cost(w) for w in round_list[wi + 1:])
        later = sum(self.round_cost(w) * max(0, self.max_rounds[w.name] - rnd)
                    for w in self.workloads)
        if self.budget_s is not None:
            later = min(later, max(0.0, self.budget_s - elapsed_s - now))
        return now + later

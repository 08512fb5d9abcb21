"""The benchmark suite: the fifteen workload binaries of bench/workloads (built to
<build>/bench/wl_<name>) plus Redis, with the rounds each gets per mode and a prior
run-time estimate that seeds the progress line's time-left figure until real
durations are measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PRESETS = ("tiny", "default", "full")


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str                 # "binary" (bench/wl_*) or "redis"
    description: str
    rounds: dict = field(default_factory=dict)   # mode -> rounds: tiny, default, full
    est_s: dict = field(default_factory=dict)    # preset -> prior seconds per run
    timed: bool = True        # its time enters the time geomean (not for a timed sampler)
    series: bool = False      # RESULT carries rss_series (RSS-over-time plot)
    # The series' x axis: "time" (sampled on a clock) or "progress" (sampled at fixed
    # points of the work, the same under every allocator).
    series_x: str = "time"
    # Runs in well under a second: in the default mode the budget never cuts its rounds
    # (three rounds of all seven cost about 40 s), so its figures are always medians.
    fast: bool = False

    def binary(self, build_dir: Path) -> Path:
        return build_dir / "bench" / self.name


# Rounds: 3 is the fewest that gives a median and a spread. wl_memreturn samples for
# 15 s, so it runs once by default; Redis (about 4 s per allocator) twice. The default
# mode's time budget (bench.DEFAULT_BUDGET) cuts the later rounds of the slow workloads
# first (schedule.py), so the fast ones keep their three.
_STD_ROUNDS = {"tiny": 1, "default": 3, "full": 5}
_FAST_ROUNDS = {"tiny": 1, "default": 3, "full": 5}


def _est(tiny: float, default: float, full: float | None = None) -> dict:
    """Prior seconds per run: medians over the five allocators on the 2-core reference
    machine; full presets are guessed at 5x default until measured."""
    return {"tiny": tiny, "default": default, "full": full or 5 * default}


SUITE: tuple[Workload, ...] = (
    Workload("wl_churn", "binary",
             "small-object churn (8..1024 B) on one thread: a LIFO phase and a "
             "random-order phase; the fast path",
             _STD_ROUNDS, _est(0.25, 1.9)),
    Workload("wl_server", "binary",
             "multi-threaded server heap (Larson-like): working sets replaced at random, "
             "10% of blocks freed by another thread",
             _STD_ROUNDS, _est(0.2, 2.7)),
    Workload("wl_prodcons", "binary",
             "producer/consumer: half the threads allocate, half free, batches of 64 "
             "through bounded queues; remote frees",
             _STD_ROUNDS, _est(0.15, 1.6)),
    Workload("wl_falseshare", "binary",
             "allocator-induced false sharing (Hoard's cache-thrash and cache-scratch), "
             "active and passive",
             _STD_ROUNDS, _est(0.1, 1.2)),
    Workload("wl_sizesweep", "binary",
             "every size class 8 B..64 MiB, posix_memalign 64 B..2 MiB, realloc growth "
             "up to 1 GiB",
             _STD_ROUNDS, _est(0.4, 1.7)),
    Workload("wl_frag", "binary",
             "long-run fragmentation: rounds of shrinking sizes freeing every other "
             "block; RSS against live bytes",
             _STD_ROUNDS, _est(0.1, 1.4), series=True, series_x="progress"),
    Workload("wl_pareto", "binary",
             "Pareto-distributed sizes (16 B..1 MiB) with generations of threads "
             "inheriting each other's blocks",
             _STD_ROUNDS, _est(0.1, 2.2)),
    Workload("wl_memreturn", "binary",
             "memory returned to the OS after a 2 GiB peak, then 15 s idle sampling RSS "
             "every 50 ms",
             {"tiny": 1, "default": 1, "full": 3}, _est(1.1, 16.4, 16.4),
             timed=False, series=True),
    # Patterns where a peer once led: small default presets (about 0.1-1 s per run), so
    # three rounds of all seven cost about 40 s of the default run; --full runs full
    # sizes and 5 rounds, --rounds N any number.
    Workload("wl_bulk", "binary",
             "bulk: a thread allocates 2K..200K small blocks then frees them all; and "
             "a ring of threads freeing every other block of each other's batches",
             _FAST_ROUNDS, fast=True, est_s=_est(0.3, 0.6)),
    Workload("wl_threadwave", "binary",
             "waves of 8 short-lived threads that allocate, hand blocks over through a "
             "shared array, and exit",
             _FAST_ROUNDS, fast=True, est_s=_est(0.15, 0.5)),
    Workload("wl_hugeblocks", "binary",
             "blocks of 5..25 MiB allocated, written and freed in a loop, 4 alive",
             _FAST_ROUNDS, fast=True, est_s=_est(0.15, 0.5)),
    Workload("wl_nativethreads", "binary",
             "100 threads churning JVM-native-like blocks (Unsafe, direct buffers, zlib "
             "streams); peak RSS of many thread caches",
             _FAST_ROUNDS, fast=True, est_s=_est(0.1, 0.2)),
    Workload("wl_xthread", "binary",
             "16 threads, random sizes 16 B..16 KiB passed between threads through a "
             "shared array: almost every free is remote",
             _FAST_ROUNDS, fast=True, est_s=_est(0.15, 0.4)),
    Workload("wl_larson", "binary",
             "Larson: threads replace random blocks (16..1000 B) of an array, and a new "
             "thread inherits the array each generation",
             _FAST_ROUNDS, fast=True, est_s=_est(0.1, 0.3)),
    Workload("wl_halffree", "binary",
             "half-free: a buffer of 20K blocks, every other one freed and replaced by "
             "the next size class, round after round",
             _FAST_ROUNDS, fast=True, est_s=_est(0.2, 0.6)),
    Workload("redis", "redis",
             "Debian's redis-server under redis-benchmark (SET/GET/LPUSH/LPOP, 16 B and "
             "1 KiB values), then INFO memory and FLUSHALL",
             {"tiny": 1, "default": 2, "full": 3}, _est(1.2, 4.0, 20.0)),
)

BY_NAME = {w.name: w for w in SUITE}

# The jemalloc literature's experiments (run and reported by experiments.py); kept out
# of the headline geomeans (timed=False, and experiments.core_only), and out of the
# default run (about 85 s a round): --experiments, --full, or --only NAME runs them.
EXPERIMENTS: tuple[Workload, ...] = (
    Workload("wl_drift", "binary",
             "a long server run compressed into seconds: the size mix drifts as object "
             "types appear and die out, 2% of the live bytes long-lived; RSS against live "
             "bytes sampled 100 times",
             {"tiny": 1, "default": 1, "full": 3}, _est(0.4, 4.0, 80.0), timed=False,
             series=True, series_x="progress"),
    Workload("redis_mixed", "redis_mixed",
             "Redis under a 50:50 SET/GET load on random keys at 16, 64 and 256 clients "
             "(two redis-benchmark processes at once; merged latency distribution)",
             {"tiny": 1, "default": 2, "full": 3}, _est(1.0, 3.5, 30.0), timed=False),
    Workload("redis_frag", "redis_frag",
             "Redis small-value fragmentation: 1 million SET of 16-byte values, then DEL "
             "of a random half, then MEMORY PURGE; INFO memory and VmRSS at each step",
             {"tiny": 1, "default": 1, "full": 3}, _est(1.5, 6.5, 6.5), timed=False),
    Workload("nginx", "nginx",
             "Debian's nginx, master and 2 workers, static file and gzip responses "
             "driven by wrk --latency (64 connections); workers' RSS",
             {"tiny": 1, "default": 2, "full": 3}, _est(2.5, 4.8, 21.0), timed=False),
    Workload("jvm", "jvm",
             "a JVM with 100 threads allocating native memory (Deflater/Inflater, direct "
             "ByteBuffers): peak and final RSS and glibc's 64 MiB arena heaps",
             {"tiny": 1, "default": 1, "full": 3}, _est(1.2, 4.5, 40.0), timed=False),
)
SUITE = SUITE + EXPERIMENTS
BY_NAME = {w.name: w for w in SUITE}


def select(only: str | None) -> list[Workload]:
    """Workloads named in a comma list (`wl_churn,redis`; the `wl_` prefix may be
    left out), in suite order; all of them when `only` is empty."""
    if not only:
        return list(SUITE)
    wanted = []
    for raw in only.split(","):
        n = raw.strip()
        if not n:
            continue
        if n not in BY_NAME and f"wl_{n}" in BY_NAME:
            n = f"wl_{n}"
        if n not in BY_NAME:
            raise ValueError(f"unknown workload {raw.strip()!r} "
                             f"(known: {', '.join(BY_NAME)})")
        wanted.append(n)
    return [w for w in SUITE if w.name in wanted]

"""`strata bench`: every workload under every allocator in interleaved rounds
(A B C D E, A B C D E, ...), each run measured and recorded whatever its outcome, then
results.json, report.md with plots, and the summary table on stdout.
A failed run (exit status, signal, timeout, no RESULT line) is recorded and reported;
it never stops the comparison.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from . import allocators as al
from . import analyze, redis_bench, report, runner, sysinfo
from . import experiments, sweep
from .errors import Failure, UsageError, nonneg_float, positive_int
from .schedule import Schedule
from .workloads import PRESETS, Workload, select

SCHEMA = "strata-bench/1"
DEFAULT_TIMEOUT = {"tiny": 60.0, "default": 180.0, "full": 900.0}
# Seconds after which no further round starts (round 1 and the fast workloads' rounds
# always complete); --full runs every round. On a quiet 2-core machine the default
# run's first round takes about 260-280 s, and rounds 2 and 3 of the fast workloads
# about 26 s; what is left goes to the cheapest slow workloads (wl_frag first).
DEFAULT_BUDGET = {"default": 330.0}
OK_STDERR_TAIL = 600      # characters of stderr kept for a successful run


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fmt_duration(s: float) -> str:
    s = max(0, int(round(s)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--build-dir", type=Path, default=None,
                   help="build directory with libstrata.so and bench/wl_* (default: "
                        "<repo>/build)")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default: <repo>/bench/out/<timestamp>)")
    p.add_argument("--only", default=None, metavar="LIST",
                   help="comma list of workloads, e.g. wl_churn,redis")
    p.add_argument("--allocators", default=None, metavar="LIST",
                   help="comma list of glibc, jemalloc, tcmalloc, mimalloc, strata (default: "
                        "all five) and NAME=PATH for a library given by path, e.g. "
                        "mimalloc3=/opt/mimalloc/lib/libmimalloc.so (preloaded under NAME; "
                        "a built-in NAME=PATH replaces Debian's build)")
    p.add_argument("--rounds", type=positive_int, default=None, metavar="N",
                   help="rounds for every workload, no budget (default: 3, wl_memreturn 1, "
                        "redis 2, cut by --budget)")
    p.add_argument("--preset", choices=PRESETS, default=None,
                   help="workload preset (default: default; full with --full)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true",
                      help="long version: full presets, 5 rounds (wl_memreturn, redis 3)")
    mode.add_argument("--tiny", action="store_true",
                      help="preset tiny, 1 round: a smoke test of the harness")
    p.add_argument("--experiments", action="store_true",
                   help="also run the jemalloc literature's experiments (redis_mixed, "
                        "redis_frag, nginx, jvm, wl_drift; always with --full)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="passed to every workload binary as --threads N")
    p.add_argument("--seed", type=int, default=None,
                   help="passed to every workload binary as --seed S")
    p.add_argument("--timeout", type=nonneg_float, default=None, metavar="S",
                   help="per-run time limit in seconds (default: 60 tiny, 180 default, "
                        "900 full)")
    p.add_argument("--budget", type=nonneg_float, default=None, metavar="S",
                   help="start no round after the first once S seconds are spent, except "
                        "the fast workloads' (wl_bulk ... wl_halffree), whose rounds always "
                        "run; other later rounds go to the cheapest workloads first (default: "
                        f"{DEFAULT_BUDGET['default']:.0f} in the default mode, none with "
                        "--full/--rounds; 0: no limit)")
    p.add_argument("--no-plots", action="store_true", help="do not draw PNG plots")
    p.add_argument("--from-results", type=Path, default=None, metavar="FILE",
                   help="run nothing: re-analyse FILE (a results.json) and rewrite the "
                        "report and plots beside it")
    p.add_argument("--sweep", default=None, metavar="KEY=V1,V2,...",
                   help="tuning sweep: run the --only workloads (default wl_server) under "
                        "strata and jemalloc for each value of narenas, tcache_max or "
                        "dirty_decay_ms (MALLOC_CONF); writes sweep.md with plots")
    p.add_argument("--list", action="store_true",
                   help="list workloads and allocators with their availability, then exit")
    p.set_defaults(func=main)


NO_BUILD = ("no build tree: strata bench runs the workloads of a strata build; build one "
            "(cmake -S <strata source> -B build -G Ninja && cmake --build build) and give "
            "--build-dir build")


def main(args: argparse.Namespace) -> int:
    repo = sysinfo.find_repo_root()
    if args.build_dir is not None:
        build = args.build_dir.resolve()
        if not build.is_dir():
            raise UsageError(f"--build-dir {args.build_dir}: no such directory")
    elif repo is not None:
        build = (repo / "build").resolve()
    else:
        build = None        # an installed tool outside a checkout
    mode = "tiny" if args.tiny else "full" if args.full else "default"
    preset = args.preset or mode
    try:
        allocs = al.discover(build, _split(args.allocators))
        wls = select(args.only)
        if not (args.only or args.full or args.experiments or args.tiny):
            wls = [w for w in wls if w.name not in experiments.NAMES]
    except ValueError as ex:
        log(f"strata bench: {ex}")
        return 2
    if args.list:
        return _list(build, allocs, wls, mode)
    if build is None and not args.from_results:
        raise Failure(NO_BUILD)
    if args.sweep:
        return sweep.main(args, build, repo)
    if args.from_results:
        return _rerender(args.from_results, not args.no_plots)
    for a in allocs:
        if not a.available:
            log(f"skip allocator {a.name}: {a.skip_reason}")
    active = [a for a in allocs if a.available]
    for a in active:
        if a.name == "strata":
            a.version = sysinfo.strata_version(repo)
        elif a.extra.get("given_by_path"):
            a.version = a.lib.name if a.lib else None   # e.g. libmimalloc.so.3.4.3
        else:
            a.version = sysinfo.dpkg_version(a.package)
    plan: list[tuple[Workload, int]] = []
    skipped: list[dict] = []
    for w in wls:
        why = _unavailable(w, build)
        if why:
            log(f"skip workload {w.name}: {why}")
            skipped.append({"workload": w.name, "reason": why})
            continue
        plan.append((w, args.rounds or w.rounds[mode]))
    if not active or not plan:
        log("strata bench: nothing to run" + ("" if active else " (no allocator available)"))
        return 2

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = (args.out or ((repo or Path.cwd()) / "bench" / "out" / stamp)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    timeout = args.timeout or DEFAULT_TIMEOUT[preset]
    # The budget trims rounds after the first, only where the user did not fix them.
    budget = None if args.rounds else (args.budget if args.budget is not None
                                       else DEFAULT_BUDGET.get(mode))
    budget = budget or None
    plan_index = {w.name: i for i, (w, _) in enumerate(plan, 1)}
    names = [a.name for a in active]
    results = {
        "schema": SCHEMA,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command_line": _command_line(),
        "config": {"mode": mode, "preset": preset, "build_dir": str(build),
                   "out_dir": str(out), "timeout_s": timeout, "threads": args.threads,
                   "seed": args.seed,
                   "rounds": {w.name: r for w, r in plan},
                   "rounds_planned": {w.name: r for w, r in plan},
                   "budget_s": budget,
                   "allocators": names, "workloads": [w.name for w, _ in plan],
                   "redis": {"requests_per_test": redis_bench.REQUESTS.get(preset),
                             "clients": redis_bench.CLIENTS,
                             "pipeline": redis_bench.PIPELINE,
                             "value_sizes": list(redis_bench.VALUE_SIZES),
                             "tests": redis_bench.TESTS}},
        "machine": sysinfo.machine(),
        "repo": {"root": str(repo) if repo else None, "commit": sysinfo.git_commit(repo)},
        "env": sysinfo.relevant_env(),
        "allocators": {a.name: a.to_json() for a in allocs},
        "workloads": {w.name: {"kind": w.kind, "description": w.description,
                               "timed": w.timed, "series": w.series,
                               "series_x": w.series_x,
                               "binary": str(w.binary(build)) if w.kind == "binary" else None}
                      for w, _ in plan},
        "skipped_workloads": skipped,
        "verification": {},
        "runs": [],
    }
    if runner.gnu_time() is None:
        log("note: GNU time not found, so peak RSS of the workloads includes the harness's "
            "own RSS at fork (~20 MB): run scripts/install-deps.sh (or apt-get install time)")
    results["config"]["rss_source"] = "gnu-time" if runner.gnu_time() else "wait4"
    base_env = dict(os.environ)
    base_env.pop("LD_PRELOAD", None)
    for w, _ in plan:
        if w.kind != "binary":
            continue
        results["verification"][w.name] = {}
        for a in active:
            v = al.verify(str(w.binary(build)), a.preload(), a.name, env=base_env)
            results["verification"][w.name][a.name] = v
            if not v["ok"]:
                log(f"!!! ALLOCATOR MISMATCH: {w.name} under {a.name}: malloc resolves to "
                    f"{v['verified_allocator']} ({v['binding_error'] or v['bindings']})")

    # The fast workloads' rounds are never cut: their medians are what the default run
    # can afford to show for every allocator.
    sched = Schedule([w for w, _ in plan], {w.name: r for w, r in plan}, len(active), preset,
                     budget, keep={w.name: r for w, r in plan if w.fast})
    t_begin = time.monotonic()
    for rnd in range(1, sched.n_rounds() + 1):
        todo = sched.plan_round(rnd, time.monotonic() - t_begin)
        for name, first in sched.dropped.items():
            if first == rnd:
                log(f"budget: {name} stops after {rnd - 1} round(s) "
                    f"(--budget {budget:.0f} s; --rounds N runs them all)")
        for wi, w in enumerate(todo):
            index = plan_index[w.name]
            for ai, a in enumerate(active):
                left = sched.eta(rnd, todo, wi, ai, time.monotonic() - t_begin)
                log(f"[workload {index}/{len(plan)}] {w.name:<13} {a.name:<8} "
                    f"round {rnd}/{sched.max_rounds[w.name]}  ~{fmt_duration(left)} left")
                t0 = time.monotonic()
                rec = _run_one(w, a, rnd, build, preset, timeout, args, base_env, results)
                sched.record(w.name, time.monotonic() - t0)
                results["runs"].append(rec)
                if rec["status"] != "ok":
                    log(f"    {rec['status'].upper()}: {rec['reason']}")
                    tail = runner.tail_lines(rec.get("stderr_tail") or "", 5)
                    if tail:
                        log("    " + tail.replace("\n", "\n    "))
                for wmsg in rec.get("warnings", []):
                    loud = wmsg.startswith("ALLOCATOR MISMATCH")
                    log(f"{'!!! ' if loud else '    warning: '}{wmsg}")
            _write_json(out / "results.json", results)
    results["config"]["rounds"] = {w.name: sched.max_rounds[w.name] for w, _ in plan}
    results["elapsed_s"] = time.monotonic() - t_begin

    agg = analyze.aggregate(results["runs"])
    timed = {w.name for w, _ in plan if w.timed}
    summary = analyze.summarize(experiments.core_only(agg), names, timed)
    results["aggregate"] = agg
    results["summary"] = summary
    _write_json(out / "results.json", results)
    rep = report.write(out, results, draw=not args.no_plots)
    for line in rep.get("notes", []):
        log(line)
    print(report.summary_text(results))
    print(f"report: {out / 'report.md'}")
    print(f"results: {out / 'results.json'}")
    failed = [r for r in results["runs"] if r["status"] != "ok"]
    mismatch = [r for r in results["runs"] if r.get("verified_allocator") not in
                (None, r["allocator"])]
    if failed or mismatch:
        log(f"strata bench: {len(failed)} failed run(s), {len(mismatch)} run(s) not served "
            f"by the intended allocator (see report)")
        return 1
    return 0


def _rerender(path: Path, draw: bool) -> int:
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as ex:
        log(f"strata bench: cannot read {path}: {ex}")
        return 2
    if results.get("schema") != SCHEMA:
        log(f"strata bench: {path} is not a {SCHEMA} results file")
        return 2
    names = results["config"]["allocators"]
    timed = {w for w, m in results["workloads"].items() if m.get("timed", True)}
    results["aggregate"] = analyze.aggregate(results["runs"])
    results["summary"] = analyze.summarize(experiments.core_only(results["aggregate"]),
                                           names, timed)
    out = path.resolve().parent
    _write_json(path, results)
    for line in report.write(out, results, draw=draw).get("notes", []):
        log(line)
    print(report.summary_text(results))
    print(f"report: {out / 'report.md'}")
    return 0


def _command_line() -> list[str]:
    """How the user invoked us, with `python3 -m strata_tool` shown as `strata`."""
    prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "strata"
    if prog in ("__main__.py", "-m", "-c", ""):
        prog = "strata"
    return [prog, *sys.argv[1:]]


def _split(s: str | None) -> list[str] | None:
    if not s:
        return None
    return [x.strip() for x in s.split(",") if x.strip()]


def _unavailable(w: Workload, build: Path | None) -> str | None:
    if w.kind == "binary":
        if build is None:
            return "no build tree (see above)"
        b = w.binary(build)
        if not (b.is_file() and os.access(b, os.X_OK)):
            if not build.is_dir():
                return (f"{build} does not exist: build strata there (cmake -S <strata "
                        f"source> -B {build} -G Ninja && cmake --build {build}) or give "
                        "--build-dir")
            return (f"{b} not found (build the workloads: cmake --build {build}, "
                    f"configured with STRATA_BUILD_BENCH=ON)")
        return None
    if w.kind in experiments.RUNNERS:
        return experiments.unavailable(w.kind)
    if redis_bench.tools() is None:
        return ("redis-server/redis-benchmark/redis-cli not installed: "
                f"{al.INSTALL_HINT} (or: apt-get install redis-server redis-tools)")
    return None


def _run_one(w: Workload, a: al.Allocator, rnd: int, build: Path, preset: str,
             timeout: float, args, base_env: dict, results: dict) -> dict:
    rec: dict = {"workload": w.name, "allocator": a.name, "round": rnd, "warnings": []}
    if w.kind == "redis" or w.kind in experiments.RUNNERS:
        rec["preload"] = a.redis_preload() if w.kind.startswith("redis") else a.preload()
        if w.kind == "redis":
            pr, result, warns = redis_bench.run(a, preset, timeout, base_env)
        else:
            pr, result, warns = experiments.run(w.kind, a, preset, timeout, base_env,
                                                Path(results["config"]["out_dir"]))
        rec["warnings"] += warns
        if result is not None:
            rec["verification"] = result.get("verification")
            rec["verified_allocator"] = result.get("verified_allocator")
        parsed_err = None if result is not None else (pr.error or "no result")
    else:
        argv = [str(w.binary(build)), "--preset", preset]
        if args.threads:
            argv += ["--threads", str(args.threads)]
        if args.seed is not None:
            argv += ["--seed", str(args.seed)]
        rec["preload"] = a.preload()
        pr = runner.run_measured(argv, base_env, timeout, preload=a.preload())
        v = results["verification"].get(w.name, {}).get(a.name)
        if v is not None:
            rec["verified_allocator"] = v["verified_allocator"]
        result, parsed_err = None, None
        if pr.ok:
            parsed = runner.parse_result(pr.stdout)
            result, parsed_err = parsed.data, parsed.error
            rec["warnings"] += parsed.warnings
            if result and result.get("workload") not in (None, w.name, w.name[3:]):
                rec["warnings"].append(f"RESULT names workload {result.get('workload')!r}")
    rec.update({"argv": pr.argv, "returncode": pr.returncode, "signal": pr.signal,
                "wall_s": pr.wall_s, "user_s": pr.user_s, "sys_s": pr.sys_s,
                "cpu_s": pr.user_s + pr.sys_s, "maxrss_kb": pr.maxrss_kb,
                "maxrss_source": pr.maxrss_source, "result": result})
    why = pr.failure()
    if pr.timed_out:
        status = "timeout"
    elif pr.signal is not None and w.kind != "redis":
        status = "crashed"
    elif why:
        status = "failed"
    elif parsed_err:
        status, why = "invalid", parsed_err
    else:
        status = "ok"
    rec["status"], rec["reason"] = status, why if status != "ok" else None
    if status == "ok":
        rec["stderr_tail"] = pr.stderr[-OK_STDERR_TAIL:]
    else:
        rec["stderr_tail"] = pr.stderr_tail()
    return rec


def _list(build: Path | None, allocs: list[al.Allocator], wls: list[Workload],
          mode: str) -> int:
    print(f"build dir: {build}" if build is not None else NO_BUILD)
    print("allocators:")
    for a in allocs:
        state = "ok" if a.available else f"missing ({a.skip_reason})"
        print(f"  {a.name:<9} {str(a.lib) if a.name != 'glibc' else '(default)':<48} {state}")
    print("workloads:")
    for w in wls:
        why = _unavailable(w, build)
        print(f"  {w.name:<13} rounds {w.rounds[mode]}  {'ok' if not why else 'missing'}"
              f"  {w.description}")
    return 0


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)

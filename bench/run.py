"""Benchmark perseus against the reference solver (lowtime 0.3.0, driven as Zeus does).

For every case (profile, stages x microbatches, 1F1B, unit time 1 ms) the same
run solves the frontier with lowtime and with ``perseus.optimize``, replays
every lowtime plan with ``perseus.evaluate`` and compares energies plan by
plan. A second table shows perseus's peak memory over a ladder of sizes,
each measured in a fresh subprocess.

    python bench/run.py --quick
    python bench/run.py --json out.json
    python bench/run.py --profile my.csv --blocking-power 70 --sizes 4x8,4x32

See bench/README.md for what each column means.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
EXAMPLES_DIR = REPO_DIR / "examples"
sys.path.insert(0, str(BENCH_DIR))

GPT3_PROFILE = EXAMPLES_DIR / "gpt3-a100-8stage.csv"
SMALL_PROFILE = EXAMPLES_DIR / "small-4stage.csv"
#: Blocking (P2P) power of the shipped example profiles, W.
EXAMPLE_BLOCKING_POWER = {GPT3_PROFILE.name: 70.0, SMALL_PROFILE.name: 70.0}

UNIT_TIME = 1e-3  # s, the unit Zeus uses
MATCH_TOLERANCE_PCT = 0.1  # a lowtime plan is "matched" if perseus is within this
TIME_RTOL = 1e-9  # "at least as fast" allows this relative float slack

#: A lowtime run shorter than this (s) is repeated up to --lowtime-repeat times; longer runs once.
LOWTIME_REPEAT_BELOW_S = 2.0


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class ProfileSpec:
    path: Path
    blocking_power: float

    @property
    def name(self) -> str:
        return self.path.stem


@dataclass(frozen=True)
class Case:
    profile: ProfileSpec
    stages: int
    microbatches: int

    @property
    def computations(self) -> int:
        return 2 * self.stages * self.microbatches

    @property
    def label(self) -> str:
        return f"{self.profile.name} {self.stages}x{self.microbatches}"


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        try:
            s, m = item.split("x")
            sizes.append((int(s), int(m)))
        except ValueError:
            raise SystemExit(
                f"bad size {item!r}: expected STAGESxMICROBATCHES, e.g. 8x32"
            ) from None
    return sizes


def example(path: Path) -> ProfileSpec:
    return ProfileSpec(path, EXAMPLE_BLOCKING_POWER[path.name])


def select_cases(args: argparse.Namespace) -> tuple[list[Case], list[Case]]:
    """(comparison cases, memory ladder cases)."""
    if args.profile is not None:
        if args.blocking_power is None:
            raise SystemExit("--profile needs --blocking-power W")
        spec = ProfileSpec(Path(args.profile), args.blocking_power)
        stages = load_profile(spec).num_stages
        sizes = parse_sizes(args.sizes) if args.sizes else [(stages, stages), (stages, 4 * stages)]
        cases = [Case(spec, s, m) for s, m in sizes]
        ladder_sizes = (
            parse_sizes(args.ladder) if args.ladder else [(stages, m) for m in (8, 32, 64, 96)]
        )
        ladder = [Case(spec, s, m) for s, m in ladder_sizes]
        return cases, ladder

    gpt3 = example(GPT3_PROFILE)
    if args.sizes:
        cases = [Case(gpt3, s, m) for s, m in parse_sizes(args.sizes)]
    elif args.quick:
        small = example(SMALL_PROFILE)
        cases = [Case(small, 4, 8), Case(small, 4, 16), Case(gpt3, 8, 8)]
    else:
        cases = [Case(gpt3, 8, 32), Case(gpt3, 8, 96)]

    if args.ladder:
        ladder_sizes = parse_sizes(args.ladder)
    elif args.quick:
        ladder_sizes = [(4, 8), (8, 8), (8, 16), (8, 32)]
    else:
        ladder_sizes = [(4, 8), (8, 32), (8, 64), (8, 96), (8, 192)]
    return cases, [Case(gpt3, s, m) for s, m in ladder_sizes]


# --------------------------------------------------------------------------- profiles

_PROFILES: dict[tuple[ProfileSpec, int | None], Any] = {}


def load_profile(spec: ProfileSpec, stages: int | None = None) -> Any:
    """The profile, cut to its first ``stages`` stages when asked (a smaller pipeline)."""
    import perseus

    key = (spec, stages)
    if key in _PROFILES:
        return _PROFILES[key]
    if not spec.path.exists():
        raise SystemExit(f"profile {spec.path} not found")
    full = perseus.Profile.from_csv(spec.path, blocking_power=spec.blocking_power)
    if stages is None or stages == full.num_stages:
        profile = full
    elif 0 < stages < full.num_stages:
        records = []
        for stage in range(stages):
            for name in ("forward", "backward"):
                opts = full.options(stage, name)
                records.extend(
                    (stage, name, int(f), float(t), float(e))
                    for f, t, e in zip(opts.frequency_mhz, opts.time_s, opts.energy_j)
                )
        profile = perseus.Profile.from_records(records, blocking_power=spec.blocking_power)
    else:
        raise SystemExit(
            f"{spec.path.name} has {full.num_stages} stages; cannot run {stages} stages"
        )
    _PROFILES[key] = profile
    return profile


# --------------------------------------------------------------------------- comparison


@dataclass
class CaseResult:
    case: str
    profile: str
    stages: int
    microbatches: int
    computations: int
    unit_time_s: float
    perseus_time_s: float
    perseus_runs: int
    perseus_solve_time_s: float  # Frontier.solve_time of the last run
    perseus_plans: int
    perseus_fastest_s: float
    perseus_slowest_s: float
    lowtime: str  # "ran" or "skipped"
    same_dag: bool | None = None
    lowtime_time_s: float | None = None
    lowtime_runs: int = 0
    lowtime_build_time_s: float | None = None
    lowtime_solve_time_s: float | None = None
    lowtime_plans: int | None = None
    lowtime_frontier_plans: int | None = None  # after Pareto filtering the replayed points
    lowtime_fastest_s: float | None = None  # replayed
    lowtime_fastest_quantised_s: float | None = None  # lowtime's own quant_time * unit
    speedup: float | None = None  # lowtime time / perseus time
    energy_diff_worst_pct: float | None = None
    energy_diff_mean_pct: float | None = None
    energy_diff_best_pct: float | None = None
    unmatched: int | None = None
    too_fast_for_perseus: int | None = None
    perseus_fastest_ok: bool | None = None
    notes: list[str] = field(default_factory=list)
    # Per plan on lowtime's replayed frontier: lowtime (s, J), perseus's match (s, J), dE%.
    points: list[dict[str, Any]] = field(default_factory=list)


def pareto_points(times: np.ndarray, energies: np.ndarray, blocking_w: float = 0.0) -> np.ndarray:
    """Indices of the Pareto front, fastest first.

    Plans are compared over a common iteration length: a plan that finishes
    early draws blocking power (``blocking_w`` = GPUs x P_block, W) until the
    iteration ends, so the front keeps plans whose effective energy
    ``E - blocking_w * T`` strictly falls (with 0: plain energies).
    """
    effective = energies - blocking_w * times
    order = np.lexsort((effective, times))
    keep = []
    best = math.inf
    for i in order:
        if effective[i] < best:
            keep.append(i)
            best = effective[i]
    return np.asarray(keep, dtype=np.int64)


def compare(
    lt_times: np.ndarray,
    lt_energies: np.ndarray,
    p_times: np.ndarray,
    p_energies: np.ndarray,
    blocking_w: float = 0.0,
) -> dict[str, Any]:
    """For each lowtime point, perseus's cheapest plan at least as fast.

    Both are measured over an iteration as long as the lowtime plan: the
    perseus plan's energy plus ``blocking_w`` for the time it waits.
    """
    p_effective = p_energies - blocking_w * p_times
    cheapest_so_far = np.minimum.accumulate(p_effective)
    diffs: list[float] = []
    points: list[dict[str, Any]] = []
    too_fast = 0
    for t, e in zip(lt_times, lt_energies):
        idx = int(np.searchsorted(p_times, t * (1 + TIME_RTOL), side="right")) - 1
        if idx < 0:
            too_fast += 1
            points.append(
                {
                    "lowtime_s": float(t),
                    "lowtime_j": float(e),
                    "perseus_s": None,
                    "perseus_j": None,
                    "diff_pct": None,
                }
            )
            continue
        j = idx - int(np.argmin(p_effective[idx::-1]))  # the cheapest plan among the first idx+1
        at_t = cheapest_so_far[idx] + blocking_w * max(float(t), float(p_times[j]))
        diff = (at_t - e) / e * 100.0
        diffs.append(diff)
        points.append(
            {
                "lowtime_s": float(t),
                "lowtime_j": float(e),
                "perseus_s": float(p_times[j]),
                "perseus_j": float(p_energies[j]),
                "perseus_j_at_lowtime_s": float(at_t),
                "diff_pct": float(diff),
            }
        )
    d = np.asarray(diffs)
    return {
        "points": points,
        "energy_diff_worst_pct": float(d.max()) if d.size else None,
        "energy_diff_mean_pct": float(d.mean()) if d.size else None,
        "energy_diff_best_pct": float(d.min()) if d.size else None,
        "unmatched": int((d > MATCH_TOLERANCE_PCT).sum()) + too_fast,
        "too_fast_for_perseus": too_fast,
    }


def perseus_order(stages: int, microbatches: int) -> list[list[tuple[str, int]]]:
    from perseus.schedule import pipeline_order

    return [
        [(ins, mb) for ins, _chunk, mb in gpu]
        for gpu in pipeline_order("1f1b", stages, microbatches)
    ]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_case(case: Case, args: argparse.Namespace, lowtime_limit: float) -> CaseResult:
    import perseus

    profile = load_profile(case.profile, case.stages)
    m = case.microbatches

    # perseus: median wall time of --repeat runs, profile to frontier.
    p_walls = []
    frontier = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        frontier = perseus.optimize(profile, microbatches=m, schedule="1f1b", unit_time=UNIT_TIME)
        p_walls.append(time.perf_counter() - t0)
    assert frontier is not None
    p_times = np.asarray(frontier.iteration_times, dtype=float)
    p_energies = np.asarray(frontier.energies, dtype=float)
    log(f"  perseus: {statistics.median(p_walls):.4f} s, {len(frontier)} plans")

    res = CaseResult(
        case=case.label,
        profile=str(case.profile.path),
        stages=case.stages,
        microbatches=m,
        computations=case.computations,
        unit_time_s=UNIT_TIME,
        perseus_time_s=statistics.median(p_walls),
        perseus_runs=len(p_walls),
        perseus_solve_time_s=float(frontier.solve_time),
        perseus_plans=len(frontier),
        perseus_fastest_s=float(p_times[0]),
        perseus_slowest_s=float(p_times[-1]),
        lowtime="skipped",
    )

    # Spot-check that perseus's frontier values are what its evaluator says.
    for i in {0, len(frontier) // 2, len(frontier) - 1}:
        ev = perseus.evaluate(profile, frontier[i].frequencies(), microbatches=m, schedule="1f1b")
        if not (
            math.isclose(ev.iteration_time, p_times[i], rel_tol=1e-9, abs_tol=1e-12)
            and math.isclose(ev.energy, p_energies[i], rel_tol=1e-9, abs_tol=1e-9)
        ):
            res.notes.append(
                f"perseus plan {i}: frontier ({p_times[i]:.6f} s, {p_energies[i]:.3f} J) != "
                f"evaluate ({ev.iteration_time:.6f} s, {ev.energy:.3f} J)"
            )

    import lowtime_reference as ref

    if case.computations > lowtime_limit:
        log("  lowtime: skipped")
        res.same_dag = ref.stage_orders(case.stages, m) == perseus_order(case.stages, m)
        if not res.same_dag:
            res.notes.append("lowtime's and perseus's 1F1B execution orders differ")
        return res

    lt_walls = []
    lt = None
    while True:
        lt = ref.solve(profile, microbatches=m, unit_time=UNIT_TIME)
        lt_walls.append(lt.wall_time)
        if len(lt_walls) >= args.lowtime_repeat or lt.wall_time >= LOWTIME_REPEAT_BELOW_S:
            break
    log(f"  lowtime: {statistics.median(lt_walls):.3f} s, {len(lt.plans)} plans; replaying")

    res.lowtime = "ran"
    res.same_dag = lt.stage_orders == perseus_order(case.stages, m)
    if not res.same_dag:
        res.notes.append("lowtime's and perseus's 1F1B execution orders differ")
    res.lowtime_time_s = statistics.median(lt_walls)
    res.lowtime_runs = len(lt_walls)
    res.lowtime_build_time_s = lt.build_time
    res.lowtime_solve_time_s = lt.solve_time
    res.lowtime_plans = len(lt.plans)
    res.speedup = res.lowtime_time_s / res.perseus_time_s if res.perseus_time_s > 0 else math.inf
    if not lt.plans:
        res.notes.append("lowtime produced no plans")
        return res

    # Replay every lowtime plan with perseus's evaluator: these are the values compared.
    replay = [
        perseus.evaluate(profile, plan.frequencies, microbatches=m, schedule="1f1b")
        for plan in lt.plans
    ]
    lt_times = np.array([ev.iteration_time for ev in replay])
    lt_energies = np.array([ev.energy for ev in replay])
    blocking_w = profile.blocking_power * profile.num_stages  # one GPU per stage (1F1B)
    front = pareto_points(lt_times, lt_energies, blocking_w)
    res.lowtime_frontier_plans = int(front.size)
    res.lowtime_fastest_s = float(lt_times.min())
    res.lowtime_fastest_quantised_s = float(min(p.iteration_time for p in lt.plans))
    for key, value in compare(
        lt_times[front], lt_energies[front], p_times, p_energies, blocking_w
    ).items():
        setattr(res, key, value)
    res.perseus_fastest_ok = bool(p_times[0] <= res.lowtime_fastest_s * (1 + TIME_RTOL))
    return res


# --------------------------------------------------------------------------- memory


def _status_kib(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def memory_worker(spec_json: str) -> None:
    """Entry point of the per-size subprocess: print peak extra memory of one solve."""
    spec = json.loads(spec_json)
    case = Case(
        ProfileSpec(Path(spec["path"]), spec["blocking_power"]),
        spec["stages"],
        spec["microbatches"],
    )
    import perseus

    profile = load_profile(case.profile, case.stages)
    if spec["solver"] == "lowtime":
        import lowtime_reference as ref

        ref.preload()

        def solve() -> int:
            return len(
                ref.solve(profile, microbatches=case.microbatches, unit_time=UNIT_TIME).plans
            )
    else:

        def solve() -> int:
            return len(
                perseus.optimize(profile, microbatches=case.microbatches, unit_time=UNIT_TIME)
            )

    # Reset the peak-RSS mark after imports and profile loading (Linux clear_refs "5");
    # if that is not possible, fall back to the ru_maxrss delta.
    method = "VmHWM"
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _status_kib("VmRSS")
    except OSError:
        base = None
    if base is None:
        method = "ru_maxrss"
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    plans = solve()
    peak = (
        _status_kib("VmHWM")
        if method == "VmHWM"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    )
    assert peak is not None
    print(
        json.dumps(
            {
                "peak_extra_kib": max(0, peak - base),
                "base_kib": base,
                "plans": plans,
                "method": method,
            }
        )
    )


def measure_memory(case: Case, solver: str) -> dict[str, Any]:
    spec = {
        "path": str(case.profile.path),
        "blocking_power": case.profile.blocking_power,
        "stages": case.stages,
        "microbatches": case.microbatches,
        "solver": solver,
    }
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--memory-worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"memory worker failed for {case.label}:\n{out.stderr}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    mib = data["peak_extra_kib"] / 1024
    return {
        "case": case.label,
        "solver": solver,
        "stages": case.stages,
        "microbatches": case.microbatches,
        "computations": case.computations,
        "plans": data["plans"],
        "peak_extra_mib": mib,
        "kib_per_computation": data["peak_extra_kib"] / case.computations,
        "bytes_per_plan_computation": data["peak_extra_kib"]
        * 1024
        / max(1, data["plans"] * case.computations),
        "method": data["method"],
    }


# --------------------------------------------------------------------------- output


def fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float) and spec:
        return format(value, spec)
    return str(value)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = [
        "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))
    ]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append(
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        )
    return "\n".join(lines)


def print_results(results: list[CaseResult], memory: list[dict[str, Any]]) -> None:
    header = [
        "case",
        "lowtime s",
        "perseus s",
        "speedup",
        "plans lt",
        "plans p",
        "worst dE%",
        "mean dE%",
        "unmatched",
        "fastest ok",
    ]
    rows = []
    for r in results:
        skipped = r.lowtime == "skipped"
        rows.append(
            [
                r.case,
                "skipped" if skipped else f"{r.lowtime_time_s:.3f}",
                f"{r.perseus_time_s:.4f}",
                "-"
                if skipped
                else (f"{r.speedup:.0f}x" if r.speedup >= 100 else f"{r.speedup:.1f}x"),
                "-" if skipped else f"{r.lowtime_plans}/{r.lowtime_frontier_plans}",
                str(r.perseus_plans),
                fmt(r.energy_diff_worst_pct, "+.3f"),
                fmt(r.energy_diff_mean_pct, "+.3f"),
                "-" if skipped else f"{r.unmatched}/{r.lowtime_frontier_plans}",
                fmt(r.perseus_fastest_ok),
            ]
        )
    print(table(rows, header))
    print(
        "dE% = (perseus - lowtime) / lowtime energy for each plan on lowtime's replayed frontier, "
        "against perseus's cheapest plan at least as fast, both over an iteration as long as the "
        "lowtime plan (negative: perseus uses less energy)."
    )
    for r in results:
        if r.same_dag is False:
            print(f"WARNING {r.case}: lowtime and perseus 1F1B orders differ")
        for note in r.notes:
            print(f"NOTE {r.case}: {note}")

    if memory:
        print()
        header = [
            "case",
            "solver",
            "computations",
            "plans",
            "peak MiB",
            "KiB/comp",
            "B/(plan*comp)",
        ]
        rows = [
            [
                m["case"],
                m["solver"],
                str(m["computations"]),
                str(m["plans"]),
                f"{m['peak_extra_mib']:.1f}",
                f"{m['kib_per_computation']:.2f}",
                f"{m['bytes_per_plan_computation']:.3f}",
            ]
            for m in memory
        ]
        print(table(rows, header))
        print(
            "peak MiB = peak resident memory of one solve above the process's state before it (fresh subprocess)."
        )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="small cases only (well under a minute)"
    )
    parser.add_argument("--json", metavar="OUT.json", help="also write the results as JSON")
    parser.add_argument(
        "--profile", metavar="CSV", help="a Zeus-format profile instead of the examples"
    )
    parser.add_argument(
        "--blocking-power", type=float, metavar="W", help="P2P blocking power of --profile, W"
    )
    parser.add_argument(
        "--sizes", metavar="SxM,...", help="cases as STAGESxMICROBATCHES, e.g. 8x32,8x96"
    )
    parser.add_argument("--ladder", metavar="SxM,...", help="sizes of the memory ladder")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        metavar="N",
        help="perseus runs per case, the median is reported (default 5, 3 with --quick)",
    )
    parser.add_argument(
        "--lowtime-repeat",
        type=int,
        default=None,
        metavar="N",
        help="most lowtime runs per case (default: --repeat, 1 with --quick); "
        f"a run of {LOWTIME_REPEAT_BELOW_S:g} s or more is never repeated",
    )
    parser.add_argument(
        "--no-lowtime-above",
        type=int,
        default=600,
        metavar="N",
        help="skip lowtime for cases with more than N computations (2*stages*microbatches)",
    )
    parser.add_argument(
        "--lowtime-big", action="store_true", help="run lowtime on every case (slow)"
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the memory ladder")
    parser.add_argument(
        "--memory-lowtime",
        action="store_true",
        help="also measure lowtime's memory on ladder sizes it is not skipped for",
    )
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.memory_worker:
        memory_worker(args.memory_worker)
        return 0

    try:
        import perseus
    except ImportError as e:
        raise SystemExit(f"cannot import perseus ({e}); install it first: pip install .") from e

    if args.repeat is None:
        args.repeat = 3 if args.quick else 5
    if args.lowtime_repeat is None:
        args.lowtime_repeat = 1 if args.quick else args.repeat
    lowtime_limit = math.inf if args.lowtime_big else args.no_lowtime_above
    cases, ladder = select_cases(args)

    started = time.perf_counter()
    results = []
    for case in cases:
        log(f"{case.label} ({case.computations} computations)")
        results.append(run_case(case, args, lowtime_limit))

    memory = []
    if not args.no_memory:
        for case in ladder:
            log(f"memory {case.label}")
            memory.append(measure_memory(case, "perseus"))
            if args.memory_lowtime and case.computations <= lowtime_limit:
                memory.append(measure_memory(case, "lowtime"))

    print_results(results, memory)
    elapsed = time.perf_counter() - started
    log(f"total {elapsed:.1f} s")

    if args.json:
        import lowtime_reference as ref
        import perseus

        payload = {
            "machine": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
            },
            "versions": {
                "perseus": getattr(perseus, "__version__", None),
                "lowtime": ref.lowtime_version(),
            },
            "unit_time_s": UNIT_TIME,
            "match_tolerance_pct": MATCH_TOLERANCE_PCT,
            "cases": [asdict(r) for r in results],
            "memory": memory,
            "total_wall_s": elapsed,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

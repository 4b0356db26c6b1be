"""How far a solve's progress fraction and ETA are from the truth.

A user at Megatron scale watches a solve of tens of seconds to minutes; the
bar and its ETA are all they see of it. For each case and thread count this
script solves once in this process with a progress callback (reports every
``--period`` s, 0.1 as the CLI has them), then, knowing the real wall time T
of the solve on the reports' own clock, scores every report made after 10 %
of T:

- ETA error: ``|eta - (T - elapsed)| / T`` at 25, 50, 75 and 90 % of T (the
  report nearest each), and the median and worst over all reports;
- the longest stall: the longest stretch of wall time (as a share of T)
  over which the reported fraction rose by less than 1 % of the solve.

The same reports are scored a second time with the fraction the Python side
computed before the core reported one (fixed per-phase weights 0.35 min cut,
0.45 reclamation, 0.2 local search on each report's own done / total, never
falling; ``old``), so both models are compared on the very same solve.

Usage::

    python bench/progress_eta.py                          # default cases, threads 4 and 1
    python bench/progress_eta.py --case user-h100-16u-16x256 --threads 4 --json out.json

Exit status 0 when every case ran (this is a report, with no target), 1 on a
crash.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import corpus  # noqa: E402

#: User-scale shapes (seconds each on 2 cores, those the shares in cpp/solve_parts.hpp were
#: measured on), and two short solves: SOSP '24 8 x 96 and an 8-clock 4 x 8, where the local
#: search is most of the solve.
DEFAULT_CASES = [
    "h100-coarse-4s8c-4x8",
    "sosp24-gpt3-8x96",
    "user-h100-16u-16x128",
    "user-h100-16u-16x128-gpipe",
    "user-h200-32u-16x128-v2",
    "user-h100-16u-16x256",
]
#: Where the ETA is scored, as shares of the real wall time.
CHECKPOINTS = (0.25, 0.5, 0.75, 0.9)
#: Reports before this share of the wall time are not scored (too early to judge).
SCORED_AFTER = 0.1
#: A stall: the fraction rising by less than this over a stretch of wall time.
STALL_RISE = 0.01
#: The per-phase weights the Python side used before the core reported a fraction.
OLD_WEIGHTS = {"min cut": 0.35, "candidates": 0.0, "reclamation": 0.45, "local search": 0.2}
OLD_ORDER = ("min cut", "candidates", "reclamation", "local search")


def old_fractions(reports: list[tuple[float, str, int, int, float]]) -> list[float]:
    """The fraction each report would have shown under the old fixed weights."""
    out, last = [], 0.0
    for _, phase, done, total, _ in reports:
        share = min(1.0, done / total) if total > 0 else 0.0
        before = sum(OLD_WEIGHTS[p] for p in OLD_ORDER[: OLD_ORDER.index(phase)])
        last = max(last, min(1.0, before + OLD_WEIGHTS[phase] * share))
        out.append(last)
    return out


def score(times: list[float], fractions: list[float], wall_s: float) -> dict[str, Any]:
    """ETA errors and the longest stall of one model's fractions on one solve."""
    errors = []
    for t, f in zip(times, fractions):
        if t < SCORED_AFTER * wall_s or f <= 0.02:
            continue
        eta = t * (1 - f) / f
        errors.append((t, abs(eta - (wall_s - t)) / wall_s))
    at = {}
    for share in CHECKPOINTS:
        if errors:
            t, e = min(errors, key=lambda te: abs(te[0] - share * wall_s))
            at[f"{int(share * 100)}%"] = e
    # Longest stall: for each report, how long until the fraction is STALL_RISE higher.
    stall = 0.0
    points = [(0.0, 0.0), *zip(times, fractions), (wall_s, 1.0)]
    j = 0
    for i, (t, f) in enumerate(points):
        j = max(j, i)
        while j < len(points) and points[j][1] < f + STALL_RISE:
            j += 1
        end = points[j][0] if j < len(points) else wall_s
        stall = max(stall, end - t)
    values = [e for _, e in errors]
    return {
        "eta_error_at": at,
        "eta_error_median": statistics.median(values) if values else None,
        "eta_error_worst": max(values) if values else None,
        "stall_share": stall / wall_s,
    }


def load_profile(case: corpus.Case) -> Any:
    import run as bench

    with tempfile.TemporaryDirectory() as tmp:
        return bench.perseus_profile(case, bench.raw_profile(case), Path(tmp))


def solve(case: corpus.Case, profile: Any, threads: int, period_s: float) -> dict[str, Any]:
    reports: list[tuple[float, str, int, int, float]] = []
    clock_start: list[float] = []  # perf_counter() where the reports' elapsed_s is 0

    def progress(report: Any) -> None:
        if not clock_start:
            clock_start.append(time.perf_counter() - report.elapsed_s)
        reports.append((report.elapsed_s, report.phase, report.done, report.total, report.fraction))

    started = time.perf_counter()
    cpu = time.process_time()
    case.optimize(profile, threads=threads, progress=progress, progress_period_s=period_s)
    ended = time.perf_counter()
    cpu = time.process_time() - cpu
    # The solve's wall time on the reports' clock, which starts after optimize()
    # has checked its arguments and set the problem up.
    wall = ended - (clock_start[0] if clock_start else started)
    times = [r[0] for r in reports]
    return {
        "case": case.name,
        "threads": threads,
        "wall_s": wall,
        "cpu_s": cpu,
        "reports": len(reports),
        "new": score(times, [r[4] for r in reports], wall),
        "old": score(times, old_fractions(reports), wall),
        "log": reports,
    }


def fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", help="shell pattern (repeatable)")
    parser.add_argument("--threads", default="4,1", help="comma-separated thread counts")
    parser.add_argument(
        "--period", type=float, default=0.1, help="seconds between reports (default 0.1, the CLI's)"
    )
    parser.add_argument("--json", type=Path, help="also write every report and score here")
    args = parser.parse_args(argv)
    patterns = args.case or DEFAULT_CASES
    cases = [c for c in corpus.CASES if any(fnmatch.fnmatch(c.name, p) for p in patterns)]
    if not cases:
        print(f"no case matches {patterns}", file=sys.stderr)
        return 1
    threads = [int(t) for t in args.threads.split(",")]
    load = os.getloadavg()[0]
    print(
        f"# progress_eta.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"load {load:.2f}, {os.cpu_count()} CPUs"
    )
    header = (
        f"{'case':30s} {'thr':>3s} {'wall s':>6s} {'model':5s} "
        + " ".join(f"{'err@' + str(int(s * 100)) + '%':>8s}" for s in CHECKPOINTS)
        + f" {'median':>6s} {'worst':>6s} {'stall':>6s}"
    )
    print(header)
    results = []
    for case in cases:
        profile = load_profile(case)
        for count in threads:
            result = solve(case, profile, count, args.period)
            results.append(result)
            for model in ("old", "new"):
                s = result[model]
                print(
                    f"{case.name:30s} {count:3d} {result['wall_s']:6.2f} {model:5s} "
                    + " ".join(
                        f"{fmt(s['eta_error_at'].get(str(int(c * 100)) + '%')):>8s}"
                        for c in CHECKPOINTS
                    )
                    + f" {fmt(s['eta_error_median']):>6s} {fmt(s['eta_error_worst']):>6s}"
                    f" {s['stall_share']:6.2f}",
                    flush=True,
                )
    print(
        "err: |ETA - real time left| / real wall time, at the report nearest each share of it; "
        f"median and worst over every report after {int(SCORED_AFTER * 100)} %; stall: the "
        f"longest share of the wall time over which the fraction rose by < {STALL_RISE:.0%}"
    )
    for model in ("old", "new"):
        worst = [
            r[model]["eta_error_worst"] for r in results if r[model]["eta_error_worst"] is not None
        ]
        median = [
            r[model]["eta_error_median"]
            for r in results
            if r[model]["eta_error_median"] is not None
        ]
        stall = [r[model]["stall_share"] for r in results]
        print(
            f"{model}: median of medians {fmt(statistics.median(median) if median else None)}, "
            f"worst {fmt(max(worst) if worst else None)}, longest stall {max(stall):.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"load": load, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

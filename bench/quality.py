"""Frontier quality report: perseus against the exact optimum and against lowtime.

Two questions, before (``refine=False``) and after (``refine=True``) perseus's
slack reclamation and local search:

1. How far is the frontier's own plan for a deadline D (``plan_for(D,
   reclaim=False)``, over an iteration lasting D) from the true optimum? On a seeded
   suite of small imbalanced pipelines, at 6 deadlines spread over the
   frontier, the exact minimum comes from ``perseus.exact.optimal_plan`` (a
   HiGHS MIP of the same problem). The same for the plan solved for the
   deadline itself, ``plan_for(D, tailored=True)`` (issue 23 item 4).
2. How does perseus compare with lowtime 0.3.0, driven as Zeus drives it
   (``bench/run.py``)? On every suite case and on the example profiles, each
   plan on lowtime's replayed frontier is compared with perseus's cheapest
   plan that is at least as fast, both over an iteration as long as the
   lowtime plan (as ``bench/run.py`` compares them).

Plans that finish early draw the blocking power until the iteration ends, so
"cheapest" always means over a common iteration length.

    python bench/quality.py --quick          # about a minute on 2 cores
    python bench/quality.py --quick --no-lowtime   # CI: the MIP gap only, seconds
    python bench/quality.py --json out.json  # full suite, about 3 minutes
    python bench/quality.py --no-lowtime --schedule gpipe   # the suite as GPipe pipelines
    python bench/quality.py --schedule interleaved-1f1b    # even-stage cases, 2 chunks per GPU

Exit status 0 even if a target is missed (this is a report); 1 if a perseus
plan is cheaper than the exact optimum (a bug in one of the two) or a case
crashed. See bench/README.md for the columns.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import run as bench  # noqa: E402  (bench/run.py: lowtime driving, comparison, tables)

UNIT_TIME = bench.UNIT_TIME  # 1 ms for lowtime and for perseus
DEADLINES = 6
BUG_RTOL = 1e-6  # a perseus plan this much below the exact optimum is a bug
TARGET_MEAN_GAP_PCT = 0.05  # issue 9's targets
TARGET_WORST_GAP_PCT = 0.3
ITEM5_MEAN_GAP_PCT = 0.01  # issue 23 item 5's stricter targets
ITEM5_WORST_GAP_PCT = 0.1
SUITE_SEED = 20240603
#: perseus "matches" a lowtime plan within this much energy (%), in this report.
MATCH_TOLERANCE_PCT = 0.1

#: The example profiles compared with lowtime, and their blocking power (W).
EXAMPLES_DIR = BENCH_DIR.parent / "examples"
EXAMPLE_PROFILES = {"small-4stage": 70.0, "gpt3-a100-8stage": 70.0}

# --------------------------------------------------------------------------- the seeded suite

F_MAX = 1410  # MHz
F_LOW = (960, 1110)  # the slowest Pareto option lies in this range, MHz
GRID_STEPS = (15, 30, 45)  # MHz between measured clocks
TIME_NOISE = 0.002  # relative standard deviation of the Gaussian noise on each time
ENERGY_NOISE = 0.003  # ... and on each energy


@dataclass(frozen=True)
class SuiteCase:
    index: int
    stages: int
    microbatches: int
    lowtime_fit: bool  # options drawn so that lowtime's cost model can fit them

    @property
    def label(self) -> str:
        return f"suite{self.index:02d} {self.stages}x{self.microbatches}" + (
            "" if self.lowtime_fit else " 3opt"
        )


# (stages, microbatches, lowtime can fit). lowtime fits a 3-parameter curve and
# needs >= 4 distinct 1 ms durations per (stage, instruction), so groups of those
# cases are redrawn until they have them; cases marked False have at least one
# 3-option group, which lowtime cannot fit: they are compared with the exact optimum only.
_SUITE = [
    (2, 2, True),
    (2, 3, True),
    (2, 4, True),
    (2, 6, True),
    (3, 2, True),
    (3, 3, False),
    (3, 4, True),
    (3, 5, True),
    (3, 6, True),
    (4, 2, True),
    (4, 3, True),
    (4, 4, True),
    (4, 5, False),
    (4, 6, True),
    (2, 5, False),
    (4, 6, True),
]
SUITE = [SuiteCase(i, s, m, fit) for i, (s, m, fit) in enumerate(_SUITE)]
# --schedule interleaved-1f1b: chunks per GPU (the cases with an even stage count).
VIRTUAL_STAGES = 2
QUICK_SUITE = [SUITE[i] for i in (1, 4, 5, 6, 10, 11)]


def _draw_group(
    rng: np.random.Generator, t0: float, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n Pareto-optimal (MHz, s, J) options of one (stage, instruction) with time t0 at F_MAX."""
    for _ in range(1000):
        step = int(rng.choice(GRID_STEPS))
        grid = np.arange(F_MAX - step, rng.uniform(*F_LOW) - 1, -step)
        if len(grid) < n - 1:
            continue
        freq = np.r_[F_MAX, np.sort(rng.choice(grid, n - 1, replace=False))[::-1]]
        x = freq / F_MAX
        memory_share = rng.uniform(0.2, 0.5)
        static, dynamic, gamma = rng.uniform(50, 80), rng.uniform(170, 260), rng.uniform(2.0, 3.0)
        t = t0 * (memory_share + (1 - memory_share) / x) * (1 + rng.normal(0, TIME_NOISE, n))
        e = (static + dynamic * x**gamma) * t * (1 + rng.normal(0, ENERGY_NOISE, n))
        if np.all(np.diff(t) > 0) and np.all(np.diff(e) < 0):  # every option Pareto-optimal
            return freq, t, e
    raise RuntimeError("could not draw a Pareto-optimal option group")


def _lowtime_durations(t: np.ndarray, e: np.ndarray, blocking_power: float) -> int:
    """Distinct 1 ms durations lowtime keeps for these options (it needs 4 to fit its cost curve).

    Mirrors lowtime's ``CandidateExecutionOptions``: effective cost over the
    quantised time, Pareto filter on (real time, cost), one option per duration.
    """
    quant = np.floor(t / UNIT_TIME)
    cost = e - blocking_power * quant * UNIT_TIME
    kept = [i for i in range(len(t)) if not np.any((t < t[i]) & (cost < cost[i]))]
    return len(set(quant[kept]))


def make_profile(case: SuiteCase) -> Any:
    """The case's profile: imbalanced stages, GPU-like time and power curves, seeded noise.

    time(f) = t0 * (a + (1 - a) * f_max / f), a (memory-bound share) in [0.2, 0.5];
    power(f) = static + dynamic * (f / f_max)**gamma, energy = power * time.
    Forward t0 is 10-14 ms, x1.3-1.7 on one or two heavy stages; backward is
    1.8-2.1x its forward. 3-8 options per (stage, instruction) on a 15/30/45 MHz
    grid from 1410 MHz down to about 1000 MHz; blocking power 30-90 W.
    """
    import perseus

    rng = np.random.default_rng([SUITE_SEED, case.index])
    blocking_power = float(rng.uniform(30.0, 90.0))
    heavy = rng.choice(
        case.stages, size=1 if case.stages == 2 else int(rng.integers(1, 3)), replace=False
    )
    groups = [(s, name) for s in range(case.stages) for name in ("forward", "backward")]
    low = 4 if case.lowtime_fit else 3
    counts = {g: int(rng.integers(low, 9)) for g in groups}
    if not case.lowtime_fit:
        counts[groups[int(rng.integers(len(groups)))]] = 3
    records = []
    for s in range(case.stages):
        t_fwd = rng.uniform(10e-3, 14e-3) * (rng.uniform(1.3, 1.7) if s in heavy else 1.0)
        for name, t0 in (("forward", t_fwd), ("backward", t_fwd * rng.uniform(1.8, 2.1))):
            for _ in range(200):
                freq, t, e = _draw_group(rng, t0, counts[(s, name)])
                if not case.lowtime_fit or _lowtime_durations(t, e, blocking_power) >= 4:
                    break
            else:
                raise RuntimeError(f"{case.label}: no option group lowtime can fit")
            records += [(s, name, int(f), float(a), float(b)) for f, a, b in zip(freq, t, e)]
    return perseus.Profile.from_records(records, blocking_power_w=blocking_power)


# --------------------------------------------------------------------------- one case


@dataclass
class LowtimeSide:
    """perseus (one of refine=True/False) against lowtime's replayed frontier."""

    mean_pct: float | None
    worst_pct: float | None
    matched: int  # perseus within +0.1 % at the same or a faster time
    beaten: int  # perseus strictly cheaper at the same or a faster time
    too_fast: int  # lowtime plans faster than perseus's fastest
    # With plan_for(T, tailored=True) at every lowtime plan time T where the frontier's own
    # plan loses (refine=True only; elsewhere the frontier's difference stands): the worst.
    worst_tailored_pct: float | None = None


@dataclass
class CaseReport:
    case: str
    stages: int
    microbatches: int
    computations: int
    options: list[int]  # min, max Pareto options per (stage, instruction)
    blocking_power_w: float
    plans_after: int
    plans_before: int
    perseus_s: float  # refine=True
    perseus_unrefined_s: float
    exact_s: float | None = None
    lowtime_s: float | None = None
    deadlines: list[dict[str, Any]] = field(default_factory=list)
    dominated_after: int = 0  # plans a faster plan matches or beats over their length
    dominated_before: int = 0
    missing_before: int = 0  # deadlines the unrefined frontier cannot meet
    not_proven: int = 0  # exact solves that hit the time limit
    bugs: list[str] = field(default_factory=list)
    lowtime: str = "ran"  # or why not
    lowtime_plans: int | None = None
    lowtime_frontier: int | None = None
    after: LowtimeSide | None = None
    before: LowtimeSide | None = None
    error: str | None = None

    def gaps(self, key: str) -> list[float]:
        return [d[key] for d in self.deadlines if d.get(key) is not None]


def load_example(name: str, stages: int) -> Any:
    """An example profile (the options perseus keeps), cut to its first ``stages`` stages."""
    import perseus

    blocking_power = EXAMPLE_PROFILES[name]
    full = perseus.Profile.from_csv(EXAMPLES_DIR / f"{name}.csv", blocking_power_w=blocking_power)
    if stages == full.num_stages:
        return full
    records = []
    for stage in range(stages):
        for kind in ("forward", "backward"):
            opts = full.options(stage, kind)
            records.extend(
                (stage, kind, int(f), float(t), float(e))
                for f, t, e in zip(opts.frequency_mhz, opts.time_s, opts.energy_j)
            )
    return perseus.Profile.from_records(records, blocking_power_w=blocking_power)


#: Corpus cases (bench/corpus.py) small enough for the exact optimum: coarse clock tables,
#: where the convex model's plans sit furthest from the discrete optimum. The 4 x 8 case's
#: MIPs take 10-110 s each (about 5 minutes for its deadlines), so --quick leaves it out.
CORPUS_CASES = ["a100-coarse-2s5c-2x4", "h100-coarse-3s4c-3x4", "a100-coarse-3s6c-3x6"]
CORPUS_CASES_FULL = [*CORPUS_CASES, "h100-coarse-4s8c-4x8"]


#: Small random profiles where a review found the frontier more than 0.1 % above the
#: exact optimum (bench/data/review/README.md): each with the deadline of that miss.
REVIEW_DIR = Path(__file__).resolve().parent / "data" / "review"


def review_cases(schedule: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, sidecar) of the review's profiles for `schedule`, by name."""
    cases = []
    for csv in sorted(REVIEW_DIR.glob("*.csv")):
        sidecar = json.loads(csv.with_suffix(".json").read_text())
        if sidecar["schedule"] == schedule:
            cases.append((csv.stem, sidecar))
    return cases


def load_review_case(name: str, sidecar: dict[str, Any]) -> Any:
    import perseus

    return perseus.Profile.from_csv(
        REVIEW_DIR / f"{name}.csv", blocking_power_w=sidecar["blocking_power_w"]
    )


def load_corpus_case(name: str) -> Any:
    """A bench corpus case's profile, as ``bench/run.py`` gives it to perseus."""
    import tempfile

    import corpus

    case = corpus.get(name)
    with tempfile.TemporaryDirectory() as tmp:
        return bench.perseus_profile(case, bench.raw_profile(case), Path(tmp))


def _blocking_w(frontier: Any) -> float:
    """Watts the whole pipeline draws while it waits: GPUs x blocking power."""
    return frontier.spec.num_gpus * frontier.blocking_power_w


def _lowtime_side(
    lt_t: np.ndarray, lt_e: np.ndarray, frontier: Any, tailored: bool = False
) -> LowtimeSide:
    out = bench.compare(
        lt_t,
        lt_e,
        np.asarray(frontier.iteration_times_s),
        np.asarray(frontier.energies_j),
        _blocking_w(frontier),
    )
    diffs = np.array([p["diff_pct"] for p in out["points"] if p["diff_pct"] is not None])
    worst_tailored = None
    if tailored and diffs.size:
        with_tailored = []
        for p in out["points"]:
            if p["diff_pct"] is None:
                continue
            diff = p["diff_pct"]
            if diff > 0:  # the frontier's plan loses here: the plan solved for this time
                t = p["lowtime_s"]
                energy = frontier.plan_for(t, tailored=True).energy_at(t)
                diff = min(diff, (energy - p["lowtime_j"]) / p["lowtime_j"] * 100)
            with_tailored.append(diff)
        worst_tailored = float(max(with_tailored))
    return LowtimeSide(
        mean_pct=out["energy_diff_mean_pct"],
        worst_pct=out["energy_diff_worst_pct"],
        matched=int((diffs <= MATCH_TOLERANCE_PCT).sum()),
        beaten=int((diffs < 0).sum()),
        too_fast=out["too_fast_for_perseus"],
        worst_tailored_pct=worst_tailored,
    )


def _dominated(frontier: Any) -> int:
    """Plans that a faster plan of the same frontier matches or beats over an iteration as long as theirs.

    Over a common length, a plan's energy is its effective energy E - W*T plus
    the same W*length for every plan (W: the pipeline's blocking power), so
    the effective energies must strictly fall along the frontier.
    """
    effective = np.asarray(frontier.energies_j) - _blocking_w(frontier) * np.asarray(
        frontier.iteration_times_s
    )
    return int(np.sum(effective[1:] >= np.minimum.accumulate(effective)[:-1]))


def _cheapest_within(
    times: np.ndarray, energies: np.ndarray, deadline: float, blocking_w: float
) -> float | None:
    """Least energy of an iteration lasting `deadline` s among these plans (those done early wait, blocking)."""
    ok = times <= deadline * (1 + bench.TIME_RTOL)
    return (
        float(np.min(energies[ok] + blocking_w * np.maximum(0.0, deadline - times[ok])))
        if ok.any()
        else None
    )


def _in_lowtime_fit(error: BaseException) -> bool:
    """Whether `error` came from lowtime fitting its cost curves (not a bug of the benchmark)."""
    frames = traceback.extract_tb(error.__traceback__)
    return any(Path(f.filename).parts[-2:] == ("lowtime", "cost_model.py") for f in frames)


def run_case(
    label: str,
    profile: Any,
    microbatches: int,
    *,
    exact: bool,
    lowtime: bool = True,
    schedule: str = "1f1b",
    extra_deadlines: tuple[float, ...] = (),
) -> CaseReport:
    # The interleaved schedule runs every suite profile as two chunks per GPU.
    virtual_stages = VIRTUAL_STAGES if schedule == "interleaved-1f1b" else 1
    import perseus

    t = time.perf_counter()
    after = perseus.optimize(
        profile,
        microbatches=microbatches,
        unit_time_s=UNIT_TIME,
        schedule=schedule,
        virtual_stages=virtual_stages,
    )
    t_after = time.perf_counter() - t
    t = time.perf_counter()
    before = perseus.optimize(
        profile,
        microbatches=microbatches,
        unit_time_s=UNIT_TIME,
        refine=False,
        schedule=schedule,
        virtual_stages=virtual_stages,
    )
    t_before = time.perf_counter() - t
    counts = [
        len(profile.options(s, n))
        for s in range(profile.num_stages)
        for n in ("forward", "backward")
    ]
    rep = CaseReport(
        case=label,
        stages=profile.num_stages,
        microbatches=microbatches,
        computations=2 * profile.num_stages * microbatches,
        options=[min(counts), max(counts)],
        blocking_power_w=float(profile.blocking_power_w),
        plans_after=len(after),
        plans_before=len(before),
        perseus_s=t_after,
        perseus_unrefined_s=t_before,
    )
    rep.dominated_after, rep.dominated_before = _dominated(after), _dominated(before)
    bench.log(
        f"  perseus {t_after:.3f} s ({len(after)} plans), unrefined {t_before:.3f} s ({len(before)} plans)"
    )

    # lowtime, driven exactly as bench/run.py drives it, every plan replayed by perseus.
    lt_t = lt_e = None
    if not lowtime:
        rep.lowtime = "not run"
    else:
        import lowtime_reference as ref

        t = time.perf_counter()
        try:
            lt = ref.solve(profile, microbatches=microbatches, unit_time=UNIT_TIME)
        except Exception as error:
            if not _in_lowtime_fit(error):
                raise
            rep.lowtime = (
                "cannot fit"  # e.g. a (stage, instruction) with fewer than 4 distinct durations
            )
            bench.log(f"  lowtime: its cost model cannot fit ({type(error).__name__}: {error})")
        else:
            rep.lowtime_s = time.perf_counter() - t
            if lt.stage_orders != bench.perseus_order(profile.num_stages, microbatches):
                rep.bugs.append("lowtime's and perseus's 1F1B orders differ")
            replay = [
                perseus.evaluate(profile, p.frequencies, microbatches=microbatches)
                for p in lt.plans
            ]
            lt_t = np.array([r.iteration_time_s for r in replay])
            lt_e = np.array([r.energy_j for r in replay])
            front = bench.pareto_points(lt_t, lt_e, _blocking_w(after))
            rep.lowtime_plans, rep.lowtime_frontier = len(lt.plans), int(front.size)
            if front.size:
                rep.after = _lowtime_side(lt_t[front], lt_e[front], after, tailored=True)
                rep.before = _lowtime_side(lt_t[front], lt_e[front], before)
            bench.log(
                f"  lowtime {rep.lowtime_s:.2f} s ({len(lt.plans)} plans, {front.size} on its frontier)"
            )

    if not exact:
        return rep
    from perseus.exact import optimal_plan

    t = time.perf_counter()
    spread = np.linspace(after.iteration_times_s[0], after.iteration_times_s[-1], DEADLINES)
    for deadline in np.sort(np.r_[spread, extra_deadlines]):
        opt = optimal_plan(
            profile,
            microbatches=microbatches,
            deadline_s=float(deadline),
            schedule=schedule,
            virtual_stages=virtual_stages,
        )
        rep.not_proven += not opt.optimal
        row: dict[str, Any] = {
            "deadline_s": float(deadline),
            "exact_j": opt.energy_j,
            "exact_optimal": opt.optimal,
        }
        for key, frontier in (("after", after), ("before", before)):
            try:
                # The frontier's own plan, over an iteration lasting the deadline (this
                # measures the solve; plan_for's default reclaims into the deadline).
                energy = frontier.plan_for(deadline, reclaim=False).energy_at(deadline)
            except ValueError:
                rep.missing_before += key == "before"
                row[f"{key}_j"] = row[f"gap_{key}_pct"] = None
                continue
            row[f"{key}_j"] = energy
            row[f"gap_{key}_pct"] = (energy - opt.energy_j) / opt.energy_j * 100
            if opt.optimal and energy < opt.energy_j * (1 - BUG_RTOL):
                rep.bugs.append(
                    f"{key} plan at {deadline:.6f} s: {energy:.6f} J < exact {opt.energy_j:.6f} J"
                )
        # What plan_for(D) gives by default: the frontier plans around D fitted to it.
        fitted = after.plan_for(deadline).energy_at(deadline)
        row["fitted_j"] = fitted
        row["gap_fitted_pct"] = (fitted - opt.energy_j) / opt.energy_j * 100
        if opt.optimal and fitted < opt.energy_j * (1 - BUG_RTOL):
            rep.bugs.append(
                f"fitted plan at {deadline:.6f} s: {fitted:.6f} J < exact {opt.energy_j:.6f} J"
            )
        # The plan solved for the deadline itself (issue 23 item 4).
        tailored = after.plan_for(deadline, tailored=True).energy_at(deadline)
        row["tailored_j"] = tailored
        row["gap_tailored_pct"] = (tailored - opt.energy_j) / opt.energy_j * 100
        if opt.optimal and tailored < opt.energy_j * (1 - BUG_RTOL):
            rep.bugs.append(
                f"tailored plan at {deadline:.6f} s: {tailored:.6f} J < exact {opt.energy_j:.6f} J"
            )
        w = _blocking_w(after)
        cheapest = _cheapest_within(
            np.asarray(after.iteration_times_s), np.asarray(after.energies_j), deadline, w
        )
        row["gap_cheapest_pct"] = (cheapest - opt.energy_j) / opt.energy_j * 100
        lt_best = None if lt_t is None else _cheapest_within(lt_t, lt_e, deadline, w)
        row["lowtime_j"] = lt_best
        row["gap_lowtime_pct"] = (
            None if lt_best is None else (lt_best - opt.energy_j) / opt.energy_j * 100
        )
        rep.deadlines.append(row)
    rep.exact_s = time.perf_counter() - t
    bench.log(f"  exact {rep.exact_s:.2f} s ({DEADLINES} deadlines)")
    return rep


# --------------------------------------------------------------------------- output


def _stat(values: list[float], how: str) -> str:
    if not values:
        return "-"
    return f"{(np.mean(values) if how == 'mean' else np.max(values)):+.3f}"


def _share(n: int, total: int | None) -> str:
    return "-" if not total else f"{n}/{total}"


def print_exact_table(reports: list[CaseReport]) -> None:
    header = [
        "case",
        "opts",
        "Pb W",
        "plans a/b",
        "mean after",
        "worst after",
        "mean fitted",
        "worst fitted",
        "mean tailored",
        "worst tailored",
        "mean before",
        "worst before",
        "missing b",
        "mean lt",
        "worst lt",
        "exact s",
    ]
    rows = []
    for r in reports:
        if not r.deadlines:
            continue
        lt_gaps = r.gaps("gap_lowtime_pct")
        lt_missing = sum(d["gap_lowtime_pct"] is None for d in r.deadlines)
        rows.append(
            [
                r.case,
                f"{r.options[0]}-{r.options[1]}",
                f"{r.blocking_power_w:.0f}",
                f"{r.plans_after}/{r.plans_before}",
                _stat(r.gaps("gap_after_pct"), "mean"),
                _stat(r.gaps("gap_after_pct"), "max"),
                _stat(r.gaps("gap_fitted_pct"), "mean"),
                _stat(r.gaps("gap_fitted_pct"), "max"),
                _stat(r.gaps("gap_tailored_pct"), "mean"),
                _stat(r.gaps("gap_tailored_pct"), "max"),
                _stat(r.gaps("gap_before_pct"), "mean"),
                _stat(r.gaps("gap_before_pct"), "max"),
                f"{r.missing_before}/{len(r.deadlines)}",
                _stat(lt_gaps, "mean")
                + (f" ({lt_missing} miss)" if lt_missing and lt_gaps else ""),
                _stat(lt_gaps, "max"),
                f"{r.exact_s:.2f}",
            ]
        )
    print(
        f"Gap to the exact optimum, % ((perseus - exact) / exact), energy of an iteration lasting the deadline, "
        f"at {DEADLINES} deadlines from the fastest to the slowest refined plan"
    )
    print(bench.table(rows, header))
    print(
        "after = refine=True (its own plan, plan_for(D, reclaim=False)), fitted = plan_for(D), "
        "tailored = plan_for(D, tailored=True), before = refine=False (plain "
        "Phillips-Dessouky plans); missing b = deadlines the "
        "unrefined frontier cannot meet; lt = lowtime's cheapest replayed plan within the deadline, for context."
    )


def print_lowtime_table(reports: list[CaseReport]) -> None:
    header = [
        "case",
        "plans lt",
        "plans a/b",
        "dom a/b",
        "mean after",
        "worst after",
        "match/beat after",
        "mean before",
        "worst before",
        "match/beat before",
        "too fast a/b",
        "perseus s a/b",
        "lowtime s",
    ]
    rows = []
    for r in reports:
        if r.after is None or r.before is None:
            rows.append([r.case, r.lowtime if r.error is None else "error"] + ["-"] * 11)
            continue
        a, b = r.after, r.before
        rows.append(
            [
                r.case,
                f"{r.lowtime_plans}/{r.lowtime_frontier}",
                f"{r.plans_after}/{r.plans_before}",
                f"{r.dominated_after}/{r.dominated_before}",
                bench.fmt(a.mean_pct, "+.3f"),
                bench.fmt(a.worst_pct, "+.3f"),
                f"{_share(a.matched, r.lowtime_frontier)} {_share(a.beaten, r.lowtime_frontier)}",
                bench.fmt(b.mean_pct, "+.3f"),
                bench.fmt(b.worst_pct, "+.3f"),
                f"{_share(b.matched, r.lowtime_frontier)} {_share(b.beaten, r.lowtime_frontier)}",
                f"{a.too_fast}/{b.too_fast}",
                f"{r.perseus_s:.3f}/{r.perseus_unrefined_s:.3f}",
                bench.fmt(r.lowtime_s, ".2f"),
            ]
        )
    print(
        "Energy difference to lowtime, % ((perseus - lowtime) / lowtime), per plan on lowtime's replayed frontier, "
        "against perseus's cheapest plan at least as fast, both over an iteration as long as the lowtime plan"
    )
    print(bench.table(rows, header))
    print(
        f"plans lt = lowtime iterations / plans on its replayed frontier; plans a/b = perseus's plans after/"
        "before refinement; dom = those a faster plan of the same frontier matches or beats over their length; "
        "match = perseus within "
        f"+{MATCH_TOLERANCE_PCT} %, beat = strictly cheaper; too fast = lowtime plans faster than "
        "perseus's fastest (after/before)."
    )


def summarise(reports: list[CaseReport], walls: dict[str, float]) -> dict[str, Any]:
    """Print the summary and the targets; return them for the JSON."""
    done = [r for r in reports if r.error is None]
    gaps = {
        k: [g for r in done for g in r.gaps(f"gap_{k}_pct")]
        for k in ("after", "fitted", "tailored", "before", "lowtime")
    }
    points = sum(len(r.deadlines) for r in done)
    missing = sum(r.missing_before for r in done)
    vs = [r for r in done if r.after is not None]
    summary: dict[str, Any] = {
        "deadlines": points,
        "missing_before": missing,
        "not_proven": sum(r.not_proven for r in done),
        "dominated_after": sum(r.dominated_after for r in done),
        "dominated_before": sum(r.dominated_before for r in done),
        "plans_after": sum(r.plans_after for r in done),
    }
    print(f"\nSummary ({len(done)} cases, {points} exact deadlines, {len(vs)} cases with lowtime)")
    for key, name in (
        ("after", "after  (refine=True) "),
        ("fitted", "plan_for(D), fitted  "),
        ("tailored", "plan_for(tailored=True)"),
        ("before", "before (refine=False)"),
        ("lowtime", "lowtime              "),
    ):
        g = gaps[key]
        summary[f"gap_{key}_mean_pct"] = float(np.mean(g)) if g else None
        summary[f"gap_{key}_worst_pct"] = float(np.max(g)) if g else None
        extra = ""
        if key == "before" and missing:
            extra = f"   ({missing}/{points} deadlines unmet, left out)"
        if key == "lowtime" and len(g) < points:
            extra = f"   ({points - len(g)}/{points} deadlines without a lowtime plan or lowtime run, left out)"
        print(
            f"  gap to exact, {name}: mean {_stat(g, 'mean')} %, worst {_stat(g, 'max')} %{extra}"
        )
    dominated = summary["dominated_after"]
    if dominated:
        g = [g for r in done for g in r.gaps("gap_cheapest_pct")]
        summary["gap_cheapest_mean_pct"], summary["gap_cheapest_worst_pct"] = (
            float(np.mean(g)),
            float(np.max(g)),
        )
        print(
            f"  {dominated}/{summary['plans_after']} refined plans are dominated (a faster plan costs no more over "
            f"their length); with the cheapest plan within each deadline instead of plan_for(D): mean "
            f"{_stat(g, 'mean')} %, "
            f"worst {_stat(g, 'max')} %"
        )
    if summary["not_proven"]:
        print(f"  {summary['not_proven']} exact solves hit the time limit (not proven optimal)")
    for key in ("after", "before"):
        sides = [getattr(r, key) for r in vs]
        means = [s.mean_pct for s in sides if s.mean_pct is not None]
        worst = [s.worst_pct for s in sides if s.worst_pct is not None]
        total = sum(r.lowtime_frontier or 0 for r in vs)
        matched, beaten = sum(s.matched for s in sides), sum(s.beaten for s in sides)
        too_fast = sum(s.too_fast for s in sides)
        summary[f"lowtime_{key}"] = {
            "mean_of_case_means_pct": float(np.mean(means)) if means else None,
            "worst_pct": float(np.max(worst)) if worst else None,
            "points": total,
            "matched": matched,
            "beaten": beaten,
            "too_fast": too_fast,
        }
        print(
            f"  vs lowtime, {key:6}: mean of case means {_stat(means, 'mean')} %, worst {_stat(worst, 'max')} %, "
            f"matched {matched}/{total} ({100 * matched / max(total, 1):.1f} %), "
            f"beaten {beaten}/{total} ({100 * beaten / max(total, 1):.1f} %), too fast for perseus {too_fast}"
        )
    tailored_worst = [
        r.after.worst_tailored_pct for r in vs if r.after.worst_tailored_pct is not None
    ]
    summary["lowtime_after"]["worst_tailored_pct"] = (
        float(np.max(tailored_worst)) if tailored_worst else None
    )
    if tailored_worst:
        print(
            f"  vs lowtime, after, with plan_for(T, tailored=True) where the frontier's plan loses: "
            f"worst {_stat(tailored_worst, 'max')} %"
        )
    print("  wall: " + ", ".join(f"{k} {v:.1f} s" for k, v in walls.items()))

    bugs = [f"{r.case}: {b}" for r in reports for b in r.bugs]
    errors = [r for r in reports if r.error is not None]
    after_means = [r.after.mean_pct for r in vs if r.after.mean_pct is not None]
    targets = [
        ("no perseus plan below the exact optimum", not bugs, None),
        (
            f"mean gap to exact <= {TARGET_MEAN_GAP_PCT} %",
            bool(gaps["after"]) and np.mean(gaps["after"]) <= TARGET_MEAN_GAP_PCT,
            _stat(gaps["after"], "mean"),
        ),
        (
            f"worst gap to exact <= {TARGET_WORST_GAP_PCT} %",
            bool(gaps["after"]) and np.max(gaps["after"]) <= TARGET_WORST_GAP_PCT,
            _stat(gaps["after"], "max"),
        ),
        (
            f"tailored plans (plan_for(d, tailored=True)): mean gap to exact <= {TARGET_MEAN_GAP_PCT} %",
            bool(gaps["tailored"]) and np.mean(gaps["tailored"]) <= TARGET_MEAN_GAP_PCT,
            _stat(gaps["tailored"], "mean"),
        ),
        (
            f"tailored plans: worst gap to exact <= {TARGET_WORST_GAP_PCT} %",
            bool(gaps["tailored"]) and np.max(gaps["tailored"]) <= TARGET_WORST_GAP_PCT,
            _stat(gaps["tailored"], "max"),
        ),
        *[
            (
                f"issue 23 item 5, {name}: {how} gap to exact <= {limit} %",
                bool(gaps[key]) and stat(gaps[key]) <= limit,
                _stat(gaps[key], "mean" if how == "mean" else "max"),
            )
            for key, name in (("after", "frontier plans"), ("fitted", "plan_for(D)"))
            for how, limit, stat in (
                ("mean", ITEM5_MEAN_GAP_PCT, np.mean),
                ("worst", ITEM5_WORST_GAP_PCT, np.max),
            )
        ],
        (
            "no dominated plan on the refined frontier",
            not summary["dominated_after"],
            f"{summary['dominated_after']} dominated",
        ),
        (
            "at least as fast as every lowtime frontier plan",
            all(r.after.too_fast == 0 for r in vs),
            f"{sum(r.after.too_fast for r in vs)} too fast",
        ),
        (
            "never worse than lowtime by > 0.01 %, with tailored plans where the frontier loses",
            bool(tailored_worst) and max(tailored_worst) <= 0.01,
            _stat(tailored_worst, "max"),
        ),
        (
            "cheaper than lowtime on average, every case",
            bool(after_means) and max(after_means) < 0,
            f"highest case mean {_stat(after_means, 'max')} %",
        ),
    ]
    if not vs:  # no lowtime run (--no-lowtime): its two targets do not apply
        targets = targets[:-3]
    print("\nTargets (after refinement)")
    for name, ok, value in targets:
        verdict = ("PASS" if ok else "FAIL") if value is None else ("PASS" if ok else "MISS")
        print(f"  {verdict}  {name}" + (f"  ({value})" if value else ""))
    for b in bugs:
        print(f"BUG {b}")
    for r in errors:
        print(f"ERROR {r.case}: {r.error.splitlines()[-1]}")
    summary["targets"] = {name: bool(ok) for name, ok, _ in targets}
    summary["bugs"] = bugs
    return summary


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{len(QUICK_SUITE)} suite cases, fewer examples"
    )
    parser.add_argument("--json", metavar="OUT", help="also write every number as JSON")
    parser.add_argument(
        "--no-lowtime",
        action="store_true",
        help="only the gap to the exact optimum: no lowtime runs and no example profiles (CI)",
    )
    parser.add_argument(
        "--schedule",
        choices=("1f1b", "gpipe", "interleaved-1f1b"),
        default="1f1b",
        help=(
            "the suite's schedule (lowtime's Zeus driver builds 1F1B only: the others imply "
            f"--no-lowtime); interleaved-1f1b runs the cases with an even stage count as "
            f"{VIRTUAL_STAGES} chunks per GPU"
        ),
    )
    args = parser.parse_args(argv)
    if args.schedule != "1f1b":
        args.no_lowtime = True

    started = time.perf_counter()
    # (label, stages, microbatches, how to build the profile, compare with the exact optimum?)
    jobs: list[tuple[str, int, int, Any, bool]] = [
        (c.label, c.stages, c.microbatches, lambda c=c: make_profile(c), True)
        for c in (QUICK_SUITE if args.quick else SUITE)
        if args.schedule != "interleaved-1f1b" or c.stages % VIRTUAL_STAGES == 0
    ]
    if args.schedule == "1f1b":  # corpus cases are 1F1B pipelines
        import corpus

        jobs += [
            (name, c.num_gpus, c.microbatches, lambda name=name: load_corpus_case(name), True)
            for name in (CORPUS_CASES if args.quick else CORPUS_CASES_FULL)
            for c in [corpus.get(name)]
        ]
    review = (
        [] if args.quick or args.schedule == "interleaved-1f1b" else review_cases(args.schedule)
    )
    examples = [("small-4stage", 4, 8), ("small-4stage", 4, 16), ("gpt3-a100-8stage", 8, 8)] + (
        [] if args.quick else [("gpt3-a100-8stage", 8, 32)]
    )
    jobs += [
        (f"{name} {s}x{m}", s, m, lambda name=name, s=s: load_example(name, s), False)
        for name, s, m in examples
        if not args.no_lowtime  # the examples are compared with lowtime only
    ]

    # The review's cases: the exact optimum only (their deadline added to the spread).
    extra: dict[str, tuple[float, ...]] = {}
    for name, sidecar in review:
        label = f"review {name}"
        extra[label] = (float(sidecar["deadline_s"]),)
        stages = int(name.split("s", 1)[0])
        jobs.append(
            (label, stages, int(sidecar["microbatches"]),
             lambda name=name, sidecar=sidecar: load_review_case(name, sidecar), True)
        )  # fmt: skip

    reports = []
    for label, stages, m, load, exact in jobs:
        bench.log(label)
        try:
            reports.append(
                run_case(
                    label,
                    load(),
                    m,
                    exact=exact,
                    lowtime=not args.no_lowtime and not label.startswith("review "),
                    schedule=args.schedule,
                    extra_deadlines=extra.get(label, ()),
                )
            )
        except Exception:  # noqa: BLE001 - report it, go on, fail at the end
            text = traceback.format_exc()
            bench.log(text)
            reports.append(
                CaseReport(
                    label, stages, m, 2 * stages * m, [0, 0], 0.0, 0, 0, 0.0, 0.0, error=text
                )
            )

    print()
    print_exact_table(reports)
    if not args.no_lowtime:
        print()
        print_lowtime_table(reports)
    ok = [r for r in reports if r.error is None]
    walls = {
        "perseus refine=True": sum(r.perseus_s for r in ok),
        "refine=False": sum(r.perseus_unrefined_s for r in ok),
        "exact": sum(r.exact_s or 0.0 for r in ok),
        "lowtime": sum(r.lowtime_s or 0.0 for r in ok),
        "total": time.perf_counter() - started,
    }
    summary = summarise(reports, walls)

    if args.json:
        import lowtime_reference as ref
        import perseus

        payload = {
            "machine": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
            },
            "versions": {"perseus": perseus.__version__, "lowtime": ref.lowtime_version()},
            "mode": "quick" if args.quick else "full",
            "schedule": args.schedule,
            "virtual_stages": VIRTUAL_STAGES if args.schedule == "interleaved-1f1b" else 1,
            "suite_seed": SUITE_SEED,
            "unit_time_s": UNIT_TIME,
            "summary": summary,
            "walls_s": walls,
            "cases": [asdict(r) for r in reports],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        bench.log(f"wrote {args.json}")
    return 1 if summary["bugs"] or any(r.error for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())

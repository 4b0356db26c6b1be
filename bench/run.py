"""Run the benchmark corpus: perseus against lowtime 0.3.0 (driven as Zeus drives it).

For every case of ``bench/corpus.py`` the same process

1. reads the profile's raw rows (every row of the CSV) and builds the case's
   DAG (``bench/replay.py``: data dependencies written out here, each GPU's
   order from ``perseus.pipeline_order``);
2. solves with ``perseus.optimize`` (median wall and process CPU time of
   ``--repeat`` runs; steps, cuts, plans, phase times; on user-scale cases the
   size of ``frontier.save``'s file)
   on ``perseus.Profile.from_csv(path, blocking_power_w=W)``;
3. solves with lowtime where the case says so (1F1B only), on the raw rows,
   exactly as Zeus's ``run_optimization.py`` reads the CSV;
4. replays every plan of both with the benchmark's own judge, checks the
   replay against the numbers perseus reports for its own plans (a mismatch
   fails the run), and compares energies plan by plan on lowtime's replayed
   frontier.

It then fits perseus's wall- and CPU-time scaling over the ladders, measures
peak memory per computation in fresh subprocesses (user-scale cases in both
refine modes), and prints a MISS line for each issue-9 or issue-23 target
missed.

    python bench/run.py --quick                  # CI: well under 2 minutes on 2 cores
    python bench/run.py                          # the whole corpus (long: lowtime)
    python bench/run.py --list                   # the corpus
    python bench/run.py --case 'sosp24-gpt3-*' --json out.json
    python bench/run.py --profile my.csv --blocking-power 70 --sizes 4x8,8x32
    python bench/run.py --case 'user-*' --no-lowtime --repeat 3 --repeat-below 1e9   # issue 23
    python bench/run.py --case 'h100-8-8x24' --no-lowtime --no-memory --dense  # issue 23 item 4

Exit status: 0 when every case ran and every replay matched (missed targets
included: this is a report), 1 on a crash or a replay mismatch. See
bench/README.md for the columns.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import corpus  # noqa: E402
from replay import RawProfile, Replayer  # noqa: E402

UNIT_TIME = 1e-3  # s, Zeus's default (bench/quality.py uses it)
TIME_RTOL = 1e-9  # "at least as fast" allows this relative float slack
#: A lowtime frontier plan is "unmatched" when perseus is worse by more than this (%).
MATCH_TOLERANCE_PCT = corpus.ENERGY_TARGET_PCT
#: The judge's replay and perseus's reported numbers must agree to this relative error.
REPLAY_RTOL = 1e-9
#: A lowtime run shorter than this (s) is repeated up to --lowtime-repeat times; longer runs once.
LOWTIME_REPEAT_BELOW_S = 2.0
#: A perseus run this long (s) or longer is not repeated (the median is of the runs made).
PERSEUS_REPEAT_BELOW_S = 10.0  # --repeat-below's default
#: Issue 23's user-scale cases (corpus names ``user-*``): their saved frontier file and their
#: peak memory in both refine modes are measured; memory at this many computations or more
#: must stay within USER_MEMORY_TARGET_MIB, and CPU time over a ladder of them grows at most
#: like n^USER_CPU_EXPONENT_TARGET.
USER_SCALE_PREFIX = "user-"
USER_MEMORY_AT_COMPUTATIONS = 32768
USER_MEMORY_TARGET_MIB = 1024.0
USER_CPU_EXPONENT_TARGET = 1.2


def is_user_scale(case: corpus.Case) -> bool:
    return case.name.startswith(USER_SCALE_PREFIX)


#: lowtime's fastest plan this much slower than the all-fastest plan is reported (NOTE).
LOWTIME_SHORT_RTOL = 0.01
#: Ad-hoc cases (--profile) run lowtime up to this many computations unless --lowtime-big.
ADHOC_LOWTIME_MAX_COMPUTATIONS = 600


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- profiles

_RAW: dict[tuple[str, Optional[tuple[int, ...]]], RawProfile] = {}


def raw_profile(case: corpus.Case) -> RawProfile:
    """Every measured row of the case's CSV (its stage subset), read once per run."""
    key = (str(case.path), case.stages)
    if key not in _RAW:
        if not case.path.exists():
            raise FileNotFoundError(f"{case.name}: profile {case.path} not found")
        _RAW[key] = RawProfile.from_csv(case.path, case.stages)
    return _RAW[key]


def load_perseus_profile(path: Path, blocking_power_w: float) -> Any:
    """``perseus.Profile.from_csv`` under either keyword (``blocking_power_w`` or the older one)."""
    import perseus

    params = inspect.signature(perseus.Profile.from_csv).parameters
    if "blocking_power_w" in params:
        return perseus.Profile.from_csv(path, blocking_power_w=blocking_power_w)
    return perseus.Profile.from_csv(path, blocking_power_w=blocking_power_w)


def perseus_profile(case: corpus.Case, raw: RawProfile, tmp: Path) -> Any:
    """What perseus gets: ``Profile.from_csv`` of the case's CSV (a subset written out first)."""
    path = case.path
    if case.stages is not None:
        path = raw.write_csv(tmp / f"{case.name}.csv")
    return load_perseus_profile(path, case.blocking_power_w)


# --------------------------------------------------------------------------- comparison


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
    tolerance_pct: float = MATCH_TOLERANCE_PCT,
) -> dict[str, Any]:
    """For each lowtime point, perseus's cheapest plan at least as fast.

    Both are measured over an iteration as long as the lowtime plan: the
    perseus plan's energy plus ``blocking_w`` for the time it waits,
    ``energy_at(T_lt) = E_p + blocking_w * (T_lt - T_p)``. ``p_times`` must be
    sorted (fastest first).
    """
    p_times = np.asarray(p_times, dtype=float)
    p_effective = np.asarray(p_energies, dtype=float) - blocking_w * p_times
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
    # Split at perseus's slowest plan: beyond it perseus can only wait at blocking power.
    slowest = float(p_times[-1]) if p_times.size else -math.inf
    compared = [p for p in points if p["diff_pct"] is not None]
    beyond = np.asarray([p["lowtime_s"] > slowest * (1 + TIME_RTOL) for p in compared], dtype=bool)
    within = d[~beyond] if d.size else d
    return {
        "points": points,
        "energy_diff_worst_pct": float(d.max()) if d.size else None,
        "energy_diff_mean_pct": float(d.mean()) if d.size else None,
        "energy_diff_best_pct": float(d.min()) if d.size else None,
        "energy_diff_worst_within_pct": float(within.max()) if within.size else None,
        "unmatched": int((d > tolerance_pct).sum()) + too_fast,
        "unmatched_beyond_perseus_slowest": int((d[beyond] > tolerance_pct).sum()) if d.size else 0,
        "too_fast_for_perseus": too_fast,
    }


def perseus_order(stages: int, microbatches: int) -> list[list[tuple[str, int]]]:
    """perseus's 1F1B order per stage as (instruction, microbatch), lowtime's format."""
    from perseus import pipeline_order

    return [
        [(ins, mb) for ins, _chunk, mb in gpu]
        for gpu in pipeline_order("1f1b", stages, microbatches)
    ]


#: Issue 23 item 4 (--dense): at a deadline inside the frontier's span, the next-faster plan
#: (blocking power for the gap) may use at most this much more energy than a plan solved for
#: that deadline, in %.
DENSE_LOSS_TARGET_PCT = 0.01
#: --dense: plan times sampled for whether plan_for one ulp earlier costs less.
DENSE_MONOTONE_SAMPLES = 200
#: --dense: local-search work (cpp/solver_options.hpp's work units) per deadline.
DENSE_SEARCH_WORK = 200_000
#: --dense: deadlines (evenly strided through the unit grid) at which the tailored plan,
#: plan_for(d, tailored=True), is measured; its reference searches 4x its own work on top.
DENSE_TAILORED_DEADLINES = 48
DENSE_TAILORED_REFERENCE_FACTOR = 4


def dense_frontier_loss(frontier: Any, profile: Any, case: corpus.Case) -> dict[str, Any]:
    """Item 4 of issue 23: at every deadline one unit apart inside the frontier's span, the
    energy of an iteration that long run with the next-faster frontier plan (paying blocking
    power for the gap) against a plan solved for that deadline (that plan reclaimed into it,
    then a local search at it; never worse than the plan itself), as % of the solved one.
    The same for the plan a user gets by default, ``plan_for(d)``: the frontier plans nearest
    the deadline fitted to it (through the API, as a user calls it); the reference is then
    the best of the solved plan, that one and a local search from that one.

    Then the plan a user gets for that deadline with ``plan_for(d, tailored=True)``, at
    DENSE_TAILORED_DEADLINES of those deadlines, against a stronger reference: the better of
    the solved plan above and the tailored plan searched again with
    DENSE_TAILORED_REFERENCE_FACTOR times its work."""
    from perseus._tailored import TAILORED_SEARCH_WORK
    from perseus.optimize import _setup, _spec

    spec = _spec(profile, case.microbatches, case.schedule, case.virtual_stages)
    problem, table, pipeline = _setup(profile, spec)
    group = np.asarray(pipeline.group, dtype=np.int64)
    offsets = np.asarray(table.offsets, dtype=np.int64)
    option_mhz = np.asarray(table.frequency_mhz, dtype=np.int64)
    option_group = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    key = option_group * 1_000_000 + option_mhz  # (group, MHz) -> global option id
    order = np.argsort(key, kind="stable")
    t = np.asarray(frontier.iteration_times_s, dtype=float)
    e = np.asarray(frontier.energies_j, dtype=float)
    blocking_w = float(profile.blocking_power_w) * spec.num_gpus
    deadlines = np.arange(t[0] + case.unit_time_s, t[-1], case.unit_time_s)
    losses = np.zeros(deadlines.size)
    own: dict[int, float] = {}  # the same loss at plan k's own time

    def choice_of(plan: Any, what: str) -> np.ndarray:
        """The plan's clocks as the core's option indices, one row."""
        wanted = group * 1_000_000 + np.asarray(plan.frequencies_mhz, dtype=np.int64)
        at = order[np.searchsorted(key, wanted, sorter=order)]
        if not np.array_equal(key[at], wanted):
            raise AssertionError(f"{what} has a clock its profile does not offer")
        return (at - offsets[group]).astype(np.uint16)[None, :]

    def searched_j(choice: np.ndarray, deadline: float) -> float:
        """Energy over the deadline of a local search from `choice` (inf if it misses it)."""
        st, se, _ = problem.local_search(choice, deadline, DENSE_SEARCH_WORK)
        if st[0] > deadline * (1 + 1e-12):
            return math.inf
        return float(se[0]) + blocking_w * (deadline - float(st[0]))

    def loss(k: int, deadline: float) -> float:
        used = e[k] + blocking_w * (deadline - t[k])
        _, _, reclaimed = problem.reclaim(choice_of(frontier[k], f"plan {k}"), deadline)
        solved = min(used, searched_j(reclaimed, deadline))
        return (used - solved) / solved * 100

    solved_j = np.zeros(deadlines.size)
    default_losses = np.zeros(deadlines.size)
    # How long plan_for(d) idles before the deadline, in units: item 4 asks for a plan
    # within one unit of every deadline, or a loss of at most DENSE_LOSS_TARGET_PCT.
    default_idle_units = np.zeros(deadlines.size)
    default_cpu_s = []
    for j, deadline in enumerate(deadlines):
        k = int(np.searchsorted(t, deadline, side="right")) - 1
        losses[j] = loss(k, float(deadline))
        solved_j[j] = (e[k] + blocking_w * (deadline - t[k])) / (1 + losses[j] / 100)
        started = time.process_time()
        default = frontier.plan_for(float(deadline))
        default_cpu_s.append(time.process_time() - started)
        got = default.energy_at(float(deadline))
        default_idle_units[j] = (deadline - default.iteration_time_s) / case.unit_time_s
        # The reference: the best of the solved plan, plan_for's and a search from plan_for's.
        from_default = searched_j(choice_of(default, "plan_for's plan"), float(deadline))
        solved_j[j] = min(solved_j[j], got, from_default)
        default_losses[j] = (got - solved_j[j]) / solved_j[j] * 100
        if k not in own:
            own[k] = loss(k, float(t[k]))
    worst = int(np.argmax(losses)) if losses.size else -1

    # Whether energy_at(d) can fall as d tightens: at sampled plan times, plan_for one ulp
    # earlier against plan_for at the plan's time (neither is an exact optimum).
    tighter_cheaper = []
    for k in range(1, t.size, max(1, t.size // DENSE_MONOTONE_SAMPLES)):
        at_j = frontier.plan_for(float(t[k])).energy_at(float(t[k]))
        earlier = float(np.nextafter(t[k], 0))
        earlier_j = frontier.plan_for(earlier).energy_at(float(t[k]))
        tighter_cheaper.append((at_j - earlier_j) / earlier_j * 100)
    tc = np.asarray(tighter_cheaper)
    tc[tc <= 1e-9] = 0.0  # replay rounding is not a cheaper plan

    # The tailored plan at a stride of the same deadlines.
    picks = np.unique(np.linspace(0, deadlines.size - 1, DENSE_TAILORED_DEADLINES).astype(int))
    tailored_losses, tailored_s = [], []
    for j in picks if deadlines.size else []:
        deadline = float(deadlines[j])
        started = time.process_time()
        plan = frontier.plan_for(deadline, tailored=True)
        tailored_s.append(time.process_time() - started)
        got = plan.energy_at(deadline)
        st, se, _ = problem.local_search(
            choice_of(plan, "the tailored plan"),
            deadline,
            DENSE_TAILORED_REFERENCE_FACTOR * TAILORED_SEARCH_WORK,
        )
        reference = min(solved_j[j], got)
        if st[0] <= deadline * (1 + 1e-12):
            reference = min(reference, float(se[0]) + blocking_w * (deadline - float(st[0])))
        tailored_losses.append((got - reference) / reference * 100)
    tl = np.asarray(tailored_losses)
    dl = default_losses
    return {
        "default_over": int(np.sum(dl > DENSE_LOSS_TARGET_PCT)),
        "default_worst_pct": float(dl.max()) if dl.size else 0.0,
        "default_mean_pct": float(dl.mean()) if dl.size else 0.0,
        "default_cpu_s_median": float(np.median(default_cpu_s)) if default_cpu_s else 0.0,
        # Deadlines where plan_for(d) idles more than one unit, the most it idles (units),
        # and those where it both idles more than a unit and loses more than the target:
        # where item 4 is not met.
        "default_idle_over_unit": int(np.sum(default_idle_units > 1 + 1e-9)),
        "default_idle_max_units": float(default_idle_units.max()) if dl.size else 0.0,
        "default_unmet": int(
            np.sum((default_idle_units > 1 + 1e-9) & (dl > DENSE_LOSS_TARGET_PCT))
        ),
        # Sampled plan times where plan_for one ulp earlier is cheaper over the plan's time.
        "monotone_samples": int(tc.size),
        "tighter_cheaper": int(np.sum(tc > 0)),
        "tighter_cheaper_worst_pct": float(tc.max()) if tc.size else 0.0,
        "tailored_deadlines": int(tl.size),
        "tailored_worst_pct": float(tl.max()) if tl.size else 0.0,
        "tailored_mean_pct": float(tl.mean()) if tl.size else 0.0,
        "tailored_over": int(np.sum(tl > DENSE_LOSS_TARGET_PCT)),
        "tailored_cpu_s_median": float(np.median(tailored_s)) if tailored_s else 0.0,
        # The solved plan also beats frontier plans at their own times by this much: the
        # frontier's distance from a local optimum, not its density.
        "own_worst_pct": max(own.values()) if own else 0.0,
        "own_mean_pct": float(np.mean(list(own.values()))) if own else 0.0,
        "deadlines": int(deadlines.size),
        "worst_pct": float(losses[worst]) if worst >= 0 else 0.0,
        "worst_at_s": float(deadlines[worst]) if worst >= 0 else None,
        "mean_pct": float(losses.mean()) if losses.size else 0.0,
        "over": int(np.sum(losses > DENSE_LOSS_TARGET_PCT)),
    }


def replay_frontier(
    frontier: Any, judge: Replayer, chunk: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """The judge's (time s, energy J) of every perseus plan, ``chunk`` plans at a time, so
    that a user-scale frontier (10^4 plans x 3 * 10^4 computations) never sits in one matrix."""
    plans = list(frontier)
    times, energies = [], []
    for start in range(0, len(plans), chunk):
        t, e = judge.evaluate(perseus_plan_matrix(plans[start : start + chunk], frontier, judge))
        times.append(t)
        energies.append(e)
    return np.concatenate(times), np.concatenate(energies)


def perseus_plan_matrix(plans: list[Any], frontier: Any, judge: Replayer) -> np.ndarray:
    """MHz of ``plans`` (of ``frontier``) per judge computation id, shape (plans, computations).

    Fast path: ``plan.frequencies_mhz`` reordered through ``spec.computation_id``,
    checked against ``plan.frequency_map_mhz`` on the first plan; otherwise the dicts.
    """
    keys = judge.keys()
    spec = getattr(frontier, "spec", None)
    if (
        spec is not None
        and hasattr(spec, "computation_id")
        and hasattr(plans[0], "frequencies_mhz")
    ):
        try:
            perm = np.asarray([spec.computation_id(s, k, m) for s, k, m in keys], dtype=np.int64)
            mat = np.stack([np.asarray(p.frequencies_mhz, dtype=np.int64)[perm] for p in plans])
            if np.array_equal(mat[0], judge.plan_matrix([plans[0].frequency_map_mhz])[0]):
                return mat
        except (ValueError, IndexError, TypeError):
            pass
    return judge.plan_matrix(p.frequency_map_mhz for p in plans)


# --------------------------------------------------------------------------- lowtime


def _lowtime_cache_key(case: corpus.Case, raw: RawProfile, source_kind: str) -> str:
    import lowtime_reference as ref

    h = hashlib.sha256()
    h.update(Path(ref.__file__).read_bytes())
    h.update(
        json.dumps(
            [
                raw.digest(),
                source_kind,
                case.blocking_power_w,
                case.num_gpus,
                case.microbatches,
                case.unit_time_s,
                ref.ZEUS_NOISE_FACTOR,
                ref.lowtime_version(),
            ]
        ).encode()
    )
    return h.hexdigest()[:20]


def _cache_load(path: Path) -> Optional[dict[str, Any]]:
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        meta["knobs"] = data["knobs"].astype(np.int64)
        meta["keys"] = [tuple(k) for k in meta["keys"]]
        meta["stage_orders"] = [[tuple(x) for x in stage] for stage in meta["stage_orders"]]
    return meta


def _cache_save(path: Path, run: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {k: v for k, v in run.items() if k != "knobs"}
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, knobs=run["knobs"].astype(np.int16), meta=np.asarray(json.dumps(meta)))
    os.replace(tmp, path)


def run_lowtime(case: corpus.Case, source: Any, repeat: int) -> dict[str, Any]:
    """lowtime on ``source`` (raw rows or perseus's options); median wall of up to ``repeat`` runs."""
    import lowtime_reference as ref

    walls = []
    while True:
        lt = ref.solve(
            source,
            microbatches=case.microbatches,
            blocking_power_w=case.blocking_power_w,
            unit_time=case.unit_time_s,
        )
        walls.append(lt.wall_time)
        if len(walls) >= repeat or lt.wall_time >= LOWTIME_REPEAT_BELOW_S:
            break
    knobs = (
        np.stack([p.knobs for p in lt.plans]).astype(np.int64)
        if lt.plans
        else np.zeros((0, case.computations), dtype=np.int64)
    )
    return {
        "wall_s": statistics.median(walls),
        "walls_s": walls,
        "build_s": lt.build_time,
        "solve_s": lt.solve_time,
        "quant_times_s": [p.iteration_time for p in lt.plans],
        "keys": [list(k) for k in (lt.plans[0].keys if lt.plans else [])],
        "stage_orders": [[list(x) for x in stage] for stage in lt.stage_orders],
        "knobs": knobs,
    }


def _from_lowtime(error: BaseException) -> bool:
    """Whether ``error`` was raised inside lowtime (or scipy under it): lowtime failed, not us."""
    frames = traceback.extract_tb(error.__traceback__)
    return any("lowtime" in Path(f.filename).parts[:-1] for f in frames)


# --------------------------------------------------------------------------- one case


@dataclass
class CaseResult:
    case: str
    profile: str
    stages_used: Optional[list[int]]
    num_gpus: int
    virtual_stages: int
    schedule: str
    microbatches: int
    computations: int
    unit_time_s: float
    blocking_power_w: float
    raw_rows: int = 0
    perseus_kept_rows: Optional[int] = None
    perseus_wall_s: Optional[float] = None
    perseus_walls_s: list[float] = field(default_factory=list)
    perseus_cpu_s: Optional[float] = None  # process CPU time (every thread), median
    perseus_cpus_s: list[float] = field(default_factory=list)
    perseus_steps: Optional[int] = None
    perseus_cuts: Optional[int] = None
    perseus_file_bytes: Optional[int] = None  # frontier.save's file (user-scale cases)
    # --vs-plain: the default frontier against refine=False's, both replayed by the judge,
    # at every refine=False plan (dE% as against lowtime; > 0: the default uses more).
    plain_plans: Optional[int] = None
    plain_worst_pct: Optional[float] = None
    plain_unmatched: Optional[int] = None
    # --dense: dense_frontier_loss's numbers.
    dense: Optional[dict[str, Any]] = None
    perseus_phase_times_s: Optional[dict[str, float]] = None
    perseus_plans: Optional[int] = None
    perseus_fastest_s: Optional[float] = None
    perseus_fastest_j: Optional[float] = None
    perseus_slowest_s: Optional[float] = None
    perseus_baseline_s: Optional[float] = None  # frontier.baseline, perseus's own number
    all_fastest_s: Optional[float] = None  # judge: fastest measured row everywhere
    all_fastest_j: Optional[float] = None
    perseus_fastest_ok: Optional[bool] = None
    replay_max_time_rel_err: Optional[float] = None
    replay_max_energy_rel_err: Optional[float] = None
    lowtime: str = "skipped"  # ran, cached, skipped, n/a (schedule), failed
    lowtime_input: Optional[str] = None  # "raw rows" or "perseus options"
    lowtime_wall_s: Optional[float] = None  # this run's measurement only
    lowtime_walls_s: list[float] = field(default_factory=list)
    lowtime_cached_wall_s: Optional[float] = None  # from --lowtime-cache: never a ratio
    lowtime_build_s: Optional[float] = None
    lowtime_solve_s: Optional[float] = None
    lowtime_plans: Optional[int] = None
    lowtime_frontier_plans: Optional[int] = None
    lowtime_fastest_s: Optional[float] = None  # replayed
    lowtime_fastest_quantised_s: Optional[float] = None  # lowtime's own quant_time * unit
    speed_ratio: Optional[float] = None  # lowtime wall / perseus wall, same run
    energy_diff_worst_pct: Optional[float] = None
    energy_diff_mean_pct: Optional[float] = None
    energy_diff_best_pct: Optional[float] = None
    # Worst dE% over lowtime plans no slower than perseus's slowest plan.
    energy_diff_worst_within_pct: Optional[float] = None
    unmatched: Optional[int] = None
    # Of the unmatched: lowtime plans slower than perseus's slowest plan.
    unmatched_beyond_perseus_slowest: Optional[int] = None
    too_fast_for_perseus: Optional[int] = None
    points: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    error: Optional[str] = None


def _new_result(case: corpus.Case) -> CaseResult:
    return CaseResult(
        case=case.name,
        profile=str(case.path),
        stages_used=list(case.stages) if case.stages is not None else None,
        num_gpus=case.num_gpus,
        virtual_stages=case.virtual_stages,
        schedule=case.schedule,
        microbatches=case.microbatches,
        computations=case.computations,
        unit_time_s=case.unit_time_s,
        blocking_power_w=case.blocking_power_w,
    )


def run_case(case: corpus.Case, args: argparse.Namespace, tmp: Path) -> CaseResult:

    res = _new_result(case)
    raw = raw_profile(case)
    res.raw_rows = raw.num_rows()
    judge = Replayer(
        raw,
        blocking_power_w=case.blocking_power_w,
        schedule=case.schedule,
        num_gpus=case.num_gpus,
        microbatches=case.microbatches,
        virtual_stages=case.virtual_stages,
    )
    profile = perseus_profile(case, raw, tmp)
    res.perseus_kept_rows = sum(
        len(profile.options(s, k))
        for s in range(profile.num_stages)
        for k in ("forward", "backward")
    )
    blocking_w = case.num_gpus * case.blocking_power_w

    # perseus: median wall time of --repeat runs (a long run is not repeated).
    frontier = None
    for _ in range(args.repeat):
        frontier = None  # the last run's frontier is freed before the next one starts
        t0, c0 = time.perf_counter(), time.process_time()
        frontier = case.optimize(profile, threads=args.threads)
        res.perseus_cpus_s.append(time.process_time() - c0)
        res.perseus_walls_s.append(time.perf_counter() - t0)
        if res.perseus_walls_s[-1] >= args.repeat_below:
            break
    assert frontier is not None
    res.perseus_wall_s = statistics.median(res.perseus_walls_s)
    res.perseus_cpu_s = statistics.median(res.perseus_cpus_s)
    res.perseus_steps = int(getattr(frontier, "steps", 0))
    res.perseus_cuts = int(getattr(frontier, "cuts", 0))
    if is_user_scale(case) and not args.no_save:
        saved = tmp / f"{case.name}-frontier"
        frontier.save(saved)
        res.perseus_file_bytes = sum(
            f.stat().st_size for f in ([saved] if saved.is_file() else saved.rglob("*"))
        )
        if saved.is_file():
            saved.unlink()
        else:
            shutil.rmtree(saved)
    phases = getattr(frontier, "phase_times_s", None)
    res.perseus_phase_times_s = (
        {str(k): float(v) for k, v in dict(phases).items()} if phases is not None else None
    )
    res.perseus_plans = len(frontier)
    p_rep_t = np.asarray(frontier.iteration_times_s, dtype=float)
    p_rep_e = np.asarray(frontier.energies_j, dtype=float)
    res.perseus_baseline_s = float(frontier.baseline.iteration_time_s)
    log(
        f"  perseus: {res.perseus_wall_s:.3f} s wall, {res.perseus_cpu_s:.3f} s CPU (median of "
        f"{len(res.perseus_walls_s)}), {len(frontier)} plans, {res.perseus_steps} steps, "
        f"{res.perseus_cuts} cuts"
    )

    # The judge replays every perseus plan; it must agree with what perseus reports.
    p_t, p_e = replay_frontier(frontier, judge)
    t_err = np.abs(p_t - p_rep_t) / np.maximum(np.abs(p_rep_t), 1e-300)
    e_err = np.abs(p_e - p_rep_e) / np.maximum(np.abs(p_rep_e), 1e-300)
    res.replay_max_time_rel_err = float(t_err.max())
    res.replay_max_energy_rel_err = float(e_err.max())
    bad = np.flatnonzero((t_err > REPLAY_RTOL) | (e_err > REPLAY_RTOL))
    for i in bad[:5]:
        res.mismatches.append(
            f"perseus plan {int(i)}: reports ({p_rep_t[i]:.9f} s, {p_rep_e[i]:.6f} J), "
            f"the judge replays ({p_t[i]:.9f} s, {p_e[i]:.6f} J)"
        )
    if bad.size > 5:
        res.mismatches.append(f"... {bad.size} perseus plans disagree with the judge in all")
    if np.any(np.diff(p_t) <= 0):
        res.notes.append("perseus's replayed plan times are not strictly increasing")
    order = np.argsort(p_t, kind="stable")
    p_t, p_e = p_t[order], p_e[order]
    res.perseus_fastest_s, res.perseus_fastest_j = float(p_t[0]), float(p_e[0])
    res.perseus_slowest_s = float(p_t[-1])

    if args.vs_plain:
        plain = case.optimize(profile, refine=False)
        pl_t, pl_e = replay_frontier(plain, judge)
        del plain
        vs = compare(pl_t, pl_e, p_t, p_e, blocking_w)
        res.plain_plans = int(pl_t.size)
        res.plain_worst_pct = vs["energy_diff_worst_pct"]
        res.plain_unmatched = vs["unmatched"]
        log(
            f"  vs refine=False: worst {_fmt(res.plain_worst_pct, '+.4f')} %, "
            f"{res.plain_unmatched}/{res.plain_plans} plain plans beaten by > "
            f"{MATCH_TOLERANCE_PCT:g} %"
        )

    if args.dense:
        res.dense = dense_frontier_loss(frontier, profile, case)
        log(
            f"  dense: {res.dense['over']}/{res.dense['deadlines']} deadlines lose > "
            f"{DENSE_LOSS_TARGET_PCT:g} % with the next-faster plan; worst "
            f"{res.dense['worst_pct']:.4f} % at {res.dense['worst_at_s']} s, mean "
            f"{res.dense['mean_pct']:.5f} %; with plan_for(d) (fitted to d) "
            f"{res.dense['default_over']} lose > {DENSE_LOSS_TARGET_PCT:g} %, worst "
            f"{res.dense['default_worst_pct']:.4f} %, mean {res.dense['default_mean_pct']:.5f} % "
            f"({1e3 * res.dense['default_cpu_s_median']:.1f} CPU ms each, median), "
            f"idles > 1 unit at {res.dense['default_idle_over_unit']} (most "
            f"{res.dense['default_idle_max_units']:.2f} units), both at "
            f"{res.dense['default_unmet']}; one ulp earlier is cheaper at "
            f"{res.dense['tighter_cheaper']} of {res.dense['monotone_samples']} plan times "
            f"(worst {res.dense['tighter_cheaper_worst_pct']:.4f} %); at the plans' own times worst "
            f"{res.dense['own_worst_pct']:.4f} %, mean {res.dense['own_mean_pct']:.5f} %; "
            f"plan_for(tailored=True) at {res.dense['tailored_deadlines']} of them: "
            f"{res.dense['tailored_over']} lose > {DENSE_LOSS_TARGET_PCT:g} %, worst "
            f"{res.dense['tailored_worst_pct']:.4f} %, mean {res.dense['tailored_mean_pct']:.5f} % "
            f"({res.dense['tailored_cpu_s_median']:.3f} CPU s each, median)"
        )

    af_t, af_e = judge.evaluate(judge.all_fastest())
    res.all_fastest_s, res.all_fastest_j = float(af_t[0]), float(af_e[0])
    res.perseus_fastest_ok = bool(p_t[0] <= res.all_fastest_s * (1 + TIME_RTOL))
    if p_t[0] < res.all_fastest_s * (1 - TIME_RTOL):
        res.mismatches.append(
            f"perseus plan at {p_t[0]:.9f} s is faster than every computation at its fastest "
            f"row ({res.all_fastest_s:.9f} s): impossible"
        )
    if not math.isclose(res.perseus_baseline_s, res.all_fastest_s, rel_tol=1e-9):
        res.notes.append(
            f"perseus's baseline ({res.perseus_baseline_s:.6f} s) is not the all-fastest-row "
            f"plan ({res.all_fastest_s:.6f} s)"
        )

    # lowtime.
    want = case.lowtime or args.lowtime_big
    if args.no_lowtime or not want:
        res.lowtime = "skipped"
        return res
    if not case.lowtime_possible:
        res.lowtime = "n/a (schedule)"
        return res
    source_kind = args.lowtime_input
    source = raw if source_kind == "raw" else profile
    res.lowtime_input = "raw rows" if source_kind == "raw" else "perseus options"
    cache_path = (
        Path(args.lowtime_cache) / f"{case.name}-{_lowtime_cache_key(case, raw, source_kind)}.npz"
        if args.lowtime_cache
        else None
    )
    lt = _cache_load(cache_path) if cache_path is not None else None
    if lt is not None:
        res.lowtime = "cached"
        res.lowtime_cached_wall_s = float(lt["wall_s"])
        log(f"  lowtime: cached ({lt['wall_s']:.1f} s when it ran; no ratio from a cache)")
    else:
        try:
            lt = run_lowtime(case, source, args.lowtime_repeat)
        except Exception as error:
            if not _from_lowtime(error):
                raise
            res.lowtime = f"failed: {type(error).__name__}"
            res.notes.append(f"lowtime failed: {type(error).__name__}: {error}")
            log(f"  lowtime failed: {type(error).__name__}: {error}")
            return res
        res.lowtime = "ran"
        res.lowtime_wall_s = lt["wall_s"]
        res.lowtime_walls_s = lt["walls_s"]
        res.speed_ratio = (
            res.lowtime_wall_s / res.perseus_wall_s if res.perseus_wall_s else math.inf
        )
        if cache_path is not None:
            _cache_save(cache_path, lt)
        log(f"  lowtime: {lt['wall_s']:.2f} s, {len(lt['knobs'])} plans; replaying")
    res.lowtime_build_s, res.lowtime_solve_s = lt["build_s"], lt["solve_s"]
    res.lowtime_plans = len(lt["knobs"])
    lt_orders = [[tuple(x) for x in stage] for stage in lt["stage_orders"]]
    if lt_orders != perseus_order(case.num_gpus, case.microbatches):
        res.mismatches.append("lowtime's and perseus's 1F1B execution orders differ")
    if not res.lowtime_plans:
        res.notes.append(
            "lowtime produced no plans (lowtime 0.3.0 stops at the first step that costs less "
            "than 1e-6 J, before yielding it)"
        )
        return res
    res.lowtime_fastest_quantised_s = float(min(lt["quant_times_s"]))

    perm = np.asarray([judge.cid(int(s), str(k), int(m)) for s, k, m in lt["keys"]])
    knobs = np.empty_like(lt["knobs"])
    knobs[:, perm] = lt["knobs"]
    lt_t, lt_e = judge.evaluate(knobs)
    front = pareto_points(lt_t, lt_e, blocking_w)
    res.lowtime_frontier_plans = int(front.size)
    res.lowtime_fastest_s = float(lt_t.min())
    if res.lowtime_fastest_s > res.all_fastest_s * (1 + LOWTIME_SHORT_RTOL):
        res.notes.append(
            f"lowtime's frontier ends early: its fastest replayed plan takes "
            f"{res.lowtime_fastest_s:.4f} s, the all-fastest plan {res.all_fastest_s:.4f} s "
            f"({len(lt['knobs'])} iterations; lowtime 0.3.0 stops at the first step that costs "
            "less than 1e-6 J or whose cut is infinite)"
        )
    out = compare(lt_t[front], lt_e[front], p_t, p_e, blocking_w)
    res.points = out.pop("points")
    for key, value in out.items():
        setattr(res, key, value)
    return res


# --------------------------------------------------------------------------- scaling, memory


def scaling_fits(results: list[CaseResult], cases: dict[str, corpus.Case]) -> list[dict[str, Any]]:
    """Least-squares exponent of perseus wall time against computations, per ladder."""
    ladders: dict[str, list[CaseResult]] = {}
    for r in results:
        ladder = cases[r.case].ladder
        if ladder and r.error is None and r.perseus_wall_s:
            ladders.setdefault(ladder, []).append(r)
    fits = []
    for name, rungs in ladders.items():
        rungs.sort(key=lambda r: r.computations)
        n = np.array([r.computations for r in rungs], dtype=float)
        w = np.array([r.perseus_wall_s for r in rungs], dtype=float)
        c = np.array([r.perseus_cpu_s or math.nan for r in rungs], dtype=float)
        exponent = float(np.polyfit(np.log(n), np.log(w), 1)[0]) if len(rungs) >= 2 else None
        cpu_exponent = (
            float(np.polyfit(np.log(n), np.log(c), 1)[0])
            if len(rungs) >= 2 and np.all(c > 0)
            else None
        )
        fits.append(
            {
                "ladder": name,
                "cases": [r.case for r in rungs],
                "computations": n.astype(int).tolist(),
                "perseus_wall_s": w.tolist(),
                "perseus_cpu_s": c.tolist(),
                "exponent": exponent,
                "cpu_exponent": cpu_exponent,
            }
        )
    return fits


def _status_kib(name: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def memory_worker(spec_json: str) -> None:
    """Subprocess entry: peak extra resident memory of one perseus solve of one case."""

    data = json.loads(spec_json)
    if data.get("stages") is not None:
        data["stages"] = tuple(data["stages"])
    data.pop("computations", None)
    refine = bool(data.pop("refine", True))
    case = corpus.Case(**data)
    raw = raw_profile(case)
    with tempfile.TemporaryDirectory() as tmp:
        profile = perseus_profile(case, raw, Path(tmp))
        method = "VmHWM"
        try:  # reset the peak-RSS mark after imports and loading (Linux clear_refs "5")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            base = _status_kib("VmRSS")
        except OSError:
            base = None
        if base is None:
            method = "ru_maxrss"
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        frontier = case.optimize(profile, refine=refine)
        peak = (
            _status_kib("VmHWM")
            if method == "VmHWM"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        )
    assert peak is not None
    print(
        json.dumps(
            {"peak_extra_kib": max(0, peak - base), "plans": len(frontier), "method": method}
        )
    )


def measure_memory(case: corpus.Case, refine: bool = True) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--memory-worker",
            json.dumps({**case.to_json(), "refine": refine}),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"memory worker failed for {case.name}:\n{out.stderr}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    kib = data["peak_extra_kib"]
    return {
        "case": case.name if refine else f"{case.name} (refine=False)",
        "refine": refine,
        "computations": case.computations,
        "plans": data["plans"],
        "peak_extra_mib": kib / 1024,
        "kib_per_computation": kib / case.computations,
        "bytes_per_plan_computation": kib * 1024 / max(1, data["plans"] * case.computations),
        "method": data["method"],
    }


# --------------------------------------------------------------------------- targets


def check_targets(
    results: list[CaseResult],
    cases: dict[str, corpus.Case],
    fits: list[dict[str, Any]],
    memory: list[dict[str, Any]],
) -> list[dict[str, str]]:
    """Issue 9's targets: status "ok", "MISS" or "not measured" each, with the numbers."""
    out = []

    def add(target: str, status: str, detail: str) -> None:
        out.append({"target": target, "status": status, "detail": detail})

    for r in results:
        case = cases[r.case]
        if r.error is not None:
            for what in ("speed ratio", "wall time", "energy"):
                if (
                    (what == "speed ratio" and case.target_speedup)
                    or (what == "wall time" and case.target_wall_s)
                    or (what == "energy" and case.lowtime)
                ):
                    add(f"{r.case} {what}", "not measured", "the case crashed")
            continue
        if case.target_speedup is not None:
            name = f"{r.case} speed ratio >= {case.target_speedup:g}x"
            if r.speed_ratio is None:
                add(name, "not measured", f"lowtime {r.lowtime}: no same-run ratio")
            else:
                add(
                    name,
                    "ok" if r.speed_ratio >= case.target_speedup else "MISS",
                    f"{r.speed_ratio:.1f}x (lowtime {r.lowtime_wall_s:.2f} s, perseus {r.perseus_wall_s:.3f} s)",
                )
        target_cpu_s = getattr(case, "target_cpu_s", None)
        if target_cpu_s is not None and r.perseus_cpu_s is not None:
            add(
                f"{r.case} perseus CPU <= {target_cpu_s:g} s",
                "ok" if r.perseus_cpu_s <= target_cpu_s else "MISS",
                f"{r.perseus_cpu_s:.3f} s CPU ({r.perseus_wall_s:.3f} s wall)",
            )
        if case.target_wall_s is not None and r.perseus_wall_s is not None:
            add(
                f"{r.case} perseus <= {case.target_wall_s:g} s",
                "ok" if r.perseus_wall_s <= case.target_wall_s else "MISS",
                f"{r.perseus_wall_s:.3f} s",
            )
        if r.plain_plans:
            add(
                f"{r.case} never worse than refine=False (<= +{MATCH_TOLERANCE_PCT:g} %)",
                "ok" if r.plain_unmatched == 0 else "MISS",
                f"{r.plain_unmatched}/{r.plain_plans} plain plans unmatched, worst "
                f"{_fmt(r.plain_worst_pct, '+.4f')} %",
            )
        if r.dense is not None:
            add(
                f"{r.case} dense: next-faster plan within +{DENSE_LOSS_TARGET_PCT:g} % "
                "at every unit",
                "ok" if r.dense["over"] == 0 else "MISS",
                f"{r.dense['over']}/{r.dense['deadlines']} deadlines over, worst "
                f"{r.dense['worst_pct']:.4f} %",
            )
            add(
                f"{r.case} dense: plan_for(d) (fitted) within +{DENSE_LOSS_TARGET_PCT:g} % "
                "at every unit",
                "ok" if r.dense["default_over"] == 0 else "MISS",
                f"{r.dense['default_over']}/{r.dense['deadlines']} deadlines over, worst "
                f"{r.dense['default_worst_pct']:.4f} %",
            )
            add(
                f"{r.case} dense: plan_for(d) within one unit of d or within "
                f"+{DENSE_LOSS_TARGET_PCT:g} % at every unit (item 4)",
                "ok" if r.dense["default_unmet"] == 0 else "MISS",
                f"{r.dense['default_unmet']}/{r.dense['deadlines']} deadlines neither; idles "
                f"> 1 unit at {r.dense['default_idle_over_unit']}, most "
                f"{r.dense['default_idle_max_units']:.2f} units",
            )
            add(
                f"{r.case} dense: plan_for(d, tailored=True) within +{DENSE_LOSS_TARGET_PCT:g} % "
                "of the reference",
                "ok" if r.dense["tailored_over"] == 0 else "MISS",
                f"{r.dense['tailored_over']}/{r.dense['tailored_deadlines']} deadlines over, "
                f"worst {r.dense['tailored_worst_pct']:.4f} %",
            )
        if r.lowtime_frontier_plans:
            name = f"{r.case} never worse than lowtime (<= +{MATCH_TOLERANCE_PCT:g} %)"
            add(
                name,
                "ok" if r.unmatched == 0 else "MISS",
                f"{r.unmatched}/{r.lowtime_frontier_plans} lowtime frontier plans unmatched "
                f"({r.too_fast_for_perseus} faster than perseus's fastest, "
                f"{r.unmatched_beyond_perseus_slowest} slower than its slowest), worst "
                f"{_fmt(r.energy_diff_worst_pct, '+.4f')} % ("
                f"{_fmt(r.energy_diff_worst_within_pct, '+.4f')} % within perseus's time range)",
            )
    for fit in fits:
        if fit["ladder"] == corpus.SCALING_LADDER:
            key, limit, what = "exponent", corpus.SCALING_TARGET, "wall"
        elif all(c.startswith(USER_SCALE_PREFIX) for c in fit["cases"]):
            key, limit, what = "cpu_exponent", USER_CPU_EXPONENT_TARGET, "CPU"
        else:
            continue
        name = f"scaling exponent ({what}) over the {fit['ladder']} ladder <= {limit:g}"
        if fit[key] is None or len(fit["cases"]) < 3:
            add(name, "not measured", f"{len(fit['cases'])} rung(s) ran")
        else:
            add(
                name,
                "ok" if fit[key] <= limit else "MISS",
                f"{fit[key]:.2f} over {fit['computations'][0]}..{fit['computations'][-1]} computations",
            )
    for m in memory:
        if m["computations"] >= USER_MEMORY_AT_COMPUTATIONS:
            add(
                f"{m['case']} peak memory <= {USER_MEMORY_TARGET_MIB:g} MiB",
                "ok" if m["peak_extra_mib"] <= USER_MEMORY_TARGET_MIB else "MISS",
                f"{m['peak_extra_mib']:.0f} MiB",
            )
    return out


# --------------------------------------------------------------------------- output


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float) and spec:
        return format(value, spec)
    return str(value)


fmt = _fmt  # bench/quality.py


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


def _phases(phases: Optional[dict[str, float]]) -> str:
    if not phases:
        return "-"
    return " ".join(f"{k}={v:.3g}" for k, v in phases.items())


def _seconds(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 100 else f"{value:.0f}"


def print_results(
    results: list[CaseResult],
    fits: list[dict[str, Any]],
    memory: list[dict[str, Any]],
    targets: list[dict[str, str]],
) -> None:
    header = [
        "case",
        "comps",
        "perseus s",
        "lowtime s",
        "ratio",
        "perseus phases s",
        "plans p",
        "plans lt",
        "worst dE%",
        "mean dE%",
        "unmatched",
        "slower",
        "fastest",
    ]
    rows = []
    for r in results:
        if r.error is not None:
            rows.append([r.case, str(r.computations), "CRASH", *["-"] * 10])
            continue
        if r.lowtime == "ran":
            lt_s = _seconds(r.lowtime_wall_s)
        elif r.lowtime == "cached":
            lt_s = f"cached {_seconds(r.lowtime_cached_wall_s)}"
        else:
            lt_s = r.lowtime
        ratio = r.speed_ratio
        rows.append(
            [
                r.case,
                str(r.computations),
                _seconds(r.perseus_wall_s),
                lt_s,
                "-" if ratio is None else (f"{ratio:.0f}x" if ratio >= 100 else f"{ratio:.1f}x"),
                _phases(r.perseus_phase_times_s),
                _fmt(r.perseus_plans),
                "-"
                if r.lowtime_plans is None
                else f"{r.lowtime_plans}/{_fmt(r.lowtime_frontier_plans)}",
                _fmt(r.energy_diff_worst_pct, "+.3f"),
                _fmt(r.energy_diff_mean_pct, "+.3f"),
                "-" if r.unmatched is None else f"{r.unmatched}/{r.lowtime_frontier_plans}",
                _fmt(r.unmatched_beyond_perseus_slowest),
                _fmt(r.perseus_fastest_ok),
            ]
        )
    print(table(rows, header))
    print(
        "dE% = (perseus - lowtime) / lowtime for each plan on lowtime's replayed frontier, against "
        "perseus's cheapest plan at least as fast, both over an iteration as long as the lowtime "
        f"plan (negative: perseus uses less). unmatched: worse by > {MATCH_TOLERANCE_PCT:g} % or "
        "faster than perseus's fastest; slower: how many of those are slower than perseus's "
        "slowest plan. fastest: perseus's fastest plan is as fast as every "
        "computation at its fastest measured row. ratio: lowtime s / perseus s, same run only."
    )
    for r in results:
        for m in r.mismatches:
            print(f"MISMATCH {r.case}: {m}")
        for note in r.notes:
            print(f"NOTE {r.case}: {note}")
        if r.error is not None:
            print(f"CRASH {r.case}: {r.error.strip().splitlines()[-1]}")

    if fits:
        print()
        rows = [
            [
                f["ladder"],
                " ".join(str(n) for n in f["computations"]),
                " ".join(f"{w:.3g}" for w in f["perseus_wall_s"]),
                _fmt(f["exponent"], ".2f"),
                " ".join(f"{c:.3g}" for c in f["perseus_cpu_s"]),
                _fmt(f["cpu_exponent"], ".2f"),
            ]
            for f in fits
        ]
        print(
            table(
                rows,
                ["ladder", "computations", "perseus s", "exponent", "CPU s", "CPU exponent"],
            )
        )
        print(
            "exponent: least-squares slope of log(perseus s) against log(computations); "
            "CPU: the same of process CPU seconds."
        )

    scale = [r for r in results if r.error is None and r.perseus_cpu_s is not None]
    if scale:
        print()
        rows = [
            [
                r.case,
                str(r.computations),
                _seconds(r.perseus_cpu_s),
                _seconds(r.perseus_wall_s),
                str(len(r.perseus_walls_s)),
                _fmt(r.perseus_steps),
                _fmt(r.perseus_cuts),
                _fmt(r.perseus_plans),
                _phases(r.perseus_phase_times_s),
                "-" if r.perseus_file_bytes is None else f"{r.perseus_file_bytes / 2**20:.1f}",
            ]
            for r in scale
        ]
        print(
            table(
                rows,
                [
                    "solve",
                    "comps",
                    "CPU s",
                    "wall s",
                    "runs",
                    "steps",
                    "cuts",
                    "plans",
                    "phases s",
                    "file MiB",
                ],
            )
        )
        print(
            "CPU s: process CPU time of perseus.optimize (every thread), median of the runs; "
            "wall s the same; file MiB: frontier.save's file (user-scale cases only)."
        )

    if memory:
        print()
        rows = [
            [
                m["case"],
                str(m["computations"]),
                str(m["plans"]),
                f"{m['peak_extra_mib']:.1f}",
                f"{m['kib_per_computation']:.2f}",
                f"{m['bytes_per_plan_computation']:.3f}",
            ]
            for m in memory
        ]
        print(
            table(
                rows, ["memory", "computations", "plans", "peak MiB", "KiB/comp", "B/(plan*comp)"]
            )
        )
        print(
            "peak MiB: peak resident memory of one perseus solve above the state before it (fresh subprocess)."
        )

    if targets:
        print()
        for t in targets:
            label = {"ok": "ok  ", "MISS": "MISS", "not measured": "n/m "}[t["status"]]
            print(f"{label} {t['target']}: {t['detail']}")


# --------------------------------------------------------------------------- main


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


def adhoc_cases(args: argparse.Namespace) -> list[corpus.Case]:
    if args.blocking_power is None:
        raise SystemExit("--profile needs --blocking-power W")
    path = Path(args.profile).resolve()
    stages = RawProfile.from_csv(path).num_stages
    sizes = parse_sizes(args.sizes) if args.sizes else [(stages, stages), (stages, 4 * stages)]
    cases = []
    for s, m in sizes:
        if not 0 < s <= stages:
            raise SystemExit(f"{path.name} has {stages} stages; cannot run {s}")
        cases.append(
            corpus.Case(
                name=f"{path.stem}-{s}x{m}",
                profile=str(path),
                blocking_power_w=args.blocking_power,
                num_gpus=s,
                microbatches=m,
                stages=None if s == stages else tuple(range(s)),
                lowtime=2 * s * m <= ADHOC_LOWTIME_MAX_COMPUTATIONS,
                note="ad hoc (--profile)",
            )
        )
    return cases


def print_corpus(cases: list[corpus.Case]) -> None:
    header = [
        "case",
        "profile",
        "P_block W",
        "GPUs",
        "V",
        "schedule",
        "M",
        "comps",
        "unit ms",
        "lowtime",
        "quick",
        "ladder",
        "target",
    ]
    rows = []
    for c in cases:
        target = []
        if c.target_speedup:
            target.append(f">={c.target_speedup:g}x")
        if c.target_wall_s:
            target.append(f"<={c.target_wall_s:g}s")
        if getattr(c, "target_cpu_s", None):
            target.append(f"<={c.target_cpu_s:g}s CPU")
        rows.append(
            [
                c.name,
                c.profile + (f"[{','.join(map(str, c.stages))}]" if c.stages else ""),
                f"{c.blocking_power_w:g}",
                str(c.num_gpus),
                str(c.virtual_stages),
                c.schedule,
                str(c.microbatches),
                str(c.computations),
                f"{c.unit_time_s * 1e3:g}",
                "yes" if c.lowtime else ("flag" if c.lowtime_possible else "-"),
                "yes" if c.quick else ("user" if is_user_scale(c) else ""),
                c.ladder or "",
                " ".join(target),
            ]
        )
    print(table(rows, header))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="the CI subset (well under 2 minutes)")
    parser.add_argument(
        "--case",
        action="append",
        metavar="PATTERN",
        help="only cases matching (shell pattern; repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="print the corpus and exit")
    parser.add_argument("--json", metavar="OUT.json", help="also write every number as JSON")
    parser.add_argument(
        "--profile", metavar="CSV", help="an ad-hoc Zeus-format profile instead of the corpus"
    )
    parser.add_argument(
        "--blocking-power", type=float, metavar="W", help="P2P blocking power of --profile, W"
    )
    parser.add_argument("--sizes", metavar="SxM,...", help="--profile cases as STAGESxMICROBATCHES")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="perseus runs per case, median reported (default 3)",
    )
    parser.add_argument(
        "--lowtime-repeat",
        type=int,
        default=3,
        metavar="N",
        help=f"most lowtime runs per case (default 3); a run of {LOWTIME_REPEAT_BELOW_S:g} s or more is not repeated",
    )
    parser.add_argument(
        "--lowtime-big",
        action="store_true",
        help="also run lowtime on the 1F1B cases it skips by default (slow)",
    )
    parser.add_argument("--no-lowtime", action="store_true", help="perseus only")
    parser.add_argument(
        "--lowtime-input",
        choices=("raw", "kept"),
        default="raw",
        help="lowtime gets every raw CSV row, as Zeus does (default), or the options perseus kept",
    )
    parser.add_argument(
        "--lowtime-cache",
        metavar="DIR",
        help="reuse lowtime results from DIR (written there when missing); cached cases get no speed ratio",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the memory table")
    parser.add_argument(
        "--repeat-below",
        type=float,
        default=PERSEUS_REPEAT_BELOW_S,
        metavar="S",
        help="a perseus run this long (s) or longer is not repeated "
        f"(default {PERSEUS_REPEAT_BELOW_S:g}; a large value makes every case run --repeat times)",
    )
    parser.add_argument(
        "--no-save", action="store_true", help="skip saving user-scale frontiers (file size)"
    )
    parser.add_argument(
        "--vs-plain",
        action="store_true",
        help="also solve with refine=False and check, on the judge's replays, that the default "
        "frontier is within +0.01 %% of it at every refine=False plan (issue 23)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="optimize(threads=N) for the timed solves (default: perseus's, 4); the plans do "
        "not depend on it, the wall time does",
    )
    parser.add_argument(
        "--dense",
        action="store_true",
        help="check at every deadline one unit apart inside the frontier's span that the "
        "next-faster plan loses <= 0.01 %% against a plan solved for it (issue 23 item 4)",
    )
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.memory_worker:
        memory_worker(args.memory_worker)
        return 0
    if args.repeat_below <= 0:
        raise SystemExit("--repeat-below must be > 0")

    if args.profile:
        cases = adhoc_cases(args)
    else:
        try:
            cases = corpus.select(quick=args.quick, patterns=args.case)
        except KeyError as error:
            raise SystemExit(str(error.args[0])) from None
    if args.list:
        print_corpus(cases)
        return 0
    if args.repeat < 1 or args.lowtime_repeat < 1:
        raise SystemExit("--repeat and --lowtime-repeat must be >= 1")
    try:
        import perseus
    except ImportError as e:
        raise SystemExit(f"cannot import perseus ({e}); install it first: pip install .") from e

    by_name = {c.name: c for c in cases}
    started = time.perf_counter()
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="perseus-bench-") as tmp:
        for case in cases:
            log(f"{case.name} ({case.computations} computations)")
            try:
                results.append(run_case(case, args, Path(tmp)))
            except Exception:  # noqa: BLE001 - report it, go on, fail at the end
                text = traceback.format_exc()
                log(text)
                res = _new_result(case)
                res.error = text
                results.append(res)

    fits = scaling_fits(results, by_name)
    memory: list[dict[str, Any]] = []
    crashes = [r.case for r in results if r.error is not None]
    if not args.no_memory:
        for case in cases:
            if (case.ladder or is_user_scale(case)) and case.name not in crashes:
                # Issue 23's memory target holds in both refine modes.
                for refine in (True, False) if is_user_scale(case) else (True,):
                    log(f"memory {case.name}" + ("" if refine else " refine=False"))
                    try:
                        memory.append(measure_memory(case, refine))
                    except RuntimeError as error:
                        log(str(error))
                        crashes.append(f"memory {case.name}")
    targets = check_targets(results, by_name, fits, memory)
    print_results(results, fits, memory, targets)
    elapsed = time.perf_counter() - started
    mismatches = [f"{r.case}: {m}" for r in results for m in r.mismatches]
    log(f"total {elapsed:.1f} s")

    if args.json:
        import lowtime_reference as ref

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
            "settings": {
                "quick": args.quick,
                "repeat": args.repeat,
                "lowtime_repeat": args.lowtime_repeat,
                "lowtime_input": args.lowtime_input,
                "lowtime_cache": args.lowtime_cache,
                "match_tolerance_pct": MATCH_TOLERANCE_PCT,
                "replay_rtol": REPLAY_RTOL,
            },
            "corpus": [c.to_json() for c in cases],
            "cases": [asdict(r) for r in results],
            "scaling": fits,
            "memory": memory,
            "targets": targets,
            "mismatches": mismatches,
            "crashes": crashes,
            "total_wall_s": elapsed,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 1 if crashes or mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

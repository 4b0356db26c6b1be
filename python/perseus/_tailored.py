"""Plans for one deadline between frontier plans: `Frontier.plan_for(deadline_s)`.

A frontier holds the plans worth keeping over its whole range, about 5 ms
apart at the default 1 ms unit on a 16 x 128 pipeline. The frontier plan
that meets a deadline between two of them would finish early and idle,
drawing blocking power, for the rest of it. Two ways to use that time:

A reclaimed plan (`plan_for`'s default when the frontier has its profile)
is that frontier plan with slack reclamation into the deadline (the
solver's own, ``PlanImprover::reclaim`` in ``cpp/plan_improver.hpp``):
computations with room move to slower, cheaper clocks, most saving per
second first, while the iteration still meets the deadline. It costs
milliseconds (a median 2.7 CPU ms at 4,096 computations, 26 ms at 32,768:
bench/results/plan-for-cost-2026-12-06.txt), so every
rank can make it, and on bench/run.py --dense it cut the deadlines that
lose more than 0.01 % to a plan solved for them from 29 % to 2 % (user
16 x 16; worst 0.23 % to 0.02 %).

A tailored plan (``tailored=True``) is solved for the
deadline itself by the solver's own per-deadline search (``search_deadline``
in ``cpp/refinement.hpp``): the frontier plans nearest the deadline on both
sides as starts (faster ones slowed into it, slower ones sped up to it),
the all-fastest plan, then a local search from the best. The slowest plan
meeting the deadline is one of the starts and slowing it into the
deadline never costs energy, so a tailored plan never uses more energy over
the deadline than `plan_for`'s. The work is counted in machine-independent
units, so every rank of a job gets the same plan from the same inputs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, cast

import numpy as np

from . import _core
from ._replay import _OptionTable, _setup
from ._zeus_format import INSTRUCTIONS
from .plan import Plan

if TYPE_CHECKING:
    from .frontier import Frontier
    from .profile import Profile

#: Work units (node, edge and option visits, as in `SolverBudgets`) of one
#: tailored search. The search usually stops earlier, when no move helps: on
#: bench/run.py --dense (h100-8-8x24, user-h100-16u-16x16) 1.6e7 left one of
#: 48 deadlines 0.010-0.012 % above a search with 6.4e7, 3.2e7 none, at the
#: same median cost (0.14-0.18 CPU s). Per plan: 0.07-0.3 CPU s (median) from
#: 384 to 4,096 computations, 0.38 s at 16 x 512 and 0.49 s at 16 x 1024
#: (bench/results/tailored-cost-2026-12-06.txt; the starts take at most half
#: of it, so the all-fastest start, which took 1.7 and 5.9 s there, is cut).
TAILORED_SEARCH_WORK = 32_000_000

#: Frontier plans tried as starts on each side of the deadline: the solver's own count.
STARTS_PER_SIDE: int = int(cast(int, dict(_core.LOCAL_SEARCH_MOVES)["starts_per_side"]))


def tailored_plan(
    frontier: Frontier,
    index: int,
    deadline_s: float,
    profile: Optional[Profile] = None,
    max_work: Optional[int] = None,
) -> Plan:
    """Plan `index` (the slowest meeting `deadline_s`) and its neighbours, searched at `deadline_s`.

    ``profile`` defaults to the frontier's own, ``max_work`` to
    TAILORED_SEARCH_WORK. Raises ValueError when there
    is no profile, or when a start's clock is not one of the profile's
    options (a frontier solved from another profile).
    """
    source = profile if profile is not None else frontier.profile
    if source is None:
        raise ValueError(
            "a tailored plan needs the profile (the frontier was loaded without one): "
            "pass it to Frontier.load, or call plan_for without tailored=True"
        )
    spec = frontier.spec
    problem, table, pipeline = _setup(source, spec)
    lo = max(0, index - (STARTS_PER_SIDE - 1))
    hi = min(len(frontier), index + 1 + STARTS_PER_SIDE)
    starts = _option_indices(frontier, range(lo, hi), table, pipeline)
    times = np.asarray(frontier.iteration_times_s[lo:hi], dtype=np.float64)
    work = TAILORED_SEARCH_WORK if max_work is None else int(max_work)
    found = problem.search_deadline(starts, times, float(deadline_s), work)
    if found is None:  # unreachable: plan `index` meets the deadline
        return frontier[index]
    time_s, energy_j, choice = found
    mhz = table.frequency_mhz[table.offsets[pipeline.group] + choice].astype(np.int32)
    return Plan(
        spec, mhz, time_s, energy_j, blocking_power_w=source.blocking_power_w, profile=source
    )


def reclaimed_plan(frontier: Frontier, index: int, deadline_s: float) -> Plan:
    """Plan `index` (the slowest meeting `deadline_s`) reclaimed into the rest of the deadline.

    Never more energy over the deadline than plan `index`, and that plan
    itself when nothing can slow down, when the deadline is its own time, or
    when the frontier has no profile (or one without the plan's clocks: a
    frontier loaded with another profile), since reclamation needs the
    measured times the plan was solved on.
    """
    plan = frontier[index]
    source = frontier.profile
    if source is None or not plan.iteration_time_s < deadline_s < math.inf:
        return plan
    spec = frontier.spec
    problem, table, pipeline = _setup(source, spec)
    try:
        start = _option_indices(frontier, range(index, index + 1), table, pipeline)
    except ValueError:
        return plan
    times, energies, choices = problem.reclaim(start, float(deadline_s))
    time_s = float(times[0])
    mhz = table.frequency_mhz[table.offsets[pipeline.group] + choices[0]].astype(np.int32)
    # Before reclamation: the frontier plan's own unimproved energy, waiting as long.
    waited_j = spec.num_gpus * source.blocking_power_w * (time_s - plan.iteration_time_s)
    reclaimed = Plan(
        spec,
        mhz,
        time_s,
        float(energies[0]),
        plan.energy_before_reclaim_j + max(waited_j, 0.0),
        blocking_power_w=source.blocking_power_w,
        profile=source,
    )
    # Reclamation keeps the iteration within the deadline and never raises
    # its energy over it; a plan that saves nothing stays the frontier's own.
    if time_s <= deadline_s and reclaimed.energy_at(deadline_s) < plan.energy_at(deadline_s):
        return reclaimed
    return plan


def _option_indices(
    frontier: Frontier, plans: range, table: _OptionTable, pipeline: _core.Pipeline
) -> np.ndarray:
    """The plans' clocks as the core's option indices (uint16, a row per plan)."""
    group = np.asarray(pipeline.group, dtype=np.int64)
    offsets = np.asarray(table.offsets, dtype=np.int64)
    option_mhz = np.asarray(table.frequency_mhz, dtype=np.int64)
    # (group, MHz) -> the option's index within its group, -1 where there is none.
    option_group = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    lookup = np.full((offsets.size - 1, int(option_mhz.max()) + 1), -1, dtype=np.int64)
    lookup[option_group, option_mhz] = np.arange(option_mhz.size) - offsets[option_group]
    wanted = np.stack([np.asarray(frontier.frequencies_mhz(k), dtype=np.int64) for k in plans])
    inside = (wanted >= 0) & (wanted < lookup.shape[1])
    choice = np.where(inside, lookup[group, np.clip(wanted, 0, lookup.shape[1] - 1)], -1)
    missing = np.argwhere(choice < 0)
    if missing.size:
        row, i = (int(v) for v in missing[0])
        stage, instruction = int(pipeline.stage[i]), int(pipeline.instruction[i])
        raise ValueError(
            f"plan {plans[row]} runs (stage {stage}, {INSTRUCTIONS[instruction]!r}, microbatch "
            f"{int(pipeline.microbatch[i])}) at {int(wanted[row, i])} MHz, which is not one of "
            "the profile's options: a tailored plan needs the profile the frontier was solved with"
        )
    return choice.astype(np.uint16)

"""Exact minimum-energy plans for small pipelines (a test oracle and benchmark reference).

Choosing one measured frequency per computation is NP-hard; `perseus.optimize`
solves a convex relaxation. This module states the discrete problem exactly as
a mixed-integer program and solves it with HiGHS (``pip install "perseus-energy[exact]"``):

- a binary ``x[i,k]`` per computation ``i`` and *measured* option ``k`` (every
  row of the profile, useful or not: the model does not trust the filter that
  `Profile.options` applies), with ``sum_k x[i,k] = 1``;
- a start time ``s[i] >= 0`` per computation, and for every DAG edge
  ``u -> v``: ``s[v] >= s[u] + sum_k t[u,k] x[u,k]``;
- every computation finishes by the deadline ``D``;
- minimise ``sum e[i,k] x[i,k] + P_block * (GPUs * D - sum t[i,k] x[i,k])``,
  the energy of an iteration that lasts ``D`` (GPUs that are done early draw
  the blocking power until then), which is what `Frontier.energy_at` gives.

Size: ``2 * stages * microbatches`` computations times the options each.
Pipelines of up to about 4 stages x 6 microbatches with 8 options (48
computations, ~400 binaries) solve to a 1e-7 gap in well under a second to
a few seconds; the model grows linearly, but branch and bound does not, so
much larger pipelines (e.g. 8 x 32) are out of reach. It is not the
production path.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ._optional import optional_module
from ._replay import _setup, _spec
from ._validate import is_real
from ._zeus_format import INSTRUCTIONS
from .errors import ProfileError
from .optimize import evaluate
from .plan import Plan, _seconds
from .profile import Profile

__all__ = ["ExactPlan", "optimal_energy", "optimal_plan"]

# HiGHS's feasibility tolerances (defaults 1e-6 for integrality, 1e-7 for rows).
_FEASIBILITY_TOLERANCE = 1e-9
# Solves again, each with the deadline lowered by the replayed plan's miss.
_RESOLVES = 4
# A replay may sum a path in another order than the row it was checked by:
# a plan within this share of the deadline meets it.
_REPLAY_ROUNDING = 1e-12


@dataclass(frozen=True)
class ExactPlan:
    """The MIP's answer for one deadline.

    Attributes
    ----------
    energy_j : float
        Minimum energy in joules of an iteration that lasts the deadline,
        among plans that meet it.
    iteration_time_s : float
        That plan's own iteration time (critical path) in seconds.
    frequencies : dict
        MHz per (profile stage, instruction, microbatch).
    optimal : bool
        True when HiGHS proved optimality within `relative_gap`.
    """

    energy_j: float
    iteration_time_s: float
    frequencies: dict[tuple[int, str, int], int]
    optimal: bool


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence file descriptor 1 (HiGHS writes to it from C++, past sys.stdout)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def optimal_plan(
    profile: Profile,
    *,
    microbatches: int,
    deadline_s: float,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
    relative_gap: float = 1e-7,
    time_limit_s: float = 60.0,
) -> ExactPlan:
    """Minimum-energy plan with iteration time at most `deadline_s` seconds.

    The plan is replayed on the measured rows and always meets the deadline
    there (a plan that HiGHS's tolerances let miss it by a hair is solved for
    again with the deadline lowered by the miss).

    Raises
    ------
    ProfileError
        For bad pipeline arguments, or when no plan meets the deadline.
    ValueError
        For a deadline that is not a positive, finite number of seconds, or
        a `relative_gap` outside [0, 1) or a `time_limit_s` that is not positive.
    ImportError
        When highspy is not installed (``pip install "perseus-energy[exact]"``).
    """
    highspy = optional_module("highspy", "exact")
    deadline = _seconds(deadline_s, "deadline_s")
    if not 0 < deadline < math.inf:
        raise ValueError(f"deadline_s must be a positive, finite number of seconds, got {deadline}")
    if not is_real(relative_gap) or not 0 <= float(relative_gap) < 1:
        raise ValueError(f"relative_gap must be a number in [0, 1), got {relative_gap!r}")
    if not is_real(time_limit_s) or not float(time_limit_s) > 0:  # NaN fails too
        raise ValueError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    spec = _spec(profile, microbatches, schedule, virtual_stages)
    problem, _, pipeline = _setup(profile, spec)
    n = spec.num_computations
    group = pipeline.group.astype(np.int64)
    rows_of = [profile.measured(g // 2, INSTRUCTIONS[g % 2]) for g in range(2 * profile.num_stages)]
    count = np.array([len(rows_of[g]) for g in group])
    x_start = np.concatenate([[0], np.cumsum(count)])  # x columns of computation i
    num_x = int(x_start[-1])
    t = np.concatenate([rows_of[g].time_s for g in group])
    e = np.concatenate([rows_of[g].energy_j for g in group])
    s_col = num_x + np.arange(n)
    t_col = num_x + n
    power = profile.blocking_power_w

    with _quiet_stdout():  # HiGHS prints its banner on stdout when it starts
        h = highspy.Highs()
    for option, setting in (
        ("output_flag", False),
        ("log_to_console", False),
        ("mip_rel_gap", float(relative_gap)),
        ("time_limit", float(time_limit_s)),
        # HiGHS's defaults let a binary sit 1e-6 off 0 or 1 and a row be 1e-7
        # short: plans that missed the deadline by 1e-6 s when replayed.
        ("mip_feasibility_tolerance", _FEASIBILITY_TOLERANCE),
        ("primal_feasibility_tolerance", _FEASIBILITY_TOLERANCE),
    ):
        if h.setOptionValue(option, setting) != highspy.HighsStatus.kOk:
            raise ValueError(f"HiGHS refused {option}={setting!r}")
    inf = highspy.kHighsInf
    num_cols = num_x + n + 1
    lower = np.zeros(num_cols)
    lower[-1] = deadline  # T is the deadline itself
    upper = np.concatenate([np.ones(num_x), np.full(n, inf), [deadline]])
    h.addVars(num_cols, lower, upper)
    cost = np.concatenate([e - power * t, np.zeros(n), [power * spec.num_gpus]])
    h.changeColsCost(num_cols, np.arange(num_cols, dtype=np.int32), cost)
    h.changeColsIntegrality(
        num_x,
        np.arange(num_x, dtype=np.int32),
        np.full(num_x, highspy.HighsVarType.kInteger),
    )

    rows: list[tuple[float, float, np.ndarray, np.ndarray]] = []
    for i in range(n):  # exactly one option per computation
        cols = np.arange(x_start[i], x_start[i + 1])
        rows.append((1.0, 1.0, cols, np.ones(len(cols))))
    src, dst = problem.edges()
    has_successor = np.zeros(n, dtype=bool)
    has_successor[src] = True
    for u, v in zip(src, dst):  # s[v] - s[u] - duration(u) >= 0
        cols = np.arange(x_start[u], x_start[u + 1])
        rows.append(
            (
                0.0,
                inf,
                np.concatenate([[s_col[v], s_col[u]], cols]),
                np.concatenate([[1.0, -1.0], -t[cols]]),
            )
        )
    for sink in np.flatnonzero(~has_successor):  # T - s[sink] - duration(sink) >= 0
        cols = np.arange(x_start[sink], x_start[sink + 1])
        rows.append(
            (
                0.0,
                inf,
                np.concatenate([[t_col, s_col[sink]], cols]),
                np.concatenate([[1.0, -1.0], -t[cols]]),
            )
        )
    starts = np.cumsum([0] + [len(r[2]) for r in rows[:-1]]).astype(np.int32)
    index = np.concatenate([r[2] for r in rows]).astype(np.int32)
    value = np.concatenate([r[3] for r in rows]).astype(np.float64)
    h.addRows(
        len(rows),
        np.array([r[0] for r in rows]),
        np.array([r[1] for r in rows]),
        len(index),
        starts,
        index,
        value,
    )
    # The plan is judged by its replay on the measured rows: where what is left
    # of the solver's tolerances makes it miss the deadline, solve again with
    # the model's deadline lowered by the miss.
    model_deadline = deadline
    for _ in range(_RESOLVES + 1):
        with _quiet_stdout():
            h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            raise ProfileError(f"no plan meets a deadline of {deadline:.6g} s")
        solution = np.asarray(h.getSolution().col_value)
        if solution.size != num_cols:
            raise RuntimeError(f"HiGHS found no solution ({h.modelStatusToString(status)})")
        mhz = np.array(
            [
                rows_of[group[i]].frequency_mhz[
                    int(np.argmax(solution[x_start[i] : x_start[i + 1]]))
                ]
                for i in range(n)
            ]
        )
        plan = Plan(spec, mhz, 0.0, 0.0)
        replayed = evaluate(profile, plan)
        miss = replayed.iteration_time_s - deadline
        if miss <= deadline * _REPLAY_ROUNDING:
            break
        # Lowered past the tolerance too, or HiGHS gives the same plan again.
        model_deadline -= miss + 2 * _FEASIBILITY_TOLERANCE * max(1.0, deadline)
        h.changeColBounds(t_col, model_deadline, model_deadline)
    else:
        raise RuntimeError(
            f"HiGHS's plans miss the deadline of {deadline:.9g} s when replayed "
            f"({replayed.iteration_time_s:.9g} s after {_RESOLVES} tighter solves)"
        )
    slack = max(0.0, deadline - replayed.iteration_time_s)
    return ExactPlan(
        energy_j=replayed.energy_j + power * spec.num_gpus * slack,
        iteration_time_s=replayed.iteration_time_s,
        frequencies=plan.frequency_map_mhz,
        optimal=status == highspy.HighsModelStatus.kOptimal,
    )


def optimal_energy(
    profile: Profile,
    *,
    microbatches: int,
    deadline_s: float,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
    relative_gap: float = 1e-7,
    time_limit_s: float = 60.0,
) -> float:
    """Minimum energy (J) of an iteration lasting `deadline_s` (s); see `optimal_plan`."""
    return optimal_plan(
        profile,
        microbatches=microbatches,
        deadline_s=deadline_s,
        schedule=schedule,
        virtual_stages=virtual_stages,
        relative_gap=relative_gap,
        time_limit_s=time_limit_s,
    ).energy_j

"""`optimize` (profile to frontier) and `evaluate` (replay one plan)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from typing import Union

import numpy as np

from . import _core
from .errors import ProfileError
from .frontier import Evaluation, Frontier, PipelineSpec, Plan
from .profile import INSTRUCTIONS, Profile
from .progress import ProgressBar
from .schedule import build_pipeline, count_argument

__all__ = ["evaluate", "optimize"]

ProgressArg = Union[None, bool, Callable[[int, int], object]]


class _OptionTable:
    """A profile's options flattened in the core's group order (2*stage + instruction)."""

    def __init__(self, profile: Profile) -> None:
        groups = [
            profile.options(stage, instruction)
            for stage in range(profile.num_stages)
            for instruction in INSTRUCTIONS
        ]
        self.offsets = np.cumsum([0] + [len(g) for g in groups]).astype(np.int32)
        self.time_s = np.concatenate([g.time_s for g in groups])
        self.energy_j = np.concatenate([g.energy_j for g in groups])
        self.frequency_mhz = np.concatenate([g.frequency_mhz for g in groups])
        self.groups = groups


def _check_profile(profile: object) -> Profile:
    if not isinstance(profile, Profile):
        raise TypeError(f"expected a perseus.Profile, got {type(profile).__name__}")
    return profile


def _setup(
    profile: Profile, microbatches: int, schedule: str, virtual_stages: int
) -> tuple[_core.Problem, PipelineSpec, _OptionTable, np.ndarray]:
    _check_profile(profile)
    virtual_stages = count_argument("virtual_stages", virtual_stages)
    if profile.num_stages % virtual_stages:
        raise ProfileError(
            f"virtual_stages={virtual_stages} does not divide the profile's "
            f"{profile.num_stages} stages"
        )
    num_gpus = profile.num_stages // virtual_stages
    pipeline = build_pipeline(schedule, num_gpus, microbatches, virtual_stages)
    microbatches = int(microbatches)
    table = _OptionTable(profile)
    try:
        problem = _core.Problem(
            pipeline, table.offsets, table.time_s, table.energy_j, profile.blocking_power
        )
    except ValueError as error:
        raise ProfileError(str(error)) from None
    spec = PipelineSpec(schedule, num_gpus, virtual_stages, microbatches)
    group = 2 * pipeline.stage.astype(np.int64) + pipeline.instruction
    return problem, spec, table, group


def _check_unit_time(unit_time: float, table: _OptionTable) -> float:
    if isinstance(unit_time, bool) or not isinstance(unit_time, (int, float)):
        raise ProfileError(f"unit_time must be a number of seconds, got {unit_time!r}")
    unit_time = float(unit_time)
    if not math.isfinite(unit_time) or unit_time <= 0:
        raise ProfileError(f"unit_time must be a positive number of seconds, got {unit_time!r}")
    if all(len(np.unique(np.ceil(g.time_s / unit_time * (1 - 1e-12)))) == 1 for g in table.groups):
        shortest = (
            min(float(np.min(np.diff(g.time_s))) for g in table.groups if len(g) > 1)
            if any(len(g) > 1 for g in table.groups)
            else None
        )
        hint = (
            f"; the closest options differ by {shortest:.3g} s"
            if shortest is not None
            else "; every stage has a single option, so there is nothing to choose"
        )
        raise ProfileError(
            f"unit_time={unit_time:g} s is so coarse that every stage's options collapse "
            f"to one duration{hint}"
        )
    return unit_time


def _progress_callback(progress: ProgressArg) -> Callable[[int, int], object] | None:
    if progress is None or progress is False:
        return None
    if progress is True:
        return ProgressBar("solving frontier", unit="steps", stream=sys.stderr)
    if callable(progress):
        return progress
    raise TypeError("progress must be None, a bool, or a callable(done, expected)")


def optimize(
    profile: Profile,
    *,
    microbatches: int,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
    unit_time: float = 1e-3,
    progress: ProgressArg = None,
    refine: bool = True,
) -> Frontier:
    """Compute the iteration time-energy Pareto frontier of one training iteration.

    Parameters
    ----------
    profile : Profile
        Measured time (s) and energy (J) per stage, instruction and frequency,
        with the GPUs' blocking power (W).
    microbatches : int
        Microbatches per iteration (>= 1).
    schedule : str
        ``"1f1b"`` (default), ``"gpipe"`` or ``"interleaved-1f1b"``.
    virtual_stages : int
        Model chunks per GPU; the profile's stages are chunks and chunk ``k``
        runs on GPU ``k % (stages / virtual_stages)``. Needs the interleaved
        schedule when > 1.
    unit_time : float
        Time quantum of the solver in seconds (default 1 ms). Smaller is finer
        and slower: the solver takes one step per quantum between the fastest
        and the cheapest iteration time.
    progress : None, bool or callable
        ``True`` draws a progress bar on stderr; a callable receives
        ``(steps done, steps expected)`` now and then.
    refine : bool
        Improve the min-cut plans on the measured times (default): slack
        reclamation, tightening down to the fastest time, and a local search
        at deadlines one `unit_time` apart. ``False`` returns the plain
        Phillips-Dessouky plans (each replayed as it is, dominated ones
        dropped), which is what the refinement is measured against.

    Returns
    -------
    Frontier
        Plans from fastest to slowest, each replayed on the measured options.

    Raises
    ------
    ProfileError
        For arguments the pipeline or the solver cannot use (the message names
        the argument).

    Examples
    --------
    >>> profile = Profile.from_csv("examples/small-4stage.csv", blocking_power=70.0)
    >>> frontier = optimize(profile, microbatches=8)
    >>> plan = frontier.plan_for(deadline=1.05 * frontier.iteration_times[0])
    >>> plan.iteration_time <= 1.05 * frontier.iteration_times[0]
    True
    """
    started = time.perf_counter()
    problem, spec, table, group = _setup(profile, microbatches, schedule, virtual_stages)
    unit_time = _check_unit_time(unit_time, table)
    callback = _progress_callback(progress)
    try:
        result = problem.solve(unit_time, callback, bool(refine))
    finally:
        if isinstance(callback, ProgressBar):
            callback.close()
    frequencies = table.frequency_mhz[table.offsets[group] + result["choices"].astype(np.int64)]
    plans = [
        Plan(spec, frequencies[k], t, e, eb, profile.blocking_power)
        for k, (t, e, eb) in enumerate(
            zip(result["iteration_time_s"], result["energy_j"], result["energy_before_reclaim_j"])
        )
    ]
    return Frontier(
        plans,
        baseline=Evaluation(result["baseline_time_s"], result["baseline_energy_j"]),
        spec=spec,
        unit_time=unit_time,
        blocking_power=profile.blocking_power,
        solve_time=time.perf_counter() - started,
        steps=result["steps"],
        solver_unit_time=result["unit_time_s"],
    )


def evaluate(
    profile: Profile,
    frequencies: Mapping[tuple[int, str, int], int] | Plan,
    *,
    microbatches: int | None = None,
    schedule: str | None = None,
    virtual_stages: int | None = None,
) -> Evaluation:
    """Replay a plan on the profile's measured options.

    Parameters
    ----------
    profile : Profile
        Measured options and blocking power.
    frequencies : Mapping or Plan
        MHz per ``(profile stage, instruction, microbatch)``, each one of that
        (stage, instruction)'s Pareto-optimal frequencies; or a `Plan` (whose
        pipeline is then the default for the other arguments).
    microbatches, schedule, virtual_stages
        The pipeline; ``schedule`` defaults to ``"1f1b"`` and
        ``virtual_stages`` to 1 when not given by a `Plan`.

    Returns
    -------
    Evaluation
        Iteration time (longest path, s) and energy
        ``sum e + P_block * (GPUs * T - sum t)`` (J).
    """
    if isinstance(frequencies, Plan):
        spec = frequencies.spec
        microbatches = spec.microbatches if microbatches is None else microbatches
        schedule = spec.schedule if schedule is None else schedule
        virtual_stages = spec.virtual_stages if virtual_stages is None else virtual_stages
        frequencies = frequencies.frequencies()
    if microbatches is None:
        raise ProfileError("evaluate() needs microbatches")
    schedule = "1f1b" if schedule is None else schedule
    virtual_stages = 1 if virtual_stages is None else virtual_stages
    problem, spec, table, _ = _setup(profile, microbatches, schedule, virtual_stages)
    choices = np.empty(spec.num_computations, dtype=np.uint16)
    lookup = [{int(f): k for k, f in enumerate(g.frequency_mhz)} for g in table.groups]
    for stage in range(spec.num_stages):
        for kind, instruction in enumerate(INSTRUCTIONS):
            options = lookup[2 * stage + kind]
            for mb in range(spec.microbatches):
                key = (stage, instruction, mb)
                try:
                    mhz = frequencies[key]
                except KeyError:
                    raise ProfileError(f"the plan gives no frequency for {key}") from None
                if mhz not in options:
                    raise ProfileError(
                        f"{key}: {mhz} MHz is not a Pareto-optimal option of stage {stage} "
                        f"{instruction} (options: {sorted(options, reverse=True)})"
                    )
                choices[spec.computation_id(stage, instruction, mb)] = options[mhz]
    times, energies, _ = problem.evaluate(choices[np.newaxis, :])
    return Evaluation(float(times[0]), float(energies[0]))

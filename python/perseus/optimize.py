"""`optimize` (profile to frontier) and `evaluate` (replay one plan)."""

from __future__ import annotations

import inspect
import math
import numbers
import sys
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Optional, Union

import numpy as np

from . import _core
from ._deprecation import warn_renamed
from ._plan_store import PlanStore
from ._replay import _of_profile, _OptionTable, _setup, _spec, measured_rows
from ._validate import is_integer, is_real
from ._zeus_format import INSTRUCTIONS
from .errors import ProfileError
from .frontier import Frontier, check_fingerprint
from .pipeline_spec import PipelineSpec
from .plan import Evaluation, Plan
from .profile import LIMITS, Profile
from .progress import ProgressBar, ProgressReporter, SolveProgress

__all__ = [
    "DEFAULT_THREADS",
    "LOCAL_SEARCH_MOVES",
    "MAX_THREADS",
    "SolverBudgets",
    "evaluate",
    "optimize",
]

SolverBudgets = _core.SolverBudgets
"""Work budgets of a solve; every field is documented in ``cpp/solver_options.hpp``."""

ProgressArg = Union[None, bool, Callable[[SolveProgress], object]]

# Up-front size limits: a solve estimated beyond either is refused before it
# allocates anything large, with a message saying what to change.
MAX_WORK = 2e11  # computations x min-cut steps (about an hour on one core)
# Min-cut steps of unit_time_s, whatever the pipeline: each costs a few
# microseconds beyond the computations it touches, and a frontier needs no
# more distinct times than this (a unit of 1e-9 s asked for 1e8 of them).
MAX_STEPS = 1e7
MAX_MEMORY_BYTES = 16 * 2**30
_BYTES_PER_COMPUTATION = 400  # pipeline, DAG, solver and improver arrays
_BYTES_PER_PLAN_COMPUTATION = 4  # a frontier plan: int32 clocks in Python (the core keeps changes)
_EXPECTED_PLANS = 4096


def _unit_time_argument(unit_time_s: Any, legacy: Any) -> float:
    if legacy is not None:
        if unit_time_s is not None:
            raise ProfileError("give unit_time_s only (unit_time is its old name)")
        warn_renamed("optimize(unit_time=...)", "optimize(unit_time_s=...)", stacklevel=4)
        unit_time_s = legacy
    if unit_time_s is None:
        return 1e-3
    if not is_real(unit_time_s):
        raise ProfileError(f"unit_time_s must be a number of seconds, got {unit_time_s!r}")
    try:
        unit = float(unit_time_s)
    except OverflowError:  # an int beyond the float range
        unit = math.inf
    if not math.isfinite(unit) or unit <= 0:
        raise ProfileError(f"unit_time_s must be a positive number of seconds, got {unit_time_s!r}")
    return unit


def _check_size(profile: Profile, spec: PipelineSpec, unit_time_s: float) -> None:
    """Refuse a solve whose estimated work or memory is out of reach, before building it."""
    computations = spec.num_computations
    # Each of the (microbatches + GPUs) slots of the critical path may slow
    # down by its stage's range of forward + backward times.
    widest = max(
        float(profile.options(s, "forward").time_s[-1] - profile.options(s, "forward").time_s[0])
        + float(
            profile.options(s, "backward").time_s[-1] - profile.options(s, "backward").time_s[0]
        )
        for s in range(profile.num_stages)
    )
    steps = (spec.microbatches * spec.virtual_stages + spec.num_gpus) * widest / unit_time_s
    work = computations * steps
    memory = computations * (_BYTES_PER_COMPUTATION + _EXPECTED_PLANS * _BYTES_PER_PLAN_COMPUTATION)
    if work > MAX_WORK:
        raise ProfileError(
            f"this solve would take about {steps:.3g} min-cut steps over {computations} "
            f"computations ({work:.3g} work units; the limit is {MAX_WORK:.3g}): use a larger "
            f"unit_time_s than {unit_time_s:g} s, or fewer microbatches"
        )
    if steps > MAX_STEPS:
        raise ProfileError(
            f"this solve would take about {steps:.3g} min-cut steps of {unit_time_s:g} s "
            f"(the limit is {MAX_STEPS:.3g}): use a larger unit_time_s than {unit_time_s:g} s"
        )
    if memory > MAX_MEMORY_BYTES:
        raise ProfileError(
            f"this solve would need about {memory / 2**30:.1f} GiB for {computations} computations "
            f"(the limit is {MAX_MEMORY_BYTES / 2**30:.0f} GiB): use fewer microbatches or stages"
        )


def _thread_start_failed(error: RuntimeError) -> bool:
    text = str(error)
    return "Resource temporarily unavailable" in text or "can't start new thread" in text


def _progress_sinks(
    progress: ProgressArg,
) -> tuple[list[Callable[[SolveProgress], object]], Optional[ProgressBar]]:
    if progress is None or progress is False:
        return [], None
    if progress is True:
        if sys.stderr is None:  # no stderr (2>&-, a daemon): nowhere to show a bar
            return [], None
        bar = ProgressBar(sys.stderr)
        return [bar], bar
    if not callable(progress):
        raise TypeError("progress must be None, a bool, or a callable taking a SolveProgress")
    if _takes_two_arguments(progress):
        warn_renamed(
            "progress=callable(done, expected)", "progress=callable(SolveProgress)", stacklevel=4
        )
        legacy: Callable[[int, int], object] = progress  # type: ignore[assignment]
        return [lambda report: legacy(report.done, report.total)], None
    return [progress], None


def _takes_two_arguments(function: Callable[..., object]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) == 2


#: The most threads a solve may be given (the core's limit, ``cpp/solver_options.hpp``).
MAX_THREADS: int = _core.MAX_THREADS

#: Threads a solve uses when not told (``SolverOptions::kDefaultThreads``).
DEFAULT_THREADS: int = _core.DEFAULT_THREADS

#: The local search's fixed move set and tolerances (``local_search_moves`` in
#: ``cpp/solver_options.hpp``), read-only: unlike `SolverBudgets` they are not
#: options, because changing one changes the algorithm rather than its effort.
#: ``squeezes`` (relative), ``jumps_options``, ``pair_candidates``,
#: ``starts_per_side``, ``improvement_share``, ``critical_share``, ``hull_gap_share``.
LOCAL_SEARCH_MOVES: Mapping[str, Any] = MappingProxyType(dict(_core.LOCAL_SEARCH_MOVES))


def _threads_argument(threads: Any) -> int:
    """``threads=`` as the core takes it: 0 for the default, else 1..MAX_THREADS."""
    if threads is None:
        return 0
    if not is_integer(threads):
        raise ProfileError(f"threads must be a whole number of threads, got {threads!r}")
    if not 1 <= int(threads) <= MAX_THREADS:
        raise ProfileError(f"threads must be in 1..{MAX_THREADS}, got {threads}")
    return int(threads)


def _budgets_argument(budgets: Any) -> _core.SolverBudgets:
    if budgets is None:
        return _core.SolverBudgets()
    if isinstance(budgets, _core.SolverBudgets):
        return budgets
    if isinstance(budgets, Mapping):
        out = _core.SolverBudgets()
        for key, value in budgets.items():
            if not isinstance(key, str) or not hasattr(out, key) or key.startswith("_"):
                raise ProfileError(f"budgets: unknown field {key!r}")
            kind = type(getattr(out, key))  # bool, int (int64) or float
            allowed = {bool: bool, int: numbers.Integral, float: numbers.Real}[kind]
            if not isinstance(value, allowed) or (isinstance(value, bool) and kind is not bool):
                raise ProfileError(f"budgets.{key}: expected {kind.__name__}, got {value!r}")
            try:
                setattr(out, key, kind(value))
            except (TypeError, OverflowError):  # an int beyond int64
                raise ProfileError(f"budgets.{key}: {value!r} is out of range") from None
        return out
    raise TypeError(
        f"budgets must be a perseus.SolverBudgets or a mapping, got {type(budgets).__name__}"
    )


def _of_solve(profile: Profile, message: str) -> str:
    """A solve's error: about an argument (named first), or else about the profile."""
    argument = message.split(" ", 1)[0].split("=", 1)[0]
    if argument.startswith("budgets.") or argument in ("progress_period_s", "unit_time_s"):
        return message
    return _of_profile(profile, message)


def _period_argument(progress_period_s: Any) -> float:
    if not is_real(progress_period_s):
        raise ProfileError(
            f"progress_period_s must be a number of seconds, got {progress_period_s!r}"
        )
    try:
        return float(progress_period_s)  # the core checks the range
    except OverflowError:
        raise ProfileError(f"progress_period_s={progress_period_s!r} is out of range") from None


def optimize(
    profile: Profile,
    *,
    microbatches: int,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
    unit_time_s: Optional[float] = None,
    progress: ProgressArg = None,
    refine: bool = True,
    budgets: Optional[Union[_core.SolverBudgets, Mapping[str, Any]]] = None,
    progress_period_s: float = 0.1,
    unit_time: Optional[float] = None,
    fingerprint: Optional[Mapping[str, Any]] = None,
    threads: Optional[int] = None,
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
    unit_time_s : float
        Time quantum of the solver in seconds (default 1 ms). Smaller is finer
        and slower: the solver takes one step per quantum between the fastest
        and the cheapest iteration time.
    progress : None, bool or callable
        ``True`` draws a progress line on stderr (a line every few seconds
        when stderr is not a terminal); a callable receives a
        `~perseus.progress.SolveProgress` (phase, counts, share, ETA) at most
        once per `progress_period_s`, and cancels the solve by returning
        ``False`` (or another false value but None, such as ``numpy.False_``);
        an exception it raises comes out of `optimize` unchanged.
    refine : bool
        Improve the min-cut plans on the measured times (default): slack
        reclamation, the fast end down to the all-fastest time, and a local
        search. ``False`` returns the plain Phillips-Dessouky plans (each
        replayed as it is, dominated ones dropped).
    budgets : SolverBudgets or mapping, optional
        Work budgets of the refinement (see ``cpp/solver_options.hpp``);
        for tests and benchmarks.
    progress_period_s : float
        Least time between two progress reports, measured from the end of
        the previous one.
    fingerprint : mapping, optional
        What the profile's measurement depended on (GPU model, parallelism,
        ...), kept as `Frontier.fingerprint` and saved with it; checked
        before the solve (see `perseus.frontier.check_fingerprint`).
    threads : int, optional
        Threads the solve may use, the caller's included (default
        `DEFAULT_THREADS`, 4: the
        min-cut loop, the plain walk and the two candidate chains; see
        ``cpp/solver_options.hpp``). The plans do not depend on it, only the
        wall time does; ``1`` keeps a solve on one thread (many solves side
        by side).

    Returns
    -------
    Frontier
        Plans from fastest to slowest, each replayed on the measured options.

    Raises
    ------
    ProfileError
        For arguments the pipeline or the solver cannot use (the message names
        the argument), or a solve too large to run.
    KeyboardInterrupt
        On Ctrl-C, within a fraction of a second in any phase; as
        `perseus.SolveCancelled` (a KeyboardInterrupt) when the progress
        callable cancels.

    Examples
    --------
    >>> profile = Profile.from_csv("examples/small-4stage.csv", blocking_power_w=70.0)
    >>> frontier = optimize(profile, microbatches=8)
    >>> plan = frontier.plan_for(1.05 * frontier.iteration_times_s[0])
    >>> bool(plan.iteration_time_s <= 1.05 * frontier.iteration_times_s[0])
    True
    """
    started = time.perf_counter()
    if not isinstance(refine, bool):
        raise TypeError(f"refine must be True or False, got {refine!r}")
    checked_fingerprint = check_fingerprint(fingerprint)
    spec = _spec(profile, microbatches, schedule, virtual_stages)
    unit = _unit_time_argument(unit_time_s, unit_time)
    solver_budgets = _budgets_argument(budgets)
    period = _period_argument(progress_period_s)
    thread_count = _threads_argument(threads)
    _check_size(profile, spec, unit)
    problem, table, pipeline = _setup(profile, spec)
    sinks, bar = _progress_sinks(progress)
    reporter = ProgressReporter(sinks=sinks) if sinks else None
    try:
        result = problem.solve(unit, refine, solver_budgets, reporter, period, thread_count)
    except ValueError as error:
        if reporter is not None and error is reporter.raised:
            raise  # the progress callback's own error, unchanged
        raise ProfileError(_of_solve(profile, str(error))) from None
    except RuntimeError as error:
        # std::thread's failure (pthread_create: EAGAIN) says nothing of what to do.
        if (reporter is not None and error is reporter.raised) or not _thread_start_failed(error):
            raise
        raise RuntimeError(
            f"cannot start the solver's threads ({error}): a resource limit was reached "
            "(memory, ulimit -v / -u, or the cgroup's pids limit); try a larger limit, or "
            "threads=1, which solves on the calling thread alone"
        ) from None
    finally:
        if bar is not None:
            bar.close(completed=sys.exc_info()[0] is None)  # no "done" after Ctrl-C
    return Frontier(
        _plans_of(result, table, pipeline, spec, profile),
        baseline=Evaluation(result.baseline_time_s, result.baseline_energy_j),
        spec=spec,
        unit_time_s=unit,
        blocking_power_w=profile.blocking_power_w,
        solve_time_s=time.perf_counter() - started,
        steps=result.steps,
        cuts=result.cuts,
        solver_unit_time_s=result.unit_time_s,
        stop_reason=_core.stop_reason_name(result.stop_reason),
        phase_times_s=result.phase_seconds,
        profile=profile,
        fingerprint=checked_fingerprint,
    )


def _plans_of(
    result: _core.SolveResult,
    table: _OptionTable,
    pipeline: _core.Pipeline,
    spec: PipelineSpec,
    profile: Profile,
) -> PlanStore:
    """The solve's plans as a `PlanStore`: the first plan's clocks and each next plan's changes.

    Consecutive plans differ in a few computations, so this is the size of
    the changes, where one int32 row per plan took 5 GB at 16 x 1024; a
    `Plan` is made when asked for. Every clock is one the profile measured
    (checked when it was read), so the plans need no checker.
    """
    first_option = table.offsets[pipeline.group].astype(np.int32)
    first, counts, ids, mhz = result.choice_value_changes(
        first_option, table.frequency_mhz.astype(np.int32)
    )
    return PlanStore(
        spec,
        first,
        counts,
        ids,
        mhz,
        result.iteration_time_s,
        result.energy_j,
        result.energy_before_reclaim_j,
        profile.blocking_power_w,
        profile,
    )


def evaluate(
    profile: Profile,
    frequencies: Union[Mapping[tuple[int, str, int], int], Plan],
    *,
    microbatches: Optional[int] = None,
    schedule: Optional[str] = None,
    virtual_stages: Optional[int] = None,
    switch_latency_s: Optional[float] = None,
) -> Evaluation:
    """Replay a plan on the profile's measured options.

    Parameters
    ----------
    profile : Profile
        Measured options and blocking power.
    frequencies : Mapping or Plan
        MHz per ``(profile stage, instruction, microbatch)``, each one of that
        (stage, instruction)'s measured frequencies (useful or not); or a
        `Plan` (whose pipeline is then the default for the other arguments).
    microbatches, schedule, virtual_stages
        The pipeline; ``schedule`` defaults to ``"1f1b"`` and
        ``virtual_stages`` to 1 when not given by a `Plan`.
    switch_latency_s : float, optional
        Replay as if every clock change took effect this many seconds after
        the GPU reached the computation that asked for it, the computation
        running at the previous clock until then (`perseus.switch_latency`
        describes the model). ``None`` or 0: changes are instant.

    Returns
    -------
    Evaluation
        Iteration time (longest path, s) and energy
        ``sum e + P_block * (GPUs * T - sum t)`` (J).
    """
    if isinstance(frequencies, Plan):
        plan_spec = frequencies.spec
        microbatches = plan_spec.microbatches if microbatches is None else microbatches
        schedule = plan_spec.schedule if schedule is None else schedule
        virtual_stages = plan_spec.virtual_stages if virtual_stages is None else virtual_stages
    if microbatches is None:
        raise ProfileError("evaluate() needs microbatches")
    spec = _spec(
        profile,
        microbatches,
        "1f1b" if schedule is None else schedule,
        1 if virtual_stages is None else virtual_stages,
    )
    if not isinstance(frequencies, (Plan, Mapping)):
        raise TypeError(
            "frequencies must be a Plan or a mapping {(stage, instruction, microbatch): MHz}, "
            f"got {type(frequencies).__name__}"
        )
    if isinstance(frequencies, Plan):
        if frequencies.spec != spec:
            raise ProfileError(f"the plan is for {frequencies.spec}, not {spec}")
        mhz = np.asarray(frequencies.frequencies_mhz, dtype=np.int64)
    else:
        mhz = _frequencies_from_mapping(frequencies, spec)
    problem, _, _ = _setup(profile, spec)
    time_s, energy_j = measured_rows(profile, spec, mhz[np.newaxis, :])
    if switch_latency_s is not None:
        from .switch_latency import replay_with_switch_latency

        late = replay_with_switch_latency(profile, spec, mhz, switch_latency_s)
        return Evaluation(late.iteration_time_s, late.energy_j)
    times, energies = problem.replay(time_s, energy_j)
    return Evaluation(float(times[0]), float(energies[0]))


def _frequencies_from_mapping(
    frequencies: Mapping[tuple[int, str, int], int], spec: PipelineSpec
) -> np.ndarray:
    pipeline = spec.pipeline()
    stage, kind, microbatch = pipeline.stage, pipeline.instruction, pipeline.microbatch
    out = np.empty(spec.num_computations, dtype=np.int64)
    for i in range(spec.num_computations):
        key = (int(stage[i]), INSTRUCTIONS[kind[i]], int(microbatch[i]))
        try:
            value = frequencies[key]
        except KeyError:
            raise ProfileError(f"the plan gives no frequency for {key}") from None
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or not LIMITS.min_frequency_mhz <= value <= LIMITS.max_frequency_mhz
        ):
            raise ProfileError(
                f"{key}: the frequency must be whole MHz in {LIMITS.min_frequency_mhz}.."
                f"{LIMITS.max_frequency_mhz}, got {value!r}"
            )
        out[i] = int(value)
    return out

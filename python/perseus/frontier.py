"""Frontier results: `Plan` (one frequency per computation) and `Frontier`.

A plan's computations are identified by (profile stage, instruction,
microbatch). Internally they are kept in the core's id order (the core's
``Pipeline.ids`` gives it), which is also the order of ``frequencies_mhz`` in
saved frontier files. Version 2 of the file lists every plan's frequencies in
full, the computation each position stands for, and the profile the plans
were made from; version 1 (each later plan as ``changes`` against the one
before) is still read.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, TypedDict, overload

import numpy as np

from . import _core, _zeus_plan
from ._deprecation import warn_renamed
from ._files import replace_user_file
from ._zeus_format import INSTRUCTIONS
from .errors import ProfileError
from .profile import LIMITS, Profile
from .schedule import build_pipeline
from .timeline import PowerTimeline, Timeline, timelines

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "Evaluation",
    "Frontier",
    "FrontierSummary",
    "PipelineSpec",
    "Plan",
    "PlanStep",
    "PowerCapError",
]

FORMAT_NAME = "perseus-frontier"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_FILE_BYTES = 512 * 1024 * 1024
"""Frontier files larger than this are refused unread (override with ``max_bytes``)."""
_STOP_REASONS = ("minimum_time", "no_progress", "infeasible_flow")


@dataclass(frozen=True)
class Evaluation:
    """A plan replayed on measured options.

    Attributes
    ----------
    iteration_time_s : float
        Longest path through the iteration's DAG, in seconds.
    energy_j : float
        Energy of all GPUs over one iteration, in joules, blocking included.
    """

    iteration_time_s: float
    energy_j: float

    @property
    def iteration_time(self) -> float:
        """Deprecated: use `iteration_time_s`."""
        warn_renamed("Evaluation.iteration_time", "Evaluation.iteration_time_s")
        return self.iteration_time_s

    @property
    def energy(self) -> float:
        """Deprecated: use `energy_j`."""
        warn_renamed("Evaluation.energy", "Evaluation.energy_j")
        return self.energy_j


@dataclass(frozen=True)
class PipelineSpec:
    """The pipeline a plan was made for."""

    schedule: str
    num_gpus: int
    virtual_stages: int
    microbatches: int

    @property
    def num_stages(self) -> int:
        """Model chunks (profile stages): GPUs times virtual stages."""
        return self.num_gpus * self.virtual_stages

    @property
    def num_computations(self) -> int:
        return 2 * self.num_stages * self.microbatches

    def pipeline(self) -> _core.Pipeline:
        """The core's pipeline (schedule orders, ids, groups); built once per spec."""
        return _pipeline_of(self)

    def computation_id(self, stage: int, instruction: str, microbatch: int) -> int:
        """Core id of a computation, with a clear error for a bad key."""
        if not _is_index(stage, self.num_stages):
            raise ValueError(
                f"stage {stage!r} is out of range: this pipeline has {self.num_stages} stages"
            )
        if instruction not in INSTRUCTIONS:
            raise ValueError(f"instruction {instruction!r} is not one of {INSTRUCTIONS}")
        if not _is_index(microbatch, self.microbatches):
            raise ValueError(
                f"microbatch {microbatch!r} is out of range: this pipeline runs {self.microbatches}"
            )
        return int(
            self.pipeline().id_of(int(stage), int(microbatch), INSTRUCTIONS.index(instruction))
        )


@functools.lru_cache(maxsize=16)
def _pipeline_of(spec: PipelineSpec) -> _core.Pipeline:
    return build_pipeline(spec.schedule, spec.num_gpus, spec.microbatches, spec.virtual_stages)


def _is_index(value: object, size: int) -> bool:
    return (
        isinstance(value, numbers.Integral)
        and not isinstance(value, bool)
        and 0 <= int(value) < size
    )


def _seconds(value: object, name: str) -> float:
    """`value` as a finite float of seconds, or a TypeError/ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if math.isnan(seconds):
        raise ValueError(f"{name} must be a number of seconds, got NaN")
    return seconds


def _frequencies_array(values: Any, spec: PipelineSpec) -> np.ndarray:
    """A read-only int32 copy of a plan's MHz, checked against `LIMITS`."""
    raw = np.array(values, copy=True)
    if raw.shape != (spec.num_computations,):
        raise ValueError(
            f"a plan for this pipeline needs {spec.num_computations} frequencies, got shape {raw.shape}"
        )
    if raw.dtype.kind not in "iu":
        as_float = raw.astype(np.float64)
        if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
            raise ValueError("plan frequencies must be whole MHz")
    if raw.size and (
        np.min(raw) < LIMITS.min_frequency_mhz or np.max(raw) > LIMITS.max_frequency_mhz
    ):
        raise ValueError(
            f"plan frequencies must be {LIMITS.min_frequency_mhz}..{LIMITS.max_frequency_mhz} MHz"
        )
    frequencies = raw.astype(np.int32)
    frequencies.setflags(write=False)
    return frequencies


@dataclass(frozen=True)
class PlanStep:
    """One computation in a GPU's execution order, with its planned clock."""

    gpu: int  #: pipeline rank
    position: int  #: place in the GPU's execution order, from 0
    instruction: str  #: ``"forward"`` or ``"backward"``
    stage: int  #: profile stage (model chunk): ``chunk * num_gpus + gpu``
    chunk: int  #: virtual chunk on the GPU
    microbatch: int
    frequency_mhz: int
    computation: int  #: the core's computation id (index into ``frequencies_mhz``)


class PowerCapError(ValueError):
    """No plan of a frontier stays within a power cap.

    ``lowest_w`` is the lowest power any plan achieves (average or peak, as
    asked), so the caller can say what cap would work.
    """

    def __init__(self, message: str, lowest_w: float) -> None:
        super().__init__(message)
        self.lowest_w = lowest_w


def _all_fastest_frequencies(profile: Profile, spec: PipelineSpec) -> list[int]:
    pipeline = spec.pipeline()
    fastest = {
        (stage, k): int(profile.options(stage, instruction).frequency_mhz[0])
        for stage in range(profile.num_stages)
        for k, instruction in enumerate(INSTRUCTIONS)
    }
    return [fastest[(int(s), int(k))] for s, k in zip(pipeline.stage, pipeline.instruction)]


def all_fastest_plan(profile: Profile, spec: PipelineSpec) -> Plan:
    """Every computation at its fastest measured option, replayed on `profile` (the baseline)."""
    from .optimize import evaluate

    plan = Plan(spec, _all_fastest_frequencies(_check_profile_fits(profile, spec), spec), 1.0, 1.0)
    result = evaluate(profile, plan)
    return Plan(
        spec,
        plan.frequencies_mhz,
        result.iteration_time_s,
        result.energy_j,
        blocking_power_w=profile.blocking_power_w,
        profile=profile,
    )


def _check_profile_fits(profile: object, spec: PipelineSpec) -> Profile:
    if not isinstance(profile, Profile):
        raise TypeError(f"expected a perseus.Profile, got {type(profile).__name__}")
    if profile.num_stages != spec.num_stages:
        raise ProfileError(
            f"the profile has {profile.num_stages} stages; this plan's pipeline has "
            f"{spec.num_stages} ({spec.num_gpus} GPUs x {spec.virtual_stages} chunks)"
        )
    return profile


class Plan:
    """One SM frequency for every computation of an iteration.

    Read-only: every attribute is a property, and `frequencies_mhz` is a
    read-only copy of what the constructor was given.

    Attributes
    ----------
    spec : PipelineSpec
        The pipeline the plan was made for.
    frequencies_mhz : numpy.ndarray
        MHz per computation, in core id order (see the module docs).
    iteration_time_s : float
        Replayed iteration time in seconds.
    energy_j : float
        Replayed iteration energy in joules (blocking power included).
    energy_before_reclaim_j : float
        Replayed energy of the plan the min-cut step produced, before slack
        reclamation and local search, over an iteration as long as this
        plan's, in joules.
    blocking_power_w : float
        Watts a GPU draws while it waits (from the profile).
    profile : Profile or None
        The profile the plan was made from, when known (`optimize` and
        `Frontier.load` attach it): what `timeline`, `power_timeline` and
        `plot_timeline` replay the plan on when they are not given one.
    """

    __slots__ = (
        "_blocking_power_w",
        "_energy_before_reclaim_j",
        "_energy_j",
        "_frequencies",
        "_iteration_time_s",
        "_profile",
        "_spec",
    )

    def __init__(
        self,
        spec: PipelineSpec,
        frequencies_mhz: Any,
        iteration_time_s: float,
        energy_j: float,
        energy_before_reclaim_j: Optional[float] = None,
        blocking_power_w: float = 0.0,
        *,
        profile: Optional[Profile] = None,
    ) -> None:
        self._spec = spec
        self._frequencies = _frequencies_array(frequencies_mhz, spec)
        self._iteration_time_s = float(iteration_time_s)
        self._energy_j = float(energy_j)
        self._energy_before_reclaim_j = float(
            energy_j if energy_before_reclaim_j is None else energy_before_reclaim_j
        )
        self._blocking_power_w = float(blocking_power_w)
        self._profile = None if profile is None else _check_profile_fits(profile, spec)

    def _with_profile(self, profile: Optional[Profile]) -> Plan:
        if profile is self._profile:
            return self
        plan = Plan.__new__(Plan)
        for name in Plan.__slots__:
            setattr(plan, name, getattr(self, name))
        plan._profile = None if profile is None else _check_profile_fits(profile, self._spec)
        return plan

    @property
    def spec(self) -> PipelineSpec:
        return self._spec

    @property
    def frequencies_mhz(self) -> np.ndarray:
        """Read-only MHz per computation, in core id order (see module docs)."""
        return self._frequencies

    @property
    def iteration_time_s(self) -> float:
        return self._iteration_time_s

    @property
    def energy_j(self) -> float:
        return self._energy_j

    @property
    def energy_before_reclaim_j(self) -> float:
        return self._energy_before_reclaim_j

    @property
    def blocking_power_w(self) -> float:
        return self._blocking_power_w

    @property
    def profile(self) -> Optional[Profile]:
        """The profile the plan was made from, or None (see the class docs)."""
        return self._profile

    @property
    def average_power_w(self) -> float:
        """Average power of all GPUs over the plan's own iteration: ``energy_j / iteration_time_s``."""
        return self._energy_j / self._iteration_time_s

    def energy_at(self, iteration_time_s: float) -> float:
        """Energy in joules of an iteration that lasts `iteration_time_s` seconds.

        A pipeline that waits for a straggler, or for a deadline, keeps its
        GPUs drawing the blocking power until then:
        ``energy_j + GPUs * blocking_power_w * (iteration_time_s - self.iteration_time_s)``.

        Raises
        ------
        ValueError
            If the iteration is shorter than the plan, or NaN.
        """
        length = _seconds(iteration_time_s, "iteration_time_s")
        if length < self._iteration_time_s * (1 - 1e-12):
            raise ValueError(
                f"this plan takes {self._iteration_time_s:.6g} s; it cannot finish in {length:.6g} s"
            )
        extra = max(0.0, length - self._iteration_time_s)
        return self._energy_j + self._spec.num_gpus * self._blocking_power_w * extra

    @property
    def reclaimed(self) -> bool:
        """Whether reclamation or local search lowered this plan's energy."""
        return self._energy_j < self._energy_before_reclaim_j

    def frequency(
        self,
        stage: Optional[int] = None,
        instruction: Optional[str] = None,
        microbatch: Optional[int] = None,
        chunk: Optional[int] = None,
        *,
        gpu: Optional[int] = None,
    ) -> int:
        """Planned SM frequency in MHz of one computation.

        Name the computation by its profile `stage`, or by `gpu` (the rank in
        the pipeline) and `chunk` (the virtual chunk on it, default 0);
        stage ``chunk * num_gpus + gpu`` is the same computation.

        Parameters
        ----------
        stage : int
            Profile stage (model chunk), ``0..num_stages-1``.
        instruction : str
            ``"forward"`` or ``"backward"``.
        microbatch : int
            Microbatch index within the iteration.
        chunk : int, optional
            Virtual chunk on `gpu` (interleaved schedule).
        gpu : int, optional
            Pipeline rank, instead of `stage`.
        """
        spec = self._spec
        if gpu is None and chunk is not None and stage is not None:
            # The old meaning of frequency(stage, instruction, microbatch, chunk): stage was the GPU.
            warn_renamed(
                "Plan.frequency(gpu_rank, ..., chunk)", "Plan.frequency(gpu=..., chunk=...)"
            )
            gpu, stage = stage, None
        if gpu is not None:
            if stage is not None:
                raise ValueError("give the profile stage or the gpu (with its chunk), not both")
            if not _is_index(gpu, spec.num_gpus):
                raise ValueError(
                    f"gpu {gpu!r} is out of range: this pipeline has {spec.num_gpus} GPUs"
                )
            chunk = 0 if chunk is None else chunk
            if not _is_index(chunk, spec.virtual_stages):
                raise ValueError(
                    f"chunk {chunk!r} is out of range: this pipeline has {spec.virtual_stages} "
                    "virtual stage(s) per GPU"
                )
            stage = int(chunk) * spec.num_gpus + int(gpu)
        elif stage is None:
            raise ValueError("give the profile stage, or the gpu (and chunk)")
        if instruction is None or microbatch is None:
            raise ValueError("give the instruction and the microbatch")
        return int(self._frequencies[spec.computation_id(stage, instruction, microbatch)])

    @property
    def frequency_map_mhz(self) -> dict[tuple[int, str, int], int]:
        """All frequencies, keyed by (profile stage, instruction, microbatch), in MHz."""
        pipeline = self._spec.pipeline()
        stage, kind, microbatch = pipeline.stage, pipeline.instruction, pipeline.microbatch
        return {
            (int(stage[i]), INSTRUCTIONS[kind[i]], int(microbatch[i])): int(f)
            for i, f in enumerate(self._frequencies)
        }

    def frequencies(self) -> dict[tuple[int, str, int], int]:
        """Deprecated: use `frequency_map_mhz`."""
        warn_renamed("Plan.frequencies()", "Plan.frequency_map_mhz")
        return self.frequency_map_mhz

    def to_zeus(self) -> list[list[tuple[str, int]]]:
        """Per GPU, ``(instruction, MHz)`` in execution order (Zeus's frequency schedule)."""
        pipeline = self._spec.pipeline()
        kind = pipeline.instruction
        return [
            [(INSTRUCTIONS[kind[i]], int(self._frequencies[i])) for i in pipeline.order(gpu)]
            for gpu in range(self._spec.num_gpus)
        ]

    def execution_order(self) -> list[list[PlanStep]]:
        """Per GPU, its computations in execution order with their planned MHz."""
        pipeline = self._spec.pipeline()
        stage, chunk, kind, microbatch = (
            pipeline.stage,
            pipeline.chunk,
            pipeline.instruction,
            pipeline.microbatch,
        )
        return [
            [
                PlanStep(
                    gpu=gpu,
                    position=position,
                    instruction=INSTRUCTIONS[kind[i]],
                    stage=int(stage[i]),
                    chunk=int(chunk[i]),
                    microbatch=int(microbatch[i]),
                    frequency_mhz=int(self._frequencies[i]),
                    computation=int(i),
                )
                for position, i in enumerate(pipeline.order(gpu))
            ]
            for gpu in range(self._spec.num_gpus)
        ]

    def write_zeus(self, path: str | os.PathLike[str], *, follow_symlinks: bool = False) -> None:
        """Write the plan as Zeus's ``freqs_pipeline_%05d.py`` file (`to_zeus`'s list).

        Zeus's pipeline frequency optimizer server (``PointSolution``) reads
        it as it is. Comment lines after the list give the plan's time and
        energy, as lowtime's files do. The file appears whole or not at all;
        an existing file keeps its permissions, and a symbolic link is
        refused unless `follow_symlinks`.

        Examples
        --------
        >>> profile = Profile.from_csv("examples/small-4stage.csv", blocking_power_w=70.0)
        >>> plan = perseus.optimize(profile, microbatches=4).fastest
        >>> plan.write_zeus(tmp / "freqs_pipeline_00000.py")
        >>> back = Plan.from_zeus(tmp / "freqs_pipeline_00000.py", profile)
        >>> back.to_zeus() == plan.to_zeus()
        True
        """
        spec = self._spec
        comments = [
            f"perseus plan: {spec.schedule}, {spec.num_gpus} GPUs, "
            f"{spec.virtual_stages} chunk(s) per GPU, {spec.microbatches} microbatches",
            f"iteration time {self._iteration_time_s!r} s, energy {self._energy_j!r} J "
            f"(blocking power {self._blocking_power_w!r} W)",
        ]
        replace_user_file(
            path, _zeus_plan.format_plan(self.to_zeus(), comments), follow_symlinks=follow_symlinks
        )

    @classmethod
    def from_zeus(
        cls,
        path: str | os.PathLike[str],
        profile: Profile,
        *,
        schedule: str = "1f1b",
        virtual_stages: int = 1,
    ) -> Plan:
        """Read a Zeus/lowtime ``freqs_pipeline_*.py`` file and replay it on `profile`.

        The file lists, per GPU, ``(instruction, MHz)`` in execution order;
        the microbatch count follows from its length. Every GPU's sequence of
        forwards and backwards must be `schedule`'s order (Megatron-LM's, the
        one lowtime plans for), and every clock one the profile measured for
        that computation. The returned plan's time and energy are replayed
        on `profile` (`perseus.evaluate`), and the profile is attached.

        Raises
        ------
        ValueError
            If the file is not such a plan, or does not fit the profile or the
            schedule; the message names the file, the GPU and the position.
        """
        from .optimize import evaluate

        name = os.fspath(path)
        schedule_list = _zeus_plan.read_plan(name)
        if not isinstance(profile, Profile):
            raise TypeError(f"expected a perseus.Profile, got {type(profile).__name__}")
        num_gpus = len(schedule_list)
        if num_gpus * virtual_stages != profile.num_stages:
            raise ValueError(
                f"{name}: the plan is for {num_gpus} GPUs x {virtual_stages} chunk(s) = "
                f"{num_gpus * virtual_stages} stages, but the profile has {profile.num_stages}"
            )
        length = len(schedule_list[0])
        if length % (2 * virtual_stages):
            raise ValueError(
                f"{name}: GPU 0 runs {length} computations, not a whole number of microbatches "
                f"(2 x {virtual_stages} per microbatch)"
            )
        try:
            spec = PipelineSpec(schedule, num_gpus, virtual_stages, length // (2 * virtual_stages))
            pipeline = spec.pipeline()
        except ProfileError as error:
            raise ValueError(f"{name}: {error}") from None
        frequencies = np.zeros(spec.num_computations, dtype=np.int64)
        for gpu, steps in enumerate(schedule_list):
            order = pipeline.order(gpu)
            if len(steps) != len(order):
                raise ValueError(
                    f"{name}: GPU {gpu} lists {len(steps)} computations; {schedule} with "
                    f"{spec.microbatches} microbatches runs {len(order)} on each GPU"
                )
            for position, ((instruction, mhz), i) in enumerate(zip(steps, order)):
                expected = INSTRUCTIONS[pipeline.instruction[i]]
                if instruction != expected:
                    raise ValueError(
                        f"{name}: GPU {gpu}, position {position}: {instruction} in the file, but "
                        f"{schedule}'s order runs a {expected} there (microbatch "
                        f"{int(pipeline.microbatch[i])}); is it another schedule?"
                    )
                frequencies[i] = mhz
        plan = cls(spec, frequencies, 1.0, 1.0, blocking_power_w=profile.blocking_power_w)
        try:
            result = evaluate(profile, plan)
        except ProfileError as error:
            raise ValueError(f"{name}: {error}") from None
        return cls(
            spec,
            frequencies,
            result.iteration_time_s,
            result.energy_j,
            blocking_power_w=profile.blocking_power_w,
            profile=profile,
        )

    def _profile_or(self, profile: Optional[Profile]) -> Profile:
        if profile is not None:
            return _check_profile_fits(profile, self._spec)
        if self._profile is None:
            raise ValueError("this plan has no profile attached; pass the profile it was made from")
        return self._profile

    def timeline(self, profile: Optional[Profile] = None) -> Timeline:
        """Start and end of every computation, replayed as soon as possible.

        Replayed on `profile`, or on the plan's own (`Plan.profile`).
        """
        return timelines(self._profile_or(profile), self._spec, self._frequencies[np.newaxis])[0]

    def power_timeline(self, profile: Optional[Profile] = None) -> PowerTimeline:
        """Power of all GPUs over one iteration: seconds and watts, a step function.

        Each GPU draws its computation's average power (energy over time)
        while computing and the blocking power while it waits; see
        `perseus.timeline`. `PowerTimeline.average_w` and `peak_w` sum it up.

        Examples
        --------
        >>> profile = Profile.from_csv("examples/small-4stage.csv", blocking_power_w=70.0)
        >>> plan = perseus.optimize(profile, microbatches=4).fastest
        >>> power = plan.power_timeline()
        >>> bool(abs(power.energy_j - plan.energy_j) < 1e-6 * plan.energy_j)
        True
        >>> bool(power.peak_w >= power.average_w)
        True
        """
        return self.timeline(profile).power()

    def plot_timeline(
        self,
        ax: Optional[Axes] = None,
        *,
        profile: Optional[Profile] = None,
        frequency_range_mhz: Optional[tuple[int, int]] = None,
        time_limit_s: Optional[float] = None,
        colorbar: bool = True,
    ) -> Axes:
        """Draw the plan as a per-GPU Gantt chart, each computation coloured by its clock.

        Forward computations are plain, backward ones hatched; gaps are the
        bubbles where a GPU waits. Needs matplotlib (the ``plot`` extra).
        Returns the Axes drawn on (a new figure's when `ax` is None).
        """
        from .plotting import plot_timeline

        return plot_timeline(
            self.timeline(profile),
            ax=ax,
            frequency_range_mhz=frequency_range_mhz,
            time_limit_s=time_limit_s,
            colorbar=colorbar,
        )

    # Deprecated names (one release).
    @property
    def iteration_time(self) -> float:
        warn_renamed("Plan.iteration_time", "Plan.iteration_time_s")
        return self._iteration_time_s

    @property
    def energy(self) -> float:
        warn_renamed("Plan.energy", "Plan.energy_j")
        return self._energy_j

    @property
    def energy_before_reclaim(self) -> float:
        warn_renamed("Plan.energy_before_reclaim", "Plan.energy_before_reclaim_j")
        return self._energy_before_reclaim_j

    @property
    def blocking_power(self) -> float:
        warn_renamed("Plan.blocking_power", "Plan.blocking_power_w")
        return self._blocking_power_w

    def __repr__(self) -> str:
        return (
            f"Plan(iteration_time_s={self._iteration_time_s:.6g}, energy_j={self._energy_j:.6g}, "
            f"{self._spec.schedule}, {self._spec.num_gpus} GPUs x {self._spec.microbatches} microbatches)"
        )


class FrontierSummary(TypedDict):
    """Headline numbers of a frontier (`Frontier.summary`)."""

    baseline_time_s: float
    baseline_energy_j: float
    fastest_time_s: float
    fastest_energy_j: float
    saving_percent: float
    plans: int
    solve_time_s: float


class Frontier(Sequence[Plan]):
    """The iteration time-energy Pareto frontier: plans from fastest to slowest.

    Every plan is the cheapest perseus found for an iteration that lasts its
    time. Plans are compared at a common iteration length: a pipeline that
    finishes early (waiting for a straggler, or for a deadline) keeps drawing
    blocking power until the iteration ends, so a slower plan is kept only if
    it uses less energy over an iteration as long as itself. Iteration times
    strictly increase along the frontier and the energy each plan needs over
    any common iteration length strictly decreases; each plan's own
    `energy_j` (at its own time) need not.

    Read-only: every attribute is a property; arrays are read-only.

    Attributes
    ----------
    iteration_times_s : numpy.ndarray
        Replayed iteration time of each plan, seconds.
    energies_j : numpy.ndarray
        Replayed energy of each plan, joules.
    energies_before_reclaim_j : numpy.ndarray
        Replayed energy of each plan as the min-cut step produced it, before
        slack reclamation and local search, joules.
    baseline : Evaluation
        Every computation at its fastest option.
    spec : PipelineSpec
        The pipeline the plans are for.
    unit_time_s : float
        Time quantum asked of the solver, seconds.
    solver_unit_time_s : float
        Quantum the min-cut steps actually used, seconds (finer than
        `unit_time_s` for small pipelines when refining).
    steps : int
        Units of iteration time the min-cut loop took.
    cuts : int
        Minimum cuts it solved (one cut can take several units).
    stop_reason : str
        Why the min-cut loop stopped: ``"minimum_time"`` (the normal end: the
        shortest iteration is reached), ``"no_progress"`` or
        ``"infeasible_flow"`` (numerical trouble; the frontier ends early).
    phase_times_s : dict
        Wall time of each phase of the solve, seconds.
    blocking_power_w : float
        Watts drawn by a GPU while it waits.
    solve_time_s : float
        Wall time of `optimize`, seconds.
    profile : Profile or None
        The profile the plans were made from (kept in saved files), which
        the power and timeline views replay plans on; every plan carries it.
    """

    def __init__(
        self,
        plans: Sequence[Plan],
        *,
        baseline: Evaluation,
        spec: PipelineSpec,
        unit_time_s: float,
        blocking_power_w: float,
        solve_time_s: float,
        steps: int = 0,
        cuts: int = 0,
        solver_unit_time_s: Optional[float] = None,
        stop_reason: str = "minimum_time",
        phase_times_s: Optional[Mapping[str, float]] = None,
        profile: Optional[Profile] = None,
    ) -> None:
        if not plans:
            raise ValueError("a frontier needs at least one plan")
        times = np.array([p.iteration_time_s for p in plans], dtype=np.float64)
        if np.any(np.diff(times) <= 0):
            raise ValueError("frontier plans must be ordered by strictly increasing iteration time")
        if profile is None:
            profile = plans[0].profile
        self._profile = None if profile is None else _check_profile_fits(profile, spec)
        self._plans = tuple(p._with_profile(self._profile) for p in plans)
        self._peak_powers_w: Optional[np.ndarray] = None
        self._times = times
        self._energies = np.array([p.energy_j for p in plans], dtype=np.float64)
        self._before = np.array([p.energy_before_reclaim_j for p in plans], dtype=np.float64)
        for array in (self._times, self._energies, self._before):
            array.setflags(write=False)
        self._baseline = baseline
        self._spec = spec
        self._unit_time_s = float(unit_time_s)
        self._blocking_power_w = float(blocking_power_w)
        self._solve_time_s = float(solve_time_s)
        self._steps = int(steps)
        self._cuts = int(cuts)
        self._solver_unit_time_s = float(
            unit_time_s if solver_unit_time_s is None else solver_unit_time_s
        )
        self._stop_reason = str(stop_reason)
        self._phase_times_s = dict(phase_times_s or {})

    iteration_times_s = property(lambda self: self._times, doc="Replayed time of each plan, s.")
    energies_j = property(lambda self: self._energies, doc="Replayed energy of each plan, J.")
    energies_before_reclaim_j = property(
        lambda self: self._before, doc="Energy of each plan before reclamation, J."
    )
    baseline = property(lambda self: self._baseline, doc="Every computation at its fastest option.")
    spec = property(lambda self: self._spec, doc="The pipeline the plans are for.")
    unit_time_s = property(lambda self: self._unit_time_s, doc="Quantum asked of the solver, s.")
    solver_unit_time_s = property(
        lambda self: self._solver_unit_time_s, doc="Quantum the min-cut steps used, s."
    )
    blocking_power_w = property(lambda self: self._blocking_power_w, doc="P_block, W.")
    solve_time_s = property(lambda self: self._solve_time_s, doc="Wall time of optimize, s.")
    steps = property(lambda self: self._steps, doc="Units the min-cut loop took.")
    cuts = property(lambda self: self._cuts, doc="Minimum cuts solved.")
    stop_reason = property(lambda self: self._stop_reason, doc="Why the min-cut loop stopped.")
    profile = property(lambda self: self._profile, doc="The profile the plans were made from.")

    @property
    def average_powers_w(self) -> np.ndarray:
        """Average power of all GPUs over each plan's own iteration, watts (energy / time)."""
        out = self._energies / self._times
        out.setflags(write=False)
        return out

    def peak_powers_w(self) -> np.ndarray:
        """Highest power of all GPUs together during each plan's iteration, watts.

        Replays every plan on the frontier's profile (computed once, then kept).
        """
        if self._peak_powers_w is None:
            profile = self._require_profile("peak powers")
            rows = np.stack([p.frequencies_mhz for p in self._plans])
            peaks = np.array(
                [t.power().peak_w for t in timelines(profile, self._spec, rows)], dtype=np.float64
            )
            peaks.setflags(write=False)
            self._peak_powers_w = peaks
        return self._peak_powers_w

    def _require_profile(self, what: str) -> Profile:
        if self._profile is None:
            raise ValueError(
                f"{what} need the profile the frontier was made from, and this frontier has none "
                "(a version 1 file: load it with Frontier.load(path, profile=...))"
            )
        return self._profile

    @property
    def baseline_plan(self) -> Plan:
        """The all-fastest plan: every computation at its fastest measured option.

        Needs the frontier's profile. Its time and energy are `baseline`'s.
        """
        profile = self._require_profile("the all-fastest plan")
        return Plan(
            self._spec,
            _all_fastest_frequencies(profile, self._spec),
            self._baseline.iteration_time_s,
            self._baseline.energy_j,
            blocking_power_w=self._blocking_power_w,
            profile=profile,
        )

    def baseline_energy_at(self, iteration_time_s: float) -> float:
        """Energy (J) of the all-fastest plan over an iteration lasting `iteration_time_s`.

        It finishes at `baseline`'s time and then waits at blocking power:
        what every computation at full speed costs when a straggler or a
        deadline sets the iteration's length.
        """
        length = _seconds(iteration_time_s, "iteration_time_s")
        base = self._baseline
        extra = max(0.0, length - base.iteration_time_s)
        return base.energy_j + self._spec.num_gpus * self._blocking_power_w * extra

    def plan_for_power(self, cap_w: float, *, peak: bool = False) -> Plan:
        """The fastest plan whose power stays within `cap_w` watts (all GPUs together).

        With ``peak=False`` (default) a plan's power is its average over its
        iteration, ``energy_j / iteration_time_s``; with ``peak=True`` the
        highest power of all GPUs together at any moment of the iteration
        (see `Plan.power_timeline`, which needs the profile). Either way a
        GPU that waits draws the blocking power.

        Raises
        ------
        PowerCapError
            If no plan stays within the cap; the message names the lowest
            power a plan achieves, and so the cap that would work.

        Examples
        --------
        >>> profile = Profile.from_csv("examples/small-4stage.csv", blocking_power_w=70.0)
        >>> frontier = perseus.optimize(profile, microbatches=4)
        >>> cap_w = 0.95 * frontier.fastest.average_power_w
        >>> bool(frontier.plan_for_power(cap_w).average_power_w <= cap_w)
        True
        """
        if isinstance(cap_w, bool) or not isinstance(cap_w, numbers.Real):
            raise TypeError(f"cap_w must be a number of watts, got {cap_w!r}")
        cap = float(cap_w)
        if not cap > 0 or math.isinf(cap):  # also NaN
            raise ValueError(f"cap_w must be a positive number of watts, got {cap_w!r}")
        if not isinstance(peak, bool):
            raise TypeError(f"peak must be True or False, got {peak!r}")
        powers = self.peak_powers_w() if peak else self.average_powers_w
        within = np.nonzero(powers <= cap)[0]
        if len(within) == 0:
            lowest = int(np.argmin(powers))
            kind = "peak" if peak else "average"
            raise PowerCapError(
                f"no plan keeps the {kind} power of the {self._spec.num_gpus} GPUs within "
                f"{cap:.6g} W: the lowest {kind} power any plan reaches is {powers[lowest]:.6g} W "
                f"(the plan taking {self._times[lowest]:.6g} s)",
                float(powers[lowest]),
            )
        return self._plans[int(within[0])]

    def plot(self, ax: Optional[Axes] = None, **options: Any) -> Axes:
        """Draw the frontier: iteration time against energy per iteration.

        The all-fastest baseline is marked and the saving of the fastest plan
        annotated; the band a straggler opens (from the fastest to the
        slowest plan's time) is shaded, with the all-fastest plan's energy
        when it waits for the straggler. Needs matplotlib (the ``plot``
        extra). Returns the Axes drawn on (a new figure's when `ax` is None).
        """
        from .plotting import plot_frontier

        return plot_frontier(self, ax=ax, **options)

    @property
    def phase_times_s(self) -> dict[str, float]:
        """Wall time of each phase of the solve, seconds (a copy)."""
        return dict(self._phase_times_s)

    def __len__(self) -> int:
        return len(self._plans)

    @overload
    def __getitem__(self, index: int) -> Plan: ...
    @overload
    def __getitem__(self, index: slice) -> list[Plan]: ...
    def __getitem__(self, index: int | slice) -> Plan | list[Plan]:
        if isinstance(index, slice):
            return list(self._plans[index])
        return self._plans[index]

    def __iter__(self) -> Iterator[Plan]:
        return iter(self._plans)

    @property
    def fastest(self) -> Plan:
        """The fastest plan (least energy at the all-fastest time)."""
        return self._plans[0]

    @property
    def reclaim_savings_j(self) -> np.ndarray:
        """Energy each plan saves by reclamation and local search, joules (>= 0)."""
        return self._before - self._energies

    def energy_at(self, deadline_s: float) -> float:
        """Least energy (J) of an iteration lasting `deadline_s`: ``plan_for(d).energy_at(d)``."""
        deadline = _seconds(deadline_s, "deadline_s")
        return self.plan_for(deadline).energy_at(deadline)

    def plan_for(
        self, deadline_s: Optional[float] = None, *, deadline: Optional[float] = None
    ) -> Plan:
        """The cheapest plan whose iteration time is at most `deadline_s` seconds.

        Cheapest over an iteration that lasts `deadline_s` (see `energy_at`),
        which along the frontier is the slowest plan that meets it. Use it
        for a straggler's iteration time, or for any time budget.

        Raises
        ------
        ValueError
            If even the fastest plan is slower than `deadline_s`, or it is NaN.
        TypeError
            If it is not a number.
        """
        if deadline is not None:
            if deadline_s is not None:
                raise TypeError("give deadline_s only (deadline is its old name)")
            warn_renamed("Frontier.plan_for(deadline=...)", "Frontier.plan_for(deadline_s=...)")
            deadline_s = deadline
        if deadline_s is None:
            raise TypeError("plan_for() needs deadline_s, in seconds")
        limit = _seconds(deadline_s, "deadline_s")
        index = int(np.searchsorted(self._times, limit, side="right")) - 1
        if index < 0:
            raise ValueError(
                f"no plan meets a deadline of {limit:.6g} s: the fastest plan takes "
                f"{self._times[0]:.6g} s"
            )
        return self._plans[index]

    def summary(self) -> FrontierSummary:
        """Headline numbers: baseline, fastest plan, saving (%) and plan count."""
        fastest = self._plans[0]
        return {
            "baseline_time_s": self._baseline.iteration_time_s,
            "baseline_energy_j": self._baseline.energy_j,
            "fastest_time_s": fastest.iteration_time_s,
            "fastest_energy_j": fastest.energy_j,
            "saving_percent": 100.0 * (1.0 - fastest.energy_j / self._baseline.energy_j),
            "plans": len(self),
            "solve_time_s": self._solve_time_s,
        }

    def save(self, path: str | os.PathLike[str], *, follow_symlinks: bool = False) -> None:
        """Write the frontier as versioned JSON (format version 2).

        The file appears whole or not at all. It lists every plan's
        frequencies in full, the computation each position is, and the
        profile, so other tools can read it without perseus. An existing
        file keeps its permissions; a symbolic link is refused unless
        `follow_symlinks` (which writes the file it points to).

        Raises
        ------
        FileExistsError
            If `path` is a symbolic link and `follow_symlinks` is false.
        OSError
            If the file cannot be written (the error names `path`).
        """
        from ._frontier_file import encode

        replace_user_file(
            path, json.dumps(encode(self), separators=(",", ":")), follow_symlinks=follow_symlinks
        )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        profile: Optional[Profile] = None,
        *,
        max_bytes: int = MAX_FILE_BYTES,
    ) -> Frontier:
        """Read a frontier written by `save` (format version 2, or 1), checking all of it.

        Every field is checked for its type and range, the computations
        against the pipeline, the plans for increasing times, and every
        frequency against the profile: `profile` when given (which is then
        attached), else the one stored in the file, whose replay must also
        give each plan's stored time and energy.

        Raises
        ------
        ValueError
            If the file is larger than `max_bytes`, not a perseus frontier,
            of an unknown version, or malformed in any field; the message
            names the file and the field (``plans[3].frequencies_mhz[17]``).
        OSError
            If it cannot be read.
        """
        from ._frontier_file import decode

        return decode(cls, os.fspath(path), profile, max_bytes)

    # Deprecated names (one release).
    @property
    def iteration_times(self) -> np.ndarray:
        warn_renamed("Frontier.iteration_times", "Frontier.iteration_times_s")
        return self._times

    @property
    def energies(self) -> np.ndarray:
        warn_renamed("Frontier.energies", "Frontier.energies_j")
        return self._energies

    @property
    def energies_before_reclaim(self) -> np.ndarray:
        warn_renamed("Frontier.energies_before_reclaim", "Frontier.energies_before_reclaim_j")
        return self._before

    @property
    def unit_time(self) -> float:
        warn_renamed("Frontier.unit_time", "Frontier.unit_time_s")
        return self._unit_time_s

    @property
    def solver_unit_time(self) -> float:
        warn_renamed("Frontier.solver_unit_time", "Frontier.solver_unit_time_s")
        return self._solver_unit_time_s

    @property
    def blocking_power(self) -> float:
        warn_renamed("Frontier.blocking_power", "Frontier.blocking_power_w")
        return self._blocking_power_w

    @property
    def solve_time(self) -> float:
        warn_renamed("Frontier.solve_time", "Frontier.solve_time_s")
        return self._solve_time_s

    @property
    def reclaim_savings(self) -> np.ndarray:
        warn_renamed("Frontier.reclaim_savings", "Frontier.reclaim_savings_j")
        return self.reclaim_savings_j

    def __repr__(self) -> str:
        return (
            f"Frontier({len(self)} plans, {self._times[0]:.6g}-{self._times[-1]:.6g} s, "
            f"{self._energies[0]:.6g}-{self._energies[-1]:.6g} J)"
        )

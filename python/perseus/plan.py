"""`Plan`: one SM frequency for every computation of an iteration, and its replay.

Also `Evaluation` (a plan replayed on measured options), `PlanStep` (one
entry of a GPU's execution order) and `all_fastest_plan`, the baseline every
saving is measured against. A plan's frequencies are kept in the core's id
order (`PipelineSpec.pipeline().ids`), the order of saved frontier files.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, TypeVar

import numpy as np
import numpy.typing as npt

from . import _zeus_plan
from ._deprecation import warn_renamed
from ._files import replace_user_file
from ._replay import replay_rows
from ._validate import is_real, seconds_up
from ._zeus_format import INSTRUCTIONS
from .errors import ProfileError
from .pipeline_spec import PipelineSpec, _is_index
from .plotting import plot_timeline
from .profile import LIMITS, Profile
from .timeline import PowerTimeline, Timeline, timelines

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Evaluation", "Plan", "PlanStep", "all_fastest_plan"]


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


def _seconds(value: object, name: str) -> float:
    """`value` as a finite float of seconds, or a TypeError/ValueError naming `name`."""
    if not is_real(value):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an int beyond the float range is beyond every plan
        seconds = math.inf if value > 0 else -math.inf
    if math.isnan(seconds):
        raise ValueError(f"{name} must be a number of seconds, got NaN")
    return seconds


def _frequencies_array(values: Any, spec: PipelineSpec) -> npt.NDArray[np.int32]:
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
    frequencies = _all_fastest_frequencies(_check_profile_fits(profile, spec), spec)
    return replayed_plan(spec, frequencies, profile)


def replayed_plan(
    spec: PipelineSpec,
    frequencies_mhz: Any,
    profile: Profile,
    *,
    source: Optional[str] = None,
    plan_class: type[Plan] | None = None,
) -> Plan:
    """A plan of `frequencies_mhz` with the time and energy `profile` gives it.

    With `source` (a file name), a profile that does not fit the plan is a
    ValueError naming the file; without, the ProfileError itself.
    """
    make = plan_class or Plan
    draft = make(spec, frequencies_mhz, 1.0, 1.0, blocking_power_w=profile.blocking_power_w)
    try:
        times, energies = replay_rows(
            _check_profile_fits(profile, spec), spec, draft.frequencies_mhz[np.newaxis, :]
        )
    except ProfileError as error:
        if source is None:
            raise
        raise ValueError(f"{source}: {error}") from None
    return make(
        spec,
        draft.frequencies_mhz,
        float(times[0]),
        float(energies[0]),
        blocking_power_w=profile.blocking_power_w,
        profile=profile,
    )


_Step = TypeVar("_Step")


def steps_in_order(
    name: str, spec: PipelineSpec, pipeline: Any, steps_per_gpu: Sequence[Sequence[_Step]]
) -> Iterator[tuple[int, int, _Step, int]]:
    """Walk a plan file's per-GPU steps beside `spec`'s execution order.

    Yields ``(gpu, position, step, computation)``, the computation being the
    index that `pipeline` (``spec.pipeline()``) runs at that position,
    after checking that each GPU lists as many steps as the schedule runs;
    the caller checks each step. Errors are ValueErrors naming the file
    (`name`).
    """
    for gpu, steps in enumerate(steps_per_gpu):
        expected = pipeline.order(gpu)
        if len(steps) != len(expected):
            raise ValueError(
                f"{name}: GPU {gpu} lists {len(steps)} computations; {spec.schedule} with "
                f"{spec.microbatches} microbatches runs {len(expected)} on each GPU"
            )
        for position, (step, i) in enumerate(zip(steps, expected)):
            yield gpu, position, step, int(i)


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
        plan's, in joules. For a plan `Frontier.plan_for` fitted to a
        deadline: that of the frontier plan meeting the deadline (what would
        run otherwise), over the longer of its iteration and this plan's.
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

    @classmethod
    def _from_solver(
        cls,
        spec: PipelineSpec,
        frequencies_mhz: np.ndarray,
        iteration_time_s: float,
        energy_j: float,
        energy_before_reclaim_j: float,
        blocking_power_w: float,
        profile: Profile,
    ) -> Plan:
        """A plan from the solver: `frequencies_mhz` is a read-only int32 row
        of clocks `profile` measured (checked when it was read) and `profile`
        has `spec`'s stages (the core checked), so the constructor's checks,
        a few ms per thousand plans, are skipped."""
        plan = cls.__new__(cls)
        plan._spec = spec
        plan._frequencies = frequencies_mhz
        plan._iteration_time_s = float(iteration_time_s)
        plan._energy_j = float(energy_j)
        plan._energy_before_reclaim_j = float(energy_before_reclaim_j)
        plan._blocking_power_w = float(blocking_power_w)
        plan._profile = profile
        return plan

    def _with_profile(self, profile: Optional[Profile]) -> Plan:
        if profile is self._profile:
            return self
        plan = Plan.__new__(Plan)
        for name in Plan.__slots__:
            setattr(plan, name, getattr(self, name))
        plan._profile = None if profile is None else _check_profile_fits(profile, self._spec)
        return plan

    def __eq__(self, other: object) -> bool:
        """Same pipeline, same clocks, and the same replayed time, energy and blocking
        power (a copy, an unpickled plan and the frontier's own plan are equal)."""
        if not isinstance(other, Plan):
            return NotImplemented
        return self is other or (
            self._spec == other._spec
            and self._iteration_time_s == other._iteration_time_s
            and self._energy_j == other._energy_j
            and self._blocking_power_w == other._blocking_power_w
            and np.array_equal(self._frequencies, other._frequencies)
        )

    def __hash__(self) -> int:
        return hash((self._spec, self._iteration_time_s, self._energy_j))

    @property
    def spec(self) -> PipelineSpec:
        return self._spec

    @property
    def frequencies_mhz(self) -> npt.NDArray[np.int32]:
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
        if self._blocking_power_w == 0:  # not 0 * inf = NaN for an endless iteration
            return self._energy_j
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

    def write_zeus(
        self,
        path: str | os.PathLike[str],
        *,
        follow_symlinks: bool = False,
        overwrite: bool = True,
    ) -> None:
        """Write the plan as Zeus's ``freqs_pipeline_%05d.py`` file (`to_zeus`'s list).

        Zeus's pipeline frequency optimizer server (``PointSolution``) reads
        it as it is. Comment lines after the list give the plan's time and
        energy, as lowtime's files do. The file appears whole or not at all;
        an existing file keeps its permissions, and a symbolic link is
        refused unless `follow_symlinks`. With ``overwrite=False`` an existing
        file is never replaced, even one that appears during the write:
        `perseus.errors.OutputExistsError` says where the plan was kept.

        Examples
        --------
        >>> profile = Profile.from_csv("examples/small-4stage.csv", blocking_power_w=70.0)
        >>> plan = perseus.optimize(profile, microbatches=4).fastest
        >>> plan.write_zeus(tmp / "freqs_pipeline_00000.py")
        >>> back = Plan.from_zeus(tmp / "freqs_pipeline_00000.py", profile)
        >>> back.to_zeus() == plan.to_zeus()
        True
        """
        replace_user_file(
            path, self._zeus_text(), follow_symlinks=follow_symlinks, overwrite=overwrite
        )

    def _zeus_text(self, notes: Sequence[str] = ()) -> str:
        """`write_zeus`'s file text, with `notes` as further comment lines."""
        spec = self._spec
        comments = [
            f"perseus plan: {spec.schedule}, {spec.num_gpus} GPUs, "
            f"{spec.virtual_stages} chunk(s) per GPU, {spec.microbatches} microbatches",
            f"iteration time {self._iteration_time_s!r} s, energy {self._energy_j!r} J "
            f"(blocking power {self._blocking_power_w!r} W)",
            *notes,
        ]
        return _zeus_plan.format_plan(self.to_zeus(), comments)

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

        name = os.fspath(path)
        schedule_list = _zeus_plan.read_plan(name)
        if not isinstance(profile, Profile):
            raise TypeError(f"expected a perseus.Profile, got {type(profile).__name__}")
        num_gpus = len(schedule_list)
        if num_gpus * virtual_stages != profile.num_stages:
            hint = (
                f" (an interleaved plan: virtual_stages={profile.num_stages // num_gpus}, "
                f"--virtual-stages {profile.num_stages // num_gpus} on the command line)"
                if profile.num_stages % num_gpus == 0 and profile.num_stages > num_gpus
                else ""
            )
            raise ValueError(
                f"{name}: the plan is for {num_gpus} GPUs x {virtual_stages} chunk(s) = "
                f"{num_gpus * virtual_stages} stages, but the profile has {profile.num_stages}"
                f"{hint}"
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
        for gpu, position, (instruction, mhz), i in steps_in_order(
            name, spec, pipeline, schedule_list
        ):
            expected = INSTRUCTIONS[pipeline.instruction[i]]
            if instruction != expected:
                raise ValueError(
                    f"{name}: GPU {gpu}, position {position}: {instruction} in the file, but "
                    f"{schedule}'s order runs a {expected} there (microbatch "
                    f"{int(pipeline.microbatch[i])}); is it another schedule?"
                )
            frequencies[i] = mhz
        return replayed_plan(spec, frequencies, profile, source=name, plan_class=cls)

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
            # The time rounded up, as the command line prints plan times: a
            # deadline copied from it is met by this plan.
            f"Plan(iteration_time_s={seconds_up(self._iteration_time_s, significant=6)}, "
            f"energy_j={self._energy_j:.6g}, "
            f"{self._spec.schedule}, {self._spec.num_gpus} GPUs x {self._spec.microbatches} microbatches)"
        )

"""Frontier results: `Plan` (one frequency per computation) and `Frontier`.

A plan's computations are identified by (profile stage, instruction,
microbatch). Internally they are kept in the core's id order (the core's
``Pipeline.ids`` gives it), which is also the order of ``frequencies_mhz`` in
saved frontier files (the first plan lists them all; each later plan lists
``changes``, the ``[id, MHz]`` pairs that differ from the plan before it).
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional, TypedDict, overload

import numpy as np

from . import _core
from ._deprecation import warn_renamed
from ._files import write_text_atomically
from ._zeus_format import INSTRUCTIONS
from .profile import LIMITS
from .schedule import build_pipeline

__all__ = ["Evaluation", "Frontier", "FrontierSummary", "PipelineSpec", "Plan"]

FORMAT_NAME = "perseus-frontier"
FORMAT_VERSION = 1


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
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value < size


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


def _encode_frequencies(frequencies: np.ndarray, previous: Optional[Plan]) -> dict[str, Any]:
    """A plan's MHz for a frontier file: all of them for the first plan, then
    only ``[computation id, MHz]`` pairs that differ from the previous plan
    (neighbouring plans differ in a few computations, so files stay small)."""
    if previous is None:
        return {"frequencies_mhz": frequencies.tolist()}
    (changed,) = np.nonzero(frequencies != previous.frequencies_mhz)
    return {"changes": [[int(i), int(frequencies[i])] for i in changed]}


def _decode_frequencies(entry: dict[str, Any], previous: Optional[Plan]) -> np.ndarray:
    if "frequencies_mhz" in entry:
        return np.asarray(entry["frequencies_mhz"], dtype=np.int64)
    if previous is None:
        raise ValueError("the first plan must list all its frequencies")
    frequencies = previous.frequencies_mhz.astype(np.int64)
    for computation, mhz in entry["changes"]:
        if not _is_index(computation, len(frequencies)):
            raise ValueError(f"change for computation {computation!r}, which does not exist")
        frequencies[computation] = mhz
    return frequencies


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
    """

    __slots__ = (
        "_blocking_power_w",
        "_energy_before_reclaim_j",
        "_energy_j",
        "_frequencies",
        "_iteration_time_s",
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
    ) -> None:
        self._spec = spec
        self._frequencies = _frequencies_array(frequencies_mhz, spec)
        self._iteration_time_s = float(iteration_time_s)
        self._energy_j = float(energy_j)
        self._energy_before_reclaim_j = float(
            energy_j if energy_before_reclaim_j is None else energy_before_reclaim_j
        )
        self._blocking_power_w = float(blocking_power_w)

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
    ) -> None:
        if not plans:
            raise ValueError("a frontier needs at least one plan")
        times = np.array([p.iteration_time_s for p in plans], dtype=np.float64)
        if np.any(np.diff(times) <= 0):
            raise ValueError("frontier plans must be ordered by strictly increasing iteration time")
        self._plans = tuple(plans)
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

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the frontier as versioned JSON; the file appears whole or not at all."""
        document: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "pipeline": asdict(self._spec),
            "unit_time_s": self._unit_time_s,
            "blocking_power_w": self._blocking_power_w,
            "solve_time_s": self._solve_time_s,
            "steps": self._steps,
            "cuts": self._cuts,
            "solver_unit_time_s": self._solver_unit_time_s,
            "stop_reason": self._stop_reason,
            "phase_times_s": self._phase_times_s,
            "baseline": {
                "iteration_time_s": self._baseline.iteration_time_s,
                "energy_j": self._baseline.energy_j,
            },
            "computation_id": "(stage * microbatches + microbatch) * 2 + (0 forward | 1 backward)",
            "plans": [
                {
                    "iteration_time_s": p.iteration_time_s,
                    "energy_j": p.energy_j,
                    "energy_before_reclaim_j": p.energy_before_reclaim_j,
                    **_encode_frequencies(p.frequencies_mhz, previous),
                }
                for previous, p in zip([None, *self._plans[:-1]], self._plans)
            ],
        }
        write_text_atomically(path, json.dumps(document, separators=(",", ":")))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Frontier:
        """Read a frontier written by `save`.

        Raises
        ------
        ValueError
            If the file is not a perseus frontier, has an unknown version, or
            is malformed (the message names the file and the problem).
        """
        name = os.fspath(path)
        try:
            with open(name) as handle:
                document = json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}: not valid JSON ({error})") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
            raise ValueError(f"{name}: not a perseus frontier file")
        if document.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"{name}: frontier format version {document.get('version')!r} is not supported "
                f"(this perseus reads version {FORMAT_VERSION})"
            )
        try:
            spec = PipelineSpec(**document["pipeline"])
            plans: list[Plan] = []
            for p in document["plans"]:
                frequencies = _decode_frequencies(p, plans[-1] if plans else None)
                plans.append(
                    Plan(
                        spec,
                        frequencies,
                        p["iteration_time_s"],
                        p["energy_j"],
                        p.get("energy_before_reclaim_j"),
                        document["blocking_power_w"],
                    )
                )
            return cls(
                plans,
                baseline=Evaluation(
                    document["baseline"]["iteration_time_s"], document["baseline"]["energy_j"]
                ),
                spec=spec,
                unit_time_s=document["unit_time_s"],
                blocking_power_w=document["blocking_power_w"],
                solve_time_s=document["solve_time_s"],
                steps=document.get("steps", 0),
                cuts=document.get("cuts", 0),
                solver_unit_time_s=document.get("solver_unit_time_s"),
                stop_reason=document.get("stop_reason", "minimum_time"),
                phase_times_s=document.get("phase_times_s"),
            )
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as error:
            raise ValueError(f"{name}: malformed frontier file ({error!r})") from None

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

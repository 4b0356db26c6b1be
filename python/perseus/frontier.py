"""Frontier results: `Plan` (one frequency per computation) and `Frontier`.

A plan's computations are identified by (profile stage, instruction,
microbatch). Internally they are kept in the core's id order,
``id = (stage * microbatches + microbatch) * 2 + (0 forward | 1 backward)``,
which is also the order of ``frequencies_mhz`` in saved frontier files (the
first plan lists them all; each later plan lists ``changes``, the
``[id, MHz]`` pairs that differ from the plan before it).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, overload

import numpy as np

from ._files import write_text_atomically
from .profile import INSTRUCTIONS
from .schedule import build_pipeline

__all__ = ["Evaluation", "Frontier", "PipelineSpec", "Plan"]

FORMAT_NAME = "perseus-frontier"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Evaluation:
    """A plan replayed on measured options.

    Attributes
    ----------
    iteration_time : float
        Longest path through the iteration's DAG, in seconds.
    energy : float
        Energy of all GPUs over one iteration, in joules, blocking included.
    """

    iteration_time: float
    energy: float


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

    def computation_id(self, stage: int, instruction: str, microbatch: int) -> int:
        """Core id of a computation, with a clear error for a bad key."""
        if not 0 <= stage < self.num_stages:
            raise ValueError(
                f"stage {stage} is out of range: this pipeline has {self.num_stages} stages"
            )
        if instruction not in INSTRUCTIONS:
            raise ValueError(f"instruction {instruction!r} is not one of {INSTRUCTIONS}")
        if not 0 <= microbatch < self.microbatches:
            raise ValueError(
                f"microbatch {microbatch} is out of range: this pipeline runs {self.microbatches}"
            )
        return (stage * self.microbatches + microbatch) * 2 + INSTRUCTIONS.index(instruction)


def _encode_frequencies(frequencies: np.ndarray, previous: Plan | None) -> dict[str, Any]:
    """A plan's MHz for a frontier file: all of them for the first plan, then
    only ``[computation id, MHz]`` pairs that differ from the previous plan
    (neighbouring plans differ in a few computations, so files stay small)."""
    if previous is None:
        return {"frequencies_mhz": frequencies.tolist()}
    (changed,) = np.nonzero(frequencies != previous.frequencies_mhz)
    return {"changes": [[int(i), int(frequencies[i])] for i in changed]}


def _decode_frequencies(entry: dict[str, Any], previous: Plan | None) -> np.ndarray:
    if "frequencies_mhz" in entry:
        return np.asarray(entry["frequencies_mhz"], dtype=np.int32)
    if previous is None:
        raise ValueError("the first plan must list all its frequencies")
    frequencies = previous.frequencies_mhz.copy()
    for computation, mhz in entry["changes"]:
        frequencies[computation] = mhz
    return frequencies


@functools.lru_cache(maxsize=16)
def _execution_order(spec: PipelineSpec) -> tuple[np.ndarray, ...]:
    pipeline = build_pipeline(spec.schedule, spec.num_gpus, spec.microbatches, spec.virtual_stages)
    return tuple(pipeline.order(gpu) for gpu in range(spec.num_gpus))


class Plan:
    """One SM frequency for every computation of an iteration.

    Attributes
    ----------
    iteration_time : float
        Replayed iteration time in seconds.
    energy : float
        Replayed iteration energy in joules (blocking power included).
    energy_before_reclaim : float
        Replayed energy of the plan the min-cut step produced, before slack
        reclamation and local search, over an iteration as long as this
        plan's, in joules.
    blocking_power : float
        Watts a GPU draws while it waits (from the profile).
    spec : PipelineSpec
        The pipeline the plan was made for.
    """

    __slots__ = (
        "_frequencies",
        "blocking_power",
        "energy",
        "energy_before_reclaim",
        "iteration_time",
        "spec",
    )

    def __init__(
        self,
        spec: PipelineSpec,
        frequencies_mhz: np.ndarray,
        iteration_time: float,
        energy: float,
        energy_before_reclaim: float | None = None,
        blocking_power: float = 0.0,
    ) -> None:
        frequencies = np.asarray(frequencies_mhz, dtype=np.int32)
        if frequencies.shape != (spec.num_computations,):
            raise ValueError(
                f"a plan for this pipeline needs {spec.num_computations} frequencies, "
                f"got shape {frequencies.shape}"
            )
        frequencies.setflags(write=False)
        self.spec = spec
        self._frequencies = frequencies
        self.iteration_time = float(iteration_time)
        self.energy = float(energy)
        self.energy_before_reclaim = float(
            energy if energy_before_reclaim is None else energy_before_reclaim
        )
        self.blocking_power = float(blocking_power)

    def energy_at(self, iteration_time: float) -> float:
        """Energy in joules of an iteration that lasts `iteration_time` seconds.

        A pipeline that waits for a straggler, or for a deadline, keeps its
        GPUs drawing the blocking power until then:
        ``energy + GPUs * blocking_power * (iteration_time - self.iteration_time)``.
        """
        if iteration_time < self.iteration_time * (1 - 1e-12):
            raise ValueError(
                f"this plan takes {self.iteration_time:.6g} s; it cannot finish in {iteration_time:.6g} s"
            )
        extra = max(0.0, float(iteration_time) - self.iteration_time)
        return self.energy + self.spec.num_gpus * self.blocking_power * extra

    @property
    def reclaimed(self) -> bool:
        """Whether reclamation or local search lowered this plan's energy."""
        return self.energy < self.energy_before_reclaim

    @property
    def frequencies_mhz(self) -> np.ndarray:
        """Read-only MHz per computation, in core id order (see module docs)."""
        return self._frequencies

    def frequency(self, stage: int, instruction: str, microbatch: int, chunk: int = 0) -> int:
        """Planned SM frequency in MHz of one computation.

        Parameters
        ----------
        stage : int
            Pipeline stage, i.e. the GPU's rank in the pipeline.
        instruction : str
            ``"forward"`` or ``"backward"``.
        microbatch : int
            Microbatch index within the iteration.
        chunk : int
            Virtual chunk on that GPU (interleaved schedule); 0 otherwise.
        """
        spec = self.spec
        if not 0 <= stage < spec.num_gpus:
            raise ValueError(
                f"stage {stage} is out of range: this pipeline has {spec.num_gpus} GPUs"
            )
        if not 0 <= chunk < spec.virtual_stages:
            raise ValueError(
                f"chunk {chunk} is out of range: this pipeline has {spec.virtual_stages} "
                "virtual stage(s) per GPU"
            )
        model_stage = chunk * spec.num_gpus + stage
        return int(self._frequencies[spec.computation_id(model_stage, instruction, microbatch)])

    def frequencies(self) -> dict[tuple[int, str, int], int]:
        """All frequencies, keyed by (profile stage, instruction, microbatch), in MHz."""
        spec = self.spec
        return {
            (stage, instruction, mb): int(
                self._frequencies[spec.computation_id(stage, instruction, mb)]
            )
            for stage in range(spec.num_stages)
            for instruction in INSTRUCTIONS
            for mb in range(spec.microbatches)
        }

    def to_zeus(self) -> list[list[tuple[str, int]]]:
        """Per GPU, ``(instruction, MHz)`` in execution order (Zeus's frequency schedule)."""
        return [
            [(INSTRUCTIONS[i % 2], int(self._frequencies[i])) for i in order]
            for order in _execution_order(self.spec)
        ]

    def __repr__(self) -> str:
        return (
            f"Plan(iteration_time={self.iteration_time:.6g} s, energy={self.energy:.6g} J, "
            f"{self.spec.schedule}, {self.spec.num_gpus} GPUs x {self.spec.microbatches} microbatches)"
        )


class Frontier(Sequence[Plan]):
    """The iteration time-energy Pareto frontier: plans from fastest to slowest.

    Every plan is the cheapest perseus found for an iteration that lasts its
    time. Plans are compared at a common iteration length: a pipeline that
    finishes early (waiting for a straggler, or for a deadline) keeps drawing
    blocking power until the iteration ends, so a slower plan is kept only if
    it uses less energy over an iteration as long as itself. Iteration times
    strictly increase along the frontier and the energy each plan needs over
    any common iteration length strictly decreases; each plan's own `energy`
    (at its own time) need not.

    Attributes
    ----------
    iteration_times : numpy.ndarray
        Replayed iteration time of each plan, seconds.
    energies : numpy.ndarray
        Replayed energy of each plan, joules.
    baseline : Evaluation
        Every computation at its fastest option (all maximum frequency).
    spec : PipelineSpec
        The pipeline the plans are for.
    unit_time : float
        Time quantum asked of the solver, seconds.
    solver_unit_time : float
        Quantum the min-cut steps actually used, seconds: finer than
        `unit_time` for small pipelines when refining (it costs little there
        and brings the convex model closer to the measured options).
    steps : int
        Min-cut steps the solver ran.
    energies_before_reclaim : numpy.ndarray
        Replayed energy of each plan as the min-cut step produced it, before
        slack reclamation and local search, joules.
    blocking_power : float
        Watts drawn by a GPU while it waits.
    solve_time : float
        Wall time of `optimize`, seconds.
    """

    def __init__(
        self,
        plans: Sequence[Plan],
        *,
        baseline: Evaluation,
        spec: PipelineSpec,
        unit_time: float,
        blocking_power: float,
        solve_time: float,
        steps: int = 0,
        solver_unit_time: float | None = None,
    ) -> None:
        if not plans:
            raise ValueError("a frontier needs at least one plan")
        times = np.array([p.iteration_time for p in plans], dtype=np.float64)
        if np.any(np.diff(times) <= 0):
            raise ValueError("frontier plans must be ordered by strictly increasing iteration time")
        self._plans = list(plans)
        self.iteration_times = times
        self.energies = np.array([p.energy for p in plans], dtype=np.float64)
        self.energies_before_reclaim = np.array([p.energy_before_reclaim for p in plans])
        for array in (self.iteration_times, self.energies, self.energies_before_reclaim):
            array.setflags(write=False)
        self.baseline = baseline
        self.spec = spec
        self.unit_time = float(unit_time)
        self.blocking_power = float(blocking_power)
        self.solve_time = float(solve_time)
        self.steps = int(steps)
        self.solver_unit_time = float(unit_time if solver_unit_time is None else solver_unit_time)

    def __len__(self) -> int:
        return len(self._plans)

    @overload
    def __getitem__(self, index: int) -> Plan: ...
    @overload
    def __getitem__(self, index: slice) -> list[Plan]: ...
    def __getitem__(self, index: int | slice) -> Plan | list[Plan]:
        return self._plans[index]

    def __iter__(self) -> Iterator[Plan]:
        return iter(self._plans)

    @property
    def fastest(self) -> Plan:
        """The fastest plan (least energy at the all-maximum-frequency time)."""
        return self._plans[0]

    @property
    def reclaim_savings(self) -> np.ndarray:
        """Energy each plan saves by reclamation and local search, joules (>= 0)."""
        return self.energies_before_reclaim - self.energies

    def energy_at(self, deadline: float) -> float:
        """Least energy (J) of an iteration lasting `deadline` s: ``plan_for(deadline).energy_at(deadline)``."""
        return self.plan_for(deadline).energy_at(float(deadline))

    def plan_for(self, deadline: float) -> Plan:
        """The cheapest plan whose iteration time is at most `deadline` seconds.

        Cheapest over an iteration that lasts `deadline` (see `energy_at`),
        which along the frontier is the slowest plan that meets it. Use it for
        a straggler's iteration time, or for any time budget.

        Raises
        ------
        ValueError
            If even the fastest plan is slower than `deadline`.
        """
        index = int(np.searchsorted(self.iteration_times, float(deadline), side="right")) - 1
        if index < 0:
            raise ValueError(
                f"no plan meets a deadline of {deadline:.6g} s: the fastest plan takes "
                f"{self.iteration_times[0]:.6g} s"
            )
        return self._plans[index]

    def summary(self) -> dict[str, float]:
        """Headline numbers: baseline, fastest plan, saving (%) and plan count."""
        fastest = self._plans[0]
        return {
            "baseline_time_s": self.baseline.iteration_time,
            "baseline_energy_j": self.baseline.energy,
            "fastest_time_s": fastest.iteration_time,
            "fastest_energy_j": fastest.energy,
            "saving_percent": 100.0 * (1.0 - fastest.energy / self.baseline.energy),
            "plans": float(len(self)),
            "solve_time_s": self.solve_time,
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the frontier as versioned JSON; the file appears whole or not at all."""
        document: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "pipeline": asdict(self.spec),
            "unit_time_s": self.unit_time,
            "blocking_power_w": self.blocking_power,
            "solve_time_s": self.solve_time,
            "steps": self.steps,
            "solver_unit_time_s": self.solver_unit_time,
            "baseline": {
                "iteration_time_s": self.baseline.iteration_time,
                "energy_j": self.baseline.energy,
            },
            "computation_id": "(stage * microbatches + microbatch) * 2 + (0 forward | 1 backward)",
            "plans": [
                {
                    "iteration_time_s": p.iteration_time,
                    "energy_j": p.energy,
                    "energy_before_reclaim_j": p.energy_before_reclaim,
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
                unit_time=document["unit_time_s"],
                blocking_power=document["blocking_power_w"],
                solve_time=document["solve_time_s"],
                steps=document.get("steps", 0),
                solver_unit_time=document.get("solver_unit_time_s"),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{name}: malformed frontier file ({error!r})") from None

    def __repr__(self) -> str:
        return (
            f"Frontier({len(self)} plans, {self.iteration_times[0]:.6g}-"
            f"{self.iteration_times[-1]:.6g} s, {self.energies[0]:.6g}-{self.energies[-1]:.6g} J)"
        )

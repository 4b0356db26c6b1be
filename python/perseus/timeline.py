"""When each computation of a plan runs, and the power the pipeline draws meanwhile.

A plan fixes one measured frequency per computation, hence its time and
energy. Replayed as soon as possible (every computation starts once its
inputs are ready and its GPU is free, as the hardware runs it), that gives a
start and an end per computation: the per-GPU Gantt chart of
:func:`timeline`. Between its computations a GPU waits and draws the
blocking power; while it computes it draws the computation's average power
``energy / time``. Summed over the GPUs this is :class:`PowerTimeline`, a
step function whose integral is the plan's energy
``sum e_i + P_block * (GPUs * T - sum t_i)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._replay import _setup, measured_rows
from ._zeus_format import INSTRUCTIONS

if TYPE_CHECKING:
    from .pipeline_spec import PipelineSpec
    from .profile import Profile

__all__ = ["PowerTimeline", "Timeline", "timelines"]


_Floats = npt.NDArray[np.float64]
_Ints = npt.NDArray[np.int64]


def _read_only(values: np.ndarray) -> np.ndarray:
    out = np.array(values, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class PowerTimeline:
    """The power a pipeline draws over one iteration: a step function.

    Attributes
    ----------
    time_s : numpy.ndarray
        Breakpoints in seconds from the iteration's start, ``0`` to the
        iteration time, increasing (``K + 1`` values).
    power_w : numpy.ndarray
        Power of all GPUs together on each of the ``K`` intervals, watts.
    gpu_power_w : numpy.ndarray
        Power of each GPU on each interval, watts, shape ``(GPUs, K)``.
    """

    time_s: _Floats
    power_w: _Floats
    gpu_power_w: _Floats

    def __post_init__(self) -> None:
        for name in ("time_s", "power_w", "gpu_power_w"):
            object.__setattr__(self, name, _read_only(getattr(self, name)))

    @property
    def iteration_time_s(self) -> float:
        """Length of the iteration, seconds."""
        return float(self.time_s[-1])

    @property
    def energy_j(self) -> float:
        """Integral of the power over the iteration, joules (the plan's energy)."""
        return float(np.dot(np.diff(self.time_s), self.power_w))

    @property
    def average_w(self) -> float:
        """Energy over iteration time: the cluster's average power, watts."""
        return self.energy_j / self.iteration_time_s

    @property
    def peak_w(self) -> float:
        """Highest power of all GPUs together at any moment of the iteration, watts."""
        return float(np.max(self.power_w))


@dataclass(frozen=True, eq=False)
class Timeline:
    """Start and end of every computation of one plan, replayed as soon as possible.

    Arrays are indexed by the core's computation id (the order of
    ``Plan.frequencies_mhz``).

    Attributes
    ----------
    start_s, end_s : numpy.ndarray
        When each computation starts and ends, seconds from the iteration's start.
    energy_j : numpy.ndarray
        Measured energy of each computation at its planned frequency, joules.
    frequency_mhz : numpy.ndarray
        Planned SM frequency of each computation, MHz.
    gpu, chunk, microbatch : numpy.ndarray
        Where each computation runs: pipeline rank, virtual chunk on it, microbatch.
    instruction : tuple of str
        ``"forward"`` or ``"backward"`` per computation.
    blocking_power_w : float
        What a GPU draws while it waits, watts.
    num_gpus : int
        GPUs in the pipeline.
    """

    start_s: _Floats
    end_s: _Floats
    energy_j: _Floats
    frequency_mhz: _Ints
    gpu: _Ints
    chunk: _Ints
    microbatch: _Ints
    instruction: tuple[str, ...]
    blocking_power_w: float
    num_gpus: int

    def __post_init__(self) -> None:
        for name in (
            "start_s",
            "end_s",
            "energy_j",
            "frequency_mhz",
            "gpu",
            "chunk",
            "microbatch",
        ):
            object.__setattr__(self, name, _read_only(getattr(self, name)))

    @property
    def iteration_time_s(self) -> float:
        """End of the last computation, seconds."""
        return float(np.max(self.end_s))

    @property
    def busy_s(self) -> _Floats:
        """Seconds each GPU computes during the iteration (the rest it waits; read-only)."""
        busy: _Floats = np.bincount(
            self.gpu, weights=self.end_s - self.start_s, minlength=self.num_gpus
        ).astype(np.float64)
        busy.setflags(write=False)
        return busy

    def power(self, iteration_time_s: float | None = None) -> PowerTimeline:
        """Cluster power over the iteration (see the module docs).

        `iteration_time_s` extends the iteration past its last computation
        (the GPUs then wait at blocking power), as when a straggler or a
        deadline sets its length; by default it ends with the last computation.
        """
        end = self.iteration_time_s if iteration_time_s is None else float(iteration_time_s)
        if end < self.iteration_time_s * (1 - 1e-12):
            raise ValueError(
                f"the plan takes {self.iteration_time_s:.6g} s; an iteration of {end:.6g} s "
                "is too short for it"
            )
        end = max(end, self.iteration_time_s)
        duration = self.end_s - self.start_s
        extra_w = self.energy_j / duration - self.blocking_power_w  # above waiting
        points = np.unique(np.concatenate(([0.0, end], self.start_s, self.end_s)))
        gpu_power = np.full((self.num_gpus, len(points) - 1), self.blocking_power_w)
        # Each GPU runs one computation at a time, so its power on an interval is
        # the blocking power plus that computation's excess; a difference array
        # over the breakpoints adds every computation at once.
        first = np.searchsorted(points, self.start_s)
        last = np.searchsorted(points, self.end_s)
        delta = np.zeros((self.num_gpus, len(points)))
        np.add.at(delta, (self.gpu, first), extra_w)
        np.add.at(delta, (self.gpu, last), -extra_w)
        gpu_power += np.cumsum(delta, axis=1)[:, :-1]
        return PowerTimeline(points, gpu_power.sum(axis=0), gpu_power)


def timelines(profile: Profile, spec: PipelineSpec, frequencies_mhz: np.ndarray) -> list[Timeline]:
    """The timelines of plans given as rows of MHz (shape ``(plans, computations)``).

    Every frequency must be one the profile measured for that computation's
    stage and instruction (`perseus.ProfileError` names the one that is not).
    All plans are replayed together, one pass over the DAG in topological order.
    """
    rows = np.atleast_2d(np.asarray(frequencies_mhz, dtype=np.int64))
    time_s, energy_j = measured_rows(profile, spec, rows)
    problem, _, pipeline = _setup(profile, spec)
    sources, targets = problem.edges()
    count = spec.num_computations
    order = _topological_order(count, sources, targets)
    # Predecessors of each computation, as CSR over the edge list sorted by target.
    by_target = np.argsort(targets, kind="stable")
    pred = sources[by_target]
    offsets = np.searchsorted(targets[by_target], np.arange(count + 1))
    start = np.zeros_like(time_s)
    end = np.zeros_like(time_s)
    for v in order:
        before = pred[offsets[v] : offsets[v + 1]]
        if len(before):
            start[:, v] = end[:, before].max(axis=1)
        end[:, v] = start[:, v] + time_s[:, v]
    names = tuple(INSTRUCTIONS[k] for k in pipeline.instruction)
    return [
        Timeline(
            start_s=start[k],
            end_s=end[k],
            energy_j=energy_j[k],
            frequency_mhz=rows[k],
            gpu=pipeline.gpu.astype(np.int64),
            chunk=pipeline.chunk.astype(np.int64),
            microbatch=pipeline.microbatch.astype(np.int64),
            instruction=names,
            blocking_power_w=profile.blocking_power_w,
            num_gpus=spec.num_gpus,
        )
        for k in range(len(rows))
    ]


def _topological_order(count: int, sources: np.ndarray, targets: np.ndarray) -> list[int]:
    indegree = np.bincount(targets, minlength=count)
    by_source = np.argsort(sources, kind="stable")
    succ = targets[by_source]
    offsets = np.searchsorted(sources[by_source], np.arange(count + 1))
    ready = [int(v) for v in np.nonzero(indegree == 0)[0]]
    order: list[int] = []
    remaining = indegree.copy()
    while ready:
        v = ready.pop()
        order.append(v)
        for w in succ[offsets[v] : offsets[v + 1]]:
            remaining[w] -= 1
            if remaining[w] == 0:
                ready.append(int(w))
    if len(order) != count:  # pragma: no cover - the core builds acyclic DAGs
        raise RuntimeError("the iteration's DAG has a cycle")
    return order

"""Timing iterations and exchanging the times, without touching the training stream.

- :class:`Stopwatch` marks points of an iteration with torch CUDA events on
  the current stream (a wall clock without a GPU) and reads them *late*: an
  iteration's time is read when the next iteration starts, by which point
  the GPU has normally passed it (Megatron's optimizer step synchronises);
  only a GPU more than an iteration behind makes the read wait, for that
  event alone, never for the stream.
- :class:`CpuGroups` are gloo process groups perseus makes for its own small
  exchanges (the straggler times each iteration, the energy report every N
  iterations): CPU tensors, so no collective of perseus is ever queued
  behind the training's kernels. They are made collectively at the first
  iteration, when every rank is in the same schedule call. They mirror the
  data-parallel and model-parallel groups only: no world-sized gloo group
  (at 1,000 ranks a full mesh of TCP connections); the one-time exchange of
  group membership uses the default process group.
- :class:`ReplicaTimes` exchanges the replicas' iteration times without a
  host barrier: each step is an asynchronous collective started at one
  iteration and waited at the next, when it has long completed, so the
  times of iteration n reach the straggler policy when iteration n + 3
  starts (read late, like the events).
"""

from __future__ import annotations

import math
import time
from datetime import timedelta
from typing import Any, Optional

__all__ = ["CpuGroups", "ReplicaTimes", "Stopwatch"]


class Stopwatch:
    """Points of an iteration: CUDA events on a GPU, ``time.perf_counter`` otherwise."""

    def __init__(self, torch: Any, gpu: bool) -> None:
        self._torch = torch
        self._gpu = gpu

    def mark(self) -> Any:
        if self._gpu:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds from `start` to `end` (NaN if either is missing)."""
        if start is None or end is None:
            return math.nan
        if self._gpu:
            if not end.query():
                end.synchronize()  # the GPU is an iteration behind: wait for this event only
            return float(start.elapsed_time(end)) / 1e3
        return float(end - start)


def _subgroup(dist: Any, lists: list[list[int]], timeout_s: Optional[float]) -> Any:
    """This rank's gloo group among `lists` (disjoint, covering every rank); collective."""
    timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
    mine, _ = dist.new_subgroups_by_enumeration(lists, timeout=timeout, backend="gloo")
    return mine


class CpuGroups:
    """gloo groups mirroring the data-parallel and model-parallel groups.

    Attributes
    ----------
    data_parallel
        This rank and its peers in the other replicas (index = data-parallel rank).
    model_parallel
        The ranks of this rank's pipeline (one replica).
    data_parallel_rank, data_parallel_size, model_parallel_rank, model_parallel_size : int
    """

    def __init__(
        self,
        torch: Any,
        data_parallel_group: Any,
        model_parallel_group: Any,
        *,
        timeout_s: Optional[float] = None,
    ) -> None:
        dist = torch.distributed
        self._torch = self.torch = torch
        mine = (
            sorted(dist.get_process_group_ranks(data_parallel_group)),
            sorted(dist.get_process_group_ranks(model_parallel_group)),
        )
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)  # once, on the default group: no world gloo mesh
        dp_lists = sorted({tuple(dp) for dp, _ in everyone})
        mp_lists = sorted({tuple(mp) for _, mp in everyone})
        self.data_parallel = _subgroup(dist, [list(x) for x in dp_lists], timeout_s)
        self.model_parallel = _subgroup(dist, [list(x) for x in mp_lists], timeout_s)
        rank = dist.get_rank()
        self.rank = rank
        self.data_parallel_size = len(mine[0])
        self.data_parallel_rank = mine[0].index(rank)
        self.model_parallel_size = len(mine[1])
        self.model_parallel_rank = mine[1].index(rank)
        self.world_size = dist.get_world_size()

    @property
    def first_of_replica(self) -> bool:
        """Whether this rank is its pipeline's first (it logs for the replica)."""
        return self.model_parallel_rank == 0

    def close(self) -> None:
        """Destroy the groups (local: each rank its own), so attachments leave none behind."""
        dist = self._torch.distributed
        if not dist.is_initialized():
            return
        for group in {id(g): g for g in (self.data_parallel, self.model_parallel)}.values():
            if group is not None and group is not dist.GroupMember.NON_GROUP_MEMBER:
                try:
                    dist.destroy_process_group(group)
                except Exception:  # noqa: BLE001 - already gone with the default group
                    pass

    def gather(self, payload: Any) -> list[Any]:
        """Every rank's `payload` (by replica, then pipeline position).

        Two all-gathers of Python objects along the existing groups: the
        pipeline's ranks, then the replicas (each rank sends its replica's
        list), so no group spans the world.
        """
        dist = self._torch.distributed
        replica: list[Any] = [None] * self.model_parallel_size
        dist.all_gather_object(replica, payload, group=self.model_parallel)
        if self.data_parallel_size < 2:
            return replica
        replicas: list[Any] = [None] * self.data_parallel_size
        dist.all_gather_object(replicas, replica, group=self.data_parallel)
        return [p for one in replicas for p in one]

    def barrier(self) -> None:
        """Every rank of the job, along the two groups: the pipeline's ranks, then the replicas.

        Each data-parallel group holds one rank of every replica, and that rank passed its
        pipeline's barrier only once all of its pipeline had arrived: so nobody leaves before
        every rank has arrived, with no world-sized group.
        """
        dist = self._torch.distributed
        dist.barrier(group=self.model_parallel)
        if self.data_parallel_size > 1:
            dist.barrier(group=self.data_parallel)


class ReplicaTimes:
    """Each replica's pipeline time, exchanged asynchronously and read late.

    A replica's time is the longest of its pipeline's ranks' (a MAX
    all-reduce on the model-parallel group), then gathered across replicas
    (an all-gather on the data-parallel group); both are CPU tensors on
    gloo, started with ``async_op`` and waited one :meth:`step` later, by
    which time the other ranks have long sent theirs (they started it an
    iteration ago), so nobody waits for the slowest rank of this iteration.
    Every rank calls :meth:`step` once per iteration, with the same
    entries, so the collectives are issued in the same order everywhere.
    """

    def __init__(self, groups: CpuGroups) -> None:
        self._torch = groups.torch
        self._groups = groups
        self._reducing: list[tuple[int, Any, Any, Any]] = []  # number, key, tensor, work
        self._gathering: list[tuple[int, Any, list[Any], Any]] = []

    def step(self, entry: Optional[tuple[int, Any, float]]) -> list[tuple[int, Any, list[float]]]:
        """Start `entry` (iteration number, workload key, this rank's seconds) and advance.

        Returns the exchanges that finished: (number, key, each replica's
        time by data-parallel rank); a rank without a time (NaN) makes its
        replica's time infinite, which the policy skips.
        """
        torch, dist, groups = self._torch, self._torch.distributed, self._groups
        done = []
        for number, key, gathered, work in self._gathering:
            work.wait()
            done.append((number, key, [float(t.item()) for t in gathered]))
        self._gathering = []
        for number, key, pipeline, work in self._reducing:
            if work is not None:
                work.wait()
            gathered = [
                torch.zeros(1, dtype=torch.float64) for _ in range(groups.data_parallel_size)
            ]
            work = dist.all_gather(gathered, pipeline, group=groups.data_parallel, async_op=True)
            self._gathering.append((number, key, gathered, work))
        self._reducing = []
        if entry is not None:
            number, key, own_s = entry
            value = own_s if math.isfinite(own_s) and own_s > 0 else math.inf
            pipeline = torch.tensor([value], dtype=torch.float64)
            work = None
            if groups.model_parallel_size > 1:
                work = dist.all_reduce(
                    pipeline, op=dist.ReduceOp.MAX, group=groups.model_parallel, async_op=True
                )
            self._reducing.append((number, key, pipeline, work))
        return done

    def drop(self) -> None:
        """At detach: let what is in flight finish (every rank started it), briefly, then forget it."""
        for _, _, _, work in self._reducing + self._gathering:
            if work is not None:
                try:
                    work.wait(timedelta(seconds=10))
                except Exception:  # noqa: BLE001 - a peer already gone: nothing to read
                    pass
        self._reducing, self._gathering = [], []

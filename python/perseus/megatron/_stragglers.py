"""Following data-parallel stragglers: pick the frontier plan for the slowest replica.

Data-parallel replicas wait for each other at every gradient all-reduce, so
when one pipeline is slow for reasons of its own (a hot or throttled GPU, a
slow link, a noisy neighbour) the others may slow down to its pace for free.
After every iteration each replica contributes its iteration time to one
small all-reduce on the data-parallel group, and :class:`StragglerPolicy`
decides which plan to run next.

Measured times include work the plan does not model (Python, communication,
the data loader), so they are never compared with plan times directly. The
*reference* is the fastest time any replica measured while running the base
plan; a replica's slowdown is its time over the reference, and the plan
deadline for a slowdown ``r`` is ``base.iteration_time_s * r``. Only replicas
running the base plan report times: a replica running a slower plan on
purpose would otherwise look like a straggler and drag everyone slower.
A straggler itself keeps the base plan (slowing it would slow everyone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ..frontier import Frontier
from ..plan import Plan

__all__ = ["PlanSwitch", "StragglerPolicy"]


@dataclass(frozen=True)
class PlanSwitch:
    """One change of plan made to follow (or stop following) a straggler.

    Times named ``*_time_s`` are plan iteration times; the others are
    measured wall times of whole iterations, in seconds.
    """

    iteration: int  #: the iteration after which the plan changed (0-based)
    from_time_s: float  #: iteration time of the plan left
    to_time_s: float  #: iteration time of the plan taken
    slowest_s: float  #: slowest replica running the base plan, this iteration
    reference_s: float  #: fastest time seen on the base plan (all replicas, all iterations)
    deadline_s: float  #: plan deadline asked of the frontier (base time x slowdown)
    reason: str  #: "straggler", "straggler changed" or "recovered"

    def __str__(self) -> str:
        return (
            f"iteration {self.iteration}: plan {self.from_time_s:.6g} s -> {self.to_time_s:.6g} s "
            f"({self.reason}; slowest replica {self.slowest_s:.4g} s, reference "
            f"{self.reference_s:.4g} s, deadline {self.deadline_s:.6g} s)"
        )


class StragglerPolicy:
    """Chooses this replica's plan from the replicas' iteration times.

    Parameters
    ----------
    frontier
        Where the slower plans come from.
    base
        The plan run when nobody straggles (usually ``frontier.fastest``).
    tolerance
        Relative slowdown above which a replica counts as a straggler and the
        others follow it (0.05: 5 % slower than the reference).
    recovery
        Relative slowdown below which followers return to the base plan;
        less than `tolerance`, so that a slowdown hovering near the
        threshold does not flap between plans. Also, while following, a new
        deadline replaces the current one only when it differs by more than
        `tolerance`.
    """

    def __init__(
        self,
        frontier: Frontier,
        base: Plan,
        *,
        tolerance: float = 0.05,
        recovery: Optional[float] = None,
    ) -> None:
        if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
            raise ValueError(f"tolerance must be a number > 0, not {tolerance!r}")
        if recovery is None:
            recovery = tolerance / 2
        if not (isinstance(recovery, (int, float)) and 0 <= recovery < tolerance):
            raise ValueError(
                f"recovery must be a number in [0, tolerance={tolerance}), not {recovery!r}"
            )
        self.frontier = frontier
        self.base = base
        self.tolerance = float(tolerance)
        self.recovery = float(recovery)
        self.plan = base
        self.deadline_s: Optional[float] = None  # set while following
        self.reference_s = math.inf

    @property
    def on_base(self) -> bool:
        return self.plan is self.base

    def observe(
        self, iteration: int, own_s: float, slowest_base_s: float, fastest_base_s: float
    ) -> Optional[PlanSwitch]:
        """Take one iteration's times; return the switch made, if any.

        Parameters
        ----------
        iteration
            Index of the iteration measured.
        own_s
            This replica's iteration time (seconds).
        slowest_base_s, fastest_base_s
            Slowest and fastest iteration time among replicas that ran the
            base plan (seconds); 0 and ``inf`` when none did.
        """
        if math.isfinite(fastest_base_s) and fastest_base_s > 0:
            self.reference_s = min(self.reference_s, fastest_base_s)
        if not (slowest_base_s > 0 and math.isfinite(self.reference_s)):
            return None  # nobody ran the base plan: nothing to compare
        slowdown = slowest_base_s / self.reference_s
        base_time = self.base.iteration_time_s
        if self.on_base and own_s > self.reference_s * (1 + self.tolerance):
            return None  # this replica is the straggler: it keeps the fastest plan it has
        if slowdown > 1 + self.tolerance:
            deadline = base_time * slowdown
            if (
                self.deadline_s is not None
                and abs(deadline - self.deadline_s) <= self.tolerance * self.deadline_s
            ):
                return None  # still following about the same straggler
            reason = "straggler" if self.deadline_s is None else "straggler changed"
            self.deadline_s = deadline
            return self._switch(
                iteration, self.frontier.plan_for(deadline), slowest_base_s, deadline, reason
            )
        if self.deadline_s is not None and slowdown > 1 + self.recovery:
            return None  # inside the hysteresis band: keep following
        if self.deadline_s is None:
            return None
        self.deadline_s = None
        return self._switch(iteration, self.base, slowest_base_s, base_time, "recovered")

    def _switch(
        self, iteration: int, plan: Plan, slowest_s: float, deadline_s: float, reason: str
    ) -> Optional[PlanSwitch]:
        if plan is self.plan:
            return None
        switch = PlanSwitch(
            iteration=iteration,
            from_time_s=self.plan.iteration_time_s,
            to_time_s=plan.iteration_time_s,
            slowest_s=slowest_s,
            reference_s=self.reference_s,
            deadline_s=deadline_s,
            reason=reason,
        )
        self.plan = plan
        return switch


def exchange_times(
    torch: Any,
    own_s: float,
    on_base: bool,
    *,
    data_parallel_group: Any,
    model_parallel_group: Any,
    device: Any,
) -> tuple[float, float, float]:
    """All-reduce iteration times; returns (pipeline time, slowest base, fastest base), seconds.

    The ranks of one pipeline (its model-parallel group) first agree on the
    pipeline's time, the longest of theirs, so that they all take the same
    decisions; then one all-reduce (MAX of ``[t, -t]``) on the data-parallel
    group gives the slowest and fastest replica running the base plan.
    """
    dist = torch.distributed
    values = torch.tensor([own_s], dtype=torch.float64, device=device)
    if model_parallel_group is not None and dist.get_world_size(model_parallel_group) > 1:
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=model_parallel_group)
    pipeline_s = float(values.item())
    pair = [pipeline_s, -pipeline_s] if on_base else [0.0, -math.inf]
    both = torch.tensor(pair, dtype=torch.float64, device=device)
    dist.all_reduce(both, op=dist.ReduceOp.MAX, group=data_parallel_group)
    slowest, negative_fastest = both.tolist()
    return pipeline_s, float(slowest), float(-negative_fastest)

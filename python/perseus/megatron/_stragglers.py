"""Following data-parallel stragglers: pick the frontier plan for the slowest replica.

Data-parallel replicas wait for each other at every gradient all-reduce, so
when one pipeline is slow for reasons of its own (a hot or throttled GPU, a
slow link, a noisy neighbour) the others may slow down to its pace for free:
they run ``frontier.plan_for(deadline)`` for the straggler's time while the
straggler keeps the base plan (slowing it would slow everyone).

:class:`StragglerPolicy` decides from the replicas' iteration times *in the
same iterations*, so that whatever slows every replica alike (the file
system, the network, a thermal swing of the whole room) cancels out:

- **Start.** Over a window of ``window`` iterations, each replica's median
  time. The slowest replica is the straggler when its median exceeds the
  reference, the other replica's median (the median of the others' medians
  with 3 or more replicas), by more than ``tolerance``. Medians ignore a fast
  outlier or a one-off hiccup; nothing is decided before ``min_samples``
  iterations, nor for ``min_samples`` iterations after any switch: that
  dwell, and the medians, are the hysteresis (a straggler hovering at the
  threshold switches at most once per ``min_samples`` iterations; a
  ``recovery`` below ``tolerance`` adds a band).
- **Deadline.** Measured times include work no plan models (Python, the
  data loader, communication), so they are never compared with plan times:
  the deadline is ``base.iteration_time_s * slowdown``, the measured
  slowdown mapped onto the plan's time.
- **While following** the followers run slower plans on purpose, so their
  times say nothing about the base plan. The reference is the others'
  median from the iterations that started following, moved by what moves
  every replica alike: the followers' times on their current plan relative
  to their first ``min_samples`` iterations on it (a common-mode drift,
  measured on the followers themselves, never through the plan's model).
  The straggler's own median, on the base plan throughout, is compared with
  that reference. A change of slowdown by more than ``tolerance`` moves the
  deadline ("straggler changed"); within ``recovery`` of the reference
  following ends ("recovered"). Should a follower become clearly slower
  than the straggler (its own trouble, or a plan slower than the model
  said), everyone returns to the base plan ("follower slowest") and the
  window starts afresh, so a straggler that changes replica is followed
  anew.

Every call to :meth:`StragglerPolicy.observe` leaves a
:class:`StragglerDecision` with the numbers behind it; a change of this
replica's plan is also returned as a :class:`PlanSwitch`. The policy is pure
(no torch): every replica runs it on the same gathered times and reaches the
same decisions.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from .._deprecation import warn_renamed
from .._validate import is_integer
from ..frontier import Frontier
from ..plan import Plan

__all__ = ["PlanSwitch", "StragglerDecision", "StragglerPolicy"]

# Float slack on thresholds: a slowdown of exactly 1 + recovery counts as recovered.
_EPS = 1e-9


@dataclass(frozen=True)
class StragglerDecision:
    """What :class:`StragglerPolicy` made of one iteration, with its numbers.

    Times named ``*_time_s`` are plan iteration times; ``straggler_s`` and
    ``reference_s`` are measured medians of whole iterations, seconds.
    """

    iteration: int  #: the iteration measured (0-based)
    #: "collecting" (too few samples), "skipped" (a replica had no time),
    #: "none" (nobody straggles), "follow", "hold", "retarget", "recover"
    action: str
    straggler: Optional[int]  #: data-parallel rank of the straggler, if any
    straggler_s: float  #: its median time over the window (NaN if none)
    reference_s: float  #: the others' median (NaN if none)
    slowdown: float  #: straggler_s / reference_s (NaN if none)
    deadline_s: float  #: plan deadline followed after this decision (NaN: base plan)
    plan_time_s: float  #: iteration time of this replica's plan after this decision
    samples: int  #: iterations in the window
    reason: str = ""  #: why a switch happened ("straggler", "recovered", ...)

    def __str__(self) -> str:
        if self.straggler is None:
            return f"iteration {self.iteration}: {self.action} ({self.samples} sample(s))"
        return (
            f"iteration {self.iteration}: {self.action}; straggler replica {self.straggler} "
            f"{self.straggler_s:.4g} s vs reference {self.reference_s:.4g} s "
            f"({self.slowdown:.3f}x, median of {self.samples}), plan {self.plan_time_s:.6g} s"
        )


@dataclass(frozen=True)
class PlanSwitch:
    """One change of this replica's plan, made to follow (or stop following) a straggler.

    Times named ``*_time_s`` are plan iteration times; ``straggler_s`` and
    ``reference_s`` are measured medians of whole iterations, in seconds.
    """

    iteration: int  #: the last iteration measured before the change (0-based)
    from_time_s: float  #: iteration time of the plan left
    to_time_s: float  #: iteration time of the plan taken
    straggler: int  #: data-parallel rank of the straggler
    straggler_s: float  #: its median iteration time over the window
    reference_s: float  #: the others' median time (with the drift seen while following)
    slowdown: float  #: straggler_s / reference_s
    deadline_s: float  #: plan deadline asked of the frontier (base time x slowdown)
    reason: str  #: "straggler", "straggler changed", "recovered" or "follower slowest"
    samples: int  #: iterations in the window

    @property
    def slowest_s(self) -> float:
        """Deprecated: use `straggler_s`."""
        warn_renamed("PlanSwitch.slowest_s", "PlanSwitch.straggler_s")
        return self.straggler_s

    def __str__(self) -> str:
        what = {
            "straggler": f"follows straggler replica {self.straggler}",
            "straggler changed": f"retargets to straggler replica {self.straggler}",
            "recovered": f"recovered: straggler replica {self.straggler} is back",
            "follower slowest": (
                f"returns to the base plan: a follower is slower than straggler replica "
                f"{self.straggler}"
            ),
        }.get(self.reason, self.reason)
        return (
            f"{what} ({self.slowdown:.3f}x: {self.straggler_s:.4g} s vs {self.reference_s:.4g} s, "
            f"median of {self.samples}); plan {self.from_time_s:.6g} s -> {self.to_time_s:.6g} s "
            f"(deadline {self.deadline_s:.6g} s) after iteration {self.iteration}"
        )


class StragglerPolicy:
    """Chooses this replica's plan from all replicas' iteration times.

    Parameters
    ----------
    frontier
        Where the slower plans come from.
    base
        The plan run while nobody straggles (usually ``frontier.fastest``).
    replica
        This replica's data-parallel rank (the index of its time in
        :meth:`observe`'s list).
    tolerance
        Relative slowdown above which the slowest replica is the straggler
        (0.10: 10 %).
    recovery
        Relative slowdown at or below which the straggler counts as
        recovered; default `tolerance`.
    window
        Iterations whose median decides.
    min_samples
        Iterations measured before the first decision and after each
        switch; default `window`.
    min_duration
        Iterations, out of the last ``min_duration + 3``, in which the
        straggler must be beyond the threshold (slower than the others'
        median of that same iteration by more than `tolerance` to be
        followed; within `recovery` of the reference to count as recovered).
        A window median alone flaps on noise and on periodic hiccups (a 3x
        step every other iteration); this asks for a slowdown that lasts.
    min_gain
        Following must save at least this fraction of the followers'
        predicted energy at the straggler's pace (the plan for the deadline
        against the base plan waiting for it); else the base plan is kept.
    tailored_plans
        Follow with the plan solved for the deadline itself
        (``frontier.plan_for(deadline, tailored=True)``) instead of the
        frontier's plans around it fitted to it (``plan_for``'s default).
    """

    def __init__(
        self,
        frontier: Frontier,
        base: Plan,
        *,
        replica: int = 0,
        tolerance: float = 0.10,
        recovery: Optional[float] = None,
        window: int = 5,
        min_samples: Optional[int] = None,
        min_duration: int = 7,
        min_gain: float = 0.01,
        tailored_plans: bool = False,
    ) -> None:
        from ._options import StragglerOptions

        # One place checks the numbers: the options record.
        options = StragglerOptions(
            tolerance=tolerance,
            recovery=recovery,
            window=window,
            min_samples=min_samples,
            min_duration=min_duration,
            min_gain=min_gain,
            tailored_plans=tailored_plans,
        )
        if not is_integer(replica) or replica < 0:
            raise ValueError(f"replica must be a data-parallel rank >= 0, not {replica!r}")
        self.frontier = frontier
        self.base = base
        self.replica = replica
        self.tolerance = float(options.tolerance)
        self.recovery = options.recovery_fraction
        self.window = int(options.window)
        self.min_samples = options.samples
        self.min_duration = int(options.min_duration)
        self.min_gain = float(options.min_gain)
        self.tailored_plans = options.tailored_plans
        self._evidence = self.min_duration + 3  # iterations the duration is counted over
        self.decisions: deque[StragglerDecision] = deque(maxlen=1000)
        self._replicas = 0
        self.reset()

    # -- state --------------------------------------------------------------

    def reset(self) -> None:
        """Forget every sample and return to the base plan (the workload changed)."""
        self.plan = self.base
        self.straggler: Optional[int] = None  #: replica followed now, if any
        self.reference_s = math.nan  #: the others' median time when following began
        self.deadline_s: Optional[float] = None  #: the deadline followed now
        self._history: deque[tuple[float, ...]] = deque(maxlen=max(self.window, self._evidence))
        self._since = 0  # samples since the last switch or reset
        # While following: each follower's median on its current plan, first measured.
        self._plan_reference: Optional[dict[int, float]] = None

    def state(self) -> dict[str, Any]:
        """What a resumed run needs to go on as this one would (plain JSON data)."""
        return {
            "replicas": self._replicas,
            "straggler": self.straggler,
            "reference_s": None if math.isnan(self.reference_s) else self.reference_s,
            "deadline_s": self.deadline_s,
            "history": [list(row) for row in self._history],
            "since": self._since,
            "plan_reference": (
                None
                if self._plan_reference is None
                else [[r, t] for r, t in sorted(self._plan_reference.items())]
            ),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from :meth:`state` (checked: a malformed one raises ValueError, changing nothing)."""
        try:
            replicas = int(state["replicas"])
            straggler = None if state["straggler"] is None else int(state["straggler"])
            reference = state["reference_s"]
            reference_s = math.nan if reference is None else float(reference)
            deadline = state["deadline_s"]
            deadline_s = None if deadline is None else float(deadline)
            history = [tuple(float(t) for t in row) for row in state["history"]]
            since = int(state["since"])
            pairs = state["plan_reference"]
            plan_reference = None if pairs is None else {int(r): float(t) for r, t in pairs}
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"the straggler state is malformed ({error})") from None
        if any(len(row) != replicas for row in history) or (
            straggler is not None and (not 0 <= straggler < replicas or deadline_s is None)
        ):
            raise ValueError("the straggler state is inconsistent (replicas, straggler, deadline)")
        self.reset()
        self._replicas = replicas
        self.straggler, self.reference_s, self.deadline_s = straggler, reference_s, deadline_s
        self._history.extend(history)
        self._since = since
        self._plan_reference = plan_reference
        if straggler is not None and straggler != self.replica:
            assert deadline_s is not None
            self.plan = self._plan_for(deadline_s)

    def _plan_for(self, deadline_s: float) -> Plan:
        """The plan followers run for a deadline: the frontier's plans nearest it fitted to it
        (the cheapest), or a plan solved for it (tailored)."""
        return self.frontier.plan_for(deadline_s, tailored=self.tailored_plans)

    @property
    def following(self) -> bool:
        """Whether a straggler is being followed (by the other replicas)."""
        return self.straggler is not None

    @property
    def on_base(self) -> bool:
        return self.plan is self.base

    # -- one iteration ----------------------------------------------------------

    def observe(self, iteration: int, times_s: Sequence[float]) -> Optional[PlanSwitch]:
        """Take one iteration's time of every replica; return this replica's switch, if any.

        Parameters
        ----------
        iteration
            The iteration measured.
        times_s
            Each replica's iteration time this iteration (seconds), indexed by
            data-parallel rank. A missing time (NaN, 0) skips the iteration.
        """
        times = tuple(float(t) for t in times_s)
        if len(times) != self._replicas:
            self._replicas = len(times)
            self.reset()
        if len(times) < 2 or self.replica >= len(times):
            return self._decide(iteration, "skipped")
        if not all(math.isfinite(t) and t > 0 for t in times):
            return self._decide(iteration, "skipped")
        self._history.append(times)
        self._since += 1
        if self._since < self.min_samples:
            return self._decide(iteration, "collecting")
        if self.straggler is None:
            return self._start(iteration)
        return self._follow(iteration)

    def _column(self, replica: int, last: Optional[int] = None) -> list[float]:
        rows = list(self._history)[-(self.window if last is None else last) :]
        return [row[replica] for row in rows]

    def _lasting(self, beyond: Callable[[tuple[float, ...]], bool]) -> tuple[int, int]:
        """In how many of the last ``min_duration + 3`` iterations `beyond` holds, of how many."""
        rows = list(self._history)[-self._evidence :]
        return sum(1 for row in rows if beyond(row)), len(rows)

    def _slower_than_others(self, straggler: int) -> Callable[[tuple[float, ...]], bool]:
        def beyond(row: tuple[float, ...]) -> bool:
            others = [t for r, t in enumerate(row) if r != straggler]
            return row[straggler] > statistics.median(others) * (1 + self.tolerance) + _EPS

        return beyond

    def _start(self, iteration: int) -> Optional[PlanSwitch]:
        medians = [statistics.median(self._column(r)) for r in range(self._replicas)]
        straggler = max(range(self._replicas), key=lambda r: (medians[r], -r))
        others = [m for r, m in enumerate(medians) if r != straggler]
        # "The others": the other replica, or the others' median (robust to one fast outlier).
        reference = others[0] if len(others) == 1 else statistics.median(others)
        slowdown = medians[straggler] / reference
        numbers = (straggler, medians[straggler], reference, slowdown)
        if slowdown <= 1 + self.tolerance + _EPS:
            return self._decide(iteration, "none", numbers)
        lasting, of = self._lasting(self._slower_than_others(straggler))
        if lasting < self.min_duration:
            why = f"duration: slower in {lasting} of {of} iterations, min_duration {self.min_duration}"
            return self._decide(iteration, "none", numbers, reason=why)
        deadline = self.base.iteration_time_s * slowdown
        gain = self._gain(deadline)
        if gain < self.min_gain:
            why = (
                f"gain: following saves {gain:.1%} at {slowdown:.3f}x, min_gain {self.min_gain:.1%}"
            )
            return self._decide(iteration, "none", numbers, reason=why)
        self.straggler = straggler
        self.reference_s = reference
        return self._retarget(iteration, slowdown, numbers, "follow", "straggler")

    def _gain(self, deadline_s: float) -> float:
        """The fraction of energy following saves: the plan for the deadline against the base
        plan, both waiting (blocking power) until the deadline.

        Always the frontier's own plan, neither fitted to the deadline nor tailored: this
        runs at every iteration a lasting straggler is weighed, where even fitting
        (milliseconds; a tailored search takes up to seconds) would slow training, and either
        only saves more, so the decisions stay the frontier's."""
        plan = self.frontier.plan_for(deadline_s, reclaim=False)
        followed = plan.energy_at(max(deadline_s, plan.iteration_time_s))
        waiting = self.base.energy_at(max(deadline_s, self.base.iteration_time_s))
        return 1 - followed / waiting

    def _follow(self, iteration: int) -> Optional[PlanSwitch]:
        straggler = self.straggler
        assert straggler is not None
        assert self.deadline_s is not None
        recent = min(self._since, self.window)
        followers = {
            r: statistics.median(self._column(r, recent))
            for r in range(self._replicas)
            if r != straggler
        }
        if self._plan_reference is None:
            # The first decision on this plan: what the followers take on it. Their times
            # relative to these from now on are what slows (or speeds) every replica alike.
            self._plan_reference = dict(followers)
        drift = statistics.median(followers[r] / self._plan_reference[r] for r in followers)
        if abs(drift - 1) <= self.tolerance:
            # Within the tolerance a drift is noise in medians of few samples; carried into
            # the reference at every retarget it would walk away from the truth.
            drift = 1.0
        reference = self.reference_s * drift
        median_s = statistics.median(self._column(straggler))
        slowdown = median_s / reference
        numbers = (straggler, median_s, reference, slowdown)
        if slowdown <= 1 + self.recovery + _EPS:
            bound = reference * (1 + self.recovery) + _EPS
            lasting, of = self._lasting(lambda row: row[straggler] <= bound)
            if lasting >= self.min_duration:
                return self._back_to_base(iteration, numbers, "recovered")
            why = (
                f"duration: back in {lasting} of {of} iterations, min_duration {self.min_duration}"
            )
            return self._decide(iteration, "hold", numbers, reason=why)
        straggler_now = statistics.median(self._column(straggler, recent))
        if max(followers.values()) > straggler_now * (1 + self.tolerance) + _EPS:
            return self._back_to_base(iteration, numbers, "follower slowest")
        deadline = self.base.iteration_time_s * slowdown
        if abs(deadline - self.deadline_s) <= self.tolerance * self.deadline_s + _EPS:
            return self._decide(iteration, "hold", numbers)
        # A changed slowdown moves the deadline only when it lasts, too.
        followed = self.deadline_s / self.base.iteration_time_s
        sign = 1.0 if slowdown > followed else -1.0

        def moved(row: tuple[float, ...]) -> bool:
            change = row[straggler] / reference - followed
            return sign * change > self.tolerance * followed + _EPS

        lasting, of = self._lasting(moved)
        if lasting < self.min_duration:
            why = f"duration: changed in {lasting} of {of} iterations, min_duration {self.min_duration}"
            return self._decide(iteration, "hold", numbers, reason=why)
        self.reference_s = reference  # the drift so far belongs to the reference
        return self._retarget(iteration, slowdown, numbers, "retarget", "straggler changed")

    def _retarget(
        self,
        iteration: int,
        slowdown: float,
        numbers: tuple[int, float, float, float],
        action: str,
        reason: str,
    ) -> Optional[PlanSwitch]:
        deadline = self.base.iteration_time_s * slowdown
        self.deadline_s = deadline
        self._since = 0  # dwell: the next decision waits for fresh samples
        self._plan_reference = None
        plan = self.base if self.replica == numbers[0] else self._plan_for(deadline)
        return self._decide(iteration, action, numbers, plan=plan, reason=reason)

    def _back_to_base(
        self, iteration: int, numbers: tuple[int, float, float, float], reason: str
    ) -> Optional[PlanSwitch]:
        deadline = self.base.iteration_time_s
        switch = self._decide(
            iteration, "recover", numbers, plan=self.base, reason=reason, deadline_s=deadline
        )
        # The followers' samples are not base-plan times: start the window afresh.
        self.straggler = None
        self.deadline_s = None
        self.reference_s = math.nan
        self._plan_reference = None
        self._history.clear()
        self._since = 0
        return switch

    def _decide(
        self,
        iteration: int,
        action: str,
        numbers: Optional[tuple[int, float, float, float]] = None,
        *,
        plan: Optional[Plan] = None,
        reason: str = "",
        deadline_s: Optional[float] = None,
    ) -> Optional[PlanSwitch]:
        before = self.plan
        if plan is not None:
            self.plan = plan
        straggler, straggler_s, reference_s, slowdown = (
            numbers if numbers is not None else (None, math.nan, math.nan, math.nan)
        )
        deadline = deadline_s if deadline_s is not None else self.deadline_s
        samples = min(len(self._history), self.window)
        self.decisions.append(
            StragglerDecision(
                iteration=iteration,
                action=action,
                straggler=straggler,
                straggler_s=straggler_s,
                reference_s=reference_s,
                slowdown=slowdown,
                deadline_s=math.nan if deadline is None or action == "recover" else deadline,
                plan_time_s=self.plan.iteration_time_s,
                samples=samples,
                reason=reason,
            )
        )
        if self.plan is before or straggler is None:
            return None
        return PlanSwitch(
            iteration=iteration,
            from_time_s=before.iteration_time_s,
            to_time_s=self.plan.iteration_time_s,
            straggler=straggler,
            straggler_s=straggler_s,
            reference_s=reference_s,
            slowdown=slowdown,
            deadline_s=self.base.iteration_time_s if deadline is None else deadline,
            reason=reason,
            samples=samples,
        )

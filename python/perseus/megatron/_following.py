"""Run mode: which plan an iteration runs, and the order and clocks it expects.

A job may change its workload: a batch-size ramp-up changes the number of
microbatches, a curriculum the sequence length. ``attach`` takes one
frontier, or frontiers keyed by microbatch count (``{4: f4, 8: f8}``), or,
as an explicit opt-in to variable sequence lengths, keyed by
``(microbatches, seq_length)``. Every iteration looks its frontier up; an
iteration with no frontier runs with clocks unlocked (one warning per
unknown workload) and the next known one resumes.

Before an iteration runs, its plan is checked against what Megatron runs
(schedule, pipeline size, chunks, interleaving group), and every computation
against the plan's order for this GPU, before its clock is requested.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any, Optional, Union

from .._validate import is_integer
from ..frontier import Frontier
from ..plan import Plan
from ..schedule import pipeline_order
from ._errors import ScheduleMismatchError
from ._options import StragglerOptions
from ._patching import OutputMap
from ._stragglers import StragglerPolicy

__all__ = ["Iteration", "PlanBook", "PlanWarning", "WorkloadKey", "normalize_frontiers"]

logger = logging.getLogger("perseus.megatron")

#: The perseus schedule each megatron schedule function runs.
PLAN_SCHEDULE = {"no-pipelining": "1f1b", "1f1b": "1f1b", "interleaved": "interleaved-1f1b"}
LABEL = {
    "no-pipelining": "no pipelining (forward_backward_no_pipelining)",
    "1f1b": "1F1B (forward_backward_pipelining_without_interleaving)",
    "interleaved": "interleaved 1F1B (forward_backward_pipelining_with_interleaving)",
}

#: A frontier's key: microbatches, or (microbatches, sequence length) for the per-length opt-in.
WorkloadKey = Union[int, tuple[int, int]]


class PlanWarning(RuntimeWarning):
    """perseus runs an iteration without a plan (clocks unlocked) and says why."""


def normalize_frontiers(
    frontier: Union[Frontier, Mapping[Any, Frontier], None],
) -> tuple[dict[WorkloadKey, Frontier], bool]:
    """``{key: frontier}`` and whether keys carry sequence lengths; checks every key.

    Raises
    ------
    ValueError
        A key that is not a microbatch count or ``(microbatches, seq_length)``,
        a value that is not a Frontier, a frontier made for another count, or
        keys of both kinds.
    """
    if frontier is None:
        return {}, False
    if isinstance(frontier, Frontier):
        return {int(frontier.spec.microbatches): frontier}, False
    if not isinstance(frontier, Mapping) or not frontier:
        raise ValueError(
            "frontier must be a perseus.Frontier, or a non-empty mapping of microbatch counts (or "
            f"(microbatches, seq_length) pairs) to frontiers, not {type(frontier).__name__}"
        )
    book: dict[WorkloadKey, Frontier] = {}
    kinds = set()
    for key, value in frontier.items():
        if not isinstance(value, Frontier):
            raise ValueError(
                f"frontier[{key!r}] is a {type(value).__name__}, not a perseus.Frontier"
            )
        normalized: WorkloadKey
        if is_integer(key) and key > 0:
            microbatches, normalized = key, int(key)
            kinds.add("microbatches")
        elif isinstance(key, tuple) and len(key) == 2 and all(is_integer(k) and k > 0 for k in key):
            microbatches, normalized = key[0], (int(key[0]), int(key[1]))
            kinds.add("length")
        else:
            raise ValueError(
                f"frontier key {key!r} is neither a microbatch count (int > 0) nor a "
                "(microbatches, seq_length) pair"
            )
        if value.spec.microbatches != microbatches:
            raise ValueError(
                f"frontier[{key!r}] was made for {value.spec.microbatches} microbatches, not "
                f"{microbatches}"
            )
        book[normalized] = value
    if len(kinds) > 1:
        raise ValueError(
            "frontier keys mix microbatch counts and (microbatches, seq_length) pairs; use one kind"
        )
    return book, kinds == {"length"}


class Iteration:
    """State of one forward-backward call on this rank."""

    def __init__(
        self,
        number: int,
        kind: str,
        pp_size: int,
        pp_rank: int,
        chunks: int,
        microbatches: int,
        seq_length: Optional[int],
    ) -> None:
        self.number = number
        self.kind = kind
        self.pp_size = pp_size
        self.pp_rank = pp_rank
        self.chunks = chunks
        self.microbatches = microbatches
        self.seq_length = seq_length
        self.total = 2 * chunks * microbatches
        self.index = 0
        self.outputs = OutputMap()
        self.expected: Optional[list[tuple[str, int, int]]] = None
        self.frequencies: Optional[list[int]] = None
        self.key: Optional[WorkloadKey] = None  # the workload's frontier key, if it has one
        self.plan: Optional[Plan] = None
        self.plan_time_s = float("nan")  # predicted: the plan's (all-fastest: the baseline's)
        self.plan_energy_j = float("nan")
        self.phase = "unlocked"  # "plan", "following", "fastest", "unlocked"
        self.start: Any = None
        self.end: Any = None
        self.following = True  # False once perseus let go in this iteration
        # Timed computations for the stale-plan check: (index in the order, start, end marks).
        self.spans: list[tuple[int, Any, Any]] = []
        self.span_start: Any = None

    @property
    def done(self) -> bool:
        return self.index >= self.total


class PlanBook:
    """The frontiers of an attachment, their base plans, stragglers, and per-rank orders.

    Parameters
    ----------
    frontiers
        From :func:`normalize_frontiers`.
    by_length
        Whether keys are ``(microbatches, seq_length)``.
    plan
        A base plan instead of ``frontier.fastest`` (one frontier, or none).
    stragglers
        Straggler settings (a policy per frontier, made when first needed).
    unknown_workload
        ``"raise"``: a workload with no frontier stops the job
        (:class:`ScheduleMismatchError`); ``"unlocked"``: it runs with clocks
        unlocked, with one :class:`PlanWarning` per workload.
    """

    def __init__(
        self,
        frontiers: dict[WorkloadKey, Frontier],
        by_length: bool,
        plan: Optional[Plan],
        stragglers: StragglerOptions,
        unknown_workload: str = "raise",
    ) -> None:
        self.frontiers = frontiers
        self.unknown_workload = unknown_workload
        self.by_length = by_length
        self._plan = plan
        self._stragglers = stragglers
        self._policies: dict[WorkloadKey, StragglerPolicy] = {}
        self._orders: dict[tuple[int, int], tuple[list[tuple[str, int, int]], list[int]]] = {}
        self._warned: set[Any] = set()
        self.replica = 0
        self.last_key: Optional[WorkloadKey] = None
        self._seq_length: Optional[int] = None

    # -- frontiers and base plans -----------------------------------------------------

    @property
    def known(self) -> set[WorkloadKey]:
        """The workloads perseus has a plan for."""
        if self.frontiers:
            return set(self.frontiers)
        return {int(self._plan.spec.microbatches)} if self._plan is not None else set()

    def key_of(self, microbatches: int, seq_length: Optional[int]) -> WorkloadKey:
        if self.by_length:
            return (int(microbatches), int(seq_length or 0))
        return int(microbatches)

    def lookup(self, microbatches: int, seq_length: Optional[int]) -> Optional[WorkloadKey]:
        """The key of this iteration's frontier; None (and one warning) if there is none.

        Raises :class:`ScheduleMismatchError` instead unless unknown workloads
        were opted in to (``unknown_workload="unlocked"``).
        """
        key = self.key_of(microbatches, seq_length)
        if key in self.known:
            return key
        known = ", ".join(str(k) for k in sorted(self.known, key=str))
        if self.unknown_workload == "raise":
            what = f"{microbatches} microbatches" + (
                f" of sequence length {seq_length}" if self.by_length else ""
            )
            raise ScheduleMismatchError(
                f"perseus has no frontier for {what} (it has: {known}); the job's microbatch "
                "count is global batch / (micro batch x data-parallel size), which changes when "
                "a job restarts on fewer nodes or its batch size changes. Make a frontier for it "
                "(perseus optimize -m <count>), or opt in to running such iterations with clocks "
                "unlocked: attach(..., unknown_workload='unlocked') or "
                "--perseus-unknown-workload unlocked"
            )
        if key not in self._warned:
            self._warned.add(key)
            what = (
                f"{microbatches} microbatches of sequence length {seq_length}"
                if self.by_length
                else f"{microbatches} microbatches"
            )
            message = (
                f"perseus has no frontier for {what} (it has: {known}); iterations with this "
                "workload run with clocks unlocked until a known one returns. Pass attach() a "
                "frontier for it, keyed by its microbatch count"
                + (" and sequence length" if self.by_length else "")
            )
            warnings.warn(message, PlanWarning, stacklevel=5)
            logger.warning(message)
        return None

    def base_plan(self, key: WorkloadKey) -> Plan:
        if self._plan is not None:
            return self._plan
        return self.frontiers[key].fastest

    def last_base_plan(self) -> Optional[Plan]:
        """The base plan of the last iteration's workload (before any, the first known one)."""
        key = self.last_key
        if key is None:
            known = sorted(self.known, key=str)
            if not known:
                return None
            key = known[0]
        return self.base_plan(key) if key in self.known else None

    @property
    def policies(self) -> dict[WorkloadKey, StragglerPolicy]:
        """The straggler policies made so far, by workload (a copy)."""
        return dict(self._policies)

    def policy(self, key: WorkloadKey) -> Optional[StragglerPolicy]:
        """The straggler policy of this workload (reset when the workload changed)."""
        if not self._stragglers.enabled or key not in self.frontiers:
            return None
        policy = self._policies.get(key)
        if policy is None:
            o = self._stragglers
            policy = StragglerPolicy(
                self.frontiers[key],
                self.base_plan(key),
                replica=self.replica,
                tolerance=o.tolerance,
                recovery=o.recovery,
                window=o.window,
                min_samples=o.min_samples,
                min_duration=o.min_duration,
                min_gain=o.min_gain,
                tailored_plans=o.tailored_plans,
            )
            self._policies[key] = policy
        return policy

    def switch_to(self, key: WorkloadKey) -> None:
        """This iteration runs workload `key`: a changed workload restarts its stragglers."""
        if key != self.last_key:
            policy = self._policies.get(key)
            if policy is not None:
                policy.reset()
            self.last_key = key

    # -- this iteration's plan -------------------------------------------------------

    def choose(self, it: Iteration, config: Any, phase: Optional[str]) -> list[str]:
        """Give `it` its plan, order and clocks; returns how the plan misfits (empty: fine).

        `it.key` is the workload's (set by :meth:`lookup`). `phase` is the A/B
        calibration's: ``"fastest"`` runs every computation at the
        frontier's highest clock, ``"plan"`` the base plan; otherwise the
        straggler policy's plan.
        """
        assert it.key is not None
        key = it.key
        base = self.base_plan(key)
        frontier = self.frontiers.get(key)
        uniform = None
        if phase == "fastest":
            plan = base
            uniform = (
                fastest_mhz(frontier) if frontier is not None else int(base.frequencies_mhz.max())
            )
        elif phase == "plan":
            plan = base
        else:
            policy = self.policy(key)
            plan = policy.plan if policy is not None else base
            phase = "following" if plan is not base else "plan"
        problems = self.problems(plan, it, config)
        if problems:
            return problems
        it.plan, it.phase = plan, phase
        predicted = frontier.baseline if phase == "fastest" and frontier is not None else plan
        it.plan_time_s, it.plan_energy_j = predicted.iteration_time_s, predicted.energy_j
        it.expected, it.frequencies = self.order(plan, it.pp_rank, uniform)
        return []

    def length_problem(self, it: Iteration) -> Optional[str]:
        """A sequence length that changes, unless frontiers are keyed by it."""
        if self.by_length or it.seq_length is None:
            return None
        if self._seq_length is None:
            self._seq_length = it.seq_length
        if it.seq_length == self._seq_length:
            return None
        return (
            f"the sequence length changed from {self._seq_length} to {it.seq_length}; plans are "
            "made for one length. Pass attach() frontiers keyed by (microbatches, seq_length) to "
            "opt in to variable lengths"
        )

    # -- what the plan was made for ---------------------------------------------------

    @staticmethod
    def problems(plan: Plan, it: Iteration, config: Any) -> list[str]:
        """How the plan differs from what Megatron runs (microbatches are the key's business)."""
        spec = plan.spec
        problems = []
        wanted = PLAN_SCHEDULE[it.kind]
        if spec.schedule != wanted:
            problems.append(
                f"schedule: the plan's is {spec.schedule!r}, Megatron runs {LABEL[it.kind]}"
            )
        if spec.num_gpus != it.pp_size:
            problems.append(
                f"pipeline size: the plan's is {spec.num_gpus}, Megatron's is {it.pp_size}"
            )
        if spec.virtual_stages != it.chunks:
            problems.append(
                f"virtual stages per GPU: the plan's is {spec.virtual_stages}, Megatron's model has "
                f"{it.chunks} chunk(s)"
            )
        if spec.microbatches != it.microbatches:
            problems.append(
                f"microbatches: the plan's is {spec.microbatches}, this iteration runs {it.microbatches}"
            )
        if it.kind == "interleaved":
            group = getattr(config, "microbatch_group_size_per_vp_stage", None)
            if group is not None and group != it.pp_size:
                problems.append(
                    f"microbatch_group_size_per_vp_stage is {group}; perseus's interleaved order "
                    f"groups as many microbatches as pipeline stages ({it.pp_size})"
                )
        return problems

    def order(
        self, plan: Plan, pp_rank: int, uniform_mhz: Optional[int] = None
    ) -> tuple[list[tuple[str, int, int]], list[int]]:
        """This GPU's computations in order and their clocks (all `uniform_mhz` if given)."""
        key = (id(plan), pp_rank)
        cached = self._orders.get(key)
        if cached is None:
            spec = plan.spec
            order = pipeline_order(
                spec.schedule, spec.num_gpus, spec.microbatches, spec.virtual_stages
            )[pp_rank]
            frequencies = [
                plan.frequency(gpu=pp_rank, instruction=i, microbatch=mb, chunk=chunk)
                for i, chunk, mb in order
            ]
            cached = (order, frequencies)
            if len(self._orders) >= 64:
                self._orders.clear()
            self._orders[key] = cached
        if uniform_mhz is not None:
            return cached[0], [uniform_mhz] * len(cached[0])
        return cached


def fastest_mhz(frontier: Frontier) -> int:
    """The clock of the all-fastest plan: the highest any computation of the frontier runs at."""
    return int(max(int(plan.frequencies_mhz.max()) for plan in frontier))

"""Clock changes that take time: replaying a plan under switch latency, and plans that plan for it.

A frequency switcher asks for a computation's clock when the GPU reaches it
(``set_on_stream``), but the GPU runs the new clock only some time later:
tens of milliseconds on Hopper, tens of microseconds on Blackwell
(``perseus.measure_switch_latency`` measures it). A forward pass may last
less than that, so a plan that changes the clock before every computation
can run much of each computation at its predecessor's clock.

The model (``switch_latency_s = L``):

- GPU ``g`` runs its computations in the schedule's order. Computation
  ``i`` starts once its GPU has finished the one before and its pipeline
  predecessors are done (as in the ordinary replay).
- Its clock is requested when the GPU reaches it in stream order, that is
  when the GPU finishes its previous computation (at 0 for the first of an
  iteration), and takes effect ``L`` seconds later. A request equal to the
  clock asked for before it is no change and costs nothing.
- Until then the GPU runs at the clock in effect. The iteration begins with
  every GPU at the clock of its last computation (the steady state of
  iteration after iteration).
- Work advances at rate ``1 / t_i(f)`` and draws ``e_i(f) / t_i(f)`` watts at
  clock ``f``, so a computation that runs partly at one clock and partly at
  another takes and costs its share of each. ``t_i(f)``, ``e_i(f)`` are the
  profile's measured rows of i's stage and instruction; a clock that was
  not measured for them (another computation's clock) is linearly
  interpolated between the neighbouring measured clocks, and clamped to
  the ends.
- Energy counts blocking power while a GPU waits, as the ordinary replay:
  ``E = sum e + P_block * (G * T - sum t)``.

With ``L = 0`` this is the ordinary replay, to the last bit: each
computation runs whole at its own clock and the sums are taken in the core's
order (the tests check it against the core's). The worker's own queueing (a change requested while the previous
one is still being made waits for it) is not modelled: each change takes
exactly ``L``.

Switch-aware plans (`switch_aware_plan`) start from the frontier's plans and
merge clock changes that do not pay for themselves: on each GPU, a
computation whose planned clock is within ``tolerance`` MHz below the clock
already requested keeps that faster clock instead (never a slower one, so
no computation gets slower than planned), cyclically: the iteration's first
computations follow its last one's clock. Frontier plans up to BASE_SLACK
times slower than the deadline (at most MAX_BASE_PLANS of them, always
including `Frontier.plan_for`'s), and the all-fastest plan, are each
tried with a ladder of tolerances, every candidate is replayed under the model, and the cheapest
over the deadline that meets it wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ._validate import is_real
from ._zeus_format import INSTRUCTIONS
from .errors import ProfileError
from .pipeline_spec import PipelineSpec
from .profile import Profile

if TYPE_CHECKING:
    from .frontier import Frontier
    from .plan import Plan

__all__ = ["LatencyReplay", "SwitchAwarePlan", "replay_with_switch_latency", "switch_aware_plan"]

# Merge tolerances tried for every frontier plan, in MHz below the clock
# already requested. 0 merges only equal clocks (which cost nothing anyway);
# the ladder roughly doubles up to the whole range of a modern GPU's SM clock,
# where everything on a GPU runs at its fastest planned clock.
MERGE_TOLERANCES_MHZ = (0, 15, 30, 60, 120, 240, 480, 960, 2000)
# Frontier plans tried as merge bases: those as fast as the deadline, and
# slower ones down to this factor of it (merging only speeds a plan up, and
# one much slower than the deadline would need merges that cost more than a
# faster frontier plan), ...
BASE_SLACK = 1.25
# ... at most this many, evenly spaced in time (replay is pure Python: about
# 0.3 ms per plan of 256 computations, times the ladder above; one switch-aware
# plan took 0.09 CPU s at 64 computations, 0.34 s at 256, 1.4 s at 1,024,
# bench/results/switch-aware-cost-2026-12-07.txt).
MAX_BASE_PLANS = 96


@dataclass(frozen=True)
class LatencyReplay:
    """A plan replayed with clock changes that take effect ``switch_latency_s`` late."""

    iteration_time_s: float
    energy_j: float  #: all GPUs over one iteration, blocking included
    switch_latency_s: float
    switches_per_iteration: int  #: clock changes requested, all GPUs together
    late_fraction: float  #: share of all computing time run at another clock than planned


def _latency_argument(value: object) -> float:
    if not is_real(value):
        raise TypeError(f"switch_latency_s must be a number of seconds, got {value!r}")
    latency = float(value)
    if not math.isfinite(latency) or latency < 0:
        raise ValueError(f"switch_latency_s must be a finite number of seconds >= 0, got {value!r}")
    return latency


class _Rows:
    """Measured time and energy of each (stage, instruction) at any clock, interpolated, and the
    pipeline's layout (each GPU's order, each computation's cross-stage predecessor).

    Replays and merges ask for the same few clocks hundreds of thousands of
    times, so each (stage, instruction, clock) is interpolated once and
    memoised (the same np.interp result, so replays are unchanged to the
    last bit), and the layout is read into plain lists once: numpy scalar
    calls in the inner loop cost 20x a dict lookup.
    """

    def __init__(self, profile: Profile, spec: PipelineSpec) -> None:
        self._table = {}
        self._clocks: dict[tuple[int, int], frozenset[int]] = {}
        self._at: dict[tuple[int, int, int], tuple[float, float]] = {}
        for stage in range(spec.num_stages):
            for k, instruction in enumerate(INSTRUCTIONS):
                rows = profile.measured(stage, instruction)
                order = np.argsort(rows.frequency_mhz)
                frequency = np.asarray(rows.frequency_mhz, dtype=np.float64)[order]
                self._table[(stage, k)] = (
                    frequency,
                    np.asarray(rows.time_s, dtype=np.float64)[order],
                    np.asarray(rows.energy_j, dtype=np.float64)[order],
                )
                self._clocks[(stage, k)] = frozenset(int(f) for f in frequency.tolist())
        pipeline = spec.pipeline()
        self.stage: list[int] = [int(s) for s in pipeline.stage]
        self.instruction: list[int] = [int(k) for k in pipeline.instruction]
        self.num_gpus = spec.num_gpus
        self.orders: list[list[int]] = [
            [int(i) for i in pipeline.order(g)] for g in range(spec.num_gpus)
        ]
        self.predecessor: list[int] = _predecessors(spec)

    def measured(self, stage: int, instruction: int, mhz: int) -> bool:
        return mhz in self._clocks[(stage, instruction)]

    def at(self, stage: int, instruction: int, mhz: int) -> tuple[float, float]:
        key = (stage, instruction, mhz)
        found = self._at.get(key)
        if found is None:
            f, t, e = self._table[(stage, instruction)]
            found = (float(np.interp(mhz, f, t)), float(np.interp(mhz, f, e)))
            self._at[key] = found
        return found


def _predecessors(spec: PipelineSpec) -> list[int]:
    """Each computation's one data dependency (the DAG's other edges are its GPU's order),
    or -1: a forward's on the stage before, a backward's on the stage after, the last
    stage's backward on its own forward."""
    pipeline = spec.pipeline()
    last = spec.num_stages - 1
    preds: list[int] = []
    for i in range(len(pipeline)):
        stage, m, k = (
            int(pipeline.stage[i]),
            int(pipeline.microbatch[i]),
            int(pipeline.instruction[i]),
        )
        if k == 0:
            preds.append(pipeline.id_of(stage - 1, m, 0) if stage > 0 else -1)
        elif stage == last:
            preds.append(pipeline.id_of(stage, m, 0))
        else:
            preds.append(pipeline.id_of(stage + 1, m, 1))
    return preds


def _replay(rows: _Rows, mhz: np.ndarray, latency_s: float, blocking_w: float) -> LatencyReplay:
    stage, instruction, pred, orders = rows.stage, rows.instruction, rows.predecessor, rows.orders
    clock_of = [int(c) for c in mhz.tolist()]
    count = len(clock_of)
    finish = [0.0] * count
    done = [False] * count
    # Per computation: how long it ran and what it spent, summed at the end
    # in the core's order (computation id), so that at L = 0 this gives the
    # core's replay to the last bit.
    ran_s = [0.0] * count
    spent_j = [0.0] * count
    late_s = 0.0
    switches = 0
    # Per GPU: effect times and clocks, in order (effect times never decrease).
    events: list[list[tuple[float, int]]] = []
    requested: list[int] = []
    for order in orders:
        start_clock = clock_of[order[-1]] if order else 0
        events.append([(-math.inf, start_clock)])
        requested.append(start_clock)
    position = [0] * rows.num_gpus
    # Per GPU: the event in effect when its last computation finished. A GPU's
    # computations start no earlier than that, so the search for the clock in
    # effect resumes there rather than from the timeline's start.
    in_effect = [0] * rows.num_gpus
    remaining = count
    while remaining:
        progressed = False
        for g, order in enumerate(orders):
            timeline = events[g]
            while position[g] < len(order):
                i = order[position[g]]
                p = pred[i]
                if p >= 0 and not done[p]:
                    break
                previous_end = finish[order[position[g] - 1]] if position[g] else 0.0
                target = clock_of[i]
                if target != requested[g]:
                    requested[g] = target
                    switches += 1
                    timeline.append((previous_end + latency_s, target))
                start = max(previous_end, finish[p]) if p >= 0 else previous_end
                t, work, spent, ran = start, 1.0, 0.0, 0.0
                s, k = stage[i], instruction[i]
                e = in_effect[g]
                # Rounding can end a computation an ulp before the event it reached
                # took effect; step back so the search gives what one from the
                # timeline's start would.
                while e > 0 and timeline[e][0] > t:
                    e -= 1
                while e + 1 < len(timeline) and timeline[e + 1][0] <= t:
                    e += 1
                while True:
                    clock = timeline[e][1]
                    full_s, full_j = rows.at(s, k, clock)
                    next_change = timeline[e + 1][0] if e + 1 < len(timeline) else math.inf
                    if t + work * full_s <= next_change:
                        # The rest of the work at this clock. With no change
                        # during it (always at L = 0): work = 1, ran = the
                        # measured time, finish = start + it, as in the core.
                        spent += work * full_j
                        ran += work * full_s
                        if clock != target:
                            late_s += work * full_s
                        t += work * full_s
                        break
                    share = (next_change - t) / full_s
                    spent += share * full_j
                    ran += next_change - t
                    if clock != target:
                        late_s += next_change - t
                    work -= share
                    t = next_change
                    e += 1
                in_effect[g] = e
                finish[i] = t
                done[i] = True
                ran_s[i] = ran
                spent_j[i] = spent
                position[g] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the schedules the core builds never deadlock
            raise ProfileError("the schedule deadlocks")
    iteration_s = max(finish) if count else 0.0
    busy_s = energy_j = 0.0
    for i in range(count):  # one by one in id order, as the core (not np.sum's pairs)
        busy_s += ran_s[i]
        energy_j += spent_j[i]
    total_j = energy_j + blocking_w * (float(rows.num_gpus) * iteration_s - busy_s)
    return LatencyReplay(
        iteration_time_s=float(iteration_s),
        energy_j=float(total_j),
        switch_latency_s=latency_s,
        switches_per_iteration=switches,
        late_fraction=float(late_s / busy_s) if busy_s > 0 else 0.0,
    )


def _frequencies(spec: PipelineSpec, frequencies_mhz: Any) -> np.ndarray:
    mhz = np.asarray(frequencies_mhz)
    if mhz.shape != (spec.num_computations,):
        raise ValueError(
            f"a plan for this pipeline needs {spec.num_computations} frequencies, got shape {mhz.shape}"
        )
    return mhz.astype(np.int64)


def replay_with_switch_latency(
    profile: Profile, spec: PipelineSpec, frequencies_mhz: Any, switch_latency_s: float
) -> LatencyReplay:
    """Replay a plan (MHz per computation, core id order) under the switch-latency model.

    See the module's notes for the model. Raises TypeError/ValueError for a
    bad ``switch_latency_s`` (named) or a plan of the wrong length.
    """
    latency = _latency_argument(switch_latency_s)
    if profile.num_stages != spec.num_stages:
        raise ProfileError(
            f"the profile has {profile.num_stages} stages; the plan's pipeline has {spec.num_stages}"
        )
    rows = _Rows(profile, spec)
    return _replay(rows, _frequencies(spec, frequencies_mhz), latency, profile.blocking_power_w)


def merge_switches(rows: _Rows, frequencies_mhz: np.ndarray, tolerance_mhz: int) -> np.ndarray:
    """The plan with small clock drops merged into the clock already requested (see module notes).

    A computation keeps the requested clock only where that clock was
    measured for it (a merged plan is still made of measured rows) and runs
    it no slower than its planned clock (measured rows are not always
    faster at a higher clock).
    """
    out = [int(c) for c in np.asarray(frequencies_mhz, dtype=np.int64).tolist()]
    stage, instruction = rows.stage, rows.instruction
    for order in rows.orders:
        if not order:
            continue
        # Two passes: iterations repeat, so the first computations follow the
        # last one's clock (after one pass at the largest tolerance a GPU's
        # clocks only rise along its order, and the second pass then keeps it
        # at one clock all iteration: no change left to land late).
        current = out[order[0]]
        for position in range(1, 2 * len(order)):
            i = order[position % len(order)]
            planned = out[i]
            s, k = stage[i], instruction[i]
            if (
                current - tolerance_mhz <= planned < current
                and rows.measured(s, k, current)
                # A higher clock is not always faster in measured rows.
                and rows.at(s, k, current)[0] <= rows.at(s, k, planned)[0]
            ):
                out[i] = current
            else:
                current = planned
    return np.asarray(out, dtype=np.int64)


@dataclass(frozen=True)
class SwitchAwarePlan:
    """The cheapest plan meeting a deadline under the switch-latency model."""

    plan: Plan  #: the chosen plan (replayed without latency, as every Plan)
    replay: LatencyReplay  #: the same plan replayed with the latency
    deadline_s: float
    energy_at_deadline_j: float  #: under the latency model, blocking until the deadline
    tolerance_mhz: int  #: the merge tolerance that produced it (0: nothing merged)
    frontier_index: int  #: the frontier plan it was merged from; -1: the all-fastest plan
    unmerged_switches_per_iteration: int  #: of the frontier plan it was merged from
    #: its energy without latency minus that plan's, both over the longer of their times
    merge_energy_cost_j: float
    #: it was merged from frontier plan `frontier_index` fitted to the deadline (what
    #: Frontier.plan_for gives without latency), not from that plan itself
    fitted: bool = False


def _base_indices(frontier: Frontier, deadline_s: float) -> list[int]:
    """The frontier plans to merge from (see BASE_SLACK, MAX_BASE_PLANS); plan_for's always."""
    times = np.asarray(frontier.iteration_times_s, dtype=np.float64)
    within = [int(i) for i in np.nonzero(times <= deadline_s * BASE_SLACK)[0]]
    if len(within) > MAX_BASE_PLANS:
        picks = np.linspace(0, len(within) - 1, MAX_BASE_PLANS).round().astype(int)
        chosen = {within[int(k)] for k in picks}
        meeting = [i for i in within if times[i] <= deadline_s]
        if meeting:  # the frontier's own answer without latency: its slowest plan meeting it
            chosen.add(max(meeting, key=lambda i: times[i]))
        within = sorted(chosen)
    return within


def switch_aware_plan(
    frontier: Frontier,
    deadline_s: float,
    switch_latency_s: float,
    profile: Optional[Profile] = None,
) -> SwitchAwarePlan:
    """The cheapest plan that meets `deadline_s` when every clock change takes `switch_latency_s`.

    The candidates are frontier plans near the deadline, the all-fastest
    plan and what `Frontier.plan_for` gives for the deadline without latency
    (the frontier plans nearest it fitted to it), each also with its clock
    changes merged, so that at zero latency this costs no more than
    plan_for's plan. ``profile`` defaults to the frontier's own (the fitted
    candidate needs it). Raises ValueError if no candidate meets the
    deadline under the model (the message names the fastest replayed
    time), and TypeError/ValueError for bad arguments.
    """
    from .plan import _all_fastest_frequencies, _seconds, replayed_plan

    latency = _latency_argument(switch_latency_s)
    deadline = _seconds(deadline_s, "deadline_s")
    source = profile if profile is not None else frontier.profile
    if source is None:
        raise ValueError(
            "switch-aware planning needs the profile (the frontier was loaded without one)"
        )
    spec = frontier.spec
    rows = _Rows(source, spec)
    blocking_w = source.blocking_power_w
    best: Optional[tuple[float, np.ndarray, LatencyReplay, int, int, Plan]] = None
    fastest_s = math.inf
    # The all-fastest plan (index -1) too: under a long latency, a plan with
    # few clock changes may be the only one that meets a tight deadline.
    bases = [(i, frontier[i]) for i in _base_indices(frontier, deadline)]
    bases.append((-1, replayed_plan(spec, _all_fastest_frequencies(source, spec), source)))
    fitted = _fitted_base(frontier, deadline, profile)
    if fitted is not None:
        bases.append(fitted)
    for index, base_plan in bases:
        base_frequencies = base_plan.frequencies_mhz
        base_mhz = np.asarray(base_frequencies, dtype=np.int64)
        base_replay = _replay(rows, base_mhz, latency, blocking_w)
        seen: set[bytes] = set()
        for tolerance in MERGE_TOLERANCES_MHZ:
            mhz = merge_switches(rows, base_mhz, tolerance)
            key = mhz.tobytes()
            if key in seen:
                continue
            seen.add(key)
            result = base_replay if tolerance == 0 else _replay(rows, mhz, latency, blocking_w)
            fastest_s = min(fastest_s, result.iteration_time_s)
            if result.iteration_time_s > deadline:
                continue
            # Compared without the waiting every plan does up to the deadline
            # alike (the same order, and finite at deadline_s=inf).
            effective = result.energy_j - blocking_w * spec.num_gpus * result.iteration_time_s
            if best is None or effective < best[0]:
                best = (effective, mhz, result, tolerance, index, base_plan)
    if best is None:
        raise ValueError(
            f"no plan meets a deadline of {deadline:.6g} s with a switch latency of {latency:.6g} s: "
            f"the fastest takes {fastest_s:.6g} s under that latency"
        )
    _, mhz, result, tolerance, index, base = best
    at_deadline = result.energy_j + blocking_w * spec.num_gpus * (
        deadline - result.iteration_time_s
    )
    plan = replayed_plan(spec, mhz, source)
    unmerged = _replay(rows, np.asarray(base.frequencies_mhz, dtype=np.int64), latency, blocking_w)
    # Both without latency, over the longer of their two iteration times.
    span_s = max(plan.iteration_time_s, base.iteration_time_s)
    merge_cost = plan.energy_at(span_s) - base.energy_at(span_s)
    return SwitchAwarePlan(
        plan=plan,
        replay=result,
        deadline_s=deadline,
        energy_at_deadline_j=float(at_deadline),
        tolerance_mhz=tolerance,
        frontier_index=index,
        unmerged_switches_per_iteration=unmerged.switches_per_iteration,
        merge_energy_cost_j=float(merge_cost),
        fitted=fitted is not None and base is fitted[1],
    )


def _fitted_base(
    frontier: Frontier, deadline_s: float, profile: Optional[Profile]
) -> Optional[tuple[int, Plan]]:
    """(the frontier plan it was made from, the plan) of what plan_for gives without latency,
    when that is not a frontier plan: a base like the frontier's, so that at zero latency the
    switch-aware plan costs no more than plan_for's. None with another profile than the
    frontier's (the fit is made on the frontier's own)."""
    from ._tailored import fitted_plan

    if profile is not None and profile is not frontier.profile:
        return None
    index = frontier._slowest_meeting(deadline_s)
    if index < 0:
        return None
    plan, origin = fitted_plan(frontier, index, deadline_s)
    return None if origin is None else (origin, plan)

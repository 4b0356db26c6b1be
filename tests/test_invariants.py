"""Properties every frontier must have, on random profiles and pipelines.

One solve per example checks every property, so the suite spends its time on
variety, not on solving the same pipeline five times.
"""

from __future__ import annotations

import numpy as np
import perseus
import pytest
from hypothesis import given
from hypothesis import strategies as st
from perseus import Profile

F, B = "forward", "backward"
USELESS_MHZ = 2100  # a row no plan may use: slower, and costlier than any blocking power explains
MAX_BLOCKING_W = 150.0


@st.composite
def option_rows(draw, stage, instruction, count, force_range, clock_step_mhz):
    """Measured rows of one (stage, instruction); times in 0.1 ms steps.

    With `force_range`, the first two options are at least 1.5 ms apart, so
    some computation has two durations at a 1 ms unit and the solve can run.
    """
    time_us = draw(st.integers(5_000, 40_000))
    energy_mj = draw(st.integers(2_000, 15_000))
    rows = []
    for k in range(count):
        rows.append((stage, instruction, 1980 - clock_step_mhz * k, time_us / 1e6, energy_mj / 1e3))
        first = force_range and k == 0
        low = 1_500 if first else 10
        time_us += draw(st.integers(low, max(low, 8_000 if count < 20 else 800)))
        # Energy mostly falls, sometimes rises a little (measurement noise);
        # the forced pair falls, so it stays useful at any blocking power.
        fall = max(1, min(2_000, energy_mj // (count + 1)))
        energy_mj += -fall if first else draw(st.integers(-fall, 40))
        energy_mj = max(energy_mj, 100)
    if draw(st.booleans()):
        slowest = rows[-1][3] + 1e-3
        energy = max(r[4] for r in rows) + MAX_BLOCKING_W * (slowest - rows[0][3]) + 1.0
        rows.append((stage, instruction, USELESS_MHZ, slowest, energy))
    return rows


@st.composite
def problems(draw):
    """A profile and a pipeline it can run: (profile, optimize kwargs)."""
    # Coarse tables of a few clocks, or real ones of 60-80 clocks 15 MHz apart
    # (on smaller pipelines: those solves cost more).
    many_clocks = draw(st.booleans())
    stages = draw(st.integers(2, 3 if many_clocks else 5))
    microbatches = draw(st.integers(1, 4 if many_clocks else 8))
    records = []
    for stage in range(stages):
        for instruction in (F, B):
            forced = stage == 0 and instruction == F
            count = (
                draw(st.integers(60, 80))
                if many_clocks
                else draw(st.integers(2 if forced else 1, 6))
            )
            step = 15 if many_clocks else 60
            records += draw(option_rows(stage, instruction, count, forced, step))
    power = draw(st.one_of(st.just(0.0), st.floats(0.0, MAX_BLOCKING_W), st.just(MAX_BLOCKING_W)))
    profile = Profile.from_records(records, blocking_power_w=power)

    schedules = ["1f1b", "gpipe"]
    if stages % 2 == 0 and microbatches >= stages // 2:
        schedules.append("interleaved-1f1b")
    schedule = draw(st.sampled_from(schedules))
    # With at most 2 GPUs, interleaved orders never deadlock (see test_schedule).
    virtual = 2 if schedule == "interleaved-1f1b" else 1
    return profile, dict(microbatches=microbatches, schedule=schedule, virtual_stages=virtual)


def check_monotone(profile, frontier):
    assert len(frontier) >= 1
    assert np.all(np.diff(frontier.iteration_times_s) > 0)
    # Over a common iteration length, every slower plan costs strictly less.
    blocking_w = profile.blocking_power_w * frontier.spec.num_gpus
    assert np.all(np.diff(frontier.energies_j - blocking_w * frontier.iteration_times_s) < 0)
    last = frontier.iteration_times_s[-1]
    for plan in frontier:
        assert plan.energy_at(last) == pytest.approx(
            plan.energy_j + blocking_w * (last - plan.iteration_time_s)
        )
    assert frontier.iteration_times_s.tolist() == [p.iteration_time_s for p in frontier]
    assert frontier.energies_j.tolist() == [p.energy_j for p in frontier]


def sample(frontier, count=12):
    """A few plans spread over the frontier (both ends included)."""
    picks = np.unique(np.linspace(0, len(frontier) - 1, min(count, len(frontier))).astype(int))
    return [frontier[int(k)] for k in picks]


def check_replay(profile, frontier):
    for plan in sample(frontier):
        replayed = perseus.evaluate(profile, plan)
        assert replayed.iteration_time_s == pytest.approx(plan.iteration_time_s, rel=1e-9)
        assert replayed.energy_j == pytest.approx(plan.energy_j, rel=1e-9)


def check_useful_options(profile, frontier):
    allowed = {
        (s, i): set(profile.options(s, i).frequency_mhz.tolist())
        for s in range(profile.num_stages)
        for i in (F, B)
    }
    for plan in sample(frontier):
        frequencies = plan.frequency_map_mhz
        assert len(frequencies) == plan.spec.num_computations
        for (stage, instruction, _), mhz in frequencies.items():
            assert mhz in allowed[(stage, instruction)]
            assert mhz != USELESS_MHZ


def check_fastest(profile, frontier):
    # Baseline: every computation at its fastest measured row (which need not
    # be the highest clock), replayed here.
    fastest = {
        (s, i, m): int(
            profile.measured(s, i).frequency_mhz[np.argmin(profile.measured(s, i).time_s)]
        )
        for s in range(profile.num_stages)
        for i in (F, B)
        for m in range(frontier.spec.microbatches)
    }
    spec = frontier.spec
    baseline = perseus.evaluate(
        profile,
        fastest,
        microbatches=spec.microbatches,
        schedule=spec.schedule,
        virtual_stages=spec.virtual_stages,
    )
    assert frontier.baseline.iteration_time_s == pytest.approx(baseline.iteration_time_s, rel=1e-12)
    assert frontier.fastest.iteration_time_s == pytest.approx(baseline.iteration_time_s, rel=1e-12)
    assert frontier.fastest.energy_j <= frontier.baseline.energy_j * (1 + 1e-12)
    for plan in frontier:
        assert plan.energy_j <= plan.energy_before_reclaim_j + 1e-9 * abs(
            plan.energy_before_reclaim_j
        )
        assert plan.iteration_time_s >= baseline.iteration_time_s * (1 - 1e-12)


def check_plan_for(frontier, extra_deadline):
    times = frontier.iteration_times_s
    # Each plan's own time, points between plans, past the slowest, and a drawn one.
    deadlines = [*times, float(times[-1]) * 1.5, extra_deadline]
    deadlines += [float(a + b) / 2 for a, b in zip(times, times[1:])]
    # The cheapest plan meeting a deadline, from the plans' own numbers: over
    # an iteration that long each draws the blocking power for its idle rest
    # (Plan.energy_at), computed for all plans at once (frontiers hold
    # thousands of plans, and a Plan per plan per deadline took minutes).
    own_t = np.asarray(times)
    own_e = np.asarray(frontier.energies_j)
    blocking_w = frontier.blocking_power_w * frontier.spec.num_gpus
    for deadline in deadlines:
        chosen = frontier.plan_for(deadline)
        meeting = own_t <= deadline
        cheapest = float(np.min(own_e[meeting] + blocking_w * (deadline - own_t[meeting])))
        assert chosen.iteration_time_s <= deadline
        assert chosen.energy_at(deadline) <= cheapest * (1 + 1e-12)
    with pytest.raises(ValueError, match="no plan meets a deadline"):
        frontier.plan_for(float(np.nextafter(times[0], 0)))


@given(problems(), st.floats(0.0, 2.0))
def test_every_frontier_property(problem, where):
    profile, kwargs = problem
    # A small local-search budget: the properties hold whatever it is, and
    # the suite spends its time on variety.
    frontier = perseus.optimize(profile, budgets={"local_search_work_floor": 1e6}, **kwargs)
    check_monotone(profile, frontier)
    check_replay(profile, frontier)
    check_useful_options(profile, frontier)
    check_fastest(profile, frontier)
    times = frontier.iteration_times_s
    check_plan_for(frontier, float(times[0] + where * (times[-1] - times[0] + 1e-3)))

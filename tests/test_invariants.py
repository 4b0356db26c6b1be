"""Properties every frontier must have, on random profiles and pipelines."""

from __future__ import annotations

import numpy as np
import perseus
import pytest
from hypothesis import given
from hypothesis import strategies as st
from perseus import Profile

F, B = "forward", "backward"
DOMINATED_MHZ = 2100  # a row no plan may use: slower and costlier than another


@st.composite
def option_rows(draw, stage, instruction, count, force_range):
    """Pareto rows of one (stage, instruction); times in 0.1 ms steps.

    With `force_range`, the first two options are at least 1.5 ms apart, so
    some computation has two durations at a 1 ms unit and the solve can run.
    """
    time_us = draw(st.integers(5_000, 40_000))
    energy_mj = draw(st.integers(2_000, 15_000))
    rows = []
    for k in range(count):
        rows.append((stage, instruction, 1410 - 60 * k, time_us / 1e6, energy_mj / 1e3))
        low = 1_500 if force_range and k == 0 else 100
        time_us += draw(st.integers(low, 8_000))
        energy_mj -= draw(st.integers(1, max(1, min(2_000, energy_mj // (count + 1)))))
    if draw(st.booleans()):
        # Slower and costlier than the fastest option: Pareto-dominated.
        rows.append((stage, instruction, DOMINATED_MHZ, rows[-1][3] + 1e-3, rows[0][4] + 1.0))
    return rows


@st.composite
def problems(draw):
    """A profile and a pipeline it can run: (profile, optimize kwargs)."""
    stages = draw(st.integers(2, 5))
    microbatches = draw(st.integers(1, 8))
    records = []
    for stage in range(stages):
        for instruction in (F, B):
            forced = stage == 0 and instruction == F
            count = draw(st.integers(2 if forced else 1, 6))
            records += draw(option_rows(stage, instruction, count, forced))
    power = draw(st.one_of(st.just(0.0), st.floats(0.0, 150.0), st.just(150.0)))
    profile = Profile.from_records(records, blocking_power_w=power)

    schedules = ["1f1b", "gpipe"]
    if stages % 2 == 0 and microbatches >= stages // 2:
        schedules.append("interleaved-1f1b")
    schedule = draw(st.sampled_from(schedules))
    # With at most 2 GPUs, interleaved orders never deadlock (see test_schedule).
    virtual = 2 if schedule == "interleaved-1f1b" else 1
    return profile, dict(microbatches=microbatches, schedule=schedule, virtual_stages=virtual)


def solve(problem):
    profile, kwargs = problem
    return profile, perseus.optimize(profile, **kwargs)


@given(problems())
def test_frontier_is_strictly_monotone(problem):
    profile, frontier = solve(problem)
    assert len(frontier) >= 1
    assert np.all(np.diff(frontier.iteration_times_s) > 0)
    # Over a common iteration length, every slower plan costs strictly less.
    blocking_w = profile.blocking_power_w * frontier.spec.num_gpus
    assert np.all(np.diff(frontier.energies_j - blocking_w * frontier.iteration_times_s) < 0)
    for plan in frontier:
        assert plan.energy_at(frontier.iteration_times_s[-1]) == pytest.approx(
            plan.energy_j + blocking_w * (frontier.iteration_times_s[-1] - plan.iteration_time_s)
        )
    assert frontier.iteration_times_s.tolist() == [p.iteration_time_s for p in frontier]
    assert frontier.energies_j.tolist() == [p.energy_j for p in frontier]


@given(problems())
def test_reported_values_replay(problem):
    profile, frontier = solve(problem)
    for plan in frontier:
        replayed = perseus.evaluate(profile, plan)
        assert replayed.iteration_time_s == pytest.approx(plan.iteration_time_s, rel=1e-9)
        assert replayed.energy_j == pytest.approx(plan.energy_j, rel=1e-9)


@given(problems())
def test_frequencies_are_profile_options(problem):
    profile, frontier = solve(problem)
    allowed = {
        (s, i): set(profile.options(s, i).frequency_mhz.tolist())
        for s in range(profile.num_stages)
        for i in (F, B)
    }
    for plan in frontier:
        frequencies = plan.frequency_map_mhz
        assert len(frequencies) == plan.spec.num_computations
        for (stage, instruction, _), mhz in frequencies.items():
            assert mhz in allowed[(stage, instruction)]
            assert mhz != DOMINATED_MHZ


@given(problems())
def test_fastest_plan_keeps_baseline_time_and_reclaim_saves(problem):
    profile, frontier = solve(problem)
    # Baseline: every computation at its fastest option, replayed here.
    fastest = {
        (s, i, m): int(profile.options(s, i).frequency_mhz[0])
        for s in range(profile.num_stages)
        for i in (F, B)
        for m in range(frontier.spec.microbatches)
    }
    baseline = perseus.evaluate(
        profile,
        fastest,
        microbatches=frontier.spec.microbatches,
        schedule=frontier.spec.schedule,
        virtual_stages=frontier.spec.virtual_stages,
    )
    assert frontier.baseline.iteration_time_s == pytest.approx(baseline.iteration_time_s, rel=1e-12)
    assert frontier.baseline.energy_j == pytest.approx(baseline.energy_j, rel=1e-12)
    assert frontier.fastest.iteration_time_s == pytest.approx(baseline.iteration_time_s, rel=1e-12)
    assert frontier.fastest.energy_j <= baseline.energy_j * (1 + 1e-12)
    for plan in frontier:
        assert plan.energy_j <= plan.energy_before_reclaim_j + 1e-9 * abs(plan.energy_before_reclaim_j)
        assert plan.iteration_time_s >= baseline.iteration_time_s * (1 - 1e-12)


@given(problems(), st.data())
def test_plan_for_picks_cheapest_plan_in_time(problem, data):
    _, frontier = solve(problem)
    times = frontier.iteration_times_s
    # Each plan's own time, points between plans, and past the slowest.
    deadlines = [*times, float(times[-1]) * 1.5]
    deadlines += [float(a + b) / 2 for a, b in zip(times, times[1:])]
    deadlines.append(data.draw(st.floats(float(times[0]), float(times[-1]) * 2)))
    for deadline in deadlines:
        chosen = frontier.plan_for(deadline)
        meeting = [p for p in frontier if p.iteration_time_s <= deadline]
        cheapest = min(p.energy_at(deadline) for p in meeting)
        assert chosen.iteration_time_s <= deadline
        assert chosen.energy_at(deadline) <= cheapest * (1 + 1e-12)
    below = float(np.nextafter(times[0], 0))
    with pytest.raises(ValueError, match="no plan meets a deadline"):
        frontier.plan_for(below)

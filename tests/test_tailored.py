"""`Frontier.plan_for(deadline_s, tailored=True)`: a plan solved for the deadline itself.

Every tailored plan is replayed from the profile's measured rows
(`perseus.evaluate`), must meet its deadline and must never cost more over
it than the frontier's own plan (``plan_for(d, reclaim=False)``, which
idles through the gap); on a pipeline of realistic size it must
also gain at some deadlines between frontier plans (the exhaustive optimum
bounds it from below in tests/test_oracle.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import perseus
import pytest
from deadline_support import deadlines_between_plans, example_profile, other_clocks
from perseus import Frontier
from perseus._tailored import tailored_plan


@pytest.fixture(scope="module")
def profile():
    return example_profile()


@pytest.fixture(scope="module")
def frontier(profile):
    return perseus.optimize(profile, microbatches=16)


def _deadlines(frontier, count=12):
    return deadlines_between_plans(frontier, count, seed=23)


def test_tailored_plans_meet_the_deadline_and_never_cost_more(profile, frontier):
    gains = []
    for deadline in _deadlines(frontier):
        picked = frontier.plan_for(deadline, reclaim=False)
        plan = frontier.plan_for(deadline, tailored=True)
        replayed = perseus.evaluate(profile, plan)
        assert replayed.iteration_time_s == pytest.approx(plan.iteration_time_s, rel=1e-12)
        assert replayed.energy_j == pytest.approx(plan.energy_j, rel=1e-12)
        assert plan.iteration_time_s <= deadline
        assert plan.energy_at(deadline) <= picked.energy_at(deadline) * (1 + 1e-12)
        gains.append(picked.energy_at(deadline) / plan.energy_at(deadline) - 1)
    # Between frontier plans the picked plan idles; the tailored one uses
    # the time (observed here: all 12 deadlines gain, 0.0006-0.028 %).
    assert sum(g > 1e-6 for g in gains) >= 10, gains
    assert max(gains) > 1e-4, gains


def test_tailored_plans_are_the_same_from_a_saved_frontier(tmp_path, frontier):
    # Every Megatron rank loads the frontier file and must get the same plan.
    path = tmp_path / "frontier.json"
    frontier.save(path)
    loaded = Frontier.load(path)
    for deadline in _deadlines(frontier, 3):
        a = frontier.plan_for(deadline, tailored=True)
        b = loaded.plan_for(deadline, tailored=True)
        assert np.array_equal(a.frequencies_mhz, b.frequencies_mhz)
        assert a.energy_j == b.energy_j


def test_at_a_plans_own_time_and_at_the_range_ends(frontier):
    times = frontier.iteration_times_s
    for deadline in (times[0], times[len(times) // 2], times[-1], times[-1] * 1.5):
        plan = frontier.plan_for(deadline, tailored=True)
        assert plan.iteration_time_s <= deadline
        assert plan.energy_at(deadline) <= frontier.energy_at(deadline) * (1 + 1e-12)
    with pytest.raises(ValueError, match="no plan meets"):
        frontier.plan_for(times[0] * 0.99, tailored=True)


def test_bad_arguments(frontier):
    deadline = _deadlines(frontier, 1)[0]
    with pytest.raises(TypeError, match="tailored must be True or False"):
        frontier.plan_for(deadline, tailored=1)
    with pytest.raises(TypeError, match="not both"):
        frontier.plan_for(deadline, tailored=True, switch_latency_s=0.01)


def test_a_profile_without_the_plans_clocks_is_refused(profile, frontier):
    # The same stages measured at other clocks only: the frontier's plans
    # cannot start a search on it.
    other = other_clocks(profile)
    with pytest.raises(ValueError, match="not one of the profile's options"):
        tailored_plan(frontier, 3, frontier.iteration_times_s[3], other)


@pytest.mark.parametrize(
    ("schedule", "virtual_stages"), [("interleaved-1f1b", 2), ("gpipe", 1)], ids=["v2", "gpipe"]
)
def test_other_schedules(profile, schedule, virtual_stages):
    # The starts' clocks map to the right (chunk, instruction) options on other schedules too.
    frontier = perseus.optimize(
        profile, microbatches=8, schedule=schedule, virtual_stages=virtual_stages
    )
    for deadline in _deadlines(frontier, 3):
        plan = frontier.plan_for(deadline, tailored=True)
        replayed = perseus.evaluate(profile, plan)
        assert replayed.energy_j == pytest.approx(plan.energy_j, rel=1e-12)
        assert plan.iteration_time_s <= deadline
        assert plan.energy_at(deadline) <= frontier.energy_at(deadline) * (1 + 1e-12)


def test_a_one_plan_frontier(profile):
    # The fastest plan alone: its only start, and the all-fastest plan.
    frontier = perseus.optimize(profile, microbatches=16)
    only = Frontier(
        [frontier.fastest],
        baseline=frontier.baseline,
        spec=frontier.spec,
        unit_time_s=frontier.unit_time_s,
        blocking_power_w=frontier.blocking_power_w,
        solve_time_s=0.0,
    )
    deadline = 1.1 * frontier.fastest.iteration_time_s
    plan = only.plan_for(deadline, tailored=True)
    assert plan.iteration_time_s <= deadline
    assert plan.energy_at(deadline) <= frontier.fastest.energy_at(deadline)


class _Interrupted(Exception):
    """What this test's SIGINT handler raises (pytest's own stops the session)."""


def test_ctrl_c_stops_a_long_tailored_search(profile):
    # A search with a large budget on a long pipeline runs for over half a
    # second here (1e8 work units, 1,024 computations; 0.67 s on 2 cores); Ctrl-C must stop it within
    # the poll period, not when it ends, and leave the next search unchanged.
    frontier = perseus.optimize(profile, microbatches=64)
    times = np.asarray(frontier.iteration_times_s)
    k = len(times) // 3
    deadline = float((times[k] + times[k + 1]) / 2)
    work = 100_000_000
    started = time.perf_counter()
    whole = tailored_plan(frontier, k, deadline, max_work=work)
    whole_s = time.perf_counter() - started

    def handler(_signum, _frame):
        raise _Interrupted

    previous = signal.signal(signal.SIGINT, handler)
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
    try:
        started = time.perf_counter()
        timer.start()
        with pytest.raises(_Interrupted):
            tailored_plan(frontier, k, deadline, max_work=work)
        stopped_s = time.perf_counter() - started
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert stopped_s < 0.5 * whole_s, (stopped_s, whole_s)
    again = tailored_plan(frontier, k, deadline, max_work=work)
    assert again.frequency_map_mhz == whole.frequency_map_mhz

"""Memory a solve keeps for its plans (issue 23): the core's result holds its
plans as changes from the plan before, and optimize() keeps them that way
(a PlanStore of clocks), making a plan's row only when it is asked for.

Byte counts, not timings: the core reports what its plan storage holds
(``retained_plan_bytes``, every buffer's capacity), and tracemalloc counts
what Python and numpy allocate while optimize() runs (a per-plan row made
in Python shows up, and nothing else of that size does)."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import perseus
import pytest
from perseus.optimize import _setup, _spec

GPT3 = Path(__file__).resolve().parents[1] / "bench/data/sosp24/gpt3-175b+a100_sxm_bf16.csv"


@pytest.fixture(scope="module")
def gpt3() -> perseus.Profile:
    return perseus.Profile.from_csv(GPT3, blocking_power_w=70.0)


# refine=False's plans are consecutive min-cut plans (about 4 changes each at
# 8 x 24, 48 bytes a plan against 768 as rows); refined plans come from
# several chains and the local search (about 21 changes, 210 bytes).
@pytest.mark.parametrize(("refine", "share_of_rows"), [(False, 0.15), (True, 0.5)])
def test_the_result_holds_its_plans_in_a_fraction_of_their_rows(gpt3, refine, share_of_rows):
    spec = _spec(gpt3, 24, "1f1b", 1)
    problem, _, _ = _setup(gpt3, spec)
    result = problem.solve(1e-3, refine, perseus.SolverBudgets())
    rows = result.choices  # rebuilt from the stored changes
    plans, n = rows.shape
    assert plans > 500
    assert n == spec.num_computations
    assert result.retained_plan_bytes <= share_of_rows * rows.nbytes
    # The compact storage gives back plans that are the frontier's: each
    # replays to its reported time and energy.
    times, energies = problem.evaluate(rows)
    np.testing.assert_allclose(times, result.iteration_time_s, rtol=1e-12)
    np.testing.assert_allclose(energies, result.energy_j, rtol=1e-12)


@pytest.mark.parametrize("refine", [False, True])
def test_optimize_makes_no_python_copy_of_the_plans_clocks(gpt3, refine):
    tracemalloc.start()
    try:
        frontier = perseus.optimize(gpt3, microbatches=48, refine=refine)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    n = frontier[0].frequencies_mhz.size
    # What Python allocates per plan (a Plan and its floats: about 340 bytes
    # at 8 x 48) against one row of clocks, 4 bytes x 768 computations.
    assert peak <= len(frontier) * 1024 + 256 * 1024 < len(frontier) * 4 * n
    # The frontier keeps its plans as changes (a PlanStore: checkpoint rows
    # every 64 plans and the changes between), not one int32 row per plan;
    # a plan made from it is read-only and is the plan the solver reported.
    store = frontier._plans
    kept = sum(
        a.nbytes for a in (store.first_mhz, store.change_ids, store.change_mhz, store._checkpoints)
    )
    assert kept <= 0.15 * len(frontier) * 4 * n  # 1.7 % refine=False, 8.6 % refined at 8 x 48
    for k in (0, len(frontier) // 2, len(frontier) - 1):
        plan = frontier[k]
        assert not plan.frequencies_mhz.flags.writeable
        replayed = perseus.evaluate(gpt3, plan)
        assert replayed.iteration_time_s == pytest.approx(plan.iteration_time_s, rel=1e-12)
        assert replayed.energy_j == pytest.approx(plan.energy_j, rel=1e-12)


def test_peak_powers_replay_the_frontier_in_bounded_blocks(gpt3, monkeypatch):
    # Replaying a frontier takes about 40 bytes per plan and computation; at
    # 16 x 1024 with refine=False (41,000 plans x 32,768) that was 50 GB at
    # once. Blocks of REPLAY_BLOCK_VALUES clocks bound it, and give the same
    # peaks as each plan's own power timeline.
    frontier = perseus.optimize(gpt3, microbatches=48, refine=False)
    store = frontier._plans
    n = frontier[0].frequencies_mhz.size
    seen = []
    for plans, rows in store.row_blocks(max_values=10 * n + 1):
        assert rows.shape == (len(plans), n)
        assert len(plans) <= 10
        for k, row in zip(plans, rows):
            np.testing.assert_array_equal(row, frontier[int(k)].frequencies_mhz)
        seen.extend(plans.tolist())
    assert seen == list(range(len(frontier)))
    # The knob at 1/20 of this frontier: the replay below takes 20 blocks.
    monkeypatch.setattr(perseus._plan_store, "REPLAY_BLOCK_VALUES", len(frontier) * n // 20)
    tracemalloc.start()
    try:
        peaks = frontier.peak_powers_w()
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 0.25 * len(frontier) * n * 40  # 1/20 of it, with room
    for k in range(0, len(frontier), len(frontier) // 25):
        assert peaks[k] == pytest.approx(frontier[k].power_timeline().peak_w, rel=1e-12)


_PEAK_OF_ONE_SOLVE = """
import sys, perseus

def kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])

profile = perseus.Profile.from_csv(sys.argv[1], blocking_power_w=118.0)
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # resets the peak-RSS mark: only the solve below counts
base = kib("VmRSS")
frontier = perseus.optimize(profile, microbatches=128, refine=False, progress=False)
print(kib("VmHWM") - base, len(frontier), frontier[0].frequencies_mhz.size)
"""


def test_no_stage_of_a_solve_holds_its_plans_as_rows():
    # The core's selection set once held every kept plan as a uint16 row,
    # twice over while it chose the next set: 2.6 GB at 16 x 1024 with
    # refine=False. A 16 x 128 solve (7,500 plans x 4,096 computations: 61 MB
    # of rows) peaked 66 MB above its start then, 7 MB with the plans held
    # as changes at every stage.
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak-RSS mark")
    profile = Path(__file__).resolve().parents[1] / "bench/data/synthetic/h100-16u.csv"
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_ONE_SOLVE, str(profile)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    peak_kib, plans, n = (int(word) for word in out.stdout.split())
    rows_kib = plans * n * 2 / 1024
    assert plans > 5000
    assert peak_kib < 0.25 * rows_kib

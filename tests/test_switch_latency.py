"""Tests for the switch-latency model and switch-aware plans (perseus.switch_latency).

The oracle is a brute-force, time-stepped simulation written here from the
model's definition and the profile's raw measured rows: it shares no code and
no event arithmetic with the replay it checks. With no latency the replay
must also equal the core's own (C++) replay.
"""

from __future__ import annotations

import math

import numpy as np
import perseus
import pytest
from perseus import Profile
from perseus.pipeline_spec import PipelineSpec
from perseus.switch_latency import (
    merge_switches,
    replay_with_switch_latency,
    switch_aware_plan,
)

F, B = "forward", "backward"
CLOCKS = (1410, 1200, 1000, 800)


def grid_profile(stages: int = 4, blocking_power_w: float = 60.0) -> Profile:
    """Every (stage, instruction) measured at the same clocks, so any clock is a measured row."""
    records = []
    for s in range(stages):
        for instruction in (F, B):
            base = (0.010 if instruction == F else 0.021) * (1.4 if s == 1 else 1.0) + 0.001 * s
            for mhz in CLOCKS:
                t = base * (1410 / mhz) ** 0.6
                records.append((s, instruction, mhz, t, (120 + 250 * (mhz / 1410) ** 2.5) * t))
    return Profile.from_records(records, blocking_power_w=blocking_power_w)


def oracle(profile: Profile, spec: PipelineSpec, mhz: np.ndarray, latency_s: float, dt: float):
    """Time-stepped replay: (iteration time, energy, switches). Error O(dt) per computation."""
    pipeline = spec.pipeline()
    row = {}
    for s in range(spec.num_stages):
        for k, instruction in enumerate((F, B)):
            m = profile.measured(s, instruction)
            for f, t, e in zip(m.frequency_mhz, m.time_s, m.energy_j):
                row[(s, k, int(f))] = (float(t), float(e))
    key = {
        (int(pipeline.stage[i]), int(pipeline.microbatch[i]), int(pipeline.instruction[i])): i
        for i in range(len(pipeline))
    }
    last = spec.num_stages - 1

    def needs(i):
        s, m, k = (
            int(pipeline.stage[i]),
            int(pipeline.microbatch[i]),
            int(pipeline.instruction[i]),
        )
        if k == 0:
            return [key[(s - 1, m, 0)]] if s > 0 else []
        return [key[(s, m, 0)]] if s == last else [key[(s + 1, m, 1)]]

    orders = [[int(i) for i in pipeline.order(g)] for g in range(spec.num_gpus)]
    done_at = {}
    clock = [int(mhz[o[-1]]) for o in orders]  # steady state: the last clock of the iteration
    asked = list(clock)
    pending = [[] for _ in orders]  # (effect time, clock)
    nxt = [0] * len(orders)
    work = [None] * len(orders)  # remaining fraction of the running computation
    energy = 0.0
    switches = 0
    t = 0.0
    for g, o in enumerate(orders):  # the first request, at 0
        if int(mhz[o[0]]) != asked[g]:
            asked[g] = int(mhz[o[0]])
            pending[g].append((latency_s, asked[g]))
            switches += 1
    while len(done_at) < len(pipeline):
        for g, o in enumerate(orders):
            while pending[g] and pending[g][0][0] <= t + 1e-15:
                clock[g] = pending[g].pop(0)[1]
            if work[g] is None and nxt[g] < len(o):
                i = o[nxt[g]]
                if all(p in done_at and done_at[p] <= t + 1e-15 for p in needs(i)):
                    work[g] = 1.0
            if work[g] is None:
                energy += profile.blocking_power_w * dt
                continue
            i = o[nxt[g]]
            ti, ei = row[(int(pipeline.stage[i]), int(pipeline.instruction[i]), clock[g])]
            work[g] -= dt / ti
            energy += dt * ei / ti
            if work[g] <= 1e-12:
                done_at[i] = t + dt
                work[g] = None
                nxt[g] += 1
                if nxt[g] < len(o):
                    want = int(mhz[o[nxt[g]]])
                    if want != asked[g]:
                        asked[g] = want
                        pending[g].append((t + dt + latency_s, want))
                        switches += 1
        t += dt
    return max(done_at.values()), energy, switches


@pytest.fixture(scope="module")
def profile():
    return grid_profile()


@pytest.mark.parametrize(("schedule", "virtual"), [("1f1b", 1), ("interleaved-1f1b", 2)])
def test_no_latency_is_the_core_replay(profile, schedule, virtual):
    frontier = perseus.optimize(profile, microbatches=4, schedule=schedule, virtual_stages=virtual)
    for plan in frontier:
        r = replay_with_switch_latency(profile, plan.spec, plan.frequencies_mhz, 0.0)
        # To the last bit: same per-computation numbers, summed in the core's order.
        core = perseus.evaluate(profile, plan)
        assert (r.iteration_time_s, r.energy_j) == (core.iteration_time_s, core.energy_j)
        assert r.late_fraction == 0.0


@pytest.mark.parametrize("latency_s", [0.001, 0.004, 0.02])
@pytest.mark.parametrize("seed", [0, 1])
def test_latency_replay_matches_a_time_stepped_oracle(profile, latency_s, seed):
    spec = PipelineSpec(num_gpus=4, microbatches=3, schedule="1f1b", virtual_stages=1)
    rng = np.random.default_rng(seed)
    mhz = rng.choice(CLOCKS, size=spec.num_computations)
    got = replay_with_switch_latency(profile, spec, mhz, latency_s)
    dt = 2e-6
    want_t, want_e, want_switches = oracle(profile, spec, mhz, latency_s, dt)
    assert got.switches_per_iteration == want_switches
    # Each computation's finish may be late by up to one step, and lateness adds up along a path.
    assert got.iteration_time_s == pytest.approx(want_t, abs=spec.num_computations * dt)
    assert got.energy_j == pytest.approx(want_e, rel=2e-3)
    # Latency really changed something for this plan (the oracle is not trivially equal).
    plain = replay_with_switch_latency(profile, spec, mhz, 0.0)
    assert abs(plain.energy_j - got.energy_j) > 5e-3 * plain.energy_j or (
        abs(plain.iteration_time_s - got.iteration_time_s) > 1e-3 * plain.iteration_time_s
    )


def test_latency_delays_a_speed_up(profile):
    """All slow, then one computation fast: with latency it runs partly slow, so it takes longer."""
    spec = PipelineSpec(num_gpus=4, microbatches=2, schedule="1f1b", virtual_stages=1)
    mhz = np.full(spec.num_computations, 800)
    pipeline = spec.pipeline()
    # The last stage's last backward follows its forward at once, so the
    # request (made when the forward ends) has no idle time to hide in; the
    # change back to 800 MHz comes at the next iteration's start, long before
    # GPU 3 computes again.
    i = pipeline.id_of(3, 1, 1)
    mhz[i] = 1410
    fast = replay_with_switch_latency(profile, spec, mhz, 0.0)
    late = replay_with_switch_latency(profile, spec, mhz, 0.005)
    assert late.switches_per_iteration == 2  # to 1410 and back to 800, on GPU 3 only
    assert late.iteration_time_s > fast.iteration_time_s
    assert 0 < late.late_fraction < 1
    # A latency longer than the whole iteration: no change ever lands, and
    # GPU 3 stays at the clock it ended the previous iteration with, 1410 MHz.
    never = replay_with_switch_latency(profile, spec, mhz, 10.0)
    gpu3_fast = np.where(spec.pipeline().gpu == 3, 1410, 800)
    steady = replay_with_switch_latency(profile, spec, gpu3_fast, 0.0)
    assert never.iteration_time_s == pytest.approx(steady.iteration_time_s, rel=1e-12)
    assert never.energy_j == pytest.approx(steady.energy_j, rel=1e-12)


def test_unmeasured_clock_is_interpolated():
    records = []
    for s in range(2):
        for instruction in (F, B):
            records += [(s, instruction, 1400, 0.010, 3.0), (s, instruction, 1000, 0.014, 2.0)]
    # Stage 1's forward also measured at 1200; nobody else was.
    records.append((1, F, 1200, 0.012, 2.5))
    profile = Profile.from_records(records, blocking_power_w=0.0)
    spec = PipelineSpec(num_gpus=2, microbatches=1, schedule="1f1b", virtual_stages=1)
    pipeline = spec.pipeline()
    mhz = np.full(spec.num_computations, 1400)
    mhz[pipeline.id_of(1, 0, 0)] = 1200
    # GPU 1 runs F1 (1200 MHz), then B1 (1400). With a latency longer than
    # the iteration, B1 runs at 1200 MHz, which stage 1's backward never
    # measured: halfway between its 1400 and 1000 MHz rows.
    r = replay_with_switch_latency(profile, spec, mhz, 10.0)
    # GPU 1 starts at its last clock (1400), so F1 runs at 1400 too.
    assert r.energy_j == pytest.approx(3.0 * 4)
    mhz2 = np.full(spec.num_computations, 1200)
    mhz2[pipeline.id_of(1, 0, 0)] = 1400
    for s in (0,):
        for k in (0, 1):
            mhz2[pipeline.id_of(s, 0, k)] = 1400
    # GPU 1: F1 at 1400 asked, B1 at 1200 (never measured for B1): steady state starts at 1200.
    r2 = replay_with_switch_latency(profile, spec, mhz2, 10.0)
    # F1 at 1200 (measured, 0.012 s, 2.5 J); B1 at 1200 (interpolated, 0.012 s, 2.5 J); GPU 0 at 1400.
    assert r2.energy_j == pytest.approx(3.0 + 3.0 + 2.5 + 2.5)
    assert r2.iteration_time_s == pytest.approx(0.010 + 0.012 + 0.012 + 0.010)


@pytest.mark.parametrize("bad", [-0.001, math.nan, math.inf, True, "0.01", None])
def test_bad_latency_is_named(profile, bad):
    spec = PipelineSpec(num_gpus=4, microbatches=2, schedule="1f1b", virtual_stages=1)
    with pytest.raises((TypeError, ValueError), match="switch_latency_s"):
        replay_with_switch_latency(profile, spec, np.full(spec.num_computations, 1410), bad)


def test_wrong_plan_length(profile):
    spec = PipelineSpec(num_gpus=4, microbatches=2, schedule="1f1b", virtual_stages=1)
    with pytest.raises(ValueError, match="needs 16 frequencies"):
        replay_with_switch_latency(profile, spec, [1410] * 3, 0.0)


@pytest.fixture(scope="module")
def frontier(profile):
    return perseus.optimize(profile, microbatches=4)


def test_merge_never_slows_a_computation(profile, frontier):
    """Merged computations run at a clock measured for them, and no slower than planned."""
    from perseus.switch_latency import _Rows

    rows = _Rows(profile, frontier.spec)
    for plan in frontier:
        base = np.asarray(plan.frequencies_mhz, dtype=np.int64)
        for tolerance in (0, 200, 1000):
            merged = merge_switches(rows, base, tolerance)
            assert np.all(merged >= base)
            pipeline = frontier.spec.pipeline()
            for i in np.nonzero(merged != base)[0]:
                s, k = int(pipeline.stage[i]), int(pipeline.instruction[i])
                assert rows.at(s, k, merged[i])[0] <= rows.at(s, k, base[i])[0]
            if tolerance >= 1410 - 800:
                for g in range(frontier.spec.num_gpus):
                    order = frontier.spec.pipeline().order(g)
                    # Every drop merged, the iteration's wrap included: one clock per GPU.
                    assert len(set(merged[order].tolist())) == 1


@pytest.mark.parametrize("latency_s", [0.0, 0.002, 0.01, 0.05])
def test_switch_aware_plan_meets_the_deadline_and_beats_the_unaware_one(
    profile, frontier, latency_s
):
    spec = frontier.spec
    for slack in (1.02, 1.15):
        deadline = frontier.fastest.iteration_time_s * slack
        try:
            aware = switch_aware_plan(frontier, deadline, latency_s)
        except ValueError as error:
            assert "no plan meets" in str(error)  # noqa: PT017 (refusal is one allowed outcome)
            continue
        assert aware.replay.iteration_time_s <= deadline
        again = replay_with_switch_latency(profile, spec, aware.plan.frequencies_mhz, latency_s)
        assert again == aware.replay
        unaware = frontier.plan_for(deadline)
        r = replay_with_switch_latency(profile, spec, unaware.frequencies_mhz, latency_s)
        if r.iteration_time_s <= deadline:
            unaware_j = r.energy_j + profile.blocking_power_w * spec.num_gpus * (
                deadline - r.iteration_time_s
            )
            assert aware.energy_at_deadline_j <= unaware_j + 1e-9
        if latency_s == 0.0:
            assert aware.energy_at_deadline_j == pytest.approx(
                frontier.energy_at(deadline), rel=1e-9
            ) or aware.energy_at_deadline_j < frontier.energy_at(deadline)
        assert aware.replay.switches_per_iteration <= aware.unmerged_switches_per_iteration or (
            aware.tolerance_mhz == 0
        )


def test_switch_aware_plan_impossible_deadline(frontier):
    with pytest.raises(ValueError, match="no plan meets a deadline"):
        switch_aware_plan(frontier, frontier.fastest.iteration_time_s * 0.5, 0.01)


# ---- the hooks: perseus.evaluate, Frontier.plan_for, the command line --------------


def test_evaluate_with_switch_latency(profile, frontier):
    plan = frontier[len(frontier) // 2]
    plain = perseus.evaluate(profile, plan)
    assert perseus.evaluate(profile, plan, switch_latency_s=0.0) == plain
    late = perseus.evaluate(profile, plan, switch_latency_s=0.01)
    want = replay_with_switch_latency(profile, plan.spec, plan.frequencies_mhz, 0.01)
    assert (late.iteration_time_s, late.energy_j) == (want.iteration_time_s, want.energy_j)
    assert late != plain
    with pytest.raises(ValueError, match="switch_latency_s"):
        perseus.evaluate(profile, plan, switch_latency_s=-1.0)


def test_plan_for_with_switch_latency(profile, frontier):
    deadline = frontier.fastest.iteration_time_s * 1.1
    plan = frontier.plan_for(deadline, switch_latency_s=0.02)
    aware = switch_aware_plan(frontier, deadline, 0.02)
    assert np.array_equal(plan.frequencies_mhz, aware.plan.frequencies_mhz)
    assert perseus.evaluate(profile, plan, switch_latency_s=0.02).iteration_time_s <= deadline


def test_command_line_switch_latency(tmp_path, capsys):
    from perseus.cli import main as cli_main

    csv = tmp_path / "p.csv"
    records = grid_profile()
    lines = ["stage,instruction,frequency,time,energy"]
    for s in range(records.num_stages):
        for instruction in (F, B):
            m = records.measured(s, instruction)
            for f, t, e in zip(m.frequency_mhz, m.time_s, m.energy_j):
                lines.append(f"{s},{instruction},{int(f)},{float(t)!r},{float(e)!r}")
    csv.write_text("\n".join(lines) + "\n")
    frontier_file = tmp_path / "fr" / "frontier.json"
    common = ["--blocking-power", "60"]
    assert (
        cli_main(["optimize", str(csv), "--microbatches", "4", "-o", str(tmp_path / "fr"), *common])
        == 0
    )
    out = tmp_path / "out"
    assert (
        cli_main(
            [
                "plan",
                str(frontier_file),
                "--slowdown",
                "1.1",
                "--switch-latency",
                "0.02",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert (
        cli_main(
            ["evaluate", str(csv), str(out / "plan.json"), "--switch-latency", "0.02", *common]
        )
        == 0
    )
    out_text = capsys.readouterr().out
    assert "switches per iteration" in out_text
    assert "of computing at a clock not planned" in out_text
    bad = ["evaluate", str(csv), str(out / "plan.json"), "--switch-latency", "-1"]
    assert cli_main(bad) == 2
    assert "--switch-latency: must be a finite number of seconds >= 0" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "plan",
                str(frontier_file),
                "--fastest",
                "--switch-latency",
                "0.02",
                "-o",
                str(out),
                "--force",
            ]
        )
        == 2
    )


def test_switch_aware_plan_at_the_fastest_time_falls_back_to_few_switches(profile, frontier):
    """At the fastest plan's own time and a long latency, only a plan without changes that
    land late meets the deadline: the all-fastest one, whose clocks never change here."""
    deadline = frontier.fastest.iteration_time_s
    aware = switch_aware_plan(frontier, deadline, 0.05)
    assert aware.replay.iteration_time_s <= deadline
    assert aware.replay.late_fraction == 0.0
    late = replay_with_switch_latency(
        profile, frontier.spec, frontier.fastest.frequencies_mhz, 0.05
    )
    if late.iteration_time_s > deadline:  # the frontier's own answer misses it ...
        assert aware.frontier_index == -1 or aware.tolerance_mhz > 0  # ... so a merged one wins


def test_merge_skips_a_higher_clock_that_is_slower():
    """Measured rows where 1410 MHz is slower than 1200 MHz for stage 1's forward: never merged up."""
    records = []
    for s in range(2):
        for instruction in (F, B):
            slow_top = s == 1 and instruction == F
            records += [
                (s, instruction, 1410, 0.0125 if slow_top else 0.010, 3.0),
                (s, instruction, 1200, 0.012, 2.5),
            ]
    profile = Profile.from_records(records, blocking_power_w=0.0)
    spec = PipelineSpec(num_gpus=2, microbatches=1, schedule="1f1b", virtual_stages=1)
    from perseus.switch_latency import _Rows

    pipeline = spec.pipeline()
    mhz = np.full(spec.num_computations, 1200)
    mhz[pipeline.id_of(1, 0, 1)] = 1410  # GPU 1: F1 at 1200, B1 at 1410
    merged = merge_switches(_Rows(profile, spec), mhz, 1000)
    assert merged[pipeline.id_of(1, 0, 0)] == 1200  # F1 stays: 1410 MHz is slower for it
    assert merged[pipeline.id_of(0, 0, 1)] == 1200  # GPU 0 had nothing to merge

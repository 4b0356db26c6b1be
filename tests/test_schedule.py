"""Tests for perseus.pipeline_order: Megatron-LM's execution orders.

The reference orders below are written from Megatron-LM's formulas, without
looking at perseus's implementation, and compared element by element.
"""

import perseus
import pytest
from hypothesis import given
from hypothesis import strategies as st
from perseus import Profile, ProfileError, pipeline_order

F, B = "forward", "backward"


# --- reference orders ---------------------------------------------------------


def _one_forward_one_backward(forwards, backwards, warmup):
    """Megatron's three phases: `warmup` forwards, F/B pairs, leftover backwards."""
    steady = len(forwards) - warmup
    order = list(forwards[:warmup])
    for forward, backward in zip(forwards[warmup:], backwards[:steady]):
        order += [forward, backward]
    return order + list(backwards[steady:])


def ref_gpipe(gpus, microbatches):
    return [
        [(F, 0, m) for m in range(microbatches)] + [(B, 0, m) for m in range(microbatches)]
        for _ in range(gpus)
    ]


def ref_1f1b(gpus, microbatches):
    forwards = [(F, 0, m) for m in range(microbatches)]
    backwards = [(B, 0, m) for m in range(microbatches)]
    return [
        _one_forward_one_backward(forwards, backwards, min(gpus - rank - 1, microbatches))
        for rank in range(gpus)
    ]


def ref_schedule_table(gpus, microbatches, chunks):
    """Megatron's get_schedule_table with microbatch_group_size_per_vp_stage = gpus."""
    table = []
    for first in range(0, microbatches, gpus):
        last = microbatches if first + gpus >= microbatches else first + gpus
        table += [(m, c) for c in range(chunks) for m in range(first, last)]
    return table


def ref_interleaved(gpus, microbatches, chunks):
    table = ref_schedule_table(gpus, microbatches, chunks)
    total = microbatches * chunks
    assert len(table) == total
    forwards = [(F, c, m) for m, c in table]
    backwards = [(B, chunks - 1 - c, m) for m, c in table]
    orders = []
    for rank in range(gpus):
        warmup = min(total, (gpus - rank - 1) * 2 + (chunks - 1) * gpus)
        orders.append(_one_forward_one_backward(forwards, backwards, warmup))
    return orders


def reference(schedule, gpus, microbatches, chunks=1):
    if schedule == "gpipe":
        return ref_gpipe(gpus, microbatches)
    if schedule == "1f1b":
        return ref_1f1b(gpus, microbatches)
    return ref_interleaved(gpus, microbatches, chunks)


# --- replay of an order, independent of perseus --------------------------------


def simulate(orders, gpus, chunks, microbatches, duration):  # noqa: ARG001 (the orders already encode it; kept for the callers' symmetry)
    """Run each GPU's order as soon as data dependencies allow.

    ``duration(instruction, stage)`` gives seconds. Returns the iteration time,
    or None if the orders deadlock. Model stage of (gpu, chunk) is
    ``chunk * gpus + gpu``; data dependencies are F(k) -> F(k+1),
    F(last) -> B(last) and B(k+1) -> B(k) for each microbatch.
    """
    last = gpus * chunks - 1
    finish = {}
    position = [0] * gpus
    free_at = [0.0] * gpus
    progress = True
    while progress:
        progress = False
        for gpu in range(gpus):
            while position[gpu] < len(orders[gpu]):
                instruction, chunk, mb = orders[gpu][position[gpu]]
                stage = chunk * gpus + gpu
                if instruction == F:
                    need = (F, stage - 1, mb) if stage > 0 else None
                else:
                    need = (F, last, mb) if stage == last else (B, stage + 1, mb)
                if need is not None and need not in finish:
                    break
                start = max(free_at[gpu], finish[need] if need else 0.0)
                free_at[gpu] = finish[(instruction, stage, mb)] = start + duration(
                    instruction, stage
                )
                position[gpu] += 1
                progress = True
    if any(position[g] < len(orders[g]) for g in range(gpus)):
        return None
    return max(finish.values())


def stage_time(instruction, stage):
    """Distinct, uneven per-stage times (s) so that orders matter."""
    base = 0.010 + 0.003 * stage + 0.002 * (stage % 3)
    return base if instruction == F else 2.1 * base


def timed_profile(num_stages):
    """Two options per (stage, instruction); the fastest follows stage_time."""
    records = []
    for stage in range(num_stages):
        for instruction in (F, B):
            t = stage_time(instruction, stage)
            records += [
                (stage, instruction, 1410, t, 300.0 * t),
                (stage, instruction, 1200, 1.2 * t, 250.0 * t),
            ]
    return Profile.from_records(records, blocking_power_w=60.0)


# --- sizes ---------------------------------------------------------------------

FLAT_SIZES = [(g, m) for g in range(1, 6) for m in range(1, 9)]
INTERLEAVED_SIZES = [
    (g, m, v) for g in range(1, 5) for v in range(2, 5) for m in range(g, 3 * g + 3)
]


# --- literal orders (hand-derived) ----------------------------------------------


def test_1f1b_literal_three_gpus_four_microbatches():
    assert pipeline_order("1f1b", 3, 4) == [
        [(F, 0, 0), (F, 0, 1), (F, 0, 2), (B, 0, 0), (F, 0, 3), (B, 0, 1), (B, 0, 2), (B, 0, 3)],
        [(F, 0, 0), (F, 0, 1), (B, 0, 0), (F, 0, 2), (B, 0, 1), (F, 0, 3), (B, 0, 2), (B, 0, 3)],
        [(F, 0, 0), (B, 0, 0), (F, 0, 1), (B, 0, 1), (F, 0, 2), (B, 0, 2), (F, 0, 3), (B, 0, 3)],
    ]


def test_1f1b_literal_fewer_microbatches_than_gpus():
    orders = pipeline_order("1f1b", 4, 2)
    assert orders[0] == [(F, 0, 0), (F, 0, 1), (B, 0, 0), (B, 0, 1)]
    assert orders[2] == [(F, 0, 0), (F, 0, 1), (B, 0, 0), (B, 0, 1)]
    assert orders[3] == [(F, 0, 0), (B, 0, 0), (F, 0, 1), (B, 0, 1)]


def test_interleaved_literal_two_gpus_two_chunks():
    # Table (mb, chunk): (0,0) (1,0) (0,1) (1,1); warm-up 4 on GPU 0, 2 on GPU 1.
    assert pipeline_order("interleaved-1f1b", 2, 2, 2) == [
        [(F, 0, 0), (F, 0, 1), (F, 1, 0), (F, 1, 1), (B, 1, 0), (B, 1, 1), (B, 0, 0), (B, 0, 1)],
        [(F, 0, 0), (F, 0, 1), (F, 1, 0), (B, 1, 0), (F, 1, 1), (B, 1, 1), (B, 0, 0), (B, 0, 1)],
    ]


def test_schedule_table_matches_megatron_docstring_shape():
    # Megatron's docstring example uses group size 3 (PP2 N3 M5 VP2); with our
    # group size G=2 the last group takes the single remaining microbatch.
    assert ref_schedule_table(2, 5, 2) == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (2, 0),
        (3, 0),
        (2, 1),
        (3, 1),
        (4, 0),
        (4, 1),
    ]
    # Last group absorbs the remainder when start + G >= M (3 + 3 >= 5).
    assert ref_schedule_table(3, 5, 2) == [
        (0, 0),
        (1, 0),
        (2, 0),
        (0, 1),
        (1, 1),
        (2, 1),
        (3, 0),
        (4, 0),
        (3, 1),
        (4, 1),
    ]


# --- comparison with the reference ----------------------------------------------


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("gpus", "microbatches"), FLAT_SIZES)
def test_flat_schedules_match_reference(schedule, gpus, microbatches):
    assert pipeline_order(schedule, gpus, microbatches) == reference(schedule, gpus, microbatches)


def check_order(schedule, gpus, microbatches, chunks=1):
    """perseus's order equals the reference, or is refused when the reference deadlocks."""
    expected = reference(schedule, gpus, microbatches, chunks)
    if simulate(expected, gpus, chunks, microbatches, stage_time) is None:
        with pytest.raises(ProfileError, match="deadlocks"):
            pipeline_order(schedule, gpus, microbatches, chunks)
        return
    assert pipeline_order(schedule, gpus, microbatches, chunks) == expected


@pytest.mark.parametrize(("gpus", "microbatches", "chunks"), INTERLEAVED_SIZES)
def test_interleaved_matches_reference(gpus, microbatches, chunks):
    check_order("interleaved-1f1b", gpus, microbatches, chunks)


sizes = st.integers(1, 12).flatmap(
    lambda g: st.tuples(st.just(g), st.integers(1, 40), st.integers(2, 5))
)


@given(schedule=st.sampled_from(["1f1b", "gpipe", "interleaved-1f1b"]), size=sizes)
def test_orders_match_reference_random_sizes(schedule, size):
    gpus, microbatches, chunks = size
    if schedule == "interleaved-1f1b":
        microbatches = max(microbatches, gpus)
    else:
        chunks = 1
    check_order(schedule, gpus, microbatches, chunks)


@given(schedule=st.sampled_from(["1f1b", "gpipe", "interleaved-1f1b"]), size=sizes)
def test_each_computation_once_per_gpu(schedule, size):
    gpus, microbatches, chunks = size
    if schedule == "interleaved-1f1b":
        microbatches = max(microbatches, gpus)
    else:
        chunks = 1
    orders = reference(schedule, gpus, microbatches, chunks)
    if simulate(orders, gpus, chunks, microbatches, stage_time) is not None:
        orders = pipeline_order(schedule, gpus, microbatches, chunks)
    assert len(orders) == gpus
    expected = sorted((i, c, m) for i in (F, B) for c in range(chunks) for m in range(microbatches))
    for gpu, order in enumerate(orders):
        assert sorted(order) == expected, f"GPU {gpu}"


# --- dependency feasibility -------------------------------------------------------


def test_simulation_detects_deadlock():
    # Guard for the checks below: an order that runs a backward before its
    # forward can ever reach it must be reported as a deadlock.
    orders = ref_1f1b(2, 2)
    orders[0] = [(B, 0, 0), (F, 0, 0), (F, 0, 1), (B, 0, 1)]
    assert simulate(orders, 2, 1, 2, stage_time) is None
    assert simulate(ref_1f1b(2, 2), 2, 1, 2, stage_time) is not None


def _all_sizes():
    for gpus, microbatches in FLAT_SIZES:
        for schedule in ("1f1b", "gpipe"):
            yield schedule, gpus, microbatches, 1
    for gpus, microbatches, chunks in INTERLEAVED_SIZES:
        if microbatches <= 2 * gpus + 1:  # keep the solver part quick
            yield "interleaved-1f1b", gpus, microbatches, chunks


@pytest.mark.parametrize(("schedule", "gpus", "microbatches", "chunks"), list(_all_sizes()))
def test_orders_are_feasible_and_replay_agrees(schedule, gpus, microbatches, chunks):
    orders = reference(schedule, gpus, microbatches, chunks)
    expected_time = simulate(orders, gpus, chunks, microbatches, stage_time)
    profile = timed_profile(gpus * chunks)
    run = dict(microbatches=microbatches, schedule=schedule, virtual_stages=chunks)
    if expected_time is None:
        # Only interleaved orders with a ragged last group can deadlock; perseus
        # must refuse them with a clear error instead of hanging or crashing.
        assert schedule == "interleaved-1f1b"
        assert microbatches % gpus != 0
        with pytest.raises(ProfileError, match="deadlocks"):
            perseus.optimize(profile, **run)
        return
    frontier = perseus.optimize(profile, **run)
    # perseus's all-fastest replay follows the same DAG as the simulation.
    assert frontier.baseline.iteration_time_s == pytest.approx(expected_time, rel=1e-12)
    assert frontier.fastest.iteration_time_s == pytest.approx(expected_time, rel=1e-12)


@pytest.mark.parametrize(
    ("gpus", "microbatches", "chunks"),
    [(4, 5, 3), (4, 9, 4), (5, 7, 2), (5, 6, 3), (6, 8, 2), (6, 9, 2)],
)
def test_deadlocking_interleaved_sizes_are_refused(gpus, microbatches, chunks):
    # Megatron's schedule-table order contradicts the data dependencies at
    # these sizes: perseus refuses to build it, and so does the solver.
    orders = ref_interleaved(gpus, microbatches, chunks)
    assert simulate(orders, gpus, chunks, microbatches, stage_time) is None
    with pytest.raises(ProfileError, match=r"deadlocks"):
        pipeline_order("interleaved-1f1b", gpus, microbatches, chunks)
    with pytest.raises(ProfileError, match=r"deadlocks") as info:
        perseus.evaluate(
            timed_profile(gpus * chunks),
            {},
            microbatches=microbatches,
            schedule="interleaved-1f1b",
            virtual_stages=chunks,
        )
    message = str(info.value)
    assert f"{gpus} GPUs" in message
    assert f"{microbatches} microbatches" in message


@given(
    gpus=st.integers(1, 8),
    groups=st.integers(1, 4),
    chunks=st.integers(2, 4),
)
def test_interleaved_with_whole_groups_never_deadlocks(gpus, groups, chunks):
    microbatches = gpus * groups
    orders = pipeline_order("interleaved-1f1b", gpus, microbatches, chunks)
    assert simulate(orders, gpus, chunks, microbatches, stage_time) is not None


# --- argument errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (("zero-bubble", 2, 4, 1), r"schedule 'zero-bubble' is not known.*1f1b.*gpipe"),
        (("1F1B", 2, 4, 1), r"schedule '1F1B' is not known"),
        (("1f1b", 2, 0, 1), r"microbatches must be an integer >= 1, got 0"),
        (("gpipe", 2, -3, 1), r"microbatches must be an integer >= 1, got -3"),
        (("1f1b", 2, 2.0, 1), r"microbatches must be an integer >= 1, got 2\.0"),
        (("1f1b", 0, 4, 1), r"number of pipeline GPUs must be an integer >= 1, got 0"),
        (("1f1b", 2, 4, 2), r"1f1b schedule has one chunk per GPU; virtual_stages=2"),
        (("gpipe", 2, 4, 3), r"gpipe schedule has one chunk per GPU; virtual_stages=3"),
        (("1f1b", 2, 4, 0), r"virtual_stages must be an integer >= 1, got 0"),
        (("interleaved-1f1b", 2, 4, 1), r"interleaved-1f1b schedule needs virtual_stages >= 2"),
        (("interleaved-1f1b", 4, 3, 2), r"cannot run 3 microbatches on 4 GPUs"),
    ],
)
def test_argument_errors(args, pattern):
    with pytest.raises(ProfileError, match=pattern):
        pipeline_order(*args)


def test_interleaved_accepts_exactly_as_many_microbatches_as_gpus():
    orders = pipeline_order("interleaved-1f1b", 4, 4, 2)
    assert orders == ref_interleaved(4, 4, 2)


def test_error_message_lists_known_schedules():
    with pytest.raises(ProfileError) as info:
        pipeline_order("pipedream", 2, 2)
    for name in perseus.SCHEDULES:
        assert name in str(info.value)

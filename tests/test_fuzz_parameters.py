"""Fuzzing optimize's parameters, each case in its own process under a memory limit and a timeout.

A case builds a small profile (times, energies and blocking power scaled to
extremes), calls `perseus.optimize` with hostile or valid sizes, unit times,
schedules, refine flags, progress periods and budgets, then queries the
frontier with `plan_for` / `energy_at` (NaN, strings, None, huge values).
It runs in a child forked by tests/fuzz_sandbox.py, with RLIMIT_AS at
1.5 GiB above what perseus needs and a 20 s timeout. It must end in a valid
frontier (checked in the child) or a clean error: a `ProfileError`, or a
`TypeError` that perseus raised itself for a wrong type. A crash, a
timeout, MemoryError, OverflowError, a pybind "incompatible function
arguments" TypeError or any other exception fails the case. A second
fuzzer drives the core (`_core.Problem`) directly with extreme values the
Python checks would stop, to show the core refuses them by itself.
"""

from __future__ import annotations

import math
import re

import pytest
from fuzz_sandbox import Sandbox
from fuzz_support import fuzz_settings, tally
from hypothesis import given
from hypothesis import strategies as st

TIMEOUT_S = 20.0
MEMORY_BYTES = 3 << 29  # 1.5 GiB
NAN = math.nan
HUGE_INT = 10**400


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox()
    yield box
    box.close()


def hostile(*valid):
    """One of `valid` (four times in five), or a value no parameter should take."""
    bad = st.one_of(
        st.sampled_from(
            [0, -1, NAN, math.inf, -math.inf, 5e-324, 1e-300, 1e300, 1.7976931348623157e308]
        ),
        st.sampled_from([2**31, 2**63, HUGE_INT, True, False, None, "4", "1ms", 1j, [4], 2.5]),
    )
    return st.tuples(st.integers(0, 4), st.sampled_from(valid), bad).map(
        lambda choice: choice[2] if choice[0] == 4 else choice[1]
    )


profile_args = st.fixed_dictionaries(
    {
        "stages": st.sampled_from([1, 2, 4]),
        "time_scale": st.sampled_from([1.0, 0.5, 1e-3, 1e-4, 100.0]),
        "energy_scale": st.sampled_from([1.0, 1e-6, 1e3, 1e7]),
        "power": hostile(50.0, 0.0, 10_000.0, 300.0),
    }
)
BUDGET_FIELDS = [
    "multi_unit_steps", "units_per_option_gap", "max_unit_divisor", "max_solver_units",
    "candidate_energy_resolution", "candidate_max_spacing_units", "tight_chain_coarsening",
    "local_search_work_per_element", "local_search_work_floor", "local_search_floor_computations",
    "local_search_floor_exponent",
    "local_search_floor_exponent_below", "local_search_coarse_options",
    "local_search_work_cap", "local_search_max_grid",
    "local_search_rounds", "hull_search_share", "hull_search_deadlines",
    "hull_search_work_per_computation",
    "plan_energy_resolution", "no_such_field",
]  # fmt: skip
options = st.fixed_dictionaries(
    {"microbatches": hostile(1, 2, 3, 4, 6)},
    optional={
        "schedule": st.sampled_from(["1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "", None, 1]),
        "virtual_stages": hostile(1, 2),
        "unit_time_s": hostile(1e-3, 1e-4, 2e-3, 1e-5, 1e-9, 1e-2),
        "refine": st.sampled_from([True, False, "no", 1, 0, None, "yes"]),
        "progress_period_s": hostile(0.1, 0.0, 5.0),
        "budgets": st.one_of(
            st.none(),
            st.dictionaries(st.sampled_from(BUDGET_FIELDS), hostile(1, 2, 0.5, 100), max_size=2),
            st.sampled_from([[], "fast", 3]),
        ),
    },
)
queries = st.lists(hostile(0.2, 0.25, 1.0), min_size=1, max_size=3).map(lambda q: [*q, NAN])

CLEAN = {"ProfileError", "TypeError"}


def judge(result, what) -> str:
    """Fail unless `result` is a valid frontier or a clean error; return its class for the tally."""
    kind = result[0]
    assert kind in ("returned", "raised"), f"{what}: {result}"
    if kind == "raised":
        name, message, trace = result[1], result[2], result[3]
        assert name in CLEAN, f"{what}: {name}: {message}\n{trace}"
        assert message, f"{what}: {message!r}"
        assert "\n" not in message, f"{what}: {message!r}"
        assert "incompatible function arguments" not in message, f"{what}: {message}"
        head = re.split(r"[ =:,\[]", message)[0][:30]
        return f"{name} ({head})"
    answers = result[1]["answers"]
    for answer in answers:
        assert answer[1] == "returned" or answer[2] in ("ValueError", "TypeError"), answer
    nan_answers = [a for a in answers if a[1] == "returned" and math.isnan(a[2])]
    assert not nan_answers, answers
    return "valid frontier"


@fuzz_settings(80)
@given(profile=profile_args, kwargs=options, asked=queries)
def test_fuzz_optimize_parameters(sandbox, profile, kwargs, asked):
    what = f"optimize({profile}, {kwargs})"
    result = sandbox.run(
        "optimize", profile, kwargs, asked, timeout_s=TIMEOUT_S, memory_bytes=MEMORY_BYTES
    )
    outcome = judge(result, what)
    if outcome == "valid frontier":
        # plan_for / energy_at refuse NaN (the last query) with a message, never the slowest plan.
        assert [a[1] for a in result[1]["answers"][-2:]] == ["raised", "raised"], result
    tally(outcome)


# The issue's cases, each once (some are also in the strategies above).
ISSUE_CASES = [
    ({}, {"microbatches": 10**6}, r"ProfileError"),
    ({}, {"microbatches": 4, "unit_time_s": 1e-9}, r"ProfileError"),
    ({}, {"microbatches": HUGE_INT}, r"ProfileError"),
    ({}, {"microbatches": 4, "unit_time_s": HUGE_INT}, r"ProfileError"),  # found by the fuzzer
    ({}, {"microbatches": 4, "refine": "no"}, r"TypeError"),
    ({"power": 1.7976931348623157e308}, {"microbatches": 4}, r"ProfileError"),
    ({"time_scale": 1e14}, {"microbatches": 4}, r"ProfileError"),
    ({"time_scale": 1e300}, {"microbatches": 4}, r"ProfileError"),
    ({"energy_scale": 1.7e308}, {"microbatches": 4}, r"ProfileError"),
    ({}, {"microbatches": 4, "budgets": {"max_solver_units": NAN}}, r"ProfileError"),
    ({}, {"microbatches": 4, "budgets": {"local_search_rounds": 2**70}}, r"ProfileError"),
    ({}, {"microbatches": 4, "progress_period_s": 1e300}, r"ProfileError"),
    ({}, {"microbatches": 4}, r"valid frontier"),
]


@pytest.mark.parametrize(
    ("profile", "kwargs", "expected"),
    ISSUE_CASES,
    ids=[f"{p or ''}{k}"[:60] for p, k, _ in ISSUE_CASES],
)
def test_issue_parameter_cases(sandbox, profile, kwargs, expected):
    args = {"stages": 2, "time_scale": 1.0, "energy_scale": 1.0, "power": 50.0, **profile}
    result = sandbox.run(
        "optimize", args, kwargs, [0.2, NAN], timeout_s=TIMEOUT_S, memory_bytes=MEMORY_BYTES
    )
    outcome = judge(result, f"{args} {kwargs}")
    tally(outcome)
    assert outcome.startswith(expected), result


# --- the core alone --------------------------------------------------------------------

extreme_time = st.sampled_from([1e-300, 5e-324, 1e-9, 1e-3, 1e-2, 1.0, 1e6, 1e14, 1e300, 1.7e308])
extreme_energy = st.sampled_from([5e-324, 1e-300, 1e-3, 1.0, 1e8, 1e300, 1.7976931348623157e308])


@st.composite
def core_case(draw):
    base = draw(extreme_time)
    times = sorted({base * f for f in (1.0, 1.3, 1.7) if math.isfinite(base * f)})
    if len(times) < 2:
        times = [base * 0.5, base]
    top = draw(extreme_energy)
    energies = [top * f for f in (1.0, 0.8, 0.6)][: len(times)]
    power = draw(st.sampled_from([0.0, 10.0, 1e4, 1e300, 1.7976931348623157e308]))
    unit = draw(st.sampled_from([5e-324, 1e-300, 1e-12, 1e-3, base / 10, base, 1e300]))
    return times, energies, power, unit, draw(st.sampled_from([1, 2, 4]))


@fuzz_settings(60)
@given(case=core_case())
def test_fuzz_the_core_refuses_what_overflows(sandbox, case):
    result = sandbox.run("core", *case, timeout_s=TIMEOUT_S, memory_bytes=MEMORY_BYTES)
    assert result[0] in ("returned", "raised"), f"core{case}: {result}"
    if result[0] == "raised":
        # std::invalid_argument arrives as ValueError with the core's message.
        assert result[1] == "ValueError", f"core{case}: {result[1]}: {result[2]}\n{result[3]}"
        tally(f"ValueError ({result[2][:40]})")
    else:
        tally("valid frontier")

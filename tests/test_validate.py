"""The numeric-argument rule every module shares (python/perseus/_validate.py)."""

from __future__ import annotations

import decimal
import fractions
import math

import numpy as np
import pytest
from perseus._validate import distinct_seconds, integer, is_integer, is_real, real, seconds_up
from perseus.errors import ProfileError


@pytest.mark.parametrize(
    "value", [0, 1.5, -2, np.float32(0.25), np.int64(7), fractions.Fraction(1, 3)]
)
def test_real_numbers_are_accepted_as_floats(value):
    assert is_real(value)
    result = real(value, "x")
    assert type(result) is float
    assert result == float(value)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "1.0", None, 1j, [1.0]])
def test_bools_and_non_numbers_are_refused(value):
    assert not is_real(value)
    with pytest.raises(TypeError, match=r"^unit_time_s must be a number of seconds, got "):
        real(value, "unit_time_s", what="a number of seconds", type_error=TypeError)
    with pytest.raises(ValueError, match=r"^unit_time_s must be"):
        real(value, "unit_time_s")  # without type_error: the one error class


def test_nan_and_infinities():
    with pytest.raises(ValueError, match=r"^x must be a number, got NaN$"):
        real(math.nan, "x", finite=False)
    with pytest.raises(ValueError, match=r"got inf$"):
        real(math.inf, "x")
    assert real(math.inf, "x", finite=False) == math.inf
    # An integer beyond the float range counts as an infinity of its sign.
    assert real(-(2**1100), "x", finite=False) == -math.inf
    with pytest.raises(ValueError, match=r"^x must be a number in 0\.\.10, got 1"):
        real(2**1100, "x", low=0, high=10)


def test_ranges_are_inclusive_and_named():
    assert real(0, "w", low=0, high=10.0) == 0.0
    assert real(10, "w", low=0, high=10.0) == 10.0
    with pytest.raises(
        ProfileError, match=r"^blocking_power_w must be a number of watts in 0\.\.10000, got -1$"
    ):
        real(
            -1,
            "blocking_power_w",
            what="a number of watts",
            low=0,
            high=10_000.0,
            error=ProfileError,
        )
    with pytest.raises(ValueError, match=r"^w must be a number >= 0\.5, got 0\.25$"):
        real(0.25, "w", low=0.5)
    with pytest.raises(ValueError, match=r"^w must be a number <= 2, got 3$"):
        real(3, "w", high=2)


def test_integers():
    assert integer(np.int32(3), "n", low=1) == 3
    assert type(integer(np.int64(3), "n")) is int
    assert is_integer(4)
    assert not is_integer(True)
    assert not is_integer(4.0)
    with pytest.raises(ProfileError, match=r"^microbatches must be an integer >= 1, got 0$"):
        integer(0, "microbatches", low=1, error=ProfileError)
    for bad in (True, 3.0, "3", None):
        with pytest.raises(ValueError, match=r"^n must be an integer, got "):
            integer(bad, "n")
    with pytest.raises(TypeError, match=r"^f must be whole MHz in 1\.\.100000, got 1410\.5$"):
        integer(1410.5, "f", what="whole MHz", low=1, high=100_000, type_error=TypeError)
    with pytest.raises(ValueError, match=r"in 1\.\.100000, got 100001$"):
        integer(100_001, "f", what="whole MHz", low=1, high=100_000, type_error=TypeError)


@pytest.mark.parametrize("significant", [None, 1, 6, 15])
def test_seconds_up_is_never_below_and_at_most_one_step_above(significant):
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            rng.uniform(0, 10, 2000),
            10.0 ** rng.uniform(-12, 30, 2000),
            [0.1, 0.3, 1.0, 0.6232060999999999],
        ]
    )
    for value in values.tolist():
        text = seconds_up(value, significant=significant)
        assert float(text) >= value, (value, text)
        # Without `significant`: 4 decimals, or 3 significant digits below 0.1.
        step = 10.0 ** (
            min(-4, math.floor(math.log10(value)) - 2)
            if significant is None
            else math.floor(math.log10(value)) - significant + 1
        )
        assert float(text) - value <= step * (1 + 1e-9) + abs(value) * 1e-15, (value, text)
    assert (
        seconds_up(0.1) == "0.1000"
    )  # from the shortest decimal, not the float's exact 0.1000000000000000055
    assert seconds_up(0.6232060999999999) == "0.6233"
    # Plans of a tiny profile stay apart (both were 0.0001).
    assert (seconds_up(4.2e-5), seconds_up(8.01e-5), seconds_up(0.00123)) == (
        "0.0000420",
        "0.0000801",
        "0.00123",
    )


def test_seconds_up_keeps_to_its_own_decimal_context():
    # Extremes that overflowed the default context or rounding, and a caller's
    # low precision with Inexact trapped, which must change nothing.
    assert float(seconds_up(1e24)) >= 1e24
    assert float(seconds_up(1.7976931348623157e308, significant=6)) == 1.7976931348623157e308
    with decimal.localcontext() as context:
        context.prec = 4
        context.traps[decimal.Inexact] = True
        assert seconds_up(0.6232060999999999, significant=6) == "0.623207"


def test_distinct_seconds_shows_two_numbers_and_a_time_that_is_met():
    rng = np.random.default_rng(11)
    for b in rng.uniform(1e-3, 100, 2000).tolist():
        a = float(np.nextafter(b, 0)) if rng.random() < 0.5 else b * (1 - rng.uniform(1e-12, 0.5))
        shown_a, shown_b = distinct_seconds(a, b)
        assert float(shown_a) < float(shown_b), (a, b, shown_a, shown_b)
        assert float(shown_b) >= b

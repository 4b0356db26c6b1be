"""Checks of numeric arguments: one rule for every module.

A number here is a real number that is not a bool (``True`` is an ``int`` to
Python, never a count or a time to a user); numpy scalars and Fractions are
welcome. Errors name the argument, say what was expected with its range, and
show what came: ``microbatches must be an integer >= 1, got 0``. Callers pick
the exception class their API documents (``ProfileError`` for profile and
pipeline arguments, ``ValueError`` elsewhere), and optionally a separate one
for a value of the wrong type (``TypeError``).
"""

from __future__ import annotations

import decimal
import math
import numbers
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # annotations only: typing.TypeGuard needs Python 3.10
    from typing_extensions import TypeGuard

__all__ = ["distinct_seconds", "integer", "is_integer", "is_real", "real", "seconds_up"]


def is_real(value: object) -> TypeGuard[float]:
    """Whether `value` is a real number and not a bool.

    Type checkers then treat it as a float; numpy scalars and Fractions pass too
    and behave as one in arithmetic and comparisons.
    """
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integer(value: object) -> TypeGuard[int]:
    """Whether `value` is an integer and not a bool (numpy integers pass: type
    checkers then treat it as an int)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bound(limit: float) -> str:
    return str(limit) if isinstance(limit, int) else f"{limit:g}"


def _limits(low: Optional[float], high: Optional[float]) -> str:
    if low is not None and high is not None:
        return f" in {_bound(low)}..{_bound(high)}"
    if low is not None:
        return f" >= {_bound(low)}"
    if high is not None:
        return f" <= {_bound(high)}"
    return ""


def _shown(value: object) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return repr(value)


def distinct_seconds(a: float, b: float) -> tuple[str, str]:
    """`a` and `b` (seconds) with as few significant digits as tell them apart (6 at
    least): an error that names a deadline and the time it misses must not print two
    equal numbers. `b`, the time a plan takes, is rounded up, so that a deadline
    copied from the message is met by that plan."""
    for digits in (6, 9, 12, 15):
        shown = f"{a:.{digits}g}", seconds_up(b, significant=digits)
        if shown[0] != shown[1] and float(shown[0]) < float(shown[1]):
            return shown
    return repr(a), repr(b)


def seconds_up(value: float, *, significant: Optional[int] = None, decimals: int = 4) -> str:
    """`value` (s) written with `decimals` decimals (with the default 4, more
    below 0.01 s, so that at least 3 significant digits show), or `significant`
    significant digits (at most 15), rounded up.

    For times a user may copy into a deadline: ``--deadline`` of what
    `perseus show` prints for a plan is then met by that plan (rounding to
    the nearest would print 0.6232 for a plan that takes 0.62320610 s, and
    the plan would be refused). The extra decimals keep plans of a tiny
    profile apart: with 4 alone, every time under 0.1 ms showed as 0.0001.
    """
    if not math.isfinite(value) or value == 0:
        return f"{value:g}" if significant is not None else f"{value:.{decimals}f}"
    if significant is None:
        decimals = max(decimals, 2 - math.floor(math.log10(abs(value))))
    # The shortest decimal that reads back as `value` (0.1, not the float's
    # exact 0.1000000000000000055...), so that 0.1 is not shown as 0.1001.
    shortest = decimal.Decimal(repr(float(value)))
    last_digit = -decimals if significant is None else shortest.adjusted() - significant + 1
    # Our own context: a caller's decimal settings (a low precision, trapped
    # Inexact) must not change or break this, and any double fits 400 digits.
    context = decimal.Context(prec=400, Emax=999, Emin=-999)
    step = decimal.Decimal(1).scaleb(last_digit, context=context)
    up = shortest.quantize(step, rounding=decimal.ROUND_CEILING, context=context)
    text = f"{float(up):.{significant}g}" if significant is not None else f"{up:.{decimals}f}"
    # `up` is at or above a decimal that reads back as `value`, so the float
    # read from `text` is never below it; checked all the same (and rounding
    # the largest doubles up overflows).
    return text if value <= float(text) < math.inf else repr(float(value))


def real(
    value: object,
    name: str,
    *,
    what: str = "a number",
    low: Optional[float] = None,
    high: Optional[float] = None,
    finite: bool = True,
    error: type[Exception] = ValueError,
    type_error: Optional[type[Exception]] = None,
) -> float:
    """`value` as a float, or `error` naming `name`.

    Refuses bools and non-numbers (with `type_error` when given), NaN, infinities
    unless `finite` is false, and values outside ``low..high`` (inclusive). An
    integer beyond the float range counts as an infinity of its sign.
    """
    message = f"{name} must be {what}{_limits(low, high)}, got {_shown(value)}"
    if not is_real(value):
        raise (type_error or error)(message)
    try:
        number = float(value)
    except OverflowError:  # an int or Fraction beyond the float range
        number = math.inf if value > 0 else -math.inf
    if math.isnan(number) or (finite and math.isinf(number)):
        raise error(message)
    if (low is not None and number < low) or (high is not None and number > high):
        raise error(message)
    return number


def integer(
    value: object,
    name: str,
    *,
    what: str = "an integer",
    low: Optional[int] = None,
    high: Optional[int] = None,
    error: type[Exception] = ValueError,
    type_error: Optional[type[Exception]] = None,
) -> int:
    """`value` as an int (numpy integers welcome), or `error` naming `name`.

    Refuses bools, non-integers (with `type_error` when given; ``3.0`` is not an
    integer here) and values outside ``low..high`` (inclusive).
    """
    message = f"{name} must be {what}{_limits(low, high)}, got {_shown(value)}"
    if not is_integer(value):
        raise (type_error or error)(message)
    number = int(value)  # an Integral: int() is exact
    if (low is not None and number < low) or (high is not None and number > high):
        raise error(message)
    return number

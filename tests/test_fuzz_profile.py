"""Fuzzing the profile readers: every input is a valid Profile or a clean, located error.

`Profile.from_csv` gets mutated CSV files (fields swapped for hostile
tokens, rows cut, columns shuffled, raw bytes), `Profile.from_records`
hostile Python values of every type. Each must end in a `Profile` whose
every value lies within `LIMITS`, or in a `ProfileError` whose message names
the file (or ``records``), and for a bad row its line (``records[i]``) and
field. Any other exception type is a failure. A likely unit slip may warn
with a `ProfileWarning`, nothing else.
"""

from __future__ import annotations

import decimal
import fractions
import math
import re
import warnings

import numpy as np
import pytest
from fuzz_support import fuzz_settings, tally
from hypothesis import given
from hypothesis import strategies as st
from perseus import LIMITS, Profile, ProfileError
from perseus.profile import INSTRUCTIONS, ProfileWarning

pytestmark = pytest.mark.filterwarnings("ignore::perseus.profile.ProfileWarning")

FUZZ = fuzz_settings(150)
COLUMNS = ("stage", "instruction", "frequency", "time", "energy")
VALID_ROWS = [
    (s, k, f, t * (1.0 + 0.3 * j), e * (1.0 - 0.2 * j))
    for s in range(2)
    for k, t, e in (("forward", 0.010, 5.0), ("backward", 0.020, 10.0))
    for j, f in enumerate((1410, 1200, 1000))
]
FIELDS = ("stage", "frequency", "time", "energy", "instruction")
# A field is one of these, a number in or out of range, or any short text.
HOSTILE_TOKENS = [
    "",
    " ",
    "nan",
    "NaN",
    "-inf",
    "Infinity",
    "1e400",
    "-0",
    "0",
    "0.0",
    "1e-320",
    "4.9e-324",
    "2.2250738585072014e-308",
    "1.7976931348623157e308",
    "4294968706",
    "2147483648",
    "9223372036854775808",
    "-1",
    "1_410",
    "１４１０",
    "٣",
    "0x10",
    "1e",
    ".",
    "+",
    "--1",
    "1.0.0",
    "1,410",
    '"1410"',
    "forward",
    "backward",
    "Forward",
    "forward ",
    "\x00",
    "\u00a0",
    "1" * 70,
    "9" * 400,
    "3.0",
    "1410.5",
    "1e308",
    "\u22121",
]


def check_profile(profile: Profile) -> None:
    """Everything a valid Profile promises."""
    assert profile.num_stages >= 1
    assert 0 <= profile.blocking_power_w <= LIMITS.max_blocking_power_w
    for stage in range(profile.num_stages):
        for instruction in INSTRUCTIONS:
            for opts in (profile.measured(stage, instruction), profile.options(stage, instruction)):
                assert len(opts) >= 1
                assert opts.frequency_mhz.dtype == np.int64
                assert np.all(opts.frequency_mhz >= LIMITS.min_frequency_mhz)
                assert np.all(opts.frequency_mhz <= LIMITS.max_frequency_mhz)
                assert np.all(np.isfinite(opts.time_s))
                assert np.all(np.isfinite(opts.energy_j))
                assert np.all(opts.time_s >= LIMITS.min_time_s)
                assert np.all(opts.time_s <= LIMITS.max_time_s)
                assert np.all(opts.energy_j > 0)
                assert np.all(opts.energy_j <= LIMITS.max_energy_j)
            useful = profile.options(stage, instruction)
            assert np.all(np.diff(useful.time_s) > 0)  # fastest first


def outcome(call) -> str:
    """Run `call`; return "profile" or the ProfileError's message, failing on anything else."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ProfileWarning)
        try:
            profile = call()
        except ProfileError as error:
            message = str(error)
            assert message, repr(message)
            assert "\n" not in message, repr(message)
            field = re.search(r"field '(\w+)'", message)
            tally(f"ProfileError ({field.group(1) if field else 'whole input'})")
            return message
    check_profile(profile)
    tally("valid profile")
    return "profile"


HEADER = ",".join(COLUMNS)


def render(rows, header=HEADER) -> str:
    return "".join(line + "\n" for line in [header, *(",".join(map(str, r)) for r in rows)])


def file_outcome(tmp_path, data: bytes) -> str:
    path = tmp_path / "fuzz.csv"
    path.write_bytes(data)
    result = outcome(lambda: Profile.from_csv(path, blocking_power_w=50.0))
    if result != "profile":
        assert result.startswith(f"{path}"), result  # names the file
        if re.match(rf"{re.escape(str(path))}, line \d+", result):
            # A row error names the field, or says what is wrong with the whole row.
            assert re.match(
                rf"{re.escape(str(path))}, line \d+(, field '\w+'| \(header\))?: ", result
            ), result
    return result


# --- CSV files -----------------------------------------------------------------

field_value = st.one_of(
    st.sampled_from(HOSTILE_TOKENS),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)


@st.composite
def mutated_csv(draw) -> bytes:
    rows = [list(r) for r in VALID_ROWS]
    for _ in range(draw(st.integers(0, 4))):
        row = draw(st.integers(0, len(rows) - 1))
        column = draw(st.integers(0, len(COLUMNS) - 1))
        rows[row][column] = draw(field_value)
    text = render(rows)
    lines = text.splitlines(keepends=True)
    action = draw(st.sampled_from(["none", "truncate", "drop", "duplicate", "header", "extra"]))
    if action == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif action == "drop":
        del lines[draw(st.integers(0, len(lines) - 1))]
        text = "".join(lines)
    elif action == "duplicate":
        lines.insert(draw(st.integers(1, len(lines))), lines[draw(st.integers(1, len(lines) - 1))])
        text = "".join(lines)
    elif action == "header":
        names = draw(st.permutations([*COLUMNS, draw(st.sampled_from((*COLUMNS, "x")))]))
        text = render(rows, ",".join(names[: draw(st.integers(0, 6))]))
    elif action == "extra":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from([",", '"', "\n", "\r", ",,\n", "\x00"])) + text[at:]
    return text.encode("utf-8", "surrogatepass")


@FUZZ
@given(data=mutated_csv())
def test_fuzz_csv_is_a_profile_or_a_located_error(tmp_path, data):
    file_outcome(tmp_path, data)


@FUZZ
@given(data=st.binary(max_size=600))
def test_fuzz_csv_bytes(tmp_path, data):
    file_outcome(tmp_path, render(VALID_ROWS[:4]).encode() + data)
    file_outcome(tmp_path, data)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("time", "1e-320", r"field 'time': must be between 1e-06 and 3600 s"),  # subnormal
        ("time", "4.9e-324", r"field 'time': must be between"),
        ("time", "1e14", r"field 'time': must be between"),
        ("time", "1e300", r"field 'time': must be between"),
        ("time", "1" + "0" * 400, r"field 'time': 401 characters is too long"),
        ("energy", "1.7976931348623157e308", r"field 'energy': must be > 0 and at most 1e\+08"),
        ("energy", "1e308", r"field 'energy': must be > 0"),
        ("frequency", "4294968706", r"field 'frequency': must be 1\.\.100000 MHz"),  # 2^32 + 1410
        ("frequency", "2147483648", r"field 'frequency': must be 1\.\.100000 MHz"),  # 2^31
        ("frequency", "9223372036854775808", r"field 'frequency': must be 1\.\.100000 MHz"),
        ("frequency", "1_410", r"field 'frequency': '1_410' is not a number"),
        ("frequency", "１４１０", r"field 'frequency': '１４１０' is not a number"),
        ("stage", "٣", r"field 'stage': '٣' is not a number"),
        ("time", "0.0_1", r"field 'time': '0\.0_1' is not a number"),
    ],
)
def test_issue_cases_in_a_csv(tmp_path, field, value, message):
    rows = [list(r) for r in VALID_ROWS]
    rows[2][COLUMNS.index(field)] = value
    result = file_outcome(tmp_path, render(rows).encode())
    assert re.search(rf", line 4, {message}", result), result


# --- records ---------------------------------------------------------------------

hostile_value = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([2**1100, -(2**1100), 2**63, 2**64 + 1410]),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.sampled_from(HOSTILE_TOKENS),
    st.sampled_from(
        [
            None,
            True,
            False,
            1j,
            b"1410",
            [1410],
            (0.01,),
            {},
            object(),
            np.float32(0.01),
            np.int64(1410),
            np.uint64(2**64 - 1),
            np.float64("nan"),
            np.array(0.01),
            np.array([1, 2]),
            decimal.Decimal("0.01"),
            fractions.Fraction(1, 100),
            fractions.Fraction(10**400, 3),
            np.bool_(True),
            np.longdouble("1e400"),
        ]
    ),
)


@st.composite
def hostile_records(draw):
    records: list = [list(r) for r in VALID_ROWS]
    for _ in range(draw(st.integers(0, 3))):
        records[draw(st.integers(0, len(records) - 1))][draw(st.integers(0, 4))] = draw(
            hostile_value
        )
    shape = draw(st.sampled_from(["tuple", "dict", "list", "short", "long", "junk", "dictx"]))
    out = []
    for r in records:
        if shape == "dict":
            out.append(dict(zip(COLUMNS, r)))
        elif shape == "dictx":
            out.append({**dict(zip(COLUMNS, r)), draw(hostile_value.filter(_hashable)): 1})
        else:
            out.append(tuple(r))
    if shape == "short":
        out[draw(st.integers(0, len(out) - 1))] = tuple(records[0][: draw(st.integers(0, 4))])
    elif shape == "long":
        out[0] = (*out[0], 1)
    elif shape == "junk":
        out[draw(st.integers(0, len(out) - 1))] = draw(hostile_value)
    return out


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return value not in COLUMNS


@FUZZ
@given(
    records=hostile_records(),
    power=st.tuples(st.integers(0, 4), hostile_value).map(lambda c: c[1] if c[0] == 4 else 50.0),
)
def test_fuzz_records_are_a_profile_or_a_located_error(records, power):
    result = outcome(lambda: Profile.from_records(records, blocking_power_w=power))
    if result != "profile":
        assert result.startswith(("records", "blocking_power_w")), result
        if result.startswith("records["):
            assert re.match(r"records\[\d+\](, field '\w+')?: ", result), result


@pytest.mark.parametrize(
    "power",
    [1.7976931348623157e308, 1e300, 10_000.001, -1e-300, math.nan, math.inf, "50", 2**1100],
    ids=["DBL_MAX", "1e300", "10000.001", "-1e-300", "nan", "inf", "str", "2**1100"],
)
def test_blocking_power_out_of_range(power):
    result = outcome(lambda: Profile.from_records(VALID_ROWS, blocking_power_w=power))
    assert result.startswith("blocking_power_w must be a number of watts in 0..10000"), result


def test_one_row_in_ms_is_reported():
    rows = [list(r) for r in VALID_ROWS]
    rows[1][3] *= 1000.0  # this row's time in ms
    with pytest.warns(ProfileWarning) as caught:
        Profile.from_records(rows, blocking_power_w=50.0)
    assert any(
        re.search(r"records\[1\]: .* over 20x off the median", str(w.message)) for w in caught
    )

"""Tests for perseus.profile: parsing, validation, the useful-option filter, CSV output."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import perseus
import pytest
from perseus.errors import ProfileError
from perseus.profile import INSTRUCTIONS, Profile, StageOptions

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HEADER = "stage,instruction,frequency,time,energy"

# Two stages, two frequencies each, nothing dominated. Data rows are lines 2..9.
VALID_ROWS = [
    "0,forward,1410,0.010,5.0",
    "0,forward,1200,0.012,4.0",
    "0,backward,1410,0.020,10.0",
    "0,backward,1200,0.024,8.0",
    "1,forward,1410,0.011,5.5",
    "1,forward,1200,0.013,4.5",
    "1,backward,1410,0.021,11.0",
    "1,backward,1200,0.025,9.0",
]


def write(tmp_path, lines, name="prof.csv"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def load(path, blocking_power_w=50.0):
    return Profile.from_csv(path, blocking_power_w=blocking_power_w)


def csv_error(tmp_path, lines):
    """Write ``lines``, expect from_csv to fail, return (path, message)."""
    path = write(tmp_path, lines)
    with pytest.raises(ProfileError) as info:
        load(path)
    return str(path), str(info.value)


def records_error(records, blocking_power_w=50.0):
    with pytest.raises(ProfileError) as info:
        Profile.from_records(records, blocking_power_w=blocking_power_w)
    return str(info.value)


def with_row(index, row):
    """VALID_ROWS with data row ``index`` (0-based; file line index + 2) replaced."""
    rows = list(VALID_ROWS)
    rows[index] = row
    return [HEADER, *rows]


def test_profile_error_is_value_error():
    assert issubclass(ProfileError, ValueError)


# --- reading valid files -------------------------------------------------------


def test_valid_file_loads(tmp_path):
    profile = load(write(tmp_path, [HEADER, *VALID_ROWS]), blocking_power_w=62.5)
    assert profile.num_stages == 2
    assert profile.blocking_power_w == 62.5
    assert profile.source == str(tmp_path / "prof.csv")
    assert profile.num_dropped == 0
    assert profile.frequencies_mhz == (1200, 1410)
    opts = profile.options(1, "backward")
    assert opts.frequency_mhz.tolist() == [1410, 1200]
    assert opts.time_s.tolist() == [0.021, 0.025]
    assert opts.energy_j.tolist() == [11.0, 9.0]
    assert opts.frequency_mhz.dtype == np.int64
    assert opts.time_s.dtype == np.float64
    assert len(opts) == 2


def test_columns_in_any_order_and_blank_lines(tmp_path):
    lines = ["energy,time,frequency,instruction,stage", ""]
    for row in VALID_ROWS:
        stage, instr, freq, time, energy = row.split(",")
        lines += [f"{energy}, {time} ,{freq},{instr},{stage}", "  "]
    expected = load(write(tmp_path, [HEADER, *VALID_ROWS], "b.csv"))
    assert_same_options(load(write(tmp_path, lines)), expected)


def test_integral_float_stage_and_frequency_accepted(tmp_path):
    profile = load(write(tmp_path, with_row(0, "0.0,forward,1410.0,0.010,5.0")))
    assert profile.options(0, "forward").frequency_mhz.tolist() == [1410, 1200]


def test_repr_summarises(tmp_path):
    text = repr(load(write(tmp_path, [HEADER, *VALID_ROWS])))
    assert "num_stages=2" in text
    assert "1200..1410 MHz" in text
    assert "measured=8" in text
    assert "useful=8" in text
    assert "blocking_power_w=50" in text
    assert "prof.csv" in text


def test_arrays_are_read_only(tmp_path):
    opts = load(write(tmp_path, [HEADER, *VALID_ROWS])).options(0, "forward")
    for array in (opts.frequency_mhz, opts.time_s, opts.energy_j):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1


# --- which options are useful -----------------------------------------------------


def test_filter_drops_dominated_rows_and_sorts_fastest_first(tmp_path):
    rows = [
        "0,forward,900,0.030,6.0",  # slower and costlier than 1200: dropped
        "0,forward,1410,0.010,5.0",
        "0,forward,1200,0.012,4.0",
        "0,forward,1300,0.012,4.5",  # same time as 1200, costlier: dropped
        "0,forward,1000,0.020,3.0",
        "0,backward,1410,0.020,10.0",
        "0,backward,1350,0.021,10.0",  # slower, same energy: cheaper over a fixed time
    ]
    profile = load(write(tmp_path, [HEADER, *rows]))
    fwd = profile.options(0, "forward")
    assert fwd.frequency_mhz.tolist() == [1410, 1200, 1000]
    assert fwd.time_s.tolist() == [0.010, 0.012, 0.020]
    assert fwd.energy_j.tolist() == [5.0, 4.0, 3.0]
    assert profile.options(0, "backward").frequency_mhz.tolist() == [1410, 1350]
    assert profile.num_dropped == 2
    assert profile.frequencies_mhz == (900, 1000, 1200, 1300, 1350, 1410)


def test_filter_keeps_slower_option_that_costs_less_than_idling():
    # 1200 MHz takes 2 ms more and 0.05 J more than 1410 MHz. With 50 W of
    # blocking power, idling those 2 ms costs 0.1 J: running slowly is cheaper.
    rows = ["0,forward,1410,0.010,5.0", "0,forward,1200,0.012,5.05", *VALID_ROWS[2:4]]
    kept = Profile.from_records([r.split(",") for r in rows], blocking_power_w=50.0)
    assert kept.options(0, "forward").frequency_mhz.tolist() == [1410, 1200]
    # With 20 W, the 2 ms cost only 0.04 J of idling: 1200 MHz is useless.
    dropped = kept.with_blocking_power(20.0)
    assert dropped.options(0, "forward").frequency_mhz.tolist() == [1410]
    assert dropped.blocking_power_w == 20.0
    # The measured rows stay, whatever is kept.
    assert dropped.measured(0, "forward").frequency_mhz.tolist() == [1410, 1200]
    assert dropped.with_blocking_power(50.0).options(0, "forward") == kept.options(0, "forward")


def test_filter_exact_tie_keeps_higher_frequency(tmp_path):
    rows = [
        "0,forward,1200,0.010,5.0",
        "0,forward,1395,0.010,5.0",
        "0,forward,1300,0.010,5.0",
        "0,backward,1410,0.020,10.0",
    ]
    profile = load(write(tmp_path, [HEADER, *rows]))
    assert profile.options(0, "forward").frequency_mhz.tolist() == [1395]
    assert profile.num_dropped == 2


def test_filter_is_per_stage_and_instruction(tmp_path):
    # Stage 1's 1200 MHz row would be dominated by stage 0's numbers; it must stay.
    rows = list(VALID_ROWS)
    rows[5] = "1,forward,1200,0.013,6.0"
    rows[4] = "1,forward,1410,0.011,6.5"
    profile = load(write(tmp_path, [HEADER, *rows]))
    assert profile.options(1, "forward").frequency_mhz.tolist() == [1410, 1200]
    assert profile.num_dropped == 0


def test_measured_lists_every_row_highest_frequency_first(tmp_path):
    rows = [
        "0,forward,1200,0.012,4.0",
        "0,forward,900,0.030,6.0",
        "0,forward,1410,0.010,5.0",
        *VALID_ROWS[2:],
    ]
    profile = load(write(tmp_path, [HEADER, *rows]))
    measured = profile.measured(0, "forward")
    assert measured.frequency_mhz.tolist() == [1410, 1200, 900]
    assert measured.time_s.tolist() == [0.010, 0.012, 0.030]
    assert 900 not in profile.options(0, "forward").frequency_mhz


def test_stage_options_checks_its_arrays():
    with pytest.raises(ValueError, match="same, non-zero length"):
        StageOptions(frequency_mhz=[1410], time_s=[0.01, 0.02], energy_j=[5.0, 4.0])
    with pytest.raises(ValueError, match="integers"):
        StageOptions(frequency_mhz=[1410.5], time_s=[0.01], energy_j=[5.0])
    with pytest.raises(ValueError, match="twice"):
        StageOptions(frequency_mhz=[1410, 1410], time_s=[0.01, 0.02], energy_j=[5.0, 4.0])
    with pytest.raises(ValueError, match="time_s"):
        StageOptions(frequency_mhz=[1410], time_s=[1e-9], energy_j=[5.0])
    with pytest.raises(ValueError, match="frequency_mhz"):
        StageOptions(frequency_mhz=[2**31], time_s=[0.01], energy_j=[5.0])


def test_stage_options_copies_input():
    freq = np.array([1410, 1200])
    opts = StageOptions(frequency_mhz=freq, time_s=[0.01, 0.02], energy_j=[5.0, 4.0])
    freq[0] = 1
    assert opts.frequency_mhz.tolist() == [1410, 1200]
    assert freq.flags.writeable


# --- bad files -----------------------------------------------------------------


def test_empty_file(tmp_path):
    path, msg = csv_error(tmp_path, [])
    assert path in msg
    assert "empty" in msg


def test_whitespace_only_file_is_empty(tmp_path):
    path, msg = csv_error(tmp_path, ["", "   ", ""])
    assert path in msg
    assert "empty" in msg


def test_header_missing_column(tmp_path):
    header = "stage,instruction,frequency,time"
    path, msg = csv_error(tmp_path, [header, *(row.rsplit(",", 1)[0] for row in VALID_ROWS)])
    assert path in msg
    assert "line 1" in msg
    assert "missing column(s) 'energy'" in msg


def test_header_extra_column(tmp_path):
    path, msg = csv_error(tmp_path, [HEADER + ",power", *(row + ",300" for row in VALID_ROWS)])
    assert path in msg
    assert "line 1" in msg
    assert "unexpected column(s) 'power'" in msg


def test_header_wrong_case_reports_both_sides(tmp_path):
    _, msg = csv_error(tmp_path, ["stage,instruction,frequency,Time,energy", *VALID_ROWS])
    assert "missing column(s) 'time'" in msg
    assert "unexpected column(s) 'Time'" in msg


def test_header_repeated_column(tmp_path):
    path, msg = csv_error(tmp_path, [HEADER + ",time", *(row + ",1" for row in VALID_ROWS)])
    assert path in msg
    assert "repeated column(s) 'time'" in msg


def test_row_with_wrong_number_of_fields(tmp_path):
    path, msg = csv_error(tmp_path, with_row(1, "0,forward,1200,0.012"))
    assert f"{path}, line 3" in msg
    assert "expected 5 fields, got 4" in msg


def test_line_numbers_count_blank_lines(tmp_path):
    path, msg = csv_error(tmp_path, [HEADER, "", VALID_ROWS[0], "", "0,forward,abc,0.012,4.0"])
    assert f"{path}, line 5, field 'frequency'" in msg


@pytest.mark.parametrize(
    ("row", "field", "value"),
    [
        ("x,forward,1200,0.012,4.0", "stage", "'x'"),
        ("0,forward,fast,0.012,4.0", "frequency", "'fast'"),
        ("0,forward,1200,12ms,4.0", "time", "'12ms'"),
        ("0,forward,1200,0.012,4J", "energy", "'4J'"),
    ],
)
def test_non_numeric_value(tmp_path, row, field, value):
    path, msg = csv_error(tmp_path, with_row(1, row))
    assert f"{path}, line 3, field '{field}'" in msg
    assert f"{value} is not a number" in msg


def test_a_bad_measurement_names_its_stage_and_instruction(tmp_path):
    path, msg = csv_error(tmp_path, with_row(1, "2,backward,1200,0.012,-4.0"))
    assert f"{path}, line 3, field 'energy'" in msg
    assert msg.endswith("; a row of stage 2 backward"), msg
    # Before the stage and instruction are known, the message cannot name them.
    _, msg = csv_error(tmp_path, with_row(1, "0,sideways,1200,0.012,4.0"))
    assert "a row of stage" not in msg


def test_an_unclosed_quote_is_blamed_on_the_line_that_opened_it(tmp_path):
    lines = with_row(1, '0,forward,"1200,0.012,4.0')
    path, msg = csv_error(tmp_path, lines)
    assert f"{path}, line 3: a quoted field runs on to line {len(lines)}" in msg, msg
    assert "closing quote" in msg


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        # A quote left open in the header: not the whole file in the message.
        (
            ['stage,"instruction,frequency,time,energy', *VALID_ROWS],
            "line 1: a quoted field runs on to line 9",
        ),
        # On the last row: the field runs to the end of the file.
        (
            [HEADER, *VALID_ROWS, '0,forward,"1100,0.013,3.9'],
            "line 10: a quoted field runs on to the end of the file",
        ),
        # A quote closed on the next line: no profile field spans lines.
        (
            [HEADER, '0,forward,"1100', '",0.013,3.9', *VALID_ROWS],
            "line 2: a quoted field runs on to line 3",
        ),
        # Two lone quotes are not a blank line.
        ([HEADER, '"', '"', *VALID_ROWS], "line 2: a quoted field runs on to line 3"),
    ],
)
def test_quoted_fields_that_span_lines_are_refused_where_they_open(tmp_path, lines, where):
    path, msg = csv_error(tmp_path, lines)
    assert msg.startswith(f"{path}, {where} "), msg
    assert len(msg) < 300, msg


def test_line_ends_of_any_kind_still_parse(tmp_path):
    for ending in ("\r\n", "\r"):
        path = tmp_path / f"ends-{len(ending)}.csv"
        path.write_bytes(ending.join([HEADER, *VALID_ROWS, ""]).encode())
        assert load(path).num_stages == 2


def test_empty_value(tmp_path):
    path, msg = csv_error(tmp_path, with_row(1, "0,forward,1200,,4.0"))
    assert f"{path}, line 3, field 'time'" in msg
    assert "empty" in msg


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize("field", ["stage", "frequency", "time", "energy"])
def test_non_finite_value(tmp_path, field, bad):
    values = dict(stage="0", instruction="forward", frequency="1200", time="0.012", energy="4.0")
    values[field] = bad
    path, msg = csv_error(tmp_path, with_row(1, ",".join(values.values())))
    assert f"{path}, line 3, field '{field}'" in msg
    assert "not finite" in msg


@pytest.mark.parametrize(
    ("field", "bad", "expected"),
    [
        ("time", "0", "must be between 1e-06 and 3600 s"),
        ("time", "-0.012", "must be between 1e-06 and 3600 s"),
        ("time", "1e-320", "must be between 1e-06 and 3600 s"),  # subnormal
        ("time", "12", None),
        ("time", "1e14", "a unit slip"),
        ("energy", "0", "must be > 0"),
        ("energy", "-4", "must be > 0"),
        ("energy", "1.7976931348623157e308", "at most 1e+08 J"),
    ],
)
def test_time_and_energy_ranges(tmp_path, field, bad, expected):
    values = dict(stage="0", instruction="forward", frequency="1200", time="0.012", energy="4.0")
    values[field] = bad
    lines = with_row(1, ",".join(values.values()))
    if expected is None:  # in range: accepted, but 4 J over 12 s is 0.33 W: a unit slip
        with pytest.warns(perseus.ProfileWarning, match=r"line 3: energy 4 J over 12 s .* outside"):
            assert load(write(tmp_path, lines)).measured(0, "forward").time_s.max() == 12.0
        return
    path, msg = csv_error(tmp_path, lines)
    assert f"{path}, line 3, field '{field}'" in msg
    assert expected in msg


@pytest.mark.parametrize(
    "bad", ["１３００", "٣", "1_300", "0x514", "1300 ", " 1 300", "+-1", "1e", "--1", "١٣٠٠"]
)
def test_only_plain_ascii_numbers(tmp_path, bad):
    path = write(tmp_path, with_row(1, f"0,forward,{bad},0.012,4.0"))
    if bad.strip() != bad and bad.strip().isascii() and bad.strip().isdigit():
        load(path)  # surrounding spaces are fine
        return
    with pytest.raises(ProfileError, match="field 'frequency'"):
        load(path)


def test_unit_slip_row_is_reported(tmp_path):
    # One row in ms among rows in s: accepted (it is in range) but named.
    rows = [HEADER, *VALID_ROWS, "0,forward,1300,11.0,4.5", "0,forward,1000,0.020,3.0"]
    with pytest.warns(perseus.ProfileWarning) as caught:
        load(write(tmp_path, rows))
    assert any(
        re.search(r"prof\.csv, line 10: .*1300 MHz.*unit slip", str(w.message)) for w in caught
    )
    assert all("line 10" in str(w.message) for w in caught)  # only the slipped row


def test_oversized_numbers_are_profile_errors():
    for record, field in [
        ((0, "forward", 2**63, 0.012, 4.0), "frequency"),
        ((0, "forward", 1200, 10**400, 4.0), "time"),
        ((0, "forward", 1200, 0.012, 10**400), "energy"),
        ((2**40, "forward", 1200, 0.012, 4.0), "stage"),
    ]:
        records = valid_records()
        records[1] = record
        assert f"records[1], field '{field}'" in records_error(records)
    digits = "9" * 400
    assert "too long for a number" in records_error([(0, "forward", 1200, digits, 4.0)])


def test_binary_junk_is_a_profile_error(tmp_path):
    junk = tmp_path / "junk.csv"
    junk.write_bytes(b"\0" * 100_000)
    with pytest.raises(ProfileError, match="longer than 4096 characters"):
        load(junk)
    if os.path.exists("/dev/zero"):
        with pytest.raises(ProfileError, match="/dev/zero, line 1: longer than"):
            load("/dev/zero")


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ("0", "must be 1..100000 MHz"),
        ("-1200", "must be 1..100000 MHz"),
        ("4294968706", "must be 1..100000 MHz"),
        ("1200.5", "expected an integer"),
    ],
)
def test_bad_frequency(tmp_path, bad, expected):
    path, msg = csv_error(tmp_path, with_row(1, f"0,forward,{bad},0.012,4.0"))
    assert f"{path}, line 3, field 'frequency'" in msg
    assert expected in msg


@pytest.mark.parametrize(
    ("bad", "expected"), [("-1", "must be in 0..2^30-1"), ("0.5", "expected an integer")]
)
def test_bad_stage(tmp_path, bad, expected):
    path, msg = csv_error(tmp_path, with_row(1, f"{bad},forward,1200,0.012,4.0"))
    assert f"{path}, line 3, field 'stage'" in msg
    assert expected in msg


def test_unknown_instruction(tmp_path):
    path, msg = csv_error(tmp_path, with_row(1, "0,fwd,1200,0.012,4.0"))
    assert f"{path}, line 3, field 'instruction'" in msg
    assert "'fwd'" in msg
    assert "'forward'" in msg
    assert "'backward'" in msg


def test_duplicate_row_names_both_lines(tmp_path):
    path, msg = csv_error(tmp_path, [HEADER, *VALID_ROWS, "0,backward,1200,0.030,9.0"])
    assert f"{path}, line 10" in msg
    assert "first given at line 5" in msg
    assert "stage 0" in msg
    assert "'backward'" in msg
    assert "1200 MHz" in msg


@pytest.mark.parametrize(
    ("stage", "instruction"), [(0, "forward"), (0, "backward"), (1, "backward")]
)
def test_stage_missing_an_instruction(tmp_path, stage, instruction):
    rows = [row for row in VALID_ROWS if not row.startswith(f"{stage},{instruction},")]
    path, msg = csv_error(tmp_path, [HEADER, *rows])
    assert path in msg
    assert f"stage {stage} has no '{instruction}' rows" in msg


def test_stage_ids_not_contiguous(tmp_path):
    rows = [row.replace("1,", "4,", 1) if row.startswith("1,") else row for row in VALID_ROWS]
    path, msg = csv_error(tmp_path, [HEADER, *rows])
    assert path in msg
    assert "missing 1, 2, 3" in msg


def test_stage_ids_not_starting_at_zero(tmp_path):
    rows = [row.replace("0,", "2,", 1) if row.startswith("0,") else row for row in VALID_ROWS]
    _, msg = csv_error(tmp_path, [HEADER, *rows])
    assert "missing 0" in msg
    assert "missing 0, 1" not in msg


def test_huge_stage_gap_lists_a_few_ids(tmp_path):
    rows = [row.replace("1,", "1000000,", 1) if row.startswith("1,") else row for row in VALID_ROWS]
    _, msg = csv_error(tmp_path, [HEADER, *rows])
    assert "missing 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ... (999999 in all)" in msg


def test_header_only(tmp_path):
    path, msg = csv_error(tmp_path, [HEADER])
    assert path in msg
    assert "no data rows" in msg


def test_not_utf8(tmp_path):
    path = tmp_path / "bin.csv"
    path.write_bytes(HEADER.encode() + b"\n0,forward,1410,0.01,\xff\xfe\n")
    with pytest.raises(ProfileError, match="UTF-8") as info:
        load(path)
    assert str(path) in str(info.value)
    # The line it is on, also far into a file the reader decodes ahead in blocks.
    assert f"{path}, line 2: not UTF-8 text (" in str(info.value)
    rows = "".join(f"{s},forward,{1000 + k},0.01,1.0\n" for s in range(4) for k in range(400))
    path.write_bytes(HEADER.encode() + b"\n" + rows.encode() + b"0,backward,1410,0.01,\xff\n")
    with pytest.raises(ProfileError, match=r", line 1602: not UTF-8 text \(.* at byte \d+\)"):
        load(path)


@pytest.mark.parametrize(
    "bad", [-1.0, math.nan, math.inf, "60", None, True, 1.7976931348623157e308, 10_001]
)
def test_bad_blocking_power(tmp_path, bad):
    path = write(tmp_path, [HEADER, *VALID_ROWS])
    with pytest.raises(ProfileError, match="blocking_power_w"):
        load(path, blocking_power_w=bad)
    assert "blocking_power_w" in records_error([row.split(",") for row in VALID_ROWS], bad)


def test_old_blocking_power_keyword_still_works_with_a_warning(tmp_path):
    from perseus import _deprecation

    _deprecation._warned.discard("blocking_power=")
    with pytest.deprecated_call(match="blocking_power_w"):
        profile = Profile.from_csv(write(tmp_path, [HEADER, *VALID_ROWS]), blocking_power=60.0)
    assert profile.blocking_power_w == 60.0
    with pytest.raises(ProfileError, match="give blocking_power_w only"):
        Profile.from_csv(
            write(tmp_path, [HEADER, *VALID_ROWS]), blocking_power=6.0, blocking_power_w=6.0
        )


def test_zero_blocking_power_allowed(tmp_path):
    assert load(write(tmp_path, [HEADER, *VALID_ROWS]), blocking_power_w=0).blocking_power_w == 0.0


# --- records -----------------------------------------------------------------


def valid_records():
    return [
        (int(s), i, int(f), float(t), float(e))
        for s, i, f, t, e in (row.split(",") for row in VALID_ROWS)
    ]


def test_from_records_tuples_mappings_and_numpy_match_csv(tmp_path):
    expected = load(write(tmp_path, [HEADER, *VALID_ROWS]))
    tuples = valid_records()
    mappings = [dict(zip(HEADER.split(","), r)) for r in tuples]
    numpy_values = [
        (np.int64(s), i, np.int32(f), np.float64(t), np.float32(e)) for s, i, f, t, e in tuples
    ]
    strings = [row.split(",") for row in VALID_ROWS]
    for records in (tuples, mappings, iter(strings)):
        profile = Profile.from_records(records, blocking_power_w=50.0)
        assert profile.source is None
        assert_same_options(profile, expected)
    from_numpy = Profile.from_records(numpy_values, blocking_power_w=50.0)
    assert from_numpy.options(1, "backward").energy_j.tolist() == [11.0, 9.0]


def test_from_records_filters_useless_options():
    # 1000 MHz: 8 ms slower than 1200 MHz and 0.5 J more; idling 8 ms at 50 W costs 0.4 J.
    records = [*valid_records(), (0, "forward", 1000, 0.02, 4.5)]
    profile = Profile.from_records(records, blocking_power_w=50.0)
    assert profile.num_dropped == 1
    assert 1000 not in profile.options(0, "forward").frequency_mhz
    assert 1000 in profile.measured(0, "forward").frequency_mhz


@pytest.mark.parametrize(
    ("bad", "fragments"),
    [
        ((0, "forward", 1200, "x", 4.0), ["records[1], field 'time'", "not a number"]),
        ((0, "forward", 1200, math.nan, 4.0), ["records[1], field 'time'", "not finite"]),
        ((0, "forward", 1200, 0.012, 0.0), ["records[1], field 'energy'", "must be > 0"]),
        ((0, "forward", 1200.5, 0.012, 4.0), ["records[1], field 'frequency'", "integer"]),
        ((0, "forward", 0, 0.012, 4.0), ["records[1], field 'frequency'", "1..100000 MHz"]),
        ((-1, "forward", 1200, 0.012, 4.0), ["records[1], field 'stage'", "0..2^30-1"]),
        ((True, "forward", 1200, 0.012, 4.0), ["records[1], field 'stage'", "not a number"]),
        ((0, "Forward", 1200, 0.012, 4.0), ["records[1], field 'instruction'", "'forward'"]),
        ((0, "forward", 1200, 0.012), ["records[1]", "expected 5 fields", "got 4"]),
        (42, ["records[1]", "mapping or a 5-tuple", "int"]),
        ("0,forward,1200,0.012,4.0", ["records[1]", "mapping or a 5-tuple", "str"]),
        (
            {"stage": 0, "instruction": "forward", "frequency": 1200, "time": 0.012},
            ["records[1]", "missing field(s) 'energy'"],
        ),
        (
            {
                "stage": 0,
                "instruction": "forward",
                "frequency": 1200,
                "time": 0.012,
                "energy": 4.0,
                "power": 1,
            },
            ["records[1]", "unexpected field(s) 'power'"],
        ),
        (
            (0, "forward", 1410, 0.011, 4.9),
            ["records[1]", "duplicate", "first given at records[0]"],
        ),
    ],
)
def test_from_records_bad_record(bad, fragments):
    records = valid_records()
    records[1] = bad
    msg = records_error(records)
    for fragment in fragments:
        assert fragment in msg


def test_from_records_whole_profile_checks():
    assert "records: no data rows" in records_error([])
    no_backward = [r for r in valid_records() if not (r[0] == 1 and r[1] == "backward")]
    assert "stage 1 has no 'backward' rows" in records_error(no_backward)
    gap = [(3 if r[0] == 1 else 0, *r[1:]) for r in valid_records()]
    assert "missing 1, 2" in records_error(gap)


# --- options() -------------------------------------------------------------------


@pytest.mark.parametrize("stage", [-1, 2, 1.0, "0", True])
def test_options_bad_stage(tmp_path, stage):
    profile = load(write(tmp_path, [HEADER, *VALID_ROWS]))
    expected = f"stage {stage!r} is not in this profile; stages are 0..1"
    with pytest.raises(ValueError, match=re.escape(expected)):
        profile.options(stage, "forward")


def test_options_bad_instruction(tmp_path):
    profile = load(write(tmp_path, [HEADER, *VALID_ROWS]))
    with pytest.raises(ValueError, match="unknown instruction 'fwd'"):
        profile.options(0, "fwd")


def test_options_accepts_numpy_stage(tmp_path):
    profile = load(write(tmp_path, [HEADER, *VALID_ROWS]))
    assert profile.options(np.int64(1), "forward") == profile.options(1, "forward")


# --- to_csv --------------------------------------------------------------------


def assert_same_options(a, b):
    assert a.num_stages == b.num_stages
    for stage in range(a.num_stages):
        for instruction in INSTRUCTIONS:
            x, y = a.options(stage, instruction), b.options(stage, instruction)
            np.testing.assert_array_equal(x.frequency_mhz, y.frequency_mhz)
            np.testing.assert_array_equal(x.time_s, y.time_s)  # exact, not approximate
            np.testing.assert_array_equal(x.energy_j, y.energy_j)


def test_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(7)
    records = []
    for stage in range(3):
        for instruction in INSTRUCTIONS:
            times = np.sort(rng.uniform(0.01, 0.05, size=6))
            energies = np.sort(rng.uniform(1.0, 9.0, size=6))[::-1]
            for k in range(6):
                records.append((stage, instruction, 1410 - 30 * k, times[k], energies[k]))
    records.append((0, "forward", 100, 0.5, 100.0))  # useless, but measured: written too
    original = Profile.from_records(records, blocking_power_w=75.0)
    out = tmp_path / "out.csv"
    original.to_csv(out)
    again = load(out, blocking_power_w=75.0)
    assert_same_options(original, again)
    for stage in range(3):
        for instruction in INSTRUCTIONS:
            assert again.measured(stage, instruction) == original.measured(stage, instruction)
    assert again.num_dropped == original.num_dropped >= 1
    lines = out.read_text().splitlines()
    assert lines[0] == HEADER
    assert len(lines) == 1 + 3 * 2 * 6 + 1
    assert lines[1].startswith("0,forward,1410,")
    assert sorted(os.listdir(tmp_path)) == ["out.csv"]


def test_to_csv_replaces_existing_file(tmp_path):
    out = tmp_path / "out.csv"
    out.write_text("old contents that are longer than the new file " * 100)
    profile = load(write(tmp_path, [HEADER, *VALID_ROWS]))
    profile.to_csv(str(out))
    ordered = sorted(valid_records(), key=lambda r: (r[0], INSTRUCTIONS.index(r[1]), -r[2]))
    expected = [f"{s},{i},{f},{t!r},{e!r}" for s, i, f, t, e in ordered]
    assert out.read_text().splitlines() == [HEADER, *expected]


def test_to_csv_failure_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    out = tmp_path / "out.csv"
    out.write_text("previous\n")
    profile = load(write(tmp_path, [HEADER, *VALID_ROWS]))

    def fail(_src, _dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        profile.to_csv(out)
    assert out.read_text() == "previous\n"
    assert sorted(os.listdir(tmp_path)) == ["out.csv", "prof.csv"]


# --- example profiles ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "stages", "frequencies"),
    [
        ("gpt3-a100-8stage.csv", 8, (810, 1410, 41)),
        ("small-4stage.csv", 4, (1110, 1410, 11)),
    ],
)
def test_example_profiles_load(name, stages, frequencies):
    profile = load(EXAMPLES / name)
    assert profile.num_stages == stages
    raw_freqs = {int(line.split(",")[2]) for line in (EXAMPLES / name).read_text().splitlines()[1:]}
    low, high, count = frequencies
    assert (min(raw_freqs), max(raw_freqs), len(raw_freqs)) == (low, high, count)
    forward = [profile.options(s, "forward").time_s[0] for s in range(stages)]
    backward = [profile.options(s, "backward").time_s[0] for s in range(stages)]
    assert all(0.015 <= t <= 0.040 for t in forward)
    assert all(1.6 <= b / f <= 2.4 for f, b in zip(forward, backward))
    # First and last stages are the heaviest.
    middle = max(forward[1:-1])
    assert forward[0] > middle
    assert forward[-1] > middle


def test_large_example_has_dominated_low_frequencies():
    profile = load(EXAMPLES / "gpt3-a100-8stage.csv")
    assert profile.num_dropped > 0
    # The lowest clock wastes energy somewhere, even counting blocking power.
    assert any(
        810 not in profile.options(s, i).frequency_mhz for s in range(8) for i in INSTRUCTIONS
    )


@pytest.mark.parametrize(
    ("args", "name"), [([], "gpt3-a100-8stage.csv"), (["--small"], "small-4stage.csv")]
)
def test_example_generator_reproduces_examples(tmp_path, args, name):
    out = tmp_path / name
    subprocess.run(
        [sys.executable, str(EXAMPLES / "make_synthetic_profile.py"), *args, "--output", str(out)],
        check=True,
        timeout=300,
    )
    new, stored = (path.read_text().splitlines() for path in (out, EXAMPLES / name))
    assert new[0] == stored[0] == HEADER
    assert len(new) == len(stored)
    for new_row, stored_row in zip(new[1:], stored[1:]):
        new_fields, stored_fields = new_row.split(","), stored_row.split(",")
        assert new_fields[:3] == stored_fields[:3]
        # Allow a last-digit difference from another platform's libm.
        np.testing.assert_allclose(
            [float(x) for x in new_fields[3:]], [float(x) for x in stored_fields[3:]], rtol=1e-5
        )


def test_profile_errors_from_optimize_name_the_file(tmp_path):
    """Issue 26 item 5: 'every stage has a single useful option' did not name the file."""
    import perseus

    path = tmp_path / "one-clock.csv"
    rows = ["stage,instruction,frequency,time,energy"] + [
        f"{s},{k},1410,0.01,3.0" for s in range(2) for k in ("forward", "backward")
    ]
    path.write_text("\n".join(rows) + "\n")
    profile = perseus.Profile.from_csv(path, blocking_power_w=70.0)
    with pytest.raises(perseus.ProfileError, match=rf"^{path}: .*single useful option"):
        perseus.optimize(profile, microbatches=2)


def _rows(time_s, energy_j, mhz=(1410, 1200, 1000)):
    return [
        (s, k, f, time_s * (1 + 0.2 * j) * (2 if k == "backward" else 1), energy_j * (1 - 0.1 * j))
        for s in range(2)
        for k in ("forward", "backward")
        for j, f in enumerate(mhz)
    ]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (_rows(40.0, 12.0), "times in milliseconds"),  # 40 ms written as 40
        (_rows(0.04, 12000.0), "energies in millijoules"),  # 12 J written in mJ
        (_rows(0.04, 5e-324 * 1e300), "W, outside what a GPU draws|milliseconds"),
        (_rows(0.04, 12.0, mhz=(3, 2, 1)), "clock of 3 MHz"),  # GHz, or junk
    ],
)
def test_a_profile_off_by_a_unit_is_reported(rows, message):
    """Issue 26 item 5: a profile all in ms gave '623 s' iterations without a word."""
    with pytest.warns(perseus.ProfileWarning, match=message):
        perseus.Profile.from_records(rows, blocking_power_w=60.0)


def test_a_tiny_energy_row_is_reported():
    rows = _rows(0.04, 12.0)
    rows[0] = (*rows[0][:4], 5e-324)
    with pytest.warns(perseus.ProfileWarning, match="records\\[0\\]: energy 4.94066e-324 J"):
        perseus.Profile.from_records(rows, blocking_power_w=60.0)


def test_non_breaking_space_padding_is_refused(tmp_path):
    path = tmp_path / "nbsp.csv"
    path.write_text("stage,instruction,frequency,time,energy\n0,forward,1410,0.01\u00a0,4.0\n")
    with pytest.raises(perseus.ProfileError, match=r"line 2, field 'time'.*non-breaking space"):
        perseus.Profile.from_csv(path, blocking_power_w=60.0)

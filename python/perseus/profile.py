"""Measured time and energy options of every pipeline stage.

A profile gives, for each pipeline stage (model chunk) and instruction
(``"forward"`` or ``"backward"``), the time in seconds and the energy in joules
that one computation takes at each GPU SM frequency in MHz. Every measured
row is kept (:meth:`Profile.measured`); the solver works with the *useful*
ones (:meth:`Profile.options`).

Which options are useful depends on the blocking power ``P_block``, the power
a GPU draws while it waits on a pipeline neighbour. Over an iteration of
fixed length an option costs its effective energy ``e - P_block * t``, so an
option is useless exactly when another one is no slower and has no higher
effective energy. An option that is slower and uses a little more raw energy
(less than ``P_block`` times the extra time) is still useful: when the GPU
would otherwise wait, computing slowly is cheaper than idling.
:meth:`Profile.with_blocking_power` refilters from the measured rows.

The on-disk format is Zeus's: a CSV file with the header
``stage,instruction,frequency,time,energy`` (columns in any order).
"""

from __future__ import annotations

import csv
import math
import numbers
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import numpy as np

from . import _core
from ._deprecation import warn_renamed
from ._validate import is_integer, is_real, real
from ._zeus_format import COLUMNS, INSTRUCTIONS, write_csv
from .errors import ProfileError

__all__ = [
    "INSTRUCTIONS",
    "LIMITS",
    "Profile",
    "ProfileWarning",
    "StageOptions",
]

_MAX_LISTED_IDS = 10


@dataclass(frozen=True)
class _Limits:
    """What perseus accepts as a measurement, and why.

    Values outside these ranges are almost always a unit slip (ms written as
    s, mJ as J) or a corrupt file; inside them every sum the solver forms
    stays far from overflow.
    """

    min_time_s: float = 1e-6  # below a microsecond no GPU computation is timed
    max_time_s: float = 3600.0  # one computation of an hour is a unit slip
    max_energy_j: float = 1e8  # a 10 kW device for three hours
    min_frequency_mhz: int = 1
    max_frequency_mhz: int = _core.MAX_CLOCK_MHZ  # the switcher's bound, one constant
    max_blocking_power_w: float = 10_000.0
    # What a GPU draws while computing, and its lowest SM clock: outside these a
    # whole profile is reported as a likely unit slip (warnings, not errors).
    min_power_w: float = 1.0
    max_power_w: float = 5_000.0
    min_plausible_frequency_mhz: int = 100
    # An option this many times slower (or faster) than the median of its
    # (stage, instruction) is reported: one row in ms among rows in s is 1000x off.
    outlier_ratio: float = 20.0
    # Files larger than this are refused before reading (a profile is a few
    # hundred rows; /dev/zero or a wrong path should not fill the memory).
    max_file_bytes: int = 256 * 1024 * 1024


LIMITS = _Limits()
"""Accepted ranges of profile values (see `_Limits`)."""


class ProfileWarning(UserWarning):
    """A profile value is suspicious but not invalid (e.g. a likely unit slip)."""


@dataclass(frozen=True, eq=False)
class StageOptions:
    """Measured options of one (stage, instruction).

    Attributes
    ----------
    frequency_mhz : numpy.ndarray
        SM frequency of each option in MHz (int64).
    time_s : numpy.ndarray
        Time of one computation at that frequency in seconds (float64).
    energy_j : numpy.ndarray
        Energy of one computation at that frequency in joules (float64).

    The arrays are read-only copies of what was passed in, in that order.
    :meth:`Profile.options` returns the useful options fastest first;
    :meth:`Profile.measured` every row, highest frequency first.

    Raises
    ------
    ValueError
        If the arrays are empty, differ in length, or hold values outside
        `LIMITS`, or a frequency appears twice.
    """

    frequency_mhz: np.ndarray
    time_s: np.ndarray
    energy_j: np.ndarray

    def __post_init__(self) -> None:
        for name in ("frequency_mhz", "time_s", "energy_j"):
            # Numbers only: "1400" or True would be read as a clock or a time.
            kind = np.asarray(getattr(self, name)).dtype.kind
            if kind not in "iuf":
                raise ValueError(
                    f"{name} must hold numbers, got {np.asarray(getattr(self, name)).dtype} values"
                )
        freq = np.array(self.frequency_mhz, copy=True)
        if freq.dtype.kind not in "iu":
            as_float = np.asarray(freq, dtype=np.float64)
            if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
                raise ValueError("frequency_mhz must hold integers (MHz)")
        if freq.size and (
            np.any(freq < LIMITS.min_frequency_mhz) or np.any(freq > LIMITS.max_frequency_mhz)
        ):
            raise ValueError(
                f"frequency_mhz must be between {LIMITS.min_frequency_mhz} and "
                f"{LIMITS.max_frequency_mhz} MHz"
            )
        freq = freq.astype(np.int64)
        time = np.array(self.time_s, dtype=np.float64, copy=True)
        energy = np.array(self.energy_j, dtype=np.float64, copy=True)
        if not (freq.ndim == time.ndim == energy.ndim == 1):
            raise ValueError("frequency_mhz, time_s and energy_j must be 1-D")
        if not (len(freq) == len(time) == len(energy) >= 1):
            raise ValueError(
                "frequency_mhz, time_s and energy_j must have the same, non-zero length"
            )
        if not np.all((time >= LIMITS.min_time_s) & (time <= LIMITS.max_time_s)):
            raise ValueError(
                f"time_s must be between {LIMITS.min_time_s:g} and {LIMITS.max_time_s:g} s"
            )
        if not np.all((energy > 0) & (energy <= LIMITS.max_energy_j)):
            raise ValueError(f"energy_j must be > 0 and at most {LIMITS.max_energy_j:g} J")
        if len(np.unique(freq)) != len(freq):
            raise ValueError("frequency_mhz lists a frequency twice")
        for name, values in (("frequency_mhz", freq), ("time_s", time), ("energy_j", energy)):
            values.setflags(write=False)
            object.__setattr__(self, name, values)

    def __len__(self) -> int:
        """Number of options."""
        return len(self.frequency_mhz)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StageOptions):
            return NotImplemented
        return (
            np.array_equal(self.frequency_mhz, other.frequency_mhz)
            and np.array_equal(self.time_s, other.time_s)
            and np.array_equal(self.energy_j, other.energy_j)
        )

    __hash__ = None  # type: ignore[assignment]  # holds arrays

    def _take(self, positions: np.ndarray) -> StageOptions:
        return StageOptions(
            self.frequency_mhz[positions], self.time_s[positions], self.energy_j[positions]
        )


class _Row(NamedTuple):
    """One validated measurement and where it came from."""

    where: str  # full location for messages, e.g. "p.csv, line 3"
    short: str  # location relative to the source, e.g. "line 3"
    stage: int
    instruction: str
    frequency: int
    time: float
    energy: float


def _undecodable(name: str) -> tuple[object, object]:
    """(line, byte) of the first byte in file `name` that is not UTF-8: the text
    reader decodes ahead in blocks, so its own line count is no guide."""
    try:
        with open(name, "rb") as file:
            data = file.read()  # its size was checked before it was parsed
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return data.count(b"\n", 0, error.start) + 1, error.start
    except OSError:
        pass
    return "?", "?"


class Profile:
    """Measured time/energy options per stage, and the blocking power.

    Build one with :meth:`from_csv` or :meth:`from_records`; they validate
    every value and report problems as :class:`~perseus.errors.ProfileError`.

    Parameters
    ----------
    measured : Mapping[tuple[int, str], StageOptions]
        Every measured option keyed by ``(stage, instruction)``; every stage
        ``0..num_stages-1`` needs both ``"forward"`` and ``"backward"``.
    blocking_power_w : float
        Power one GPU draws while blocked on communication, in watts
        (``0 <= P <= LIMITS.max_blocking_power_w``).
    source : str, optional
        File the profile was read from.
    """

    def __init__(
        self,
        measured: Mapping[tuple[int, str], StageOptions],
        *,
        blocking_power_w: Optional[float] = None,
        source: Optional[str] = None,
        blocking_power: Optional[float] = None,
        num_dropped: Optional[int] = None,
    ) -> None:
        if num_dropped is not None:
            warn_renamed("Profile(num_dropped=...)", "nothing: it is computed")
        if not isinstance(measured, Mapping):
            raise TypeError(
                "measured must be a mapping of (stage, instruction) to StageOptions, got "
                f"{type(measured).__name__}"
            )
        self._blocking_power_w = _blocking_power_argument(blocking_power_w, blocking_power)
        for key, value in measured.items():
            if not isinstance(value, StageOptions):
                raise ProfileError(
                    f"measured[{key!r}] must be StageOptions, got {type(value).__name__}"
                )
        self._num_stages = _check_stages(measured.keys(), source or "Profile")
        # Highest frequency first: among exactly equal options the filter keeps the first.
        self._measured = {
            (int(stage), instruction): value._take(np.argsort(-value.frequency_mhz, kind="stable"))
            for (stage, instruction), value in measured.items()
        }
        self._source = source
        self._options = {
            key: value._take(
                _core.useful_options(value.time_s, value.energy_j, self._blocking_power_w)
            )
            for key, value in self._measured.items()
        }

    @property
    def num_stages(self) -> int:
        """Number of stages; ids run ``0..num_stages-1``."""
        return self._num_stages

    @property
    def blocking_power_w(self) -> float:
        """Power drawn by a GPU while it waits on a neighbour, in watts."""
        return self._blocking_power_w

    @property
    def blocking_power(self) -> float:
        """Deprecated: use `blocking_power_w`."""
        warn_renamed("Profile.blocking_power", "Profile.blocking_power_w")
        return self._blocking_power_w

    @property
    def source(self) -> Optional[str]:
        """Path of the file the profile was read from, or None."""
        return self._source

    @property
    def num_dropped(self) -> int:
        """Number of measured rows that are not useful at this blocking power."""
        return sum(len(self._measured[k]) - len(self._options[k]) for k in self._measured)

    @property
    def frequencies_mhz(self) -> tuple[int, ...]:
        """Every measured frequency in MHz, ascending."""
        present: set[int] = set()
        for opts in self._measured.values():
            present.update(int(f) for f in opts.frequency_mhz)
        return tuple(sorted(present))

    def frequencies(self) -> list[int]:
        """Deprecated: use `frequencies_mhz`."""
        warn_renamed("Profile.frequencies()", "Profile.frequencies_mhz")
        return list(self.frequencies_mhz)

    def options(self, stage: int, instruction: str) -> StageOptions:
        """The useful options of one stage and instruction, fastest first.

        Time strictly increases and effective energy ``e - P_block * t``
        strictly falls along them.

        Raises
        ------
        ValueError
            If the stage is out of range or the instruction is unknown.
        """
        return self._options[self._key(stage, instruction)]

    def measured(self, stage: int, instruction: str) -> StageOptions:
        """Every measured option of one stage and instruction, highest frequency first."""
        return self._measured[self._key(stage, instruction)]

    def with_blocking_power(self, blocking_power_w: float) -> Profile:
        """The same measurements with another blocking power (W), refiltered."""
        return Profile(self._measured, blocking_power_w=blocking_power_w, source=self._source)

    def _key(self, stage: int, instruction: str) -> tuple[int, str]:
        if not is_integer(stage) or not 0 <= stage < self._num_stages:
            raise ValueError(
                f"stage {stage!r} is not in this profile; stages are 0..{self._num_stages - 1}"
            )
        if not isinstance(instruction, str) or instruction not in INSTRUCTIONS:
            raise ValueError(
                f"unknown instruction {instruction!r}; expected one of {_quoted(INSTRUCTIONS)}"
            )
        return int(stage), instruction

    @classmethod
    def from_csv(
        cls,
        path: str | os.PathLike[str],
        *,
        blocking_power_w: Optional[float] = None,
        blocking_power: Optional[float] = None,
    ) -> Profile:
        """Read a profile in Zeus's CSV format.

        The file needs exactly the columns ``stage`` (int >= 0),
        ``instruction`` (``forward``/``backward``), ``frequency`` (MHz,
        integer), ``time`` (seconds) and ``energy`` (joules), in any order,
        with plain ASCII numbers within `LIMITS`. Blank lines are skipped.
        A row far slower or faster than the other rows of its stage and
        instruction gets a `ProfileWarning` naming the line (a likely unit slip).

        Parameters
        ----------
        path : str or os.PathLike
            CSV file to read (UTF-8).
        blocking_power_w : float
            Power one GPU draws while blocked on communication, in watts.

        Returns
        -------
        Profile

        Raises
        ------
        ProfileError
            If the file or ``blocking_power_w`` is invalid; the message names
            the file, the 1-based line (the header is line 1) and the field.
        OSError
            If the file cannot be opened.
        """
        power = _blocking_power_argument(blocking_power_w, blocking_power)
        name = os.fsdecode(path)
        with open(name, newline="", encoding="utf-8-sig") as file:
            try:
                size = os.fstat(file.fileno()).st_size
            except OSError:
                size = 0
            if size > LIMITS.max_file_bytes:
                raise ProfileError(
                    f"{name}: {size} bytes is too large for a profile "
                    f"(at most {LIMITS.max_file_bytes} bytes)"
                )
            reader = csv.reader(_capped_lines(file, name))
            try:
                rows = _read_csv(reader, name)
            except csv.Error as err:
                raise ProfileError(
                    f"{name}, line {reader.line_num}: malformed CSV: {err}"
                ) from None
            except UnicodeDecodeError as err:
                line, at = _undecodable(name)
                raise ProfileError(
                    f"{name}, line {line}: not UTF-8 text ({err.reason} at byte {at})"
                ) from None
        return _assemble(cls, rows, origin=name, source=name, blocking_power_w=power)

    @classmethod
    def from_records(
        cls,
        records: Iterable[Any],
        *,
        blocking_power_w: Optional[float] = None,
        blocking_power: Optional[float] = None,
    ) -> Profile:
        """Build a profile from in-memory rows.

        Parameters
        ----------
        records : iterable
            Each item is a mapping with exactly the keys ``stage``,
            ``instruction``, ``frequency`` (MHz), ``time`` (s) and
            ``energy`` (J), or a 5-sequence in that order. Values may be
            numbers or strings.
        blocking_power_w : float
            Power one GPU draws while blocked on communication, in watts.

        Raises
        ------
        ProfileError
            On the same problems :meth:`from_csv` reports; the message names
            the record as ``records[i]`` (0-based) and the field.
        """
        power = _blocking_power_argument(blocking_power_w, blocking_power)
        rows = []
        for index, record in enumerate(records):
            where = f"records[{index}]"
            rows.append(_parse_row(_record_fields(record, where), where, where))
        return _assemble(cls, rows, origin="records", source=None, blocking_power_w=power)

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write every measured row in Zeus's CSV format.

        The file is written to a temporary file in the same directory and
        then renamed over ``path``, so readers never see a partial file.
        Floats are written exactly, so :meth:`from_csv` reads back the same
        profile.
        """
        write_csv(
            path,
            (
                (stage, instruction, int(f), float(t), float(e))
                for (stage, instruction), opts in self._measured.items()
                for f, t, e in zip(opts.frequency_mhz, opts.time_s, opts.energy_j)
            ),
        )

    def __repr__(self) -> str:
        freqs = self.frequencies_mhz
        num_measured = sum(len(opts) for opts in self._measured.values())
        num_useful = sum(len(opts) for opts in self._options.values())
        return (
            f"Profile(num_stages={self._num_stages}, "
            f"frequencies={len(freqs)} in {freqs[0]}..{freqs[-1]} MHz, "
            f"measured={num_measured}, useful={num_useful}, "
            f"blocking_power_w={self._blocking_power_w:g}, source={self._source!r})"
        )


# --- parsing -----------------------------------------------------------------

# Plain ASCII numbers only: Python's int() and float() also take Unicode digits
# ("１４１０", "٣") and underscores ("1_410"), which no profiler writes.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_MAX_FIELD_CHARS = 64  # longer than any number a profiler writes
_MAX_LINE_CHARS = 4096


def _capped_lines(file: Any, name: str) -> Iterable[str]:
    """The file's lines, refusing absurdly long ones (binary junk, /dev/zero)."""
    for number, line in enumerate(iter(lambda: file.readline(_MAX_LINE_CHARS + 1), ""), 1):
        if len(line) > _MAX_LINE_CHARS:
            raise ProfileError(
                f"{name}, line {number}: longer than {_MAX_LINE_CHARS} characters; "
                "is this a profile CSV?"
            )
        yield line


def _read_csv(reader: Any, name: str) -> list[_Row]:
    """Check the header and parse every data row of a CSV reader."""
    row_start = 1
    header = None
    for fields in reader:
        _refuse_runaway_quote(fields, name, row_start, reader.line_num)
        row_start = reader.line_num + 1
        if not _is_blank(fields):
            header = fields
            break
    if header is None:
        raise ProfileError(f"{name}: file is empty; expected the header {','.join(COLUMNS)}")
    header_line = reader.line_num
    names = [field.strip() for field in header]
    where = f"{name}, line {header_line} (header)"
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ProfileError(f"{where}: repeated column(s) {_quoted(repeated)}")
    missing = [c for c in COLUMNS if c not in names]
    extra = [n for n in names if n not in COLUMNS]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing column(s) {_quoted(missing)}")
        if extra:
            problems.append(f"unexpected column(s) {_quoted(extra)}")
        raise ProfileError(f"{where}: {'; '.join(problems)}; expected exactly {','.join(COLUMNS)}")

    rows = []
    for fields in reader:
        _refuse_runaway_quote(fields, name, row_start, reader.line_num)
        row_start = reader.line_num + 1
        if _is_blank(fields):
            continue
        short = f"line {reader.line_num}"
        where = f"{name}, {short}"
        if len(fields) != len(names):
            raise ProfileError(f"{where}: expected {len(names)} fields, got {len(fields)}")
        rows.append(_parse_row(dict(zip(names, fields)), where, short))
    return rows


def _refuse_runaway_quote(fields: list[str], name: str, first_line: int, last_line: int) -> None:
    """A quoted field that holds a line end: a profile's fields are one line each,
    so a quote was left open. Blamed on the line that opened it, without the
    rest of the file the field swallowed."""
    if not any("\n" in field or "\r" in field for field in fields):
        return
    if last_line > first_line:
        where = f"runs on to line {last_line}"
    else:
        where = "runs on to the end of the file"
    raise ProfileError(
        f"{name}, line {first_line}: a quoted field {where} (a profile's fields are "
        'one line each: is a closing quote (") missing?)'
    )


def _record_fields(record: Any, where: str) -> Mapping[str, Any]:
    """Turn one record (mapping or 5-sequence) into a column -> value mapping."""
    if isinstance(record, Mapping):
        missing = [c for c in COLUMNS if c not in record]
        extra = sorted(repr(k) for k in record if k not in COLUMNS)
        if missing or extra:
            problems = []
            if missing:
                problems.append(f"missing field(s) {_quoted(missing)}")
            if extra:
                problems.append(f"unexpected field(s) {', '.join(extra)}")
            raise ProfileError(f"{where}: {'; '.join(problems)}")
        return record
    if isinstance(record, (str, bytes)):
        raise ProfileError(f"{where}: expected a mapping or a 5-tuple, got {type(record).__name__}")
    try:
        values = tuple(record)
    except TypeError:
        raise ProfileError(
            f"{where}: expected a mapping or a 5-tuple, got {type(record).__name__}"
        ) from None
    if len(values) != len(COLUMNS):
        raise ProfileError(
            f"{where}: expected {len(COLUMNS)} fields ({', '.join(COLUMNS)}), got {len(values)}"
        )
    return dict(zip(COLUMNS, values))


def _parse_row(fields: Mapping[str, Any], where: str, short: str) -> _Row:
    """Validate one row's values; ``fields`` maps every column to its raw value."""
    stage = _integer(fields["stage"], where, "stage")
    if not 0 <= stage < 2**30:
        raise ProfileError(f"{where}, field 'stage': must be in 0..2^30-1, got {stage}")
    instruction = fields["instruction"]
    if isinstance(instruction, str):
        instruction = instruction.strip(_ASCII_SPACE)
    if not isinstance(instruction, str) or instruction not in INSTRUCTIONS:
        raise ProfileError(
            f"{where}, field 'instruction': unknown instruction {instruction!r}; "
            f"allowed: {_quoted(INSTRUCTIONS)}"
        )
    try:
        frequency = _integer(fields["frequency"], where, "frequency")
        if not LIMITS.min_frequency_mhz <= frequency <= LIMITS.max_frequency_mhz:
            raise ProfileError(
                f"{where}, field 'frequency': must be {LIMITS.min_frequency_mhz}.."
                f"{LIMITS.max_frequency_mhz} MHz, got {frequency}"
            )
        time = _real(fields["time"], where, "time")
        if not LIMITS.min_time_s <= time <= LIMITS.max_time_s:
            raise ProfileError(
                f"{where}, field 'time': must be between {LIMITS.min_time_s:g} and "
                f"{LIMITS.max_time_s:g} s, got {time!r} (a unit slip?)"
            )
        energy = _real(fields["energy"], where, "energy")
        if not 0 < energy <= LIMITS.max_energy_j:
            raise ProfileError(
                f"{where}, field 'energy': must be > 0 and at most {LIMITS.max_energy_j:g} J, "
                f"got {energy!r}"
            )
    except ProfileError as error:  # which measurement it was, too
        raise ProfileError(f"{error}; a row of stage {stage} {instruction}") from None
    return _Row(where, short, stage, instruction, frequency, time, energy)


_ASCII_SPACE = " \t\r\n"


def _number(value: Any, where: str, field: str) -> int | float:
    """Parse a finite number from an ASCII string or a real number."""
    if isinstance(value, str):
        text = value.strip(_ASCII_SPACE)
        if text != text.strip():  # str.strip and float() also take U+00A0 and other spaces
            raise ProfileError(
                f"{where}, field {field!r}: {value!r} is padded with a non-ASCII space (such as a "
                "non-breaking space, U+00A0, from a spreadsheet); use plain spaces or none"
            )
        if not text:
            raise ProfileError(f"{where}, field {field!r}: is empty")
        if len(text) > _MAX_FIELD_CHARS:
            raise ProfileError(
                f"{where}, field {field!r}: {len(text)} characters is too long for a number"
            )
        if _INTEGER.fullmatch(text):
            return int(text)
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise ProfileError(f"{where}, field {field!r}: {value!r} is not finite")
        if not _DECIMAL.fullmatch(text):
            raise ProfileError(f"{where}, field {field!r}: {value!r} is not a number")
        number = float(text)
    elif not is_real(value):
        raise ProfileError(f"{where}, field {field!r}: {value!r} is not a number")
    elif isinstance(value, numbers.Integral):
        return int(value)
    else:
        try:
            number = float(value)
        except OverflowError:  # a Fraction or other Real beyond the float range
            raise ProfileError(f"{where}, field {field!r}: {value!r} is out of range") from None
    if not math.isfinite(number):
        raise ProfileError(f"{where}, field {field!r}: {value!r} is not finite")
    return number


def _real(value: Any, where: str, field: str) -> float:
    """Parse a number as a float; integers too large for a float are out of range."""
    number = _number(value, where, field)
    try:
        return float(number)
    except OverflowError:
        raise ProfileError(f"{where}, field {field!r}: {value!r} is out of range") from None


def _integer(value: Any, where: str, field: str) -> int:
    """Parse an integer; integral floats such as ``"3.0"`` are accepted."""
    number = _number(value, where, field)
    if isinstance(number, float):
        if not number.is_integer():
            raise ProfileError(f"{where}, field {field!r}: expected an integer, got {value!r}")
        number = int(number)
    return number


def _blocking_power_argument(value: Optional[float], legacy: Optional[float]) -> float:
    """The blocking power from `blocking_power_w`, or the deprecated `blocking_power`."""
    if legacy is not None:
        if value is not None:
            raise ProfileError("give blocking_power_w only (blocking_power is its old name)")
        warn_renamed("blocking_power=", "blocking_power_w=", stacklevel=4)
        value = legacy
    if value is None:
        raise ProfileError("blocking_power_w is required: the power (W) a GPU draws while it waits")
    return check_blocking_power_w(value)


def check_blocking_power_w(value: Any) -> float:
    """`value` as float watts in ``0..LIMITS.max_blocking_power_w``, or `ProfileError`."""
    return real(
        value,
        "blocking_power_w",
        what="a number of watts",
        low=0,
        high=LIMITS.max_blocking_power_w,
        error=ProfileError,
    )


# --- assembling --------------------------------------------------------------


def _assemble(
    cls: type[Profile],
    rows: list[_Row],
    *,
    origin: str,
    source: Optional[str],
    blocking_power_w: float,
) -> Profile:
    """Group validated rows, check them as a whole, build the profile."""
    if not rows:
        raise ProfileError(f"{origin}: no data rows")
    first_seen: dict[tuple[int, str, int], _Row] = {}
    groups: dict[tuple[int, str], list[_Row]] = {}
    for row in rows:
        key = (row.stage, row.instruction, row.frequency)
        if key in first_seen:
            raise ProfileError(
                f"{row.where}: duplicate row for stage {row.stage}, {row.instruction!r}, "
                f"{row.frequency} MHz (first given at {first_seen[key].short})"
            )
        first_seen[key] = row
        groups.setdefault((row.stage, row.instruction), []).append(row)
    _check_stages(groups.keys(), origin)
    for group in groups.values():
        _warn_outliers(group)
    _warn_units(rows, origin)
    measured = {
        key: StageOptions(
            frequency_mhz=np.array([r.frequency for r in group], dtype=np.int64),
            time_s=np.array([r.time for r in group]),
            energy_j=np.array([r.energy for r in group]),
        )
        for key, group in groups.items()
    }
    return cls(measured, blocking_power_w=blocking_power_w, source=source)


def _warn_units(rows: list[_Row], origin: str) -> None:
    """Warn when the profile as a whole looks off by a unit (issue 26 item 5).

    A GPU draws between about `LIMITS.min_power_w` and `LIMITS.max_power_w`
    while it computes and runs its SMs at 100 MHz or more; a profile whose
    typical power (energy / time) is outside that, or whose clocks are
    below it, was almost surely written in another unit.
    """
    powers = sorted(r.energy / r.time for r in rows)
    median = powers[len(powers) // 2]
    if median < LIMITS.min_power_w:
        warnings.warn(
            f"{origin}: the median power of its rows (energy / time) is {median:.3g} W, less "
            "than any GPU draws while computing: are the times in milliseconds (or the "
            "energies in kJ)? perseus reads seconds and joules",
            ProfileWarning,
            stacklevel=4,
        )
    elif median > LIMITS.max_power_w:
        warnings.warn(
            f"{origin}: the median power of its rows (energy / time) is {median:.3g} W, more "
            "than any GPU draws: are the energies in millijoules (or the times in ms while the "
            "energies are in J)? perseus reads seconds and joules",
            ProfileWarning,
            stacklevel=4,
        )
    else:
        odd = [r for r in rows if not LIMITS.min_power_w <= r.energy / r.time <= LIMITS.max_power_w]
        if odd:
            r = odd[0]
            warnings.warn(
                f"{r.where}: energy {r.energy:g} J over {r.time:g} s is {r.energy / r.time:.3g} W, "
                f"outside what a GPU draws ({LIMITS.min_power_w:g}..{LIMITS.max_power_w:g} W)"
                + (f"; {len(odd) - 1} more such rows" if len(odd) > 1 else "")
                + ": a unit slip or a corrupt value?",
                ProfileWarning,
                stacklevel=4,
            )
    slow = [r for r in rows if r.frequency < LIMITS.min_plausible_frequency_mhz]
    if slow:
        warnings.warn(
            f"{slow[0].where}: a clock of {slow[0].frequency} MHz; no GPU runs its SMs below "
            f"{LIMITS.min_plausible_frequency_mhz} MHz: are the clocks in GHz or in another "
            "unit? perseus reads MHz",
            ProfileWarning,
            stacklevel=4,
        )


def _warn_outliers(group: list[_Row]) -> None:
    """Warn about a row far slower or faster than the rest of its (stage, instruction).

    Compared with the group's median time, which a single wrong row cannot
    move: a clock range of 1410 to 210 MHz spans about 7x in time, a row in
    ms among rows in s is 1000x off.
    """
    if len(group) < 3:
        return
    times = sorted(r.time for r in group)
    median = times[len(times) // 2]
    ratio = LIMITS.outlier_ratio
    for row in group:
        if row.time > ratio * median or row.time * ratio < median:
            warnings.warn(
                f"{row.where}: stage {row.stage} {row.instruction} at {row.frequency} MHz takes "
                f"{row.time:g} s, over {ratio:g}x off the median of its other frequencies "
                f"({median:g} s); a unit slip (ms for s)?",
                ProfileWarning,
                stacklevel=4,
            )


def _check_stages(keys: Iterable[tuple[int, str]], origin: str) -> int:
    """Check stage ids run 0..n-1 with both instructions each; return n."""
    keys = set(keys)
    for key in keys:
        if (
            not isinstance(key, tuple)
            or len(key) != 2
            or not is_integer(key[0])
            or key[0] < 0
            or key[1] not in INSTRUCTIONS
        ):
            raise ProfileError(f"{origin}: bad key {key!r}; expected (stage >= 0, instruction)")
    if not keys:
        raise ProfileError(f"{origin}: no stages")
    stages = sorted({int(stage) for stage, _ in keys})
    missing, num_missing = _gaps(stages)
    if num_missing:
        listed = ", ".join(str(s) for s in missing)
        if num_missing > len(missing):
            listed += f", ... ({num_missing} in all)"
        raise ProfileError(
            f"{origin}: stage ids must run from 0 to {stages[-1]} without gaps; missing {listed}"
        )
    for stage in stages:
        for instruction in INSTRUCTIONS:
            if (stage, instruction) not in keys:
                raise ProfileError(f"{origin}: stage {stage} has no {instruction!r} rows")
    return len(stages)


def _gaps(stages: list[int]) -> tuple[list[int], int]:
    """Ids missing from sorted ``stages`` counted from 0: the first few, and how many."""
    listed: list[int] = []
    count = 0
    previous = -1
    for stage in stages:
        gap = stage - previous - 1
        if gap > 0:
            count += gap
            room = _MAX_LISTED_IDS - len(listed)
            listed.extend(range(previous + 1, min(stage, previous + 1 + room)))
        previous = stage
    return listed, count


def _is_blank(fields: list[str]) -> bool:
    return all(not field.strip() for field in fields)


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)

"""Measured time and energy options of every pipeline stage.

A profile gives, for each pipeline stage (model chunk) and instruction
(``"forward"`` or ``"backward"``), the time in seconds and the energy in joules
that one computation takes at each GPU SM frequency in MHz. Only the
Pareto-optimal options are kept: a frequency that is at least as slow *and* at
least as costly as another one can never be part of a useful plan.

The on-disk format is Zeus's: a CSV file with the header
``stage,instruction,frequency,time,energy`` (columns in any order).
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ._files import write_text_atomically
from .errors import ProfileError

__all__ = ["INSTRUCTIONS", "Profile", "StageOptions"]

INSTRUCTIONS = ("forward", "backward")
"""Instruction names, in the order a profile lists them."""

_COLUMNS = ("stage", "instruction", "frequency", "time", "energy")
_MAX_LISTED_IDS = 10


@dataclass(frozen=True, eq=False)
class StageOptions:
    """Pareto-optimal measured options of one (stage, instruction).

    Attributes
    ----------
    frequency_mhz : numpy.ndarray
        SM frequency of each option in MHz (int64).
    time_s : numpy.ndarray
        Time of one computation at that frequency in seconds (float64),
        strictly increasing: the fastest option comes first.
    energy_j : numpy.ndarray
        Energy of one computation at that frequency in joules (float64),
        strictly decreasing.

    The arrays are read-only copies of what was passed in.

    Raises
    ------
    ValueError
        If the arrays are empty, differ in length, hold non-positive or
        non-finite values, or are not a Pareto frontier in the order above.
    """

    frequency_mhz: np.ndarray
    time_s: np.ndarray
    energy_j: np.ndarray

    def __post_init__(self) -> None:
        freq = np.array(self.frequency_mhz, copy=True)
        if freq.dtype.kind not in "iu":
            as_float = freq.astype(np.float64)
            if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
                raise ValueError("frequency_mhz must hold integers (MHz)")
        freq = freq.astype(np.int64)
        time = np.array(self.time_s, dtype=np.float64, copy=True)
        energy = np.array(self.energy_j, dtype=np.float64, copy=True)
        if not (freq.ndim == time.ndim == energy.ndim == 1):
            raise ValueError("frequency_mhz, time_s and energy_j must be 1-D")
        if not (len(freq) == len(time) == len(energy) >= 1):
            raise ValueError(
                "frequency_mhz, time_s and energy_j must have the same, non-zero length"
            )
        if np.any(freq <= 0):
            raise ValueError("frequency_mhz must be > 0 MHz")
        for name, values in (("time_s", time), ("energy_j", energy)):
            if not np.all(np.isfinite(values)) or np.any(values <= 0):
                raise ValueError(f"{name} must be finite and > 0")
        if np.any(np.diff(time) <= 0) or np.any(np.diff(energy) >= 0):
            raise ValueError(
                "options must be Pareto-optimal: time_s strictly increasing, "
                "energy_j strictly decreasing"
            )
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


class _Row(NamedTuple):
    """One validated measurement and where it came from."""

    where: str  # full location for messages, e.g. "p.csv, line 3"
    short: str  # location relative to the source, e.g. "line 3"
    stage: int
    instruction: str
    frequency: int
    time: float
    energy: float


class Profile:
    """Per-stage Pareto-optimal time/energy options and the blocking power.

    Build one with :meth:`from_csv` or :meth:`from_records`; they validate
    every value and report problems as :class:`~perseus.errors.ProfileError`.

    Parameters
    ----------
    options : Mapping[tuple[int, str], StageOptions]
        Options keyed by ``(stage, instruction)``; every stage
        ``0..num_stages-1`` needs both ``"forward"`` and ``"backward"``.
    blocking_power : float
        Power one GPU draws while blocked on communication, in watts (>= 0).
    source : str, optional
        File the profile was read from.
    num_dropped : int, optional
        Measured rows dropped because another option dominated them.

    Attributes
    ----------
    num_stages : int
        Number of stages (model chunks); ids run ``0..num_stages-1``.
    blocking_power : float
        Blocking power in watts.
    source : str or None
        File the profile was read from, if any.
    num_dropped : int
        Rows dropped as Pareto-dominated.
    """

    def __init__(
        self,
        options: Mapping[tuple[int, str], StageOptions],
        *,
        blocking_power: float,
        source: str | None = None,
        num_dropped: int = 0,
    ) -> None:
        self._blocking_power = _check_blocking_power(blocking_power)
        for key, value in options.items():
            if not isinstance(value, StageOptions):
                raise ProfileError(
                    f"options[{key!r}] must be StageOptions, got {type(value).__name__}"
                )
        self._num_stages = _check_stages(options.keys(), source or "Profile")
        self._options = {(int(stage), instr): value for (stage, instr), value in options.items()}
        self._source = source
        self._num_dropped = int(num_dropped)

    @property
    def num_stages(self) -> int:
        """Number of stages; ids run ``0..num_stages-1``."""
        return self._num_stages

    @property
    def blocking_power(self) -> float:
        """Power drawn by a GPU while it waits on a neighbour, in watts."""
        return self._blocking_power

    @property
    def source(self) -> str | None:
        """Path of the file the profile was read from, or None."""
        return self._source

    @property
    def num_dropped(self) -> int:
        """Number of measured rows dropped as Pareto-dominated."""
        return self._num_dropped

    def options(self, stage: int, instruction: str) -> StageOptions:
        """Return the Pareto-optimal options of one stage and instruction.

        Parameters
        ----------
        stage : int
            Stage id in ``0..num_stages-1``.
        instruction : str
            ``"forward"`` or ``"backward"``.

        Returns
        -------
        StageOptions
            Options sorted fastest first.

        Raises
        ------
        ValueError
            If the stage is out of range or the instruction is unknown.
        """
        if (
            isinstance(stage, bool)
            or not isinstance(stage, numbers.Integral)
            or not 0 <= stage < self._num_stages
        ):
            raise ValueError(
                f"stage {stage!r} is not in this profile; stages are 0..{self._num_stages - 1}"
            )
        if not isinstance(instruction, str) or instruction not in INSTRUCTIONS:
            raise ValueError(
                f"unknown instruction {instruction!r}; expected one of {_quoted(INSTRUCTIONS)}"
            )
        return self._options[(int(stage), instruction)]

    def frequencies(self) -> list[int]:
        """Return every frequency (MHz) used by some option, ascending."""
        present: set[int] = set()
        for opts in self._options.values():
            present.update(int(f) for f in opts.frequency_mhz)
        return sorted(present)

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str], *, blocking_power: float) -> Profile:
        """Read a profile in Zeus's CSV format.

        The file needs exactly the columns ``stage`` (int >= 0),
        ``instruction`` (``forward``/``backward``), ``frequency`` (MHz, int > 0),
        ``time`` (seconds, > 0) and ``energy`` (joules, > 0), in any order.
        Blank lines are skipped. Dominated rows are dropped (see
        :attr:`num_dropped`).

        Parameters
        ----------
        path : str or os.PathLike
            CSV file to read (UTF-8).
        blocking_power : float
            Power one GPU draws while blocked on communication, in watts (>= 0).

        Returns
        -------
        Profile

        Raises
        ------
        ProfileError
            If the file or ``blocking_power`` is invalid; the message names
            the file, the 1-based line (the header is line 1) and the field.
        OSError
            If the file cannot be opened.
        """
        power = _check_blocking_power(blocking_power)
        name = os.fsdecode(path)
        with open(name, newline="", encoding="utf-8-sig") as file:
            reader = csv.reader(file)
            try:
                rows = _read_csv(reader, name)
            except csv.Error as err:
                where = f"{name}, line {reader.line_num}"
                raise ProfileError(f"{where}: malformed CSV: {err}") from None
            except UnicodeDecodeError as err:
                raise ProfileError(f"{name}: not UTF-8 text ({err.reason})") from None
        return _assemble(cls, rows, origin=name, source=name, blocking_power=power)

    @classmethod
    def from_records(cls, records: Iterable[Any], *, blocking_power: float) -> Profile:
        """Build a profile from in-memory rows.

        Parameters
        ----------
        records : iterable
            Each item is a mapping with exactly the keys ``stage``,
            ``instruction``, ``frequency`` (MHz), ``time`` (s) and
            ``energy`` (J), or a 5-sequence in that order. Values may be
            numbers or strings.
        blocking_power : float
            Power one GPU draws while blocked on communication, in watts (>= 0).

        Returns
        -------
        Profile

        Raises
        ------
        ProfileError
            On the same problems :meth:`from_csv` reports; the message names
            the record as ``records[i]`` (0-based) and the field.
        """
        power = _check_blocking_power(blocking_power)
        rows = []
        for index, record in enumerate(records):
            where = f"records[{index}]"
            rows.append(_parse_row(_record_fields(record, where), where, where))
        return _assemble(cls, rows, origin="records", source=None, blocking_power=power)

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the Pareto-optimal options in Zeus's CSV format.

        The file is written to a temporary file in the same directory and
        then renamed over ``path``, so readers never see a partial file.
        Floats are written exactly, so :meth:`from_csv` reads back the same
        options.

        Parameters
        ----------
        path : str or os.PathLike
            Destination file; replaced if it exists.
        """
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(_COLUMNS)
        for (stage, instruction), opts in sorted(self._options.items(), key=_key_order):
            for f, t, e in zip(opts.frequency_mhz, opts.time_s, opts.energy_j):
                writer.writerow((stage, instruction, int(f), float(t), float(e)))
        write_text_atomically(path, text.getvalue())

    def __repr__(self) -> str:
        freqs = self.frequencies()
        num_options = sum(len(opts) for opts in self._options.values())
        return (
            f"Profile(num_stages={self._num_stages}, "
            f"frequencies={len(freqs)} in {freqs[0]}..{freqs[-1]} MHz, "
            f"options={num_options}, num_dropped={self._num_dropped}, "
            f"blocking_power={self._blocking_power:g} W, source={self._source!r})"
        )


# --- parsing -----------------------------------------------------------------


def _read_csv(reader: Any, name: str) -> list[_Row]:
    """Check the header and parse every data row of a CSV reader."""
    header = next((row for row in reader if not _is_blank(row)), None)
    if header is None:
        raise ProfileError(f"{name}: file is empty; expected the header {','.join(_COLUMNS)}")
    header_line = reader.line_num
    names = [field.strip() for field in header]
    where = f"{name}, line {header_line} (header)"
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ProfileError(f"{where}: repeated column(s) {_quoted(repeated)}")
    missing = [c for c in _COLUMNS if c not in names]
    extra = [n for n in names if n not in _COLUMNS]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing column(s) {_quoted(missing)}")
        if extra:
            problems.append(f"unexpected column(s) {_quoted(extra)}")
        raise ProfileError(f"{where}: {'; '.join(problems)}; expected exactly {','.join(_COLUMNS)}")

    rows = []
    for fields in reader:
        if _is_blank(fields):
            continue
        short = f"line {reader.line_num}"
        where = f"{name}, {short}"
        if len(fields) != len(names):
            raise ProfileError(f"{where}: expected {len(names)} fields, got {len(fields)}")
        rows.append(_parse_row(dict(zip(names, fields)), where, short))
    return rows


def _record_fields(record: Any, where: str) -> Mapping[str, Any]:
    """Turn one record (mapping or 5-sequence) into a column -> value mapping."""
    if isinstance(record, Mapping):
        missing = [c for c in _COLUMNS if c not in record]
        extra = sorted(repr(k) for k in record if k not in _COLUMNS)
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
    if len(values) != len(_COLUMNS):
        raise ProfileError(
            f"{where}: expected {len(_COLUMNS)} fields ({', '.join(_COLUMNS)}), got {len(values)}"
        )
    return dict(zip(_COLUMNS, values))


def _parse_row(fields: Mapping[str, Any], where: str, short: str) -> _Row:
    """Validate one row's values; ``fields`` maps every column to its raw value."""
    stage = _integer(fields["stage"], where, "stage")
    if stage < 0:
        raise ProfileError(f"{where}, field 'stage': must be >= 0, got {stage}")
    instruction = fields["instruction"]
    if isinstance(instruction, str):
        instruction = instruction.strip()
    if instruction not in INSTRUCTIONS:
        raise ProfileError(
            f"{where}, field 'instruction': unknown instruction {instruction!r}; "
            f"allowed: {_quoted(INSTRUCTIONS)}"
        )
    frequency = _integer(fields["frequency"], where, "frequency")
    if frequency <= 0:
        raise ProfileError(f"{where}, field 'frequency': must be > 0 MHz, got {frequency}")
    time = float(_number(fields["time"], where, "time"))
    if time <= 0:
        raise ProfileError(f"{where}, field 'time': must be > 0 s, got {time!r}")
    energy = float(_number(fields["energy"], where, "energy"))
    if energy <= 0:
        raise ProfileError(f"{where}, field 'energy': must be > 0 J, got {energy!r}")
    return _Row(where, short, stage, instruction, frequency, time, energy)


def _number(value: Any, where: str, field: str) -> int | float:
    """Parse a finite number from a string or a real number."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ProfileError(f"{where}, field {field!r}: is empty")
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            raise ProfileError(f"{where}, field {field!r}: {value!r} is not a number") from None
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ProfileError(f"{where}, field {field!r}: {value!r} is not a number")
    elif isinstance(value, numbers.Integral):
        return int(value)
    else:
        number = float(value)
    if not math.isfinite(number):
        raise ProfileError(f"{where}, field {field!r}: {value!r} is not finite")
    return number


def _integer(value: Any, where: str, field: str) -> int:
    """Parse an integer; integral floats such as ``"3.0"`` are accepted."""
    number = _number(value, where, field)
    if isinstance(number, float):
        if not number.is_integer():
            raise ProfileError(f"{where}, field {field!r}: expected an integer, got {value!r}")
        number = int(number)
    return number


def _check_blocking_power(value: Any) -> float:
    """Return ``value`` as float watts, or raise if negative or non-finite."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ProfileError(f"blocking_power must be a finite number >= 0 (W), got {value!r}")
    return float(value)


# --- assembling --------------------------------------------------------------


def _assemble(
    cls: type[Profile],
    rows: list[_Row],
    *,
    origin: str,
    source: str | None,
    blocking_power: float,
) -> Profile:
    """Group validated rows, check them as a whole, keep the Pareto options."""
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

    options: dict[tuple[int, str], StageOptions] = {}
    dropped = 0
    for group_key, group in groups.items():
        options[group_key] = _pareto(group)
        dropped += len(group) - len(options[group_key])
    return cls(options, blocking_power=blocking_power, source=source, num_dropped=dropped)


def _pareto(group: list[_Row]) -> StageOptions:
    """Keep the rows no other row matches or beats in both time and energy.

    Sorting by (time, energy, -frequency) puts, among equal options, the
    highest frequency first; a row then survives only if it is cheaper than
    every faster-or-equal row before it.
    """
    kept: list[_Row] = []
    for row in sorted(group, key=lambda r: (r.time, r.energy, -r.frequency)):
        if not kept or row.energy < kept[-1].energy:
            kept.append(row)
    return StageOptions(
        frequency_mhz=np.array([r.frequency for r in kept], dtype=np.int64),
        time_s=np.array([r.time for r in kept]),
        energy_j=np.array([r.energy for r in kept]),
    )


def _check_stages(keys: Iterable[tuple[int, str]], origin: str) -> int:
    """Check stage ids run 0..n-1 with both instructions each; return n."""
    keys = set(keys)
    for key in keys:
        if (
            not isinstance(key, tuple)
            or len(key) != 2
            or isinstance(key[0], bool)
            or not isinstance(key[0], numbers.Integral)
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


def _key_order(item: tuple[tuple[int, str], StageOptions]) -> tuple[int, int]:
    (stage, instruction), _ = item
    return stage, INSTRUCTIONS.index(instruction)

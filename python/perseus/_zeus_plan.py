"""Zeus's frequency plan file, ``freqs_pipeline_%05d.py``: the one place that knows it.

Zeus's pipeline frequency optimizer server (``PointSolution`` in
``zeus/optimizer/pipeline_frequency/server/scheduler.py``) reads the file
with ``eval(f.read())``: a Python list with one list per pipeline rank of
``(instruction, MHz)`` tuples in that rank's execution order, instructions
``"forward"``/``"backward"``; it needs the ``.py`` suffix and one list per
rank of the job. lowtime writes it as ``[`` on its own line, one rank's list
and a comma per line, ``]``, then comment lines. perseus writes the same
layout, and reads such files without ``eval`` (``ast.literal_eval``: a plan
file from elsewhere is data, never code).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence

from ._files import read_plan_text
from ._zeus_format import INSTRUCTIONS
from .profile import LIMITS

__all__ = ["MAX_FILE_BYTES", "file_name", "format_plan", "read_plan"]

MAX_FILE_BYTES = 256 * 1024 * 1024
"""Larger files are refused unread (a plan has a few tuples per computation)."""

ZeusSchedule = list[list[tuple[str, int]]]


def file_name(index: int) -> str:
    """``freqs_pipeline_%05d.py``, the name lowtime and Zeus's examples use."""
    return f"freqs_pipeline_{index:05d}.py"


def format_plan(schedule: Sequence[Sequence[tuple[str, int]]], comments: Sequence[str] = ()) -> str:
    """The file's text: the list as lowtime lays it out, then ``# `` comment lines."""
    lines = ["["]
    for rank in schedule:
        lines.append(repr([(str(instruction), int(mhz)) for instruction, mhz in rank]) + ",")
    lines.append("]")
    for comment in comments:
        for line in str(comment).splitlines() or [""]:
            lines.append(f"# {line}".rstrip())
    return "\n".join(lines) + "\n"


def read_plan(path: str | os.PathLike[str]) -> ZeusSchedule:
    """Read a ``freqs_pipeline_*.py`` file, checking what Zeus's server would.

    Raises
    ------
    ValueError
        If the file is not such a plan; the message names the file, and the
        rank and position of a bad entry.
    OSError
        If it cannot be read.
    """
    name = os.fspath(path)
    text = read_plan_text(name, MAX_FILE_BYTES)
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as error:
        reason = error.msg if isinstance(error, SyntaxError) else type(error).__name__
        raise ValueError(
            f"{name}: not a Zeus frequency plan: the file must be one Python list literal "
            f"(optionally followed by comments) ({reason})"
        ) from None
    if not isinstance(value, list) or not value:
        raise ValueError(
            f"{name}: not a Zeus frequency plan: expected a non-empty list with one list per "
            f"GPU, got {type(value).__name__}"
        )
    schedule: ZeusSchedule = []
    for gpu, rank in enumerate(value):
        if not isinstance(rank, (list, tuple)) or not rank:
            raise ValueError(f"{name}: GPU {gpu}: expected a non-empty list of (instruction, MHz)")
        steps = []
        for position, step in enumerate(rank):
            where = f"{name}: GPU {gpu}, position {position}"
            if not isinstance(step, (list, tuple)) or len(step) != 2:
                raise ValueError(f"{where}: expected an (instruction, MHz) pair, got {step!r}")
            instruction, mhz = step
            if instruction not in INSTRUCTIONS:
                raise ValueError(
                    f"{where}: instruction {instruction!r} is not 'forward' or 'backward'"
                )
            if (
                isinstance(mhz, bool)
                or not isinstance(mhz, int)
                or not LIMITS.min_frequency_mhz <= mhz <= LIMITS.max_frequency_mhz
            ):
                raise ValueError(
                    f"{where}: frequency must be whole MHz in {LIMITS.min_frequency_mhz}.."
                    f"{LIMITS.max_frequency_mhz}, got {mhz!r}"
                )
            steps.append((instruction, mhz))
        schedule.append(steps)
    return schedule

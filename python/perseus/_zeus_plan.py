"""Zeus's frequency plan file, ``freqs_pipeline_%05d.py``: the one place that knows it.

Zeus's pipeline frequency optimizer server (``PointSolution`` in
``zeus/optimizer/pipeline_frequency/server/scheduler.py``) reads the file
with ``eval(f.read())``: a Python list with one list per pipeline rank of
``(instruction, MHz)`` tuples in that rank's execution order, instructions
``"forward"``/``"backward"``; it needs the ``.py`` suffix and one list per
rank of the job. lowtime writes it as ``[`` on its own line, one rank's list
and a comma per line, ``]``, then comment lines. perseus writes the same
layout, and reads such files without ``eval``: a plan file from elsewhere is
data, never code. The reader is a small tokenizer for exactly this grammar
(lists and tuples three deep, quoted strings, integers, comments), not
``ast.literal_eval``, whose syntax tree costs about 190 bytes of memory per
byte of file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Optional

from ._files import read_plan_text
from ._validate import integer
from ._zeus_format import INSTRUCTIONS
from .profile import LIMITS

__all__ = ["MAX_FILE_BYTES", "file_name", "format_plan", "read_plan"]

MAX_FILE_BYTES = 256 * 1024 * 1024
"""Larger files are refused unread (a plan has a few tuples per computation)."""

ZeusSchedule = list[list[tuple[str, int]]]


def file_name(index: int, variant: Optional[str] = None) -> str:
    """``freqs_pipeline_%05d.py``, the name lowtime and Zeus's examples use; with a
    `variant` (a plan made from frontier plan `index`, not that plan),
    ``freqs_pipeline_%05d_<variant>.py``. Zeus reads any ``.py`` name it is given."""
    return f"freqs_pipeline_{index:05d}{'' if variant is None else '_' + variant}.py"


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


class _NotAPlan(Exception):
    pass


_TOKEN = re.compile(
    r"""\s+|#[^\n]*|(?P<open>[\[(])|(?P<close>[\])])|(?P<comma>,)"""
    r"""|(?P<string>'[A-Za-z_]*'|"[A-Za-z_]*")"""
    r"""|(?P<float>[-+]?[0-9]{1,12}\.[0-9]{0,12}(?:[eE][-+]?[0-9]{1,3})?)|(?P<int>[-+]?[0-9]{1,12})"""
)
_MAX_DEPTH = 3  # the plan, a GPU's list, an (instruction, MHz) pair


def _parse(text: str) -> object:
    """The plan's nested lists, from a bounded tokenizer: memory follows the plan, not the text."""
    stack: list[list[object]] = []
    result: object = None
    expect_value = True  # after '[', '(' or ','
    position = 0
    length = len(text)
    while position < length:
        match = _TOKEN.match(text, position)
        if match is None or (
            not stack and result is None and match.lastgroup not in (None, "open")
        ):
            if not stack and result is None:
                raise _NotAPlan("expected a non-empty list with one list per GPU")
            raise _NotAPlan(
                f"unexpected {text[position : position + 20]!r} at character {position}"
            )
        position = match.end()
        kind = match.lastgroup
        if kind is None:  # whitespace or a comment
            continue
        if result is not None:
            raise _NotAPlan(f"text after the list at character {match.start()}")
        if kind == "open":
            if not expect_value or len(stack) >= _MAX_DEPTH:
                raise _NotAPlan(f"unexpected {match.group()!r} at character {match.start()}")
            stack.append([])
            expect_value = True
        elif kind == "close":
            if not stack:
                raise _NotAPlan(f"unexpected {match.group()!r} at character {match.start()}")
            done = stack.pop()
            if stack:
                stack[-1].append(done)
            else:
                result = done
            expect_value = False
        elif kind == "comma":
            if expect_value or not stack:
                raise _NotAPlan(f"unexpected ',' at character {match.start()}")
            expect_value = True
        else:
            if not expect_value or not stack:
                raise _NotAPlan(f"unexpected {match.group()[:20]!r} at character {match.start()}")
            token = match.group()
            number: object = float(token) if kind == "float" else token
            stack[-1].append(
                token[1:-1] if kind == "string" else number if kind == "float" else int(token)
            )
            expect_value = False
    if result is None:
        raise _NotAPlan("no complete list")
    return result


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
        value = _parse(text)
    except _NotAPlan as error:
        raise ValueError(
            f"{name}: not a Zeus frequency plan: the file must be one Python list literal "
            f"(optionally followed by comments) ({error})"
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
            mhz = integer(
                mhz,
                f"{where}: frequency",
                what="whole MHz",
                low=LIMITS.min_frequency_mhz,
                high=LIMITS.max_frequency_mhz,
            )
            steps.append((instruction, mhz))
        schedule.append(steps)
    return schedule

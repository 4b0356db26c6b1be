"""Zeus's profile CSV: the one place that knows its columns and writes it.

``stage,instruction,frequency,time,energy``: profile stage (model chunk),
``forward``/``backward``, SM clock in MHz, seconds and joules per
computation. Profiles, the profiler and the Megatron-LM integration all
write through here, so the files they produce are the same format byte for
byte (floats as ``repr``, which reads back exactly).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable

from ._files import write_text_atomically

__all__ = ["COLUMNS", "INSTRUCTIONS", "Row", "format_csv", "write_csv"]

COLUMNS = ("stage", "instruction", "frequency", "time", "energy")
"""The header, in the order perseus writes it (readers accept any order)."""

INSTRUCTIONS = ("forward", "backward")
"""Instruction names, in the order a profile lists them (0 and 1 in the core)."""

Row = tuple[int, str, int, float, float]
"""(stage, instruction, frequency MHz, time s, energy J)."""


def _order(row: Row) -> tuple[int, int, int]:
    stage, instruction, frequency, _, _ = row
    return stage, INSTRUCTIONS.index(instruction), -frequency


def format_csv(rows: Iterable[Row]) -> str:
    """The CSV text of `rows`, sorted by stage, instruction, then falling frequency."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for stage, instruction, frequency, time_s, energy_j in sorted(rows, key=_order):
        writer.writerow(
            (int(stage), instruction, int(frequency), repr(float(time_s)), repr(float(energy_j)))
        )
    return out.getvalue()


def write_csv(path: str | os.PathLike[str], rows: Iterable[Row]) -> None:
    """Write `rows` to `path` atomically (readers see the old file or the new one)."""
    write_text_atomically(path, format_csv(rows))

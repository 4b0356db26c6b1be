"""The frontier at a glance: the table `perseus show` prints and the report embeds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._validate import seconds_up
from .frontier import Frontier
from .timeline import timelines

__all__ = ["SLOWDOWNS", "Row", "format_table", "frontier_table"]

SLOWDOWNS = (1.02, 1.05, 1.10, 1.20, 1.50)
"""Iteration times, as multiples of the fastest plan's, of the representative rows."""


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    label: str
    index: Optional[int]  #: position on the frontier; None for the all-fastest baseline
    iteration_time_s: float
    energy_j: float  #: over the plan's own iteration
    saving_percent: float  #: against all-fastest waiting to this iteration time
    energy_at_common_j: float  #: over the common iteration length (the slowest plan's time)
    average_power_w: float  #: over the plan's own iteration
    peak_power_w: Optional[float]  #: None when the frontier has no profile


def frontier_table(frontier: Frontier) -> tuple[list[Row], float]:
    """The rows, and the common iteration length (s) the ``energy_at_common_j`` column uses."""
    fastest = frontier.fastest
    common = float(frontier.iteration_times_s[-1])
    chosen: list[tuple[str, int]] = [("fastest plan", 0)]
    for factor in SLOWDOWNS:
        deadline = factor * fastest.iteration_time_s
        if deadline >= common:
            break
        index = frontier._slowest_meeting(deadline)
        if index > chosen[-1][1]:
            chosen.append((f"within +{100 * (factor - 1):.0f}% time", index))
    if len(frontier) - 1 > chosen[-1][1]:
        chosen.append(("slowest plan", len(frontier) - 1))
    peaks: list[Optional[float]] = [None] * (len(chosen) + 1)
    if frontier.profile is not None:
        base = frontier.baseline_plan
        rows = np.stack([base.frequencies_mhz] + [frontier[i].frequencies_mhz for _, i in chosen])
        peaks = [t.power().peak_w for t in timelines(frontier.profile, frontier.spec, rows)]
    b = frontier.baseline
    table = [
        Row(
            "all-fastest",
            None,
            b.iteration_time_s,
            b.energy_j,
            0.0,
            frontier.baseline_energy_at(common),
            b.energy_j / b.iteration_time_s,
            peaks[0],
        )
    ]
    for (label, index), peak in zip(chosen, peaks[1:]):
        plan = frontier[index]
        waiting = frontier.baseline_energy_at(plan.iteration_time_s)
        table.append(
            Row(
                label,
                index,
                plan.iteration_time_s,
                plan.energy_j,
                100.0 * (1.0 - plan.energy_j / waiting),
                plan.energy_at(common),
                plan.average_power_w,
                peak,
            )
        )
    return table, common


HEADERS = (
    "plan",
    "#",
    "time s",
    "energy J",
    "saving",
    "J over T",
    "avg W",
    "peak W",
)


def cells(row: Row) -> tuple[str, ...]:
    """A row as the strings of each column."""
    return (
        row.label,
        "-" if row.index is None else str(row.index),
        seconds_up(row.iteration_time_s),
        f"{row.energy_j:.1f}",
        f"{row.saving_percent:.2f}%",
        f"{row.energy_at_common_j:.1f}",
        f"{row.average_power_w:.0f}",
        "n/a" if row.peak_power_w is None else f"{row.peak_power_w:.0f}",
    )


def format_table(rows: list[Row], common_time_s: float) -> str:
    """The table as aligned text, with a legend saying what each column compares."""
    body = [HEADERS, *(cells(r) for r in rows)]
    widths = [max(len(line[c]) for line in body) for c in range(len(HEADERS))]
    lines = [
        "  ".join(
            text.ljust(width) if c == 0 else text.rjust(width)
            for c, (text, width) in enumerate(zip(line, widths))
        )
        for line in body
    ]
    legend = [
        "time s    iteration time of the plan, rounded up (a --deadline of it selects this "
        "plan or a cheaper one)",
        "energy J  energy of all GPUs over the plan's own iteration",
        "saving    energy saved against all-fastest running the same iteration time "
        "(all-fastest finishes first and waits at blocking power)",
        f"J over T  energy over a common iteration of T = {seconds_up(common_time_s)} s (the slowest "
        "plan's time), as when a straggler sets the pace",
        "avg W     energy / own iteration time, all GPUs;  peak W: highest power of all GPUs "
        "together at any moment",
    ]
    return "\n".join([*lines, "", *legend])

"""Shared by the tests of plans for one deadline (fitted, tailored, followed): the
example profile whose frontier plans sit far enough apart for such plans to gain, and
seeded deadlines between those plans."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from perseus import Profile

#: The GPT-3 A100 example (8 stages); solved at 16 microbatches its frontier plans sit
#: apart enough that fitting or searching plans for a deadline between them gains.
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gpt3-a100-8stage.csv"


def example_profile() -> Profile:
    return Profile.from_csv(EXAMPLE, blocking_power_w=83.64)


def deadlines_between_plans(
    frontier, count: int, seed: int, reach: tuple[float, float] = (0.2, 0.8)
) -> list[float]:
    """`count` seeded deadlines strictly between consecutive frontier plans, across the
    range, each a uniform share within `reach` of the way from one plan to the next."""
    times = np.asarray(frontier.iteration_times_s)
    rng = np.random.default_rng(seed)
    gaps = rng.choice(np.nonzero(np.diff(times) > 0)[0], size=count, replace=False)
    return [float(times[k] + rng.uniform(*reach) * (times[k + 1] - times[k])) for k in gaps]


def other_clocks(profile: Profile) -> Profile:
    """The same measurements at clocks 1 MHz higher: a profile that has none of the clocks
    a frontier solved from `profile` runs."""
    records = []
    for stage in range(profile.num_stages):
        for instruction in ("forward", "backward"):
            rows = profile.measured(stage, instruction)
            for mhz, t, e in zip(rows.frequency_mhz, rows.time_s, rows.energy_j):
                records.append((stage, instruction, int(mhz) + 1, float(t), float(e)))
    return Profile.from_records(records, blocking_power_w=profile.blocking_power_w)

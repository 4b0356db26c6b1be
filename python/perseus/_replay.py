"""The core's problem for a profile and a pipeline, and plans replayed on it.

The bottom of the Python model: `Plan`, `Frontier`, their files and the
timelines replay plans through here, and `optimize` builds its problem
here, so every replay is the core's, in the same arithmetic.
"""

from __future__ import annotations

import numpy as np

from . import _core
from ._zeus_format import INSTRUCTIONS
from .errors import ProfileError
from .pipeline_spec import PipelineSpec
from .profile import Profile
from .schedule import build_pipeline, count_argument

__all__ = ["measured_rows", "replay_rows"]


class _OptionTable:
    """A profile's useful options flattened in the core's group order (2*stage + instruction)."""

    def __init__(self, profile: Profile) -> None:
        groups = [
            profile.options(stage, instruction)
            for stage in range(profile.num_stages)
            for instruction in INSTRUCTIONS
        ]
        self.offsets = np.cumsum([0] + [len(g) for g in groups]).astype(np.int32)
        self.time_s = np.concatenate([g.time_s for g in groups])
        self.energy_j = np.concatenate([g.energy_j for g in groups])
        self.frequency_mhz = np.concatenate([g.frequency_mhz for g in groups])
        self.groups = groups


def _of_profile(profile: Profile, message: str) -> str:
    """`message` about `profile`, naming its file when it came from one."""
    source = profile.source
    return f"{source}: {message}" if source and not message.startswith(str(source)) else message


def _check_profile(profile: object) -> Profile:
    if not isinstance(profile, Profile):
        raise TypeError(f"expected a perseus.Profile, got {type(profile).__name__}")
    return profile


def _spec(profile: Profile, microbatches: int, schedule: str, virtual_stages: int) -> PipelineSpec:
    _check_profile(profile)
    virtual_stages = count_argument("virtual_stages", virtual_stages)
    microbatches = count_argument("microbatches", microbatches)
    if profile.num_stages % virtual_stages:
        raise ProfileError(
            _of_profile(
                profile,
                f"virtual_stages={virtual_stages} does not divide the profile's "
                f"{profile.num_stages} stages",
            )
        )
    return PipelineSpec(
        schedule, profile.num_stages // virtual_stages, virtual_stages, microbatches
    )


def _setup(
    profile: Profile, spec: PipelineSpec
) -> tuple[_core.Problem, _OptionTable, _core.Pipeline]:
    pipeline = build_pipeline(spec.schedule, spec.num_gpus, spec.microbatches, spec.virtual_stages)
    table = _OptionTable(profile)
    try:
        problem = _core.Problem(
            pipeline, table.offsets, table.time_s, table.energy_j, profile.blocking_power_w
        )
    except ValueError as error:
        raise ProfileError(_of_profile(profile, str(error))) from None
    return problem, table, pipeline


def measured_rows(
    profile: Profile, spec: PipelineSpec, frequencies_mhz: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Measured (time s, energy J) of every computation of plans given as MHz rows.

    `frequencies_mhz` has shape (plans, computations), core id order. Any
    measured frequency counts, useful or not. Raises `ProfileError` naming
    the computation for a frequency the profile never measured.
    """
    pipeline = spec.pipeline()
    group = pipeline.group.astype(np.int64)
    # A table from (group, MHz) to the measured row: one gather per value.
    times, energies, clocks = [], [], []
    for g in range(2 * profile.num_stages):
        rows = profile.measured(g // 2, INSTRUCTIONS[g % 2])
        clocks.append(np.asarray(rows.frequency_mhz, dtype=np.int64))
        times.append(rows.time_s)
        energies.append(rows.energy_j)
    time_s, energy_j = np.concatenate(times), np.concatenate(energies)
    width = int(max(int(c.max()) for c in clocks)) + 1
    table = np.full((len(clocks), width), -1, dtype=np.int64)
    start = 0
    for g, c in enumerate(clocks):
        table[g, c] = start + np.arange(len(c))
        start += len(c)
    wanted = np.atleast_2d(np.asarray(frequencies_mhz, dtype=np.int64))
    inside = (wanted >= 0) & (wanted < width)
    at = np.where(inside, table[group[np.newaxis, :], np.clip(wanted, 0, width - 1)], -1)
    missing = at < 0
    if np.any(missing):
        plan_index, i = (int(v[0]) for v in np.nonzero(missing))
        stage, kind, mb = (
            int(pipeline.stage[i]),
            INSTRUCTIONS[pipeline.instruction[i]],
            int(pipeline.microbatch[i]),
        )
        measured = profile.measured(stage, kind).frequency_mhz.tolist()
        where = f"plan {plan_index}, " if len(wanted) > 1 else ""
        raise ProfileError(
            f"{where}(stage {stage}, {kind!r}, microbatch {mb}): "
            f"{int(wanted[plan_index, i])} MHz was never measured "
            f"for stage {stage} {kind} (measured: {measured})"
        )
    return time_s[at], energy_j[at]


def replay_rows(
    profile: Profile, spec: PipelineSpec, frequencies_mhz: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(iteration time s, energy J) of each plan given as a row of MHz, replayed by the core."""
    problem, _, _ = _setup(profile, spec)
    return problem_replay(problem, profile, spec, frequencies_mhz)


def problem_replay(
    problem: _core.Problem, profile: Profile, spec: PipelineSpec, frequencies_mhz: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`replay_rows` on a problem already built by `_setup` (to replay many blocks)."""
    rows = np.atleast_2d(np.asarray(frequencies_mhz, dtype=np.int64))
    times, energies = problem.replay(*measured_rows(profile, spec, rows))
    return np.asarray(times), np.asarray(energies)

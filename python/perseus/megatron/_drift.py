"""Noticing a stale plan while it runs: measured computation times against the plan's.

A plan is only as good as the profile it was made from. A driver update, a
changed model, data with other shapes or a GPU that now throttles make the
computations take other times than the profile says, and the plan's
deadline and energy stop meaning anything. Run mode therefore times each
computation it hands a clock to (CUDA events around it on a GPU, read when
the next iteration starts, so nothing waits for the GPU; the CPU clock on
CPU ranks) and compares, per stage and instruction of this rank, the sum
over an iteration with what the profile predicts at the clocks requested.

Deciding is deliberately slow and robust, so that noise and hiccups are not
reported: per cause it keeps the last ``window`` iterations' ratios
(measured / predicted) and reports a drift only when three quarters of them
lie beyond the tolerance on the same side (the lower quartile above
``1 + tolerance``, or the upper quartile below ``1 - tolerance``). Symmetric
noise of a few per cent never moves a quartile that far, and hiccups (even
one iteration in two, 3x as long) leave the lower quartile alone; a stage
that runs 20 % slower for a whole window moves both. Each cause (stage,
instruction, slower or faster) is reported once per attachment, with its
numbers.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

from ._following import PlanWarning

__all__ = ["DriftWatch", "StalePlan", "StalePlanWarning"]

#: The share of the window that must lie beyond the tolerance (three quarters).
_QUARTILE = 0.25


class StalePlanWarning(PlanWarning):
    """Computations take other times than the plan predicts: re-profile and re-optimize."""


@dataclass(frozen=True)
class StalePlan:
    """A sustained drift of one stage's computations from the plan's prediction."""

    iteration: int  #: the iteration that completed the window (0-based, perseus's count)
    rank: int  #: global rank that measured it
    stage: int  #: profile stage (``chunk * pipeline_size + pipeline_rank``)
    instruction: str  #: "forward" or "backward"
    measured_s: float  #: median measured seconds per iteration over the window (this stage's)
    predicted_s: float  #: median predicted seconds per iteration at the requested clocks
    ratio: float  #: the window's median of measured / predicted
    quartile_ratio: float  #: the quartile that crossed the tolerance
    window: int  #: iterations in the window
    tolerance: float

    @property
    def slower(self) -> bool:
        return self.ratio > 1

    def __str__(self) -> str:
        side = "slower" if self.slower else "faster"
        return (
            f"stage {self.stage} {self.instruction} on rank {self.rank} runs "
            f"{abs(self.ratio - 1) * 100:.1f} % {side} than the plan predicts "
            f"({self.measured_s * 1e3:.4g} ms measured vs {self.predicted_s * 1e3:.4g} ms "
            f"predicted per iteration, median of iterations {self.iteration - self.window + 1}-"
            f"{self.iteration}; three quarters beyond the {self.tolerance * 100:.3g} % tolerance): "
            "the profile no longer describes this job. Profile it again (perseus.megatron "
            "profile mode) and re-optimize"
        )


def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty list."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class DriftWatch:
    """This rank's measured-versus-predicted ratios per (stage, instruction); see module docs.

    Parameters
    ----------
    tolerance
        A fraction (0.10: 10 %).
    window
        Iterations per decision.
    rank
        This rank (named in findings).
    """

    def __init__(self, tolerance: float, window: int, rank: int) -> None:
        self.tolerance = float(tolerance)
        self.window = int(window)
        self.rank = int(rank)
        self._samples: dict[tuple[int, str], deque[tuple[float, float]]] = {}
        self._reported: set[tuple[int, str, bool]] = set()
        self._times: dict[int, dict[tuple[int, str], dict[int, float]]] = {}

    def predicted_s(self, profile: Any, stage: int, instruction: str, mhz: int) -> float:
        """The profile's time of one computation at `mhz` (NaN if that clock was not measured)."""
        table = self._times.get(id(profile))
        if table is None:
            if len(self._times) > 8:
                self._times.clear()
            table = self._times[id(profile)] = {}
        by_mhz = table.get((stage, instruction))
        if by_mhz is None:
            try:
                options = profile.measured(stage, instruction)
            except ValueError:
                by_mhz = {}
            else:
                by_mhz = {
                    int(f): float(t)
                    for f, t in zip(options.frequency_mhz.tolist(), options.time_s.tolist())
                }
            table[(stage, instruction)] = by_mhz
        return by_mhz.get(int(mhz), math.nan)

    def observe(
        self, iteration: int, sums: Iterable[tuple[int, str, float, float]]
    ) -> list[StalePlan]:
        """One iteration's (stage, instruction, measured s, predicted s); returns new findings."""
        found = []
        for stage, instruction, measured_s, predicted_s in sums:
            if not (math.isfinite(measured_s) and math.isfinite(predicted_s)) or predicted_s <= 0:
                continue
            key = (stage, instruction)
            samples = self._samples.get(key)
            if samples is None:
                samples = self._samples[key] = deque(maxlen=self.window)
            samples.append((measured_s, predicted_s))
            if len(samples) < self.window:
                continue
            finding = self._decide(iteration, stage, instruction, list(samples))
            if finding is not None:
                found.append(finding)
        return found

    def _decide(
        self, iteration: int, stage: int, instruction: str, samples: list[tuple[float, float]]
    ) -> Optional[StalePlan]:
        ratios = [m / p for m, p in samples]
        low, high = _quantile(ratios, _QUARTILE), _quantile(ratios, 1 - _QUARTILE)
        if low > 1 + self.tolerance:
            slower, quartile = True, low
        elif high < 1 - self.tolerance:
            slower, quartile = False, high
        else:
            return None
        cause = (stage, instruction, slower)
        if cause in self._reported:
            return None
        self._reported.add(cause)
        return StalePlan(
            iteration=iteration,
            rank=self.rank,
            stage=stage,
            instruction=instruction,
            measured_s=_quantile([m for m, _ in samples], 0.5),
            predicted_s=_quantile([p for _, p in samples], 0.5),
            ratio=_quantile(ratios, 0.5),
            quartile_ratio=quartile,
            window=len(samples),
            tolerance=self.tolerance,
        )

    # -- across a resume --------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a resumed run needs to go on deciding as this one would (plain data)."""
        return {
            "samples": [
                [stage, instruction, [list(s) for s in samples]]
                for (stage, instruction), samples in self._samples.items()
            ],
            "reported": [[s, i, bool(slower)] for s, i, slower in sorted(self._reported)],
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from :meth:`state` (a dict from a sidecar: checked, a bad one raises ValueError)."""
        try:
            samples = {
                (int(stage), str(instruction)): deque(
                    ((float(m), float(p)) for m, p in rows), maxlen=self.window
                )
                for stage, instruction, rows in state["samples"]
            }
            reported = {(int(s), str(i), bool(slower)) for s, i, slower in state["reported"]}
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"the stale-plan state is malformed ({error})") from None
        self._samples, self._reported = samples, reported

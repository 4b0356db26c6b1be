"""Run mode's parts: made at the first iteration, given back at detach.

At the first forward-backward call, run mode makes its switcher (or takes
the one given), the :class:`~._clocks.ClockDriver` that requests each
computation's clock, the CPU groups of the data- and model-parallel ranks,
the energy :class:`~.Recorder` and the :class:`~._between.Between`
that runs between iterations (with the stale-plan watch when asked for).
At detach they are closed in the order that gives the clocks back last, and
:func:`final_report` says what ran on this rank.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from ..switcher import FrequencySwitcher
from . import _metrics
from ._arguments import Settings
from ._between import Between
from ._clocks import ClockDriver
from ._drift import DriftWatch
from ._energy_meter import EnergyMeter, Recorder
from ._following import PlanBook
from ._observed import Observed
from ._profile_mode import Layout
from ._timing import CpuGroups, Stopwatch

__all__ = ["RunParts", "final_report"]

logger = logging.getLogger("perseus.megatron")


class RunParts:
    """One rank's run-mode machinery, from the first iteration to detach."""

    def __init__(
        self,
        *,
        switcher: FrequencySwitcher,
        owns_switcher: bool,
        driver: ClockDriver,
        groups: Optional[CpuGroups],
        recorder: Recorder,
        between: Between,
    ) -> None:
        self.switcher = switcher
        self.owns_switcher = owns_switcher  # made here: closed here; given: only reset
        self.driver = driver
        self.groups = groups
        self.recorder = recorder
        self.between = between

    @property
    def times_computations(self) -> bool:
        """The stale-plan check is on: each computation's span is timed."""
        return self.between.drift is not None

    @classmethod
    def start(
        cls,
        torch: Any,
        settings: Settings,
        *,
        layout: Layout,
        device: int,
        gpu: bool,
        stopwatch: Stopwatch,
        book: PlanBook,
        seen: Observed,
    ) -> RunParts:
        """Make every part (every rank at once: the groups are collective)."""
        if settings.clocks.switcher is not None:
            switcher, owns = settings.clocks.switcher, False
        else:
            switcher, owns = FrequencySwitcher(device), True
        driver = ClockDriver(
            torch,
            switcher,
            gpu=gpu,
            idle_mhz=settings.clocks.idle_mhz,
            evaluation_mhz=settings.clocks.evaluation_mhz,
        )
        groups = None
        if layout.world_size > 1:
            from megatron.core import parallel_state as ps

            dp = settings.stragglers.data_parallel_group or ps.get_data_parallel_group()
            mp = settings.stragglers.model_parallel_group or ps.get_model_parallel_group()
            groups = CpuGroups(torch, dp, mp)
        replica = groups.data_parallel_rank if groups else 0
        book.replica = replica
        seen.metrics.layout.update(
            data_parallel_rank=replica,
            model_parallel_rank=groups.model_parallel_rank if groups else 0,
            gpus_per_stage=(
                max(1, groups.model_parallel_size // layout.pipeline_size) if groups else 1
            ),
        )
        options = settings.metrics
        meter = EnergyMeter(device) if options.enabled else EnergyMeter.disabled()
        recorder = Recorder(meter, seen.metrics, mismatches=lambda: switcher.clock_mismatches)
        drift = None
        if options.enabled and options.stale_plan_tolerance is not None:
            drift = DriftWatch(options.stale_plan_tolerance, options.stale_plan_window, layout.rank)
        between = Between(
            book=book,
            stragglers=settings.stragglers,
            metrics_options=options,
            stopwatch=stopwatch,
            groups=groups,
            recorder=recorder,
            rank=layout.rank,
            switches=seen.switches,
            decisions=seen.decisions,
            iteration_times_s=seen.iteration_times_s,
            drift=drift,
            # One rank per stage of the job warns; the energy report carries every rank's.
            warns_for_stage=layout.tensor_rank == 0 and replica == 0,
        )
        return cls(
            switcher=switcher,
            owns_switcher=owns,
            driver=driver,
            groups=groups,
            recorder=recorder,
            between=between,
        )

    def close(self) -> None:
        """Stop measuring, leave the groups, then give the clocks back (even if that fails)."""
        self.recorder.close_meter()
        if self.groups is not None:
            self.groups.close()
            self.groups = None
        try:
            self.driver.close()
        finally:
            if self.owns_switcher:
                self.switcher.close()
            else:
                self.switcher.reset()


def final_report(parts: RunParts, seen: Observed, rank: int) -> _metrics.FinalReport:
    """What ran on this rank, at detach (no collective: ranks may detach at different times)."""
    between = parts.between
    mismatches: dict[str, int] = {}
    try:
        mismatches = dict(parts.switcher.clock_mismatches)
    except Exception:  # noqa: BLE001 - a switcher closed already: nothing to count
        mismatches = {}
    seen.metrics.clock_mismatches = dict(mismatches)
    report = _metrics.final_report(
        seen.metrics,
        rank=rank,
        first_iteration=between.first_iteration,
        iterations=seen.iterations - between.first_iteration,
        switches=len(seen.switches),
        clock_mismatches=mismatches,
    )
    if rank == 0:
        logger.info("perseus: at detach: %s", report)
    else:
        logger.debug("perseus: at detach: %s", report)
    return report

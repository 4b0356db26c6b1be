"""Measuring one rank's iterations live: NVML energy at iteration boundaries, evaluation left out.

Each rank reads its GPU's total-energy counter (NVML, through perseus's own
loader: ``perseus._core.NvmlDevice(index).total_energy_mj()``) when an
iteration starts, a CPU call that waits for nothing; an iteration's energy
is the counter's advance from its start to the next one's, forward-only
calls in between left out. These are CPU-timeline boundaries: the GPU may
lag the CPU by part of an iteration, which shifts energy between
neighbouring iterations but cancels over a report. NVML's counter itself
updates every few tens of milliseconds. The records go to
:mod:`._metrics`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Optional

from ._metrics import IterationMetrics, Metrics

__all__ = ["EnergyMeter", "Recorder"]


class EnergyMeter:
    """Reads one GPU's NVML total-energy counter (mJ); NaN where it cannot."""

    def __init__(self, device: int) -> None:
        from ..switcher import NvmlDevice

        self._nvml: Any = None
        try:
            self._nvml = NvmlDevice(device)
            self._nvml.total_energy_mj()
        except Exception as error:  # noqa: BLE001 - no counter: metrics without energy
            self._nvml = None
            warnings.warn(
                f"perseus: GPU {device} has no readable energy counter ({error}); run-mode "
                "metrics will have no measured energy",
                RuntimeWarning,
                stacklevel=4,
            )

    @classmethod
    def disabled(cls) -> EnergyMeter:
        """A meter that reads nothing (``MetricsOptions(enabled=False)``)."""
        meter = cls.__new__(cls)
        meter._nvml = None
        return meter

    def read_j(self) -> float:
        if self._nvml is None:
            return math.nan
        try:
            return float(self._nvml.total_energy_mj()) / 1e3
        except Exception:  # noqa: BLE001 - a failed read loses one sample, not the run
            return math.nan

    def close(self) -> None:
        self._nvml = None


class Recorder:
    """This rank's iteration accounting: counter reads at boundaries, forward-only spans left out."""

    def __init__(
        self,
        meter: EnergyMeter,
        metrics: Metrics,
        *,
        mismatches: Optional[Callable[[], Mapping[str, int]]] = None,
    ) -> None:
        self._meter = meter
        self.metrics = metrics
        self._mismatches = mismatches
        self._stale: list[Any] = []
        self._open: Optional[dict[str, Any]] = None
        self._excluded_j = 0.0
        self._excluded_s = 0.0
        self._excluding: Optional[tuple[float, float]] = None
        self._window: list[IterationMetrics] = []

    def now(self) -> tuple[float, float]:
        """(counter in J, wall clock in s) at this point of the CPU's timeline."""
        import time

        return self._meter.read_j(), time.perf_counter()

    @property
    def is_open(self) -> bool:
        return self._open is not None

    def open(
        self,
        now: tuple[float, float],
        iteration: int,
        *,
        plan_time_s: float,
        plan_energy_j: float,
        phase: str,
    ) -> None:
        self._open = {
            "iteration": iteration,
            "energy_j": now[0],
            "wall_s": now[1],
            "plan_time_s": plan_time_s,
            "plan_energy_j": plan_energy_j,
            "phase": phase,
        }
        self._excluded_j = self._excluded_s = 0.0

    def close(
        self, now: tuple[float, float], *, pipeline_time_s: float, switches: int
    ) -> Optional[IterationMetrics]:
        start = self._open
        if start is None:
            return None
        self._open = None
        record = IterationMetrics(
            iteration=start["iteration"],
            energy_j=now[0] - start["energy_j"] - self._excluded_j,
            wall_time_s=now[1] - start["wall_s"] - self._excluded_s,
            pipeline_time_s=pipeline_time_s,
            plan_time_s=start["plan_time_s"],
            plan_energy_j=start["plan_energy_j"],
            phase=start["phase"],
            switches=switches,
        )
        self.metrics.iterations.append(record)
        self._window.append(record)
        return record

    def exclude_begin(self) -> None:
        if self._open is not None and self._excluding is None:
            self._excluding = self.now()

    def exclude_end(self) -> None:
        if self._excluding is None:
            return
        e0, w0 = self._excluding
        self._excluding = None
        e1, w1 = self.now()
        if math.isfinite(e1 - e0):
            self._excluded_j += e1 - e0
        self._excluded_s += w1 - w0

    def payload(self, layout: dict[str, Any]) -> dict[str, Any]:
        """This rank's records since the last report (then forgotten), for the all-gather."""
        records, self._window = self._window, []
        stale, self._stale = self._stale, []
        return {
            **layout,
            "records": records,
            "clock_mismatches": self.clock_mismatches(),
            "stale_plans": stale,
        }

    def stale(self, finding: Any) -> None:
        """A stale-plan finding of this rank, for the next report."""
        self._stale.append(finding)

    def clock_mismatches(self) -> dict[str, int]:
        """This GPU's clock mismatches so far, by cause (empty when none can be read)."""
        if self._mismatches is None:
            return {}
        try:
            return {str(k): int(v) for k, v in dict(self._mismatches()).items()}
        except Exception:  # noqa: BLE001 - a closed switcher: nothing more to count
            return {}

    def close_meter(self) -> None:
        self._meter.close()

"""Measure the profile that :func:`perseus.optimize` reads.

:func:`profile_stages` sweeps each stage's forward and backward over SM
frequencies, from the highest down, and writes a :class:`perseus.Profile`
as Zeus's CSV plus a JSON sidecar (device, driver, clocks, settings, every
measurement with its spread, ``P_block``). :func:`measure_blocking_power`
measures ``P_block`` alone.

Time comes from torch CUDA events, energy from NVML's total-energy counter;
``mode="cpu"`` swaps the events for a wall-clock timer so the whole path
runs without a GPU (with the test suite's fake NVML). torch is imported
only when a GPU run starts (``pip install "perseus-energy[gpu]"``).
"""

from __future__ import annotations

from ._blocking import measure_blocking_power
from ._records import (
    BlockingPower,
    ComputationError,
    Measurement,
    ProfilerError,
    ProfilerResult,
    ProfilerUnavailable,
)
from ._sweep import profile_stages

__all__ = [
    "BlockingPower",
    "ComputationError",
    "Measurement",
    "ProfilerError",
    "ProfilerResult",
    "ProfilerUnavailable",
    "measure_blocking_power",
    "profile_stages",
]

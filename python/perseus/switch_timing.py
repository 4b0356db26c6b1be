"""`measure_switch_latency`: how long a clock change takes to be visible on a GPU.

The switcher's records time the NVML call; the driver may apply the clock
later still. This measures, on the CPU timeline, from the moment ``set()``
is called to the moment NVML reports the new SM clock as the current one,
alternating between two clocks. The figure is what
``perseus.switch_latency`` (``switch_latency_s``) models.

Run it with the GPU busy (a training job, or any kernel loop): an idle GPU
may report a lower clock than the locked one, and such a sample times out.
It needs the rights the switcher needs (root or CAP_SYS_ADMIN).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._core import NvmlDevice, SwitchSource
from .switcher import FrequencySwitcher

__all__ = ["SwitchLatency", "measure_switch_latency"]

POLL_S = 1e-4  # between two reads of the current clock: NVML reads take tens of µs


@dataclass(frozen=True)
class SwitchLatency:
    """What `measure_switch_latency` saw on one GPU."""

    device: int  #: CUDA device index
    name: str
    clocks_mhz: tuple[int, int]  #: the two clocks alternated
    visible_s: np.ndarray  #: per change: set() to NVML reporting the new clock, s
    call_s: np.ndarray  #: per change: the NVML call alone (the switcher's record), s
    #: changes not seen within timeout_s, or not timed because the one before had not landed
    timeouts: int

    @property
    def median_s(self) -> float:
        """Median time to visible, s (NaN if no change was seen)."""
        return float(np.median(self.visible_s)) if len(self.visible_s) else float("nan")


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


def measure_switch_latency(
    device: int = 0,
    *,
    repeats: int = 10,
    clocks_mhz: Optional[tuple[int, int]] = None,
    timeout_s: float = 1.0,
) -> SwitchLatency:
    """Time ``repeats`` SM clock changes on GPU ``device``, alternating two clocks.

    ``clocks_mhz`` defaults to the fastest supported clock and the one
    nearest 70 % of it. The clocks are given back when it returns.

    Raises what `FrequencySwitcher` raises (no NVML, no such GPU, no
    permission), and ValueError for bad arguments, naming them.
    """
    repeats = _count(repeats, "repeats")
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not (0 < timeout_s < float("inf"))
    ):
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    gpu = NvmlDevice(device)
    with FrequencySwitcher(device) as switcher:
        supported = switcher.supported_mhz
        if clocks_mhz is None:
            if len(supported) == 0:
                raise ValueError(
                    f"GPU {device} lists no supported SM clocks: give clocks_mhz=(high, low)"
                )
            high = int(supported[-1])
            low = switcher.snap(max(1, round(0.7 * high)))
        else:
            if len(clocks_mhz) != 2:
                raise ValueError(f"clocks_mhz must be two clocks, got {clocks_mhz!r}")
            high, low = (switcher.snap(_count(c, "clocks_mhz")) for c in clocks_mhz)
        if high == low:
            raise ValueError(f"the two clocks must differ after snapping, both are {high} MHz")
        switcher.set(high)
        switcher.wait(timeout_s=timeout_s)
        visible: list[float] = []
        timeouts = 0
        for r in range(repeats):
            target = low if r % 2 == 0 else high
            if gpu.clock_mhz("sm") == target:
                # The previous change never landed (it timed out): this one
                # would be "seen" at once, which measures nothing.
                timeouts += 1
                switcher.wait(timeout_s=timeout_s)
                continue
            start = time.monotonic_ns()
            switcher.set(target)
            while True:
                seen = gpu.clock_mhz("sm") == target
                now = time.monotonic_ns()  # after the read: a change counts once it is read back
                if seen:
                    visible.append((now - start) * 1e-9)
                    break
                if now - start > timeout_s * 1e9:
                    timeouts += 1
                    break
                time.sleep(POLL_S)
            switcher.wait(timeout_s=timeout_s)
        log = switcher.records()
        calls = np.asarray(
            [rec.latency_ns * 1e-9 for rec in log if rec.source == SwitchSource.SET][1:]
        )
    return SwitchLatency(
        device=device,
        name=gpu.name,
        clocks_mhz=(high, low),
        visible_s=np.asarray(visible),
        call_s=calls,
        timeouts=timeouts,
    )

"""`measure_switch_latency`: how long a clock change takes to be visible on a GPU.

The switcher's records time the NVML call; the driver may apply the clock
later still. This measures how long until NVML reports the new SM clock as
the current one, alternating between two clocks, on one of two timelines:

- the CPU's (default): from the moment ``set()`` is called;
- the GPU's (``stream=``): each change is queued on a CUDA stream with
  ``set_on_stream``, as a training loop does, and is timed from the moment
  the GPU reaches it (the switcher's host function runs: its record's
  ``requested_ns``). The time from the call to that moment, the stream's
  backlog, is reported apart (``handover_s``).

The figure is what ``perseus.switch_latency`` (``switch_latency_s``)
models: in the replay, a change asked for when a GPU reaches a computation
takes effect ``L`` later, which is the stream timeline's ``visible_s``.
(How long until *kernels* run at the new clock needs a kernel that times
its own clock: ``bench/gpu_check_switcher.py`` does that with torch.)

Run it with the GPU busy (a training job, or any kernel loop): an idle GPU
may report a lower clock than the locked one, and such a sample times out.
It needs the rights the switcher needs (root or CAP_SYS_ADMIN).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ._core import NvmlDevice, SwitchSource
from ._validate import is_integer
from .switcher import FrequencySwitcher, _stream_handle

__all__ = ["SwitchLatency", "measure_switch_latency"]

POLL_S = 1e-4  # between two reads of the current clock: NVML reads take tens of µs


@dataclass(frozen=True)
class SwitchLatency:
    """What `measure_switch_latency` saw on one GPU."""

    device: int  #: CUDA device index
    name: str
    clocks_mhz: tuple[int, int]  #: the two clocks alternated
    #: per change: to NVML reporting the new clock, s; from set() on the CPU
    #: timeline, from the GPU reaching the change on the stream timeline
    visible_s: np.ndarray
    call_s: np.ndarray  #: per change: the NVML call alone (the switcher's record), s
    #: changes not seen within timeout_s, or not timed because the one before had not landed
    timeouts: int
    #: the stream the changes were queued on; None: the CPU timeline
    stream: Optional[int] = None
    #: stream timeline only, per timed change: set_on_stream() to the GPU reaching it, s
    handover_s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def median_s(self) -> float:
        """Median time to visible, s (NaN if no change was seen)."""
        return float(np.median(self.visible_s)) if len(self.visible_s) else float("nan")


def _count(value: object, name: str) -> int:
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


def measure_switch_latency(
    device: int = 0,
    *,
    repeats: int = 10,
    clocks_mhz: Optional[tuple[int, int]] = None,
    timeout_s: float = 1.0,
    stream: Optional[Any] = None,
) -> SwitchLatency:
    """Time ``repeats`` SM clock changes on GPU ``device``, alternating two clocks.

    ``clocks_mhz`` defaults to the fastest supported clock and the one
    nearest 70 % of it. The clocks are given back when it returns.

    ``stream`` (a ``CUstream`` handle or a torch/CuPy stream; 0 is the
    default stream) queues each change on that stream and times it from the
    moment the GPU reaches it; the calling thread needs the stream's CUDA
    context current. ``timeout_s`` counts from the call, so it must cover
    the stream's backlog too.

    Raises what `FrequencySwitcher` raises (no NVML, no such GPU, no
    permission; `CudaError` for a stream it cannot queue on), and ValueError
    for bad arguments, naming them.
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
        handle = None if stream is None else _stream_handle(stream)
        visible: list[float] = []
        handovers: list[float] = []
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
            if handle is None:
                switcher.set(target)
            else:
                switcher.set_on_stream(handle, target)
            seen_ns = _poll_until(gpu, target, start, timeout_s)
            switcher.wait(timeout_s=timeout_s)
            if seen_ns is None:
                timeouts += 1
            elif handle is None:
                visible.append((seen_ns - start) * 1e-9)
            else:
                reached_ns = _reached_ns(switcher, start, target)
                if reached_ns is None:  # seen, yet the host function never ran: not ours
                    timeouts += 1
                else:
                    handovers.append((reached_ns - start) * 1e-9)
                    visible.append((seen_ns - reached_ns) * 1e-9)
        source = SwitchSource.SET if handle is None else SwitchSource.STREAM
        log = switcher.records()
        calls = [rec.latency_ns * 1e-9 for rec in log if rec.source == source]
    return SwitchLatency(
        device=device,
        name=gpu.name,
        clocks_mhz=(high, low),
        visible_s=np.asarray(visible),
        call_s=np.asarray(calls[1:] if handle is None else calls),  # SET's first: the warm-up
        timeouts=timeouts,
        stream=None if handle is None else int(handle),
        handover_s=np.asarray(handovers),
    )


def _poll_until(gpu: NvmlDevice, target: int, start_ns: int, timeout_s: float) -> Optional[int]:
    """When NVML first reported ``target`` as the SM clock (ns), or None on timeout."""
    while True:
        seen = gpu.clock_mhz("sm") == target
        now = time.monotonic_ns()  # after the read: a change counts once it is read back
        if seen:
            return now
        if now - start_ns > timeout_s * 1e9:
            return None
        time.sleep(POLL_S)


def _reached_ns(switcher: FrequencySwitcher, start_ns: int, target: int) -> Optional[int]:
    """When the GPU reached the change queued at ``start_ns``: its host function's time."""
    for rec in reversed(switcher.records()):
        stream = rec.source == SwitchSource.STREAM
        if stream and rec.requested_ns >= start_ns and rec.requested_mhz == target:
            return rec.requested_ns
    return None

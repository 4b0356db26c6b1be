"""Where the profiler runs: timers and the NVML device, per mode.

``gpu`` times with torch CUDA events; ``cpu`` (explicit opt-in) with a
wall-clock timer. Both read energy from NVML's total-energy counter, which in
``cpu`` mode is normally the test suite's fake library.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Optional

from .._optional import install_hint, optional_module
from ..switcher import LibraryLoadError, NvmlDevice, NvmlError
from ._records import ProfilerUnavailable

__all__ = ["MODES", "Backend", "open_backend"]

MODES = ("gpu", "cpu")

_CPU_HINT = (
    "To run the whole path without a GPU, pass mode='cpu' (wall-clock timing, energy from "
    "NVML's counter, e.g. a fake libnvidia-ml named by PERSEUS_NVML_LIBRARY)"
)


class Backend:
    """Times a callable repeated ``n`` times; owns the NVML device."""

    mode = "cpu"

    def __init__(self, nvml: NvmlDevice) -> None:
        self.nvml = nvml

    def sync(self) -> None:
        """Wait until all queued work is done."""

    def run(
        self, fn: Callable[[], Any], n: int, during: Optional[Callable[[], None]] = None
    ) -> float:
        """Call ``fn`` ``n`` times back to back; return the elapsed seconds.

        ``during`` is called once after the last call is issued (on a GPU,
        while the work still runs; here, after the timer stopped).
        """
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if during is not None:
            during()
        return elapsed

    def energy_mj(self) -> int:
        """NVML's total-energy counter in millijoules."""
        return self.nvml.total_energy_mj()

    def sm_clock_mhz(self) -> int:
        try:
            return self.nvml.clock_mhz("sm")
        except NvmlError:
            return 0

    def close(self) -> None:
        """Release NVML (``nvmlShutdown`` runs when the last reference goes)."""
        self.nvml = None  # type: ignore[assignment]


class GpuBackend(Backend):
    """Times with torch CUDA events on the device's current stream."""

    mode = "gpu"

    def __init__(self, nvml: NvmlDevice, torch: Any, device: int) -> None:
        super().__init__(nvml)
        self.torch = torch
        self.device = torch.device("cuda", device)
        self._previous = torch.cuda.current_device()
        torch.cuda.set_device(self.device)

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def run(
        self, fn: Callable[[], Any], n: int, during: Optional[Callable[[], None]] = None
    ) -> float:
        cuda = self.torch.cuda
        stream = cuda.current_stream(self.device)
        start = cuda.Event(enable_timing=True)
        end = cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(n):
            fn()
        end.record(stream)
        if during is not None:
            during()
        self.sync()  # also waits for work the callable put on other streams
        return float(start.elapsed_time(end)) / 1e3  # ms -> s

    def close(self) -> None:
        self.torch.cuda.set_device(self._previous)
        super().close()


def _open_nvml(device: int) -> NvmlDevice:
    return NvmlDevice(device)


def open_backend(mode: str, device: int) -> Backend:
    """Check that ``mode`` can run here and return its backend.

    Raises
    ------
    ProfilerUnavailable
        Naming everything that is missing.
    """
    problems = []
    torch = None
    if mode == "gpu":
        try:
            torch = optional_module("torch", "gpu")
        except ImportError as error:
            problems.append(f"torch is not installed ({error})")
        else:
            if not torch.cuda.is_available():
                if torch.version.cuda is None:
                    problems.append(
                        f"torch {torch.__version__} is a CPU-only build (no CUDA); install a CUDA "
                        f"build, e.g. {install_hint('gpu')}"
                    )
                else:
                    problems.append(
                        f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: no "
                        "NVIDIA driver, or CUDA_VISIBLE_DEVICES hides every device"
                    )
            elif not 0 <= device < torch.cuda.device_count():
                problems.append(
                    f"there is no CUDA device {device} ({torch.cuda.device_count()} visible)"
                )
    nvml = None
    try:
        nvml = _open_nvml(device)
    except LibraryLoadError as error:
        problems.append(
            f"NVML could not be loaded, so energy cannot be read (no NVIDIA driver?): {error}"
        )
    except (NvmlError, IndexError) as error:
        problems.append(f"NVML cannot read GPU {device}: {error}")
    if problems:
        nvml = None  # the traceback keeps this frame: do not keep NVML initialised through it
        what = "on a GPU" if mode == "gpu" else "in mode='cpu'"
        advice = (
            _CPU_HINT
            if mode == "gpu"
            else (
                "mode='cpu' still reads energy from NVML: point PERSEUS_NVML_LIBRARY at a (fake) "
                "libnvidia-ml"
            )
        )
        listed = "; ".join(p.rstrip(". ") for p in problems)
        raise ProfilerUnavailable(f"cannot profile {what}: {listed}. {advice}")
    assert nvml is not None
    if mode == "gpu":
        return GpuBackend(nvml, torch, device)
    return Backend(nvml)

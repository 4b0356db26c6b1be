"""`reset_clocks`: give locked SM and memory clocks back to the driver, from the shell.

The repair for what the switcher's own guard could not do (the machine lost
power, the watchdog died with the process); ``perseus reset-clocks`` calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from . import _core
from ._core import NvmlDevice, NvmlError, NvmlReturn

__all__ = ["ResetResult", "reset_clocks"]


@dataclass(frozen=True)
class ResetResult:
    """What :func:`reset_clocks` did to one GPU."""

    device: int  #: CUDA device index
    nvml_index: int
    name: str
    gpu: str  #: "reset", "not supported", or the error
    memory: str  #: "reset", "not supported", or the error
    ok: bool


def _reset_one(call: Callable[[], None]) -> tuple[str, bool]:
    try:
        call()
    except NvmlError as error:
        if getattr(error, "code", None) == NvmlReturn.ERROR_NOT_SUPPORTED:
            return "not supported", True
        return str(error), False
    return "reset", True


def reset_clocks(device: Optional[int] = None) -> list[ResetResult]:
    """Give locked SM and memory clocks back to the driver.

    Parameters
    ----------
    device
        CUDA device index (honours ``CUDA_VISIBLE_DEVICES``); ``None`` resets
        every visible GPU.

    Returns one :class:`ResetResult` per GPU. A GPU that does not support
    locked clocks counts as reset. This also undoes locks made by other
    tools (``nvidia-smi -lgc``).
    """
    indices = range(_core.nvml_device_count()) if device is None else [device]
    results = []
    for index in indices:
        gpu = NvmlDevice(index)
        gpu_state, gpu_ok = _reset_one(gpu.reset_locked_clocks)
        mem_state, mem_ok = _reset_one(gpu.reset_memory_locked_clocks)
        results.append(
            ResetResult(index, gpu.nvml_index, gpu.name, gpu_state, mem_state, gpu_ok and mem_ok)
        )
    return results

"""Set a GPU's SM clock per computation, off the training thread.

:class:`FrequencySwitcher` drives one GPU. ``set(mhz)`` records the target
and returns within microseconds; a native worker thread makes the NVML call
(milliseconds), applying only the latest target when several arrive while it
is busy. ``set_on_stream(stream, mhz)`` does the same when the GPU reaches
that point of a CUDA stream, through a host function, so the clock follows
the GPU rather than the CPU, which may run far ahead.

Clocks are locked at the first ``set`` and given back to the driver however
the process ends:

- ``close()``, leaving a ``with`` block (also through an exception), garbage
  collection, and interpreter exit (which an uncaught exception or
  ``KeyboardInterrupt`` also reaches);
- SIGTERM, SIGHUP and SIGQUIT, and SIGINT where the program made it fatal: a
  handler resets the clocks, then the signal does what it would have done
  (the process dies of it, or the handler installed before runs);
- anything else that ends the process (SIGKILL, the OOM killer, a segfault,
  ``os._exit``): a watchdog process (:mod:`perseus._watchdog`), started with
  the first switcher, resets the clocks still locked when it sees this
  process's end of their socket close.

Switchers on one GPU share its lock: the GPU is reset when the last of them
lets go. ``perseus reset-clocks`` repairs what none of this could (the
machine lost power, the watchdog was killed along with the process).

Libraries are loaded at run time: NVML from ``$PERSEUS_NVML_LIBRARY`` or
``libnvidia-ml.so.1``; the CUDA driver (only for ``set_on_stream``) from
``$PERSEUS_CUDA_LIBRARY`` or ``libcuda.so.1``. Device numbers follow CUDA
and honour ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from . import _clock_guard, _core
from ._core import CudaError, LibraryLoadError, NvmlDevice, NvmlError, NvmlReturn, SwitchSource
from ._deprecation import warn_renamed
from ._reset import ResetResult, reset_clocks

__all__ = [
    "ClockSnapWarning",
    "CudaError",
    "FrequencySwitcher",
    "LibraryLoadError",
    "NvmlDevice",
    "NvmlError",
    "NvmlReturn",
    "ResetResult",
    "SwitchLog",
    "SwitchRecord",
    "SwitchSource",
    "reset_clocks",
]


class ClockSnapWarning(UserWarning):
    """A requested clock is not one the GPU supports; the nearest one is used.

    Issued once per switcher and requested value.
    """


@dataclass(frozen=True)
class SwitchRecord:
    """One clock change made by the worker.

    Times are ``CLOCK_MONOTONIC`` nanoseconds, the clock of
    :func:`time.monotonic_ns`.
    """

    time_ns: int  #: when the NVML call returned
    requested_ns: int  #: when the target was requested (``set`` or the host function)
    latency_ns: int  #: duration of the NVML call (ns)
    requested_mhz: int  #: as asked; 0 for a reset to default clocks
    applied_mhz: int  #: after snapping to a supported clock; 0 for a reset
    status: int  #: NVML return code (compare with :class:`NvmlReturn`), 0 on success
    source: SwitchSource  #: why the change was made


@dataclass(frozen=True)
class SwitchLog:
    """The applied-change log of a switcher, as columns (oldest first).

    ``len(log)``, ``log[i]`` and iteration give :class:`SwitchRecord` rows;
    the arrays are there for bulk analysis. ``dropped`` counts records that
    fell out of the bounded buffer (``record_capacity``).
    """

    time_ns: np.ndarray
    requested_ns: np.ndarray
    latency_ns: np.ndarray
    requested_mhz: np.ndarray
    applied_mhz: np.ndarray
    status: np.ndarray
    source: np.ndarray  #: :class:`SwitchSource` values (``log.source == SwitchSource.SET``)
    dropped: int = 0

    def __len__(self) -> int:
        return len(self.time_ns)

    def __getitem__(self, i: int) -> SwitchRecord:
        return SwitchRecord(
            time_ns=int(self.time_ns[i]),
            requested_ns=int(self.requested_ns[i]),
            latency_ns=int(self.latency_ns[i]),
            requested_mhz=int(self.requested_mhz[i]),
            applied_mhz=int(self.applied_mhz[i]),
            status=int(self.status[i]),
            source=SwitchSource(int(self.source[i])),
        )

    def __iter__(self) -> Iterator[SwitchRecord]:
        return (self[i] for i in range(len(self)))


def _stream_handle(stream: Any) -> Any:
    """A CUstream handle from an int, a torch stream or a CuPy stream.

    Integers go to the core as they are: it rejects bools, negative numbers
    and values too large with a message naming ``stream``.
    """
    if isinstance(stream, (int, np.integer)):
        return stream
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        handle = getattr(stream, attribute, None)
        if isinstance(handle, (int, np.integer)):
            return handle
    raise TypeError(
        "stream must be a CUstream handle (int), e.g. torch.cuda.current_stream().cuda_stream "
        f"or a CuPy stream's .ptr, not {type(stream).__name__}"
    )


class FrequencySwitcher:
    """Sets one GPU's SM clock from a worker thread, optionally in stream order.

    Parameters
    ----------
    device
        CUDA device index (honours ``CUDA_VISIBLE_DEVICES``).
    memory_mhz
        Also lock the memory clock at this many MHz (snapped to a supported
        memory clock) when the first SM clock is set. ``None`` leaves memory
        clocks alone.
    record_capacity
        How many records :meth:`records` keeps (the oldest are dropped);
        1 to 2**24.
    verify_delay_s, verify_interval_s
        Read-back: while it holds a lock, the worker reads the GPU's SM
        clock ``verify_delay_s`` after each change (long enough for a
        Hopper clock change to show) and every ``verify_interval_s`` after
        that; a disagreement is recorded, counted (:attr:`clock_mismatches`),
        warned about once per cause and, if the lock had held and was
        changed from outside, re-applied. ``verify_interval_s=0`` turns
        read-back off. Seconds, 0 to 86400.

    Raises
    ------
    LibraryLoadError
        NVML could not be loaded (no NVIDIA driver, or a wrong
        ``PERSEUS_NVML_LIBRARY``).
    NvmlError
        NVML failed to initialise or to describe the device.
    IndexError
        There is no such (visible) device.
    TypeError, ValueError
        An argument is not an integer (``True``, ``1500.0``) or is out of
        range; the message names it.

    Notes
    -----
    Several switchers may drive one GPU: the GPU runs at the clock the
    latest of them applied, and it is reset only when the last one that
    locked it lets go (``reset()`` or ``close()``); until then a release
    gives the GPU back the clock of the holder that applied one most
    recently.

    Examples
    --------
    >>> with perseus.FrequencySwitcher(device=0) as switcher:   # doctest: +SKIP
    ...     switcher.set(1410)                                   # returns at once
    ...     stream = torch.cuda.current_stream().cuda_stream
    ...     switcher.set_on_stream(stream, 1200)  # when the GPU gets here
    """

    def __init__(
        self,
        device: int = 0,
        *,
        memory_mhz: Optional[int] = None,
        record_capacity: int = 65536,
        verify_delay_s: float = 0.25,
        verify_interval_s: float = 5.0,
    ) -> None:
        self._native: Any = _core.Switcher(
            device=device,
            memory_mhz=memory_mhz,
            record_capacity=record_capacity,
            verify_delay_s=verify_delay_s,
            verify_interval_s=verify_interval_s,
        )
        self._snapped: set[int] = set()
        _clock_guard.register(self)

    # -- requests ---------------------------------------------------------

    def set(self, mhz: int) -> int:
        """Request SM clock ``mhz`` (MHz); returns the supported clock that will be applied.

        Returns within microseconds: the worker thread applies it. Requests
        coalesce (only the latest pending one is applied) and a request equal
        to the pending or applied clock costs nothing. An unsupported value
        is snapped to the nearest supported clock, with a
        :class:`ClockSnapWarning` the first time.

        Raises
        ------
        TypeError, ValueError
            ``mhz`` is not an integer, or outside 1 to ``perseus._core.MAX_CLOCK_MHZ``.
        NvmlError
            The worker failed earlier (the error was also printed on stderr
            when it happened); the switcher no longer switches.
        RuntimeError
            The switcher is closed.
        """
        applied: int = self._native.set(mhz)
        if applied != mhz:
            self._warn_snapped(mhz, applied)
        return applied

    def set_on_stream(self, stream: Union[int, Any], mhz: int) -> int:
        """Request SM clock ``mhz`` (MHz) when the GPU reaches this point of ``stream``.

        ``stream`` is a ``CUstream`` handle: ``torch.cuda.current_stream().cuda_stream``,
        a CuPy stream's ``.ptr`` (the stream objects themselves are accepted
        too), or 0 for the default stream. The calling thread must have that
        stream's CUDA context current (it has, after any CUDA work of the
        framework on this device). The clock changes one NVML latency (a few
        ms) after the GPU reaches the point; the stream never waits for it.

        Raises
        ------
        LibraryLoadError
            The CUDA driver could not be loaded (``PERSEUS_CUDA_LIBRARY``).
        CudaError
            ``cuLaunchHostFunc`` failed (no current context, bad stream ...).
        """
        applied: int = self._native.set_on_stream(_stream_handle(stream), mhz)
        if applied != mhz:
            self._warn_snapped(mhz, applied)
        return applied

    def reset(self) -> None:
        """Request the driver's default clocks (unlock) without closing.

        With other switchers still holding the GPU, it keeps their clock.
        """
        self._native.reset()

    def wait(self, timeout_s: Optional[float] = None, *, timeout: Optional[float] = None) -> bool:
        """Block until the latest request is applied; ``False`` after ``timeout_s`` seconds.

        ``None`` waits as long as it takes. Raises the worker's
        :class:`NvmlError` if it failed. Host functions still queued on a
        stream are not waited for. (``timeout`` is the deprecated name of
        ``timeout_s``.)
        """
        if timeout is not None:
            if timeout_s is not None:
                raise TypeError("pass timeout_s only (timeout is its deprecated name)")
            warn_renamed("FrequencySwitcher.wait(timeout=...)", "wait(timeout_s=...)")
            timeout_s = timeout
        done: bool = self._native.wait_idle(timeout_s)
        return done

    def close(self) -> None:
        """Give back the clocks this switcher locked and stop its worker. Idempotent.

        Raises the worker's error if no earlier call has raised it, or the
        error of the final reset (then run ``perseus reset-clocks``). Waits
        for the worker at most ``PERSEUS_CLOSE_TIMEOUT_S`` seconds (default
        10): an NVML call that hangs longer (a GPU fallen off the bus) is
        given up on with a ``RuntimeError`` naming the GPU; the clock
        watchdog still resets that GPU once the process ends.
        """
        _clock_guard.forget(self)
        self._native.close()

    def __enter__(self) -> FrequencySwitcher:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception:  # noqa: BLE001 - already on stderr; do not hide the original error
            pass

    # -- state ------------------------------------------------------------

    def records(self) -> SwitchLog:
        """The log of NVML clock calls the worker made, oldest first."""
        r = self._native.records()
        dropped = int(r.pop("dropped"))
        return SwitchLog(dropped=dropped, **r)

    def snap(self, mhz: int) -> int:
        """The supported SM clock (MHz) that ``set(mhz)`` would apply."""
        snapped: int = self._native.snap(mhz)
        return snapped

    @property
    def device(self) -> int:
        """CUDA device index."""
        index: int = self._native.device
        return index

    @property
    def nvml_index(self) -> int:
        """NVML's index of the device (PCI order, as ``nvidia-smi -i``)."""
        index: int = self._native.nvml_index
        return index

    @property
    def name(self) -> str:
        """The GPU's name, e.g. ``"NVIDIA H200"``."""
        name: str = self._native.name
        return name

    @property
    def supported_mhz(self) -> np.ndarray:
        """Supported SM clocks in MHz, ascending (empty if the GPU does not list them)."""
        clocks: np.ndarray = self._native.supported_mhz
        return clocks

    @property
    def memory_mhz(self) -> Optional[int]:
        """The memory clock (MHz) this switcher locks, or ``None``."""
        return self._native.memory_mhz or None

    @property
    def applied_mhz(self) -> Optional[int]:
        """The SM clock (MHz) the worker last locked; ``None`` while default clocks apply."""
        return self._native.applied_mhz or None

    @property
    def clock_mismatches(self) -> dict[str, int]:
        """Read-backs of the SM clock that disagreed with the lock, by cause.

        ``{"overridden": n, "clamped": n, "changed": n}``: the GPU ran faster
        than just locked (the driver overrode the lock), slower (a clamp or a
        power/thermal limit), or a lock that had held was changed from
        outside (then re-applied). Each is also a record in :meth:`records`
        (``SwitchSource.OVERRIDDEN`` / ``CLAMPED`` / ``CHANGED``, with
        ``requested_mhz`` the clock expected and ``applied_mhz`` the clock
        read), and each cause is warned about once on stderr.
        """
        counts: dict[str, int] = self._native.mismatches()
        return counts

    @property
    def closed(self) -> bool:
        closed: bool = self._native.closed
        return closed

    @property
    def failed(self) -> bool:
        """Whether the worker hit an NVML error and stopped switching."""
        failed: bool = self._native.failed
        return failed

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"applied={self.applied_mhz} MHz"
        return f"FrequencySwitcher(device={self.device}, {self.name!r}, {state})"

    def _warn_snapped(self, mhz: int, applied: int) -> None:
        if mhz in self._snapped:
            return
        self._snapped.add(mhz)
        clocks = self.supported_mhz
        span = f"{clocks[0]}..{clocks[-1]} MHz" if len(clocks) else "none listed"
        warnings.warn(
            f"{mhz} MHz is not a supported SM clock of GPU {self.device} ({self.name}); "
            f"using {applied} MHz (supported: {span})",
            ClockSnapWarning,
            stacklevel=3,
        )


# -- restoring clocks however the process ends --------------------------------
#
# Four layers, from the gentlest: the switcher's own close() (with, gc);
# interpreter exit (atexit, reached also by an uncaught exception or
# KeyboardInterrupt); signal handlers for the signals that kill by default;
# and the watchdog process for deaths that run no code at all.

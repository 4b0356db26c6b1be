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

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Optional, Union

import numpy as np

from . import _core
from . import _watchdog as _watchdog_module
from ._core import CudaError, LibraryLoadError, NvmlDevice, NvmlError, NvmlReturn, SwitchSource
from ._deprecation import warn_renamed

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
        self, device: int = 0, *, memory_mhz: Optional[int] = None, record_capacity: int = 65536
    ) -> None:
        self._native: Any = _core.Switcher(
            device=device, memory_mhz=memory_mhz, record_capacity=record_capacity
        )
        self._snapped: set[int] = set()
        _register(self)

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
            ``mhz`` is not an integer, or not 1 to 100000.
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
        error of the final reset (then run ``perseus reset-clocks``).
        """
        _open.discard(self)
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

_open: weakref.WeakSet[FrequencySwitcher] = weakref.WeakSet()
_hooks_lock = threading.Lock()
_atexit_installed = False
_signals_requested = False
_previous_handlers: dict[int, Any] = {}
# The signals whose default action ends the process (SIGQUIT also dumps core).
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_SIGNAL_WAIT_S = 10.0  # the longest a handler waits for one switcher's reset


def _open_switchers() -> list[FrequencySwitcher]:
    for _ in range(3):  # the set may change while we copy it
        try:
            return list(_open)
        except RuntimeError:
            continue
    return []  # pragma: no cover


def _close_all() -> None:
    """Close every open switcher; errors are not raised (the worker printed them)."""
    for switcher in _open_switchers():
        try:
            switcher.close()
        except Exception:  # noqa: BLE001
            pass


def _reset_all() -> list[tuple[FrequencySwitcher, int]]:
    """Reset every open switcher's clocks, keeping it open; returns what each had asked for."""
    reset = []
    for switcher in _open_switchers():
        try:
            target = switcher._native.target_mhz
            switcher._native.reset()
        except Exception:  # noqa: BLE001 - closed or failed: nothing of it to reset
            continue
        reset.append((switcher, target))
    for switcher, _ in reset:
        try:
            switcher._native.wait_idle(_SIGNAL_WAIT_S)
        except Exception:  # noqa: BLE001
            pass
    return reset


def _restore(reset: list[tuple[FrequencySwitcher, int]]) -> None:
    for switcher, target in reset:
        if target:
            try:
                switcher._native.set(target)
            except Exception:  # noqa: BLE001 - closed meanwhile by the handler
                pass


def _on_signal(signum: int, frame: Optional[FrameType]) -> None:
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if previous is signal.default_int_handler:
        # KeyboardInterrupt is an exception like any other: with blocks,
        # close() and interpreter exit give the clocks back if it ends the
        # program, and a program that catches it keeps its switchers.
        previous(signum, frame)
        return
    if callable(previous):
        # The program's handler may end the process (clocks are reset
        # first) or carry on (the clocks it had asked for come back).
        reset = _reset_all()
        previous(signum, frame)
        _restore(reset)
        return
    # The signal would have killed the process: reset, then let it.
    _close_all()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def _install_signal_handlers() -> None:
    """Put _on_signal in front of the handlers of _HANDLED_SIGNALS. Main thread only."""
    for signum in _HANDLED_SIGNALS:
        if signum in _previous_handlers:
            continue
        previous = signal.getsignal(signum)
        # Leave alone signals the program ignores, and handlers installed
        # outside Python (getsignal gives None), which we could not chain;
        # the watchdog still resets if such a signal kills the process.
        if previous is None or previous == signal.SIG_IGN or previous is _on_signal:
            continue
        _previous_handlers[signum] = previous
        signal.signal(signum, _on_signal)


def _install_signal_handlers_on_main_thread() -> None:
    """Run by the main thread when the first switcher was made on another one."""
    try:
        _install_signal_handlers()
    except Exception as error:  # noqa: BLE001 - never raise into whatever main was doing
        print(f"perseus: could not install signal handlers: {error}", file=sys.stderr)


def _request_signal_handlers() -> None:
    if threading.current_thread() is threading.main_thread():
        _install_signal_handlers()
        return
    # Python lets only the main thread install handlers: ask it to, at its
    # next Python instruction. Until it gets there (a main thread blocked in
    # native code gets there only when the call returns), a signal has its
    # old effect; the watchdog still resets if that kills the process.
    why = None
    if not threading.main_thread().is_alive():
        why = "the main thread has already finished"
    elif not _core.call_on_main_thread(_install_signal_handlers_on_main_thread):
        why = "the interpreter's queue of calls for the main thread is full"
    if why is not None:
        warnings.warn(
            "perseus: the first FrequencySwitcher was created off the main thread and "
            f"{why}, so no signal handlers reset the clocks on SIGTERM, SIGHUP, SIGQUIT or "
            "SIGINT (the clock watchdog still resets them once the process is gone). Create "
            "the first switcher on the main thread to have them.",
            RuntimeWarning,
            stacklevel=4,
        )


# -- the watchdog process (perseus/_watchdog.py) ------------------------------

# A fresh interpreter, not a fork: forking a process with threads (ours, the
# framework's) copies locks held by threads that do not exist in the child.
# Terminal signals are ignored before anything else; the watchdog goes when
# its socket closes. It loads this very perseus's extension and watchdog
# module by path, without the package: no numpy, no solver, so it starts in
# tens of milliseconds and sits in little memory, and no sys.path or working
# directory can make it run another perseus.
_WATCHDOG_BOOT = """\
import importlib.util, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, signal.SIG_IGN)
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
core = load("perseus._core", sys.argv[1])
watchdog = load("perseus._watchdog", sys.argv[2])
sys.exit(watchdog.main(int(sys.argv[3]), core))
"""
_WATCHDOG_QUICK_EXIT_S = 1.0  # a watchdog that dies sooner than this is failing, not killed
_WATCHDOG_MAX_QUICK_EXITS = 3  # ... and after this many in a row it is not restarted

_watchdog: Optional[subprocess.Popen[bytes]] = None
_watchdog_quick_exits = 0
_watchdog_gave_up = False


def _start_watchdog() -> subprocess.Popen[bytes]:
    """Start a watchdog and hand the core our end of its socket. _hooks_lock held."""
    global _watchdog
    if not sys.executable:
        raise RuntimeError("sys.executable is not set, so no Python can be started")
    core_path, module_path = _core.__file__, _watchdog_module.__file__
    if core_path is None or module_path is None:
        raise RuntimeError("perseus is not installed as files the watchdog could load")
    ours, theirs = socket.socketpair()  # both ends close-on-exec; theirs becomes its stdin
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG_BOOT, core_path, module_path, str(os.getpid())],
            stdin=theirs.fileno(),
            stdout=subprocess.DEVNULL,
            # stderr is inherited: the watchdog says there what it reset.
            # A session of its own: Ctrl-C and kills of our process group miss it.
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    _core.set_clock_watchdog(ours.detach())
    _watchdog = process
    threading.Thread(
        target=_reap_watchdog, args=(process,), name="perseus-watchdog-reaper", daemon=True
    ).start()
    return process


def _reap_watchdog(process: subprocess.Popen[bytes]) -> None:
    """Waits for the watchdog (so it never lingers as a zombie) and replaces it if it dies."""
    global _watchdog, _watchdog_quick_exits, _watchdog_gave_up
    started = time.monotonic()
    status = process.wait()
    with _hooks_lock:
        if _watchdog is not process:
            return  # replaced, or we are a forked child
        _watchdog = None
        quick = time.monotonic() - started < _WATCHDOG_QUICK_EXIT_S
        _watchdog_quick_exits = _watchdog_quick_exits + 1 if quick else 0
        if _watchdog_quick_exits >= _WATCHDOG_MAX_QUICK_EXITS:
            _watchdog_gave_up = True
            print(
                f"perseus: the clock watchdog keeps exiting (status {status}); not restarting "
                "it: clocks locked by this process are not reset if it dies without closing "
                "its switchers (SIGKILL, a crash). Run `perseus reset-clocks` after such a death.",
                file=sys.stderr,
            )
            return
        try:
            replacement = _start_watchdog()
        except Exception as error:  # noqa: BLE001
            _watchdog_gave_up = True
            print(f"perseus: could not restart the clock watchdog: {error}", file=sys.stderr)
            return
        print(
            f"perseus: the clock watchdog (pid {process.pid}) exited with status {status}; "
            f"started another (pid {replacement.pid})",
            file=sys.stderr,
        )


def _ensure_watchdog() -> None:
    """_hooks_lock held."""
    global _watchdog_gave_up
    if _watchdog is not None or _watchdog_gave_up:
        return
    try:
        _start_watchdog()
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        _watchdog_gave_up = True
        warnings.warn(
            f"perseus: could not start the clock watchdog ({error}): clocks locked by this "
            "process are not reset if it dies without closing its switchers (SIGKILL, the OOM "
            "killer, a crash). Run `perseus reset-clocks` after such a death.",
            RuntimeWarning,
            stacklevel=4,
        )


def _register(switcher: FrequencySwitcher) -> None:
    global _atexit_installed, _signals_requested
    _open.add(switcher)
    with _hooks_lock:
        if not _atexit_installed:
            atexit.register(_close_all)
            _atexit_installed = True
        _ensure_watchdog()
        if not _signals_requested:
            _signals_requested = True
            _request_signal_handlers()


# -- fork() --------------------------------------------------------------------


class _ForkedNative:
    """Stands in for a switcher's native half in a forked child process.

    The worker thread and the locked clocks belong to the parent; the child
    must neither use nor reset them.
    """

    closed = True
    failed = False
    applied_mhz = 0
    target_mhz = 0
    memory_mhz = 0

    def __init__(self, native: Any) -> None:
        self.device = native.device
        self.nvml_index = native.nvml_index
        self.name = native.name
        self.supported_mhz = native.supported_mhz

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            "this FrequencySwitcher belongs to the parent process; a forked child cannot use "
            "it (create a new one in the child)"
        )


def _after_fork_in_child() -> None:
    # The core has already closed the child's copy of the watchdog socket and
    # emptied its lock books (pthread_atfork), so the parent's watchdog still
    # fires when the parent dies, whatever the child does.
    global _hooks_lock, _watchdog, _watchdog_quick_exits, _watchdog_gave_up
    _hooks_lock = threading.Lock()  # another thread may have held it at the fork
    _watchdog, _watchdog_quick_exits, _watchdog_gave_up = None, 0, False
    for switcher in _open_switchers():
        native = switcher._native
        switcher._native = _ForkedNative(native)
        native.close()  # in a child: forgets the parent's worker without touching it
    _open.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- resetting from the shell -------------------------------------------------


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

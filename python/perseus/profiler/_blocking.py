"""Blocking power: what a GPU draws while it waits on a pipeline neighbour.

NCCL waits for a peer by spinning a kernel on a flag in memory the peer (or
the host proxy) writes. :func:`measure_blocking_power` does the same on one
GPU: a one-warp kernel polls a flag in host-mapped memory, the host sets the
flag after ``window_s`` seconds, and the power is NVML's energy over that
window divided by its length. The kernel is built with CuPy when it is
installed, otherwise loaded as PTX in torch's context through perseus's own
CUDA driver loader (cpp/cuda_loader.hpp, ``PERSEUS_CUDA_LIBRARY``), the one
the switcher uses. In ``mode="cpu"`` the host simply sleeps through the window.
"""

from __future__ import annotations

import ctypes
import importlib
import time
from typing import Any, Optional

import numpy as np

from .. import _core
from ..switcher import CudaError, FrequencySwitcher, LibraryLoadError
from ._backend import MODES, Backend, GpuBackend, open_backend
from ._records import BlockingPower, ProfilerError

__all__ = ["measure_blocking_power"]

# Every kernel argument is a 64-bit integer, so the CUDA source (CuPy) and
# the PTX (driver) take the same parameters: the flag's address, a safety
# timeout in nanoseconds after which the kernel gives up, and the address
# of two 64-bit results: spins made and whether the flag was seen.
_CUDA_SOURCE = r"""
extern "C" __global__ void perseus_wait(unsigned long long flag_address,
                                        unsigned long long timeout_ns,
                                        unsigned long long out_address) {
  const volatile int* flag = (const volatile int*)flag_address;
  unsigned long long start, now, spins = 0;
  int seen = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*flag != 0) { seen = 1; break; }
    ++spins;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < timeout_ns);
  if (threadIdx.x == 0) {
    unsigned long long* out = (unsigned long long*)out_address;
    out[0] = spins;
    out[1] = (unsigned long long)seen;
  }
}
"""

_PTX = rb"""
.version 6.0
.target sm_60
.address_size 64

.visible .entry perseus_wait(
    .param .u64 flag_address,
    .param .u64 timeout_ns,
    .param .u64 out_address)
{
    .reg .pred %p<4>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<10>;

    ld.param.u64 %rd1, [flag_address];
    ld.param.u64 %rd2, [timeout_ns];
    ld.param.u64 %rd3, [out_address];
    mov.u64 %rd4, %globaltimer;
    mov.u64 %rd5, 0;
    mov.u32 %r2, 0;
WAIT:
    ld.volatile.u32 %r1, [%rd1];
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra SEEN;
    add.u64 %rd5, %rd5, 1;
    mov.u64 %rd6, %globaltimer;
    sub.u64 %rd7, %rd6, %rd4;
    setp.lt.u64 %p2, %rd7, %rd2;
    @%p2 bra WAIT;
    bra.uni DONE;
SEEN:
    mov.u32 %r2, 1;
DONE:
    mov.u32 %r3, %tid.x;
    setp.ne.u32 %p3, %r3, 0;
    @%p3 bra END;
    st.u64 [%rd3], %rd5;
    cvt.u64.u32 %rd8, %r2;
    st.u64 [%rd3+8], %rd8;
END:
    ret;
}
"""

_THREADS = 32  # one warp polls, as one NCCL channel's threads do
_BUFFER_BYTES = 24  # flag (int32, padded to 8) + spins (u64) + seen (u64)
_HOST_ALLOC_PORTABLE_MAPPED = 0x01 | 0x02  # cudaHostAlloc flags (CuPy)


class _CupyWaiter:
    method = "cupy kernel"

    def __init__(self, cupy: Any, device: int) -> None:
        self._cupy = cupy
        self._device = device
        runtime = cupy.cuda.runtime
        with cupy.cuda.Device(device):
            self._kernel = cupy.RawKernel(_CUDA_SOURCE, "perseus_wait")
            self.host = runtime.hostAlloc(_BUFFER_BYTES, _HOST_ALLOC_PORTABLE_MAPPED)
            try:
                self._device_address = runtime.pointerGetAttributes(self.host).devicePointer
            except Exception:  # noqa: BLE001 - with unified addressing the addresses agree
                self._device_address = self.host
        ctypes.memset(self.host, 0, _BUFFER_BYTES)

    def launch(self, timeout_ns: int) -> None:
        address = self._device_address
        with self._cupy.cuda.Device(self._device):
            self._kernel(
                (1,),
                (_THREADS,),
                (np.uint64(address), np.uint64(timeout_ns), np.uint64(address + 8)),
            )

    def close(self) -> None:
        self._cupy.cuda.runtime.freeHost(self.host)


class _DriverWaiter:
    """The same kernel as PTX, through perseus's CUDA driver loader, in the current context.

    ``stream`` is the CUstream to launch on; the caller has made the
    framework's context current on this thread (any CUDA call of it does).
    """

    method = "cuda driver kernel"

    def __init__(self, stream: int) -> None:
        self._stream = stream
        try:
            self._module = _core.CudaModule(_PTX)
            try:
                self._memory = _core.MappedHostMemory(_BUFFER_BYTES)
            except BaseException:
                self._module.close()
                raise
        except (CudaError, LibraryLoadError) as error:
            raise ProfilerError(f"cannot run the blocking-power kernel: {error}") from error
        self.host = self._memory.host_address
        self._device_address = self._memory.device_address

    def launch(self, timeout_ns: int) -> None:
        address = self._device_address
        try:
            self._module.launch(
                "perseus_wait",
                grid=1,
                block=_THREADS,
                stream=self._stream,
                arguments=[address, timeout_ns, address + 8],
            )
        except CudaError as error:
            raise ProfilerError(f"cannot run the blocking-power kernel: {error}") from error

    def close(self) -> None:
        self._memory.close()
        self._module.close()


def _gpu_waiter(backend: GpuBackend) -> Any:
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        backend.sync()  # makes torch's context current on this thread
        stream = backend.torch.cuda.current_stream(backend.device).cuda_stream
        return _DriverWaiter(stream)
    return _CupyWaiter(cupy, backend.device.index)


#: An energy reading counts as taken at one instant when the clock readings on
#: either side of it are at most this far apart (seconds); a reading that took
#: longer (the process was descheduled inside it, as on a busy machine) is
#: taken again, up to _READ_ATTEMPTS times. Without this a 3 ms stall inside
#: one reading of a 50 ms window added 6 % to the watts (the energy then spans
#: more time than the window that divides it).
_READ_TIGHT_S = 1e-3
_READ_ATTEMPTS = 5


def _energy_now(backend: Backend) -> tuple[float, float]:
    """(perf_counter seconds, NVML energy in mJ), the time the middle of the reading."""
    for _ in range(_READ_ATTEMPTS):
        before = time.perf_counter()
        energy_mj = backend.energy_mj()
        after = time.perf_counter()
        if after - before <= _READ_TIGHT_S:
            break
    return (before + after) / 2, energy_mj


def _measure(backend: Backend, window_s: float, frequency_mhz: Optional[int]) -> BlockingPower:
    """Measure on an open backend; the caller has locked the clock (or not)."""
    if backend.mode == "cpu":
        backend.sync()
        t0, e0 = _energy_now(backend)
        time.sleep(window_s)
        t1, e1 = _energy_now(backend)
        method = "cpu sleep"
    else:
        assert isinstance(backend, GpuBackend)
        waiter = _gpu_waiter(backend)
        flag = ctypes.c_int32.from_address(waiter.host)
        try:
            # A first launch with the flag already set loads (CuPy: compiles) the
            # kernel outside the window and shows that the GPU sees host writes.
            flag.value = 1
            waiter.launch(int(5e9))
            backend.sync()
            if not ctypes.c_uint64.from_address(waiter.host + 16).value:
                raise ProfilerError(
                    "the wait kernel cannot see host-mapped memory here; measure P_block "
                    "another way and pass blocking_power_w"
                )
            ctypes.memset(waiter.host, 0, _BUFFER_BYTES)
            timeout_ns = int((window_s + 60.0) * 1e9)  # the kernel never outlives a lost flag
            backend.sync()
            t0, e0 = _energy_now(backend)
            waiter.launch(timeout_ns)
            time.sleep(window_s)
            flag.value = 1
            backend.sync()
            t1, e1 = _energy_now(backend)
            spins = ctypes.c_uint64.from_address(waiter.host + 8).value
            seen = ctypes.c_uint64.from_address(waiter.host + 16).value
        finally:
            waiter.close()
        if not seen:
            raise ProfilerError(
                "the wait kernel never saw the flag the host set: host-mapped memory does not "
                "work here; measure P_block another way and pass blocking_power_w"
            )
        if spins == 0:
            raise ProfilerError("the wait kernel did not spin; the measurement is meaningless")
        method = waiter.method
    if e1 <= e0:
        raise ProfilerError(
            f"NVML's energy counter did not advance in a {t1 - t0:.3g} s blocking window; "
            "lengthen blocking_window_s"
        )
    energy_j = (e1 - e0) / 1e3
    return BlockingPower(
        watts=energy_j / (t1 - t0),
        window_s=t1 - t0,
        energy_j=energy_j,
        frequency_mhz=frequency_mhz,
        method=method,
    )


def measure_blocking_power(
    device: int = 0,
    *,
    mode: str = "gpu",
    window_s: float = 3.0,
    frequency_mhz: Optional[int] = None,
) -> BlockingPower:
    """Measure ``P_block``, the power (W) a GPU draws while it waits on a neighbour.

    A kernel busy-waits on a flag in host-mapped memory, as NCCL waits for a
    peer, until the host sets it ``window_s`` seconds later; the result is
    NVML's energy over the window divided by its length.

    Parameters
    ----------
    device
        CUDA device index (honours ``CUDA_VISIBLE_DEVICES``).
    mode
        ``"gpu"`` (needs torch with CUDA, and NVML), or ``"cpu"``: the host
        sleeps through the window and NVML (normally a fake) gives the energy.
    window_s
        Length of the window in seconds; several seconds, so NVML's coarse
        energy counter (updated every few tens of ms) is accurate enough.
    frequency_mhz
        Lock the SM clock at this many MHz during the window (snapped to a
        supported clock); ``None`` measures at the current clocks.

    Returns
    -------
    BlockingPower

    Raises
    ------
    ProfilerUnavailable
        What ``mode`` needs is missing.
    ProfilerError
        The wait kernel could not run, or the counter did not advance.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0 seconds, not {window_s!r}")
    backend = open_backend(mode, device)
    try:
        if frequency_mhz is None:
            return _measure(backend, window_s, None)
        with FrequencySwitcher(device) as switcher:
            applied = switcher.set(switcher.snap(int(frequency_mhz)))
            switcher.wait()
            return _measure(backend, window_s, applied)
    finally:
        backend.close()

"""GPU check of the frequency switcher, for a machine with an NVIDIA GPU (an H200).

    python bench/gpu_check_switcher.py [--device 0] [--json out.json]

Reports, for one GPU:

1. whether its SM clock can be locked here (root / CAP_SYS_ADMIN, no MIG),
   and the supported memory and SM clocks;
2. the wall time of one ``nvmlDeviceSetGpuLockedClocks`` call;
3. how long until the new clock shows in ``nvmlDeviceGetClockInfo`` (with the
   GPU busy, when torch or CuPy can keep it busy), by hand and through
   ``perseus.measure_switch_latency`` (the ``switch_latency_s`` plans take);
4. ``set()`` latency seen by the caller on the real driver;
4b. the switcher's read-back: whether a lock reads back as locked (any
   ``OVERRIDDEN`` / ``CLAMPED`` readings, and on which GPU state), and that
   a reset from outside is caught (``CHANGED``) and re-applied;
4c. switch latency on the GPU's timeline: ``measure_switch_latency`` with
   ``stream=`` (from the GPU reaching a ``set_on_stream`` change to NVML
   reporting it), and how long until *kernels* queued after the change run
   at the new clock: short fixed-cycle kernels follow the change on its
   stream, each timed by CUDA events, so each one's cycles / duration is
   the SM clock it ran at (torch or CuPy needed);
5. that stream-ordered switching (``set_on_stream``) hands its target over
   between two kernels, in order: after kernel A ends and before kernel B
   ends, although the CPU queued it long before (torch CUDA streams, or CuPy).
   This part runs even when locking is refused: the handover time is in the
   switcher's records either way.

It always gives the clocks back (``finally``, and the switcher's own exit
and signal hooks) and exits 0 when the check ran, whatever the GPU allowed;
1 if something unexpected failed; 3 on its own timeout. The JSON goes to
``--json``, or to ``$OUT/gpu_check_switcher.json`` when ``$OUT`` is set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import perseus
from perseus import _core
from perseus.switcher import CudaError, FrequencySwitcher, NvmlDevice, NvmlError, SwitchSource

report: dict[str, Any] = {}


def say(line: str = "") -> None:
    print(line, flush=True)


# ---- something to keep the GPU busy: torch, else CuPy ----------------------


class TorchBackend:
    name = "torch"

    def __init__(self, device: int) -> None:
        import torch

        self.torch = torch
        torch.cuda.set_device(device)
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # creates the context on this thread
        self.cycles_per_s = self._calibrate()

    def stream(self) -> Any:
        return self.torch.cuda.Stream()

    def handle(self, stream: Any) -> int:
        return stream.cuda_stream

    def spin(self, stream: Any, seconds: float) -> None:
        self.spin_cycles(stream, int(seconds * self.cycles_per_s))

    def spin_cycles(self, stream: Any, cycles: int) -> None:
        with self.torch.cuda.stream(stream):
            self.torch.cuda._sleep(cycles)

    def timed_event(self, stream: Any) -> Any:
        e = self.torch.cuda.Event(enable_timing=True)
        e.record(stream)
        return e

    @staticmethod
    def elapsed_s(start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) * 1e-3

    def event(self, stream: Any) -> Any:
        e = self.torch.cuda.Event()
        e.record(stream)
        return e

    @staticmethod
    def done(event: Any) -> bool:
        return event.query()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def _calibrate(self) -> float:
        cycles = 20_000_000
        self.torch.cuda._sleep(cycles)  # warm-up
        self.torch.cuda.synchronize()
        t0 = time.perf_counter()
        self.torch.cuda._sleep(cycles)
        self.torch.cuda.synchronize()
        return cycles / (time.perf_counter() - t0)


class CupyBackend:
    name = "cupy"

    def __init__(self, device: int) -> None:
        import cupy

        self.cp = cupy
        cupy.cuda.Device(device).use()
        self.kernel = cupy.RawKernel(
            r"""extern "C" __global__ void spin(long long cycles) {
                  long long start = clock64();
                  while (clock64() - start < cycles) {}
               }""",
            "spin",
        )
        self.cycles_per_s = self._calibrate()

    def stream(self) -> Any:
        return self.cp.cuda.Stream(non_blocking=True)

    def handle(self, stream: Any) -> int:
        return stream.ptr

    def spin(self, stream: Any, seconds: float) -> None:
        self.spin_cycles(stream, int(seconds * self.cycles_per_s))

    def spin_cycles(self, stream: Any, cycles: int) -> None:
        with stream:
            self.kernel((1,), (1,), (self.cp.int64(cycles),))

    def timed_event(self, stream: Any) -> Any:
        e = self.cp.cuda.Event()  # CuPy's events time by default
        e.record(stream)
        return e

    def elapsed_s(self, start: Any, end: Any) -> float:
        return float(self.cp.cuda.get_elapsed_time(start, end)) * 1e-3

    def event(self, stream: Any) -> Any:
        e = self.cp.cuda.Event()
        e.record(stream)
        return e

    @staticmethod
    def done(event: Any) -> bool:
        return event.done

    def synchronize(self) -> None:
        self.cp.cuda.Device().synchronize()

    def _calibrate(self) -> float:
        cycles = 20_000_000
        s = self.cp.cuda.Stream.null
        self.kernel((1,), (1,), (self.cp.int64(cycles),))
        s.synchronize()
        t0 = time.perf_counter()
        self.kernel((1,), (1,), (self.cp.int64(cycles),))
        s.synchronize()
        return cycles / (time.perf_counter() - t0)


def make_backend(device: int) -> Any:
    errors = []
    for backend in (TorchBackend, CupyBackend):
        try:
            return backend(device)
        except Exception as error:  # noqa: BLE001 - try the next one
            errors.append(f"{backend.name}: {type(error).__name__}: {error}")
    report["backend_errors"] = errors
    return None


# ---- the checks --------------------------------------------------------------


def check_environment(gpu: NvmlDevice) -> tuple[list[int], list[int]]:
    mem = [int(x) for x in gpu.supported_memory_clocks()]
    sm = [int(x) for x in gpu.supported_graphics_clocks()]
    report.update(
        perseus_version=perseus.__version__,
        driver=_core.nvml_driver_version(),
        gpu=gpu.name,
        uuid=gpu.uuid,
        nvml_index=gpu.nvml_index,
        supported_memory_mhz=mem,
        supported_sm_mhz=sm,
        sm_clock_now_mhz=gpu.clock_mhz("sm"),
    )
    say(
        f"GPU            {gpu.name} (CUDA {gpu.index}, NVML {gpu.nvml_index}), driver {report['driver']}"
    )
    say(f"memory clocks  {mem} MHz")
    if sm:
        say(f"SM clocks      {len(sm)} between {sm[0]} and {sm[-1]} MHz: {sm[:4]} ... {sm[-4:]}")
    else:
        say("SM clocks      none listed (the driver does not report supported clocks)")
    return mem, sm


def check_can_lock(gpu: NvmlDevice, probe: int) -> bool:
    try:
        gpu.set_locked_clocks(probe, probe)
    except NvmlError as error:
        report["can_lock"] = False
        report["lock_error"] = {"code": error.code, "message": str(error)}
        say(f"lock clocks    REFUSED: {error}")
        return False
    report["can_lock"] = True
    say(f"lock clocks    yes (locked at {probe} MHz)")
    return True


def check_set_latency(gpu: NvmlDevice, high: int, low: int, repeats: int = 10) -> None:
    set_ms, reset_ms = [], []
    for i in range(repeats):
        target = low if i % 2 == 0 else high
        t0 = time.perf_counter()
        gpu.set_locked_clocks(target, target)
        set_ms.append((time.perf_counter() - t0) * 1e3)
    for _ in range(3):
        t0 = time.perf_counter()
        gpu.reset_locked_clocks()
        reset_ms.append((time.perf_counter() - t0) * 1e3)
    report["set_locked_clocks_ms"] = set_ms
    report["reset_locked_clocks_ms"] = reset_ms
    say(
        f"SetGpuLocked   median {statistics.median(set_ms):.3f} ms, min {min(set_ms):.3f}, "
        f"max {max(set_ms):.3f} ({repeats} calls, {low}<->{high} MHz)"
    )
    say(f"ResetGpuLocked median {statistics.median(reset_ms):.3f} ms")


def check_clock_visible(gpu: NvmlDevice, backend: Any, high: int, low: int) -> None:
    """Time from the start of a set call until GetClockInfo shows the target."""
    busy = backend is not None
    if busy:
        side = backend.stream()
        backend.spin(side, 3.0)  # keeps an SM busy while we measure
    results = []
    try:
        for target in (low, high, low, high):
            t0 = time.perf_counter()
            gpu.set_locked_clocks(target, target)
            t_ret = time.perf_counter()
            seen, last, polls = None, None, 0
            while time.perf_counter() - t0 < 2.0:
                last = gpu.clock_mhz("sm")
                polls += 1
                if abs(last - target) <= 15:
                    seen = time.perf_counter()
                    break
            results.append(
                {
                    "target_mhz": target,
                    "call_ms": (t_ret - t0) * 1e3,
                    "visible_after_start_ms": None if seen is None else (seen - t0) * 1e3,
                    "visible_after_return_ms": None if seen is None else (seen - t_ret) * 1e3,
                    "last_read_mhz": last,
                    "polls": polls,
                }
            )
    finally:
        if busy:
            backend.synchronize()
    report["clock_visible"] = {"gpu_busy": busy, "transitions": results}
    for r in results:
        shown = (
            f"{r['visible_after_start_ms']:.3f} ms after the call began "
            f"({r['visible_after_return_ms']:.3f} ms after it returned)"
            if r["visible_after_start_ms"] is not None
            else f"NOT seen within 2 s (last read {r['last_read_mhz']} MHz)"
        )
        say(f"clock visible  -> {r['target_mhz']} MHz: {shown}{'' if busy else ' [GPU idle]'}")


def check_measure_switch_latency(device: int, backend: Any, high: int, low: int) -> None:
    """perseus.measure_switch_latency itself, with the GPU busy: the L that planning takes."""
    busy = backend is not None
    if busy:
        side = backend.stream()
        backend.spin(side, 3.0)
    try:
        m = perseus.measure_switch_latency(device, repeats=10, clocks_mhz=(high, low))
    finally:
        if busy:
            backend.synchronize()
    report["measure_switch_latency"] = {
        "gpu_busy": busy,
        "clocks_mhz": list(m.clocks_mhz),
        "median_s": m.median_s,
        "visible_s": m.visible_s.tolist(),
        "call_s": m.call_s.tolist(),
        "timeouts": m.timeouts,
    }
    say(
        f"switch latency perseus.measure_switch_latency: median {m.median_s * 1e3:.3f} ms over "
        f"{len(m.visible_s)} changes, {m.timeouts} not seen{'' if busy else ' [GPU idle]'}"
    )


def check_stream_switch_latency(device: int, backend: Any, high: int, low: int) -> None:
    """measure_switch_latency on the GPU's timeline: changes queued on a stream."""
    busy = backend is not None
    if busy:
        side = backend.stream()
        backend.spin(side, 3.0)  # keeps an SM busy while we measure
        stream = backend.handle(backend.stream())
    else:
        stream = 0  # the default stream: needs a current context (the fake CUDA has one)
    try:
        m = perseus.measure_switch_latency(
            device, repeats=10, clocks_mhz=(high, low), stream=stream
        )
    except CudaError as error:
        report["stream_switch_latency"] = {"skipped": f"no stream to queue on: {error}"}
        say(f"stream latency SKIPPED: {error}")
        return
    finally:
        if busy:
            backend.synchronize()
    report["stream_switch_latency"] = {
        "gpu_busy": busy,
        "clocks_mhz": list(m.clocks_mhz),
        "median_s": m.median_s,
        "visible_s": m.visible_s.tolist(),
        "handover_s": m.handover_s.tolist(),
        "call_s": m.call_s.tolist(),
        "timeouts": m.timeouts,
    }
    handover = statistics.median(m.handover_s.tolist()) if len(m.handover_s) else float("nan")
    say(
        f"stream latency GPU reached the change -> NVML shows it: median {m.median_s * 1e3:.3f} ms "
        f"over {len(m.visible_s)} changes, {m.timeouts} not seen (queue to GPU median "
        f"{handover * 1e3:.3f} ms){'' if busy else ' [GPU idle]'}"
    )


PROBE_S = 0.0005  # one clock probe kernel lasts this long at the fast clock
PROBES_BEFORE = 20  # probes at the old clock, before the change
PROBES_AFTER = 600  # after it: covers about 300 ms at the fast clock, more at the slow one


def first_probe_at(mhz: list[float], target: int, other: int, start: int) -> Any:
    """Index of the first probe from ``start`` that, with the next, ran nearer ``target``."""
    near = [abs(f - target) < abs(f - other) for f in mhz]
    for k in range(start, len(near) - 1):
        if near[k] and near[k + 1]:
            return k
    return None


def check_kernel_clock_after_switch(device: int, backend: Any, high: int, low: int) -> None:
    """How long after a set_on_stream change kernels on that stream run at the new clock."""
    if backend is None:
        report["kernel_clock_latency"] = {"skipped": "neither torch nor cupy usable"}
        say("kernel clock   SKIPPED: neither torch nor CuPy could drive the GPU")
        return
    results = []
    with FrequencySwitcher(device) as sw:
        stream = backend.stream()
        handle = backend.handle(stream)
        for old, new in ((high, low), (low, high)):
            sw.set(old)
            sw.wait(timeout_s=10)
            time.sleep(0.3)  # let the old clock settle
            cycles = int(PROBE_S * high * 1e6)
            events = [backend.timed_event(stream)]
            for _ in range(PROBES_BEFORE):
                backend.spin_cycles(stream, cycles)
                events.append(backend.timed_event(stream))
            sw.set_on_stream(handle, new)
            for _ in range(PROBES_AFTER):
                backend.spin_cycles(stream, cycles)
                events.append(backend.timed_event(stream))
            backend.synchronize()
            durations = [backend.elapsed_s(a, b) for a, b in zip(events, events[1:])]
            mhz = [cycles / d / 1e6 if d > 0 else float("inf") for d in durations]
            k = first_probe_at(mhz, new, old, PROBES_BEFORE)
            result: dict[str, Any] = {
                "from_mhz": old,
                "to_mhz": new,
                "probe_cycles": cycles,
                "mhz_before_median": statistics.median(mhz[:PROBES_BEFORE]),
                "mhz_after_median_last_100": statistics.median(mhz[-100:]),
                "probe_mhz": [round(f, 1) for f in mhz],
            }
            if k is None:
                result["latency_s"] = None
            else:
                # From the change's place in the stream to the start of the
                # first probe at the new clock, on the GPU's own timer.
                result["latency_s"] = backend.elapsed_s(events[PROBES_BEFORE], events[k])
            results.append(result)
            shown = (
                "never within the probes"
                if result["latency_s"] is None
                else f"{result['latency_s'] * 1e3:.3f} ms"
            )
            say(
                f"kernel clock   {old} -> {new} MHz on the stream: kernels ran at the new clock "
                f"{shown} after the change (probes before: median "
                f"{result['mhz_before_median']:.0f} MHz, at the end "
                f"{result['mhz_after_median_last_100']:.0f} MHz)"
            )
    report["kernel_clock_latency"] = {"backend": backend.name, "changes": results}


def check_switcher_latency(device: int, high: int, low: int) -> None:
    with FrequencySwitcher(device) as sw:
        ns = []
        for i in range(400):
            t0 = time.perf_counter_ns()
            sw.set(low if i % 2 == 0 else high)
            ns.append(time.perf_counter_ns() - t0)
            if i % 50 == 0:
                time.sleep(0.01)
        sw.wait(timeout_s=10)
        log = sw.records()
    ns.sort()
    worker_ms = [x / 1e6 for x in log.latency_ns]
    report["switcher_set_ns"] = {
        "median": ns[len(ns) // 2],
        "p99": ns[int(len(ns) * 0.99)],
        "max": ns[-1],
    }
    report["switcher_worker_nvml_ms"] = worker_ms
    say(
        f"set() caller   median {ns[len(ns) // 2]} ns, p99 {ns[int(len(ns) * 0.99)]} ns "
        f"({len(ns)} calls, {len(log)} NVML calls made by the worker, median "
        f"{statistics.median(worker_ms) if worker_ms else float('nan'):.3f} ms each)"
    )


_READ_BACK_SOURCES = (
    SwitchSource.OVERRIDDEN,
    SwitchSource.CLAMPED,
    SwitchSource.CHANGED,
    SwitchSource.REAPPLY,
)


def check_read_back(device: int, gpu: NvmlDevice, backend: Any, low: int) -> None:
    """A lock that should hold, then a reset from outside that the switcher must undo."""
    busy = backend is not None
    if busy:
        side = backend.stream()
        backend.spin(side, 4.0)
    try:
        with FrequencySwitcher(device, verify_delay_s=0.2, verify_interval_s=0.1) as sw:
            sw.set(low)
            sw.wait(timeout_s=10)
            time.sleep(1.0)  # several readings of a lock that nobody touches
            held = dict(sw.clock_mismatches)
            gpu.reset_locked_clocks()  # as `perseus reset-clocks` from another shell
            deadline = time.monotonic() + 3.0
            while sw.clock_mismatches["changed"] == held["changed"] and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)
            after = dict(sw.clock_mismatches)
            sm_after_mhz = gpu.clock_mhz("sm")
            readings = [
                {
                    "source": r.source.name,
                    "time_ns": r.time_ns,
                    "expected_mhz": r.requested_mhz,
                    "read_mhz": r.applied_mhz,
                }
                for r in sw.records()
                if r.source in _READ_BACK_SOURCES
            ]
    finally:
        if busy:
            backend.synchronize()
    report["read_back"] = {
        "gpu_busy": busy,
        "locked_mhz": low,
        "mismatches_while_untouched": held,
        "mismatches_after_outside_reset": after,
        "sm_mhz_after": sm_after_mhz,
        "readings": readings,
    }
    say(
        f"read-back      untouched lock at {low} MHz: {held}; after an outside reset: {after}, "
        f"SM clock then {sm_after_mhz} MHz{'' if busy else ' [GPU idle]'}"
    )


def check_stream_order(device: int, backend: Any, high: int, low: int, can_lock: bool) -> None:
    if backend is None:
        report["stream_order"] = {
            "skipped": "neither torch nor cupy usable",
            "errors": report.get("backend_errors"),
        }
        say("stream order   SKIPPED: neither torch nor CuPy could drive the GPU")
        return
    sw = FrequencySwitcher(device)
    try:
        if can_lock:
            sw.set(high)
            sw.wait(timeout_s=10)
        stream = backend.stream()
        handle = backend.handle(stream)
        backend.synchronize()
        kernel_s = 0.3
        t_enqueue = time.monotonic_ns()
        backend.spin(stream, kernel_s)  # kernel A
        ev_a = backend.event(stream)
        sw.set_on_stream(handle, low)  # should land between A and B
        backend.spin(stream, kernel_s)  # kernel B
        ev_b = backend.event(stream)
        sw.set_on_stream(handle, high)
        t_queued = time.monotonic_ns()

        gpu = NvmlDevice(device)
        a_pending_last = b_pending_last = None
        a_done = b_done = None
        samples = []
        deadline = time.monotonic() + 10 * kernel_s + 5
        while time.monotonic() < deadline:
            now = time.monotonic_ns()
            if a_done is None:
                if backend.done(ev_a):
                    a_done = now
                else:
                    a_pending_last = now
            if b_done is None:
                if backend.done(ev_b):
                    b_done = now
                else:
                    b_pending_last = now
            samples.append((now, gpu.clock_mhz("sm")))
            if b_done is not None:
                break
        backend.synchronize()
        try:
            sw.wait(timeout_s=10)
        except NvmlError:
            pass  # locking refused: the records still show when the handover happened
        log = sw.records()
    finally:
        try:
            sw.close()
        except NvmlError:
            pass

    stream_records = [r for r in log if r.source == SwitchSource.STREAM]
    result: dict[str, Any] = {
        "backend": backend.name,
        "kernel_s": kernel_s,
        "enqueue_ms": (t_queued - t_enqueue) / 1e6,
        "a_pending_last_ns": a_pending_last,
        "a_done_seen_ns": a_done,
        "b_pending_last_ns": b_pending_last,
        "b_done_seen_ns": b_done,
        "records": [dataclasses.asdict(r) for r in log],
    }
    ok = False
    if stream_records and a_done is not None and b_done is not None:
        first = stream_records[0]
        after_queue = first.requested_ns > t_queued
        after_a = a_pending_last is None or first.requested_ns >= a_pending_last
        before_b_end = first.requested_ns <= b_done
        ok = first.applied_mhz == low and after_queue and after_a and before_b_end
        order = [r.applied_mhz for r in stream_records]
        result.update(
            first_handover_after_enqueue_ms=(first.requested_ns - t_queued) / 1e6,
            handover_minus_a_end_ms=(first.requested_ns - (a_pending_last or a_done)) / 1e6,
            b_end_minus_handover_ms=(b_done - first.requested_ns) / 1e6,
            applied_order=order,
            statuses=[r.status for r in stream_records],
        )
        if can_lock and first.status == 0:
            applied_at = first.time_ns
            b_running = b_pending_last or b_done
            during_b = [mhz for t, mhz in samples if applied_at <= t <= b_running]
            during_a = [mhz for t, mhz in samples if t <= (a_pending_last or 0)]
            result["sm_mhz_during_a"] = sorted(set(during_a))
            result["sm_mhz_during_b_after_switch"] = sorted(set(during_b))
            ok = ok and order[:2] == [low, high] and all(abs(m - low) <= 15 for m in during_b)
    result["ok"] = ok
    report["stream_order"] = result
    say(
        f"stream order   {'OK' if ok else 'FAILED'} ({backend.name}): queued in "
        f"{result['enqueue_ms']:.3f} ms; handover "
        f"{result.get('handover_minus_a_end_ms', float('nan')):.3f} ms after kernel A was last "
        f"seen running, {result.get('b_end_minus_handover_ms', float('nan')):.1f} ms before "
        f"kernel B ended; applied order {result.get('applied_order')}"
    )
    if "sm_mhz_during_b_after_switch" in result:
        say(
            f"               SM clock during A {result['sm_mhz_during_a']} MHz, "
            f"during B after the switch {result['sm_mhz_during_b_after_switch']} MHz"
        )


# ---- main ----------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")
    parser.add_argument("--json", metavar="PATH", help="write the report here")
    parser.add_argument(
        "--timeout", type=float, default=240.0, help="give up after this many seconds"
    )
    args = parser.parse_args()
    out_dir = os.environ.get("OUT")
    json_path = args.json or (str(Path(out_dir) / "gpu_check_switcher.json") if out_dir else None)

    def on_timeout(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"gpu_check_switcher: gave up after {args.timeout:.0f} s")

    signal.signal(signal.SIGALRM, on_timeout)
    signal.alarm(int(args.timeout))
    status = 0
    gpu = None
    try:
        gpu = NvmlDevice(args.device)
        _, sm = check_environment(gpu)
        if not sm:
            sm = [gpu.clock_mhz("sm")]
        high = sm[-1]
        low = sm[len(sm) // 2]  # a mid clock: far enough to be visible, safe for any kernel
        report.update(high_mhz=high, low_mhz=low)
        backend = make_backend(args.device)
        report["backend"] = None if backend is None else backend.name
        can_lock = check_can_lock(gpu, low)
        if can_lock:
            check_set_latency(gpu, high, low)
            check_clock_visible(gpu, backend, high, low)
            check_measure_switch_latency(args.device, backend, high, low)
            check_stream_switch_latency(args.device, backend, high, low)
            check_kernel_clock_after_switch(args.device, backend, high, low)
            check_switcher_latency(args.device, high, low)
            check_read_back(args.device, gpu, backend, low)
        check_stream_order(args.device, backend, high, low, can_lock)
    except TimeoutError as error:
        report["error"] = str(error)
        say(str(error))
        status = 3
    except Exception as error:  # noqa: BLE001 - report, reset, exit non-zero
        report["error"] = f"{type(error).__name__}: {error}"
        report["traceback"] = traceback.format_exc()
        say(report["traceback"])
        status = 1
    finally:
        signal.alarm(0)
        if gpu is not None and report.get("can_lock") is False:
            report["reset_at_end"] = "not needed: nothing could be locked"
        elif gpu is not None:
            try:
                gpu.reset_locked_clocks()
                report["reset_at_end"] = "ok"
            except NvmlError as error:
                report["reset_at_end"] = str(error)
            try:
                report["sm_clock_at_end_mhz"] = gpu.clock_mhz("sm")
            except NvmlError:
                pass
        say(f"reset at end   {report.get('reset_at_end', 'no device')}")
        if json_path:
            Path(json_path).write_text(json.dumps(report, indent=2, default=str))
            say(f"report         {json_path}")
    # Leave no worker thread behind for the interpreter's exit.
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join(timeout=5)
    return status


if __name__ == "__main__":
    sys.exit(main())

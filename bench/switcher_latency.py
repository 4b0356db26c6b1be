"""How long the training thread waits in ``FrequencySwitcher.set()``.

Runs on any machine: the fake NVML of the tests (tests/fake_nvml/fake_nvml.c,
compiled here with the system C compiler) stands in for the driver and
sleeps ``--nvml-ms`` (5 ms by default) in every clock-changing call, like a
slow real driver. The caller's view of ``set()`` is timed call by call with
``time.perf_counter_ns``; the table gives the median and 99th percentile in
nanoseconds next to the synchronous NVML call that ``set()`` hides.

    python bench/switcher_latency.py --quick
    python bench/switcher_latency.py --calls 200000 --json out.json

Cases:

- ``set() alternating``: every call changes the target (two clocks, back to
  back), so each one wakes the worker, which is busy in NVML nearly all the
  time; requests coalesce.
- ``set() paced 1 ms``: one change per millisecond, as a pipeline stage
  switching per microbatch might.
- ``set() same clock``: the request equals the pending clock (free path).
- ``set_on_stream()``: through the tests' fake libcuda (its queueing costs
  are not the real driver's; shown for completeness).
- ``native call baseline``: ``snap()``, a native call that takes no lock:
  the Python and pybind11 overhead included in every row.
- ``synchronous NVML call``: ``NvmlDevice.set_locked_clocks`` on the
  caller's thread, what ``set()`` would cost without the worker.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
FAKE_SOURCES = {
    "libnvidia-ml.so.1": REPO / "tests" / "fake_nvml" / "fake_nvml.c",
    "libcuda.so.1": REPO / "tests" / "fake_cuda" / "fake_cuda.c",
}
STREAM = 0x5EED


def build_fakes(directory: Path) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        sys.exit("switcher_latency: needs a C compiler (cc) to build the fake NVML")
    for name, source in FAKE_SOURCES.items():
        subprocess.run(
            [
                compiler,
                "-shared",
                "-fPIC",
                "-O2",
                "-o",
                str(directory / name),
                str(source),
                "-lpthread",
            ],
            check=True,
        )


def timed(fn, args_cycle: list, calls: int, pace_s: float = 0.0) -> np.ndarray:
    """Per-call wall time (ns) of fn(*args), cycling through args_cycle."""
    out = np.empty(calls, dtype=np.int64)
    clock = time.perf_counter_ns
    k = len(args_cycle)
    for i in range(calls):
        args = args_cycle[i % k]
        t0 = clock()
        fn(*args)
        out[i] = clock() - t0
        if pace_s:
            end = time.perf_counter() + pace_s
            while time.perf_counter() < end:  # spin: sleep() granularity is too coarse
                pass
    return out


def summary(name: str, ns: np.ndarray) -> dict:
    return {
        "case": name,
        "calls": int(ns.size),
        "median_ns": float(np.median(ns)),
        "p99_ns": float(np.percentile(ns, 99)),
        "max_ns": float(ns.max()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (a few seconds)")
    parser.add_argument(
        "--calls",
        type=int,
        default=None,
        help="calls per case (default 100000, 10000 with --quick)",
    )
    parser.add_argument(
        "--nvml-ms", type=float, default=5.0, help="sleep of the fake NVML per clock call (ms)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    calls = args.calls or (10_000 if args.quick else 100_000)
    paced_calls = max(100, calls // (50 if args.quick else 20))
    sync_calls = 20 if args.quick else 100

    with tempfile.TemporaryDirectory(prefix="perseus-switcher-bench-") as tmp:
        directory = Path(tmp)
        build_fakes(directory)
        os.environ["PERSEUS_NVML_LIBRARY"] = str(directory / "libnvidia-ml.so.1")
        os.environ["PERSEUS_CUDA_LIBRARY"] = str(directory / "libcuda.so.1")
        os.environ["FAKE_NVML_SLEEP_MS"] = str(args.nvml_ms)
        for key in (
            "FAKE_NVML_LOG",
            "FAKE_NVML_FAIL",
            "FAKE_NVML_STATE",
            "FAKE_CUDA_LOG",
            "CUDA_VISIBLE_DEVICES",
        ):
            os.environ.pop(key, None)

        import ctypes

        import perseus
        from perseus.switcher import NvmlDevice

        fake_cuda = ctypes.CDLL(os.environ["PERSEUS_CUDA_LIBRARY"])
        fake_cuda.fake_cuda_synchronize.argtypes = [ctypes.c_size_t, ctypes.c_uint]

        rows = []
        with perseus.FrequencySwitcher(0) as sw:
            a, b = 1410, 1200
            timed(sw.set, [(a,), (b,)], 1000)  # warm-up
            rows.append(summary("set() alternating", timed(sw.set, [(a,), (b,)], calls)))
            rows.append(summary("set() paced 1 ms", timed(sw.set, [(a,), (b,)], paced_calls, 1e-3)))
            sw.set(a)
            rows.append(summary("set() same clock", timed(sw.set, [(a,)], calls)))
            stream_calls = min(calls, 20_000)
            rows.append(
                summary(
                    "set_on_stream() [fake libcuda]",
                    timed(sw.set_on_stream, [(STREAM, a), (STREAM, b)], stream_calls),
                )
            )
            fake_cuda.fake_cuda_synchronize(STREAM, 60_000)
            rows.append(summary("native call baseline (snap)", timed(sw.snap, [(a,)], calls)))
            sw.wait()
            log = sw.records()
            worker_ns = np.asarray(log.latency_ns)
            applied = len(log)
        rows.append(summary("NVML call inside the worker", worker_ns))
        gpu = NvmlDevice(1)
        rows.append(
            summary(
                "synchronous NVML call", timed(gpu.set_locked_clocks, [(a, a), (b, b)], sync_calls)
            )
        )
        gpu.reset_locked_clocks()

    requests = 2 * calls + paced_calls + stream_calls
    print(
        f"perseus FrequencySwitcher: caller-side latency, fake NVML sleeping {args.nvml_ms:g} ms per clock call"
    )
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs\n")
    print(f"{'case':34s} {'calls':>8s} {'median ns':>12s} {'p99 ns':>12s} {'max ns':>12s}")
    for r in rows:
        print(
            f"{r['case']:34s} {r['calls']:8d} {r['median_ns']:12.0f} {r['p99_ns']:12.0f} {r['max_ns']:12.0f}"
        )
    sync = rows[-1]["median_ns"]
    first = rows[0]["median_ns"]
    print(f"\nsynchronous NVML call / set() median: {sync / first:,.0f}x")
    print(f"{requests} requests coalesced into {applied} NVML calls by the worker")
    if args.json:
        Path(args.json).write_text(json.dumps({"nvml_ms": args.nvml_ms, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

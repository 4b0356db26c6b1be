"""GPU check of the profiler, for a machine with an NVIDIA GPU (an H200).

    python bench/gpu_check_profiler.py [OUTDIR] [--device 0] [--points 6] [--budget 270]
    python bench/gpu_check_profiler.py OUTDIR --cpu      # the same path on the CPU, fake NVML

Profiles a small transformer block (a few ``torch.nn.TransformerEncoderLayer``
in bf16, forward and backward) with :func:`perseus.profile_stages` at about
``--points`` SM frequencies from the highest down, if clocks can be locked
here, otherwise once at the default clock (and says so), plus ``P_block``.
Writes ``h200-transformer-bf16.csv`` (Zeus format), its ``.json`` sidecar and
``gpu_check_profiler.json`` (this script's summary) to OUTDIR, else ``$OUT``,
else ``./gpu_check_profiler_out``; prints the sweep's timing and the spread of
the measurements.

Clocks are always given back: the profiler closes its switcher on return,
error and Ctrl-C, and this script resets them once more at the end. A
watchdog stops the run after ``--budget`` seconds (exit 3). Exit 0 when the
check ran, 1 on an unexpected failure.

``--cpu`` runs a tiny float32 block on the CPU in the profiler's CPU mode;
it needs ``PERSEUS_NVML_LIBRARY`` to point at the test suite's fake NVML.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import perseus
from perseus.switcher import FrequencySwitcher, NvmlDevice, NvmlError, reset_clocks


def say(line: str = "") -> None:
    print(line, flush=True)


class Watchdog(Exception):
    pass


def pick_frequencies(supported: list[int], points: int, lowest_share: float = 0.5) -> list[int]:
    """About ``points`` supported clocks, spread evenly from the highest to ``lowest_share`` of it."""
    clocks = sorted({int(f) for f in supported}, reverse=True)
    if not clocks or points < 1:
        return []
    top = clocks[0]
    floor = lowest_share * top
    usable = [f for f in clocks if f >= floor] or clocks[:1]
    if points == 1 or len(usable) == 1:
        return usable[:1]
    targets = [top - i * (top - floor) / (points - 1) for i in range(points)]
    chosen = {min(usable, key=lambda f: (abs(f - t), -f)) for t in targets}
    return sorted(chosen, reverse=True)


def build_block(torch: Any, device: Any, cpu: bool) -> tuple[Any, Any, dict[str, Any]]:
    """A few encoder layers with a forward and a repeatable backward callable."""
    if cpu:
        config = dict(layers=2, d_model=64, heads=4, ffn=128, batch=2, seq=32, dtype="float32")
    else:
        config = dict(
            layers=4, d_model=1024, heads=16, ffn=4096, batch=8, seq=1024, dtype="bfloat16"
        )
    dtype = getattr(torch, config["dtype"])
    torch.manual_seed(0)
    layers = [
        torch.nn.TransformerEncoderLayer(
            d_model=config["d_model"],
            nhead=config["heads"],
            dim_feedforward=config["ffn"],
            dropout=0.0,
            batch_first=True,
        )
        for _ in range(config["layers"])
    ]
    model = torch.nn.Sequential(*layers).to(device=device, dtype=dtype).train()
    x = torch.randn(config["batch"], config["seq"], config["d_model"], device=device, dtype=dtype)
    x.requires_grad_(True)
    out = model(x)  # the graph that every backward call walks again
    grad = torch.randn_like(out)

    def forward() -> None:
        model(x)

    def backward() -> None:
        out.backward(grad, retain_graph=True)

    return forward, backward, config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", nargs="?", default=None)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--points", type=int, default=6, help="frequencies to profile (default 6)")
    parser.add_argument(
        "--budget", type=float, default=270.0, help="watchdog, seconds (default 270)"
    )
    parser.add_argument("--cpu", action="store_true", help="CPU mode with a fake NVML (tests)")
    args = parser.parse_args(argv)
    outdir = Path(args.outdir or os.environ.get("OUT") or "gpu_check_profiler_out")
    outdir.mkdir(parents=True, exist_ok=True)
    mode = "cpu" if args.cpu else "gpu"
    summary: dict[str, Any] = {"mode": mode, "perseus_version": perseus.__version__}
    started = time.monotonic()

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise Watchdog(f"watchdog: still running after {args.budget:g} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, args.budget)
    locked_any = False
    code = 0
    try:
        import torch

        device = torch.device("cpu") if args.cpu else torch.device("cuda", args.device)
        if args.cpu:
            torch.set_num_threads(1)  # a shared 2-core machine stalls OpenMP barriers
        if not args.cpu:
            torch.cuda.set_device(device)
        gpu = NvmlDevice(args.device)
        supported = sorted((int(f) for f in gpu.supported_graphics_clocks()), reverse=True)
        say(
            f"GPU {args.device}: {gpu.name}, driver {perseus._core.nvml_driver_version()}, "
            f"{len(supported)} SM clocks {supported[-1] if supported else '?'}.."
            f"{supported[0] if supported else '?'} MHz, memory {gpu.clock_mhz('memory')} MHz"
        )
        summary.update(gpu=gpu.name, torch=torch.__version__, supported_sm_clocks_mhz=supported)

        # Can clocks be locked here? Try the highest one (the switcher gives it back).
        can_lock, why = True, ""
        try:
            with FrequencySwitcher(args.device) as switcher:
                switcher.set(supported[0])
                switcher.wait(timeout=10)
                locked_any = True
        except NvmlError as error:
            can_lock, why = False, str(error)
        summary["clocks_locked"] = can_lock
        if can_lock:
            frequencies = pick_frequencies(supported, args.points)
            say(f"clocks can be locked; profiling at {frequencies} MHz")
        else:
            frequencies = None
            say(f"CLOCKS CANNOT BE LOCKED here ({why}); profiling once at the default clock")
            summary["lock_error"] = why

        forward, backward, config = build_block(torch, device, args.cpu)
        summary["model"] = config
        say(f"model: {config}")
        csv_path = (
            outdir / "h200-transformer-bf16.csv" if not args.cpu else outdir / "cpu-transformer.csv"
        )
        t0 = time.monotonic()
        result = perseus.profile_stages(
            {0: {"forward": forward, "backward": backward}},
            csv_path,
            mode=mode,
            device=args.device,
            frequencies_mhz=frequencies,
            patience=None,
            window_s=0.05 if args.cpu else 0.5,
            windows=3,
            warmup_s=0.02 if args.cpu else 0.3,
            blocking_window_s=0.1 if args.cpu else 3.0,
            lock_clocks=can_lock,
            resume=False,
            progress=True,
        )
        locked_any = locked_any or can_lock
        sweep_s = time.monotonic() - t0
        ms = result.measurements
        t_spread = max(m.time_std_s / m.time_s for m in ms)
        e_spread = max(m.energy_std_j / m.energy_j for m in ms)
        say()
        say(
            f"{'MHz':>5} {'instr':>8} {'time ms':>9} {'±%':>6} {'energy J':>9} {'±%':>6} "
            f"{'W':>6} {'reps':>6} {'SM seen':>7}"
        )
        for m in ms:
            say(
                f"{m.frequency_mhz:>5} {m.instruction:>8} {m.time_s * 1e3:>9.3f} "
                f"{100 * m.time_std_s / m.time_s:>6.2f} {m.energy_j:>9.4f} "
                f"{100 * m.energy_std_j / m.energy_j:>6.2f} {m.power_w:>6.1f} {m.repetitions:>6} "
                f"{m.sm_clock_mhz:>7}"
            )
        mismatched = [
            m.frequency_mhz
            for m in ms
            if can_lock and m.sm_clock_mhz and abs(m.sm_clock_mhz - m.frequency_mhz) > 15
        ]
        say()
        say(
            f"sweep: {len(ms)} measurements in {sweep_s:.1f} s "
            f"({result.metadata['sweep_s']:.1f} s measuring, rest: clock changes, P_block, files)"
        )
        say(
            f"largest spread across windows: time {100 * t_spread:.2f}%, energy {100 * e_spread:.2f}%"
        )
        say(
            f"P_block: {result.blocking_power_w:.1f} W ({result.metadata['blocking_power']['method']}, "
            f"{result.metadata['blocking_power']['window_s']:.2f} s)"
        )
        if mismatched:
            say(f"NOTE: NVML showed another SM clock than the locked one at {mismatched} MHz")
        if result.profile is not None:
            kept = {i: len(result.profile.options(0, i)) for i in ("forward", "backward")}
            say(f"Pareto-optimal options kept: {kept}")
        say(f"wrote {result.csv_path} and {result.metadata_path}")
        summary.update(
            frequencies_mhz=[m.frequency_mhz for m in ms if m.instruction == "forward"],
            sweep_s=sweep_s,
            measuring_s=result.metadata["sweep_s"],
            max_time_spread=t_spread,
            max_energy_spread=e_spread,
            blocking_power_w=result.blocking_power_w,
            clock_mismatch_mhz=mismatched,
            measurements=[m.to_json() for m in ms],
            csv=result.csv_path,
            sidecar=result.metadata_path,
        )
    except Watchdog as error:
        say(str(error))
        summary["error"] = str(error)
        code = 3
    except Exception as error:  # noqa: BLE001 - report and exit 1
        traceback.print_exc()
        summary["error"] = f"{type(error).__name__}: {error}"
        code = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if locked_any:
            try:
                for r in reset_clocks(args.device):
                    say(f"clocks reset: SM {r.gpu}, memory {r.memory}")
            except Exception as error:  # noqa: BLE001
                say(f"WARNING: reset-clocks failed ({error}); run `perseus reset-clocks`")
        summary["total_s"] = time.monotonic() - started
        (outdir / "gpu_check_profiler.json").write_text(json.dumps(summary, indent=1) + "\n")
        say(f"total {summary['total_s']:.1f} s; summary in {outdir / 'gpu_check_profiler.json'}")
    return code


if __name__ == "__main__":
    sys.exit(main())

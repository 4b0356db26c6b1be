"""The ``perseus`` command line.

    perseus optimize PROFILE.csv --microbatches 32 --blocking-power 70 -o out/

prints a summary and writes ``out/frontier.json``.

    perseus reset-clocks [--device N]

gives locked GPU clocks back to the driver.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import __version__
from .errors import ProfileError
from .optimize import optimize
from .profile import Profile
from .schedule import SCHEDULES

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perseus", description="Energy-optimal GPU frequency plans for pipeline training."
    )
    parser.add_argument("--version", action="version", version=f"perseus {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    opt = commands.add_parser(
        "optimize", help="compute the iteration time-energy frontier of a profile"
    )
    opt.add_argument("profile", help="profile CSV (stage,instruction,frequency,time,energy)")
    opt.add_argument("--microbatches", type=int, required=True, help="microbatches per iteration")
    opt.add_argument(
        "--blocking-power",
        type=float,
        required=True,
        metavar="WATTS",
        help="power a GPU draws while it waits on a pipeline neighbour (W)",
    )
    opt.add_argument("--schedule", default="1f1b", choices=SCHEDULES, help="pipeline schedule")
    opt.add_argument(
        "--virtual-stages", type=int, default=1, help="model chunks per GPU (interleaved)"
    )
    opt.add_argument(
        "--unit-time",
        type=float,
        default=1e-3,
        metavar="SECONDS",
        help="solver time quantum (default 0.001 s)",
    )
    opt.add_argument(
        "-o", "--output", default=".", metavar="DIR", help="directory for frontier.json"
    )
    opt.add_argument("--quiet", action="store_true", help="no progress bar")

    reset = commands.add_parser(
        "reset-clocks", help="give locked GPU clocks back to the driver (e.g. after kill -9)"
    )
    reset.add_argument(
        "--device",
        type=int,
        default=None,
        metavar="N",
        help="CUDA device index (honours CUDA_VISIBLE_DEVICES); default: every visible GPU",
    )
    return parser


def _optimize(args: argparse.Namespace) -> int:
    profile = Profile.from_csv(args.profile, blocking_power_w=args.blocking_power)
    frontier = optimize(
        profile,
        microbatches=args.microbatches,
        schedule=args.schedule,
        virtual_stages=args.virtual_stages,
        unit_time_s=args.unit_time,
        progress=not args.quiet,
    )
    os.makedirs(args.output, exist_ok=True)
    path = os.path.join(args.output, "frontier.json")
    frontier.save(path)
    s = frontier.summary()
    gpus = frontier.spec.num_gpus
    print(
        f"profile        {args.profile}: {profile.num_stages} stages on {gpus} GPUs, "
        f"{args.microbatches} microbatches, {args.schedule}"
    )
    print(
        f"baseline       {s['baseline_time_s']:.4f} s  {s['baseline_energy_j']:.1f} J  (all maximum frequency)"
    )
    print(
        f"fastest plan   {s['fastest_time_s']:.4f} s  {s['fastest_energy_j']:.1f} J  "
        f"({s['saving_percent']:.2f}% less energy)"
    )
    slowest = frontier[-1]
    waiting = frontier.fastest.energy_at(slowest.iteration_time_s)
    print(
        f"slowest plan   {slowest.iteration_time_s:.4f} s  {slowest.energy_j:.1f} J  "
        f"(the fastest plan over that time: {waiting:.1f} J, so "
        f"{100 * (1 - slowest.energy_j / waiting):.2f}% saved when a straggler sets the pace)"
    )
    print(
        f"plans          {len(frontier)}  ({frontier.steps} solver steps, {s['solve_time_s']:.2f} s)"
    )
    print(f"written        {path}")
    return 0


def _reset_clocks(args: argparse.Namespace) -> int:
    from .switcher import NvmlError, reset_clocks

    try:
        results = reset_clocks(args.device)
    except (NvmlError, IndexError) as error:
        print(f"perseus: error: {error}", file=sys.stderr)
        return 1
    for r in results:
        print(
            f"GPU {r.device} (NVML {r.nvml_index}, {r.name}): SM clocks {r.gpu}, memory clocks {r.memory}"
        )
    return 0 if all(r.ok for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "optimize":
            return _optimize(args)
        if args.command == "reset-clocks":
            return _reset_clocks(args)
    except (ProfileError, OSError) as error:
        print(f"perseus: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("perseus: interrupted", file=sys.stderr)
        return 130
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

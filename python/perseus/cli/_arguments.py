"""The ``perseus`` command line's arguments: the parser, its subcommands and flags, and the
value checks that turn a bad flag into a one-line usage error naming it."""

from __future__ import annotations

import argparse
import math
import re
from typing import NoReturn, Optional

from .. import __version__
from ..profile import LIMITS
from ..schedule import SCHEDULES


class UsageError(Exception):
    """A user error: printed as one line, exit status 2."""

    def __init__(self, message: str, prog: Optional[str] = None) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse's own print the usage first)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)", self.prog)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


# --- flag types: each names what it wants; argparse prefixes the flag --------------------


def _count(text: str) -> int:
    if not text.isascii() or not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not text.isascii() or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _seconds(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _watts(text: str) -> float:
    value = _number(text)
    if not 0 <= value <= LIMITS.max_blocking_power_w:
        raise argparse.ArgumentTypeError(
            f"must be watts in 0..{LIMITS.max_blocking_power_w:g}, got {text!r}"
        )
    return value


def _cap_watts(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of watts, got {text!r}")
    return value


def _factor(text: str) -> float:
    value = _number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be >= 1 (the straggler's iteration time over the fastest plan's), got {text!r}"
        )
    return value


# --- the parser ------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="perseus",
        description="Energy-optimal GPU frequency plans for pipeline-parallel training.",
        epilog="Run `perseus COMMAND --help` for a command's options and defaults.",
    )
    parser.add_argument("--version", action="version", version=f"perseus {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name, help=summary, description=description, formatter_class=_Formatter
        )
        return sub

    def json_flag(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--json", action="store_true", help="print the result as one JSON object on stdout"
        )

    def force_flag(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--force", action="store_true", help="overwrite output files that already exist"
        )

    opt = command(
        "optimize",
        "compute the iteration time-energy frontier of a profile",
        "Compute the iteration time-energy Pareto frontier of a profile and write it to "
        "DIR/frontier.json. The blocking power is read from the profiler's sidecar "
        "(PROFILE.json, key blocking_power_w) when there is one; --blocking-power overrides it.",
    )
    opt.add_argument(
        "profile", metavar="PROFILE", help="profile CSV (stage,instruction,frequency,time,energy)"
    )
    opt.add_argument(
        "-m",
        "--microbatches",
        type=_count,
        required=True,
        metavar="M",
        help="microbatches per iteration",
    )
    opt.add_argument(
        "--blocking-power",
        type=_watts,
        default=None,
        metavar="W",
        help="watts a GPU draws while it waits on a pipeline neighbour (default: from the sidecar)",
    )
    opt.add_argument(
        "--schedule",
        default=argparse.SUPPRESS,  # unset unless given: the sidecar's, else 1f1b
        choices=SCHEDULES,
        help="pipeline schedule (default: the one the profile's sidecar records, else 1f1b)",
    )
    opt.add_argument(
        "--virtual-stages",
        type=_count,
        default=argparse.SUPPRESS,
        metavar="V",
        help="model chunks per GPU, with --schedule interleaved-1f1b (default: the sidecar's, "
        "else 1)",
    )
    opt.add_argument(
        "--unit-time", type=_seconds, default=1e-3, metavar="S", help="solver time quantum, seconds"
    )
    opt.add_argument(
        "-o", "--output", default=".", metavar="DIR", help="directory for frontier.json"
    )
    opt.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    force_flag(opt)
    json_flag(opt)

    show = command(
        "show",
        "print a table of the frontier's representative plans",
        "Print the all-fastest baseline, the fastest plan and representative plans: time, "
        "energy, saving against all-fastest, energy over a common iteration length, average "
        "and peak power.",
    )
    show.add_argument("frontier", metavar="FRONTIER.json", help="written by `perseus optimize`")
    json_flag(show)

    plan = command(
        "plan",
        "write one plan of the frontier for deployment",
        "Choose one plan of the frontier and write, per GPU, its computations in execution "
        "order with the SM clock of each. Formats: json (DIR/plan.json), csv (DIR/plan.csv: "
        "gpu,position,instruction,chunk,microbatch,frequency_mhz), zeus "
        "(DIR/freqs_pipeline_NNNNN.py, as Zeus's pipeline frequency optimizer reads it; NNNNN "
        "is the plan's index on the frontier).",
    )
    plan.add_argument("frontier", metavar="FRONTIER.json", help="written by `perseus optimize`")
    _plan_choice(plan, required=True)
    plan.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="directory for the plan file"
    )
    plan.add_argument(
        "--format", default="json", choices=("json", "csv", "zeus"), help="file format"
    )
    force_flag(plan)
    json_flag(plan)

    ev = command(
        "evaluate",
        "replay a plan file on a profile: iteration time and energy",
        "Replay a plan on a profile's measurements and print its iteration time and energy, "
        "against all-fastest and, with --frontier, against perseus's cheapest plan that is as "
        "fast. PLAN is a perseus plan (.json or .csv from `perseus plan`) or a Zeus/lowtime "
        "freqs_pipeline_*.py.",
    )
    ev.add_argument("profile", metavar="PROFILE", help="profile CSV")
    ev.add_argument("plan", metavar="PLAN", help="plan file: .json, .csv or freqs_pipeline_*.py")
    ev.add_argument(
        "--blocking-power",
        type=_watts,
        default=None,
        metavar="W",
        help="watts a GPU draws while it waits (default: from the profile's sidecar)",
    )
    ev.add_argument(
        "--schedule",
        default=None,
        choices=SCHEDULES,
        help="schedule of a .py or .csv plan (default: 1f1b, or interleaved-1f1b for chunks)",
    )
    ev.add_argument(
        "--virtual-stages",
        type=_count,
        default=None,
        metavar="V",
        help="chunks per GPU of a .py plan (default: 1)",
    )
    ev.add_argument(
        "--frontier",
        default=None,
        metavar="FRONTIER.json",
        help="compare with this frontier's plan",
    )
    json_flag(ev)

    plot = command(
        "plot",
        "draw the frontier, one plan's per-GPU timeline, or its power",
        "Draw the frontier (default), or with --timeline one plan's per-GPU timeline under the "
        "all-fastest plan's, or with --power its cluster power over one iteration against the "
        "all-fastest plan's. The plan is the fastest unless --deadline, --slowdown or "
        "--power-cap chooses another. The file type follows -o: .png, .svg or .pdf. Needs "
        "matplotlib (the plot extra).",
    )
    plot.add_argument("frontier", metavar="FRONTIER.json", help="written by `perseus optimize`")
    plot.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="image to write (.png, .svg, .pdf)"
    )
    view = plot.add_mutually_exclusive_group()
    view.add_argument("--timeline", action="store_true", help="per-GPU timeline of one plan")
    view.add_argument("--power", action="store_true", help="cluster power of one plan")
    _plan_choice(plot, required=False)
    plot.add_argument("--dpi", type=_count, default=150, help="resolution of a .png")
    force_flag(plot)
    json_flag(plot)

    report = command(
        "report",
        "write a self-contained HTML report of the frontier",
        "Write one HTML page with the plots (inline SVG), the table and a deadline slider "
        "showing the plan and its saving for any deadline; no network access needed to view it.",
    )
    report.add_argument("frontier", metavar="FRONTIER.json", help="written by `perseus optimize`")
    report.add_argument("-o", "--output", required=True, metavar="FILE", help="HTML file to write")
    force_flag(report)
    json_flag(report)

    reset = command(
        "reset-clocks",
        "give locked GPU clocks back to the driver (e.g. after kill -9)",
        "Reset the SM and memory clocks of every visible GPU, or of one, to the driver's defaults.",
    )
    reset.add_argument(
        "--device",
        type=int,
        default=None,
        metavar="N",
        help="CUDA device index (honours CUDA_VISIBLE_DEVICES); default: every visible GPU",
    )
    json_flag(reset)
    return parser


def _plan_choice(sub: argparse.ArgumentParser, *, required: bool) -> None:
    group = sub.add_mutually_exclusive_group(required=required)
    if required:
        group.add_argument("--fastest", action="store_true", help="the fastest plan")
    group.add_argument(
        "--deadline",
        type=_seconds,
        metavar="S",
        help="the cheapest plan that takes at most S seconds",
    )
    group.add_argument(
        "--slowdown",
        type=_factor,
        metavar="X",
        help="the cheapest plan within X times the fastest plan's time (a straggler X times slower)",
    )
    group.add_argument(
        "--power-cap",
        type=_cap_watts,
        metavar="W",
        help="the fastest plan whose power stays within W watts",
    )
    sub.add_argument(
        "--peak",
        action="store_true",
        help="with --power-cap: cap the peak power of all GPUs together, not the average",
    )


_FLAGS = {
    "unit_time_s": "--unit-time",
    "virtual_stages": "--virtual-stages",
    "blocking_power_w": "--blocking-power",
    "microbatches": "-m/--microbatches",
}
# Argument names with an underscore are always names; "microbatches" only before "=" or "must".
_ARGUMENT = re.compile(
    r"\b(unit_time_s|virtual_stages|blocking_power_w|microbatches(?==| must))(=)?"
)


def _flags_for_arguments(message: str) -> str:
    """A library message with its argument names replaced by the flags that set them."""
    return _ARGUMENT.sub(lambda m: _FLAGS[m.group(1)] + (" " if m.group(2) else ""), message)

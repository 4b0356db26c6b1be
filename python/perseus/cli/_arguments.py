"""The ``perseus`` command line's arguments: the parser, its subcommands and flags, and the
value checks that turn a bad flag into a one-line usage error naming it."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, Optional

from .. import __version__
from .._shipped import EXAMPLES
from ..optimize import DEFAULT_THREADS
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

    def _print_message(self, message: str, file: Any = None) -> None:
        # argparse's own (--help, --version) swallows OSError, so `perseus --help
        # > /dev/full` said nothing and exited 0. Written and flushed here, an
        # error reaches main(), which names it (and a closed pipe exits 141).
        if not message:
            return
        # As argparse: no file given (or sys.stdout is None, fd 1 closed) means stderr.
        stream = file if file is not None else sys.stderr
        if stream is None:  # stderr's fd was closed too: nowhere to write
            return
        stream.write(message)
        stream.flush()


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Adds "(default: X)" only where it says something: not to a help that
    names its default already, nor for a default of None, False or a
    required option."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or action.required
            or not action.option_strings
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default == []
        ):
            return text
        return super()._get_help_string(action) or text


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


def _latency_seconds(text: str) -> float:
    value = _number(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _switch_latency_flag(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument(
        "--switch-latency",
        type=_latency_seconds,
        default=None,
        metavar="S",
        help=f"{what}, as if each SM clock change landed S seconds after the GPU reached the "
        "computation asking for it (see `perseus.switch_latency`)",
    )


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


# A 6.4 x 4.8 inch figure at 1,200 dots per inch is 7,680 x 5,760 pixels (177 MB
# of RGBA); beyond that a plot only runs out of memory.
MAX_DPI = 1200


def _dpi(text: str) -> int:
    value = _count(text)
    if value > MAX_DPI:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DPI}, got {text!r}")
    return value


def _at_least_one(meaning: str) -> Callable[[str], float]:
    """A factor flag's type: a number >= 1, the error saying what the factor is."""

    def factor(text: str) -> float:
        value = _number(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1 ({meaning}), got {text!r}")
        return value

    return factor


_factor = _at_least_one("the straggler's iteration time over the fastest plan's")
_growth = _at_least_one("how many times steps, cuts or CPU time may grow")


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
        "profile",
        nargs="?",
        metavar="PROFILE",
        help="profile CSV (stage,instruction,frequency,time,energy); or --example",
    )
    opt.add_argument(
        "--example",
        choices=sorted(EXAMPLES),
        default=None,
        help="an example profile installed with perseus (with its sidecar), instead of PROFILE",
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
        "--threads",
        type=_count,
        default=None,
        metavar="N",
        help=f"threads the solve may use (default {DEFAULT_THREADS}); the plans do not depend on it",
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
        "is the plan's index on the frontier). A plan that is not one of the frontier's (fitted "
        "to --deadline or --slowdown, --tailored, --switch-latency) is made near plan NNNNN: "
        "its Zeus file is DIR/freqs_pipeline_NNNNN_<fitted|tailored|switch-aware>.py, and "
        "plan.json says where it came from.",
    )
    plan.add_argument("frontier", metavar="FRONTIER.json", help="written by `perseus optimize`")
    _plan_choice(plan, required=True)
    plan.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="directory for the plan file"
    )
    plan.add_argument(
        "--format", default="json", choices=("json", "csv", "zeus"), help="file format"
    )
    _switch_latency_flag(
        plan,
        "with --deadline or --slowdown: the cheapest plan that meets it when replayed so, "
        "clock changes that do not pay merged",
    )
    plan.add_argument(
        "--tailored",
        action="store_true",
        help="with --deadline or --slowdown: a plan solved for that time itself, from the "
        "frontier plans nearest it (Frontier.plan_for(..., tailored=True)); never more energy "
        "over the deadline than the default, those plans fitted to it",
    )
    _no_reclaim_flag(plan)
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
    _switch_latency_flag(ev, "also replay the plan")
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
    _no_reclaim_flag(plot)
    plot.add_argument(
        "--dpi", type=_dpi, default=150, help=f"resolution of a .png, 1..{MAX_DPI} dots per inch"
    )
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

    _bench_command(command("bench", *_BENCH_HELP))

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

    clockd = command(
        "clockd",
        "run the privileged clock service (as root, once per node)",
        "Lock GPU clocks for switchers in processes that are not root: listen on a Unix socket, "
        "check each client's user and groups against --allow, and reset a client's clocks when "
        "its connection closes. Runs until SIGTERM or Ctrl-C, then resets what clients held.",
    )
    clockd.add_argument(
        "--socket",
        default="/run/perseus/clockd.sock",
        metavar="PATH",
        help="where to listen (default: %(default)s; clients: PERSEUS_CLOCKD_SOCKET)",
    )
    clockd.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="GPUS:WHO",
        help="who may lock which GPUs, repeatable: GPUS is 'all' or NVML indices/UUIDs joined "
        "by ','; WHO is user:NAME, group:NAME, uid:N, gid:N or '*' (root always may)",
    )
    clockd.add_argument(
        "--mode",
        default="0666",
        metavar="OCTAL",
        help="the socket file's permissions (default: %(default)s; --allow is the real check)",
    )

    timing = command(
        "switch-latency",
        "measure how long an SM clock change takes to show on a GPU",
        "Alternate the SM clock of one GPU between two clocks and time, from the request to "
        "NVML reporting the new clock, each change (and the NVML call alone). Run it with the "
        "GPU busy; needs the rights clock locking needs. The median is what --switch-latency "
        "of `perseus plan` and `perseus evaluate` takes.",
    )
    timing.add_argument(
        "--device", type=int, default=0, metavar="N", help="CUDA device index (default: 0)"
    )
    timing.add_argument("--repeats", type=_count, default=10, metavar="K", help="clock changes")
    json_flag(timing)
    return parser


_BENCH_HELP = (
    "benchmark the solver on the shipped corpus or your profiles; gate against a baseline",
    "Solve each case REPEATS times in a fresh process and report CPU and wall seconds "
    "(median, min, max), the solver's work counters (steps, cuts, plans), the energy of the "
    "fastest plan and at 1.05/1.1/1.2x its time, the saving against all-fastest and the peak "
    "memory. Without PROFILE, the shipped corpus subset runs. With --baseline FILE (an earlier "
    "--json result) the exit status is 1 and each regression is one line when energy rises "
    "by more than --max-energy-regression percent, or steps, cuts or the fastest repeat's "
    "CPU time grow by more "
    "than --max-slowdown times; wall time is reported, never gated.",
)


def _bench_command(bench: argparse.ArgumentParser) -> None:
    from ..benchmark import DEFAULT_MAX_ENERGY_REGRESSION_PERCENT, DEFAULT_MAX_SLOWDOWN

    bench.add_argument(
        "profiles", nargs="*", metavar="PROFILE", help="profile CSVs (default: the shipped corpus)"
    )
    bench.add_argument(
        "-m",
        "--microbatches",
        type=_count,
        nargs="+",
        default=None,
        metavar="M",
        help="microbatches per iteration, one case each (required with PROFILE)",
    )
    bench.add_argument("--schedule", default="1f1b", choices=SCHEDULES, help="pipeline schedule")
    bench.add_argument(
        "--virtual-stages", type=_count, default=1, metavar="V", help="model chunks per GPU"
    )
    bench.add_argument(
        "--unit-time", type=_seconds, default=1e-3, metavar="S", help="solver time quantum, seconds"
    )
    bench.add_argument(
        "--blocking-power",
        type=_watts,
        default=None,
        metavar="W",
        help="watts a waiting GPU draws (default: each profile's sidecar)",
    )
    bench.add_argument(
        "--corpus", action="store_true", help="run the shipped corpus too, with PROFILE"
    )
    bench.add_argument("--repeats", type=_count, default=3, metavar="N", help="solves per case")
    bench.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="write the result (versioned JSON) to FILE, or to stdout without FILE",
    )
    bench.add_argument(
        "--baseline", default=None, metavar="FILE", help="an earlier --json result to compare with"
    )
    bench.add_argument(
        "--max-energy-regression",
        type=_number,
        default=DEFAULT_MAX_ENERGY_REGRESSION_PERCENT,
        metavar="PERCENT",
        help="energy rise, in percent, beyond which a case regressed",
    )
    bench.add_argument(
        "--max-slowdown",
        type=_growth,
        default=DEFAULT_MAX_SLOWDOWN,
        metavar="X",
        help="growth factor of steps, cuts or CPU time beyond which a case regressed",
    )
    bench.add_argument(
        "--no-cpu-gate",
        action="store_true",
        help="do not gate CPU time (a baseline from another machine); counters stay gated",
    )
    bench.add_argument(
        "--force", action="store_true", help="overwrite the --json file if it exists"
    )
    bench.add_argument(
        "--compare-lowtime",
        action="store_true",
        help="also solve each 1F1B case once with lowtime (pip install lowtime), driven as "
        "Zeus drives it, and compare energy at the same deadlines and wall time",
    )


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


def _no_reclaim_flag(sub: argparse.ArgumentParser) -> None:
    # `perseus plan` and `perseus plot` must show the same plan for the same flags.
    sub.add_argument(
        "--no-reclaim",
        action="store_true",
        help="with --deadline or --slowdown: the frontier's own plan, which idles for the rest "
        "of the deadline (Frontier.plan_for(..., reclaim=False)), instead of the default: the "
        "frontier plans nearest the deadline fitted to it, the cheapest, never costing more "
        "over the deadline",
    )


_FLAGS = {
    "unit_time_s": "--unit-time",
    "virtual_stages": "--virtual-stages",
    "blocking_power_w": "--blocking-power",
    "microbatches": "-m/--microbatches",
    "schedule": "--schedule",
}
# Argument names with an underscore are always names; "microbatches" only before "=" or "must",
# "schedule" only before "=".
_ARGUMENT = re.compile(
    r"\b(unit_time_s|virtual_stages|blocking_power_w|microbatches(?==| must)|schedule(?==))(=)?"
)


def _flags_for_arguments(message: str) -> str:
    """A library message with its argument names replaced by the flags that set them."""
    return _ARGUMENT.sub(lambda m: _FLAGS[m.group(1)] + (" " if m.group(2) else ""), message)

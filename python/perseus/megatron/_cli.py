"""Megatron-LM's command line: ``--perseus-*`` arguments and an attachment made from them.

Megatron-LM's ``pretrain(..., extra_args_provider=...)`` lets a script add
arguments; :func:`add_arguments` adds perseus's. :func:`attach_from_args`
makes an attachment that reads them, from ``megatron.training.get_args()``,
at the first iteration, so it can be attached before ``pretrain`` parses
anything::

    import perseus.megatron
    perseus.megatron.attach_from_args().attach()
    pretrain(..., extra_args_provider=perseus.megatron.add_arguments)

``--perseus-mode off`` (the default) detaches at the first iteration.
"""

from __future__ import annotations

import argparse
from typing import Any, Optional

from ..frontier import Frontier
from ._arguments import UNKNOWN_WORKLOAD, Settings, settings_of
from ._attach import Attachment
from ._compat import full_iteration_graphs
from ._errors import MegatronIntegrationError, UnsupportedScheduleError
from ._options import ClockOptions, MetricsOptions, ProfileOptions, StragglerOptions
from ._preflight import check_frontiers, fingerprint_reaction

__all__ = ["add_arguments", "attach_from_args", "settings_from_args"]

_STRAGGLERS = StragglerOptions()
_METRICS = MetricsOptions()


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add perseus's ``--perseus-*`` arguments to `parser` and return it.

    For Megatron-LM's ``extra_args_provider``; chain with another provider
    as ``extra_args_provider=lambda p: perseus.megatron.add_arguments(other(p))``.
    """
    g = parser.add_argument_group("perseus", "energy-optimal SM clocks per computation (perseus)")
    g.add_argument(
        "--perseus-mode",
        choices=("off", "run", "profile"),
        default="off",
        help="run: follow the frontier's plan; profile: measure every stage across SM clocks",
    )
    g.add_argument(
        "--perseus-frontier",
        nargs="+",
        default=None,
        metavar="FRONTIER.json",
        help="run mode: frontier(s) from `perseus optimize -o DIR` (DIR/frontier.json), one per "
        "microbatch count (a batch-size ramp-up)",
    )
    g.add_argument(
        "--perseus-profile",
        default=None,
        metavar="PROFILE.csv",
        help="profile mode: where the profile goes (a .json sidecar beside it)",
    )
    g.add_argument("--perseus-profile-iteration", type=int, default=1, metavar="N")
    g.add_argument("--perseus-profile-after", choices=("stop", "continue"), default="stop")
    g.add_argument(
        "--perseus-profile-frequencies",
        default=None,
        metavar="MHZ,MHZ,...",
        help="profile mode: SM clocks to measure (default: every supported clock)",
    )
    g.add_argument("--perseus-profile-window-s", type=float, default=None, metavar="S")
    g.add_argument(
        "--perseus-blocking-power-w",
        type=float,
        default=None,
        metavar="W",
        help="profile mode: use this P_block instead of measuring it",
    )
    g.add_argument("--perseus-no-stragglers", action="store_true", help="do not follow stragglers")
    g.add_argument("--perseus-tolerance", type=float, default=_STRAGGLERS.tolerance)
    g.add_argument("--perseus-recovery", type=float, default=None)
    g.add_argument("--perseus-straggler-window", type=int, default=_STRAGGLERS.window)
    g.add_argument(
        "--perseus-straggler-min-duration",
        type=int,
        default=_STRAGGLERS.min_duration,
        metavar="N",
        help="iterations (of the last N + 3) a straggler must last before it is followed, and "
        "its recovery before following ends",
    )
    g.add_argument(
        "--perseus-straggler-min-gain",
        type=float,
        default=_STRAGGLERS.min_gain,
        metavar="FRACTION",
        help="least energy saving (0.01: 1 %%) for which followers switch plans",
    )
    g.add_argument(
        "--perseus-straggler-tailored",
        action="store_true",
        help="followers run the plan solved for the straggler's time itself "
        "(Frontier.plan_for(..., tailored=True)), not the frontier plans around it fitted to it",
    )
    g.add_argument(
        "--perseus-idle-mhz",
        type=int,
        default=None,
        help="SM clock between iterations (default: unlocked)",
    )
    g.add_argument(
        "--perseus-eval-mhz",
        type=int,
        default=None,
        help="SM clock of evaluation (default: unlocked)",
    )
    g.add_argument("--perseus-report-every", type=int, default=_METRICS.report_every, metavar="N")
    g.add_argument(
        "--perseus-calibrate",
        type=int,
        default=0,
        metavar="K",
        help="A/B: K iterations at the all-fastest plan, then K at the plan; report the saving",
    )
    g.add_argument(
        "--perseus-stale-plan-tolerance",
        type=float,
        default=_METRICS.stale_plan_tolerance,
        metavar="F",
        help="say so when computations take more than this fraction longer or shorter than the "
        "plan predicts, over most of a window (0: do not check)",
    )
    g.add_argument(
        "--perseus-stale-plan-window",
        type=int,
        default=_METRICS.stale_plan_window,
        metavar="N",
        help="iterations per stale-plan decision",
    )
    g.add_argument("--perseus-on-mismatch", choices=("raise", "warn"), default="raise")
    g.add_argument(
        "--perseus-unknown-workload",
        choices=UNKNOWN_WORKLOAD,
        default="raise",
        help="a microbatch count with no frontier: raise (default), or run it with clocks "
        "unlocked (a batch-size ramp-up keyed by count)",
    )
    return parser


def _frequencies(text: Optional[str]) -> Optional[list[int]]:
    if not text:
        return None
    try:
        return [int(f) for f in text.split(",") if f.strip()]
    except ValueError:
        raise ValueError(
            f"--perseus-profile-frequencies must be MHz separated by commas, not {text!r}"
        ) from None


def settings_from_args(args: Any) -> Optional[Settings]:
    """The attachment's settings from parsed ``--perseus-*`` arguments; None when off."""
    mode = getattr(args, "perseus_mode", "off")
    if mode == "off":
        return None
    if full_iteration_graphs(args):
        raise UnsupportedScheduleError(
            "perseus cannot run with --cuda-graph-impl full_iteration: a whole forward-backward "
            "call replays as one CUDA graph, which runs none of perseus's per-computation clock "
            "requests. Use per-layer CUDA graphs (--cuda-graph-impl local or transformer_engine), "
            "or --perseus-mode off"
        )
    clocks = ClockOptions(idle_mhz=args.perseus_idle_mhz, evaluation_mhz=args.perseus_eval_mhz)
    if mode == "profile":
        if not args.perseus_profile:
            raise ValueError("--perseus-mode profile needs --perseus-profile PROFILE.csv")
        options: dict[str, Any] = {}
        frequencies = _frequencies(args.perseus_profile_frequencies)
        if frequencies:
            options["frequencies_mhz"] = frequencies
        if args.perseus_profile_window_s is not None:
            options["window_s"] = args.perseus_profile_window_s
        if args.perseus_blocking_power_w is not None:
            options["blocking_power_w"] = args.perseus_blocking_power_w
        profile = ProfileOptions(
            path=args.perseus_profile,
            iteration=args.perseus_profile_iteration,
            after=args.perseus_profile_after,
            profiler_options=options,
        )
        return settings_of(mode="profile", clocks=clocks, profile=profile)
    paths = args.perseus_frontier or []
    if not paths:
        raise ValueError("--perseus-mode run needs --perseus-frontier FRONTIER.json")
    frontiers: dict[int, Frontier] = {}
    origin: dict[int, str] = {}
    for path in paths:
        try:
            frontier = Frontier.load(path)
        except OSError as error:
            raise ValueError(
                f"--perseus-frontier {path}: cannot read it ({error.strerror or error})"
            ) from error
        except ValueError as error:
            raise ValueError(f"--perseus-frontier {path}: not a valid frontier: {error}") from error
        count = int(frontier.spec.microbatches)
        if count in frontiers:
            raise ValueError(
                f"--perseus-frontier: {origin[count]} and {path} are both for {count} microbatches"
            )
        frontiers[count], origin[count] = frontier, str(path)
    stragglers = StragglerOptions(
        enabled=not args.perseus_no_stragglers,
        tolerance=args.perseus_tolerance,
        recovery=args.perseus_recovery,
        window=args.perseus_straggler_window,
        min_duration=getattr(args, "perseus_straggler_min_duration", _STRAGGLERS.min_duration),
        min_gain=getattr(args, "perseus_straggler_min_gain", _STRAGGLERS.min_gain),
        tailored_plans=getattr(args, "perseus_straggler_tailored", _STRAGGLERS.tailored_plans),
    )
    tolerance = getattr(args, "perseus_stale_plan_tolerance", _METRICS.stale_plan_tolerance)
    metrics = MetricsOptions(
        report_every=args.perseus_report_every,
        calibrate=args.perseus_calibrate,
        stale_plan_tolerance=tolerance if tolerance else None,  # 0 turns the check off
        stale_plan_window=getattr(args, "perseus_stale_plan_window", _METRICS.stale_plan_window),
    )
    unknown = getattr(args, "perseus_unknown_workload", "raise")
    settings = settings_of(
        frontiers,
        mode="run",
        clocks=clocks,
        stragglers=stragglers,
        metrics=metrics,
        on_mismatch=args.perseus_on_mismatch,
        unknown_workload=unknown,
    )
    # Megatron-LM's own arguments, when this namespace has them: refused now, before the model.
    check_frontiers(
        settings.frontiers,
        args,
        unknown_workload=unknown,
        origin={key: f"--perseus-frontier {path}" for key, path in origin.items()},
        on_fingerprint=fingerprint_reaction(args.perseus_on_mismatch),
    )
    return settings


def _megatron_args() -> Any:
    try:
        from megatron.training import get_args  # Megatron-LM, not megatron-core
    except ImportError as error:
        raise MegatronIntegrationError(
            "perseus.megatron.attach_from_args() without args reads Megatron-LM's arguments "
            f"(megatron.training.get_args()), which cannot be imported ({error}); pass the parsed "
            "arguments: attach_from_args(args)"
        ) from error
    return get_args()


def attach_from_args(args: Any = None, *, allow_untested_version: bool = False) -> Attachment:
    """An attachment configured by ``--perseus-*`` arguments (see :func:`add_arguments`).

    Parameters
    ----------
    args
        Parsed arguments; default: Megatron-LM's, read at the first
        iteration (``megatron.training.get_args()``), so the attachment can
        be made and attached before ``pretrain`` parses them.
    allow_untested_version
        As for :func:`attach`.

    Used without a ``with`` block, profile mode's ``--perseus-profile-after
    stop`` ends the process (``SystemExit(0)`` on every rank) once the
    profile is written; the attachment detaches at interpreter exit.
    """
    if args is not None:
        settings = settings_from_args(args)
        if settings is None:
            return Attachment(
                None,
                configure=lambda _parsed: None,
                allow_untested_version=allow_untested_version,
            )
        return Attachment(
            settings, allow_untested_version=allow_untested_version, exit_when_profiled=True
        )
    return Attachment(
        None,
        # Megatron-LM's parsed arguments when perseus finds them (at attach on >= 0.18, at the
        # first iteration before), else megatron.training.get_args().
        configure=lambda parsed: settings_from_args(
            parsed if parsed is not None else _megatron_args()
        ),
        allow_untested_version=allow_untested_version,
        exit_when_profiled=True,
    )

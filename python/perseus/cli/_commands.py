"""The ``perseus`` subcommands: each takes parsed arguments and returns an exit status."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import math
import os
import sys
from typing import Any, Optional

from .._files import (
    check_writable_directory,
    make_output_directory,
    publish_new_file,
    replace_user_file,
)
from .._fingerprint import check_fingerprint
from .._shipped import shipped_profile
from .._sidecar import BLOCKING_POWER_KEY, read_blocking_power, sidecar_path
from .._table import format_table, frontier_table
from .._validate import distinct_seconds, seconds_up
from ..errors import OutputExistsError, ProfileError
from ..frontier import Frontier, PowerCapError
from ..plan import Evaluation, Plan, all_fastest_plan
from ..profile import INSTRUCTIONS, Profile
from ..schedule import check_pipeline_args
from ._arguments import UsageError, _flags_for_arguments

# --- helpers -------------------------------------------------------------------------------


def _warn(message: str) -> None:
    print(f"perseus: warning: {_shown(message)}", file=sys.stderr)


def _shown(name: object) -> str:
    """A file name as it may be printed: control characters (a terminal escape) escaped."""
    text = str(name)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _refuse_existing(path: str, force: bool) -> None:
    """Fail early, before any work, on what the write would refuse; the write itself
    checks again (another run may race)."""
    if not os.path.lexists(path):
        return
    if not force:
        raise UsageError(f"{_shown(path)} already exists; pass --force to overwrite it")
    # --force replaces a regular file only: a link or a directory would be
    # refused by the write, after the work (replace_user_file).
    if os.path.islink(path):
        raise UsageError(
            f"{_shown(path)} is a symbolic link, which perseus does not replace even with "
            "--force; remove it, or give the path of the file it points to"
        )
    if not os.path.isfile(path):
        raise UsageError(f"{_shown(path)} exists and is not a file; --force replaces files only")


def _save_frontier(frontier: Frontier, target: str, force: bool) -> None:
    """Save a finished solve; if that fails, keep a copy elsewhere and say where."""
    import tempfile

    try:
        make_output_directory(os.path.dirname(target) or ".")
        frontier.save(target, overwrite=force)
        return
    except OutputExistsError as error:
        # Checked before the solve (_refuse_existing): it appeared meanwhile.
        raise UsageError(
            f"{_shown(target)}: appeared while perseus was working and was not overwritten "
            f"(pass --force to replace it); the result is kept as {_shown(error.kept_as)}"
        ) from None
    except (OSError, MemoryError) as error:
        reason = _reason(error)
    fallback = os.path.join(tempfile.gettempdir(), f"perseus-frontier-{os.getpid()}.json")
    try:
        frontier.save(fallback, overwrite=False)
    except OutputExistsError as kept:
        fallback = kept.kept_as
    except (OSError, MemoryError) as error:
        raise UsageError(
            f"{_shown(target)}: cannot write the frontier ({reason}), nor a copy in "
            f"{_shown(os.path.dirname(fallback))} ({_reason(error)}); the solve is lost"
        ) from None
    raise UsageError(
        f"{_shown(target)}: cannot write the frontier ({reason}); the finished solve is kept "
        f"as {_shown(fallback)} (move it where you want it)"
    )


def _reason(error: BaseException) -> str:
    if isinstance(error, MemoryError):
        return "out of memory"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _blocking_power(csv_path: str, flag_w: Optional[float]) -> tuple[float, str]:
    """The blocking power (W) for a profile and where it came from."""
    if not os.path.exists(csv_path):  # named as missing, not as missing its sidecar
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), csv_path)
    try:
        stored = read_blocking_power(csv_path)
        problem = None
    except ValueError as error:
        stored, problem = None, error
    if flag_w is not None:
        if problem is not None:
            _warn(f"ignoring the sidecar: {problem}")
        if stored is not None and not math.isclose(
            stored.blocking_power_w, flag_w, rel_tol=1e-3, abs_tol=1e-6
        ):
            _warn(
                f"--blocking-power {flag_w:g} W overrides {stored.blocking_power_w:g} W from "
                f"{stored.path}"
            )
        return flag_w, "from --blocking-power"
    if problem is not None:
        raise UsageError(f"{problem}; pass --blocking-power W")
    if stored is None:
        raise UsageError(
            f"--blocking-power W is required: there is no sidecar {sidecar_path(csv_path)} "
            f"(with {BLOCKING_POWER_KEY}) next to {csv_path}; the profiler writes one"
        )
    return stored.blocking_power_w, f"read from {_shown(stored.path)}"


def _check_layout(schedule: str, virtual_stages: int) -> None:
    """Refuse a --schedule and --virtual-stages that no pipeline can run, by the core's
    rules (one GPU, one microbatch: what is left to check is the chunks per GPU)."""
    try:
        check_pipeline_args(schedule, 1, 1, virtual_stages)
    except ProfileError as error:
        raise UsageError(
            f"argument --schedule/--virtual-stages: {_flags_for_arguments(str(error))}"
        ) from None


def _layout_from_sidecar(args: argparse.Namespace) -> Optional[dict[str, Any]]:
    """Fill --schedule and --virtual-stages from what the profile's sidecar records (a flag that
    contradicts it is refused); returns the sidecar's fingerprint, for the frontier."""
    path = sidecar_path(args.profile)
    recorded: dict[str, Any] = {}
    if path.is_file():
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            document = None  # reported (or refused) with the blocking power it should hold
        recorded = document if isinstance(document, dict) else {}
    taken = []  # what the sidecar chose, for an error that blames it rather than a flag
    for flag, name, key, default in (
        ("--schedule", "schedule", "schedule", "1f1b"),
        ("--virtual-stages", "virtual_stages", "virtual_stages", 1),
    ):
        stored, given = recorded.get(key), getattr(args, name, None)
        if stored is not None and given is not None and stored != given:
            raise UsageError(
                f"argument {flag}: {given!r} contradicts the profile, measured as {key} "
                f"{stored!r} (recorded in {path}); leave {flag} out to use it, or profile again"
            )
        if stored is not None and given is None:
            taken.append(f"{key} {stored!r}")
        setattr(
            args, name, given if given is not None else stored if stored is not None else default
        )
    if taken:
        try:
            check_pipeline_args(args.schedule, 1, 1, args.virtual_stages)
        except ProfileError as error:
            raise UsageError(
                f"{path}: it records {' and '.join(taken)}, a layout perseus cannot run: {error}"
            ) from None
    fingerprint = recorded.get("fingerprint")
    if not (isinstance(fingerprint, dict) and fingerprint):
        return None
    try:
        return dict(check_fingerprint(fingerprint))
    except (TypeError, ValueError) as error:
        raise UsageError(f"{path}: {error}") from None


def _load_frontier(path: str) -> Frontier:
    return Frontier.load(path)


def _choose(frontier: Frontier, args: argparse.Namespace) -> tuple[Plan, int, str]:
    """The plan the flags ask for, its index and how it was chosen."""
    if getattr(args, "peak", False) and args.power_cap is None:
        raise UsageError("argument --peak: only with --power-cap")
    fastest = frontier.fastest
    if args.deadline is not None:
        try:
            chosen = frontier.plan_for(args.deadline, reclaim=False)
        except ValueError:
            _, fastest_s = distinct_seconds(args.deadline, fastest.iteration_time_s)
            raise UsageError(
                f"argument --deadline: no plan takes at most {_deadline_shown(args, args.deadline)}"
                f" s; the fastest plan takes {fastest_s} s"
            ) from None
        how = f"the cheapest plan within --deadline {args.deadline:g} s"
    elif args.slowdown is not None:
        chosen = frontier.plan_for(args.slowdown * fastest.iteration_time_s, reclaim=False)
        how = f"the cheapest plan within --slowdown {args.slowdown:g} x the fastest plan's time"
    elif args.power_cap is not None:
        try:
            chosen = frontier.plan_for_power(args.power_cap, peak=args.peak)
        except PowerCapError as error:
            raise UsageError(f"argument --power-cap: {error}") from None
        how = (
            f"the fastest plan whose {'peak' if args.peak else 'average'} power stays within "
            f"--power-cap {args.power_cap:g} W"
        )
    else:
        chosen, how = fastest, "the fastest plan"
    return chosen, frontier.index(chosen), how


def _plan_facts(frontier: Frontier, plan: Plan, index: int) -> dict[str, Any]:
    waiting = frontier.baseline_energy_at(plan.iteration_time_s)
    facts: dict[str, Any] = {
        "index": index,
        "iteration_time_s": plan.iteration_time_s,
        "energy_j": plan.energy_j,
        "saving_vs_all_fastest_percent": 100 * (1 - plan.energy_j / waiting),
        "average_power_w": plan.average_power_w,
    }
    if plan.profile is not None:
        facts["peak_power_w"] = plan.power_timeline().peak_w
    return facts


def _percent(value: float) -> str:
    """A percentage with 2 decimals; a value that rounds to zero is 0.00, not -0.00."""
    text = f"{value:.2f}"
    return "0.00" if text == "-0.00" else text


def _emit_json(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2))


# --- commands ------------------------------------------------------------------------------


def _optimize(args: argparse.Namespace) -> int:
    from ..optimize import optimize
    from ..progress import ProgressBar

    if (args.profile is None) == (args.example is None):
        raise UsageError("give a PROFILE or --example NAME (one of them)")
    if args.example is not None:
        args.profile = str(shipped_profile(args.example))
    target = os.path.join(args.output, "frontier.json")
    check_writable_directory(args.output)  # before the solve, not after it
    _refuse_existing(target, args.force)
    power_w, power_source = _blocking_power(args.profile, args.blocking_power)
    fingerprint = _layout_from_sidecar(args)
    profile = Profile.from_csv(args.profile, blocking_power_w=power_w)
    _check_layout(args.schedule, args.virtual_stages)
    if profile.num_stages % args.virtual_stages:
        raise UsageError(
            f"argument --virtual-stages: {args.virtual_stages} does not divide the profile's "
            f"{profile.num_stages} stages"
        )
    bar = None if args.quiet else ProgressBar(sys.stderr)
    try:
        frontier = optimize(
            profile,
            microbatches=args.microbatches,
            schedule=args.schedule,
            virtual_stages=args.virtual_stages,
            unit_time_s=args.unit_time,
            progress=bar,
            fingerprint=fingerprint,
            threads=args.threads,
        )
    except ProfileError as error:  # the library names its arguments; here they are flags
        raise UsageError(_flags_for_arguments(str(error))) from None
    finally:
        if bar is not None:
            bar.close(completed=sys.exc_info()[0] is None)
    _save_frontier(frontier, target, args.force)
    # The facts, once: the JSON document is them, the text formats them.
    b, fastest, slowest = frontier.baseline, frontier.fastest, frontier[-1]
    t_slow = slowest.iteration_time_s
    fastest_waiting_j = fastest.energy_at(t_slow)
    facts: dict[str, Any] = {
        "frontier": target,
        "profile": args.profile,
        "blocking_power_w": power_w,
        "blocking_power_source": power_source,
        "pipeline": frontier.spec.__dict__,
        "all_fastest": {"iteration_time_s": b.iteration_time_s, "energy_j": b.energy_j},
        "fastest": _plan_facts(frontier, fastest, 0),
        "slowest": {
            **_plan_facts(frontier, slowest, len(frontier) - 1),
            "fastest_waiting_energy_j": fastest_waiting_j,
            "all_fastest_waiting_energy_j": frontier.baseline_energy_at(t_slow),
            "saving_vs_fastest_waiting_percent": 100 * (1 - slowest.energy_j / fastest_waiting_j),
        },
        "plans": len(frontier),
        "steps": frontier.steps,
        "solve_time_s": frontier.solve_time_s,
    }
    if args.json:
        _emit_json(facts)
        return 0
    first, last = facts["fastest"], facts["slowest"]
    print(
        f"profile       {_shown(args.profile)}: {profile.num_stages} stages on "
        f"{frontier.spec.num_gpus} GPUs, {args.microbatches} microbatches, {args.schedule}"
    )
    print(f"blocking      {power_w:g} W per waiting GPU, {power_source}")
    print(
        f"all-fastest   {seconds_up(b.iteration_time_s)} s  {b.energy_j:.1f} J  every computation at "
        "its fastest clock (the baseline)"
    )
    print(
        f"fastest plan  {seconds_up(first['iteration_time_s'])} s  {first['energy_j']:.1f} J  "
        f"{_percent(first['saving_vs_all_fastest_percent'])}% less energy than all-fastest, same "
        "iteration time"
    )
    if facts["plans"] > 1:
        print(
            f"slowest plan  {seconds_up(t_slow)} s  {last['energy_j']:.1f} J  when a straggler stretches "
            f"the iteration to {seconds_up(t_slow)} s: {last['saving_vs_fastest_waiting_percent']:.2f}% "
            f"less than the fastest plan waiting for it ({last['fastest_waiting_energy_j']:.1f} J), "
            f"{_percent(last['saving_vs_all_fastest_percent'])}% less than all-fastest "
            f"waiting ({last['all_fastest_waiting_energy_j']:.1f} J)"
        )
    print(
        f"plans         {facts['plans']} from {seconds_up(first['iteration_time_s'])} s to "
        f"{seconds_up(t_slow)} s "
        f"({facts['steps']} min-cut steps, solved in {facts['solve_time_s']:.2f} s)"
    )
    print(f"written       {_shown(target)}")
    return 0


def _show(args: argparse.Namespace) -> int:
    frontier = _load_frontier(args.frontier)
    rows, common = frontier_table(frontier)
    spec = frontier.spec
    if args.json:
        _emit_json(
            {
                "frontier": args.frontier,
                "pipeline": spec.__dict__,
                "blocking_power_w": frontier.blocking_power_w,
                "plans": len(frontier),
                "common_iteration_time_s": common,
                "rows": [row.__dict__ for row in rows],
            }
        )
        return 0
    print(
        f"{_shown(args.frontier)}: {len(frontier)} plans, {spec.num_gpus} GPUs x {spec.virtual_stages} "
        f"chunk(s), {spec.microbatches} microbatches, {spec.schedule}, blocking power "
        f"{frontier.blocking_power_w:g} W"
    )
    print()
    print(format_table(rows, common))
    return 0


def _plan(args: argparse.Namespace) -> int:
    from .._plan_files import Derived, file_name, write_plan

    check_writable_directory(args.output)
    frontier = _load_frontier(args.frontier)
    if args.tailored and args.switch_latency is not None:
        raise UsageError("argument --tailored: not with --switch-latency")
    if args.no_reclaim and (args.tailored or args.switch_latency is not None):
        raise UsageError("argument --no-reclaim: not with --tailored or --switch-latency")
    chosen, index, how = _choose(frontier, args)
    aware = None
    made_from: Optional[int] = index
    if args.switch_latency is not None:
        # `index` stays the frontier plan that meets the deadline (the file is named after
        # it, the energy over the deadline compared with it); the merged plan's base may be
        # a slower plan fitted to the deadline, or the all-fastest plan.
        chosen, how, aware = _switch_aware_choice(frontier, args)
        made_from = aware.frontier_index if aware.frontier_index >= 0 else None
    if args.tailored:
        chosen, how = _tailored_choice(frontier, args, index)
    elif aware is None and (args.deadline is not None or args.slowdown is not None):
        if not args.no_reclaim:
            chosen, how, made_from = _fitted_choice(frontier, args, index, chosen, how)
    elif args.no_reclaim:
        raise UsageError("argument --no-reclaim: only with --deadline or --slowdown")
    derived = None
    if not _is_frontier_plan(frontier, chosen, index):
        deadline, _ = _deadline_of(frontier, args, "--deadline")
        kind = "tailored" if args.tailored else "fitted" if aware is None else "switch-aware"
        derived = Derived(kind, made_from, deadline, how)
    target = os.path.join(args.output, file_name(args.format, index, derived))
    _refuse_existing(target, args.force)
    make_output_directory(args.output)
    write_plan(chosen, target, args.format, index, overwrite=args.force, derived=derived)
    facts = _plan_facts(frontier, chosen, index)
    over_deadline = ""
    time_shown = seconds_up(chosen.iteration_time_s)
    if args.deadline is not None or args.slowdown is not None:
        # What the choice is judged by: energy over the deadline, this plan's and the
        # frontier plan's that meets it (which idles for the rest).
        deadline, _ = _deadline_of(frontier, args, "--deadline")
        own = frontier[index]
        facts["deadline_s"] = deadline
        facts["energy_at_deadline_j"] = chosen.energy_at(max(deadline, chosen.iteration_time_s))
        facts["frontier_plan_energy_at_deadline_j"] = own.energy_at(
            max(deadline, own.iteration_time_s)
        )
        if derived is not None:
            facts["derived_from_index"] = made_from
        deadline_shown = _deadline_shown(args, deadline)
        if chosen.iteration_time_s <= deadline:
            time_shown = _time_within(chosen.iteration_time_s, deadline_shown)
        over_deadline = (
            f"over {deadline_shown} s  {facts['energy_at_deadline_j']:.1f} J "
            "(frontier plan "
            f"{index}, idling for the rest: {facts['frontier_plan_energy_at_deadline_j']:.1f} J)\n"
        )
    if aware is not None:
        facts["switch_latency"] = {
            "switch_latency_s": aware.replay.switch_latency_s,
            "iteration_time_s": aware.replay.iteration_time_s,
            "energy_j": aware.replay.energy_j,
            "energy_at_deadline_j": aware.energy_at_deadline_j,
            "switches_per_iteration": aware.replay.switches_per_iteration,
            "unmerged_switches_per_iteration": aware.unmerged_switches_per_iteration,
            "merge_tolerance_mhz": aware.tolerance_mhz,
            "merge_energy_cost_j": aware.merge_energy_cost_j,
        }
    if args.json:
        _emit_json({"written": target, "format": args.format, "chosen": how, "plan": facts})
        return 0
    peak = f", peak {facts['peak_power_w']:.0f} W" if "peak_power_w" in facts else ""
    which = f"{index} of {len(frontier)}"
    if derived is not None:
        which = f"{derived.kind}, not a frontier plan (near plan {index} of {len(frontier)})"
    latency = ""
    if aware is not None:
        r = aware.replay
        latency = (
            f"latency       {r.switch_latency_s:g} s per change: {seconds_up(r.iteration_time_s)} s  "
            f"{r.energy_j:.1f} J; {r.switches_per_iteration} switches per iteration "
            f"({aware.unmerged_switches_per_iteration} before merging, which cost "
            f"{aware.merge_energy_cost_j:.2f} J without latency)\n"
        )
    print(
        f"plan          {which}: {how}\n"
        f"time, energy  {time_shown} s  {chosen.energy_j:.1f} J  "
        f"{_percent(facts['saving_vs_all_fastest_percent'])}% less than all-fastest over the same "
        f"time; average {chosen.average_power_w:.0f} W{peak} (all GPUs)\n"
        f"{over_deadline}"
        f"{latency}"
        f"written       {_shown(target)} ({args.format}, {frontier.spec.num_gpus} GPUs)"
    )
    return 0


def _deadline_shown(args: argparse.Namespace, deadline: float) -> str:
    """A deadline as printed beside plan times: --deadline as the user gave it
    (6 significant digits showed 18.34204 as 18.342), one from --slowdown
    rounded up as plan times are, so that a plan that meets it never shows a
    larger time than it (20.1763 s over 20.1762 s did)."""
    if args.deadline is not None and deadline == args.deadline:
        return repr(float(deadline))
    return seconds_up(deadline)


def _time_within(time_s: float, limit_shown: str) -> str:
    """A plan time that meets a deadline, rounded up as plan times are, but with as
    many digits as it takes not to show more than the deadline as printed."""
    limit = float(limit_shown)
    text = seconds_up(time_s)
    for digits in (6, 9, 12, 15):
        if float(text) <= limit:
            return text
        text = seconds_up(time_s, significant=digits)
    return text if float(text) <= limit else repr(time_s)


def _deadline_of(frontier: Frontier, args: argparse.Namespace, option: str) -> tuple[float, str]:
    """The deadline (s) that --deadline or --slowdown asks for, and how to name it; `option`
    (which needs one of them) in the error otherwise."""
    if args.deadline is not None:
        return args.deadline, f"--deadline {args.deadline:g} s"
    if args.slowdown is not None:
        return args.slowdown * frontier.fastest.iteration_time_s, f"--slowdown {args.slowdown:g}"
    raise UsageError(f"argument {option}: only with --deadline or --slowdown")


def _tailored_choice(frontier: Frontier, args: argparse.Namespace, index: int) -> tuple[Plan, str]:
    """`perseus plan --tailored`: the plan solved for --deadline or --slowdown from plan `index`."""
    deadline, flag = _deadline_of(frontier, args, "--tailored")
    try:
        plan = frontier.plan_for(deadline, tailored=True)
    except ValueError as error:
        raise UsageError(f"argument --tailored: {error}") from None
    return plan, f"a plan solved for {flag} (tailored), from plan {index} and its neighbours"


def _fitted_choice(
    frontier: Frontier, args: argparse.Namespace, index: int, chosen: Plan, how: str
) -> tuple[Plan, str, int]:
    """`perseus plan/plot --deadline/--slowdown`: what Frontier.plan_for gives by default,
    the frontier plans nearest the deadline fitted to it, or plan `index` itself when no fit
    saves energy; with how it was chosen and the frontier plan it was made from."""
    from .._tailored import fitted_plan

    deadline, flag = _deadline_of(frontier, args, "--deadline")
    plan, origin = fitted_plan(frontier, index, deadline)
    if origin is None:
        return chosen, how, index
    if origin <= index:
        return (
            plan,
            f"plan {origin} slowed into {flag} (fitted; --no-reclaim for plan {index})",
            origin,
        )
    return (
        plan,
        f"plan {origin} sped up to {flag}, then slowed into what is left (fitted; "
        f"--no-reclaim for plan {index})",
        origin,
    )


def _is_frontier_plan(frontier: Frontier, plan: Plan, index: int) -> bool:
    try:
        return frontier.index(plan) == index
    except ValueError:
        return False


def _switch_aware_choice(frontier: Frontier, args: argparse.Namespace) -> tuple[Plan, str, Any]:
    """`perseus plan --switch-latency`: the switch-aware plan for --deadline or --slowdown."""
    from ..switch_latency import switch_aware_plan

    deadline, flag = _deadline_of(frontier, args, "--switch-latency")
    try:
        aware = switch_aware_plan(frontier, deadline, args.switch_latency)
    except ValueError as error:
        raise UsageError(f"argument --switch-latency: {error}") from None
    origin = f"plan {aware.frontier_index}" if aware.frontier_index >= 0 else "all-fastest"
    if aware.fitted:
        origin += " fitted to the deadline"
    how = (
        f"the cheapest plan within {flag} with {args.switch_latency:g} s per clock change "
        f"({origin}, changes within {aware.tolerance_mhz} MHz merged)"
    )
    return aware.plan, how, aware


def _evaluate(args: argparse.Namespace) -> int:
    from .._plan_files import read_plan

    power_w, power_source = _blocking_power(args.profile, args.blocking_power)
    profile = Profile.from_csv(args.profile, blocking_power_w=power_w)
    frontier = _load_frontier(args.frontier) if args.frontier else None
    plan = read_plan(args.plan, profile, schedule=args.schedule, virtual_stages=args.virtual_stages)
    spec = plan.spec
    base = all_fastest_plan(profile, spec)
    base_eval = Evaluation(base.iteration_time_s, base.energy_j)
    length = max(plan.iteration_time_s, base_eval.iteration_time_s)
    base_waiting = base.energy_at(length)
    result: dict[str, Any] = {
        "plan": args.plan,
        "profile": args.profile,
        "pipeline": spec.__dict__,
        "blocking_power_w": power_w,
        "blocking_power_source": power_source,
        "iteration_time_s": plan.iteration_time_s,
        "energy_j": plan.energy_j,
        "average_power_w": plan.average_power_w,
        "peak_power_w": plan.power_timeline().peak_w,
        "all_fastest": {
            "iteration_time_s": base_eval.iteration_time_s,
            "energy_j": base_eval.energy_j,
            "saving_percent": 100 * (1 - plan.energy_at(length) / base_waiting),
        },
    }
    lines = [
        f"plan          {_shown(args.plan)}: {spec.num_gpus} GPUs x {spec.virtual_stages} "
        "chunk(s), "
        f"{spec.microbatches} microbatches, {spec.schedule}",
        f"blocking      {power_w:g} W per waiting GPU, {power_source}",
        f"replayed      {seconds_up(plan.iteration_time_s)} s  {plan.energy_j:.1f} J  on "
        f"{_shown(args.profile)}; "
        f"average {plan.average_power_w:.0f} W, peak {result['peak_power_w']:.0f} W (all GPUs)",
        f"all-fastest   {seconds_up(base_eval.iteration_time_s)} s  {base_eval.energy_j:.1f} J  the plan "
        f"uses {_percent(result['all_fastest']['saving_percent'])}% less over a {seconds_up(length)} s iteration",
    ]
    if args.switch_latency is not None:
        from ..switch_latency import replay_with_switch_latency

        late = replay_with_switch_latency(profile, spec, plan.frequencies_mhz, args.switch_latency)
        result["switch_latency"] = {
            "switch_latency_s": late.switch_latency_s,
            "iteration_time_s": late.iteration_time_s,
            "energy_j": late.energy_j,
            "switches_per_iteration": late.switches_per_iteration,
            "late_fraction": late.late_fraction,
        }
        lines.append(
            f"latency       {late.switch_latency_s:g} s per change: {seconds_up(late.iteration_time_s)} s  "
            f"{late.energy_j:.1f} J; {late.switches_per_iteration} switches per iteration, "
            f"{100 * late.late_fraction:.1f}% of computing at a clock not planned"
        )
    if frontier is not None:
        if frontier.spec != spec:
            raise UsageError(
                f"argument --frontier: {args.frontier} is for {frontier.spec}, the plan for {spec}"
            )
        _check_frontier_measurements(frontier, args.frontier, profile, args.profile)
        if plan.iteration_time_s < frontier.fastest.iteration_time_s:
            lines.append(
                f"perseus       no plan of {_shown(args.frontier)} is as fast: its fastest takes "
                f"{seconds_up(frontier.fastest.iteration_time_s)} s"
            )
        else:
            # What plan_for gives for this plan's time (by default, the frontier plans
            # nearest it fitted to it), as a user of the frontier would get it.
            from .._tailored import fitted_plan

            time_s = plan.iteration_time_s
            index = frontier._slowest_meeting(time_s)
            ours, origin = fitted_plan(frontier, index, time_s)
            fitted = origin is not None
            ours_j = ours.energy_at(time_s)
            saving = 100 * (1 - ours_j / plan.energy_j)
            result["frontier"] = {
                "index": None if fitted else index,
                "fitted_from_index": origin if fitted else None,
                "iteration_time_s": ours.iteration_time_s,
                "energy_j": ours.energy_j,
                "energy_at_plan_time_j": ours_j,
                "saving_vs_plan_percent": saving,
            }
            which = (
                f"plan_for's plan (plan {origin} of {_shown(args.frontier)} fitted to this time)"
                if fitted
                else f"plan {index} of {_shown(args.frontier)}"
            )
            lines.append(
                f"perseus       {seconds_up(ours.iteration_time_s)} s  {ours.energy_j:.1f} J  {which}, "
                f"no slower: {_percent(saving)}% less than this plan over its {seconds_up(time_s)} s"
            )
    if args.json:
        _emit_json(result)
    else:
        print("\n".join(lines))
    return 0


def _check_frontier_measurements(
    frontier: Frontier, frontier_path: str, profile: Profile, profile_path: str
) -> None:
    """Refuse to compare a plan replayed on `profile` with a frontier solved on other
    measurements or another blocking power: the two energies would not be comparable."""
    where = f"argument --frontier: {frontier_path} was solved"
    if frontier.profile is None:  # a version-1 file: nothing to check against
        _warn(
            f"{_shown(frontier_path)} does not carry the profile it was solved on; assuming "
            f"{_shown(profile_path)}'s measurements and blocking power"
        )
        return
    ours, theirs = profile, frontier.profile
    if not math.isclose(
        theirs.blocking_power_w, ours.blocking_power_w, rel_tol=1e-9, abs_tol=1e-12
    ):
        raise UsageError(
            f"{where} with a blocking power of {theirs.blocking_power_w:g} W per waiting GPU, "
            f"this evaluation uses {ours.blocking_power_w:g} W: the energies are not comparable "
            f"(pass --blocking-power {theirs.blocking_power_w:g} to compare them)"
        )
    if theirs.num_stages != ours.num_stages:
        raise UsageError(
            f"{where} on a {theirs.num_stages}-stage profile, {profile_path} has "
            f"{ours.num_stages} stages"
        )
    for stage in range(ours.num_stages):
        for instruction in INSTRUCTIONS:
            if theirs.measured(stage, instruction) != ours.measured(stage, instruction):
                raise UsageError(
                    f"{where} on other measurements than {profile_path}'s (stage {stage}, "
                    f"{instruction}, differs first): the energies are not comparable"
                )


_IMAGE_TYPES = (".png", ".svg", ".pdf")


def _plot(args: argparse.Namespace) -> int:
    from .. import plotting

    extension = os.path.splitext(args.output)[1].lower()
    if extension not in _IMAGE_TYPES:
        raise UsageError(
            f"argument -o/--output: {args.output!r} must end in {', '.join(_IMAGE_TYPES)}"
        )
    picks_plan = args.deadline or args.slowdown or args.power_cap
    if picks_plan and not (args.timeline or args.power):
        raise UsageError(
            "arguments --deadline/--slowdown/--power-cap choose the plan of --timeline or --power"
        )
    check_writable_directory(os.path.dirname(args.output) or ".")
    _refuse_existing(args.output, args.force)
    plotting.require_matplotlib()  # fail before loading anything, naming the extra
    if args.no_reclaim and args.deadline is None and args.slowdown is None:
        raise UsageError("argument --no-reclaim: only with --deadline or --slowdown")
    frontier = _load_frontier(args.frontier)
    chosen, index, how = _choose(frontier, args)
    named = f"plan {index} ({how})"
    if (args.deadline is not None or args.slowdown is not None) and not args.no_reclaim:
        # The plan `perseus plan` writes for the same flags.
        frontier_plan = chosen
        chosen, how, _ = _fitted_choice(frontier, args, index, chosen, how)
        if chosen is not frontier_plan:
            named = how
    if args.timeline:
        fig = plotting.timeline_figure(frontier, chosen)
        what = f"timeline of {named} under all-fastest"
    elif args.power:
        fig = plotting.power_figure(frontier, chosen)
        what = f"power of {named} against all-fastest"
    else:
        fig = plotting.frontier_figure(frontier)
        what = "frontier"
    _save_figure(fig, args.output, extension, args.dpi, args.force)
    if args.json:
        _emit_json({"written": args.output, "plot": what})
    else:
        print(f"written       {_shown(args.output)} ({what})")
    return 0


def _save_figure(fig: Any, path: str, extension: str, dpi: int, force: bool) -> None:
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format=extension[1:], dpi=dpi)
    make_output_directory(os.path.dirname(path) or ".")
    if force:
        replace_user_file(path, buffer.getvalue())
    else:
        publish_new_file(path, buffer.getvalue())


def _report(args: argparse.Namespace) -> int:
    from .. import report

    if not args.output.endswith((".html", ".htm")):
        raise UsageError(f"argument -o/--output: {args.output!r} must end in .html")
    check_writable_directory(os.path.dirname(args.output) or ".")
    _refuse_existing(args.output, args.force)
    frontier = _load_frontier(args.frontier)
    page = report.html_report(frontier, title=os.path.basename(args.frontier))
    make_output_directory(os.path.dirname(args.output) or ".")
    replace_user_file(args.output, page, overwrite=args.force)
    if args.json:
        _emit_json({"written": args.output, "bytes": len(page.encode())})
    else:
        print(
            f"written       {_shown(args.output)} ({len(page.encode()) // 1024} KiB, "
            "self-contained)"
        )
    return 0


def _switch_latency(args: argparse.Namespace) -> int:
    from ..switch_timing import measure_switch_latency
    from ..switcher import LibraryLoadError, NvmlError

    try:
        m = measure_switch_latency(args.device, repeats=args.repeats)
    except (NvmlError, LibraryLoadError, IndexError) as error:
        print(f"perseus switch-latency: error: {error}", file=sys.stderr)
        return 1
    # The facts, once; the text shows the summaries, the JSON every sample too.
    seen = len(m.visible_s) > 0
    facts: dict[str, Any] = {
        "device": m.device,
        "name": m.name,
        "clocks_mhz": list(m.clocks_mhz),
        "median_s": m.median_s,
        "min_s": float(m.visible_s.min()) if seen else None,
        "max_s": float(m.visible_s.max()) if seen else None,
        "call_mean_s": float(m.call_s.mean()) if len(m.call_s) else None,
        "visible_s": m.visible_s.tolist(),
        "call_s": m.call_s.tolist(),
        "timeouts": m.timeouts,
    }
    if args.json:
        _emit_json(facts)
        return 0 if seen else 1

    def ms(seconds: float) -> str:
        return f"{1000 * seconds:.3f} ms"

    print(
        f"GPU {m.device} ({m.name}): {m.clocks_mhz[0]} <-> {m.clocks_mhz[1]} MHz, "
        f"{len(m.visible_s)} changes seen, {m.timeouts} not seen within 1 s\n"
        f"visible after  median {ms(m.median_s)}"
        + (f", min {ms(facts['min_s'])}, max {ms(facts['max_s'])}" if seen else "")
        + "\nNVML call      mean "
        + (ms(facts["call_mean_s"]) if facts["call_mean_s"] is not None else "-")
    )
    return 0 if seen else 1


def _reset_clocks(args: argparse.Namespace) -> int:
    from ..switcher import NvmlError, reset_clocks

    try:
        results = reset_clocks(args.device)
    except (NvmlError, IndexError) as error:
        print(f"perseus reset-clocks: error: {error}", file=sys.stderr)
        return 1
    if not results:  # silence here would read as "all reset"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        print(
            f"perseus reset-clocks: error: no GPU is visible{why}; nothing was reset",
            file=sys.stderr,
        )
        return 1
    if args.json:
        _emit_json({"gpus": [dataclasses.asdict(r) for r in results]})
    else:
        for r in results:
            print(
                f"GPU {r.device} (NVML {r.nvml_index}, {r.name}): SM clocks {r.gpu}, "
                f"memory clocks {r.memory}"
            )
    return 0 if all(r.ok for r in results) else 1


def _clockd(args: argparse.Namespace) -> int:
    from ..clockd import parse_rule, run

    try:
        rules = [parse_rule(text) for text in args.allow]
        mode = int(args.mode, 8)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if not rules:
        print(
            "perseus clockd: warning: no --allow rule, so only root's processes may lock clocks",
            file=sys.stderr,
        )
    return run(args.socket, rules, mode)


def _bench_label(path: str) -> str:
    """A profile's name in bench results: an absolute path as it is, a relative
    one relative to the working directory however it is spelled, so that
    ``./p.csv``, ``p.csv`` and ``../here/p.csv`` are one case."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    try:
        return os.path.relpath(os.path.abspath(path))
    except (OSError, ValueError):  # no working directory any more
        return os.path.normpath(path)


def _bench(args: argparse.Namespace) -> int:
    from ..benchmark import (
        BenchCase,
        BenchError,
        case_name,
        compare,
        corpus_cases,
        load_result,
        run_cases,
    )

    if args.profiles and args.microbatches is None:
        raise UsageError("argument -m/--microbatches: required with PROFILE")
    if not args.profiles and args.microbatches is not None:
        raise UsageError("argument -m/--microbatches: only with PROFILE (the corpus sets its own)")
    _check_layout(args.schedule, args.virtual_stages)
    if args.max_energy_regression < 0:
        raise UsageError("argument --max-energy-regression: must be >= 0 percent")
    to_file = args.json not in (None, "-")
    if to_file:  # before the work, not after it
        check_writable_directory(os.path.dirname(args.json) or ".")
        _refuse_existing(args.json, args.force)
    baseline = load_result(args.baseline) if args.baseline is not None else None  # fail early
    if args.compare_lowtime:
        from .._lowtime import lowtime_available

        if lowtime_available() is None:
            raise UsageError(
                "argument --compare-lowtime: lowtime is not installed (pip install lowtime)"
            )

    cases = corpus_cases() if (args.corpus or not args.profiles) else []
    for path in args.profiles:
        power_w, _ = _blocking_power(path, args.blocking_power)
        profile = Profile.from_csv(path, blocking_power_w=power_w)  # a bad profile stops here
        if profile.num_stages % args.virtual_stages:
            raise UsageError(
                f"argument --virtual-stages: {args.virtual_stages} does not divide {path}'s "
                f"{profile.num_stages} stages"
            )
        for m in args.microbatches:
            cases.append(
                BenchCase(
                    case_name(
                        _bench_label(path),
                        m,
                        args.schedule,
                        args.virtual_stages,
                        args.unit_time,
                    ),
                    path,
                    power_w,
                    m,
                    args.schedule,
                    args.virtual_stages,
                    args.unit_time,
                )
            )

    def progress(case: BenchCase) -> None:
        print(f"perseus bench: {_shown(case.name)} ({args.repeats}x)", file=sys.stderr, flush=True)

    try:
        result = run_cases(
            cases, args.repeats, compare_lowtime=args.compare_lowtime, progress=progress
        )
        comparison = (
            compare(
                result,
                baseline,
                max_energy_regression_percent=args.max_energy_regression,
                max_slowdown=args.max_slowdown,
                gate_cpu_time=not args.no_cpu_gate,
            )
            if baseline is not None
            else None
        )
    except BenchError as error:
        raise UsageError(str(error)) from None
    text = json.dumps(result, indent=2) + "\n"
    if to_file:
        make_output_directory(os.path.dirname(args.json) or ".")
        replace_user_file(args.json, text)
    if args.json == "-":
        sys.stdout.write(text)
    else:
        _bench_table(result)
        if to_file:
            print(f"written       {_shown(args.json)}")
    if comparison is None:
        return 0
    out = sys.stderr if args.json == "-" else sys.stdout
    for line in comparison.notes:
        print(f"note: {_shown(line)}", file=out)
    for line in comparison.improvements:
        print(f"improvement: {_shown(line)}", file=out)
    for line in comparison.regressions:
        print(f"REGRESSION: {_shown(line)}", file=out)
    if comparison.regressions:
        print(
            f"perseus bench: {len(comparison.regressions)} regression(s) against "
            f"{_shown(args.baseline)}",
            file=sys.stderr,
        )
        return 1
    print(f"no regression against {_shown(args.baseline)}", file=out)
    return 0


def _bench_table(result: dict[str, Any]) -> None:
    """One row per case; the case's name last, so a long profile path is never cut."""
    labels = " ".join(f"{'save@' + format(x, 'g'):>9}" for x in result["slowdowns"])
    print(
        f"{'cpu s med':>9} {'(min..max)':>15} {'wall s':>7} {'steps':>8} {'cuts':>6} "
        f"{'plans':>5} {'E fast J':>10} {labels} {'peak MiB':>8}  case"
    )
    for c in result["cases"]:
        cpu = c["cpu_s"]
        spread = f"({cpu['min']:.2f}..{cpu['max']:.2f})"
        savings = " ".join(f"{p['saving_percent']:>8.2f}%" for p in c["slowdowns"])
        print(
            f"{cpu['median']:>9.3f} {spread:>15} {c['wall_s']['median']:>7.2f} {c['steps']:>8} "
            f"{c['cuts']:>6} {c['plans']:>5} {c['fastest']['energy_j']:>10.1f} {savings} "
            f"{c['peak_rss_bytes'] / 2**20:>8.1f}  {_shown(c['name'])}"
        )
    print(
        "save@X: energy saved against all-fastest when the iteration may take X times the "
        "fastest plan's time; peak: the resident memory of the process that ran the case"
    )
    for c in result["cases"]:
        if "lowtime" not in c:
            continue
        lt = c["lowtime"]
        if lt is None:
            print(f"lowtime: {_shown(c['name'])}: not compared (lowtime solves 1F1B only)")
            continue
        ratios = ", ".join(
            f"{p['slowdown']:g}x: "
            + ("no plan" if p["energy_ratio"] is None else f"{p['energy_ratio']:.4f}")
            for p in lt["slowdowns"]
        )
        print(
            f"lowtime {lt['version']}: {_shown(c['name'])}: {lt['wall_s']:.2f} s wall "
            f"({lt['wall_ratio']:.1f}x perseus's median), {lt['plans']} plans; perseus's "
            f"energy over lowtime's at {ratios}"
        )

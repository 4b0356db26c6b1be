"""The arguments of :func:`perseus.megatron.attach`, checked into one :class:`Settings`.

Checked before anything is imported (torch, megatron), so a wrong argument
fails at once, naming itself. perseus 0.1's keywords map onto the option
records here, each with one deprecation warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from .._deprecation import warn_renamed
from ..frontier import Frontier
from ..plan import Plan
from ._following import WorkloadKey, normalize_frontiers
from ._options import ClockOptions, MetricsOptions, ProfileOptions, StragglerOptions

__all__ = [
    "MODES",
    "UNKNOWN_WORKLOAD",
    "FrontierArgument",
    "Settings",
    "from_old_keywords",
    "settings_of",
]

MODES = ("run", "profile")

#: What an iteration whose microbatch count (or length) has no frontier does: stop the job
#: (default; a job restarted on fewer nodes changes its count silently otherwise), or run it
#: with clocks unlocked (an explicit opt-in, e.g. for a batch-size ramp-up keyed by count).
UNKNOWN_WORKLOAD = ("raise", "unlocked")

FrontierArgument = Union[Frontier, Mapping[Any, Frontier], None]


@dataclass(frozen=True)
class Settings:
    """Everything an attachment does, checked (made by :func:`attach`)."""

    mode: str
    frontiers: dict[WorkloadKey, Frontier]
    by_length: bool
    plan: Optional[Plan]
    clocks: ClockOptions
    stragglers: StragglerOptions
    metrics: MetricsOptions
    profile: Optional[ProfileOptions]
    on_mismatch: str
    record: bool
    unknown_workload: str = "raise"


_OLD_KEYWORDS = {
    "switcher": ("clocks", "ClockOptions", "switcher"),
    "device": ("clocks", "ClockOptions", "device"),
    "tolerance": ("stragglers", "StragglerOptions", "tolerance"),
    "recovery": ("stragglers", "StragglerOptions", "recovery"),
    "warmup_iterations": ("stragglers", "StragglerOptions", "warmup_iterations"),
    "data_parallel_group": ("stragglers", "StragglerOptions", "data_parallel_group"),
    "model_parallel_group": ("stragglers", "StragglerOptions", "model_parallel_group"),
    "profile_path": ("profile", "ProfileOptions", "path"),
    "profile_iteration": ("profile", "ProfileOptions", "iteration"),
    "after": ("profile", "ProfileOptions", "after"),
    "profiler_mode": ("profile", "ProfileOptions", "profiler_mode"),
    "profiler_options": ("profile", "ProfileOptions", "profiler_options"),
    "profile_timeout_s": ("profile", "ProfileOptions", "timeout_s"),
}


def from_old_keywords(
    old: dict[str, Any],
    clocks: Optional[ClockOptions],
    stragglers: Union[StragglerOptions, bool, None],
    profile: Optional[ProfileOptions],
) -> tuple[Optional[ClockOptions], Union[StragglerOptions, bool, None], Optional[ProfileOptions]]:
    """The option records the keywords of perseus 0.1 stand for (with one warning each)."""
    unknown = sorted(set(old) - set(_OLD_KEYWORDS))
    if unknown:
        raise TypeError(f"attach() got unexpected keyword argument(s) {', '.join(unknown)}")
    fields: dict[str, dict[str, Any]] = {"clocks": {}, "stragglers": {}, "profile": {}}
    for name, value in old.items():
        group, record, field = _OLD_KEYWORDS[name]
        warn_renamed(f"attach({name}=...)", f"attach({group}={record}({field}=...))", stacklevel=4)
        fields[group][field] = value
    given = {"clocks": clocks, "stragglers": stragglers, "profile": profile}
    for group, values in fields.items():
        if values and isinstance(given[group], (ClockOptions, StragglerOptions, ProfileOptions)):
            raise TypeError(
                f"attach() got both {group}= and its old keyword(s) {', '.join(sorted(values))}"
            )
    if fields["clocks"]:
        clocks = ClockOptions(**fields["clocks"])
    if fields["stragglers"]:
        enabled = True if stragglers is None else bool(stragglers)
        stragglers = StragglerOptions(enabled=enabled, **fields["stragglers"])
    if fields["profile"]:
        if "path" not in fields["profile"]:
            raise ValueError(
                "profile mode needs ProfileOptions(path=...): where the profile CSV goes"
            )
        profile = ProfileOptions(**fields["profile"])
    return clocks, stragglers, profile


def settings_of(
    frontier: FrontierArgument = None,
    *,
    mode: Optional[str] = None,
    plan: Optional[Plan] = None,
    clocks: Optional[ClockOptions] = None,
    stragglers: Union[StragglerOptions, bool, None] = None,
    metrics: Union[MetricsOptions, bool, None] = None,
    profile: Optional[ProfileOptions] = None,
    on_mismatch: str = "raise",
    record: bool = False,
    unknown_workload: str = "raise",
) -> Settings:
    """:func:`attach`'s arguments, checked (before anything is imported)."""
    if mode is None:
        mode = "profile" if profile is not None else "run"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if on_mismatch not in ("raise", "warn"):
        raise ValueError(f"on_mismatch must be 'raise' or 'warn', not {on_mismatch!r}")
    if unknown_workload not in UNKNOWN_WORKLOAD:
        raise ValueError(
            f"unknown_workload must be one of {UNKNOWN_WORKLOAD}, not {unknown_workload!r}"
        )
    for name, value, kind in (
        ("clocks", clocks, ClockOptions),
        ("profile", profile, ProfileOptions),
    ):
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"{name} must be a perseus.megatron.{kind.__name__}, not {value!r}")
    if isinstance(stragglers, bool):
        stragglers = StragglerOptions(enabled=stragglers)
    elif stragglers is None:
        stragglers = StragglerOptions()
    elif not isinstance(stragglers, StragglerOptions):
        raise TypeError(f"stragglers must be a StragglerOptions or a bool, not {stragglers!r}")
    if isinstance(metrics, bool):
        metrics = MetricsOptions(enabled=metrics)
    elif metrics is None:
        metrics = MetricsOptions()
    elif not isinstance(metrics, MetricsOptions):
        raise TypeError(f"metrics must be a MetricsOptions or a bool, not {metrics!r}")
    frontiers, by_length = normalize_frontiers(frontier)
    if mode == "profile":
        if profile is None:
            raise ValueError(
                "profile mode needs profile=perseus.megatron.ProfileOptions(path=...): where the "
                "profile CSV goes"
            )
        stragglers = StragglerOptions(enabled=False)
    else:
        if profile is not None:
            raise ValueError("profile options were given, but mode is 'run'")
        if not frontiers and plan is None:
            raise ValueError("run mode needs a frontier (perseus.optimize(...)) or a plan")
        if plan is not None and len(frontiers) > 1:
            raise ValueError(
                "plan= needs a single frontier; with frontiers keyed by workload each one's "
                "fastest plan is its base plan"
            )
        if stragglers.enabled and not frontiers:
            raise ValueError(
                "following stragglers needs the frontier, not only a plan (or pass stragglers=False)"
            )
    return Settings(
        mode=mode,
        frontiers=frontiers,
        by_length=by_length,
        plan=plan,
        clocks=clocks or ClockOptions(),
        stragglers=stragglers,
        metrics=metrics,
        profile=profile,
        on_mismatch=on_mismatch,
        record=bool(record),
        unknown_workload=unknown_workload,
    )

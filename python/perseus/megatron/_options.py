"""The option records of :func:`perseus.megatron.attach`, checked when made.

Each record groups the settings of one concern (clocks, stragglers, the live
energy metrics, profile mode); every field has its unit in its name and a
default that is safe for a production job. Records are frozen: an
attachment's settings cannot drift while it runs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Optional, Union

from .. import _core
from .._validate import is_integer, is_real

__all__ = ["ClockOptions", "MetricsOptions", "ProfileOptions", "StragglerOptions"]

_MAX_MHZ = _core.MAX_CLOCK_MHZ  # the switcher's own bound on a clock


def _is_int(value: object) -> bool:
    return is_integer(value)


def _check_mhz(name: str, value: Optional[int]) -> None:
    if value is None:
        return
    if not _is_int(value) or not 1 <= int(value) <= _MAX_MHZ:
        raise ValueError(
            f"{name} must be a clock in MHz (an integer from 1 to {_MAX_MHZ}) or None for the "
            f"driver's default clocks, not {value!r}"
        )


def _check_count(name: str, value: object, minimum: int) -> None:
    if not is_integer(value) or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, not {value!r}")


def _check_fraction(name: str, value: object, *, allow_zero: bool) -> None:
    ok = False
    if is_real(value):
        number = float(value)
        ok = math.isfinite(number) and (number >= 0 if allow_zero else number > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound} (a fraction), not {value!r}")


@dataclass(frozen=True)
class ClockOptions:
    """Which GPU perseus drives, and its clocks outside the plan.

    Attributes
    ----------
    device : int or None
        CUDA device index of this rank's GPU. ``None`` (default): resolved at
        the first iteration, from ``torch.cuda.current_device()`` when CUDA is
        initialised, else from ``LOCAL_RANK``; the two must agree.
    switcher : FrequencySwitcher or None
        Use this switcher (reset, not closed, on detach) instead of making one.
    idle_mhz : int or None
        The SM clock between iterations, from the end of an iteration's last
        computation to the next iteration's first (optimizer step,
        checkpointing, data loading). ``None`` (default): the driver's
        default clocks (unlocked).
    evaluation_mhz : int or None
        The SM clock of forward-only (evaluation) calls; ``None`` (default):
        unlocked.
    """

    device: Optional[int] = None
    switcher: Any = None
    idle_mhz: Optional[int] = None
    evaluation_mhz: Optional[int] = None

    def __post_init__(self) -> None:
        if self.device is not None and (not _is_int(self.device) or int(self.device) < 0):
            raise ValueError(
                f"ClockOptions.device must be a CUDA device index >= 0 or None, not {self.device!r}"
            )
        _check_mhz("ClockOptions.idle_mhz", self.idle_mhz)
        _check_mhz("ClockOptions.evaluation_mhz", self.evaluation_mhz)


@dataclass(frozen=True)
class StragglerOptions:
    """Following data-parallel stragglers (see :class:`perseus.megatron.StragglerPolicy`).

    Attributes
    ----------
    enabled : bool
        Follow stragglers (costs one small CPU all-gather per iteration on
        the data-parallel group; nothing with one replica).
    tolerance : float
        A replica is the straggler when its median iteration time over
        `window` iterations is slower than the other replicas' (the other
        one, or their median with 3 or more replicas) by more than this
        fraction (0.10: 10 %).
    recovery : float or None
        Followers go back to the base plan once the straggler is within this
        fraction of the reference; default `tolerance` (the straggler is
        followed while it is one). A smaller value adds a band in which a
        mild straggler is still followed; either way the hysteresis of
        `window` medians and `min_samples` after each switch applies.
    window : int
        Iterations whose median decides.
    min_samples : int or None
        Iterations measured before the first decision, and after every
        switch; default `window`.
    min_duration : int
        Iterations, of the last ``min_duration + 3``, in which a straggler
        must be beyond the threshold before it is followed, and back within
        `recovery` before following ends (hysteresis against noise and
        periodic hiccups; 7 follows a lasting 1.2x straggler within about
        10 iterations).
    min_gain : float
        Following must save at least this fraction (0.01: 1 %) of the
        followers' predicted energy at the straggler's pace; else they keep
        the base plan.
    warmup_iterations : int
        First iterations never measured (compilation, allocator warm-up).
    tailored_plans : bool
        Followers run the plan solved for the straggler's deadline itself
        (``Frontier.plan_for(deadline, tailored=True)``) rather than the
        frontier plans nearest it fitted to it (``plan_for``'s default: 11
        CPU ms at 4,096 computations, 0.11 s at 32,768): never more energy,
        0.07-0.3 CPU s per switch up to 4,096 computations (0.4-0.5 s at
        16,384-32,768), the same plan on every rank. Needs the frontier's
        profile (a frontier file carries it).
    data_parallel_group, model_parallel_group
        Process groups whose members define a replica and its pipeline;
        default megatron's ``parallel_state`` ones.
    """

    enabled: bool = True
    tolerance: float = 0.10
    recovery: Optional[float] = None
    window: int = 5
    min_samples: Optional[int] = None
    min_duration: int = 7
    min_gain: float = 0.01
    warmup_iterations: int = 2
    tailored_plans: bool = False
    data_parallel_group: Any = None
    model_parallel_group: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(
                f"StragglerOptions.enabled must be True or False, not {self.enabled!r}"
            )
        if not isinstance(self.tailored_plans, bool):
            raise ValueError(
                "StragglerOptions.tailored_plans must be True or False, "
                f"not {self.tailored_plans!r}"
            )
        _check_fraction("StragglerOptions.tolerance", self.tolerance, allow_zero=False)
        if self.recovery is not None:
            _check_fraction("StragglerOptions.recovery", self.recovery, allow_zero=True)
            if float(self.recovery) > float(self.tolerance):
                raise ValueError(
                    f"StragglerOptions.recovery ({self.recovery}) must not exceed tolerance "
                    f"({self.tolerance}): followers would return before the straggler is gone"
                )
        _check_count("StragglerOptions.window", self.window, 1)
        if self.min_samples is not None:
            _check_count("StragglerOptions.min_samples", self.min_samples, 1)
            if int(self.min_samples) > int(self.window):
                raise ValueError(
                    f"StragglerOptions.min_samples ({self.min_samples}) cannot exceed window "
                    f"({self.window})"
                )
        _check_count("StragglerOptions.min_duration", self.min_duration, 1)
        _check_fraction("StragglerOptions.min_gain", self.min_gain, allow_zero=True)
        if float(self.min_gain) >= 1:
            raise ValueError(
                f"StragglerOptions.min_gain must be below 1 (a fraction of energy), not "
                f"{self.min_gain!r}"
            )
        _check_count("StragglerOptions.warmup_iterations", self.warmup_iterations, 0)

    @property
    def recovery_fraction(self) -> float:
        return float(self.tolerance) if self.recovery is None else float(self.recovery)

    @property
    def samples(self) -> int:
        return int(self.window if self.min_samples is None else self.min_samples)


@dataclass(frozen=True)
class MetricsOptions:
    """The energy perseus measures in run mode.

    Attributes
    ----------
    enabled : bool
        Read NVML's total-energy counter of this rank's GPU at every
        iteration boundary (a CPU call; nothing waits for the GPU).
    report_every : int
        Iterations per report: every `report_every` iterations one CPU
        all-gather over all ranks sums the energy of every GPU of every
        pipeline, logs one line on rank 0 and hands the numbers to the
        writers. Nothing is exchanged in between.
    calibrate : int
        A/B calibration: after `warmup_iterations`, this many iterations at
        the all-fastest plan, then as many at the plan; the measured saving
        is reported with its spread. 0 (default): no calibration.
    warmup_iterations : int
        First iterations left out of the calibration.
    writers : sequence
        Extra writers: objects with ``add_scalar(tag, value, step)``
        (TensorBoard's ``SummaryWriter``) or ``log(dict, step=...)`` (W&B).
    megatron_writers : bool
        Also write to Megatron-LM's TensorBoard and W&B writers when it has
        made them (``megatron.training.get_tensorboard_writer()``).
    keep_iterations : int
        Per-iteration records kept in ``Attachment.metrics.iterations``.
    stale_plan_tolerance : float or None
        Noticing a stale plan: each computation perseus hands a clock is
        timed (CUDA events read late; nothing waits for the GPU) and, per
        stage and instruction, compared with what the plan's profile
        predicts at that clock. When three quarters of the last
        `stale_plan_window` iterations are off by more than this fraction
        (0.10: 10 %) on the same side, perseus says so once per cause, with
        the numbers (a :class:`StalePlanWarning`, in
        ``Attachment.stale_plans`` and in the energy report). ``None``: off.
    stale_plan_window : int
        Iterations per stale-plan decision (after `warmup_iterations`).
    """

    enabled: bool = True
    report_every: int = 10
    calibrate: int = 0
    warmup_iterations: int = 2
    writers: Sequence[Any] = ()
    megatron_writers: bool = True
    keep_iterations: int = 10_000
    stale_plan_tolerance: Optional[float] = 0.10
    stale_plan_window: int = 20

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"MetricsOptions.enabled must be True or False, not {self.enabled!r}")
        _check_count("MetricsOptions.report_every", self.report_every, 1)
        _check_count("MetricsOptions.calibrate", self.calibrate, 0)
        if int(self.calibrate) == 1:
            raise ValueError(
                "MetricsOptions.calibrate must be 0 (off) or at least 2 iterations per side, "
                "so that the saving has a spread"
            )
        _check_count("MetricsOptions.warmup_iterations", self.warmup_iterations, 0)
        _check_count("MetricsOptions.keep_iterations", self.keep_iterations, 1)
        if self.stale_plan_tolerance is not None:
            _check_fraction(
                "MetricsOptions.stale_plan_tolerance", self.stale_plan_tolerance, allow_zero=False
            )
            if float(self.stale_plan_tolerance) >= 1:
                raise ValueError(
                    "MetricsOptions.stale_plan_tolerance must be below 1 (a fraction), not "
                    f"{self.stale_plan_tolerance!r}"
                )
        _check_count("MetricsOptions.stale_plan_window", self.stale_plan_window, 4)
        writers = tuple(self.writers)
        for writer in writers:
            if not (hasattr(writer, "add_scalar") or hasattr(writer, "log")):
                raise ValueError(
                    f"MetricsOptions.writers: {writer!r} has neither add_scalar(tag, value, step) "
                    "nor log(dict, step=...)"
                )
        object.__setattr__(self, "writers", writers)


_RESERVED_PROFILER_OPTIONS = ("computations", "output", "mode", "device")


@dataclass(frozen=True)
class ProfileOptions:
    """Profile mode: where the profile goes and how it is measured.

    Attributes
    ----------
    path : str or Path
        The merged profile's CSV (Zeus's ``stage,instruction,frequency,time,energy``),
        with a ``.json`` sidecar beside it; each pipeline rank keeps its own
        resumable sweep as ``<name>.pp<rank>.csv`` (+ ``.json``).
    iteration : int
        The training iteration whose microbatch 0 is captured and replayed
        (default 1: after one warm-up iteration).
    after : str
        ``"stop"``: end training once the profile is written
        (:class:`ProfilingFinished`, which the ``with`` block swallows);
        ``"continue"``: keep training, unchanged.
    profiler_mode : str
        ``"gpu"`` or ``"cpu"`` (wall-clock timing against a fake NVML, for
        tests).
    profiler_options : mapping
        More keyword arguments for :func:`perseus.profile_stages`
        (``frequencies_mhz``, ``window_s``, ``blocking_power_w``, ...).
    timeout_s : float
        How long ranks wait for each other's sweeps, seconds.
    """

    path: Union[str, Path]  # kept as a Path
    iteration: int = 1
    after: str = "stop"
    profiler_mode: str = "gpu"
    profiler_options: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 24 * 3600.0

    def __post_init__(self) -> None:
        if self.path is None or str(self.path) == "":
            raise ValueError("ProfileOptions.path is needed: where the profile CSV goes")
        path = Path(self.path)
        if path.suffix == ".json":
            raise ValueError(
                f"ProfileOptions.path {path} would collide with its .json sidecar; name it .csv"
            )
        object.__setattr__(self, "path", path)
        _check_count("ProfileOptions.iteration", self.iteration, 0)
        if self.after not in ("stop", "continue"):
            raise ValueError(
                f"ProfileOptions.after must be 'stop' or 'continue', not {self.after!r}"
            )
        if self.profiler_mode not in ("gpu", "cpu"):
            raise ValueError(
                f"ProfileOptions.profiler_mode must be 'gpu' or 'cpu', not {self.profiler_mode!r}"
            )
        options = dict(self.profiler_options or {})
        for reserved in _RESERVED_PROFILER_OPTIONS:
            if reserved in options:
                raise ValueError(
                    f"ProfileOptions.profiler_options cannot set {reserved!r}; perseus.megatron "
                    "sets it"
                )
        object.__setattr__(self, "profiler_options", MappingProxyType(options))
        timeout = self.timeout_s
        if not (
            isinstance(timeout, numbers.Real)
            and not isinstance(timeout, bool)
            and math.isfinite(float(timeout))
            and float(timeout) > 0
        ):
            raise ValueError(f"ProfileOptions.timeout_s must be > 0 seconds, not {timeout!r}")

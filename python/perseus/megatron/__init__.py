"""perseus inside Megatron-LM: profile, run planned frequencies, follow stragglers.

:func:`attach` wraps megatron-core's pipeline schedules (no pipelining, 1F1B,
interleaved 1F1B) for the duration of a ``with`` block, without forking
Megatron::

    import perseus, perseus.megatron
    from perseus.megatron import ProfileOptions, MetricsOptions

    # profile each stage (model chunk) across SM clocks, then stop training
    with perseus.megatron.attach(profile=ProfileOptions(path="prof/gpt.csv")):
        train()

    # run every forward and backward at its planned clock, following stragglers,
    # measuring the energy of every GPU
    frontier = perseus.optimize(profile, microbatches=M, schedule="1f1b")
    with perseus.megatron.attach(frontier, metrics=MetricsOptions(calibrate=20)) as attached:
        train()   # get_forward_backward_func() inside the block
    attached.metrics.reports, attached.metrics.calibration, attached.switches

In Megatron-LM's ``pretrain_gpt.py``: :func:`add_arguments` for
``extra_args_provider`` and ``attach_from_args().attach()`` before
``pretrain(...)`` (see the README).

Supported: megatron-core >=0.16.0,<0.20 (tested with 0.16.0 and 0.19.2).
torch and megatron-core are imported when an attachment is entered, not when
this module is; CUDA and torch.distributed are first used at the first
iteration.
"""

from __future__ import annotations

from ._attach import Attachment, Computation, attach
from ._cli import add_arguments, attach_from_args
from ._compat import SUPPORTED_VERSIONS, check_megatron
from ._drift import StalePlan, StalePlanWarning
from ._errors import (
    MegatronIntegrationError,
    MegatronVersionError,
    ProfilingFinished,
    ScheduleMismatchError,
    UnsupportedScheduleError,
)
from ._following import PlanWarning
from ._metrics import (
    CalibrationResult,
    EnergyReport,
    IterationMetrics,
    JobIteration,
    Metrics,
    format_energy_table,
)
from ._options import ClockOptions, MetricsOptions, ProfileOptions, StragglerOptions
from ._stragglers import PlanSwitch, StragglerDecision, StragglerPolicy

__all__ = [
    "SUPPORTED_VERSIONS",
    "Attachment",
    "CalibrationResult",
    "ClockOptions",
    "Computation",
    "EnergyReport",
    "IterationMetrics",
    "JobIteration",
    "MegatronIntegrationError",
    "MegatronVersionError",
    "Metrics",
    "MetricsOptions",
    "PlanSwitch",
    "PlanWarning",
    "ProfileOptions",
    "ProfilingFinished",
    "ScheduleMismatchError",
    "StalePlan",
    "StalePlanWarning",
    "StragglerDecision",
    "StragglerOptions",
    "StragglerPolicy",
    "UnsupportedScheduleError",
    "add_arguments",
    "attach",
    "attach_from_args",
    "check_megatron",
    "format_energy_table",
]

"""perseus inside Megatron-LM: profile, run planned frequencies, follow stragglers.

:func:`attach` wraps megatron-core's pipeline schedules (no pipelining, 1F1B,
interleaved 1F1B) for the duration of a ``with`` block, without forking
Megatron::

    import perseus, perseus.megatron

    # profile each stage (model chunk) across SM clocks, then stop training
    with perseus.megatron.attach(mode="profile", profile_path="prof/gpt.csv"):
        train()

    # run every forward and backward at its planned clock, following stragglers
    frontier = perseus.optimize(profile, microbatches=M, schedule="1f1b")
    with perseus.megatron.attach(frontier) as attached:
        train()   # get_forward_backward_func() inside the block

Supported: megatron-core >=0.16.0,<0.20 (tested with 0.16.0 and 0.19.2).
torch and megatron-core are imported when an attachment is entered, not when
this module is.
"""

from __future__ import annotations

from ._attach import Attachment, Computation, attach
from ._compat import SUPPORTED_VERSIONS, check_megatron
from ._errors import (
    MegatronIntegrationError,
    MegatronVersionError,
    ProfilingFinished,
    ScheduleMismatchError,
    UnsupportedScheduleError,
)
from ._stragglers import PlanSwitch, StragglerPolicy

__all__ = [
    "SUPPORTED_VERSIONS",
    "Attachment",
    "Computation",
    "MegatronIntegrationError",
    "MegatronVersionError",
    "PlanSwitch",
    "ProfilingFinished",
    "ScheduleMismatchError",
    "StragglerPolicy",
    "UnsupportedScheduleError",
    "attach",
    "check_megatron",
]

"""Exceptions of the Megatron-LM integration."""

from __future__ import annotations

from typing import Any

__all__ = [
    "MegatronIntegrationError",
    "MegatronVersionError",
    "ProfilingFinished",
    "ScheduleMismatchError",
    "UnsupportedScheduleError",
]


class MegatronIntegrationError(RuntimeError):
    """Base class of the errors raised by :mod:`perseus.megatron`."""


class MegatronVersionError(MegatronIntegrationError):
    """megatron-core's version, or its schedule functions, are not ones perseus knows."""


class ScheduleMismatchError(MegatronIntegrationError):
    """What Megatron executes differs from what the plan was made for.

    Raised before the frequency of the mismatched computation is applied:
    a different schedule, pipeline size, virtual-stage count or number of
    microbatches, or a computation out of the plan's order.
    """


class UnsupportedScheduleError(MegatronIntegrationError):
    """Megatron runs a code path that bypasses the functions perseus wraps.

    The fused MoE 1F1B overlap (``overlap_moe_expert_parallel_comm``) and
    hybrid context parallelism run computations perseus cannot see one by
    one, so it refuses rather than apply a plan to the wrong work.
    """


class ProfilingFinished(Exception):
    """Profile mode measured everything and ``after="stop"`` asked training to stop.

    Raised out of the forward-backward call that finished the sweep; the
    ``with perseus.megatron.attach(...)`` block swallows it, so the code
    after the block runs. ``result`` is the merged :class:`perseus.Profile`
    (on the rank that wrote it; ``None`` elsewhere) and ``path`` the CSV.
    """

    def __init__(self, path: str, result: Any = None) -> None:
        super().__init__(f"perseus profile written to {path}; training stopped (after='stop')")
        self.path = path
        self.result = result

"""What an attachment shows its user: the computations, iterations, plan switches and measurements it saw.

The run loop, what runs between iterations and a resume write an
:class:`Observed`; the :class:`~perseus.megatron.Attachment` shows each of
its fields as a typed, read-only attribute (:class:`Shown`). They outlive a
detach (a job reads them after its ``with`` block).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, Optional, Protocol, TypeVar, overload

from ..frontier import Frontier
from ..profile import Profile
from . import _metrics
from ._following import WorkloadKey
from ._stragglers import PlanSwitch, StragglerDecision

__all__ = ["Computation", "Observed", "Shown"]

T = TypeVar("T")


@dataclass(frozen=True)
class Computation:
    """One forward or backward perseus saw, in the order this rank ran it."""

    iteration: int  #: training iteration (0-based; forward-only calls are not counted)
    instruction: str  #: "forward" or "backward"
    chunk: int  #: virtual chunk on this GPU (0 without interleaving)
    microbatch: int
    frequency_mhz: Optional[
        int
    ]  #: planned SM clock requested for it; None: unlocked or profile mode


class Observed:
    """One attachment's user-visible record (see :class:`~perseus.megatron.Attachment`)."""

    def __init__(self) -> None:
        self.mode = "run"
        self.frontiers: dict[WorkloadKey, Frontier] = {}
        self.iterations = 0
        self.switches: list[PlanSwitch] = []
        self.decisions: deque[StragglerDecision] = deque(maxlen=10_000)
        self.trace: list[Computation] = []
        self.iteration_times_s: deque[float] = deque(maxlen=1000)
        self.metrics = _metrics.Metrics()
        self.megatron_version = ""
        self.profile: Optional[Profile] = None
        self.device: Optional[int] = None
        self.final_report: Optional[_metrics.FinalReport] = None


class _Showing(Protocol):
    _observed: Observed


class Shown(Generic[T]):
    """A field of the holder's :class:`Observed`, as a typed read-only attribute."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, holder: None, owner: type) -> Shown[T]: ...

    @overload
    def __get__(self, holder: _Showing, owner: type) -> T: ...

    def __get__(self, holder: Optional[_Showing], owner: type) -> Any:
        if holder is None:
            return self
        return getattr(holder._observed, self._name)

    def __set__(self, holder: _Showing, value: NoReturn) -> None:  # type checkers refuse it too
        raise AttributeError(f"{self._name} is read-only: perseus sets it as the job runs")

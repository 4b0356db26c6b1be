"""Progress of a long solve: one reporter for the terminal bar, log lines and callbacks.

The core reports ``(phase, done, total, fraction)`` at most once per period
(the period measured from the end of the previous report, so a slow consumer
is never called back to back): how far the current job of a phase is, and
its estimate of how far the whole solve is, from the parts the solve runs
in and the share of the time each takes (``cpp/solve_parts.hpp``).
:class:`ProgressReporter` turns that into a :class:`SolveProgress` with the
phase's name, the share of the whole solve and an ETA, and hands it to a
user callback, to :class:`ProgressBar`, or to both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, TextIO

__all__ = ["ProgressBar", "ProgressReporter", "SolveProgress"]

# No ETA before this share of the solve and this many seconds: the first
# reports say little about the rate.
_ETA_AFTER_FRACTION = 0.02
_ETA_AFTER_S = 0.2


@dataclass(frozen=True)
class SolveProgress:
    """Where a solve stands.

    Attributes
    ----------
    phase : str
        ``"min cut"``, ``"candidates"``, ``"reclamation"`` or ``"local search"``.
    done, total : int
        Work items of the phase's current job done so far, and in all: units
        of iteration time for the walks (min cut), the candidate chains and
        the plain plans; deadlines for the fast end; plans for the selection
        and for a tiny pipeline's every plan; work units of the whole
        search's budget for the local search (the selections between its
        rounds report their plans). A phase may run several jobs one after
        another (with ``threads=1``, both candidate chains in the
        reclamation), each counting from 0.
    fraction : float
        Estimated share of the whole solve's wall time done, 0..1; it never
        falls. Estimated from the parts the solve runs in and the share each
        took on the benchmark's user-scale cases (``cpp/solve_parts.hpp``).
    elapsed_s : float
        Seconds since the solve started.
    eta_s : float or None
        Estimated seconds left, once there is enough to go on.
    """

    phase: str
    done: int
    total: int
    fraction: float
    elapsed_s: float
    eta_s: Optional[float]

    def describe(self) -> str:
        """One line for people: phase, counts, share, elapsed time and ETA."""
        eta = f", about {_duration(self.eta_s)} left" if self.eta_s is not None else ""
        return (
            f"{self.phase}: {self.done}/{self.total} ({100 * self.fraction:3.0f}% of the solve), "
            f"{_duration(self.elapsed_s)} elapsed{eta}"
        )


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


class ProgressReporter:
    """Receives the core's reports and forwards them as `SolveProgress`.

    Parameters
    ----------
    sinks : callables taking a `SolveProgress`
        Where reports go; a sink returning ``False`` (or another false value but
        None) cancels the solve.
    """

    def __init__(self, *, sinks: list[Callable[[SolveProgress], object]]) -> None:
        self._sinks = sinks
        self._started = time.monotonic()
        # What a sink raised, so the caller tells it from the core's own errors
        # and lets it through unchanged (a callback's ValueError is its own).
        self.raised: Optional[BaseException] = None

    def __call__(self, phase: object, done: int, total: int, fraction: float) -> bool:
        name = _phase_name(phase)
        fraction = min(1.0, max(0.0, float(fraction)))  # the core's never falls
        elapsed = time.monotonic() - self._started
        eta = (
            elapsed * (1 - fraction) / fraction
            if fraction > _ETA_AFTER_FRACTION and elapsed > _ETA_AFTER_S
            else None
        )
        report = SolveProgress(name, int(done), int(total), fraction, elapsed, eta)
        keep_going = True
        for sink in self._sinks:
            try:
                answer = sink(report)
            except BaseException as error:
                self.raised = error
                raise
            if _cancels(answer):
                keep_going = False
        return keep_going


def _cancels(answer: object) -> bool:
    """Whether a sink's answer asks to stop: False, or any other false value but None
    (numpy's ``False_``, from ``return np.all(...)``, counts; returning nothing does not)."""
    if answer is None:
        return False
    try:
        return not bool(answer)
    except (ValueError, TypeError):  # an answer with no truth value (an array) asks nothing
        return False


def _phase_name(phase: object) -> str:
    from . import _core

    return phase if isinstance(phase, str) else _core.phase_name(phase)  # type: ignore[arg-type]


class ProgressBar:
    """A `SolveProgress` sink that shows a solve's progress on a stream.

    On a terminal it redraws one line in place, with a bar; otherwise (a log
    file, a CI job) it writes a full line every `log_period_s` seconds, so a
    log shows the phase and the ETA moving instead of one line that looks
    like a hang, and :meth:`close` ends it with the total time. Solves
    shorter than half a second stay quiet.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        label: str = "solving frontier",
        log_period_s: float = 5.0,
        tty: Optional[bool] = None,
    ) -> None:
        self._stream = stream
        self._label = label
        self._tty = _isatty(stream) if tty is None else tty
        self._log_period_s = log_period_s
        self._last = -float("inf")
        self._drawn = False
        self._latest: Optional[SolveProgress] = None

    def __call__(self, report: SolveProgress) -> None:
        self._latest = report
        if report.elapsed_s < 0.5:
            return
        if not self._tty and report.elapsed_s - self._last < self._log_period_s:
            return
        self._last = report.elapsed_s
        if self._tty:
            filled = round(20 * report.fraction)
            bar = "#" * filled + "." * (20 - filled)
            self._stream.write(f"\r{self._label} [{bar}] {report.describe()}\x1b[K")
        else:
            self._stream.write(f"{self._label}: {report.describe()}\n")
        self._stream.flush()
        self._drawn = True

    def close(self, *, completed: bool = True) -> None:
        """End the display: the line on a terminal, a closing line in a log."""
        if not self._drawn:
            return
        if self._tty:
            self._stream.write("\n")
        elif completed and self._latest is not None:
            self._stream.write(
                f"{self._label}: done, {_duration(self._latest.elapsed_s)} elapsed\n"
            )
        self._stream.flush()
        self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False

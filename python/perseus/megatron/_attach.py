"""Attach perseus to megatron-core's schedules: :func:`attach` and its :class:`Attachment`.

:class:`Attachment` is a facade over modules named for what they do:
:mod:`._runtime` (what an attachment holds, through :mod:`._lifecycle`'s
transitions), :mod:`._run_loop` (the wrapped calls, one iteration at a time),
:mod:`._conformance` (Megatron's computations against the plan),
:mod:`._run_parts` (run mode's machinery) and :mod:`._observed` (what a user
reads); ARCHITECTURE.md maps the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Optional, Union

from ..frontier import Frontier
from ..plan import Plan
from ..profile import Profile
from . import _metrics
from ._arguments import FrontierArgument, Settings, from_old_keywords, settings_of
from ._drift import StalePlan
from ._errors import ProfilingFinished
from ._following import WorkloadKey
from ._observed import Computation, Shown
from ._options import ClockOptions, MetricsOptions, ProfileOptions, StragglerOptions
from ._run_loop import RunLoop
from ._runtime import Runtime
from ._stragglers import PlanSwitch, StragglerDecision

__all__ = ["Attachment", "Computation", "attach"]


class Attachment:
    """perseus attached to megatron-core's schedules; made by :func:`attach`.

    Attributes
    ----------
    mode : str
        ``"run"`` or ``"profile"``.
    frontier : Frontier or None
        The frontier, when one was given (``frontiers`` holds them all).
    frontiers : dict
        Frontiers by workload key (microbatches, or (microbatches, seq_length)).
    iterations : int
        Training iterations (forward-backward calls, forward-only excluded) seen.
    switches : list of PlanSwitch
        Every change of this replica's plan made to follow a straggler.
    decisions : list of StragglerDecision
        Every straggler decision, with its numbers (the most recent 10000).
    metrics : Metrics
        Run mode: energy and time measured per iteration, reports, calibration.
    trace : list of Computation
        With ``record=True``: every computation seen, in order.
    iteration_times_s : collections.deque
        This rank's recent iteration times: entering the schedule to its last
        backward (seconds, last 1000).
    device : int or None
        This rank's CUDA device, once resolved (at the first iteration).
    megatron_version : str
    profile : Profile or None
        Profile mode: the merged profile, once measured.
    final_report : FinalReport or None
        Run mode: what ran on this rank, made at detach.
    """

    def __init__(
        self,
        settings: Optional[Settings],
        *,
        allow_untested_version: bool = False,
        configure: Optional[Callable[[Any], Optional[Settings]]] = None,
        exit_when_profiled: bool = False,
    ) -> None:
        self._runtime = Runtime(
            settings,
            allow_untested_version=allow_untested_version,
            configure=configure,
            exit_when_profiled=exit_when_profiled,
        )
        self._observed = self._runtime.seen  # one record for the attachment's life
        self._loop = RunLoop(self._runtime)

    # What it saw (see _observed).
    mode: Shown[str] = Shown()
    frontiers: Shown[dict[WorkloadKey, Frontier]] = Shown()
    iterations: Shown[int] = Shown()
    switches: Shown[list[PlanSwitch]] = Shown()
    decisions: Shown[deque[StragglerDecision]] = Shown()
    metrics: Shown[_metrics.Metrics] = Shown()
    trace: Shown[list[Computation]] = Shown()
    iteration_times_s: Shown[deque[float]] = Shown()
    device: Shown[Optional[int]] = Shown()
    megatron_version: Shown[str] = Shown()
    profile: Shown[Optional[Profile]] = Shown()
    final_report: Shown[Optional[_metrics.FinalReport]] = Shown()

    @property
    def stale_plans(self) -> list[StalePlan]:
        """This rank's stale-plan findings (see ``MetricsOptions.stale_plan_tolerance``)."""
        return list(self.metrics.stale_plans)

    @property
    def frontier(self) -> Optional[Frontier]:
        frontiers = self.frontiers
        return next(iter(frontiers.values())) if len(frontiers) == 1 else None

    @property
    def base_plan(self) -> Optional[Plan]:
        """The plan run while no replica straggles (for the workload of the last iteration)."""
        book = self._runtime.book
        return book.last_base_plan() if book is not None else None

    @property
    def plan(self) -> Optional[Plan]:
        """The plan of the last iteration (the base plan, or one following a straggler)."""
        last = self._runtime.last_plan
        return last if last is not None else self.base_plan

    # -- attaching (see _runtime) -----------------------------------------------------------

    def __enter__(self) -> Attachment:
        self.attach()
        self._runtime.inside_with = True
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self._runtime.inside_with = False
        finished = exc_type is not None and issubclass(exc_type, ProfilingFinished)
        try:
            self.detach()
        except Exception:
            if exc_type is None or finished:
                raise
            # The switcher's error is on stderr already; keep the original one.
        return finished

    def attach(self) -> None:
        """Wrap the schedule functions (``with attach(...)`` calls this).

        Touches neither CUDA nor torch.distributed: those are read at the
        first forward-backward call. Detached at interpreter exit at the latest.
        """
        self._runtime.attach(self._loop, self)

    def detach(self) -> None:
        """Restore megatron's functions and give back the clocks perseus set. Idempotent."""
        self._runtime.detach()

    # -- state across a resume (see _resume) ------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Run mode's state, as plain JSON data, for :meth:`load_state_dict` in a resumed run.

        perseus saves it by itself beside Megatron-LM's checkpoints (see
        :mod:`perseus.megatron._resume`); this is for training loops of
        their own: save it with the checkpoint, per rank.
        """
        return self._runtime.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from :meth:`state_dict` of a run that stopped (applied at the first iteration).

        Raises
        ------
        ValueError
            Not a run-mode state of this perseus version.
        MegatronIntegrationError
            The attachment has run already.
        """
        self._runtime.load_state_dict(state)


def attach(
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
    allow_untested_version: bool = False,
    unknown_workload: str = "raise",
    **old_keywords: Any,
) -> Attachment:
    """Attach perseus to megatron-core's pipeline schedules.

    Use it as a context manager around the training loop (or around
    Megatron-LM's ``pretrain(...)``: nothing is read before the first
    iteration), and get the forward-backward function inside it::

        with perseus.megatron.attach(frontier):
            for _ in range(iterations):
                forward_backward = get_forward_backward_func()
                forward_backward(forward_step_func=..., ...)
                optimizer.step()

    perseus wraps ``forward_step``, ``backward_step`` and the three
    forward-backward functions of ``megatron.core.pipeline_parallel.schedules``
    (no pipelining, 1F1B, interleaved 1F1B) and restores them on exit.

    Parameters
    ----------
    frontier
        From :func:`perseus.optimize`, for this pipeline (schedule, pipeline
        size, virtual stages and microbatches as Megatron runs them); or
        frontiers keyed by microbatch count (``{4: f4, 8: f8}``, a batch-size
        ramp-up), or by ``(microbatches, seq_length)`` to opt in to variable
        sequence lengths. An iteration whose workload has no frontier raises
        :class:`ScheduleMismatchError` (see `unknown_workload`). Needed in
        run mode.
    mode
        ``"run"`` (default without `profile`): before each computation,
        request its planned SM clock (stream-ordered on a GPU).
        ``"profile"`` (default with `profile`): measure every stage's
        forward and backward across clocks, see :class:`ProfileOptions`.
    plan
        Run mode: the plan run while nobody straggles; default
        ``frontier.fastest`` (the all-fastest time at the least energy).
    clocks
        :class:`ClockOptions`: the device (default: resolved at the first
        iteration), a switcher, the idle clock between iterations and the
        evaluation clock (both default unlocked).
    stragglers
        :class:`StragglerOptions` (or ``False`` to turn following off).
    metrics
        :class:`MetricsOptions`: energy measured live, reports every N
        iterations, A/B calibration (or ``False``).
    profile
        :class:`ProfileOptions`: profile mode's output path and sweep.
    on_mismatch
        ``"raise"`` (default): :class:`ScheduleMismatchError` when what Megatron
        runs differs from the plan (checked before each iteration and at every
        computation, before its clock is requested), and
        :class:`UnsupportedScheduleError` for code paths perseus cannot follow.
        ``"warn"``: warn once, give the clocks back and keep training.
    record
        Keep every computation seen in ``Attachment.trace``.
    allow_untested_version
        Try a megatron-core outside the supported range (with a warning);
        its schedule functions' signatures are still checked.
    unknown_workload
        ``"raise"`` (default): an iteration whose microbatch count (or
        length) has no frontier stops the job, and when Megatron-LM's
        arguments are parsed at ``attach`` every count they imply (a
        ``--rampup-batch-size`` ramp-up's too) is checked there.
        ``"unlocked"``: such iterations run with clocks unlocked (one
        :class:`PlanWarning` per workload) and the next known one resumes.
    **old_keywords
        perseus 0.1's keywords (``device``, ``switcher``, ``tolerance``,
        ``recovery``, ``warmup_iterations``, ``data_parallel_group``,
        ``model_parallel_group``, ``profile_path``, ``profile_iteration``,
        ``after``, ``profiler_mode``, ``profiler_options``,
        ``profile_timeout_s``) still work, with a DeprecationWarning each.

    Returns
    -------
    Attachment

    Raises
    ------
    ValueError, TypeError
        Bad arguments, before anything is imported.
    MegatronVersionError
        On entering: megatron-core's version or schedule functions are not
        ones perseus knows (supported: megatron-core >=0.16.0,<0.20).
    ImportError
        torch or megatron-core is not installed.
    """
    if old_keywords:
        clocks, stragglers, profile = from_old_keywords(old_keywords, clocks, stragglers, profile)
    settings = settings_of(
        frontier,
        mode=mode,
        plan=plan,
        clocks=clocks,
        stragglers=stragglers,
        metrics=metrics,
        profile=profile,
        on_mismatch=on_mismatch,
        record=record,
        unknown_workload=unknown_workload,
    )
    return Attachment(settings, allow_untested_version=allow_untested_version)

"""Attach perseus to megatron-core's schedules: :func:`attach` and its :class:`Attachment`.

The :class:`Attachment` is the hub the wrapped schedule functions call: it
starts everything at the first forward-backward call (nothing that needs
CUDA or torch.distributed happens when attaching, so ``attach`` may wrap
Megatron-LM's ``pretrain(...)``), opens and closes each iteration, and
hands each computation its clock. Each part lives in a module of its own:
the wrapping in :mod:`._patching`, the plan an iteration runs in
:mod:`._following`, clock requests in :mod:`._clocks`, what runs between
iterations (times, stragglers, energy reports) in :mod:`._between` with
:mod:`._timing`, :mod:`._stragglers` and :mod:`._metrics`, the arguments
in :mod:`._arguments`, and profile mode in :mod:`._profile_mode` and
:mod:`._replay`; the attachment's states and transitions are in
:mod:`._lifecycle`.
"""

from __future__ import annotations

import atexit
import logging
import math
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

from .._optional import optional_module
from ..frontier import Frontier
from ..plan import Plan
from ..profile import Profile
from ..switcher import FrequencySwitcher
from . import _metrics, _resume
from ._arguments import FrontierArgument, Settings, from_old_keywords, settings_of
from ._between import Between, calibration_phase
from ._clocks import ClockDriver
from ._compat import (
    FULL_GRAPH_MESSAGE,
    check_megatron,
    full_iteration_graphs,
    unsupported_schedule,
)
from ._device import resolve_device
from ._drift import DriftWatch, StalePlan
from ._errors import (
    MegatronIntegrationError,
    ProfilingFinished,
    ScheduleMismatchError,
    UnsupportedScheduleError,
)
from ._fingerprint import differences, fingerprint_of, gpu_model
from ._following import PLAN_SCHEDULE, Iteration, PlanBook, PlanWarning, WorkloadKey
from ._lifecycle import Lifecycle
from ._once import warn_for_job
from ._options import ClockOptions, MetricsOptions, ProfileOptions, StragglerOptions
from ._patching import SchedulePatch
from ._preflight import check_frontiers, fingerprint_reaction, run_mode_parallelism_problem
from ._profile_mode import Layout, ProfileSession, unsupported_for_profiling
from ._stragglers import PlanSwitch, StragglerDecision
from ._timing import CpuGroups, Stopwatch

__all__ = ["Attachment", "Computation", "attach"]

logger = logging.getLogger("perseus.megatron")


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


def _megatron_lm_args() -> Any:
    """Megatron-LM's parsed arguments if it has parsed them already (never imports it)."""
    import sys

    module = sys.modules.get("megatron.training.global_vars")
    args = getattr(module, "_GLOBAL_ARGS", None) if module is not None else None
    return args


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
    """

    def __init__(
        self,
        settings: Optional[Settings],
        *,
        allow_untested_version: bool = False,
        configure: Optional[Callable[[Any], Optional[Settings]]] = None,
        exit_when_profiled: bool = False,
    ) -> None:
        self._settings = settings
        self._configure = configure
        self._allow_untested = allow_untested_version
        self._exit_when_profiled = exit_when_profiled
        self.iterations = 0
        self.switches: list[PlanSwitch] = []
        self.decisions: deque[StragglerDecision] = deque(maxlen=10_000)
        self.trace: list[Computation] = []
        self.iteration_times_s: deque[float] = deque(maxlen=1000)
        self.metrics = _metrics.Metrics()
        self.megatron_version = ""
        self.profile: Optional[Profile] = None
        self.device: Optional[int] = None
        self._torch: Any = None
        self._schedules: Any = None
        self._patch: Optional[SchedulePatch] = None
        self._life = Lifecycle()  # detached, attached, running/profiling/off, let go
        self._inside_with = False  # entered by ``with`` (not by Megatron-LM's patch)
        self._book: Optional[PlanBook] = None
        self._session: Optional[ProfileSession] = None
        self._switcher: Optional[FrequencySwitcher] = None
        self._owns_switcher = False
        self._driver: Optional[ClockDriver] = None
        self._stopwatch: Optional[Stopwatch] = None
        self._recorder: Optional[_metrics.Recorder] = None
        self._between: Optional[Between] = None
        self._groups: Optional[CpuGroups] = None
        self._layout: Optional[Layout] = None
        self._current: Optional[Iteration] = None
        self._previous: Optional[Iteration] = None
        self._last_plan: Optional[Plan] = None
        self._passthrough = 0
        self._fingerprinted: set[WorkloadKey] = set()
        self._timing_computations = False  # the stale-plan check is on (set at the first iteration)
        self._checkpoints = _resume.Checkpoints()  # state beside Megatron-LM's checkpoints
        self.final_report: Optional[_metrics.FinalReport] = None
        self.mode = "run"
        self.frontiers: dict[WorkloadKey, Frontier] = {}
        if settings is not None:
            self._apply(settings)

    def _apply(self, settings: Settings) -> None:
        self._settings = settings
        self.mode = settings.mode
        self.frontiers = dict(settings.frontiers)
        self._book = PlanBook(
            settings.frontiers,
            settings.by_length,
            settings.plan,
            settings.stragglers,
            settings.unknown_workload,
        )
        if settings.profile is not None:
            self._session = ProfileSession(settings.profile)
        self.metrics = _metrics.Metrics(settings.metrics.keep_iterations)

    # -- the plan ---------------------------------------------------------------

    @property
    def frontier(self) -> Optional[Frontier]:
        frontiers = getattr(self, "frontiers", {})
        return next(iter(frontiers.values())) if len(frontiers) == 1 else None

    @property
    def stale_plans(self) -> list[StalePlan]:
        """This rank's stale-plan findings (see ``MetricsOptions.stale_plan_tolerance``)."""
        return list(self.metrics.stale_plans)

    @property
    def base_plan(self) -> Optional[Plan]:
        """The plan run while no replica straggles (for the workload of the last iteration)."""
        book = self._book
        if book is None:
            return None
        key = book.last_key
        if key is None:
            known = sorted(book.known, key=str)
            if not known:
                return None
            key = known[0]
        return book.base_plan(key) if key in book.known else None

    @property
    def plan(self) -> Optional[Plan]:
        """The plan of the last iteration (the base plan, or one following a straggler)."""
        return self._last_plan if self._last_plan is not None else self.base_plan

    # -- attaching --------------------------------------------------------------

    def __enter__(self) -> Attachment:
        self.attach()
        self._inside_with = True
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self._inside_with = False
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
        if self._life.attached:
            raise MegatronIntegrationError("this perseus attachment is already attached")
        torch = optional_module("torch", "megatron")
        schedules = optional_module("megatron.core.pipeline_parallel.schedules", "megatron")
        from megatron.core import package_info

        version = str(getattr(package_info, "__version__", "unknown"))
        patch = SchedulePatch(schedules, self, self)
        check_megatron(schedules, version, allow_untested_version=self._allow_untested)
        parsed = _megatron_lm_args()
        if self._settings is None and self._configure is not None and parsed is not None:
            # Megatron-LM >= 0.18 parses its arguments before pretrain(): read them now, so
            # that a wrong flag or frontier fails here, before the model is built.
            settings = self._configure(parsed)
            self._configure = None
            if settings is None:
                logger.debug("perseus is off for this job (--perseus-mode off)")
                return
            self._apply(settings)
        self._refuse_from_args(parsed)
        self._torch = torch
        self._schedules = schedules
        self.megatron_version = version
        patch.install()
        self._patch = patch
        self._life.fire("attach")
        atexit.register(self.detach)
        logger.debug("perseus attached to megatron-core %s", version)

    def _refuse_from_args(self, args: Any) -> None:
        """What cannot work, refused at attach when Megatron-LM's arguments are parsed already."""
        settings = self._settings
        if args is None or settings is None:
            return  # known at the first iteration, and refused there
        if full_iteration_graphs(args):
            setting = "--cuda-graph-impl full_iteration"
            raise UnsupportedScheduleError(FULL_GRAPH_MESSAGE.format(setting=setting))
        if settings.mode == "profile":
            problem = unsupported_for_profiling(
                int(getattr(args, "expert_model_parallel_size", 1) or 1),
                int(getattr(args, "context_parallel_size", 1) or 1),
                args,
            )
            if problem is not None:
                raise UnsupportedScheduleError(f"perseus's profile mode cannot run with {problem}")
            return
        bypass = unsupported_schedule(args, "", run_mode=True, by_length=settings.by_length)
        if bypass is not None:
            raise UnsupportedScheduleError(
                f"perseus cannot follow this Megatron schedule: {bypass}"
            )
        if settings.frontiers:
            check_frontiers(
                settings.frontiers,
                args,
                unknown_workload=settings.unknown_workload,
                on_fingerprint=fingerprint_reaction(settings.on_mismatch),
            )

    def detach(self) -> None:
        """Restore megatron's functions and give back the clocks perseus set. Idempotent."""
        if not self._life.attached:
            return
        atexit.unregister(self.detach)
        if self._patch is not None:
            self._patch.uninstall()
        self._current = None
        prev, self._previous = self._previous, None
        if prev is not None and self._between is not None:
            self._between.close_locally(prev)
            self._finish_run()
        self._between = None
        self._life.fire("detach")  # attached again, it starts afresh
        driver, self._driver = self._driver, None
        switcher, self._switcher = self._switcher, None
        if self._recorder is not None:
            self._recorder.close_meter()
        if self._groups is not None:
            self._groups.close()
            self._groups = None
        if self._session is not None and self._torch is not None:
            self._session.close(self._torch)
        try:
            if driver is not None:
                driver.close()
        finally:
            if switcher is not None:
                if self._owns_switcher:
                    switcher.close()
                else:
                    switcher.reset()

    # -- the first forward-backward call ----------------------------------------------------

    def _start(self, config: Any) -> None:
        """Resolve the GPU, read Megatron's layout, make perseus's groups (every rank at once)."""
        if self._settings is None and self._configure is not None:
            settings = self._configure(_megatron_lm_args())
            if settings is None:  # perseus is off for this job
                self._life.fire("turn_off")
                if self._patch is not None:
                    self._patch.uninstall()
                return
            self._apply(settings)
            self._refuse_from_args(_megatron_lm_args())  # Megatron-LM <= 0.17: parsed by now
        settings = self._settings
        assert settings is not None
        self._life.fire("start_profile" if self.mode == "profile" else "start_run")
        if full_iteration_graphs(config):
            setting = f"cuda_graph_impl={getattr(config, 'cuda_graph_impl', None)!r}"
            raise UnsupportedScheduleError(FULL_GRAPH_MESSAGE.format(setting=setting))
        torch = self._torch
        self._layout = layout = Layout.read(torch)
        explicit = settings.clocks.device
        if settings.clocks.switcher is not None:
            explicit = int(settings.clocks.switcher.device)
        self.device = resolve_device(torch, explicit)
        gpu = bool(torch.cuda.is_available()) and torch.cuda.is_initialized()
        self._stopwatch = Stopwatch(torch, gpu)
        self.metrics.layout = {**layout.as_dict(), "device": self.device}
        if self.mode == "profile":
            assert self._session is not None
            problem = unsupported_for_profiling(layout.expert_size, layout.context_size, config)
            if problem is not None:
                raise UnsupportedScheduleError(f"perseus's profile mode cannot run with {problem}")
            self._session.setup(torch, layout)
        else:
            problem = run_mode_parallelism_problem(layout.context_size, layout.expert_size)
            if problem is not None:
                raise UnsupportedScheduleError(f"perseus's run mode cannot run with {problem}")
            self._start_run(settings, layout, gpu)

    def _start_run(self, settings: Settings, layout: Layout, gpu: bool) -> None:
        torch = self._torch
        assert self.device is not None
        assert self._book is not None
        assert self._stopwatch is not None
        if settings.clocks.switcher is not None:
            self._switcher, self._owns_switcher = settings.clocks.switcher, False
        else:
            self._switcher, self._owns_switcher = FrequencySwitcher(self.device), True
        self._driver = ClockDriver(
            torch,
            self._switcher,
            gpu=gpu,
            idle_mhz=settings.clocks.idle_mhz,
            evaluation_mhz=settings.clocks.evaluation_mhz,
        )
        groups = None
        if layout.world_size > 1:
            from megatron.core import parallel_state as ps

            dp = settings.stragglers.data_parallel_group or ps.get_data_parallel_group()
            mp = settings.stragglers.model_parallel_group or ps.get_model_parallel_group()
            groups = self._groups = CpuGroups(torch, dp, mp)
        self._book.replica = groups.data_parallel_rank if groups else 0
        self.metrics.layout.update(
            data_parallel_rank=groups.data_parallel_rank if groups else 0,
            model_parallel_rank=groups.model_parallel_rank if groups else 0,
            gpus_per_stage=(
                max(1, groups.model_parallel_size // layout.pipeline_size) if groups else 1
            ),
        )
        meter = (
            _metrics.EnergyMeter(self.device)
            if settings.metrics.enabled
            else _metrics.EnergyMeter.disabled()
        )
        switcher = self._switcher
        self._recorder = _metrics.Recorder(
            meter, self.metrics, mismatches=lambda: switcher.clock_mismatches
        )
        drift = None
        options = settings.metrics
        if options.enabled and options.stale_plan_tolerance is not None:
            drift = DriftWatch(options.stale_plan_tolerance, options.stale_plan_window, layout.rank)
            self._timing_computations = True
        self._between = Between(
            book=self._book,
            stragglers=settings.stragglers,
            metrics_options=settings.metrics,
            stopwatch=self._stopwatch,
            groups=groups,
            recorder=self._recorder,
            rank=layout.rank,
            switches=self.switches,
            decisions=self.decisions,
            iteration_times_s=self.iteration_times_s,
            drift=drift,
            # One rank per stage of the job warns; the energy report carries every rank's.
            warns_for_stage=layout.tensor_rank == 0
            and (groups.data_parallel_rank if groups else 0) == 0,
        )
        # Scalars at Megatron-LM's own step: read once, at the first iteration (after a resume,
        # Megatron's counter starts from the checkpoint's, perseus's from 0).
        args = _megatron_lm_args()
        self._between.step_offset = _metrics.megatron_step_offset(args)
        self._resume(args, layout)

    # -- state across a resume (see _resume) ------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Run mode's state, as plain JSON data, for :meth:`load_state_dict` in a resumed run.

        perseus saves it by itself beside Megatron-LM's checkpoints (see
        :mod:`perseus.megatron._resume`); this is for training loops of
        their own: save it with the checkpoint, per rank.
        """
        return _resume.capture(
            iterations=self.iterations,
            layout=self._layout,
            book=self._book,
            between=self._between,
            calibration=self.metrics.calibration,
            switches=len(self.switches),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from :meth:`state_dict` of a run that stopped (applied at the first iteration).

        Raises
        ------
        ValueError
            Not a run-mode state of this perseus version.
        MegatronIntegrationError
            The attachment has run already.
        """
        if self._life.started:
            raise MegatronIntegrationError(
                "load_state_dict must come before the first iteration (the state sets perseus's "
                "iteration count, its straggler policies and its calibration)"
            )
        self._checkpoints.give(state)

    def _resume(self, args: Any, layout: Layout) -> None:
        """Apply a state given by hand, or the sidecar of the checkpoint Megatron-LM resumed."""
        found = self._checkpoints.start(args, layout.rank)
        if found is None:
            return
        assert self._book is not None
        assert self._between is not None
        restored = _resume.restore(*found, layout=layout, book=self._book, between=self._between)
        if restored is not None:
            self.iterations, self.metrics.calibration = restored

    def _save_state(self, step: int) -> None:
        """This rank's state beside Megatron-LM's checkpoint of `step`."""
        if self._layout is not None:
            self._checkpoints.save(step, self._layout.rank, self.state_dict)

    def _finish_run(self) -> None:
        """At detach: the last state beside Megatron's final checkpoint, and the final report."""
        between = self._between
        assert between is not None
        assert self._layout is not None
        if self.iterations > between.first_iteration:
            self._save_state(self.iterations - 1 + between.step_offset)
        switcher = self._switcher
        mismatches: dict[str, int] = {}
        if switcher is not None:
            try:
                mismatches = dict(switcher.clock_mismatches)
            except Exception:  # noqa: BLE001 - a switcher closed already: nothing to count
                mismatches = {}
        self.metrics.clock_mismatches = dict(mismatches)
        report = _metrics.final_report(
            self.metrics,
            rank=self._layout.rank,
            first_iteration=between.first_iteration,
            iterations=self.iterations - between.first_iteration,
            switches=len(self.switches),
            clock_mismatches=mismatches,
        )
        self.final_report = report
        if self._layout.rank == 0:
            logger.info("perseus: at detach: %s", report)
        else:
            logger.debug("perseus: at detach: %s", report)

    # -- hooks the wrappers call -----------------------------------------------------------

    def on_schedule(
        self, original: Callable[..., Any], kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if self._life.off:
            return original(*args, **kwargs)
        if kwargs.get("forward_only", False) or self._current is not None:
            return self._evaluation(original, args, kwargs)
        try:
            return self._iteration(original, kind, args, kwargs)
        except ProfilingFinished:
            if self._exit_when_profiled and not self._inside_with:
                logger.info(
                    "perseus: profile written; training stops (--perseus-profile-after stop)"
                )
                raise SystemExit(0) from None
            raise

    def on_forward(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        it = self._current
        if it is None:
            return self._outside(original, "forward_step", args, kwargs)
        if not it.following or self._life.off:
            return original(*args, **kwargs)
        assert self._patch is not None
        read = self._patch.forward_args
        microbatch = read.get(args, kwargs, "current_microbatch")
        chunk = int(read.get(args, kwargs, "vp_stage") or 0)
        if microbatch is None:
            self._mismatch(it, "megatron called forward_step without current_microbatch")
            return original(*args, **kwargs)
        microbatch = int(microbatch)
        session = self._session
        if session is not None and session.capturing(it.number, microbatch):
            arguments = session.capture_forward(self._torch, chunk, read.bind(args, kwargs))
            args, kwargs = (), arguments
        self._before(it, ("forward", chunk, microbatch))
        output = original(*args, **kwargs)
        it.outputs.add(output, chunk, microbatch)
        self._after(it)
        return output

    def on_backward(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        it = self._current
        if it is None:
            return self._outside(original, "backward_step", args, kwargs)
        if not it.following or self._life.off:
            return original(*args, **kwargs)
        assert self._patch is not None
        read = self._patch.backward_args
        found = it.outputs.pop(read.get(args, kwargs, "output_tensor"))
        if found is None:
            self._mismatch(it, "backward_step received an output tensor no forward_step produced")
            return original(*args, **kwargs)
        chunk, microbatch = found
        session = self._session
        if session is not None and session.capturing(it.number, microbatch):
            session.capture_backward(self._torch, chunk, read.bind(args, kwargs))
        self._before(it, ("backward", chunk, microbatch))
        result = original(*args, **kwargs)
        self._after(it)
        return result

    def _outside(self, original: Callable[..., Any], name: str, args: Any, kwargs: Any) -> Any:
        if self._passthrough or self._life.off:
            return original(*args, **kwargs)
        raise MegatronIntegrationError(
            f"megatron called {name} outside a forward-backward function perseus wrapped: the "
            "training loop holds a forward_backward_func obtained before perseus attached. Call "
            "megatron.core.pipeline_parallel.get_forward_backward_func() inside the "
            "`with perseus.megatron.attach(...)` block"
        )

    # -- forward-only calls ---------------------------------------------------------------

    def _evaluation(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Evaluation (or a nested call): no plan, not an iteration; the evaluation clock."""
        nested = self._current is not None
        driver = self._driver if not nested and self._life.following else None
        recorder = self._recorder if not nested else None
        if recorder is not None:
            recorder.exclude_begin()
        if driver is not None:
            driver.evaluation()
        self._passthrough += 1
        try:
            return original(*args, **kwargs)
        finally:
            self._passthrough -= 1
            if driver is not None:
                driver.idle()
            if recorder is not None:
                recorder.exclude_end()

    # -- one training iteration ----------------------------------------------------------

    def _iteration(
        self, original: Callable[..., Any], kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from megatron.core.utils import get_model_config

        model = kwargs.get("model")
        chunks = len(model) if isinstance(model, list) else 1
        config = get_model_config(model[0] if isinstance(model, list) else model)
        if not self._life.started:
            self._start(config)
            if self._life.off:
                return original(*args, **kwargs)
        settings = self._settings
        assert settings is not None
        assert self._stopwatch is not None
        microbatches = int(kwargs["num_microbatches"])
        seq_length = kwargs.get("seq_length")
        pp_size, pp_rank = self._pipeline(kind, kwargs)
        it = Iteration(
            self.iterations,
            kind,
            pp_size,
            pp_rank,
            chunks,
            microbatches,
            None if seq_length is None else int(seq_length),
        )
        now = self._recorder.now() if self._recorder is not None else None
        prev, self._previous = self._previous, None
        if prev is not None and self._between is not None and now is not None:
            self._between.finish(prev, now)
        if not self._check_supported(it, config):
            it.following = False
        elif self.mode == "run":
            self._choose_plan(it, config)
            self._check_fingerprint(it, config, kwargs)
        if self._recorder is not None and now is not None:
            plan = it.plan
            self._recorder.open(
                now,
                it.number,
                plan_time_s=it.plan_time_s if plan is not None else math.nan,
                plan_energy_j=it.plan_energy_j if plan is not None else math.nan,
                phase=it.phase,
            )
        if self._driver is not None and it.frequencies is None and self._life.following:
            self._driver.request(None)  # no plan this iteration: unlocked
        it.start = self._stopwatch.mark()
        self._current = it
        try:
            result = original(*args, **kwargs)
        finally:
            self._current = None
        if it.following and it.expected is not None and it.index != it.total:
            self._mismatch(
                it,
                f"this rank ran {it.index} computations in iteration {it.number}; the plan has "
                f"{it.total}",
            )
        if it.end is None:  # let go mid-iteration, or no computation: time the whole call
            it.end = self._stopwatch.mark()
            if self._driver is not None and self._life.following:
                self._driver.idle()
        self.iterations += 1
        self._previous = it
        self._last_plan = it.plan
        if self._between is not None:
            step = it.number + self._between.step_offset  # Megatron-LM's, once this one is done
            if self._checkpoints.due(step):
                self._save_state(step)
        session = self._session
        if session is not None and it.number == session.options.iteration and not session.done:
            assert self.device is not None
            assert self._patch is not None
            try:
                session.finish(
                    self._torch,
                    schedule=PLAN_SCHEDULE[it.kind],
                    chunks=it.chunks,
                    microbatches=it.microbatches,
                    config=config,
                    originals=self._patch.originals,
                    deallocate=self._schedules.deallocate_output_tensor,
                    device=self.device,
                    megatron_version=self.megatron_version,
                    fingerprint=self._fingerprint(it, config, kwargs),
                )
            finally:  # also when finishing stops training (after="stop")
                self.profile = session.profile
        return result

    def _fingerprint(self, it: Iteration, config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        """What this iteration's computations depend on (see :mod:`._fingerprint`)."""
        micro = kwargs.get("micro_batch_size")
        return fingerprint_of(
            config,
            gpu=gpu_model(self._torch, self.device),
            megatron_version=self.megatron_version,
            schedule=PLAN_SCHEDULE[it.kind],
            pipeline_size=it.pp_size,
            virtual_stages=it.chunks,
            seq_length=it.seq_length,
            micro_batch_size=None if micro is None else int(micro),
        )

    def _check_fingerprint(self, it: Iteration, config: Any, kwargs: dict[str, Any]) -> None:
        """The frontier's fingerprint against this job, once per workload."""
        key, book = it.key, self._book
        assert book is not None
        assert self._settings is not None
        if key is None or key in self._fingerprinted or key not in book.frontiers:
            return
        self._fingerprinted.add(key)
        recorded = book.frontiers[key].fingerprint
        if not recorded:
            return
        found = differences(recorded, self._fingerprint(it, config, kwargs))
        if not found:
            return
        text = (
            f"perseus: the frontier for {key} microbatches was made from a profile of another "
            f"setup: {'; '.join(found)}. Its plans' times and energies do not describe this job; "
            "profile this job again (perseus.megatron profile mode) and re-optimize"
        )
        if self._settings.on_mismatch == "raise":
            raise ScheduleMismatchError(text + " (or pass on_mismatch='warn' to run it anyway)")
        warn_for_job(text + "; running it anyway (on_mismatch='warn')", PlanWarning)

    def _pipeline(self, kind: str, kwargs: dict[str, Any]) -> tuple[int, int]:
        if kind == "no-pipelining":
            return 1, 0
        dist = self._torch.distributed
        communicator = kwargs.get("p2p_communicator")
        group = getattr(communicator, "pp_group", None) if communicator is not None else None
        if group is None:
            from megatron.core import parallel_state

            group = parallel_state.get_pipeline_model_parallel_group()
        return dist.get_world_size(group), dist.get_rank(group)

    def _check_supported(self, it: Iteration, config: Any) -> bool:
        assert self._settings is not None
        assert self._book is not None
        run = self.mode == "run"
        bypass = unsupported_schedule(
            config, it.kind, run_mode=run, by_length=self._settings.by_length
        )
        if bypass is None:
            problem = self._book.length_problem(it) if run else None
            if problem is not None:
                self._mismatch(it, problem)
            return it.following
        message = (
            f"perseus cannot follow this Megatron schedule: {bypass}. Turn that option off to "
            "use perseus, or detach it"
        )
        if self._settings.on_mismatch == "raise":
            raise UnsupportedScheduleError(message)
        self._let_go(message + "; perseus lets go of the clocks (on_mismatch='warn')")
        return False

    def _choose_plan(self, it: Iteration, config: Any) -> None:
        book = self._book
        assert book is not None
        assert self._settings is not None
        # The workload is the same on every rank, whatever this rank's state: the
        # collectives between iterations depend on it (see _between).
        it.key = book.lookup(it.microbatches, it.seq_length)
        if it.key is None:
            return  # no frontier for this workload: unlocked for this iteration
        book.switch_to(it.key)
        if not self._life.following:
            it.following = False
            return
        phase = calibration_phase(self._settings.metrics, it.number)
        problems = book.choose(it, config, phase)
        if problems:
            self._mismatch(
                it,
                "the plan was not made for what Megatron runs: "
                + "; ".join(problems)
                + ". Make the frontier with perseus.optimize(profile, microbatches=M, "
                "schedule=..., virtual_stages=V) for this pipeline",
            )

    # -- each computation ---------------------------------------------------------

    def _before(self, it: Iteration, key: tuple[str, int, int]) -> None:
        index = it.index
        if it.expected is not None and (index >= len(it.expected) or it.expected[index] != key):
            want = it.expected[index] if index < len(it.expected) else "nothing more"
            self._mismatch(
                it,
                f"computation {index} of pipeline rank {it.pp_rank} in iteration {it.number} "
                f"is {key}, the plan's order has {want} there ((instruction, chunk, microbatch))",
            )
        it.index = index + 1
        mhz = None
        if it.following and it.frequencies is not None:
            mhz = it.frequencies[index]
            if self._driver is not None:
                self._driver.request(mhz)
            if self._timing_computations:
                assert self._stopwatch is not None
                it.span_start = self._stopwatch.mark()
        if self._settings is not None and self._settings.record:
            self.trace.append(Computation(it.number, key[0], key[1], key[2], mhz))

    def _after(self, it: Iteration) -> None:
        assert self._stopwatch is not None
        end = None
        if it.index == it.total:
            end = it.end = self._stopwatch.mark()
            if self._driver is not None and self._life.following:
                self._driver.idle()
        if it.span_start is not None:
            end = self._stopwatch.mark() if end is None else end
            it.spans.append((it.index - 1, it.span_start, end))
            it.span_start = None

    def _mismatch(self, it: Iteration, message: str) -> None:
        assert self._settings is not None
        text = f"perseus: {message} (megatron-core {self.megatron_version})"
        if self._settings.on_mismatch == "raise":
            raise ScheduleMismatchError(text)
        self._let_go(text + "; perseus lets go of the clocks for good (on_mismatch='warn')")
        it.following = False
        it.expected = it.frequencies = None
        it.plan = None
        it.phase = "unlocked"

    def _let_go(self, message: str) -> None:
        if self._life.following:
            warnings.warn(message, PlanWarning, stacklevel=4)
            logger.warning(message)
            self._life.fire("let_go")
        if self._driver is not None:
            self._driver.let_go()


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

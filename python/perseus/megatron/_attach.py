"""Attach perseus to megatron-core's pipeline schedules (see :func:`attach`).

The :class:`Attachment` ties the parts together; each lives in a module of
its own:

- :mod:`._patching`: wrapping megatron's schedule and step functions, and
  naming each computation;
- :mod:`._following`: which plan an iteration runs (frontiers keyed by
  workload), and the order and clocks it expects;
- :mod:`._clocks`: the clock requests (stream-ordered, idle between
  iterations, evaluation);
- :mod:`._timing` and :mod:`._stragglers`: iteration times, their exchange,
  and the straggler policy;
- :mod:`._metrics`: energy measured live, reports and A/B calibration;
- :mod:`._profiling` and :mod:`._profile`: profile mode.

Nothing that needs CUDA or torch.distributed happens when attaching: the GPU,
the process groups and Megatron's layout are read at the first
forward-backward call, when Megatron has initialised (so ``attach`` may wrap
``pretrain(...)``).
"""

from __future__ import annotations

import atexit
import logging
import math
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from .._deprecation import warn_renamed
from .._optional import optional_module
from ..frontier import Frontier, Plan
from ..profile import Profile
from ..switcher import FrequencySwitcher
from . import _metrics
from ._clocks import ClockDriver
from ._compat import check_megatron
from ._device import resolve_device
from ._errors import (
    MegatronIntegrationError,
    ProfilingFinished,
    ScheduleMismatchError,
    UnsupportedScheduleError,
)
from ._following import (
    PLAN_SCHEDULE,
    Iteration,
    PlanBook,
    PlanWarning,
    WorkloadKey,
    fastest_mhz,
    normalize_frontiers,
)
from ._options import ClockOptions, MetricsOptions, ProfileOptions, StragglerOptions
from ._patching import SchedulePatch
from ._profiling import Layout, ProfileSession, unsupported_for_profiling
from ._stragglers import PlanSwitch, StragglerDecision
from ._timing import CpuGroups, Stopwatch

__all__ = ["Attachment", "Computation", "attach"]

logger = logging.getLogger("perseus.megatron")

MODES = ("run", "profile")

FrontierArgument = Union[Frontier, Mapping[Any, Frontier], None]


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


def full_iteration_graphs(config: Any) -> bool:
    """Whether megatron captures whole iterations in one CUDA graph (0.16-0.19 spellings)."""
    if getattr(config, "cuda_graph_impl", None) == "full_iteration":
        return True
    for name in ("cuda_graph_scope", "cuda_graph_modules"):
        scope = getattr(config, name, None)
        values = scope if isinstance(scope, (list, tuple)) else [scope]
        for value in values:
            text = str(getattr(value, "name", None) or getattr(value, "value", None) or value)
            if getattr(config, "cuda_graph_impl", "none") != "none" and "full_iteration" in text:
                return True
    return False


_FULL_GRAPH_MESSAGE = (
    "full-iteration CUDA graphs ({setting}) replay a whole forward-backward call as one "
    "graph: perseus's per-computation clock requests and timing are Python that a graph "
    "replay never runs. Use per-layer graphs (--cuda-graph-impl local or transformer_engine "
    "with a per-layer scope), which perseus works with, or no CUDA graphs"
)


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
        configure: Optional[Callable[[], Optional[Settings]]] = None,
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
        self._attached = False
        self._in_with = False
        self._off = False
        self._started = False
        self._book: Optional[PlanBook] = None
        self._session: Optional[ProfileSession] = None
        self._switcher: Optional[FrequencySwitcher] = None
        self._owns_switcher = False
        self._driver: Optional[ClockDriver] = None
        self._stopwatch: Optional[Stopwatch] = None
        self._recorder: Optional[_metrics.Recorder] = None
        self._groups: Optional[CpuGroups] = None
        self._layout: Optional[Layout] = None
        self._current: Optional[Iteration] = None
        self._previous: Optional[Iteration] = None
        self._last_plan: Optional[Plan] = None
        self._passthrough = 0
        self._following = True
        self._seq_length: Optional[int] = None
        self.mode = "run"
        self.frontiers: dict[WorkloadKey, Frontier] = {}
        if settings is not None:
            self._apply(settings)

    def _apply(self, settings: Settings) -> None:
        self._settings = settings
        self.mode = settings.mode
        self.frontiers = dict(settings.frontiers)
        self._book = PlanBook(
            settings.frontiers, settings.by_length, settings.plan, settings.stragglers
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
        self._in_with = True
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self._in_with = False
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
        if self._attached:
            raise MegatronIntegrationError("this perseus attachment is already attached")
        torch = optional_module("torch", "megatron")
        schedules = optional_module("megatron.core.pipeline_parallel.schedules", "megatron")
        from megatron.core import package_info

        version = str(getattr(package_info, "__version__", "unknown"))
        patch = SchedulePatch(schedules, self, self)
        check_megatron(schedules, version, allow_untested_version=self._allow_untested)
        args = _megatron_lm_args()
        if args is not None and self._settings is not None and full_iteration_graphs(args):
            raise UnsupportedScheduleError(
                _FULL_GRAPH_MESSAGE.format(setting="--cuda-graph-impl full_iteration")
            )
        self._torch = torch
        self._schedules = schedules
        self.megatron_version = version
        patch.install()
        self._patch = patch
        self._attached = True
        atexit.register(self.detach)
        logger.debug("perseus attached to megatron-core %s", version)

    def detach(self) -> None:
        """Restore megatron's functions and give back the clocks perseus set. Idempotent."""
        if not self._attached:
            return
        self._attached = False
        atexit.unregister(self.detach)
        if self._patch is not None:
            self._patch.uninstall()
        self._current = None
        self._close_previous_locally()
        self._started = self._off = False  # attached again, it starts afresh
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
        self._started = True
        if self._settings is None and self._configure is not None:
            settings = self._configure()
            if settings is None:  # perseus is off for this job
                self._off = True
                if self._patch is not None:
                    self._patch.uninstall()
                return
            self._apply(settings)
        settings = self._settings
        assert settings is not None
        if full_iteration_graphs(config):
            raise UnsupportedScheduleError(
                _FULL_GRAPH_MESSAGE.format(
                    setting=f"cuda_graph_impl={getattr(config, 'cuda_graph_impl', None)!r}"
                )
            )
        torch = self._torch
        self._layout = layout = Layout.read(torch)
        explicit = settings.clocks.device
        if settings.clocks.switcher is not None:
            explicit = int(settings.clocks.switcher.device)
        self.device = resolve_device(torch, explicit)
        gpu = bool(torch.cuda.is_available()) and torch.cuda.is_initialized()
        self._stopwatch = Stopwatch(torch, gpu)
        self.metrics.layout = {
            **layout.as_dict(),
            "device": self.device,
            "gpus_per_stage": max(1, layout.tensor_size * layout.context_size),
        }
        if self.mode == "profile":
            assert self._session is not None
            problem = unsupported_for_profiling(layout, config)
            if problem is not None:
                raise UnsupportedScheduleError(f"perseus's profile mode cannot run with {problem}")
            self._session.setup(torch, layout)
            return
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
        if layout.world_size > 1:
            from megatron.core import parallel_state as ps

            dp = settings.stragglers.data_parallel_group or ps.get_data_parallel_group()
            mp = settings.stragglers.model_parallel_group or ps.get_model_parallel_group()
            self._groups = CpuGroups(torch, dp, mp)
        assert self._book is not None
        self._book.replica = self._groups.data_parallel_rank if self._groups else 0
        if settings.metrics.enabled:
            meter = _metrics.EnergyMeter(self.device)
        else:
            meter = _metrics.EnergyMeter.disabled()
        self._recorder = _metrics.Recorder(meter, self.metrics)
        groups = self._groups
        self.metrics.layout.update(
            data_parallel_rank=groups.data_parallel_rank if groups else 0,
            model_parallel_rank=groups.model_parallel_rank if groups else 0,
            gpus_per_stage=max(1, groups.model_parallel_size // layout.pipeline_size)
            if groups
            else 1,
        )

    # -- hooks the wrappers call -----------------------------------------------------------

    def on_schedule(
        self, original: Callable[..., Any], kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if self._off:
            return original(*args, **kwargs)
        if kwargs.get("forward_only", False) or self._current is not None:
            return self._evaluation(original, args, kwargs)
        try:
            return self._iteration(original, kind, args, kwargs)
        except ProfilingFinished:
            if self._exit_when_profiled and not self._in_with:
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
        if not it.following or self._off:
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
        if not it.following or self._off:
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
        if self._passthrough or self._off:
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
        driver = self._driver if not nested and self._following else None
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
        if not self._started:
            self._start(config)
            if self._off:
                return original(*args, **kwargs)
        settings = self._settings
        assert settings is not None and self._stopwatch is not None
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
        self._finish_previous(now)
        if not self._check_supported(it, config):
            it.following = False
        elif self.mode == "run":
            self._choose_plan(it, config)
        if self._recorder is not None and now is not None:
            plan = it.plan
            self._recorder.open(
                now,
                it.number,
                plan_time_s=it.plan_time_s if plan is not None else math.nan,
                plan_energy_j=it.plan_energy_j if plan is not None else math.nan,
                phase=it.phase,
            )
        if self._driver is not None and it.frequencies is None and self._following:
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
            if self._driver is not None and self._following:
                self._driver.idle()
        self.iterations += 1
        self._previous = it
        self._last_plan = it.plan
        session = self._session
        if session is not None and it.number == session.options.iteration and not session.done:
            assert self.device is not None and self._patch is not None
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
                )
            finally:  # also when finishing stops training (after="stop")
                self.profile = session.profile
        return result

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
        bypass = None
        if getattr(config, "overlap_moe_expert_parallel_comm", False):
            bypass = (
                "the fused MoE 1F1B overlap (config.overlap_moe_expert_parallel_comm=True) runs "
                "merged forward-backward steps through combined_1f1b, bypassing forward_step and "
                "backward_step"
            )
        elif it.kind == "no-pipelining" and getattr(config, "hybrid_context_parallel", False):
            bypass = (
                "hybrid context parallelism (config.hybrid_context_parallel=True) splits "
                "microbatches into sub-samples the plan does not know"
            )
        elif (
            getattr(config, "variable_seq_lengths", False)
            and self.mode == "run"
            and not self._settings.by_length
        ):
            bypass = (
                "variable sequence lengths (config.variable_seq_lengths=True) give microbatches "
                "of different lengths than the plan was made for; to opt in, pass attach() "
                "frontiers keyed by (microbatches, seq_length), made for each length"
            )
        if bypass is None:
            return self._check_length(it)
        message = (
            f"perseus cannot follow this Megatron schedule: {bypass}. Turn that option off to "
            "use perseus, or detach it"
        )
        if self._settings.on_mismatch == "raise":
            raise UnsupportedScheduleError(message)
        self._let_go(message + "; perseus lets go of the clocks (on_mismatch='warn')")
        return False

    def _check_length(self, it: Iteration) -> bool:
        """A sequence length that changes is refused unless frontiers are keyed by it."""
        assert self._settings is not None
        if self._settings.by_length or self.mode != "run" or it.seq_length is None:
            return True
        if self._seq_length is None:
            self._seq_length = it.seq_length
            return True
        if it.seq_length == self._seq_length:
            return True
        self._mismatch(
            it,
            f"the sequence length changed from {self._seq_length} to {it.seq_length}; plans are "
            "made for one length. Pass attach() frontiers keyed by (microbatches, seq_length) to "
            "opt in to variable lengths",
        )
        return it.following

    def _choose_plan(self, it: Iteration, config: Any) -> None:
        book = self._book
        assert book is not None and self._settings is not None
        # The workload is the same on every rank, whatever this rank's state: the
        # collectives after the iteration depend on it (see _finish_previous).
        key = book.lookup(it.microbatches, it.seq_length)
        if key is None:
            return  # no frontier for this workload: unlocked for this iteration
        book.switch_to(key)
        it.key = key
        if not self._following:
            it.following = False
            return
        base = book.base_plan(key)
        phase = self._calibration_phase(it.number)
        uniform = None
        if phase == "fastest":
            plan = base
            frontier = book.frontiers.get(key)
            uniform = (
                fastest_mhz(frontier) if frontier is not None else int(base.frequencies_mhz.max())
            )
        elif phase == "plan":
            plan = base
        else:
            policy = book.policy(key)
            plan = policy.plan if policy is not None else base
            phase = "following" if plan is not base else "plan"
        problems = book.problems(plan, it, config)
        if problems:
            self._mismatch(
                it,
                "the plan was not made for what Megatron runs: "
                + "; ".join(problems)
                + ". Make the frontier with perseus.optimize(profile, microbatches=M, "
                "schedule=..., virtual_stages=V) for this pipeline",
            )
            return
        it.plan, it.phase = plan, phase
        if phase == "fastest":
            frontier = book.frontiers.get(key)
            baseline = frontier.baseline if frontier is not None else None
            it.plan_time_s = baseline.iteration_time_s if baseline else plan.iteration_time_s
            it.plan_energy_j = baseline.energy_j if baseline else plan.energy_j
        else:
            it.plan_time_s, it.plan_energy_j = plan.iteration_time_s, plan.energy_j
        it.expected, it.frequencies = book.order(plan, it.pp_rank, uniform)

    def _calibration_phase(self, iteration: int) -> Optional[str]:
        assert self._settings is not None
        k = self._settings.metrics.calibrate
        if not k or not self._settings.metrics.enabled:
            return None
        first = self._settings.metrics.warmup_iterations
        if first <= iteration < first + k:
            return "fastest"
        if first + k <= iteration < first + 2 * k:
            return "plan"
        return None

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
        if self._settings is not None and self._settings.record:
            self.trace.append(Computation(it.number, key[0], key[1], key[2], mhz))

    def _after(self, it: Iteration) -> None:
        if it.index == it.total:
            assert self._stopwatch is not None
            it.end = self._stopwatch.mark()
            if self._driver is not None and self._following:
                self._driver.idle()

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
        if self._following:
            warnings.warn(message, PlanWarning, stacklevel=4)
            logger.warning(message)
        self._following = False
        if self._driver is not None:
            self._driver.let_go()

    # -- after an iteration (read at the next one's start) ------------------------------

    def _finish_previous(self, now: Optional[tuple[float, float]]) -> None:
        """Time, stragglers and metrics of the previous iteration; the collectives of perseus.

        Every rank takes the same branches: they depend only on iteration
        numbers, workloads and settings, which all ranks share.
        """
        prev, self._previous = self._previous, None
        if prev is None or self._stopwatch is None:
            return
        seconds = self._stopwatch.seconds(prev.start, prev.end)
        if math.isfinite(seconds):
            self.iteration_times_s.append(seconds)
        switched = self._follow_stragglers(prev, seconds if prev.following else math.nan)
        recorder = self._recorder
        if recorder is None or now is None:
            return
        recorder.close(now, pipeline_time_s=seconds, switches=switched)
        settings = self._settings
        assert settings is not None
        calibration_end = (
            settings.metrics.calibrate
            and prev.number
            == settings.metrics.warmup_iterations + 2 * settings.metrics.calibrate - 1
        )
        if settings.metrics.enabled and (
            (prev.number + 1) % settings.metrics.report_every == 0 or calibration_end
        ):
            self._report(bool(calibration_end))

    def _close_previous_locally(self) -> None:
        """At detach: the last iteration's record, without any collective."""
        prev, self._previous = self._previous, None
        if prev is None or self._recorder is None or self._stopwatch is None:
            return
        seconds = self._stopwatch.seconds(prev.start, prev.end)
        if math.isfinite(seconds):
            self.iteration_times_s.append(seconds)
        self._recorder.close(self._recorder.now(), pipeline_time_s=seconds, switches=0)

    def _follow_stragglers(self, prev: Iteration, seconds: float) -> int:
        settings, book, groups = self._settings, self._book, self._groups
        if settings is None or book is None or groups is None or self.mode != "run":
            return 0
        key = getattr(prev, "key", None)
        if (
            key is None
            or groups.data_parallel_size < 2
            or prev.number < settings.stragglers.warmup_iterations
            or self._calibration_phase(prev.number) is not None
        ):
            return 0
        policy = book.policy(key)
        if policy is None:
            return 0
        times = groups.replica_times(seconds)
        if settings.metrics.calibrate and prev.number == (
            settings.metrics.warmup_iterations + 2 * settings.metrics.calibrate
        ):
            policy.reset()  # the first samples after calibration
        switch = policy.observe(prev.number, times)
        decision = policy.decisions[-1] if policy.decisions else None
        if decision is not None:
            self.decisions.append(decision)
            if groups.first_of_replica:
                logger.debug("perseus: replica %d: %s", groups.data_parallel_rank, decision)
        if switch is None:
            return 0
        self.switches.append(switch)
        if groups.first_of_replica:
            logger.info("perseus: replica %d %s", groups.data_parallel_rank, switch)
        return 1

    def _report(self, calibration_end: bool) -> None:
        settings, recorder = self._settings, self._recorder
        assert settings is not None and recorder is not None
        payload = recorder.payload(dict(self.metrics.layout))
        payloads = self._groups.gather(payload) if self._groups is not None else [payload]
        rows = _metrics.job_rows(payloads)
        if not rows:
            return
        self.metrics.job_iterations.extend(rows)
        replicas = self._groups.data_parallel_size if self._groups is not None else 1
        report = _metrics.report_of(rows, gpus=len(payloads), replicas=replicas)
        self.metrics.reports.append(report)
        rank0 = self._layout is None or self._layout.rank == 0
        if rank0:
            logger.info("perseus: %s", report)
        if calibration_end:
            self.metrics.calibration = _metrics.calibration(
                list(self.metrics.job_iterations),
                settings.metrics.warmup_iterations,
                settings.metrics.calibrate,
            )
            if rank0:
                logger.info("perseus: %s", self.metrics.calibration)
        writers = list(settings.metrics.writers)
        if settings.metrics.megatron_writers:
            writers += _metrics.megatron_writers()
        if writers:
            _metrics.write(writers, report)


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


def _from_old_keywords(
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
) -> Settings:
    """:func:`attach`'s arguments, checked (before anything is imported)."""
    if mode is None:
        mode = "profile" if profile is not None else "run"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if on_mismatch not in ("raise", "warn"):
        raise ValueError(f"on_mismatch must be 'raise' or 'warn', not {on_mismatch!r}")
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
    )


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
        sequence lengths. An iteration whose workload has no frontier runs
        with clocks unlocked, with one :class:`PlanWarning`. Needed in run mode.
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
        clocks, stragglers, profile = _from_old_keywords(old_keywords, clocks, stragglers, profile)
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
    )
    return Attachment(settings, allow_untested_version=allow_untested_version)

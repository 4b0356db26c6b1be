"""What one attachment holds from attach to detach, and the transitions that make and release it.

:class:`Runtime` takes the attachment through :mod:`._lifecycle`'s states:
``attach`` wraps megatron-core's schedule functions (reading Megatron-LM's
arguments when they are parsed already), the first forward-backward call
reads the layout and the GPU and makes each mode's parts (run mode's in
:mod:`._run_parts`, profile mode's :class:`~._profile_mode.ProfileSession`),
and ``detach`` gives everything back. It also holds run mode's state across
a resume (see :mod:`._resume`). What happens at each call between those
transitions is :mod:`._run_loop`'s.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable
from typing import Any, Optional

from .._optional import optional_module
from ..plan import Plan
from . import _metrics, _resume
from ._arguments import Settings
from ._between import Between
from ._clocks import ClockDriver
from ._compat import FULL_GRAPH_MESSAGE, check_megatron, full_iteration_graphs
from ._device import resolve_device
from ._energy_meter import Recorder
from ._errors import MegatronIntegrationError, UnsupportedScheduleError
from ._following import Iteration, PlanBook
from ._lifecycle import Lifecycle
from ._observed import Observed
from ._patching import Hooks, SchedulePatch
from ._preflight import megatron_lm_args, refuse_from_args, run_mode_parallelism_problem
from ._profile_mode import Layout, ProfileSession, unsupported_for_profiling
from ._run_parts import RunParts, final_report
from ._timing import Stopwatch

__all__ = ["Runtime"]

logger = logging.getLogger("perseus.megatron")


class Runtime:
    """One attachment's state and its lifecycle transitions (see the module docs)."""

    def __init__(
        self,
        settings: Optional[Settings],
        *,
        allow_untested_version: bool,
        configure: Optional[Callable[[Any], Optional[Settings]]],
        exit_when_profiled: bool,
    ) -> None:
        self.settings = settings
        self.configure = configure  # made from Megatron-LM's arguments once they are parsed
        self.allow_untested = allow_untested_version
        self.exit_when_profiled = exit_when_profiled
        self.seen = Observed()
        self.life = Lifecycle()  # detached, attached, running/profiling/off, let go
        self.inside_with = False  # entered by ``with`` (not by Megatron-LM's patch)
        self.torch: Any = None
        self.schedules: Any = None
        self.patch: Optional[SchedulePatch] = None
        self.book: Optional[PlanBook] = None
        self.session: Optional[ProfileSession] = None
        self.layout: Optional[Layout] = None
        self.stopwatch: Optional[Stopwatch] = None
        self.parts: Optional[RunParts] = None  # run mode, from the first iteration to detach
        self.current: Optional[Iteration] = None  # the iteration inside its schedule call
        self.previous: Optional[Iteration] = None  # the last one, until the next one starts
        self.last_plan: Optional[Plan] = None
        self.passthrough = 0  # depth of forward-only (or nested) schedule calls
        self.checkpoints = _resume.Checkpoints()  # state beside Megatron-LM's checkpoints
        if settings is not None:
            self.apply(settings)

    def apply(self, settings: Settings) -> None:
        self.settings = settings
        self.seen.mode = settings.mode
        self.seen.frontiers = dict(settings.frontiers)
        self.book = PlanBook(
            settings.frontiers,
            settings.by_length,
            settings.plan,
            settings.stragglers,
            settings.unknown_workload,
        )
        if settings.profile is not None:
            self.session = ProfileSession(settings.profile)
        self.seen.metrics = _metrics.Metrics(settings.metrics.keep_iterations)

    @property
    def driver(self) -> Optional[ClockDriver]:
        return self.parts.driver if self.parts is not None else None

    @property
    def recorder(self) -> Optional[Recorder]:
        return self.parts.recorder if self.parts is not None else None

    @property
    def between(self) -> Optional[Between]:
        return self.parts.between if self.parts is not None else None

    # -- attach and detach ----------------------------------------------------------------

    def attach(self, hooks: Hooks, owner: object) -> None:
        """Wrap the schedule functions, calling `hooks`; touches neither CUDA nor torch.distributed."""
        if self.life.attached:
            raise MegatronIntegrationError("this perseus attachment is already attached")
        torch = optional_module("torch", "megatron")
        schedules = optional_module("megatron.core.pipeline_parallel.schedules", "megatron")
        from megatron.core import package_info

        version = str(getattr(package_info, "__version__", "unknown"))
        patch = SchedulePatch(schedules, hooks, owner)
        check_megatron(schedules, version, allow_untested_version=self.allow_untested)
        parsed = megatron_lm_args()
        if self.settings is None and self.configure is not None and parsed is not None:
            # Megatron-LM >= 0.18 parses its arguments before pretrain(): read them now, so
            # that a wrong flag or frontier fails here, before the model is built.
            settings = self.configure(parsed)
            self.configure = None
            if settings is None:
                logger.debug("perseus is off for this job (--perseus-mode off)")
                return
            self.apply(settings)
        refuse_from_args(self.settings, parsed)
        self.torch = torch
        self.schedules = schedules
        self.seen.megatron_version = version
        patch.install()
        self.patch = patch
        self.life.fire("attach")
        atexit.register(self.detach)
        logger.debug("perseus attached to megatron-core %s", version)

    def detach(self) -> None:
        """Restore megatron's functions and give back the clocks perseus set. Idempotent."""
        if not self.life.attached:
            return
        atexit.unregister(self.detach)
        if self.patch is not None:
            self.patch.uninstall()
        self.current = None
        prev, self.previous = self.previous, None
        parts = self.parts
        if prev is not None and parts is not None:
            parts.between.close_locally(prev)
            self._finish_run(parts)  # saves state_dict(), which reads the parts
        self.parts = None
        self.life.fire("detach")  # attached again, it starts afresh
        if self.session is not None and self.torch is not None:
            self.session.close(self.torch)
        if parts is not None:
            parts.close()

    # -- the first forward-backward call --------------------------------------------------

    def start(self, config: Any) -> None:
        """Resolve the GPU, read Megatron's layout, make perseus's groups (every rank at once)."""
        if self.settings is None and self.configure is not None:
            settings = self.configure(megatron_lm_args())
            if settings is None:  # perseus is off for this job
                self.life.fire("turn_off")
                if self.patch is not None:
                    self.patch.uninstall()
                return
            self.apply(settings)
            refuse_from_args(settings, megatron_lm_args())  # Megatron-LM <= 0.17: parsed by now
        settings = self.settings
        assert settings is not None
        profile_mode = settings.mode == "profile"
        self.life.fire("start_profile" if profile_mode else "start_run")
        if full_iteration_graphs(config):
            setting = f"cuda_graph_impl={getattr(config, 'cuda_graph_impl', None)!r}"
            raise UnsupportedScheduleError(FULL_GRAPH_MESSAGE.format(setting=setting))
        torch, seen = self.torch, self.seen
        self.layout = layout = Layout.read(torch)
        explicit = settings.clocks.device
        if settings.clocks.switcher is not None:
            explicit = int(settings.clocks.switcher.device)
        seen.device = device = resolve_device(torch, explicit)
        gpu = bool(torch.cuda.is_available()) and torch.cuda.is_initialized()
        self.stopwatch = Stopwatch(torch, gpu)
        seen.metrics.layout = {**layout.as_dict(), "device": device}
        if profile_mode:
            assert self.session is not None
            problem = unsupported_for_profiling(layout.expert_size, layout.context_size, config)
            if problem is not None:
                raise UnsupportedScheduleError(f"perseus's profile mode cannot run with {problem}")
            self.session.setup(torch, layout)
            return
        problem = run_mode_parallelism_problem(layout.context_size, layout.expert_size)
        if problem is not None:
            raise UnsupportedScheduleError(f"perseus's run mode cannot run with {problem}")
        assert self.book is not None
        self.parts = RunParts.start(
            torch,
            settings,
            layout=layout,
            device=device,
            gpu=gpu,
            stopwatch=self.stopwatch,
            book=self.book,
            seen=seen,
        )
        # Scalars at Megatron-LM's own step: read once, at the first iteration (after a resume,
        # Megatron's counter starts from the checkpoint's, perseus's from 0).
        args = megatron_lm_args()
        self.parts.between.step_offset = _metrics.megatron_step_offset(args)
        self._resume(args, layout, self.parts.between)

    # -- state across a resume (see _resume) ----------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return _resume.capture(
            iterations=self.seen.iterations,
            layout=self.layout,
            book=self.book,
            between=self.between,
            calibration=self.seen.metrics.calibration,
            switches=len(self.seen.switches),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.life.started:
            raise MegatronIntegrationError(
                "load_state_dict must come before the first iteration (the state sets perseus's "
                "iteration count, its straggler policies and its calibration)"
            )
        self.checkpoints.give(state)

    def _resume(self, args: Any, layout: Layout, between: Between) -> None:
        """Apply a state given by hand, or the sidecar of the checkpoint Megatron-LM resumed."""
        found = self.checkpoints.start(args, layout.rank)
        if found is None:
            return
        assert self.book is not None
        restored = _resume.restore(*found, layout=layout, book=self.book, between=between)
        if restored is not None:
            self.seen.iterations, self.seen.metrics.calibration = restored

    def save_state(self, step: int) -> None:
        """This rank's state beside Megatron-LM's checkpoint of `step`."""
        if self.layout is not None:
            self.checkpoints.save(step, self.layout.rank, self.state_dict)

    def _finish_run(self, parts: RunParts) -> None:
        """At detach: the last state beside Megatron's final checkpoint, and the final report."""
        assert self.layout is not None
        between = parts.between
        if self.seen.iterations > between.first_iteration:
            self.save_state(self.seen.iterations - 1 + between.step_offset)
        self.seen.final_report = final_report(parts, self.seen, self.layout.rank)

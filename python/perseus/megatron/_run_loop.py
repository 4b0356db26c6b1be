"""The wrapped calls, one training iteration at a time: open it, clock each computation, close it.

:class:`RunLoop` is what :mod:`._patching`'s wrappers call. A
forward-backward call is one training iteration: the first one starts the
attachment (:meth:`~._runtime.Runtime.start`); each one finishes the
previous iteration between iterations (:mod:`._between`), picks and checks
its plan (:mod:`._conformance`), opens its energy record, runs megatron's
schedule (whose forward and backward steps come back here, each requesting
its planned clock first), saves run mode's state when Megatron-LM
checkpoints, and in profile mode hands the capture iteration to the
profile session. Forward-only calls (evaluation) are no iteration: they run
at the evaluation clock and are left out of the energy records.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, Optional

from ._conformance import Conformance
from ._errors import MegatronIntegrationError, ProfilingFinished
from ._following import PLAN_SCHEDULE, Iteration
from ._observed import Computation
from ._patching import SchedulePatch
from ._runtime import Runtime

__all__ = ["RunLoop"]

logger = logging.getLogger("perseus.megatron")


class RunLoop:
    """One attachment's hooks (see :class:`~._patching.Hooks`) and its iterations."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.checks = Conformance(runtime)

    # -- hooks the wrappers call -----------------------------------------------------------

    def on_schedule(
        self, original: Callable[..., Any], kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        rt = self.rt
        if rt.life.off:
            return original(*args, **kwargs)
        if kwargs.get("forward_only", False) or rt.current is not None:
            return self._evaluation(original, args, kwargs)
        try:
            return self._iteration(original, kind, args, kwargs)
        except ProfilingFinished:
            if rt.exit_when_profiled and not rt.inside_with:
                logger.info(
                    "perseus: profile written; training stops (--perseus-profile-after stop)"
                )
                raise SystemExit(0) from None
            raise

    def on_forward(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        followed = self._followed("forward_step")
        if followed is None:
            return original(*args, **kwargs)
        rt, (it, patch) = self.rt, followed
        read = patch.forward_args
        microbatch = read.get(args, kwargs, "current_microbatch")
        chunk = int(read.get(args, kwargs, "vp_stage") or 0)
        if microbatch is None:
            self.checks.mismatch(it, "megatron called forward_step without current_microbatch")
            return original(*args, **kwargs)
        microbatch = int(microbatch)
        session = rt.session
        if session is not None and session.capturing(it.number, microbatch):
            arguments = session.capture_forward(rt.torch, chunk, read.bind(args, kwargs))
            args, kwargs = (), arguments
        self.before(it, ("forward", chunk, microbatch))
        output = original(*args, **kwargs)
        it.outputs.add(output, chunk, microbatch)
        self.after(it)
        return output

    def on_backward(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        followed = self._followed("backward_step")
        if followed is None:
            return original(*args, **kwargs)
        rt, (it, patch) = self.rt, followed
        read = patch.backward_args
        found = it.outputs.pop(read.get(args, kwargs, "output_tensor"))
        if found is None:
            self.checks.mismatch(
                it, "backward_step received an output tensor no forward_step produced"
            )
            return original(*args, **kwargs)
        chunk, microbatch = found
        session = rt.session
        if session is not None and session.capturing(it.number, microbatch):
            session.capture_backward(rt.torch, chunk, read.bind(args, kwargs))
        self.before(it, ("backward", chunk, microbatch))
        result = original(*args, **kwargs)
        self.after(it)
        return result

    def _followed(self, name: str) -> Optional[tuple[Iteration, SchedulePatch]]:
        """The iteration a step call (`name`) belongs to and the patch that reads its
        arguments, when perseus clocks it; None when the call runs as it is (perseus let go,
        or this iteration is not followed). A call from no schedule perseus wrapped is
        refused unless perseus lets such calls through."""
        rt = self.rt
        it = rt.current
        if it is None and not (rt.passthrough or rt.life.off):
            raise MegatronIntegrationError(
                f"megatron called {name} outside a forward-backward function perseus wrapped: "
                "the training loop holds a forward_backward_func obtained before perseus "
                "attached. Call megatron.core.pipeline_parallel.get_forward_backward_func() "
                "inside the `with perseus.megatron.attach(...)` block"
            )
        if it is None or not it.following or rt.life.off:
            return None
        assert rt.patch is not None
        return it, rt.patch

    # -- forward-only calls ---------------------------------------------------------------

    def _evaluation(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Evaluation (or a nested call): no plan, not an iteration; the evaluation clock."""
        rt = self.rt
        nested = rt.current is not None
        driver = rt.driver if not nested and rt.life.following else None
        recorder = rt.recorder if not nested else None
        if recorder is not None:
            recorder.exclude_begin()
        if driver is not None:
            driver.evaluation()
        rt.passthrough += 1
        try:
            return original(*args, **kwargs)
        finally:
            rt.passthrough -= 1
            if driver is not None:
                driver.idle()
            if recorder is not None:
                recorder.exclude_end()

    # -- one training iteration ----------------------------------------------------------

    def _iteration(
        self, original: Callable[..., Any], kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from megatron.core.utils import get_model_config

        rt, seen = self.rt, self.rt.seen
        model = kwargs.get("model")
        chunks = len(model) if isinstance(model, list) else 1
        config = get_model_config(model[0] if isinstance(model, list) else model)
        if not rt.life.started:
            rt.start(config)
            if rt.life.off:
                return original(*args, **kwargs)
        stopwatch = rt.stopwatch
        assert stopwatch is not None
        seq_length = kwargs.get("seq_length")
        pp_size, pp_rank = self._pipeline(kind, kwargs)
        it = Iteration(
            seen.iterations,
            kind,
            pp_size,
            pp_rank,
            chunks,
            int(kwargs["num_microbatches"]),
            None if seq_length is None else int(seq_length),
        )
        recorder, between = rt.recorder, rt.between
        now = recorder.now() if recorder is not None else None
        prev, rt.previous = rt.previous, None
        if prev is not None and between is not None and now is not None:
            between.finish(prev, now)
        if not self.checks.supported(it, config):
            it.following = False
        elif seen.mode == "run":
            self.checks.choose_plan(it, config)
            self.checks.check_fingerprint(it, config, kwargs)
        if recorder is not None and now is not None:
            recorder.open(
                now,
                it.number,
                plan_time_s=it.plan_time_s if it.plan is not None else math.nan,
                plan_energy_j=it.plan_energy_j if it.plan is not None else math.nan,
                phase=it.phase,
            )
        driver = rt.driver
        if driver is not None and it.frequencies is None and rt.life.following:
            driver.request(None)  # no plan this iteration: unlocked
        it.start = stopwatch.mark()
        rt.current = it
        try:
            result = original(*args, **kwargs)
        finally:
            rt.current = None
        if it.following and it.expected is not None and it.index != it.total:
            self.checks.mismatch(
                it,
                f"this rank ran {it.index} computations in iteration {it.number}; the plan has "
                f"{it.total}",
            )
        # Read again: a detach inside the call (from the training step) closed the parts.
        driver, between = rt.driver, rt.between
        if it.end is None:  # let go mid-iteration, or no computation: time the whole call
            it.end = stopwatch.mark()
            if driver is not None and rt.life.following:
                driver.idle()
        seen.iterations += 1
        rt.previous = it
        rt.last_plan = it.plan
        if between is not None:
            step = it.number + between.step_offset  # Megatron-LM's, once this one is done
            if rt.checkpoints.due(step):
                rt.save_state(step)
        self._profile(it, config, kwargs)
        return result

    def _profile(self, it: Iteration, config: Any, kwargs: dict[str, Any]) -> None:
        """Profile mode: after the capture iteration, sweep and write the profile."""
        rt, seen = self.rt, self.rt.seen
        session = rt.session
        if session is None or it.number != session.options.iteration or session.done:
            return
        assert seen.device is not None
        assert rt.patch is not None
        try:
            session.finish(
                rt.torch,
                schedule=PLAN_SCHEDULE[it.kind],
                chunks=it.chunks,
                microbatches=it.microbatches,
                config=config,
                originals=rt.patch.originals,
                deallocate=rt.schedules.deallocate_output_tensor,
                device=seen.device,
                megatron_version=seen.megatron_version,
                fingerprint=self.checks.fingerprint(it, config, kwargs),
            )
        finally:  # also when finishing stops training (after="stop")
            seen.profile = session.profile

    def _pipeline(self, kind: str, kwargs: dict[str, Any]) -> tuple[int, int]:
        """This iteration's pipeline size and this rank's place in it."""
        if kind == "no-pipelining":
            return 1, 0
        dist = self.rt.torch.distributed
        communicator = kwargs.get("p2p_communicator")
        group = getattr(communicator, "pp_group", None) if communicator is not None else None
        if group is None:
            from megatron.core import parallel_state

            group = parallel_state.get_pipeline_model_parallel_group()
        return dist.get_world_size(group), dist.get_rank(group)

    # -- each computation ---------------------------------------------------------

    def before(self, it: Iteration, key: tuple[str, int, int]) -> None:
        """Check the computation `key` against the plan, then request its clock."""
        rt = self.rt
        self.checks.check_order(it, key)
        index = it.index
        it.index = index + 1
        mhz = None
        if it.following and it.frequencies is not None:
            mhz = it.frequencies[index]
            if rt.driver is not None:
                rt.driver.request(mhz)
            if rt.parts is not None and rt.parts.times_computations:
                assert rt.stopwatch is not None
                it.span_start = rt.stopwatch.mark()
        if rt.settings is not None and rt.settings.record:
            rt.seen.trace.append(Computation(it.number, key[0], key[1], key[2], mhz))

    def after(self, it: Iteration) -> None:
        """After a computation: the iteration's end at its last one, and its timed span."""
        rt = self.rt
        assert rt.stopwatch is not None
        end = None
        if it.index == it.total:
            end = it.end = rt.stopwatch.mark()
            if rt.driver is not None and rt.life.following:
                rt.driver.idle()
        if it.span_start is not None:
            end = rt.stopwatch.mark() if end is None else end
            it.spans.append((it.index - 1, it.span_start, end))
            it.span_start = None

"""Attach perseus to megatron-core's pipeline schedules (see :func:`attach`)."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional, Union

from .._optional import optional_module
from ..frontier import Frontier
from ..plan import Plan
from ..profile import Profile
from ..schedule import pipeline_order
from ..switcher import FrequencySwitcher
from . import _profile
from ._compat import SCHEDULE_FUNCTIONS, STEP_FUNCTIONS, check_megatron
from ._errors import (
    MegatronIntegrationError,
    ProfilingFinished,
    ScheduleMismatchError,
    UnsupportedScheduleError,
)
from ._stragglers import PlanSwitch, StragglerPolicy, exchange_times

__all__ = ["Attachment", "Computation", "attach"]

logger = logging.getLogger("perseus.megatron")

MODES = ("run", "profile")

# The perseus schedule each megatron schedule function runs.
_PLAN_SCHEDULE = {"no-pipelining": "1f1b", "1f1b": "1f1b", "interleaved": "interleaved-1f1b"}
_MARK = "__perseus_attachment__"


@dataclass(frozen=True)
class Computation:
    """One forward or backward perseus saw, in the order this rank ran it."""

    iteration: int  #: training iteration (0-based; forward-only calls are not counted)
    instruction: str  #: "forward" or "backward"
    chunk: int  #: virtual chunk on this GPU (0 without interleaving)
    microbatch: int
    frequency_mhz: Optional[int]  #: planned SM clock requested for it; None in profile mode


class _Arguments:
    """Reads named arguments of calls to one function without binding the whole signature."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.signature = inspect.signature(function)
        names = list(self.signature.parameters)
        self._index = {name: i for i, name in enumerate(names)}
        self._default = {
            name: p.default
            for name, p in self.signature.parameters.items()
            if p.default is not p.empty
        }

    def get(self, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
        if name in kwargs:
            return kwargs[name]
        index = self._index[name]
        if index < len(args):
            return args[index]
        return self._default.get(name)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)


class _Iteration:
    """State of one forward-backward call."""

    def __init__(
        self,
        number: int,
        kind: str,
        pp_size: int,
        pp_rank: int,
        chunks: int,
        microbatches: int,
        expected: Optional[list[tuple[str, int, int]]],
        frequencies: Optional[list[int]],
    ) -> None:
        self.number = number
        self.kind = kind
        self.pp_size = pp_size
        self.pp_rank = pp_rank
        self.chunks = chunks
        self.microbatches = microbatches
        self.expected = expected
        self.frequencies = frequencies
        self.total = 2 * chunks * microbatches
        self.index = 0
        self.outputs: dict[int, tuple[Any, int, int]] = {}
        self.start: Any = None
        self.end: Any = None
        self.following = True  # False once a mismatch made perseus let go (on_mismatch="warn")


class Attachment:
    """perseus attached to megatron-core's schedules; made by :func:`attach`.

    Attributes
    ----------
    mode : str
        ``"run"`` or ``"profile"``.
    frontier : Frontier or None
    base_plan : Plan or None
        The plan run while no data-parallel replica straggles.
    iterations : int
        Training iterations (forward-backward calls, forward-only excluded) seen.
    switches : list of PlanSwitch
        Every change of plan made to follow a straggler, oldest first.
    trace : list of Computation
        With ``record=True``: every computation seen, in order.
    iteration_times_s : collections.deque
        This pipeline's recent iteration times (seconds, last 1000).
    megatron_version : str
    profile : Profile or None
        Profile mode: the merged profile, once measured.
    """

    def __init__(
        self,
        frontier: Optional[Frontier],
        *,
        mode: str,
        plan: Optional[Plan],
        switcher: Optional[FrequencySwitcher],
        device: Optional[int],
        stragglers: bool,
        tolerance: float,
        recovery: Optional[float],
        warmup_iterations: int,
        data_parallel_group: Any,
        model_parallel_group: Any,
        on_mismatch: str,
        record: bool,
        allow_untested_version: bool,
        profile: Optional[_profile.ProfileRun],
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if on_mismatch not in ("raise", "warn"):
            raise ValueError(f"on_mismatch must be 'raise' or 'warn', not {on_mismatch!r}")
        if (
            isinstance(warmup_iterations, bool)
            or not isinstance(warmup_iterations, int)
            or warmup_iterations < 0
        ):
            raise ValueError(
                f"warmup_iterations must be an integer >= 0, not {warmup_iterations!r}"
            )
        if mode == "run":
            if frontier is None and plan is None:
                raise ValueError("run mode needs a frontier (perseus.optimize(...)) or a plan")
            if plan is None:
                assert frontier is not None
                plan = frontier.fastest
            if stragglers and frontier is None:
                raise ValueError("following stragglers needs the frontier, not only a plan")
        self.mode = mode
        self.frontier = frontier
        self.base_plan = plan
        self._plan = plan
        self._switcher = switcher
        self._owns_switcher = switcher is None
        self._device = device
        self._stragglers = bool(stragglers) and mode == "run"
        self._policy = (
            StragglerPolicy(frontier, plan, tolerance=tolerance, recovery=recovery)
            if self._stragglers and frontier is not None and plan is not None
            else None
        )
        self._warmup = warmup_iterations
        self._dp_group = data_parallel_group
        self._mp_group = model_parallel_group
        self._on_mismatch = on_mismatch
        self._record = record
        self._allow_untested = allow_untested_version
        self._profile = profile
        self.iterations = 0
        self.switches: list[PlanSwitch] = []
        self.trace: list[Computation] = []
        self.iteration_times_s: deque[float] = deque(maxlen=1000)
        self.megatron_version = ""
        self.profile: Optional[Profile] = None
        self._torch: Any = None
        self._schedules: Any = None
        self._originals: dict[str, Callable[..., Any]] = {}
        self._current: Optional[_Iteration] = None
        self._passthrough = 0
        self._following = True
        self._gpu = False
        self._last_mhz: Optional[int] = None
        self._orders: dict[tuple[Any, ...], tuple[list[tuple[str, int, int]], list[int]]] = {}
        self._forward_args: Optional[_Arguments] = None
        self._backward_args: Optional[_Arguments] = None
        self._attached = False

    # -- the plan ---------------------------------------------------------------

    @property
    def plan(self) -> Optional[Plan]:
        """The plan run now (the base plan, or the one following a straggler)."""
        return self._plan

    # -- attaching --------------------------------------------------------------

    def __enter__(self) -> Attachment:
        self.attach()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        finished = exc_type is not None and issubclass(exc_type, ProfilingFinished)
        try:
            self.detach()
        except Exception:
            if exc_type is None or finished:
                raise
            # The switcher's error is on stderr already; keep the original one.
        return finished

    def attach(self) -> None:
        """Wrap the schedule functions (``with attach(...)`` calls this)."""
        if self._attached:
            raise MegatronIntegrationError("this perseus attachment is already attached")
        torch = optional_module("torch", "megatron")
        schedules = optional_module("megatron.core.pipeline_parallel.schedules", "megatron")
        from megatron.core import package_info

        version = str(getattr(package_info, "__version__", "unknown"))
        for name in (*STEP_FUNCTIONS, *SCHEDULE_FUNCTIONS):
            if hasattr(getattr(schedules, name, None), _MARK):
                raise MegatronIntegrationError(
                    f"schedules.{name} is already wrapped by another perseus attachment; "
                    "leave that one's `with` block first"
                )
        check_megatron(schedules, version, allow_untested_version=self._allow_untested)
        self._torch = torch
        self._schedules = schedules
        self.megatron_version = version
        self._gpu = bool(torch.cuda.is_available())
        self._forward_args = _Arguments(schedules.forward_step)
        self._backward_args = _Arguments(schedules.backward_step)
        if self._profile is not None and self._profile.group is None:
            self._profile.group = self._long_group()
        if self.mode == "run" and self._switcher is None:
            self._switcher = FrequencySwitcher(self._resolve_device())
        self._originals = {
            name: getattr(schedules, name) for name in (*STEP_FUNCTIONS, *SCHEDULE_FUNCTIONS)
        }
        wrappers: dict[str, Callable[..., Any]] = {
            "forward_step": self._wrap_forward(self._originals["forward_step"]),
            "backward_step": self._wrap_backward(self._originals["backward_step"]),
        }
        for name, kind in SCHEDULE_FUNCTIONS.items():
            wrappers[name] = self._wrap_schedule(self._originals[name], kind)
        for name, wrapper in wrappers.items():
            setattr(wrapper, _MARK, self)
            setattr(schedules, name, wrapper)
        self._attached = True
        logger.info(
            "perseus attached to megatron-core %s in %s mode%s",
            version,
            self.mode,
            f" (plan {self._plan.iteration_time_s:.6g} s)" if self._plan is not None else "",
        )

    def detach(self) -> None:
        """Restore megatron's functions and give back the clocks perseus set. Idempotent."""
        if not self._attached:
            return
        self._attached = False
        for name, original in self._originals.items():
            setattr(self._schedules, name, original)
        self._current = None
        switcher, self._last_mhz = self._switcher, None
        if switcher is not None:
            if self._owns_switcher:
                self._switcher = None
                switcher.close()
            else:
                switcher.reset()

    def _resolve_device(self) -> int:
        if self._device is not None:
            return int(self._device)
        return int(self._torch.cuda.current_device()) if self._gpu else 0

    def _long_group(self) -> Any:
        dist = self._torch.distributed
        if not dist.is_initialized():
            raise MegatronIntegrationError(
                "profile mode needs torch.distributed initialised before attach (perseus "
                "gathers the ranks' measurements over it)"
            )
        assert self._profile is not None
        return dist.new_group(backend="gloo", timeout=timedelta(seconds=self._profile.timeout_s))

    # -- wrappers ---------------------------------------------------------------

    def _wrap_schedule(self, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def schedule(*args: Any, **kwargs: Any) -> Any:
            return self._run_schedule(original, kind, args, kwargs)

        return schedule

    def _wrap_forward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        read = self._forward_args
        assert read is not None

        @functools.wraps(original)
        def forward_step(*args: Any, **kwargs: Any) -> Any:
            it = self._current
            if it is None:
                return self._outside(original, "forward_step", args, kwargs)
            if not it.following:
                return original(*args, **kwargs)
            microbatch = read.get(args, kwargs, "current_microbatch")
            chunk = read.get(args, kwargs, "vp_stage") or 0
            if microbatch is None:
                self._mismatch(it, "megatron called forward_step without current_microbatch")
                return original(*args, **kwargs)
            capture = self._capture_forward(it, chunk, microbatch, args, kwargs)
            if capture is not None:
                args, kwargs = capture
            self._before(it, ("forward", int(chunk), int(microbatch)))
            output = original(*args, **kwargs)
            tensor = output[0] if isinstance(output, tuple) else output
            first = tensor[0] if isinstance(tensor, list) else tensor
            it.outputs[id(first)] = (first, int(chunk), int(microbatch))
            self._after(it)
            return output

        return forward_step

    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        read = self._backward_args
        assert read is not None

        @functools.wraps(original)
        def backward_step(*args: Any, **kwargs: Any) -> Any:
            it = self._current
            if it is None:
                return self._outside(original, "backward_step", args, kwargs)
            if not it.following:
                return original(*args, **kwargs)
            output = read.get(args, kwargs, "output_tensor")
            first = output[0] if isinstance(output, list) else output
            found = it.outputs.pop(id(first), None)
            if found is None:
                self._mismatch(
                    it, "backward_step received an output tensor no forward_step produced"
                )
                return original(*args, **kwargs)
            _, chunk, microbatch = found
            self._capture_backward(
                it, chunk, microbatch, read.get(args, kwargs, "output_tensor_grad")
            )
            self._before(it, ("backward", chunk, microbatch))
            result = original(*args, **kwargs)
            self._after(it)
            return result

        return backward_step

    def _outside(self, original: Callable[..., Any], name: str, args: Any, kwargs: Any) -> Any:
        if self._passthrough:
            return original(*args, **kwargs)
        raise MegatronIntegrationError(
            f"megatron called {name} outside a forward-backward function perseus wrapped: the "
            "training loop holds a forward_backward_func obtained before perseus attached. Call "
            "megatron.core.pipeline_parallel.get_forward_backward_func() inside the "
            "`with perseus.megatron.attach(...)` block"
        )

    # -- one iteration ------------------------------------------------------------

    def _run_schedule(
        self, original: Callable[..., Any], kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if kwargs.get("forward_only", False) or self._current is not None:
            self._passthrough += 1  # evaluation: no plan, no switching, not an iteration
            try:
                return original(*args, **kwargs)
            finally:
                self._passthrough -= 1
        from megatron.core.utils import get_model_config

        model = kwargs.get("model")
        chunks = len(model) if isinstance(model, list) else 1
        config = get_model_config(model[0] if isinstance(model, list) else model)
        microbatches = int(kwargs["num_microbatches"])
        pp_size, pp_rank = self._pipeline(kind, kwargs)
        it = _Iteration(self.iterations, kind, pp_size, pp_rank, chunks, microbatches, None, None)
        if not self._check_supported(it, config):
            it.following = False
        elif self.mode == "run" and self._following:
            self._check_plan(it, config)
        elif not self._following:
            it.following = False
        it.start = self._clock()
        self._current = it
        try:
            result = original(*args, **kwargs)
        finally:
            self._current = None
        if it.following and it.index != it.total:
            self._mismatch(
                it,
                f"this rank ran {it.index} computations in iteration {it.number}; the plan has "
                f"{it.total}",
            )
        if it.end is None:  # let go mid-iteration: time the whole call instead
            it.end = self._clock()
        self.iterations += 1
        seconds = self._elapsed(it)
        if seconds is not None:
            self.iteration_times_s.append(seconds)
        if self._policy is not None and seconds is not None:
            self._follow_stragglers(it, seconds)
        if (
            self._profile is not None
            and it.number == self._profile.iteration
            and not self._profile.done
        ):
            self._run_profile(it, config, kwargs)
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

    def _check_supported(self, it: _Iteration, config: Any) -> bool:
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
        if bypass is None:
            return True
        message = (
            f"perseus cannot follow this Megatron schedule: {bypass}. Turn that option off to "
            "use perseus, or detach it"
        )
        if self._on_mismatch == "raise":
            raise UnsupportedScheduleError(message)
        self._let_go(message + "; perseus lets go of the clocks (on_mismatch='warn')")
        return False

    def _check_plan(self, it: _Iteration, config: Any) -> None:
        assert self._plan is not None
        spec = self._plan.spec
        label = {
            "no-pipelining": "no pipelining (forward_backward_no_pipelining)",
            "1f1b": "1F1B (forward_backward_pipelining_without_interleaving)",
            "interleaved": "interleaved 1F1B (forward_backward_pipelining_with_interleaving)",
        }[it.kind]
        problems = []
        wanted = _PLAN_SCHEDULE[it.kind]
        if spec.schedule != wanted:
            problems.append(f"schedule: the plan's is {spec.schedule!r}, Megatron runs {label}")
        if spec.num_gpus != it.pp_size:
            problems.append(
                f"pipeline size: the plan's is {spec.num_gpus}, Megatron's is {it.pp_size}"
            )
        if spec.virtual_stages != it.chunks:
            problems.append(
                f"virtual stages per GPU: the plan's is {spec.virtual_stages}, Megatron's model has "
                f"{it.chunks} chunk(s)"
            )
        if spec.microbatches != it.microbatches:
            problems.append(
                f"microbatches: the plan's is {spec.microbatches}, this iteration runs {it.microbatches}"
            )
        if it.kind == "interleaved":
            group = getattr(config, "microbatch_group_size_per_vp_stage", None)
            if group is not None and group != it.pp_size:
                problems.append(
                    f"microbatch_group_size_per_vp_stage is {group}; perseus's interleaved order "
                    f"groups as many microbatches as pipeline stages ({it.pp_size})"
                )
        if problems:
            self._mismatch(
                it,
                "the plan was not made for what Megatron runs: "
                + "; ".join(problems)
                + ". Make the "
                "frontier with perseus.optimize(profile, microbatches=M, schedule=..., "
                "virtual_stages=V) for this pipeline",
            )
            return
        key = (id(self._plan), it.pp_rank)
        cached = self._orders.get(key)
        if cached is None:
            order = pipeline_order(
                spec.schedule, spec.num_gpus, spec.microbatches, spec.virtual_stages
            )[it.pp_rank]
            plan = self._plan
            frequencies = [
                plan.frequency(gpu=it.pp_rank, instruction=i, microbatch=mb, chunk=chunk)
                for i, chunk, mb in order
            ]
            cached = (order, frequencies)
            if len(self._orders) >= 16:
                self._orders.clear()
            self._orders[key] = cached
        it.expected, it.frequencies = cached

    def _before(self, it: _Iteration, key: tuple[str, int, int]) -> None:
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
            self._request(mhz)
        if self._record:
            self.trace.append(Computation(it.number, key[0], key[1], key[2], mhz))

    def _after(self, it: _Iteration) -> None:
        if it.index == it.total:
            it.end = self._clock()

    def _request(self, mhz: int) -> None:
        if mhz == self._last_mhz or self._switcher is None:
            return
        self._last_mhz = mhz
        if self._gpu:
            stream = self._torch.cuda.current_stream().cuda_stream
            self._switcher.set_on_stream(stream, mhz)
        else:
            self._switcher.set(mhz)

    def _mismatch(self, it: _Iteration, message: str) -> None:
        text = f"perseus: {message} (megatron-core {self.megatron_version})"
        if self._on_mismatch == "raise":
            raise ScheduleMismatchError(text)
        self._let_go(text + "; perseus lets go of the clocks for good (on_mismatch='warn')")
        it.following = False
        it.expected = it.frequencies = None

    def _let_go(self, message: str) -> None:
        if self._following:
            warnings.warn(message, RuntimeWarning, stacklevel=4)
            logger.warning(message)
        self._following = False
        if self._switcher is not None:
            self._switcher.reset()
            self._last_mhz = None

    # -- timing and stragglers ------------------------------------------------------

    def _clock(self) -> Any:
        if self._gpu:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _elapsed(self, it: _Iteration) -> Optional[float]:
        if it.start is None or it.end is None:
            return None
        if self._gpu:
            it.end.synchronize()
            return float(it.start.elapsed_time(it.end)) / 1e3
        return float(it.end - it.start)

    def _follow_stragglers(self, it: _Iteration, seconds: float) -> None:
        assert self._policy is not None
        if it.number < self._warmup:
            return
        dp_group, mp_group = self._groups()
        if dp_group is None:
            return
        device = (
            self._torch.device("cuda", self._torch.cuda.current_device()) if self._gpu else "cpu"
        )
        pipeline_s, slowest, fastest = exchange_times(
            self._torch,
            seconds,
            self._policy.on_base,
            data_parallel_group=dp_group,
            model_parallel_group=mp_group,
            device=device,
        )
        switch = self._policy.observe(it.number, pipeline_s, slowest, fastest)
        if switch is None:
            return
        self.switches.append(switch)
        self._plan = self._policy.plan
        logger.info("perseus: %s", switch)

    def _groups(self) -> tuple[Any, Any]:
        dist = self._torch.distributed
        dp, mp = self._dp_group, self._mp_group
        if dp is None or mp is None:
            from megatron.core import parallel_state

            if dp is None:
                dp = parallel_state.get_data_parallel_group()
            if mp is None:
                mp = parallel_state.get_model_parallel_group()
            self._dp_group, self._mp_group = dp, mp
        if dist.get_world_size(dp) < 2:
            return None, None  # one replica: no stragglers to follow
        return dp, mp

    # -- profile mode ----------------------------------------------------------------

    def _capture_forward(
        self,
        it: _Iteration,
        chunk: int,
        microbatch: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Optional[tuple[tuple[Any, ...], dict[str, Any]]]:
        run = self._profile
        if run is None or microbatch != 0 or it.number != run.iteration or run.done:
            return None
        assert self._forward_args is not None
        arguments = self._forward_args.bind(args, kwargs)
        iterator = arguments.get("data_iterator")
        recorder = _profile.RecordingIterator(iterator) if iterator is not None else None
        if recorder is not None:
            arguments["data_iterator"] = recorder
        run.captures[chunk] = _profile.ChunkCapture(
            chunk=chunk,
            arguments=arguments,
            recorder=recorder,
            input_tensor=_profile._detached_copy(self._torch, arguments.get("input_tensor")),
        )
        return (), arguments

    def _capture_backward(self, it: _Iteration, chunk: int, microbatch: int, grad: Any) -> None:
        run = self._profile
        if run is None or microbatch != 0 or it.number != run.iteration or run.done:
            return
        capture = run.captures.get(chunk)
        if capture is not None:
            capture.output_grad = _profile._detached_copy(self._torch, grad)
            capture.have_backward = True

    def _run_profile(self, it: _Iteration, config: Any, kwargs: dict[str, Any]) -> None:
        run = self._profile
        assert run is not None
        torch = self._torch
        dist = torch.distributed
        from megatron.core import parallel_state

        dp_rank = parallel_state.get_data_parallel_rank()
        tp_size = parallel_state.get_tensor_model_parallel_world_size()
        payload: Optional[dict[str, Any]] = None
        if dp_rank == 0:
            payload = {
                "pp_rank": it.pp_rank,
                "error": None,
                "measurements": [],
                "blocking_power_w": math.nan,
            }
            try:
                if tp_size != 1:
                    raise MegatronIntegrationError(
                        f"profile mode needs tensor_model_parallel_size=1 (it is {tp_size}): the "
                        "ranks of a tensor-parallel group would have to replay in lock step"
                    )
                missing = sorted(
                    set(range(it.chunks)) - {c for c, k in run.captures.items() if k.have_backward}
                )
                if missing:
                    raise MegatronIntegrationError(
                        f"profile mode saw no forward and backward of microbatch 0 for chunk(s) {missing}"
                    )
                payload.update(self._sweep(it, config, run))
            except Exception as error:  # noqa: BLE001 - reported on every rank below
                payload["error"] = f"{type(error).__name__}: {error}"
        payloads: list[Optional[dict[str, Any]]] = [None] * dist.get_world_size()
        dist.all_gather_object(payloads, payload, group=run.group)
        run.captures.clear()
        errors = [
            f"pipeline rank {p['pp_rank']}: {p['error']}" for p in payloads if p and p["error"]
        ]
        if errors:
            raise MegatronIntegrationError("profile mode failed: " + "; ".join(errors))
        rows, blocking_w = _profile.merged_profile(payloads)
        self.profile = run.profile = _profile.profile_from_rows(rows, blocking_w)
        if dist.get_rank() == 0:
            _profile.write_merged(
                run.path,
                rows,
                {
                    "format": "perseus-megatron-profile",
                    "version": 1,
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "megatron_core": self.megatron_version,
                    "schedule": _PLAN_SCHEDULE[it.kind],
                    "pipeline_size": it.pp_size,
                    "virtual_stages": it.chunks,
                    "microbatches": it.microbatches,
                    "blocking_power_w": blocking_w,
                    "blocking_power_per_pipeline_rank_w": {
                        str(p["pp_rank"]): p["blocking_power_w"] for p in payloads if p
                    },
                    "per_rank_sweeps": [
                        str(run.rank_path(p["pp_rank"]).name) for p in payloads if p
                    ],
                    "stage": "chunk * pipeline_size + pipeline_rank",
                },
            )
        dist.barrier(group=run.group)
        run.done = True
        logger.info(
            "perseus: profile of %d stage(s) written to %s", self.profile.num_stages, run.path
        )
        if run.after == "stop":
            raise ProfilingFinished(str(run.path), self.profile)

    def _sweep(self, it: _Iteration, config: Any, run: _profile.ProfileRun) -> dict[str, Any]:
        from ..profiler import profile_stages

        torch = self._torch
        computations = {
            _profile.stage_of(chunk, it.pp_rank, it.pp_size): _profile.make_computations(
                torch,
                self._originals["forward_step"],
                capture,
                getattr(config, "grad_scale_func", None),
            )
            for chunk, capture in sorted(run.captures.items())
        }
        state = _profile.rng_state(torch)
        try:
            options = dict(run.options)
            options.setdefault("progress", False)
            result = profile_stages(
                computations,
                run.rank_path(it.pp_rank),
                mode=run.mode,
                device=self._resolve_device(),
                **options,
            )
        finally:
            _profile.restore_rng_state(torch, state)
        return {
            "measurements": _profile.backward_rows([m.to_json() for m in result.measurements]),
            "blocking_power_w": float(result.blocking_power_w),
        }


def attach(
    frontier: Optional[Frontier] = None,
    *,
    mode: str = "run",
    plan: Optional[Plan] = None,
    switcher: Optional[FrequencySwitcher] = None,
    device: Optional[int] = None,
    stragglers: bool = True,
    tolerance: float = 0.05,
    recovery: Optional[float] = None,
    warmup_iterations: int = 2,
    data_parallel_group: Any = None,
    model_parallel_group: Any = None,
    on_mismatch: str = "raise",
    record: bool = False,
    allow_untested_version: bool = False,
    profile_path: Union[str, Path, None] = None,
    profile_iteration: int = 1,
    after: str = "stop",
    profiler_mode: Optional[str] = None,
    profiler_options: Optional[dict[str, Any]] = None,
    profile_timeout_s: float = 24 * 3600.0,
) -> Attachment:
    """Attach perseus to megatron-core's pipeline schedules.

    Use it as a context manager around the training loop, and get the
    forward-backward function inside it::

        with perseus.megatron.attach(frontier):
            for _ in range(iterations):
                forward_backward = get_forward_backward_func()
                forward_backward(forward_step_func=..., ...)
                optimizer.step()

    perseus wraps ``forward_step``, ``backward_step`` and the three
    forward-backward functions of ``megatron.core.pipeline_parallel.schedules``
    (no pipelining, 1F1B, interleaved 1F1B) and restores them on exit. It
    knows every computation's (chunk, microbatch, forward/backward): forwards
    from ``current_microbatch`` and ``vp_stage``, backwards from the output
    tensor they receive, mapped back to the forward that produced it.

    Parameters
    ----------
    frontier
        From :func:`perseus.optimize`, for this pipeline (schedule, pipeline
        size, virtual stages and microbatches as Megatron runs them). Needed
        in run mode.
    mode
        ``"run"``: before each computation, request its planned SM frequency
        (stream-ordered on the current CUDA stream when a GPU is present).
        ``"profile"``: measure the model's forward and backward per stage and
        chunk across frequencies with :func:`perseus.profile_stages`, and
        write the profile to `profile_path`.
    plan
        Run mode: the plan run while nobody straggles; default
        ``frontier.fastest`` (no slowdown, least energy at that time).
    switcher
        A :class:`~perseus.FrequencySwitcher` to use; default: one made for
        `device` and closed (clocks reset) on exit. One passed in is reset on
        exit, not closed.
    device
        CUDA device index for the switcher and the profiler; default the
        current CUDA device (0 without a GPU).
    stragglers
        Follow data-parallel stragglers: after each iteration the replicas
        all-reduce their iteration times on the data-parallel group, and when
        the slowest replica running the base plan is slower than the fastest
        time seen on it by more than `tolerance`, the others move to
        ``frontier.plan_for(base_time * slowdown)``; they come back when it
        recovers below `recovery`. Each switch is logged (logger
        ``perseus.megatron``) and kept in ``Attachment.switches``. Costs one
        small all-reduce per iteration (plus one on the model-parallel group
        so a pipeline's ranks agree); off with one data-parallel replica.
    tolerance, recovery
        Relative slowdowns to start and to stop following (default
        ``recovery = tolerance / 2``).
    warmup_iterations
        Iterations not used for straggler decisions (the first ones are slow).
    data_parallel_group, model_parallel_group
        Process groups; default megatron's ``parallel_state`` ones.
    on_mismatch
        ``"raise"`` (default): a :class:`ScheduleMismatchError` when what
        Megatron runs differs from what the plan was made for (checked before
        each iteration and at every computation, before its frequency is
        applied), an :class:`UnsupportedScheduleError` for code paths that
        bypass the wrapped functions (the fused MoE 1F1B overlap).
        ``"warn"``: warn once, give the clocks back and keep training.
    record
        Keep every computation seen in ``Attachment.trace``.
    allow_untested_version
        Try a megatron-core outside the supported range (with a warning);
        its schedule functions' signatures are still checked.
    profile_path
        Profile mode: the merged profile's CSV (Zeus's
        ``stage,instruction,frequency,time,energy``) with a ``.json``
        sidecar beside it; each pipeline rank also keeps its own sweep as
        ``<name>.pp<rank>.csv`` (+ ``.json``), from which a re-run resumes.
        Profile stage ``chunk * pipeline_size + pipeline_rank``.
    profile_iteration
        The training iteration whose microbatch 0 is captured and replayed
        (default 1: after one warm-up iteration).
    after
        ``"stop"``: raise :class:`ProfilingFinished` once the profile is
        written, which ends the ``with`` block quietly (training stops);
        ``"continue"``: keep training (unchanged: the replays leave no
        gradients behind and RNG states are restored).
    profiler_mode
        ``"gpu"`` or ``"cpu"`` (wall-clock timing, for tests with a fake
        NVML); default ``"gpu"``.
    profiler_options
        More keyword arguments for :func:`perseus.profile_stages`
        (``frequencies_mhz``, ``window_s``, ``blocking_power_w``, ...).
    profile_timeout_s
        How long ranks wait for each other's sweeps (a gloo group with this
        timeout carries the results).

    Returns
    -------
    Attachment

    Raises
    ------
    MegatronVersionError
        On entering: megatron-core's version or schedule functions are not
        ones perseus knows (supported: megatron-core >=0.16.0,<0.20).
    ImportError
        torch or megatron-core is not installed.
    """
    run = None
    if mode == "profile":
        if profile_path is None:
            raise ValueError("profile mode needs profile_path (where the profile CSV goes)")
        if after not in ("stop", "continue"):
            raise ValueError(f"after must be 'stop' or 'continue', not {after!r}")
        if (
            isinstance(profile_iteration, bool)
            or not isinstance(profile_iteration, int)
            or profile_iteration < 0
        ):
            raise ValueError(
                f"profile_iteration must be an integer >= 0, not {profile_iteration!r}"
            )
        if not (isinstance(profile_timeout_s, (int, float)) and profile_timeout_s > 0):
            raise ValueError(f"profile_timeout_s must be > 0 seconds, not {profile_timeout_s!r}")
        options = dict(profiler_options or {})
        for reserved in ("computations", "output", "mode", "device"):
            if reserved in options:
                raise ValueError(
                    f"profiler_options cannot set {reserved!r}; perseus.megatron sets it"
                )
        path = Path(profile_path)
        if path.suffix == ".json":
            raise ValueError(
                f"profile_path {path} would collide with its .json sidecar; name it .csv"
            )
        run = _profile.ProfileRun(
            path=path,
            iteration=profile_iteration,
            after=after,
            mode=profiler_mode or "gpu",
            options=options,
            timeout_s=float(profile_timeout_s),
        )
    return Attachment(
        frontier,
        mode=mode,
        plan=plan,
        switcher=switcher,
        device=device,
        stragglers=stragglers,
        tolerance=tolerance,
        recovery=recovery,
        warmup_iterations=warmup_iterations,
        data_parallel_group=data_parallel_group,
        model_parallel_group=model_parallel_group,
        on_mismatch=on_mismatch,
        record=record,
        allow_untested_version=allow_untested_version,
        profile=run,
    )

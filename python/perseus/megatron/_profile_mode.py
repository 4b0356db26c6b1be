"""Profile mode: who captures, who sweeps, in what lock step, and where the profile goes.

- Nothing needs torch.distributed before the first schedule call, so
  ``attach`` may be entered before Megatron initialises (its own
  ``init_process_group``, device binding, timeouts). At the first call,
  every rank joins in making gloo copies of the data-parallel and
  model-parallel groups with a long timeout (a sweep takes minutes to
  hours; :class:`~._timing.CpuGroups`, as run mode: no world-sized gloo
  group, which at 1,000 ranks is a full mesh of TCP connections) and, with
  tensor parallelism, one gloo group per tensor-parallel group; what
  profile mode cannot do is refused then, before anything is captured.
- In the capture iteration every rank keeps microbatch 0 of each of its
  chunks (see :mod:`._replay`). Data-parallel replica 0 then sweeps: each
  pipeline rank its own chunks on its own GPU, all pipeline ranks at once.
- With tensor parallelism the ranks of a stage run its computations
  together (their collectives must match): the group's first rank runs
  :func:`perseus.profile_stages` and, before each call of a computation,
  broadcasts which one and its GPU's SM clock on the group's gloo group; the
  others lock their GPU at that clock and make the same call. The stage's
  measurement is the first rank's GPU (each GPU of a tensor-parallel stage
  runs the same clock and work); the sidecar records how many GPUs a stage
  has, which the run-mode metrics multiply by.
- Every rank then joins one gather along those groups (the pipeline's ranks,
  then the replicas); rank 0 writes the merged profile, and a barrier along
  the same two groups holds every rank until it is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from .._sidecar import BLOCKING_POWER_KEY
from ..pipeline_spec import PipelineSpec
from ..profile import INSTRUCTIONS, Profile
from . import _replay
from ._errors import MegatronIntegrationError, ProfilingFinished
from ._options import ProfileOptions
from ._timing import CpuGroups

__all__ = ["Layout", "ProfileSession"]

logger = logging.getLogger("perseus.megatron")

_RUN, _STOP = 1, 0  # lock-step commands: run computation k at clock f; stop


@dataclass(frozen=True)
class Layout:
    """Where this rank sits in Megatron's parallel layout (read at the first schedule call)."""

    rank: int
    world_size: int
    data_parallel_rank: int
    data_parallel_size: int
    pipeline_rank: int
    pipeline_size: int
    tensor_rank: int
    tensor_size: int
    context_size: int
    expert_size: int

    @staticmethod
    def read(torch: Any) -> Layout:
        from megatron.core import parallel_state as ps

        dist = torch.distributed
        if not dist.is_initialized() or not ps.model_parallel_is_initialized():
            raise MegatronIntegrationError(
                "perseus found neither torch.distributed nor megatron's parallel state "
                "initialised at the first forward-backward call; initialise Megatron "
                "(initialize_megatron, or parallel_state.initialize_model_parallel) before training"
            )
        return Layout(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            data_parallel_rank=ps.get_data_parallel_rank(),
            data_parallel_size=ps.get_data_parallel_world_size(),
            pipeline_rank=ps.get_pipeline_model_parallel_rank(),
            pipeline_size=ps.get_pipeline_model_parallel_world_size(),
            tensor_rank=ps.get_tensor_model_parallel_rank(),
            tensor_size=ps.get_tensor_model_parallel_world_size(),
            context_size=ps.get_context_parallel_world_size(),
            expert_size=ps.get_expert_model_parallel_world_size(),
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "rank": self.rank,
            "dp_rank": self.data_parallel_rank,
            "pp_rank": self.pipeline_rank,
            "tp_rank": self.tensor_rank,
        }


def unsupported_for_profiling(expert_size: int, context_size: int, config: Any) -> Optional[str]:
    """What makes profile mode impossible, naming the setting; None if nothing.

    `config` is megatron's model config, or Megatron-LM's parsed arguments
    (the same names).
    """
    if expert_size > 1:
        return (
            f"expert_model_parallel_size={expert_size}: expert parallelism exchanges tokens with "
            "ranks of other data-parallel replicas, which do not replay with replica 0"
        )
    if context_size > 1:
        return (
            f"context_parallel_size={context_size}: context-parallel replays are not supported "
            "yet (profile with context_parallel_size=1; the per-stage times scale)"
        )
    if getattr(config, "overlap_moe_expert_parallel_comm", False):
        return "overlap_moe_expert_parallel_comm=True (fused MoE forward-backward steps)"
    return None


class ProfileSession:
    """Profile mode of one attachment."""

    def __init__(self, options: ProfileOptions) -> None:
        self.options = options
        self.path = Path(options.path)
        self.captures: dict[int, _replay.ChunkCapture] = {}
        self.done = False
        self.profile: Optional[Profile] = None
        self._groups: Optional[CpuGroups] = None
        self._lockstep: Any = None
        self._lockstep_ranks: list[int] = []
        self.layout: Optional[Layout] = None

    # -- the first schedule call ---------------------------------------------------------

    def setup(self, torch: Any, layout: Layout) -> None:
        """Make perseus's gloo groups (collective: every rank, at the first schedule call)."""
        from megatron.core import parallel_state as ps

        dist = torch.distributed
        timeout = timedelta(seconds=float(self.options.timeout_s))
        self.layout = layout
        self._groups = CpuGroups(
            torch,
            ps.get_data_parallel_group(),
            ps.get_model_parallel_group(),
            timeout_s=float(self.options.timeout_s),
        )
        if layout.tensor_size > 1:
            mine = sorted(dist.get_process_group_ranks(ps.get_tensor_model_parallel_group()))
            everyone: list[Any] = [None] * layout.world_size
            dist.all_gather_object(everyone, mine)  # once, on the default group
            lists = sorted({tuple(x) for x in everyone})
            self._lockstep, _ = dist.new_subgroups_by_enumeration(
                [list(x) for x in lists], timeout=timeout, backend="gloo"
            )
            self._lockstep_ranks = mine

    def close(self, torch: Any) -> None:
        """Destroy perseus's groups (local to each rank)."""
        dist = torch.distributed
        if not dist.is_initialized():
            return
        if self._groups is not None:
            self._groups.close()
        group = self._lockstep
        if group is not None and group is not dist.GroupMember.NON_GROUP_MEMBER:
            try:
                dist.destroy_process_group(group)
            except Exception:  # noqa: BLE001 - already gone with the default group
                pass
        self._groups = self._lockstep = None

    def capturing(self, iteration: int, microbatch: int) -> bool:
        return not self.done and iteration == self.options.iteration and microbatch == 0

    # -- the capture iteration ------------------------------------------------------------

    def capture_forward(self, torch: Any, chunk: int, arguments: dict[str, Any]) -> dict[str, Any]:
        """Keep this forward's arguments; returns them with the data iterator recorded."""
        iterator = arguments.get("data_iterator")
        recorder = _replay.RecordingIterator(iterator) if iterator is not None else None
        if recorder is not None:
            arguments["data_iterator"] = recorder
        self.captures[chunk] = _replay.ChunkCapture(
            chunk=chunk,
            arguments=arguments,
            recorder=recorder,
            input_tensor=_replay._detached_copy(torch, arguments.get("input_tensor")),
        )
        return arguments

    def capture_backward(self, torch: Any, chunk: int, arguments: dict[str, Any]) -> None:
        capture = self.captures.get(chunk)
        if capture is None:
            return
        capture.output_grad = _replay._detached_copy(torch, arguments.get("output_tensor_grad"))
        capture.backward_arguments = {
            k: v
            for k, v in arguments.items()
            if k not in ("input_tensor", "output_tensor", "output_tensor_grad")
        }
        capture.have_backward = True

    # -- after the capture iteration ------------------------------------------------------

    def finish(
        self,
        torch: Any,
        *,
        schedule: str,
        chunks: int,
        microbatches: int,
        config: Any,
        originals: dict[str, Callable[..., Any]],
        deallocate: Callable[[Any, bool], None],
        device: int,
        megatron_version: str,
        fingerprint: Optional[dict[str, Any]] = None,
    ) -> Profile:
        """Sweep, gather, write; raises ProfilingFinished with ``after="stop"``."""
        layout = self.layout
        groups = self._groups
        assert layout is not None
        assert groups is not None
        payload: dict[str, Any] = {
            "pp_rank": layout.pipeline_rank,
            "tp_rank": layout.tensor_rank,
            "error": None,
            "measurements": [],
            "blocking_power_w": float("nan"),
        }
        if layout.data_parallel_rank == 0:
            try:
                missing = sorted(
                    set(range(chunks)) - {c for c, k in self.captures.items() if k.have_backward}
                )
                if missing:
                    raise MegatronIntegrationError(
                        f"profile mode saw no forward and backward of microbatch 0 for chunk(s) {missing}"
                    )
                payload.update(self._sweep(torch, layout, originals, deallocate, device))
            except Exception as error:  # noqa: BLE001 - reported on every rank below
                payload["error"] = f"{type(error).__name__}: {error}"
        payloads = groups.gather(payload)
        self.captures.clear()
        errors = [
            f"pipeline rank {p['pp_rank']}, tensor rank {p['tp_rank']}: {p['error']}"
            for p in payloads
            if p and p["error"]
        ]
        if errors:
            raise MegatronIntegrationError("profile mode failed: " + "; ".join(errors))
        leaders = [p for p in payloads if p and p["measurements"]]
        rows, blocking_w = _replay.merged_profile(leaders)
        self.profile = _replay.profile_from_rows(rows, blocking_w)
        if layout.rank == 0:
            _replay.write_merged(
                self.path,
                rows,
                {
                    "format": "perseus-megatron-profile",
                    "version": 2,
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "megatron_core": megatron_version,
                    "schedule": schedule,
                    "pipeline_size": layout.pipeline_size,
                    "virtual_stages": chunks,
                    "microbatches": microbatches,
                    "tensor_parallel_size": layout.tensor_size,
                    "gpus_per_stage": layout.tensor_size,
                    "recompute_granularity": getattr(config, "recompute_granularity", None),
                    # What the measurement depended on: `perseus optimize` copies it into the
                    # frontier, and run mode compares it with the job.
                    "fingerprint": fingerprint or {},
                    BLOCKING_POWER_KEY: blocking_w,
                    "blocking_power_per_pipeline_rank_w": {
                        str(p["pp_rank"]): p["blocking_power_w"] for p in leaders
                    },
                    "per_rank_sweeps": [
                        _replay.rank_path(self.path, p["pp_rank"]).name for p in leaders
                    ],
                    "stage": "chunk * pipeline_size + pipeline_rank",
                    "energy": "one GPU per stage (the first tensor-parallel rank's)",
                },
            )
        groups.barrier()  # nobody goes on before rank 0 has written the profile
        self.done = True
        if layout.rank == 0:
            logger.info(
                "perseus: profile of %d stage(s) written to %s", self.profile.num_stages, self.path
            )
        if self.options.after == "stop":
            raise ProfilingFinished(str(self.path), self.profile)
        return self.profile

    def _sweep(
        self,
        torch: Any,
        layout: Layout,
        originals: dict[str, Callable[..., Any]],
        deallocate: Callable[[Any, bool], None],
        device: int,
    ) -> dict[str, Any]:
        from ..profiler import profile_stages

        computations = {
            _replay.stage_of(chunk, layout.pipeline_rank, layout.pipeline_size): (
                _replay.make_computations(
                    torch,
                    originals["forward_step"],
                    originals["backward_step"],
                    capture,
                    deallocate,
                )
            )
            for chunk, capture in sorted(self.captures.items())
        }
        chunks = [capture.arguments["model"] for _, capture in sorted(self.captures.items())]
        options = dict(self.options.profiler_options)
        options.setdefault("progress", False)
        lock_clocks = bool(options.get("lock_clocks", True))
        leader = layout.tensor_size == 1 or layout.tensor_rank == 0
        state = _replay.rng_state(torch)
        try:
            with _replay.GradientGuard(torch, chunks):
                if not leader:
                    self._follow(torch, computations, device, lock_clocks)
                    return {}
                if layout.tensor_size > 1:
                    computations = self._lead(torch, computations, device, lock_clocks)
                try:
                    result = profile_stages(
                        computations,
                        _replay.rank_path(self.path, layout.pipeline_rank),
                        mode=self.options.profiler_mode,
                        device=device,
                        **options,
                    )
                finally:
                    if layout.tensor_size > 1:
                        self._command(torch, _STOP, 0, 0)
        finally:
            _replay.restore_rng_state(torch, state)
        return {
            "measurements": _replay.backward_rows([m.to_json() for m in result.measurements]),
            "blocking_power_w": float(result.blocking_power_w),
        }

    # -- tensor-parallel lock step --------------------------------------------------------

    def _command(self, torch: Any, op: int, index: int, mhz: int) -> list[int]:
        command = torch.tensor([op, index, mhz], dtype=torch.int64)
        torch.distributed.broadcast(command, src=self._lockstep_ranks[0], group=self._lockstep)
        return [int(x) for x in command.tolist()]

    def _lead(
        self,
        torch: Any,
        computations: dict[int, dict[str, Callable[[], None]]],
        device: int,
        lock_clocks: bool,
    ) -> dict[int, dict[str, Callable[[], None]]]:
        """The first tensor-parallel rank's callables: announce each call, then make it."""
        from ..switcher import NvmlDevice

        nvml = NvmlDevice(device) if lock_clocks else None
        codes = _call_codes(computations)
        led: dict[int, dict[str, Callable[[], None]]] = {}
        for stage in sorted(computations):
            led[stage] = {}
            for instruction in INSTRUCTIONS:
                index = codes[stage, instruction]
                fn = computations[stage][instruction]

                def call(fn: Callable[[], None] = fn, index: int = index) -> None:
                    mhz = int(nvml.clock_mhz("sm")) if nvml is not None else 0
                    self._command(torch, _RUN, index, mhz)
                    fn()

                led[stage][instruction] = call
        return led

    def _follow(
        self,
        torch: Any,
        computations: dict[int, dict[str, Callable[[], None]]],
        device: int,
        lock_clocks: bool,
    ) -> None:
        """Another tensor-parallel rank: make the calls the first rank announces, at its clock."""
        from ..switcher import FrequencySwitcher

        codes = _call_codes(computations)
        calls = {
            codes[stage, instruction]: fn
            for stage, pair in computations.items()
            for instruction, fn in pair.items()
        }
        switcher = FrequencySwitcher(device) if lock_clocks else None
        try:
            while True:
                op, index, mhz = self._command(torch, 0, 0, 0)
                if op == _STOP:
                    return
                if switcher is not None and mhz > 0:
                    switcher.set(mhz)  # equal requests cost nothing
                calls[index]()
        finally:
            if switcher is not None:
                switcher.close()


def _call_codes(
    computations: dict[int, dict[str, Callable[[], None]]],
) -> dict[tuple[int, str], int]:
    """Each (stage, instruction)'s code in the lock step: its group, as the core numbers groups.

    A group depends only on its stage and instruction, so a one-microbatch
    1F1B pipeline over these stages names every group; the lead and the
    followers of a stage hold the same stages and so agree on every code.
    """
    pipeline = PipelineSpec("1f1b", max(computations) + 1, 1, 1).pipeline()
    return {
        (int(stage), INSTRUCTIONS[int(kind)]): int(group)
        for stage, kind, group in zip(pipeline.stage, pipeline.instruction, pipeline.group)
    }

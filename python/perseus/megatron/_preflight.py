"""Checks of an attachment against Megatron-LM's parsed arguments, before training.

Megatron-LM's arguments say, before the model is built, what every iteration
will run: the pipeline size, the virtual stages per GPU (and so the
schedule), the microbatch count ``global_batch_size / (micro_batch_size *
data_parallel_size)`` (each step of a ``--rampup-batch-size`` ramp-up too),
the interleaving group, context and expert parallelism. Everything here is
checked against every frontier when the arguments are known, so that a plan
that cannot fit fails in seconds, not after model build, checkpoint load and
dataset build. The same checks run again at every iteration, against what
megatron-core actually runs (:mod:`._following`).

:func:`refuse_from_args` also refuses, at ``attach`` (or at the first
iteration with a Megatron-LM that parses its arguments late), what neither
mode can follow: full-iteration CUDA graphs, and profile mode's unsupported
parallelisms.

Arguments that are absent (a parser that has only perseus's arguments, or
an older Megatron-LM) are not checked here; the per-iteration checks still
catch them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Optional

from ..frontier import Frontier
from ._arguments import Settings
from ._compat import FULL_GRAPH_MESSAGE, full_iteration_graphs, unsupported_schedule
from ._errors import ScheduleMismatchError, UnsupportedScheduleError
from ._fingerprint import differences, from_arguments
from ._following import PlanWarning, WorkloadKey
from ._once import warn_for_job
from ._profile_mode import unsupported_for_profiling

__all__ = [
    "JobShape",
    "check_frontiers",
    "fingerprint_reaction",
    "megatron_lm_args",
    "refuse_from_args",
    "run_mode_parallelism_problem",
    "shape_of",
]


class JobShape:
    """What Megatron-LM's arguments say each iteration runs (None: not said)."""

    def __init__(
        self,
        pipeline_size: Optional[int],
        virtual_stages: Optional[int],
        microbatches: Optional[list[int]],
        group_size: Optional[int],
        ramp_up: bool,
    ) -> None:
        self.pipeline_size = pipeline_size
        self.virtual_stages = virtual_stages
        self.microbatches = microbatches  # every count the job runs, ramp-up steps included
        self.group_size = group_size
        self.ramp_up = ramp_up

    @property
    def schedule(self) -> Optional[str]:
        """The perseus schedule megatron-core will run (no pipelining runs as 1F1B on one GPU)."""
        if self.pipeline_size is None or self.virtual_stages is None:
            return None
        return "interleaved-1f1b" if self.virtual_stages > 1 else "1f1b"


def _int(args: Any, name: str) -> Optional[int]:
    value = getattr(args, name, None)
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _ramp_up_counts(args: Any, global_batch: int, per_microbatch: int) -> Optional[list[int]]:
    """The microbatch counts of ``--rampup-batch-size START INCREMENT SAMPLES`` (None: none)."""
    ramp = getattr(args, "rampup_batch_size", None)
    if not ramp:
        return None
    try:
        start, increment = int(ramp[0]), int(ramp[1])
    except (TypeError, ValueError, IndexError):
        return None
    if start <= 0 or increment <= 0:
        return None
    sizes = [*range(start, global_batch, increment), global_batch]
    return sorted({size // per_microbatch for size in sizes if size >= per_microbatch})


def shape_of(args: Any) -> JobShape:
    """What Megatron-LM's (validated) arguments say about every iteration."""
    pipeline = _int(args, "pipeline_model_parallel_size")
    virtual: Optional[int] = None
    if pipeline is not None:
        virtual = _int(args, "virtual_pipeline_model_parallel_size") or 1
    microbatches: Optional[list[int]] = None
    global_batch = _int(args, "global_batch_size")
    micro = _int(args, "micro_batch_size")
    data = _int(args, "data_parallel_size")
    ramp_up = False
    if global_batch and micro and data:
        per_microbatch = micro * data
        counts = _ramp_up_counts(args, global_batch, per_microbatch)
        ramp_up = counts is not None
        microbatches = counts if counts is not None else [global_batch // per_microbatch]
    group = _int(args, "microbatch_group_size_per_vp_stage")
    return JobShape(pipeline, virtual, microbatches, group, ramp_up)


def run_mode_parallelism_problem(context_size: int, expert_size: int) -> Optional[str]:
    """Context or expert parallelism, which run mode cannot follow; None if neither."""
    if context_size > 1:
        return (
            f"context_parallel_size={context_size}: perseus's profiles and plans are made per "
            "pipeline stage without context parallelism (profile mode refuses it too), so no "
            "frontier can describe this job. Run with context_parallel_size=1 or --perseus-mode off"
        )
    if expert_size > 1:
        return (
            f"expert_model_parallel_size={expert_size}: expert parallelism exchanges tokens "
            "across data-parallel replicas inside each computation, which perseus's plans (made "
            "from profiles that refuse it) do not model. Run with expert_model_parallel_size=1 or "
            "--perseus-mode off"
        )
    return None


def fingerprint_reaction(on_mismatch: str) -> Callable[[str], None]:
    """What a fingerprint that differs does: raise (default) or warn (``on_mismatch="warn"``)."""

    def react(message: str) -> None:
        if on_mismatch == "raise":
            raise ScheduleMismatchError(message + " (or pass on_mismatch='warn' to run it anyway)")
        # Every rank finds the same difference: one warning for the job (rank 0).
        warn_for_job(message + "; running it anyway (on_mismatch='warn')", PlanWarning)

    return react


def check_frontiers(
    frontiers: dict[WorkloadKey, Frontier],
    args: Any,
    *,
    unknown_workload: str,
    origin: Optional[dict[WorkloadKey, str]] = None,
    on_fingerprint: Optional[Callable[[str], None]] = None,
) -> None:
    """Refuse frontiers that cannot fit the job Megatron-LM's `args` describe.

    Raises
    ------
    UnsupportedScheduleError
        Context or expert parallelism.
    ScheduleMismatchError
        A frontier whose schedule, pipeline size or virtual stages differ
        from the job's, an interleaving group perseus does not model, or a
        microbatch count the job runs with no frontier for it (unless
        `unknown_workload` is ``"unlocked"``). The message names the
        frontier, the field, both values and the Megatron-LM argument.

    A frontier whose fingerprint differs from what the arguments say (tensor
    parallelism, recomputation, sequence length, ...) is handed to
    `on_fingerprint` with a message naming each differing field.
    """
    problem = run_mode_parallelism_problem(
        _int(args, "context_parallel_size") or 1, _int(args, "expert_model_parallel_size") or 1
    )
    if problem is not None:
        raise UnsupportedScheduleError(f"perseus's run mode cannot run with {problem}")
    shape = shape_of(args)
    problems: list[str] = []
    for key, frontier in sorted(frontiers.items(), key=lambda item: str(item[0])):
        name = (origin or {}).get(key) or f"the frontier for {key} microbatches"
        spec = frontier.spec
        if shape.pipeline_size is not None and spec.num_gpus != shape.pipeline_size:
            problems.append(
                f"{name}: pipeline size {spec.num_gpus}, but --pipeline-model-parallel-size is "
                f"{shape.pipeline_size}"
            )
        if shape.virtual_stages is not None and spec.virtual_stages != shape.virtual_stages:
            problems.append(
                f"{name}: {spec.virtual_stages} virtual stage(s) per GPU, but Megatron-LM's "
                f"virtual_pipeline_model_parallel_size is {shape.virtual_stages}"
            )
        elif shape.schedule is not None and spec.schedule != shape.schedule:
            problems.append(
                f"{name}: schedule {spec.schedule!r}, but Megatron-LM runs {shape.schedule!r}"
            )
    if (
        shape.virtual_stages is not None
        and shape.virtual_stages > 1
        and shape.group_size is not None
        and shape.pipeline_size is not None
        and shape.group_size != shape.pipeline_size
    ):
        problems.append(
            f"--microbatch-group-size-per-virtual-stage is {shape.group_size}; perseus's "
            f"interleaved order groups as many microbatches as pipeline stages "
            f"({shape.pipeline_size})"
        )
    if shape.microbatches is not None and unknown_workload == "raise":
        known = {key if isinstance(key, int) else key[0] for key in frontiers}
        missing = [m for m in shape.microbatches if m not in known]
        if missing:
            source = (
                "the --rampup-batch-size ramp-up runs"
                if shape.ramp_up
                else "--global-batch-size / (--micro-batch-size x data-parallel size) is"
            )
            counts = ", ".join(str(m) for m in missing)
            have = ", ".join(str(m) for m in sorted(known))
            problems.append(
                f"{source} {counts} microbatch(es) per iteration, and there is no frontier for "
                f"{counts} (frontiers for: {have}). Make one with `perseus optimize -M <count>` "
                "for each, or opt in to running those iterations with clocks unlocked "
                "(--perseus-unknown-workload unlocked, attach(..., unknown_workload='unlocked'))"
            )
    if problems:
        raise ScheduleMismatchError(
            "perseus: the frontier does not fit this Megatron-LM job: " + "; ".join(problems)
        )
    if on_fingerprint is not None:
        job = from_arguments(args)
        for key, frontier in sorted(frontiers.items(), key=lambda item: str(item[0])):
            found = differences(frontier.fingerprint, job)
            if found:
                name = (origin or {}).get(key) or f"the frontier for {key} microbatches"
                on_fingerprint(
                    f"perseus: {name} was made from a profile of another setup: "
                    f"{'; '.join(found)}. Its plans' times and energies do not describe this "
                    "job; profile this job again and re-optimize"
                )


def megatron_lm_args() -> Any:
    """Megatron-LM's parsed arguments if it has parsed them already (never imports it)."""
    module = sys.modules.get("megatron.training.global_vars")
    return getattr(module, "_GLOBAL_ARGS", None) if module is not None else None


def refuse_from_args(settings: Optional[Settings], args: Any) -> None:
    """What cannot work, refused as soon as Megatron-LM's arguments are parsed."""
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
        raise UnsupportedScheduleError(f"perseus cannot follow this Megatron schedule: {bypass}")
    if settings.frontiers:
        check_frontiers(
            settings.frontiers,
            args,
            unknown_workload=settings.unknown_workload,
            on_fingerprint=fingerprint_reaction(settings.on_mismatch),
        )

"""Pipeline schedules: the order in which each GPU runs its computations.

The orders are built by the C++ core (``cpp/pipeline.cpp``) and follow
Megatron-LM's schedules; this module checks arguments and presents them.
"""

from __future__ import annotations

from . import _core
from .errors import ProfileError
from .profile import INSTRUCTIONS

__all__ = ["SCHEDULES", "pipeline_order"]

SCHEDULES = ("1f1b", "gpipe", "interleaved-1f1b")
"""Schedule names perseus knows."""


def check_pipeline_args(
    schedule: str, num_gpus: int, microbatches: int, virtual_stages: int
) -> None:
    """Raise `ProfileError` naming the argument when the pipeline cannot run."""
    if schedule not in SCHEDULES:
        raise ProfileError(
            f"schedule {schedule!r} is not known; choose one of: {', '.join(SCHEDULES)}"
        )
    for name, value in (("microbatches", microbatches), ("virtual_stages", virtual_stages)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProfileError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
        raise ProfileError(f"the number of pipeline GPUs must be an integer >= 1, got {num_gpus!r}")
    if schedule == "interleaved-1f1b":
        if virtual_stages < 2:
            raise ProfileError(
                "the interleaved-1f1b schedule needs virtual_stages >= 2 "
                f"(got {virtual_stages}); use '1f1b' for one chunk per GPU"
            )
        if microbatches < num_gpus:
            raise ProfileError(
                f"the interleaved-1f1b schedule cannot run {microbatches} microbatches "
                f"on {num_gpus} GPUs: it needs at least as many microbatches as GPUs"
            )
    elif virtual_stages != 1:
        raise ProfileError(
            f"the {schedule} schedule has one chunk per GPU; virtual_stages={virtual_stages} "
            "needs schedule='interleaved-1f1b'"
        )


def build_pipeline(
    schedule: str, num_gpus: int, microbatches: int, virtual_stages: int = 1
) -> _core.Pipeline:
    """Check the arguments and build the core's `Pipeline`."""
    check_pipeline_args(schedule, num_gpus, microbatches, virtual_stages)
    return _core.Pipeline(schedule, num_gpus, virtual_stages, microbatches)


def pipeline_order(
    schedule: str, num_gpus: int, microbatches: int, virtual_stages: int = 1
) -> list[list[tuple[str, int, int]]]:
    """Each GPU's computations in execution order.

    Parameters
    ----------
    schedule : str
        ``"1f1b"``, ``"gpipe"`` or ``"interleaved-1f1b"``.
    num_gpus : int
        Pipeline-parallel size (GPUs in one pipeline).
    microbatches : int
        Microbatches per iteration.
    virtual_stages : int
        Model chunks per GPU (interleaved schedule only).

    Returns
    -------
    list of list of (instruction, chunk, microbatch)
        One list per GPU. ``chunk`` is the virtual chunk on that GPU; the
        profile stage of the computation is ``chunk * num_gpus + gpu``.

    Examples
    --------
    >>> pipeline_order("1f1b", num_gpus=2, microbatches=2)[0]
    [('forward', 0, 0), ('forward', 0, 1), ('backward', 0, 0), ('backward', 0, 1)]
    """
    pipeline = build_pipeline(schedule, num_gpus, microbatches, virtual_stages)
    chunk, microbatch, kind = pipeline.chunk, pipeline.microbatch, pipeline.instruction
    return [
        [(INSTRUCTIONS[kind[i]], int(chunk[i]), int(microbatch[i])) for i in pipeline.order(gpu)]
        for gpu in range(num_gpus)
    ]

"""Pipeline schedules: the order in which each GPU runs its computations.

The orders are built by the C++ core (``cpp/pipeline.cpp``) and follow
Megatron-LM's schedules; this module checks arguments and presents them.
"""

from __future__ import annotations

from . import _core
from ._validate import integer
from .errors import ProfileError
from .profile import INSTRUCTIONS

__all__ = ["SCHEDULES", "pipeline_order"]

SCHEDULES: tuple[str, ...] = tuple(_core.SCHEDULES)
"""Schedule names perseus knows (the core's list)."""


def count_argument(name: str, value: object) -> int:
    """`value` as an int >= 1 (numpy integers welcome), or `ProfileError` naming `name`."""
    count = integer(value, name, low=1, error=ProfileError)
    if count > 2**31 - 1:  # the core counts in int32
        raise ProfileError(f"{name}={value!r} is too large (at most 2^31-1)")
    return count


def check_pipeline_args(
    schedule: str, num_gpus: int, microbatches: int, virtual_stages: int
) -> tuple[int, int, int]:
    """Check the pipeline's arguments; returns (num_gpus, microbatches, virtual_stages) as ints.

    Raises `ProfileError` naming the argument when the pipeline cannot run. The
    types are checked here; the schedule rules are the core's (`cpp/pipeline.cpp`,
    ``check_schedule``), so Python, the CLI and C++ cannot disagree.
    """
    if not isinstance(schedule, str):
        raise ProfileError(
            f"schedule must be a name, one of {', '.join(SCHEDULES)}; got {schedule!r}"
        )
    microbatches = count_argument("microbatches", microbatches)
    virtual_stages = count_argument("virtual_stages", virtual_stages)
    num_gpus = count_argument("the number of pipeline GPUs", num_gpus)
    try:
        _core.check_schedule(schedule, num_gpus, virtual_stages, microbatches)
    except ValueError as error:
        raise ProfileError(str(error)) from None
    return num_gpus, microbatches, virtual_stages


def build_pipeline(
    schedule: str, num_gpus: int, microbatches: int, virtual_stages: int = 1
) -> _core.Pipeline:
    """Check the arguments and build the core's `Pipeline`.

    Raises `ProfileError` for bad arguments and for an order that would
    deadlock (some interleaved sizes whose microbatches are not a multiple of
    the GPUs).
    """
    num_gpus, microbatches, virtual_stages = check_pipeline_args(
        schedule, num_gpus, microbatches, virtual_stages
    )
    try:
        return _core.Pipeline(schedule, num_gpus, virtual_stages, microbatches)
    except ValueError as error:
        raise ProfileError(str(error)) from None


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

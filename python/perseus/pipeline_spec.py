"""`PipelineSpec`: the pipeline a plan is for (schedule, GPUs, chunks, microbatches).

It names computations as users do, (profile stage, instruction, microbatch),
and turns them into the core's ids; the core's `Pipeline` for a spec is built
once and cached.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from . import _core
from ._validate import is_integer
from ._zeus_format import INSTRUCTIONS
from .schedule import build_pipeline

__all__ = ["PipelineSpec"]


@dataclass(frozen=True)
class PipelineSpec:
    """The pipeline a plan was made for."""

    schedule: str
    num_gpus: int
    virtual_stages: int
    microbatches: int

    @property
    def num_stages(self) -> int:
        """Model chunks (profile stages): GPUs times virtual stages."""
        return self.num_gpus * self.virtual_stages

    @property
    def num_computations(self) -> int:
        return 2 * self.num_stages * self.microbatches

    def pipeline(self) -> _core.Pipeline:
        """The core's pipeline (schedule orders, ids, groups); built once per spec."""
        return _pipeline_of(self)

    def computation_id(self, stage: int, instruction: str, microbatch: int) -> int:
        """Core id of a computation, with a clear error for a bad key."""
        if not _is_index(stage, self.num_stages):
            raise ValueError(
                f"stage {stage!r} is out of range: this pipeline has {self.num_stages} stages"
            )
        if instruction not in INSTRUCTIONS:
            raise ValueError(f"instruction {instruction!r} is not one of {INSTRUCTIONS}")
        if not _is_index(microbatch, self.microbatches):
            raise ValueError(
                f"microbatch {microbatch!r} is out of range: this pipeline runs {self.microbatches}"
            )
        return int(
            self.pipeline().id_of(int(stage), int(microbatch), INSTRUCTIONS.index(instruction))
        )


@functools.lru_cache(maxsize=16)
def _pipeline_of(spec: PipelineSpec) -> _core.Pipeline:
    return build_pipeline(spec.schedule, spec.num_gpus, spec.microbatches, spec.virtual_stages)


def _is_index(value: object, size: int) -> bool:
    return is_integer(value) and 0 <= int(value) < size

"""What a profile's measurement depended on, and whether a job still matches it.

Profile mode records a fingerprint in the profile's sidecar (``gpt.json``,
key ``fingerprint``): the GPU model, the megatron-core release, the pipeline
(schedule, size, virtual stages), tensor, context and expert parallelism,
activation recomputation, sequence length, micro-batch size, dtype and
layers per stage. ``perseus optimize`` copies it into the frontier, and run
mode compares it with the job it runs in: a stage that was timed with TP2
and full recomputation predicts nothing about a TP1 job without it. Fields
one side does not know (None, or absent) are not compared.

The same names are read from megatron-core's model config at an iteration
and from Megatron-LM's parsed arguments before training (where they exist).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["FIELDS", "differences", "fingerprint_of", "from_arguments", "gpu_model"]

#: Every field, in the order messages list them.
FIELDS = (
    "gpu_model",
    "megatron_core",
    "schedule",
    "pipeline_size",
    "virtual_stages",
    "tensor_parallel_size",
    "context_parallel_size",
    "expert_parallel_size",
    "recompute_granularity",
    "recompute_method",
    "seq_length",
    "micro_batch_size",
    "dtype",
    "layers_per_stage",
)

Value = Optional[object]


def _plain(value: Any) -> Value:
    """A JSON-friendly value: int, str, bool or None (a torch dtype as its name)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "is_floating_point") or type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return str(value)


def _recomputation(source: Any, name: str) -> Value:
    """Recomputation settings, where None means "none" (a setting we know), not unknown."""
    if not hasattr(source, name):
        return None
    value = getattr(source, name)
    return "none" if value is None else _plain(value)


def gpu_model(torch: Any, device: Optional[int]) -> Optional[str]:
    """The GPU's model name (``torch.cuda.get_device_name``); None without CUDA."""
    try:
        if device is None or not torch.cuda.is_available():
            return None
        return str(torch.cuda.get_device_name(device))
    except Exception:  # noqa: BLE001 - a name we cannot read is one we do not compare
        return None


def _dtype_of_arguments(args: Any) -> Value:
    if getattr(args, "bf16", False):
        return "bfloat16"
    if getattr(args, "fp16", False):
        return "float16"
    params = getattr(args, "params_dtype", None)
    return _plain(params) if params is not None else None


def _layers_per_stage(layers: Any, pipeline: Optional[int], virtual: Optional[int]) -> Value:
    if not isinstance(layers, int) or not pipeline or not virtual:
        return None
    stages = pipeline * virtual
    return layers // stages if layers % stages == 0 else None


def fingerprint_of(
    config: Any,
    *,
    gpu: Optional[str],
    megatron_version: str,
    schedule: str,
    pipeline_size: int,
    virtual_stages: int,
    seq_length: Optional[int],
    micro_batch_size: Optional[int],
) -> dict[str, Value]:
    """The fingerprint of what runs now: megatron-core's model `config` and the iteration's shape."""
    return {
        "gpu_model": gpu,
        "megatron_core": megatron_version or None,
        "schedule": schedule,
        "pipeline_size": int(pipeline_size),
        "virtual_stages": int(virtual_stages),
        "tensor_parallel_size": _plain(getattr(config, "tensor_model_parallel_size", None)),
        "context_parallel_size": _plain(getattr(config, "context_parallel_size", None)),
        "expert_parallel_size": _plain(getattr(config, "expert_model_parallel_size", None)),
        "recompute_granularity": _recomputation(config, "recompute_granularity"),
        "recompute_method": _recomputation(config, "recompute_method"),
        "seq_length": None if seq_length is None else int(seq_length),
        "micro_batch_size": None if micro_batch_size is None else int(micro_batch_size),
        "dtype": _plain(getattr(config, "params_dtype", None)),
        "layers_per_stage": _layers_per_stage(
            getattr(config, "num_layers", None), pipeline_size, virtual_stages
        ),
    }


def from_arguments(args: Any) -> dict[str, Value]:
    """The fields Megatron-LM's parsed arguments say, before anything is built (None: not said)."""
    pipeline = getattr(args, "pipeline_model_parallel_size", None)
    virtual = getattr(args, "virtual_pipeline_model_parallel_size", None) or (
        1 if pipeline is not None else None
    )
    return {
        "tensor_parallel_size": _plain(getattr(args, "tensor_model_parallel_size", None)),
        "context_parallel_size": _plain(getattr(args, "context_parallel_size", None)),
        "expert_parallel_size": _plain(getattr(args, "expert_model_parallel_size", None)),
        "recompute_granularity": _recomputation(args, "recompute_granularity"),
        "recompute_method": _recomputation(args, "recompute_method"),
        "seq_length": _plain(getattr(args, "seq_length", None)),
        "micro_batch_size": _plain(getattr(args, "micro_batch_size", None)),
        "dtype": _dtype_of_arguments(args),
        "layers_per_stage": _layers_per_stage(getattr(args, "num_layers", None), pipeline, virtual),
    }


def differences(recorded: Mapping[str, Any], job: Mapping[str, Any]) -> list[str]:
    """``field: recorded X, this job Y`` for each field both know and that differs."""
    out = []
    for name in FIELDS:
        if name not in recorded or name not in job:
            continue
        mine, theirs = recorded[name], job[name]
        if mine is None or theirs is None or mine == theirs:
            continue
        out.append(f"{name}: profiled with {mine!r}, this job runs {theirs!r}")
    return out

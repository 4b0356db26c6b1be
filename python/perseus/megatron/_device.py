"""Which GPU is this rank's: resolved at the first iteration, never guessed early.

A job wraps ``pretrain(...)`` in ``attach`` before Megatron has called
``torch.cuda.set_device(local_rank)``; asking torch for "the current device"
then answers 0 on every rank and creates a CUDA context on GPU 0. So nothing
is resolved when attaching: at the first iteration, the current CUDA device
is used when CUDA is initialised (Megatron has bound the rank by then), and
``LOCAL_RANK`` otherwise (no CUDA work yet, nothing to disagree with). When
both are known they must agree; a given device must match the current one,
since stream-ordered clock changes go on the current device's stream.

Nothing here creates a CUDA context: ``torch.cuda.is_initialized()`` and
NVML's device count (through perseus's loader) do not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Optional

from ._errors import MegatronIntegrationError

__all__ = ["choose_device", "resolve_device"]


def _local_rank(environ: Mapping[str, str]) -> Optional[int]:
    text = environ.get("LOCAL_RANK")
    if text is None or text.strip() == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise MegatronIntegrationError(
            f"LOCAL_RANK={text!r} is not an integer; perseus reads it to find this rank's GPU"
        ) from None
    if value < 0:
        raise MegatronIntegrationError(f"LOCAL_RANK={value} is negative")
    return value


def choose_device(
    *,
    explicit: Optional[int],
    current: Optional[int],
    local_rank: Optional[int],
    device_count: int,
) -> int:
    """The CUDA device index of this rank's GPU.

    Parameters
    ----------
    explicit
        A device the user named (``ClockOptions(device=...)``, a switcher's).
    current
        ``torch.cuda.current_device()`` when CUDA is initialised, else None.
    local_rank
        ``LOCAL_RANK`` from the launcher (torchrun, Slurm), or None.
    device_count
        GPUs this process sees (CUDA numbering, ``CUDA_VISIBLE_DEVICES`` applied).

    Raises
    ------
    MegatronIntegrationError
        The sources disagree, or LOCAL_RANK names a GPU this process cannot see.
    """
    from_env: Optional[int] = None
    if local_rank is not None:
        if local_rank < device_count:
            from_env = local_rank
        elif device_count == 1:
            from_env = 0  # one GPU per process (CUDA_VISIBLE_DEVICES bound by the launcher)
        elif explicit is None and current is None:
            raise MegatronIntegrationError(
                f"LOCAL_RANK={local_rank} but this process sees {device_count} GPU(s) "
                "(CUDA_VISIBLE_DEVICES applied), so perseus cannot tell which GPU is this rank's; "
                "pass perseus.megatron.ClockOptions(device=...)"
            )
    if explicit is not None:
        if current is not None and current != explicit:
            raise MegatronIntegrationError(
                f"perseus was given device {explicit}, but this rank's current CUDA device is "
                f"{current}: clock changes are queued on the current device's stream, so they "
                f"would follow GPU {current}'s work. Call torch.cuda.set_device({explicit}) before "
                "training, or give the current device"
            )
        return int(explicit)
    if current is not None:
        if from_env is not None and from_env != current:
            raise MegatronIntegrationError(
                f"this rank's current CUDA device is {current}, but LOCAL_RANK={local_rank} says "
                f"its GPU is {from_env}: perseus would lock another rank's GPU. Call "
                "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before training (Megatron-LM "
                "does in initialize_megatron), or pass perseus.megatron.ClockOptions(device=...)"
            )
        return int(current)
    if from_env is not None:
        return from_env
    return 0  # a single process without a launcher: CUDA's default device


def resolve_device(
    torch: Any, explicit: Optional[int], environ: Mapping[str, str] = os.environ
) -> int:
    """:func:`choose_device` from this process's state; creates no CUDA context."""
    from .. import _core

    current = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        current = int(torch.cuda.current_device())
    try:
        count = int(_core.nvml_device_count())
    except Exception:  # noqa: BLE001 - no NVML: the switcher will say so, with its hint
        count = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    return choose_device(
        explicit=explicit, current=current, local_rank=_local_rank(environ), device_count=count
    )

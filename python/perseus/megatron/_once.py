"""Warnings a job gives once, not once per rank.

What perseus finds when it loads (an untested megatron-core, a frontier
made from another setup) is the same on every rank: a warning from each of
1,000 ranks buries the log. Rank 0 warns; every other rank logs the same
text at debug level. The rank comes from the launcher's environment
(``RANK``, as torchrun and Megatron-LM set it, else ``SLURM_PROCID``), since
torch.distributed is not initialised yet when most of these are found.
"""

from __future__ import annotations

import logging
import os
import warnings

__all__ = ["is_first_rank", "warn_for_job"]

logger = logging.getLogger("perseus.megatron")


def is_first_rank() -> bool:
    """Whether this process is the job's rank 0 (or not part of a launched job)."""
    for name in ("RANK", "SLURM_PROCID"):
        value = os.environ.get(name)
        if value is not None and value.strip():
            return value.strip() == "0"
    return True


def warn_for_job(
    message: str, category: type[Warning] = UserWarning, *, stacklevel: int = 2
) -> None:
    """Warn on rank 0 only; log at debug level elsewhere."""
    if is_first_rank():
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    else:
        logger.debug("%s", message)

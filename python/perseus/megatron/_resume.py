"""Run-mode state that survives a checkpoint resume, in a sidecar beside Megatron's checkpoints.

What perseus learns while a job runs would otherwise restart with every
resume: the straggler policies' samples and whom they follow, the
stale-plan check's windows and what it has reported, the A/B calibration's
result, and perseus's iteration count (so a calibration or warm-up keyed by
it does not run again). Each rank writes its own small JSON file::

    <--save>/perseus/iter_<step:07d>/rank<rank:05d>.json

at the steps Megatron-LM saves a checkpoint (``--save-interval``) and at
detach, and a resumed run (``--load``, resumed at Megatron's step N) reads
``<--load>/perseus/iter_<N:07d>/rank<rank:05d>.json`` at its first
iteration. A missing file means starting afresh, said once; a file from
another layout (pipeline or data-parallel size) is not used. Without
Megatron-LM's arguments, :meth:`Attachment.state_dict` and
:meth:`Attachment.load_state_dict` do the same by hand. Files are written
to a temporary name and renamed, so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

__all__ = [
    "FORMAT",
    "VERSION",
    "check_state",
    "read_state",
    "resume_step",
    "save_plan",
    "sidecar_path",
    "write_state",
]

FORMAT = "perseus-megatron-state"
VERSION = 1
_MAX_BYTES = 64 * 1024 * 1024  # a state file is kilobytes; refuse anything absurd


def sidecar_path(directory: Any, step: int, rank: int) -> Path:
    """Where rank `rank`'s state at Megatron step `step` lives under a checkpoint directory."""
    return Path(directory) / "perseus" / f"iter_{int(step):07d}" / f"rank{int(rank):05d}.json"


def save_plan(args: Any) -> Optional[tuple[Path, int]]:
    """(``--save`` directory, ``--save-interval``) from Megatron-LM's arguments, or None."""
    directory = getattr(args, "save", None)
    interval = getattr(args, "save_interval", None)
    if not directory or not isinstance(interval, int) or isinstance(interval, bool):
        return None
    return (Path(directory), interval) if interval > 0 else None


def resume_step(args: Any) -> Optional[tuple[Path, int]]:
    """(``--load`` directory, the step resumed from) when Megatron-LM resumed a checkpoint."""
    directory = getattr(args, "load", None)
    step = getattr(args, "curr_iteration", None)
    if step is None:
        step = getattr(args, "iteration", None)
    if not directory or not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        return None
    return Path(directory), step


def check_state(state: Any, where: str) -> dict[str, Any]:
    """`state` if it is a perseus run-mode state of this version; ValueError naming `where`."""
    if not isinstance(state, dict):
        raise ValueError(f"{where}: not a perseus run-mode state (a JSON object expected)")
    if state.get("format") != FORMAT:
        raise ValueError(f"{where}: format is {state.get('format')!r}, not {FORMAT!r}")
    if state.get("version") != VERSION:
        raise ValueError(
            f"{where}: state version {state.get('version')!r}; this perseus reads version {VERSION}"
        )
    return state


def read_state(path: Path) -> dict[str, Any]:
    """A state file, checked (ValueError naming the file and what is wrong)."""
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")
    if path.stat().st_size > _MAX_BYTES:
        raise ValueError(f"{path}: larger than {_MAX_BYTES} bytes, not a perseus state file")
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: unreadable ({error})") from None
    return check_state(state, str(path))


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write `state` to `path` whole or not at all (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(state, allow_nan=False, sort_keys=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise

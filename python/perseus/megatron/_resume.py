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
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .._validate import is_integer
from ._metrics import CalibrationResult
from ._once import warn_for_job

if TYPE_CHECKING:
    from ._between import Between
    from ._following import PlanBook, WorkloadKey
    from ._profile_mode import Layout

__all__ = [
    "FORMAT",
    "VERSION",
    "Checkpoints",
    "capture",
    "check_state",
    "read_state",
    "restore",
    "resume_step",
    "save_plan",
    "sidecar_path",
    "write_state",
]

FORMAT = "perseus-megatron-state"
VERSION = 1
_MAX_BYTES = 64 * 1024 * 1024  # a state file is kilobytes; refuse anything absurd

logger = logging.getLogger("perseus.megatron")


def sidecar_path(directory: Any, step: int, rank: int) -> Path:
    """Where rank `rank`'s state at Megatron step `step` lives under a checkpoint directory."""
    return Path(directory) / "perseus" / f"iter_{int(step):07d}" / f"rank{int(rank):05d}.json"


def save_plan(args: Any) -> Optional[tuple[Path, int]]:
    """(``--save`` directory, ``--save-interval``) from Megatron-LM's arguments, or None."""
    directory = getattr(args, "save", None)
    interval = getattr(args, "save_interval", None)
    if not directory or not is_integer(interval):
        return None
    return (Path(directory), int(interval)) if interval > 0 else None


def resume_step(args: Any) -> Optional[tuple[Path, int]]:
    """(``--load`` directory, the step resumed from) when Megatron-LM resumed a checkpoint."""
    directory = getattr(args, "load", None)
    step = getattr(args, "curr_iteration", None)
    if step is None:
        step = getattr(args, "iteration", None)
    if not directory or not is_integer(step) or step <= 0:
        return None
    return Path(directory), int(step)


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


# -- what the state holds ------------------------------------------------------------------


def _encode_key(key: Optional[WorkloadKey]) -> Any:
    """A workload key as JSON: a count, or [count, length]."""
    return key if key is None or isinstance(key, int) else list(key)


def _decode_key(raw: Any) -> Optional[WorkloadKey]:
    if raw is None:
        return None
    if is_integer(raw):
        return raw
    count, length = raw
    return (int(count), int(length))


def _layout_of(layout: Layout) -> dict[str, int]:
    return {
        "world_size": layout.world_size,
        "pipeline_size": layout.pipeline_size,
        "data_parallel_size": layout.data_parallel_size,
    }


def capture(
    *,
    iterations: int,
    layout: Optional[Layout],
    book: Optional[PlanBook],
    between: Optional[Between],
    calibration: Optional[CalibrationResult],
    switches: int,
) -> dict[str, Any]:
    """One rank's run-mode state as plain JSON data (see the module docs)."""
    policies = book.policies if book is not None else {}
    drift = between.drift if between is not None else None
    return {
        "format": FORMAT,
        "version": VERSION,
        "iterations": iterations,
        "layout": None if layout is None else _layout_of(layout),
        "stragglers": [
            [_encode_key(key), policy.state()]
            for key, policy in sorted(policies.items(), key=lambda kv: str(kv[0]))
        ],
        "stale_plan": drift.state() if drift is not None else None,
        "calibration": None if calibration is None else asdict(calibration),
        "switches": switches,
        # the workload last run: a resumed run that goes on with it keeps its policy
        "workload": _encode_key(book.last_key if book is not None else None),
    }


def restore(
    state: dict[str, Any], where: str, *, layout: Layout, book: PlanBook, between: Between
) -> Optional[tuple[int, Optional[CalibrationResult]]]:
    """Put `state` back into `book`'s policies and `between`'s check; returns perseus's
    iteration count and the calibration, or None (said once) when the layout differs.

    Raises ValueError naming `where` for a malformed state, having changed nothing.
    """
    saved, here = state.get("layout"), _layout_of(layout)
    if saved is not None and saved != here:
        warn_for_job(
            f"perseus: {where} was saved with layout {saved}, this job has {here}: its state is "
            "not used (straggler, stale-plan and calibration state start afresh)",
            RuntimeWarning,
        )
        return None
    try:
        iterations = int(state["iterations"])
        workload = _decode_key(state["workload"])
        policies = []
        for raw, policy_state in state["stragglers"]:
            key = _decode_key(raw)
            policy = book.policy(key) if key is not None and key in book.frontiers else None
            if policy is not None:
                policies.append((policy, policy_state))
        calibration = state["calibration"]
        result = None if calibration is None else CalibrationResult(**calibration)
        for policy, policy_state in policies:
            policy.restore(policy_state)
        if between.drift is not None and state["stale_plan"] is not None:
            between.drift.restore(state["stale_plan"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: the perseus state is malformed ({error})") from None
    if workload in book.known:
        book.last_key = workload
    between.first_iteration = iterations
    if between.step_offset > 0:  # Megatron's step of this process's first iteration
        between.step_offset -= iterations
    logger.debug("perseus: resumed from %s at iteration %d", where, iterations)
    return iterations, result


# -- when it is saved and read ---------------------------------------------------------------


class Checkpoints:
    """One attachment's saves beside Megatron-LM's checkpoints, and the state it resumes from."""

    def __init__(self) -> None:
        self._pending: Optional[tuple[dict[str, Any], str]] = None  # given by hand
        self._save: Optional[tuple[Path, int]] = None  # --save, --save-interval
        self._saved_step: Optional[int] = None
        self._warned = False

    def give(self, state: dict[str, Any]) -> None:
        """A state given by hand (``load_state_dict``), checked now, applied at the start."""
        self._pending = (check_state(state, "load_state_dict"), "load_state_dict")

    def start(self, args: Any, rank: int) -> Optional[tuple[dict[str, Any], str]]:
        """At the first iteration: where to save, and the state to resume from (and whence)."""
        self._save = save_plan(args)
        pending, self._pending = self._pending, None
        if pending is not None:
            return pending
        resumed = resume_step(args)
        if resumed is None:
            return None
        path = sidecar_path(resumed[0], resumed[1], rank)
        if not path.exists():
            warn_for_job(
                f"perseus: resumed at Megatron step {resumed[1]} without perseus's state ({path} "
                "is missing): straggler, stale-plan and calibration state start afresh",
                RuntimeWarning,
            )
            return None
        try:
            return read_state(path), str(path)
        except ValueError as error:
            warn_for_job(f"perseus: {error}; its state starts afresh", RuntimeWarning)
            return None

    def due(self, step: int) -> bool:
        """Whether Megatron-LM saves a checkpoint at `step` (so perseus saves beside it)."""
        return self._save is not None and step % self._save[1] == 0

    def save(self, step: int, rank: int, state: Callable[[], dict[str, Any]]) -> None:
        """Rank `rank`'s state beside the checkpoint of `step` (once per step)."""
        if self._save is None or step == self._saved_step:
            return
        path = sidecar_path(self._save[0], step, rank)
        try:
            write_state(path, state())
            self._saved_step = step
        except (OSError, ValueError) as error:
            # this rank's own trouble (its disk, its permissions): said here, once
            if not self._warned:
                self._warned = True
                message = (
                    f"perseus: could not save its state to {path} ({error}); a resume from this "
                    "checkpoint starts perseus's straggler and calibration state afresh"
                )
                warnings.warn(message, RuntimeWarning, stacklevel=3)
                logger.warning(message)

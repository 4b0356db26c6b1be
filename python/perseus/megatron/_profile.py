"""Profile mode: replay captured Megatron computations through the profiler.

During one training iteration (the *capture* iteration) perseus keeps, for
every model chunk on this rank, the arguments of microbatch 0's
``forward_step`` (with the batch the user's ``forward_step_func`` drew from
the data iterator) and the gradient its ``backward_step`` received. After the
iteration it hands :func:`perseus.profile_stages` two callables per chunk:

* forward: megatron-core's own ``forward_step`` again, on the same batch and
  a copy of the same input activation, writing into a scratch store;
* forward and backward: such a forward, then the backward pass with
  ``torch.autograd.grad`` on the captured output gradient, for the chunk's
  parameters and input (so nothing accumulates into the training's
  gradients and megatron's gradient hooks do not fire). A graph cannot be
  reused: megatron's cross-entropy backward works in place. The backward's
  time and energy are this pair's minus the forward's, at each frequency
  (:func:`backward_rows`); the per-rank sweep files keep the pair under
  ``backward``.

Each pipeline rank of data-parallel replica 0 sweeps its own chunks on its own
GPU, in parallel; the ranks then gather their measurements over a gloo group
with a long timeout (a sweep takes minutes to hours) and the first rank writes
the merged profile. RNG states are restored afterwards, so training continues
exactly as it would have.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..profile import INSTRUCTIONS, Profile

__all__ = ["ChunkCapture", "ProfileRun", "RecordingIterator"]


class RecordingIterator:
    """Wraps a data iterator and keeps the items drawn through it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.items: list[Any] = []

    def __iter__(self) -> RecordingIterator:
        return self

    def __next__(self) -> Any:
        item = next(self._inner)
        self.items.append(item)
        return item

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _ReplayIterator:
    """Yields the recorded items again, the last one forever."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items
        self._next = 0

    def __iter__(self) -> _ReplayIterator:
        return self

    def __next__(self) -> Any:
        if not self._items:
            raise StopIteration
        item = self._items[min(self._next, len(self._items) - 1)]
        self._next += 1
        return item


@dataclass
class ChunkCapture:
    """What one model chunk's microbatch-0 forward and backward were called with."""

    chunk: int
    arguments: dict[str, Any]  # forward_step's bound arguments, data_iterator replaced
    recorder: Optional[RecordingIterator]
    input_tensor: Any  # a detached copy of the input activation(s)
    output_grad: Any = None  # a detached copy of the gradient backward_step received
    have_backward: bool = False


def _detached_copy(torch: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_detached_copy(torch, v) for v in value)
    return value


def _fresh_input(torch: Any, value: Any) -> Any:
    """A leaf copy of a captured input that, like a received activation, wants a grad."""
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        if copy.is_floating_point():
            copy.requires_grad_(True)
        return copy
    if isinstance(value, list):
        return [_fresh_input(torch, v) for v in value]
    return value


def _tensors(value: Any, torch: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v, torch)]
    return []


def make_computations(
    torch: Any,
    forward_step: Callable[..., Any],
    capture: ChunkCapture,
    grad_scale_func: Optional[Callable[[Any], Any]],
) -> dict[str, Callable[[], None]]:
    """The forward and backward callables of one captured chunk."""
    items = list(capture.recorder.items) if capture.recorder is not None else []

    def run_forward() -> tuple[Any, Any]:
        arguments = dict(capture.arguments)
        if "data_iterator" in arguments and capture.recorder is not None:
            arguments["data_iterator"] = _ReplayIterator(items)
        inputs = _fresh_input(torch, capture.input_tensor)
        arguments["input_tensor"] = inputs
        arguments["forward_data_store"] = []
        if "is_first_microbatch" in arguments:
            arguments["is_first_microbatch"] = False
        output = forward_step(**arguments)
        return (output[0] if isinstance(output, tuple) else output), inputs

    def forward() -> None:
        run_forward()

    def forward_backward() -> None:
        output, inputs = run_forward()
        first = output[0] if isinstance(output, list) else output
        model = capture.arguments["model"]
        targets = [p for p in model.parameters() if p.requires_grad]
        targets += [t for t in _tensors(inputs, torch) if t.requires_grad]
        grad = capture.output_grad
        grad = grad[0] if isinstance(grad, list) else grad
        if grad is None and grad_scale_func is not None:
            first = grad_scale_func(first)
        torch.autograd.grad(first, targets, grad_outputs=grad, allow_unused=True)

    return {"forward": forward, "backward": forward_backward}


@dataclass
class ProfileRun:
    """Settings of profile mode, and where its files go."""

    path: Path
    iteration: int
    after: str
    mode: str
    options: dict[str, Any]
    timeout_s: float
    group: Any = None  # the long-timeout gloo group, made at attach
    captures: dict[int, ChunkCapture] = field(default_factory=dict)
    done: bool = False
    profile: Optional[Profile] = None

    def rank_path(self, pp_rank: int) -> Path:
        """Where pipeline rank ``pp_rank`` keeps its own sweep (and can resume it)."""
        return self.path.with_name(f"{self.path.stem}.pp{pp_rank}{self.path.suffix or '.csv'}")


def rng_state(torch: Any) -> tuple[Any, Any, Any]:
    """CPU, CUDA and megatron tracker RNG states, to restore after replays."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    tracker = None
    try:
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

        tracker = get_cuda_rng_tracker().get_states()
    except Exception:  # noqa: BLE001 - no tracker: nothing to restore
        pass
    return torch.get_rng_state(), cuda, tracker


def restore_rng_state(torch: Any, state: tuple[Any, Any, Any]) -> None:
    cpu, cuda, tracker = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    if tracker is not None:
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

        get_cuda_rng_tracker().set_states(tracker)


def merged_csv(rows: list[dict[str, Any]]) -> str:
    """Zeus's ``stage,instruction,frequency,time,energy`` CSV of every measurement."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("stage", "instruction", "frequency", "time", "energy"))
    order = sorted(
        rows, key=lambda r: (r["stage"], INSTRUCTIONS.index(r["instruction"]), -r["frequency_mhz"])
    )
    for r in order:
        writer.writerow(
            (
                r["stage"],
                r["instruction"],
                r["frequency_mhz"],
                repr(r["time_s"]),
                repr(r["energy_j"]),
            )
        )
    return out.getvalue()


def write_merged(path: Path, rows: list[dict[str, Any]], metadata: dict[str, Any]) -> None:
    """Write the merged CSV and its ``.json`` sidecar, each atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, text in (
        (path, merged_csv(rows)),
        (path.with_suffix(".json"), json.dumps(metadata, indent=1) + "\n"),
    ):
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_text(text)
        os.replace(temporary, target)


def merged_profile(payloads: list[Optional[dict[str, Any]]]) -> tuple[list[dict[str, Any]], float]:
    """Rows of every rank and the mean blocking power (W) from the gathered payloads."""
    rows = [row for p in payloads if p for row in p["measurements"]]
    powers = [p["blocking_power_w"] for p in payloads if p and math.isfinite(p["blocking_power_w"])]
    blocking = sum(powers) / len(powers) if powers else 0.0
    return rows, blocking


def backward_rows(measurements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn measured forward+backward pairs (under ``backward``) into backward alone.

    At each frequency, backward = pair - forward, in time and energy; kept
    at least 1 % of the pair's (noise can make the difference tiny). Pairs
    without a forward at the same frequency (the forward's sweep stopped
    earlier) are dropped.
    """
    forwards = {
        (m["stage"], m["frequency_mhz"]): m for m in measurements if m["instruction"] == "forward"
    }
    rows = []
    for m in measurements:
        if m["instruction"] == "forward":
            rows.append(dict(m))
            continue
        forward = forwards.get((m["stage"], m["frequency_mhz"]))
        if forward is None:
            continue
        row = dict(m)
        row["time_s"] = max(m["time_s"] - forward["time_s"], 0.01 * m["time_s"])
        row["energy_j"] = max(m["energy_j"] - forward["energy_j"], 0.01 * m["energy_j"])
        rows.append(row)
    return rows


def stage_of(chunk: int, pp_rank: int, pp_size: int) -> int:
    """Profile stage (model chunk index) of virtual chunk ``chunk`` on pipeline rank ``pp_rank``."""
    return chunk * pp_size + pp_rank


def profile_from_rows(rows: list[dict[str, Any]], blocking_power_w: float) -> Profile:
    return Profile.from_records(
        [
            (r["stage"], r["instruction"], r["frequency_mhz"], r["time_s"], r["energy_j"])
            for r in rows
        ],
        blocking_power_w=blocking_power_w,
    )

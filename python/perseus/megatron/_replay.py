"""Profile mode: replay captured Megatron computations through the profiler.

During one training iteration (the *capture* iteration) perseus keeps, for
every model chunk on this rank, the arguments of microbatch 0's
``forward_step`` (with the batch the user's ``forward_step_func`` drew from
the data iterator) and of its ``backward_step`` (with the gradient it
received). After the iteration it hands :func:`perseus.profile_stages` two
callables per chunk:

* forward: megatron-core's own ``forward_step`` again, on the same batch and
  a fresh leaf copy of the same input activation, writing into a scratch
  store;
* forward and backward: such a forward, then megatron-core's own
  ``backward_step`` on the captured output gradient: ``backward()`` through
  a graph of its own, as training runs it, so activation recomputation (full
  or selective) replays as in training. Its parameter gradients land where
  training's do (megatron's ``main_grad`` buffers, ``.grad``): those are
  saved before the sweep and put back, bit for bit, afterwards
  (:class:`GradientGuard`), and the sweep runs under the chunks'
  ``no_sync()`` with their forward pre-hooks (parameter all-gather) off, so
  no gradient reduction or parameter gathering starts. A graph cannot be
  reused (megatron's cross-entropy backward works in place), hence a forward
  per backward: the backward's time and energy are the pair's minus the
  forward's, at each frequency (:func:`backward_rows`); the per-rank sweep
  files keep the pair under ``backward``.

RNG states are restored afterwards, so training continues exactly as it
would have. The orchestration (who sweeps, tensor-parallel lock step, the
gather and the merged files) is in :mod:`._profile_mode`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .._files import write_text_atomically
from .._sidecar import sidecar_path
from .._zeus_format import format_csv
from ..profile import Profile

__all__ = ["ChunkCapture", "GradientGuard", "RecordingIterator", "make_computations"]


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
    backward_arguments: Optional[dict[str, Any]] = None  # backward_step's bound arguments
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


def _has_gradient(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_gradient(v) for v in value)
    return value is not None


def make_computations(
    torch: Any,
    forward_step: Callable[..., Any],
    backward_step: Callable[..., Any],
    capture: ChunkCapture,
    deallocate: Callable[[Any, bool], None],
) -> dict[str, Callable[[], None]]:
    """The forward and forward+backward callables of one captured chunk.

    `forward_step`, `backward_step` and `deallocate` are megatron-core's own
    (``schedules.forward_step``, ``schedules.backward_step``,
    ``schedules.deallocate_output_tensor``), unwrapped.
    """
    items = list(capture.recorder.items) if capture.recorder is not None else []
    backward_arguments = dict(capture.backward_arguments or {})
    config = backward_arguments.get("config")
    free_outputs = bool(getattr(config, "deallocate_pipeline_outputs", False))
    sends_output = _has_gradient(capture.output_grad)  # not the last stage

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
        if sends_output:
            # As the schedule does once an activation is sent on; backward_step then
            # runs megatron's custom_backward, which expects the pseudo-freed output.
            deallocate(output[0] if isinstance(output, list) else output, free_outputs)
        arguments = dict(backward_arguments)
        arguments.update(
            input_tensor=inputs,
            output_tensor=output,
            output_tensor_grad=_detached_copy(torch, capture.output_grad),
        )
        backward_step(**arguments)

    return {"forward": forward, "backward": forward_backward}


class GradientGuard:
    """Keeps a sweep's backward passes out of training: gradients saved and restored, no syncs.

    Entered around the sweep: every parameter's ``main_grad`` (megatron's DDP
    buffers) and ``.grad`` are copied to the CPU, each chunk's ``no_sync()``
    is entered (no gradient reduction starts) and its forward pre-hooks
    (overlapped parameter all-gather) are removed; on exit all is put back.
    """

    def __init__(self, torch: Any, chunks: list[Any]) -> None:
        self._torch = torch
        self._chunks = chunks
        self._saved: list[tuple[Any, Any, Any]] = []
        self._stack: Any = None
        self._hooks_off: list[Any] = []

    def __enter__(self) -> GradientGuard:
        import contextlib

        seen: set[int] = set()
        for chunk in self._chunks:
            for p in chunk.parameters():
                if id(p) in seen:
                    continue
                seen.add(id(p))
                main = getattr(p, "main_grad", None)
                self._saved.append(
                    (
                        p,
                        None if main is None else main.detach().to("cpu", copy=True),
                        None if p.grad is None else p.grad.detach().to("cpu", copy=True),
                    )
                )
        self._stack = contextlib.ExitStack()
        for chunk in self._chunks:
            no_sync = getattr(chunk, "no_sync", None)
            if callable(no_sync):
                self._stack.enter_context(no_sync())
            if getattr(chunk, "use_forward_hook", False):
                chunk.disable_forward_pre_hook(param_sync=False)
                self._hooks_off.append(chunk)
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._torch.no_grad():
            for p, main, grad in self._saved:
                if main is not None:
                    p.main_grad.copy_(main)
                p.grad = None if grad is None else grad.to(p.device)
        self._saved.clear()
        for chunk in self._hooks_off:
            chunk.enable_forward_pre_hook()
        self._hooks_off.clear()
        if self._stack is not None:
            self._stack.close()
            self._stack = None


def rank_path(path: Path, pp_rank: int) -> Path:
    """Where pipeline rank ``pp_rank`` keeps its own sweep (and can resume it)."""
    return path.with_name(f"{path.stem}.pp{pp_rank}{path.suffix or '.csv'}")


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
    return format_csv(
        (r["stage"], r["instruction"], r["frequency_mhz"], r["time_s"], r["energy_j"]) for r in rows
    )


def write_merged(path: Path, rows: list[dict[str, Any]], metadata: dict[str, Any]) -> None:
    """Write the merged CSV and its ``.json`` sidecar, each atomically (fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, merged_csv(rows))
    write_text_atomically(sidecar_path(path), json.dumps(metadata, indent=1) + "\n")


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

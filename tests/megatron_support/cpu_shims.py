"""Test-only shims that let megatron-core's pipeline schedules run on the CPU.

megatron-core hard-codes CUDA in a few places: ``device="cuda"`` and
``device=torch.cuda.current_device()`` allocations, ``.cuda()`` calls,
``torch.cuda.synchronize()``; and importing its schedules imports ``triton``
through a MoE module. :func:`install` papers over exactly these:

* a ``TorchFunctionMode`` that sends CUDA allocations and moves to the CPU,
  also inside custom autograd backward functions (the engine does not carry
  Python modes into them, and activation checkpointing recomputes there);
* ``torch.cuda.current_device`` returns 0, ``torch.cuda.synchronize`` does
  nothing, ``torch.cuda.current_stream`` gives a stream whose waits do nothing
  (megatron's DDP waits on it before reducing gradients);
* ``torch.cuda.get_rng_state`` returns a constant state, which megatron's
  activation checkpointing saves and (through ``torch.cuda._lazy_call``,
  which never runs without CUDA) restores; the test models have no dropout;
* where triton is not installed, the megatron-core modules on the
  schedules' import path that import it unconditionally get a stub (its
  kernels refuse to run); nobody else does, and the stub never enters
  ``sys.modules``, so torch still sees no triton. A stub rather than a
  pinned triton: triton is a large GPU-only wheel, and these tests never
  run a triton kernel.

Nothing here belongs in perseus or in a real training job.
"""

from __future__ import annotations

import builtins
import types

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["install"]

_installed = False


def _is_cuda(device: object) -> bool:
    if isinstance(device, bool):
        return False
    if isinstance(device, int):  # torch reads a bare index as a CUDA device
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return False


class CudaToCpuMode(TorchFunctionMode):
    """Redirects every CUDA device argument (and ``.cuda()``) to the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


class _NullStream:
    """What megatron's DDP asks of ``torch.cuda.current_stream()``: waits, all no-ops."""

    cuda_stream = 0

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def synchronize(self):
        pass


class _StubKernel:
    def __init__(self, fn=None, *args, **kwargs):
        self.fn = fn

    def __getitem__(self, grid):
        return self

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            "a triton kernel was called under the CPU test shims (triton is stubbed)"
        )


def _stub_triton() -> dict[str, types.ModuleType]:
    triton = types.ModuleType("triton")
    language = types.ModuleType("triton.language")
    triton.jit = lambda fn=None, **kwargs: _StubKernel(fn) if fn is not None else _StubKernel
    triton.autotune = lambda *args, **kwargs: _StubKernel
    triton.heuristics = lambda *args, **kwargs: lambda fn: _StubKernel(fn)
    triton.Config = lambda *args, **kwargs: None
    triton.cdiv = lambda a, b: -(-a // b)
    triton.next_power_of_2 = lambda n: 1 << max(0, int(n - 1).bit_length())
    triton.language = language
    language.constexpr = type("constexpr", (), {})

    def placeholder(name: str) -> object:  # dtypes and helpers named in signatures
        if name.startswith("__"):
            raise AttributeError(name)
        return object()

    language.__getattr__ = placeholder
    return {"triton": triton, "triton.language": language}


# megatron-core modules on the schedules' import path that import triton
# unconditionally (0.18: moe.paged_stash; 0.19: moe.ops.paged_stash). Modules
# that import it inside try/except keep seeing no triton.
_TRITON_IMPORTERS = frozenset(
    {"megatron.core.transformer.moe.paged_stash", "megatron.core.transformer.moe.ops.paged_stash"}
)


def _install_triton_gate() -> None:
    """Serve the stub triton to `_TRITON_IMPORTERS`, and only when triton is missing.

    The stub never enters ``sys.modules``, so torch (which probes for triton
    in many places) keeps seeing no triton at all.
    """
    stubs = _stub_triton()
    real_import = builtins.__import__

    def gated_import(name, globals=None, locals=None, fromlist=(), level=0):
        try:
            return real_import(name, globals, locals, fromlist, level)
        except ImportError:
            importer = str((globals or {}).get("__name__", ""))
            if level or importer not in _TRITON_IMPORTERS or name not in stubs:
                raise
            return stubs[name] if fromlist else stubs["triton"]

    builtins.__import__ = gated_import


def _constant_rng_state(device: object = "cuda") -> torch.Tensor:  # noqa: ARG001 (torch's signature)
    return torch.zeros(16, dtype=torch.uint8)


def install() -> None:
    """Apply the shims to this process (idempotent)."""
    global _installed
    if _installed:
        return
    torch.cuda.current_device = lambda: 0
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_stream = lambda *args, **kwargs: _NullStream()
    torch.cuda.get_rng_state = torch.cuda.random.get_rng_state = _constant_rng_state
    _install_triton_gate()
    CudaToCpuMode().__enter__()  # stays on for the life of the process
    backward = torch.autograd.function.BackwardCFunction.apply

    def apply_on_cpu(self, *args):
        with CudaToCpuMode():
            return backward(self, *args)

    torch.autograd.function.BackwardCFunction.apply = apply_on_cpu
    _installed = True

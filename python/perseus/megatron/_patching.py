"""Wrapping megatron-core's schedule functions, and naming each computation they run.

perseus does not fork Megatron: for the life of an attachment it replaces
``forward_step``, ``backward_step`` and the three forward-backward functions
of ``megatron.core.pipeline_parallel.schedules`` with wrappers (the schedules
call the step functions through the module, so the wrappers see every
computation), and puts the originals back afterwards.

Each computation is named (instruction, chunk, microbatch): a forward by the
``current_microbatch`` and ``vp_stage`` megatron passes it; a backward by the
output tensor it receives, mapped back to the forward that produced it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Optional, Protocol

from ._compat import SCHEDULE_FUNCTIONS, STEP_FUNCTIONS
from ._errors import MegatronIntegrationError

__all__ = ["Arguments", "Hooks", "OutputMap", "SchedulePatch"]

MARK = "__perseus_attachment__"


class Arguments:
    """Reads named arguments of calls to one function without binding the whole signature."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.signature = inspect.signature(function)
        names = list(self.signature.parameters)
        self._index = {name: i for i, name in enumerate(names)}
        self._default = {
            name: p.default
            for name, p in self.signature.parameters.items()
            if p.default is not p.empty
        }

    def get(self, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
        if name in kwargs:
            return kwargs[name]
        index = self._index[name]
        if index < len(args):
            return args[index]
        return self._default.get(name)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)


class Hooks(Protocol):
    """What the wrappers call; :class:`~._run_loop.RunLoop` implements it."""

    def on_schedule(
        self, original: Callable[..., Any], kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any: ...

    def on_forward(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any: ...

    def on_backward(
        self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any: ...


def _first_tensor(value: Any) -> Any:
    value = value[0] if isinstance(value, tuple) else value
    return value[0] if isinstance(value, list) else value


class OutputMap:
    """Which forward produced the output tensor a backward receives (one iteration)."""

    def __init__(self) -> None:
        self._outputs: dict[int, tuple[Any, int, int]] = {}

    def add(self, output: Any, chunk: int, microbatch: int) -> None:
        first = _first_tensor(output)
        # The tensor itself is kept, so its id cannot be reused until its backward.
        self._outputs[id(first)] = (first, chunk, microbatch)

    def pop(self, output_tensor: Any) -> Optional[tuple[int, int]]:
        found = self._outputs.pop(id(_first_tensor(output_tensor)), None)
        return None if found is None else (found[1], found[2])

    def clear(self) -> None:
        self._outputs.clear()


class SchedulePatch:
    """The wrappers of one attachment over ``megatron.core.pipeline_parallel.schedules``."""

    def __init__(self, schedules: Any, hooks: Hooks, owner: object) -> None:
        self._schedules = schedules
        self._hooks = hooks
        self._owner = owner
        self.originals: dict[str, Callable[..., Any]] = {}
        self.forward_args = Arguments(schedules.forward_step)
        self.backward_args = Arguments(schedules.backward_step)
        self.installed = False

    def install(self) -> None:
        schedules = self._schedules
        for name in (*STEP_FUNCTIONS, *SCHEDULE_FUNCTIONS):
            if hasattr(getattr(schedules, name, None), MARK):
                raise MegatronIntegrationError(
                    f"schedules.{name} is already wrapped by another perseus attachment; "
                    "leave that one's `with` block (or detach it) first"
                )
        self.originals = {
            name: getattr(schedules, name) for name in (*STEP_FUNCTIONS, *SCHEDULE_FUNCTIONS)
        }
        wrappers: dict[str, Callable[..., Any]] = {
            "forward_step": self._wrap(self.originals["forward_step"], self._hooks.on_forward),
            "backward_step": self._wrap(self.originals["backward_step"], self._hooks.on_backward),
        }
        for name, kind in SCHEDULE_FUNCTIONS.items():
            wrappers[name] = self._wrap_schedule(self.originals[name], kind)
        for name, wrapper in wrappers.items():
            setattr(wrapper, MARK, self._owner)
            setattr(schedules, name, wrapper)
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        for name, original in self.originals.items():
            setattr(self._schedules, name, original)

    def _wrap(
        self,
        original: Callable[..., Any],
        hook: Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any],
    ) -> Callable[..., Any]:
        @functools.wraps(original)
        def step(*args: Any, **kwargs: Any) -> Any:
            return hook(original, args, kwargs)

        return step

    def _wrap_schedule(self, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
        hooks = self._hooks

        @functools.wraps(original)
        def schedule(*args: Any, **kwargs: Any) -> Any:
            return hooks.on_schedule(original, kind, args, kwargs)

        return schedule

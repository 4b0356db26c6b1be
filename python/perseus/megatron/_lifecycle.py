"""The life of an attachment: its states and the transitions between them, in one place.

::

    DETACHED --attach--> ATTACHED --start_run--> RUNNING --let_go--> LET_GO
                             |  \\--start_profile--> PROFILING --let_go--> LET_GO
                             \\--turn_off--> OFF
    any state --detach--> DETACHED (attached again, an attachment starts afresh)

- ``ATTACHED``: megatron's schedule functions are wrapped; nothing that
  needs CUDA or torch.distributed has happened yet.
- ``RUNNING`` / ``PROFILING``: the first forward-backward call read the
  layout, made perseus's groups and (run mode) its switcher.
- ``OFF``: the job's arguments turned perseus off (``--perseus-mode off``),
  found at the first call: the wrappers are gone, calls pass through.
- ``LET_GO``: what Megatron runs differs from the plan and
  ``on_mismatch="warn"``: the clocks were given back, training goes on
  without perseus's clocks until detach.

Any other transition is a bug in the caller and raises
:class:`MegatronIntegrationError` naming the state and the event.
"""

from __future__ import annotations

import enum

from ._errors import MegatronIntegrationError

__all__ = ["Lifecycle", "State"]


class State(enum.Enum):
    DETACHED = "detached"
    ATTACHED = "attached"
    RUNNING = "running"
    PROFILING = "profiling"
    OFF = "off"
    LET_GO = "let go"


_S = State
#: event -> {state it may fire in: the state it leads to}
_TRANSITIONS: dict[str, dict[State, State]] = {
    "attach": {_S.DETACHED: _S.ATTACHED},
    "start_run": {_S.ATTACHED: _S.RUNNING},
    "start_profile": {_S.ATTACHED: _S.PROFILING},
    "turn_off": {_S.ATTACHED: _S.OFF},
    "let_go": {_S.RUNNING: _S.LET_GO, _S.PROFILING: _S.LET_GO, _S.LET_GO: _S.LET_GO},
    "detach": dict.fromkeys(State, _S.DETACHED),
}


class Lifecycle:
    """One attachment's state; :meth:`fire` is the only way to change it."""

    def __init__(self) -> None:
        self.state = State.DETACHED

    def fire(self, event: str) -> State:
        """Take the transition `event` from the current state; returns the new state."""
        targets = _TRANSITIONS.get(event)
        if targets is None:
            raise MegatronIntegrationError(f"perseus: no lifecycle event {event!r}")
        target = targets.get(self.state)
        if target is None:
            raise MegatronIntegrationError(
                f"perseus: this attachment is {self.state.value}; it cannot {event.replace('_', ' ')}"
            )
        self.state = target
        return target

    @property
    def attached(self) -> bool:
        """The schedule functions are wrapped (or perseus was turned off while attached)."""
        return self.state is not State.DETACHED

    @property
    def started(self) -> bool:
        """The first forward-backward call has been seen since attaching."""
        return self.state not in (State.DETACHED, State.ATTACHED)

    @property
    def off(self) -> bool:
        return self.state is State.OFF

    @property
    def following(self) -> bool:
        """perseus still drives the clocks (it has not let go)."""
        return self.state is not State.LET_GO

"""Requests one rank's SM clocks: the plan's per computation, an idle clock between iterations.

On a GPU every change is queued in stream order, so it happens when the GPU
reaches that point, not when the CPU (far ahead) queues it: a clock through
:meth:`FrequencySwitcher.set_on_stream`. The switcher has no stream-ordered
*reset* yet, so "unlocked" at a stream point is done by a helper thread that
waits (GIL released) for a CUDA event recorded at that point and then resets;
it skips the reset if the GPU has meanwhile passed the next clock change,
which would otherwise be undone. Without a GPU every request is immediate.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Optional

from .._stderr import say

__all__ = ["ClockDriver"]

_UNKNOWN = object()  # what the switcher was last asked for is not known


class _ResetToken:
    """One pending stream-ordered reset; `next_event` marks the clock request after it."""

    __slots__ = ("next_event",)

    def __init__(self) -> None:
        self.next_event: Any = None


class _StreamResetter:
    """Resets the switcher once the GPU has reached recorded events, off the training thread."""

    def __init__(self, switcher: Any) -> None:
        self._switcher = switcher
        self._queue: queue.SimpleQueue[Optional[tuple[Any, _ResetToken]]] = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None

    def reset_at(self, event: Any, token: _ResetToken) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="perseus-stream-reset", daemon=True
            )
            self._thread.start()
        self._queue.put((event, token))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            event, token = item
            try:
                event.synchronize()  # torch releases the GIL while it waits
                later = token.next_event
                if later is not None and later.query():
                    continue  # the GPU already passed the next clock change: keep it
                self._switcher.reset()
            except Exception as error:  # noqa: BLE001 - raised on the training thread later
                if self.error is None:
                    self.error = error
                    say(f"perseus: could not reset the clocks: {error}")

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10.0)
            self._thread = None


class ClockDriver:
    """The clock requests of one rank.

    Parameters
    ----------
    torch
        The torch module.
    switcher
        The rank's :class:`~perseus.FrequencySwitcher`.
    gpu
        Whether CUDA streams exist (stream-ordered requests) or not (immediate).
    idle_mhz, evaluation_mhz
        Clocks between iterations and during forward-only calls; None: unlocked.
    """

    def __init__(
        self,
        torch: Any,
        switcher: Any,
        *,
        gpu: bool,
        idle_mhz: Optional[int],
        evaluation_mhz: Optional[int],
    ) -> None:
        self._torch = torch
        self.switcher = switcher
        self._gpu = gpu
        self.idle_mhz = idle_mhz
        self.evaluation_mhz = evaluation_mhz
        self._last: Any = _UNKNOWN
        self._token: Optional[_ResetToken] = None
        self._resetter = _StreamResetter(switcher) if gpu else None

    def _check(self) -> None:
        if self._resetter is not None and self._resetter.error is not None:
            error, self._resetter.error = self._resetter.error, None
            raise error

    def request(self, mhz: Optional[int]) -> None:
        """This clock (None: the driver's default) from this point of the stream on."""
        self._check()
        if self._last is not _UNKNOWN and mhz == self._last:
            return
        self._last = mhz
        if not self._gpu:
            if mhz is None:
                self.switcher.reset()
            else:
                self.switcher.set(mhz)
            return
        assert self._resetter is not None
        if self._token is not None:  # a reset is pending: tell it where the next change is
            marker = self._torch.cuda.Event()
            marker.record()
            self._token.next_event = marker
            self._token = None
        if mhz is None:
            event = self._torch.cuda.Event()
            event.record()
            self._token = _ResetToken()
            self._resetter.reset_at(event, self._token)
        else:
            self.switcher.set_on_stream(self._torch.cuda.current_stream().cuda_stream, mhz)

    def idle(self) -> None:
        """The iteration's last computation is queued: the idle clock after it."""
        self.request(self.idle_mhz)

    def evaluation(self) -> None:
        """A forward-only call starts: the evaluation clock."""
        self.request(self.evaluation_mhz)

    def let_go(self) -> None:
        """Unlock at once (perseus stops following); the next request starts afresh."""
        self.switcher.reset()
        self._last = _UNKNOWN
        self._token = None

    def close(self) -> None:
        if self._resetter is not None:
            self._resetter.close()
        self._check()

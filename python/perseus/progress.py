"""A minimal progress display for long solves (stderr, no dependencies)."""

from __future__ import annotations

import time
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Callable ``(done, expected)`` that redraws one status line.

    On a terminal it redraws in place at most ten times a second; otherwise it
    writes a line every ten seconds, so logs stay short.
    """

    def __init__(self, label: str, *, unit: str, stream: TextIO) -> None:
        self._label = label
        self._unit = unit
        self._stream = stream
        self._tty = stream.isatty()
        self._started = time.monotonic()
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, expected: int) -> None:
        now = time.monotonic()
        if now - self._started < 0.5:  # quick solves stay quiet
            return
        if now - self._last < (0.1 if self._tty else 10.0):
            return
        self._last = now
        share = f" ({100.0 * done / expected:3.0f}%)" if expected > 0 else ""
        line = f"{self._label}: {done}/{expected} {self._unit}{share}, {now - self._started:.1f} s"
        self._stream.write(("\r" + line) if self._tty else (line + "\n"))
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn and self._tty:
            self._stream.write("\n")
            self._stream.flush()

"""Lines for a person on standard error, when the process has one."""

from __future__ import annotations

import sys


def say(line: str, *, flush: bool = False) -> None:
    """Print `line` on stderr; nothing when there is none.

    ``sys.stderr`` is None when descriptor 2 was closed at start (``2>&-``, a
    daemon, pythonw), and ``print(file=None)`` then writes on stdout: into a
    ``--json`` document, or a training job's own output.
    """
    stream = sys.stderr
    if stream is not None:
        print(line, file=stream, flush=flush)

"""The ``perseus`` command line: from a profile to a deployed plan without writing Python.

    perseus optimize PROFILE.csv -m 32 -o out/    # the frontier, out/frontier.json
    perseus show out/frontier.json                # a table of representative plans
    perseus plan out/frontier.json --slowdown 1.1 --format zeus -o plans/
    perseus evaluate PROFILE.csv plans/freqs_pipeline_00042.py
    perseus plot out/frontier.json -o frontier.png [--timeline | --power]
    perseus report out/frontier.json -o report.html
    perseus reset-clocks [--device N]
    perseus clockd --allow all:group:train        # as root: clock locks for unprivileged jobs
    perseus switch-latency [--device N]            # seconds a clock change takes to show
    perseus bench [PROFILE.csv -m 32 64] [--json FILE] [--baseline FILE]

Conventions: every subcommand has ``--help`` with its defaults and ``--json``
for scripts; a user error is one line on stderr naming the flag or file,
exit status 2; Ctrl-C is exit status 130; outputs are checked to be
writable before any work and never overwritten without ``--force``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..errors import ProfileError
from ._arguments import UsageError, _parser
from ._commands import (
    _bench,
    _clockd,
    _evaluate,
    _optimize,
    _plan,
    _plot,
    _report,
    _reset_clocks,
    _show,
    _switch_latency,
)

__all__ = ["main"]

_COMMANDS = {
    "optimize": _optimize,
    "show": _show,
    "plan": _plan,
    "evaluate": _evaluate,
    "plot": _plot,
    "report": _report,
    "reset-clocks": _reset_clocks,
    "clockd": _clockd,
    "switch-latency": _switch_latency,
    "bench": _bench,
}


def _describe(error: BaseException) -> str:
    """One line for a user error: an OSError as 'file: reason', anything else as its message."""
    if isinstance(error, MemoryError):
        return (
            "out of memory (the process's memory limit, ulimit -v or the cgroup's, or the "
            "machine's); try a larger limit, or a coarser --unit-time / fewer microbatches"
        )
    if isinstance(error, OSError) and error.filename is not None:
        text = f"{error.filename}: {error.strerror or error}"
    else:
        text = str(error) or type(error).__name__
    # One line, whatever the message held, and no control characters.
    return _printable(" ".join(text.split()))


def _printable(text: str) -> str:
    """`text` with control characters escaped: a file name holding a terminal escape
    sequence must not act on the terminal."""
    return (
        text
        if text.isprintable()
        else "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    prog = "perseus"
    try:
        parser = _parser()
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the command they were given to, not by `perseus`
            command = f"perseus {args.command}" if getattr(args, "command", None) else prog
            raise UsageError(
                f"unrecognized arguments: {' '.join(extra)} (see `{command} --help`)", command
            )
        prog = f"perseus {args.command}"
        return _COMMANDS[args.command](args)
    except UsageError as error:
        message, prog = _printable(str(error)), error.prog or prog
    except BrokenPipeError:  # `perseus show ... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the final flush at exit is quiet too
        return 141  # 128 + SIGPIPE, as a shell tool killed by it would
    except (ProfileError, ValueError, OSError, ImportError, MemoryError) as error:
        message = _describe(error)
    except RuntimeError as error:
        # A thread that cannot start (pthread_create: EAGAIN) is a resource
        # limit, not a bug: name it, in one line.
        if "Resource temporarily unavailable" not in str(
            error
        ) and "can't start new thread" not in str(error):
            raise
        message = (
            "cannot start a thread: a resource limit was reached (memory, ulimit -v / -u, or the "
            "cgroup's pids limit); try a larger limit"
        )
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

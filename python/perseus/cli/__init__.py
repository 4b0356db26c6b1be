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
exit status 2; Ctrl-C is exit status 130, SIGTERM 143 and SIGHUP 129, each after
tidying up as an exception does (no temporary file left, GPU clocks given
back); outputs are checked to be writable before any work (an output folder
that does not exist yet is made only when the output is written, so a command
that fails or is stopped before then leaves none behind) and never overwritten
without ``--force``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from .._stderr import say
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


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what could
    not be written is quiet."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


class _NamedStdout:
    """sys.stdout, whose write errors name it: an OSError of writing our own
    output (``> /dev/full``, a full disk) otherwise names no file at all."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise _naming_stdout(error) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise _naming_stdout(error) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _naming_stdout(error: OSError) -> OSError:
    if error.filename is not None:
        return error
    # The same class (BrokenPipeError stays one), now naming the stream.
    return type(error)(error.errno, error.strerror, "standard output")


@contextlib.contextmanager
def _stdout_named() -> Iterator[None]:
    """sys.stdout named in its errors while a command runs: on the main thread
    only (sys.stdout is the process's, and two threads' commands would restore
    each other's), and not when there is none (fd 1 closed: print skips None)."""
    stream = sys.stdout
    if stream is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    sys.stdout = _NamedStdout(stream)
    try:
        yield
    finally:
        sys.stdout = stream


def _printable(text: str) -> str:
    """`text` with control characters escaped: a file name holding a terminal escape
    sequence must not act on the terminal."""
    return (
        text
        if text.isprintable()
        else "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    )


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program was, as Ctrl-C raises
    KeyboardInterrupt: with blocks and finally clauses then remove temporary
    files and give GPU clocks back, which a process killed outright skips.
    A KeyboardInterrupt, so that the solver's interrupt path stops it too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _ignore_signal(_signum: int, _frame: object) -> None:
    """Python's handler for a signal that is to change nothing."""


@contextlib.contextmanager
def _termination_as_exception() -> Iterator[None]:
    """While the command runs, SIGTERM and SIGHUP raise _Terminated.

    Only where they would kill the process (their handler is the default):
    a program that calls main() with its own handlers keeps them. Python runs
    signal handlers on the main thread only.
    """
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():

        def raise_terminated(signum: int, _frame: object) -> None:
            # One is enough: a second signal (SIGHUP after SIGTERM, a repeated
            # kill) while the first unwinds would break its tidying up. Not
            # SIG_IGN: Python raises OSError for a signal that arrived before
            # and finds its handler gone.
            for other in previous:
                signal.signal(other, _ignore_signal)
            raise _Terminated(signum)

        for signum in _TERMINATING_SIGNALS:
            if signal.getsignal(signum) == signal.SIG_DFL:
                previous[signum] = signal.signal(signum, raise_terminated)
    try:
        yield
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    with _termination_as_exception(), _stdout_named(), _stderr_present():
        return _run(argv)


@contextlib.contextmanager
def _stderr_present() -> Iterator[None]:
    """sys.stderr while a command runs, /dev/null where there is none (``2>&-``):
    every ``print(file=sys.stderr)`` (warnings, progress, errors) would
    otherwise write on stdout, into a ``--json`` document. On the main thread
    only, as _stdout_named."""
    if sys.stderr is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    with open(os.devnull, "w") as devnull:
        sys.stderr = devnull
        try:
            yield
        finally:
            sys.stderr = None


def _run(argv: Sequence[str] | None) -> int:
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
        status = _COMMANDS[args.command](args)
        if sys.stdout is not None:  # None: fd 1 was closed (`>&-`)
            sys.stdout.flush()  # here, where a full disk is reported as one line
        return status
    except UsageError as error:
        message, prog = _printable(str(error)), error.prog or prog
    except BrokenPipeError:  # `perseus show ... | head`: the reader has what it wanted
        _discard_stdout()
        return 141  # 128 + SIGPIPE, as a shell tool killed by it would
    except (ProfileError, ValueError, OSError, ImportError, MemoryError) as error:
        if getattr(error, "filename", None) == "standard output":
            _discard_stdout()
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
    except _Terminated as stop:
        _say(f"{prog}: terminated by {signal.Signals(stop.signum).name}")
        return 128 + stop.signum
    except KeyboardInterrupt:
        _say(f"{prog}: interrupted")
        return 130
    _say(f"{prog}: error: {message}")
    return 2


def _say(line: str) -> None:
    """A line on stderr, which may be gone (SIGHUP: the terminal hung up)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        say(line)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

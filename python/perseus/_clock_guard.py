"""Clocks given back however the process ends, for every open `FrequencySwitcher`.

One process-wide guard: the set of open switchers, interpreter exit
(atexit), the terminal signals (SIGTERM, SIGHUP, SIGQUIT, and SIGINT where
fatal: reset, then let the signal act), the watchdog process that resets the
clocks when this process dies without a word (its code is `_watchdog`), and
fork (a child must not touch its parent's locks). `register` is called by
each switcher when it opens.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
import weakref
from types import FrameType
from typing import TYPE_CHECKING, Any, Optional

from . import _core
from . import _watchdog as _watchdog_module
from ._stderr import say

if TYPE_CHECKING:
    from .switcher import FrequencySwitcher

__all__ = ["forget", "register"]


_open: weakref.WeakSet[FrequencySwitcher] = weakref.WeakSet()
_hooks_lock = threading.Lock()
_atexit_installed = False
_signals_requested = False
_previous_handlers: dict[int, Any] = {}
# The signals whose default action ends the process (SIGQUIT also dumps core).
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_SIGNAL_WAIT_S = 10.0  # the longest a handler waits for one switcher's reset


def _open_switchers() -> list[FrequencySwitcher]:
    for _ in range(3):  # the set may change while we copy it
        try:
            return list(_open)
        except RuntimeError:
            continue
    return []  # pragma: no cover


def _close_all() -> None:
    """Close every open switcher; errors are not raised (the worker printed them)."""
    for switcher in _open_switchers():
        try:
            switcher.close()
        except Exception:  # noqa: BLE001
            pass


def _reset_all() -> list[tuple[FrequencySwitcher, int]]:
    """Reset every open switcher's clocks, keeping it open; returns what each had asked for."""
    reset = []
    for switcher in _open_switchers():
        try:
            target = switcher._native.target_mhz
            switcher._native.reset()
        except Exception:  # noqa: BLE001 - closed or failed: nothing of it to reset
            continue
        reset.append((switcher, target))
    for switcher, _ in reset:
        try:
            switcher._native.wait_idle(_SIGNAL_WAIT_S)
        except Exception:  # noqa: BLE001
            pass
    return reset


def _restore(reset: list[tuple[FrequencySwitcher, int]]) -> None:
    for switcher, target in reset:
        if target:
            try:
                switcher._native.set(target)
            except Exception:  # noqa: BLE001 - closed meanwhile by the handler
                pass


def _on_signal(signum: int, frame: Optional[FrameType]) -> None:
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if previous is signal.default_int_handler:
        # KeyboardInterrupt is an exception like any other: with blocks,
        # close() and interpreter exit give the clocks back if it ends the
        # program, and a program that catches it keeps its switchers.
        previous(signum, frame)
        return
    if callable(previous):
        # The program's handler may end the process (clocks are reset
        # first) or carry on (the clocks it had asked for come back).
        reset = _reset_all()
        previous(signum, frame)
        _restore(reset)
        return
    # The signal would have killed the process: reset, then let it.
    _close_all()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def _install_signal_handlers() -> None:
    """Put _on_signal in front of the handlers of _HANDLED_SIGNALS. Main thread only."""
    for signum in _HANDLED_SIGNALS:
        if signum in _previous_handlers:
            continue
        previous = signal.getsignal(signum)
        # Leave alone signals the program ignores, and handlers installed
        # outside Python (getsignal gives None), which we could not chain;
        # the watchdog still resets if such a signal kills the process.
        if previous is None or previous == signal.SIG_IGN or previous is _on_signal:
            continue
        _previous_handlers[signum] = previous
        signal.signal(signum, _on_signal)


def _install_signal_handlers_on_main_thread() -> None:
    """Run by the main thread when the first switcher was made on another one."""
    try:
        _install_signal_handlers()
    except Exception as error:  # noqa: BLE001 - never raise into whatever main was doing
        say(f"perseus: could not install signal handlers: {error}")


def _request_signal_handlers() -> None:
    if threading.current_thread() is threading.main_thread():
        _install_signal_handlers()
        return
    # Python lets only the main thread install handlers: ask it to, at its
    # next Python instruction. Until it gets there (a main thread blocked in
    # native code gets there only when the call returns), a signal has its
    # old effect; the watchdog still resets if that kills the process.
    why = None
    if not threading.main_thread().is_alive():
        why = "the main thread has already finished"
    elif not _core.call_on_main_thread(_install_signal_handlers_on_main_thread):
        why = "the interpreter's queue of calls for the main thread is full"
    if why is not None:
        warnings.warn(
            "perseus: the first FrequencySwitcher was created off the main thread and "
            f"{why}, so no signal handlers reset the clocks on SIGTERM, SIGHUP, SIGQUIT or "
            "SIGINT (the clock watchdog still resets them once the process is gone). Create "
            "the first switcher on the main thread to have them.",
            RuntimeWarning,
            stacklevel=4,
        )


# -- the watchdog process (perseus/_watchdog.py) ------------------------------

# A fresh interpreter, not a fork: forking a process with threads (ours, the
# framework's) copies locks held by threads that do not exist in the child.
# Terminal signals are ignored before anything else; the watchdog goes when
# its socket closes. It loads this very perseus's extension and watchdog
# module by path, without the package: no numpy, no solver, so it starts in
# tens of milliseconds and sits in little memory, and no sys.path or working
# directory can make it run another perseus.
_WATCHDOG_BOOT = """\
import importlib.util, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, signal.SIG_IGN)
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
core = load("perseus._core", sys.argv[1])
watchdog = load("perseus._watchdog", sys.argv[2])
sys.exit(watchdog.main(int(sys.argv[3]), core))
"""
_WATCHDOG_QUICK_EXIT_S = 1.0  # a watchdog that dies sooner than this is failing, not killed
_WATCHDOG_MAX_QUICK_EXITS = 3  # ... and after this many in a row it is not restarted

_watchdog: Optional[subprocess.Popen[bytes]] = None
_watchdog_quick_exits = 0
_watchdog_gave_up = False


def _start_watchdog() -> subprocess.Popen[bytes]:
    """Start a watchdog and hand the core our end of its socket. _hooks_lock held."""
    global _watchdog
    if not sys.executable:
        raise RuntimeError("sys.executable is not set, so no Python can be started")
    core_path, module_path = _core.__file__, _watchdog_module.__file__
    if core_path is None or module_path is None:
        raise RuntimeError("perseus is not installed as files the watchdog could load")
    core_path, module_path = os.path.abspath(core_path), os.path.abspath(module_path)
    ours, theirs = socket.socketpair()  # both ends close-on-exec; theirs becomes its stdin
    try:
        process = subprocess.Popen(
            # -I: isolated, so no working directory, PYTHONPATH or user site
            # on sys.path (a signal.py beside the job would stop the boot);
            # cwd "/": nothing relative is loaded, and no mount is kept busy.
            [sys.executable, "-I", "-c", _WATCHDOG_BOOT, core_path, module_path, str(os.getpid())],
            stdin=theirs.fileno(),
            cwd="/",
            stdout=subprocess.DEVNULL,
            # stderr is inherited: the watchdog says there what it reset.
            # A session of its own: Ctrl-C and kills of our process group miss it.
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    _core.set_clock_watchdog(ours.detach())
    _watchdog = process
    threading.Thread(
        target=_reap_watchdog, args=(process,), name="perseus-watchdog-reaper", daemon=True
    ).start()
    return process


def _reap_watchdog(process: subprocess.Popen[bytes]) -> None:
    """Waits for the watchdog (so it never lingers as a zombie) and replaces it if it dies."""
    global _watchdog, _watchdog_quick_exits, _watchdog_gave_up
    started = time.monotonic()
    status = process.wait()
    with _hooks_lock:
        if _watchdog is not process:
            return  # replaced, or we are a forked child
        _watchdog = None
        quick = time.monotonic() - started < _WATCHDOG_QUICK_EXIT_S
        _watchdog_quick_exits = _watchdog_quick_exits + 1 if quick else 0
        if _watchdog_quick_exits >= _WATCHDOG_MAX_QUICK_EXITS:
            _watchdog_gave_up = True
            say(
                f"perseus: the clock watchdog keeps exiting (status {status}); not restarting "
                "it: clocks locked by this process are not reset if it dies without closing "
                "its switchers (SIGKILL, a crash). Run `perseus reset-clocks` after such a death."
            )
            return
        try:
            replacement = _start_watchdog()
        except Exception as error:  # noqa: BLE001
            _watchdog_gave_up = True
            say(f"perseus: could not restart the clock watchdog: {error}")
            return
        say(
            f"perseus: the clock watchdog (pid {process.pid}) exited with status {status}; "
            f"started another (pid {replacement.pid})"
        )


def _ensure_watchdog() -> None:
    """_hooks_lock held."""
    global _watchdog_gave_up
    if _watchdog is not None or _watchdog_gave_up:
        return
    if _core.clockd_socket():
        # The clock service (perseus clockd) makes our locks and resets them
        # when our connection closes, however we die: it is our watchdog.
        return
    try:
        _start_watchdog()
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        _watchdog_gave_up = True
        warnings.warn(
            f"perseus: could not start the clock watchdog ({error}): clocks locked by this "
            "process are not reset if it dies without closing its switchers (SIGKILL, the OOM "
            "killer, a crash). Run `perseus reset-clocks` after such a death.",
            RuntimeWarning,
            stacklevel=4,
        )


def register(switcher: FrequencySwitcher) -> None:
    global _atexit_installed, _signals_requested
    _open.add(switcher)
    with _hooks_lock:
        if not _atexit_installed:
            atexit.register(_close_all)
            _atexit_installed = True
        _ensure_watchdog()
        if not _signals_requested:
            _signals_requested = True
            _request_signal_handlers()


def forget(switcher: FrequencySwitcher) -> None:
    """A closed switcher leaves the guard's set."""
    _open.discard(switcher)


# -- fork() --------------------------------------------------------------------


class _ForkedNative:
    """Stands in for a switcher's native half in a forked child process.

    The worker thread and the locked clocks belong to the parent; the child
    must neither use nor reset them.
    """

    closed = True
    failed = False
    applied_mhz = 0
    target_mhz = 0
    memory_mhz = 0

    def __init__(self, native: Any) -> None:
        self.device = native.device
        self.nvml_index = native.nvml_index
        self.name = native.name
        self.supported_mhz = native.supported_mhz

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            "this FrequencySwitcher belongs to the parent process; a forked child cannot use "
            "it (create a new one in the child)"
        )


def _after_fork_in_child() -> None:
    # The core has already closed the child's copy of the watchdog socket and
    # emptied its lock books (pthread_atfork), so the parent's watchdog still
    # fires when the parent dies, whatever the child does.
    global _hooks_lock, _watchdog, _watchdog_quick_exits, _watchdog_gave_up
    _hooks_lock = threading.Lock()  # another thread may have held it at the fork
    _watchdog, _watchdog_quick_exits, _watchdog_gave_up = None, 0, False
    for switcher in _open_switchers():
        native = switcher._native
        switcher._native = _ForkedNative(native)
        native.close()  # in a child: forgets the parent's worker without touching it
    _open.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

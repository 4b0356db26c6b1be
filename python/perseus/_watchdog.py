"""The clock watchdog: gives back the GPU clocks a process locked, once it is gone.

perseus.switcher starts one per process, with the first FrequencySwitcher,
as a fresh interpreter whose stdin is one end of a socket pair. That
interpreter loads this file and perseus's extension by path, not the
perseus package, so this module imports nothing but the standard library. The other
end stays in the training process (close-on-exec, and closed in forked
children), where the core (cpp/clock_locks.cpp) writes a line each time the
set of locked GPUs changes::

    sm=GPU-8c3b... memory=GPU-8c3b... sm=GPU-1f07...

(an empty line when nothing is locked). However the training process ends,
SIGKILL, the OOM killer, a segfault or ``os._exit`` included, the kernel
closes its end, and this process reads end-of-file. It then resets, through
the same NVML loader as the switcher (``PERSEUS_NVML_LIBRARY``), the clocks
named by the last complete line, every one of them, and only then says so on
stderr (a broken stderr, ``train.py 2>&1 | tee log`` after ``tee`` died,
costs the report, never a reset), and exits. GPUs are
named by UUID, so CUDA_VISIBLE_DEVICES and NVML's numbering do not matter.

It runs isolated (``python -I``: no working directory, PYTHON* variable or
user site on ``sys.path``, started in ``/``), so a ``signal.py`` or
``types.py`` next to the training job cannot stop it from starting.

It ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT and lives in a session of its
own, so that Ctrl-C, a terminal hang-up or a signal to the training job's
process group (which may reach it before the training process has reset
anything) do not end it first. It is not a child anyone waits for: the
training process reaps it from a daemon thread if it dies early and starts
another, and never waits for it at exit.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

__all__ = ["main", "parse_line"]

_KINDS = ("sm", "memory")


def parse_line(line: bytes) -> dict[str, set[str]]:
    """The locks a feed line names: {uuid: {"sm", "memory"}}."""
    locks: dict[str, set[str]] = {}
    for token in line.decode("ascii", "replace").split():
        kind, _, uuid = token.partition("=")
        if kind in _KINDS and uuid:
            locks.setdefault(uuid, set()).add(kind)
    return locks


def _last_line_before_eof(fd: int) -> bytes:
    """Reads `fd` until end-of-file; returns the last complete line.

    A line cut short by the writer's death is ignored: it announced a lock
    that was never made, since the core writes before it locks.
    """
    last = b""
    pending = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # ECONNRESET and the like: the other end is gone too
            break
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if lines:
            last = lines[-1]
    return last


def _say(lines: list[str]) -> None:
    """Prints on stderr; a stderr that is gone (a broken pipe, a closed descriptor) is ignored.

    Called only once every GPU is reset: printing must never cost a reset.
    """
    if sys.stderr is None:  # print(file=None) would write on stdout
        return
    for line in lines:
        try:
            print(line, file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - BrokenPipeError, OSError, ValueError (closed file)
            return


def _reset(locks: dict[str, set[str]], owner: int, core: ModuleType) -> int:
    """Resets every GPU in ``locks`` first, then reports what it did."""
    failed = False
    report: list[str] = []
    for uuid in sorted(locks):
        try:
            gpu = core.NvmlDevice.from_uuid(uuid)
        except (core.LibraryLoadError, core.NvmlError, IndexError) as error:
            report.append(f"perseus: watchdog: could not open GPU {uuid}: {error}")
            failed = True
            continue
        done = []
        for kind, what, call in (
            ("sm", "SM clocks", gpu.reset_locked_clocks),
            ("memory", "memory clocks", gpu.reset_memory_locked_clocks),
        ):
            if kind not in locks[uuid]:
                continue
            try:
                call()
            except core.NvmlError as error:
                if error.code == core.NvmlReturn.ERROR_NOT_SUPPORTED:
                    continue
                done.append(f"{what} NOT reset ({error})")
                failed = True
            else:
                done.append(f"{what} reset")
        report.append(
            f"perseus: watchdog: process {owner} ended with clocks locked on GPU {uuid} "
            f"(NVML {gpu.nvml_index}, {gpu.name}): {', '.join(done)}"
        )
    if failed:
        report.append("perseus: watchdog: run `perseus reset-clocks` to retry")
    _say(report)
    return 1 if failed else 0


def main(owner: int, core: ModuleType) -> int:
    """Wait for stdin, process ``owner``'s end, to close; then reset what it had locked.

    ``core`` is perseus's extension module (perseus._core), loaded by the caller.
    """
    locks = parse_line(_last_line_before_eof(0))
    if not locks:
        return 0
    return _reset(locks, owner, core)

"""A fork server for tests/test_fuzz_parameters.py: each case in its own process, limited.

Run as a script, it imports perseus once and then reads cases from stdin:
for each it forks a child that lowers its address-space limit
(RLIMIT_AS), runs the case and writes back what happened. The parent
waits at most the case's timeout, kills a child that overstays, and answers
on stdout with one of

- ``("returned", summary)``: the case function's own report;
- ``("raised", type name, message)``: any exception, MemoryError included;
- ``("signal", number)``: the child died of a signal (a crash);
- ``("timeout", seconds)``: it was killed after the timeout.

Messages are length-prefixed pickles. `Sandbox` is the test's side.
"""

from __future__ import annotations

import math
import os
import pickle
import resource
import select
import signal
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np


def send(stream: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def receive(stream: BinaryIO) -> Any:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError("the sandbox closed its pipe")
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


# --- the cases (run in the child) ----------------------------------------------------


def make_profile(stages: int, time_scale: float, energy_scale: float, power: Any) -> Any:
    """Three options per (stage, instruction), scaled; `power` is passed on unchecked."""
    import perseus

    records = []
    for s in range(stages):
        for k, t, e in (("forward", 0.010, 5.0), ("backward", 0.020, 10.0)):
            for j, f in enumerate((1410, 1200, 1000)):
                records.append(
                    (
                        s,
                        k,
                        f,
                        t * time_scale * (1 + 0.3 * j + 0.05 * s),
                        e * energy_scale * (1 - 0.2 * j),
                    )
                )
    return perseus.Profile.from_records(records, blocking_power_w=power)


def check_frontier(frontier: Any, queries: list[Any]) -> dict[str, Any]:
    """The frontier's invariants; then every query through plan_for / energy_at."""
    import perseus

    times, energies = frontier.iteration_times_s, frontier.energies_j
    assert len(frontier) >= 1
    assert np.all(np.isfinite(times))
    assert np.all(times > 0)
    assert np.all(np.diff(times) > 0)
    assert np.all(np.isfinite(energies))
    assert np.all(energies > 0)
    # A frontier: a slower plan is cheaper over any common iteration length.
    blocking_w = frontier.profile.blocking_power_w * frontier.spec.num_gpus
    assert np.all(np.diff(energies - blocking_w * times) < 0)
    profile = frontier.profile
    for plan in (frontier.fastest, frontier[len(frontier) - 1]):
        replay = perseus.evaluate(profile, plan)
        assert math.isclose(replay.iteration_time_s, plan.iteration_time_s, rel_tol=1e-9)
        assert math.isclose(replay.energy_j, plan.energy_j, rel_tol=1e-9)
    answers = []
    for query in queries:
        for name in ("plan_for", "energy_at"):
            try:
                value = getattr(frontier, name)(query)
            except (ValueError, TypeError) as error:
                answers.append((name, "raised", type(error).__name__, str(error)))
            else:
                if name == "plan_for":
                    # The slowest plan within the deadline (the fastest if none is).
                    assert value.iteration_time_s <= query or value is frontier.fastest
                    value = value.iteration_time_s
                answers.append((name, "returned", float(value)))
    return {"plans": len(frontier), "answers": answers}


def case_optimize(profile_args: dict[str, Any], kwargs: dict[str, Any], queries: list[Any]) -> Any:
    """Build a profile and solve; report the frontier or the (expected) error."""
    import perseus

    profile = make_profile(**profile_args)
    return check_frontier(perseus.optimize(profile, **kwargs), queries)


def case_core(
    times: list[float], energies: list[float], power: float, unit: float, microbatches: int
) -> Any:
    """The core alone, no Python checks: extreme values must be refused by the core itself."""
    from perseus import _core

    pipeline = _core.Pipeline("1f1b", 2, 1, microbatches)
    offsets, kept_t, kept_e = [0], [], []
    t, e = np.array(times), np.array(energies)
    for _ in range(4):
        keep = _core.useful_options(t, e, power)
        kept_t += list(t[keep])
        kept_e += list(e[keep])
        offsets.append(len(kept_t))
    problem = _core.Problem(
        pipeline, np.array(offsets, dtype=np.int32), np.array(kept_t), np.array(kept_e), power
    )
    result = problem.solve(unit, True, _core.SolverBudgets())
    out_t, out_e = result.iteration_time_s, result.energy_j
    assert len(out_t) >= 1
    assert np.all(np.isfinite(out_t))
    assert np.all(np.isfinite(out_e))
    assert np.all(np.diff(out_t) > 0)
    assert np.all(out_t >= 4 * min(times) * 0.999)
    return {"plans": len(out_t)}


CASES = {"optimize": case_optimize, "core": case_core}


# --- the server ----------------------------------------------------------------------


def _vm_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(write_fd: int, name: str, args: tuple[Any, ...], memory_bytes: int) -> None:
    limit = _vm_bytes() + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        message: Any = ("returned", CASES[name](*args))
    except BaseException as error:  # noqa: BLE001 - the test judges it
        message = ("raised", type(error).__name__, str(error), traceback.format_exc(limit=-3))
    with os.fdopen(write_fd, "wb") as out:
        out.write(pickle.dumps(message))
    os._exit(0)


def _run(name: str, args: tuple[Any, ...], timeout_s: float, memory_bytes: int) -> Any:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            _child(write_fd, name, args, memory_bytes)
        finally:
            os._exit(3)
    os.close(write_fd)
    chunks, deadline = [], time.monotonic() + timeout_s
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return ("timeout", timeout_s)
            chunk = pipe.read1(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return ("signal", os.WTERMSIG(status))
    if not chunks:
        return ("raised", "NoResult", f"exit status {os.waitstatus_to_exitcode(status)}", "")
    return pickle.loads(b"".join(chunks))


def serve() -> None:
    import perseus  # noqa: F401  (imported once, before any fork)

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    send(stdout, "ready")
    while True:
        try:
            name, args, timeout_s, memory_bytes = receive(stdin)
        except EOFError:
            return
        send(stdout, _run(name, args, timeout_s, memory_bytes))


class Sandbox:
    """The test's handle on a fork server (start once, run many cases)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert receive(self.process.stdout) == "ready"  # type: ignore[arg-type]

    def run(
        self, name: str, *args: Any, timeout_s: float = 20.0, memory_bytes: int = 2 << 30
    ) -> Any:
        send(self.process.stdin, (name, args, timeout_s, memory_bytes))  # type: ignore[arg-type]
        return receive(self.process.stdout)  # type: ignore[arg-type]

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=30)
        self.process.stdout.close()  # type: ignore[union-attr]


if __name__ == "__main__":
    serve()

"""Run a megatron-core script on N CPU processes (gloo), with the test shims.

    python tests/megatron_support/cpu_launch.py --nproc 2 [--timeout 300] SCRIPT [ARGS...]

Like ``torchrun --nproc-per-node N`` on one machine: each process gets
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``, installs :mod:`cpu_shims` and runs SCRIPT as ``__main__``.
Nothing can hang: the processes are killed at the timeout, and all of them
as soon as one fails. Test-only; never use the shims in a real job.
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

__all__ = ["free_port", "launch"]

_TESTS = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(processes: Sequence[subprocess.Popen]) -> None:
    for p in processes:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
    for p in processes:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def launch(
    nproc: int,
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Optional[Mapping[str, str]] = None,
    logs: Optional[Path] = None,
    grace_s: float = 10.0,
) -> tuple[list[Optional[int]], list[str]]:
    """Start ``nproc`` ranks of ``python cpu_launch.py --child ARGV`` and wait for them.

    Parameters
    ----------
    argv
        The script and its arguments (or ``-m module ...``).
    timeout_s
        Wall-clock limit for all ranks together; past it they are killed.
    env
        Extra environment; ``{rank}`` in a value becomes the rank.
    logs
        Directory for ``rank<r>.log`` (stdout and stderr of each rank);
        default: a temporary one.
    grace_s
        After one rank fails, how long the others may still run.

    Returns
    -------
    (return codes, logs)
        One per rank; ``None`` for a rank that was killed.
    """
    import tempfile

    logs = Path(logs or tempfile.mkdtemp(prefix="cpu_launch-"))
    logs.mkdir(parents=True, exist_ok=True)
    port = str(free_port())
    processes = []
    files = []
    for rank in range(nproc):
        child_env = dict(os.environ)
        child_env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join(
                p for p in (child_env.get("PYTHONPATH", ""), str(_TESTS)) if p
            ),
        )
        for key, value in (env or {}).items():
            child_env[key] = value.replace("{rank}", str(rank))
        log = open(logs / f"rank{rank}.log", "w")  # noqa: SIM115 - closed with the processes
        files.append(log)
        processes.append(
            subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--child", *argv],
                env=child_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + timeout_s
    failed_at: Optional[float] = None
    try:
        while any(p.poll() is None for p in processes):
            now = time.monotonic()
            if failed_at is None and any(p.poll() not in (None, 0) for p in processes):
                failed_at = now
            if now > deadline or (failed_at is not None and now > failed_at + grace_s):
                break
            time.sleep(0.05)
    finally:
        _stop(processes)
        for f in files:
            f.close()
    codes = [
        p.returncode if p.returncode is not None and p.returncode >= 0 else None for p in processes
    ]
    texts = [(logs / f"rank{r}.log").read_text(errors="replace") for r in range(nproc)]
    return codes, texts


def _child(argv: list[str]) -> None:
    import faulthandler

    faulthandler.enable()
    sys.path.insert(0, str(_TESTS))
    from megatron_support import cpu_shims

    cpu_shims.install()
    if argv[:1] == ["-m"]:
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    codes, texts = launch(args.nproc, args.argv, timeout_s=args.timeout)
    for rank, (code, text) in enumerate(zip(codes, texts)):
        print(f"===== rank {rank}: exit {code}\n{text}")
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())

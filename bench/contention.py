"""Wall time under contention: does a solve's wall time follow its CPU time on a busy machine?

Issue 23, item 2: under a competing load of 2x the cores, a solve's wall time
should stay within 1.5x of (its CPU time / the share of the machine it gets).
Shared CI runners and busy login nodes are where users solve, and a solver
that spins, sleep-polls or hands work between threads that are not running
loses far more than its share there.

For each case this script

1. solves it ``--repeat`` times on the machine as it is (each solve in a fresh
   child process that reports its own wall and process CPU time around
   ``perseus.optimize`` alone), which gives the solve's parallelism
   ``u = CPU / wall`` (cores it keeps busy);
2. starts ``--load`` x cores busy processes (pure-Python loops that stop by
   themselves after ``--max-load-s``, and that this script also stops when it
   is done, however it ends), waits for them to be running, and solves again
   ``--repeat`` times;
3. reports, per case, the median quiet and loaded wall and CPU times, the
   CPU time the busy processes really burnt while the loaded solves ran
   (so a load that never ran cannot pass), and the ratio

       ratio = wall_loaded / (CPU_loaded / share),  share = cores * u / (u + L)

   where L is the number of busy processes: the scheduler shares the cores
   between runnable threads, and a solve that keeps u threads runnable
   competes with L always-runnable ones, so its fair share is u / (u + L) of
   the cores. ratio 1 means the solve lost nothing beyond its share; the
   target is ratio <= 1.5.

The quiet step should run on an otherwise idle machine (the figures are
printed so a reader can judge). Usage::

    python bench/contention.py                                   # default cases
    python bench/contention.py --case sosp24-gpt3-8x96 --repeat 5 --json out.json
    python bench/contention.py --case 'user-h100-16u-16x128' --load 2

Exit status 0 when every case ran (a ratio above the target is reported as
MISS, this is a report), 1 when a solve failed or the busy processes got under
half their fair CPU (the load did not run as meant, or the machine was busy
already: the 1-min load average before each case is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import corpus  # noqa: E402

#: Issue 23: wall time within this factor of CPU time / fair share.
TARGET_RATIO = 1.5
#: Default cases: small enough to repeat, large enough that local search and the chains run.
DEFAULT_CASES = ("sosp24-gpt3-8x96", "h100-8-8x96")
#: A busy process ends by itself after this long (s), even if this script is killed.
DEFAULT_MAX_LOAD_S = 600.0
#: Busy processes must have burnt at least this share of their fair CPU while the solves ran.
MIN_LOAD_SHARE = 0.5

_SPIN = (
    "import time, signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "end = time.monotonic() + {max_s}\n"
    "x = 0\n"
    "while time.monotonic() < end:\n"
    "    for _ in range(10000):\n"
    "        x += 1\n"
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def solve_worker(name: str) -> None:
    """Child: one solve of a corpus case; prints its wall and process CPU time as JSON."""
    import perseus

    case = corpus.get(name)
    if case.stages is not None:
        raise SystemExit(f"{name}: cases with a stage subset are not supported here")
    profile = perseus.Profile.from_csv(case.path, blocking_power_w=case.blocking_power_w)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    frontier = case.optimize(profile)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    phases = {str(k): float(v) for k, v in frontier.phase_times_s.items()}
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "plans": len(frontier), "phases_s": phases}))


def run_solve(name: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--solve-worker", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"solve of {name} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


class Load:
    """``count`` busy processes, started on entry and stopped (and reaped) on exit."""

    def __init__(self, count: int, max_s: float) -> None:
        self.count, self.max_s = count, max_s
        self.procs: list[subprocess.Popen[bytes]] = []
        self.cpu_s = 0.0  # CPU the busy processes burnt, summed (known after exit)

    def __enter__(self) -> Load:
        code = _SPIN.format(max_s=float(self.max_s))
        try:
            for _ in range(self.count):
                self.procs.append(subprocess.Popen([sys.executable, "-c", code]))
        except BaseException:
            self._stop()
            raise
        time.sleep(0.5)  # let them start and reach their loop
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                # os.wait4 gives the child's own CPU time; Popen.wait would reap it first.
                _, _, usage = os.wait4(p.pid, 0)
                self.cpu_s += usage.ru_utime + usage.ru_stime
            except ChildProcessError:
                pass
            p.returncode = p.returncode if p.returncode is not None else 0
        self.procs = []


def measure(name: str, load: int, repeat: int, max_load_s: float) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    load_avg_before = os.getloadavg()[0]
    log(f"{name}: {repeat} quiet solve(s) (1-min load average {load_avg_before:.2f})")
    quiet = [run_solve(name) for _ in range(repeat)]
    log(f"{name}: {repeat} solve(s) under {load} busy processes")
    wall0 = time.perf_counter()
    with Load(load, max_load_s) as busy:
        loaded = [run_solve(name) for _ in range(repeat)]
        loaded_span_s = time.perf_counter() - wall0
    q_wall = statistics.median(r["wall_s"] for r in quiet)
    q_cpu = statistics.median(r["cpu_s"] for r in quiet)
    l_wall = statistics.median(r["wall_s"] for r in loaded)
    l_cpu = statistics.median(r["cpu_s"] for r in loaded)
    u = q_cpu / q_wall if q_wall > 0 else 1.0
    share = cores * u / (u + load) if load else min(u, cores)
    ratio = l_wall / (l_cpu / share) if l_cpu > 0 else float("nan")
    # The load's CPU over the loaded span against its fair part of the machine.
    load_fair_s = loaded_span_s * cores * load / (load + u)
    load_share = busy.cpu_s / load_fair_s if load_fair_s > 0 else 0.0
    return {
        "case": name,
        "cores": cores,
        "load_average_before": load_avg_before,
        "busy_processes": load,
        "repeat": repeat,
        "quiet_wall_s": q_wall,
        "quiet_cpu_s": q_cpu,
        "parallelism": u,
        "loaded_wall_s": l_wall,
        "loaded_cpu_s": l_cpu,
        "fair_share_cores": share,
        "ratio": ratio,
        "load_cpu_s": busy.cpu_s,
        "load_fair_cpu_s": load_fair_s,
        "load_ran_share": load_share,
        "quiet_runs": quiet,
        "loaded_runs": loaded,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", help="corpus case name (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="solves per condition (median)")
    parser.add_argument(
        "--load", type=float, default=2.0, help="busy processes per core (default 2)"
    )
    parser.add_argument(
        "--max-load-s",
        type=float,
        default=DEFAULT_MAX_LOAD_S,
        help="a busy process stops by itself after this many seconds",
    )
    parser.add_argument("--json", metavar="OUT.json", help="also write every number as JSON")
    parser.add_argument("--solve-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.solve_worker:
        solve_worker(args.solve_worker)
        return 0
    if args.repeat < 1 or args.load < 0 or args.max_load_s <= 0:
        parser.error("--repeat >= 1, --load >= 0 and --max-load-s > 0")
    names = args.case or list(DEFAULT_CASES)
    for name in names:
        corpus.get(name)  # a clear error before anything starts
    busy = max(0, round(args.load * (os.cpu_count() or 1)))
    rows, failed = [], False
    for name in names:
        try:
            rows.append(measure(name, busy, args.repeat, args.max_load_s))
        except RuntimeError as error:
            log(str(error))
            failed = True
    print(
        f"{'case':28s} {'quiet wall/CPU s':>17s} {'u':>5s} {'loaded wall/CPU s':>18s} "
        f"{'share':>6s} {'ratio':>6s} {'load ran':>8s}"
    )
    for r in rows:
        print(
            f"# {r['case']}: 1-min load average {r['load_average_before']:.2f} before the quiet runs"
        )
    for r in rows:
        ok = r["ratio"] <= TARGET_RATIO
        load_ok = r["load_ran_share"] >= MIN_LOAD_SHARE or r["busy_processes"] == 0
        failed = failed or not load_ok
        print(
            f"{r['case']:28s} {r['quiet_wall_s']:8.3f}/{r['quiet_cpu_s']:<8.3f} "
            f"{r['parallelism']:5.2f} {r['loaded_wall_s']:8.3f}/{r['loaded_cpu_s']:<9.3f} "
            f"{r['fair_share_cores']:6.2f} {r['ratio']:6.2f} {r['load_ran_share']:8.2f}  "
            + ("ok" if ok else f"MISS (> {TARGET_RATIO:g})")
            + ("" if load_ok else "  LOAD GOT LITTLE CPU (was the machine busy already?)")
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

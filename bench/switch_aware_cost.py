"""What a switch-aware plan (`plan_for(d, switch_latency_s=L)`) costs, against another build.

A rank that knows its GPU's clock-switch latency asks for a switch-aware
plan when a replica straggles; that replays up to MAX_BASE_PLANS frontier
plans under the latency model, each with a ladder of merge tolerances, in
Python. This solves a case once (refine=False by default: the cost depends on
the frontier's size near the deadline, not on how it was solved), saves the
frontier, and then, in a fresh process per build, loads it and times
`perseus.switch_latency.switch_aware_plan` at spread deadlines, one after the
other, base and new alternating for ``--repeat`` rounds. Both builds must
give the same plan at every deadline (the script says if not).

    python bench/switch_aware_cost.py --base /tmp/base-pkg --case sosp24-gpt3-s0127-4x8 \\
        --case user-h100-16u-16x128

``--base`` names a directory holding the other build's ``perseus`` package
(``pip install --no-deps --target DIR .`` from an older commit). Exit status
0 (a report), 1 when the builds' plans differ, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

BENCH_DIR = Path(__file__).resolve().parent

# Runs in the child: load the frontier, time one switch-aware plan per deadline.
_PLAN = """
import hashlib, json, time
import numpy as np
import perseus
from perseus.switch_latency import switch_aware_plan
# The profile stored in the file, attached by load: what plan_for(d, switch_latency_s=L)
# uses, its fitted candidate included.
frontier = perseus.Frontier.load({frontier!r})
cpu_s, plans = [], []
for deadline in {deadlines!r}:
    started = time.process_time()
    aware = switch_aware_plan(frontier, deadline, {latency!r})
    cpu_s.append(time.process_time() - started)
    mhz = np.asarray(aware.plan.frequencies_mhz, dtype=np.int64)
    plans.append([aware.energy_at_deadline_j, hashlib.sha256(mhz.tobytes()).hexdigest()[:16]])
print(json.dumps({{"cpu_s": cpu_s, "plans": plans}}))
"""


def plan_in_child(base: Optional[Path], frontier: Path, deadlines, latency_s) -> dict:
    env = dict(os.environ)
    if base is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(base), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    code = _PLAN.format(
        frontier=str(frontier), deadlines=[float(d) for d in deadlines], latency=float(latency_s)
    )
    # A neutral working directory: a checkout's python/ must not shadow either build.
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tempfile.gettempdir(),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def solve_and_save(name: str, refine: bool, path: Path, count: int) -> list[float]:
    """Solves the case with the installed build, saves it, returns `count` spread deadlines."""
    import corpus
    import numpy as np
    import run

    case = corpus.get(name)
    with tempfile.TemporaryDirectory() as tmp:
        profile = run.perseus_profile(case, run.raw_profile(case), Path(tmp))
    frontier = case.optimize(profile, refine=refine)
    frontier.save(path)
    times = np.asarray(frontier.iteration_times_s)
    # 70 % of the way from a plan to the next, spread from 5 % to 90 % of the frontier.
    picks = np.linspace(0.05 * (len(times) - 2), 0.9 * (len(times) - 2), count).astype(int)
    return [float(times[k] + 0.7 * (times[k + 1] - times[k])) for k in picks]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="directory holding the base build")
    parser.add_argument("--case", action="append", required=True, help="corpus case name")
    parser.add_argument("--latency-s", type=float, default=0.01, help="switch latency (10 ms)")
    parser.add_argument("--deadlines", type=int, default=4, help="deadlines per case (4)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per build (3)")
    parser.add_argument("--refine", action="store_true", help="solve with refine=True")
    args = parser.parse_args(argv)
    if not (args.base / "perseus" / "__init__.py").is_file():
        parser.error(f"--base {args.base}: no perseus package in it")
    sys.path.insert(0, str(BENCH_DIR))
    print(f"switch-aware plan_for at L = {args.latency_s * 1e3:g} ms, {args.deadlines} deadlines "
          f"per case, median process CPU s over every deadline and round ({args.repeat})")  # fmt: skip
    print(
        f"{'case':34s} {'comps':>6s} {'plans':>6s} {'base s':>8s} {'new s':>8s} {'ratio':>6s}  same"
    )
    differ = False
    for name in args.case:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "frontier.json"
            deadlines = solve_and_save(name, args.refine, path, args.deadlines)
            import perseus

            loaded = perseus.Frontier.load(path)
            cpu = {"base": [], "new": []}
            plans = {}
            for _ in range(args.repeat):
                for side, where in (("base", args.base), ("new", None)):
                    result = plan_in_child(where, path, deadlines, args.latency_s)
                    cpu[side].extend(result["cpu_s"])
                    plans[side] = result["plans"]
        same = plans["base"] == plans["new"]
        differ |= not same
        base_s, new_s = statistics.median(cpu["base"]), statistics.median(cpu["new"])
        print(f"{name:34s} {loaded.spec.num_computations:6d} {len(loaded):6d} {base_s:8.3f} "
              f"{new_s:8.3f} {base_s / new_s:6.1f}  {'yes' if same else 'NO'}")  # fmt: skip
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

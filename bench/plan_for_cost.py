"""What `Frontier.plan_for(d)` costs by default at user scale, and what it saves.

A Megatron rank loads the frontier file and, when a replica straggles, asks for
the plan for the straggler's deadline; by default that is the frontier plans
nearest it fitted to it (the faster ones slowed into it, the slower ones sped
up to it and slowed into what is left), the cheapest. This solves a case,
saves and loads the frontier as a rank would, then times plan_for at 20
deadlines between plans (70 % of the way from one plan to the next) and
compares each with the frontier's own plan (``reclaim=False``) over the
deadline.

    python bench/plan_for_cost.py user-h100-16u-16x512 user-h100-16u-16x1024 --plain

``--plain`` solves with refine=False (a 16 x 1024 refined solve takes minutes;
the cost of fitting does not depend on how the frontier was solved, the
saving does: refine=False plans were never reclaimed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus
import run
from perseus import Frontier

#: Deadlines timed per case, spread over the frontier.
DEADLINES = 20
#: Where a deadline sits between its plan and the next one.
GAP_SHARE = 0.7


def measure(name: str, refine: bool) -> str:
    case = corpus.get(name)
    raw = run.raw_profile(case)
    with tempfile.TemporaryDirectory() as tmp:
        profile = run.perseus_profile(case, raw, Path(tmp))
        solved = case.optimize(profile, refine=refine)
        path = Path(tmp) / "frontier.json"
        solved.save(path)
        del solved
        started = time.process_time()
        frontier = Frontier.load(path)
        load_s = time.process_time() - started
        times = np.asarray(frontier.iteration_times_s)
        cpu_s, saving_pct = [], []
        for k in np.linspace(0, len(times) - 2, DEADLINES).astype(int):
            deadline = float(times[k] + GAP_SHARE * (times[k + 1] - times[k]))
            started = time.process_time()
            plan = frontier.plan_for(deadline)
            cpu_s.append(time.process_time() - started)
            own = frontier.plan_for(deadline, reclaim=False).energy_at(deadline)
            saving_pct.append((own - plan.energy_at(deadline)) / own * 100)
        computations = len(frontier.frequencies_mhz(0))
    return (
        f"{name} ({computations} computations, refine={refine}): load {load_s:.2f} CPU s; "
        f"plan_for {1e3 * np.median(cpu_s):.1f} CPU ms median, {1e3 * max(cpu_s):.1f} max; "
        f"saves {np.median(saving_pct):.4f} % median, {max(saving_pct):.4f} % max "
        f"against the frontier's own plan"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="bench/corpus.py case names")
    parser.add_argument("--plain", action="store_true", help="solve with refine=False")
    args = parser.parse_args()
    for name in args.cases:
        print(measure(name, refine=not args.plain), flush=True)


if __name__ == "__main__":
    main()

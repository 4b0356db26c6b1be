"""How much of perseus's energy saving survives clock changes that land late.

For each corpus case (``--quick``'s by default, or shell patterns), the
frontier is solved once; then for each switch latency L (0, 1, 10, 50 ms)
and each deadline (the fastest plan's time, and 10 % more), three plans are
replayed under the model of ``perseus.switch_latency`` (a change lands L
after the GPU reaches the computation asking for it):

- ``all-fastest``: the baseline, every computation at its fastest clock;
- ``unaware``: ``Frontier.plan_for(deadline)``, planned as if changes were
  instant;
- ``aware``: ``Frontier.plan_for(deadline, switch_latency_s=L)``.

Saving = 1 - E_plan / E_baseline, both over the same iteration length (the
longest of the deadline and the two replayed times: a plan that misses the
deadline is charged for its length, and the miss is reported). "Kept" is
the saving at L as a share of the unaware plan's saving at L = 0. This is a
replay on measured rows, not a GPU measurement: the latency model is the
assumption under test.

    python bench/switch_latency_saving.py [CASE-PATTERN ...] [-o results.txt]   # default: --quick cases
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
from perseus.plan import all_fastest_plan
from perseus.switch_latency import replay_with_switch_latency, switch_aware_plan
from run import perseus_profile, raw_profile

LATENCIES_S = (0.0, 0.001, 0.010, 0.050)
SLACKS = (1.0, 1.1)


def over(replay: object, length_s: float, blocking_w: float, gpus: int) -> float:
    """Energy of a replay over an iteration stretched to length_s (blocking power meanwhile)."""
    return float(replay.energy_j + blocking_w * gpus * (length_s - replay.iteration_time_s))  # type: ignore[attr-defined]


def run_case(case: corpus.Case, tmp: Path) -> list[list[str]]:
    profile = perseus_profile(case, raw_profile(case), tmp)
    frontier = case.optimize(profile, progress=False)
    spec = frontier.spec
    base = all_fastest_plan(profile, spec)
    blocking_w, gpus = profile.blocking_power_w, spec.num_gpus
    fwd = float(np.median(profile.measured(0, "forward").time_s))
    rows = []
    for slack in SLACKS:
        deadline = frontier.fastest.iteration_time_s * slack
        unaware = frontier.plan_for(deadline)
        saving0 = None
        for latency in LATENCIES_S:
            b = replay_with_switch_latency(profile, spec, base.frequencies_mhz, latency)
            u = replay_with_switch_latency(profile, spec, unaware.frequencies_mhz, latency)
            started = time.perf_counter()
            try:
                aware = switch_aware_plan(frontier, deadline, latency)
            except ValueError:  # no candidate meets the deadline under this latency
                aware = None
            aware_s = time.perf_counter() - started
            out = []
            for r in (u, aware.replay if aware is not None else None):
                if r is None:
                    out.append(None)
                    continue
                length = max(deadline, r.iteration_time_s, b.iteration_time_s)
                saving = 1 - over(r, length, blocking_w, gpus) / over(b, length, blocking_w, gpus)
                out.append((saving, max(0.0, r.iteration_time_s / deadline - 1), r))
            if saving0 is None:
                saving0 = out[0][0]
            row = [case.name, f"{slack:.2f}", f"{1000 * latency:g}", f"{1000 * fwd:.1f}"]
            for o in out:
                if o is None:
                    row += ["none meets", "-", "-", "-"]
                    continue
                row += [
                    f"{100 * o[0]:.2f}",
                    f"{100 * o[0] / saving0:.0f}" if saving0 else "-",
                    f"{100 * o[1]:.2f}",
                    str(o[2].switches_per_iteration),
                ]
            row += [f"{aware.merge_energy_cost_j:.2f}" if aware else "-", f"{aware_s:.1f}"]
            rows.append(row)
    return rows


HEADER = [
    "case",
    "deadline/fastest",
    "L ms",
    "fwd0 ms",
    "unaware saving %",
    "kept %",
    "late %",
    "switches",
    "aware saving %",
    "kept %",
    "late %",
    "switches",
    "merge cost J",
    "plan s",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patterns", nargs="*", help="corpus case patterns (default: --quick's)")
    parser.add_argument("-o", "--output", type=Path, help="also write the table here")
    args = parser.parse_args()
    cases = corpus.select(quick=not args.patterns, patterns=args.patterns or None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            started = time.perf_counter()
            rows += run_case(case, Path(tmp))
            took = time.perf_counter() - started
            print(f"{case.name}: {took:.1f} s", file=sys.stderr, flush=True)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(HEADER, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.output:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

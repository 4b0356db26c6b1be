"""bench/plan_for_cost.py: what plan_for's default costs per call, run as a user would.

On a SOSP '24 case (its profile ships in shared/), the script solves, saves and
loads the frontier and reports plan_for's CPU time and its saving against the
frontier's own plan; the saving is never negative (reclamation never costs
energy over the deadline).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "plan_for_cost.py"


def test_reports_cost_and_saving_per_case():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "sosp24-gpt3-8x12", "--plain"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    match = re.fullmatch(
        r"sosp24-gpt3-8x12 \(192 computations, refine=False\): load [\d.]+ CPU s; "
        r"plan_for ([\d.]+) CPU ms median, ([\d.]+) max; "
        r"saves (-?[\d.]+) % median, (-?[\d.]+) % max against the frontier's own plan",
        line,
    )
    assert match, line
    median_ms, max_ms, median_pct, max_pct = (float(v) for v in match.groups())
    assert 0 <= median_ms <= max_ms
    assert 0 <= median_pct <= max_pct
    # refine=False plans were never reclaimed: the reclaimed plan saves at some deadline.
    assert max_pct > 0

"""`bench/run.py --dense`: issue 23 item 4 as the benchmark reports it, run as CI would.

The script's figures for `plan_for(d)` at every unit deadline are checked
against the same frontier solved here through the public API: how many
deadlines it idles more than one unit before, the most it idles, and at how
many sampled plan times plan_for one ulp earlier costs less. The
item-4 target line must say "ok" exactly when no deadline both idles more
than a unit and loses more than the target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
CASE = "a100-coarse-2s5c-2x4"  # 5 clocks: plans far apart, so some deadlines idle > 1 unit


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The script's JSON, run with --no-lowtime where lowtime cannot be imported (a user's
    CI without the reference installed; the README's test run has none either)."""
    scratch = tmp_path_factory.mktemp("dense")
    out = scratch / "dense.json"
    (scratch / "lowtime").mkdir()
    (scratch / "lowtime" / "__init__.py").write_text('raise ImportError("not installed")\n')
    path = os.pathsep.join(filter(None, [str(scratch), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "run.py"),
            "--case",
            CASE,
            "--no-lowtime",
            "--no-memory",
            "--dense",
            "--repeat",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["versions"]["lowtime"] is None
    return document


def _from_the_api(tmp_path):
    """The same frontier solved here: the unit deadlines, how many units plan_for idles
    before each, and at the sampled plan times whether plan_for one ulp earlier costs
    less over the plan's time."""
    sys.path.insert(0, str(BENCH))
    try:
        import corpus
        import run
    finally:
        sys.path.remove(str(BENCH))
    case = corpus.get(CASE)
    profile = run.perseus_profile(case, run.raw_profile(case), tmp_path)
    frontier = case.optimize(profile)
    times = frontier.iteration_times_s
    deadlines = np.arange(times[0] + case.unit_time_s, times[-1], case.unit_time_s)
    idle = [
        (d - frontier.plan_for(float(d)).iteration_time_s) / case.unit_time_s for d in deadlines
    ]
    cheaper = []
    for k in range(1, len(times), max(1, len(times) // run.DENSE_MONOTONE_SAMPLES)):
        at_j = frontier.energy_at(float(times[k]))
        earlier = frontier.plan_for(float(np.nextafter(times[k], 0))).energy_at(float(times[k]))
        cheaper.append(at_j > earlier * (1 + 1e-11))
    return deadlines.size, np.asarray(idle), cheaper


def test_dense_reports_what_plan_for_gives(report, tmp_path):
    dense = report["cases"][0]["dense"]
    count, idle, cheaper = _from_the_api(tmp_path)
    assert dense["deadlines"] == count
    assert dense["default_idle_over_unit"] == int(np.sum(idle > 1 + 1e-9))
    assert dense["default_idle_max_units"] == pytest.approx(idle.max(), abs=1e-9)
    assert dense["default_idle_over_unit"] > 0  # the case this test was chosen for
    assert (
        0 <= dense["default_unmet"] <= min(dense["default_over"], dense["default_idle_over_unit"])
    )
    assert dense["monotone_samples"] == len(cheaper)
    assert dense["tighter_cheaper"] == sum(cheaper)


def test_item_4_target_line(report):
    dense = report["cases"][0]["dense"]
    lines = [
        t
        for t in report["targets"]
        if t["target"].startswith(f"{CASE} dense: plan_for(d) within one unit")
    ]
    assert len(lines) == 1
    assert lines[0]["status"] == ("ok" if dense["default_unmet"] == 0 else "MISS")
    assert f"{dense['default_unmet']}/{dense['deadlines']} deadlines neither" in lines[0]["detail"]

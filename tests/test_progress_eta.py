"""bench/progress_eta.py: how far a solve's progress and ETA are off, run as a user would.

The script's scoring is checked on made-up reports whose truth is known, and
the script itself on a short corpus case end to end.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "progress_eta.py"


@pytest.fixture(scope="module")
def progress_eta():
    spec = importlib.util.spec_from_file_location("progress_eta", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_fraction_that_follows_the_clock_scores_no_error_and_no_stall(progress_eta):
    times = [0.1 * k for k in range(1, 100)]
    scores = progress_eta.score(times, [t / 10 for t in times], 10.0)
    assert scores["eta_error_worst"] == pytest.approx(0.0, abs=1e-12)
    assert set(scores["eta_error_at"]) == {"25%", "50%", "75%", "90%"}
    assert scores["stall_share"] <= 0.03  # 1 % more every 0.1 s (two reports, with rounding)


def test_a_fraction_held_still_is_a_stall_and_a_wrong_eta(progress_eta):
    # Half the solve at 0.3, then straight on to 1: the ETA at 50 % says 3.3 s
    # left of a 10 s solve whose real remainder is 5 s.
    times = [0.5 * k for k in range(1, 20)]
    fractions = [min(t / 10, 0.3) if t <= 5 else 0.3 + 0.7 * (t - 5) / 5 for t in times]
    scores = progress_eta.score(times, fractions, 10.0)
    assert scores["stall_share"] >= 0.2
    assert scores["eta_error_at"]["50%"] == pytest.approx(abs(5 * 0.7 / 0.3 - 5) / 10)


def test_the_old_weights_hold_still_through_a_second_job(progress_eta):
    reports = [(0.0, "reclamation", 0, 10, 0.0), (1.0, "reclamation", 10, 10, 0.0)]
    reports += [(1.0 + k, "reclamation", k, 10, 0.0) for k in range(1, 11)]
    old = progress_eta.old_fractions(reports)
    assert old[1] == pytest.approx(0.8)
    assert old[-1] == pytest.approx(0.8)  # the second job never moves it


def test_runs_a_case_and_writes_both_models(tmp_path):
    out = tmp_path / "eta.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--case",
            "sosp24-gpt3-8x12",
            "--threads",
            "1",
            "--period",
            "0",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "sosp24-gpt3-8x12" in done.stdout
    result = json.loads(out.read_text())["results"][0]
    assert result["threads"] == 1
    assert result["wall_s"] > 0
    fractions = [report[4] for report in result["log"]]
    assert len(fractions) >= 100  # every tick reports at period 0
    assert fractions == sorted(fractions)
    assert fractions[-1] > 0.9
    assert set(result) >= {"old", "new"}

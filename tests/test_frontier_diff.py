"""bench/frontier_diff.py: two builds of perseus compared plan time by plan time.

Solved by the same build twice, a case's frontier must compare equal at
every plan time (the solve is deterministic); a base without a perseus
package is refused by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import perseus

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "frontier_diff.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )


def test_the_same_build_twice_gives_the_same_frontier(tmp_path):
    installed = Path(perseus.__file__).resolve().parent.parent  # holds the perseus package
    out = tmp_path / "diff.json"
    done = _run("--base", str(installed), "--case", "sosp24-gpt3-8x12", "--repeat", "1",
                "--json", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "sosp24-gpt3-8x12" in done.stdout
    (row,) = json.loads(out.read_text())["cases"]
    assert row["times"] > 100
    assert row["better"] == row["worse"] == row["uncovered"] == 0
    assert row["worst_pct"] == row["best_pct"] == 0.0
    assert row["plans"]["base"] == row["plans"]["new"]


def test_a_base_without_perseus_is_refused(tmp_path):
    done = _run("--base", str(tmp_path), "--case", "sosp24-gpt3-8x12")
    assert done.returncode == 2
    assert "no perseus package" in done.stderr

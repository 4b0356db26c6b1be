"""Two builds of perseus on the same corpus cases: CPU and the frontier, plan time by plan time.

A solver change that is meant to keep or improve the plans is checked here
before it lands: each case is solved by the installed perseus and by another
build (``--base`` names a directory holding its ``perseus`` package, e.g. one
made with ``pip install --no-deps --target DIR .`` from an older commit),
each in a fresh process (threads=1, so CPU seconds compare), and the two
frontiers are compared at every plan time of either, inside the base's
range: the energy of an iteration lasting that time with each frontier's
cheapest plan at least as fast (it idles, drawing blocking power, for the
rest). ``dE% = (new - base) / base * 100``, negative where the new build is
cheaper.

    python bench/frontier_diff.py --base /tmp/base-pkg --case 'sosp24-*-8x12' --case 'user-h100-16u-16x64'

Exit status 0 (a report), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
# Differences below this share of an iteration's energy are rounding, not plans.
RESOLUTION_PCT = 0.01

# Runs in the child: solve one case, save times, energies and the blocking power.
_SOLVE = """
import json, sys, tempfile, time
from pathlib import Path
import numpy as np
sys.path.insert(0, {bench!r})
import corpus, run
case = corpus.get({name!r})
raw = run.raw_profile(case)
with tempfile.TemporaryDirectory() as tmp:
    profile = run.perseus_profile(case, raw, Path(tmp))
    started = time.process_time()
    frontier = case.optimize(profile, threads=1)
    cpu_s = time.process_time() - started
np.savez({out!r}, t=np.asarray(frontier.iteration_times_s), e=np.asarray(frontier.energies_j),
         blocking_w=frontier.blocking_power_w * case.num_gpus)
print(json.dumps({{"cpu_s": cpu_s, "plans": len(frontier)}}))
"""


def solve(name: str, base: Optional[Path], out: Path) -> dict:
    """One solve in a fresh process with the installed build, or `base` first on the path."""
    env = dict(os.environ)
    if base is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(base), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    code = _SOLVE.format(bench=str(BENCH_DIR), name=name, out=str(out))
    # A neutral working directory: a checkout's python/ must not shadow either build.
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tempfile.gettempdir(),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def cheapest_at(times: np.ndarray, energies: np.ndarray, blocking_w: float, at: np.ndarray):
    """Energy over each time in `at` with the cheapest plan at least as fast (inf: none)."""
    order = np.argsort(times, kind="stable")
    t, e = times[order], energies[order]
    best_effective = np.minimum.accumulate(e - blocking_w * t)
    k = np.searchsorted(t, at, side="right") - 1
    out = np.full(at.shape, np.inf)
    out[k >= 0] = best_effective[k[k >= 0]] + blocking_w * at[k >= 0]
    return out


def compare(new: Path, base: Path) -> dict:
    n, b = np.load(new), np.load(base)
    blocking_w = float(b["blocking_w"])
    at = np.unique(np.r_[n["t"], b["t"]])
    at = at[(at >= b["t"].min()) & (at <= b["t"].max())]
    e_new = cheapest_at(n["t"], n["e"], blocking_w, at)
    e_base = cheapest_at(b["t"], b["e"], blocking_w, at)
    ok = np.isfinite(e_new) & np.isfinite(e_base)
    pct = (e_new[ok] - e_base[ok]) / e_base[ok] * 100
    return {
        "times": int(ok.sum()),
        "worse": int((pct > RESOLUTION_PCT).sum()),
        "better": int((pct < -RESOLUTION_PCT).sum()),
        "worst_pct": float(pct.max()),
        "best_pct": float(pct.min()),
        "mean_pct": float(pct.mean()),
        "uncovered": int((~np.isfinite(e_new) & np.isfinite(e_base)).sum()),
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--base", type=Path, required=True, help="directory holding the base build's perseus"
    )
    parser.add_argument(
        "--case", action="append", required=True, help="corpus case pattern (repeatable)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="solves per build and case (median CPU)"
    )
    parser.add_argument("--json", type=Path, help="also write every number as JSON")
    args = parser.parse_args(argv)
    if not (args.base / "perseus" / "__init__.py").is_file():
        parser.error(f"--base {args.base}: no perseus package in it")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    sys.path.insert(0, str(BENCH_DIR))
    import corpus

    names = [c.name for c in corpus.CASES if any(fnmatch.fnmatch(c.name, p) for p in args.case)]
    if not names:
        parser.error(f"no corpus case matches {args.case}; see bench/run.py --list")
    print(f"{'case':34s} {'CPU s base':>10s} {'CPU s new':>9s} {'ratio':>5s} {'plans b/n':>11s} "
          f"{'times':>5s} {'better':>6s} {'worse':>5s} {'best dE%':>8s} {'worst dE%':>9s} {'mean dE%':>8s}")  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            runs = {"base": [], "new": []}
            # Alternate the builds so that load drifts touch both alike.
            for _ in range(args.repeat):
                for side, path in (("base", args.base), ("new", None)):
                    runs[side].append(solve(name, path, Path(tmp) / f"{side}.npz"))
            diff = compare(Path(tmp) / "new.npz", Path(tmp) / "base.npz")
            cpu = {side: statistics.median(r["cpu_s"] for r in runs[side]) for side in runs}
            row = {
                "case": name,
                "cpu_s": cpu,
                "plans": {s: runs[s][-1]["plans"] for s in runs},
                **diff,
            }
            rows.append(row)
            print(f"{name:34s} {cpu['base']:10.3f} {cpu['new']:9.3f} {cpu['new'] / cpu['base']:5.2f} "
                  f"{row['plans']['base']:5d}/{row['plans']['new']:<5d} {diff['times']:5d} {diff['better']:6d} "
                  f"{diff['worse']:5d} {diff['best_pct']:+8.4f} {diff['worst_pct']:+9.4f} "
                  f"{diff['mean_pct']:+8.5f}", flush=True)  # fmt: skip
    print(
        f"CPU s: process CPU of one solve (threads=1), median of {args.repeat}; better/worse: plan "
        f"times where the new frontier is cheaper/dearer by more than {RESOLUTION_PCT} %."
    )
    if args.json:
        args.json.write_text(json.dumps({"base": str(args.base), "cases": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

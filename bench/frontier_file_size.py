"""Frontier files at user scale: size, save and load cost, `perseus show` / `perseus plan`.

Solves one case (default: the h200-16 synthetic profile, 16 x 256, 1F1B,
``refine=False``, about 39,000 plans), saves it as version 3 (and version 2
with ``--v2``; at 16 x 256 it would exceed the 512 MiB that load reads, and
save refuses it), then measures each step
in a fresh child process: process CPU seconds and peak RSS (``ru_maxrss``)
of the child alone, median of ``--repeat`` runs. What is measured:

- ``save v3`` / ``save v2``: load the frontier, then save it (the save's own
  CPU is the child's total minus a load-only child's);
- ``load``: ``Frontier.load`` (checks every field; see `perseus.Frontier.load`),
  of the file as written and of the same file without its digest (as the
  first version 3 files were: every plan is then replayed at load);
- ``load + one GPU's clocks``: what a Megatron rank does, ``frequencies_mhz(k, gpu=g)``;
- ``perseus show`` and ``perseus plan --deadline`` on the file.

Usage: ``python bench/frontier_file_size.py [--microbatches 256] [--v2] [--repeat 3]``.
The solve itself is cached in ``--work`` (default /tmp/perseus-frontier-bench).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

_CHILD = r"""
import sys
from perseus import Frontier
what, path = sys.argv[1], sys.argv[2]
if what == "load":
    fr = Frontier.load(path)
elif what == "rank":
    fr = Frontier.load(path)
    k = len(fr) // 2
    mhz = fr.frequencies_mhz(k, gpu=fr.spec.num_gpus - 1)
elif what in ("save2", "save3"):
    fr = Frontier.load(path)
    fr.save(path + ".resaved", version=int(what[-1]))
elif what == "import":
    pass
"""


_WRAPPER = r"""
import json, resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": code.returncode, "stderr": code.stderr[-2000:],
                  "cpu_s": u.ru_utime + u.ru_stime, "rss_mb": u.ru_maxrss / 1024}))
"""


def _child(arguments: list[str]) -> dict[str, float]:
    """Run `arguments` under a fresh wrapper: its CPU seconds (user + system) and peak RSS (MB).

    The wrapper's RUSAGE_CHILDREN covers that one child only (a parent's
    would report the largest child so far).
    """
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *arguments], capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - started
    report = json.loads(out.stdout)
    if report["rc"] != 0:
        raise SystemExit(f"{' '.join(arguments[:5])}... failed:\n{report['stderr']}")
    return {"cpu_s": report["cpu_s"], "rss_mb": report["rss_mb"], "wall_s": wall}


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def _solve(work: Path, microbatches: int) -> Path:
    import perseus
    import synthetic_profiles as sp

    target = work / f"h200-16-m{microbatches}.json"
    if target.exists():
        return target
    work.mkdir(parents=True, exist_ok=True)
    csv_path, _ = sp.write(sp.from_preset("h200-16"), work)
    synthetic = sp.from_preset("h200-16")
    profile = perseus.Profile.from_csv(csv_path, blocking_power_w=synthetic.blocking_power_w)
    started = time.process_time()
    frontier = perseus.optimize(profile, microbatches=microbatches, refine=False)
    print(
        f"solved 16 x {microbatches}: {len(frontier)} plans in {time.process_time() - started:.1f} CPU s"
    )
    frontier.save(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--microbatches", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--v2", action="store_true", help="also save and load version 2")
    parser.add_argument("--work", type=Path, default=Path("/tmp/perseus-frontier-bench"))
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    path = _solve(args.work, args.microbatches)
    py = [sys.executable, "-c", _CHILD]
    cli = [sys.executable, "-m", "perseus"]
    import perseus

    frontier = perseus.Frontier.load(path)
    deadline = float(frontier.iteration_times_s[len(frontier) // 2])
    steps: dict[str, list[str]] = {
        "python start + import perseus": [*py, "import", str(path)],
        "load v3": [*py, "load", str(path)],
        "load v3 + one GPU's clocks": [*py, "rank", str(path)],
        "load v3 + save v3": [*py, "save3", str(path)],
        "perseus show": [*cli, "show", str(path)],
        "perseus plan --deadline": [
            *cli,
            "plan",
            str(path),
            "--deadline",
            repr(deadline),
            "-o",
            str(args.work / "plan-out"),
            "--force",
        ],
    }
    sizes = {"v3": path.stat().st_size}
    # The first version 3 files had no digest: every plan is replayed at load.
    undigested = args.work / f"{path.stem}.no-digest.json"
    if not undigested.exists():
        document = json.loads(path.read_text())
        document["plans"].pop("sha256", None)
        undigested.write_text(json.dumps(document, separators=(",", ":")))
    steps["load v3 without digest"] = [*py, "load", str(undigested)]
    if args.v2:
        v2 = args.work / f"{path.stem}.v2.json"
        try:
            if not v2.exists():
                frontier.save(v2, version=2)
        except ValueError as error:  # beyond what load reads (16 x 256: 39,388 x 8,192 clocks)
            print(f"version 2: {error}")
        else:
            sizes["v2"] = v2.stat().st_size
            steps["load v2"] = [*py, "load", str(v2)]
            steps["load v2 + save v2"] = [*py, "save2", str(v2)]
    del frontier
    results: dict[str, dict[str, float]] = {}
    for name, command in steps.items():
        results[name] = _median([_child(command) for _ in range(args.repeat)])
    print(
        f"h200-16, 16 x {args.microbatches}, refine=False: {len(perseus.Frontier.load(path))} plans"
    )
    for kind, size in sizes.items():
        print(f"file {kind}: {size / 1e6:.2f} MB")
    print(
        f"{'step (median of ' + str(args.repeat) + ')':34} {'CPU s':>8} {'wall s':>8} {'peak RSS MB':>12}"
    )
    for name, r in results.items():
        print(f"{name:34} {r['cpu_s']:8.2f} {r['wall_s']:8.2f} {r['rss_mb']:12.0f}")
    if args.json:
        args.json.write_text(json.dumps({"sizes_bytes": sizes, "steps": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

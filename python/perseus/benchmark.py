"""``perseus bench``: the solver's benchmark, installed with the package, for a user's CI.

Each case (a profile, microbatches, schedule) is solved ``repeats`` times in
one fresh child process, so its peak resident memory is the case's own. Per
case the result holds CPU and wall seconds (median, min, max), the solver's
deterministic work counters (steps, cuts, plans), the energy of the fastest
plan and of the cheapest plan at fixed slowdowns of it, the saving against
all-fastest at the same iteration length, and the peak memory.

A baseline (an earlier ``--json`` file) is compared case by case. Energy is
gated tightly (``max_energy_regression_percent``); steps, cuts and the
fastest repeat's CPU time by a ratio (``max_slowdown``): they do not swing with a busy machine the way
wall time does, which is reported but never gated.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from ._validate import real

__all__ = [
    "DEFAULT_MAX_ENERGY_REGRESSION_PERCENT",
    "DEFAULT_MAX_SLOWDOWN",
    "MIN_GATED_CPU_S",
    "SCHEMA",
    "SLOWDOWNS",
    "BenchCase",
    "BenchError",
    "Comparison",
    "case_name",
    "compare",
    "corpus_cases",
    "load_result",
    "run_case",
    "run_cases",
]

SCHEMA = "perseus-bench/1"
"""Written as the result's ``schema``; a baseline with another one is refused."""

SLOWDOWNS = (1.05, 1.1, 1.2)
"""Iteration-time targets, as multiples of the fastest plan's time, whose energy is reported."""

DEFAULT_MAX_ENERGY_REGRESSION_PERCENT = 0.01
"""Energy may rise this much (percent) before it is a regression: the solver is deterministic,
so any real rise is a change in its answer; the margin absorbs float summation order."""

DEFAULT_MAX_SLOWDOWN = 1.5
"""Steps, cuts and CPU time may grow by this factor: small solver changes pass, a lost
speed-up does not; CPU time swings far less with a busy machine than wall time does."""

MIN_GATED_CPU_S = 0.05
"""CPU times below this many seconds are not gated: at that size the interpreter's own
noise is a large share of them."""


class BenchError(ValueError):
    """A benchmark that cannot run or a baseline that cannot be read: exit status 2."""


@dataclass(frozen=True)
class BenchCase:
    """One solve to benchmark."""

    name: str
    profile: str  #: path of the profile CSV
    blocking_power_w: float
    microbatches: int
    schedule: str = "1f1b"
    virtual_stages: int = 1
    unit_time_s: float = 1e-3


def case_name(
    label: str, microbatches: int, schedule: str, virtual_stages: int, unit_time_s: float
) -> str:
    """The key a case is compared by: profile label, microbatches, schedule and its knobs."""
    name = f"{label} m={microbatches} {schedule}"
    if virtual_stages > 1:
        name += f" v={virtual_stages}"
    if unit_time_s != 1e-3:
        name += f" unit={unit_time_s:g}s"
    return name


def corpus_cases() -> list[BenchCase]:
    """The shipped corpus subset: the README's example and two measured SOSP '24 pipelines.

    Chosen to take seconds, not minutes, on a CI runner's two cores (about
    0.3-0.5 CPU seconds a solve, large enough for CPU time to be gated), while
    exercising 1F1B and interleaved schedules and real (not synthetic) profiles.
    """
    from ._shipped import SOSP24_BLOCKING_POWER_W, shipped_profile
    from ._sidecar import read_blocking_power

    example = shipped_profile("gpt3-a100-8stage")
    stored = read_blocking_power(example)
    if stored is None:
        raise BenchError(f"the shipped example {example} has lost its sidecar; reinstall perseus")
    cases = [
        BenchCase(
            case_name("gpt3-a100-8stage", 128, "1f1b", 1, 1e-3),
            str(example),
            stored.blocking_power_w,
            128,
        ),
        BenchCase(
            case_name("gpt3-a100-8stage", 32, "interleaved-1f1b", 2, 1e-3),
            str(example),
            stored.blocking_power_w,
            32,
            "interleaved-1f1b",
            2,
        ),
    ]
    for name in ("sosp24-gpt3-175b", "sosp24-bloom-176b"):
        cases.append(
            BenchCase(
                case_name(name, 48, "1f1b", 1, 1e-3),
                str(shipped_profile(name)),
                SOSP24_BLOCKING_POWER_W,
                48,
            )
        )
    return cases


# --- running -------------------------------------------------------------------------------


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _peak_rss_bytes() -> int:
    """This process's peak resident memory: Linux's VmHWM (per process image), else getrusage."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB elsewhere


def _energies(frontier: Any) -> dict[str, Any]:
    """Energy at the fastest plan and at each slowdown, and the saving against all-fastest."""
    fastest = frontier.fastest
    baseline = frontier.baseline
    points = []
    for factor in SLOWDOWNS:
        deadline_s = factor * fastest.iteration_time_s
        # The frontier's own plan, which waits out the rest of the deadline: this measures
        # the solve, not plan_for's reclamation into the deadline.
        plan = frontier.plan_for(deadline_s, reclaim=False)
        energy_j = plan.energy_at(deadline_s)
        points.append(
            {
                "slowdown": factor,
                "deadline_s": deadline_s,
                "energy_j": energy_j,
                "saving_percent": 100 * (1 - energy_j / frontier.baseline_energy_at(deadline_s)),
            }
        )
    return {
        "all_fastest": {
            "iteration_time_s": baseline.iteration_time_s,
            "energy_j": baseline.energy_j,
        },
        "fastest": {
            "iteration_time_s": fastest.iteration_time_s,
            "energy_j": fastest.energy_j,
            "saving_percent": 100 * (1 - fastest.energy_j / baseline.energy_j),
        },
        "slowdowns": points,
    }


def _solve_repeatedly(case: BenchCase, repeats: int, compare_lowtime: bool) -> dict[str, Any]:
    """The child's work: solve ``repeats`` times, measure, summarize (one JSON object)."""
    from .optimize import optimize
    from .profile import Profile

    profile = Profile.from_csv(case.profile, blocking_power_w=case.blocking_power_w)
    cpu_s, wall_s, counters = [], [], []
    frontier = None
    for _ in range(repeats):
        wall0, cpu0 = time.perf_counter(), time.process_time()  # process time: all threads
        frontier = optimize(
            profile,
            microbatches=case.microbatches,
            schedule=case.schedule,
            virtual_stages=case.virtual_stages,
            unit_time_s=case.unit_time_s,
        )
        cpu_s.append(time.process_time() - cpu0)
        wall_s.append(time.perf_counter() - wall0)
        counters.append((frontier.steps, frontier.cuts, len(frontier)))
    assert frontier is not None
    steps, cuts, plans = counters[-1]
    energies = _energies(frontier)
    peak_rss_bytes = _peak_rss_bytes()  # before lowtime, whose memory is not ours
    lowtime = _lowtime(case, energies, statistics.median(wall_s)) if compare_lowtime else None
    return {
        "cpu_s": _spread(cpu_s),
        "wall_s": _spread(wall_s),
        "steps": steps,
        "cuts": cuts,
        "plans": plans,
        "deterministic": len(set(counters)) == 1,
        **energies,
        "peak_rss_bytes": peak_rss_bytes,
        **({"lowtime": lowtime} if compare_lowtime else {}),
    }


def _lowtime(
    case: BenchCase, energies: Mapping[str, Any], perseus_wall_s: float
) -> Optional[dict[str, Any]]:
    """lowtime on the same case (1F1B only: None otherwise), judged by the same replay."""
    if case.schedule != "1f1b":
        return None
    from ._lowtime import lowtime_available, solve_and_replay

    points = energies["slowdowns"]
    found = solve_and_replay(
        case.profile,
        blocking_power_w=case.blocking_power_w,
        microbatches=case.microbatches,
        unit_time_s=case.unit_time_s,
        deadlines_s=[p["deadline_s"] for p in points],
    )
    return {
        "version": lowtime_available(),
        "wall_s": found["wall_s"],
        "wall_ratio": found["wall_s"] / perseus_wall_s,  # lowtime's wall time over perseus's
        "plans": found["plans"],
        "fastest": found["fastest"],
        "slowdowns": [
            {
                "slowdown": p["slowdown"],
                "energy_j": lowtime_j,
                # perseus's energy over lowtime's at the same deadline: < 1 is perseus cheaper
                "energy_ratio": None if lowtime_j is None else p["energy_j"] / lowtime_j,
            }
            for p, lowtime_j in zip(points, found["energy_at_deadlines_j"])
        ],
    }


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_case(case: BenchCase, repeats: int, *, compare_lowtime: bool = False) -> dict[str, Any]:
    """Benchmark one case in a fresh child process (so its peak memory is its own).

    With `compare_lowtime`, lowtime then solves the same case once in that
    process (1F1B cases only; the result's ``lowtime`` is None for others).
    """
    if repeats < 1:
        raise BenchError(f"repeats must be >= 1, got {repeats}")
    request = json.dumps(
        {
            "case": asdict(case),
            "repeats": repeats,
            "compare_lowtime": compare_lowtime,
            "parent_pid": os.getpid(),
        }
    )
    env = dict(os.environ)
    # The child imports this very perseus, wherever it came from.
    package_parent = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    child = subprocess.run(
        [sys.executable, "-m", "perseus.benchmark", "--worker"],
        input=request,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if child.returncode != 0:
        lines = child.stderr.strip().splitlines()
        raise BenchError(
            f"case {case.name!r} failed in its child process (exit {child.returncode}): "
            f"{lines[-1] if lines else 'no message'}"
        )
    result: dict[str, Any] = json.loads(child.stdout)
    return {**asdict(case), "profile_sha256": _sha256(case.profile), "repeats": repeats, **result}


def run_cases(
    cases: Sequence[BenchCase],
    repeats: int,
    *,
    compare_lowtime: bool = False,
    progress: Optional[Callable[[BenchCase], None]] = None,
) -> dict[str, Any]:
    """Run every case; the result is the versioned document ``--json`` writes."""
    from . import __version__

    names = [c.name for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BenchError(f"two cases share the name {duplicates[0]!r}; give each profile once")
    results = []
    for case in cases:
        if progress is not None:
            progress(case)
        results.append(run_case(case, repeats, compare_lowtime=compare_lowtime))
    return {
        "schema": SCHEMA,
        "perseus_version": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "repeats": repeats,
        "slowdowns": list(SLOWDOWNS),
        "cases": results,
    }


# --- baselines -----------------------------------------------------------------------------


def load_result(path: str) -> dict[str, Any]:
    """A result file written by ``--json``; its schema must be this version's."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except FileNotFoundError:
        raise BenchError(
            f"baseline {path} does not exist; write one with `perseus bench --json {path}`"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BenchError(f"baseline {path} cannot be read: {error}") from None
    if not isinstance(document, dict):
        raise BenchError(f"baseline {path}: not a perseus bench result (not a JSON object)")
    schema = document.get("schema")
    if schema != SCHEMA:
        raise BenchError(
            f"baseline {path}: schema {schema!r}, this perseus reads {SCHEMA!r}; "
            "regenerate the baseline with this version"
        )
    cases = document.get("cases")
    if not isinstance(cases, list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) for c in cases
    ):
        raise BenchError(f"baseline {path}: 'cases' must be a list of objects with a 'name'")
    return document


@dataclass(frozen=True)
class Comparison:
    """What a comparison with a baseline found: one line each."""

    regressions: list[str]
    improvements: list[str]
    notes: list[str]


def _number(where: Mapping[str, Any], *keys: str) -> float:
    value: Any = where
    for key in keys:
        value = value[key]
    # Counters, times, energies and slowdowns are never negative: -1 steps
    # was skipped as "no baseline" instead of named as malformed.
    return real(value, ".".join(keys), low=0.0, error=TypeError)


def _energy_points(case: Mapping[str, Any]) -> dict[str, float]:
    """Label -> energy (J): the fastest plan and each slowdown."""
    points = {"fastest plan": _number(case, "fastest", "energy_j")}
    for point in case["slowdowns"]:
        points[f"{_number(point, 'slowdown'):g}x slowdown"] = _number(point, "energy_j")
    return points


def compare(
    current: Mapping[str, Any],
    baseline: Mapping[str, Any],
    *,
    max_energy_regression_percent: float = DEFAULT_MAX_ENERGY_REGRESSION_PERCENT,
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN,
    gate_cpu_time: bool = True,
) -> Comparison:
    """Compare two results case by case (by name); raises `BenchError` if none match."""
    old_cases = {c["name"]: c for c in baseline["cases"]}
    regressions: list[str] = []
    improvements: list[str] = []
    notes: list[str] = []
    compared = 0
    energy_limit = max_energy_regression_percent / 100
    for new in current["cases"]:
        name = new["name"]
        old = old_cases.pop(name, None)
        if old is None:
            notes.append(f"{name}: not in the baseline, not compared")
            continue
        if old.get("profile_sha256") != new["profile_sha256"]:
            notes.append(f"{name}: the profile's content differs from the baseline's, not compared")
            continue
        # Energies are over the same blocking power only: a sidecar edit or another
        # --blocking-power is a different problem, not a solver regression.
        if old.get("blocking_power_w") != new["blocking_power_w"]:
            notes.append(
                f"{name}: blocking power {new['blocking_power_w']:g} W, "
                f"{old.get('blocking_power_w')!r} W in the baseline, not compared"
            )
            continue
        compared += 1
        try:
            old_energy = _energy_points(old)
            new_energy = _energy_points(new)
            # The fastest repeat: other processes only ever add CPU time (cache and
            # core sharing), and on a busy 2-core machine they added up to 1.56x to
            # the median of 3 solves of 0.2 s, while the minimum moved far less.
            old_cpu_s = _number(old, "cpu_s", "min")
            ratios = [
                ("steps", _number(new, "steps"), _number(old, "steps"), True),
                ("cuts", _number(new, "cuts"), _number(old, "cuts"), True),
                (
                    "CPU time (fastest repeat, s)",
                    _number(new, "cpu_s", "min"),
                    old_cpu_s,
                    gate_cpu_time and old_cpu_s >= MIN_GATED_CPU_S,
                ),
            ]
        except (KeyError, TypeError) as error:
            raise BenchError(f"baseline case {name!r} is malformed: {error}") from None
        for label, new_j in new_energy.items():
            old_j = old_energy.get(label)
            if old_j is None or old_j <= 0:
                notes.append(f"{name}: no baseline energy at the {label}, not compared")
                continue
            change = new_j / old_j - 1
            line = (
                f"{name}: energy at the {label} {new_j:.6g} J vs {old_j:.6g} J in the "
                f"baseline ({100 * change:+.4f}%"
            )
            if change > energy_limit:
                regressions.append(f"{line}, limit +{max_energy_regression_percent:g}%)")
            elif change < -energy_limit:
                improvements.append(line + ")")
        for label, new_v, old_v, gated in ratios:
            if old_v <= 0:
                continue
            ratio = new_v / old_v
            line = f"{name}: {label} {new_v:.6g} vs {old_v:.6g} in the baseline ({ratio:.3f}x"
            if gated and ratio > max_slowdown:
                regressions.append(f"{line}, limit {max_slowdown:g}x)")
            elif ratio < 1 / max_slowdown:
                improvements.append(line + ")")
    for name in old_cases:
        notes.append(f"{name}: in the baseline but not run now")
    if compared == 0:
        raise BenchError(
            "the baseline has none of the cases run now; nothing to compare ("
            + "; ".join(notes)
            + ")"
        )
    return Comparison(regressions, improvements, notes)


# --- the child process ---------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel end this process when `perseus bench` ends (Linux).

    A parent killed by SIGTERM or SIGKILL runs no cleanup, so without this
    its child went on solving at full CPU, writing into a pipe nobody reads.
    """
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # not Linux: the pipe's end stops it at its next write
        return
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    # A bench started with SIGTERM ignored (nohup-like) passes that on: the
    # worker must still die of it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent was gone before the request took effect
        os._exit(1)


def _worker() -> int:
    request = json.loads(sys.stdin.read())
    if "parent_pid" in request:
        _die_with_parent(int(request["parent_pid"]))
    case = BenchCase(**request["case"])
    result = _solve_repeatedly(case, int(request["repeats"]), bool(request["compare_lowtime"]))
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":  # the child process of run_case
    if sys.argv[1:] != ["--worker"]:
        sys.exit("perseus.benchmark is run by `perseus bench`; see `perseus bench --help`")
    sys.exit(_worker())

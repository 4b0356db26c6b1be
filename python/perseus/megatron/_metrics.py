"""Run mode's measurements as records: iterations, job reports, the A/B calibration, the final report.

:mod:`._energy_meter` measures each rank's iterations; these records hold
them (``Attachment.metrics``) and sum them over the job. Every
``report_every`` iterations two all-gathers of Python objects, on the gloo
copies of the pipeline's group and then of the data-parallel group (none
spans the world), give every rank the records of every rank; nothing is
exchanged in between. Rank 0 logs one line on the ``perseus.megatron``
logger; any rank holding writers (Megatron-LM's TensorBoard and W&B writers
live on its last rank) writes per-iteration scalars.

Predicted numbers come from the plan: ``plan.iteration_time_s`` and
``plan.energy_j`` times the GPUs per pipeline stage (tensor parallelism),
for the forward-backward work the plan models; measured energy covers the
whole iteration (optimizer step and idle time too), so the honest saving is
the A/B calibration's: the all-fastest plan, then the plan, both measured.
"""

from __future__ import annotations

import logging
import math
import statistics
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from .._validate import is_integer

__all__ = [
    "CalibrationResult",
    "EnergyReport",
    "FinalReport",
    "IterationMetrics",
    "JobIteration",
    "Metrics",
    "format_energy_table",
]

logger = logging.getLogger("perseus.megatron")


@dataclass(frozen=True)
class IterationMetrics:
    """One training iteration on this rank."""

    iteration: int  #: 0-based, forward-only calls not counted
    energy_j: float  #: this GPU's energy from this iteration's start to the next's (NaN: unread)
    wall_time_s: float  #: wall time from this iteration's start to the next's
    pipeline_time_s: float  #: this rank: entering the schedule to its last backward
    plan_time_s: float  #: the plan's iteration time (NaN: no plan, clocks unlocked)
    plan_energy_j: float  #: the plan's energy per pipeline, one GPU per stage (NaN: no plan)
    phase: str  #: "plan", "following", "fastest" (calibration), "unlocked"
    switches: int  #: plan switches decided after this iteration


@dataclass(frozen=True)
class JobIteration:
    """One training iteration of the whole job: every GPU of every pipeline."""

    iteration: int
    energy_j: float  #: measured, all GPUs
    time_s: float  #: measured wall time (the longest rank's)
    pipeline_time_s: float  #: the slowest pipeline, schedule entry to last backward
    predicted_energy_j: float  #: the plans' energy, every replica, every GPU of a stage
    predicted_time_s: float  #: the slowest replica's plan time
    switches: int  #: plan switches of all replicas
    phase: str  #: replica 0's phase


@dataclass(frozen=True)
class EnergyReport:
    """Measured and predicted energy over a run of iterations (one report)."""

    first_iteration: int
    last_iteration: int
    gpus: int  #: GPUs measured (ranks)
    replicas: int  #: data-parallel replicas
    energy_j: float  #: measured energy per iteration, all GPUs (mean)
    time_s: float  #: measured wall time per iteration (mean)
    predicted_energy_j: float  #: the plans' energy per iteration (mean)
    predicted_time_s: float  #: the plans' iteration time (mean)
    switches: int  #: plan switches in these iterations, all replicas
    iterations: tuple[JobIteration, ...]
    #: SM clock read-backs that disagreed with the lock, all GPUs, since the job started, by
    #: cause (``overridden``, ``clamped``, ``changed``; see ``FrequencySwitcher.clock_mismatches``)
    clock_mismatches: Mapping[str, int] = field(default_factory=dict)
    #: stale-plan findings of any rank since the previous report (see :mod:`._drift`)
    stale_plans: tuple[Any, ...] = ()

    @property
    def clock_mismatch_count(self) -> int:
        """All clock mismatches of the job so far."""
        return sum(self.clock_mismatches.values())

    @property
    def power_w(self) -> float:
        """Mean power of all GPUs, W."""
        return self.energy_j / self.time_s if self.time_s > 0 else math.nan

    def __str__(self) -> str:
        return (
            f"iterations {self.first_iteration}-{self.last_iteration}: measured "
            f"{self.energy_j:.4g} J/iteration on {self.gpus} GPU(s) ({self.power_w:.4g} W), "
            f"{self.time_s:.4g} s/iteration; plan predicts {self.predicted_energy_j:.4g} J, "
            f"{self.predicted_time_s:.4g} s; {self.switches} plan switch(es)"
            + self._clock_text()
            + self._stale_text()
        )

    def _stale_text(self) -> str:
        """The findings grouped by stage, instruction and side: one clause each, however many
        GPUs found it (each rank's own text is in ``Attachment.stale_plans``)."""
        groups: dict[tuple[int, str, bool], list[Any]] = {}
        for finding in self.stale_plans:
            groups.setdefault((finding.stage, finding.instruction, finding.slower), []).append(
                finding
            )
        clauses = []
        for (stage, instruction, _), found in sorted(groups.items()):
            ratios = [f.ratio for f in found]
            low, high = min(ratios), max(ratios)
            span = f"{low:.3g}x" if f"{low:.3g}" == f"{high:.3g}" else f"{low:.3g}-{high:.3g}x"
            clauses.append(
                f"stage {stage} {instruction} {span} the plan's time on {len(found)} GPU(s) "
                f"(ranks {', '.join(str(f.rank) for f in found[:8])}"
                + (", ..." if len(found) > 8 else "")
                + ")"
            )
        if not clauses:
            return ""
        return "; STALE PLAN (profile again and re-optimize): " + "; ".join(clauses)

    def _clock_text(self) -> str:
        total = self.clock_mismatch_count
        if not total:
            return "; 0 clock mismatches"
        causes = ", ".join(
            f"{n} {cause}" for cause, n in sorted(self.clock_mismatches.items()) if n
        )
        return f"; {total} clock mismatch(es) so far ({causes}): see FrequencySwitcher.records()"


@dataclass(frozen=True)
class CalibrationResult:
    """A/B calibration: the all-fastest plan, then the plan, both measured on every GPU."""

    iterations: int  #: per side
    first_iteration: int  #: of the all-fastest side
    fastest_energy_j: float  #: mean energy per iteration at the all-fastest plan
    fastest_energy_std_j: float  #: its standard deviation across iterations
    plan_energy_j: float
    plan_energy_std_j: float
    fastest_time_s: float  #: mean wall time per iteration
    plan_time_s: float
    saving: float  #: 1 - plan / fastest (a fraction; 0.1: 10 % saved)
    saving_std: float  #: standard error of the saving
    time_change: float  #: plan / fastest - 1 in wall time (a fraction)

    def __str__(self) -> str:
        return (
            f"calibration over {self.iterations}+{self.iterations} iterations: all-fastest "
            f"{self.fastest_energy_j:.4g} ± {self.fastest_energy_std_j:.2g} J/iteration, plan "
            f"{self.plan_energy_j:.4g} ± {self.plan_energy_std_j:.2g} J/iteration: saving "
            f"{100 * self.saving:.2f} % ± {100 * self.saving_std:.2f} %, iteration time "
            f"{100 * self.time_change:+.2f} %"
        )


@dataclass(frozen=True)
class FinalReport:
    """What ran on this rank, made at detach (``Attachment.final_report``; no collective)."""

    rank: int
    first_iteration: int  #: perseus's number of this process's first iteration
    iterations: int  #: training iterations this process ran
    phases: Mapping[str, int]  #: iterations per phase ("plan", "following", "fastest", "unlocked")
    plan_times_s: tuple[float, ...]  #: the distinct plans run, by their iteration time
    switches: int  #: this replica's plan switches (following stragglers)
    energy_j: float  #: this GPU's measured energy over those iterations (NaN: unread)
    predicted_energy_j: float  #: the plans' energy per pipeline, summed over the iterations
    clock_mismatches: Mapping[str, int]  #: this GPU's read-backs that disagreed, by cause
    stale_plans: int  #: stale-plan findings on this rank

    def __str__(self) -> str:
        phases = ", ".join(f"{n} {phase}" for phase, n in sorted(self.phases.items()) if n)
        plans = ", ".join(f"{t:.4g} s" for t in self.plan_times_s) or "none"
        mismatches = sum(self.clock_mismatches.values())
        last = self.first_iteration + self.iterations - 1
        return (
            f"rank {self.rank} ran iterations {self.first_iteration}-{last} "
            f"({self.iterations}: {phases or 'none measured'}); plans run: {plans}; "
            f"{self.switches} straggler switch(es); this GPU measured {self.energy_j:.5g} J "
            f"(the plans predict {self.predicted_energy_j:.5g} J per pipeline); "
            f"{mismatches} clock mismatch(es); {self.stale_plans} stale-plan finding(s)"
        )


def final_report(
    metrics: Metrics,
    *,
    rank: int,
    first_iteration: int,
    iterations: int,
    switches: int,
    clock_mismatches: Mapping[str, int],
) -> FinalReport:
    """This rank's :class:`FinalReport` from its iteration records (this process's only)."""
    rows = [r for r in metrics.iterations if r.iteration >= first_iteration]
    phases: dict[str, int] = {}
    for row in rows:
        phases[row.phase] = phases.get(row.phase, 0) + 1
    energies = [r.energy_j for r in rows]
    predicted = [r.plan_energy_j for r in rows if math.isfinite(r.plan_energy_j)]
    return FinalReport(
        rank=rank,
        first_iteration=first_iteration,
        iterations=iterations,
        phases=phases,
        plan_times_s=tuple(
            sorted(
                {
                    r.plan_time_s
                    for r in rows
                    if r.phase in ("plan", "following") and math.isfinite(r.plan_time_s)
                }
            )
        ),
        switches=switches,
        energy_j=sum(energies)
        if energies and all(math.isfinite(e) for e in energies)
        else math.nan,
        predicted_energy_j=sum(predicted) if predicted else math.nan,
        clock_mismatches=dict(clock_mismatches),
        stale_plans=len(metrics.stale_plans),
    )


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _std(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.stdev(finite) if len(finite) > 1 else math.nan


def calibration(rows: Sequence[JobIteration], first: int, iterations: int) -> CalibrationResult:
    """The A/B result from job rows: ``[first, first+K)`` all-fastest, then K at the plan."""
    by_iteration = {r.iteration: r for r in rows}
    a = [by_iteration[i] for i in range(first, first + iterations) if i in by_iteration]
    b = [
        by_iteration[i]
        for i in range(first + iterations, first + 2 * iterations)
        if i in by_iteration
    ]
    ea, eb = [r.energy_j for r in a], [r.energy_j for r in b]
    mean_a, mean_b = _mean(ea), _mean(eb)
    std_a, std_b = _std(ea), _std(eb)
    saving = 1 - mean_b / mean_a if mean_a > 0 else math.nan
    # Delta method on mean_b / mean_a with independent sides.
    spread = (
        math.sqrt((std_b / mean_a) ** 2 / len(eb) + (mean_b * std_a / mean_a**2) ** 2 / len(ea))
        if mean_a > 0 and eb and ea
        else math.nan
    )
    ta, tb = _mean([r.time_s for r in a]), _mean([r.time_s for r in b])
    return CalibrationResult(
        iterations=iterations,
        first_iteration=first,
        fastest_energy_j=mean_a,
        fastest_energy_std_j=std_a,
        plan_energy_j=mean_b,
        plan_energy_std_j=std_b,
        fastest_time_s=ta,
        plan_time_s=tb,
        saving=saving,
        saving_std=spread,
        time_change=tb / ta - 1 if ta > 0 else math.nan,
    )


class Metrics:
    """Everything perseus measured in run mode (``Attachment.metrics``).

    Attributes
    ----------
    iterations : collections.deque of IterationMetrics
        This rank's iterations (the most recent ``keep_iterations``).
    reports : list of EnergyReport
        Every report, on every rank (each holds the whole job's numbers).
    job_iterations : collections.deque of JobIteration
        The whole job's iterations from the reports.
    calibration : CalibrationResult or None
        The A/B calibration, once both sides are measured.
    """

    def __init__(self, keep_iterations: int = 10_000) -> None:
        self.iterations: deque[IterationMetrics] = deque(maxlen=keep_iterations)
        self.reports: list[EnergyReport] = []
        self.job_iterations: deque[JobIteration] = deque(maxlen=keep_iterations)
        self.calibration: Optional[CalibrationResult] = None
        self.layout: dict[str, Any] = {}
        self.clock_mismatches: dict[str, int] = {}  #: this GPU's, as of the last report/detach
        self.stale_plans: list[Any] = []  #: this rank's stale-plan findings

    def summary(self) -> dict[str, Any]:
        """This rank's totals, as plain numbers (to gather and print, see
        :func:`format_energy_table`)."""
        rows = list(self.iterations)
        energies = [r.energy_j for r in rows if math.isfinite(r.energy_j)]
        return {
            **self.layout,
            "iterations": len(rows),
            "energy_j": sum(energies) if energies else math.nan,
            "energy_per_iteration_j": _mean([r.energy_j for r in rows]),
            "wall_time_per_iteration_s": _mean([r.wall_time_s for r in rows]),
            "pipeline_time_s": _mean([r.pipeline_time_s for r in rows]),
            "plan_time_s": _mean([r.plan_time_s for r in rows]),
            "plan_energy_j": _mean([r.plan_energy_j for r in rows]),
            "switches": sum(r.switches for r in rows),
            "clock_mismatches": dict(self.clock_mismatches),
            "stale_plans": [str(finding) for finding in self.stale_plans],
            "calibration": asdict(self.calibration) if self.calibration is not None else None,
        }


def format_energy_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A text table of :meth:`Metrics.summary` from every rank, with the job's totals."""
    header = (
        f"{'rank':>4} {'dp':>3} {'pp':>3} {'tp':>3} {'gpu':>3} {'iters':>5} {'J/iter':>10} "
        f"{'s/iter':>8} {'W':>8} {'plan s':>8} {'switches':>8}"
    )
    lines = ["perseus: measured energy per GPU", header, "-" * len(header)]
    total_energy = 0.0
    for s in sorted(summaries, key=lambda s: s.get("rank", 0)):
        e, t = s["energy_per_iteration_j"], s["wall_time_per_iteration_s"]
        power = e / t if t and math.isfinite(t) and t > 0 else math.nan
        if math.isfinite(e):
            total_energy += e
        lines.append(
            f"{s.get('rank', '?'):>4} {s.get('dp_rank', '?'):>3} {s.get('pp_rank', '?'):>3} "
            f"{s.get('tp_rank', '?'):>3} {s.get('device', '?'):>3} {s['iterations']:>5} "
            f"{e:>10.4g} {t:>8.4g} {power:>8.4g} {s['plan_time_s']:>8.4g} {s['switches']:>8}"
        )
    lines.append("-" * len(header))
    lines.append(f"job: {total_energy:.5g} J per iteration on {len(summaries)} GPU(s)")
    calibrations = [s["calibration"] for s in summaries if s.get("calibration")]
    if calibrations:
        c = calibrations[0]
        lines.append(str(CalibrationResult(**c)))
    return "\n".join(lines)


def megatron_writers() -> list[Any]:
    """Megatron-LM's TensorBoard and W&B writers, if it has made them (not imported here)."""
    module = sys.modules.get("megatron.training.global_vars")
    if module is None:
        return []
    writers = []
    for name in ("get_tensorboard_writer", "get_wandb_writer"):
        getter = getattr(module, name, None)
        try:
            writer = getter() if callable(getter) else None
        except Exception:  # noqa: BLE001 - an unset global: nothing to write to
            writer = None
        if writer is not None:
            writers.append(writer)
    return writers


def megatron_step_offset(args: Any) -> int:
    """What to add to perseus's iteration count to get Megatron-LM's logging step.

    Megatron-LM sets ``args.curr_iteration`` to the iteration about to run (after a resume, the
    checkpoint's) and logs it, once done, as step ``curr_iteration + 1``; perseus's first
    iteration is that one. 0 where Megatron-LM's arguments are not known.
    """
    for name in ("curr_iteration", "iteration"):
        value = getattr(args, name, None)
        if is_integer(value) and value >= 0:
            return value + 1
    return 0


def write(writers: Sequence[Any], report: EnergyReport, step_offset: int = 0) -> None:
    """Per-iteration scalars to TensorBoard-style (``add_scalar``) or W&B-style (``log``) writers,
    at Megatron-LM's step (perseus's iteration + `step_offset`), so a resumed job's scalars go on
    where they stopped instead of restarting at 0."""
    for row in report.iterations:
        step = row.iteration + step_offset
        scalars = {
            "perseus/energy_j": row.energy_j,
            "perseus/predicted_energy_j": row.predicted_energy_j,
            "perseus/iteration_time_s": row.time_s,
            "perseus/predicted_time_s": row.predicted_time_s,
            "perseus/power_w": row.energy_j / row.time_s if row.time_s > 0 else math.nan,
            "perseus/plan_switches": float(row.switches),
        }
        if row is report.iterations[-1]:  # counted per report, so at its last step
            scalars["perseus/clock_mismatches"] = float(report.clock_mismatch_count)
            scalars["perseus/stale_plan_findings"] = float(len(report.stale_plans))
        for writer in writers:
            if hasattr(writer, "add_scalar"):
                for tag, value in scalars.items():
                    writer.add_scalar(tag, value, step)
            else:
                writer.log(scalars, step=step)


def job_rows(payloads: Sequence[dict[str, Any]]) -> list[JobIteration]:
    """Sum the ranks' records (from :meth:`._energy_meter.Recorder.payload`) into job iterations."""
    by_iteration: dict[int, list[tuple[dict[str, Any], IterationMetrics]]] = {}
    for payload in payloads:
        for record in payload["records"]:
            by_iteration.setdefault(record.iteration, []).append((payload, record))
    rows = []
    for iteration in sorted(by_iteration):
        entries = by_iteration[iteration]
        energies = [r.energy_j for _, r in entries]
        # A replica's prediction once (its pipeline's first rank), scaled to its GPUs per stage.
        firsts = [(p, r) for p, r in entries if p["model_parallel_rank"] == 0]
        predicted = [
            r.plan_energy_j * p["gpus_per_stage"]
            for p, r in firsts
            if math.isfinite(r.plan_energy_j)
        ]
        plan_times = [r.plan_time_s for _, r in firsts if math.isfinite(r.plan_time_s)]
        phases = [r.phase for p, r in firsts if p["data_parallel_rank"] == 0]
        rows.append(
            JobIteration(
                iteration=iteration,
                energy_j=sum(energies) if all(math.isfinite(e) for e in energies) else math.nan,
                time_s=max(r.wall_time_s for _, r in entries),
                pipeline_time_s=max(
                    (r.pipeline_time_s for _, r in entries if math.isfinite(r.pipeline_time_s)),
                    default=math.nan,
                ),
                predicted_energy_j=sum(predicted) if predicted else math.nan,
                predicted_time_s=max(plan_times) if plan_times else math.nan,
                switches=sum(r.switches for _, r in firsts),
                phase=phases[0] if phases else "",
            )
        )
    return rows


def report_of(
    rows: Sequence[JobIteration],
    gpus: int,
    replicas: int,
    payloads: Sequence[dict[str, Any]] = (),
) -> EnergyReport:
    """The report of `rows`; `payloads` (every rank's) add clock mismatches and stale plans."""
    mismatches: dict[str, int] = {}
    for payload in payloads:
        for cause, n in dict(payload.get("clock_mismatches") or {}).items():
            mismatches[str(cause)] = mismatches.get(str(cause), 0) + int(n)
    stale = tuple(finding for payload in payloads for finding in payload.get("stale_plans", ()))
    return EnergyReport(
        first_iteration=rows[0].iteration,
        last_iteration=rows[-1].iteration,
        gpus=gpus,
        replicas=replicas,
        energy_j=_mean([r.energy_j for r in rows]),
        time_s=_mean([r.time_s for r in rows]),
        predicted_energy_j=_mean([r.predicted_energy_j for r in rows]),
        predicted_time_s=_mean([r.predicted_time_s for r in rows]),
        switches=sum(r.switches for r in rows),
        iterations=tuple(rows),
        clock_mismatches=mismatches,
        stale_plans=stale,
    )

"""Run mode between iterations: the last iteration's time, its straggler decision, its energy.

When an iteration starts, :class:`Between` finishes the one before: it reads
its time from the CUDA events (late, so nothing waited for the GPU), starts
the exchange of the replicas' times and hands the straggler policy those of
an earlier iteration whose exchange has finished (asynchronous collectives
waited an iteration later, see :class:`~._timing.ReplicaTimes`: no host
barrier each iteration; a decision on iteration n is taken when n + 3
starts), closes
its energy record and, every ``report_every`` iterations (and when an A/B
calibration ends), gathers every rank's records into a report. These are
run mode's only collectives, and every rank takes the same branches: they
depend on iteration numbers, workloads and settings, which all ranks share,
never on one rank's state (a rank that let go sends no time, which skips the
decision for everyone).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import deque
from typing import Any, Optional

from . import _metrics
from ._drift import DriftWatch, StalePlanWarning
from ._energy_meter import Recorder
from ._following import Iteration, PlanBook
from ._options import MetricsOptions, StragglerOptions
from ._stragglers import PlanSwitch, StragglerDecision
from ._timing import CpuGroups, ReplicaTimes, Stopwatch

__all__ = ["Between", "calibration_phase"]

logger = logging.getLogger("perseus.megatron")


def calibration_phase(metrics: MetricsOptions, iteration: int) -> Optional[str]:
    """``"fastest"`` or ``"plan"`` inside an A/B calibration, else None."""
    k = metrics.calibrate
    if not k or not metrics.enabled:
        return None
    first = metrics.warmup_iterations
    if first <= iteration < first + k:
        return "fastest"
    if first + k <= iteration < first + 2 * k:
        return "plan"
    return None


class Between:
    """What runs between iterations on one rank (see the module docs).

    The lists it appends to (``switches``, ``decisions``, ``iteration_times_s``)
    and ``metrics`` are the attachment's (:class:`~._observed.Observed`).
    """

    def __init__(
        self,
        *,
        book: PlanBook,
        stragglers: StragglerOptions,
        metrics_options: MetricsOptions,
        stopwatch: Stopwatch,
        groups: Optional[CpuGroups],
        recorder: Recorder,
        rank: int,
        switches: list[PlanSwitch],
        decisions: deque[StragglerDecision],
        iteration_times_s: deque[float],
        drift: Optional[DriftWatch] = None,
        warns_for_stage: bool = True,
    ) -> None:
        self._book = book
        self._stragglers = stragglers
        self._metrics_options = metrics_options
        self._stopwatch = stopwatch
        self._groups = groups
        self._exchange = ReplicaTimes(groups) if groups is not None else None
        self._recorder = recorder
        self._rank = rank
        self._switches = switches
        self._decisions = decisions
        self._times = iteration_times_s
        self.step_offset = 0  # Megatron-LM's step of perseus's iteration 0 (see _metrics)
        self.drift = drift
        # perseus's number of this process's first iteration (after a resume, where the saved
        # run stopped): warm-ups count from it, as the new process warms up again
        self.first_iteration = 0
        self._warns_for_stage = warns_for_stage

    def finish(self, prev: Iteration, now: tuple[float, float]) -> None:
        """The previous iteration: time, straggler decision, energy record, report."""
        seconds = self._stopwatch.seconds(prev.start, prev.end)
        if math.isfinite(seconds):
            self._times.append(seconds)
        switched = self._follow_stragglers(prev, seconds if prev.following else math.nan)
        self._check_plan(prev)
        self._recorder.close(now, pipeline_time_s=seconds, switches=switched)
        options = self._metrics_options
        end = options.warmup_iterations + 2 * options.calibrate - 1
        calibration_end = bool(options.calibrate) and prev.number == end
        if options.enabled and ((prev.number + 1) % options.report_every == 0 or calibration_end):
            self._report(calibration_end)

    def _check_plan(self, prev: Iteration) -> None:
        """The stale-plan check on `prev`'s timed computations (see :mod:`._drift`)."""
        drift, plan, order, clocks = self.drift, prev.plan, prev.expected, prev.frequencies
        spans, prev.spans = prev.spans, []
        if drift is None or not spans or plan is None or order is None or clocks is None:
            return
        profile = plan.profile
        if (
            profile is None
            or not prev.following
            or prev.number - self.first_iteration < self._metrics_options.warmup_iterations
        ):
            return
        sums: dict[tuple[int, str], list[float]] = {}
        for index, start, end in spans:
            instruction, chunk, _ = order[index]
            stage = chunk * prev.pp_size + prev.pp_rank
            predicted = drift.predicted_s(profile, stage, instruction, clocks[index])
            total = sums.setdefault((stage, instruction), [0.0, 0.0])
            total[0] += self._stopwatch.seconds(start, end)
            total[1] += predicted
        found = drift.observe(prev.number, [(s, i, m, p) for (s, i), (m, p) in sums.items()])
        for finding in found:
            self._recorder.stale(finding)
            self._recorder.metrics.stale_plans.append(finding)
            if self._warns_for_stage:
                message = f"perseus: {finding}"
                warnings.warn(message, StalePlanWarning, stacklevel=2)
                logger.warning(message)

    def close_locally(self, prev: Iteration) -> None:
        """At detach: the last iteration's record, without any collective."""
        seconds = self._stopwatch.seconds(prev.start, prev.end)
        if math.isfinite(seconds):
            self._times.append(seconds)
        self._recorder.close(self._recorder.now(), pipeline_time_s=seconds, switches=0)
        if self._exchange is not None:
            self._exchange.drop()

    def _follow_stragglers(self, prev: Iteration, seconds: float) -> int:
        groups, exchange = self._groups, self._exchange
        if groups is None or exchange is None or groups.data_parallel_size < 2:
            return 0
        entry = None
        if (
            prev.key is not None
            and prev.number - self.first_iteration >= self._stragglers.warmup_iterations
            and calibration_phase(self._metrics_options, prev.number) is None
            and self._book.policy(prev.key) is not None
        ):
            entry = (prev.number, prev.key, seconds)
        return sum(self._decide(*done) for done in exchange.step(entry))

    def _decide(self, number: int, key: Any, times: list[float]) -> int:
        """The policy on iteration `number`'s replica times (exchanged meanwhile)."""
        groups = self._groups
        assert groups is not None
        if key != self._book.last_key:
            return 0  # the workload changed meanwhile: its times no longer matter
        policy = self._book.policy(key)
        if policy is None:
            return 0
        options = self._metrics_options
        if options.calibrate and number == options.warmup_iterations + 2 * options.calibrate:
            policy.reset()  # the first samples after calibration
        switch = policy.observe(number, times)
        if policy.decisions:
            decision = policy.decisions[-1]
            self._decisions.append(decision)
            if groups.first_of_replica:
                logger.debug("perseus: replica %d: %s", groups.data_parallel_rank, decision)
        if switch is None:
            return 0
        self._switches.append(switch)
        if groups.first_of_replica:  # once per replica
            logger.info("perseus: replica %d %s", groups.data_parallel_rank, switch)
        return 1

    def _report(self, calibration_end: bool) -> None:
        metrics, options = self._recorder.metrics, self._metrics_options
        payload = self._recorder.payload(dict(metrics.layout))
        metrics.clock_mismatches = dict(payload["clock_mismatches"])
        payloads: list[Any] = (
            self._groups.gather(payload) if self._groups is not None else [payload]
        )
        rows = _metrics.job_rows(payloads)
        if not rows:
            return
        metrics.job_iterations.extend(rows)
        replicas = self._groups.data_parallel_size if self._groups is not None else 1
        report = _metrics.report_of(rows, gpus=len(payloads), replicas=replicas, payloads=payloads)
        metrics.reports.append(report)
        if self._rank == 0:  # one line for the job
            logger.info("perseus: %s", report)
        if calibration_end:
            metrics.calibration = _metrics.calibration(
                list(metrics.job_iterations), options.warmup_iterations, options.calibrate
            )
            if self._rank == 0:
                logger.info("perseus: %s", metrics.calibration)
        writers = list(options.writers)
        if options.megatron_writers:
            writers += _metrics.megatron_writers()
        if writers:
            _metrics.write(writers, report, self.step_offset)

"""Whether what Megatron runs is what the plan says, and what perseus does when it is not.

Before an iteration: the code path is one perseus can follow, the workload
has a plan made for this pipeline, and the frontier's profile was measured
on a setup like this job's (its fingerprint, once per workload). Before each
computation: it is the one the plan's order has next. A difference raises
:class:`~._errors.ScheduleMismatchError` (or
:class:`~._errors.UnsupportedScheduleError`), or with
``on_mismatch="warn"`` warns once and lets go of the clocks for good (the
``let_go`` transition of :mod:`._lifecycle`).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from ._between import calibration_phase
from ._compat import unsupported_schedule
from ._errors import ScheduleMismatchError, UnsupportedScheduleError
from ._fingerprint import differences, fingerprint_of, gpu_model
from ._following import PLAN_SCHEDULE, Iteration, PlanWarning, WorkloadKey
from ._once import warn_for_job
from ._runtime import Runtime

__all__ = ["Conformance"]

logger = logging.getLogger("perseus.megatron")


class Conformance:
    """One attachment's checks of Megatron's computations against its plans."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._fingerprinted: set[WorkloadKey] = set()

    def supported(self, it: Iteration, config: Any) -> bool:
        """Whether perseus can follow this iteration's code path (lets go when it cannot)."""
        settings, book = self._rt.settings, self._rt.book
        assert settings is not None
        assert book is not None
        run = settings.mode == "run"
        bypass = unsupported_schedule(config, it.kind, run_mode=run, by_length=settings.by_length)
        if bypass is None:
            problem = book.length_problem(it) if run else None
            if problem is not None:
                self.mismatch(it, problem)
            return it.following
        message = (
            f"perseus cannot follow this Megatron schedule: {bypass}. Turn that option off to "
            "use perseus, or detach it"
        )
        if settings.on_mismatch == "raise":
            raise UnsupportedScheduleError(message)
        self.let_go(message + "; perseus lets go of the clocks (on_mismatch='warn')")
        return False

    def choose_plan(self, it: Iteration, config: Any) -> None:
        """The plan of this iteration's workload, checked against what Megatron runs."""
        rt = self._rt
        book, settings = rt.book, rt.settings
        assert book is not None
        assert settings is not None
        # The workload is the same on every rank, whatever this rank's state: the
        # collectives between iterations depend on it (see _between).
        it.key = book.lookup(it.microbatches, it.seq_length)
        if it.key is None:
            return  # no frontier for this workload: unlocked for this iteration
        book.switch_to(it.key)
        if not rt.life.following:
            it.following = False
            return
        phase = calibration_phase(settings.metrics, it.number)
        problems = book.choose(it, config, phase)
        if problems:
            self.mismatch(
                it,
                "the plan was not made for what Megatron runs: "
                + "; ".join(problems)
                + ". Make the frontier with perseus.optimize(profile, microbatches=M, "
                "schedule=..., virtual_stages=V) for this pipeline",
            )

    def fingerprint(self, it: Iteration, config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        """What this iteration's computations depend on (see :mod:`._fingerprint`)."""
        rt = self._rt
        micro = kwargs.get("micro_batch_size")
        return fingerprint_of(
            config,
            gpu=gpu_model(rt.torch, rt.seen.device),
            megatron_version=rt.seen.megatron_version,
            schedule=PLAN_SCHEDULE[it.kind],
            pipeline_size=it.pp_size,
            virtual_stages=it.chunks,
            seq_length=it.seq_length,
            micro_batch_size=None if micro is None else int(micro),
        )

    def check_fingerprint(self, it: Iteration, config: Any, kwargs: dict[str, Any]) -> None:
        """The frontier's fingerprint against this job, once per workload."""
        key, book, settings = it.key, self._rt.book, self._rt.settings
        assert book is not None
        assert settings is not None
        if key is None or key in self._fingerprinted or key not in book.frontiers:
            return
        self._fingerprinted.add(key)
        recorded = book.frontiers[key].fingerprint
        if not recorded:
            return
        found = differences(recorded, self.fingerprint(it, config, kwargs))
        if not found:
            return
        text = (
            f"perseus: the frontier for {key} microbatches was made from a profile of another "
            f"setup: {'; '.join(found)}. Its plans' times and energies do not describe this job; "
            "profile this job again (perseus.megatron profile mode) and re-optimize"
        )
        if settings.on_mismatch == "raise":
            raise ScheduleMismatchError(text + " (or pass on_mismatch='warn' to run it anyway)")
        warn_for_job(text + "; running it anyway (on_mismatch='warn')", PlanWarning)

    def check_order(self, it: Iteration, key: tuple[str, int, int]) -> None:
        """The computation about to run is the one the plan's order has next."""
        index, expected = it.index, it.expected
        if expected is not None and (index >= len(expected) or expected[index] != key):
            want = expected[index] if index < len(expected) else "nothing more"
            self.mismatch(
                it,
                f"computation {index} of pipeline rank {it.pp_rank} in iteration {it.number} "
                f"is {key}, the plan's order has {want} there ((instruction, chunk, microbatch))",
            )

    def mismatch(self, it: Iteration, message: str) -> None:
        """Raise, or (``on_mismatch="warn"``) let go and run `it` unlocked."""
        settings = self._rt.settings
        assert settings is not None
        text = f"perseus: {message} (megatron-core {self._rt.seen.megatron_version})"
        if settings.on_mismatch == "raise":
            raise ScheduleMismatchError(text)
        self.let_go(text + "; perseus lets go of the clocks for good (on_mismatch='warn')")
        it.following = False
        it.expected = it.frequencies = None
        it.plan = None
        it.phase = "unlocked"

    def let_go(self, message: str) -> None:
        rt = self._rt
        if rt.life.following:
            warnings.warn(message, PlanWarning, stacklevel=4)
            logger.warning(message)
            rt.life.fire("let_go")
        if rt.driver is not None:
            rt.driver.let_go()

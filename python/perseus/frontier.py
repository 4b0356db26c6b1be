"""`Frontier`: the iteration time-energy Pareto frontier, plans from fastest to slowest.

It answers the questions a user asks of a solve: the plan for a deadline
(`plan_for`), for a power cap (`plan_for_power`), the energy at a given
iteration length, the baseline, a summary, and it saves and loads itself
(the file format is `_frontier_file`: version 3 stores each plan as its
changes from the one before, version 2 lists every plan's frequencies in
full, version 1 is still read). The plans themselves are `perseus.plan.Plan`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, TypedDict, Union, overload

import numpy as np
import numpy.typing as npt

from . import _frontier_file, _plan_store
from ._deprecation import warn_renamed
from ._files import replace_user_file
from ._fingerprint import FingerprintValue, check_fingerprint
from ._frontier_file import FORMAT_VERSION, MAX_FILE_BYTES
from ._plan_store import PlanStore
from ._tailored import fitted_plan, tailored_plan
from ._validate import distinct_seconds, is_integer, is_real, seconds_up
from .pipeline_spec import PipelineSpec
from .plan import Evaluation, Plan, _all_fastest_frequencies, _check_profile_fits, _seconds
from .plotting import plot_frontier
from .profile import Profile
from .switch_latency import switch_aware_plan
from .timeline import timelines

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Frontier", "FrontierSummary", "PowerCapError", "check_fingerprint"]

FloatArray = npt.NDArray[np.float64]
"""A read-only float64 array (``setflags(write=False)``)."""


class PowerCapError(ValueError):
    """No plan of a frontier stays within a power cap.

    ``lowest_w`` is the lowest power any plan achieves (average or peak, as
    asked), so the caller can say what cap would work.
    """

    def __init__(self, message: str, lowest_w: float) -> None:
        super().__init__(message)
        self.lowest_w = lowest_w


class FrontierSummary(TypedDict):
    """Headline numbers of a frontier (`Frontier.summary`)."""

    baseline_time_s: float
    baseline_energy_j: float
    fastest_time_s: float
    fastest_energy_j: float
    saving_percent: float
    plans: int
    solve_time_s: float


class Frontier(Sequence[Plan]):
    """The iteration time-energy Pareto frontier: plans from fastest to slowest.

    Every plan is the cheapest perseus found for an iteration that lasts its
    time. Plans are compared at a common iteration length: a pipeline that
    finishes early (waiting for a straggler, or for a deadline) keeps drawing
    blocking power until the iteration ends, so a slower plan is kept only if
    it uses less energy over an iteration as long as itself. Iteration times
    strictly increase along the frontier and the energy each plan needs over
    any common iteration length strictly decreases; each plan's own
    `energy_j` (at its own time) need not.

    Read-only: every attribute is a property; arrays are read-only.

    Attributes
    ----------
    iteration_times_s : numpy.ndarray
        Replayed iteration time of each plan, seconds.
    energies_j : numpy.ndarray
        Replayed energy of each plan, joules.
    energies_before_reclaim_j : numpy.ndarray
        Replayed energy of each plan as the min-cut step produced it, before
        slack reclamation and local search, joules.
    baseline : Evaluation
        Every computation at its fastest option.
    spec : PipelineSpec
        The pipeline the plans are for.
    unit_time_s : float
        Time quantum asked of the solver, seconds.
    solver_unit_time_s : float
        Quantum the min-cut steps actually used, seconds (finer than
        `unit_time_s` for small pipelines when refining).
    steps : int
        Units of iteration time the min-cut loop took.
    cuts : int
        Minimum cuts it solved (one cut can take several units).
    stop_reason : str
        Why the min-cut loop stopped: ``"minimum_time"`` (the normal end: the
        shortest iteration is reached), ``"no_progress"`` or
        ``"infeasible_flow"`` (numerical trouble; the frontier ends early).
    phase_times_s : dict
        Wall time of each phase of the solve, seconds. The candidate chains
        run on threads of their own while the min-cut loop does, so
        ``"reclamation"`` is only what is left of them after the loop.
    blocking_power_w : float
        Watts drawn by a GPU while it waits.
    solve_time_s : float
        Wall time of `optimize`, seconds.
    profile : Profile or None
        The profile the plans were made from (kept in saved files), which
        the power and timeline views replay plans on; every plan carries it.
    fingerprint : Mapping[str, str | int | float | bool | None]
        What the profile's measurement depended on (GPU model, parallelism,
        sequence length, ...), as the caller gave it; read-only, empty when
        unknown. Saved and loaded with the frontier (see `check_fingerprint`).
    """

    def __init__(
        self,
        plans: Union[Sequence[Plan], PlanStore],
        *,
        baseline: Evaluation,
        spec: PipelineSpec,
        unit_time_s: float,
        blocking_power_w: float,
        solve_time_s: float,
        steps: int = 0,
        cuts: int = 0,
        solver_unit_time_s: Optional[float] = None,
        stop_reason: str = "minimum_time",
        phase_times_s: Optional[Mapping[str, float]] = None,
        profile: Optional[Profile] = None,
        fingerprint: Optional[Mapping[str, FingerprintValue]] = None,
    ) -> None:
        # `plans` is a list of Plans (a user) or a `PlanStore` (the solver, a
        # version 3 file; kept compact: plans are rebuilt when asked for).
        self._fingerprint = check_fingerprint(fingerprint)
        if not len(plans):
            raise ValueError("a frontier needs at least one plan")
        if isinstance(plans, PlanStore):
            known = plans.profile if profile is None else profile
            times, energies, before = plans.times_s, plans.energies_j, plans.before_j
        else:
            known = plans[0].profile if profile is None else profile
            times = np.array([p.iteration_time_s for p in plans], dtype=np.float64)
            energies = np.array([p.energy_j for p in plans], dtype=np.float64)
            before = np.array([p.energy_before_reclaim_j for p in plans], dtype=np.float64)
        if np.any(np.diff(times) <= 0):
            raise ValueError("frontier plans must be ordered by strictly increasing iteration time")
        self._profile = None if known is None else _check_profile_fits(known, spec)
        if self._profile is not None and not math.isclose(
            self._profile.blocking_power_w, float(blocking_power_w), rel_tol=1e-9, abs_tol=1e-12
        ):
            # plan_for, tailored plans and the power views replay on the profile,
            # energy_at waits at blocking_power_w: the two must agree.
            raise ValueError(
                f"blocking_power_w={float(blocking_power_w):g} W contradicts the profile's "
                f"{self._profile.blocking_power_w:g} W (profile.with_blocking_power() makes one "
                "that agrees)"
            )
        self._plans: Union[tuple[Plan, ...], PlanStore] = (
            plans.with_profile(self._profile)
            if isinstance(plans, PlanStore)
            else tuple(p._with_profile(self._profile) for p in plans)
        )
        self._times, self._energies, self._before = (
            _read_only(np.array(a, dtype=np.float64)) for a in (times, energies, before)
        )
        self._peak_powers_w: Optional[FloatArray] = None
        self._baseline = baseline
        self._spec = spec
        self._unit_time_s = float(unit_time_s)
        self._blocking_power_w = float(blocking_power_w)
        self._solve_time_s = float(solve_time_s)
        self._steps = int(steps)
        self._cuts = int(cuts)
        self._solver_unit_time_s = float(
            unit_time_s if solver_unit_time_s is None else solver_unit_time_s
        )
        self._stop_reason = str(stop_reason)
        self._phase_times_s = dict(phase_times_s or {})

    def index(self, value: Any, start: int = 0, stop: Optional[int] = None) -> int:
        """Position of a plan of this frontier (found by its time, compared by its clocks);
        `start` and `stop` as for a list (negative ones count from the end)."""
        if isinstance(value, Plan):
            begin, end, _ = slice(start, stop).indices(len(self))
            k = int(np.searchsorted(self._times, value.iteration_time_s))
            if begin <= k < end and self._times[k] == value.iteration_time_s:
                mine = self._plans[k]
                if mine is value or (
                    mine.spec == value.spec
                    and np.array_equal(mine.frequencies_mhz, value.frequencies_mhz)
                ):
                    return k
        raise ValueError(
            "the plan is not in this frontier (a plan from plan_for may be fitted to its "
            "deadline rather than one of the frontier's; plan_for(..., reclaim=False) gives "
            "the frontier's own)"
        )

    def __contains__(self, value: object) -> bool:
        """Whether `value` is one of this frontier's plans, by `index`'s rule (not by
        object identity, so an unpickled or reloaded plan is found too)."""
        try:
            self.index(value)
        except ValueError:
            return False
        return True

    def count(self, value: Any) -> int:
        """1 if `value` is one of this frontier's plans (times differ plan to plan), else 0."""
        return 1 if value in self else 0

    def frequencies_mhz(self, index: int, gpu: Optional[int] = None) -> npt.NDArray[np.int32]:
        """Plan `index`'s MHz per computation (core id order), or only GPU `gpu`'s computations.

        For a loaded frontier this rebuilds just what is asked from the
        stored changes, without making every plan: a training rank asks
        for its own GPU. The ids of GPU `gpu`'s computations, in the same
        order, are `computations_of_gpu(gpu)`.
        """
        k = range(len(self))[index]
        if gpu is None:
            return np.array(self._plans[k].frequencies_mhz, dtype=np.int32)
        ids = self.computations_of_gpu(gpu)
        if isinstance(self._plans, PlanStore):
            return self._plans.frequencies_mhz(k, ids)
        return np.array(self._plans[k].frequencies_mhz[ids], dtype=np.int32)

    def computations_of_gpu(self, gpu: int) -> npt.NDArray[np.int64]:
        """Core ids of the computations GPU `gpu` runs (ascending)."""
        if not is_integer(gpu):
            raise TypeError(f"gpu must be an integer, got {gpu!r}")
        if not 0 <= gpu < self._spec.num_gpus:
            raise ValueError(f"gpu must be in 0..{self._spec.num_gpus - 1}, got {gpu}")
        stage = self._spec.pipeline().stage.astype(np.int64)
        return np.flatnonzero(stage % self._spec.num_gpus == int(gpu))

    @property
    def iteration_times_s(self) -> FloatArray:
        """Replayed iteration time of each plan, seconds (read-only)."""
        return self._times

    @property
    def energies_j(self) -> FloatArray:
        """Replayed energy of each plan, joules (read-only)."""
        return self._energies

    @property
    def energies_before_reclaim_j(self) -> FloatArray:
        """Energy of each plan before reclamation and local search, joules (read-only)."""
        return self._before

    @property
    def baseline(self) -> Evaluation:
        """Every computation at its fastest option."""
        return self._baseline

    @property
    def spec(self) -> PipelineSpec:
        """The pipeline the plans are for."""
        return self._spec

    @property
    def unit_time_s(self) -> float:
        """Time quantum asked of the solver, seconds."""
        return self._unit_time_s

    @property
    def solver_unit_time_s(self) -> float:
        """Quantum the min-cut steps used, seconds."""
        return self._solver_unit_time_s

    @property
    def blocking_power_w(self) -> float:
        """Watts drawn by a GPU while it waits."""
        return self._blocking_power_w

    @property
    def solve_time_s(self) -> float:
        """Wall time of `optimize`, seconds."""
        return self._solve_time_s

    @property
    def steps(self) -> int:
        """Units of iteration time the min-cut loop took."""
        return self._steps

    @property
    def cuts(self) -> int:
        """Minimum cuts solved."""
        return self._cuts

    @property
    def stop_reason(self) -> str:
        """Why the min-cut loop stopped."""
        return self._stop_reason

    @property
    def profile(self) -> Optional[Profile]:
        """The profile the plans were made from (None if unknown)."""
        return self._profile

    @property
    def fingerprint(self) -> Mapping[str, FingerprintValue]:
        """What the profile's measurement depended on (read-only mapping; empty if unknown)."""
        return self._fingerprint

    @property
    def average_powers_w(self) -> FloatArray:
        """Average power of all GPUs over each plan's own iteration, watts (energy / time)."""
        out = self._energies / self._times
        out.setflags(write=False)
        return out

    def peak_powers_w(self) -> FloatArray:
        """Highest power of all GPUs together during each plan's iteration, watts.

        Replays every plan on the frontier's profile (computed once, then kept),
        a block of plans at a time so that memory does not grow with the frontier.
        """
        if self._peak_powers_w is None:
            profile = self._require_profile("peak powers")
            peaks = np.empty(len(self._plans), dtype=np.float64)
            for plans, rows in self._row_blocks():
                peaks[plans] = [t.power().peak_w for t in timelines(profile, self._spec, rows)]
            peaks.setflags(write=False)
            self._peak_powers_w = peaks
        return self._peak_powers_w

    def _first_within_peak(self, cap_w: float) -> Optional[int]:
        """The first plan whose peak power is within `cap_w`, replaying plans in
        order and only those whose average power is (the peak is never below
        it): a cap that an early plan meets costs a few replays, not one of
        every plan (12.8 s at 16 x 256). None if no plan is within it."""
        profile = self._require_profile("peak powers")
        averages = self.average_powers_w
        for plans, rows in self._row_blocks():
            maybe = np.nonzero(averages[plans] <= cap_w)[0]
            for k in maybe:
                (timeline,) = timelines(profile, self._spec, rows[k : k + 1])
                if timeline.power().peak_w <= cap_w:
                    return int(plans[k])
        return None

    def _row_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(plan indices, MHz rows) of every plan, a bounded block at a time."""
        if isinstance(self._plans, PlanStore):
            yield from self._plans.row_blocks()
            return
        block = max(1, _plan_store.REPLAY_BLOCK_VALUES // max(1, self._spec.num_computations))
        for start in range(0, len(self._plans), block):
            plans = np.arange(start, min(start + block, len(self._plans)))
            yield plans, np.stack([self._plans[int(k)].frequencies_mhz for k in plans])

    def _require_profile(self, what: str) -> Profile:
        if self._profile is None:
            raise ValueError(
                f"{what} need the profile the frontier was made from, and this frontier has none "
                "(a version 1 file: load it with Frontier.load(path, profile=...))"
            )
        return self._profile

    @property
    def baseline_plan(self) -> Plan:
        """The all-fastest plan: every computation at its fastest measured option.

        Needs the frontier's profile. Its time and energy are `baseline`'s.
        """
        profile = self._require_profile("the all-fastest plan")
        return Plan(
            self._spec,
            _all_fastest_frequencies(profile, self._spec),
            self._baseline.iteration_time_s,
            self._baseline.energy_j,
            blocking_power_w=self._blocking_power_w,
            profile=profile,
        )

    def baseline_energy_at(self, iteration_time_s: float) -> float:
        """Energy (J) of the all-fastest plan over an iteration lasting `iteration_time_s`.

        It finishes at `baseline`'s time and then waits at blocking power:
        what every computation at full speed costs when a straggler or a
        deadline sets the iteration's length.
        """
        length = _seconds(iteration_time_s, "iteration_time_s")
        base = self._baseline
        extra = max(0.0, length - base.iteration_time_s)
        return base.energy_j + self._spec.num_gpus * self._blocking_power_w * extra

    def plan_for_power(self, cap_w: float, *, peak: bool = False) -> Plan:
        """The fastest plan whose power stays within `cap_w` watts (all GPUs together).

        With ``peak=False`` (default) a plan's power is its average over its
        iteration, ``energy_j / iteration_time_s``; with ``peak=True`` the
        highest power of all GPUs together at any moment of the iteration
        (see `Plan.power_timeline`, which needs the profile). Either way a
        GPU that waits draws the blocking power.

        Raises
        ------
        PowerCapError
            If no plan stays within the cap; the message names the lowest
            power a plan achieves, and so the cap that would work.

        Examples
        --------
        >>> profile = Profile.from_csv("examples/small-4stage.csv", blocking_power_w=70.0)
        >>> frontier = perseus.optimize(profile, microbatches=4)
        >>> cap_w = 0.95 * frontier.fastest.average_power_w
        >>> bool(frontier.plan_for_power(cap_w).average_power_w <= cap_w)
        True
        """
        if not is_real(cap_w):
            raise TypeError(f"cap_w must be a number of watts, got {cap_w!r}")
        try:
            cap = float(cap_w)
        except OverflowError:  # an int beyond the float range
            cap = math.inf
        if not cap > 0 or math.isinf(cap):  # also NaN
            raise ValueError(f"cap_w must be a positive number of watts, got {cap_w!r}")
        if not isinstance(peak, bool):
            raise TypeError(f"peak must be True or False, got {peak!r}")
        if peak and self._peak_powers_w is None:
            first = self._first_within_peak(cap)
            if first is not None:
                return self._plans[first]
        powers = self.peak_powers_w() if peak else self.average_powers_w
        within = np.nonzero(powers <= cap)[0]
        if len(within) == 0:
            lowest = int(np.argmin(powers))
            kind = "peak" if peak else "average"
            raise PowerCapError(
                f"no plan keeps the {kind} power of the {self._spec.num_gpus} GPUs within "
                f"{cap:.6g} W: the lowest {kind} power any plan reaches is {powers[lowest]:.6g} W "
                f"(the plan taking {self._times[lowest]:.6g} s)",
                float(powers[lowest]),
            )
        return self._plans[int(within[0])]

    def plot(self, ax: Optional[Axes] = None, **options: Any) -> Axes:
        """Draw the frontier: iteration time against energy per iteration.

        The all-fastest baseline is marked and the saving of the fastest plan
        annotated; the band a straggler opens (from the fastest to the
        slowest plan's time) is shaded, with the all-fastest plan's energy
        when it waits for the straggler. Needs matplotlib (the ``plot``
        extra). Returns the Axes drawn on (a new figure's when `ax` is None).
        """
        return plot_frontier(self, ax=ax, **options)

    @property
    def phase_times_s(self) -> dict[str, float]:
        """Wall time of each phase of the solve, seconds (a copy)."""
        return dict(self._phase_times_s)

    def __len__(self) -> int:
        return len(self._plans)

    @overload
    def __getitem__(self, index: int) -> Plan: ...
    @overload
    def __getitem__(self, index: slice) -> list[Plan]: ...
    def __getitem__(self, index: int | slice) -> Plan | list[Plan]:
        if isinstance(index, slice):
            return [self._plans[k] for k in range(*index.indices(len(self)))]
        return self._plans[index]

    def __iter__(self) -> Iterator[Plan]:
        return iter(self._plans)

    @property
    def fastest(self) -> Plan:
        """The fastest plan (least energy at the all-fastest time)."""
        return self._plans[0]

    @property
    def reclaim_savings_j(self) -> FloatArray:
        """Energy each plan saves by reclamation and local search, joules (>= 0, read-only)."""
        return _read_only(self._before - self._energies)

    def energy_at(self, deadline_s: float) -> float:
        """Least energy (J) of an iteration lasting `deadline_s`: ``plan_for(d).energy_at(d)``
        (so between frontier plans, that of the plans around it fitted to the deadline)."""
        deadline = _seconds(deadline_s, "deadline_s")
        return self.plan_for(deadline).energy_at(deadline)

    def plan_for(
        self,
        deadline_s: Optional[float] = None,
        *,
        deadline: Optional[float] = None,
        switch_latency_s: Optional[float] = None,
        tailored: bool = False,
        reclaim: bool = True,
    ) -> Plan:
        """The cheapest plan whose iteration time is at most `deadline_s` seconds.

        Cheapest over an iteration that lasts `deadline_s` (see `energy_at`).
        Among the frontier's own plans that is the slowest that meets it;
        between two frontier plans that one would idle, drawing blocking
        power, for the rest of the deadline, so by default (``reclaim=True``, when the
        frontier has its profile) the frontier plans nearest the deadline
        are fitted to it instead, and the cheapest is returned: the nearest
        faster ones slowed into the deadline (computations with room move to
        slower, cheaper clocks while the iteration still meets it: the
        solver's slack reclamation), and as many slower ones sped up to it
        (cheapest useful speed-ups first) and then slowed into what is left:
        three on each side, more on small pipelines (up to 16) where those
        leave more than a unit idle. That takes milliseconds (a median
        1.2 CPU ms at 384 computations, 11 ms at 4,096, 0.11 s at 32,768);
        the plan is not part of the frontier,
        never uses more energy over the deadline than the frontier's, and
        is the same on every machine. ``reclaim=False``, or a frontier
        without a profile, gives the frontier's own plan. Use it for a
        straggler's iteration time, or for any time budget.

        With `switch_latency_s` (seconds a clock change takes to land), the
        cheapest plan that meets the deadline when replayed under that
        latency, clock changes that do not pay merged
        (`perseus.switch_latency.switch_aware_plan`, which also reports
        switches per iteration and the merge's energy cost). Needs the profile.

        With ``tailored=True``, a plan solved for `deadline_s` itself rather
        than taken from the frontier: the frontier plans nearest it as
        starts, slowed into the deadline or sped up to it, then a local
        search there (the solver's own search at one deadline), or the
        default plan above when that costs less (the search tries as many
        starts as its budget allows). So it never uses more energy over the
        deadline than the default plan; it takes a fixed
        amount of work (0.07-0.3 CPU s up to 4,096 computations, 0.4-0.5 s at
        16,384-32,768) and is the same on every machine; Ctrl-C stops it, as
        it stops a solve. The plan is not part of the frontier. Needs the
        profile; not combined with `switch_latency_s`.

        Raises
        ------
        ValueError
            If even the fastest plan is slower than `deadline_s`, or it is
            NaN; with ``tailored=True`` also when the frontier has no profile
            or its profile lacks a clock the nearby plans run.
        TypeError
            If it is not a number, or `tailored` or `reclaim` is not a bool, or
            ``reclaim=False`` comes with ``tailored=True`` or `switch_latency_s`.
        """
        if deadline is not None:
            if deadline_s is not None:
                raise TypeError("give deadline_s only (deadline is its old name)")
            warn_renamed("Frontier.plan_for(deadline=...)", "Frontier.plan_for(deadline_s=...)")
            deadline_s = deadline
        if deadline_s is None:
            raise TypeError("plan_for() needs deadline_s, in seconds")
        limit = _seconds(deadline_s, "deadline_s")
        if not isinstance(tailored, bool):
            raise TypeError(f"tailored must be True or False, got {tailored!r}")
        if not isinstance(reclaim, bool):
            raise TypeError(f"reclaim must be True or False, got {reclaim!r}")
        if not reclaim and (tailored or switch_latency_s is not None):
            # Each of those makes a plan of its own; reclaim=False asks for the frontier's.
            raise TypeError("reclaim=False is not for tailored=True or switch_latency_s")
        if switch_latency_s is not None:
            if tailored:
                raise TypeError("give tailored=True or switch_latency_s, not both")
            return switch_aware_plan(self, limit, switch_latency_s).plan
        if tailored and limit == math.inf:
            # No deadline: the plan of least effective energy, which no search
            # beats at any finite time either; the slowest plan's time is where
            # the tailored search looks for it.
            limit = float(self._times[-1])
        index = self._slowest_meeting(limit)
        if index < 0:
            wanted, fastest = distinct_seconds(limit, float(self._times[0]))
            raise ValueError(
                f"no plan meets a deadline of {wanted} s: the fastest plan takes {fastest} s"
            )
        if tailored:
            return tailored_plan(self, index, limit)
        if reclaim:
            return fitted_plan(self, index, limit)[0]
        return self._plans[index]

    def _slowest_meeting(self, deadline_s: float) -> int:
        """Index of the slowest frontier plan taking at most `deadline_s` (-1: none does)."""
        return int(np.searchsorted(self._times, deadline_s, side="right")) - 1

    def summary(self) -> FrontierSummary:
        """Headline numbers: baseline, fastest plan, saving (%) and plan count."""
        fastest = self._plans[0]
        return {
            "baseline_time_s": self._baseline.iteration_time_s,
            "baseline_energy_j": self._baseline.energy_j,
            "fastest_time_s": fastest.iteration_time_s,
            "fastest_energy_j": fastest.energy_j,
            "saving_percent": 100.0 * (1.0 - fastest.energy_j / self._baseline.energy_j),
            "plans": len(self),
            "solve_time_s": self._solve_time_s,
        }

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        follow_symlinks: bool = False,
        overwrite: bool = True,
        version: int = FORMAT_VERSION,
    ) -> None:
        """Write the frontier as versioned JSON (format version 3, or 2 if asked).

        The file appears whole or not at all. It holds the plans (version 3:
        the first plan's clocks, then each plan's changes, as base64 arrays;
        version 2: every plan's frequencies in full, many times larger), the
        computation each position is, and the profile, so other tools can
        read it without perseus. A file larger than `MAX_FILE_BYTES`, which
        `load` would refuse, is not written. An existing
        file keeps its permissions; a symbolic link is refused unless
        `follow_symlinks` (which writes the file it points to). With
        ``overwrite=False`` an existing file is never replaced, even one that
        another process creates while this one writes.

        Raises
        ------
        FileExistsError
            If `path` is a symbolic link and `follow_symlinks` is false.
        perseus.errors.OutputExistsError
            With ``overwrite=False``, if `path` exists: the frontier is then
            saved beside it, under the name in ``kept_as`` and the message.
        ValueError
            If `version` is not 2 or 3, or the file would be larger than
            `MAX_FILE_BYTES` (the message says how large).
        OSError
            If the file cannot be written (the error names `path`).
        """
        if version not in (2, 3) or isinstance(version, bool):
            raise ValueError(f"version must be 2 or 3, got {version!r}")
        # Version 2 spells out every clock, each at least two characters ("1,"):
        # refuse what cannot fit before building gigabytes of text to measure it.
        least = 2 * len(self) * self._spec.num_computations if version == 2 else 0
        text = (
            ""
            if least > MAX_FILE_BYTES
            else json.dumps(_frontier_file.encode(self, version), separators=(",", ":"))
        )
        if least > MAX_FILE_BYTES or len(text) > MAX_FILE_BYTES:
            raise ValueError(
                f"{os.fspath(path)}: the frontier would take {max(least, len(text))} bytes"
                f"{' or more' if least > MAX_FILE_BYTES else ''}, more than "
                f"Frontier.load reads ({MAX_FILE_BYTES}); "
                + ("save it as version 3" if version == 2 else "solve with a coarser unit_time_s")
            )
        replace_user_file(
            path,
            text,
            follow_symlinks=follow_symlinks,
            overwrite=overwrite,
        )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        profile: Optional[Profile] = None,
        *,
        max_bytes: int = MAX_FILE_BYTES,
    ) -> Frontier:
        """Read a frontier written by `save` (format version 3, 2 or 1), checking all of it.

        Every field is checked for its type and range, the computations
        against the pipeline, the plans for increasing times, and every
        frequency against the profile: `profile` when given (which is then
        attached), else the one stored in the file, whose replay must also
        give each plan's stored time and energy and the baseline's. A
        version 3 file is kept compact: plans are rebuilt when asked for
        (`frequencies_mhz(index, gpu=...)` rebuilds one GPU's clocks only).
        A version 3 file as perseus wrote it (its SHA-256 digest of the
        plans and profile matches) is replayed in an even sample of 32
        plans at load, and every other plan the first time it is used
        (rebuilt, indexed, chosen by `plan_for`, iterated): a plan whose
        stored time or energy is not its replay raises ValueError then,
        naming it. A file whose digest is missing or does not match is
        replayed whole at load, so an edited plan is named at once.

        Raises
        ------
        ValueError
            If the file is larger than `max_bytes`, not a perseus frontier,
            of an unknown version, or malformed in any field; the message
            names the file and the field (``plans[3].frequencies_mhz[17]``,
            ``plans.energy_j[3]``). For a version 3 file with a matching
            digest, also when a plan is first used (see above).
        OSError
            If it cannot be read.

        Warns
        -----
        ProfileWarning
            About a row of the stored profile (a likely unit slip), naming the
            file and the row as ``profile.rows[i]``.
        """
        return _frontier_file.decode(cls, os.fsdecode(path), profile, max_bytes)

    # Deprecated names (one release).
    @property
    def iteration_times(self) -> FloatArray:
        warn_renamed("Frontier.iteration_times", "Frontier.iteration_times_s")
        return self._times

    @property
    def energies(self) -> FloatArray:
        warn_renamed("Frontier.energies", "Frontier.energies_j")
        return self._energies

    @property
    def energies_before_reclaim(self) -> FloatArray:
        warn_renamed("Frontier.energies_before_reclaim", "Frontier.energies_before_reclaim_j")
        return self._before

    @property
    def unit_time(self) -> float:
        warn_renamed("Frontier.unit_time", "Frontier.unit_time_s")
        return self._unit_time_s

    @property
    def solver_unit_time(self) -> float:
        warn_renamed("Frontier.solver_unit_time", "Frontier.solver_unit_time_s")
        return self._solver_unit_time_s

    @property
    def blocking_power(self) -> float:
        warn_renamed("Frontier.blocking_power", "Frontier.blocking_power_w")
        return self._blocking_power_w

    @property
    def solve_time(self) -> float:
        warn_renamed("Frontier.solve_time", "Frontier.solve_time_s")
        return self._solve_time_s

    @property
    def reclaim_savings(self) -> FloatArray:
        warn_renamed("Frontier.reclaim_savings", "Frontier.reclaim_savings_j")
        return self.reclaim_savings_j

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickled (multiprocessing, caches) as the JSON text `save` writes: compact plans,
        # the profile and the fingerprint, checked again when unpickled, as `load` does.
        text = json.dumps(_frontier_file.encode(self), separators=(",", ":"))
        return (_frontier_file.unpickle, (type(self), text))

    def __repr__(self) -> str:
        return (
            f"Frontier({len(self)} plans, {seconds_up(self._times[0], significant=6)}-"
            f"{seconds_up(self._times[-1], significant=6)} s, "
            f"{self._energies[0]:.6g}-{self._energies[-1]:.6g} J)"
        )


def _read_only(array: FloatArray) -> FloatArray:
    array.setflags(write=False)
    return array

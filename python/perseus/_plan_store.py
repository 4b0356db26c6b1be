"""`PlanStore`: a frontier's plans kept as changes from one plan to the next.

Consecutive frontier plans differ in a few computations, so a frontier of
tens of thousands of plans over thousands of computations is stored as the
first plan's clocks (uint16 MHz), then per plan the computations that change
and their new clocks. A plan's full row is rebuilt on demand from the
nearest dense checkpoint (one every `CHECKPOINT_EVERY` plans) plus the
changes after it, so memory is proportional to the changes, not to
plans x computations, and one GPU's clocks can be rebuilt without the rest.

A store read from a file may carry a `checker`: each plan is then checked
(replayed against its stored time and energy) the first time any of its
clocks is rebuilt, before anything of it is returned.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import numpy as np

from .pipeline_spec import PipelineSpec
from .plan import Plan
from .profile import Profile

__all__ = ["CHECKPOINT_EVERY", "REPLAY_BLOCK_VALUES", "PlanStore", "changes_of"]

CHECKPOINT_EVERY = 64
"""Plans between dense checkpoints: rebuilding a plan replays at most this many plans' changes."""
REPLAY_BLOCK_VALUES = 1 << 21
"""Clocks (plans x computations) rebuilt at once when every plan is replayed.

A replay holds about 40 bytes per clock (the row, times, energies, starts and
ends), so a whole 16 x 1024 frontier at once would take 50 GB; blocks of this
size take about 80 MB and cost no measurable time per plan.
"""
_CACHED_PLANS = 256  # Plan objects kept, so `frontier[k] is frontier[k]` for recent k


def changes_of(rows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(counts per plan, changed computation ids, their MHz) of consecutive rows; counts[0] is 0."""
    counts = np.zeros(len(rows), dtype=np.int64)
    ids: list[np.ndarray] = []
    mhz: list[np.ndarray] = []
    for k in range(1, len(rows)):
        changed = np.flatnonzero(rows[k] != rows[k - 1])
        counts[k] = len(changed)
        ids.append(changed.astype(np.uint32))
        mhz.append(np.asarray(rows[k])[changed].astype(np.uint32))  # clocks may pass 65,535
    empty_ids, empty_mhz = np.zeros(0, np.uint32), np.zeros(0, np.uint32)
    return (
        counts,
        np.concatenate(ids) if ids else empty_ids,
        np.concatenate(mhz) if mhz else empty_mhz,
    )


def _fits_uint16(*arrays: np.ndarray) -> bool:
    limit = np.iinfo(np.uint16).max
    return all(len(a) == 0 or (int(np.min(a)) >= 0 and int(np.max(a)) <= limit) for a in arrays)


def _last_writes(ids: np.ndarray, mhz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The final value of each id written in order `ids` -> `mhz` (later writes win)."""
    if len(ids) == 0:
        return ids, mhz
    reversed_ids = ids[::-1]
    unique, first = np.unique(reversed_ids, return_index=True)
    return unique, mhz[::-1][first]


PlanChecker = Callable[[int, np.ndarray], None]
"""Called with a plan's index and full MHz row before the plan is first used; raises if wrong."""


class PlanStore:
    """The plans of a frontier as a first row plus changes; a read-only sequence of `Plan`."""

    def __init__(
        self,
        spec: PipelineSpec,
        first_mhz: np.ndarray,
        counts: np.ndarray,
        change_ids: np.ndarray,
        change_mhz: np.ndarray,
        times_s: np.ndarray,
        energies_j: np.ndarray,
        before_j: np.ndarray,
        blocking_power_w: float,
        profile: Optional[Profile],
        checker: Optional[PlanChecker] = None,
    ) -> None:
        self.spec = spec
        # uint16 holds every real GPU's clocks; a profile may name up to
        # MAX_CLOCK_MHZ (100,000), which needs 32 bits rather than wrapping.
        clock = np.uint16 if _fits_uint16(first_mhz, change_mhz) else np.uint32
        self.first_mhz = np.asarray(first_mhz, dtype=clock)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.change_ids = np.asarray(change_ids, dtype=np.uint32)
        self.change_mhz = np.asarray(change_mhz, dtype=clock)
        self.offsets = np.concatenate(([0], np.cumsum(self.counts)))
        self.times_s = times_s
        self.energies_j = energies_j
        self.before_j = before_j
        self.blocking_power_w = float(blocking_power_w)
        self.profile = profile
        self._cache: OrderedDict[int, Plan] = OrderedDict()
        self._lock = threading.Lock()
        self._checkpoints = self._build_checkpoints()
        self.checker = checker
        self._checked = np.zeros(len(self.counts), dtype=bool)  # shared by with_profile copies

    def _build_checkpoints(self) -> np.ndarray:
        count = (len(self.counts) + CHECKPOINT_EVERY - 1) // CHECKPOINT_EVERY
        out = np.empty((count, len(self.first_mhz)), dtype=self.first_mhz.dtype)
        row = self.first_mhz.copy()
        for c in range(count):
            if c:
                low = self.offsets[(c - 1) * CHECKPOINT_EVERY + 1]
                high = self.offsets[c * CHECKPOINT_EVERY + 1]
                # Within one range an id can change more than once: the last write wins.
                ids, mhz = _last_writes(self.change_ids[low:high], self.change_mhz[low:high])
                row[ids] = mhz
            out[c] = row
        return out

    def frequencies_mhz(self, index: int, computations: Optional[np.ndarray] = None) -> np.ndarray:
        """Plan `index`'s MHz (int32), for every computation or only `computations` (ids)."""
        if self.checker is not None and not self._checked[index]:
            self.checker(index, self._row(index))
            self._checked[index] = True
        if computations is None:
            return self._row(index)
        c = index // CHECKPOINT_EVERY
        ids, mhz = self._changes_since_checkpoint(index)
        wanted = np.asarray(computations, dtype=np.int64)
        row = np.asarray(self._checkpoints[c, wanted], dtype=np.int32)
        mask = np.isin(ids, wanted)
        ids, mhz = _last_writes(ids[mask], mhz[mask])
        order = np.argsort(wanted, kind="stable")
        row[order[np.searchsorted(wanted[order], ids)]] = mhz
        return row

    def row_blocks(
        self, max_values: Optional[int] = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every plan's MHz row, in order, as (plan indices, rows) blocks of at most
        `max_values` clocks (default `REPLAY_BLOCK_VALUES`).

        Each row is checked as `frequencies_mhz` checks it.
        """
        limit = REPLAY_BLOCK_VALUES if max_values is None else max_values
        block = max(1, limit // max(1, len(self.first_mhz)))
        for start in range(0, len(self), block):
            plans = np.arange(start, min(start + block, len(self)))
            yield plans, np.stack([self.frequencies_mhz(int(k)) for k in plans])

    def _changes_since_checkpoint(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        low = self.offsets[index // CHECKPOINT_EVERY * CHECKPOINT_EVERY + 1]
        high = self.offsets[index + 1]
        return self.change_ids[low:high], self.change_mhz[low:high]

    def _row(self, index: int) -> np.ndarray:
        row: np.ndarray = self._checkpoints[index // CHECKPOINT_EVERY].astype(np.int32)
        ids, mhz = _last_writes(*self._changes_since_checkpoint(index))
        row[ids] = mhz
        return row

    def __len__(self) -> int:
        return len(self.counts)

    def __getitem__(self, index: int) -> Plan:
        k = operator.index(index)  # TypeError for 1.9 or "2", as a tuple of plans gives
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError("plan index out of range")
        # One lock for the cache: Megatron ranks and servers call plan_for from several
        # threads, and a plan evicted between the lookup and move_to_end would raise
        # KeyError (or two threads would build two objects for one plan).
        with self._lock:
            plan = self._cache.get(k)
            if plan is None:
                row = self.frequencies_mhz(k)
                row.setflags(write=False)
                # Checked when the file was read (or made by the solver): no second check.
                plan = Plan._from_solver(
                    self.spec,
                    row,
                    float(self.times_s[k]),
                    float(self.energies_j[k]),
                    float(self.before_j[k]),
                    self.blocking_power_w,
                    self.profile,  # type: ignore[arg-type]  # None for version 1 files
                )
                self._cache[k] = plan
                if len(self._cache) > _CACHED_PLANS:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(k)
            return plan

    def __iter__(self) -> Iterator[Plan]:
        for k in range(len(self)):
            yield self[k]

    def with_profile(self, profile: Optional[Profile]) -> PlanStore:
        """The same plans carrying `profile`."""
        other = PlanStore.__new__(PlanStore)
        other.__dict__.update(self.__dict__)
        other.profile = profile
        other._cache = OrderedDict()
        other._lock = threading.Lock()
        return other

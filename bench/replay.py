"""The benchmark's own judge: raw measured rows and an independent plan replay.

Neither solver is scored by its own numbers. lowtime reports times of
quantised durations and energies of fitted curves; perseus reports what its
own evaluator says, and its evaluator only knows the options perseus kept.
This module scores a plan (one SM clock per computation) from the **raw rows
of the CSV** and a DAG written out here:

- computations ``F(s, m)`` and ``B(s, m)`` for every profile stage ``s`` (a
  model chunk) and microbatch ``m``;
- data dependencies ``F(s-1, m) -> F(s, m)``, ``F(S-1, m) -> B(S-1, m)`` and
  ``B(s+1, m) -> B(s, m)``;
- each GPU runs its computations one after another, in the order
  ``perseus.pipeline_order`` gives (the only thing taken from perseus; the
  order is checked to hold each of that GPU's computations exactly once:
  stage ``s`` runs on GPU ``s % num_gpus``).

A plan's iteration time ``T`` is the longest path (every computation starts
when its GPU predecessor and its data predecessor have finished), and its
energy is ``E = sum_i e_i + P_block * (GPUs * T - sum_i t_i)``: a GPU draws the
blocking power whenever it is not computing. Many plans are replayed at once
(numpy, one vector operation per computation across the plans).

Only numpy and the standard library are used here; perseus is imported for
``pipeline_order`` alone.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["INSTRUCTIONS", "RawProfile", "ReplayError", "Replayer"]

INSTRUCTIONS = ("forward", "backward")
_COLUMNS = ("stage", "instruction", "frequency", "time", "energy")


class ReplayError(ValueError):
    """A plan or profile the judge cannot score (a clock that was never measured, ...)."""


Row = tuple[int, float, float]  # (MHz, s, J)


@dataclass(frozen=True)
class RawProfile:
    """Every measured row of a Zeus-format CSV, per (stage, instruction), in file order.

    ``stages`` (optional) keeps only those profile stages, renumbered from 0 in
    the order given (e.g. ``(0, 1, 2, 7)``: the first three stages and the last).
    """

    source: str
    groups: Mapping[tuple[int, str], tuple[Row, ...]]
    num_stages: int
    selected_stages: Optional[tuple[int, ...]] = None

    @classmethod
    def from_csv(cls, path: str | Path, stages: Optional[Sequence[int]] = None) -> RawProfile:
        path = Path(path)
        groups: dict[tuple[int, str], list[Row]] = {}
        seen: set[tuple[int, str, int]] = set()
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ReplayError(f"{path}: missing column(s) {', '.join(missing)}")
            for line, rec in enumerate(reader, start=2):
                try:
                    stage = int(rec["stage"])
                    instruction = rec["instruction"].strip()
                    mhz = int(float(rec["frequency"]))
                    time_s = float(rec["time"])
                    energy_j = float(rec["energy"])
                except (TypeError, ValueError) as error:
                    raise ReplayError(f"{path}, line {line}: {error}") from None
                if instruction not in INSTRUCTIONS:
                    raise ReplayError(f"{path}, line {line}: instruction {instruction!r}")
                if not (time_s > 0 and energy_j > 0 and np.isfinite(time_s + energy_j)):
                    raise ReplayError(f"{path}, line {line}: time and energy must be > 0")
                key = (stage, instruction, mhz)
                if key in seen:  # the judge could not tell which row a plan's clock means
                    raise ReplayError(f"{path}, line {line}: {key} measured twice")
                seen.add(key)
                groups.setdefault((stage, instruction), []).append((mhz, time_s, energy_j))
        all_stages = sorted({s for s, _ in groups})
        if all_stages != list(range(len(all_stages))):
            raise ReplayError(f"{path}: stages must be 0..N-1, got {all_stages}")
        for s in all_stages:
            for name in INSTRUCTIONS:
                if (s, name) not in groups:
                    raise ReplayError(f"{path}: stage {s} has no {name} rows")
        if stages is not None:
            stages = tuple(int(s) for s in stages)
            if len(set(stages)) != len(stages) or not all(0 <= s < len(all_stages) for s in stages):
                raise ReplayError(f"{path}: cannot select stages {stages}")
            groups = {
                (new, name): groups[(old, name)]
                for new, old in enumerate(stages)
                for name in INSTRUCTIONS
            }
            num = len(stages)
        else:
            num = len(all_stages)
        return cls(
            source=str(path),
            groups={k: tuple(v) for k, v in groups.items()},
            num_stages=num,
            selected_stages=stages,
        )

    def rows(self, stage: int, instruction: str) -> tuple[Row, ...]:
        """The measured (MHz, s, J) rows of one (stage, instruction), in file order."""
        return self.groups[(stage, instruction)]

    def num_rows(self) -> int:
        return sum(len(v) for v in self.groups.values())

    def records(self) -> list[tuple[int, str, int, float, float]]:
        """Every row as (stage, instruction, MHz, s, J), stage by stage."""
        return [
            (s, name, mhz, t, e)
            for s in range(self.num_stages)
            for name in INSTRUCTIONS
            for mhz, t, e in self.rows(s, name)
        ]

    def write_csv(self, path: str | Path) -> Path:
        """Write every row back in Zeus's format (used for stage subsets)."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(_COLUMNS)
            for s, name, mhz, t, e in self.records():
                writer.writerow((s, name, mhz, repr(t), repr(e)))
        return path

    def fastest_mhz(self, stage: int, instruction: str) -> int:
        """The clock of the fastest measured row (least time, then least energy)."""
        return min(self.rows(stage, instruction), key=lambda r: (r[1], r[2]))[0]

    def digest(self) -> str:
        """A hash of the rows (for caches): same rows, same digest."""
        h = hashlib.sha256()
        for rec in self.records():
            h.update(repr(rec).encode())
        return h.hexdigest()[:16]


class Replayer:
    """Replays plans of one pipeline on a `RawProfile` (see the module docstring)."""

    def __init__(
        self,
        raw: RawProfile,
        *,
        blocking_power_w: float,
        schedule: str,
        num_gpus: int,
        microbatches: int,
        virtual_stages: int = 1,
        order: Optional[Sequence[Sequence[tuple[str, int, int]]]] = None,
    ) -> None:
        stages = num_gpus * virtual_stages
        if stages != raw.num_stages:
            raise ReplayError(
                f"{raw.source}: {raw.num_stages} stages, but {num_gpus} GPUs x "
                f"{virtual_stages} virtual stages need {stages}"
            )
        if order is None:
            from perseus import pipeline_order

            order = pipeline_order(schedule, num_gpus, microbatches, virtual_stages)
        self.raw = raw
        self.blocking_power_w = float(blocking_power_w)
        self.num_gpus = num_gpus
        self.microbatches = microbatches
        self.num_stages = stages
        self.num_computations = n = 2 * stages * microbatches

        # Ids: (stage * M + microbatch) * 2 + instruction index.
        self.stage_of = np.repeat(np.arange(stages), 2 * microbatches)
        self.kind_of = np.tile(np.arange(2), stages * microbatches)
        self.mb_of = np.tile(np.repeat(np.arange(microbatches), 2), stages)
        self.group_of = self.stage_of * 2 + self.kind_of  # (stage, instruction) index

        # Data predecessor.
        data_pred = np.full(n, -1, dtype=np.int64)
        for s in range(stages):
            for m in range(microbatches):
                f, b = self.cid(s, "forward", m), self.cid(s, "backward", m)
                if s > 0:
                    data_pred[f] = self.cid(s - 1, "forward", m)
                data_pred[b] = self.cid(s + 1, "backward", m) if s < stages - 1 else f
        # GPU predecessor, from the schedule's order; each GPU runs its own stages' work once.
        gpu_pred = np.full(n, -1, dtype=np.int64)
        if len(order) != num_gpus:
            raise ReplayError(f"the schedule lists {len(order)} GPUs, expected {num_gpus}")
        placed = np.zeros(n, dtype=np.int64)
        for gpu, seq in enumerate(order):
            prev = -1
            for name, chunk, mb in seq:
                stage = chunk * num_gpus + gpu
                if not (0 <= chunk < virtual_stages and 0 <= mb < microbatches):
                    raise ReplayError(f"GPU {gpu}: bad computation {(name, chunk, mb)}")
                i = self.cid(stage, name, mb)
                placed[i] += 1
                gpu_pred[i] = prev
                prev = i
        if np.any(placed != 1):
            bad = int(np.flatnonzero(placed != 1)[0])
            raise ReplayError(
                f"the schedule runs computation {self.describe(bad)} {int(placed[bad])} times"
            )
        self.data_pred = data_pred
        self.gpu_pred = gpu_pred
        self.topo = self._topological_order()

        # Lookup tables: (group, MHz) -> row; row -> (s, J).
        times, energies = [], []
        max_mhz = max(mhz for rows in raw.groups.values() for mhz, _, _ in rows)
        self.lut = np.full((2 * stages, max_mhz + 1), -1, dtype=np.int64)
        for g in range(2 * stages):
            for mhz, t, e in raw.rows(g // 2, INSTRUCTIONS[g % 2]):
                self.lut[g, mhz] = len(times)
                times.append(t)
                energies.append(e)
        self.row_time = np.asarray(times, dtype=np.float64)
        self.row_energy = np.asarray(energies, dtype=np.float64)

    # ---------------------------------------------------------------- ids

    def cid(self, stage: int, instruction: str, microbatch: int) -> int:
        return (stage * self.microbatches + microbatch) * 2 + INSTRUCTIONS.index(instruction)

    def key(self, i: int) -> tuple[int, str, int]:
        return (int(self.stage_of[i]), INSTRUCTIONS[int(self.kind_of[i])], int(self.mb_of[i]))

    def describe(self, i: int) -> str:
        s, name, m = self.key(i)
        return f"{name[0].upper()}(stage {s}, microbatch {m})"

    def keys(self) -> list[tuple[int, str, int]]:
        return [self.key(i) for i in range(self.num_computations)]

    def _topological_order(self) -> np.ndarray:
        n = self.num_computations
        indeg = (self.data_pred >= 0).astype(np.int64) + (self.gpu_pred >= 0)
        succ: list[list[int]] = [[] for _ in range(n)]
        for i in range(n):
            for p in (self.data_pred[i], self.gpu_pred[i]):
                if p >= 0:
                    succ[p].append(i)
        ready = [i for i in range(n) if indeg[i] == 0]
        out = []
        while ready:
            i = ready.pop()
            out.append(i)
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if len(out) != n:
            raise ReplayError("the schedule's order and the data dependencies form a cycle")
        return np.asarray(out, dtype=np.int64)

    # ---------------------------------------------------------------- plans

    def plan_matrix(self, plans: Iterable[Mapping[tuple[int, str, int], int]]) -> np.ndarray:
        """MHz per (plan, computation id) from ``{(stage, instruction, microbatch): MHz}`` maps."""
        keys = self.keys()
        rows = []
        for plan in plans:
            try:
                rows.append([int(plan[k]) for k in keys])
            except KeyError as error:
                raise ReplayError(f"a plan has no clock for {error.args[0]}") from None
        return np.asarray(rows, dtype=np.int64).reshape(-1, self.num_computations)

    def all_fastest(self) -> np.ndarray:
        """The plan with every computation at its fastest measured row, shape (1, N)."""
        fast = {
            (s, name): self.raw.fastest_mhz(s, name)
            for s in range(self.num_stages)
            for name in INSTRUCTIONS
        }
        return np.asarray([[fast[(s, name)] for s, name, _ in self.keys()]], dtype=np.int64)

    def rows_of(self, mhz: np.ndarray) -> np.ndarray:
        """Row index of every (plan, computation); ReplayError for a clock never measured."""
        mhz = np.asarray(mhz, dtype=np.int64)
        if mhz.ndim != 2 or mhz.shape[1] != self.num_computations:
            raise ReplayError(
                f"plans must have shape (P, {self.num_computations}), got {mhz.shape}"
            )
        inside = (mhz >= 0) & (mhz < self.lut.shape[1])
        rows = np.full(mhz.shape, -1, dtype=np.int64)
        g = np.broadcast_to(self.group_of, mhz.shape)
        rows[inside] = self.lut[g[inside], mhz[inside]]
        if np.any(rows < 0):
            p, i = (int(x[0]) for x in np.nonzero(rows < 0))
            raise ReplayError(
                f"plan {p}: {self.describe(i)} at {int(mhz[p, i])} MHz, a clock the profile "
                "never measured for it"
            )
        return rows

    def evaluate(self, mhz: np.ndarray, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """(iteration time s, energy J) of every plan; ``mhz`` has shape (plans, computations)."""
        mhz = np.asarray(mhz)
        times_out, energies_out = [], []
        for start in range(0, mhz.shape[0], chunk):
            rows = self.rows_of(mhz[start : start + chunk])
            t = self.row_time[rows].T.copy()  # (computations, plans): one row per computation
            e = self.row_energy[rows]
            finish = np.empty_like(t)
            zero = np.zeros(t.shape[1])
            dp, gp = self.data_pred, self.gpu_pred
            for i in self.topo:
                a, b = dp[i], gp[i]
                if a >= 0 and b >= 0:
                    begin = np.maximum(finish[a], finish[b])
                elif a >= 0:
                    begin = finish[a]
                elif b >= 0:
                    begin = finish[b]
                else:
                    begin = zero
                np.add(begin, t[i], out=finish[i])
            iteration = finish.max(axis=0)
            busy = t.sum(axis=0)
            energy = e.sum(axis=1) + self.blocking_power_w * (self.num_gpus * iteration - busy)
            times_out.append(iteration)
            energies_out.append(energy)
        if not times_out:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(times_out), np.concatenate(energies_out)

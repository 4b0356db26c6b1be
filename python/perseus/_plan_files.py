"""Deployable plan files: perseus's JSON and CSV, and Zeus's ``freqs_pipeline_*.py``.

Every format gives each GPU its computations in execution order with the
SM clock of each:

- ``plan.json`` (``"format": "perseus-plan"``): the pipeline, the plan's
  replayed time and energy, and per GPU the ordered computations;
- ``plan.csv``: ``gpu,position,instruction,chunk,microbatch,frequency_mhz``;
- ``freqs_pipeline_%05d.py``: Zeus's file (see `perseus._zeus_plan`).

:func:`read_plan` reads any of them back onto a profile.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import _zeus_plan
from ._files import read_plan_text, replace_user_file
from ._zeus_format import INSTRUCTIONS
from .errors import ProfileError
from .pipeline_spec import PipelineSpec
from .plan import Plan, replayed_plan, steps_in_order
from .profile import LIMITS, Profile
from .schedule import SCHEDULES

__all__ = ["CSV_COLUMNS", "FORMATS", "Derived", "file_name", "read_plan", "write_plan"]

FORMATS = ("json", "csv", "zeus")
CSV_COLUMNS = ("gpu", "position", "instruction", "chunk", "microbatch", "frequency_mhz")
PLAN_FORMAT = "perseus-plan"
PLAN_VERSION = 1
_MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Derived:
    """Where a plan that is not one of the frontier's own came from (a plan fitted or
    solved for a deadline, or merged for switch latency), for the file's readers."""

    kind: str  #: ``fitted``, ``tailored`` or ``switch-aware``: names the Zeus file too
    #: the frontier plan it was made from (a tailored plan: the one its search started from
    #: first, the plan meeting the deadline; None: the all-fastest plan)
    made_from_index: Optional[int]
    deadline_s: float  #: the iteration time it was made for
    how: str  #: in words, as `perseus plan` says it


def file_name(kind: str, index: int, derived: Optional[Derived] = None) -> str:
    """The file `write_plan` writes for plan `index` of a frontier, or for a plan
    `derived` from the frontier near plan `index` (a Zeus file then says how in its name,
    so that it is never taken for, nor written over, frontier plan `index`'s)."""
    if kind in ("json", "csv"):
        return f"plan.{kind}"
    return _zeus_plan.file_name(index, None if derived is None else derived.kind)


def plan_document(
    plan: Plan, index: Optional[int] = None, derived: Optional[Derived] = None
) -> dict[str, Any]:
    """The JSON document of a plan: frontier plan `index`, or a plan `derived` from it
    (then ``frontier_index`` is null and ``derived`` says how)."""
    spec = plan.spec
    document: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "pipeline": {
            "schedule": spec.schedule,
            "num_gpus": spec.num_gpus,
            "virtual_stages": spec.virtual_stages,
            "microbatches": spec.microbatches,
        },
        "frontier_index": index if derived is None else None,
    }
    if derived is not None:
        document["derived"] = {
            "kind": derived.kind,
            "made_from_frontier_index": derived.made_from_index,
            "deadline_s": derived.deadline_s,
            "energy_at_deadline_j": plan.energy_at(max(derived.deadline_s, plan.iteration_time_s)),
            "how": derived.how,
        }
    return document | {
        "iteration_time_s": plan.iteration_time_s,
        "energy_j": plan.energy_j,
        "blocking_power_w": plan.blocking_power_w,
        "gpus": [
            [
                {
                    "instruction": step.instruction,
                    "stage": step.stage,
                    "chunk": step.chunk,
                    "microbatch": step.microbatch,
                    "frequency_mhz": step.frequency_mhz,
                }
                for step in steps
            ]
            for steps in plan.execution_order()
        ],
    }


def plan_csv(plan: Plan) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for steps in plan.execution_order():
        for s in steps:
            writer.writerow(
                (s.gpu, s.position, s.instruction, s.chunk, s.microbatch, s.frequency_mhz)
            )
    return out.getvalue()


def write_plan(
    plan: Plan,
    path: str | os.PathLike[str],
    kind: str,
    index: Optional[int],
    *,
    overwrite: bool = True,
    derived: Optional[Derived] = None,
) -> None:
    """Write `plan` to `path` as `kind` (``json``, ``csv`` or ``zeus``), atomically: frontier
    plan `index`, or a plan `derived` from the frontier (the JSON document and the Zeus
    file's comments say how; CSV has no place for it).

    With ``overwrite=False`` an existing file is never replaced (`OutputExistsError`).
    """
    if kind == "zeus":
        notes = [] if derived is None else [f"{derived.kind} plan: {derived.how}"]
        replace_user_file(path, plan._zeus_text(notes), overwrite=overwrite)
    elif kind == "csv":
        replace_user_file(path, plan_csv(plan), overwrite=overwrite)
    elif kind == "json":
        text = json.dumps(plan_document(plan, index, derived), indent=1) + "\n"
        replace_user_file(path, text, overwrite=overwrite)
    else:
        raise ValueError(f"unknown plan format {kind!r}; known: {', '.join(FORMATS)}")


def read_plan(
    path: str | os.PathLike[str],
    profile: Profile,
    *,
    schedule: Optional[str] = None,
    virtual_stages: Optional[int] = None,
) -> Plan:
    """Read a plan file of any format and replay it on `profile`.

    JSON plans carry their pipeline (a `schedule` or `virtual_stages` given
    that differs from it is an error); for CSV and Zeus files `schedule`
    (default ``1f1b``, or ``interleaved-1f1b`` when a CSV lists chunks or
    `virtual_stages` is above 1) and
    `virtual_stages` say it. Raises `ValueError` naming the file and the entry.
    """
    name = os.fspath(path)
    if name.endswith(".py"):
        chunks = virtual_stages or 1
        default = "interleaved-1f1b" if chunks > 1 else "1f1b"  # chunks run interleaved
        return Plan.from_zeus(name, profile, schedule=schedule or default, virtual_stages=chunks)
    text = read_plan_text(name, _MAX_BYTES)
    if name.endswith(".json") or text.lstrip().startswith("{"):
        spec, order = _json_plan(name, text)
        # Its own pipeline stands; one given that differs was silently ignored.
        for given, own, flag in (
            (schedule, spec.schedule, "schedule"),
            (virtual_stages, spec.virtual_stages, "virtual-stages"),
        ):
            if given is not None and given != own:
                raise ValueError(
                    f"{name}: the plan records its pipeline ({flag.replace('-', '_')} {own!r}), "
                    f"but {given!r} was given: leave --{flag} out for a .json plan"
                )
    elif name.endswith(".csv"):
        spec, order = _csv_plan(name, text, schedule, virtual_stages)
    else:
        raise ValueError(
            f"{name}: not a plan file perseus knows: expected .json or .csv (perseus plan) or "
            ".py (Zeus/lowtime freqs_pipeline_*.py)"
        )
    return _replayed(name, spec, order, profile)


def _json_plan(name: str, text: str) -> tuple[PipelineSpec, list[list[tuple[str, int, int, int]]]]:
    try:
        document = json.loads(text, parse_constant=_reject)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{name}: not valid JSON ({error})") from None
    if not isinstance(document, dict) or document.get("format") != PLAN_FORMAT:
        raise ValueError(f'{name}: not a perseus plan file (no "format": "{PLAN_FORMAT}")')
    if document.get("version") != PLAN_VERSION or isinstance(document.get("version"), bool):
        raise ValueError(
            f"{name}: plan format version {document.get('version')!r} is not supported "
            f"(this perseus reads version {PLAN_VERSION})"
        )
    pipeline = document.get("pipeline")
    keys = ("schedule", "num_gpus", "virtual_stages", "microbatches")
    if not isinstance(pipeline, dict) or sorted(pipeline) != sorted(keys):
        raise ValueError(f"{name}: pipeline: expected an object with {', '.join(keys)}")
    if pipeline["schedule"] not in SCHEDULES:
        raise ValueError(f"{name}: pipeline.schedule: unknown schedule {pipeline['schedule']!r}")
    for key in keys[1:]:
        if type(pipeline[key]) is not int or not 1 <= pipeline[key] <= 2**30:
            raise ValueError(f"{name}: pipeline.{key}: expected an integer >= 1")
    spec = PipelineSpec(*(pipeline[k] for k in keys))
    gpus = document.get("gpus")
    if not isinstance(gpus, list) or len(gpus) != spec.num_gpus:
        raise ValueError(f"{name}: gpus: expected a list of {spec.num_gpus} lists (one per GPU)")
    order = []
    for gpu, steps in enumerate(gpus):
        if not isinstance(steps, list):
            raise ValueError(f"{name}: gpus[{gpu}]: expected a list of computations")
        row = []
        for position, step in enumerate(steps):
            where = f"{name}: gpus[{gpu}][{position}]"
            if not isinstance(step, dict):
                raise ValueError(f"{where}: expected an object")
            try:
                row.append(
                    (
                        step["instruction"],
                        step["chunk"],
                        step["microbatch"],
                        step["frequency_mhz"],
                    )
                )
            except KeyError as error:
                raise ValueError(f"{where}: missing {error}") from None
        order.append(row)
    return spec, order


def _csv_plan(
    name: str, text: str, schedule: Optional[str], virtual_stages: Optional[int]
) -> tuple[PipelineSpec, list[list[tuple[str, int, int, int]]]]:
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != CSV_COLUMNS:
        raise ValueError(f"{name}, line 1: expected the header {','.join(CSV_COLUMNS)}")
    rows: dict[int, list[tuple[int, tuple[str, int, int, int]]]] = {}
    for line, fields in enumerate(reader, 2):
        if not fields:
            continue
        if len(fields) != len(CSV_COLUMNS):
            raise ValueError(f"{name}, line {line}: expected {len(CSV_COLUMNS)} fields")
        values = dict(zip(CSV_COLUMNS, (f.strip() for f in fields)))
        numbers = {}
        for key in ("gpu", "position", "chunk", "microbatch", "frequency_mhz"):
            if not values[key].isascii() or not values[key].isdigit() or len(values[key]) > 9:
                raise ValueError(
                    f"{name}, line {line}, field {key!r}: expected a whole number, "
                    f"got {values[key]!r}"
                )
            numbers[key] = int(values[key])
        rows.setdefault(numbers["gpu"], []).append(
            (
                numbers["position"],
                (
                    values["instruction"],
                    numbers["chunk"],
                    numbers["microbatch"],
                    numbers["frequency_mhz"],
                ),
            )
        )
    if not rows or sorted(rows) != list(range(len(rows))):
        raise ValueError(f"{name}: the GPUs must be numbered 0..N-1, got {sorted(rows)}")
    order = []
    for gpu in range(len(rows)):
        entries = sorted(rows[gpu])
        if [p for p, _ in entries] != list(range(len(entries))):
            positions = [p for p, _ in entries]
            twice = next((p for p, q in zip(positions, positions[1:]) if p == q), None)
            listed = set(positions)
            missing = next((k for k in range(len(entries)) if k not in listed), None)
            problem = (
                f"position {twice} is listed twice"
                if twice is not None
                else f"position {missing} is missing"
            )
            raise ValueError(f"{name}: GPU {gpu}: {problem} (positions must run 0..N-1)")
        order.append([e for _, e in entries])
    chunks = 1 + max(step[1] for steps in order for step in steps)
    microbatches = 1 + max(step[2] for steps in order for step in steps)
    v = virtual_stages or chunks
    chosen = schedule or ("interleaved-1f1b" if v > 1 else "1f1b")
    return PipelineSpec(chosen, len(order), v, microbatches), order


def _reject(constant: str) -> Any:
    raise ValueError(f"{constant} is not allowed")


def _replayed(
    name: str, spec: PipelineSpec, order: list[list[tuple[str, int, int, int]]], profile: Profile
) -> Plan:
    """Check `order` against the schedule's order, then replay it on `profile`."""

    try:
        pipeline = spec.pipeline()
    except ProfileError as error:
        raise ValueError(f"{name}: {error}") from None
    frequencies = np.zeros(spec.num_computations, dtype=np.int64)
    for gpu, position, step, i in steps_in_order(name, spec, pipeline, order):
        instruction, chunk, microbatch, mhz = step
        want = (
            INSTRUCTIONS[pipeline.instruction[i]],
            int(pipeline.chunk[i]),
            int(pipeline.microbatch[i]),
        )
        if (instruction, chunk, microbatch) != want:
            raise ValueError(
                f"{name}: GPU {gpu}, position {position}: {instruction} of chunk {chunk}, "
                f"microbatch {microbatch} in the file, but {spec.schedule} runs {want[0]} of "
                f"chunk {want[1]}, microbatch {want[2]} there"
            )
        if type(mhz) is not int or not LIMITS.min_frequency_mhz <= mhz <= LIMITS.max_frequency_mhz:
            raise ValueError(f"{name}: GPU {gpu}, position {position}: bad frequency {mhz!r}")
        frequencies[i] = mhz
    if profile.num_stages != spec.num_stages:
        raise ValueError(
            f"{name}: the plan is for {spec.num_stages} stages, the profile has {profile.num_stages}"
        )
    return replayed_plan(spec, frequencies, profile, source=name)

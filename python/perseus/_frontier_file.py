"""The frontier file (``frontier.json``): writer and strict reader.

Version 3 (written by default) is version 2 with the plans stored compactly,
as changes from one plan to the next (consecutive plans differ in a few
computations)::

    "plans": {"count": P,
              "iteration_time_s", "energy_j", "energy_before_reclaim_j": <f8 x P>,
              "first_mhz": <u2 x N>,       the fastest plan's MHz per computation id
              "change_counts": <u4 x P>,   computations that change in plan k (0 for k = 0)
              "change_ids": <u4 x C>,      which, plan after plan, C = sum of the counts
              "change_mhz": <u2 x C>,      and their new MHz
              "mhz_bits": 32}              (optional) clocks as <u4 instead: only
                                           written when one is above 65,535 MHz
              "sha256": "<64 hex digits>"} (optional) the digest, see below

where ``<f8 x P>`` is the base64 text of P little-endian IEEE doubles
(``<u4``, ``<u2``: unsigned 32- and 16-bit integers). A 16 x 256 frontier of
39,000 plans takes a few MB instead of gigabytes, and a reader rebuilds one
plan, or one GPU's clocks, without making every plan.

``sha256`` is the SHA-256 of the UTF-8 text of
``json.dumps({"pipeline", "blocking_power_w", "baseline", "profile",
"plans" (without "sha256")}, sort_keys=True, separators=(",", ":"))``: what
every plan's replay depends on. When it matches, the reader replays an even
sample of plans at load and each other plan when first used, instead of all
of them at once; when it is absent (files of perseus before it) or does not
match, every plan at load.

Version 2 (``save(version=2)``, for readers of perseus 0.2)::

    {"format": "perseus-frontier", "version": 2,
     "pipeline": {"schedule", "num_gpus", "virtual_stages", "microbatches"},
     "unit_time_s", "solver_unit_time_s", "blocking_power_w", "solve_time_s",
     "steps", "cuts", "stop_reason", "phase_times_s": {phase: s},
     "baseline": {"iteration_time_s", "energy_j"},
     "computation_id": "<how ids are formed>",
     "computations": {"stage": [...], "instruction": [...], "microbatch": [...]},
     "profile": null | {"source", "blocking_power_w", "columns", "rows": [[...], ...]},
     "fingerprint": {key: str | int | float | bool | null}   (optional, see check_fingerprint),
     "plans": [{"iteration_time_s", "energy_j", "energy_before_reclaim_j",
                "frequencies_mhz": [MHz per computation id]}, ...]}

Version 1 (read only) had no ``computations`` or ``profile`` and stored each
plan after the first as ``changes``, ``[id, MHz]`` pairs against the plan
before it.

The reader trusts nothing: every field is checked for its type and range and
every error names the file and the field, as ``plans[3].frequencies_mhz[17]``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import warnings
from typing import TYPE_CHECKING, Any, NoReturn, Optional, Union

import numpy as np

from . import _core
from ._fingerprint import check_fingerprint
from ._plan_store import REPLAY_BLOCK_VALUES, PlanStore, changes_of
from ._replay import _setup, measured_rows, problem_replay
from ._strict_json import JsonError, loads_strict, read_bounded
from ._validate import integer, is_integer, is_real
from ._zeus_format import COLUMNS, INSTRUCTIONS
from .errors import ProfileError
from .pipeline_spec import PipelineSpec
from .plan import Evaluation, Plan, _all_fastest_frequencies
from .profile import LIMITS, Profile, ProfileWarning
from .schedule import SCHEDULES

if TYPE_CHECKING:
    from .frontier import Frontier  # the record this file stores; given to decode as `cls`

__all__ = ["FORMAT_VERSION", "MAX_FILE_BYTES", "decode", "encode"]

FORMAT_NAME = "perseus-frontier"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
MAX_FILE_BYTES = 512 * 1024 * 1024
"""Frontier files larger than this are refused unread (override with ``max_bytes``)."""
# The names the core gives its stop reasons, in the enum's order.
_STOP_REASONS = tuple(_core.stop_reason_name(r) for r in _core.StopReason.__members__.values())

_ID_RULE = "(stage * microbatches + microbatch) * 2 + (0 forward | 1 backward)"
_MAX_COUNT = 2**30  # GPUs, chunks, microbatches, steps: far beyond any real pipeline
_REPLAY_RTOL = 1e-9  # stored vs replayed time and energy (both are the core's replay)
# A version 3 file whose digest matches is not replayed whole at load (12 CPU s
# at 39,000 plans x 8,192 computations): this many plans, spread evenly, are,
# and every other plan is replayed the first time it is used.
_SAMPLED_PLANS = 32

_TOP_REQUIRED = {
    1: ("pipeline", "unit_time_s", "blocking_power_w", "solve_time_s", "baseline", "plans"),
    2: (
        "pipeline",
        "unit_time_s",
        "blocking_power_w",
        "solve_time_s",
        "baseline",
        "plans",
        "steps",
        "cuts",
        "solver_unit_time_s",
        "stop_reason",
        "phase_times_s",
        "computations",
        "profile",
    ),
}
_TOP_OPTIONAL = {
    1: ("steps", "cuts", "solver_unit_time_s", "stop_reason", "phase_times_s", "computation_id"),
    2: ("computation_id", "fingerprint"),
}
_TOP_REQUIRED[3] = _TOP_REQUIRED[2]
_TOP_OPTIONAL[3] = _TOP_OPTIONAL[2]
_U16_MAX = 65535
_PLAN_ARRAYS = {  # v3 "plans" field -> little-endian dtype, length: "plans" or "changes"
    "iteration_time_s": ("<f8", "plans"),
    "energy_j": ("<f8", "plans"),
    "energy_before_reclaim_j": ("<f8", "plans"),
    "first_mhz": ("<u2", "computations"),
    "change_counts": ("<u4", "plans"),
    "change_ids": ("<u4", "changes"),
    "change_mhz": ("<u2", "changes"),
}


def encode(frontier: Frontier, version: int = FORMAT_VERSION) -> dict[str, Any]:
    """The version 3 (or 2) document of `frontier`."""
    spec = frontier.spec
    pipeline = spec.pipeline()
    profile = frontier.profile
    document: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": version,
        "pipeline": {
            "schedule": spec.schedule,
            "num_gpus": spec.num_gpus,
            "virtual_stages": spec.virtual_stages,
            "microbatches": spec.microbatches,
        },
        "unit_time_s": frontier.unit_time_s,
        "solver_unit_time_s": frontier.solver_unit_time_s,
        "blocking_power_w": frontier.blocking_power_w,
        "solve_time_s": frontier.solve_time_s,
        "steps": frontier.steps,
        "cuts": frontier.cuts,
        "stop_reason": frontier.stop_reason,
        "phase_times_s": frontier.phase_times_s,
        "baseline": {
            "iteration_time_s": frontier.baseline.iteration_time_s,
            "energy_j": frontier.baseline.energy_j,
        },
        "computation_id": _ID_RULE,
        "computations": {
            "stage": pipeline.stage.tolist(),
            "instruction": [INSTRUCTIONS[k] for k in pipeline.instruction],
            "microbatch": pipeline.microbatch.tolist(),
        },
        "profile": None if profile is None else _encode_profile(profile),
        **({"fingerprint": dict(frontier.fingerprint)} if frontier.fingerprint else {}),
        "plans": _encode_plans(frontier) if version >= 3 else _dense_plans(frontier),
    }
    if version >= 3:
        document["plans"]["sha256"] = _digest(document)
    return document


def _digest(document: dict[str, Any]) -> str:
    """SHA-256 of what a plan's replay depends on: pipeline, power, baseline, profile, plans.

    Written at save; at load a match means the file is as perseus wrote it,
    so its plans need not all be replayed at once (see `_SAMPLED_PLANS`).
    Computed over a canonical JSON text, so it does not depend on spacing
    or key order.
    """
    covered = {
        key: document[key] for key in ("pipeline", "blocking_power_w", "baseline", "profile")
    }
    covered["plans"] = {k: v for k, v in document["plans"].items() if k != "sha256"}
    text = json.dumps(covered, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _dense_plans(frontier: Frontier) -> list[dict[str, Any]]:
    return [
        {
            "iteration_time_s": p.iteration_time_s,
            "energy_j": p.energy_j,
            "energy_before_reclaim_j": p.energy_before_reclaim_j,
            "frequencies_mhz": p.frequencies_mhz.tolist(),
        }
        for p in frontier
    ]


def _b64(array: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def _encode_plans(frontier: Frontier) -> dict[str, Any]:
    store = frontier._plans
    first: np.ndarray
    if isinstance(store, PlanStore):  # loaded compactly: its changes as they are
        first, counts, ids, mhz = store.first_mhz, store.counts, store.change_ids, store.change_mhz
    else:
        rows = [p.frequencies_mhz for p in store]
        first = rows[0]
        counts, ids, mhz = changes_of(rows)
    # 16 bits hold every real GPU's clocks; a profile may name up to
    # MAX_CLOCK_MHZ, and such a clock must not wrap into one never measured.
    wide = max(int(np.max(first)), int(np.max(mhz)) if len(mhz) else 0) > _U16_MAX
    clock = "<u4" if wide else "<u2"
    out: dict[str, Any] = {
        "count": len(frontier),
        "iteration_time_s": _b64(frontier.iteration_times_s, "<f8"),
        "energy_j": _b64(frontier.energies_j, "<f8"),
        "energy_before_reclaim_j": _b64(frontier.energies_before_reclaim_j, "<f8"),
        "first_mhz": _b64(first, clock),
        "change_counts": _b64(counts, "<u4"),
        "change_ids": _b64(ids, "<u4"),
        "change_mhz": _b64(mhz, clock),
    }
    if wide:
        out["mhz_bits"] = 32
    return out


def _encode_profile(profile: Profile) -> dict[str, Any]:
    rows = []
    for stage in range(profile.num_stages):
        for instruction in INSTRUCTIONS:
            m = profile.measured(stage, instruction)
            rows += [
                [stage, instruction, int(f), float(t), float(e)]
                for f, t, e in zip(m.frequency_mhz, m.time_s, m.energy_j)
            ]
    return {
        "source": profile.source,
        "blocking_power_w": profile.blocking_power_w,
        "columns": list(COLUMNS),
        "rows": rows,
    }


# --- reading ---------------------------------------------------------------------------


class _Malformed(Exception):
    """A field is wrong; turned into one ValueError naming the file."""


class _NotItsProfile(Exception):
    """The profile given to load() does not fit an intact file; one ValueError naming both."""


def _check_given(check: Any, profile: Profile, *args: Any) -> None:
    """`check` (one of the _check_*_against) on the profile the caller gave: a
    failure is that profile's, not the file's."""
    try:
        check(profile, *args, stored=False)
    except _Malformed as error:
        raise _NotItsProfile(str(error)) from None


def _check_same_rows(given: Profile, in_file: Profile) -> None:
    """The profile given has the file's own measured rows, every one of them.
    Replaying a sample of plans on it is not enough: a profile re-measured at
    some clocks only changes plans that use them, and plan_for then returned
    plans that missed their deadline on it."""
    for stage in range(in_file.num_stages):
        for instruction in INSTRUCTIONS:
            mine, theirs = in_file.measured(stage, instruction), given.measured(stage, instruction)
            if not np.array_equal(mine.frequency_mhz, theirs.frequency_mhz):
                raise _NotItsProfile(
                    f"stage {stage} {instruction}: measured at {len(mine)} clocks, the profile "
                    f"given at {len(theirs)} or other ones"
                )
            for field in ("time_s", "energy_j"):
                a, b = getattr(mine, field), getattr(theirs, field)
                differ = ~np.isclose(a, b, rtol=1e-12, atol=0.0)
                if differ.any():
                    k = int(np.argmax(differ))
                    raise _NotItsProfile(
                        f"stage {stage} {instruction} at {int(mine.frequency_mhz[k])} MHz: "
                        f"{field} {float(a[k])!r} in the file, {float(b[k])!r} in the profile "
                        f"given ({int(differ.sum())} of its {len(a)} rows differ)"
                    )


def _fail(field: str, problem: str) -> NoReturn:
    raise _Malformed(f"{field}: {problem}")


def _object(
    value: Any, field: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(field, f"expected an object, got {_kind(value)}")
    missing = [k for k in required if k not in value]
    if missing:
        _fail(field, f"missing {', '.join(repr(k) for k in missing)}")
    unknown = sorted(repr(k)[:40] for k in value if k not in required and k not in optional)
    if unknown:
        _fail(field, f"unknown field(s) {', '.join(unknown[:5])}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _integer(value: Any, field: str, low: int = 0, high: int = _MAX_COUNT) -> int:
    if not is_integer(value):
        _fail(field, f"expected an integer, got {_kind(value)}")
    if not low <= value <= high:
        _fail(field, f"must be in {low}..{high}, got {value}")
    return value


def _real(
    value: Any,
    field: str,
    unit: str,
    *,
    low: float = 0.0,
    positive: bool = True,
    high: float = math.inf,
) -> float:
    if not is_real(value):
        _fail(field, f"expected a number of {unit}, got {_kind(value)}")
    number = float(value)
    if not math.isfinite(number):
        _fail(field, f"must be a finite number of {unit}, got {value!r}")
    if (number <= low if positive else number < low) or number > high:
        bound = f"> {low:g}" if positive else f">= {low:g}"
        _fail(
            field,
            f"must be {bound}{'' if math.isinf(high) else f' and <= {high:g}'} {unit}, got {value!r}",
        )
    return number


def _list(value: Any, field: str, length: Optional[int] = None) -> list[Any]:
    if not isinstance(value, list):
        _fail(field, f"expected a list, got {_kind(value)}")
    if length is not None and len(value) != length:
        _fail(field, f"expected {length} entries, got {len(value)}")
    return value


def _frequencies(values: Any, field: str, length: int) -> np.ndarray:
    values = _list(values, field, length)
    low, high = LIMITS.min_frequency_mhz, LIMITS.max_frequency_mhz
    if not all(type(v) is int and low <= v <= high for v in values):
        for i, v in enumerate(values):
            if type(v) is not int or not low <= v <= high:
                _fail(f"{field}[{i}]", f"expected whole MHz in {low}..{high}, got {_kind(v)}")
    return np.array(values, dtype=np.int64)


def _pipeline(value: Any) -> PipelineSpec:
    fields = ("schedule", "num_gpus", "virtual_stages", "microbatches")
    value = _object(value, "pipeline", fields)
    schedule = value["schedule"]
    if schedule not in SCHEDULES:
        _fail(
            "pipeline.schedule",
            f"unknown schedule {_kind(schedule)}; known: {', '.join(SCHEDULES)}",
        )
    spec = PipelineSpec(
        schedule,
        _integer(value["num_gpus"], "pipeline.num_gpus", 1),
        _integer(value["virtual_stages"], "pipeline.virtual_stages", 1),
        _integer(value["microbatches"], "pipeline.microbatches", 1),
    )
    if spec.num_computations > _MAX_COUNT:
        _fail("pipeline", f"{spec.num_computations} computations is beyond what perseus solves")
    try:
        spec.pipeline()
    except (ProfileError, ValueError) as error:
        _fail("pipeline", str(error))
    return spec


def _computations(value: Any, spec: PipelineSpec) -> None:
    value = _object(value, "computations", ("stage", "instruction", "microbatch"))
    pipeline = spec.pipeline()
    n = spec.num_computations
    expected = {
        "stage": pipeline.stage.tolist(),
        "instruction": [INSTRUCTIONS[k] for k in pipeline.instruction],
        "microbatch": pipeline.microbatch.tolist(),
    }
    for key, want in expected.items():
        got = _list(value[key], f"computations.{key}", n)
        if got != want:
            i = next(
                i for i, (a, b) in enumerate(zip(got, want)) if a != b or type(a) is not type(b)
            )
            _fail(
                f"computations.{key}[{i}]",
                f"computation {i} is {want[i]!r} in perseus's id order ({_ID_RULE}), the file says "
                f"{_kind(got[i])}",
            )


def _profile(value: Any, spec: PipelineSpec) -> Optional[Profile]:
    if value is None:
        return None
    value = _object(value, "profile", ("source", "blocking_power_w", "columns", "rows"))
    if value["source"] is not None and not isinstance(value["source"], str):
        _fail("profile.source", f"expected a string or null, got {_kind(value['source'])}")
    power = _real(
        value["blocking_power_w"],
        "profile.blocking_power_w",
        "watts",
        positive=False,
        high=LIMITS.max_blocking_power_w,
    )
    if value["columns"] != list(COLUMNS):
        _fail("profile.columns", f"expected {list(COLUMNS)}")
    rows = _list(value["rows"], "profile.rows")
    for i, row in enumerate(rows):
        # Profile's parser takes strings too; a file holds numbers, so insist on them.
        row = _list(row, f"profile.rows[{i}]", len(COLUMNS))
        for column, cell in zip(COLUMNS, row):
            if column == "instruction":
                continue
            if isinstance(cell, bool) or not isinstance(cell, (int, float)):
                _fail(f"profile.rows[{i}]", f"{column} must be a number, got {_kind(cell)}")
    try:
        loaded = Profile.from_records(rows, blocking_power_w=power)
    except ProfileError as error:
        _fail("profile", str(error).replace("records[", "profile.rows["))
    if loaded.num_stages != spec.num_stages:
        _fail(
            "profile",
            f"{loaded.num_stages} stages, but the pipeline has {spec.num_stages}",
        )
    measured = {
        (s, k): loaded.measured(s, k) for s in range(loaded.num_stages) for k in INSTRUCTIONS
    }
    return Profile(measured, blocking_power_w=power, source=value["source"])


def _plans(value: Any, spec: PipelineSpec, version: int, blocking_power_w: float) -> list[Plan]:
    entries = _list(value, "plans")
    if not entries:
        _fail("plans", "a frontier needs at least one plan")
    n = spec.num_computations
    plans: list[Plan] = []
    previous: Optional[np.ndarray] = None
    timing = ("iteration_time_s", "energy_j")
    for k, entry in enumerate(entries):
        field = f"plans[{k}]"
        if version == 1 and k > 0:
            entry = _object(
                entry, field, timing, ("energy_before_reclaim_j", "changes", "frequencies_mhz")
            )
        else:
            entry = _object(
                entry, field, (*timing, "frequencies_mhz"), ("energy_before_reclaim_j",)
            )
        if "frequencies_mhz" in entry:
            frequencies = _frequencies(entry["frequencies_mhz"], f"{field}.frequencies_mhz", n)
        elif "changes" in entry:
            assert previous is not None
            frequencies = previous.copy()
            for j, change in enumerate(_list(entry["changes"], f"{field}.changes")):
                where = f"{field}.changes[{j}]"
                change = _list(change, where, 2)
                computation = _integer(change[0], f"{where}[0]", 0, n - 1)
                frequencies[computation] = _integer(
                    change[1], f"{where}[1]", LIMITS.min_frequency_mhz, LIMITS.max_frequency_mhz
                )
        else:
            _fail(field, "needs 'frequencies_mhz' or 'changes'")
        time_s = _real(entry["iteration_time_s"], f"{field}.iteration_time_s", "seconds")
        energy_j = _real(entry["energy_j"], f"{field}.energy_j", "joules")
        before = entry.get("energy_before_reclaim_j", energy_j)
        before = _real(before, f"{field}.energy_before_reclaim_j", "joules")
        if plans and time_s <= plans[-1].iteration_time_s:
            _fail(
                f"{field}.iteration_time_s",
                f"{time_s!r} s does not follow plans[{k - 1}]'s {plans[-1].iteration_time_s!r} s: "
                "plans must be ordered by strictly increasing iteration time",
            )
        plans.append(Plan(spec, frequencies, time_s, energy_j, before, blocking_power_w))
        previous = frequencies
    return plans


def _array(value: Any, field: str, dtype: str, length: int) -> np.ndarray:
    if not isinstance(value, str):
        _fail(field, f"expected base64 text of {dtype} numbers, got {_kind(value)}")
    size = np.dtype(dtype).itemsize
    if len(value) != 4 * ((length * size + 2) // 3):
        _fail(
            field,
            f"expected {length} numbers of {size} bytes, which is "
            f"{4 * ((length * size + 2) // 3)} base64 characters, got {len(value)}",
        )
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        _fail(field, "not base64 text")
    return np.frombuffer(raw, dtype=dtype)


def _compact_plans(value: Any, spec: PipelineSpec, blocking_power_w: float) -> PlanStore:
    value = _object(value, "plans", ("count", *_PLAN_ARRAYS), ("sha256", "mhz_bits"))
    count = _integer(value["count"], "plans.count", 1, _MAX_COUNT)
    bits = value.get("mhz_bits", 16)
    if type(bits) is not int or bits not in (16, 32):
        _fail("plans.mhz_bits", f"expected 16 or 32, got {_kind(bits)}")
    clock = "<u2" if bits == 16 else "<u4"
    n = spec.num_computations
    lengths = {"plans": count, "computations": n}
    arrays: dict[str, np.ndarray] = {}
    for key, (dtype, length) in _PLAN_ARRAYS.items():
        if key == "change_ids":
            counts = arrays["change_counts"]
            if counts[0] != 0:
                _fail("plans.change_counts[0]", f"the first plan has no changes, got {counts[0]}")
            lengths["changes"] = int(counts.sum(dtype=np.int64))
        if key.endswith("_mhz"):
            dtype = clock
        arrays[key] = _array(value[key], f"plans.{key}", dtype, lengths[length])
    for key in ("iteration_time_s", "energy_j", "energy_before_reclaim_j"):
        numbers_ = arrays[key]
        bad = np.flatnonzero(~(np.isfinite(numbers_) & (numbers_ > 0)))
        if len(bad):
            unit = "seconds" if key.endswith("_s") else "joules"
            _fail(
                f"plans.{key}[{bad[0]}]",
                f"must be a finite number of {unit} > 0, got {numbers_[bad[0]]!r}",
            )
    times = arrays["iteration_time_s"]
    unordered = np.flatnonzero(np.diff(times) <= 0)
    if len(unordered):
        k = int(unordered[0]) + 1
        _fail(
            f"plans.iteration_time_s[{k}]",
            f"{times[k]!r} s does not follow plans[{k - 1}]'s {times[k - 1]!r} s: plans must "
            "be ordered by strictly increasing iteration time",
        )
    ids = arrays["change_ids"]
    bad = np.flatnonzero(ids >= n)
    if len(bad):
        _fail(
            f"plans.change_ids[{bad[0]}]",
            f"computation id must be in 0..{n - 1}, got {ids[bad[0]]}",
        )
    low, high = LIMITS.min_frequency_mhz, LIMITS.max_frequency_mhz
    for key in ("first_mhz", "change_mhz"):
        mhz = arrays[key]
        bad = np.flatnonzero((mhz < low) | (mhz > high))
        if len(bad):
            _fail(
                f"plans.{key}[{bad[0]}]", f"expected whole MHz in {low}..{high}, got {mhz[bad[0]]}"
            )
    return PlanStore(
        spec,
        arrays["first_mhz"],
        arrays["change_counts"].astype(np.int64),
        ids,
        arrays["change_mhz"],
        times,
        arrays["energy_j"],
        arrays["energy_before_reclaim_j"],
        blocking_power_w,
        None,
    )


def _check_store_against(
    profile: Profile,
    spec: PipelineSpec,
    store: PlanStore,
    baseline: Evaluation,
    stored: bool,
    every_plan: bool = True,
) -> None:
    """`_check_against` for compact plans: every clock that occurs, then a replay.

    With `every_plan` false (a stored profile and a matching digest) only
    `_SAMPLED_PLANS` plans are replayed here; the caller sets a checker on
    `store` for the others.
    """
    which = "the profile stored in the file" if stored else "the profile given"
    pipeline = spec.pipeline()
    group = pipeline.group
    allowed = np.zeros((2 * spec.num_stages, LIMITS.max_frequency_mhz + 1), dtype=bool)
    for g in range(2 * spec.num_stages):
        allowed[g, profile.measured(g // 2, INSTRUCTIONS[g % 2]).frequency_mhz] = True
    for field, ids, mhz in (
        ("plans.first_mhz", np.arange(spec.num_computations), store.first_mhz),
        ("plans.change_mhz", store.change_ids, store.change_mhz),
    ):
        bad = np.flatnonzero(~allowed[group[ids], mhz])
        if len(bad):
            j = int(bad[0])
            i = int(ids[j])
            stage, instruction = int(pipeline.stage[i]), INSTRUCTIONS[int(pipeline.instruction[i])]
            measured = sorted(int(f) for f in profile.measured(stage, instruction).frequency_mhz)
            _fail(
                f"{field}[{j}]",
                f"{int(mhz[j])} MHz was never measured for stage {stage} "
                f"{instruction} (computation {i}) in {which} (measured: {measured})",
            )
    _check_baseline(profile, spec, baseline, which)
    if not stored:
        return
    problem, _, _ = _setup(profile, spec)
    if not every_plan:
        sample = np.unique(np.linspace(0, len(store) - 1, _SAMPLED_PLANS).round().astype(np.int64))
        rows = np.stack([store._row(int(k)) for k in sample])
        _compare_replay(store, sample, *problem_replay(problem, profile, spec, rows), which)
        return
    block = max(1, REPLAY_BLOCK_VALUES // max(1, spec.num_computations))
    for start in range(0, len(store), block):
        plans = np.arange(start, min(start + block, len(store)))
        rows = np.stack([store._row(int(k)) for k in plans])
        _compare_replay(store, plans, *problem_replay(problem, profile, spec, rows), which)


def _compare_replay(
    store: PlanStore, plans: np.ndarray, times: np.ndarray, energies: np.ndarray, which: str
) -> None:
    """The stored time and energy of `plans` must be what they replay to."""
    for name, stored_values, replayed in (
        ("iteration_time_s", store.times_s[plans], times),
        ("energy_j", store.energies_j[plans], energies),
    ):
        off = ~np.isclose(stored_values, replayed, rtol=_REPLAY_RTOL, atol=0.0)
        if off.any():
            j = int(np.flatnonzero(off)[0])
            _fail(
                f"plans.{name}[{int(plans[j])}]",
                f"the file says {float(stored_values[j])!r} "
                f"but the plan replays to {float(replayed[j])!r} on {which}",
            )


class _FirstUseCheck:
    """A `PlanChecker` replaying each plan of a file on its stored profile when first used."""

    def __init__(self, name: str, profile: Profile, spec: PipelineSpec, store: PlanStore) -> None:
        self._name, self._profile, self._spec, self._store = name, profile, spec, store
        self._problem: Optional[Any] = None

    def __call__(self, index: int, row: np.ndarray) -> None:
        if self._problem is None:
            self._problem, _, _ = _setup(self._profile, self._spec)
        replayed = problem_replay(self._problem, self._profile, self._spec, row)
        try:
            _compare_replay(
                self._store, np.array([index]), *replayed, "the profile stored in the file"
            )
        except _Malformed as error:
            raise ValueError(
                f"{self._name}: malformed frontier file: {error} (found when the plan was "
                "first used: the file's digest matched, so not every plan was replayed at load)"
            ) from None


def _digest_matches(document: dict[str, Any]) -> Optional[bool]:
    """Whether ``plans.sha256`` is the digest of `document` (None when it has none)."""
    written = document["plans"].get("sha256")
    if written is None:
        return None
    if not isinstance(written, str) or len(written) != 64:
        _fail("plans.sha256", f"expected 64 hexadecimal digits, got {_kind(written)}")
    return written == _digest(document)


def _check_baseline(profile: Profile, spec: PipelineSpec, baseline: Evaluation, which: str) -> None:
    """The stored all-fastest time and energy must be what the profile gives."""
    rows = np.array([_all_fastest_frequencies(profile, spec)], dtype=np.int64)
    problem, _, _ = _setup(profile, spec)
    times, energies = problem.replay(*measured_rows(profile, spec, rows))
    for name, got, want in (
        ("iteration_time_s", baseline.iteration_time_s, float(times[0])),
        ("energy_j", baseline.energy_j, float(energies[0])),
    ):
        if not math.isclose(got, want, rel_tol=_REPLAY_RTOL):
            _fail(
                f"baseline.{name}",
                f"the file says {got!r} but every computation at its "
                f"fastest clock replays to {want!r} on {which}",
            )


def _check_against(
    profile: Profile, spec: PipelineSpec, plans: list[Plan], baseline: Evaluation, stored: bool
) -> None:
    """Every frequency was measured for its computation; a stored profile must also replay."""
    which = "the profile stored in the file" if stored else "the profile given"
    pipeline = spec.pipeline()
    rows = np.stack([p.frequencies_mhz for p in plans]).astype(np.int64)
    group = pipeline.group
    for g in range(2 * spec.num_stages):
        stage, instruction = g // 2, INSTRUCTIONS[g % 2]
        allowed = profile.measured(stage, instruction).frequency_mhz
        columns = np.nonzero(group == g)[0]
        bad = ~np.isin(rows[:, columns], allowed)
        if bad.any():
            k, j = (int(v[0]) for v in np.nonzero(bad))
            i = int(columns[j])
            _fail(
                f"plans[{k}].frequencies_mhz[{i}]",
                f"{rows[k, i]} MHz was never measured for stage {stage} {instruction} in {which} "
                f"(microbatch {int(pipeline.microbatch[i])}; measured: "
                f"{sorted(int(f) for f in allowed)})",
            )
    _check_baseline(profile, spec, baseline, which)
    if not stored:
        return
    time_s, energy_j = measured_rows(profile, spec, rows)
    problem, _, _ = _setup(profile, spec)
    times, energies = problem.replay(time_s, energy_j)
    for k, plan in enumerate(plans):
        for name, got, want in (
            ("iteration_time_s", plan.iteration_time_s, times[k]),
            ("energy_j", plan.energy_j, energies[k]),
        ):
            if not math.isclose(got, want, rel_tol=_REPLAY_RTOL):
                _fail(
                    f"plans[{k}].{name}",
                    f"the file says {got!r} but the plan replays to {float(want)!r} on {which}",
                )


def _check_reclaim(energies_j: np.ndarray, before_j: np.ndarray) -> None:
    """Reclamation and local search only ever lower a plan's energy."""
    worse = np.flatnonzero(before_j < energies_j * (1 - _REPLAY_RTOL))
    if len(worse):
        k = int(worse[0])
        _fail(
            f"plans[{k}].energy_before_reclaim_j",
            f"{float(before_j[k])!r} J is below the "
            f"plan's energy {float(energies_j[k])!r} J: reclamation never adds energy",
        )


def decode(cls: type[Frontier], name: str, profile: Optional[Profile], max_bytes: int) -> Frontier:
    """Read and check the frontier file `name` (see `Frontier.load`)."""
    if profile is not None and not isinstance(profile, Profile):
        raise TypeError(f"profile must be a perseus.Profile, got {type(profile).__name__}")
    cap = integer(
        max_bytes, "max_bytes", what="a whole number of bytes", low=1, type_error=TypeError
    )
    return _decode_bytes(cls, read_bounded(name, cap, "a frontier file"), name, profile)


def unpickle(cls: type[Frontier], text: str) -> Frontier:
    """The frontier pickled as `save`'s JSON text, checked as `Frontier.load` checks a file."""
    return _decode_bytes(cls, text.encode("utf-8"), "(pickled frontier)", None)


def _decode_bytes(
    cls: type[Frontier], data: bytes, name: str, profile: Optional[Profile]
) -> Frontier:
    try:
        document = loads_strict(data, name)
    except JsonError as error:
        raise ValueError(str(error)) from None
    del data
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise ValueError(f"{name}: not a perseus frontier file")
    version = document.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ValueError(
            f"{name}: frontier format version {version!r} is not supported (this perseus reads "
            f"versions {', '.join(str(v) for v in READABLE_VERSIONS)})"
        )
    # Warnings about the stored profile's rows name them as the file holds
    # them (profile.rows[i] of this file), not as Profile.from_records does.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            frontier = _decode(cls, document, version, profile, name)
        except _Malformed as error:
            raise ValueError(f"{name}: malformed frontier file: {error}") from None
        except _NotItsProfile as error:
            raise ValueError(
                f"{name}: the profile given is not the one this frontier was solved on: {error}"
            ) from None
    for warning in caught:
        if issubclass(warning.category, ProfileWarning):
            text = str(warning.message).replace("records[", "profile.rows[", 1)
            warnings.warn(f"{name}: {text}", ProfileWarning, stacklevel=3)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return frontier


def _decode(
    cls: type[Frontier],
    document: dict[str, Any],
    version: int,
    given: Optional[Profile],
    name: str,
) -> Frontier:
    _object(
        document,
        "(top level)",
        ("format", "version", *_TOP_REQUIRED[version]),
        _TOP_OPTIONAL[version],
    )
    spec = _pipeline(document["pipeline"])
    blocking_power_w = _real(
        document["blocking_power_w"],
        "blocking_power_w",
        "watts",
        positive=False,
        high=LIMITS.max_blocking_power_w,
    )
    unit_time_s = _real(document["unit_time_s"], "unit_time_s", "seconds", high=LIMITS.max_time_s)
    solver_unit = document.get("solver_unit_time_s", unit_time_s)
    solver_unit_time_s = _real(solver_unit, "solver_unit_time_s", "seconds", high=LIMITS.max_time_s)
    solve_time_s = _real(document["solve_time_s"], "solve_time_s", "seconds", positive=False)
    steps = _integer(document.get("steps", 0), "steps", 0, 2**62)
    cuts = _integer(document.get("cuts", 0), "cuts", 0, 2**62)
    stop_reason = document.get("stop_reason", "minimum_time")
    if stop_reason not in _STOP_REASONS:
        _fail(
            "stop_reason", f"expected one of {', '.join(_STOP_REASONS)}, got {_kind(stop_reason)}"
        )
    phases = document.get("phase_times_s") or {}
    if not isinstance(phases, dict):
        _fail("phase_times_s", f"expected an object, got {_kind(phases)}")
    phase_times_s = {}
    known = [_core.phase_name(_core.Phase(p)) for p in range(4)]
    for key, seconds in phases.items():
        if key not in known:
            _fail(
                "phase_times_s",
                f"unknown phase {key[:40]!r}; known: {', '.join(repr(k) for k in known)}",
            )
        phase_times_s[key] = _real(seconds, f"phase_times_s.{key}", "seconds", positive=False)
    baseline_doc = _object(document["baseline"], "baseline", ("iteration_time_s", "energy_j"))
    baseline = Evaluation(
        _real(baseline_doc["iteration_time_s"], "baseline.iteration_time_s", "seconds"),
        _real(baseline_doc["energy_j"], "baseline.energy_j", "joules"),
    )
    stored: Optional[Profile] = None
    if version >= 2:
        _computations(document["computations"], spec)
        stored = _profile(document["profile"], spec)
        if stored is not None and stored.blocking_power_w != blocking_power_w:
            _fail(
                "profile.blocking_power_w",
                f"{stored.blocking_power_w!r} W, but the frontier's is {blocking_power_w!r} W",
            )
    if "computation_id" in document and not isinstance(document["computation_id"], str):
        _fail("computation_id", f"expected a string, got {_kind(document['computation_id'])}")
    fingerprint = document.get("fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, dict):
        _fail("fingerprint", f"expected an object, got {_kind(fingerprint)}")
    try:
        fingerprint = check_fingerprint(fingerprint)
    except (TypeError, ValueError) as error:
        raise _Malformed(str(error)) from None
    if solver_unit_time_s > unit_time_s * (1 + 1e-9):
        _fail(
            "solver_unit_time_s",
            f"{solver_unit_time_s!r} s is coarser than unit_time_s "
            f"{unit_time_s!r} s (the solver only ever refines the unit)",
        )
    if given is not None and given.num_stages != spec.num_stages:
        _fail("pipeline", f"{spec.num_stages} stages, but the profile given has {given.num_stages}")
    if given is not None and given.blocking_power_w != blocking_power_w:
        # Before the plans' checks, which would only see every energy off.
        raise _NotItsProfile(
            f"blocking_power_w: the frontier was solved with {blocking_power_w!r} W, the profile "
            f"given has {given.blocking_power_w!r} W (Profile.with_blocking_power changes it)"
        )
    plans: Union[PlanStore, list[Plan]]
    if version >= 3:
        plans = _compact_plans(document["plans"], spec, blocking_power_w)
        _check_reclaim(plans.energies_j, plans.before_j)
        if stored is not None:
            # A file as perseus wrote it (digest matches) is replayed in a
            # sample now and plan by plan when used; any other, whole.
            intact = _digest_matches(document)
            _check_store_against(stored, spec, plans, baseline, stored=True, every_plan=not intact)
            if intact is False:
                _fail(
                    "plans.sha256",
                    "does not match the file's plans and profile, though every plan replays "
                    "to its stored time and energy: the file was changed after perseus wrote it",
                )
            if intact:
                plans.checker = _FirstUseCheck(name, stored, spec, plans)
        if given is not None:
            _check_given(_check_store_against, given, spec, plans, baseline)
    else:
        plans = _plans(document["plans"], spec, version, blocking_power_w)
        _check_reclaim(
            np.array([p.energy_j for p in plans]),
            np.array([p.energy_before_reclaim_j for p in plans]),
        )
        if stored is not None:
            _check_against(stored, spec, plans, baseline, stored=True)
        if given is not None:
            _check_given(_check_against, given, spec, plans, baseline)
    if given is not None and stored is not None:
        # After the plans' own checks, which name a plan where one does not fit.
        _check_same_rows(given, stored)
    return cls(
        plans,
        baseline=baseline,
        spec=spec,
        unit_time_s=unit_time_s,
        blocking_power_w=blocking_power_w,
        solve_time_s=solve_time_s,
        steps=steps,
        cuts=cuts,
        solver_unit_time_s=solver_unit_time_s,
        stop_reason=stop_reason,
        phase_times_s=phase_times_s,
        profile=given if given is not None else stored,
        fingerprint=fingerprint,
    )

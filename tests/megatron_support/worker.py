"""One rank of the megatron-core scenarios of tests/test_megatron.py.

Run by ``cpu_launch.launch`` (shims installed) on 4 gloo ranks, with a fake
NVML of 4 GPUs (one per rank)::

    worker.py OUT_DIR [SCENARIO ...]

Each scenario builds the example's GPT (examples/megatron_gpt.py) for some
layout, trains a few iterations with or without perseus and records what
the test checks; this rank's results go to ``OUT_DIR/rank<r>.json``.
Frequencies are requested through the fake NVML named by
``PERSEUS_NVML_LIBRARY``; its per-rank log (``FAKE_NVML_LOG``) shows every
NVML call, the device it was for, and the clocks actually set.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib.util
import json
import os
import sys
import time
import traceback
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import perseus
import perseus.megatron
import torch
import torch.distributed as dist
from perseus.megatron import ClockOptions, MetricsOptions, ProfileOptions
from perseus.switcher import FrequencySwitcher

faulthandler.dump_traceback_later(float(os.environ.get("WORKER_TIMEOUT_S", "400")), exit=True)
torch.set_num_threads(1)

_ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "megatron_gpt", _ROOT / "examples" / "megatron_gpt.py"
)
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

FREQUENCIES_MHZ = (1980, 1800, 1620, 1440, 1260, 1080, 900)
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
PROFILER_OPTIONS = {
    "frequencies_mhz": [1980, 1500, 1050],
    "window_s": 0.01,
    "windows": 1,
    "warmup_s": 0.0,
    "blocking_window_s": 0.03,
}


class WaitingSwitcher(FrequencySwitcher):
    """Applies each request before returning, so the fake NVML logs every distinct clock."""

    def set(self, mhz: int) -> int:
        applied = super().set(mhz)
        if not self.wait(timeout_s=10):
            raise RuntimeError("the switcher did not apply a clock within 10 s")
        return applied

    def reset(self) -> None:
        super().reset()
        if not self.wait(timeout_s=10):
            raise RuntimeError("the switcher did not reset within 10 s")


class RecordingWriter:
    """Stands in for TensorBoard's SummaryWriter (not installed here): keeps add_scalar calls."""

    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, float(value), int(step)))


def synthetic_profile(stages: int) -> perseus.Profile:
    """Unequal stages, time ~ 1/f and power ~ f^3: plans with varied frequencies."""
    records = []
    for stage in range(stages):
        for instruction, scale in (("forward", 1.0), ("backward", 2.0)):
            base_s = 0.010 * scale * (1.0 + 0.35 * ((stage * 7) % stages) / stages)
            for f in FREQUENCIES_MHZ:
                time_s = base_s * (1980 / f)
                power_w = 90 + 610 * (f / 1980) ** 3
                records.append((stage, instruction, f, time_s, power_w * time_s))
    return perseus.Profile.from_records(records, blocking_power_w=80.0)


def frontier_for(schedule: str, pipeline: int, virtual: int, microbatches: int) -> perseus.Frontier:
    profile = synthetic_profile(pipeline * virtual)
    # One thread: the four ranks solve side by side on a host of few cores.
    return perseus.optimize(
        profile,
        microbatches=microbatches,
        schedule=schedule,
        virtual_stages=virtual,
        progress=False,
        threads=1,
    )


def nvml_calls() -> list[list[Any]]:
    """This process's fake NVML calls: [function, args, return code]."""
    path = os.environ.get("FAKE_NVML_LOG")
    if not path or not os.path.exists(path):
        return []
    rows = []
    for line in Path(path).read_text().splitlines():
        left, _, rc = line.rpartition(" = ")
        parts = left.split()
        if int(parts[1]) == os.getpid():
            rows.append([parts[2], parts[3:], int(rc)])
    return rows


def clock_calls(calls: list[list[Any]]) -> list[list[Any]]:
    return [c for c in calls if "LockedClocks" in c[0]]


def arguments(
    pipeline: int, virtual: int, microbatches: int, iterations: int, *extra: str
) -> argparse.Namespace:
    return example.parse_args(
        [
            "--cpu",
            f"--pipeline={pipeline}",
            f"--virtual={virtual}",
            f"--microbatches={microbatches}",
            f"--iterations={iterations}",
            *extra,
        ]
    )


def layout() -> dict[str, int]:
    from megatron.core import parallel_state as ps

    return {
        "rank": dist.get_rank(),
        "pp_rank": ps.get_pipeline_model_parallel_rank(),
        "pp_size": ps.get_pipeline_model_parallel_world_size(),
        "dp_rank": ps.get_data_parallel_rank(),
        "dp_size": ps.get_data_parallel_world_size(),
        "tp_rank": ps.get_tensor_model_parallel_rank(),
        "tp_size": ps.get_tensor_model_parallel_world_size(),
    }


_initialized: Any = None


def initialize(args: argparse.Namespace) -> None:
    """The example's initialisation, once per layout: megatron never destroys its process
    groups, and hundreds of idle gloo groups slow every later collective."""
    global _initialized
    from megatron.core import parallel_state as ps

    key = (args.pipeline, args.virtual, args.tensor)
    if key == _initialized and ps.model_parallel_is_initialized():
        return
    example.initialize(
        args.pipeline, args.virtual, cpu=True, seed=args.seed, tensor=args.tensor, timeout_s=120
    )
    _initialized = key


def train(
    args: argparse.Namespace,
    iterations: int,
    attachment: Any = None,
    delay=None,
    *,
    before_init: bool = False,
    between=None,
) -> dict[str, Any]:
    """Train `iterations` iterations, inside `attachment` if given.

    `before_init` enters the attachment before megatron's parallel state
    exists (as around Megatron-LM's pretrain); `between(trainer, i)` runs
    after iteration i (inside the attachment).
    """
    from megatron.core import parallel_state as ps

    losses, digests = [], []

    def loop(trainer: Any) -> None:
        for i in range(iterations):
            losses.append(trainer.step(digest=True))
            digests.append(trainer.grad_digest)
            if between is not None:
                between(trainer, i)

    if attachment is None:
        initialize(args)
        loop(example.Trainer(args, delay_s=delay))
    elif before_init:
        ps.destroy_model_parallel()
        with attachment:
            initialize(args)
            loop(example.Trainer(args, delay_s=delay))
    else:
        initialize(args)
        trainer = example.Trainer(args, delay_s=delay)
        with attachment:
            loop(trainer)
    return {"losses": losses, "digests": digests, **layout()}


def trace_of(attachment: Any) -> list[list[Any]]:
    return [
        [c.iteration, c.instruction, c.chunk, c.microbatch, c.frequency_mhz]
        for c in attachment.trace
    ]


def planned(
    plan: perseus.Plan, schedule: str, pipeline: int, microbatches: int, virtual: int, pp_rank: int
) -> dict[str, Any]:
    order = perseus.pipeline_order(schedule, pipeline, microbatches, virtual)[pp_rank]
    return {
        "expected_order": [list(key) for key in order],
        "planned_mhz": [
            plan.frequency(gpu=pp_rank, instruction=i, microbatch=mb, chunk=chunk)
            for i, chunk, mb in order
        ],
    }


def _restored() -> bool:
    from megatron.core.pipeline_parallel import schedules

    return not any(
        hasattr(getattr(schedules, name), "__perseus_attachment__")
        for name in (
            "forward_step",
            "backward_step",
            "forward_backward_pipelining_without_interleaving",
        )
    )


def _warnings(caught: list[Any]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


# -- scenarios ----------------------------------------------------------------------


def scenario_pipelines(results: dict[str, Any]) -> None:
    """Plain vs run mode on several layouts: order, clocks (idle between iterations), training."""
    layouts = {
        "no-pipelining": ("1f1b", 1, 1, 3),
        "1f1b": ("1f1b", 2, 1, 4),
        "interleaved": ("interleaved-1f1b", 2, 2, 4),
        "interleaved-pp4": ("interleaved-1f1b", 4, 2, 4),
    }
    iterations = 3
    results["pipelines"] = out = {}
    for name, (schedule, pipeline, virtual, microbatches) in layouts.items():
        args = arguments(pipeline, virtual, microbatches, iterations)
        plain = train(args, iterations)
        frontier = frontier_for(schedule, pipeline, virtual, microbatches)
        switcher = WaitingSwitcher(LOCAL_RANK)
        before = len(nvml_calls())
        attachment = perseus.megatron.attach(
            frontier, clocks=ClockOptions(switcher=switcher), stragglers=False, record=True
        )
        run = train(args, iterations, attachment)
        switcher.close()
        out[name] = {
            "plain": plain,
            "run": run,
            "trace": trace_of(attachment),
            **planned(frontier.fastest, schedule, pipeline, microbatches, virtual, run["pp_rank"]),
            "nvml": clock_calls(nvml_calls()[before:]),
            "switches": [str(s) for s in attachment.switches],
            "restored": _restored(),
            "device": attachment.device,
        }


def scenario_devices(results: dict[str, Any]) -> None:
    """perseus makes the switcher: the device comes from LOCAL_RANK (CUDA is not initialised)."""
    args = arguments(2, 1, 4, 2)
    before = len(nvml_calls())
    attachment = perseus.megatron.attach(frontier_for("1f1b", 2, 1, 4), stragglers=False)
    train(args, 2, attachment, before_init=True)
    calls = nvml_calls()[before:]
    devices = sorted(
        {
            int(c[1][0])
            for c in calls
            if c[0].startswith("nvmlDevice") and c[1] and c[0] not in ("nvmlDeviceGetCount_v2",)
        }
    )
    results["devices"] = {
        "device": attachment.device,
        "devices_touched": devices,
        "locked": [int(c[1][1]) for c in calls if c[0] == "nvmlDeviceSetGpuLockedClocks"],
        "local_rank": LOCAL_RANK,
    }


def world_sized() -> int:
    """Process groups other than the default one that span every rank."""
    from torch.distributed import distributed_c10d as c10d

    default = c10d._get_default_group()
    return sum(
        1
        for g in c10d._world.pg_map
        if g is not default and dist.get_world_size(g) == dist.get_world_size()
    )


def scenario_straggler(results: dict[str, Any]) -> None:
    """Two replicas, default settings; replica 1 is 0.6 s (1.5x) slower in iterations 8-14."""
    # Seven slow iterations, as many as the default min_duration asks for: followed on
    # iteration 14, recovered on 21, decided 3 iterations later (taken when 24 starts).
    iterations, slow = 25, range(8, 15)
    # One microbatch: the toy model's compute (and the CPU's noise on it) is small
    # against the common pause below.
    args = arguments(2, 1, 1, iterations)
    frontier = frontier_for("1f1b", 2, 1, 1)
    attachment = perseus.megatron.attach(frontier, metrics=False)
    from megatron.core import parallel_state as ps

    def delay(iteration: int) -> float:
        # A common pause, standing in for a model big enough that CPU noise is small
        # against it. The toy model computes for milliseconds, but on a loaded 2-core
        # host its four processes' times still vary by tens of ms. With a 0.6 s pause
        # CI once saw a third switch, most likely such noise held for a few
        # iterations (64 ms is the 10 % tolerance there); 1.2 s halves its share.
        # Replica 1 adds 0.6 s: 1.5x, five times the tolerance (0.48 s beyond it), like
        # the 1.2-1.5x stragglers the policy is built for; more only adds seconds.
        if ps.get_pipeline_model_parallel_rank() != 0:
            return 0.0
        return 1.2 + (0.6 if ps.get_data_parallel_rank() == 1 and iteration in slow else 0.0)

    running: list[int] = []

    def count_while_running(_trainer: Any, i: int) -> None:
        if i == 10:  # perseus's groups exist (made at the first iteration)
            running.append(world_sized())

    run = train(args, iterations, attachment, delay, between=count_while_running)
    results["straggler"] = {
        **run,
        # perseus destroys its groups at detach: the difference is perseus's world-sized ones
        "world_sized_groups": {"running": running, "after": world_sized()},
        "switches": [s.__dict__ for s in attachment.switches],
        "messages": [str(s) for s in attachment.switches],
        "decisions": [d.action for d in attachment.decisions],
        "times": list(attachment.iteration_times_s),
        "base_time_s": frontier.fastest.iteration_time_s,
        "plan_for": {
            repr(s.deadline_s): frontier.plan_for(s.deadline_s).iteration_time_s
            for s in attachment.switches
        },
    }


def scenario_clocks(results: dict[str, Any]) -> None:
    """An idle clock between iterations and an evaluation clock for a forward-only call."""
    args = arguments(2, 1, 4, 2)
    frontier = frontier_for("1f1b", 2, 1, 4)
    switcher = WaitingSwitcher(LOCAL_RANK)
    attachment = perseus.megatron.attach(
        frontier,
        clocks=ClockOptions(switcher=switcher, idle_mhz=900, evaluation_mhz=1080),
        stragglers=False,
        record=True,
    )
    before = len(nvml_calls())

    def evaluate(trainer: Any, i: int) -> None:
        if i == 0:
            trainer.evaluate()

    run = train(args, 2, attachment, between=evaluate)
    switcher.close()
    results["clocks"] = {
        **run,
        **planned(frontier.fastest, "1f1b", 2, 4, 1, run["pp_rank"]),
        "nvml": clock_calls(nvml_calls()[before:]),
        "energies": [m.energy_j for m in attachment.metrics.iterations],
    }

    # The defaults: unlocked between iterations and for evaluation.
    switcher = WaitingSwitcher(LOCAL_RANK)
    attachment = perseus.megatron.attach(
        frontier, clocks=ClockOptions(switcher=switcher), stragglers=False
    )
    before = len(nvml_calls())
    train(arguments(2, 1, 4, 2), 2, attachment, between=evaluate)
    switcher.close()
    results["clocks"]["defaults_nvml"] = clock_calls(nvml_calls()[before:])


def scenario_workloads(results: dict[str, Any]) -> None:
    """Frontiers by microbatch count (a ramp-up with an unknown count), and by sequence length."""
    f4, f8 = frontier_for("1f1b", 2, 1, 4), frontier_for("1f1b", 2, 1, 8)
    counts = [4, 8, 6, 6, 4]
    args = arguments(2, 1, 4, len(counts))
    attachment = perseus.megatron.attach(
        {4: f4, 8: f8}, stragglers=False, record=True, unknown_workload="unlocked"
    )
    from megatron.core import parallel_state as ps

    def ramp(trainer: Any, i: int) -> None:
        if i + 1 < len(counts):
            trainer.args.microbatches = counts[i + 1]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = train(args, len(counts), attachment, between=ramp)
    pp_rank = ps.get_pipeline_model_parallel_rank()
    out: dict[str, Any] = {
        **run,
        "counts": counts,
        "trace": trace_of(attachment),
        "planned": {
            str(m): planned(f.fastest, "1f1b", 2, m, 1, pp_rank)["planned_mhz"]
            for m, f in ((4, f4), (8, f8))
        },
        "warnings": _warnings(caught),
        "phases": [m.phase for m in attachment.metrics.iterations],
    }

    # By default a count with no frontier stops the job, at that iteration, on every rank.
    def to_six(trainer: Any, _i: int) -> None:
        trainer.args.microbatches = 6

    try:
        train(
            arguments(2, 1, 4, 2), 2, perseus.megatron.attach(f4, stragglers=False), between=to_six
        )
        out["unknown_count"] = {"error": None}
    except perseus.megatron.ScheduleMismatchError as error:
        out["unknown_count"] = {"error": type(error).__name__, "message": str(error)}
    out["unknown_count"]["restored"] = _restored()

    # A sequence length that changes, refused; then opted in by frontiers keyed by length.
    def shorter(trainer: Any, _i: int) -> None:
        trainer.args.seq = 8

    args = arguments(2, 1, 4, 2)
    try:
        train(args, 2, perseus.megatron.attach(f4, stragglers=False), between=shorter)
        out["length_change"] = {"error": None}
    except perseus.megatron.ScheduleMismatchError as error:
        out["length_change"] = {"error": type(error).__name__, "message": str(error)}
    out["length_change"]["restored"] = _restored()
    args = arguments(2, 1, 4, 2)
    by_length = perseus.megatron.attach(
        {(4, 16): f4, (4, 8): frontier_for("1f1b", 2, 1, 4)}, stragglers=False, record=True
    )
    train(args, 2, by_length, between=shorter)
    out["by_length"] = {
        "frequencies": [c[4] for c in trace_of(by_length)],
        "iterations": sorted({c[0] for c in trace_of(by_length)}),
    }
    results["workloads"] = out


def scenario_metrics(results: dict[str, Any]) -> None:
    """Energy per iteration, reports every 3 iterations, A/B calibration, writers."""
    iterations = 9
    args = arguments(2, 1, 4, iterations)
    frontier = frontier_for("1f1b", 2, 1, 4)
    writer = RecordingWriter()
    megatron_writer = RecordingWriter()
    # Megatron-LM (not installed here) keeps its TensorBoard writer in
    # megatron.training.global_vars, on the last rank only; this stands in for it.
    stand_in = types.ModuleType("megatron.training.global_vars")
    stand_in.get_tensorboard_writer = lambda: (
        megatron_writer if dist.get_rank() == dist.get_world_size() - 1 else None
    )
    stand_in.get_wandb_writer = lambda: None
    # Resumed at Megatron-LM's iteration 60: its scalars (and perseus's) go on at step 61.
    stand_in._GLOBAL_ARGS = argparse.Namespace(curr_iteration=60)
    sys.modules["megatron.training.global_vars"] = stand_in
    try:
        attachment = perseus.megatron.attach(
            frontier,
            stragglers=False,
            metrics=MetricsOptions(
                report_every=3, calibrate=2, warmup_iterations=1, writers=[writer]
            ),
        )
        # A pause in each first forward, at its planned clock, steadies the iteration's
        # length, so that energy follows the clocks rather than the CPU's noise.
        with perseus_collectives(attachment) as collectives:
            run = train(args, iterations, attachment, lambda _iteration: 0.2)
    finally:
        del sys.modules["megatron.training.global_vars"]
    metrics = attachment.metrics
    results["metrics"] = {
        **run,
        "iterations": [m.__dict__ for m in metrics.iterations],
        "reports": [
            {
                "first": r.first_iteration,
                "last": r.last_iteration,
                "gpus": r.gpus,
                "energy_j": r.energy_j,
                "predicted_energy_j": r.predicted_energy_j,
                "rows": [row.__dict__ for row in r.iterations],
            }
            for r in metrics.reports
        ],
        "calibration": None if metrics.calibration is None else metrics.calibration.__dict__,
        "summary": metrics.summary(),
        "writer": writer.scalars,
        "megatron_writer": megatron_writer.scalars,
        "plan_energy_j": frontier.fastest.energy_j,
        "baseline_energy_j": frontier.baseline.energy_j,
        "collectives": collectives,
    }


_COLLECTIVES = (
    "all_gather",
    "all_gather_object",
    "all_reduce",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather_object",
    "reduce_scatter",
)


@contextlib.contextmanager
def perseus_collectives(attachment: Any) -> Iterator[list[tuple[str, int]]]:
    """Every torch.distributed collective perseus's own code calls, with the number of
    iterations the attachment had finished then: (function name, iterations)."""
    calls: list[tuple[str, int]] = []
    originals = {name: getattr(dist, name) for name in _COLLECTIVES}

    def counting(name: str, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("perseus."):
                calls.append((name, attachment.iterations))
            return original(*args, **kwargs)

        return wrapper

    for name, original in originals.items():
        setattr(dist, name, counting(name, original))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)


def scenario_errors(results: dict[str, Any]) -> None:
    """Mismatched plans, unsupported code paths, warn mode, version checks."""
    from megatron.core import package_info
    from megatron.core.pipeline_parallel import schedules

    out: dict[str, Any] = {"version": package_info.__version__}
    args = arguments(2, 1, 4, 1)

    def attempt(name: str, attachment: Any, configure=None, steps: int = 1) -> None:
        initialize(args)
        trainer = example.Trainer(args)
        if configure is not None:
            configure(trainer)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with attachment:
                    for _ in range(steps):
                        loss = trainer.step()
            out[name] = {"error": None, "loss": loss, "warnings": _warnings(caught)}
        except Exception as error:  # noqa: BLE001 - reported to the test
            out[name] = {"error": type(error).__name__, "message": str(error)}
        out[name]["restored"] = _restored()

    def run_attach(frontier: perseus.Frontier, **kwargs: Any) -> Any:
        return perseus.megatron.attach(
            frontier, clocks=ClockOptions(switcher=FrequencySwitcher(LOCAL_RANK)), **kwargs
        )

    attempt("pipeline", run_attach(frontier_for("1f1b", 4, 1, 4)))
    attempt("schedule", run_attach(frontier_for("gpipe", 2, 1, 4)))
    attempt("warn", run_attach(frontier_for("1f1b", 4, 1, 4), on_mismatch="warn"), steps=2)

    def setting(name: str, value: Any):
        def configure(trainer: Any) -> None:
            setattr(trainer.config, name, value)

        return configure

    f4 = frontier_for("1f1b", 2, 1, 4)
    attempt("moe_overlap", run_attach(f4), setting("overlap_moe_expert_parallel_comm", True))
    attempt("full_graph", run_attach(f4), setting("cuda_graph_impl", "full_iteration"))
    attempt(
        "full_graph_profile",
        perseus.megatron.attach(profile=ProfileOptions(path="unused.csv", profiler_mode="cpu")),
        setting("cuda_graph_impl", "full_iteration"),
    )
    # Per-layer graphs: perseus stays outside the graphed layers (the CPU captures none).
    attempt("layer_graphs", run_attach(f4, record=True), setting("cuda_graph_impl", "local"))
    attempt("variable_lengths", run_attach(f4), setting("variable_seq_lengths", True))

    # Refused at attach, before any iteration, when Megatron-LM has parsed its arguments
    # already (a stand-in for megatron.training.global_vars, not installed here).
    stand_in = types.ModuleType("megatron.training.global_vars")
    sys.modules["megatron.training.global_vars"] = stand_in
    try:
        for name, settings, make in (
            ("args_graph", {"cuda_graph_impl": "full_iteration"}, lambda: run_attach(f4)),
            (
                "args_experts",
                {"expert_model_parallel_size": 2},
                lambda: perseus.megatron.attach(profile=ProfileOptions(path="unused.csv")),
            ),
            ("args_context_run", {"context_parallel_size": 2}, lambda: run_attach(f4)),
            # Megatron-LM's validated shape: pp 2, M = 16 / (1 x 2) = 8, and an M=4 frontier.
            ("args_microbatches", dict(MEGATRON_SHAPE), lambda: run_attach(f4)),
            (
                "args_pipeline",
                {**MEGATRON_SHAPE, "global_batch_size": 8, "pipeline_model_parallel_size": 4},
                lambda: run_attach(f4),
            ),
            # Megatron-LM >= 0.18: --perseus-* arguments parsed before pretrain(), read at attach.
            (
                "args_flags",
                {
                    **MEGATRON_SHAPE,
                    **cli_flags(f4, "args_flags"),
                    "pipeline_model_parallel_size": 4,
                },
                perseus.megatron.attach_from_args,
            ),
        ):
            stand_in._GLOBAL_ARGS = argparse.Namespace(**settings)
            attachment = make()
            try:
                attachment.attach()
                attachment.detach()
                out[name] = {"error": None}
            except perseus.megatron.MegatronIntegrationError as error:
                out[name] = {"error": type(error).__name__, "message": str(error)}
            out[name]["restored"] = _restored()
    finally:
        del sys.modules["megatron.training.global_vars"]

    checks: dict[str, Any] = {}
    for label, version, allow in (
        ("old", "0.15.3", False),
        ("new", "0.20.0", False),
        ("allowed", "0.20.0", True),
    ):
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                perseus.megatron.check_megatron(schedules, version, allow_untested_version=allow)
            checks[label] = {"error": None, "warnings": [str(w.message) for w in caught]}
        except perseus.megatron.MegatronVersionError as error:
            checks[label] = {"error": str(error)}
    renamed = types.SimpleNamespace(
        **{n: getattr(schedules, n) for n in dir(schedules) if not n.startswith("_")}
    )

    def backward_step(input_tensor, output, output_tensor_grad, config):  # renamed parameter  # noqa: ARG001
        return None

    renamed.backward_step = backward_step
    try:
        perseus.megatron.check_megatron(renamed, package_info.__version__)
        checks["signature"] = {"error": None}
    except perseus.megatron.MegatronVersionError as error:
        checks["signature"] = {"error": str(error)}
    out["checks"] = checks
    results["errors"] = out


#: Megatron-LM's validated arguments of a pp2 x dp2 job at global batch 16, micro batch 1.
MEGATRON_SHAPE = {
    "pipeline_model_parallel_size": 2,
    "virtual_pipeline_model_parallel_size": None,
    "global_batch_size": 16,
    "micro_batch_size": 1,
    "data_parallel_size": 2,
    "rampup_batch_size": None,
}


def cli_flags(frontier: perseus.Frontier, name: str) -> dict[str, Any]:
    """--perseus-* arguments for run mode with `frontier`, as parsed (saved under `name`)."""
    path = Path(os.environ["WORKER_OUT"]) / name / f"frontier.rank{os.environ['RANK']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    frontier.save(path)
    parser = perseus.megatron.add_arguments(argparse.ArgumentParser())
    return vars(parser.parse_args(["--perseus-mode", "run", "--perseus-frontier", str(path)]))


def scenario_cli(results: dict[str, Any]) -> None:
    """--perseus-* arguments: read at once, read late (Megatron-LM's get_args), or off."""
    frontier = frontier_for("1f1b", 2, 1, 4)
    path = Path(os.environ["WORKER_OUT"]) / "cli" / f"frontier.rank{os.environ['RANK']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    frontier.save(path)
    parser = perseus.megatron.add_arguments(argparse.ArgumentParser())
    run_args = parser.parse_args(
        ["--perseus-mode", "run", "--perseus-frontier", str(path), "--perseus-no-stragglers"]
    )
    out: dict[str, Any] = {"defaults": vars(parser.parse_args([]))}
    args = arguments(2, 1, 4, 2)
    now = perseus.megatron.attach_from_args(run_args)
    before = len(nvml_calls())
    run = train(args, 2, now, before_init=True)
    out["now"] = {
        "iterations": now.iterations,
        "device": now.device,
        "nvml": clock_calls(nvml_calls()[before:]),
        **planned(frontier.fastest, "1f1b", 2, 4, 1, run["pp_rank"]),
    }
    # Read late: Megatron-LM parses its arguments inside pretrain(); this stands in
    # for megatron.training (not installed here) with those parsed arguments.
    stand_in = types.ModuleType("megatron.training")
    stand_in.get_args = lambda: run_args
    sys.modules["megatron.training"] = stand_in
    try:
        late = perseus.megatron.attach_from_args()
        late.attach()
        initialize(args)
        trainer = example.Trainer(args)
        for _ in range(2):
            trainer.step()
        out["late"] = {
            "iterations": late.iterations,
            "mode": late.mode,
            "plan_time_s": late.base_plan.iteration_time_s if late.base_plan else None,
        }
        late.detach()
    finally:
        del sys.modules["megatron.training"]
    off = perseus.megatron.attach_from_args(parser.parse_args([]))
    restored: list[bool] = []
    train(args, 2, off, between=lambda _trainer, _i: restored.append(_restored()))
    out["off"] = {"iterations": off.iterations, "restored_during": restored}
    out["frontier_time_s"] = frontier.fastest.iteration_time_s
    results["cli"] = out


def scenario_profile(results: dict[str, Any]) -> None:
    """Profile mode that continues training: TP=2 with full recomputation (attached before
    megatron initialises), and two replicas with selective recomputation."""
    out: dict[str, Any] = {}
    for name, extra in (
        ("tp2-full", ["--tensor=2", "--recompute=full"]),
        ("dp2-selective", ["--recompute=selective"]),
    ):
        iterations = 3
        args = arguments(2, 1, 4, iterations, *extra)
        plain = train(args, iterations)
        path = Path(os.environ["WORKER_OUT"]) / "profile" / name / "gpt.csv"
        attachment = perseus.megatron.attach(
            profile=ProfileOptions(
                path=path,
                profiler_mode="cpu",
                after="continue",
                profiler_options=PROFILER_OPTIONS,
            )
        )
        # perseus's groups exist from the first iteration to detach; megatron's own groups are
        # counted before (made by then) and after, so the difference is perseus's
        running: list[int] = []

        def count(_trainer: Any, i: int, running: list[int] = running) -> None:
            if i == 0:
                running.append(world_sized())

        run = train(args, iterations, attachment, before_init=True, between=count)
        profile = attachment.profile
        out[name] = {
            **run,
            "world_sized_groups": {"running": running, "after": world_sized()},
            "plain": plain,
            "path": str(path),
            "stages": profile.num_stages if profile is not None else None,
        }
    results["profile"] = out


def constant_profile(stages: int, forward_s: float, backward_s: float) -> perseus.Profile:
    """Every clock takes nearly the same time (at most 1.6 % more than at the top clock), so
    the plan's time is known whatever clocks it picks."""
    records = []
    for stage in range(stages):
        for instruction, base_s in (("forward", forward_s), ("backward", backward_s)):
            for f in FREQUENCIES_MHZ:
                time_s = base_s * (1980 / f) ** 0.02
                power_w = 90 + 610 * (f / 1980) ** 3
                records.append((stage, instruction, f, time_s, power_w * time_s))
    return perseus.Profile.from_records(records, blocking_power_w=80.0)


def scenario_stale(results: dict[str, Any]) -> None:
    """Each computation sleeps what the plan predicts (CPU compute on top); pipeline stage 1
    becomes 3x slower from iteration 6 on (a GPU stuck at a low clock): stage 1 reports a stale
    plan, stage 0 does not. The factor and the tolerance keep the toy model's own CPU compute
    (up to ~30 % on top of a forward's sleep when the machine is busy) from deciding which window
    crosses: the window with four slow iterations of six always does, one with three never.
    Rank 1's GPU runs slower than locked from iteration 3 (a clamp the driver hides).
    Reports every 6 iterations: the one of iterations 6-11, made when 12 starts, must hold
    the findings (iteration 9, up to 11 with hiccups); iteration 12 is the last one run."""
    forward_s, backward_s, slow_from, factor, iterations = 0.1, 0.2, 6, 3.0, 13
    tolerance = 0.4
    profile = constant_profile(2, forward_s, backward_s)
    frontier = perseus.optimize(profile, microbatches=1, schedule="1f1b", progress=False, threads=1)
    args = arguments(2, 1, 1, iterations)
    from megatron.core import parallel_state as ps

    initialize(args)
    stage = ps.get_pipeline_model_parallel_rank()

    def scale(iteration: int) -> float:
        return factor if stage == 1 and iteration >= slow_from else 1.0

    trainer = example.Trainer(args)
    original = trainer.forward_step

    def forward_step(data_iterator: Any, model: Any) -> Any:
        slow = scale(trainer.iteration)
        time.sleep(forward_s * slow)
        output, loss_func = original(data_iterator, model)
        if output.requires_grad:  # the backward of this microbatch sleeps too
            output.register_hook(lambda grad: (time.sleep(backward_s * slow), grad)[1])
        return output, loss_func

    trainer.forward_step = forward_step
    writer = RecordingWriter()
    attachment = perseus.megatron.attach(
        frontier,
        stragglers=False,
        metrics=MetricsOptions(
            report_every=6,
            warmup_iterations=1,
            stale_plan_tolerance=tolerance,
            stale_plan_window=6,
            writers=[writer],
        ),
    )
    import ctypes

    nvml = ctypes.CDLL(os.environ["PERSEUS_NVML_LIBRARY"])
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with attachment:
            for i in range(iterations):
                if i == 3 and dist.get_rank() == 1:
                    nvml.fake_nvml_override(LOCAL_RANK, 1260)
                losses.append(trainer.step())
    nvml.fake_nvml_override(LOCAL_RANK, 0)
    metrics = attachment.metrics
    results["stale"] = {
        **layout(),
        "losses": losses,
        "findings": [{**f.__dict__, "text": str(f)} for f in attachment.stale_plans],
        "warnings": [
            str(w.message)
            for w in caught
            if issubclass(w.category, perseus.megatron.StalePlanWarning)
        ],
        "reports": [
            {
                "first": r.first_iteration,
                "last": r.last_iteration,
                "stale": [str(f) for f in r.stale_plans],
                "clock_mismatches": dict(r.clock_mismatches),
                "text": str(r),
            }
            for r in metrics.reports
        ],
        "own_clock_mismatches": dict(metrics.clock_mismatches),
        "writer": writer.scalars,
        "slow_from": slow_from,
        "factor": factor,
        "tolerance": tolerance,
    }


def scenario_resume(results: dict[str, Any]) -> None:
    """A run saving at Megatron-LM's --save-interval 4, then one resumed from its step-12
    checkpoint (a stand-in for megatron.training's parsed arguments)."""
    frontier = frontier_for("1f1b", 2, 1, 1)
    ckpt = Path(os.environ["WORKER_OUT"]) / "resume" / "ckpt"
    stand_in = types.ModuleType("megatron.training.global_vars")
    sys.modules["megatron.training.global_vars"] = stand_in
    out: dict[str, Any] = {"dir": str(ckpt)}

    def attachment(writer: Any) -> Any:
        return perseus.megatron.attach(
            frontier,
            metrics=MetricsOptions(
                report_every=4, calibrate=2, warmup_iterations=1, writers=[writer]
            ),
        )

    try:
        stand_in._GLOBAL_ARGS = argparse.Namespace(
            curr_iteration=0, iteration=0, save=str(ckpt), save_interval=4, load=None
        )
        writer = RecordingWriter()
        first = attachment(writer)
        run = train(arguments(2, 1, 1, 14), 14, first)
        out["first"] = {
            **run,
            "iterations": first.iterations,
            "phases": [m.phase for m in first.metrics.iterations],
            "calibration": first.metrics.calibration.__dict__,
            "final": {**first.final_report.__dict__, "text": str(first.final_report)},
            "steps": sorted({s for _, _, s in writer.scalars}),
        }
        stand_in._GLOBAL_ARGS = argparse.Namespace(
            curr_iteration=12, iteration=12, save=str(ckpt), save_interval=4, load=str(ckpt)
        )
        writer = RecordingWriter()
        second = attachment(writer)
        at_start: list[Any] = []

        def state(_trainer: Any, i: int) -> None:
            if i == 0:  # nothing of this run has reached the policies or the check yet
                at_start.append(json.loads(json.dumps(second.state_dict())))

        run = train(arguments(2, 1, 1, 5), 5, second, between=state)
        out["second"] = {
            **run,
            "iterations": second.iterations,
            "phases": [m.phase for m in second.metrics.iterations],
            "numbers": [m.iteration for m in second.metrics.iterations],
            "calibration": second.metrics.calibration.__dict__,
            "final": {**second.final_report.__dict__, "text": str(second.final_report)},
            "state_at_start": at_start[0],
            "steps": sorted({s for _, _, s in writer.scalars}),
        }
        # a resume from a step with no perseus state: said, and started afresh
        stand_in._GLOBAL_ARGS = argparse.Namespace(
            curr_iteration=6, iteration=6, save=None, save_interval=None, load=str(ckpt)
        )
        third = attachment(RecordingWriter())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train(arguments(2, 1, 1, 1), 1, third)
        out["missing"] = {
            "iterations": third.iterations,
            "warnings": [str(w.message) for w in caught if "perseus's state" in str(w.message)],
        }
    finally:
        del sys.modules["megatron.training.global_vars"]
    results["resume"] = out


SCENARIOS = {
    "pipelines": scenario_pipelines,
    "devices": scenario_devices,
    "straggler": scenario_straggler,
    "clocks": scenario_clocks,
    "workloads": scenario_workloads,
    "metrics": scenario_metrics,
    "errors": scenario_errors,
    "cli": scenario_cli,
    "profile": scenario_profile,
    "stale": scenario_stale,
    "resume": scenario_resume,
}


def main() -> int:
    out = Path(sys.argv[1])
    names = sys.argv[2:] or list(SCENARIOS)
    os.environ["WORKER_OUT"] = str(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    status = 0
    timings = results["timings_s"] = {}
    for name in names:
        started = time.monotonic()
        try:
            SCENARIOS[name](results)
            timings[name] = round(time.monotonic() - started, 2)
        except Exception:  # noqa: BLE001 - the test shows the traceback
            results.setdefault("failed", {})[name] = traceback.format_exc()
            status = 1
            break  # the ranks may no longer agree on what comes next
    from megatron.core import package_info

    results["megatron_version"] = package_info.__version__
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ["RANK"])
    (out / f"rank{rank}.json").write_text(json.dumps(results, default=str))
    if dist.is_initialized():
        dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())

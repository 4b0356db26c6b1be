"""One rank of the megatron-core scenarios of tests/test_megatron.py.

Run by ``cpu_launch.launch`` (shims installed) on 4 gloo ranks::

    worker.py OUT_DIR [SCENARIO ...]

Each scenario builds the example's GPT (examples/megatron_gpt.py) for some
pipeline layout, trains a few iterations with or without perseus and
records what the test checks; this rank's results go to
``OUT_DIR/rank<r>.json``. Frequencies are requested through the fake NVML
named by ``PERSEUS_NVML_LIBRARY``; its log (``FAKE_NVML_LOG``) shows the
clocks actually set.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import os
import sys
import traceback
import types
import warnings
from pathlib import Path
from typing import Any

import perseus
import perseus.megatron
import torch
import torch.distributed as dist
from perseus.switcher import FrequencySwitcher

faulthandler.dump_traceback_later(float(os.environ.get("WORKER_TIMEOUT_S", "240")), exit=True)
torch.set_num_threads(1)

_ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "megatron_gpt", _ROOT / "examples" / "megatron_gpt.py"
)
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

FREQUENCIES_MHZ = (1980, 1800, 1620, 1440, 1260, 1080, 900)


class WaitingSwitcher(FrequencySwitcher):
    """Applies each request before returning, so the fake NVML logs every distinct clock."""

    def set(self, mhz: int) -> int:
        applied = super().set(mhz)
        if not self.wait(timeout=10):
            raise RuntimeError("the switcher did not apply a clock within 10 s")
        return applied


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
    return perseus.optimize(
        profile,
        microbatches=microbatches,
        schedule=schedule,
        virtual_stages=virtual,
        progress=False,
    )


def nvml_clock_calls() -> list[list[Any]]:
    path = os.environ.get("FAKE_NVML_LOG")
    if not path or not os.path.exists(path):
        return []
    rows = []
    for line in Path(path).read_text().splitlines():
        left, _, rc = line.rpartition(" = ")
        parts = left.split()
        if "LockedClocks" in parts[2]:
            rows.append([parts[2], parts[3:], int(rc)])
    return rows


def arguments(pipeline: int, virtual: int, microbatches: int, iterations: int) -> Any:
    return example.parse_args(
        [
            "--cpu",
            f"--pipeline={pipeline}",
            f"--virtual={virtual}",
            f"--microbatches={microbatches}",
            f"--iterations={iterations}",
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
    }


def train(args: Any, iterations: int, attachment: Any = None, delay=None) -> dict[str, Any]:
    example.initialize(args.pipeline, args.virtual, cpu=True, seed=args.seed, timeout_s=120)
    trainer = example.Trainer(args, delay_s=delay)
    losses, digests = [], []

    def loop() -> None:
        for _ in range(iterations):
            losses.append(trainer.step(digest=True))
            digests.append(trainer.grad_digest)

    if attachment is None:
        loop()
    else:
        with attachment:
            loop()
    return {"losses": losses, "digests": digests, **layout()}


def trace_of(attachment: Any) -> list[list[Any]]:
    return [
        [c.iteration, c.instruction, c.chunk, c.microbatch, c.frequency_mhz]
        for c in attachment.trace
    ]


# -- scenarios ----------------------------------------------------------------------


def scenario_pipelines(results: dict[str, Any]) -> None:
    """Plain vs run mode on several layouts: order, frequencies, identical training."""
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
        plan = frontier.fastest
        switcher = WaitingSwitcher(0)
        before = len(nvml_clock_calls())
        attachment = perseus.megatron.attach(
            frontier, switcher=switcher, record=True, tolerance=10.0
        )
        run = train(args, iterations, attachment)
        switcher.close()
        order = perseus.pipeline_order(schedule, pipeline, microbatches, virtual)[run["pp_rank"]]
        out[name] = {
            "plain": plain,
            "run": run,
            "trace": trace_of(attachment),
            "expected_order": [list(key) for key in order],
            "planned_mhz": [
                plan.frequency(gpu=run["pp_rank"], instruction=i, microbatch=mb, chunk=chunk)
                for i, chunk, mb in order
            ],
            "nvml": nvml_clock_calls()[before:],
            "switches": [str(s) for s in attachment.switches],
            "restored": _restored(),
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


def scenario_straggler(results: dict[str, Any]) -> None:
    """Two replicas; replica 1 is slow in iterations 3-5."""
    iterations, slow = 9, range(3, 6)
    args = arguments(2, 1, 4, iterations)
    frontier = frontier_for("1f1b", 2, 1, 4)
    attachment = perseus.megatron.attach(
        frontier, switcher=FrequencySwitcher(0), tolerance=3.0, recovery=2.0, warmup_iterations=2
    )
    from megatron.core import parallel_state as ps

    def delay(iteration: int) -> float:
        return 0.15 if ps.get_data_parallel_rank() == 1 and iteration in slow else 0.0

    run = train(args, iterations, attachment, delay)
    results["straggler"] = {
        **run,
        "switches": [s.__dict__ for s in attachment.switches],
        "times": list(attachment.iteration_times_s),
        "base_time_s": frontier.fastest.iteration_time_s,
        "plan_for": {
            repr(s.deadline_s): frontier.plan_for(s.deadline_s).iteration_time_s
            for s in attachment.switches
        },
    }


def scenario_errors(results: dict[str, Any]) -> None:
    """Mismatched plans, the fused MoE overlap, warn mode, version checks."""
    from megatron.core import package_info
    from megatron.core.pipeline_parallel import schedules

    out: dict[str, Any] = {"version": package_info.__version__}
    args = arguments(2, 1, 4, 1)

    def attempt(name: str, attachment: Any, configure=None) -> None:
        example.initialize(args.pipeline, args.virtual, cpu=True, seed=args.seed, timeout_s=120)
        trainer = example.Trainer(args)
        if configure is not None:
            configure(trainer)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with attachment:
                    loss = trainer.step()
            out[name] = {
                "error": None,
                "loss": loss,
                "warnings": [
                    str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
                ],
            }
        except Exception as error:  # noqa: BLE001 - reported to the test
            out[name] = {"error": type(error).__name__, "message": str(error)}
        out[name]["restored"] = _restored()

    attempt(
        "microbatches",
        perseus.megatron.attach(frontier_for("1f1b", 2, 1, 8), switcher=FrequencySwitcher(0)),
    )
    attempt(
        "pipeline",
        perseus.megatron.attach(frontier_for("1f1b", 4, 1, 4), switcher=FrequencySwitcher(0)),
    )
    attempt(
        "schedule",
        perseus.megatron.attach(frontier_for("gpipe", 2, 1, 4), switcher=FrequencySwitcher(0)),
    )
    attempt(
        "warn",
        perseus.megatron.attach(
            frontier_for("1f1b", 2, 1, 8), switcher=FrequencySwitcher(0), on_mismatch="warn"
        ),
    )

    def fused_moe_overlap(trainer: Any) -> None:
        trainer.config.overlap_moe_expert_parallel_comm = True

    attempt(
        "moe_overlap",
        perseus.megatron.attach(frontier_for("1f1b", 2, 1, 4), switcher=FrequencySwitcher(0)),
        fused_moe_overlap,
    )

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

    def backward_step(input_tensor, output, output_tensor_grad, config):  # renamed parameter
        return None

    renamed.backward_step = backward_step
    try:
        perseus.megatron.check_megatron(renamed, package_info.__version__)
        checks["signature"] = {"error": None}
    except perseus.megatron.MegatronVersionError as error:
        checks["signature"] = {"error": str(error)}
    out["checks"] = checks
    results["errors"] = out


def scenario_profile(results: dict[str, Any]) -> None:
    """Profile mode that continues training; the profile of every stage is written."""
    iterations = 3
    args = arguments(2, 1, 4, iterations)
    path = Path(os.environ["WORKER_OUT"]) / "profile" / "gpt.csv"
    attachment = perseus.megatron.attach(
        mode="profile",
        profile_path=path,
        profiler_mode="cpu",
        after="continue",
        profiler_options={
            "frequencies_mhz": [1980, 1500, 1050],
            "window_s": 0.01,
            "windows": 1,
            "warmup_s": 0.0,
            "blocking_window_s": 0.03,
        },
    )
    run = train(args, iterations, attachment)
    profile = attachment.profile
    results["profile"] = {
        **run,
        "path": str(path),
        "stages": profile.num_stages if profile is not None else None,
        "blocking_power_w": profile.blocking_power_w if profile is not None else None,
    }


SCENARIOS = {
    "pipelines": scenario_pipelines,
    "straggler": scenario_straggler,
    "errors": scenario_errors,
    "profile": scenario_profile,
}


def main() -> int:
    out = Path(sys.argv[1])
    names = sys.argv[2:] or list(SCENARIOS)
    os.environ["WORKER_OUT"] = str(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    status = 0
    for name in names:
        try:
            SCENARIOS[name](results)
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

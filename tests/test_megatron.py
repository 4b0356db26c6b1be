"""perseus.megatron against real megatron-core, on the CPU with gloo.

megatron-core's schedules run on CPU processes once the test-only shims in
tests/megatron_support/cpu_shims.py redirect its few hard-coded CUDA calls.
For each megatron-core under test (the installed one, plus any directory
named in ``PERSEUS_TEST_MEGATRON_PATHS``) one 4-rank job runs every scenario
of tests/megatron_support/worker.py, and the tests below check its results:
computation order and requested frequencies (through the fake NVML's log),
identical training with and without perseus, stragglers, mismatches, profile
mode. Every process has a timeout.

Install what these tests need with
``pip install --no-deps --ignore-requires-python -r tests/requirements-megatron.txt``;
without torch and megatron-core they are skipped (the pure-Python tests at
the end still run).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import perseus
import pytest
from perseus.megatron import (
    MegatronVersionError,
    PlanSwitch,
    StragglerPolicy,
    attach,
    check_megatron,
)
from perseus.megatron._compat import SCHEDULE_FUNCTIONS, parse_version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from megatron_support.cpu_launch import launch

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "megatron_support" / "worker.py"
EXAMPLE = ROOT / "examples" / "megatron_gpt.py"
LAYOUTS = ("no-pipelining", "1f1b", "interleaved", "interleaved-pp4")


def _installed_version():
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        if importlib.util.find_spec("megatron.core") is None:
            return None
    except ModuleNotFoundError:
        return None
    try:
        return importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


INSTALLED = _installed_version()
_EXTRA = [p for p in os.environ.get("PERSEUS_TEST_MEGATRON_PATHS", "").split(os.pathsep) if p]
INSTALLS = ([("installed", None)] if INSTALLED else []) + [
    (Path(p).name, str(Path(p).resolve())) for p in _EXTRA
]
HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_megatron = pytest.mark.skipif(
    not (INSTALLED and HAVE_TORCH),
    reason="needs torch and megatron-core: pip install --no-deps --ignore-requires-python -r "
    "tests/requirements-megatron.txt",
)


def _version_in(path):
    dist = next(Path(path).glob("megatron_core-*.dist-info"), None)
    return (
        dist.name.removeprefix("megatron_core-").removesuffix(".dist-info") if dist else "unknown"
    )


def _pythonpath(path):
    return os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH", "")) if p)


def _failure(what, codes, logs, results=None):
    parts = [f"{what}: exit codes {codes}"]
    for rank, text in enumerate(logs):
        failed = (results or {}).get(rank, {}).get("failed") if results else None
        if failed:
            parts.append(f"--- rank {rank} failed:\n" + "\n".join(failed.values()))
        elif codes[rank] != 0:
            tail = "\n".join(line for line in text.splitlines() if "Warning" not in line)[-3000:]
            parts.append(f"--- rank {rank} log tail:\n{tail}")
    return "\n".join(parts)


class Job:
    """The scenarios' results of one 4-rank run: ``ranks[r][scenario]``."""

    def __init__(self, version, ranks, out):
        self.version = version
        self.ranks = ranks
        self.out = out

    def __iter__(self):
        return iter(self.ranks)


@pytest.fixture(scope="module", params=INSTALLS or [None], ids=[i[0] for i in INSTALLS] or ["none"])
def job(request, fake_libraries, tmp_path_factory):
    if request.param is None or not HAVE_TORCH:
        pytest.skip(
            "needs torch and megatron-core: pip install --no-deps --ignore-requires-python -r "
            "tests/requirements-megatron.txt"
        )
    label, path = request.param
    out = tmp_path_factory.mktemp(f"megatron-{label}")
    env = {"FAKE_NVML_LOG": str(out / "nvml{rank}.log"), "WORKER_TIMEOUT_S": "240"}
    if path:
        env["PYTHONPATH"] = _pythonpath(path)
    codes, logs = launch(4, [str(WORKER), str(out)], timeout_s=300, env=env, logs=out / "logs")
    results = {}
    for rank in range(4):
        file = out / f"rank{rank}.json"
        if file.exists():
            results[rank] = json.loads(file.read_text())
    if codes != [0, 0, 0, 0] or len(results) != 4:
        pytest.fail(_failure(f"megatron-core {label} worker", codes, logs, results))
    version = INSTALLED if path is None else _version_in(path)
    return Job(version, [results[r] for r in range(4)], out)


def _dedupe(values):
    out = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out


# ---- the schedules, seen from each rank -----------------------------------------


def test_runs_the_megatron_under_test(job):
    # package_info may carry a local build tag ("0.19.2+ecdc23d") that the
    # distribution's metadata does not.
    assert {r["megatron_version"].split("+")[0] for r in job} == {job.version.split("+")[0]}
    low, high = perseus.megatron.SUPPORTED_VERSIONS
    assert low <= parse_version(job.version) < high


@pytest.mark.parametrize("layout", LAYOUTS)
def test_computations_follow_perseus_order(job, layout):
    """(instruction, chunk, microbatch) per rank equals perseus.pipeline_order, every iteration."""
    for rank in job:
        result = rank["pipelines"][layout]
        expected = [tuple(key) for key in result["expected_order"]]
        assert expected, layout
        iterations = sorted({c[0] for c in result["trace"]})
        assert iterations == [0, 1, 2]
        for iteration in iterations:
            seen = [tuple(c[1:4]) for c in result["trace"] if c[0] == iteration]
            assert seen == expected, (layout, rank["pipelines"][layout]["run"]["rank"], iteration)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_requested_frequencies_are_the_plans(job, layout):
    """Each computation requests its planned clock, and the fake NVML sets them in that order."""
    for rank in job:
        result = rank["pipelines"][layout]
        planned = result["planned_mhz"]
        for iteration in range(3):
            requested = [c[4] for c in result["trace"] if c[0] == iteration]
            assert requested == planned, (layout, iteration)
        calls = result["nvml"]
        sets = [int(args[1]) for name, args, rc in calls if name == "nvmlDeviceSetGpuLockedClocks"]
        assert all(rc == 0 for _, _, rc in calls)
        assert all(
            args[1] == args[2] for name, args, _ in calls if name == "nvmlDeviceSetGpuLockedClocks"
        )
        # Equal consecutive requests cost nothing, so the log holds the changes only.
        assert sets == _dedupe(planned * 3)
        assert calls[-1][0] == "nvmlDeviceResetGpuLockedClocks"  # given back on leaving `with`


@pytest.mark.parametrize("layout", LAYOUTS)
def test_training_is_unchanged(job, layout):
    """Losses and gradients (bit for bit) with perseus attached equal those without."""
    for rank in job:
        result = rank["pipelines"][layout]
        plain, run = result["plain"], result["run"]
        assert run["digests"] == plain["digests"]
        assert run["losses"] == plain["losses"]
        if run["pp_rank"] == run["pp_size"] - 1:
            assert all(isinstance(x, float) and math.isfinite(x) for x in run["losses"])
        assert result["switches"] == []
        assert result["restored"]


def test_pipeline_layouts_are_the_intended_ones(job):
    sizes = {
        layout: {
            (r["pipelines"][layout]["run"]["pp_size"], r["pipelines"][layout]["run"]["dp_size"])
            for r in job
        }
        for layout in LAYOUTS
    }
    assert sizes == {
        "no-pipelining": {(1, 4)},
        "1f1b": {(2, 2)},
        "interleaved": {(2, 2)},
        "interleaved-pp4": {(4, 1)},
    }


# ---- stragglers ------------------------------------------------------------------


def test_straggler_followed_and_left(job):
    """Replica 1 is slow in iterations 3-5: replica 0 takes the plan for its time, then returns."""
    healthy = [r["straggler"] for r in job if r["straggler"]["dp_rank"] == 0]
    slow = [r["straggler"] for r in job if r["straggler"]["dp_rank"] == 1]
    assert len(healthy) == len(slow) == 2
    for result in slow:
        assert result["switches"] == []  # the straggler keeps the fastest plan
        assert min(result["times"][3:6]) > 3 * max(result["times"][6:])
    switches = [result["switches"] for result in healthy]
    assert switches[0] == switches[1]  # both stages of the pipeline agree
    base = healthy[0]["base_time_s"]
    follow, back = switches[0]
    assert follow["iteration"] == 3 and follow["reason"] == "straggler"
    assert follow["from_time_s"] == base and follow["to_time_s"] > base
    assert follow["to_time_s"] == healthy[0]["plan_for"][repr(follow["deadline_s"])]
    assert follow["deadline_s"] == pytest.approx(base * follow["slowest_s"] / follow["reference_s"])
    assert back["iteration"] == 6 and back["reason"] == "recovered"
    assert back["to_time_s"] == base


# ---- mismatches and unsupported code paths -----------------------------------------


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("microbatches", "microbatches: the plan's is 8, this iteration runs 4"),
        ("pipeline", "pipeline size: the plan's is 4, Megatron's is 2"),
        ("schedule", "schedule: the plan's is 'gpipe', Megatron runs 1F1B"),
    ],
)
def test_mismatch_is_reported_before_anything_runs(job, case, words):
    for rank in job:
        result = rank["errors"][case]
        assert result["error"] == "ScheduleMismatchError"
        assert words in result["message"]
        assert result["restored"]


def test_mismatch_can_warn_and_let_go(job):
    for rank in job:
        result = rank["errors"]["warn"]
        assert result["error"] is None
        assert any("lets go of the clocks" in w for w in result["warnings"])
        assert result["restored"]
    last = [r["errors"]["warn"]["loss"] for r in job if r["errors"]["warn"]["loss"] is not None]
    assert len(last) == 2 and all(math.isfinite(x) for x in last)


def test_fused_moe_overlap_is_reported(job):
    for rank in job:
        result = rank["errors"]["moe_overlap"]
        assert result["error"] == "UnsupportedScheduleError"
        assert "overlap_moe_expert_parallel_comm" in result["message"]


def test_version_and_signature_checks_on_real_schedules(job):
    checks = job.ranks[0]["errors"]["checks"]
    assert ">=0.16.0,<0.20" in checks["old"]["error"] and "0.15.3" in checks["old"]["error"]
    assert "0.20.0 is not supported" in checks["new"]["error"]
    assert checks["allowed"]["error"] is None and checks["allowed"]["warnings"]
    assert "backward_step has no parameter(s) output_tensor" in checks["signature"]["error"]


# ---- profile mode ---------------------------------------------------------------------


# CPU timings of a toy model jump by orders of magnitude between clocks that
# the fake NVML only pretends to set: the unit-slip warning is right, and beside the point here.
@pytest.mark.filterwarnings("ignore::perseus.ProfileWarning")
def test_profile_mode_writes_every_stage_and_leaves_training_alone(job):
    for rank in job:
        result = rank["profile"]
        assert result["stages"] == 2
        plain = rank["pipelines"]["1f1b"]["plain"]
        assert result["digests"] == plain["digests"] and result["losses"] == plain["losses"]
    path = Path(job.ranks[0]["profile"]["path"])
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["pipeline_size"] == 2 and sidecar["microbatches"] == 4
    assert sidecar["blocking_power_w"] > 0
    profile = perseus.Profile.from_csv(path, blocking_power_w=sidecar["blocking_power_w"])
    assert profile.num_stages == 2
    rows = path.read_text().splitlines()
    assert rows[0] == "stage,instruction,frequency,time,energy"
    keys = sorted(tuple(row.split(",")[:3]) for row in rows[1:])
    assert keys == sorted(
        (str(s), i, str(f))
        for s in range(2)
        for i in perseus.INSTRUCTIONS
        for f in (1980, 1500, 1050)
    )
    assert {p.name for p in path.parent.glob("gpt.pp*.csv")} == {"gpt.pp0.csv", "gpt.pp1.csv"}


# ---- the example, and a release below the range ------------------------------------------


@needs_megatron
@pytest.mark.filterwarnings("ignore::perseus.ProfileWarning")  # CPU timings, see above
def test_example_profiles_then_runs(fake_libraries, tmp_path):
    """examples/megatron_gpt.py as a user runs it (through the CPU shims): profile, then run."""
    csv = tmp_path / "out" / "gpt.csv"
    common = [str(EXAMPLE), "--cpu", "--pipeline=2", "--iterations=3"]
    codes, logs = launch(
        2,
        [*common, "--mode=profile", f"--profile={csv}", "--frequencies=1980,1500,1050"],
        timeout_s=180,
        logs=tmp_path / "profile-logs",
    )
    assert codes == [0, 0], _failure("example, profile mode", codes, logs)
    assert "profile of 2 stages written to" in logs[0]
    assert "iteration 2:" not in logs[1]  # after="stop": training stopped at the profile
    sidecar = json.loads(csv.with_suffix(".json").read_text())
    assert sidecar["blocking_power_w"] > 0
    assert (
        perseus.Profile.from_csv(csv, blocking_power_w=sidecar["blocking_power_w"]).num_stages == 2
    )
    # Clocks do not change a CPU's speed, so the profile just measured need
    # not trade time for energy; run mode gets one that does.
    synthetic = tmp_path / "synthetic.csv"
    _frontier_profile().to_csv(synthetic)
    codes, logs = launch(
        2,
        [
            *common,
            "--mode=run",
            f"--profile={synthetic}",
            "--blocking-power=80",
            f"--json={tmp_path / 'run.json'}",
        ],
        timeout_s=180,
        logs=tmp_path / "run-logs",
    )
    assert codes == [0, 0], _failure("example, run mode", codes, logs)
    assert "straggler switch(es)" in logs[0]
    losses = json.loads((tmp_path / "run.rank1.json").read_text())["losses"]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)


@pytest.mark.skipif(
    not os.environ.get("PERSEUS_TEST_MEGATRON_UNSUPPORTED") or not HAVE_TORCH,
    reason="PERSEUS_TEST_MEGATRON_UNSUPPORTED names no megatron-core below the supported range",
)
def test_release_below_the_range_is_refused(tmp_path):
    path = str(Path(os.environ["PERSEUS_TEST_MEGATRON_UNSUPPORTED"]).resolve())
    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from megatron_support import cpu_shims
        cpu_shims.install()
        import perseus, perseus.megatron
        records = [(0, i, f, t * m, 5.0 * t * m * f / 1980) for i, m in (("forward", 1), ("backward", 2))
                   for f, t in ((1980, 0.01), (1500, 0.013))]
        frontier = perseus.optimize(perseus.Profile.from_records(records, blocking_power_w=50.0),
                                    microbatches=2, progress=False)
        try:
            perseus.megatron.attach(frontier, switcher=None).attach()
        except perseus.megatron.MegatronVersionError as error:
            print("REFUSED:", error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script, str(ROOT / "tests")],
        env={**os.environ, "PYTHONPATH": _pythonpath(path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "REFUSED: megatron-core 0.15" in done.stdout, done.stdout + done.stderr
    assert ">=0.16.0,<0.20" in done.stdout


# ---- pure Python: no megatron needed -------------------------------------------------------


def test_importing_perseus_megatron_imports_neither_torch_nor_megatron():
    code = (
        "import sys, perseus, perseus.megatron; "
        "print(sorted(m for m in ('torch', 'megatron') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("0.19.2", (0, 19, 2)),
        ("0.16.0rc0.dev123", (0, 16, 0)),
        ("1.2", (1, 2, 0)),
        ("v0.17.1", (0, 17, 1)),
    ],
)
def test_parse_version(text, parsed):
    assert parse_version(text) == parsed


def _fake_schedules(**overrides):
    def forward_step(
        forward_step_func,
        data_iterator,
        model,
        num_microbatches,
        input_tensor,
        forward_data_store,
        config,
        current_microbatch=None,
        vp_stage=None,
    ):
        pass

    def backward_step(input_tensor, output_tensor, output_tensor_grad, config):
        pass

    def schedule(*, forward_step_func, data_iterator, model, num_microbatches, forward_only=False):
        pass

    functions = {"forward_step": forward_step, "backward_step": backward_step}
    functions.update({name: schedule for name in SCHEDULE_FUNCTIONS})
    functions.update(overrides)
    return types.SimpleNamespace(**{k: v for k, v in functions.items() if v is not None})


def test_check_megatron_accepts_the_supported_range():
    for version in ("0.16.0", "0.17.1", "0.19.2", "0.19.9"):
        check_megatron(_fake_schedules(), version)


@pytest.mark.parametrize("version", ["0.15.3", "0.20.0", "1.0.0", "garbage"])
def test_check_megatron_refuses_other_versions(version):
    with pytest.raises(MegatronVersionError, match=r">=0\.16\.0,<0\.20"):
        check_megatron(_fake_schedules(), version)


def test_check_megatron_can_try_an_untested_version_but_still_checks_signatures():
    with pytest.warns(UserWarning, match="trying anyway"):
        check_megatron(_fake_schedules(), "0.21.0", allow_untested_version=True)

    def forward_step(forward_step_func, data_iterator, model, input_tensor, microbatch=None):
        pass

    with (
        pytest.raises(
            MegatronVersionError,
            match="forward_step has no parameter.*current_microbatch, vp_stage",
        ),
        pytest.warns(UserWarning),
    ):
        check_megatron(
            _fake_schedules(forward_step=forward_step), "0.21.0", allow_untested_version=True
        )


def test_check_megatron_names_a_missing_schedule_function():
    schedules = _fake_schedules(forward_backward_pipelining_with_interleaving=None)
    with pytest.raises(
        MegatronVersionError, match="no function forward_backward_pipelining_with_interleaving"
    ):
        check_megatron(schedules, "0.19.2")


def _frontier_profile():
    records = []
    for stage in range(2):
        for instruction, scale in (("forward", 1.0), ("backward", 2.0)):
            for f in (1980, 1620, 1260, 900):
                t = 0.01 * scale * (1 + 0.5 * stage) * 1980 / f
                records.append((stage, instruction, f, t, (90 + 610 * (f / 1980) ** 3) * t))
    return perseus.Profile.from_records(records, blocking_power_w=80.0)


def _frontier():
    return perseus.optimize(_frontier_profile(), microbatches=4, progress=False)


def test_straggler_policy_follows_holds_and_recovers():
    frontier = _frontier()
    base = frontier.fastest
    policy = StragglerPolicy(frontier, base, tolerance=0.1, recovery=0.05)
    assert policy.observe(0, 1.0, 1.0, 1.0) is None and policy.plan is base
    # the other replica is 30 % slower: follow it
    switch = policy.observe(1, 1.0, 1.3, 1.0)
    assert isinstance(switch, PlanSwitch) and switch.reason == "straggler"
    assert switch.deadline_s == pytest.approx(1.3 * base.iteration_time_s)
    assert policy.plan is frontier.plan_for(1.3 * base.iteration_time_s)
    assert "straggler" in str(switch)
    # while following, only the straggler runs the base plan and reports
    assert policy.observe(2, 1.5, 1.32, 1.32) is None  # about the same: stay
    # inside the hysteresis band (between recovery and tolerance): stay
    assert policy.observe(3, 1.5, 1.07, 1.07) is None and policy.plan is not base
    # recovered
    back = policy.observe(4, 1.5, 1.02, 1.02)
    assert back.reason == "recovered" and policy.plan is base
    assert policy.reference_s == 1.0


def test_straggler_policy_retargets_and_never_slows_the_straggler():
    frontier = _frontier()
    base = frontier.fastest
    policy = StragglerPolicy(frontier, base, tolerance=0.1)
    # this replica is the slow one: it keeps the base plan
    assert policy.observe(0, 1.0, 1.0, 1.0) is None
    assert policy.observe(1, 1.5, 1.5, 1.0) is None and policy.plan is base
    # another replica straggles; then it gets much slower: a new deadline
    first = policy.observe(2, 1.0, 1.3, 1.0)
    second = policy.observe(3, 1.0, 2.0, 2.0)
    assert first.reason == "straggler" and second.reason == "straggler changed"
    assert second.from_time_s == first.to_time_s < second.to_time_s
    assert policy.deadline_s == pytest.approx(2.0 * base.iteration_time_s)
    # nobody on the base plan (cannot happen with real replicas): no information, no change
    plan = policy.plan
    assert policy.observe(4, 1.0, 0.0, math.inf) is None and policy.plan is plan


def test_straggler_policy_arguments():
    frontier = _frontier()
    with pytest.raises(ValueError, match="tolerance"):
        StragglerPolicy(frontier, frontier.fastest, tolerance=0)
    with pytest.raises(ValueError, match="recovery"):
        StragglerPolicy(frontier, frontier.fastest, tolerance=0.1, recovery=0.2)


def test_attach_arguments_are_checked_before_any_import():
    frontier = _frontier()
    with pytest.raises(ValueError, match="profile_path"):
        attach(mode="profile")
    with pytest.raises(ValueError, match="after"):
        attach(mode="profile", profile_path="p.csv", after="later")
    with pytest.raises(ValueError, match="sidecar"):
        attach(mode="profile", profile_path="p.json")
    with pytest.raises(ValueError, match="cannot set 'mode'"):
        attach(mode="profile", profile_path="p.csv", profiler_options={"mode": "cpu"})
    with pytest.raises(ValueError, match="mode must be"):
        attach(frontier, mode="replay")
    with pytest.raises(ValueError, match="needs a frontier"):
        attach()
    with pytest.raises(ValueError, match="needs the frontier"):
        attach(plan=frontier.fastest)
    with pytest.raises(ValueError, match="on_mismatch"):
        attach(frontier, on_mismatch="ignore")
    assert attach(plan=frontier.fastest, stragglers=False).base_plan is frontier.fastest
    assert attach(frontier).plan is frontier.fastest


def test_a_computation_out_of_the_plans_order_is_caught_before_its_clock():
    from perseus.megatron._attach import _Iteration

    frontier = _frontier()
    attachment = attach(frontier, stragglers=False, record=True)
    order = perseus.pipeline_order("1f1b", 2, 4)[0]
    it = _Iteration(0, "1f1b", 2, 0, 1, 4, order, [1980] * len(order))
    attachment._before(it, order[0])
    with pytest.raises(
        perseus.megatron.ScheduleMismatchError, match="computation 1 of pipeline rank 0"
    ):
        attachment._before(it, ("backward", 0, 3))
    assert [c.instruction for c in attachment.trace] == ["forward"]


def test_a_forward_backward_function_from_before_attaching_is_refused():
    attachment = attach(_frontier(), stragglers=False)
    with pytest.raises(
        perseus.megatron.MegatronIntegrationError, match="get_forward_backward_func"
    ):
        attachment._outside(lambda: None, "forward_step", (), {})

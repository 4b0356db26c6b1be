"""Plan timelines and power, power caps, Zeus plan files and the plotting API."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import perseus
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perseus import Frontier, Plan, PowerCapError, Profile

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def profile():
    return Profile.from_csv(EXAMPLES / "small-4stage.csv", blocking_power_w=70.0)


@pytest.fixture(scope="module")
def frontier(profile):
    return perseus.optimize(profile, microbatches=6)


@pytest.fixture(scope="module")
def interleaved(profile):
    return perseus.optimize(profile, microbatches=4, schedule="interleaved-1f1b", virtual_stages=2)


def check_timeline(plan):
    line = plan.timeline()
    spec = plan.spec
    # The replay's iteration time, and the energy the power curve integrates to, are the plan's.
    assert line.iteration_time_s == pytest.approx(plan.iteration_time_s, rel=1e-12)
    power = line.power()
    assert power.energy_j == pytest.approx(plan.energy_j, rel=1e-9)
    assert power.average_w == pytest.approx(plan.average_power_w, rel=1e-9)
    assert power.peak_w >= power.average_w
    assert power.gpu_power_w.shape == (spec.num_gpus, len(power.power_w))
    assert np.allclose(power.gpu_power_w.sum(axis=0), power.power_w)
    assert power.gpu_power_w.min() >= plan.blocking_power_w - 1e-9  # waiting is the floor
    # Each GPU runs its computations one at a time, in its schedule's order.
    pipeline = spec.pipeline()
    for gpu in range(spec.num_gpus):
        order = pipeline.order(gpu)
        assert np.all(line.start_s[order][1:] >= line.end_s[order][:-1] - 1e-12)
    # A backward waits for the forward of the same microbatch and stage.
    f = [
        spec.computation_id(s, "forward", m)
        for s in range(spec.num_stages)
        for m in range(spec.microbatches)
    ]
    b = [
        spec.computation_id(s, "backward", m)
        for s in range(spec.num_stages)
        for m in range(spec.microbatches)
    ]
    assert np.all(line.start_s[b] >= line.end_s[f] - 1e-12)


def test_power_timeline_of_every_plan(frontier, interleaved):
    for plan in [*frontier[:: max(1, len(frontier) // 10)], frontier[-1], *interleaved[::20]]:
        check_timeline(plan)
    check_timeline(frontier.baseline_plan)


def test_baseline_plan_is_the_baseline(frontier, profile):
    base = frontier.baseline_plan
    replayed = perseus.evaluate(profile, base)
    assert replayed == frontier.baseline
    assert base.iteration_time_s <= frontier.fastest.iteration_time_s * (1 + 1e-12)


def test_longer_iteration_waits_at_blocking_power(frontier):
    plan = frontier.fastest
    longer = plan.timeline().power(plan.iteration_time_s + 0.5)
    assert longer.energy_j == pytest.approx(plan.energy_at(plan.iteration_time_s + 0.5))
    assert longer.power_w[-1] == pytest.approx(frontier.spec.num_gpus * plan.blocking_power_w)
    with pytest.raises(ValueError, match="too short"):
        plan.timeline().power(plan.iteration_time_s / 2)


def test_timeline_needs_a_profile():
    spec = perseus.PipelineSpec("1f1b", 4, 1, 2)
    plan = Plan(spec, np.full(spec.num_computations, 1410), 1.0, 1.0)
    with pytest.raises(ValueError, match="no profile attached"):
        plan.power_timeline()
    with pytest.raises(TypeError, match=r"expected a perseus\.Profile"):
        plan.timeline(profile="p.csv")


@settings(max_examples=30)
@given(st.floats(min_value=0.5, max_value=1.5))
def test_plan_for_power_is_the_fastest_within_the_cap(frontier, fraction):
    cap = fraction * frontier.fastest.average_power_w
    powers = frontier.average_powers_w
    if powers.min() > cap:
        with pytest.raises(PowerCapError) as info:
            frontier.plan_for_power(cap)
        assert info.value.lowest_w == pytest.approx(powers.min())
        return
    plan = frontier.plan_for_power(cap)
    index = frontier.index(plan)
    assert plan.average_power_w <= cap
    assert np.all(powers[:index] > cap)  # nothing faster fits


def test_plan_for_power_peak(frontier):
    peaks = frontier.peak_powers_w()
    assert np.all(peaks >= frontier.average_powers_w)
    cap = float(np.median(peaks))
    plan = frontier.plan_for_power(cap, peak=True)
    assert plan.power_timeline().peak_w <= cap
    assert np.all(peaks[: frontier.index(plan)] > cap)
    with pytest.raises(
        PowerCapError, match=r"lowest peak power any plan reaches is .* W \(the plan taking"
    ):
        frontier.plan_for_power(peaks.min() - 1, peak=True)


def test_plan_for_power_peak_replays_only_what_it_needs(frontier, tmp_path):
    """Without the peaks computed, plan_for_power(peak=True) replays plans in
    order, skipping those whose average is over the cap, and stops at the first
    within it (every plan was replayed first: 12.8 s at 16 x 256). Same plan."""
    peaks = frontier.peak_powers_w()
    frontier.save(tmp_path / "f.json")
    for cap in sorted(set(np.quantile(peaks, [0.0, 0.1, 0.5, 0.9, 1.0]).tolist())):
        fresh = Frontier.load(tmp_path / "f.json", frontier.profile)
        plan = fresh.plan_for_power(cap, peak=True)
        assert fresh._peak_powers_w is None  # found without replaying every plan
        assert fresh.index(plan) == int(np.nonzero(peaks <= cap)[0][0])
    fresh = Frontier.load(tmp_path / "f.json", frontier.profile)
    with pytest.raises(PowerCapError, match="lowest peak power any plan reaches"):
        fresh.plan_for_power(peaks.min() - 1, peak=True)


@pytest.mark.parametrize(
    ("cap", "peak", "error"),
    [
        (float("nan"), False, ValueError),
        (-5, False, ValueError),
        ("100", False, TypeError),
        (100.0, 1, TypeError),
        (True, False, TypeError),
    ],
)
def test_plan_for_power_rejects_bad_arguments(frontier, cap, peak, error):
    with pytest.raises(error):
        frontier.plan_for_power(cap, peak=peak)


# --- Zeus plan files --------------------------------------------------------------------


def test_write_zeus_reads_back_and_evals(tmp_path, frontier, profile):
    plan = frontier[len(frontier) // 2]
    path = tmp_path / "freqs_pipeline_00007.py"
    plan.write_zeus(path)
    with open(path, encoding="utf-8") as f:
        assert eval(f.read()) == plan.to_zeus()  # as Zeus's PointSolution reads it
    back = Plan.from_zeus(path, profile)
    assert back.to_zeus() == plan.to_zeus()
    assert back.iteration_time_s == pytest.approx(plan.iteration_time_s, rel=1e-12)
    assert back.energy_j == pytest.approx(plan.energy_j, rel=1e-12)
    assert back.profile is profile


def test_from_zeus_interleaved(tmp_path, interleaved, profile):
    plan = interleaved[3]
    plan.write_zeus(tmp_path / "f.py")
    back = Plan.from_zeus(tmp_path / "f.py", profile, schedule="interleaved-1f1b", virtual_stages=2)
    assert np.array_equal(back.frequencies_mhz, plan.frequencies_mhz)
    with pytest.raises(ValueError, match="2 GPUs x 1 chunk"):
        Plan.from_zeus(tmp_path / "f.py", profile)


def test_from_zeus_wrong_length(tmp_path, frontier, profile):
    schedule = frontier.fastest.to_zeus()
    schedule[1] = schedule[1][:-2]
    (tmp_path / "f.py").write_text(repr(schedule))
    with pytest.raises(
        ValueError, match="GPU 1 lists 10 computations; 1f1b with 6 microbatches runs 12"
    ):
        Plan.from_zeus(tmp_path / "f.py", profile)


def test_write_zeus_keeps_mode_and_refuses_links(tmp_path, frontier):
    target = tmp_path / "f.py"
    target.write_text("")
    target.chmod(0o640)
    frontier.fastest.write_zeus(target)
    assert target.stat().st_mode & 0o777 == 0o640
    (tmp_path / "link.py").symlink_to(target)
    with pytest.raises(FileExistsError):
        frontier.fastest.write_zeus(tmp_path / "link.py")


def test_execution_order_matches_to_zeus(interleaved):
    plan = interleaved[-1]
    for gpu, (steps, zeus) in enumerate(zip(plan.execution_order(), plan.to_zeus())):
        assert [(s.instruction, s.frequency_mhz) for s in steps] == zeus
        for position, s in enumerate(steps):
            assert (s.gpu, s.position) == (gpu, position)
            assert s.stage == s.chunk * plan.spec.num_gpus + gpu
            assert plan.frequencies_mhz[s.computation] == s.frequency_mhz


# --- plotting API --------------------------------------------------------------------------


def test_plot_api_draws_on_given_axes(frontier):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    assert frontier.plot(ax) is ax
    assert len(ax.lines) >= 3
    assert ax.get_xlabel() == "iteration time (s)"
    ax2 = Figure().add_subplot()
    assert frontier.fastest.plot_timeline(ax2) is ax2
    assert len(ax2.collections) > frontier.spec.num_gpus  # one row of bars per GPU and kind


def test_plot_api_without_axes_makes_a_figure(frontier):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        ax = frontier.plot()
        assert ax.figure is plt.gcf()
    finally:
        plt.close("all")


def test_plotting_without_matplotlib_names_the_extra(frontier, monkeypatch):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r'pip install "perseus-energy\[plot\]"'):
        frontier.plot()
    with pytest.raises(ImportError, match=r"\[plot\]"):
        frontier.fastest.plot_timeline()


def test_import_perseus_does_not_import_matplotlib():
    import subprocess

    code = "import sys, perseus; assert 'matplotlib' not in sys.modules, 'imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_frontier_load_round_trip_keeps_power(tmp_path, frontier):
    frontier.save(tmp_path / "f.json")
    loaded = Frontier.load(tmp_path / "f.json")
    assert loaded[3].power_timeline().peak_w == pytest.approx(frontier[3].power_timeline().peak_w)

"""Plots of a frontier, of one plan's per-GPU timeline, and of its power over an iteration.

matplotlib is optional (``pip install "perseus-energy[plot]"``) and imported
only here, only when a plot is drawn. Every function draws on the Axes it is
given, or on a new figure's (through pyplot, so notebooks show it), and
returns the Axes. :func:`figure` makes a pyplot-free figure for files (the
command line and the HTML report use it), which needs no display.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ._optional import optional_module

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .frontier import Frontier
    from .plan import Plan
    from .timeline import PowerTimeline, Timeline

__all__ = [
    "figure",
    "frontier_figure",
    "plot_frontier",
    "plot_power",
    "plot_timeline",
    "power_figure",
    "require_matplotlib",
    "timeline_figure",
]

_CMAP = "viridis"  # perceptually even, readable in grey and by colour-blind readers
_FORWARD_HATCH = ""
_BACKWARD_HATCH = "////"


def _matplotlib() -> Any:
    return optional_module("matplotlib", "plot")


def require_matplotlib() -> None:
    """Raise ImportError naming the ``plot`` extra if matplotlib is not installed."""
    _matplotlib()


def figure(width_in: float = 8.0, height_in: float = 4.5) -> Figure:
    """A figure for saving to a file, without pyplot (no display, no global state)."""
    _matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def _axes(ax: Optional[Axes], size: tuple[float, float] = (8.0, 4.5)) -> Axes:
    if ax is not None:
        return ax
    _matplotlib()
    import matplotlib.pyplot as plt

    _, new = plt.subplots(figsize=size, layout="constrained")
    return new


def plot_frontier(frontier: Frontier, ax: Optional[Axes] = None, *, annotate: bool = True) -> Axes:
    """The frontier: iteration time (s) against energy per iteration (J).

    Marks the all-fastest baseline, annotates the fastest plan's saving,
    shades the band a straggler opens (from the fastest to the slowest
    plan's time) and draws what the all-fastest and the fastest plan cost
    when they wait for a straggler through that band.
    """
    ax = _axes(ax)
    times = frontier.iteration_times_s
    energies = frontier.energies_j
    base = frontier.baseline
    fastest = frontier.fastest
    t_end = float(times[-1])
    ax.axvspan(
        float(times[0]),
        t_end,
        color="tab:orange",
        alpha=0.08,
        lw=0,
        label="straggler band: others can slow down to the straggler's time",
    )
    span = np.array([base.iteration_time_s, max(t_end, base.iteration_time_s)])
    ax.plot(
        span,
        [frontier.baseline_energy_at(t) for t in span],
        ls="--",
        color="tab:red",
        lw=1.2,
        label="all-fastest, waiting for a straggler",
    )
    ax.plot(
        [times[0], t_end],
        [fastest.energy_at(float(times[0])), fastest.energy_at(t_end)],
        ls=":",
        color="tab:gray",
        lw=1.2,
        label="fastest plan, waiting for a straggler",
    )
    ax.plot(
        times,
        energies,
        color="tab:blue",
        lw=2,
        marker="o",
        ms=2.5,
        label=f"perseus frontier ({len(frontier)} plans)",
    )
    ax.plot(
        [base.iteration_time_s],
        [base.energy_j],
        marker="X",
        ms=11,
        color="tab:red",
        ls="none",
        label="all-fastest (baseline)",
    )
    if annotate:
        saving = 100 * (1 - fastest.energy_j / base.energy_j)
        ax.annotate(
            f"fastest plan: {saving:.1f}% less energy\nat {fastest.iteration_time_s:.3g} s",
            xy=(fastest.iteration_time_s, fastest.energy_j),
            xytext=(0.17, 0.38),
            textcoords="axes fraction",
            arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.8},
            fontsize=9,
        )
        if len(frontier) > 1:
            slow = frontier[-1]
            waiting = frontier.baseline_energy_at(slow.iteration_time_s)
            extra = 100 * (1 - slow.energy_j / waiting)
            ax.annotate(
                f"straggler at {slow.iteration_time_s:.3g} s: {extra:.1f}% less\n"
                "than all-fastest waiting for it",
                xy=(slow.iteration_time_s, slow.energy_j),
                xytext=(0.6, 0.03),
                textcoords="axes fraction",
                arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.8},
                fontsize=9,
            )
    spec = frontier.spec
    ax.set_title(
        f"Iteration time-energy frontier: {spec.num_gpus} GPUs, {spec.microbatches} microbatches, "
        f"{spec.schedule}",
        fontsize=10,
    )
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel("energy per iteration, all GPUs (J)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return ax


def plot_timeline(
    timeline: Timeline,
    ax: Optional[Axes] = None,
    *,
    frequency_range_mhz: Optional[tuple[int, int]] = None,
    time_limit_s: Optional[float] = None,
    colorbar: bool = True,
    legend: bool = True,
    title: Optional[str] = None,
) -> Axes:
    """A per-GPU Gantt chart: one bar per computation, coloured by its SM clock.

    Forward computations are plain, backward ones hatched; a light band
    shows the whole iteration on every GPU, so the gaps in it are the
    bubbles where a GPU waits (at blocking power).
    """
    mpl = _matplotlib()
    from matplotlib.colors import Normalize

    ax = _axes(ax, (10.0, 0.5 + 0.45 * timeline.num_gpus))
    low, high = frequency_range_mhz or (
        int(timeline.frequency_mhz.min()),
        int(timeline.frequency_mhz.max()),
    )
    norm = Normalize(vmin=low, vmax=max(high, low + 1))
    cmap = mpl.colormaps[_CMAP]
    end = timeline.iteration_time_s
    height = 0.8
    for gpu in range(timeline.num_gpus):
        ax.broken_barh([(0.0, end)], (gpu - height / 2, height), color="0.92", lw=0)
    duration = timeline.end_s - timeline.start_s
    is_backward = np.array([k == "backward" for k in timeline.instruction])
    for backward, hatch in ((False, _FORWARD_HATCH), (True, _BACKWARD_HATCH)):
        chosen = np.nonzero(is_backward == backward)[0]
        for gpu in range(timeline.num_gpus):
            mine = chosen[timeline.gpu[chosen] == gpu]
            if not len(mine):
                continue
            ax.broken_barh(
                list(zip(timeline.start_s[mine], duration[mine])),
                (gpu - height / 2, height),
                facecolors=[cmap(norm(f)) for f in timeline.frequency_mhz[mine]],
                edgecolor="white",
                linewidth=0.3,
                hatch=hatch,
            )
    ax.set_yticks(range(timeline.num_gpus))
    ax.set_yticklabels([f"GPU {g}" for g in range(timeline.num_gpus)], fontsize=8)
    ax.set_ylim(timeline.num_gpus - 0.5, -0.5)  # GPU 0 on top, as pipelines are drawn
    ax.set_xlim(0.0, time_limit_s or end)
    ax.set_xlabel("time in the iteration (s)")
    ax.set_title(
        title
        or f"per-GPU timeline: {end:.4g} s, {np.sum(timeline.energy_j):.5g} J computing "
        "(gaps: waiting at blocking power)",
        fontsize=10,
    )
    if legend:
        ax.legend(
            handles=_timeline_legend(),
            fontsize=7,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.12),
            ncol=3,
            frameon=False,
        )
    if colorbar:
        from matplotlib.cm import ScalarMappable

        ax.figure.colorbar(
            ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="SM clock (MHz)", pad=0.01
        )
    return ax


def _timeline_legend() -> list[Any]:
    from matplotlib.patches import Patch

    return [
        Patch(facecolor="0.55", hatch=_FORWARD_HATCH, label="forward"),
        Patch(facecolor="0.55", hatch=_BACKWARD_HATCH, edgecolor="white", label="backward"),
        Patch(facecolor="0.92", label="waiting (bubble, blocking power)"),
    ]


def plot_power(
    power: PowerTimeline,
    ax: Optional[Axes] = None,
    *,
    baseline: Optional[PowerTimeline] = None,
    label: str = "plan",
) -> Axes:
    """Power of all GPUs over one iteration (a step function), against the baseline.

    Give the baseline over the same length as the plan (`Timeline.power`
    with the plan's time: it then waits at blocking power), so both curves
    cover the same work over the same time.
    """
    ax = _axes(ax)
    if baseline is not None:
        ax.stairs(
            baseline.power_w,
            baseline.time_s,
            baseline=None,
            color="tab:red",
            lw=1,
            alpha=0.8,
            label=f"all-fastest, then waiting: average {baseline.average_w:.0f} W, peak {baseline.peak_w:.0f} W",
        )
    ax.stairs(
        power.power_w,
        power.time_s,
        baseline=None,
        color="tab:blue",
        lw=1.3,
        label=f"{label}: average {power.average_w:.0f} W, peak {power.peak_w:.0f} W",
    )
    ax.axhline(power.average_w, color="tab:blue", lw=0.8, ls=":")
    if baseline is not None:
        ax.axhline(baseline.average_w, color="tab:red", lw=0.8, ls=":")
    end = max(power.iteration_time_s, baseline.iteration_time_s if baseline is not None else 0.0)
    ax.set_xlim(0.0, end)
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel("time in the iteration (s)")
    ax.set_ylabel("power, all GPUs (W)")
    ax.set_title(
        "Cluster power over one iteration (dotted: averages; waiting GPUs draw blocking power)",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return ax


def frontier_figure(frontier: Frontier) -> Figure:
    """The frontier plot on a file figure."""
    fig = figure(8.0, 4.8)
    plot_frontier(frontier, fig.add_subplot())
    return fig


def timeline_figure(frontier: Frontier, plan: Plan) -> Figure:
    """The all-fastest plan's timeline above `plan`'s, on one time axis and one colour scale."""
    profile = frontier._require_profile("timelines")
    base = frontier.baseline_plan
    base_line, plan_line = base.timeline(profile), plan.timeline(profile)
    frequencies = profile.frequencies_mhz
    gpus = frontier.spec.num_gpus
    fig = figure(11.0, 1.6 + 0.9 * gpus)
    top, bottom = fig.subplots(2, 1, sharex=True)
    limit = max(base_line.iteration_time_s, plan_line.iteration_time_s)
    scale = (min(frequencies), max(frequencies))
    plot_timeline(
        base_line,
        top,
        frequency_range_mhz=scale,
        time_limit_s=limit,
        colorbar=False,
        legend=False,
        title=f"all-fastest (baseline): {base.iteration_time_s:.4g} s, {base.energy_j:.5g} J",
    )
    saving = 100 * (1 - plan.energy_j / frontier.baseline_energy_at(plan.iteration_time_s))
    plot_timeline(
        plan_line,
        bottom,
        frequency_range_mhz=scale,
        time_limit_s=limit,
        colorbar=False,
        legend=False,
        title=(
            f"perseus plan: {plan.iteration_time_s:.4g} s, {plan.energy_j:.5g} J "
            f"({saving:.1f}% less than all-fastest over the same time)"
        ),
    )
    top.set_xlabel("")
    mpl = _matplotlib()
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    fig.colorbar(
        ScalarMappable(norm=Normalize(*scale), cmap=mpl.colormaps[_CMAP]),
        ax=[top, bottom],
        label="SM clock (MHz)",
        pad=0.01,
    )
    fig.legend(handles=_timeline_legend(), loc="outside lower center", ncol=3, fontsize=8)
    return fig


def power_figure(frontier: Frontier, plan: Plan) -> Figure:
    """`plan`'s cluster power over one iteration against the all-fastest plan's."""
    profile = frontier._require_profile("power plots")
    fig = figure(9.0, 4.2)
    base = frontier.baseline_plan.timeline(profile)
    plot_power(
        plan.power_timeline(profile),
        fig.add_subplot(),
        baseline=base.power(max(plan.iteration_time_s, base.iteration_time_s)),
        label=f"perseus plan ({plan.iteration_time_s:.4g} s)",
    )
    return fig

"""A self-contained HTML report of a frontier, to attach to a pull request or share.

One file, no network: the plots are inline SVG (matplotlib, the ``plot``
extra), the table is HTML, and a deadline slider in plain JavaScript reads
the frontier's data embedded in the page (each plan's time and energy, and
each GPU's clocks in execution order) to show, for any deadline, the
frontier plan that meets it and what it saves (``plan_for(d, reclaim=False)``;
``plan_for``'s default fits the frontier plans nearest the deadline to it,
which needs the solver and saves a little more).
"""

from __future__ import annotations

import html
import io
import json
from typing import Any, Optional

import numpy as np

from . import plotting
from ._table import frontier_table
from ._validate import seconds_up
from .frontier import Frontier

__all__ = ["html_report"]

# Clock strips (one symbol per computation and plan) are embedded up to this many
# symbols; a larger frontier's page shows the numbers and leaves the strips out.
MAX_STRIP_SYMBOLS = 4_000_000
# Symbols safe inside JSON inside <script>: printable ASCII without quotes, backslash, <, >, &.
_ALPHABET = "".join(c for c in map(chr, range(33, 127)) if c not in "\"'\\<>&")


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})  # the same input, the same page
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: inline in HTML


def _strips(frontier: Frontier) -> Optional[dict[str, Any]]:
    """Per plan and GPU, the clocks in execution order as one string of palette symbols."""
    spec = frontier.spec
    if len(frontier) * spec.num_computations > MAX_STRIP_SYMBOLS:
        return None
    pipeline = spec.pipeline()
    orders = [np.asarray(pipeline.order(g)) for g in range(spec.num_gpus)]
    rows = np.stack([p.frequencies_mhz for p in frontier])
    palette = np.unique(rows)
    width = 1 if len(palette) <= len(_ALPHABET) else 2
    codes = np.searchsorted(palette, rows)
    symbols = np.array(list(_ALPHABET))

    def encode(values: np.ndarray) -> str:
        if width == 1:
            return "".join(symbols[values])
        high, low = np.divmod(values, len(_ALPHABET))
        return "".join(np.char.add(symbols[high], symbols[low]))

    return {
        "alphabet": _ALPHABET,
        "width": width,
        "palette_mhz": palette.tolist(),
        "plans": [[encode(codes[k, order]) for order in orders] for k in range(len(frontier))],
    }


def report_data(frontier: Frontier) -> dict[str, Any]:
    """What the page's script reads (also handy for tests)."""
    spec = frontier.spec
    b = frontier.baseline
    return {
        "num_gpus": spec.num_gpus,
        "blocking_power_w": frontier.blocking_power_w,
        "baseline": {"iteration_time_s": b.iteration_time_s, "energy_j": b.energy_j},
        "iteration_time_s": frontier.iteration_times_s.tolist(),
        "energy_j": frontier.energies_j.tolist(),
        "strips": _strips(frontier),
    }


def html_report(frontier: Frontier, *, title: str = "perseus frontier") -> str:
    """The report page of `frontier` as one HTML string (needs the ``plot`` extra)."""
    plotting.require_matplotlib()
    spec = frontier.spec
    rows, common = frontier_table(frontier)
    figures = [
        ("frontier", "Frontier", plotting.frontier_figure(frontier)),
    ]
    if frontier.profile is not None:
        figures += [
            (
                "timeline",
                "Fastest plan against all-fastest, per GPU",
                plotting.timeline_figure(frontier, frontier.fastest),
            ),
            (
                "power",
                "Cluster power of the fastest plan",
                plotting.power_figure(frontier, frontier.fastest),
            ),
        ]
    plots = "\n".join(
        f'<section class="plot" id="plot-{key}"><h2>{html.escape(heading)}</h2>{_svg(fig)}</section>'
        for key, heading, fig in figures
    )
    header = (
        "<tr><th>plan</th><th>#</th><th>time (s)</th><th>energy (J)</th>"
        "<th>saving vs all-fastest, same time</th>"
        f"<th>energy over {seconds_up(common)} s (J)</th><th>average power (W)</th>"
        "<th>peak power (W)</th></tr>"
    )
    body = "".join(
        "<tr>"
        f"<td>{html.escape(r.label)}</td><td>{'' if r.index is None else r.index}</td>"
        f"<td>{seconds_up(r.iteration_time_s)}</td><td>{r.energy_j:.1f}</td>"
        f"<td>{r.saving_percent:.2f}%</td><td>{r.energy_at_common_j:.1f}</td>"
        f"<td>{r.average_power_w:.0f}</td>"
        f"<td>{'n/a' if r.peak_power_w is None else f'{r.peak_power_w:.0f}'}</td>"
        "</tr>"
        for r in rows
    )
    data = json.dumps(report_data(frontier), separators=(",", ":")).replace("</", "<\\/")
    t0, t1 = float(frontier.iteration_times_s[0]), float(frontier.iteration_times_s[-1])
    high = t1 if t1 > t0 else t0 * 1.01
    return _PAGE.format(
        title=html.escape(title),
        summary=html.escape(
            f"{len(frontier)} plans for {spec.num_gpus} GPUs x {spec.virtual_stages} chunk(s), "
            f"{spec.microbatches} microbatches, {spec.schedule}; blocking power "
            f"{frontier.blocking_power_w:g} W per waiting GPU."
        ),
        plots=plots,
        header=header,
        body=body,
        low=f"{t0!r}",
        high=f"{high!r}",
        step=f"{(high - t0) / 1000!r}",
        data=data,
        script=_SCRIPT,
    )


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1150px; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.1em; margin-top: 1.5em; }}
section.plot svg {{ width: 100%; height: auto; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; white-space: nowrap; }}
#slider {{ width: 100%; }}
#choice {{ font-variant-numeric: tabular-nums; margin: 0.5em 0; }}
#strips {{ width: 100%; border: 1px solid #ccc; }}
.note {{ color: #666; font-size: 0.85em; }}
</style>
</head>
<body>
<h1>perseus: {title}</h1>
<p>{summary}</p>
<section id="deadline">
<h2>Plan for a deadline</h2>
<p class="note">Drag to set the iteration time a straggler or a time budget allows; the
plan shown is the slowest frontier plan that meets it, waiting out the rest (perseus's
plan_for then fits the frontier plans nearest the deadline to it with the profile, saving a
little more).</p>
<input type="range" id="slider" min="{low}" max="{high}" step="{step}" value="{low}"
 aria-label="deadline in seconds">
<div id="choice">loading...</div>
<canvas id="strips" width="1100" height="160"></canvas>
<p class="note">Each row is a GPU, each cell one computation in execution order, coloured
by its SM clock (dark: low, yellow: high).</p>
</section>
<h2>Representative plans</h2>
<table id="table"><thead>{header}</thead><tbody>{body}</tbody></table>
<p class="note">Saving: against every computation at its fastest clock over the same
iteration time (all-fastest finishes first, then waits at blocking power). Energy over a
common length: as when a straggler sets the pace. Powers are of all GPUs together.</p>
{plots}
<script type="application/json" id="perseus-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""

_SCRIPT = r"""
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("perseus-data").textContent);
  const times = data.iteration_time_s, energies = data.energy_j;
  const gpus = data.num_gpus, pblock = data.blocking_power_w, base = data.baseline;
  const slider = document.getElementById("slider");
  const choice = document.getElementById("choice");
  const canvas = document.getElementById("strips");
  // viridis, sampled: dark purple (low clock) to yellow (high clock)
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(x) {
    const f = Math.min(Math.max(x, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(f), stops.length - 2);
    const t = f - i, a = stops[i], b = stops[i + 1];
    return "rgb(" + a.map((v, k) => Math.round(v + t * (b[k] - v))).join(",") + ")";
  }
  function planFor(deadline) {  // last plan with time <= deadline (times increase)
    let lo = 0, hi = times.length - 1;
    if (deadline < times[0]) return -1;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (times[mid] <= deadline) lo = mid; else hi = mid - 1; }
    return lo;
  }
  function energyAt(energy, time, deadline) { return energy + gpus * pblock * Math.max(0, deadline - time); }
  function drawStrips(index) {
    const ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    const strips = data.strips;
    if (!strips) { ctx.fillText("per-computation clocks left out: frontier too large", 10, 20); return; }
    const rows = strips.plans[index], w = strips.width, pal = strips.palette_mhz;
    const lo = pal[0], span = Math.max(pal[pal.length - 1] - lo, 1), n = strips.alphabet.length;
    const rowHeight = canvas.height / gpus;
    rows.forEach(function (row, gpu) {
      const cells = row.length / w, cellWidth = canvas.width / cells;
      for (let c = 0; c < cells; c++) {
        let code = strips.alphabet.indexOf(row[c * w]);
        if (w === 2) code = code * n + strips.alphabet.indexOf(row[c * w + 1]);
        ctx.fillStyle = colour((pal[code] - lo) / span);
        ctx.fillRect(c * cellWidth, gpu * rowHeight + 1, Math.ceil(cellWidth), rowHeight - 2);
      }
    });
  }
  function update() {
    // The range input rounds its value to its step: never below the fastest plan's time.
    const deadline = Math.max(parseFloat(slider.value), times[0]), index = planFor(deadline);
    if (index < 0) { choice.textContent = "no plan is that fast"; return; }
    const used = energyAt(energies[index], times[index], deadline);
    const allFastest = energyAt(base.energy_j, base.iteration_time_s, deadline);
    const fastest = energyAt(energies[0], times[0], deadline);
    choice.textContent = "deadline " + deadline.toFixed(4) + " s: plan " + index + " of " +
      times.length + " runs " + times[index].toFixed(4) + " s and uses " + used.toFixed(1) +
      " J over the deadline: " + (100 * (1 - used / allFastest)).toFixed(2) +
      "% less than all-fastest, " + (100 * (1 - used / fastest)).toFixed(2) +
      "% less than the fastest plan (both waiting until the deadline).";
    choice.dataset.plan = String(index);
    drawStrips(index);
  }
  slider.addEventListener("input", update);
  update();
})();
"""

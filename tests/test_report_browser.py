"""The HTML report in a real browser: headless Chromium renders it, runs its script, is screenshotted.

Needs a Chromium binary (Debian: ``apt-get install chromium-headless-shell``;
``.ci/run`` installs it) and matplotlib; skips, saying why, without them.
``PERSEUS_SCREENSHOT_DIR`` keeps the screenshot for a person to look at.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import perseus
import pytest
from browser import Browser, find_chromium

pytest.importorskip("matplotlib")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium to render the report (apt-get install chromium-headless-shell; "
    "or set PERSEUS_CHROMIUM)",
)
TAB_BLUE = np.array([0x1F, 0x77, 0xB4]) / 255  # the frontier's line


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from perseus.report import html_report

    profile = perseus.Profile.from_csv(EXAMPLES / "gpt3-a100-8stage.csv", blocking_power_w=70.0)
    frontier = perseus.optimize(profile, microbatches=16)
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(html_report(frontier, title="gpt3 test"), encoding="utf-8")
    assert CHROMIUM is not None
    with Browser(CHROMIUM, width=1200, height=900) as browser:
        browser.open(path.as_uri())
        yield browser, frontier, path


def set_slider(browser, seconds):
    return browser.evaluate(
        "(() => { const s = document.getElementById('slider'); s.value = String("
        + repr(seconds)
        + "); s.dispatchEvent(new Event('input')); return [parseFloat(s.value),"
        " document.getElementById('choice').textContent,"
        " parseInt(document.getElementById('choice').dataset.plan)]; })()"
    )


def test_no_console_errors_or_exceptions(page):
    browser, _, _ = page
    assert browser.exceptions == []
    assert [m for m in browser.console if m[0] in ("error", "warning", "assert")] == []


def test_slider_shows_the_frontier_plan_for_the_deadline(page):
    browser, frontier, _ = page
    t0, t1 = frontier.iteration_times_s[0], frontier.iteration_times_s[-1]
    for seconds in np.linspace(t0, t1 * 1.02, 9):
        value, text, index = set_slider(browser, float(seconds))
        deadline = max(value, t0)
        expected = frontier.plan_for(deadline, reclaim=False)
        assert index == frontier.index(expected), (seconds, text)
        used = expected.energy_at(deadline)
        saving = 100 * (1 - used / frontier.baseline_energy_at(deadline))
        assert f"uses {used:.1f} J" in text
        assert f"{saving:.2f}% less than all-fastest" in text
    assert browser.exceptions == []


def test_screenshot_shows_the_plots(page, tmp_path):
    from matplotlib.image import imread

    browser, _, _ = page
    set_slider(browser, float(page[1].iteration_times_s[len(page[1]) // 3]))
    boxes = browser.evaluate(
        "Array.from(document.querySelectorAll('section.plot svg')).map(e => {"
        " const r = e.getBoundingClientRect();"
        " return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; })"
    )
    assert len(boxes) == 3  # frontier, timeline, power
    shot = tmp_path / "report.png"
    browser.screenshot(str(shot))
    keep = os.environ.get("PERSEUS_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, Path(keep) / "report-screenshot.png")
    image = imread(shot)[..., :3]
    for left, top, width, height in boxes:
        assert width > 500
        assert height > 250
        region = image[int(top) : int(top + height), int(left) : int(left + width)]
        assert region.shape[0] > 200, "the plot lies outside the screenshot"
        assert region.std() > 0.05, "a plot region is blank"
    left, top, width, height = boxes[0]
    frontier_region = image[int(top) : int(top + height), int(left) : int(left + width)]
    blue = np.all(np.abs(frontier_region - TAB_BLUE) < 0.08, axis=-1)
    assert blue.sum() > 500, "the frontier's line is not in the picture"
    # The clock strips were drawn on the canvas (viridis, not white).
    strips = browser.evaluate(
        "(() => { const c = document.getElementById('strips');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let coloured = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) coloured++;"
        " return coloured / (c.width * c.height); })()"
    )
    assert strips > 0.8

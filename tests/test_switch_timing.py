"""Tests for perseus.measure_switch_latency and `perseus switch-latency`, against the fake NVML.

The fake's clock calls sleep FAKE_NVML_SLEEP_MS, and the clock it reports is the
locked one once the call has returned: every change must be timed at no less
than that sleep, and the NVML call alone too.
"""

from __future__ import annotations

import json

import perseus
import pytest
from perseus.cli import main as cli_main


def test_changes_are_timed_no_shorter_than_the_call(fake_nvml):
    fake_nvml.configure(sleep_ms=20)
    m = perseus.measure_switch_latency(0, repeats=4)
    assert m.name == "Fake NVIDIA H200"
    assert m.clocks_mhz == (1980, 1380)  # the fastest, and the clock nearest 70 % of it
    assert m.timeouts == 0
    assert len(m.visible_s) == 4
    assert min(m.visible_s) >= 0.020
    assert len(m.call_s) == 4
    assert min(m.call_s) >= 0.020
    assert m.median_s >= 0.020
    assert fake_nvml.locked(0) == 0  # given back


def test_a_clock_never_seen_is_a_timeout(fake_nvml):
    # Every NVML call takes longer than the timeout: the first change is not
    # seen in time, and the second cannot be timed (the GPU still runs the
    # clock it asks for, since the first has not landed).
    fake_nvml.configure(sleep_ms=300)
    m = perseus.measure_switch_latency(0, repeats=2, timeout_s=0.05)
    assert m.timeouts == 2
    assert len(m.visible_s) == 0
    assert m.median_s != m.median_s  # NaN


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"repeats": 0}, "repeats"),
        ({"repeats": True}, "repeats"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"clocks_mhz": (1500,)}, "two clocks"),
        ({"clocks_mhz": (1500, 1501)}, "must differ"),
    ],
)
@pytest.mark.usefixtures("fake_nvml")
def test_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        perseus.measure_switch_latency(0, **kwargs)


def test_command(fake_nvml, capsys):
    fake_nvml.configure(sleep_ms=5)
    assert cli_main(["switch-latency", "--device", "1", "--repeats", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"] == 1
    assert len(out["visible_s"]) == 3
    assert out["median_s"] >= 0.005
    assert cli_main(["switch-latency", "--repeats", "2"]) == 0
    assert "visible after  median" in capsys.readouterr().out
    assert cli_main(["switch-latency", "--device", "7"]) == 1
    assert "7" in capsys.readouterr().err


@pytest.mark.usefixtures("fake_libraries")
def test_profiler_records_switch_latency_in_its_sidecar(fake_nvml, tmp_path):
    fake_nvml.configure(clocks="1980,1500,1200,1000", sleep_ms=10)
    work = {0: {"forward": lambda: None, "backward": lambda: None}}
    fast = dict(mode="cpu", window_s=0.005, windows=1, warmup_s=0.0, progress=False)
    out = tmp_path / "p.csv"
    result = perseus.profile_stages(
        work,
        out,
        frequencies_mhz=[1980, 1500],
        blocking_power_w=50.0,
        patience=None,
        switch_latency_repeats=3,
        **fast,
    )
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["switch_latency"]["clocks_mhz"] == [1980, 1500]  # 70 % of 1980 snaps to 1500
    assert len(sidecar["switch_latency"]["visible_s"]) == 3
    assert sidecar["switch_latency_s"] >= 0.010
    assert result.metadata["switch_latency_s"] == sidecar["switch_latency_s"]
    assert fake_nvml.locked(0) == 0
    # Off by default; and a bad count is named.
    plain = tmp_path / "q.csv"
    perseus.profile_stages(
        work, plain, frequencies_mhz=[1980], blocking_power_w=50.0, patience=None, **fast
    )
    assert "switch_latency_s" not in json.loads(plain.with_suffix(".json").read_text())
    with pytest.raises(ValueError, match="switch_latency_repeats"):
        perseus.profile_stages(work, plain, switch_latency_repeats=-1, **fast)

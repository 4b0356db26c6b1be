"""Tests for perseus.measure_switch_latency and `perseus switch-latency`, against the fake NVML.

The fake's clock calls sleep FAKE_NVML_SLEEP_MS, and the clock it reports is the
locked one once the call has returned: every change must be timed at no less
than that sleep, and the NVML call alone too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import perseus
import pytest
from perseus.cli import main as cli_main
from perseus.switcher import CudaError


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


def test_a_delayed_clock_change_is_timed_to_when_it_shows(fake_nvml):
    # The GPU takes 40 ms to run a new clock after the NVML call returned
    # (FAKE_NVML_SETTLE_MS): the latency is the call plus that, not the call.
    fake_nvml.configure(sleep_ms=5, settle_ms=40)
    m = perseus.measure_switch_latency(0, repeats=4)
    assert m.timeouts == 0
    assert len(m.visible_s) == 4
    assert m.stream is None
    assert min(m.visible_s) >= 0.045
    assert max(m.call_s) < min(m.visible_s)  # the call alone is shorter than what shows
    assert len(m.handover_s) == 0


def test_on_a_stream_the_change_is_timed_from_when_the_gpu_reaches_it(fake_nvml):
    # The fake GPU waits 30 ms before each item of a stream (a backlog), the
    # NVML call takes 5 ms and the clock shows 40 ms after it: on the stream
    # timeline the change is visible >= 45 ms after the GPU reached it, and
    # the 30 ms backlog is reported apart, not counted in it.
    fake_nvml.configure(sleep_ms=5, settle_ms=40, fake_cuda_delay_us=30_000)
    m = perseus.measure_switch_latency(0, repeats=4, stream=7)
    assert m.stream == 7
    assert m.timeouts == 0
    assert len(m.visible_s) == 4
    assert len(m.handover_s) == 4
    assert min(m.handover_s) >= 0.030
    assert min(m.visible_s) >= 0.045
    assert len(m.call_s) == 4
    assert min(m.call_s) >= 0.005
    # The clock was changed by the stream's host function, in stream order.
    cuda_events = [event for _, event, _ in fake_nvml.cuda_log()]
    assert cuda_events.count("host_start") == 4
    assert fake_nvml.locked(0) == 0  # given back


def test_on_a_stream_without_a_context_is_a_cuda_error(fake_nvml):
    fake_nvml.configure(fake_cuda_fail="cuLaunchHostFunc=201")  # no current context
    with pytest.raises(CudaError, match="INVALID_CONTEXT"):
        perseus.measure_switch_latency(0, repeats=2, stream=0)
    assert fake_nvml.locked(0) == 0


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


REPO = Path(__file__).resolve().parent.parent


def test_gpu_check_script_measures_both_timelines_against_the_fakes(fake_nvml, tmp_path):
    # bench/gpu_check_switcher.py is what runs when a GPU is lent: here it
    # runs against the fake NVML and CUDA (a 20 ms switch latency), without
    # torch's CUDA, so the kernel-clock probe says why it is skipped.
    fake_nvml.configure(sleep_ms=2, settle_ms=20, devices=1)
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_check_switcher.py"), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["can_lock"] is True
    assert "error" not in report
    cpu = report["measure_switch_latency"]
    assert cpu["timeouts"] == 0
    assert cpu["median_s"] >= 0.022
    on_stream = report["stream_switch_latency"]
    assert on_stream["timeouts"] == 0
    assert len(on_stream["visible_s"]) == 10
    assert on_stream["median_s"] >= 0.020
    assert len(on_stream["handover_s"]) == 10
    assert "stream latency GPU reached the change -> NVML shows it" in done.stdout
    assert "skipped" in report["kernel_clock_latency"]
    assert report["reset_at_end"] == "ok"
    assert fake_nvml.locked(0) == 0


def test_gpu_check_finds_the_first_kernel_at_the_new_clock():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from gpu_check_switcher import first_probe_at
    finally:
        sys.path.remove(str(REPO / "bench"))
    # 3 probes at 1980 before the change (start=3), two more still at 1980
    # after it, one in between (the change landed during it), then 1380.
    mhz = [1980, 1979, 1981, 1980, 1978, 1700, 1385, 1380, 1381]
    assert first_probe_at(mhz, 1380, 1980, 3) == 6
    # A lone probe near the target (noise) is not the change.
    assert first_probe_at([1980, 1400, 1980, 1980, 1390, 1385], 1380, 1980, 0) == 4
    assert first_probe_at([1980, 1980, 1980], 1380, 1980, 0) is None

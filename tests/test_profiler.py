"""Tests for the profiler (perseus.profiler) on the CPU, with the fake NVML.

The fake NVML (tests/fake_nvml, built by conftest.py) integrates a power model
of the locked SM clock, P(f) = idle + (max - idle) * (f / f_max)^3, into its
energy counter. The computations here sleep for ``base_s * f_max / f``, so
their energy P(f) * t(f) first falls and then rises as the clock goes down:
the profile has a real Pareto frontier and the early-stop rule has something
to stop on.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import perseus
import pytest
from perseus.profiler import (
    ComputationError,
    Measurement,
    ProfilerError,
    ProfilerResult,
    ProfilerUnavailable,
    measure_blocking_power,
    profile_stages,
)

F_MAX = 1980
CLOCKS = "1980,1500,1200,1000,800,650,520,420,340,270,210"
FAST = dict(
    mode="cpu", window_s=0.01, windows=2, warmup_s=0.002, blocking_window_s=0.03, progress=False
)
REPO = Path(__file__).resolve().parents[1]


def fake_power(f: float, idle: float = 100.0, peak: float = 700.0) -> float:
    return idle + (peak - idle) * (f / F_MAX) ** 3


class Work:
    """A computation that takes ``base_s * (f_max / f)**exponent`` seconds at the fake's clock f."""

    def __init__(
        self, libs, base_s: float = 0.001, fail_at: int | None = None, exponent: float = 1.0
    ) -> None:
        self.libs = libs
        self.base_s = base_s
        self.fail_at = fail_at
        self.exponent = exponent
        self.calls = 0

    def __call__(self) -> None:
        f = self.libs.nvml.fake_nvml_locked_clock(0) or F_MAX
        if f == self.fail_at:
            raise ZeroDivisionError("the model blew up")
        self.calls += 1
        time.sleep(self.base_s * (F_MAX / f) ** self.exponent)


def stages(libs, count: int = 1, **work) -> dict[int, dict[str, Work]]:
    return {
        s: {"forward": Work(libs, **work), "backward": Work(libs, 1.5e-3)} for s in range(count)
    }


def read_csv(path: Path) -> list[tuple[int, str, int, float, float]]:
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["stage", "instruction", "frequency", "time", "energy"]
    return [(int(s), i, int(f), float(t), float(e)) for s, i, f, t, e in rows[1:]]


def keys(measurements) -> list[tuple[int, str, int]]:
    out = []
    for m in measurements:
        if isinstance(m, dict):
            out.append((m["stage"], m["instruction"], m["frequency_mhz"]))
        else:
            out.append((m.stage, m.instruction, m.frequency_mhz))
    return out


@pytest.fixture
def nvml(fake_nvml):
    fake_nvml.configure(clocks=CLOCKS)
    yield fake_nvml
    # Every nvmlInit has had its nvmlShutdown: nothing keeps NVML open after a run.
    assert fake_nvml.init_count() == 0


# ---- the whole path ----------------------------------------------------------------


@pytest.mark.usefixtures("fake_libraries")
def test_exported_and_torch_free():
    for name in ("profile_stages", "measure_blocking_power", "ProfilerResult"):
        assert name in perseus.__all__
        assert getattr(perseus, name) is not None
    assert perseus.profile_stages is profile_stages
    code = textwrap.dedent(
        """
        import importlib.util, sys
        import perseus, perseus.profiler
        assert "torch" not in sys.modules, "importing the profiler imported torch"
        computations = {0: {"forward": print, "backward": print}}
        sys.modules["torch"] = None  # as if torch were not installed
        try:
            perseus.profile_stages(computations, "x.csv")
        except perseus.profiler.ProfilerUnavailable as error:
            print("without torch:", error)
        del sys.modules["torch"]
        if importlib.util.find_spec("torch") is not None:  # a torch without a usable GPU
            import torch
            try:
                perseus.profile_stages(computations, "x.csv")
            except perseus.profiler.ProfilerUnavailable as error:
                print("with torch:", error)
            else:
                assert torch.cuda.is_available()
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    without, _, with_torch = done.stdout.partition("with torch:")
    assert "torch is not installed" in without
    assert 'pip install "perseus-energy[gpu]"' in without
    assert "mode='cpu'" in without
    if with_torch:
        assert "CPU-only build" in with_torch or "sees no GPU" in with_torch
        assert "mode='cpu'" in with_torch


def test_sweep_end_to_end(nvml, fake_libraries, tmp_path):
    out = tmp_path / "prof" / "model.csv"
    comps = stages(fake_libraries, count=2)
    settings = {**FAST, "window_s": 0.03}
    result = profile_stages(
        comps, out, frequencies_mhz=[1000, 1980, 1500, 650, 1490], patience=None, **settings
    )

    assert isinstance(result, ProfilerResult)
    plan = [1980, 1500, 1000, 650]  # snapped (1490 -> 1500), deduplicated, highest first
    assert keys(result.measurements) == [
        (s, i, f) for f in plan for s in (0, 1) for i in ("forward", "backward")
    ]
    # Nothing stays locked; the switcher locked each clock once, in order, then reset.
    assert nvml.locked(0) == 0
    calls = nvml.clock_calls()
    assert [args[1] for fn, args, _ in calls if fn == "nvmlDeviceSetGpuLockedClocks"] == [
        str(f) for f in plan
    ]
    assert calls[-1] == ("nvmlDeviceResetGpuLockedClocks", ("0",), 0)

    # Units and the power model: energy (J) / time (s) is the fake's power at that clock,
    # and a computation takes longer at a lower clock.
    for m in result.measurements:
        assert m.sm_clock_mhz == m.frequency_mhz
        assert m.power_w == pytest.approx(fake_power(m.frequency_mhz), rel=0.15)
        assert m.windows == 2
        assert m.repetitions >= 1
        assert 0 <= m.time_std_s < m.time_s
        assert 0 <= m.energy_std_j < m.energy_j
    for s in (0, 1):
        for i in ("forward", "backward"):
            times = [m.time_s for m in result.measurements if (m.stage, m.instruction) == (s, i)]
            assert times[-1] > 1.5 * times[0]  # 650 MHz against 1980 MHz: about 3x
    assert result.blocking_power_w == pytest.approx(fake_power(1980), rel=0.05)

    # The CSV is Zeus's format, every measured row, exact floats; it round-trips.
    rows = read_csv(out)
    assert sorted(rows) == sorted(
        (m.stage, m.instruction, m.frequency_mhz, m.time_s, m.energy_j) for m in result.measurements
    )
    loaded = perseus.Profile.from_csv(out, blocking_power_w=result.blocking_power_w)
    assert result.profile is not None
    assert loaded.num_stages == result.profile.num_stages == 2
    for s in (0, 1):
        for i in ("forward", "backward"):
            assert loaded.options(s, i) == result.profile.options(s, i)
    frontier = perseus.optimize(loaded, microbatches=4)
    assert len(frontier) >= 1
    assert frontier.energies_j[0] <= frontier.baseline.energy_j * 1.000001

    # The sidecar.
    meta = json.loads(out.with_suffix(".json").read_text())
    assert result.metadata_path == str(out.with_suffix(".json"))
    assert meta["status"] == "complete"
    assert meta["error"] is None
    assert meta["mode"] == "cpu"
    assert meta["clocks_locked"] is True
    assert meta["device"]["name"] == "Fake NVIDIA H200"
    assert meta["device"]["driver"] == "999.99-fake"
    assert meta["device"]["memory_clock_mhz"] == 2619
    assert meta["frequencies_planned_mhz"] == plan == meta["frequencies_tried_mhz"]
    assert meta["settings"]["windows"] == 2
    assert meta["settings"]["repetitions"] is None
    assert meta["perseus_version"] == perseus.__version__
    assert meta["created"].endswith("+00:00")
    assert meta["blocking_power"]["source"] == "measured"
    assert meta["blocking_power"]["frequency_mhz"] == 1980
    assert meta["blocking_power"]["method"] == "cpu sleep"
    assert [Measurement.from_json(m) for m in meta["measurements"]] == list(result.measurements)
    assert not list(out.parent.glob(".*.tmp"))


@pytest.mark.usefixtures("nvml")
def test_progress_is_shown(fake_libraries, tmp_path):
    stream = io.StringIO()
    settings = {**FAST, "progress": stream}
    profile_stages(
        stages(fake_libraries), tmp_path / "p.csv", frequencies_mhz=[1980, 1000], **settings
    )
    text = stream.getvalue()
    assert "Fake NVIDIA H200 (GPU 0), mode cpu, 2 computations x 2 frequencies" in text
    assert "blocking power" in text
    assert "[4/4] 1000 MHz stage 0 backward:" in text
    assert " J ±" in text
    assert " ms ±" in text
    assert "done: 4 measurements" in text


@pytest.mark.usefixtures("nvml")
def test_fixed_repetitions(fake_libraries, tmp_path):
    comps = stages(fake_libraries)
    result = profile_stages(
        comps, tmp_path / "p.csv", frequencies_mhz=[1980], repetitions=3, **FAST
    )
    assert {m.repetitions for m in result.measurements} == {3}


@pytest.mark.usefixtures("nvml")
def test_early_stop_after_five_rises(fake_libraries, tmp_path):
    # Time ~ 1/f^2: energy has its minimum near 1370 MHz and rises by 10% or more at
    # each clock below 1000 MHz, even when a loaded machine adds a millisecond per sleep.
    comps = {0: {i: Work(fake_libraries, 5e-4, exponent=2) for i in ("forward", "backward")}}
    # No blocking power: effective energy is the raw energy (see the next test).
    result = profile_stages(comps, tmp_path / "p.csv", blocking_power_w=0.0, **FAST)
    plan = [int(f) for f in CLOCKS.split(",")]
    power = result.blocking_power_w
    for instruction in ("forward", "backward"):
        # Effective energy: what a clock costs over a fixed iteration length.
        effective = [
            (m.frequency_mhz, m.energy_j - power * m.time_s)
            for m in result.measurements
            if m.instruction == instruction
        ]
        tried = [f for f, _ in effective]
        assert tried == plan[: len(tried)], "the sweep goes from the highest clock down"
        assert len(tried) < len(plan), "it should have stopped before the lowest clock"
        # Replay the rule: stop exactly when effective energy has been above
        # its running minimum for 5 consecutive frequencies, and not before.
        best, rises = math.inf, 0
        for k, (_, e) in enumerate(effective):
            rises = rises + 1 if e > best else 0
            best = min(best, e)
            assert (rises >= 5) == (k == len(effective) - 1), (effective, k)
        # The slowest useful clock is the one of least effective energy.
        assert result.profile is not None
        cheapest = min(effective, key=lambda fe: fe[1])[0]
        assert result.profile.options(0, instruction).frequency_mhz[-1] == cheapest
    meta = json.loads((tmp_path / "p.json").read_text())
    assert "for 5 consecutive frequencies" in meta["stopped"]["0/forward"]


@pytest.mark.usefixtures("nvml")
def test_early_stop_counts_blocking_power(fake_libraries, tmp_path):
    # The fake draws 100 W idle plus 600 W x (f / f_max)^3. With time ~ 1/f^2
    # raw energy is U-shaped, but energy minus 100 W of blocking power times
    # time falls at every lower clock: each one beats idling, so the sweep
    # must go all the way down, and every clock is useful.
    comps = {0: {i: Work(fake_libraries, 5e-4, exponent=2) for i in ("forward", "backward")}}
    result = profile_stages(comps, tmp_path / "p.csv", blocking_power_w=100.0, **FAST)
    plan = [int(f) for f in CLOCKS.split(",")]
    forward = [m for m in result.measurements if m.instruction == "forward"]
    assert [m.frequency_mhz for m in forward] == plan
    raw = [m.energy_j for m in forward]
    assert min(raw) < raw[-1]  # raw energy rose again at the low clocks
    assert result.profile is not None
    # Options slower than the raw-energy minimum stay useful (here far below
    # it: effective energy falls about linearly with the clock, so timing noise
    # on this loaded, shared CPU can shift only the last clock or two).
    raw_best_mhz = forward[int(np.argmin(raw))].frequency_mhz
    useful = result.profile.options(0, "forward").frequency_mhz
    assert useful[-1] < raw_best_mhz
    assert useful[-1] <= plan[-3]


@pytest.mark.usefixtures("nvml")
def test_patience_and_floor(fake_libraries, tmp_path):
    comps = stages(fake_libraries)
    result = profile_stages(comps, tmp_path / "a.csv", patience=1, blocking_power_w=0.0, **FAST)
    tried = [m.frequency_mhz for m in result.measurements if m.instruction == "forward"]
    assert tried[-1] < tried[-2]
    assert len(tried) <= 7
    result = profile_stages(
        comps, tmp_path / "b.csv", min_frequency_mhz=1100, patience=None, **FAST
    )
    assert sorted({m.frequency_mhz for m in result.measurements}) == [1200, 1500, 1980]
    meta = json.loads((tmp_path / "b.json").read_text())
    assert "floor: 1100 MHz" in meta["stopped"]["0/backward"]


@pytest.mark.usefixtures("nvml")
def test_user_blocking_power_is_not_measured(fake_libraries, tmp_path):
    result = profile_stages(
        stages(fake_libraries),
        tmp_path / "p.csv",
        frequencies_mhz=[1500],
        blocking_power_w=77.5,
        **FAST,
    )
    assert result.blocking_power_w == 77.5
    assert result.profile.blocking_power_w == 77.5
    meta = json.loads((tmp_path / "p.json").read_text())
    assert meta["blocking_power"] == {"watts": 77.5, "source": "user"}


def test_measure_blocking_power_alone(nvml, monkeypatch):
    # The window the host waits is the one asked for: the sleeps it requests,
    # not how long they took on this (possibly loaded) machine.
    slept = []
    real_sleep = time.sleep

    def recording_sleep(seconds):
        slept.append(seconds)
        real_sleep(seconds)

    with monkeypatch.context() as patched:
        patched.setattr(time, "sleep", recording_sleep)
        measured = measure_blocking_power(0, mode="cpu", window_s=0.05, frequency_mhz=1000)
    assert slept == [0.05]
    assert measured.frequency_mhz == 1000
    assert measured.method == "cpu sleep"
    assert measured.window_s >= 0.05  # a sleep never ends early
    assert measured.watts == pytest.approx(fake_power(1000), rel=0.05)
    assert measured.energy_j == pytest.approx(measured.watts * measured.window_s)
    assert nvml.locked(0) == 0
    assert measure_blocking_power(0, mode="cpu", window_s=0.03).frequency_mhz is None
    with pytest.raises(ValueError, match="window_s"):
        measure_blocking_power(0, mode="cpu", window_s=0)


@pytest.mark.usefixtures("nvml")
def test_an_energy_reading_stalled_by_the_scheduler_is_taken_again(monkeypatch):
    # A busy machine: the process loses 20 ms inside the first energy reading
    # (here, the host's clock jumps while the fake's does not). The reading is
    # taken again, so the watts still divide the energy by the time it spans;
    # taken as it was, the window would lose 10 of its 50 ms (+25 %).
    real_counter = time.perf_counter
    calls = [0]

    def stalled_counter():
        calls[0] += 1
        return real_counter() + (0.02 if calls[0] >= 2 else 0.0)

    with monkeypatch.context() as patched:
        patched.setattr(time, "perf_counter", stalled_counter)
        measured = measure_blocking_power(0, mode="cpu", window_s=0.05, frequency_mhz=1000)
    assert measured.watts == pytest.approx(fake_power(1000), rel=0.05)
    assert measured.energy_j == pytest.approx(measured.watts * measured.window_s)


@pytest.mark.usefixtures("nvml")
def test_driver_wait_kernel_runs_through_the_cuda_loader(fake_libraries):
    """The no-CuPy path of the blocking-power kernel, on the fake driver (which runs
    "perseus_wait" as the PTX would: poll the flag, then store spins and seen)."""
    import ctypes

    from perseus.profiler._blocking import _BUFFER_BYTES, _DriverWaiter

    stream = 0xB10C
    waiter = _DriverWaiter(stream)
    try:
        assert ctypes.string_at(waiter.host, _BUFFER_BYTES) == bytes(_BUFFER_BYTES)  # zeroed
        flag = ctypes.c_int32.from_address(waiter.host)
        waiter.launch(int(10e9))
        time.sleep(0.05)
        flag.value = 1
        assert fake_libraries.cuda.fake_cuda_synchronize(stream, 5000) == 0
        spins = ctypes.c_uint64.from_address(waiter.host + 8).value
        seen = ctypes.c_uint64.from_address(waiter.host + 16).value
        assert seen == 1
        assert spins > 1
        # A flag nobody sets: the kernel gives up after its timeout.
        flag.value = 0
        waiter.launch(int(20e6))
        assert fake_libraries.cuda.fake_cuda_synchronize(stream, 5000) == 0
        assert ctypes.c_uint64.from_address(waiter.host + 16).value == 0
    finally:
        waiter.close()
    waiter.close()  # idempotent


@pytest.mark.usefixtures("fake_libraries")
def test_driver_wait_kernel_errors_are_profiler_errors(nvml, monkeypatch):
    from perseus.profiler._blocking import _DriverWaiter

    nvml.configure(fake_cuda_no_context=1)
    with pytest.raises(
        ProfilerError, match=r"CUDA_ERROR_INVALID_CONTEXT.*No CUDA context is current"
    ):
        _DriverWaiter(0)
    monkeypatch.delenv("FAKE_CUDA_NO_CONTEXT")
    nvml.configure(fake_cuda_fail="cuLaunchKernel=400")
    waiter = _DriverWaiter(0)
    try:
        with pytest.raises(ProfilerError, match="cuLaunchKernel: CUDA_ERROR_INVALID_HANDLE"):
            waiter.launch(1000)
    finally:
        waiter.close()


def test_unlocked_profiles_once_at_the_default_clock(nvml, fake_libraries, tmp_path):
    result = profile_stages(
        stages(fake_libraries, 2), tmp_path / "p.csv", lock_clocks=False, **FAST
    )
    assert {m.frequency_mhz for m in result.measurements} == {1980}
    assert nvml.clock_calls() == []
    meta = json.loads((tmp_path / "p.json").read_text())
    assert meta["clocks_locked"] is False
    assert meta["blocking_power"]["frequency_mhz"] is None


@pytest.mark.usefixtures("nvml")
def test_stages_of_one_rank(fake_libraries, tmp_path):
    comps = {3: stages(fake_libraries)[0]}
    result = profile_stages(comps, tmp_path / "p.csv", frequencies_mhz=[1980], **FAST)
    assert result.profile is None  # one stage of a pipeline: concatenate the ranks' CSVs
    assert {r[0] for r in read_csv(tmp_path / "p.csv")} == {3}


# ---- errors and clocks ---------------------------------------------------------------


def test_raising_callable_is_named_and_clocks_reset(nvml, fake_libraries, tmp_path):
    comps = stages(fake_libraries, 2)
    comps[1]["backward"] = Work(fake_libraries, fail_at=1000)
    out = tmp_path / "p.csv"
    with pytest.raises(
        ComputationError,
        match=r"stage 1 backward raised ZeroDivisionError: the model "
        r"blew up \(at 1000 MHz, during warm-up\)",
    ) as info:
        profile_stages(comps, out, patience=None, **FAST)
    error = info.value
    assert (error.stage, error.instruction, error.frequency_mhz) == (1, "backward", 1000)
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert nvml.locked(0) == 0
    assert nvml.clock_calls()[-1] == ("nvmlDeviceResetGpuLockedClocks", ("0",), 0)
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["status"] == "failed"
    assert "ZeroDivisionError" in meta["error"]
    before = meta["measurements"]
    assert keys(before)[-1] == (1, "forward", 1000)  # everything up to the failure is kept

    # Fixed, the same call resumes: nothing measured twice, nothing lost.
    comps[1]["backward"] = Work(fake_libraries)
    result = profile_stages(comps, out, patience=None, **FAST)
    done = keys(result.measurements)
    assert len(done) == len(set(done)) == 2 * 2 * 11
    assert [m.to_json() for m in result.measurements[: len(before)]] == before
    assert len(read_csv(out)) == len(done)
    assert json.loads(out.with_suffix(".json").read_text())["status"] == "complete"


def test_lock_failure_suggests_unlocked_profiling(nvml, fake_libraries, tmp_path, capfd):
    nvml.configure(fail="nvmlDeviceSetGpuLockedClocks=4")
    with pytest.raises(ProfilerError, match=r"could not lock GPU 0 at 1980 MHz.*lock_clocks=False"):
        profile_stages(stages(fake_libraries), tmp_path / "p.csv", **FAST)
    assert "Insufficient Permissions" in capfd.readouterr().err
    assert nvml.locked(0) == 0


@pytest.mark.parametrize("code", [15, 999, 16])  # GPU_IS_LOST, UNKNOWN, RESET_REQUIRED
def test_a_lost_gpu_gets_advice_for_a_lost_gpu(nvml, fake_libraries, tmp_path, code):
    # The GPU fell off the bus after the blocking-power measurement locked it
    # once: profiling without locking would not help; a reset and resume do.
    nvml.configure(fail=f"nvmlDeviceSetGpuLockedClocks={code}@1")
    with pytest.raises(ProfilerError) as info:
        profile_stages(stages(fake_libraries), tmp_path / "p.csv", **FAST)
    message = str(info.value)
    assert message.startswith("could not lock GPU 0 at ")
    assert "lock_clocks=False" not in message
    assert ".." not in message
    assert "nvidia-smi -r" in message
    assert "resume" in message
    assert "not a permission problem" in message
    meta = json.loads((tmp_path / "p.json").read_text())
    assert meta["status"] == "failed"
    assert f"NVML error {code}" in meta["error"]
    assert nvml.calls("nvmlDeviceResetGpuLockedClocks") >= 1  # clocks given back (tried)


def test_a_refused_lock_keeps_its_own_advice(nvml, fake_libraries, tmp_path):
    nvml.configure(fail="nvmlDeviceSetGpuLockedClocks=4")
    with pytest.raises(ProfilerError) as info:
        profile_stages(stages(fake_libraries), tmp_path / "p.csv", **FAST)
    message = str(info.value)
    assert "CAP_SYS_ADMIN" in message
    assert message.endswith("Pass lock_clocks=False to profile at the default clock only")
    assert ".." not in message
    assert "nvidia-smi -r" not in message


def test_a_full_disk_during_the_sweep_leaves_the_sidecar_failed_not_running(
    nvml, fake_libraries, tmp_path, monkeypatch
):
    # The disk fills after a few saves: every later atomic write (a new
    # temporary file) fails with ENOSPC, as on a full disk. The sidecar that
    # is left must not say "running" (a monitor would wait for ever); it says
    # what failed, and still holds what was measured.
    from perseus.profiler import _store

    real_write = _store.write_text_atomically
    writes = {"n": 0}

    def write(path, text):
        writes["n"] += 1
        if writes["n"] > 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path) + ".tmp")
        return real_write(path, text)

    monkeypatch.setattr(_store, "write_text_atomically", write)
    out = tmp_path / "p.csv"
    with pytest.raises(OSError, match="No space left on device"):
        profile_stages(stages(fake_libraries, 2), out, patience=None, **FAST)
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["status"] == "failed"
    assert "No space left on device" in meta["error"]
    assert len(meta["measurements"]) >= 1  # what the last good save held
    assert nvml.locked(0) == 0
    # Resuming once there is room again continues from there.
    monkeypatch.setattr(_store, "write_text_atomically", real_write)
    result = profile_stages(stages(fake_libraries, 2), out, patience=None, **FAST)
    assert json.loads(out.with_suffix(".json").read_text())["status"] == "complete"
    assert len(result.measurements) == 2 * 2 * 11


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"frequencies_mhz": []}, ValueError, "frequencies_mhz is empty"),
        ({"frequencies_mhz": [1500, -3]}, ValueError, "frequency in frequencies_mhz"),
        ({"repetitions": 0}, ValueError, "repetitions must be an integer > 0"),
        ({"windows": 0}, ValueError, "windows must be an integer > 0"),
        ({"window_s": 0.0}, ValueError, "window_s must be a number > 0"),
        ({"warmup_s": -1}, ValueError, "warmup_s must be a number >= 0"),
        ({"patience": 0}, ValueError, "patience must be an integer > 0"),
        ({"blocking_power_w": -5.0}, ValueError, "blocking_power_w"),
        ({"min_frequency_mhz": 5000}, ValueError, "no frequency is at or above min_frequency_mhz"),
        ({"lock_clocks": False, "frequencies_mhz": [1500]}, ValueError, "lock_clocks=True"),
        ({"mode": "tpu"}, ValueError, "mode must be one of"),
        ({"device": -1}, ValueError, "device must be"),
        ({"computations": {}}, ValueError, "computations is empty"),
        ({"computations": {0: {"forward": print}}}, ValueError, "stage 0: no 'backward' callable"),
        (
            {"computations": {0: {"forward": print, "backward": 3}}},
            TypeError,
            "stage 0 backward: int is not callable",
        ),
        (
            {"computations": {0: {"forward": print, "backward": print, "fwd": print}}},
            ValueError,
            "unknown instruction",
        ),
        ({"computations": {-1: {"forward": print, "backward": print}}}, ValueError, "stage ids"),
        ({"computations": print}, TypeError, "computations must map"),
        ({"output": "p.json"}, ValueError, "collide with its .json sidecar"),
    ],
)
def test_bad_arguments(nvml, tmp_path, kwargs, error, message):
    arguments = {
        "computations": {0: {"forward": print, "backward": print}},
        "output": "p.csv",
        **FAST,
    }
    arguments.update(kwargs)
    computations, output = arguments.pop("computations"), tmp_path / "out" / arguments.pop("output")
    with pytest.raises(error, match=message):
        profile_stages(computations, output, **arguments)
    assert nvml.clock_calls() == []  # checked before any clock is touched
    assert not output.parent.exists()  # and before any file is written


@pytest.mark.usefixtures("nvml")
def test_refuses_without_a_gpu_unless_cpu_mode(monkeypatch, tmp_path):
    comps = {0: {"forward": print, "backward": print}}
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(ProfilerUnavailable) as info:
        profile_stages(comps, tmp_path / "p.csv")
    text = str(info.value)
    assert "cannot profile on a GPU" in text
    assert "torch is not installed" in text
    assert 'pip install "perseus-energy[gpu]"' in text
    assert "mode='cpu'" in text
    assert "NVML could not be loaded" not in text  # the fake NVML is there: only torch is missing

    # No driver either: both are named.
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", str(tmp_path / "missing" / "libnvidia-ml.so.1"))
    with pytest.raises(ProfilerUnavailable) as info:
        profile_stages(comps, tmp_path / "p.csv")
    text = str(info.value)
    assert "torch is not installed" in text
    assert "NVML could not be loaded" in text
    assert "no NVIDIA driver" in text

    # CPU mode needs NVML (a fake) for the energy.
    with pytest.raises(ProfilerUnavailable, match="PERSEUS_NVML_LIBRARY"):
        profile_stages(comps, tmp_path / "p.csv", **FAST)
    with pytest.raises(ProfilerUnavailable, match="mode='cpu'"):
        measure_blocking_power(0, mode="cpu", window_s=0.01)
    assert not (tmp_path / "p.json").exists()


# ---- resuming ---------------------------------------------------------------------


def test_resume_after_completion_measures_nothing(nvml, fake_libraries, tmp_path):
    comps = stages(fake_libraries)
    out = tmp_path / "p.csv"
    first = profile_stages(comps, out, frequencies_mhz=[1980, 1200], **FAST)
    (tmp_path / ".p.csv.0badc0de.tmp").write_text("left by a killed run")
    calls = comps[0]["forward"].calls
    again = profile_stages(comps, out, frequencies_mhz=[1980, 1200], **FAST)
    assert comps[0]["forward"].calls == calls
    assert again.measurements == first.measurements
    assert again.blocking_power_w == first.blocking_power_w  # not measured again
    assert not list(tmp_path.glob(".*.tmp"))
    assert [fn for fn, _, _ in nvml.clock_calls()].count("nvmlDeviceSetGpuLockedClocks") == 2

    # More frequencies later: only the new ones are measured.
    more = profile_stages(comps, out, frequencies_mhz=[1980, 1500, 1200], **FAST)
    assert keys(more.measurements)[: len(first.measurements)] == keys(first.measurements)
    assert sorted({m.frequency_mhz for m in more.measurements}) == [1200, 1500, 1980]
    assert len(more.measurements) == 6


def test_resume_refuses_another_model_or_device(nvml, fake_libraries, tmp_path):
    out = tmp_path / "p.csv"
    profile_stages(stages(fake_libraries), out, frequencies_mhz=[1980], **FAST)
    with pytest.raises(ProfilerError, match="for the computations"):
        profile_stages(stages(fake_libraries, 2), out, frequencies_mhz=[1980], **FAST)
    nvml.configure(name="Another GPU")
    with pytest.raises(ProfilerError, match="resume=False"):
        profile_stages(stages(fake_libraries), out, frequencies_mhz=[1980], **FAST)
    fresh = profile_stages(
        stages(fake_libraries, 2), out, frequencies_mhz=[1500], resume=False, **FAST
    )
    assert {m.frequency_mhz for m in fresh.measurements} == {1500}
    assert len(read_csv(out)) == 4
    out.with_suffix(".json").write_text("{not json")
    with pytest.raises(ProfilerError, match="cannot resume"):
        profile_stages(stages(fake_libraries, 2), out, frequencies_mhz=[1500], **FAST)


@pytest.mark.usefixtures("nvml")
def test_second_profiler_on_the_same_output_is_refused(fake_libraries, tmp_path):
    out = tmp_path / "p.csv"

    def nested() -> None:
        profile_stages(stages(fake_libraries), out, frequencies_mhz=[1980], **FAST)

    comps = stages(fake_libraries)
    comps[0]["forward"] = nested
    with pytest.raises(ComputationError) as info:
        profile_stages(comps, out, frequencies_mhz=[1980], **FAST)
    assert "another profiler is writing" in str(info.value.__cause__)
    # no lock file is left beside the profile, whether the run failed or finished
    assert not list(tmp_path.glob(".*.lock"))
    profile_stages(stages(fake_libraries), out, frequencies_mhz=[1980], **FAST)
    assert not list(tmp_path.glob(".*.lock"))
    assert out.exists()


CHILD = textwrap.dedent(
    """
    import ctypes, os, sys, time
    import perseus
    lib = ctypes.CDLL(os.environ["PERSEUS_NVML_LIBRARY"])
    lib.fake_nvml_locked_clock.restype = ctypes.c_uint

    def work():
        time.sleep(0.002 * 1980 / (lib.fake_nvml_locked_clock(0) or 1980))

    comps = {s: {"forward": work, "backward": work} for s in range(2)}
    perseus.profile_stages(
        comps, sys.argv[1], mode="cpu", frequencies_mhz=[1980, 1500, 1200, 1000, 800, 650],
        patience=None, window_s=0.03, windows=2, warmup_s=0.002, blocking_window_s=0.03,
        progress=True,
    )
    print("finished", flush=True)
    """
)


def start_child(out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_measurements(child: subprocess.Popen, sidecar: Path, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise AssertionError(f"child ended early: {child.communicate()}")
        try:
            if len(json.loads(sidecar.read_text())["measurements"]) >= count:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    child.kill()
    raise AssertionError("the child measured too slowly")


def finish_resumed(out: Path, before: list[dict]) -> None:
    # A writer killed between creating its temporary file and renaming it leaves the file
    # behind, and the next run keeps it (only orphans over an hour old are removed: a
    # younger one may be another live writer's). The resumed run must add none of its own.
    left_by_the_kill = set(out.parent.glob(".*.tmp"))
    again = start_child(out)
    stdout, stderr = again.communicate(timeout=60)
    assert again.returncode == 0, stderr
    assert "finished" in stdout
    assert f"resuming with {len(before)} measured" in stderr
    meta = json.loads(out.with_suffix(".json").read_text())
    done = keys(meta["measurements"])
    expected = {
        (s, i, f)
        for s in (0, 1)
        for i in ("forward", "backward")
        for f in (1980, 1500, 1200, 1000, 800, 650)
    }
    assert len(done) == len(set(done))
    assert set(done) == expected
    assert meta["measurements"][: len(before)] == before  # earlier rows kept as they were
    rows = read_csv(out)
    assert len(rows) == len(expected)
    assert {r[:3] for r in rows} == expected
    assert meta["status"] == "complete"
    assert set(out.parent.glob(".*.tmp")) <= left_by_the_kill


@pytest.mark.usefixtures("nvml")
def test_resume_after_sigkill(tmp_path):
    out = tmp_path / "p.csv"
    child = start_child(out)
    wait_for_measurements(child, out.with_suffix(".json"), 5)
    os.killpg(child.pid, signal.SIGKILL)
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    meta = json.loads(out.with_suffix(".json").read_text())
    before = meta["measurements"]
    assert meta["status"] == "running"
    assert 5 <= len(before) < 24
    assert len(read_csv(out)) in (len(before), len(before) - 1)  # the CSV trails by at most one row
    finish_resumed(out, before)


def test_ctrl_c_resets_clocks_and_resumes(nvml, tmp_path):
    out = tmp_path / "p.csv"
    child = start_child(out)
    wait_for_measurements(child, out.with_suffix(".json"), 3)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=30)
    assert child.returncode != 0
    assert "KeyboardInterrupt" in stderr
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["status"] == "interrupted"
    calls = [
        (fn, rc) for _, pid, fn, _, rc in nvml.log() if pid == child.pid and "LockedClocks" in fn
    ]
    assert calls[0][0] == "nvmlDeviceSetGpuLockedClocks"
    assert calls[-1] == ("nvmlDeviceResetGpuLockedClocks", 0)
    finish_resumed(out, meta["measurements"])


# ---- the GPU check script, on the CPU ---------------------------------------------------


def test_gpu_check_script_frequency_choice():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from gpu_check_profiler import pick_frequencies
    finally:
        sys.path.remove(str(REPO / "bench"))
    h200 = list(range(1980, 344, -15))
    chosen = pick_frequencies(h200, 6)
    assert len(chosen) == 6
    assert chosen[0] == 1980
    assert chosen == sorted(chosen, reverse=True)
    assert chosen[-1] == 990
    assert set(chosen) <= set(h200)
    assert pick_frequencies([1410], 6) == [1410]
    assert pick_frequencies([], 6) == []


def test_gpu_check_script_runs_on_the_cpu(nvml, tmp_path):
    pytest.importorskip("torch")
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "gpu_check_profiler.py"),
            str(tmp_path),
            "--cpu",
            "--points",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clocks can be locked; profiling at [1980, 1500, 1000] MHz" in done.stdout
    assert "largest spread across windows" in done.stdout
    assert "P_block:" in done.stdout
    summary = json.loads((tmp_path / "gpu_check_profiler.json").read_text())
    assert summary["frequencies_mhz"] == [1980, 1500, 1000]
    assert "error" not in summary
    profile = perseus.Profile.from_csv(
        tmp_path / "cpu-transformer.csv", blocking_power_w=summary["blocking_power_w"]
    )
    assert profile.num_stages == 1
    assert nvml.locked(0) == 0

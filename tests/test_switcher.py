"""Tests for the frequency switcher (cpp/switcher.*, perseus.switcher) without a GPU.

NVML and the CUDA driver are the fakes in tests/fake_nvml and tests/fake_cuda,
built by conftest.py and loaded through PERSEUS_NVML_LIBRARY and
PERSEUS_CUDA_LIBRARY, as the real libraries would be. The fixture
``fake_nvml`` starts each test with 2 GPUs, SM clocks 210..1980 MHz in steps
of 15, and nothing locked.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
import warnings
from pathlib import Path

import numpy as np
import perseus
import pytest
from perseus import _core
from perseus.cli import main as cli_main
from perseus.switcher import (
    ClockSnapWarning,
    CudaError,
    FrequencySwitcher,
    LibraryLoadError,
    NvmlDevice,
    NvmlError,
    NvmlReturn,
    SwitchLog,
    SwitchRecord,
    SwitchSource,
    reset_clocks,
)

STREAM = 0x5EED  # any integer is a stream to the fake driver


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


# ---- basic behaviour ---------------------------------------------------------


def test_exported_from_package():
    assert perseus.FrequencySwitcher is FrequencySwitcher
    assert "FrequencySwitcher" in perseus.__all__


def test_set_returns_at_once_and_worker_applies(fake_nvml):
    # Each NVML call of the fake takes 0.5 s: if set() waited for the call, the
    # fake would already hold the new clock when set() returns.
    fake_nvml.configure(sleep_ms=500)
    with FrequencySwitcher(0) as sw:
        assert sw.name == "Fake NVIDIA H200"
        assert sw.supported_mhz[0] == 210
        assert sw.supported_mhz[-1] == 1980
        assert sw.applied_mhz is None
        assert sw.set(1500) == 1500
        assert fake_nvml.locked(0) != 1500, "set() waited for the NVML call"
        assert sw.applied_mhz is None
        assert sw.wait(timeout_s=30)
        assert sw.applied_mhz == 1500
        assert fake_nvml.locked(0) == 1500
        log = sw.records()
        assert len(log) == 1
        r = log[0]
        assert (r.requested_mhz, r.applied_mhz, r.status, r.source) == (
            1500,
            1500,
            0,
            SwitchSource.SET,
        )
        assert r.latency_ns >= 30e6
        assert r.requested_ns <= r.time_ns - r.latency_ns
    assert fake_nvml.locked(0) == 0
    assert fake_nvml.init_count() == 0  # every nvmlInit has its nvmlShutdown


def test_nothing_locked_before_first_set(fake_nvml):
    sw = FrequencySwitcher(0)
    assert fake_nvml.calls("nvmlDeviceSetGpuLockedClocks") == 0
    sw.close()
    # Nothing was locked, so nothing is reset either.
    assert fake_nvml.clock_calls() == []
    assert sw.closed


def test_requests_coalesce_to_the_latest(fake_nvml):
    fake_nvml.configure(sleep_ms=80)
    with FrequencySwitcher(0) as sw:
        sw.set(1500)
        wait_until(lambda: fake_nvml.calls("nvmlDeviceSetGpuLockedClocks") == 1)  # worker busy
        for mhz in (1410, 1305, 1200):
            sw.set(mhz)
        assert sw.wait(timeout_s=5)
        applied = [
            args[1] for fn, args, _ in fake_nvml.clock_calls() if fn.startswith("nvmlDeviceSet")
        ]
        assert applied == ["1500", "1200"]
        assert fake_nvml.locked(0) == 1200
        assert list(sw.records().requested_mhz) == [1500, 1200]


def test_request_equal_to_current_clock_is_free(fake_nvml):
    with FrequencySwitcher(0) as sw:
        sw.set(1500)
        sw.wait()
        for _ in range(200):
            assert sw.set(1500) == 1500
        sw.wait()
        assert fake_nvml.calls("nvmlDeviceSetGpuLockedClocks") == 1
        assert len(sw.records()) == 1


def test_reset_gives_default_clocks_and_relocks_later(fake_nvml):
    with FrequencySwitcher(0) as sw:
        sw.set(1500)
        sw.wait()
        sw.reset()
        sw.wait()
        assert fake_nvml.locked(0) == 0
        assert sw.applied_mhz is None
        sw.set(1200)
        sw.wait()
        assert fake_nvml.locked(0) == 1200
        assert [r.source for r in sw.records()] == [
            SwitchSource.SET,
            SwitchSource.RESET,
            SwitchSource.SET,
        ]


def test_unsupported_clock_snaps_with_one_warning(fake_nvml):
    with FrequencySwitcher(0) as sw:
        with pytest.warns(ClockSnapWarning, match=r"1234 MHz is not a supported.*using 1230 MHz"):
            assert sw.set(1234) == 1230
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second warning would fail here
            assert sw.set(1234) == 1230
            assert sw.snap(1238) == 1245
        with pytest.warns(ClockSnapWarning, match="using 1980 MHz"):
            assert sw.set(5000) == 1980
        with pytest.warns(ClockSnapWarning, match="using 210 MHz"):
            assert sw.set(100) == 210
        sw.wait()
        assert fake_nvml.locked(0) == 210
        assert sw.records()[-1].requested_mhz == 100


def test_snapping_tie_goes_to_the_faster_clock(fake_nvml):
    fake_nvml.configure(clocks="1000,1010,1500")
    with FrequencySwitcher(0) as sw:
        assert list(sw.supported_mhz) == [1000, 1010, 1500]
        assert sw.snap(1005) == 1010
        assert sw.snap(1004) == 1000


@pytest.mark.usefixtures("fake_nvml")
def test_invalid_arguments():
    with pytest.raises(IndexError, match="no GPU 7"):
        FrequencySwitcher(7)
    with pytest.raises(ValueError, match="record_capacity"):
        FrequencySwitcher(0, record_capacity=0)
    with FrequencySwitcher(0) as sw:
        with pytest.raises(ValueError, match="positive number of MHz"):
            sw.set(0)
        with pytest.raises(ValueError, match="positive number of MHz"):
            sw.set(-5)
        with pytest.raises(TypeError):
            sw.set(1500.0)
        with pytest.raises(TypeError, match="CUstream handle"):
            sw.set_on_stream("stream", 1500)
        assert sw.set(np.int64(1500)) == 1500


NOT_AN_INTEGER = [
    pytest.param(True, TypeError, "must be an integer, not bool", id="True"),
    pytest.param(np.bool_(True), TypeError, "must be an integer, not bool", id="numpy-bool"),
    pytest.param(1500.0, TypeError, r"must be an integer, not float \(1500.0\)", id="float"),
    pytest.param(float("nan"), TypeError, "must be an integer, not float", id="nan"),
    pytest.param(
        np.float32(1500), TypeError, "must be an integer, not numpy.float32", id="np-float"
    ),
    pytest.param("1500", TypeError, "must be an integer, not str", id="str"),
    pytest.param(None, TypeError, "must be an integer, not NoneType", id="None"),
]
OUT_OF_RANGE_MHZ = [
    pytest.param(
        0, ValueError, r"must be a positive number of MHz \(at most 100000\), got 0$", id="0"
    ),
    pytest.param(100001, ValueError, "got 100001", id="100 GHz"),
    pytest.param(2**32, ValueError, "got 4294967296", id="2**32"),
    pytest.param(2**32 + 1500, ValueError, "got 4294968796", id="2**32+1500"),
    pytest.param(-(2**70), ValueError, "got -1180591620717411303424", id="-2**70"),
    pytest.param(2**100, ValueError, "got 1267650600228229401496703205376", id="2**100"),
]


@pytest.mark.parametrize(("value", "error", "message"), NOT_AN_INTEGER + OUT_OF_RANGE_MHZ)
def test_clock_arguments_are_checked(fake_nvml, value, error, message):
    def raises(argument):
        return pytest.raises(error, match=f"^{argument} .*{message}")

    with FrequencySwitcher(0) as sw:
        with raises("mhz"):
            sw.set(value)
        with raises("mhz"):
            sw.set_on_stream(STREAM, value)
        with raises("mhz"):
            sw.snap(value)
        with raises("min_mhz"):
            NvmlDevice(0).set_locked_clocks(value, 1500)
        with raises("max_mhz"):
            NvmlDevice(0).set_locked_clocks(1500, value)
    if value is not None:  # None leaves memory clocks alone
        with raises("memory_mhz"):
            FrequencySwitcher(0, memory_mhz=value)
    # Nothing was locked: before the fix, True locked 210 MHz and 2**32 + 1500 locked 1500.
    assert fake_nvml.clock_calls() == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"device": True}, TypeError, "^device must be an integer, not bool"),
        ({"device": 0.0}, TypeError, "^device must be an integer, not float"),
        ({"device": -1}, IndexError, "^device must be a CUDA device index >= 0, got -1"),
        ({"device": 2**40}, IndexError, "^no GPU 1099511627776"),
        ({"device": 2**80}, IndexError, "^no GPU 1208925819614629174706176"),
        ({"record_capacity": True}, TypeError, "^record_capacity must be an integer, not bool"),
        ({"record_capacity": -1}, ValueError, "^record_capacity must be between 1 and 16777216"),
        ({"record_capacity": 2**24 + 1}, ValueError, "^record_capacity must be between 1"),
        ({"record_capacity": 2**64}, ValueError, "got 18446744073709551616"),
    ],
)
def test_constructor_arguments_are_checked(fake_nvml, kwargs, error, message):
    with pytest.raises(error, match=message):
        FrequencySwitcher(**kwargs)
    assert fake_nvml.init_count() == 0  # nothing left open


@pytest.mark.usefixtures("fake_nvml")
def test_other_arguments_are_checked():
    with FrequencySwitcher(0) as sw:
        for bad in (True, -1, 2**64):
            with pytest.raises((TypeError, ValueError), match="^stream "):
                sw.set_on_stream(bad, 1500)
        for bad, error in ((-1.0, ValueError), (float("nan"), ValueError), (True, TypeError)):
            with pytest.raises(error, match="^timeout_s "):
                sw.wait(timeout_s=bad)
        with pytest.raises(TypeError, match="^timeout_s must be a number of seconds or None"):
            sw.wait(timeout_s="1")
        assert sw.wait(timeout_s=float("inf"))
        assert sw.wait(timeout_s=0)
        assert sw.wait(timeout_s=2)
    with pytest.raises(TypeError, match="^index must be an integer, not bool"):
        NvmlDevice(True)
    with pytest.raises(ValueError, match=r"min_mhz \(1500\) must not exceed max_mhz \(1005\)"):
        NvmlDevice(0).set_locked_clocks(1500, 1005)
    with pytest.raises(ValueError, match="^memory_mhz must be a positive"):
        NvmlDevice(0).supported_graphics_clocks(memory_mhz=0)


@pytest.mark.usefixtures("fake_nvml")
def test_wait_timeout_is_a_deprecated_alias_of_timeout_s(monkeypatch):
    from perseus import _deprecation

    monkeypatch.setattr(_deprecation, "_warned", set())
    with FrequencySwitcher(0) as sw:
        with pytest.warns(DeprecationWarning, match=r"wait\(timeout=...\) is deprecated"):
            assert sw.wait(timeout=1)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once only
            assert sw.wait(timeout=1)
        with pytest.raises(TypeError, match="timeout_s only"):
            sw.wait(1, timeout=1)


@pytest.mark.usefixtures("fake_nvml")
def test_enums_come_from_the_core():
    assert int(NvmlReturn.ERROR_NO_PERMISSION) == 4
    assert NvmlReturn.ERROR_NOT_SUPPORTED == 3  # an int enum: compares with NvmlError.code
    assert [m.name for m in sorted(SwitchSource.__members__.values(), key=int)] == [
        "SET",
        "STREAM",
        "RESET",
        "CLOSE",
        "RECOVERY",
        "OVERRIDDEN",
        "CLAMPED",
        "CHANGED",
        "REAPPLY",
    ]
    assert not hasattr(perseus.switcher, "SOURCES")
    assert not hasattr(perseus.switcher, "_NVML_NOT_SUPPORTED")


def test_garbage_collected_switcher_resets(fake_nvml):
    sw = FrequencySwitcher(0)
    sw.set(1500)
    sw.wait()
    assert fake_nvml.locked(0) == 1500
    del sw
    gc.collect()
    assert fake_nvml.locked(0) == 0


@pytest.mark.usefixtures("fake_nvml")
def test_closed_switcher_refuses_work():
    sw = FrequencySwitcher(0)
    sw.close()
    sw.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        sw.set(1500)
    assert "closed" in repr(sw)


@pytest.mark.usefixtures("fake_nvml")
def test_records_are_bounded():
    with FrequencySwitcher(0, record_capacity=2) as sw:
        for mhz in (1500, 1410, 1305, 1200, 1095):
            sw.set(mhz)
            sw.wait()
        log = sw.records()
    assert isinstance(log, SwitchLog)
    assert len(log) == 2
    assert log.dropped == 3
    assert list(log.applied_mhz) == [1200, 1095]
    rows = list(log)
    assert all(isinstance(r, SwitchRecord) for r in rows)
    with pytest.raises(AttributeError):
        rows[0].applied_mhz = 1  # frozen
    assert all(isinstance(r.source, SwitchSource) for r in rows)
    assert np.all(log.source == int(SwitchSource.SET))


def test_memory_clock_is_locked_and_given_back(fake_nvml):
    fake_nvml.configure(mem_clocks="2619,1593")
    with FrequencySwitcher(0, memory_mhz=2600) as sw:
        assert sw.memory_mhz == 2619
        assert fake_nvml.locked_memory(0) == 0  # not before the first set
        sw.set(1500)
        sw.wait()
        assert (fake_nvml.locked(0), fake_nvml.locked_memory(0)) == (1500, 2619)
    assert (fake_nvml.locked(0), fake_nvml.locked_memory(0)) == (0, 0)


def test_two_switchers_on_one_gpu_share_its_lock(fake_nvml):
    fake_nvml.configure(mem_clocks="2619,1593")
    a, b = FrequencySwitcher(0, memory_mhz=1593), FrequencySwitcher(0)
    a.set(1500)
    a.wait()
    b.set(1200)
    b.wait()
    assert (fake_nvml.locked(0), fake_nvml.locked_memory(0)) == (1200, 1593)  # the latest wins
    a.close()  # b still holds GPU 0: its clock stays; a's memory lock goes
    assert (fake_nvml.locked(0), fake_nvml.locked_memory(0)) == (1200, 0)
    assert b.set(1305) == 1305
    assert b.wait()
    assert fake_nvml.locked(0) == 1305
    b.close()
    assert fake_nvml.locked(0) == 0


def test_releasing_the_latest_clock_gives_back_the_other_holders(fake_nvml):
    a, b = FrequencySwitcher(0), FrequencySwitcher(0)
    a.set(1500)
    a.wait()
    b.set(1200)
    b.wait()
    b.reset()  # b let go; a is the only holder left, and gets its 1500 MHz back
    b.wait()
    assert fake_nvml.locked(0) == 1500
    b.set(1005)
    b.wait()
    a.close()
    assert fake_nvml.locked(0) == 1005  # a was not the latest: nothing to give back
    b.close()
    assert fake_nvml.locked(0) == 0
    resets = [fn for fn, _, _ in fake_nvml.clock_calls() if fn == "nvmlDeviceResetGpuLockedClocks"]
    assert resets == ["nvmlDeviceResetGpuLockedClocks"]  # only when the last holder let go


def test_a_switcher_that_never_locked_does_not_unlock_another(fake_nvml):
    a = FrequencySwitcher(0)
    a.set(1500)
    a.wait()
    with FrequencySwitcher(0) as b:  # e.g. a profiler's, which fails before it locks anything
        assert b.applied_mhz is None
    assert fake_nvml.locked(0) == 1500
    a.close()
    assert fake_nvml.locked(0) == 0


@pytest.mark.usefixtures("fake_nvml")
def test_nvml_device_by_uuid_ignores_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    gpu = NvmlDevice.from_uuid("GPU-fa4e0001-0000-0000-0000-000000000001")
    assert (gpu.index, gpu.nvml_index, gpu.name) == (-1, 1, "Fake NVIDIA H200")
    with pytest.raises(IndexError, match="no GPU has the UUID 'GPU-nope'"):
        NvmlDevice.from_uuid("GPU-nope")


def test_nvml_device_reads_clocks_and_energy(fake_nvml):
    gpu = NvmlDevice(1)
    assert (gpu.index, gpu.nvml_index, gpu.uuid) == (
        1,
        1,
        "GPU-fa4e0001-0000-0000-0000-000000000001",
    )
    assert gpu.supported_graphics_clocks()[-1] == 1980
    assert list(gpu.supported_memory_clocks()) == [2619]
    e0 = gpu.total_energy_mj()
    gpu.set_locked_clocks(1005, 1005)
    assert gpu.clock_mhz("sm") == 1005
    assert gpu.clock_mhz("memory") == 2619
    time.sleep(0.02)
    assert gpu.total_energy_mj() > e0
    gpu.reset_locked_clocks()
    assert fake_nvml.locked(1) == 0
    assert _core.nvml_device_count() == 2
    assert _core.nvml_driver_version() == "999.99-fake"
    with pytest.raises(ValueError, match="kind"):
        gpu.clock_mhz("video")


# ---- device numbering ---------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "device", "nvml_index"),
    [
        ("1", 0, 1),
        ("1,0", 1, 0),
        ("2,1", 1, 1),
        ("GPU-fa4e0001-0000-0000-0000-000000000001", 0, 1),
        ("0,GPU-fa4e0002", 1, 2),  # CUDA also takes a unique UUID prefix
    ],
)
def test_cuda_visible_devices_maps_to_nvml_index(
    fake_nvml, monkeypatch, visible, device, nvml_index
):
    fake_nvml.configure(devices=3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _core.nvml_device_count() == len(visible.split(","))
    with FrequencySwitcher(device) as sw:
        assert sw.nvml_index == nvml_index
        sw.set(1500)
        sw.wait()
        assert fake_nvml.locked(nvml_index) == 1500
    assert fake_nvml.locked(nvml_index) == 0


@pytest.mark.parametrize(
    ("visible", "device", "message"),
    [
        pytest.param("", 0, "makes 0 GPU", id="empty"),
        pytest.param("0,-1,1", 1, "makes 1 GPU", id="cut-at-invalid-entry"),
        pytest.param("5", 0, "is not a GPU", id="no-such-index"),
        pytest.param("GPU-fa4e", 0, "matches 2 GPU UUIDs", id="ambiguous-uuid-prefix"),
        pytest.param("GPU-ffff", 0, "matches 0 GPU UUIDs", id="unknown-uuid"),
    ],
)
def test_cuda_visible_devices_errors(fake_nvml, monkeypatch, visible, device, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(IndexError, match=message):
        FrequencySwitcher(device)
    assert fake_nvml.init_count() == 0


# ---- errors ----------------------------------------------------------------------


def test_no_permission_is_raised_from_next_set(fake_nvml, capfd):
    fake_nvml.configure(fail="nvmlDeviceSetGpuLockedClocks=4")
    sw = FrequencySwitcher(0)
    sw.set(1500)  # returns: the worker makes the call
    wait_until(lambda: sw.failed)
    err = capfd.readouterr().err
    assert "Insufficient Permissions" in err
    assert "raised from the next set()" in err
    with pytest.raises(NvmlError, match="Insufficient Permissions") as info:
        sw.set(1410)
    error = info.value
    assert error.code == 4
    assert error.function == "nvmlDeviceSetGpuLockedClocks"
    assert "CAP_SYS_ADMIN" in str(error)
    assert "root" in str(error)
    with pytest.raises(NvmlError):  # it stays failed
        sw.set(1305)
    sw.close()  # already raised: close() does not raise it again
    assert fake_nvml.locked(0) == 0
    assert fake_nvml.calls("nvmlDeviceResetGpuLockedClocks") == 0  # nothing was locked
    assert [r.status for r in sw.records()] == [4]


def test_not_supported_is_raised_from_close(fake_nvml, capfd):
    fake_nvml.configure(fail="nvmlDeviceSetGpuLockedClocks=3")
    sw = FrequencySwitcher(0)
    sw.set(1500)
    wait_until(lambda: sw.failed)
    with pytest.raises(NvmlError, match="Not Supported.*Volta") as info:
        sw.close()
    assert info.value.code == 3
    assert "Not Supported" in capfd.readouterr().err
    assert fake_nvml.locked(0) == 0
    sw.close()  # raised once only


def test_wait_raises_worker_error(fake_nvml):
    fake_nvml.configure(fail="nvmlDeviceSetGpuLockedClocks=4")
    with FrequencySwitcher(0) as sw:
        sw.set(1500)
        with pytest.raises(NvmlError, match="Insufficient Permissions"):
            sw.wait(timeout_s=5)


def test_error_after_a_lock_resets_at_once(fake_nvml):
    fake_nvml.configure(fail="nvmlDeviceSetGpuLockedClocks=4@1")  # the second call fails
    sw = FrequencySwitcher(0)
    sw.set(1500)
    sw.wait()
    assert fake_nvml.locked(0) == 1500
    sw.set(1410)
    wait_until(lambda: sw.failed)
    wait_until(lambda: len(sw.records()) == 3)
    assert fake_nvml.locked(0) == 0  # no stale lock left behind
    assert [r.source for r in sw.records()] == [
        SwitchSource.SET,
        SwitchSource.SET,
        SwitchSource.RECOVERY,
    ]
    with pytest.raises(NvmlError):
        sw.close()
    assert fake_nvml.locked(0) == 0


def test_failed_reset_at_close_is_raised(fake_nvml, capfd):
    fake_nvml.configure(fail="nvmlDeviceResetGpuLockedClocks=15")
    sw = FrequencySwitcher(0)
    sw.set(1500)
    sw.wait()
    with pytest.raises(NvmlError, match="GPU is lost"):
        sw.close()
    assert "perseus reset-clocks" in capfd.readouterr().err


def test_init_failure_has_a_hint(fake_nvml):
    fake_nvml.configure(fail="nvmlInit_v2=9")
    with pytest.raises(NvmlError, match="nvmlInit_v2: Driver Not Loaded.*nvidia-smi") as info:
        FrequencySwitcher(0)
    assert info.value.code == 9
    assert isinstance(info.value, RuntimeError)


@pytest.mark.usefixtures("fake_libraries")
def test_missing_nvml_library_names_it_and_the_variable(monkeypatch, tmp_path):
    missing = tmp_path / "nowhere" / "libnvidia-ml.so.1"
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", str(missing))
    with pytest.raises(LibraryLoadError, match="PERSEUS_NVML_LIBRARY") as info:
        FrequencySwitcher(0)
    assert str(missing) in str(info.value)
    assert isinstance(info.value, OSError)
    with pytest.raises(LibraryLoadError, match="libnvidia-ml.so.1"):
        reset_clocks()


def test_missing_cuda_library_names_it_and_the_variable(fake_nvml, monkeypatch, tmp_path):
    missing = tmp_path / "nowhere" / "libcuda.so.1"
    monkeypatch.setenv("PERSEUS_CUDA_LIBRARY", str(missing))
    with FrequencySwitcher(0) as sw:
        with pytest.raises(LibraryLoadError, match="PERSEUS_CUDA_LIBRARY") as info:
            sw.set_on_stream(STREAM, 1500)
        assert "libcuda.so.1" in str(info.value)
        sw.set(1500)  # the switcher itself still works
        sw.wait()
        assert fake_nvml.locked(0) == 1500


@pytest.mark.usefixtures("fake_libraries")
def test_library_without_a_required_symbol(monkeypatch):
    # libm is a real shared library, but not NVML.
    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", "libm.so.6")
    with pytest.raises(LibraryLoadError, match="no symbol nvmlInit_v2"):
        FrequencySwitcher(0)


# ---- many threads ---------------------------------------------------------------


def test_many_threads_calling_set(fake_nvml):
    fake_nvml.configure(sleep_ms=1)
    clocks = [1005, 1200, 1410, 1500, 1755, 1980]
    errors = []
    with FrequencySwitcher(0) as sw:
        start = threading.Barrier(9)

        def hammer(seed):
            rng = random.Random(seed)
            try:
                start.wait()
                for _ in range(2000):
                    sw.set(rng.choice(clocks))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        def reader():
            start.wait()
            for _ in range(50):
                sw.records()
                time.sleep(0.001)

        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
        threads.append(threading.Thread(target=reader))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        sw.set(1605)
        assert sw.wait(timeout_s=5)
        assert fake_nvml.locked(0) == 1605
        assert sw.applied_mhz == 1605
        log = sw.records()
        assert np.all(log.status == 0)
        assert set(log.applied_mhz[:-1].tolist()) <= set(clocks)
        assert len(log) == fake_nvml.calls("nvmlDeviceSetGpuLockedClocks")
        assert len(log) < 8 * 2000 / 4  # coalescing: far fewer NVML calls than requests
        assert np.all(np.diff(log.time_ns) > 0)
    assert fake_nvml.locked(0) == 0


# ---- stream-ordered switching ----------------------------------------------------


def test_stream_switch_lands_between_kernels(fake_nvml, fake_libraries):
    cuda = fake_libraries.cuda
    with FrequencySwitcher(0) as sw:
        cuda.fake_cuda_launch_kernel(STREAM, 100_000, 1)  # 100 ms
        t0 = time.monotonic_ns()
        assert sw.set_on_stream(STREAM, 1500) == 1500
        t_returned = time.monotonic_ns()
        cuda.fake_cuda_launch_kernel(STREAM, 100_000, 2)
        sw.set_on_stream(STREAM, 1200)
        cuda.fake_cuda_launch_kernel(STREAM, 1_000, 3)
        assert fake_nvml.locked(0) == 0  # the GPU has not reached the first point yet
        assert cuda.fake_cuda_synchronize(STREAM, 5000) == 0
        assert sw.wait(timeout_s=5)
        events = {(e, i): t for t, e, i in fake_nvml.cuda_log()}
        log = sw.records()
    # set_on_stream enqueues and returns: it came back before the kernel ahead
    # of it ended (ordered by the fake's clock, not bounded by the wall clock).
    assert t0 < t_returned < events["kernel_end", 1]
    assert list(log.applied_mhz[:2]) == [1500, 1200]
    assert [r.source for r in log][:2] == [SwitchSource.STREAM] * 2
    # Each target was handed over after the kernel before it and before the one after it.
    assert events["kernel_end", 1] <= log.requested_ns[0] <= events["kernel_start", 2]
    assert events["kernel_end", 2] <= log.requested_ns[1] <= events["kernel_start", 3]
    # ... and NVML was called after that (never before the GPU got there).
    sets = [
        (t, args) for t, _, fn, args, _ in fake_nvml.log() if fn == "nvmlDeviceSetGpuLockedClocks"
    ]
    assert sets[0][1][1] == "1500"
    assert sets[0][0] >= events["kernel_end", 1]
    assert sets[1][1][1] == "1200"
    assert sets[1][0] >= events["kernel_end", 2]


def test_stream_switch_waits_for_the_gpu(fake_nvml, fake_libraries):
    cuda = fake_libraries.cuda
    cuda.fake_cuda_pause(STREAM, 1)  # the "GPU" is busy with earlier work
    try:
        with FrequencySwitcher(0) as sw:
            sw.set_on_stream(STREAM, 1500)
            assert sw._native.pending_stream_callbacks == 1
            time.sleep(0.05)
            assert sw.wait(timeout_s=1)
            assert fake_nvml.locked(0) == 0
            cuda.fake_cuda_pause(STREAM, 0)
            assert cuda.fake_cuda_synchronize(STREAM, 5000) == 0
            assert sw._native.pending_stream_callbacks == 0
            sw.wait()
            assert fake_nvml.locked(0) == 1500
    finally:
        cuda.fake_cuda_pause(STREAM, 0)


def test_stream_objects_and_snapping(fake_nvml, fake_libraries):
    torch_like = types.SimpleNamespace(cuda_stream=STREAM)  # torch.cuda.Stream
    cupy_like = types.SimpleNamespace(ptr=STREAM)  # cupy.cuda.Stream
    with FrequencySwitcher(0) as sw:
        with pytest.warns(ClockSnapWarning, match="using 1230 MHz"):
            assert sw.set_on_stream(torch_like, 1234) == 1230
        assert fake_libraries.cuda.fake_cuda_synchronize(STREAM, 5000) == 0
        sw.wait()
        assert fake_nvml.locked(0) == 1230
        sw.set_on_stream(cupy_like, 1005)
        assert fake_libraries.cuda.fake_cuda_synchronize(STREAM, 5000) == 0
        sw.wait()
        assert fake_nvml.locked(0) == 1005
        assert sw.records()[0].requested_mhz == 1234


def test_host_functions_after_close_do_nothing(fake_nvml, fake_libraries):
    cuda = fake_libraries.cuda
    cuda.fake_cuda_pause(STREAM, 1)
    try:
        sw = FrequencySwitcher(0)
        sw.set_on_stream(STREAM, 1500)
        sw.close()
        other = FrequencySwitcher(0)
        other.set_on_stream(STREAM, 1200)
        del other  # destroyed with a host function still queued: its state is kept alive
        gc.collect()
        cuda.fake_cuda_pause(STREAM, 0)
        assert cuda.fake_cuda_synchronize(STREAM, 5000) == 0
        assert fake_nvml.locked(0) == 0
        assert fake_nvml.calls("nvmlDeviceSetGpuLockedClocks") == 0
    finally:
        cuda.fake_cuda_pause(STREAM, 0)


def test_cuda_error_is_raised_synchronously(fake_nvml):
    fake_nvml.configure(fake_cuda_fail="cuLaunchHostFunc=201")
    with FrequencySwitcher(0) as sw:
        with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_CONTEXT.*current") as info:
            sw.set_on_stream(STREAM, 1500)
        assert info.value.code == 201
        assert sw._native.pending_stream_callbacks == 0
        sw.set(1500)
        sw.wait()
        assert fake_nvml.locked(0) == 1500


def _real_cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _real_cuda_available(), reason="needs torch and a CUDA GPU")
def test_stream_order_on_a_real_gpu(monkeypatch, capfd):  # pragma: no cover - GPU machines only
    """The real driver: the handover happens after the preceding kernel.

    Runs whether or not this process may lock clocks: a refused lock still
    leaves a record of when the host function handed its target over.
    """
    import torch

    for key in ("PERSEUS_NVML_LIBRARY", "PERSEUS_CUDA_LIBRARY"):
        monkeypatch.delenv(key, raising=False)
    torch.zeros(1, device="cuda")  # a current context on this thread
    stream = torch.cuda.current_stream()
    sw = FrequencySwitcher(torch.cuda.current_device())
    try:
        target = (
            int(sw.supported_mhz[len(sw.supported_mhz) // 2]) if len(sw.supported_mhz) else 1000
        )
        torch.cuda._sleep(100_000_000)  # tens of milliseconds
        t_enqueued = time.monotonic_ns()
        sw.set_on_stream(stream.cuda_stream, target)
        torch.cuda.synchronize()
        t_done = time.monotonic_ns()
        try:
            sw.wait(timeout_s=10)
        except NvmlError as error:
            assert error.code in (3, 4)  # noqa: PT017 (NOT_SUPPORTED / NO_PERMISSION here)
        log = sw.records()
    finally:
        try:
            sw.close()
        except NvmlError:
            pass
    capfd.readouterr()
    assert len(log) >= 1
    assert log[0].applied_mhz == target
    assert log[0].source == SwitchSource.STREAM
    assert t_enqueued < log[0].requested_ns <= t_done


# ---- restoring clocks when the process ends ---------------------------------------
#
# Each scenario runs in a real child process that dies for real. The fake NVML
# keeps the locked clocks in a state file (FAKE_NVML_STATE) that outlives the
# child, and logs every call with the caller's pid, so a test can tell whether
# the child reset its clocks itself or its watchdog did. The watchdog inherits
# the child's stderr, so Child.finish() returns only once the watchdog is done.

SCRIPT_HEAD = """
import ctypes, os, resource, signal, sys, threading, time
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGQUIT: no core file
import perseus
from perseus import _clock_guard as _guard
fake = ctypes.CDLL(os.environ["PERSEUS_NVML_LIBRARY"])
def ready():
    print("watchdog", _guard._watchdog.pid, flush=True)
    print("ready", flush=True)
"""

LOCK_GPU0 = """
sw = perseus.FrequencySwitcher(0)
sw.set(1500); sw.wait()
"""


def body(*parts: str) -> str:
    """Script parts, each dedented on its own, one after the other."""
    return "\n".join(textwrap.dedent(part) for part in parts)


# name: (body, signal to send after "ready" or None, expected exit codes, who resets)
SCENARIOS = {
    "interpreter-exit": (body(LOCK_GPU0, "ready()"), None, (0,), "self"),
    "uncaught-exception": (
        body(LOCK_GPU0, 'ready()\nraise ValueError("training step failed")'),
        None,
        (1,),
        "self",
    ),
    "exception-in-with": (
        """
        try:
            with perseus.FrequencySwitcher(0) as sw:
                sw.set(1500); sw.wait()
                ready()
                raise ValueError("training step failed")
        except ValueError:
            print("clock after with:", fake.fake_nvml_locked_clock(0), flush=True)
        """,
        None,
        (0,),
        "self",
    ),
    "created-in-a-thread": (
        """
        box = []
        t = threading.Thread(target=lambda: box.append(perseus.FrequencySwitcher(0)))
        t.start(); t.join()
        box[0].set(1500); box[0].wait()
        ready()
        """,
        None,
        (0,),
        "self",
    ),
    "sigterm": (
        body(LOCK_GPU0, "ready()\ntime.sleep(30)"),
        signal.SIGTERM,
        (-signal.SIGTERM,),
        "self",
    ),
    "sighup": (
        body(LOCK_GPU0, "ready()\ntime.sleep(30)"),
        signal.SIGHUP,
        (-signal.SIGHUP,),
        "self",
    ),
    "sigquit": (
        body(LOCK_GPU0, "ready()\ntime.sleep(30)"),
        signal.SIGQUIT,
        (-signal.SIGQUIT,),
        "self",
    ),
    "sigterm-chains-to-user-handler": (
        body(
            """
            def handler(signum, frame):
                print("user handler; clock:", fake.fake_nvml_locked_clock(0), flush=True)
                sys.exit(3)
            signal.signal(signal.SIGTERM, handler)
            """,
            LOCK_GPU0,
            "ready()\ntime.sleep(30)",
        ),
        signal.SIGTERM,
        (3,),
        "self",
    ),
    "sigint-uncaught": (
        body(
            LOCK_GPU0,
            """
            ready()
            try:
                time.sleep(30)
            except KeyboardInterrupt:
                print("KeyboardInterrupt; clock:", fake.fake_nvml_locked_clock(0), flush=True)
                raise
            """,
        ),
        signal.SIGINT,
        (-signal.SIGINT, 1),
        "self",
    ),
    "sigint-made-fatal": (
        body("signal.signal(signal.SIGINT, signal.SIG_DFL)", LOCK_GPU0, "ready()\ntime.sleep(30)"),
        signal.SIGINT,
        (-signal.SIGINT,),
        "self",
    ),
    "sigterm-first-switcher-made-off-the-main-thread": (
        """
        box = []
        t = threading.Thread(target=lambda: box.append(perseus.FrequencySwitcher(0)))
        t.start(); t.join()
        # The main thread installs the handlers at its next Python instruction.
        print("handler:", signal.getsignal(signal.SIGTERM).__name__, flush=True)
        box[0].set(1500); box[0].wait()
        ready()
        time.sleep(30)
        """,
        signal.SIGTERM,
        (-signal.SIGTERM,),
        "self",
    ),
    "sigkill": (
        body(LOCK_GPU0, "ready()\ntime.sleep(30)"),
        signal.SIGKILL,
        (-signal.SIGKILL,),
        "watchdog",
    ),
    # A signal perseus does not handle, whose default action ends the process.
    "sigusr1": (
        body(LOCK_GPU0, "ready()\ntime.sleep(30)"),
        signal.SIGUSR1,
        (-signal.SIGUSR1,),
        "watchdog",
    ),
    "os-exit": (body(LOCK_GPU0, "ready()\nos._exit(7)"), None, (7,), "watchdog"),
    "segfault": (
        body(LOCK_GPU0, "ready()\nctypes.string_at(0)"),
        None,
        (-signal.SIGSEGV,),
        "watchdog",
    ),
    "abort": (body(LOCK_GPU0, "ready()\nos.abort()"), None, (-signal.SIGABRT,), "watchdog"),
    "sigkill-after-one-of-two-switchers-closed": (
        """
        a, b = perseus.FrequencySwitcher(0), perseus.FrequencySwitcher(0)
        a.set(1500); a.wait(); b.set(1410); b.wait()
        b.close()  # a still holds GPU 0: the watchdog must still reset it
        ready()
        time.sleep(30)
        """,
        signal.SIGKILL,
        (-signal.SIGKILL,),
        "watchdog",
    ),
}


class Child:
    """A Python child process that prints "ready" once it has locked a clock."""

    def __init__(
        self,
        script: str,
        env_extra: dict | None = None,
        timeout: float = 20.0,
        *,
        script_path: os.PathLike | None = None,
        cwd: os.PathLike | None = None,
        stderr: int = subprocess.PIPE,
    ):
        env = dict(os.environ, **(env_extra or {}))
        if script_path is not None:  # run as `python train.py`, as a job would
            Path(script_path).write_text(script)
            argv = [sys.executable, str(script_path)]
        else:
            argv = [sys.executable, "-c", script]
        # A session of its own, so a hung child and anything it forked can be
        # killed together (a grandchild holding the pipes would block us).
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        # Read the raw pipe (not a buffered reader, whose look-ahead communicate() would lose).
        fd = self.proc.stdout.fileno()
        seen = b""
        deadline = time.monotonic() + timeout
        while b"ready\n" not in seen:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                if ready:  # end of file: the child died
                    out, err = self.proc.communicate(timeout=timeout)
                else:
                    out, err = self._kill()
                raise AssertionError(
                    f"child never got ready ({self.proc.returncode}): {seen + out!r}\n"
                    f"{(err or b'').decode()}"
                )
            seen += chunk
        self._early = seen
        self.watchdog_pid = self.printed_int("watchdog")

    def printed_int(self, label: str) -> int | None:
        """The number the child printed after ``label`` before "ready"."""
        for line in self._early.decode().splitlines():
            if line.startswith(label + " "):
                return int(line.split()[1])
        return None

    def _kill(self) -> tuple[bytes, bytes]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.communicate(timeout=10)

    def finish(self, timeout: float = 20.0) -> tuple[str, str]:
        """Waits for the exit (and the watchdog's); returns what they printed (stdout, stderr)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = self._kill()
            raise AssertionError(
                f"child did not finish in {timeout} s: {(self._early + out)!r}\n"
                f"{(err or b'').decode()}"
            ) from None
        return (self._early + out).decode(), (err or b"").decode()


def state(fake_nvml) -> list[str]:
    """The fake's persisted state, one "index sm_min sm_max mem_min mem_max" line per GPU."""
    return fake_nvml.state_path.read_text().splitlines()


def clock_calls_by_pid(fake_nvml) -> list[tuple[int, str, tuple[str, ...], int]]:
    return [(pid, fn, args, rc) for _, pid, fn, args, rc in fake_nvml.log() if "LockedClocks" in fn]


def process_gone(pid: int, wait_s: float = 0.0) -> bool:
    """True once ``pid`` has exited (a zombie waiting for init to reap it counts)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_clocks_reset_when_the_process_ends(fake_nvml, scenario):
    script_body, signum, codes, who = SCENARIOS[scenario]
    script = SCRIPT_HEAD + textwrap.dedent(script_body)
    child = Child(script, {"FAKE_NVML_STATE": str(fake_nvml.state_path)})
    if signum is not None:
        time.sleep(0.05)  # let it reach time.sleep()
        child.proc.send_signal(signum)
    out, err = child.finish()
    assert child.proc.returncode in codes, (child.proc.returncode, out, err)
    calls = clock_calls_by_pid(fake_nvml)
    assert calls[0][1:3] == ("nvmlDeviceSetGpuLockedClocks", ("0", "1500", "1500"))
    last_pid, *last = calls[-1]
    assert last == ["nvmlDeviceResetGpuLockedClocks", ("0",), 0], calls
    # The fake's persisted state: the GPU is unlocked after the process is gone.
    assert state(fake_nvml)[0] == "0 0 0 0 0"
    watchdog = child.watchdog_pid
    assert watchdog is not None
    assert watchdog != child.proc.pid
    if who == "self":
        # Reset by the process itself, before it died; the watchdog had nothing to do.
        assert {pid for pid, *_ in calls} == {child.proc.pid}, calls
        assert "watchdog:" not in err
    else:
        assert last_pid == watchdog, calls
        assert (
            f"perseus: watchdog: process {child.proc.pid} ended with clocks locked on GPU " in err
        )
        assert (
            "GPU-fa4e0000-0000-0000-0000-000000000000 (NVML 0, Fake NVIDIA H200): SM clocks reset"
            in err
        )
    assert process_gone(watchdog, wait_s=10)  # its job is done, so it is gone
    if scenario == "sigterm-chains-to-user-handler":
        assert "user handler; clock: 0" in out  # reset happened before the chained handler
    if scenario == "sigint-uncaught":
        # KeyboardInterrupt is an exception: nothing is reset until it ends the program.
        assert "KeyboardInterrupt; clock: 1500" in out
    if scenario == "sigterm-first-switcher-made-off-the-main-thread":
        assert "handler: _on_signal" in out
    if scenario == "exception-in-with":
        assert "clock after with: 0" in out
    if scenario == "uncaught-exception":
        assert "training step failed" in err


def test_caught_keyboard_interrupt_keeps_the_switchers(fake_nvml):
    script = SCRIPT_HEAD + body(
        LOCK_GPU0,
        """
        other = perseus.FrequencySwitcher(1)
        other.set(1200); other.wait()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        except KeyboardInterrupt:
            print("caught; clocks:", fake.fake_nvml_locked_clock(0), fake.fake_nvml_locked_clock(1), flush=True)
        sw.set(1410); sw.wait()  # still open, still switching
        print("after; clock:", fake.fake_nvml_locked_clock(0), sw.closed, other.closed, flush=True)
        ready()
        """,
    )
    child = Child(script, {"FAKE_NVML_STATE": str(fake_nvml.state_path)})
    out, err = child.finish()
    assert child.proc.returncode == 0, err
    assert "caught; clocks: 1500 1200" in out
    assert "after; clock: 1410 False False" in out
    assert state(fake_nvml)[:2] == ["0 0 0 0 0", "1 0 0 0 0"]  # reset at exit


def test_user_signal_handler_that_returns_gets_the_clocks_back(fake_nvml):
    script = SCRIPT_HEAD + body(
        """
        def handler(signum, frame):  # e.g. "checkpoint, then carry on"
            print("handler; clock:", fake.fake_nvml_locked_clock(0), flush=True)
        signal.signal(signal.SIGTERM, handler)
        """,
        LOCK_GPU0,
        """
        os.kill(os.getpid(), signal.SIGTERM)
        sw.wait()
        print("after; clock:", fake.fake_nvml_locked_clock(0), sw.applied_mhz, flush=True)
        ready()
        """,
    )
    child = Child(script, {"FAKE_NVML_STATE": str(fake_nvml.state_path)})
    out, err = child.finish()
    assert child.proc.returncode == 0, err
    assert "handler; clock: 0" in out
    assert "after; clock: 1500 1500" in out
    assert state(fake_nvml)[0] == "0 0 0 0 0"


def test_first_switcher_off_a_finished_main_thread_warns(fake_nvml):
    script = SCRIPT_HEAD + textwrap.dedent(
        """
        def train():
            while threading.main_thread().is_alive():
                time.sleep(0.01)
            sw = perseus.FrequencySwitcher(0)
            sw.set(1500); sw.wait()
            ready()
        threading.Thread(target=train).start()
        """
    )
    child = Child(script, {"FAKE_NVML_STATE": str(fake_nvml.state_path)})
    _, err = child.finish()
    assert child.proc.returncode == 0, err
    assert "RuntimeWarning: perseus: the first FrequencySwitcher was created off the main " in err
    assert "the main thread has already finished" in err
    assert "Create the first switcher on the main thread" in err
    assert state(fake_nvml)[0] == "0 0 0 0 0"  # still reset at exit


def test_watchdog_follows_locks_and_unlocks(fake_nvml):
    fake_nvml.configure(mem_clocks="2619,1593")
    script = SCRIPT_HEAD + textwrap.dedent(
        """
        a = perseus.FrequencySwitcher(0)
        b = perseus.FrequencySwitcher(1, memory_mhz=1593)
        a.set(1500); b.set(1200); a.wait(); b.wait()
        print("locked:", perseus._core.locked_clocks(), flush=True)
        a.reset(); a.wait()
        # Another tool locks GPU 0 after perseus gave it back: not ours to reset.
        perseus.switcher.NvmlDevice(0).set_locked_clocks(1005, 1005)
        print("after reset:", perseus._core.locked_clocks(), flush=True)
        ready()
        time.sleep(30)
        """
    )
    child = Child(script, {"FAKE_NVML_STATE": str(fake_nvml.state_path)})
    uuid0, uuid1 = (f"GPU-fa4e000{i}-0000-0000-0000-00000000000{i}" for i in (0, 1))
    child.proc.kill()
    out, err = child.finish()
    assert f"locked: sm={uuid0} sm={uuid1} memory={uuid1}" in out
    assert f"after reset: sm={uuid1} memory={uuid1}" in out
    assert state(fake_nvml)[:2] == ["0 1005 1005 0 0", "1 0 0 0 0"]
    by_watchdog = [
        (fn, args)
        for pid, fn, args, _ in clock_calls_by_pid(fake_nvml)
        if pid == child.watchdog_pid
    ]
    assert by_watchdog == [
        ("nvmlDeviceResetGpuLockedClocks", ("1",)),
        ("nvmlDeviceResetMemoryLockedClocks", ("1",)),
    ]
    assert "SM clocks reset, memory clocks reset" in err


def test_watchdog_resets_by_uuid_whatever_cuda_visible_devices_says(fake_nvml):
    fake_nvml.configure(devices=3)
    fake_nvml.state_path.write_text("0 1005 1005 0 0\n")  # someone else's lock on NVML 0
    script = SCRIPT_HEAD + body(LOCK_GPU0, "ready()\ntime.sleep(30)")
    child = Child(
        script,
        {"FAKE_NVML_STATE": str(fake_nvml.state_path), "CUDA_VISIBLE_DEVICES": "2,0"},
    )
    child.proc.kill()
    _, err = child.finish()
    assert state(fake_nvml) == ["0 1005 1005 0 0", "1 0 0 0 0", "2 0 0 0 0"]
    assert "GPU GPU-fa4e0002-0000-0000-0000-000000000002 (NVML 2," in err


def test_watchdog_killed_first_is_reaped_and_replaced(fake_nvml):
    script = SCRIPT_HEAD + body(
        LOCK_GPU0,
        """
        first = _guard._watchdog.pid
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (_guard._watchdog is None or _guard._watchdog.pid == first) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        print("first", first, flush=True)
        ready()
        time.sleep(30)
        """,
    )
    child = Child(script, {"FAKE_NVML_STATE": str(fake_nvml.state_path)})
    first, second = child.printed_int("first"), child.watchdog_pid
    assert second is not None
    assert second != first
    # The dead one was reaped by the training process (no zombie left behind)...
    assert not os.path.exists(f"/proc/{first}")
    child.proc.kill()
    _, err = child.finish()
    # ... and the new one, told what is locked, did the first one's job.
    assert f"the clock watchdog (pid {first}) exited with status -9; started another" in err
    assert state(fake_nvml)[0] == "0 0 0 0 0"
    assert clock_calls_by_pid(fake_nvml)[-1][:2] == (second, "nvmlDeviceResetGpuLockedClocks")


def test_forked_child_does_not_keep_the_watchdog_waiting(fake_nvml):
    script = SCRIPT_HEAD + body(
        """
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads, Python >= 3.12
        """,
        LOCK_GPU0,
        """
        pid = os.fork()
        if pid == 0:  # e.g. a DataLoader worker: outlives the parent for a while
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1); os.dup2(devnull, 2)
            time.sleep(30)
            os._exit(0)
        print("forked", pid, flush=True)
        ready()
        time.sleep(30)
        """,
    )
    child = Child(script, {"FAKE_NVML_STATE": str(fake_nvml.state_path)})
    forked = child.printed_int("forked")
    try:
        child.proc.kill()  # the parent only; the forked child lives on
        child.finish()
        assert state(fake_nvml)[0] == "0 0 0 0 0"
        assert not process_gone(forked)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(forked, signal.SIGKILL)


def test_forked_child_leaves_the_parents_clocks_alone(fake_nvml):
    script = SCRIPT_HEAD + textwrap.dedent(
        """
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads, Python >= 3.12
        sw = perseus.FrequencySwitcher(0)
        sw.set(1500); sw.wait()
        pid = os.fork()
        if pid == 0:
            try:
                sw.set(1200)
            except RuntimeError as error:
                print("child:", error, flush=True)
            sw.close()
            print("child locks:", repr(perseus._core.locked_clocks()), flush=True)
            sys.exit(0)  # runs the child's atexit hooks
        os.waitpid(pid, 0)
        print("parent after child: clock", fake.fake_nvml_locked_clock(0), flush=True)
        ready()
        """
    )
    child = Child(script)
    out, err = child.finish()
    assert child.proc.returncode == 0, err
    assert "child: this FrequencySwitcher belongs to the parent process" in out
    assert "child locks: ''" in out
    assert "parent after child: clock 1500" in out
    parent = child.proc.pid
    calls = [(pid, fn) for pid, fn, _, _ in clock_calls_by_pid(fake_nvml)]
    assert calls == [
        (parent, "nvmlDeviceSetGpuLockedClocks"),
        (parent, "nvmlDeviceResetGpuLockedClocks"),
    ]


def test_watchdog_killed_with_the_process_then_reset_clocks_command(fake_nvml):
    """What nothing can cover (the job's cgroup torn down, say): `perseus reset-clocks` repairs."""
    script = SCRIPT_HEAD + textwrap.dedent(
        """
        a, b = perseus.FrequencySwitcher(0), perseus.FrequencySwitcher(1)
        a.set(1500); b.set(1200); a.wait(); b.wait()
        ready()
        time.sleep(30)
        """
    )
    env = {"FAKE_NVML_STATE": str(fake_nvml.state_path)}
    child = Child(script, env)
    os.kill(child.watchdog_pid, signal.SIGKILL)
    child.proc.kill()  # SIGKILL both: nothing can run
    child.finish()
    assert state(fake_nvml)[:2] == ["0 1500 1500 0 0", "1 1200 1200 0 0"]
    done = subprocess.run(
        [sys.executable, "-m", "perseus", "reset-clocks"],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "GPU 0 (NVML 0, Fake NVIDIA H200): SM clocks reset, memory clocks reset" in done.stdout
    assert "GPU 1 (NVML 1" in done.stdout
    assert state(fake_nvml)[:2] == ["0 0 0 0 0", "1 0 0 0 0"]


# ---- perseus reset-clocks ---------------------------------------------------------


def test_reset_clocks_command_one_device(fake_nvml, capsys):
    NvmlDevice(0).set_locked_clocks(1500, 1500)
    NvmlDevice(1).set_locked_clocks(1500, 1500)
    assert cli_main(["reset-clocks", "--device", "1"]) == 0
    assert "GPU 1 (NVML 1" in capsys.readouterr().out
    assert (fake_nvml.locked(0), fake_nvml.locked(1)) == (1500, 0)
    assert cli_main(["reset-clocks"]) == 0
    assert (fake_nvml.locked(0), fake_nvml.locked(1)) == (0, 0)


@pytest.mark.usefixtures("fake_nvml")
def test_reset_clocks_command_honours_cuda_visible_devices(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert cli_main(["reset-clocks"]) == 0
    out = capsys.readouterr().out
    assert "GPU 0 (NVML 1" in out
    assert "NVML 0" not in out


def test_reset_clocks_command_errors(fake_nvml, capsys, monkeypatch, tmp_path):
    fake_nvml.configure(fail="nvmlDeviceResetGpuLockedClocks=4")
    assert cli_main(["reset-clocks", "--device", "0"]) == 1
    assert "Insufficient Permissions" in capsys.readouterr().out

    fake_nvml.configure(fail="nvmlDeviceResetMemoryLockedClocks=3")
    assert cli_main(["reset-clocks", "--device", "0"]) == 0
    assert "memory clocks not supported" in capsys.readouterr().out

    assert cli_main(["reset-clocks", "--device", "5"]) == 1
    assert "no GPU 5" in capsys.readouterr().err

    monkeypatch.setenv("PERSEUS_NVML_LIBRARY", str(tmp_path / "libnvidia-ml.so.1"))
    assert cli_main(["reset-clocks"]) == 2
    assert "PERSEUS_NVML_LIBRARY" in capsys.readouterr().err


def test_reset_clocks_function(fake_nvml):
    NvmlDevice(0).set_locked_clocks(1500, 1500)
    results = reset_clocks()
    assert [r.device for r in results] == [0, 1]
    assert all(r.ok for r in results)
    assert results[0].gpu == "reset"
    assert fake_nvml.locked(0) == 0


def test_hint_table():
    assert "CAP_SYS_ADMIN" in _core.nvml_error_hint(4)
    assert _core.nvml_error_hint(12345) == ""


# ---- a watchdog that cannot be stalled or stopped short --------------------------


def test_stopped_watchdog_never_stalls_the_switchers(fake_nvml):
    """A watchdog stopped (SIGSTOP) for 10,000 lock/unlock cycles costs one warning, no more."""
    script = SCRIPT_HEAD + textwrap.dedent(
        """
        from perseus import _core
        a = perseus.FrequencySwitcher(0, verify_delay_s=0.01, verify_interval_s=0.05)
        b = perseus.FrequencySwitcher(1)
        b.set(1200); b.wait()
        watchdog = _guard._watchdog.pid
        os.kill(watchdog, signal.SIGSTOP)
        for _ in range(10000):  # each lock and each reset changes the set the watchdog is sent
            a.set(1500); a.wait(); a.reset(); a.wait()
        print("locked during the stop:", fake.fake_nvml_calls(b"nvmlDeviceSetGpuLockedClocks"))
        print("stalls", _core.clock_watchdog_stalls(), flush=True)
        print("behind", int(_core.clock_watchdog_behind()), flush=True)
        b.close()  # a reset while the watchdog cannot read: never blocks
        print("gpu 1 after close:", fake.fake_nvml_locked_clock(1), flush=True)
        a.set(1410); a.wait()
        os.kill(watchdog, signal.SIGCONT)
        # No further change: a's periodic read-back flushes what waited.
        deadline = time.monotonic() + 30
        while _core.clock_watchdog_behind() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("behind", int(_core.clock_watchdog_behind()), flush=True)
        print("mismatches", a.clock_mismatches, flush=True)
        ready()
        os._exit(0)  # no close: the watchdog must know GPU 0 is locked
        """
    )
    child = Child(script, {"FAKE_NVML_STATE": str(fake_nvml.state_path)}, timeout=300)
    out, err = child.finish()
    assert child.proc.returncode == 0, (out, err)
    assert "locked during the stop: 10001" in out  # every cycle reached the GPU
    assert "mismatches {'overridden': 0, 'clamped': 0, 'changed': 0}" in out
    stalls = int(out.split("stalls ")[1].split()[0])
    assert stalls > 0
    assert "behind 1" in out
    assert out.rstrip().endswith("ready")
    assert out.count("behind 0") == 1
    assert "gpu 1 after close: 0" in out
    assert err.count("the clock watchdog is not reading its socket") == 1, err
    # Caught up after SIGCONT: it reset GPU 0 once the process was gone.
    calls = clock_calls_by_pid(fake_nvml)
    assert calls[-1] == (child.watchdog_pid, "nvmlDeviceResetGpuLockedClocks", ("0",), 0)
    assert state(fake_nvml)[:2] == ["0 0 0 0 0", "1 0 0 0 0"]


def test_watchdog_resets_every_gpu_before_printing_to_a_broken_stderr(fake_nvml):
    """`train.py 2>&1 | tee log` after tee died: every GPU is reset all the same."""
    script = SCRIPT_HEAD + textwrap.dedent(
        """
        switchers = [perseus.FrequencySwitcher(i) for i in range(4)]
        for s in switchers:
            s.set(1500); s.wait()
        ready()
        time.sleep(30)
        """
    )
    read_end, write_end = os.pipe()
    env = {"FAKE_NVML_STATE": str(fake_nvml.state_path), "FAKE_NVML_DEVICES": "4"}
    try:
        child = Child(script, env, stderr=write_end)
    finally:
        os.close(write_end)
    os.close(read_end)  # the reader is gone: writes to stderr fail with EPIPE
    child.proc.kill()
    child.finish()
    assert process_gone(child.watchdog_pid, wait_s=20)
    assert state(fake_nvml) == [f"{i} 0 0 0 0" for i in range(4)]
    resets = [c for c in clock_calls_by_pid(fake_nvml) if c[1] == "nvmlDeviceResetGpuLockedClocks"]
    assert sorted(args for pid, _, args, _ in resets if pid == child.watchdog_pid) == [
        (str(i),) for i in range(4)
    ]


def test_watchdog_starts_beside_modules_that_shadow_the_standard_library(fake_nvml, tmp_path):
    """A job run from a directory holding signal.py, types.py and enum.py keeps its watchdog."""
    job, workdir = tmp_path / "job", tmp_path / "workdir"
    job.mkdir()
    workdir.mkdir()
    for name in ("signal", "types", "enum"):
        (workdir / f"{name}.py").write_text(
            f'raise SystemExit("the working directory\'s {name}.py")\n'
        )
    script = SCRIPT_HEAD + body(LOCK_GPU0, "time.sleep(1.5)\nready()\ntime.sleep(30)")
    child = Child(
        script,
        {"FAKE_NVML_STATE": str(fake_nvml.state_path)},
        script_path=job / "train.py",
        cwd=workdir,
    )
    child.proc.kill()
    _, err = child.finish()
    assert "working directory" not in err, err
    assert "keeps exiting" not in err, err
    assert process_gone(child.watchdog_pid, wait_s=10)
    assert clock_calls_by_pid(fake_nvml)[-1] == (
        child.watchdog_pid,
        "nvmlDeviceResetGpuLockedClocks",
        ("0",),
        0,
    )
    assert state(fake_nvml)[0] == "0 0 0 0 0"


@pytest.mark.parametrize("ending", ["sigterm", "exit", "close"])
def test_hung_nvml_call_does_not_hold_the_exit(fake_nvml, ending):
    """A GPU fallen off the bus: close() gives up after PERSEUS_CLOSE_TIMEOUT_S, names the GPU
    and `perseus reset-clocks`, and the watchdog, still armed, resets once the process is gone."""
    finish = {
        "sigterm": "time.sleep(30)",
        "exit": "pass",
        "close": """
            try:
                a.close()
            except RuntimeError as error:
                print("raised:", "GPU 0 (NVML 0" in str(error), a._native.hung, flush=True)
            a.close()  # idempotent, and quick
            print("closed twice", flush=True)
            """,
    }[ending]
    script = SCRIPT_HEAD + body(
        """
        a, b = perseus.FrequencySwitcher(0), perseus.FrequencySwitcher(1)
        a.set(1500); b.set(1200); a.wait(); b.wait()
        # From now on, in this process only (the watchdog is already running),
        # resetting a GPU never returns.
        os.environ["FAKE_NVML_FAIL"] = "nvmlDeviceResetGpuLockedClocks=hang"
        fake.fake_nvml_reload()
        ready()
        """,
        finish,
    )
    env = {"FAKE_NVML_STATE": str(fake_nvml.state_path), "PERSEUS_CLOSE_TIMEOUT_S": "0.5"}
    child = Child(script, env)
    if ending == "sigterm":
        time.sleep(0.05)
        child.proc.send_signal(signal.SIGTERM)
    out, err = child.finish(timeout=30)
    assert child.proc.returncode == (-signal.SIGTERM if ending == "sigterm" else 0), (out, err)
    assert "GPU 0 (NVML 0, Fake NVIDIA H200, GPU-fa4e" in err, err
    assert "has not returned after 0.5 s" in err
    assert "`perseus reset-clocks`" in err
    if ending != "close":
        assert "GPU 1 (NVML 1" in err  # each GPU gave up on its own, none waited forever
    else:
        assert "raised: True True" in out
        assert "closed twice" in out
    # The watchdog (whose NVML is healthy) reset both GPUs once the process was gone.
    assert process_gone(child.watchdog_pid, wait_s=10)
    assert state(fake_nvml)[:2] == ["0 0 0 0 0", "1 0 0 0 0"]
    by_watchdog = {
        args for pid, fn, args, _ in clock_calls_by_pid(fake_nvml) if pid == child.watchdog_pid
    }
    assert by_watchdog == {("0",), ("1",)}


@pytest.mark.usefixtures("fake_nvml")
def test_reset_clocks_command_with_no_visible_gpu(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cli_main(["reset-clocks"]) == 1
    err = capsys.readouterr().err
    assert "no GPU is visible (CUDA_VISIBLE_DEVICES='')" in err
    assert "nothing was reset" in err


# ---- read-back: the clock the GPU really runs -------------------------------------

QUICK_CHECKS = {"verify_delay_s": 0.01, "verify_interval_s": 0.02}


def mismatch_records(sw, source):
    return [(r.requested_mhz, r.applied_mhz) for r in sw.records() if r.source == source]


def test_read_back_catches_a_driver_override(fake_nvml, capfd):
    fake_nvml.libs.nvml.fake_nvml_override(0, 1800)  # the driver runs it faster than locked
    with FrequencySwitcher(0, **QUICK_CHECKS) as sw:
        sw.set(1500)
        sw.wait()
        wait_until(lambda: sw.clock_mismatches["overridden"] >= 3)
        assert mismatch_records(sw, SwitchSource.OVERRIDDEN)[0] == (1500, 1800)
        assert sw.clock_mismatches["clamped"] == sw.clock_mismatches["changed"] == 0
        # Re-locking would not help: the lock was made once.
        assert fake_nvml.calls("nvmlDeviceSetGpuLockedClocks") == 1
    err = capfd.readouterr().err
    assert err.count("the driver overrode the lock") == 1, err  # once per cause
    assert "GPU 0 (NVML 0, Fake NVIDIA H200): locked at 1500 MHz, it runs at 1800 MHz" in err


def test_read_back_catches_a_silent_clamp(fake_nvml, capfd):
    fake_nvml.configure(clamp_mhz=1200)
    with FrequencySwitcher(0, **QUICK_CHECKS) as sw:
        sw.set(1500)
        sw.wait()
        wait_until(lambda: sw.clock_mismatches["clamped"] >= 1)
        assert mismatch_records(sw, SwitchSource.CLAMPED)[0] == (1500, 1200)
        sw.set(1005)  # under the clamp: runs as locked
        sw.wait()
        seen = sw.clock_mismatches["clamped"]
        before = fake_nvml.calls("nvmlDeviceGetClockInfo")
        wait_until(lambda: fake_nvml.calls("nvmlDeviceGetClockInfo") >= before + 3)
        assert sw.clock_mismatches["clamped"] == seen
    assert "it runs slower, at 1200 MHz" in capfd.readouterr().err


def test_read_back_reapplies_a_lock_reset_from_outside(fake_nvml, capfd):
    with FrequencySwitcher(0, **QUICK_CHECKS) as sw:
        sw.set(1500)
        sw.wait()
        wait_until(lambda: fake_nvml.calls("nvmlDeviceGetClockInfo") >= 2)  # it held
        NvmlDevice(0).reset_locked_clocks()  # `perseus reset-clocks` from another shell
        assert fake_nvml.locked(0) == 0
        wait_until(lambda: fake_nvml.locked(0) == 1500)  # re-applied
        assert sw.clock_mismatches["changed"] == 1
        assert mismatch_records(sw, SwitchSource.CHANGED) == [(1500, 1980)]
        assert [r.status for r in sw.records() if r.source == SwitchSource.REAPPLY] == [0]
        assert sw.applied_mhz == 1500
    assert fake_nvml.locked(0) == 0  # and close() still gives it back
    err = capfd.readouterr().err
    assert "changed its clocks while this one trained; re-applying 1500 MHz" in err


def test_read_back_knows_the_clock_another_switcher_set(fake_nvml):
    a = FrequencySwitcher(0, **QUICK_CHECKS)
    b = FrequencySwitcher(0, **QUICK_CHECKS)
    try:
        a.set(1500)
        a.wait()
        b.set(1200)  # the GPU runs at b's clock now; a must not call that a mismatch
        b.wait()
        before = fake_nvml.calls("nvmlDeviceGetClockInfo")
        wait_until(lambda: fake_nvml.calls("nvmlDeviceGetClockInfo") >= before + 6)
        none = {"overridden": 0, "clamped": 0, "changed": 0}
        assert a.clock_mismatches == none
        assert b.clock_mismatches == none
    finally:
        a.close()
        b.close()


def test_read_back_can_be_turned_off_and_checks_its_arguments(fake_nvml):
    with FrequencySwitcher(0, verify_delay_s=0, verify_interval_s=0) as sw:
        sw.set(1500)
        sw.wait()
        time.sleep(0.05)
    assert fake_nvml.calls("nvmlDeviceGetClockInfo") == 0
    with pytest.raises(ValueError, match="verify_delay_s must be between 0 and 86400 seconds"):
        FrequencySwitcher(0, verify_delay_s=-1)
    with pytest.raises(ValueError, match="verify_interval_s"):
        FrequencySwitcher(0, verify_interval_s=float("nan"))
    with pytest.raises(TypeError, match="verify_interval_s must be a number of seconds"):
        FrequencySwitcher(0, verify_interval_s=True)


# ---- perseus clockd: clock locks for processes that are not root ------------------


@contextlib.contextmanager
def clock_service(tmp_path, *allow: str):
    """`perseus clockd` in a child process, on a socket under tmp_path."""
    sock = tmp_path / "clockd.sock"
    argv = [sys.executable, "-m", "perseus", "clockd", "--socket", str(sock)]
    for rule in allow:
        argv += ["--allow", rule]
    service = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_until(lambda: sock.exists() or service.poll() is not None, timeout=30)
        assert service.poll() is None, service.communicate()[1]
        yield sock, service
    finally:
        if service.poll() is None:
            service.send_signal(signal.SIGTERM)
        try:
            service.wait(timeout=20)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        service.stderr.close()


def test_clockd_locks_for_a_client_and_resets_when_the_client_dies(fake_nvml, tmp_path):
    env = {"FAKE_NVML_STATE": str(fake_nvml.state_path)}
    fake_nvml.configure(state=fake_nvml.state_path)  # the service inherits this environment
    with clock_service(tmp_path, "all:*") as (sock, service):
        script = SCRIPT_HEAD + textwrap.dedent(
            """
            from perseus import _core
            a = perseus.FrequencySwitcher(0, verify_interval_s=0)
            b = perseus.FrequencySwitcher(1, verify_interval_s=0)
            a.set(1500); b.set(1200); a.wait(); b.wait()
            b.close()
            print("service", _core.clockd_socket(), flush=True)
            print("no watchdog", _guard._watchdog is None, flush=True)
            print("ready", flush=True)
            time.sleep(30)
            """
        )
        child = Child(script, dict(env, PERSEUS_CLOCKD_SOCKET=str(sock)))
        assert f"service {sock}" in child._early.decode()
        assert "no watchdog True" in child._early.decode()  # the service is its watchdog
        assert state(fake_nvml)[:2] == ["0 1500 1500 0 0", "1 0 0 0 0"]
        calls = clock_calls_by_pid(fake_nvml)
        assert {pid for pid, *_ in calls} == {service.pid}  # the service made every call
        assert sorted(c[1:3] for c in calls) == [  # two workers: in either order
            ("nvmlDeviceResetGpuLockedClocks", ("1",)),
            ("nvmlDeviceSetGpuLockedClocks", ("0", "1500", "1500")),
            ("nvmlDeviceSetGpuLockedClocks", ("1", "1200", "1200")),
        ]
        child.proc.kill()  # nothing runs in the client: the service must notice
        child.finish()
        wait_until(lambda: state(fake_nvml)[0] == "0 0 0 0 0", timeout=20)
        # The fake rewrites its state file before it logs the call: wait for the line too.
        wait_until(lambda: len(clock_calls_by_pid(fake_nvml)) == 4, timeout=20)
        assert clock_calls_by_pid(fake_nvml)[-1] == (
            service.pid,
            "nvmlDeviceResetGpuLockedClocks",
            ("0",),
            0,
        )
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=20) == 0
        err = service.stderr.read()
    assert (
        "disconnected holding GPU GPU-fa4e0000-0000-0000-0000-000000000000: SM clocks reset" in err
    )
    assert not sock.exists()


@pytest.mark.usefixtures("fake_nvml")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_clockd_stops_cleanly_on_each_signal_that_ends_a_service(tmp_path, signame):
    # SIGHUP too (its terminal closed): it used to end the service by the
    # command line's exception, past the stop that removes its socket and
    # gives clients' clocks back.
    with clock_service(tmp_path, "all:*") as (sock, service):
        service.send_signal(getattr(signal, signame))
        assert service.wait(timeout=20) == 0
        assert "Traceback" not in service.stderr.read()
    assert not sock.exists()


@pytest.mark.usefixtures("fake_nvml")
def test_clockd_unreachable_is_a_clear_error(tmp_path):
    script = SCRIPT_HEAD + textwrap.dedent(
        """
        sw = perseus.FrequencySwitcher(0, verify_interval_s=0)
        try:
            sw.set(1500); sw.wait()
        except perseus.switcher.NvmlError as error:
            print("raised", error.code, flush=True)
        print("ready", flush=True)
        """
    )
    child = Child(script, {"PERSEUS_CLOCKD_SOCKET": str(tmp_path / "nobody-here.sock")})
    out, err = child.finish()
    assert "raised 4" in out
    assert f"cannot reach the clock service at {tmp_path / 'nobody-here.sock'}" in err
    assert "is `perseus clockd` running" in err


# A client that drops to another uid/gid once perseus is imported (the
# interpreter may live where other users cannot read, e.g. under /root), then
# locks GPU 0 and 1 through the service and says what happened to each.
UNPRIVILEGED_CLIENT = """
import json, os, sys
import perseus, perseus.switcher
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
results = {"euid": os.geteuid(), "egid": os.getegid(), "service": perseus._core.clockd_socket()}
switchers = []
for g in (0, 1):
    sw = perseus.FrequencySwitcher(g, verify_delay_s=0, verify_interval_s=0)
    switchers.append(sw)
    try:
        sw.set(1500 if g == 0 else 1200)
        sw.wait(timeout_s=20)
        results[g] = "locked"
    except perseus.switcher.NvmlError as error:
        results[g] = f"{error.code}: {error}"
print(json.dumps(results), flush=True)
print("ready", flush=True)
sys.stdin.read()  # until the test kills it
"""


@contextlib.contextmanager
def shared_directory():
    """A directory every uid may enter, with the fake NVML copied in (tmp_path is root's only)."""
    directory = Path(tempfile.mkdtemp(prefix="perseus-clockd-"))
    try:
        directory.chmod(0o755)
        library = directory / "libnvidia-ml.so.1"
        shutil.copy(os.environ["PERSEUS_NVML_LIBRARY"], library)
        library.chmod(0o755)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def shared_env(shared: Path) -> dict:
    """The fake NVML in ``shared``, its state and call log there, writable by every uid."""
    for name in ("nvml.state", "nvml.log"):
        (shared / name).write_text("")
        (shared / name).chmod(0o666)
    return dict(
        os.environ,
        PERSEUS_NVML_LIBRARY=str(shared / "libnvidia-ml.so.1"),
        FAKE_NVML_STATE=str(shared / "nvml.state"),
        FAKE_NVML_LOG=str(shared / "nvml.log"),
    )


def start_service(sock: Path, env: dict, *allow: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "perseus", "clockd", "--socket", str(sock)]
    for rule in allow:
        argv += ["--allow", rule]
    service = subprocess.Popen(
        argv, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    wait_until(lambda: sock.exists() or service.poll() is not None, timeout=30)
    assert service.poll() is None, service.communicate()[1]
    return service


def run_as(uid: int, gid: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", UNPRIVILEGED_CLIENT, str(uid), str(gid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def read_results(client: subprocess.Popen) -> dict:
    line = client.stdout.readline()
    assert line, client.communicate(timeout=20)[1]
    assert client.stdout.readline() == "ready\n"
    return json.loads(line)


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: the test starts clients that switch to other uids and gids "
    "(os.setuid), and only root may (CI runs as root)",
)
@pytest.mark.usefixtures("fake_nvml")
def test_clockd_rules_hold_for_real_clients_of_other_uids():
    # End to end: a real `perseus clockd` (root), real client processes that
    # dropped to uid 54321 (no passwd entry) and to nobody in gid 54322 (no
    # group entry); the kernel says who they are (SO_PEERCRED), the rules
    # decide, the GPUs' state (the fake's state file, shared with the
    # service) shows what was locked, and a refused client's error names the
    # GPU, itself and the rules, not root or CAP_SYS_ADMIN.
    nobody = 65534
    with shared_directory() as shared:
        env = shared_env(shared)
        state_file, log = shared / "nvml.state", shared / "nvml.log"
        sock = shared / "clockd.sock"
        service = start_service(sock, env, "0:uid:54321", "1:gid:54322")
        clients = []
        try:
            client_env = dict(env, PERSEUS_CLOCKD_SOCKET=str(sock))
            alone = run_as(54321, 54321, client_env)
            clients.append(alone)
            first = read_results(alone)
            assert (first["euid"], first["egid"]) == (54321, 54321)
            assert first["service"] == str(sock)
            assert first["0"] == "locked"
            refusal = first["1"]
            assert refusal.startswith("4: nvmlDeviceSetGpuLockedClocks: Insufficient Permissions")
            for part in (
                f"perseus clockd at {sock} refused sm_lock on GPU GPU-fa4e0001",
                "(NVML 1)",
                "uid 54321 (no passwd entry), gids 54321",
                "its rules: 0:uid:54321, 1:gid:54322",
                "--allow 1:uid:54321",
            ):
                assert part in refusal
            assert "CAP_SYS_ADMIN" not in refusal
            assert "root" not in refusal
            assert state_file.read_text().splitlines()[:2] == ["0 1500 1500 0 0", "1 0 0 0 0"]

            grouped = run_as(nobody, 54322, client_env)
            clients.append(grouped)
            second = read_results(grouped)
            assert (second["euid"], second["egid"]) == (nobody, 54322)
            assert second["1"] == "locked"
            assert second["0"].startswith("4: ")
            assert "on GPU GPU-fa4e0000" in second["0"]
            assert f"uid {nobody}" in second["0"]
            assert "gids 54322" in second["0"]
            assert state_file.read_text().splitlines()[:2] == ["0 1500 1500 0 0", "1 1200 1200 0 0"]

            # Each client's GPU is reset when it dies, the other's kept.
            alone.kill()
            alone.wait(timeout=20)
            wait_until(lambda: state_file.read_text().startswith("0 0 0 0 0"), timeout=20)
            assert state_file.read_text().splitlines()[1] == "1 1200 1200 0 0"
            grouped.kill()
            grouped.wait(timeout=20)
            wait_until(lambda: state_file.read_text().splitlines()[1] == "1 0 0 0 0", timeout=20)
        finally:
            for client in clients:
                if client.poll() is None:
                    client.kill()
                client.communicate(timeout=20)
            if service.poll() is None:
                service.send_signal(signal.SIGTERM)
            err = service.communicate(timeout=20)[1]
        assert service.returncode == 0, err
        assert "denied sm_lock on GPU GPU-fa4e0001-0000-0000-0000-000000000001 (NVML 1)" in err
        assert "(uid 54321)" in err
        assert f"(uid {nobody})" in err
        calls = [line.split() for line in log.read_text().splitlines()]
        # The clients used NVML, but every clock change was the service's.
        assert {int(c[1]) for c in calls} >= {c.pid for c in clients}
        assert {int(c[1]) for c in calls if "LockedClocks" in c[2]} == {service.pid}


DEFAULT_SOCKET = Path("/run/perseus/clockd.sock")


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: the service must listen at /run/perseus (root's) and the client "
    "must switch to another uid (CI runs as root)",
)
@pytest.mark.usefixtures("fake_nvml")
def test_a_client_that_is_not_root_finds_the_service_at_the_default_path():
    # PERSEUS_CLOCKD_SOCKET unset: a process that is not root uses the
    # node's service at /run/perseus/clockd.sock when it is there, and root
    # calls NVML itself.
    if DEFAULT_SOCKET.exists():
        pytest.skip(f"{DEFAULT_SOCKET} exists: a real clock service may be running on this node")
    made_dir = not DEFAULT_SOCKET.parent.exists()
    with shared_directory() as shared:
        env = shared_env(shared)
        env.pop("PERSEUS_CLOCKD_SOCKET", None)
        service = start_service(DEFAULT_SOCKET, env, "all:uid:54321")
        client = None
        try:
            client = run_as(54321, 54321, env)
            results = read_results(client)
            assert results["service"] == str(DEFAULT_SOCKET)
            assert results["0"] == "locked"
            assert results["1"] == "locked"
            lines = (shared / "nvml.state").read_text().splitlines()
            assert lines[:2] == ["0 1500 1500 0 0", "1 1200 1200 0 0"]
            client.kill()
            client.wait(timeout=20)
            wait_until(
                lambda: (
                    (shared / "nvml.state").read_text().splitlines()[:2]
                    == ["0 0 0 0 0", "1 0 0 0 0"]
                ),
                timeout=20,
            )
            root = subprocess.run(
                [sys.executable, "-c", "import perseus; print(perseus._core.clockd_socket())"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert root.stdout == "\n", root.stderr  # root: no service, NVML directly
        finally:
            if client is not None and client.poll() is None:
                client.kill()
            if client is not None:
                client.communicate(timeout=20)
            service.send_signal(signal.SIGTERM)
            err = service.communicate(timeout=20)[1]
            if made_dir:
                shutil.rmtree(DEFAULT_SOCKET.parent, ignore_errors=True)
        assert service.returncode == 0, err
        assert not DEFAULT_SOCKET.exists()
        calls = [line.split() for line in (shared / "nvml.log").read_text().splitlines()]
        assert {int(c[1]) for c in calls if "LockedClocks" in c[2]} == {service.pid}


def test_clockd_rules_decide_who_may_lock_which_gpu(fake_nvml, tmp_path):
    from perseus import clockd

    rules = [clockd.parse_rule("1:uid:1234"), clockd.parse_rule("all:gid:777")]
    service = clockd.ClockService(str(tmp_path / "s.sock"), rules)
    uuid0, uuid1 = NvmlDevice(0).uuid, NvmlDevice(1).uuid

    def client(uid, gids):
        c = object.__new__(clockd._Client)
        c.pid, c.uid, c.gids, c.held = 1, uid, set(gids), set()
        return c

    alice, trainer, stranger = client(1234, [100]), client(2000, [777]), client(3000, [100])
    assert service.handle(alice, f"sm_lock {uuid0} 1500 1500") == 4  # GPU 0 is not hers
    assert fake_nvml.locked(0) == 0
    assert service.handle(alice, f"sm_lock {uuid1} 1500 1500") == 0
    assert service.handle(trainer, f"sm_lock {uuid0} 1410 1410") == 0  # by group
    assert service.handle(stranger, f"sm_lock {uuid1} 1200 1200") == 4
    assert (fake_nvml.locked(0), fake_nvml.locked(1)) == (1410, 1500)
    assert service.handle(alice, "sm_lock nonsense") == 2
    assert service.handle(alice, f"sm_lock {uuid1} 0 1500") == 2
    # Two holders of GPU 1: the first to go leaves it locked, the last resets it.
    assert service.handle(trainer, f"sm_lock {uuid1} 1200 1200") == 0
    service._gone(alice)
    assert fake_nvml.locked(1) == 1200
    service._gone(trainer)
    assert (fake_nvml.locked(0), fake_nvml.locked(1)) == (0, 0)
    for bad, message in [
        ("all", "expected GPUS:WHO"),
        ("all:user:no-such-user-here", "no user named"),
        ("all:uid:x", "must be a number"),
        ("all:team:x", "WHO must be"),
    ]:
        with pytest.raises(ValueError, match=message):
            clockd.parse_rule(bad)

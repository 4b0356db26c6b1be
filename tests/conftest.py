"""Shared pytest configuration: hypothesis profiles, terminal signals, the fake
NVIDIA libraries, and mypy --strict on a user's snippet (the typing tests).

"ci" (the default) has no per-example deadline, since a solve's time varies
with the machine, and a bounded example count so the suite stays fast.
"thorough" runs many more examples; pick it with HYPOTHESIS_PROFILE=thorough.
"""

import os
import signal

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=2000,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# ---------------------------------------------------------------------------
# Terminal signals as a terminal gives them. A shell starts background jobs
# (`cmd &`, nohup, some CI runners) with SIGINT and SIGQUIT, and nohup also
# SIGHUP, ignored; children inherit that, and perseus rightly leaves ignored
# signals alone. The tests that send these signals to a child process are
# about a program run normally, so the suite restores the usual dispositions
# first; every child it starts inherits them.
def _restore_terminal_signals() -> None:
    for signum in (signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_restore_terminal_signals()


# ---------------------------------------------------------------------------
# Fake NVIDIA libraries for the frequency switcher (tests/fake_nvml,
# tests/fake_cuda). They are compiled once per session with the system C
# compiler and loaded by perseus through PERSEUS_NVML_LIBRARY and
# PERSEUS_CUDA_LIBRARY, the same code path as the real driver libraries.

import ctypes
import importlib.util
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import pytest

_TESTS_DIR = Path(__file__).resolve().parent
_FAKE_ENV_PREFIXES = ("FAKE_NVML_", "FAKE_CUDA_")


class FakeLibraries:
    """The compiled fakes and ctypes handles on them (the very copies perseus uses)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.nvml_path = directory / "libnvidia-ml.so.1"
        self.cuda_path = directory / "libcuda.so.1"
        self.nvml = ctypes.CDLL(str(self.nvml_path))
        self.cuda = ctypes.CDLL(str(self.cuda_path))
        self.nvml.fake_nvml_locked_clock.restype = ctypes.c_uint
        self.nvml.fake_nvml_locked_clock.argtypes = [ctypes.c_uint]
        self.nvml.fake_nvml_locked_memory_clock.restype = ctypes.c_uint
        self.nvml.fake_nvml_locked_memory_clock.argtypes = [ctypes.c_uint]
        self.nvml.fake_nvml_calls.restype = ctypes.c_ulong
        self.nvml.fake_nvml_calls.argtypes = [ctypes.c_char_p]
        self.cuda.fake_cuda_launch_kernel.argtypes = [ctypes.c_size_t, ctypes.c_uint, ctypes.c_uint]
        self.cuda.fake_cuda_synchronize.argtypes = [ctypes.c_size_t, ctypes.c_uint]
        self.cuda.fake_cuda_pause.argtypes = [ctypes.c_size_t, ctypes.c_int]
        self.cuda.fake_cuda_pending.argtypes = [ctypes.c_size_t]


def _compile(source: Path, target: Path) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler (cc) to build the fake NVIDIA libraries")
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(target), str(source), "-lpthread"],
        check=True,
        capture_output=True,
        timeout=300,
    )


@pytest.fixture(scope="session")
def fake_libraries(tmp_path_factory):
    """Builds the fakes and points PERSEUS_NVML_LIBRARY / PERSEUS_CUDA_LIBRARY at them."""
    directory = tmp_path_factory.mktemp("fake_nvidia")
    _compile(_TESTS_DIR / "fake_nvml" / "fake_nvml.c", directory / "libnvidia-ml.so.1")
    _compile(_TESTS_DIR / "fake_cuda" / "fake_cuda.c", directory / "libcuda.so.1")
    saved = {k: os.environ.get(k) for k in ("PERSEUS_NVML_LIBRARY", "PERSEUS_CUDA_LIBRARY")}
    os.environ["PERSEUS_NVML_LIBRARY"] = str(directory / "libnvidia-ml.so.1")
    os.environ["PERSEUS_CUDA_LIBRARY"] = str(directory / "libcuda.so.1")
    yield FakeLibraries(directory)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class FakeNvml:
    """Per-test view of the fake NVML: configure it, read its state and call log."""

    def __init__(self, libs: FakeLibraries, tmp_path: Path, monkeypatch) -> None:
        self.libs = libs
        self.log_path = tmp_path / "nvml.log"
        self.cuda_log_path = tmp_path / "cuda.log"
        self.state_path = tmp_path / "nvml.state"
        self._monkeypatch = monkeypatch
        for key in list(os.environ):
            if key.startswith(_FAKE_ENV_PREFIXES) or key == "CUDA_VISIBLE_DEVICES":
                monkeypatch.delenv(key)
        monkeypatch.setenv("FAKE_NVML_LOG", str(self.log_path))
        monkeypatch.setenv("FAKE_CUDA_LOG", str(self.cuda_log_path))
        self.reload()
        libs.nvml.fake_nvml_reset()

    def configure(self, **env: object) -> None:
        """Sets FAKE_NVML_* / FAKE_CUDA_* variables (``sleep_ms=5`` -> FAKE_NVML_SLEEP_MS)."""
        for key, value in env.items():
            name = key.upper()
            if not name.startswith(_FAKE_ENV_PREFIXES):
                name = "FAKE_NVML_" + name
            self._monkeypatch.setenv(name, str(value))
        self.reload()

    def reload(self) -> None:
        self.libs.nvml.fake_nvml_reload()
        self.libs.cuda.fake_cuda_reload()

    def locked(self, index: int = 0) -> int:
        """The SM clock locked on NVML device ``index`` (0: unlocked)."""
        return self.libs.nvml.fake_nvml_locked_clock(index)

    def locked_memory(self, index: int = 0) -> int:
        return self.libs.nvml.fake_nvml_locked_memory_clock(index)

    def calls(self, function: str) -> int:
        """Calls of an NVML function since the test began."""
        return self.libs.nvml.fake_nvml_calls(function.encode())

    def init_count(self) -> int:
        return self.libs.nvml.fake_nvml_init_count()

    def log(self, path: Optional[Path] = None) -> list[tuple[int, int, str, tuple[str, ...], int]]:
        """Parsed NVML log: (time ns, pid, function, args, return code) per call."""
        path = path or self.log_path
        if not path.exists():
            return []
        rows = []
        for line in path.read_text().splitlines():
            left, _, rc = line.rpartition(" = ")
            parts = left.split()
            rows.append((int(parts[0]), int(parts[1]), parts[2], tuple(parts[3:]), int(rc)))
        return rows

    def clock_calls(self, path: Optional[Path] = None) -> list[tuple[str, tuple[str, ...], int]]:
        """The clock-changing calls only: (function, args, return code)."""
        return [(fn, args, rc) for _, _, fn, args, rc in self.log(path) if "LockedClocks" in fn]

    def cuda_log(self) -> list[tuple[int, str, int]]:
        """Parsed fake CUDA log: (time ns, event, id)."""
        if not self.cuda_log_path.exists():
            return []
        out = []
        for line in self.cuda_log_path.read_text().splitlines():
            t, event, ident = line.split()
            out.append((int(t), event, int(ident)))
        return out


@pytest.fixture
def fake_nvml(fake_libraries, tmp_path, monkeypatch):
    """A fresh fake NVML (2 GPUs, H200-like clocks, nothing locked) logging to tmp_path."""
    return FakeNvml(fake_libraries, tmp_path, monkeypatch)


# ---------------------------------------------------------------------------
# Typing tests: what mypy --strict makes of a user's code that uses perseus
# (the source tree's python/perseus, its annotations and py.typed).


@pytest.fixture
def mypy_strict(tmp_path):
    """Writes `source` (dedented) to tmp_path / `name`, runs mypy --strict on it and returns
    (its error lines, its whole output). Skips where mypy is not installed."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("needs mypy")

    def run(name: str, source: str) -> tuple[list[str], str]:
        check = tmp_path / name
        check.write_text(textwrap.dedent(source))
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--strict",
                "--no-incremental",
                "--follow-imports=silent",
                str(check),
            ],
            capture_output=True,
            text=True,
            env={"MYPYPATH": str(_TESTS_DIR.parent / "python"), "PATH": "/usr/bin:/bin"},
            cwd=tmp_path,
            check=False,
            timeout=600,
        )
        return [line for line in result.stdout.splitlines() if ": error:" in line], result.stdout

    return run

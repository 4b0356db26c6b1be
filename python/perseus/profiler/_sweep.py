"""The per-computation frequency sweep."""

from __future__ import annotations

import contextlib
import datetime
import math
import numbers
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TextIO, Union

import numpy as np

from .. import _core
from .._sidecar import BLOCKING_POWER_KEY
from .._validate import is_integer
from ..errors import ProfileError
from ..profile import INSTRUCTIONS, Profile
from ..switcher import FrequencySwitcher, NvmlError, NvmlReturn
from ._backend import MODES, Backend, open_backend
from ._blocking import _measure as _measure_blocking
from ._records import ComputationError, Measurement, ProfilerError, ProfilerResult
from ._store import FORMAT, VERSION, Store

__all__ = ["profile_stages"]

Key = tuple[int, str]
_MAX_REPETITIONS = 10_000_000


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _version() -> str:
    from .. import __version__

    return __version__


# ---- arguments ---------------------------------------------------------------


def _computations(computations: Any) -> dict[Key, Callable[[], Any]]:
    """``{stage: {"forward": f, "backward": b}}`` or a sequence of such mappings -> flat dict."""
    if isinstance(computations, Mapping):
        items = list(computations.items())
    elif isinstance(computations, Sequence) and not isinstance(computations, (str, bytes)):
        items = list(enumerate(computations))
    else:
        raise TypeError(
            "computations must map stage -> {'forward': callable, 'backward': callable}, "
            f"or be a sequence of such mappings, not {type(computations).__name__}"
        )
    if not items:
        raise ValueError("computations is empty: give at least one stage's forward and backward")
    flat: dict[Key, Callable[[], Any]] = {}
    for stage, pair in items:
        if not is_integer(stage) or stage < 0:
            raise ValueError(f"stage ids must be integers >= 0, not {stage!r}")
        if not isinstance(pair, Mapping):
            raise TypeError(
                f"stage {stage}: expected a mapping {{'forward': callable, 'backward': callable}}, "
                f"not {type(pair).__name__}"
            )
        unknown = sorted(str(k) for k in pair if k not in INSTRUCTIONS)
        if unknown:
            raise ValueError(
                f"stage {stage}: unknown instruction(s) {unknown}; use 'forward' and 'backward'"
            )
        for instruction in INSTRUCTIONS:
            if instruction not in pair:
                raise ValueError(f"stage {stage}: no {instruction!r} callable")
            fn = pair[instruction]
            if not callable(fn):
                raise TypeError(f"stage {stage} {instruction}: {type(fn).__name__} is not callable")
            flat[(int(stage), instruction)] = fn
    return flat


def _positive(name: str, value: Any, *, integer: bool = False, allow_zero: bool = False) -> Any:
    kind = numbers.Integral if integer else numbers.Real
    ok = isinstance(value, kind) and not isinstance(value, bool)
    ok = ok and (value >= 0 if allow_zero else value > 0) and math.isfinite(value)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        what = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {what} {bound}, not {value!r}")
    return int(value) if integer else float(value)


@dataclass
class _Settings:
    window_s: float
    windows: int
    repetitions: Optional[int]
    warmup_s: float
    patience: Optional[int]
    min_frequency_mhz: Optional[int]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ---- early stop --------------------------------------------------------------


class _Tracker:
    """Early-stop state of one computation, fed its measurements from high to low clock.

    Compares *effective* energy, e - P_block * t: a slower clock that uses a
    little more energy, but less than the blocking power over the extra
    time, is still worth having (the GPU would otherwise wait at P_block), so
    only clocks whose effective energy stays above the best so far count as
    rises.
    """

    def __init__(self, patience: Optional[int], blocking_power_w: float) -> None:
        self.patience = patience
        self.blocking_power_w = blocking_power_w
        self.best: Optional[Measurement] = None
        self.rises = 0
        self.stopped: Optional[str] = None

    def _effective(self, m: Measurement) -> float:
        return m.energy_j - self.blocking_power_w * m.time_s

    def add(self, m: Measurement) -> None:
        if self.best is None or self._effective(m) <= self._effective(self.best):
            self.best, self.rises = m, 0
            return
        self.rises += 1  # slower and costlier, even counting blocking power: never useful
        if self.patience is not None and self.rises >= self.patience:
            self.stopped = (
                f"energy minus blocking power times time stayed above its minimum (at "
                f"{self.best.frequency_mhz} MHz) for {self.rises} consecutive frequencies, "
                f"down to {m.frequency_mhz} MHz"
            )


# ---- measuring -----------------------------------------------------------------


def _measure(
    key: Key,
    fn: Callable[[], Any],
    frequency_mhz: int,
    backend: Backend,
    settings: _Settings,
) -> Measurement:
    stage, instruction = key

    def run(n: int, phase: str, during: Optional[Callable[[], None]] = None) -> float:
        try:
            return backend.run(fn, n, during)
        except Exception as error:  # the callable's (or its CUDA work's) failure
            raise ComputationError(stage, instruction, frequency_mhz, phase, error) from error

    # Warm up at the new clock, growing the batch until warmup_s has passed;
    # the last batch gives the time per call that sizes the windows.
    spent, batch = 0.0, 1
    while True:
        seconds = run(batch, "warm-up")
        spent += seconds
        per_call = max(seconds / batch, 1e-9)
        if spent >= settings.warmup_s:
            break
        batch = max(1, min(batch * 4, math.ceil((settings.warmup_s - spent) / per_call)))
    n = settings.repetitions or min(
        _MAX_REPETITIONS, max(1, math.ceil(settings.window_s / per_call))
    )

    clock = [0]

    def sample_clock() -> None:
        clock[0] = backend.sm_clock_mhz()

    times: list[float] = []
    energies: list[float] = []
    retries = 3
    while len(times) < settings.windows:
        w = len(times)
        backend.sync()
        e0 = backend.energy_mj()
        seconds = run(n, f"window {w + 1}/{settings.windows}", sample_clock)
        e1 = backend.energy_mj()
        if not settings.repetitions and w == 0 and retries and seconds < settings.window_s / 2:
            # The warm-up overestimated the time per call: resize and measure again.
            retries -= 1
            n = min(_MAX_REPETITIONS, math.ceil(n * settings.window_s / max(seconds, 1e-9)))
            continue
        if e1 <= e0 or seconds <= 0:
            raise ProfilerError(
                f"stage {stage} {instruction} at {frequency_mhz} MHz: NVML's energy counter did "
                f"not advance over {n} repetitions ({seconds:.3g} s); the counter updates every "
                "few tens of ms, so lengthen window_s or raise repetitions"
            )
        times.append(seconds / n)
        energies.append((e1 - e0) / 1e3 / n)  # mJ -> J per computation
    ddof = 1 if len(times) > 1 else 0
    return Measurement(
        stage=stage,
        instruction=instruction,
        frequency_mhz=frequency_mhz,
        time_s=float(np.mean(times)),
        time_std_s=float(np.std(times, ddof=ddof)),
        energy_j=float(np.mean(energies)),
        energy_std_j=float(np.std(energies, ddof=ddof)),
        repetitions=n,
        windows=settings.windows,
        sm_clock_mhz=int(clock[0]),
        measured_at=_now(),
    )


# ---- progress ------------------------------------------------------------------


class _Progress:
    def __init__(self, progress: Union[bool, TextIO]) -> None:
        if progress is True:
            self.stream: Optional[TextIO] = sys.stderr
        elif progress is False or progress is None:
            self.stream = None
        else:
            self.stream = progress
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(f"perseus profiler: {text}\n")
            self.stream.flush()

    def measured(self, m: Measurement, done: int, total: int) -> None:
        if self.stream is None:
            return
        t_rel = m.time_std_s / m.time_s * 100
        e_rel = m.energy_std_j / m.energy_j * 100
        self.say(
            f"[{done}/{total}] {m.frequency_mhz} MHz stage {m.stage} {m.instruction}: "
            f"{m.time_s * 1e3:.4g} ms ±{t_rel:.2g}%, {m.energy_j:.4g} J ±{e_rel:.2g}%, "
            f"{m.power_w:.4g} W ({m.repetitions} reps x {m.windows}), "
            f"{time.monotonic() - self.started:.1f} s"
        )


# ---- the sweep -------------------------------------------------------------------


def _plan(
    switcher: Optional[FrequencySwitcher],
    frequencies_mhz: Optional[Iterable[int]],
    min_frequency_mhz: Optional[int],
    fallback_mhz: int,
) -> list[int]:
    """Frequencies to try, highest first, snapped to supported clocks."""
    if switcher is None:  # clocks not locked: one point, at the driver's default
        return [fallback_mhz]
    if frequencies_mhz is None:
        chosen = [int(f) for f in switcher.supported_mhz]
        if not chosen:
            raise ProfilerError(
                f"GPU {switcher.device} does not list its supported SM clocks; pass frequencies_mhz"
            )
    else:
        chosen = [switcher.snap(f) for f in frequencies_mhz]
    if min_frequency_mhz is not None:
        chosen = [f for f in chosen if f >= min_frequency_mhz]
        if not chosen:
            raise ValueError(
                f"no frequency is at or above min_frequency_mhz={min_frequency_mhz} MHz"
            )
    return sorted(set(chosen), reverse=True)


def _check_frequencies(frequencies_mhz: Optional[Iterable[int]]) -> Optional[list[int]]:
    if frequencies_mhz is None:
        return None
    values = list(frequencies_mhz)
    if not values:
        raise ValueError(
            "frequencies_mhz is empty: give at least one SM clock in MHz (or None for all)"
        )
    for f in values:
        _positive("every frequency in frequencies_mhz (MHz)", f, integer=True)
    return [int(f) for f in values]


def _check_resume(
    previous: dict[str, Any], device: dict[str, Any], mode: str, keys: list[Key], path: Path
) -> None:
    def refuse(what: str) -> None:
        raise ProfilerError(
            f"{path} was measured {what}; pass resume=False to start over, or choose another path"
        )

    if previous.get("mode") != mode:
        refuse(f"in mode {previous.get('mode')!r}, not {mode!r}")
    old = previous.get("device", {})
    for field in ("name", "uuid"):
        if old.get(field) != device[field]:
            refuse(
                f"on {old.get('name')!r} ({old.get('uuid')}), not {device['name']!r} ({device['uuid']})"
            )
    old_keys = sorted(tuple(k) for k in previous.get("computations", []))
    if old_keys != sorted(keys):
        refuse(f"for the computations {old_keys}, not {sorted(keys)}")


def profile_stages(
    computations: Union[
        Mapping[int, Mapping[str, Callable[[], Any]]], Sequence[Mapping[str, Callable[[], Any]]]
    ],
    output: Union[str, os.PathLike[str]],
    *,
    mode: str = "gpu",
    device: int = 0,
    frequencies_mhz: Optional[Iterable[int]] = None,
    min_frequency_mhz: Optional[int] = None,
    patience: Optional[int] = 5,
    window_s: float = 1.0,
    windows: int = 3,
    repetitions: Optional[int] = None,
    warmup_s: float = 0.2,
    blocking_power_w: Optional[float] = None,
    blocking_window_s: float = 3.0,
    lock_clocks: bool = True,
    resume: bool = True,
    progress: Union[bool, TextIO] = True,
    switch_latency_repeats: int = 0,
) -> ProfilerResult:
    """Measure each stage's forward and backward time and energy across SM frequencies.

    For each SM clock from the highest down, the GPU is locked at it
    (through :class:`~perseus.FrequencySwitcher`), every computation still
    in the sweep is warmed up and then run back to back in ``windows``
    windows of about ``window_s`` seconds each. Time comes from torch CUDA
    events (``mode="gpu"``) or a wall-clock timer (``mode="cpu"``), energy
    from NVML's total-energy counter (mJ) over each window. A computation
    leaves the sweep once its energy has stayed above its lowest value for
    ``patience`` consecutive frequencies (those options are slower and
    costlier, so Pareto-dominated), or at ``min_frequency_mhz``. The blocking
    power is measured first (see :func:`measure_blocking_power`) unless given.

    After every measurement the sidecar and the CSV are rewritten
    atomically, so a crash, Ctrl-C or kill loses at most the computation
    being measured, and calling this again with the same ``output`` resumes
    where it stopped. Clocks are given back to the driver at the end, on an
    error and on Ctrl-C/SIGTERM.

    Parameters
    ----------
    computations
        ``{stage: {"forward": f, "backward": b}}`` (or a list indexed by
        stage). Each callable runs one computation and takes no arguments; it
        is called many times back to back, so a backward must be repeatable
        (e.g. ``loss.backward(retain_graph=True)`` on a stored graph). On a
        GPU the work must be queued on the current stream or synchronised.
    output
        Path of the CSV to write, in Zeus's format
        (``stage,instruction,frequency,time,energy``: MHz, s, J), one row per
        measurement. The JSON sidecar goes beside it with the suffix
        ``.json``.
    mode
        ``"gpu"`` (torch with CUDA, and NVML) or ``"cpu"``: an explicit
        opt-in to time with a wall-clock timer and read energy from NVML,
        normally the test suite's fake (``PERSEUS_NVML_LIBRARY``).
    device
        CUDA device index (honours ``CUDA_VISIBLE_DEVICES``).
    frequencies_mhz
        SM clocks to try (MHz), snapped to supported ones; default: every
        supported clock.
    min_frequency_mhz
        Floor (MHz): nothing below it is measured.
    patience
        Consecutive frequencies with energy above the minimum so far after
        which a computation stops; ``None`` measures every frequency.
    window_s
        Target length of one measurement window (s). NVML's counter updates
        every few tens of ms: keep windows well above that.
    windows
        Windows per measurement; their spread is reported.
    repetitions
        Computations per window; default: as many as fill ``window_s``.
    warmup_s
        Warm-up (s) after each clock change, before the windows.
    blocking_power_w
        A measured ``P_block`` (W) to use instead of measuring it.
    blocking_window_s
        Length (s) of the blocking-power window, at the highest frequency.
    lock_clocks
        ``False`` profiles once, at the driver's default clocks, for GPUs
        where clocks cannot be locked; the row's frequency is the highest
        supported clock and the sidecar records ``clocks_locked: false``.
    resume
        Continue from an existing sidecar (default). ``False`` deletes the
        CSV and sidecar and starts over.
    progress
        ``True`` prints a line per measurement on stderr; a text stream
        prints there; ``False`` is silent.
    switch_latency_repeats
        With locked clocks, also time this many SM clock changes after the
        blocking power (:func:`perseus.measure_switch_latency`, with the GPU
        idle between them: a lower bound where an idle GPU drops its clock)
        and record them in the sidecar under ``switch_latency``, the median
        as ``switch_latency_s``. 0 (default) skips it; a resumed run keeps
        what the sidecar holds.

    Returns
    -------
    ProfilerResult
        The :class:`~perseus.Profile` (Pareto-optimal options), every
        measurement with its spread, ``P_block``, and the paths written.

    Raises
    ------
    ValueError, TypeError
        Bad arguments (checked before any clock is touched).
    ProfilerUnavailable
        What ``mode`` needs is missing (torch with CUDA, a GPU, NVML).
    ComputationError
        A callable raised; names the stage, instruction and frequency.
    ProfilerError
        Clocks could not be locked, the energy counter did not advance, or
        the existing sidecar belongs to another device or model.

    Examples
    --------
    >>> result = perseus.profile_stages(                      # doctest: +SKIP
    ...     {0: {"forward": forward, "backward": backward}}, "profile/stage0.csv",
    ...     frequencies_mhz=range(1980, 900, -90))
    >>> frontier = perseus.optimize(result.profile, microbatches=8)  # doctest: +SKIP
    """
    # -- arguments, all before touching the hardware
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    calls = _computations(computations)
    if not is_integer(device) or device < 0:
        raise ValueError(f"device must be a CUDA device index >= 0, not {device!r}")
    frequencies = _check_frequencies(frequencies_mhz)
    if not lock_clocks and frequencies is not None:
        raise ValueError(
            "frequencies_mhz needs lock_clocks=True (unlocked, only the default clock runs)"
        )
    floor = (
        None
        if min_frequency_mhz is None
        else _positive("min_frequency_mhz", min_frequency_mhz, integer=True)
    )
    settings = _Settings(
        window_s=_positive("window_s", window_s),
        windows=_positive("windows", windows, integer=True),
        repetitions=None
        if repetitions is None
        else _positive("repetitions", repetitions, integer=True),
        warmup_s=_positive("warmup_s", warmup_s, allow_zero=True),
        patience=None if patience is None else _positive("patience", patience, integer=True),
        min_frequency_mhz=floor,
    )
    if blocking_power_w is not None:
        blocking_power_w = _positive("blocking_power_w", blocking_power_w, allow_zero=True)
    csv_path = Path(os.fsdecode(output))
    if csv_path.suffix == ".json":
        raise ValueError(f"output {csv_path} would collide with its .json sidecar; name it .csv")
    if (
        isinstance(switch_latency_repeats, bool)
        or not isinstance(switch_latency_repeats, numbers.Integral)
        or switch_latency_repeats < 0
    ):
        raise ValueError(
            f"switch_latency_repeats must be a whole number >= 0, not {switch_latency_repeats!r}"
        )
    sweep = _Sweep(
        calls,
        csv_path,
        mode=mode,
        device=int(device),
        frequencies=frequencies,
        settings=settings,
        blocking_power_w=blocking_power_w,
        blocking_window_s=_positive("blocking_window_s", blocking_window_s),
        lock_clocks=bool(lock_clocks),
        resume=resume,
        progress=progress,
        switch_latency_repeats=int(switch_latency_repeats),
    )
    return sweep.run()


class _Sweep:
    """One profiling run: the device, the files, and the sweep from the highest clock down.

    run() opens the device and the store, plans the clocks, measures the
    blocking power unless given, measures every computation still in the
    sweep at each clock (saving after each measurement), and always gives
    the clocks back and closes what it opened, however it ends.
    """

    def __init__(
        self,
        calls: dict[Key, Callable[[], Any]],
        csv_path: Path,
        *,
        mode: str,
        device: int,
        frequencies: Optional[list[int]],
        settings: _Settings,
        blocking_power_w: Optional[float],
        blocking_window_s: float,
        lock_clocks: bool,
        resume: bool,
        progress: Union[bool, TextIO],
        switch_latency_repeats: int = 0,
    ) -> None:
        self.calls = calls
        self.keys = list(calls)
        self.csv_path = csv_path
        self.mode = mode
        self.device = device
        self.frequencies = frequencies
        self.settings = settings
        self.blocking_power_w = blocking_power_w
        self.blocking_window_s = blocking_window_s
        self.lock_clocks = lock_clocks
        self.resume = resume
        self.switch_latency_repeats = switch_latency_repeats
        self.say = _Progress(progress)
        self.backend: Optional[Backend] = None
        self.store: Optional[Store] = None
        self.switcher: Optional[FrequencySwitcher] = None
        self.metadata: dict[str, Any] = {}
        self.measurements: list[Measurement] = []
        self.plan: list[int] = []

    def run(self) -> ProfilerResult:
        self.backend = open_backend(self.mode, self.device)
        failure: Optional[BaseException] = None
        try:
            self._start()
            self._blocking_power()
            self._switch_latency()
            self._sweep()
        except BaseException as error:
            failure = error
            self._record_failure(error)
            raise
        finally:
            self._close(failure)
        assert self.store is not None
        watts = self.metadata["blocking_power"]["watts"]
        return ProfilerResult(
            profile=_to_profile(self.measurements, watts),
            measurements=tuple(self.measurements),
            blocking_power_w=float(watts),
            csv_path=str(self.csv_path),
            metadata_path=str(self.store.json_path),
            metadata={**self.metadata, "measurements": [m.to_json() for m in self.measurements]},
        )

    def _save(self) -> None:
        assert self.store is not None
        self.metadata["updated"] = _now()
        self.metadata["frequencies_tried_mhz"] = sorted(
            {m.frequency_mhz for m in self.measurements}, reverse=True
        )
        self.store.save(self.metadata, self.measurements)

    def _lock(self, mhz: int) -> None:
        if self.switcher is None:
            return
        try:
            self.switcher.set(mhz)
            self.switcher.wait()
        except NvmlError as error:
            raise ProfilerError(
                f"could not lock GPU {self.device} at {mhz} MHz: {str(error).rstrip('.')}. "
                + _lock_advice(int(error.code))
            ) from error

    def _start(self) -> None:
        """The clocks to sweep, the store (resuming what it holds) and the metadata."""
        # No local holds the NVML device: a traceback keeps this frame, and
        # NVML shuts down with the last reference, when run() closes the backend.
        assert self.backend is not None
        try:
            supported = sorted(
                (int(f) for f in self.backend.nvml.supported_graphics_clocks()), reverse=True
            )
        except NvmlError:  # some GPUs do not list their clocks
            supported = []
        if self.lock_clocks:
            self.switcher = FrequencySwitcher(self.device)  # locks nothing until the first set()
        floor = self.settings.min_frequency_mhz
        self.plan = _plan(
            self.switcher,
            self.frequencies,
            floor,
            supported[0] if supported else self.backend.nvml.clock_mhz("sm"),
        )
        self.store = Store(self.csv_path, resume=self.resume)
        device_info = {
            "index": self.device,
            "nvml_index": self.backend.nvml.nvml_index,
            "name": self.backend.nvml.name,
            "uuid": self.backend.nvml.uuid,
            "driver": _core.nvml_driver_version(),
            "memory_clock_mhz": self.backend.nvml.clock_mhz("memory"),
            "supported_sm_clocks_mhz": supported,
        }
        previous = self.store.previous
        if previous is not None:
            _check_resume(previous, device_info, self.mode, self.keys, self.csv_path)
            self.measurements = list(previous["measurements"])
        self.metadata = {
            "format": FORMAT,
            "version": VERSION,
            "perseus_version": _version(),
            "status": "running",
            "error": None,
            "created": previous["created"] if previous else _now(),
            "updated": _now(),
            "mode": self.mode,
            "timer": "torch CUDA events"
            if self.mode == "gpu"
            else "wall clock (time.perf_counter)",
            "device": device_info,
            "clocks_locked": self.lock_clocks,
            "settings": self.settings.to_json(),
            "frequencies_planned_mhz": self.plan,
            "frequencies_tried_mhz": [],
            "computations": [list(k) for k in self.keys],
            "stopped": {},
            "blocking_power": previous.get("blocking_power") if previous else None,
            "switch_latency": previous.get("switch_latency") if previous else None,
            "csv": self.csv_path.name,
            "sweep_s": float(previous.get("sweep_s", 0.0)) if previous else 0.0,
        }
        done = self._done()
        self.say.say(
            f"{self.backend.nvml.name} (GPU {self.device}), mode {self.mode}, {len(self.keys)} computations x "
            f"{len(self.plan)} frequencies ({self.plan[0]}..{self.plan[-1]} MHz)"
            + (f"; resuming with {len(done)} measured" if done else "")
            + ("" if self.lock_clocks else "; clocks NOT locked: one point at the default clock")
        )

    def _done(self) -> set[tuple[int, str, int]]:
        return {
            (m.stage, m.instruction, m.frequency_mhz)
            for m in self.measurements
            if m.frequency_mhz in self.plan
        }

    def _blocking_power(self) -> None:
        """Given, resumed from the sidecar, or measured at the highest planned clock."""
        if self.blocking_power_w is not None:
            self.metadata["blocking_power"] = {"watts": self.blocking_power_w, "source": "user"}
        elif not self.metadata["blocking_power"]:
            assert self.backend is not None
            self._lock(self.plan[0])
            blocking = _measure_blocking(
                self.backend, self.blocking_window_s, self.plan[0] if self.lock_clocks else None
            )
            self.metadata["blocking_power"] = blocking.to_json()
            self.say.say(
                f"blocking power {blocking.watts:.4g} W over {blocking.window_s:.3g} s ({blocking.method})"
            )
        # The key `perseus optimize` reads; the details stay under "blocking_power".
        self.metadata[BLOCKING_POWER_KEY] = float(self.metadata["blocking_power"]["watts"])
        self._save()

    def _switch_latency(self) -> None:
        """Opt-in: time a few clock changes (perseus.measure_switch_latency) for the sidecar."""
        if not self.switch_latency_repeats or not self.lock_clocks:
            return
        if not self.metadata.get("switch_latency"):
            from ..switch_timing import measure_switch_latency

            m = measure_switch_latency(self.device, repeats=self.switch_latency_repeats)
            self.metadata["switch_latency"] = {
                "clocks_mhz": list(m.clocks_mhz),
                "visible_s": m.visible_s.tolist(),
                "call_s": m.call_s.tolist(),
                "timeouts": m.timeouts,
                "median_s": None if len(m.visible_s) == 0 else m.median_s,
            }
            self.say.say(
                f"switch latency: median {1000 * m.median_s:.3g} ms over {len(m.visible_s)} "
                f"changes ({m.timeouts} not seen)"
            )
        self.metadata["switch_latency_s"] = self.metadata["switch_latency"]["median_s"]
        self._save()

    def _sweep(self) -> None:
        """Every computation at each clock from the highest down, until it stops paying."""
        assert self.backend is not None
        assert self.store is not None
        settings, plan = self.settings, self.plan
        blocking_w = float(self.metadata["blocking_power"]["watts"])
        trackers = {key: _Tracker(settings.patience, blocking_w) for key in self.keys}
        by_key = {(m.stage, m.instruction, m.frequency_mhz): m for m in self.measurements}
        done = self._done()
        total = len(plan) * len(self.keys)
        started = time.monotonic()
        for mhz in plan:
            todo = []
            for key in self.keys:
                tracker = trackers[key]
                if tracker.stopped:
                    continue
                known = by_key.get((*key, mhz))
                if known is not None:
                    tracker.add(known)
                else:
                    todo.append(key)
            if not todo:
                continue
            self._lock(mhz)
            for key in todo:
                t0 = time.monotonic()
                m = _measure(key, self.calls[key], mhz, self.backend, settings)
                self.measurements.append(m)
                trackers[key].add(m)
                self.metadata["sweep_s"] += time.monotonic() - t0
                self._save()
                done.add((*key, mhz))
                self.say.measured(m, len(done), total)
        floor = settings.min_frequency_mhz
        for key, tracker in trackers.items():
            self.metadata["stopped"][f"{key[0]}/{key[1]}"] = tracker.stopped or (
                f"measured down to the lowest planned frequency, {plan[-1]} MHz"
                + (f" (floor: {floor} MHz)" if floor is not None else "")
            )
        self.metadata["status"] = "complete"
        self._save()
        self.say.say(
            f"done: {len(self.measurements)} measurements in {time.monotonic() - started:.1f} s "
            f"this run ({self.metadata['sweep_s']:.1f} s measuring in all); wrote {self.csv_path} and "
            f"{self.store.json_path.name}"
        )

    def _record_failure(self, error: BaseException) -> None:
        if self.store is None or not self.metadata:
            return
        self.metadata["status"] = (
            "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
        )
        self.metadata["error"] = f"{type(error).__name__}: {error}"
        try:
            self._save()
        except Exception:  # noqa: BLE001 - keep the original error
            # A full disk: a new file cannot be written, but the sidecar must
            # not keep saying "running" (a monitor would wait for ever).
            with contextlib.suppress(Exception):
                self.store.record_status(self.metadata["status"], self.metadata["error"])

    def _close(self, failure: Optional[BaseException]) -> None:
        """Clocks back to the driver, then the device and the store, whatever happened."""
        try:
            if self.switcher is not None:
                self.switcher.close()  # gives the clocks back
        except Exception:
            if failure is None:
                raise
        finally:
            if self.backend is not None:
                self.backend.close()
            if self.store is not None:
                self.store.close()


# NVML codes that say the GPU itself failed, not that locking is not allowed.
_GPU_FAILED = frozenset(
    {NvmlReturn.ERROR_GPU_IS_LOST, NvmlReturn.ERROR_RESET_REQUIRED, NvmlReturn.ERROR_UNKNOWN}
)


def _lock_advice(code: int) -> str:
    """What to do when a lock failed: by cause, since unlocked profiling only helps some."""
    if code in _GPU_FAILED:
        return (
            "The GPU itself failed (not a permission problem): profiling without locking would "
            "fail too, and what it measured now could not be trusted. Reset the GPU "
            "(nvidia-smi -r) or reboot, then make the same call again: it resumes from the "
            "measurements kept in the sidecar"
        )
    return "Pass lock_clocks=False to profile at the default clock only"


def _to_profile(measurements: list[Measurement], blocking_power_w: float) -> Optional[Profile]:
    stages = {m.stage for m in measurements}
    if stages != set(range(len(stages))):
        return None
    try:
        return Profile.from_records(
            [(m.stage, m.instruction, m.frequency_mhz, m.time_s, m.energy_j) for m in measurements],
            blocking_power_w=blocking_power_w,
        )
    except ProfileError:  # pragma: no cover - every stage has both instructions
        return None

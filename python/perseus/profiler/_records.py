"""Errors and plain records of the profiler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..profile import Profile

__all__ = [
    "BlockingPower",
    "ComputationError",
    "Measurement",
    "ProfilerError",
    "ProfilerResult",
    "ProfilerUnavailable",
]


class ProfilerError(RuntimeError):
    """The profiler could not measure, or its saved state does not fit this run."""


class ProfilerUnavailable(ProfilerError):
    """What the chosen mode needs is missing: torch with CUDA, a GPU, or NVML.

    The message lists everything that is missing and how to get past it
    (``pip install "perseus-energy[gpu]"``, a driver, or ``mode="cpu"``).
    """


class ComputationError(ProfilerError):
    """A forward or backward callable raised while it was being profiled.

    The original exception is chained (``__cause__``).

    Attributes
    ----------
    stage : int
    instruction : str
        ``"forward"`` or ``"backward"``.
    frequency_mhz : int
        SM clock (MHz) the GPU was locked at.
    phase : str
        ``"warm-up"`` or ``"window i/n"``.
    """

    def __init__(
        self, stage: int, instruction: str, frequency_mhz: int, phase: str, error: BaseException
    ) -> None:
        self.stage = stage
        self.instruction = instruction
        self.frequency_mhz = frequency_mhz
        self.phase = phase
        super().__init__(
            f"stage {stage} {instruction} raised {type(error).__name__}: {error} "
            f"(at {frequency_mhz} MHz, during {phase})"
        )


@dataclass(frozen=True)
class Measurement:
    """Time and energy of one computation at one SM clock.

    Each of ``windows`` measurement windows runs the computation
    ``repetitions`` times back to back; ``time_s`` and ``energy_j`` are the
    per-computation means over all windows and the ``*_std_*`` fields the
    standard deviation of the per-window means (0 with one window).
    """

    stage: int
    instruction: str  #: "forward" or "backward"
    frequency_mhz: int  #: SM clock the GPU was locked at (the profile's frequency column)
    time_s: float  #: seconds per computation
    time_std_s: float
    energy_j: float  #: joules per computation
    energy_std_j: float
    repetitions: int  #: computations per window
    windows: int
    sm_clock_mhz: int  #: SM clock NVML reported during the last window (0: not read)
    measured_at: str  #: ISO 8601 UTC time the measurement finished

    @property
    def power_w(self) -> float:
        """Average power while computing, in watts."""
        return self.energy_j / self.time_s

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "instruction": self.instruction,
            "frequency_mhz": self.frequency_mhz,
            "time_s": self.time_s,
            "time_std_s": self.time_std_s,
            "energy_j": self.energy_j,
            "energy_std_j": self.energy_std_j,
            "repetitions": self.repetitions,
            "windows": self.windows,
            "sm_clock_mhz": self.sm_clock_mhz,
            "measured_at": self.measured_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        return cls(
            stage=int(data["stage"]),
            instruction=str(data["instruction"]),
            frequency_mhz=int(data["frequency_mhz"]),
            time_s=float(data["time_s"]),
            time_std_s=float(data["time_std_s"]),
            energy_j=float(data["energy_j"]),
            energy_std_j=float(data["energy_std_j"]),
            repetitions=int(data["repetitions"]),
            windows=int(data["windows"]),
            sm_clock_mhz=int(data.get("sm_clock_mhz", 0)),
            measured_at=str(data.get("measured_at", "")),
        )


@dataclass(frozen=True)
class BlockingPower:
    """Power a GPU draws while it busy-waits on a pipeline neighbour."""

    watts: float  #: average power over the window (W)
    window_s: float  #: length of the measured window (s)
    energy_j: float  #: energy over the window (J)
    frequency_mhz: Optional[int]  #: SM clock locked during the window; None: default clocks
    method: str  #: how the wait was made, e.g. "cupy kernel", "cpu sleep"

    def to_json(self) -> dict[str, Any]:
        return {
            "watts": self.watts,
            "source": "measured",
            "window_s": self.window_s,
            "energy_j": self.energy_j,
            "frequency_mhz": self.frequency_mhz,
            "method": self.method,
        }


@dataclass(frozen=True)
class ProfilerResult:
    """What :func:`~perseus.profiler.profile_stages` measured and wrote."""

    #: The measured options as a :class:`~perseus.Profile` (``None`` when the
    #: profiled stages are not ``0..S-1``, e.g. one rank's stage of a pipeline:
    #: concatenate the CSVs of all ranks instead).
    profile: Optional[Profile]
    measurements: tuple[Measurement, ...]  #: every measured row, in sweep order
    blocking_power_w: float  #: P_block in watts (measured or given)
    csv_path: str  #: the Zeus-format CSV (stage,instruction,frequency,time,energy)
    metadata_path: str  #: the JSON sidecar
    metadata: dict[str, Any] = field(repr=False)  #: the sidecar's content

"""Synthetic but realistic stage profiles for the solver benchmarks.

The measured SOSP '24 profiles (``bench/data/sosp24/``) cover one GPU (A100)
and two 8-stage models whose stages 0-6 are copies of one measurement. To
benchmark other shapes (H100/H200 clock tables, 16 stages, interleaved chunks,
small exact-MIP cases) this module *generates* profiles from a small physical
model of one transformer pipeline stage on one GPU. Nothing here is a
measurement; every file it writes says so in its JSON sidecar.

The model, for one (stage, instruction) at requested SM clock ``f`` (MHz)
------------------------------------------------------------------------

Clock. Near the top of the table the GPU cannot hold the requested clock
under load (power and thermal limits), so the clock it really runs at is::

    f_run = f                                     if f <= f_hold
          = f_hold + hold_slope * (f - f_hold)   above it

Voltage. The core voltage ``v`` (relative to its value at ``f_max``) sits on a
floor ``v_min`` up to the knee clock and rises linearly from there::

    v(f_run) = v_min + (1 - v_min) * max(0, f_run - f_knee) / (f_max - f_knee)

Time. The work at ``f_max`` takes ``t0``; a share ``m`` of it is bound by
memory bandwidth or communication and does not speed up with the SM clock,
the rest (compute) scales like ``1 / f``::

    time(f) = t0 * ((1 - m) * f_max / f_run + m)

Power and energy. Static power (board, idle memory, leakage that grows with
the voltage) is drawn for the whole time; dynamic SM power is ``C * V^2``
per cycle, so the compute part costs the same switching energy at any clock
apart from the voltage, and the SMs still toggle (at a lower activity
``stall``) while waiting on memory; HBM traffic costs a fixed energy per
computation::

    x      = f_run / f_max
    t_c    = t0 * (1 - m) / x                 compute time
    t_m    = t0 * m                           memory / communication time
    P_stat = P_idle + P_leak * v^2            drawn for the whole time
    energy = P_stat * (t_c + t_m)
           + P_dyn * u * v^2 * x * t_c                   switching while computing
           + (P_dyn * stall * v^2 * x + P_hbm) * t_m     stalled SMs, HBM traffic

``P_dyn * u * v^2 * x * t_c = P_dyn * u * v^2 * t0 * (1 - m)``: the compute
part's switching energy depends on the clock only through the voltage
(:func:`_energy_j`). Above the knee, ``v^2`` makes energy rise with the
clock; below it the voltage cannot drop any further, only the static
power keeps being paid for a longer time, so energy rises again at low
clocks. Energy against clock is therefore U-shaped, with its minimum near the
knee, as in real sweeps (the SOSP '24 A100 profiles bottom out at 1065-1080
MHz out of 1410).

Measurement noise. Each row's time gets multiplicative Gaussian noise
(``time_noise``, 0.2-0.5 %) and its energy the same factor (a run that took
longer drew power longer) times an independent power noise, so the energy
noise is about ``energy_noise`` (0.3-1 %). Rows are therefore not monotone,
and because the top clocks barely differ in ``f_run``, the second-highest
clock is now and then measured faster than the top one (the SOSP '24 Bloom
profile has 1395 MHz faster than 1410 MHz on every stage). Every clock of the
table is written, including the Pareto-dominated ones, as a profiler writes
raw measurements.

A pipeline. Stages differ: per stage a memory-bound share ``m`` in a range
(backward a little more compute-bound than its forward), a few stages mostly
memory- or communication-bound (``m`` 0.55-0.75: think of an expert-parallel
all-to-all or a stage that shares a node's links), middle stages within a
few percent of each other, the first stage a little heavier (token and
position embeddings: extra, memory-bound work), the last one clearly heavier
(LM head and loss: a large matmul plus a memory-bound softmax / cross
entropy), backward 1.8-2.2x its forward.

Where the magnitudes come from (roughly)
----------------------------------------

- Clock tables: the A100 SXM exposes 1410 MHz down to 210 MHz, the H100/H200
  SXM 1980 MHz down to 345 MHz, both in 15 MHz steps (``nvidia-smi -q -d
  SUPPORTED_CLOCKS``). Profilers usually stop before the bottom once energy
  only rises; the SOSP '24 artifact measured 1410-855 MHz.
- Blocking power (a GPU spinning on a P2P receive): the SOSP '24 artifact
  measured 83.64 W on A100 SXM; A100 SXM idles at about 50-60 W. H100 SXM
  idles at about 70-90 W, so 100-130 W while blocking; the presets use
  ``P_idle + P_leak + P_spin``: 84 W (A100), 118 W (H100), 121 W (H200).
- Busy power at the top clock: A100 SXM's limit is 400 W and large-GEMM work
  draws 300-400 W; H100/H200 SXM's limit is 700 W, 500-650 W busy. The
  presets land at about 330 W and 500 W for a compute-bound stage (less for
  the memory-bound ones).
- Times: a forward of a GPT-3-size stage (a dozen layers, tensor parallel 8)
  at the top clock is 40-55 ms on A100 (50 ms in the SOSP '24 GPT-3 profile),
  roughly half that on H100; the presets use 10-60 ms per microbatch.
- The voltage knee (``f_knee``) and hold clock (``f_hold``) are chosen so the
  energy minimum and the flat top match the shape of the measured A100 sweep;
  for H100 they are scaled by the clock ratio. They are shape parameters, not
  datasheet values.

Use
---

::

    python bench/synthetic_profiles.py --list
    python bench/synthetic_profiles.py --preset a100-gpt-8 -o bench/data/synthetic
    python bench/synthetic_profiles.py --all -o bench/data/synthetic   # every committed preset

    import synthetic_profiles as sp
    prof = sp.generate(sp.PRESETS["a100-gpt-8"], seed=1)
    csv_path, json_path = sp.write(prof, "out/")

The same preset and seed always give the same bytes (the noise comes from
``random.Random(seed)``, whose stream Python keeps stable).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

__all__ = [
    "GPUS",
    "PRESETS",
    "GpuModel",
    "PipelineModel",
    "SyntheticProfile",
    "clock_table",
    "generate",
    "write",
]

INSTRUCTIONS = ("forward", "backward")
STATEMENT = (
    "SYNTHETIC profile: generated by perseus bench/synthetic_profiles.py from a simple "
    "physical model of a transformer stage on a GPU plus seeded noise. Not a measurement."
)


# --------------------------------------------------------------------------- the GPU


@dataclass(frozen=True)
class GpuModel:
    """Power and clock behaviour of one GPU model (see the module docstring)."""

    name: str
    f_max_mhz: int  #: highest supported SM clock
    f_min_mhz: int  #: lowest supported SM clock
    step_mhz: int  #: spacing of the supported clocks
    f_knee_mhz: float  #: voltage floor below this clock
    v_min: float  #: voltage floor, relative to the voltage at f_max
    f_hold_mhz: float  #: above this the clock under load rises only by hold_slope per MHz
    hold_slope: float
    p_idle_w: float  #: board, idle memory, fans of the GPU: drawn whenever it is on
    p_leak_w: float  #: leakage at f_max's voltage (scales with v^2)
    p_dyn_w: float  #: SM dynamic power at f_max, full activity
    p_hbm_w: float  #: memory power while the work is memory-bound
    p_spin_w: float  #: dynamic power of one warp spinning on a P2P flag (blocking)
    stall_activity: float  #: SM activity while stalled on memory, relative to computing

    @property
    def blocking_power_w(self) -> float:
        """Power while blocked on a pipeline neighbour: static at the top voltage plus a spin."""
        return self.p_idle_w + self.p_leak_w + self.p_spin_w


GPUS: dict[str, GpuModel] = {
    "a100": GpuModel(
        name="A100 SXM-like",
        f_max_mhz=1410,
        f_min_mhz=210,
        step_mhz=15,
        f_knee_mhz=1005.0,
        v_min=0.75,
        f_hold_mhz=1365.0,
        hold_slope=0.3,
        p_idle_w=52.0,
        p_leak_w=22.0,
        p_dyn_w=330.0,
        p_hbm_w=70.0,
        p_spin_w=10.0,
        stall_activity=0.35,
    ),
    "h100": GpuModel(
        name="H100 SXM-like",
        f_max_mhz=1980,
        f_min_mhz=345,
        step_mhz=15,
        f_knee_mhz=1410.0,
        v_min=0.72,
        f_hold_mhz=1890.0,
        hold_slope=0.3,
        p_idle_w=70.0,
        p_leak_w=36.0,
        p_dyn_w=520.0,
        p_hbm_w=90.0,
        p_spin_w=12.0,
        stall_activity=0.35,
    ),
    # H200: the H100's compute die with faster, larger HBM3e: the memory-bound part
    # of the work is shorter (PipelineModel.memory_speedup) and memory power higher.
    "h200": GpuModel(
        name="H200 SXM-like",
        f_max_mhz=1980,
        f_min_mhz=345,
        step_mhz=15,
        f_knee_mhz=1410.0,
        v_min=0.72,
        f_hold_mhz=1890.0,
        hold_slope=0.3,
        p_idle_w=72.0,
        p_leak_w=36.0,
        p_dyn_w=520.0,
        p_hbm_w=110.0,
        p_spin_w=13.0,
        stall_activity=0.35,
    ),
}


def clock_table(
    gpu: GpuModel,
    *,
    lowest_mhz: Optional[int] = None,
    count: Optional[int] = None,
    coarse_lowest_mhz: Optional[int] = None,
) -> list[int]:
    """The SM clocks (MHz, highest first) a profile measures.

    - default: every supported clock, ``f_max`` down to ``f_min`` in ``step`` MHz;
    - ``lowest_mhz``: the supported clocks down to that one (a sweep that stopped early);
    - ``count``: a coarse table of ``count`` supported clocks spread evenly from
      ``f_max`` down to ``coarse_lowest_mhz`` (default 0.6 x f_max), for small cases
      an exact MIP can solve.
    """
    low = gpu.f_min_mhz if lowest_mhz is None else int(lowest_mhz)
    if low < gpu.f_min_mhz or low > gpu.f_max_mhz:
        raise ValueError(f"lowest_mhz {low} is outside {gpu.f_min_mhz}..{gpu.f_max_mhz}")
    table = list(range(gpu.f_max_mhz, low - 1, -gpu.step_mhz))
    if count is None:
        return table
    if count < 2:
        raise ValueError("a coarse table needs at least 2 clocks")
    bottom = int(0.6 * gpu.f_max_mhz) if coarse_lowest_mhz is None else int(coarse_lowest_mhz)
    span = [f for f in table if f >= bottom]
    if len(span) < count:
        raise ValueError(f"only {len(span)} clocks between {gpu.f_max_mhz} and {bottom} MHz")
    picks = sorted({round(i * (len(span) - 1) / (count - 1)) for i in range(count)})
    return [span[i] for i in picks]


# --------------------------------------------------------------------------- the pipeline


@dataclass(frozen=True)
class PipelineModel:
    """How the stages of one synthetic pipeline profile differ (see the module docstring).

    Ranges are ``(low, high)`` of a uniform draw; every stage draws its own values.
    """

    gpu: str  #: key of GPUS
    num_stages: int  #: profile stages (model chunks for an interleaved schedule)
    forward_ms: float  #: forward of a middle stage at f_max, ms, before its own jitter
    stage_jitter: float = 0.02  #: middle stages' forward times differ by up to this share
    memory_share: tuple[float, float] = (0.06, 0.30)
    memory_bound_stages: int = 1  #: stages drawn mostly memory/communication-bound
    memory_bound_share: tuple[float, float] = (0.55, 0.75)
    backward_ratio: tuple[float, float] = (1.8, 2.2)
    backward_memory_factor: tuple[float, float] = (0.75, 0.95)  #: backward m = forward m x this
    first_stage_extra: tuple[float, float] = (0.03, 0.10)  #: embedding work, share of a stage
    last_stage_extra: tuple[float, float] = (0.20, 0.40)  #: LM head + loss, share of a stage
    last_stage_extra_memory: float = 0.5  #: memory-bound share of that extra work
    utilisation: tuple[float, float] = (0.85, 0.95)  #: SM activity while computing
    memory_speedup: float = 1.0  #: memory-bound part runs this much faster (H200's HBM3e)
    time_noise: float = 0.003  #: relative standard deviation of each row's time
    energy_noise: float = 0.006  #: ... of each row's energy (time factor included)
    lowest_mhz: Optional[int] = None  #: clock_table(lowest_mhz=...)
    coarse_clocks: Optional[int] = None  #: clock_table(count=...)
    coarse_lowest_mhz: Optional[int] = None
    description: str = ""

    def clocks(self) -> list[int]:
        return clock_table(
            GPUS[self.gpu],
            lowest_mhz=self.lowest_mhz,
            count=self.coarse_clocks,
            coarse_lowest_mhz=self.coarse_lowest_mhz,
        )


@dataclass(frozen=True)
class StageDraw:
    """What one stage drew: its forward and backward work at f_max."""

    stage: int
    kind: str  #: "first", "middle", "memory-bound", "last" (or "first+last" for one stage)
    forward_ms: float
    forward_memory_share: float
    backward_ms: float
    backward_memory_share: float
    utilisation: float


@dataclass
class SyntheticProfile:
    """A generated profile: raw rows and everything needed to describe it."""

    name: str
    model: PipelineModel
    seed: int
    stages: list[StageDraw]
    clocks_mhz: list[int]
    rows: list[tuple[int, str, int, float, float]] = field(default_factory=list)

    @property
    def gpu(self) -> GpuModel:
        return GPUS[self.model.gpu]

    @property
    def blocking_power_w(self) -> float:
        return self.gpu.blocking_power_w

    def csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(("stage", "instruction", "frequency", "time", "energy"))
        for stage, instruction, mhz, time_s, energy_j in self.rows:
            writer.writerow((stage, instruction, mhz, f"{time_s:.7g}", f"{energy_j:.7g}"))
        return out.getvalue()

    def sidecar(self) -> dict[str, Any]:
        return {
            "synthetic": True,
            "statement": STATEMENT,
            "generator": "bench/synthetic_profiles.py",
            "preset": self.name,
            "seed": self.seed,
            "blocking_power_w": round(self.blocking_power_w, 6),
            "unit": {"frequency": "MHz", "time": "s", "energy": "J", "power": "W"},
            "gpu": asdict(self.gpu),
            "pipeline": asdict(self.model),
            "clocks_mhz": self.clocks_mhz,
            "num_clocks": len(self.clocks_mhz),
            "stages": [asdict(s) for s in self.stages],
        }


def _energy_j(gpu: GpuModel, t0_s: float, m: float, u: float, f_mhz: int) -> tuple[float, float]:
    """(time s, energy J) of work ``t0_s`` (memory share ``m``, activity ``u``) at clock ``f_mhz``."""
    f_run = float(f_mhz)
    if f_run > gpu.f_hold_mhz:
        f_run = gpu.f_hold_mhz + gpu.hold_slope * (f_run - gpu.f_hold_mhz)
    x = f_run / gpu.f_max_mhz
    rise = max(0.0, f_run - gpu.f_knee_mhz) / (gpu.f_max_mhz - gpu.f_knee_mhz)
    v = gpu.v_min + (1.0 - gpu.v_min) * min(1.0, rise)
    t_compute = t0_s * (1.0 - m) / x
    t_memory = t0_s * m
    time_s = t_compute + t_memory
    static_w = gpu.p_idle_w + gpu.p_leak_w * v * v
    dynamic_compute_w = gpu.p_dyn_w * u * v * v * x
    dynamic_stall_w = gpu.p_dyn_w * gpu.stall_activity * v * v * x
    energy_j = (
        static_w * time_s
        + dynamic_compute_w * t_compute
        + (dynamic_stall_w + gpu.p_hbm_w) * t_memory
    )
    return time_s, energy_j


def _draw_stages(model: PipelineModel, rng: random.Random) -> list[StageDraw]:
    n = model.num_stages
    middle = list(range(1, n - 1))
    k = min(model.memory_bound_stages, len(middle))
    memory_bound = set(rng.sample(middle, k)) if k else set()
    draws = []
    for stage in range(n):
        forward = model.forward_ms * (1.0 + rng.uniform(-model.stage_jitter, model.stage_jitter))
        share = rng.uniform(
            *(model.memory_bound_share if stage in memory_bound else model.memory_share)
        )
        kind = "memory-bound" if stage in memory_bound else "middle"
        compute_ms, memory_ms = forward * (1.0 - share), forward * share
        if stage == 0:  # embeddings: gathers, memory-bound
            memory_ms += model.forward_ms * rng.uniform(*model.first_stage_extra)
            kind = "first"
        if stage == n - 1:  # LM head matmul + softmax / cross entropy
            extra = model.forward_ms * rng.uniform(*model.last_stage_extra)
            memory_ms += extra * model.last_stage_extra_memory
            compute_ms += extra * (1.0 - model.last_stage_extra_memory)
            kind = "first+last" if n == 1 else "last"
        memory_ms /= model.memory_speedup
        forward_ms = compute_ms + memory_ms
        forward_share = memory_ms / forward_ms
        backward_ms = forward_ms * rng.uniform(*model.backward_ratio)
        backward_share = forward_share * rng.uniform(*model.backward_memory_factor)
        draws.append(
            StageDraw(
                stage=stage,
                kind=kind,
                forward_ms=round(forward_ms, 6),
                forward_memory_share=round(forward_share, 6),
                backward_ms=round(backward_ms, 6),
                backward_memory_share=round(backward_share, 6),
                utilisation=round(rng.uniform(*model.utilisation), 6),
            )
        )
    return draws


def generate(model: PipelineModel, seed: int = 0, *, name: str = "custom") -> SyntheticProfile:
    """Generate the raw rows of one synthetic profile; deterministic for (model, seed)."""
    if model.gpu not in GPUS:
        raise ValueError(f"unknown GPU {model.gpu!r}; choose one of {', '.join(GPUS)}")
    if model.num_stages < 1:
        raise ValueError("num_stages must be >= 1")
    gpu = GPUS[model.gpu]
    rng = random.Random(seed)
    stages = _draw_stages(model, rng)
    clocks = model.clocks()
    # The power noise is what is left of energy_noise once the time factor is in.
    power_noise = max(0.0, model.energy_noise**2 - model.time_noise**2) ** 0.5
    rows: list[tuple[int, str, int, float, float]] = []
    for draw in stages:
        for instruction in INSTRUCTIONS:
            if instruction == "forward":
                t0, m = draw.forward_ms * 1e-3, draw.forward_memory_share
            else:
                t0, m = draw.backward_ms * 1e-3, draw.backward_memory_share
            for mhz in clocks:
                time_s, energy_j = _energy_j(gpu, t0, m, draw.utilisation, mhz)
                time_factor = 1.0 + rng.gauss(0.0, model.time_noise)
                power_factor = 1.0 + rng.gauss(0.0, power_noise)
                rows.append(
                    (
                        draw.stage,
                        instruction,
                        mhz,
                        float(f"{time_s * time_factor:.7g}"),
                        float(f"{energy_j * time_factor * power_factor:.7g}"),
                    )
                )
    return SyntheticProfile(
        name=name, model=model, seed=seed, stages=stages, clocks_mhz=clocks, rows=rows
    )


def write(profile: SyntheticProfile, directory: str | Path) -> tuple[Path, Path]:
    """Write ``NAME.csv`` (Zeus format, every row) and ``NAME.json`` (the sidecar)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    csv_path = directory / f"{profile.name}.csv"
    json_path = directory / f"{profile.name}.json"
    csv_path.write_text(profile.csv_text(), encoding="utf-8")
    json_path.write_text(json.dumps(profile.sidecar(), indent=2) + "\n", encoding="utf-8")
    return csv_path, json_path


# --------------------------------------------------------------------------- presets


@dataclass(frozen=True)
class Preset:
    model: PipelineModel
    seed: int
    committed: bool = True  #: written to bench/data/synthetic/ by --all


def _coarse(gpu: str, stages: int, clocks: int, forward_ms: float, seed: int, **kw: Any) -> Preset:
    model = PipelineModel(
        gpu=gpu,
        num_stages=stages,
        forward_ms=forward_ms,
        coarse_clocks=clocks,
        memory_bound_stages=kw.pop("memory_bound_stages", 1 if stages >= 3 else 0),
        description=kw.pop(
            "description", f"{stages} stages, {clocks} clocks: small enough for the exact MIP"
        ),
        **kw,
    )
    return Preset(model, seed)


PRESETS: dict[str, Preset] = {
    "a100-gpt-8": Preset(
        PipelineModel(
            gpu="a100",
            num_stages=8,
            forward_ms=40.0,
            description="GPT-like 8-stage pipeline on A100, every clock 1410..210 MHz (81)",
        ),
        seed=1,
    ),
    # The same pipeline and seed, profiled by a sweep that stopped at 810 MHz (41 clocks),
    # as profilers do once energy only rises: lowtime 0.3.0 stops at its first step
    # cheaper than 1e-6 J, which the nearly flat slow end of the full table causes.
    "a100-gpt-8-810": Preset(
        PipelineModel(
            gpu="a100",
            num_stages=8,
            forward_ms=40.0,
            lowest_mhz=810,
            description="a100-gpt-8's pipeline, a sweep that stopped at 810 MHz (41 clocks)",
        ),
        seed=1,
    ),
    "h100-8": Preset(
        PipelineModel(
            gpu="h100",
            num_stages=8,
            forward_ms=24.0,
            lowest_mhz=810,
            description=(
                "8 stages on H100, 79 clocks 1980..810 MHz measured out of the "
                "1980..345 table (a sweep that stopped once energy only rose)"
            ),
        ),
        seed=2,
    ),
    "h200-16": Preset(
        PipelineModel(
            gpu="h200",
            num_stages=16,
            forward_ms=16.0,
            memory_bound_stages=2,
            memory_speedup=1.3,
            description="16 stages on H200, the full table 1980..345 MHz (110 clocks)",
        ),
        seed=3,
    ),
    "h100-16chunk": Preset(
        PipelineModel(
            gpu="h100",
            num_stages=16,
            forward_ms=20.0,
            memory_bound_stages=2,
            lowest_mhz=810,
            description="16 model chunks (interleaved V=2 on 8 GPUs), 79 clocks 1980..810 MHz",
        ),
        seed=4,
    ),
    "h100-32chunk": Preset(
        PipelineModel(
            gpu="h100",
            num_stages=32,
            forward_ms=12.0,
            memory_bound_stages=3,
            lowest_mhz=810,
            description=(
                "32 model chunks (interleaved V=4 on 8 GPUs or V=2 on 16), 79 clocks 1980..810 MHz"
            ),
        ),
        seed=5,
    ),
    # Issue 23: the shapes Megatron-LM users train (16-32 GPUs, interleaved, 128-1,024
    # microbatches), about 80 clocks each, with seeds no earlier preset used.
    "h100-16u": Preset(
        PipelineModel(
            gpu="h100",
            num_stages=16,
            forward_ms=18.0,
            memory_bound_stages=2,
            lowest_mhz=810,
            description="16 stages on H100, 79 clocks 1980..810 MHz (user-scale 1F1B/GPipe)",
        ),
        seed=31,
    ),
    "h200-32u": Preset(
        PipelineModel(
            gpu="h200",
            num_stages=32,
            forward_ms=12.0,
            memory_bound_stages=3,
            memory_speedup=1.3,
            lowest_mhz=795,
            description=(
                "32 stages or chunks on H200, 80 clocks 1980..795 MHz "
                "(32 x 256 1F1B, interleaved V=2 on 16)"
            ),
        ),
        seed=32,
    ),
    "h100-64chunk-u": Preset(
        PipelineModel(
            gpu="h100",
            num_stages=64,
            forward_ms=6.0,
            memory_bound_stages=5,
            lowest_mhz=810,
            description="64 model chunks on H100 (interleaved V=4 on 16 GPUs), 79 clocks",
        ),
        seed=33,
    ),
    "h200-128chunk-u": Preset(
        PipelineModel(
            gpu="h200",
            num_stages=128,
            forward_ms=3.0,
            memory_bound_stages=8,
            memory_speedup=1.3,
            lowest_mhz=795,
            description="128 model chunks on H200 (interleaved V=8 on 16 GPUs), 80 clocks",
        ),
        seed=34,
    ),
    "a100-coarse-2s5c": _coarse("a100", 2, 5, 18.0, seed=11),
    "a100-coarse-3s6c": _coarse("a100", 3, 6, 14.0, seed=12),
    "h100-coarse-3s4c": _coarse("h100", 3, 4, 12.0, seed=13, coarse_lowest_mhz=1380),
    "h100-coarse-4s8c": _coarse("h100", 4, 8, 11.0, seed=14),
    # A coarse table at user scale (issue 23: 8 clocks was measured at 4 stages only).
    "h100-coarse-16s8c": _coarse(
        "h100",
        16,
        8,
        11.0,
        seed=15,
        memory_bound_stages=2,
        description="16 stages, 8 clocks: a coarse clock table at user scale",
    ),
}


def from_preset(name: str, seed: Optional[int] = None) -> SyntheticProfile:
    """The profile of a preset (with its own seed unless ``seed`` is given)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    preset = PRESETS[name]
    return generate(preset.model, preset.seed if seed is None else seed, name=name)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Presets: " + ", ".join(PRESETS),
    )
    parser.add_argument("--preset", action="append", help="preset name (repeatable)")
    parser.add_argument("--all", action="store_true", help="every committed preset")
    parser.add_argument("--seed", type=int, help="override the preset's seed")
    parser.add_argument("-o", "--output", default=".", help="output folder (default: .)")
    parser.add_argument("--list", action="store_true", help="list the presets and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, preset in PRESETS.items():
            model = preset.model
            print(
                f"{name:18s} {model.gpu:5s} {model.num_stages:3d} stages "
                f"{len(model.clocks()):4d} clocks  seed {preset.seed}  {model.description}"
            )
        return 0
    names = list(args.preset or [])
    if args.all:
        names += [n for n, p in PRESETS.items() if p.committed and n not in names]
    if not names:
        parser.error("give --preset NAME, --all or --list")
    for name in names:
        try:
            prof = from_preset(name, args.seed)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        csv_path, json_path = write(prof, args.output)
        print(
            f"{name}: {len(prof.rows)} rows, {prof.model.num_stages} stages, "
            f"{len(prof.clocks_mhz)} clocks, P_block {prof.blocking_power_w:.2f} W -> "
            f"{csv_path} (+ {json_path.name})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

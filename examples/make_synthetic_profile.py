"""Write a SYNTHETIC time/energy profile of a GPT-3-like pipeline on A100 GPUs.

The numbers are produced by the small analytical model below plus seeded
noise. They are not measurements of any real GPU; they only have the shape
real profiles have, so perseus can be tried and tested without hardware.

Model, for one stage and instruction, at SM frequency ``f`` (MHz)::

    time(f)   = t0 * (a + (1 - a) * f_max / f)
    v(f)      = v_min + (1 - v_min) * softplus((f - f_knee) / w) / softplus((f_max - f_knee) / w)
    power(f)  = P_static + P_dynamic * u * (f / f_max) * v(f)**2
    energy(f) = power(f) * time(f)

- ``t0`` is the time at ``f_max`` = 1410 MHz. Forward times are about 20 ms
  on middle stages (each a little different), heavier on the first stage
  (token embedding) and the last (LM head and loss); backward takes about
  twice its forward.
- ``a`` is the memory-bound share of the work, which does not speed up with
  the SM clock.
- ``v`` is the relative core voltage: it falls with the clock down to a floor
  ``v_min`` near ``f_knee``, below which only the frequency drops. Static
  power then dominates, so energy per computation falls as the clock goes
  down to about ``f_knee`` and rises below it: the lowest clocks are
  Pareto-dominated.
- ``u`` is the SM utilisation of the instruction.
- Time and energy get independent multiplicative Gaussian noise (0.25 % and
  0.35 %), drawn from ``random.Random(seed)``, and are written with six
  significant digits. The same seed always gives the same file.

Frequencies follow the A100's 15 MHz SM clock grid. The default output,
``gpt3-a100-8stage.csv``, has 8 stages and 1410..810 MHz; ``--small`` writes
``small-4stage.csv`` with 4 stages and 1410..1110 MHz in 30 MHz steps. The
blocking power is not part of the CSV; like the profiler, the script writes it
(``--blocking-power``, 70 W by default, about right for an A100) to the JSON
sidecar beside it (``gpt3-a100-8stage.json``), where ``perseus optimize``
finds it.

Usage::

    python examples/make_synthetic_profile.py [--small] [--seed N] [--output PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from pathlib import Path

F_MAX_MHZ = 1410
F_KNEE_MHZ = 880.0
KNEE_WIDTH_MHZ = 40.0
V_MIN = 0.75  # voltage floor relative to the voltage at F_MAX_MHZ
P_STATIC_W = 80.0
P_DYNAMIC_W = 300.0  # dynamic power at F_MAX_MHZ and full utilisation
TIME_NOISE = 0.0025
ENERGY_NOISE = 0.0035

PRESETS = {
    "default": dict(stages=8, f_min=810, step=15, output="gpt3-a100-8stage.csv"),
    "small": dict(stages=4, f_min=1110, step=30, output="small-4stage.csv"),
}


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def relative_voltage(f_mhz: float) -> float:
    """Core voltage at ``f_mhz`` relative to the voltage at F_MAX_MHZ."""
    rise = softplus((f_mhz - F_KNEE_MHZ) / KNEE_WIDTH_MHZ)
    top = softplus((F_MAX_MHZ - F_KNEE_MHZ) / KNEE_WIDTH_MHZ)
    return V_MIN + (1.0 - V_MIN) * rise / top


def stage_models(num_stages: int, rng: random.Random) -> list[dict[str, tuple]]:
    """Per stage, per instruction: (t0 in s, memory-bound share a, utilisation u)."""
    models = []
    for stage in range(num_stages):
        forward = 0.020 * rng.uniform(0.96, 1.04)
        memory_share = 0.25 + rng.uniform(-0.02, 0.02)
        backward_ratio = rng.uniform(1.95, 2.05)
        if stage == 0:  # token embedding: extra, mostly memory-bound work
            forward += 0.007
            memory_share += 0.08
            backward_ratio -= 0.08
        if stage == num_stages - 1:  # LM head and loss: a large matmul
            forward += 0.014
            memory_share -= 0.05
            backward_ratio += 0.08
        models.append(
            {
                "forward": (forward, memory_share, 0.80),
                "backward": (forward * backward_ratio, memory_share - 0.05, 0.85),
            }
        )
    return models


def profile_rows(num_stages: int, f_min: int, step: int, seed: int) -> list[tuple]:
    """Rows (stage, instruction, frequency MHz, time s, energy J) of the profile."""
    rng = random.Random(seed)
    models = stage_models(num_stages, rng)
    frequencies = range(F_MAX_MHZ, f_min - 1, -step)
    rows = []
    for stage, model in enumerate(models):
        for instruction in ("forward", "backward"):
            t0, a, u = model[instruction]
            for f in frequencies:
                time = t0 * (a + (1.0 - a) * F_MAX_MHZ / f)
                power = P_STATIC_W + P_DYNAMIC_W * u * (f / F_MAX_MHZ) * relative_voltage(f) ** 2
                energy = power * time
                time *= 1.0 + rng.gauss(0.0, TIME_NOISE)
                energy *= 1.0 + rng.gauss(0.0, ENERGY_NOISE)
                rows.append((stage, instruction, f, f"{time:.6g}", f"{energy:.6g}"))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--small", action="store_true", help="4 stages, 1410..1110 MHz in 30 MHz steps"
    )
    parser.add_argument("--seed", type=int, default=2024, help="noise seed (default 2024)")
    parser.add_argument(
        "--output", type=Path, help="CSV file to write (default: beside this script)"
    )
    parser.add_argument(
        "--blocking-power",
        type=float,
        default=70.0,
        help="watts a waiting GPU draws, for the sidecar (default 70)",
    )
    args = parser.parse_args(argv)

    preset = PRESETS["small" if args.small else "default"]
    output = args.output or Path(__file__).resolve().parent / preset["output"]
    rows = profile_rows(preset["stages"], preset["f_min"], preset["step"], args.seed)
    with open(output, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(("stage", "instruction", "frequency", "time", "energy"))
        writer.writerows(rows)
    # The key perseus reads (perseus._sidecar.BLOCKING_POWER_KEY); this script stays standalone.
    sidecar = {
        "format": "perseus-synthetic-profile",
        "version": 1,
        "blocking_power_w": args.blocking_power,
        "note": "synthetic: a simple model of an A100, not a measurement "
        "(examples/make_synthetic_profile.py)",
    }
    output.with_suffix(".json").write_text(json.dumps(sidecar, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(rows)} rows to {output} and the blocking power to its .json sidecar")


if __name__ == "__main__":
    main()

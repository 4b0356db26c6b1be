"""The `perseus optimize` command line, run in-process and as a real console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import perseus
import pytest
from perseus.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SMALL = EXAMPLES / "small-4stage.csv"


def test_optimize_prints_summary_and_writes_frontier(tmp_path, capsys):
    out = tmp_path / "out"
    status = main(
        [
            "optimize",
            str(SMALL),
            "--microbatches",
            "8",
            "--blocking-power",
            "70",
            "-o",
            str(out),
            "--quiet",
        ]
    )
    assert status == 0
    printed = capsys.readouterr().out
    frontier = perseus.Frontier.load(out / "frontier.json")
    profile = perseus.Profile.from_csv(SMALL, blocking_power_w=70.0)
    again = perseus.optimize(profile, microbatches=8)
    # What is printed is what was solved and saved.
    assert f"{frontier.baseline.iteration_time_s:.4f} s" in printed
    assert f"{frontier.fastest.energy_j:.1f} J" in printed
    assert f"plans          {len(frontier)} " in printed
    saving = 100 * (1 - frontier.fastest.energy_j / frontier.baseline.energy_j)
    assert f"({saving:.2f}% less energy)" in printed
    assert len(frontier) == len(again)
    assert frontier.energies_j.tolist() == pytest.approx(again.energies_j.tolist(), rel=1e-12)


def test_optimize_interleaved_options(tmp_path, capsys):
    status = main(
        [
            "optimize",
            str(SMALL),
            "--microbatches",
            "4",
            "--blocking-power",
            "50",
            "--schedule",
            "interleaved-1f1b",
            "--virtual-stages",
            "2",
            "--unit-time",
            "0.002",
            "-o",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert status == 0
    frontier = perseus.Frontier.load(tmp_path / "frontier.json")
    assert frontier.spec.schedule == "interleaved-1f1b"
    assert frontier.spec.num_gpus == 2 and frontier.spec.virtual_stages == 2
    assert frontier.unit_time_s == 0.002
    assert "2 GPUs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.csv", "--microbatches", "8", "--blocking-power", "70"], "missing.csv"),
        ([str(SMALL), "--microbatches", "0", "--blocking-power", "70"], "microbatches must be"),
        ([str(SMALL), "--microbatches", "8", "--blocking-power", "-1"], "blocking_power"),
        (
            [str(SMALL), "--microbatches", "8", "--blocking-power", "70", "--virtual-stages", "3"],
            "virtual_stages",
        ),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, args, message):
    status = main(["optimize", *args, "-o", str(tmp_path), "--quiet"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("perseus: error:") and message in err
    assert not (tmp_path / "frontier.json").exists()


def test_bad_row_names_file_line_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    lines = SMALL.read_text().splitlines()
    fields = lines[3].split(",")
    fields[3] = "fast"
    lines[3] = ",".join(fields)
    bad.write_text("\n".join(lines) + "\n")
    status = main(
        [
            "optimize",
            str(bad),
            "--microbatches",
            "8",
            "--blocking-power",
            "70",
            "-o",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert "bad.csv" in err and "line 4" in err and "time" in err


def test_console_script_runs(tmp_path):
    script = shutil.which("perseus", path=str(Path(sys.executable).parent))
    assert script is not None, "the perseus console script is not installed"
    done = subprocess.run(
        [
            script,
            "optimize",
            str(SMALL),
            "--microbatches",
            "8",
            "--blocking-power",
            "70",
            "-o",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "fastest plan" in done.stdout
    assert (tmp_path / "frontier.json").exists()
    version = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"perseus {perseus.__version__}"

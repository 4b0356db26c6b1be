"""`perseus bench`: the result file, the table and every exit path of a baseline comparison.

Real solves of the small example in real child processes (the command's own
mechanism); the checks of a result do not reuse the benchmark's arithmetic:
the all-fastest energy over a deadline is recomputed from the pipeline's size
and the blocking power, and the counters are compared with an in-process
`perseus.optimize` of the same case.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import perseus
import pytest
from perseus.benchmark import SCHEMA, compare, load_result
from perseus.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SMALL = EXAMPLES / "small-4stage.csv"
SMALL_POWER_W = 70.0  # examples/small-4stage.json


def run(capsys, *args):
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def one_line_error(status, err, *needles):
    assert status == 2, err
    assert err.count("\n") == 1, err
    assert ": error: " in err, err
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """The small example benchmarked once, two microbatch counts, two repeats: (path, document)."""
    directory = tmp_path_factory.mktemp("bench")
    csv = directory / SMALL.name
    shutil.copy(SMALL, csv)
    shutil.copy(SMALL.with_suffix(".json"), csv.with_suffix(".json"))
    path = directory / "result.json"
    assert main(["bench", str(csv), "-m", "4", "8", "--repeats", "2", "--json", str(path)]) == 0
    return path, json.loads(path.read_text())


def doctored(tmp_path, document, change):
    copy = json.loads(json.dumps(document))
    change(copy)
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps(copy))
    return path


def profile_of(document):
    return document["cases"][0]["profile"]


# --- the result --------------------------------------------------------------------------


def test_result_is_versioned_and_each_case_complete(result):
    _, document = result
    assert document["schema"] == SCHEMA == "perseus-bench/1"
    assert document["perseus_version"] == perseus.__version__
    assert [c["microbatches"] for c in document["cases"]] == [4, 8]
    for case in document["cases"]:
        assert case["repeats"] == 2
        for timing in (case["cpu_s"], case["wall_s"]):
            assert 0 <= timing["min"] <= timing["median"] <= timing["max"]
        assert case["deterministic"] is True
        assert case["steps"] > 0
        assert case["cuts"] > 0
        assert case["plans"] > 1
        assert case["peak_rss_bytes"] > 10 * 2**20  # an interpreter with numpy, at least
        assert case["blocking_power_w"] == SMALL_POWER_W  # read from the sidecar


def test_counters_and_energies_match_an_independent_solve(result):
    _, document = result
    case = document["cases"][1]
    profile = perseus.Profile.from_csv(case["profile"], blocking_power_w=SMALL_POWER_W)
    frontier = perseus.optimize(profile, microbatches=8)
    assert (case["steps"], case["cuts"], case["plans"]) == (
        frontier.steps,
        frontier.cuts,
        len(frontier),
    )
    assert case["fastest"]["energy_j"] == pytest.approx(frontier.fastest.energy_j, rel=1e-12)
    all_fastest = case["all_fastest"]
    gpus = profile.num_stages  # one stage per GPU in 1F1B
    for point, factor in zip(case["slowdowns"], (1.05, 1.1, 1.2)):
        assert point["slowdown"] == factor
        deadline_s = factor * case["fastest"]["iteration_time_s"]
        assert point["deadline_s"] == pytest.approx(deadline_s)
        # all-fastest finishes, then every GPU waits at blocking power until the deadline
        waiting_j = all_fastest["energy_j"] + gpus * SMALL_POWER_W * (
            deadline_s - all_fastest["iteration_time_s"]
        )
        assert point["saving_percent"] == pytest.approx(100 * (1 - point["energy_j"] / waiting_j))
        assert 0 < point["saving_percent"] < 100
        # never dearer than the fastest plan waiting for the same deadline
        fastest = case["fastest"]
        fastest_waiting_j = fastest["energy_j"] + gpus * SMALL_POWER_W * (
            deadline_s - fastest["iteration_time_s"]
        )
        assert point["energy_j"] <= fastest_waiting_j * (1 + 1e-9)


def test_table_names_every_case(result, capsys):
    _, document = result
    status, out, _ = run(capsys, "bench", profile_of(document), "-m", "4", "--repeats", "1")
    assert status == 0
    header, row = out.splitlines()[:2]
    assert header.split()[:3] == ["cpu", "s", "med"]
    assert "save@1.05" in header
    assert row.endswith(f"{profile_of(document)} m=4 1f1b")


def test_json_without_file_prints_the_document(result, capsys):
    _, document = result
    status, out, _ = run(
        capsys, "bench", profile_of(document), "-m", "4", "--repeats", "1", "--json"
    )
    assert status == 0
    assert json.loads(out)["schema"] == SCHEMA


def test_json_file_is_not_overwritten_without_force(result, capsys):
    path, document = result
    before = path.read_text()
    status, _, err = run(capsys, "bench", profile_of(document), "-m", "4", "--json", path)
    one_line_error(status, err, str(path), "--force")
    assert path.read_text() == before


# --- the baseline's exit paths -----------------------------------------------------------


def rerun(capsys, document, baseline, *extra):
    # CPU time is not gated in these reruns: a busy machine can make a rerun
    # 1.5x slower than the fixture's run (seen in CI), and these tests are
    # about energies, work counters and exit paths; the CPU gate has its own
    # test on doctored numbers (test_cpu_time_is_gated_unless_told_not_to).
    return run(
        capsys,
        "bench",
        profile_of(document),
        "-m",
        "4",
        "8",
        "--repeats",
        "1",
        "--baseline",
        baseline,
        "--no-cpu-gate",
        *extra,
    )


def test_passes_against_itself(result, capsys):
    path, document = result
    status, out, _ = rerun(capsys, document, path)
    assert status == 0
    assert "REGRESSION" not in out
    assert f"no regression against {path}" in out


def test_energy_regression_fails_with_one_line_each(result, capsys, tmp_path):
    _, document = result

    def cheaper_before(d):  # the baseline was 0.1 % cheaper at the 1.1x point of m=8
        d["cases"][1]["slowdowns"][1]["energy_j"] *= 0.999

    baseline = doctored(tmp_path, document, cheaper_before)
    status, out, err = rerun(capsys, document, baseline)
    assert status == 1
    lines = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert len(lines) == 1, out
    assert "m=8 1f1b: energy at the 1.1x slowdown" in lines[0]
    assert "limit +0.01%" in lines[0]
    assert "1 regression(s)" in err
    # a looser limit lets the same change through
    status, out, _ = rerun(capsys, document, baseline, "--max-energy-regression", "0.5")
    assert status == 0, out


def test_work_counter_regression_fails(result, capsys, tmp_path):
    _, document = result

    def fewer_steps_before(d):
        d["cases"][0]["steps"] = d["cases"][0]["steps"] // 2
        d["cases"][0]["cuts"] = d["cases"][0]["cuts"] // 3

    status, out, _ = rerun(capsys, document, doctored(tmp_path, document, fewer_steps_before))
    assert status == 1
    lines = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert len(lines) == 2, out
    assert "m=4 1f1b: steps" in lines[0]
    assert "limit 1.5x" in lines[0]
    assert "m=4 1f1b: cuts" in lines[1]


def test_improvement_passes_and_says_so(result, capsys, tmp_path):
    _, document = result

    def dearer_before(d):
        d["cases"][0]["fastest"]["energy_j"] *= 1.01
        d["cases"][0]["steps"] *= 3

    status, out, _ = rerun(capsys, document, doctored(tmp_path, document, dearer_before))
    assert status == 0
    improvements = [line for line in out.splitlines() if line.startswith("improvement:")]
    assert len(improvements) == 2, out
    assert "REGRESSION" not in out


def test_missing_baseline_is_a_usage_error_before_any_work(result, capsys, tmp_path):
    _, document = result
    missing = tmp_path / "no-such-baseline.json"
    out_file = tmp_path / "new.json"
    status, out, err = run(
        capsys, "bench", profile_of(document), "-m", "4", "--baseline", missing, "--json", out_file
    )
    one_line_error(status, err, str(missing), "does not exist")
    assert out == ""
    assert not out_file.exists()


def test_schema_mismatch_is_refused(result, capsys, tmp_path):
    _, document = result

    def older(d):
        d["schema"] = "perseus-bench/0"

    baseline = doctored(tmp_path, document, older)
    status, _, err = rerun(capsys, document, baseline)
    one_line_error(status, err, "perseus-bench/0", SCHEMA, "regenerate")
    with pytest.raises(ValueError, match="not a JSON object"):
        load_result(str(doctored(tmp_path, [], lambda _d: None)))


def test_baseline_without_any_common_case_is_an_error(result, capsys, tmp_path):
    _, document = result

    def renamed(d):
        for case in d["cases"]:
            case["name"] += " elsewhere"

    status, _, err = rerun(capsys, document, doctored(tmp_path, document, renamed))
    assert status == 2  # after the progress lines of the cases it ran
    last = err.splitlines()[-1]
    assert last.startswith(
        "perseus bench: error: the baseline has none of the cases run now; nothing to compare ("
    )
    # ... and says why of each case, which a user could not see before
    assert "m=4 1f1b: not in the baseline, not compared" in last
    assert "m=4 1f1b elsewhere: in the baseline but not run now" in last


def test_another_blocking_power_is_another_problem_not_a_regression(result, capsys, tmp_path):
    # A sidecar edit (or --blocking-power) changes every energy: 4 REGRESSION
    # lines and exit 1 before, for a solver that had not changed.
    _, document = result

    def other_power(d):
        d["cases"][0]["blocking_power_w"] = SMALL_POWER_W + 12
        for point in d["cases"][0]["slowdowns"]:
            point["energy_j"] *= 0.9

    status, out, _ = rerun(capsys, document, doctored(tmp_path, document, other_power))
    assert status == 0, out
    assert "REGRESSION" not in out
    assert f"m=4 1f1b: blocking power {SMALL_POWER_W:g} W, {SMALL_POWER_W + 12!r} W in the " in out


def test_a_profile_spelled_another_way_is_the_same_case(result, capsys, monkeypatch):
    _, document = result
    csv = Path(profile_of(document))
    monkeypatch.chdir(csv.parent)
    spelled = [f"./{csv.name}", csv.name, f"../{csv.parent.name}/{csv.name}"]
    names = set()
    for spelling in spelled:
        status, out, _ = run(capsys, "bench", spelling, "-m", "4", "--repeats", "1", "--json")
        assert status == 0, out
        names.add(json.loads(out)["cases"][0]["name"])
    assert len(names) == 1, names


def test_malformed_baseline_case_is_named(result, capsys, tmp_path):
    _, document = result

    def without_steps(d):
        del d["cases"][0]["steps"]

    status, _, err = rerun(capsys, document, doctored(tmp_path, document, without_steps))
    assert status == 2
    assert "baseline case" in err.splitlines()[-1]
    assert "m=4 1f1b" in err.splitlines()[-1]
    assert "'steps'" in err.splitlines()[-1]

    def negative_steps(d):  # was skipped as if there were no baseline
        d["cases"][0]["steps"] = -1

    status, _, err = rerun(capsys, document, doctored(tmp_path, document, negative_steps))
    assert status == 2
    assert "m=4 1f1b" in err.splitlines()[-1]
    assert "steps must be" in err.splitlines()[-1]


def test_cpu_time_is_gated_unless_told_not_to(result):
    _, document = result
    slower = json.loads(json.dumps(document))
    for case in slower["cases"]:
        case["cpu_s"]["min"] = 1.0
    baseline = json.loads(json.dumps(document))
    for case in baseline["cases"]:
        case["cpu_s"]["min"] = 0.5
    found = compare(slower, baseline, max_slowdown=1.5)
    assert len(found.regressions) == 2
    assert all("CPU time" in r for r in found.regressions)
    assert compare(slower, baseline, max_slowdown=2.5).regressions == []
    assert compare(slower, baseline, gate_cpu_time=False).regressions == []


# --- bad input -----------------------------------------------------------------------------


def test_bad_profile_names_the_file(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("stage,instruction,frequency,time,energy\n0,forward,1410,fast,8.6\n")
    status, out, err = run(capsys, "bench", bad, "-m", "4", "--blocking-power", "70")
    one_line_error(status, err, str(bad))
    assert out == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["bench", SMALL], "-m/--microbatches: required with PROFILE"),
        (["bench", "-m", "4"], "only with PROFILE"),
        (["bench", SMALL, "-m", "4", "--virtual-stages", "2"], "--virtual-stages"),
        (["bench", SMALL, "-m", "4", "--max-slowdown", "0.5"], "--max-slowdown"),
        (["bench", SMALL, "-m", "4", "--max-energy-regression", "-1"], "--max-energy-regression"),
        (["bench", SMALL, "-m", "0"], "--microbatches"),
        (["bench", SMALL, SMALL, "-m", "4"], "share the name"),
    ],
)
def test_flag_errors(capsys, args, needle):
    status, _, err = run(capsys, *args)
    one_line_error(status, err, needle)


def test_the_shipped_corpus_runs(capsys):
    status, out, _ = run(capsys, "bench", "--repeats", "1")
    assert status == 0
    rows = out.splitlines()[1:-1]
    assert [row.split("  ")[-1] for row in rows] == [
        "gpt3-a100-8stage m=128 1f1b",
        "gpt3-a100-8stage m=32 interleaved-1f1b v=2",
        "sosp24-gpt3-175b m=48 1f1b",
        "sosp24-bloom-176b m=48 1f1b",
    ]


# --- the documented CI example -----------------------------------------------------------


def test_the_github_actions_example_runs_a_valid_bench_command():
    """The workflow users copy: its `perseus bench` line parses, with and without the gate."""
    import shlex

    from perseus.cli._arguments import _parser

    yaml = pytest.importorskip("yaml")
    root = Path(__file__).resolve().parent.parent
    workflow = yaml.safe_load((root / "examples" / "perseus-bench-workflow.yml").read_text())
    steps = workflow["jobs"]["bench"]["steps"]
    runs = [s["run"] for s in steps if "perseus bench" in s.get("run", "")]
    assert len(runs) == 1
    (line,) = [ln.strip() for ln in runs[0].splitlines() if ln.strip().startswith("perseus bench")]
    profiles = workflow["env"]["PROFILES"]
    for gate in ([], ["--baseline", "perseus-baseline.json"]):
        text = line.replace("$PROFILES", profiles).replace('"${gate[@]}"', shlex.join(gate))
        args = _parser().parse_args(shlex.split(text)[1:])
        assert args.command == "bench"
        assert args.profiles == profiles.split()
        assert args.json == "perseus-bench.json"
        assert args.baseline == (gate[1] if gate else None)
    # the baseline is restored on pull requests and saved on pushes, under one key prefix
    uses = {s.get("uses", "").split("@")[0]: s for s in steps}
    restore, save = uses["actions/cache/restore"], uses["actions/cache/save"]
    assert restore["with"]["path"] == save["with"]["path"] == "perseus-baseline.json"
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"])
    assert "pull_request" in restore["if"]
    assert "push" in save["if"]


# --- lowtime, the reference ----------------------------------------------------------------


def test_compare_lowtime_judges_both_solvers_by_the_same_replay(capsys, tmp_path):
    pytest.importorskip("lowtime")
    path = tmp_path / "with-lowtime.json"
    status, out, _ = run(
        capsys, "bench", SMALL, "-m", "4", "--repeats", "1", "--compare-lowtime", "--json", path
    )
    assert status == 0
    (case,) = json.loads(path.read_text())["cases"]
    lowtime = case["lowtime"]
    assert lowtime["plans"] > 1
    assert lowtime["wall_s"] > 0
    # lowtime's fastest replayed plan cannot beat all-fastest's time
    assert lowtime["fastest"]["iteration_time_s"] >= case["all_fastest"]["iteration_time_s"] * (
        1 - 1e-9
    )
    for mine, theirs in zip(case["slowdowns"], lowtime["slowdowns"]):
        assert theirs["slowdown"] == mine["slowdown"]
        assert theirs["energy_j"] is not None  # lowtime reaches within 1.05x of perseus's time
        assert theirs["energy_ratio"] == pytest.approx(mine["energy_j"] / theirs["energy_j"])
        assert 0.9 < theirs["energy_ratio"] < 1.01  # the two solvers agree closely
    assert f"lowtime {lowtime['version']}: {SMALL} m=4 1f1b:" in out


def test_compare_lowtime_skips_what_lowtime_cannot_solve(capsys):
    pytest.importorskip("lowtime")
    status, out, _ = run(
        capsys,
        "bench",
        EXAMPLES / "gpt3-a100-8stage.csv",
        "-m",
        "8",
        "--schedule",
        "interleaved-1f1b",
        "--virtual-stages",
        "2",
        "--repeats",
        "1",
        "--compare-lowtime",
    )
    assert status == 0
    assert "not compared (lowtime solves 1F1B only)" in out


def test_compare_lowtime_without_lowtime_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "lowtime", None)  # makes `import lowtime` fail
    status, _, err = run(capsys, "bench", SMALL, "-m", "4", "--compare-lowtime")
    one_line_error(status, err, "--compare-lowtime", "pip install lowtime")


def _children(pid):
    """Pids of `pid`'s child processes (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has ended; only its exit status is left to collect


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize(
    ("signame", "status", "sigterm_ignored"),
    [("SIGTERM", 143, False), ("SIGKILL", -9, False), ("SIGKILL", -9, True)],
)
def test_a_terminated_bench_takes_its_solving_child_with_it(
    tmp_path, signame, status, sigterm_ignored
):
    # SIGKILL ends `perseus bench` without any cleanup of its own, SIGTERM
    # as an exception (exit status 143): its child, solving a long case (20
    # repeats of a 8,192-computation solve, a minute or more), must not go on
    # at full CPU. Without the kernel's parent-death signal it went on until
    # its result met the closed pipe, 20 s and more later. A bench started with
    # SIGTERM ignored (nohup-like) hands that on to its worker, whose
    # parent-death signal is SIGTERM: the worker must not ignore it.
    import signal
    import subprocess
    import time

    csv = tmp_path / "gpt3.csv"
    shutil.copy(EXAMPLES / "gpt3-a100-8stage.csv", csv)
    shutil.copy(EXAMPLES / "gpt3-a100-8stage.json", csv.with_suffix(".json"))
    bench = subprocess.Popen(
        [sys.executable, "-m", "perseus", "bench", str(csv), "-m", "512", "--repeats", "20"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        preexec_fn=(lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
        if sigterm_ignored
        else None,
    )
    try:
        deadline = time.monotonic() + 120
        workers = []
        while not workers and time.monotonic() < deadline and bench.poll() is None:
            workers = _children(bench.pid)
            time.sleep(0.05)
        assert workers, "perseus bench started no child process"
        time.sleep(1.0)  # into the worker's imports and solve
        bench.send_signal(getattr(signal, signame))
        assert bench.wait(timeout=30) == status
        deadline = time.monotonic() + 10  # a signal's delivery, however busy the machine
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(w) for w in workers), "the bench's child outlived it"
    finally:
        if bench.poll() is None:
            bench.kill()
        for w in _children(bench.pid) if bench.poll() is None else []:
            os.kill(w, signal.SIGKILL)

"""frontier.json: version 2 round trip, the strict reader, version 1, and how save writes."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import perseus
import pytest
from perseus import Frontier, Profile

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def profile():
    return Profile.from_csv(EXAMPLES / "small-4stage.csv", blocking_power_w=70.0)


@pytest.fixture(scope="module")
def frontier(profile):
    return perseus.optimize(profile, microbatches=4)


@pytest.fixture
def document(tmp_path, frontier):
    frontier.save(tmp_path / "good.json", version=2)
    return json.loads((tmp_path / "good.json").read_text())


def write(tmp_path, document, name="bad.json"):
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def test_version_2_is_readable_without_perseus(tmp_path, frontier):
    frontier.save(tmp_path / "f.json", version=2)
    document = json.loads((tmp_path / "f.json").read_text())
    assert document["version"] == 2
    # Every plan lists all its frequencies, and the file says which computation each is.
    computations = document["computations"]
    for plan, entry in zip(frontier, document["plans"]):
        assert entry["frequencies_mhz"] == plan.frequencies_mhz.tolist()
        assert "changes" not in entry
    i = 5
    assert plan.frequency(
        stage=computations["stage"][i],
        instruction=computations["instruction"][i],
        microbatch=computations["microbatch"][i],
    ) == int(document["plans"][-1]["frequencies_mhz"][i])
    assert len(document["profile"]["rows"]) == sum(
        len(frontier.profile.measured(s, k)) for s in range(4) for k in ("forward", "backward")
    )


def test_a_warning_about_a_stored_row_names_the_file_and_row(tmp_path):
    # Stage 0's slowest forward row made 30x slower (a likely unit slip): no
    # plan uses it (it is slower and costlier than its neighbours), so the
    # file stays valid and only warns when it is read back.
    with open(EXAMPLES / "small-4stage.csv") as file:
        rows = [line.strip().split(",") for line in file][1:]
    slowest = min(
        (k for k, r in enumerate(rows) if r[0] == "0" and r[1] == "forward"),
        key=lambda k: int(rows[k][2]),
    )
    rows[slowest][3] = repr(30 * float(rows[slowest][3]))
    rows[slowest][4] = repr(2 * float(rows[slowest][4]))
    with pytest.warns(perseus.ProfileWarning, match=r"records\[\d+\]: stage 0 forward"):
        odd = Profile.from_records(rows, blocking_power_w=70.0)
    path = tmp_path / "odd.json"
    perseus.optimize(odd, microbatches=4).save(path)
    stored = json.loads(path.read_text())["profile"]["rows"]
    index = next(k for k, r in enumerate(stored) if r[3] == float(rows[slowest][3]))
    with pytest.warns(perseus.ProfileWarning) as caught:
        Frontier.load(path)
    messages = [str(w.message) for w in caught]
    assert any(
        m.startswith(f"{path}: profile.rows[{index}]: stage 0 forward") and "unit slip" in m
        for m in messages
    ), messages
    assert not any("records[" in m for m in messages), messages


def test_version_3_is_readable_without_perseus(tmp_path, frontier):
    """The documented layout, decoded with base64 and struct only (no numpy, no perseus)."""
    import base64
    import struct

    frontier.save(tmp_path / "f.json")
    document = json.loads((tmp_path / "f.json").read_text())
    assert document["version"] == 3
    plans = document["plans"]
    count, n = plans["count"], frontier.spec.num_computations

    def numbers(key, code):
        raw = base64.b64decode(plans[key])
        return list(struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))

    times, counts = numbers("iteration_time_s", "d"), numbers("change_counts", "I")
    ids, mhz = numbers("change_ids", "I"), numbers("change_mhz", "H")
    row, at = numbers("first_mhz", "H"), 0
    assert count == len(frontier)
    assert len(row) == n
    assert counts[0] == 0
    for k, plan in enumerate(frontier):
        for _ in range(counts[k]):
            row[ids[at]] = mhz[at]
            at += 1
        assert row == plan.frequencies_mhz.tolist()
        assert times[k] == plan.iteration_time_s
    assert at == len(ids)


def test_version_3_is_much_smaller_than_version_2(tmp_path, frontier):
    frontier.save(tmp_path / "v3.json")
    frontier.save(tmp_path / "v2.json", version=2)
    v2, v3 = (json.loads((tmp_path / f"v{v}.json").read_text())["plans"] for v in (2, 3))
    assert len(json.dumps(v3)) * 4 < len(json.dumps(v2))  # 32 computations; more: larger ratio


def test_one_gpu_of_one_plan_without_the_rest(tmp_path, frontier):
    frontier.save(tmp_path / "f.json")
    loaded = Frontier.load(tmp_path / "f.json")
    for k in (0, 1, len(frontier) // 2, len(frontier) - 1):
        for gpu in range(frontier.spec.num_gpus):
            ids = loaded.computations_of_gpu(gpu)
            want = frontier[k].frequencies_mhz[ids]
            assert loaded.frequencies_mhz(k, gpu=gpu).tolist() == want.tolist()
            assert frontier.frequencies_mhz(k, gpu=gpu).tolist() == want.tolist()
    assert loaded.index(loaded.plan_for(loaded.iteration_times_s[3])) == 3
    assert loaded.index(frontier[7]) == 7  # the same plan, made elsewhere
    with pytest.raises(ValueError, match="gpu must be in"):
        loaded.frequencies_mhz(0, gpu=frontier.spec.num_gpus)


def test_round_trip_keeps_everything(tmp_path, frontier):
    frontier.save(tmp_path / "f.json")
    loaded = Frontier.load(tmp_path / "f.json")
    assert loaded.spec == frontier.spec
    assert loaded.baseline == frontier.baseline
    assert loaded.iteration_times_s.tolist() == frontier.iteration_times_s.tolist()
    assert loaded.energies_j.tolist() == frontier.energies_j.tolist()
    assert loaded.phase_times_s == frontier.phase_times_s
    assert loaded.cuts == frontier.cuts
    for a, b in zip(loaded, frontier):
        assert np.array_equal(a.frequencies_mhz, b.frequencies_mhz)
    # The stored profile comes back, so power and timelines work from the file alone.
    assert loaded.profile is not None
    assert loaded.fastest.profile is loaded.profile
    assert loaded.profile.blocking_power_w == frontier.profile.blocking_power_w
    assert loaded.peak_powers_w().tolist() == pytest.approx(frontier.peak_powers_w().tolist())


def test_a_pickled_frontier_comes_back_whole_and_checked(frontier):
    # multiprocessing and caches pickle frontiers: as the file's text, checked again.
    back = pickle.loads(pickle.dumps(frontier))
    assert back.spec == frontier.spec
    assert back.baseline == frontier.baseline
    assert back.iteration_times_s.tolist() == frontier.iteration_times_s.tolist()
    assert back.energies_j.tolist() == frontier.energies_j.tolist()
    assert back.fingerprint == frontier.fingerprint
    for a, b in zip(back, frontier):
        assert np.array_equal(a.frequencies_mhz, b.frequencies_mhz)
    deadline = float(frontier.iteration_times_s[3] * 1.001)
    assert back.profile is not None  # plan_for fits plans on it
    assert back.plan_for(deadline).energy_at(deadline) == frontier.plan_for(deadline).energy_at(
        deadline
    )
    # A pickle whose stored energy was edited is refused, naming what is wrong.
    unpickle, (cls, text) = frontier.__reduce__()
    document = json.loads(text)
    document["baseline"]["energy_j"] *= 1.5
    with pytest.raises(ValueError, match=r"pickled frontier.*baseline\.energy_j"):
        unpickle(cls, json.dumps(document))


def to_version_1(document):
    """The same frontier as perseus 0.1 wrote it: later plans as changes, no profile."""
    old = {k: v for k, v in document.items() if k not in ("computations", "profile")}
    old["version"] = 1
    plans, previous = [], None
    for entry in document["plans"]:
        entry = dict(entry)
        if previous is not None:
            mhz = entry.pop("frequencies_mhz")
            entry["changes"] = [[i, f] for i, (f, p) in enumerate(zip(mhz, previous)) if f != p]
            previous = mhz
        else:
            previous = entry["frequencies_mhz"]
        plans.append(entry)
    old["plans"] = plans
    return old


def test_version_1_is_still_read(tmp_path, frontier, document, profile):
    path = write(tmp_path, to_version_1(document), "v1.json")
    loaded = Frontier.load(path)
    for a, b in zip(loaded, frontier):
        assert np.array_equal(a.frequencies_mhz, b.frequencies_mhz)
    assert loaded.profile is None
    with pytest.raises(ValueError, match="need the profile"):
        loaded.peak_powers_w()
    middle = float(np.mean(loaded.iteration_times_s[:2]))
    with pytest.raises(ValueError, match="needs the profile"):
        loaded.plan_for(middle, tailored=True)
    # Given the profile, it is checked against it and attached.
    with_profile = Frontier.load(path, profile)
    assert with_profile.fastest.power_timeline().peak_w > 0
    assert with_profile.plan_for(middle, tailored=True).iteration_time_s <= middle


def test_version_1_negative_change_index_is_refused(tmp_path, document):
    old = to_version_1(document)
    old["plans"][1]["changes"] = [[-1, 1410]]
    path = write(tmp_path, old)
    with pytest.raises(
        ValueError, match=r"plans\[1\]\.changes\[0\]\[0\]: must be in 0\.\.31, got -1"
    ):
        Frontier.load(path)


def set_path(document, path, value):
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


CORRUPTIONS = [
    (
        ("plans", 0, "frequencies_mhz", 3),
        -1410,
        r"plans\[0\]\.frequencies_mhz\[3\]: expected whole MHz in 1\.\.100000, got number -1410",
    ),
    (("plans", 0, "frequencies_mhz", 3), 0, r"frequencies_mhz\[3\]: expected whole MHz"),
    (
        ("plans", 0, "frequencies_mhz", 3),
        1410.7,
        r"frequencies_mhz\[3\]: expected whole MHz in 1\.\.100000, got number 1410\.7",
    ),
    (("plans", 0, "frequencies_mhz", 3), True, r"got boolean true"),
    (("plans", 0, "frequencies_mhz", 3), 2**32 + 1410, r"frequencies_mhz\[3\]"),
    (
        ("plans", 0, "frequencies_mhz", 3),
        1234,
        r"plans\[0\]\.frequencies_mhz\[3\]: 1234 MHz was never measured for stage 0 backward in the profile stored",
    ),
    (("plans", 1, "iteration_time_s"), -1.0, r"plans\[1\]\.iteration_time_s: must be > 0 seconds"),
    (("plans", 1, "energy_j"), -5.0, r"plans\[1\]\.energy_j: must be > 0 joules"),
    (
        ("plans", 1, "energy_j"),
        "5",
        r"plans\[1\]\.energy_j: expected a number of joules, got string '5'",
    ),
    (
        ("plans", 1, "iteration_time_s"),
        0.5,
        r"plans\[1\]\.iteration_time_s: .* strictly increasing",
    ),
    (
        ("plans", 2, "energy_j"),
        1.0,
        r"plans\[2\]\.energy_j: the file says 1\.0 but the plan replays to",
    ),
    (("plans", 0, "surprise"), 1, r"plans\[0\]: unknown field\(s\) 'surprise'"),
    (("plans",), [], r"plans: a frontier needs at least one plan"),
    (("pipeline", "schedule"), "zb-h1", r"pipeline\.schedule: unknown schedule string 'zb-h1'"),
    (("pipeline", "num_gpus"), -4, r"pipeline\.num_gpus: must be in 1\.\."),
    (
        ("pipeline", "microbatches"),
        2.0,
        r"pipeline\.microbatches: expected an integer, got number 2\.0",
    ),
    (("pipeline", "extra"), 1, r"pipeline: unknown field\(s\) 'extra'"),
    (("blocking_power_w",), 1e9, r"blocking_power_w: must be >= 0 and <= 10000 watts"),
    (("unit_time_s",), 0, r"unit_time_s: must be > 0 and <= 3600 seconds, got 0"),
    (("stop_reason",), "gave_up", r"stop_reason: expected one of"),
    (("steps",), -3, r"steps: must be in 0\.\."),
    (("phase_times_s", "min cut"), "fast", r"phase_times_s\.min cut: expected a number of seconds"),
    (("baseline", "energy_j"), None, r"baseline\.energy_j: expected a number of joules, got null"),
    (
        ("computations", "stage", 4),
        3,
        r"computations\.stage\[4\]: computation 4 is 0 in perseus's id order",
    ),
    (("computations", "instruction"), [], r"computations\.instruction: expected 32 entries, got 0"),
    (
        ("profile", "rows", 0, 3),
        -0.01,
        r"profile: profile\.rows\[0\], field 'time': must be between",
    ),
    (("profile", "rows", 0, 3), "0.01", r"profile\.rows\[0\]: time must be a number, got string"),
    (
        ("profile", "blocking_power_w"),
        60.0,
        r"profile\.blocking_power_w: 60\.0 W, but the frontier's is 70\.0 W",
    ),
    (("junk",), "x" * 1000, r"\(top level\): unknown field\(s\) 'junk'"),
]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    CORRUPTIONS,
    ids=[f"{'.'.join(map(str, c[0]))}={str(c[1])[:12]}" for c in CORRUPTIONS],
)
def test_corrupt_field_is_named(tmp_path, document, path, value, message):
    set_path(document, path, value)
    bad = write(tmp_path, document)
    with pytest.raises(ValueError, match=rf"^{bad}: malformed frontier file: .*{message}"):
        Frontier.load(bad)


@pytest.mark.parametrize(
    ("key"), ["plans", "pipeline", "baseline", "profile", "computations", "blocking_power_w"]
)
def test_missing_field_is_named(tmp_path, document, key):
    del document[key]
    bad = write(tmp_path, document)
    with pytest.raises(ValueError, match=rf"\(top level\): missing '{key}'"):
        Frontier.load(bad)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"format": "perseus-frontier", "version": 2, "x": NaN}', "NaN is not a number"),
        ('{"format": "perseus-frontier", "version": 2, "x": Infinity}', "Infinity"),
        ("[" * 100000 + "]" * 100000, "nested too deeply|not valid JSON"),
        (
            '{"format": "perseus-frontier", "version": 2, "x": 1' + "0" * 5000 + "}",
            "not valid JSON",
        ),
    ],
)
def test_not_json(tmp_path, text, message):
    bad = write(tmp_path, text)
    with pytest.raises(ValueError, match=rf"^{bad}: .*({message})"):
        Frontier.load(bad)


def test_overflowing_number(tmp_path, document):
    document["plans"][1]["iteration_time_s"] = "HUGE"
    bad = write(tmp_path, json.dumps(document).replace('"HUGE"', "1e400"))
    with pytest.raises(ValueError, match=r"plans\[1\]\.iteration_time_s: must be a finite number"):
        Frontier.load(bad)


def test_not_utf8(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"format": "\xff"}')
    with pytest.raises(ValueError, match="not UTF-8"):
        Frontier.load(bad)


def test_size_cap(tmp_path, frontier):
    frontier.save(tmp_path / "f.json")
    size = (tmp_path / "f.json").stat().st_size
    with pytest.raises(ValueError, match=rf"{size} bytes is larger than a frontier file may be"):
        Frontier.load(tmp_path / "f.json", max_bytes=size - 1)
    assert len(Frontier.load(tmp_path / "f.json", max_bytes=size)) == len(frontier)


def test_devices_are_refused():
    with pytest.raises(ValueError, match="/dev/zero: a device, not a frontier file"):
        Frontier.load("/dev/zero")


def test_given_profile_is_checked_and_attached(tmp_path, frontier, profile):
    frontier.save(tmp_path / "f.json")
    assert Frontier.load(tmp_path / "f.json", profile).profile is profile
    other = Profile.from_records(
        [
            (s, k, f, 0.01 * (1 + s), 3.0)
            for s in range(4)
            for k in ("forward", "backward")
            for f in (1000, 1100)
        ],
        blocking_power_w=70.0,
    )
    with pytest.raises(
        ValueError,
        match=r"f\.json: the profile given is not the one this frontier was solved on: "
        r"plans\.first_mhz\[0\]: 1410 MHz was never measured .* in the profile given",
    ) as refused:
        Frontier.load(tmp_path / "f.json", other)
    assert "malformed" not in str(refused.value)  # the file is intact
    frontier.save(tmp_path / "v2.json", version=2)
    with pytest.raises(
        ValueError,
        match=r"plans\[0\]\.frequencies_mhz\[0\]: 1410 MHz was never measured .* in the profile given",
    ):
        Frontier.load(tmp_path / "v2.json", other)
    two_stages = Profile.from_records(
        [(s, k, 1410, 0.01, 3.0) for s in range(2) for k in ("forward", "backward")],
        blocking_power_w=70.0,
    )
    with pytest.raises(ValueError, match="4 stages, but the profile given has 2"):
        Frontier.load(tmp_path / "f.json", two_stages)


def test_save_keeps_the_mode(tmp_path, frontier):
    path = tmp_path / "f.json"
    path.write_text("old")
    os.chmod(path, 0o600)
    frontier.save(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(Frontier.load(path)) == len(frontier)


def test_save_refuses_a_symlink_unless_asked(tmp_path, frontier):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(FileExistsError, match="symbolic link") as info:
        frontier.save(link)
    assert info.value.filename == str(link)
    assert target.read_text() == "old"
    assert link.is_symlink()
    frontier.save(link, follow_symlinks=True)
    assert link.is_symlink()
    assert len(Frontier.load(target)) == len(frontier)


def test_save_errors_name_the_target(tmp_path, frontier):
    missing = tmp_path / "no" / "such" / "dir" / "f.json"
    with pytest.raises(FileNotFoundError) as info:
        frontier.save(missing)
    assert info.value.filename == str(missing)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(IsADirectoryError) as info:
        frontier.save(tmp_path / "dir.json")
    assert info.value.filename == str(tmp_path / "dir.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.json"]  # no temporary left


FINGERPRINT = {
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "tensor_parallel": 4,
    "sequence_length": 4096,
    "recompute": False,
    "driver": None,
    "memory_clock_ghz": 2.619,
}


def test_fingerprint_round_trip(tmp_path, profile):
    frontier = perseus.optimize(profile, microbatches=4, fingerprint=FINGERPRINT)
    assert dict(frontier.fingerprint) == FINGERPRINT
    with pytest.raises(TypeError):
        frontier.fingerprint["gpu_model"] = "A100"  # read-only
    frontier.save(tmp_path / "f.json")
    assert json.loads((tmp_path / "f.json").read_text())["fingerprint"] == FINGERPRINT
    loaded = Frontier.load(tmp_path / "f.json")
    assert dict(loaded.fingerprint) == FINGERPRINT
    assert all(type(loaded.fingerprint[k]) is type(v) for k, v in FINGERPRINT.items())


def test_fingerprint_is_empty_when_absent(tmp_path, frontier, document):
    assert dict(frontier.fingerprint) == {}
    assert "fingerprint" not in document
    assert dict(Frontier.load(write(tmp_path, document)).fingerprint) == {}


@pytest.mark.parametrize(
    ("fingerprint", "message"),
    [
        ([1, 2], "expected an object"),
        ({"gpu": [1]}, r"fingerprint\.gpu: expected a string"),
        ({"gpu": {"a": 1}}, r"fingerprint\.gpu: expected a string"),
        ({"": 1}, "must be 1 to 64"),
        ({"a b": 1}, "must be 1 to 64"),
        ({"k" * 65: 1}, "must be 1 to 64"),
        ({"gpu": "x" * 257}, r"fingerprint\.gpu: 257 characters"),
        ({"gpu": "a\u001b]0;pwn\u0007"}, "control character"),
        ({"tp": 2**64}, "64-bit"),
        ({f"k{i}": i for i in range(65)}, "65 fields"),
    ],
)
def test_fingerprint_is_checked_when_read(tmp_path, document, fingerprint, message):
    document["fingerprint"] = fingerprint
    bad = write(tmp_path, document)
    with pytest.raises(ValueError, match=rf"^{bad}: malformed frontier file: .*{message}"):
        Frontier.load(bad)


def test_fingerprint_is_checked_when_given(profile):
    with pytest.raises(TypeError, match=r"fingerprint\.gpu"):
        perseus.optimize(profile, microbatches=4, fingerprint={"gpu": object()})
    with pytest.raises(ValueError, match="finite"):
        perseus.optimize(profile, microbatches=4, fingerprint={"x": float("nan")})


@pytest.mark.parametrize("version", [2, 3])
def test_a_doctored_baseline_is_refused(tmp_path, frontier, version):
    """Issue 26: doubling the baseline energy and halving its time made summary() claim 54.5 %."""
    frontier.save(tmp_path / "f.json", version=version)
    document = json.loads((tmp_path / "f.json").read_text())
    document["baseline"]["energy_j"] *= 2
    bad = write(tmp_path, document)
    with pytest.raises(ValueError, match=r"baseline\.energy_j: the file says .* replays to"):
        Frontier.load(bad)
    document["baseline"]["energy_j"] /= 2
    document["baseline"]["iteration_time_s"] /= 2
    bad = write(tmp_path, document)
    with pytest.raises(ValueError, match=r"baseline\.iteration_time_s: the file says"):
        Frontier.load(bad)


def test_duplicate_keys_are_refused(tmp_path, document):
    text = json.dumps(document)
    text = text.replace(
        '"blocking_power_w": 70.0', '"blocking_power_w": 70.0, "blocking_power_w": 9999', 1
    )
    bad = write(tmp_path, text)
    with pytest.raises(
        ValueError, match=rf"^{bad}: not valid JSON: the key 'blocking_power_w' appears twice"
    ):
        Frontier.load(bad)


def test_energy_before_reclaim_below_energy_is_refused(tmp_path, document):
    document["plans"][2]["energy_before_reclaim_j"] = document["plans"][2]["energy_j"] / 2
    bad = write(tmp_path, document)
    with pytest.raises(
        ValueError, match=r"plans\[2\]\.energy_before_reclaim_j: .* reclamation never adds"
    ):
        Frontier.load(bad)


# --- version 3 at scale: a digest instead of replaying every plan at load (issue 23) ----------


def v3_document(tmp_path, frontier):
    frontier.save(tmp_path / "v3.json")
    return json.loads((tmp_path / "v3.json").read_text())


def v3_numbers(document, key, dtype):
    import base64

    return np.frombuffer(base64.b64decode(document["plans"][key]), dtype=dtype).copy()


def set_v3_numbers(document, key, values):
    import base64

    document["plans"][key] = base64.b64encode(values.tobytes()).decode("ascii")


def forge_digest(document):
    """What a careful forger does: recompute the digest by the documented rule."""
    import hashlib

    covered = {k: document[k] for k in ("pipeline", "blocking_power_w", "baseline", "profile")}
    covered["plans"] = {k: v for k, v in document["plans"].items() if k != "sha256"}
    text = json.dumps(covered, sort_keys=True, separators=(",", ":"))
    document["plans"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()


def unsampled_plan(count):
    """A plan index the load-time sample (32 plans spread evenly) does not replay."""
    sampled = set(np.linspace(0, count - 1, 32).round().astype(int).tolist())
    return next(k for k in range(count // 3, count) if k not in sampled)


def test_version_3_carries_a_digest_of_what_replays(tmp_path, frontier):
    document = v3_document(tmp_path, frontier)
    written = document["plans"]["sha256"]
    assert len(written) == 64
    assert int(written, 16) >= 0
    forge_digest(document)  # the documented rule gives the digest perseus wrote
    assert document["plans"]["sha256"] == written


def test_a_doctored_energy_is_refused_at_load_naming_the_plan(tmp_path, frontier):
    document = v3_document(tmp_path, frontier)
    k = unsampled_plan(len(frontier))
    energies = v3_numbers(document, "energy_j", "<f8")
    energies[k] *= 0.99  # 1 % cheaper than it is: still above its energy before reclamation
    set_v3_numbers(document, "energy_j", energies)
    bad = write(tmp_path, document)
    with pytest.raises(
        ValueError,
        match=rf"^{bad}: malformed frontier file: plans\.energy_j\[{k}\]: the file says "
        r".* but the plan replays to",
    ):
        Frontier.load(bad)


def test_a_doctored_clock_is_refused_at_load_naming_the_plan(tmp_path, frontier, profile):
    document = v3_document(tmp_path, frontier)
    counts = v3_numbers(document, "change_counts", "<u4").astype(np.int64)
    ids = v3_numbers(document, "change_ids", "<u4")
    mhz = v3_numbers(document, "change_mhz", "<u2")
    k = unsampled_plan(len(frontier))
    while counts[k] == 0:
        k += 1
    j = int(counts[:k].sum())  # plan k's first change
    pipeline = frontier.spec.pipeline()
    i = int(ids[j])
    measured = profile.measured(
        int(pipeline.stage[i]), ["forward", "backward"][pipeline.instruction[i]]
    )
    other = next(int(f) for f in measured.frequency_mhz if f != mhz[j])
    mhz[j] = other  # a clock that was measured, so only the replay can tell
    set_v3_numbers(document, "change_mhz", mhz)
    bad = write(tmp_path, document)
    with pytest.raises(ValueError, match=rf"plans\.(energy_j|iteration_time_s)\[{k}\]: the file"):
        Frontier.load(bad)


def test_a_forged_digest_is_caught_when_the_plan_is_first_used(tmp_path, frontier):
    document = v3_document(tmp_path, frontier)
    k = unsampled_plan(len(frontier))
    energies = v3_numbers(document, "energy_j", "<f8")
    energies[k] *= 0.99
    set_v3_numbers(document, "energy_j", energies)
    forge_digest(document)
    bad = write(tmp_path, document)
    loaded = Frontier.load(bad)  # not every plan is replayed at load...
    assert loaded[k - 1].energy_j == frontier[k - 1].energy_j
    message = rf"^{bad}: malformed frontier file: plans\.energy_j\[{k}\]: .*first used"
    with pytest.raises(ValueError, match=message):  # ...but each before it is used
        loaded.frequencies_mhz(k, gpu=0)
    with pytest.raises(ValueError, match=message):
        loaded[k]
    with pytest.raises(ValueError, match=message):
        loaded.plan_for(float(loaded.iteration_times_s[k]))
    with pytest.raises(ValueError, match=message):
        list(loaded)
    # A doctored plan that the load-time sample holds is refused at load.
    energies[len(frontier) - 1] *= 0.99
    set_v3_numbers(document, "energy_j", energies)
    forge_digest(document)
    with pytest.raises(ValueError, match=rf"plans\.energy_j\[{len(frontier) - 1}\]"):
        Frontier.load(write(tmp_path, document))


def test_a_wrong_digest_on_good_plans_is_refused(tmp_path, frontier):
    document = v3_document(tmp_path, frontier)
    document["solve_time_s"] = 99.0  # not covered: no replay depends on it
    Frontier.load(write(tmp_path, document))
    document["plans"]["sha256"] = "0" * 64
    with pytest.raises(ValueError, match=r"plans\.sha256: does not match .* changed after"):
        Frontier.load(write(tmp_path, document))
    document["plans"]["sha256"] = 12
    with pytest.raises(ValueError, match=r"plans\.sha256: expected 64 hexadecimal digits"):
        Frontier.load(write(tmp_path, document))


def test_a_version_3_file_without_digest_is_replayed_whole(tmp_path, frontier):
    """Files of the first version 3 (no digest) still load, every plan checked at once."""
    document = v3_document(tmp_path, frontier)
    del document["plans"]["sha256"]
    loaded = Frontier.load(write(tmp_path, document, "old.json"))
    assert np.array_equal(loaded.energies_j, frontier.energies_j)
    k = unsampled_plan(len(frontier))
    energies = v3_numbers(document, "energy_j", "<f8")
    energies[k] *= 0.99
    set_v3_numbers(document, "energy_j", energies)
    with pytest.raises(ValueError, match=rf"plans\.energy_j\[{k}\]: the file says"):
        Frontier.load(write(tmp_path, document))


def test_frontier_records_are_read_only(frontier):
    with pytest.raises(AttributeError):
        frontier.unit_time_s = 3.0
    for array in (
        frontier.iteration_times_s,
        frontier.energies_j,
        frontier.energies_before_reclaim_j,
        frontier.average_powers_w,
        frontier.reclaim_savings_j,
    ):
        assert array.dtype == np.float64
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1.0


def test_a_version_2_file_too_large_to_load_is_refused_before_it_is_built(
    tmp_path, frontier, monkeypatch
):
    """At 16 x 256 version 2 would be over 600 MB: refused without building the text."""
    import perseus.frontier as frontier_module

    least = 2 * len(frontier) * frontier.spec.num_computations

    def never(*args, **kwargs):
        raise AssertionError("the version 2 document was built")

    with monkeypatch.context() as patch:
        patch.setattr(frontier_module, "MAX_FILE_BYTES", least - 1)
        patch.setattr(frontier_module._frontier_file, "encode", never)
        with pytest.raises(
            ValueError, match=rf"take {least} bytes or more, .* save it as version 3"
        ):
            frontier.save(tmp_path / "f.json", version=2)
    assert not (tmp_path / "f.json").exists()
    frontier.save(tmp_path / "f.json", version=2)  # under the real cap it is written
    assert len(Frontier.load(tmp_path / "f.json")) == len(frontier)


def _profile_above_16_bits():
    """Clocks up to 80,000 MHz: inside LIMITS (MAX_CLOCK_MHZ), beyond what 16 bits hold."""
    rows = []
    for stage in range(2):
        for instruction, base_s in (("forward", 0.01), ("backward", 0.02)):
            for mhz in (60000, 65000, 70000, 80000):
                time_s = base_s * 80000 / mhz
                rows.append(
                    (stage, instruction, mhz, time_s, time_s * (50 + 300 * (mhz / 80000) ** 2))
                )
    return Profile.from_records(rows, blocking_power_w=40.0)


@pytest.mark.parametrize("built_by", ["solver", "user"])
def test_clocks_above_16_bits_survive_a_round_trip(tmp_path, built_by):
    """Whatever perseus can solve it can save and read back: clocks above 65,535 MHz are
    written in 32 bits (and said so), not wrapped into clocks never measured. A frontier a user
    builds from Plans goes through the same writer."""
    solved = perseus.optimize(_profile_above_16_bits(), microbatches=4, progress=False)
    frontier = solved
    if built_by == "user":
        frontier = Frontier(
            list(solved),
            baseline=solved.baseline,
            spec=solved.spec,
            unit_time_s=solved.unit_time_s,
            blocking_power_w=solved.blocking_power_w,
            solve_time_s=solved.solve_time_s,
        )
    assert max(int(p.frequencies_mhz.max()) for p in frontier) == 80000
    path = tmp_path / "frontier.json"
    frontier.save(path)
    assert json.loads(path.read_text())["plans"]["mhz_bits"] == 32
    loaded = Frontier.load(path)
    assert len(loaded) == len(frontier)
    for k in (0, len(frontier) // 2, len(frontier) - 1):
        np.testing.assert_array_equal(loaded[k].frequencies_mhz, frontier[k].frequencies_mhz)


def test_clocks_that_fit_16_bits_are_written_in_16(tmp_path, frontier):
    path = tmp_path / "frontier.json"
    frontier.save(path)
    assert "mhz_bits" not in json.loads(path.read_text())["plans"]


@pytest.mark.parametrize("bits", [8, 64, "32", True, None])
def test_an_unknown_clock_width_is_refused(tmp_path, frontier, bits):
    path = tmp_path / "frontier.json"
    frontier.save(path)
    document = json.loads(path.read_text())
    document["plans"]["mhz_bits"] = bits
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=r"plans\.mhz_bits"):
        Frontier.load(path)


def test_a_re_measured_profile_is_not_the_one_it_was_solved_on(tmp_path, frontier, profile):
    """Same clocks and same fastest rows, other times at some clocks: a sample of
    plans replayed on it can all fit, and plan_for then returned plans that
    missed their deadline on it. Every measured row is compared."""
    frontier.save(tmp_path / "f.json")
    records = [
        (s, k, int(f), float(t), float(e))
        for s in range(profile.num_stages)
        for k in ("forward", "backward")
        for f, t, e in zip(*(getattr(profile.measured(s, k), a) for a in
                             ("frequency_mhz", "time_s", "energy_j")))
    ]  # fmt: skip
    top = max(f for s, k, f, _, _ in records if (s, k) == (1, "backward"))
    slower = Profile.from_records(
        [
            (s, k, f, t * 1.1, e * 1.1)
            if (s, k) == (1, "backward") and f != top
            else (s, k, f, t, e)
            for s, k, f, t, e in records
        ],
        blocking_power_w=profile.blocking_power_w,
    )
    with pytest.raises(
        ValueError,
        match=r"not the one this frontier was solved on: stage 1 backward at \d+ MHz: time_s",
    ):
        Frontier.load(tmp_path / "f.json", slower)
    with pytest.raises(ValueError, match=r"blocking_power_w: the frontier was solved with 70\.0 W"):
        Frontier.load(tmp_path / "f.json", profile.with_blocking_power(80.0))


def test_saving_over_an_existing_file_without_overwrite_says_so(tmp_path, frontier):
    # It said the file "appeared while perseus was working" and to "pass --force".
    frontier.save(tmp_path / "f.json")
    with pytest.raises(perseus.errors.OutputExistsError) as refused:
        frontier.save(tmp_path / "f.json", overwrite=False)
    message = str(refused.value)
    assert "exists and was not overwritten (overwrite=True replaces it" in message
    assert "appeared" not in message
    assert os.path.exists(refused.value.kept_as)


def test_load_and_save_take_any_path_and_check_max_bytes(tmp_path, frontier):
    # bytes paths failed inside (str.endswith on bytes); max_bytes=-1, True or 1.5
    # were taken as caps and named in a "larger than" message, None raised raw.
    name = os.fsencode(tmp_path / "f.json")
    frontier.save(name)
    assert len(Frontier.load(name)) == len(frontier)
    for bad, kind in ((-1, ValueError), (0, ValueError), (True, TypeError), (1.5, TypeError),
                      (None, TypeError)):  # fmt: skip
        with pytest.raises(kind, match="max_bytes must be a whole number of bytes >= 1"):
            Frontier.load(name, max_bytes=bad)

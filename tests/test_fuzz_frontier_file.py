"""Fuzzing Frontier.load: mutated saved frontiers load as valid frontiers or are refused by name.

Starting from a frontier that `save` wrote, each case changes one or more
values anywhere in the document (every field, any JSON type, numbers out of
range, NaN written as JSON's extension, ids, deep nesting, huge strings),
deletes or adds keys, or damages the text itself (truncation, junk bytes,
flipped bytes). `Frontier.load` must either return a frontier that passes
every check below, or raise a `ValueError` (never a subclass that leaked
from a parser, never another type) whose one-line message starts with the
file's name and, for a malformed field, names the field.
"""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import perseus
import pytest
from fuzz_support import fuzz_settings, tally
from hypothesis import given
from hypothesis import strategies as st
from perseus import Frontier, Profile, ProfileWarning

FUZZ = fuzz_settings(120)

RECORDS = [
    (s, k, f, t * (1.0 + 0.25 * j), e * (1.0 - 0.2 * j))
    for s in range(2)
    for k, t, e in (("forward", 0.010, 5.0), ("backward", 0.020, 10.0))
    for j, f in enumerate((1410, 1200, 1000))
]
PROFILE = Profile.from_records(RECORDS, blocking_power_w=60.0)
FRONTIER = perseus.optimize(PROFILE, microbatches=2)


def _saved_text() -> str:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "f.json"
        FRONTIER.save(path)
        return path.read_text()


TEXT = _saved_text()
DOCUMENT = json.loads(TEXT)


def paths(node, prefix=()):
    """Every path into the document (dict keys and list indices), the root excluded."""
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for key, child in items:
        yield (*prefix, key)
        yield from paths(child, (*prefix, key))


PATHS = list(paths(DOCUMENT))

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, -4, 1, 2, 2**31, 2**32 + 1410, 2**63, 10**400, 1410, 1200, 63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 1e300, 1.7976931348623157e308, 1410.5]),
    st.text(max_size=20),
    st.sampled_from(["1f1b", "gpipe", "interleaved-1f1b", "forward", "backward", "min cut", "x"]),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def set_at(document, path, value):
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def delete_at(document, path):
    target = document
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]


@st.composite
def mutated_document(draw) -> bytes:
    document = json.loads(TEXT)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        action = draw(st.sampled_from(["set", "set", "set", "delete", "add", "nudge"]))
        try:
            if action == "set":
                set_at(document, path, draw(json_value))
            elif action == "delete":
                delete_at(document, path)
            elif action == "add":
                target = document
                for key in path[:-1]:
                    target = target[key]
                if isinstance(target, dict):
                    target[draw(st.text(max_size=8))] = draw(json_value)
                else:
                    target.append(draw(json_value))
            else:  # a plausible but wrong number where one was
                target = document
                for key in path[:-1]:
                    target = target[key]
                old = target[path[-1]]
                if isinstance(old, (int, float)) and not isinstance(old, bool):
                    factor = draw(st.sampled_from([-1, 0, 0.5, 1 + 1e-12, 2, 1000, 1e300]))
                    target[path[-1]] = (
                        type(old)(old * factor) if math.isfinite(old * factor) else old
                    )
        except (KeyError, IndexError, TypeError, AttributeError):
            # An earlier change moved the structure (or put a scalar where a
            # list was, which has no append); the case is still a mutation.
            pass
    return json.dumps(document).encode()


@st.composite
def damaged_text(draw) -> bytes:
    data = bytearray(TEXT.encode())
    action = draw(st.sampled_from(["truncate", "insert", "flip", "replace"]))
    at = draw(st.integers(0, len(data)))
    if action == "truncate":
        del data[at:]
    elif action == "insert":
        data[at:at] = draw(
            st.one_of(
                st.binary(min_size=1, max_size=20),
                st.sampled_from(
                    [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"[" * 5000, b"\xff\xfe"]
                ),
            )
        )
    elif action == "flip" and at < len(data):
        data[at] ^= 1 << draw(st.integers(0, 7))
    else:
        data[at : at + draw(st.integers(1, 40))] = draw(st.binary(max_size=40))
    return bytes(data)


def check_frontier(frontier: Frontier) -> None:
    """Everything a loaded Frontier promises (Frontier.load's checks, made independently)."""
    assert len(frontier) >= 1
    times = frontier.iteration_times_s
    energies = frontier.energies_j
    assert np.all(np.isfinite(times))
    assert np.all(times > 0)
    assert np.all(np.isfinite(energies))
    assert np.all(energies > 0)
    assert np.all(np.diff(times) > 0)
    profile = frontier.profile if frontier.profile is not None else PROFILE
    spec = frontier.spec
    assert spec.num_gpus >= 1
    assert spec.microbatches >= 1
    assert spec.virtual_stages >= 1
    pipeline = spec.pipeline()
    for plan in frontier:
        mhz = plan.frequencies_mhz
        assert len(mhz) == len(pipeline)
        for i in range(len(pipeline)):
            measured = profile.measured(
                int(pipeline.stage[i]), ("forward", "backward")[pipeline.instruction[i]]
            ).frequency_mhz
            assert int(mhz[i]) in measured.tolist()
    # It replays to what it says, and plan_for works across its range.
    replay = perseus.evaluate(profile, frontier.fastest)
    assert replay.iteration_time_s == pytest.approx(frontier.fastest.iteration_time_s, rel=1e-9)
    assert frontier.plan_for(float(times[-1]) * 2).iteration_time_s == times[-1]


def load_outcome(tmp_path, data: bytes, profile=None) -> str:
    path = tmp_path / "fuzz.json"
    path.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ProfileWarning)  # a stored row 20x off its neighbours
        try:
            frontier = Frontier.load(path, profile)
        except ValueError as error:
            message = str(error)
            # Any outcome is allowed for a mutated file; an error must be a clear one.
            assert type(error) is ValueError, f"{type(error).__name__}: {message}"  # noqa: PT017
            assert "\n" not in message, message
            assert message.startswith(f"{path}: "), message
            assert not message.endswith(": "), message
            if "malformed frontier file" in message:
                # ... names the field: "plans[1].energy_j: ..." or "(top level): ...".
                assert re.match(
                    rf"{re.escape(str(path))}: malformed frontier file: \S.*?: \S", message
                ), message
            kind = re.sub(
                r"\[\d+\]",
                "[i]",
                message[len(str(path)) + 2 :].split(": ")[-2 if "malformed" in message else 0],
            )
            tally(f"ValueError ({kind[:50]})")
            return message
    check_frontier(frontier)
    tally("valid frontier")
    return "frontier"


@FUZZ
@given(data=mutated_document())
def test_fuzz_mutated_fields(tmp_path, data):
    load_outcome(tmp_path, data)


@FUZZ
@given(data=mutated_document())
def test_fuzz_mutated_fields_against_the_profile(tmp_path, data):
    load_outcome(tmp_path, data, PROFILE)


@fuzz_settings(80)
@given(data=damaged_text())
def test_fuzz_damaged_text(tmp_path, data):
    load_outcome(tmp_path, data)


def test_unmutated_document_loads(tmp_path):
    assert load_outcome(tmp_path, TEXT.encode()) == "frontier"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 200_000, r"nested too deeply|not valid JSON"),
        ('{"a": ' * 50_000 + "1" + "}" * 50_000, r"nested too deeply|not valid JSON"),
        ("\ud800", r"not UTF-8|not valid JSON"),
        ("", r"not valid JSON"),
        ("null", r"not a perseus frontier file"),
        ("[]", r"not a perseus frontier file"),
        ('"perseus-frontier"', r"not a perseus frontier file"),
    ],
    ids=["deep-list", "deep-dict", "lone-surrogate", "empty", "null", "list", "string"],
)
def test_hostile_texts(tmp_path, text, message):
    result = load_outcome(tmp_path, text.encode("utf-8", "surrogatepass"))
    assert re.search(message, result), result


def test_a_huge_junk_key_is_refused_before_reading(tmp_path):
    document = json.loads(TEXT)
    document["junk"] = "x" * (2**20)
    result = load_outcome(tmp_path, json.dumps(document).encode())
    assert "unknown field(s) 'junk'" in result
    path = tmp_path / "fuzz.json"
    with pytest.raises(ValueError, match=r"bytes is larger than a frontier file may be"):
        Frontier.load(path, max_bytes=2**20)

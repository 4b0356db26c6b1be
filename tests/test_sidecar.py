"""The profile's sidecar read strictly (issue 26 item 4): duplicate keys, nesting, long
numbers and devices are one error naming the file, never a silent value or a traceback."""

from __future__ import annotations

import os

import pytest
from perseus._sidecar import read_blocking_power


def sidecar(tmp_path, text):
    csv = tmp_path / "p.csv"
    csv.write_text("")
    (tmp_path / "p.json").write_text(text)
    return csv


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"blocking_power_w": 70, "blocking_power_w": 9999}', "'blocking_power_w' appears twice"),
        ("[" * 100000 + "]" * 100000, "nested deeper"),
        ('{"blocking_power_w": 1' + "0" * 5000 + "}", "a number of 5001 characters"),
        ('{"blocking_power_w": NaN}', "NaN is not a number"),
    ],
)
def test_hostile_sidecars_are_one_error_naming_the_file(tmp_path, text, message):
    csv = sidecar(tmp_path, text)
    with pytest.raises(ValueError, match=message) as caught:
        read_blocking_power(csv)
    assert str(tmp_path / "p.json") in str(caught.value)


def test_a_sidecar_that_is_a_device_is_not_missing(tmp_path):
    csv = tmp_path / "p.csv"
    csv.write_text("")
    os.symlink("/dev/zero", tmp_path / "p.json")
    with pytest.raises(ValueError, match="a device, not a profile sidecar"):
        read_blocking_power(csv)


def test_a_good_sidecar(tmp_path):
    assert read_blocking_power(sidecar(tmp_path, '{"blocking_power_w": 70}')).blocking_power_w == 70


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_plan_that_is_a_device_is_refused_unread(tmp_path, device):
    """Issue 26 item 3: a plan path linked to /dev/zero read until memory ran out."""
    import perseus
    from perseus._zeus_plan import read_plan

    link = tmp_path / "freqs_pipeline_00000.py"
    os.symlink(device, link)
    with pytest.raises(ValueError, match="a device, not a plan file"):
        read_plan(link)
    profile = perseus.Profile.from_records(
        [(s, k, 1410, 0.01, 3.0) for s in range(2) for k in ("forward", "backward")],
        blocking_power_w=70.0,
    )
    json_link = tmp_path / "plan.json"
    os.symlink(device, json_link)
    from perseus._plan_files import read_plan as read_any

    with pytest.raises(ValueError, match="a device, not a plan file"):
        read_any(json_link, profile)


def test_a_zeus_plan_is_parsed_without_a_syntax_tree(tmp_path):
    """The tokenizer reads lowtime's layout, comments included, and refuses what is not data."""
    from perseus._zeus_plan import read_plan

    good = tmp_path / "freqs_pipeline_00001.py"
    good.write_text("[\n[('forward', 1410), (\"backward\", 1395)],\n[('forward', 1200)],\n]\n# t\n")
    assert read_plan(good) == [[("forward", 1410), ("backward", 1395)], [("forward", 1200)]]
    for text, message in [
        ("__import__('os').system('true')", "expected a non-empty list"),
        ("[[[[('forward', 1410)]]]]", "unexpected"),
        ("[[('forward', 1410)]] [1]", "text after the list"),
        ("[[('forward', 1410)]", "no complete list"),
    ]:
        good.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_plan(good)

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

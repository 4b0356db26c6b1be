"""Packaging: concurrent ``pip install .`` of one checkout cannot collide.

scikit-build-core builds in a fresh temporary folder per build unless
``[tool.scikit-build] build-dir`` names one; a fixed folder (it used to be
``build/{wheel_tag}`` in the tree) is shared by every build of the checkout,
and two at once corrupt each other. So pyproject.toml must not set it; a
developer who wants incremental rebuilds passes ``-Cbuild-dir=...`` on the
command line (CONTRIBUTING.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_no_build_folder_shared_between_builds() -> None:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        config = tomllib.load(f)
    skbuild = config["tool"]["scikit-build"]
    assert "build-dir" not in skbuild, (
        "pyproject.toml sets [tool.scikit-build] build-dir; concurrent `pip install .` "
        "of this checkout would share it"
    )
    assert "build_dir" not in skbuild

"""Names the docstring examples take as given, for
``python -m pytest --doctest-modules python/perseus`` (the same ones
tests/test_docs.py gives them): ``perseus`` itself and ``tmp``, a scratch
folder. This file sits outside the package and is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import perseus
import pytest


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict[str, Any], tmp_path: Path) -> None:
    doctest_namespace["perseus"] = perseus
    doctest_namespace["tmp"] = tmp_path

"""Importing optional dependencies with an error that says what to install.

The distribution's name lives here, once: PyPI's ``perseus`` is an unrelated
project, so perseus is published as ``perseus-energy`` (``import perseus``
and the ``perseus`` command keep their names).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["DISTRIBUTION", "install_hint", "optional_module"]

DISTRIBUTION = "perseus-energy"
"""The name to ``pip install`` (pyproject.toml's ``[project] name``)."""


def install_hint(extra: str) -> str:
    """How to install perseus with an extra, from PyPI and from a clone."""
    return f'`pip install "{DISTRIBUTION}[{extra}]"` (from a clone: `pip install ".[{extra}]"`)'


def optional_module(name: str, extra: str) -> ModuleType:
    """Import `name`, or raise ImportError naming the perseus extra that provides it."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(
            f"this feature needs the optional package {name!r}; install it with "
            f"{install_hint(extra)} ({error})"
        ) from error

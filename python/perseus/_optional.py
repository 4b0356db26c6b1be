"""Importing optional dependencies with an error that says what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["optional_module"]


def optional_module(name: str, extra: str) -> ModuleType:
    """Import `name`, or raise ImportError naming the perseus extra that provides it."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(
            f"this feature needs the optional package {name!r}; install it with "
            f'`pip install "perseus[{extra}]"` ({error})'
        ) from error

"""Deprecated names: one release of grace, one warning per name."""

from __future__ import annotations

import warnings

__all__ = ["warn_renamed"]

_warned: set[str] = set()


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn once per process that `old` is now `new` (a DeprecationWarning)."""
    if old in _warned:
        return
    _warned.add(old)
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )

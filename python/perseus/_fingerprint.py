"""A frontier's fingerprint: what the profile's measurement depended on, checked."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Optional, Union

__all__ = ["FingerprintValue", "check_fingerprint"]

# A fingerprint says what a profile's measurement depended on (GPU model,
# parallelism, sequence length, ...), so a run can tell that a frontier was
# made for other hardware or another model. Flat and small on purpose: it is
# compared field by field, never interpreted here.
FINGERPRINT_MAX_FIELDS = 64
FINGERPRINT_MAX_KEY_CHARS = 64
FINGERPRINT_MAX_TEXT_CHARS = 256
_FINGERPRINT_KEY = re.compile(r"[A-Za-z0-9_.\-]+")
FingerprintValue = Optional[Union[str, int, float, bool]]


def check_fingerprint(value: object, where: str = "fingerprint") -> Mapping[str, FingerprintValue]:
    """A read-only copy of `value` if it is a valid fingerprint, else ValueError/TypeError.

    A fingerprint is a flat mapping of at most `FINGERPRINT_MAX_FIELDS` keys
    (1 to `FINGERPRINT_MAX_KEY_CHARS` characters of letters, digits, ``_.-``)
    to a string (at most `FINGERPRINT_MAX_TEXT_CHARS` characters, no control
    characters), an integer (64-bit), a finite float, a boolean or None.
    """
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{where}: expected a mapping of field to value, got {type(value).__name__}"
        )
    if len(value) > FINGERPRINT_MAX_FIELDS:
        raise ValueError(
            f"{where}: {len(value)} fields, more than a fingerprint may hold "
            f"({FINGERPRINT_MAX_FIELDS})"
        )
    checked: dict[str, FingerprintValue] = {}
    for key, item in value.items():
        if (
            not isinstance(key, str)
            or not 0 < len(key) <= FINGERPRINT_MAX_KEY_CHARS
            or not _FINGERPRINT_KEY.fullmatch(key)
        ):
            raise ValueError(
                f"{where}: key {str(key)[:40]!r} must be 1 to {FINGERPRINT_MAX_KEY_CHARS} "
                "letters, digits, '_', '.' or '-'"
            )
        field = f"{where}.{key}"
        if item is None or isinstance(item, bool):
            pass
        elif isinstance(item, int):
            if not -(2**63) <= item < 2**63:
                raise ValueError(f"{field}: integer out of the 64-bit range")
            item = int(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"{field}: must be a finite number, got {item!r}")
        elif isinstance(item, str):
            if len(item) > FINGERPRINT_MAX_TEXT_CHARS:
                raise ValueError(
                    f"{field}: {len(item)} characters, more than {FINGERPRINT_MAX_TEXT_CHARS}"
                )
            if any(not c.isprintable() for c in item):
                raise ValueError(f"{field}: holds a control character")
        else:
            raise TypeError(
                f"{field}: expected a string, integer, float, boolean or None, "
                f"got {type(item).__name__}"
            )
        checked[key] = item
    return MappingProxyType(checked)

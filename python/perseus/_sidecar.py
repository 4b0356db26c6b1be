"""The JSON sidecar beside a profile CSV: where the blocking power travels.

The profiler (and the Megatron-LM integration) write ``PROFILE.json`` next to
``PROFILE.csv``. Its top-level ``blocking_power_w`` (:data:`BLOCKING_POWER_KEY`)
is the power in watts a GPU drew while it waited on a neighbour. Sidecars from
before that key hold it as ``blocking_power.watts``; both are read here, and
nowhere else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ._strict_json import loads_strict, read_bounded
from ._validate import real

__all__ = ["BLOCKING_POWER_KEY", "SidecarPower", "read_blocking_power", "sidecar_path"]

BLOCKING_POWER_KEY = "blocking_power_w"
"""Top-level sidecar key of the blocking power, in watts."""

_LEGACY_KEY = ("blocking_power", "watts")
_MAX_SIDECAR_BYTES = 64 * 1024 * 1024  # a sidecar lists every measurement: a few MB at most


@dataclass(frozen=True)
class SidecarPower:
    """A blocking power read from a sidecar."""

    blocking_power_w: float
    path: str  #: the sidecar it came from


def sidecar_path(csv_path: str | os.PathLike[str]) -> Path:
    """The sidecar of a profile CSV: the same name with the suffix ``.json``."""
    return Path(csv_path).with_suffix(".json")


def read_blocking_power(csv_path: str | os.PathLike[str]) -> Optional[SidecarPower]:
    """The blocking power stored beside `csv_path`, or None when there is no sidecar.

    Raises
    ------
    ValueError
        If the sidecar exists but cannot be read, is not JSON, or holds no
        usable blocking power (the message names the file and the key).
    """
    path = sidecar_path(csv_path)
    # lexists, not is_file: a sidecar that is a device (or a link to one) is
    # an error to report, not a missing sidecar.
    if Path(csv_path).suffix == ".json" or not os.path.lexists(path):
        return None
    try:
        data = read_bounded(str(path), _MAX_SIDECAR_BYTES, "a profile sidecar")
        document: Any = loads_strict(data, str(path))
    except OSError as error:
        raise ValueError(f"{path}: cannot read the profile's sidecar ({error.strerror})") from None
    except ValueError as error:  # the message names the file
        raise ValueError(f"cannot read the profile's sidecar: {error}") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: a profile sidecar is a JSON object")
    if BLOCKING_POWER_KEY in document:
        value, key = document[BLOCKING_POWER_KEY], BLOCKING_POWER_KEY
    else:
        legacy = document.get(_LEGACY_KEY[0])
        if not isinstance(legacy, dict) or _LEGACY_KEY[1] not in legacy:
            raise ValueError(
                f"{path}: the sidecar has no {BLOCKING_POWER_KEY!r} (nor "
                f"{'.'.join(_LEGACY_KEY)!r}): it does not say the blocking power"
            )
        value, key = legacy[_LEGACY_KEY[1]], ".".join(_LEGACY_KEY)
    watts = real(value, f"{path}: {key}", what="a number of watts", low=0)
    return SidecarPower(watts, str(path))

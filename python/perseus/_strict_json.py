"""Strict JSON for every file perseus reads: bounded, exact, and errors that name the file.

Python's `json` accepts what a file of ours never holds and silently keeps
the last of two equal keys (``{"blocking_power_w": 70, "blocking_power_w":
9999}`` is 9999 W). Here a duplicate key, ``NaN``/``Infinity``, a number of
more than `MAX_NUMBER_CHARS` characters, nesting deeper than the interpreter
allows and text that is not UTF-8 are each one `JsonError` (a `ValueError`)
whose message starts with the file's name. Reading is bounded by the caller:
`read_bounded` refuses devices, FIFOs and files over a size cap unread.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, NoReturn

__all__ = ["MAX_NUMBER_CHARS", "JsonError", "loads_strict", "read_bounded"]

MAX_NUMBER_CHARS = 400
"""Longer number literals are refused (a double needs at most ~25 characters)."""
# A number literal (after ':' ',' or '[') of more than MAX_NUMBER_CHARS characters:
# a fast scan of the bytes, before Python converts anything (base64 text, which
# holds digits and 'e', never holds those three characters).
_LONG_NUMBER = re.compile(rb"[:,\[][ \t\r\n]*([-+0-9.eE]{%d,})" % (MAX_NUMBER_CHARS + 1))


class JsonError(ValueError):
    """A file is not the strict JSON perseus reads; the message names the file."""


def _fail(name: str, problem: str) -> NoReturn:
    raise JsonError(f"{name}: not valid JSON: {problem}")


def read_bounded(name: str, max_bytes: int, what: str) -> bytes:
    """The bytes of `name`, a regular file of at most `max_bytes` (`what` names the kind).

    Devices (``/dev/zero``, a disk), FIFOs and sockets are refused before any
    read, also behind a symbolic link; a file that grows past the cap while
    being read is refused too. Raises ValueError naming the file; OSError
    when it cannot be opened.
    """
    with open(name, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else ("a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file")
            )
            raise ValueError(f"{name}: {kind}, not {what}")
        if info.st_size > max_bytes:
            raise ValueError(
                f"{name}: {info.st_size} bytes is larger than {what} may be ({max_bytes} bytes)"
            )
        # What the file holds, plus one byte to see it grow past the cap: a
        # read(max_bytes + 1) reserves the whole cap (512 MiB) up front, which
        # a process under a memory limit cannot, whatever the file's size.
        data = file.read(min(info.st_size, max_bytes) + 1)
        if len(data) > info.st_size:  # it grew while we read: read on, to the cap
            data += file.read(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise ValueError(f"{name}: larger than {what} may be ({max_bytes} bytes)")
    return data


def loads_strict(data: bytes | str, name: str) -> Any:
    """Parse `data` (the text of the file `name`) as strict JSON; see the module docs."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    long_number = _LONG_NUMBER.search(raw)
    if long_number is not None:
        _fail(
            name,
            f"a number of {len(long_number.group(1))} characters at byte {long_number.start(1)} "
            f"(at most {MAX_NUMBER_CHARS})",
        )
    try:
        text = raw.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as error:
        _fail(name, f"not UTF-8 text ({error.reason} at byte {error.start})")

    def no_constants(constant: str) -> NoReturn:
        raise JsonError(f"{name}: not valid JSON: {constant} is not a number perseus reads")

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise JsonError(
                        f"{name}: not valid JSON: the key {key[:60]!r} appears twice in one object"
                    )
                seen.add(key)
        return result

    try:
        return json.loads(text, parse_constant=no_constants, object_pairs_hook=unique_keys)
    except JsonError:
        raise
    except RecursionError:
        _fail(name, "nested deeper than perseus reads")
    except MemoryError:
        _fail(name, "not enough memory to read it")
    except ValueError as error:  # JSONDecodeError, the interpreter's digit limit
        _fail(name, str(error))

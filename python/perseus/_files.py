"""Writing files so that readers see the old version or the new one, never a torn one."""

from __future__ import annotations

import contextlib
import os
import secrets

__all__ = ["write_text_atomically"]


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Replace `path` with `text` (UTF-8): temporary file beside it, fsync, rename.

    The file gets the usual permissions (0666 less the umask). If anything
    fails, the temporary file is removed and the old file is left as it was.
    """
    name = os.fspath(path)
    directory, base = os.path.split(os.path.abspath(name))
    temp = os.path.join(directory, f".{base}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)

"""Our files on disk: written so that readers see the old version or the new one, never a
torn one, and plan files read with a size cap and a clear error."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from typing import Optional

__all__ = [
    "check_writable_directory",
    "read_plan_text",
    "replace_user_file",
    "write_text_atomically",
]


def write_text_atomically(
    path: str | os.PathLike[str], text: str | bytes, *, mode: Optional[int] = None
) -> None:
    """Replace `path` with `text` (UTF-8, or bytes as they are): temporary file beside it,
    fsync, rename.

    The file gets `mode`, or the usual permissions (0666 less the umask). If
    anything fails, the temporary file is removed, the old file is left as it
    was, and the `OSError` names `path` (not the temporary file).
    """
    name = os.fspath(path)
    directory, base = os.path.split(os.path.abspath(name))
    temp = os.path.join(directory, f".{base}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as error:
        raise type(error)(error.errno, f"cannot write here: {error.strerror}", name) from None
    try:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        with os.fdopen(fd, "wb") as file:
            if mode is not None:
                os.fchmod(file.fileno(), mode)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, name)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        if isinstance(error, OSError) and error.errno is not None and error.filename != name:
            raise type(error)(error.errno, error.strerror, name) from None  # name the target
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def replace_user_file(
    path: str | os.PathLike[str], text: str | bytes, *, follow_symlinks: bool = False
) -> None:
    """`write_text_atomically` for a file the user named, without surprises.

    An existing file keeps its permission bits (a 0600 file stays 0600). A
    symbolic link is not replaced by a plain file: it is refused, unless
    `follow_symlinks`, which writes the file it points to.

    Raises
    ------
    FileExistsError
        If `path` is a symbolic link and `follow_symlinks` is false.
    IsADirectoryError, OSError
        If `path` is a directory or something else that is not a regular file,
        or cannot be written; the error names `path`.
    """
    name = os.fspath(path)
    try:
        info: Optional[os.stat_result] = os.lstat(name)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        if not follow_symlinks:
            raise FileExistsError(
                errno.EEXIST,
                "is a symbolic link; perseus does not replace links (ask to follow it, "
                "or remove it)",
                name,
            )
        name = os.path.realpath(name)
        try:
            info = os.stat(name)
        except FileNotFoundError:
            info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        kind = IsADirectoryError if stat.S_ISDIR(info.st_mode) else OSError
        raise kind(errno.EISDIR if kind is IsADirectoryError else errno.EINVAL, "not a file", name)
    write_text_atomically(name, text, mode=None if info is None else stat.S_IMODE(info.st_mode))


def check_writable_directory(directory: str | os.PathLike[str]) -> None:
    """Create `directory` if needed and prove a file can be created in it.

    A real probe (create and remove a temporary file), not ``os.access``:
    that says yes to root on a read-only file system. Raises an `OSError`
    naming `directory`.
    """
    name = os.fspath(directory)
    try:
        os.makedirs(name, exist_ok=True)
    except OSError as error:
        raise type(error)(
            error.errno, f"cannot create the directory: {error.strerror}", name
        ) from None
    if not os.path.isdir(name):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", name)
    probe = os.path.join(name, f".perseus-write-test.{secrets.token_hex(4)}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise type(error)(error.errno, f"cannot write here: {error.strerror}", name) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def read_plan_text(name: str, max_bytes: int) -> str:
    """A plan file's text, refused unread above `max_bytes` and when it is not UTF-8.

    Raises ValueError naming the file; OSError when it cannot be read.
    """
    size = os.stat(name).st_size
    if size > max_bytes:
        raise ValueError(f"{name}: {size} bytes is too large for a plan file")
    with open(name, encoding="utf-8") as file:
        try:
            return file.read()
        except UnicodeDecodeError as error:
            raise ValueError(f"{name}: not UTF-8 text ({error.reason})") from None

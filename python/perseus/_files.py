"""Our files on disk: written so that readers see the old version or the new one, never a
torn one, and plan files read with a size cap and a clear error."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import time
from typing import Optional

from .errors import OutputExistsError

__all__ = [
    "check_writable_directory",
    "make_output_directory",
    "publish_new_file",
    "read_plan_text",
    "replace_user_file",
    "write_text_atomically",
]


# Temporary files get a short fixed-length name, so any target name that the
# file system accepts also has a temporary name it accepts (NAME_MAX is 255
# bytes, and a name derived from the target's would be longer than it).
_TEMP_PREFIX = ".perseus-"
_TEMP_SUFFIX = ".tmp"
ORPHAN_AGE_S = 3600.0
"""A temporary file of ours this much older than now was left by a killed process; removed."""


def _temp_path(directory: str) -> str:
    return os.path.join(directory, f"{_TEMP_PREFIX}{secrets.token_hex(8)}{_TEMP_SUFFIX}")


def _remove_orphans(directory: str) -> None:
    """Remove our temporary files that a killed writer left behind (older than ORPHAN_AGE_S).

    Also those of older perseus versions, named ``.<target>.<8 hex>.tmp``.
    Only regular files owned by this user; any error is ignored (it is tidying).
    """
    now = time.time()
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if not name.endswith(_TEMP_SUFFIX) or not name.startswith("."):
                continue
            ours = name.startswith(_TEMP_PREFIX) and len(name) == len(_TEMP_PREFIX) + 16 + 4
            legacy = len(name) > 14 and name[-13] == "." and _is_hex(name[-12:-4])
            if not (ours or legacy):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if (
                    stat.S_ISREG(info.st_mode)
                    and info.st_uid == os.geteuid()
                    and now - info.st_mtime > ORPHAN_AGE_S
                ):
                    os.unlink(entry.path)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _write_temp(directory: str, data: bytes, mode: Optional[int], name: str) -> str:
    """A new temporary file in `directory` holding `data`, flushed to disk; its path."""
    _remove_orphans(directory)
    temp = _temp_path(directory)
    # One try from the open on (see check_writable_directory). A name of 16
    # random hex digits that exists already is not ours: it is left alone.
    try:
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as error:
            raise type(error)(error.errno, f"cannot write here: {error.strerror}", name) from None
        with os.fdopen(fd, "wb") as file:
            if mode is not None:
                os.fchmod(file.fileno(), mode)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
    except BaseException as error:
        if not isinstance(error, FileExistsError):
            _unlink_quietly(temp)
        _rename_error(error, name)
        raise
    return temp


def _rename_error(error: BaseException, name: str) -> None:
    if isinstance(error, OSError) and error.errno is not None and error.filename != name:
        raise type(error)(error.errno, error.strerror, name) from None  # name the target


def _sync_directory(directory: str) -> None:
    with contextlib.suppress(OSError):  # make the rename or link itself durable
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _as_bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


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
    directory = os.path.dirname(os.path.abspath(name))
    temp = _write_temp(directory, _as_bytes(text), mode, name)
    try:
        os.replace(temp, name)
    except BaseException as error:
        _unlink_quietly(temp)
        _rename_error(error, name)
        raise
    _sync_directory(directory)


# link(2) is refused by some file systems (FAT, some network and FUSE mounts).
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}


def publish_new_file(path: str | os.PathLike[str], text: str | bytes) -> None:
    """Create `path` holding `text`, whole or not at all, never replacing a file.

    Written to a temporary file, flushed, then hard-linked to `path`: the link
    fails if `path` exists, however recently it appeared, so two writers
    cannot both succeed. Where the file system has no hard links, the file
    is created exclusively (``O_EXCL``) and filled.

    Raises
    ------
    OutputExistsError
        If `path` exists by the end; the text is then kept beside it under a
        fresh name, given in the error (``kept_as``) and its message.
    OSError
        If it cannot be written (the error names `path`).
    """
    name = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(name))
    data = _as_bytes(text)
    temp = _write_temp(directory, data, None, name)
    try:
        try:
            os.link(temp, name)
        except FileExistsError:
            raise OutputExistsError(name, _keep_aside(temp, name)) from None
        except OSError as error:
            if error.errno not in _NO_LINKS:
                _rename_error(error, name)
                raise
            _create_exclusively(name, data, temp)
    finally:
        _unlink_quietly(temp)
    _sync_directory(directory)


def _create_exclusively(name: str, data: bytes, temp: str) -> None:
    # One try from the open on (see _write_temp): an exception right after
    # the open must not leave an empty `name` published.
    try:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            raise OutputExistsError(name, _keep_aside(temp, name)) from None
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
    except FileExistsError:  # someone else's file (OutputExistsError is one)
        raise
    except BaseException as error:
        _unlink_quietly(name)  # ours: created exclusively just above
        _rename_error(error, name)
        raise


def _keep_aside(temp: str, name: str) -> str:
    """Give the finished temporary file a visible name beside `name` that no file has."""
    directory, base = os.path.split(os.path.abspath(name))
    stem, extension = os.path.splitext(base)
    for _ in range(100):
        tag = f".kept-{secrets.token_hex(4)}"
        room = 255 - len(tag.encode()) - len(extension.encode())
        short = stem.encode()[: max(room, 1)].decode("utf-8", "ignore")
        kept = os.path.join(directory, f"{short}{tag}{extension}")
        try:
            os.link(temp, kept)
            return kept
        except FileExistsError:
            continue
        except OSError:
            if not os.path.lexists(kept):
                os.rename(temp, kept)  # no hard links here; a random name nobody has
                return kept
    raise FileExistsError(errno.EEXIST, "no free name to keep the result under", name)


def replace_user_file(
    path: str | os.PathLike[str],
    text: str | bytes,
    *,
    follow_symlinks: bool = False,
    overwrite: bool = True,
) -> None:
    """`write_text_atomically` for a file the user named, without surprises.

    An existing file keeps its permission bits (a 0600 file stays 0600). A
    symbolic link is not replaced by a plain file: it is refused, unless
    `follow_symlinks`, which writes the file it points to. With
    ``overwrite=False`` an existing file is never replaced (`publish_new_file`).

    Raises
    ------
    FileExistsError
        If `path` is a symbolic link and `follow_symlinks` is false.
    OutputExistsError
        With ``overwrite=False``, if `path` exists; the text is kept beside it.
    IsADirectoryError, OSError
        If `path` is a directory or something else that is not a regular file,
        or cannot be written; the error names `path`.
    """
    name = os.fspath(path)
    if not overwrite:
        publish_new_file(name, text)
        return
    try:
        info: Optional[os.stat_result] = os.lstat(name)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        if not follow_symlinks:
            raise FileExistsError(
                errno.EEXIST,
                "is a symbolic link; perseus does not replace links (pass "
                "follow_symlinks=True to write the file it points to, or remove it)",
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
    """Prove that a file can be created in `directory`, leaving nothing behind.

    A real probe (create and remove a temporary file), not ``os.access``:
    that says yes to root on a read-only file system. Folders missing from
    the path are made for the probe and removed right after it, so a command
    that then fails or is stopped leaves no new, empty folder (and one that
    is killed outright leaves none either); make_output_directory makes them
    for good just before the output is written. Raises an `OSError` naming
    `directory`.
    """
    name = os.fspath(directory)
    # Another run's probe may remove a folder this one just found on the
    # path (it made it, for its own probe): look again.
    for attempt in range(3):
        try:
            _probe_directory(name)
            return
        except FileNotFoundError as error:
            if attempt == 2 or error.errno != errno.ENOENT or name == "":
                raise type(error)(
                    error.errno, f"cannot create the directory: {error.strerror}", name
                ) from None


def make_output_directory(directory: str | os.PathLike[str]) -> None:
    """Make `directory` and its missing parents (as ``os.makedirs``) for an output
    about to be written; raises an `OSError` naming `directory`."""
    name = os.fspath(directory)
    try:
        os.makedirs(name, exist_ok=True)
    except OSError as error:
        raise type(error)(
            error.errno, f"cannot create the directory: {error.strerror}", name
        ) from None


def _probe_directory(name: str) -> None:
    if os.path.lexists(name) and not os.path.isdir(name):
        raise NotADirectoryError(
            errno.ENOTDIR, "exists and is not a directory (give a directory to write into)", name
        )
    made: list[str] = []
    # One try from the first mkdir on: a signal's exception (SIGTERM in the
    # CLI) anywhere after it must not leave a folder or the probe behind.
    try:
        try:
            _make_directories(name, made)
        except FileNotFoundError:
            raise  # a parent vanished: check_writable_directory looks again
        except OSError as error:
            raise type(error)(
                error.errno, f"cannot create the directory: {error.strerror}", name
            ) from None
        if not os.path.isdir(name):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", name)
        probe = os.path.join(name, f".perseus-write-test.{secrets.token_hex(4)}")
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileNotFoundError:
            raise
        except OSError as error:
            if not isinstance(error, FileExistsError):
                _unlink_quietly(probe)
            raise type(error)(error.errno, f"cannot write here: {error.strerror}", name) from None
        except BaseException:
            _unlink_quietly(probe)
            raise
        _unlink_quietly(probe)
    finally:
        for path in reversed(made):  # innermost first, while each is empty
            try:
                os.rmdir(path)
            except OSError:
                break


def _make_directories(name: str, made: list[str]) -> None:
    """`name` and its missing parents, one mkdir each, split as ``os.makedirs``
    splits them (``..`` is resolved by the system, not by spelling); appends
    to `made` each one this process made, outermost first. One that another
    process makes at the same moment is theirs."""
    head, tail = os.path.split(name)
    if not tail:
        head, tail = os.path.split(head)
    if head and tail and not os.path.exists(head):
        _make_directories(head, made)
    if tail == os.curdir:
        return
    try:
        os.mkdir(name)
    except FileExistsError:
        if not os.path.isdir(name):
            raise
        return
    made.append(name)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def read_plan_text(name: str, max_bytes: int) -> str:
    """A plan file's text, refused unread above `max_bytes` and when it is not UTF-8.

    Raises ValueError naming the file; OSError when it cannot be read.
    """
    from ._strict_json import read_bounded

    data = read_bounded(name, max_bytes, "a plan file")  # devices, FIFOs, size: refused unread
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{name}: not UTF-8 text ({error.reason})") from None

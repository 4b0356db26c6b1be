"""Our files on disk: written so that readers see the old version or the new one, never a
torn one, and plan files read with a size cap and a clear error."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
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


def _directory_of(name: str) -> str:
    """The folder a file `name` lands in, spelled for the system to resolve: the
    temporary file must go where the final rename or link puts `name`, and
    through a symbolic link ``link/../x`` is not ``./x``, as a spelled-out
    absolute path would have it."""
    return os.path.dirname(name) or os.curdir


def write_text_atomically(
    path: str | os.PathLike[str], text: str | bytes, *, mode: Optional[int] = None
) -> None:
    """Replace `path` with `text` (UTF-8, or bytes as they are): temporary file beside it,
    fsync, rename.

    The file gets `mode`, or the usual permissions (0666 less the umask). If
    anything fails, the temporary file is removed, the old file is left as it
    was, and the `OSError` names `path` (not the temporary file).
    """
    name = os.fsdecode(path)
    directory = _directory_of(name)
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
    name = os.fsdecode(path)
    directory = _directory_of(name)
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
    directory, base = _directory_of(name), os.path.basename(name)
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
    name = os.fsdecode(path)
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
    """Prove that `directory` can be written into, leaving nothing behind.

    A real probe (create and remove a temporary file), not ``os.access``:
    that says yes to root on a read-only file system. A folder that does not
    exist yet is not made here (make_output_directory makes it just before
    the output is written, so a command that fails or is stopped before then
    leaves no new, empty folder): its missing part is made inside a scratch
    folder of our own in the deepest parent that exists, probed there and
    removed, which also proves each missing name can be made (too long, a
    read-only or full file system) without touching a folder that another
    run may be writing into. Raises an `OSError` naming `directory`.
    """
    name = os.fsdecode(directory)
    if os.path.isdir(name):
        _probe_file(name, name)
        return
    if os.path.lexists(name):
        raise NotADirectoryError(
            errno.ENOTDIR, "exists and is not a directory (give a directory to write into)", name
        )
    parent, missing = _existing_parent(name)
    # The missing names will be plain folders, so a `..` among them is
    # resolved by spelling; one that climbs above the parent is the parent's.
    below = os.path.normpath(missing)
    while below == os.pardir or below.startswith(os.pardir + os.sep):
        parent, missing = _existing_parent(os.path.join(parent, below))
        below = os.path.normpath(missing)
    if below == os.curdir:
        _probe_file(parent, name)
        return
    scratch = os.path.join(parent, f".perseus-write-test.{secrets.token_hex(4)}")
    # One try from the mkdir on: a signal's exception (SIGTERM in the CLI)
    # anywhere after it must not leave the scratch folder behind.
    try:
        try:
            os.mkdir(scratch, 0o700)
            os.makedirs(os.path.join(scratch, below))
        except OSError as error:
            raise type(error)(
                error.errno, f"cannot create the directory: {error.strerror}", name
            ) from None
        _probe_file(os.path.join(scratch, below), name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def make_output_directory(directory: str | os.PathLike[str]) -> None:
    """Make `directory` and its missing parents (as ``os.makedirs``) for an output
    about to be written; raises an `OSError` naming `directory`."""
    name = os.fsdecode(directory)
    try:
        os.makedirs(name, exist_ok=True)
    except OSError as error:
        raise type(error)(
            error.errno, f"cannot create the directory: {error.strerror}", name
        ) from None


def _existing_parent(name: str) -> tuple[str, str]:
    """The deepest parent of `name` that exists (split as ``os.makedirs`` splits,
    so ``..`` is left for the system to resolve) and the path below it; raises
    the error ``os.makedirs`` would meet there (a file, a dangling link)."""
    if not name:
        raise FileNotFoundError(
            errno.ENOENT, "cannot create the directory: No such file or directory", name
        )
    head, missing = name, ""
    while head and not os.path.lexists(head):
        head, tail = os.path.split(head)
        if not tail:  # a trailing separator
            head, tail = os.path.split(head)
        missing = os.path.join(tail, missing) if missing else tail
    parent = head or os.curdir
    if not os.path.isdir(parent):
        # A file: os.makedirs meets ENOTDIR; a dangling link: ENOENT.
        code = errno.ENOTDIR if os.path.exists(parent) else errno.ENOENT
        raise (NotADirectoryError if code == errno.ENOTDIR else FileNotFoundError)(
            code, f"cannot create the directory: {os.strerror(code)}", name
        )
    return parent, missing


def _probe_file(directory: str, named: str) -> None:
    """Create and remove a file in `directory`; an error names `named`."""
    probe = os.path.join(directory, f".perseus-write-test.{secrets.token_hex(4)}")
    # One try from the open on: a signal's exception (SIGTERM in the CLI)
    # between the open and a later try would leave the probe behind.
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        if not isinstance(error, FileExistsError):
            _unlink_quietly(probe)
        raise type(error)(error.errno, f"cannot write here: {error.strerror}", named) from None
    except BaseException:
        _unlink_quietly(probe)
        raise
    _unlink_quietly(probe)


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
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{name}, line {line}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None

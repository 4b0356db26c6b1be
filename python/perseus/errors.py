"""Exceptions raised by perseus."""

import errno

__all__ = ["OutputExistsError", "ProfileError"]


class ProfileError(ValueError):
    """A profile, or an argument describing one, is invalid.

    The message says where the problem is: the file and 1-based line number
    (or the record index) and the field, whenever those apply, so the input
    can be fixed without a debugger. Subclasses ``ValueError``, so callers
    that already catch ``ValueError`` keep working.
    """


class OutputExistsError(FileExistsError):
    """The output file exists, so it was not replaced.

    Raised by a write that was asked not to overwrite (``overwrite=False``,
    or the command line without ``--force``, which refuses an existing file
    before any work: there, the file appeared while perseus was working).
    Nothing is lost: the result is kept beside it, in `kept_as` (named in the
    message).
    """

    def __init__(self, path: str, kept_as: str) -> None:
        super().__init__(
            errno.EEXIST,
            f"exists and was not overwritten (overwrite=True replaces it; --force on the "
            f"command line); the result is kept as {kept_as}",
            path,
        )
        self.kept_as = kept_as

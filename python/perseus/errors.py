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
    """The output file appeared while perseus was working, so it was not replaced.

    Raised by a write that was asked not to overwrite (``overwrite=False``,
    or the command line without ``--force``) when another process created
    the file between the start and the end of the work. Nothing is lost:
    the result is kept beside it, in `kept_as` (named in the message).
    """

    def __init__(self, path: str, kept_as: str) -> None:
        super().__init__(
            errno.EEXIST,
            f"appeared while perseus was working and was not overwritten (pass --force or "
            f"overwrite=True to replace it); the result is kept as {kept_as}",
            path,
        )
        self.kept_as = kept_as

"""Exceptions raised by perseus."""

__all__ = ["ProfileError"]


class ProfileError(ValueError):
    """A profile, or an argument describing one, is invalid.

    The message says where the problem is: the file and 1-based line number
    (or the record index) and the field, whenever those apply, so the input
    can be fixed without a debugger. Subclasses ``ValueError``, so callers
    that already catch ``ValueError`` keep working.
    """

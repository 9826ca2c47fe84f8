"""What goes wrong with a user's file, worded once: the errors of the file layer and the reasons
reports give.

:func:`file_error` turns a system error met opening, examining or listing a path into the typed
error torchloom raises (a file that is not there, one that is there but cannot be read, one that no
open can read), each naming the path and the fix. :func:`failure_reason` words any error of a file
as every report lists it (``FolderDataset``'s, ``doctor``'s, ``prepare``'s), so that one file gets
one wording whichever tool looked at it.

Example:
    >>> import errno
    >>> error = file_error("/data/cat", PermissionError(errno.EACCES, "Permission denied"))
    >>> type(error).__name__, failure_reason(error, "/data/cat")
    ('UnreadableFileError', 'permission denied; fix its permissions (or run as a user who may read it)')
"""

from __future__ import annotations

import errno
import os
import stat

from torchloom.errors import DecodeError, MissingFileError, UnreadableFileError, UnsafeFileError

#: The reason a report gives for a sample whose file is not there.
REASON_MISSING = "file does not exist"
_FIX_PERMISSIONS = "permission denied; fix its permissions (or run as a user who may read it)"
# System errors that leave a file that is there unreadable, each with what to do about it.
_UNREADABLE = {
    errno.EACCES: _FIX_PERMISSIONS,
    errno.EPERM: _FIX_PERMISSIONS,
    errno.ELOOP: "too many levels of symbolic links (a link loop); point the link at a real file",
    errno.ENAMETOOLONG: "the path is longer than the system allows; shorten its folder or file names",
    errno.EIO: "input/output error (a failing disk, or a network share that dropped); copy it again",
}


def file_error(path: str, error: OSError) -> OSError:
    """The torchloom error of a system error met opening, examining or listing ``path``: a
    :class:`~torchloom.errors.MissingFileError`, an :class:`~torchloom.errors.UnreadableFileError`
    naming the fix, an :class:`~torchloom.errors.UnsafeFileError` for what no open can read, or
    ``error`` itself when it says nothing about the file (too many open files, out of memory).

    Example:
        >>> print(file_error("/data/cat/1.jpg", FileNotFoundError(errno.ENOENT, "No such file")))
        file '/data/cat/1.jpg' does not exist; check the path (and the dataset's root)
    """
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return missing_file(path)
    if error.errno == errno.ENXIO:  # a socket, or a device without a driver: no open can work
        return UnsafeFileError(path, f"it is {_kind_at(path)}, not a regular file")
    why = _UNREADABLE.get(error.errno or 0)
    return error if why is None else UnreadableFileError(path, why, error.errno)


def failure_reason(error: BaseException, path: str) -> str:
    """Why the file ``path`` cannot be a sample, worded as every report words it: the reason alone
    (the report names the file), with a hint when the path of a missing file looks mistyped.

    Example:
        >>> failure_reason(MissingFileError("gone"), "data/dog/2.jpg ")
        'file does not exist (its name begins or ends with whitespace: a stray space in the list of files?)'
    """
    if isinstance(error, MissingFileError):
        return REASON_MISSING + _mistyped(path)
    if isinstance(error, (UnsafeFileError, UnreadableFileError)) and error.path:
        return error.why
    if isinstance(error, DecodeError) and error.path:
        return error.reason
    return f"{type(error).__name__}: {error}"


def missing_file(path: str) -> MissingFileError:
    """The error of a file that is not there, naming it."""
    return MissingFileError(f"file {path!r} does not exist; check the path (and the dataset's root)")


def kind_of(mode: int) -> str:
    """A readable name for the kind of file ``mode`` (an ``st_mode``) describes.

    Example:
        >>> kind_of(stat.S_IFIFO)
        'a FIFO (named pipe)'
    """
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _kind_at(path: str) -> str:
    """The kind of what ``path`` names, for a file that could not even be opened."""
    try:
        return kind_of(os.stat(path).st_mode)
    except OSError:
        return "not a regular file"


def _mistyped(path: str) -> str:
    """What may be wrong with the path of a file that does not exist (no system call)."""
    name = os.path.basename(path)
    if name != name.strip():
        return " (its name begins or ends with whitespace: a stray space in the list of files?)"
    if os.sep == "/" and "\\" in path:
        return " (the path holds '\\'; folders are separated by '/')"
    return ""

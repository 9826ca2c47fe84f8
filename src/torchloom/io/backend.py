"""What every file backend provides: the four calls readers make, and what they say of a file.

:class:`~torchloom.io.LocalFiles` serves local paths, :class:`~torchloom.io.ObjectStore` URLs;
:mod:`torchloom.io.files` picks one per path.

Example:
    >>> from torchloom.io import FileInfo
    >>> FileInfo(size=3, modified_ns=0).size
    3
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Protocol

from torchloom.errors import DecodeError


@dataclass(frozen=True)
class FileInfo:
    """What a backend says of a file without reading it.

    Example:
        >>> FileInfo(size=10, modified_ns=0).size
        10
    """

    size: int
    modified_ns: int


class FileBackend(Protocol):
    """Where files come from: the four calls every reader makes, whatever holds the bytes.

    A call is one request, so a backend for an object store can serve :meth:`read` with one GET
    (a ranged GET of at most ``max_bytes + 1`` bytes enforces the guard) rather than a size
    request first. ``inside`` is the root the file must stay in: a real folder for local files,
    a URL prefix for an object store. Errors are :class:`~torchloom.errors.MissingFileError`,
    :class:`~torchloom.errors.UnsafeFileError` and :class:`~torchloom.errors.DecodeError` (from
    :func:`refuse_size` for the size guard), naming the file.

    :class:`~torchloom.io.LocalFiles` is the one for local files.

    Example:
        >>> import os, tempfile
        >>> from torchloom.io import FileBackend, LocalFiles
        >>> files: FileBackend = LocalFiles()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "a.bin")
        ...     _ = open(path, "wb").write(b"0123456789")
        ...     print(files.read_range(path, 2, 3, inside=None), files.info(path).size)
        b'234' 10
    """

    def read(self, path: str, *, inside: str | None, max_bytes: int | None, too_large: str | None) -> bytes:
        """The whole file; over ``max_bytes``, :func:`refuse_size` (``too_large`` says why)."""
        ...

    def read_range(self, path: str, offset: int, length: int, *, inside: str | None) -> bytes:
        """``length`` bytes from ``offset``, fewer where the file ends first."""
        ...

    def open(self, path: str, *, inside: str | None) -> BinaryIO:
        """A readable, seekable file object; the caller closes it."""
        ...

    def info(self, path: str) -> FileInfo:
        """The file's size and modification time, refusing what is not a regular file."""
        ...


def refuse_size(path: str, size: int | None, limit: int, why: str | None = None) -> DecodeError:
    """The error of a file over the size guard: ``size`` bytes, or None when it grew past
    ``limit`` while being read; ``why`` says why such a file cannot be genuine.

    Example:
        >>> str(refuse_size("a.jpg", 12, 10))
        "cannot decode 'a.jpg': file is 12 bytes, more than max_bytes=10"
    """
    why = why or f"more than max_bytes={limit:,}"
    if size is None:
        return DecodeError(path, f"file grew past {limit:,} bytes while being read, {why}")
    return DecodeError(path, f"file is {size:,} bytes, {why}")



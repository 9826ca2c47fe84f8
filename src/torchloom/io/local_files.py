"""Local files: each opened once and checked on its descriptor (kind, root, size).

The rules are those of :mod:`torchloom.io.files`; this module is their implementation for paths on
a local or mounted file system.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "a.bin")
    >>> _ = open(path, "wb").write(b"abc")
    >>> from torchloom.io import LocalFiles
    >>> LocalFiles().read_range(path, 1, 5, inside=None)
    b'bc'
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from torchloom.errors import UnsafeFileError
from torchloom.io.backend import FileInfo, refuse_size
from torchloom.io.file_errors import file_error, kind_of

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
# Linux reads at most 2 GiB - 4 KiB per call; ask for no more.
_MAX_READ = 0x7FFFF000
_GROWTH_READ = 1 << 20
# Where the kernel names each open descriptor's file (Linux); looked up once, at import.
_FD_NAMES = "/proc/self/fd"
_HAS_FD_NAMES = os.path.isdir(_FD_NAMES)


class LocalFiles:
    """The backend of local paths: plain descriptor calls, each file opened and checked once.

    :meth:`read` and :meth:`read_range` use no buffered file object (one costs ~7 more syscalls
    per file, each a release of the GIL the Loader's other threads then wait to take back): a
    whole read is ``open``, ``fstat``, the reads, one more read finding the end, ``close``, plus
    one ``readlink`` when confined to a root.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "b.bin")
        >>> _ = open(path, "wb").write(b"abc")
        >>> with LocalFiles().open(path, inside=None) as handle:
        ...     handle.read()
        b'abc'
    """

    __slots__ = ()

    def read(self, path: str, *, inside: str | None, max_bytes: int | None, too_large: str | None) -> bytes:
        descriptor, status = _open_checked(path, inside)
        try:
            if max_bytes is not None and status.st_size > max_bytes:
                raise refuse_size(path, status.st_size, max_bytes, too_large)
            return _read_all(descriptor, status.st_size, whole=True, most=max_bytes)
        except _GrewError as exc:
            raise refuse_size(path, None, exc.limit, too_large) from None
        finally:
            os.close(descriptor)

    def read_range(self, path: str, offset: int, length: int, *, inside: str | None) -> bytes:
        descriptor, _ = _open_checked(path, inside)
        try:
            if offset:
                os.lseek(descriptor, offset, os.SEEK_SET)
            return _read_all(descriptor, length, whole=False, most=None)
        finally:
            os.close(descriptor)

    def open(self, path: str, *, inside: str | None) -> BinaryIO:
        descriptor, _ = _open_checked(path, inside)
        try:
            if hasattr(os, "set_blocking"):
                os.set_blocking(descriptor, True)  # as libraries expect of a file they are handed
            return os.fdopen(descriptor, "rb")
        except BaseException:
            os.close(descriptor)
            raise

    def info(self, path: str) -> FileInfo:
        try:
            status = os.stat(path)
        except OSError as exc:
            raise file_error(path, exc) from None
        if not stat.S_ISREG(status.st_mode):
            raise UnsafeFileError(path, f"it is {kind_of(status.st_mode)}, not a regular file")
        return FileInfo(status.st_size, status.st_mtime_ns)


#: The backend of every path that is not a URL (it holds no state).
LOCAL_FILES = LocalFiles()

def reopenable_name(handle: BinaryIO) -> str | None:
    """A name that opens the very file ``handle`` holds, for a library that only opens by name
    (HDF5's native driver): ``/proc/self/fd/N`` on Linux, which the kernel resolves to the open
    file itself, not to whatever the original path names by then; None where there is none.

    Example:
        >>> import io
        >>> reopenable_name(io.BytesIO(b"in memory")) is None
        True
    """
    try:
        descriptor = handle.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation is both: not a file with a descriptor
        return None
    return f"{_FD_NAMES}/{descriptor}" if _HAS_FD_NAMES else None


def _open_checked(path: str, inside: str | None) -> tuple[int, os.stat_result]:
    """Open ``path`` once, refusing what is not a regular file inside ``inside``; return the
    descriptor (non-blocking, which changes nothing for a regular file's reads) and its fstat."""
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise file_error(path, exc) from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise UnsafeFileError(path, f"it is {kind_of(status.st_mode)}, not a regular file")
        if inside is not None:
            _check_confined(descriptor, path, status, inside)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, status


def lies_inside(path: str, root: str) -> bool:
    """Whether ``path`` is the folder ``root`` or lies under it, the two compared as given: pass
    real paths (:func:`os.path.realpath`) to ask where symlinks lead.

    Example:
        >>> lies_inside("/data/train/cat/1.jpg", "/data/train"), lies_inside("/data/trainer", "/data/train")
        (True, False)
    """
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path == root or path.startswith(prefix)


def _check_confined(descriptor: int, path: str, status: os.stat_result, root: str) -> None:
    """Refuse the open file unless it lies in the real folder ``root``."""
    opened = _opened_name(descriptor, path, status)
    if not lies_inside(opened, root):
        raise UnsafeFileError(
            path,
            f"resolves to {opened!r}, outside the dataset root {root!r} (a symlink changed since it "
            "was checked): point the link back inside the root, or allow_outside_root=True if you trust it",
        )


def _opened_name(descriptor: int, path: str, status: os.stat_result) -> str:
    """Where the open file lies, symlinks resolved: the kernel's name for the descriptor, or the
    path resolved again and required to name the same file."""
    if _HAS_FD_NAMES:
        try:
            return os.readlink(f"{_FD_NAMES}/{descriptor}")
        except OSError:
            pass  # /proc present but not this process's (an unusual mount): resolve the path
    real = os.path.realpath(path)
    try:
        again = os.stat(real)
    except OSError:
        again = None
    if again is None or (again.st_dev, again.st_ino) != (status.st_dev, status.st_ino):
        raise UnsafeFileError(
            path, f"changed while it was opened (it now resolves to {real!r}, another file); read it again"
        )
    return real


class _GrewError(ValueError):
    """A whole read went past its limit: the file grew while being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"grew past {limit:,} bytes while being read")
        self.limit = limit


def _read_all(descriptor: int, expected: int, *, whole: bool, most: int | None) -> bytes:
    """Read ``expected`` bytes (the file's size, or a range's length); with ``whole``, on to the
    end of a file that grew since its size was read, up to ``most`` bytes in all."""
    chunks: list[bytes] = []
    remaining = expected
    while remaining > 0:
        chunk = os.read(descriptor, min(remaining, _MAX_READ))
        if not chunk:
            return b"".join(chunks)  # shorter than expected: it shrank, or a range ran past the end
        chunks.append(chunk)
        remaining -= len(chunk)
    total = expected
    while whole:  # one more read finds the end (or what was appended since the fstat)
        chunk = os.read(descriptor, _GROWTH_READ)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if most is not None and total > most:
            raise _GrewError(most)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)

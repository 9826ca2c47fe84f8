"""The one file layer under every reader: how torchloom opens and reads a user's file.

Every read opens the file once and checks what was opened, never the path beforehand:

- **Regular files only.** The file is opened ``O_RDONLY | O_NONBLOCK | O_CLOEXEC`` (a FIFO then
  opens at once instead of waiting for a writer) and checked with ``fstat`` on the descriptor: a
  FIFO, a device, a socket or a folder is an :class:`~torchloom.errors.UnsafeFileError` naming
  what it is, before a byte is read.
- **Confined to a root** (``inside=``, a real folder: ``os.path.realpath``). On Linux the kernel
  names what the descriptor holds (``/proc/self/fd/N``, symlinks resolved): a symlink swapped in
  after the dataset was validated is refused at the read, and no swap between a check and the open
  can slip through, since there is no earlier check. This costs one ``readlink`` per file, only
  when a root is given. Without ``/proc`` the path is resolved again after the open and must name
  the very file opened (same device and inode): escapes are still refused, but at the cost of a
  walk of the path (one ``lstat`` per component) and a file replaced by a legitimate rename in
  that instant is refused rather than read.
- **Typed errors.** A file that is not there is a :class:`~torchloom.errors.MissingFileError`; one
  that is there but cannot be read (permission denied, a symlink loop, a path too long for the
  system, an I/O error) an :class:`~torchloom.errors.UnreadableFileError` naming it and the fix
  (:mod:`torchloom.io.file_errors`, which also words them as every report lists them).
- **A size guard** (``max_bytes``) refuses a larger file before reading it, and a file that grows
  past it while being read.
- **Whole or in part**: :func:`read_bytes` reads to the end of the file (what was appended since
  its size was taken included), :func:`read_range` reads ``length`` bytes from ``offset`` (shorter
  at the end of the file), :func:`open_file` gives a file object for libraries that want one
  (PyAV, h5py, ``np.memmap``, pyarrow, zipfile), so no reader opens the path a second time after
  the check; :func:`reopenable_name` names the opened file for libraries that only take a name.

The calls dispatch on the path to a :class:`FileBackend`: :class:`LocalFiles` serves every path
that is not a URL; a URL (``s3://``, ``gs://``, any ``scheme://``) is an
:class:`~torchloom.errors.UnsupportedURLError` until an object-store backend plugs in behind the
same calls. Each call takes ``backend=`` to use another one explicitly (a test's in-memory files).

Example:
    >>> import os, tempfile
    >>> from torchloom.io import file_info, read_bytes, read_range
    >>> root = os.path.realpath(tempfile.mkdtemp())
    >>> path = os.path.join(root, "a.bin")
    >>> _ = open(path, "wb").write(b"0123456789")
    >>> read_bytes(path, inside=root), read_range(path, 8, 4), file_info(path).size
    (b'0123456789', b'89', 10)
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from torchloom.errors import ConfigError, DecodeError, UnsafeFileError, UnsupportedURLError
from torchloom.io.file_errors import file_error, kind_of

#: ``scheme://`` at the start of a path: a URL, not a local file.
URL_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
# Linux reads at most 2 GiB - 4 KiB per call; ask for no more.
_MAX_READ = 0x7FFFF000
_GROWTH_READ = 1 << 20
# Where the kernel names each open descriptor's file (Linux); looked up once, at import.
_FD_NAMES = "/proc/self/fd"
_HAS_FD_NAMES = os.path.isdir(_FD_NAMES)


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


def backend_for(path: str, backend: FileBackend | None = None) -> FileBackend:
    """The backend serving ``path``: ``backend`` when given, else the local one; a URL without a
    backend is an :class:`~torchloom.errors.UnsupportedURLError`.

    Example:
        >>> backend_for("/data/cat/1.jpg") is LOCAL_FILES
        True
    """
    if backend is not None:
        return backend
    if is_url(path):
        scheme = path.split("://", 1)[0]
        raise UnsupportedURLError(
            f"{path!r} is a {scheme}:// URL, and object-store URLs are not supported yet: torchloom "
            "reads local files; copy the data to a local folder (or mount the bucket) and pass its path"
        )
    return LOCAL_FILES


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path.

    Example:
        >>> is_url("s3://bucket/cat/1.jpg"), is_url("cat/1.jpg"), is_url("/data/a://b.jpg")
        (True, False, False)
    """
    return "://" in path and URL_PATTERN.match(path) is not None


def read_bytes(
    path: str | os.PathLike[str],
    *,
    inside: str | None = None,
    max_bytes: int | None = None,
    too_large: str | None = None,
    backend: FileBackend | None = None,
) -> bytes:
    """A whole regular file's bytes; an empty file is a :class:`~torchloom.errors.DecodeError`.

    ``inside``: a real folder the opened file must lie in (checked on what was opened).
    ``max_bytes``: refuse a larger file (a ``DecodeError``) before reading it, or once it grows
    past it; ``too_large`` says why such a file cannot be genuine (the default names the limit).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "c.bin")
        >>> _ = open(path, "wb").write(b"x" * 100)
        >>> read_bytes(path, max_bytes=10)
        Traceback (most recent call last):
        ...
        torchloom.errors.DecodeError: cannot decode '...c.bin': file is 100 bytes, more than max_bytes=10
    """
    text = os.fspath(path)
    data = backend_for(text, backend).read(text, inside=inside, max_bytes=max_bytes, too_large=too_large)
    if not data:
        raise DecodeError(text, "file is empty (0 bytes)")
    return data


def read_range(
    path: str | os.PathLike[str],
    offset: int,
    length: int,
    *,
    inside: str | None = None,
    backend: FileBackend | None = None,
) -> bytes:
    """``length`` bytes of a regular file from ``offset``: fewer where the file ends first (an
    empty result past its end), so a header probe may ask for more than a small file holds.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "d.bin")
        >>> _ = open(path, "wb").write(b"0123456789")
        >>> read_range(path, 2, 3), read_range(path, 0, 64), read_range(path, 20, 5)
        (b'234', b'0123456789', b'')
    """
    if offset < 0 or length < 0:
        raise ConfigError(f"read_range needs offset >= 0 and length >= 0, got {offset=} and {length=}")
    text = os.fspath(path)
    return backend_for(text, backend).read_range(text, offset, length, inside=inside)


def open_file(
    path: str | os.PathLike[str], *, inside: str | None = None, backend: FileBackend | None = None
) -> BinaryIO:
    """A regular file opened once and checked (kind, root), as a binary file object for libraries
    that read through one; use it in a ``with`` block.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "e.bin")
        >>> _ = open(path, "wb").write(b"0123456789")
        >>> with open_file(path) as handle:
        ...     _ = handle.seek(4)
        ...     handle.read(2)
        b'45'
    """
    text = os.fspath(path)
    return backend_for(text, backend).open(text, inside=inside)


def file_info(path: str | os.PathLike[str], *, backend: FileBackend | None = None) -> FileInfo:
    """A regular file's size and modification time, without opening it; a missing file is a
    :class:`~torchloom.errors.MissingFileError`, a FIFO or a device an ``UnsafeFileError``.

    Example:
        >>> import tempfile
        >>> file_info(tempfile.mkdtemp())
        Traceback (most recent call last):
        ...
        torchloom.errors.UnsafeFileError: refusing to read '...': it is a folder, not a regular file
    """
    text = os.fspath(path)
    return backend_for(text, backend).info(text)


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

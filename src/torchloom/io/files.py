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
that is not a URL; a URL (``s3://``, ``gs://``, any fsspec ``scheme://``) is served by the
:class:`~torchloom.io.ObjectRoot` given as ``inside`` (a dataset's root prefix and its store:
:mod:`torchloom.io.objects`), or else by a store reached with no options; ``file://`` is refused
(pass the local path). Each call takes ``backend=`` to use another one explicitly (a test's
in-memory files).

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
from typing import BinaryIO, TypeAlias

from torchloom.errors import ConfigError, DecodeError, UnsafeFileError, UnsupportedURLError
from torchloom.io.backend import FileBackend, FileInfo, refuse_size
from torchloom.io.local_files import LOCAL_FILES, LocalFiles, lies_inside, reopenable_name
from torchloom.io.object_urls import split_url
from torchloom.io.objects import ObjectRoot, ObjectStore

__all__ = [
    "LOCAL_FILES",
    "URL_PATTERN",
    "FileBackend",
    "FileInfo",
    "Inside",
    "LocalFiles",
    "backend_for",
    "file_info",
    "is_url",
    "lies_inside",
    "open_file",
    "read_bytes",
    "read_range",
    "refuse_size",
    "reopenable_name",
]

#: What a read must stay inside: a real local folder, an object store's root prefix, or nothing.
Inside: TypeAlias = str | ObjectRoot | None

#: ``scheme://`` at the start of a path: a URL, not a local file.
URL_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def backend_for(
    path: str, backend: FileBackend | None = None, inside: Inside = None
) -> tuple[FileBackend, str | None]:
    """The backend serving ``path`` and the root it must stay in: ``backend`` when given; the
    :class:`~torchloom.io.ObjectRoot` passed as ``inside``; for another URL a store reached with
    no options (credentials from the environment), unconfined unless ``inside`` is a root URL;
    else the local files.

    Example:
        >>> backend_for("/data/cat/1.jpg", inside="/data") == (LOCAL_FILES, "/data")
        True
    """
    if isinstance(inside, ObjectRoot):
        return (backend or inside), inside.url
    if backend is not None:
        return backend, inside
    if is_url(path):
        if path[:7].lower() == "file://":
            raise UnsupportedURLError(
                f"{path!r} is a file:// URL: pass the local path itself ({path[7:]!r}), which is read "
                "with the checks of local files"
            )
        if inside is not None and not is_url(inside):
            raise UnsafeFileError(path, f"it is a URL, not a file inside the dataset root {inside!r}")
        if inside is not None:
            root = ObjectRoot(inside, ObjectStore())
        else:
            scheme, rest = split_url(path)
            root = ObjectRoot(f"{scheme}://{rest.split('/', 1)[0]}", ObjectStore(), confined=False)
        return root, root.url
    return LOCAL_FILES, inside


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
    inside: Inside = None,
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
    files, root = backend_for(text, backend, inside)
    data = files.read(text, inside=root, max_bytes=max_bytes, too_large=too_large)
    if not data:
        raise DecodeError(text, "file is empty (0 bytes)")
    return data


def read_range(
    path: str | os.PathLike[str],
    offset: int,
    length: int,
    *,
    inside: Inside = None,
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
    files, root = backend_for(text, backend, inside)
    return files.read_range(text, offset, length, inside=root)


def open_file(
    path: str | os.PathLike[str], *, inside: Inside = None, backend: FileBackend | None = None
) -> BinaryIO:
    """A regular file opened once and checked (kind, root), as a binary file object for libraries
    that read through one; use it in a ``with`` block. An object of a store is a
    :class:`~torchloom.io.ranged_file.RangedFile`: each read a ranged GET, no descriptor.

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
    files, root = backend_for(text, backend, inside)
    return files.open(text, inside=root)


def file_info(
    path: str | os.PathLike[str], *, inside: Inside = None, backend: FileBackend | None = None
) -> FileInfo:
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
    return backend_for(text, backend, inside)[0].info(text)



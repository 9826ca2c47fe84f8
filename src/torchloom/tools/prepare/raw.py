"""Read-only checks of a raw folder's image files: their headers, sizes and content hashes.

Nothing here writes to the raw folder; files are opened read-only and FIFOs or devices are
refused before a byte is read (:func:`torchloom.io.files.open_file`). Which files are images is
decided by :func:`torchloom.datasets.discovery.find_tree`, with the rules every folder reader
shares. An object in a store (``inside`` an :class:`~torchloom.io.ObjectRoot`) is read whole in
one GET, its header probed and its bytes hashed from that one copy.

Example:
    >>> import numpy as np, os, simplejpeg, tempfile
    >>> root = tempfile.mkdtemp()
    >>> path = os.path.join(root, "a.jpg")
    >>> _ = open(path, "wb").write(simplejpeg.encode_jpeg(np.zeros((8, 8, 3), np.uint8)))
    >>> [check.problem for check in check_files([path, os.path.join(root, "gone.jpg")])]
    [None, 'file does not exist']
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from torchloom.datasets.index import check_image_file
from torchloom.io.file_errors import failure_reason
from torchloom.io.files import Inside, open_file
from torchloom.io.image import probe_image, read_image_bytes
from torchloom.io.objects import ObjectRoot
from torchloom.io.threads import file_threads

#: Bytes read at a time while hashing a file.
HASH_CHUNK = 1 << 20
#: The content hash's size: BLAKE2b of 128 bits.
DIGEST_BYTES = 16


def content_hash(path: str, *, inside: Inside = None) -> str:
    """The BLAKE2b (128-bit) hex digest of a regular file's bytes (one that resolves into the real
    folder ``inside``, when given).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> _ = open(path, "wb").write(b"abc")
        >>> content_hash(path)
        'cf4ab791c62b8d2b2109c90275287816'
    """
    return _hashed(path, inside)[0]


def _hashed(path: str, inside: Inside) -> tuple[str, int]:
    """The file's digest and the number of bytes it was taken over."""
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    size = 0
    with open_file(path, inside=inside) as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


@dataclass(frozen=True)
class FileCheck:
    """A file's content hash and size in bytes, or why it cannot be used (then ``digest`` is
    empty and ``size`` 0)."""

    digest: str
    problem: str | None
    size: int = 0


def check_files(
    paths: list[str],
    *,
    num_threads: int | None = None,
    progress: Callable[..., Iterator[FileCheck]] | None = None,
    inside: Inside = None,
) -> list[FileCheck]:
    """Check each image's header, size and hash its bytes, in threads; one :class:`FileCheck` per
    path. ``inside``: the real folder every file must resolve into, checked on each opened file,
    or the :class:`~torchloom.io.ObjectRoot` of a store's objects (each read in one GET)."""

    def check(path: str) -> FileCheck:
        if isinstance(inside, ObjectRoot):
            return _check_object(path, inside)
        problem = check_image_file(path, "header", inside=inside)
        if problem is not None:
            return FileCheck("", problem)
        try:
            digest, size = _hashed(path, inside)
        except OSError as exc:
            return FileCheck("", failure_reason(exc, path))
        return FileCheck(digest, None, size)

    with ThreadPoolExecutor(max_workers=file_threads(num_threads)) as pool:
        results = pool.map(check, paths)
        return list(progress(results, total=len(paths)) if progress is not None else results)


def _check_object(url: str, root: ObjectRoot) -> FileCheck:
    """An object's check in one GET: its header probed and its bytes hashed from the same copy."""
    try:
        data = read_image_bytes(url, inside=root)
        probe_image(data, url)
    except Exception as exc:  # every failure is a reason to leave the file out, as check_image_file says
        return FileCheck("", failure_reason(exc, url))
    return FileCheck(hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest(), None, len(data))

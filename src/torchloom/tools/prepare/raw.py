"""Read-only checks of a raw folder's image files: their headers and content hashes.

Nothing here writes to the raw folder; files are opened read-only and FIFOs or devices are
refused before a byte is read (:func:`torchloom.io.files.open_file`). Which files are images is
decided by :func:`torchloom.datasets.discovery.find_tree`, with the rules every folder reader
shares.

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
from torchloom.io.files import open_file
from torchloom.io.threads import file_threads

#: Bytes read at a time while hashing a file.
HASH_CHUNK = 1 << 20


def content_hash(path: str, *, inside: str | None = None) -> str:
    """The BLAKE2b (128-bit) hex digest of a regular file's bytes (one that resolves into the real
    folder ``inside``, when given).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> _ = open(path, "wb").write(b"abc")
        >>> content_hash(path)
        'cf4ab791c62b8d2b2109c90275287816'
    """
    digest = hashlib.blake2b(digest_size=16)
    with open_file(path, inside=inside) as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class FileCheck:
    """A file's content hash, or why it cannot be used (then ``digest`` is empty)."""

    digest: str
    problem: str | None


def check_files(
    paths: list[str],
    *,
    num_threads: int | None = None,
    progress: Callable[..., Iterator[FileCheck]] | None = None,
    inside: str | None = None,
) -> list[FileCheck]:
    """Check each image's header and hash its bytes, in threads; one :class:`FileCheck` per path.
    ``inside``: the real folder every file must resolve into, checked on each opened file."""

    def check(path: str) -> FileCheck:
        problem = check_image_file(path, "header", inside=inside)
        if problem is not None:
            return FileCheck("", problem)
        try:
            return FileCheck(content_hash(path, inside=inside), None)
        except OSError as exc:
            return FileCheck("", failure_reason(exc, path))

    with ThreadPoolExecutor(max_workers=file_threads(num_threads)) as pool:
        results = pool.map(check, paths)
        return list(progress(results, total=len(paths)) if progress is not None else results)

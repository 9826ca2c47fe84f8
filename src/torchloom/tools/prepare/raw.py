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
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from torchloom.datasets.index import check_image_file
from torchloom.io.files import open_file

#: Bytes read at a time while hashing a file.
HASH_CHUNK = 1 << 20


def content_hash(path: str) -> str:
    """The BLAKE2b (128-bit) hex digest of a regular file's bytes.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> _ = open(path, "wb").write(b"abc")
        >>> content_hash(path)
        'cf4ab791c62b8d2b2109c90275287816'
    """
    digest = hashlib.blake2b(digest_size=16)
    with open_file(path) as handle:
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
) -> list[FileCheck]:
    """Check each image's header and hash its bytes, in threads; one :class:`FileCheck` per path."""

    def check(path: str) -> FileCheck:
        problem = check_image_file(path, "header")
        if problem is not None:
            return FileCheck("", problem)
        try:
            return FileCheck(content_hash(path), None)
        except OSError as exc:
            return FileCheck("", f"{type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=num_threads or min(8, os.cpu_count() or 1)) as pool:
        results = pool.map(check, paths)
        return list(progress(results, total=len(paths)) if progress is not None else results)

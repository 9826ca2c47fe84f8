"""Read-only inventory of a raw image folder: which files are images, their content hashes, and
which cannot be read.

Nothing here writes to the raw folder; files are opened read-only and FIFOs or devices are
refused before a byte is read (:func:`torchloom.io.files.open_file`).

Example:
    >>> import numpy as np, os, simplejpeg, tempfile
    >>> root = tempfile.mkdtemp()
    >>> jpeg = simplejpeg.encode_jpeg(np.zeros((8, 8, 3), np.uint8))
    >>> _ = open(os.path.join(root, "a.jpg"), "wb").write(jpeg)
    >>> _ = open(os.path.join(root, "notes.txt"), "w").write("x")
    >>> scan = scan_raw(root)
    >>> scan.files, scan.ignored
    (['a.jpg'], [('notes.txt', 'not an image extension')])
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from torchloom.datasets.folder import IMAGE_EXTENSIONS
from torchloom.datasets.index import check_image_file
from torchloom.io.files import open_file

#: Bytes read at a time while hashing a file.
HASH_CHUNK = 1 << 20


@dataclass
class RawScan:
    """Image files under a root as sorted relative POSIX paths, and files left out with why.

    ``ignored`` are files that are not images by extension (hidden files and folders are skipped
    without a note); ``refused`` are image-named entries that cannot be used as they are
    (symlinks leaving the root, unlistable folders).
    """

    root: str
    files: list[str] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)

    def absolute(self, relative: str) -> str:
        """The path of a file of the scan on this machine."""
        return os.path.join(self.root, *relative.split("/"))


def scan_raw(root: str) -> RawScan:
    """Find the image files under ``root`` (recursively, sorted; hidden entries skipped)."""
    scan = RawScan(root)
    real_root = os.path.realpath(root)

    def note(error: OSError) -> None:
        scan.refused.append((_relative(str(error.filename), root), f"cannot list folder: {error.strerror}"))

    for folder, subfolders, names in os.walk(root, onerror=note):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = os.path.join(folder, name)
            relative = _relative(path, root)
            if os.path.splitext(name)[1].lower() not in IMAGE_EXTENSIONS:
                scan.ignored.append((relative, "not an image extension"))
            elif os.path.islink(path) and not _inside(os.path.realpath(path), real_root):
                scan.refused.append((relative, f"symlink to {os.path.realpath(path)!r}, outside RAW"))
            else:
                scan.files.append(relative)
    scan.files.sort()
    return scan


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
    workers: int | None = None,
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

    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        results = pool.map(check, paths)
        return list(progress(results, total=len(paths)) if progress is not None else results)


def _relative(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root

"""Build ``OUT/<split>/<label>/<file>`` class folders from a split, by hard link or copy.

File names are the raw files' base names. When two files would share a name in one folder
(compared case-insensitively, so the layout also works on macOS and Windows), every one of them
gets ``__`` and 16 hex digits of its relative path's hash before the extension: the result
depends only on the set of files, never on their order.

Hard links (``mode="link"``) cost no space but *are* the raw files: editing one edits the other.
A link that the filesystem refuses (another device, no hard-link support) falls back to a copy,
and the fallbacks are counted. The raw files are only read, each opened once through the file
layer (regular files only, confined to RAW): a copy is made from the opened file, and a link is
checked to be that very file, so a file swapped for a link out of RAW after it was checked is
refused, never copied.

Example:
    >>> target_names(["a/x.jpg", "b/X.jpg", "c/y.jpg"])
    ['x__04af37c1ac9f1396.jpg', 'X__5c0132dd75dba9e8.jpg', 'y.jpg']
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import shutil
import stat
from collections import Counter
from collections.abc import Sequence
from typing import BinaryIO, Literal

from torchloom.errors import ConfigError, UnsafeFileError
from torchloom.io.files import open_file

MaterializeMode = Literal["link", "copy"]
#: Errors of ``os.link`` that mean "this filesystem cannot link here", so a copy is made instead.
LINK_FALLBACK_ERRNOS = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES})
_SAFE_NAME_EXCLUDED = ("/", "\\", "\0")
#: The longest file or folder name (in UTF-8 bytes) common filesystems (ext4, APFS, NTFS) accept.
MAX_NAME_BYTES = 255
#: Bytes copied at a time.
COPY_CHUNK = 1 << 20


def check_folder_name(name: str, what: str) -> None:
    """Refuse a label or split that cannot be one folder name (``..``, ``a/b``, empty).

    Example:
        >>> try:
        ...     check_folder_name("../etc", "label")
        ... except ConfigError as error:
        ...     print(str(error)[:40])
        label '../etc' cannot be a folder name (
    """
    if name in ("", ".", "..") or any(part in name for part in _SAFE_NAME_EXCLUDED):
        raise ConfigError(
            f"{what} {name!r} cannot be a folder name (empty, '.', '..', or holds / \\ or NUL); "
            "rename it in the labels"
        )
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise ConfigError(
            f"{what} {name[:40]!r}... is longer than a folder name may be ({MAX_NAME_BYTES} bytes); "
            "shorten it in the labels"
        )


def target_names(relative_paths: Sequence[str]) -> list[str]:
    """The file name each file gets inside its ``<split>/<label>`` folder (module rule)."""
    names = [posixpath.basename(path) for path in relative_paths]
    taken = Counter(name.casefold() for name in names)
    result = []
    for path, name in zip(relative_paths, names, strict=True):
        if taken[name.casefold()] > 1:
            stem, extension = posixpath.splitext(name)
            tag = hashlib.blake2b(path.encode("utf-8"), digest_size=8).hexdigest()
            room = MAX_NAME_BYTES - len(f"__{tag}{extension}".encode("utf-8", "surrogateescape"))
            stem = stem.encode("utf-8", "surrogateescape")[: max(room, 1)].decode("utf-8", "ignore")
            name = f"{stem}__{tag}{extension}"
        result.append(name)
    return result


def materialize(
    sources: Sequence[str], targets: Sequence[str], *, mode: MaterializeMode, inside: str | None = None
) -> int:
    """Link (or copy) each absolute ``sources[i]`` to ``targets[i]``; returns how many links fell
    back to copies. ``inside``: the real folder every source must resolve into. Target folders are
    created; an existing target is an error."""
    if mode not in ("link", "copy"):
        raise ConfigError(f"Invalid mode={mode!r}; use 'link' or 'copy'")
    lowered = Counter(os.path.normcase(target).casefold() for target in targets)
    clash = next((target for target in targets if lowered[os.path.normcase(target).casefold()] > 1), None)
    if clash is not None:
        raise ConfigError(f"two files would be written to {clash!r}; rename one of the raw files")
    copied = 0
    made: set[str] = set()
    for source, target in zip(sources, targets, strict=True):
        folder = os.path.dirname(target)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        with open_file(source, inside=inside) as handle:
            if mode == "copy":
                _copy(handle, target)
                continue
            try:
                _link(handle, source, target)
            except OSError as exc:
                if exc.errno not in LINK_FALLBACK_ERRNOS:
                    raise
                _copy(handle, target)
                copied += 1
    return copied


def _copy(handle: BinaryIO, target: str) -> None:
    """Copy the opened file to ``target`` with its permission bits and times, as ``shutil.copy2``."""
    status = os.fstat(handle.fileno())
    with open(target, "wb") as out:
        shutil.copyfileobj(handle, out, COPY_CHUNK)
    os.chmod(target, stat.S_IMODE(status.st_mode))
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))


def _link(handle: BinaryIO, source: str, target: str) -> None:
    """Hard-link the file ``source`` names to ``target``, refusing the link unless it is the opened
    file (``source`` may have been swapped since it was opened)."""
    os.link(os.path.realpath(source), target)
    opened, linked = os.fstat(handle.fileno()), os.stat(target)
    if (opened.st_dev, opened.st_ino) != (linked.st_dev, linked.st_ino):
        os.remove(target)
        raise UnsafeFileError(
            source, "changed while it was linked (another file is there now); run prepare again"
        )

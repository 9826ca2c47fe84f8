"""What a decoded cache was built from: its inputs (every file's size and mtime) and its settings.

Inputs are compared file by file, so a stale cache is reported with what changed
(``"3 files changed since the cache was built (e.g. 'cat/1.jpg': size 1200 -> 1301)"``), not a
bare hash mismatch. Reading them costs one ``os.stat`` per file, run in threads. Objects in a
store (a dataset on a root URL) are not asked one by one (a HEAD each): the root prefix is listed
once (one request per thousand objects), and each object's size and ETag recorded, the ETag as
a number in place of the mtime.

Example:
    >>> import os, tempfile
    >>> from torchloom.datasets.index import StringColumn
    >>> path = os.path.join(tempfile.mkdtemp(), "a.jpg")
    >>> _ = open(path, "wb").write(b"1234")
    >>> before = InputStats.of(StringColumn.from_strings([path]), num_threads=1)
    >>> _ = open(path, "ab").write(b"5")
    >>> print(InputStats.of(before.paths, num_threads=1).changes_since(before, os.path.dirname(path)))
    1 file changed since the cache was built (e.g. 'a.jpg': size 4 -> 5)
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchloom.datasets.index import StringColumn
from torchloom.io.files import Inside, is_url, lies_inside
from torchloom.io.objects import ObjectRoot
from torchloom.io.threads import file_threads

#: Version of the cache's on-disk format; a cache of an older version is rebuilt.
FORMAT_VERSION = 1
#: Interpolation used to shrink images to ``max_side`` (part of the settings).
DOWNSCALE_INTERPOLATION = "cv2.INTER_AREA"
#: Files stat'ed by one thread task.
STAT_CHUNK = 512
#: Changed files named in a staleness message.
EXAMPLES_NAMED = 3
#: Size and mtime recorded for a file that could not be stat'ed.
MISSING = -1


@dataclass(frozen=True)
class InputStats:
    """Every input file's absolute path, size in bytes and modification time in nanoseconds."""

    paths: StringColumn
    sizes: np.ndarray
    mtimes: np.ndarray

    @classmethod
    def of(cls, paths: StringColumn, *, num_threads: int | None = None, root: Inside = None) -> InputStats:
        """Stat every path (made absolute) in threads; a missing file gets size and mtime ``-1``.
        Under a root URL (``root`` an :class:`~torchloom.io.ObjectRoot`), list the root instead."""
        if isinstance(root, ObjectRoot):
            return cls._listed(paths, root)
        absolute = StringColumn.from_strings(os.path.abspath(path) for path in paths.to_list())
        count = len(absolute)
        sizes = np.full(count, MISSING, np.int64)
        mtimes = np.full(count, MISSING, np.int64)

        def stat_range(start: int) -> None:
            for i in range(start, min(start + STAT_CHUNK, count)):
                try:
                    result = os.stat(absolute[i])
                except OSError:
                    continue
                sizes[i], mtimes[i] = result.st_size, result.st_mtime_ns

        with ThreadPoolExecutor(max_workers=file_threads(num_threads)) as pool:
            list(pool.map(stat_range, range(0, count, STAT_CHUNK)))
        return cls(absolute, sizes, mtimes)

    @classmethod
    def _listed(cls, paths: StringColumn, root: ObjectRoot) -> InputStats:
        listed = {item["name"]: item for item in root.store.list_below(root.url, progress=False)}
        count = len(paths)
        sizes = np.full(count, MISSING, np.int64)
        etags = np.full(count, MISSING, np.int64)
        for i, url in enumerate(paths.to_list()):
            item = listed.get(url)
            if item is not None:
                sizes[i], etags[i] = int(item["size"] or 0), _etag_number(item["etag"])
        return cls(paths, sizes, etags)

    def save(self, path: str) -> None:
        """Write the stats as plain arrays in an ``.npz`` file (no pickle)."""
        np.savez(
            path,
            path_data=self.paths.data,
            path_offsets=self.paths.offsets,
            sizes=self.sizes,
            mtimes=self.mtimes,
            allow_pickle=False,
        )

    @classmethod
    def load(cls, path: str) -> InputStats:
        """Read stats written by :meth:`save` (a damaged file raises ``KeyError``, ``ValueError``,
        ``OSError`` or ``zipfile.BadZipFile``)."""
        with np.load(path, allow_pickle=False) as arrays:
            return cls(
                StringColumn(arrays["path_data"], arrays["path_offsets"]),
                arrays["sizes"],
                arrays["mtimes"],
            )

    def changes_since(self, built: InputStats, root: str | None = None) -> str | None:
        """What changed since ``built`` (paths shown relative to ``root``), or ``None``."""

        def name(path: str) -> str:
            if root and os.path.isabs(path) and lies_inside(os.path.normpath(path), os.path.abspath(root)):
                return repr(os.path.relpath(path, root))
            return repr(path)

        if not _same_paths(self.paths, built.paths):
            return _describe_file_list_change(built.paths, self.paths, name)
        changed = np.flatnonzero((self.sizes != built.sizes) | (self.mtimes != built.mtimes))
        if len(changed) == 0:
            return None
        examples = ", ".join(
            f"{name(self.paths[int(i)])}: {_describe_stat_change(built, self, int(i))}"
            for i in changed[:EXAMPLES_NAMED]
        )
        files = "file" if len(changed) == 1 else "files"
        return f"{len(changed)} {files} changed since the cache was built (e.g. {examples})"


def settings_of(field: str, max_side: int | None, exif_orientation: bool, max_pixels: int) -> dict[str, Any]:
    """The settings a cache's content depends on (transforms are not among them: they run after)."""
    return {
        "version": FORMAT_VERSION,
        "fields": [field],
        "max_side": max_side,
        "interpolation": DOWNSCALE_INTERPOLATION,
        "exif_orientation": exif_orientation,
        "max_pixels": max_pixels,
    }


def content_key(settings: dict[str, Any], inputs: InputStats, images: dict[str, Any]) -> str:
    """A name for a cache's content: its settings, its inputs (paths, sizes, mtimes) and its image
    files' sizes and checksums (``images``, their entries in the metadata). Two builds of the same
    inputs with the same settings have the same key, whatever their path; any change, another.

    Example:
        >>> from torchloom.datasets.index import StringColumn
        >>> inputs = InputStats.of(StringColumn.from_strings([]))
        >>> len(content_key({"max_side": 64}, inputs, {})), content_key({}, inputs, {}) == content_key(
        ...     {"max_side": 64}, inputs, {})
        (24, False)
    """
    digest = hashlib.blake2b(digest_size=12)
    entries = {name: [int(entry["size"]), int(entry["crc32"])] for name, entry in images.items()}
    digest.update(json.dumps([settings, entries], sort_keys=True).encode())
    for array in (inputs.paths.data, inputs.paths.offsets, inputs.sizes, inputs.mtimes):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def settings_changes(built: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """``"max_side 256 -> 128, ..."`` for every setting that differs, or ``None``."""
    keys = sorted(set(built) | set(wanted))
    changed = [
        f"{key} {built.get(key)!r} -> {wanted.get(key)!r}"
        for key in keys
        if built.get(key) != wanted.get(key)
    ]
    return "settings changed since the cache was built: " + ", ".join(changed) if changed else None


def _same_paths(a: StringColumn, b: StringColumn) -> bool:
    return np.array_equal(a.offsets, b.offsets) and np.array_equal(a.data, b.data)



def _describe_file_list_change(built: StringColumn, now: StringColumn, name: Callable[[str], str]) -> str:
    old, new = built.to_list(), now.to_list()
    old_set, new_set = set(old), set(new)
    added = [path for path in new if path not in old_set]
    removed = [path for path in old if path not in new_set]
    parts = [f"{len(old)} files when built, {len(new)} now"]
    if added:
        parts.append(f"{len(added)} new, e.g. {', '.join(name(p) for p in added[:EXAMPLES_NAMED])}")
    if removed:
        parts.append(f"{len(removed)} gone, e.g. {', '.join(name(p) for p in removed[:EXAMPLES_NAMED])}")
    if not added and not removed:
        parts.append("the same files in another order")
    return "the dataset's file list changed since the cache was built (" + "; ".join(parts) + ")"


def _describe_stat_change(built: InputStats, now: InputStats, i: int) -> str:
    if now.sizes[i] == MISSING:
        return "missing now"
    if built.sizes[i] == MISSING:
        return "was missing when built"
    if now.sizes[i] != built.sizes[i]:
        return f"size {built.sizes[i]} -> {now.sizes[i]}"
    if is_url(now.paths[i]):
        return "rewritten (another ETag)"
    return f"modified {_timestamp(int(built.mtimes[i]))} -> {_timestamp(int(now.mtimes[i]))}"


def _etag_number(etag: str | None) -> int:
    """An object's ETag as a non-negative int64 (0 where the store gives none)."""
    if not etag:
        return 0
    digest = hashlib.blake2b(etag.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


def _timestamp(nanoseconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(nanoseconds / 1e9, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")

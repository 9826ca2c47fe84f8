"""The on-disk format of a decoded cache: one folder, no pickle anywhere.

``meta.json`` holds the format marker and version, the settings, the layout, the samples that
failed to decode and every file's size and checksums, with a CRC-32 of itself. ``inputs.npz``
holds the input files' paths, sizes and mtimes. The images are RGB ``uint8``:

- ``"fixed"`` layout (every image the same shape): ``images.npy``, an ``(N, H, W, 3)`` array;
- ``"variable"`` layout: ``images.bin``, the images' bytes one after another, with
  ``offsets.npy`` (``int64``, ``N + 1`` byte offsets) and ``shapes.npy`` (``int32``, ``(N, 3)``).

A sample that failed to decode keeps its row (zeros, or zero bytes) so a row is its index; it is
never returned as an image. Everything is memory-mapped read-only: every process reading the
cache shares the same pages of the page cache (or of ``/dev/shm``).

Example:
    >>> import numpy as np, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> writer = ImageWriter(folder, np.array([[2, 3, 3], [4, 1, 3]], np.int32))
    >>> writer.write(1, np.full((4, 1, 3), 7, np.uint8))
    >>> files = writer.close()
    >>> meta = {"layout": writer.layout, "count": 2, "shape": writer.shape}
    >>> store = ImageStore.open(folder, meta)
    >>> files, store.layout, store.read(1)[:, 0, 0].tolist()
    (['images.bin', 'offsets.npy', 'shapes.npy'], 'variable', [7, 7, 7, 7])
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from torchloom.cache.fingerprint import FORMAT_VERSION
from torchloom.cache.memory import format_bytes
from torchloom.errors import CacheError, CacheSpaceError, CorruptCacheError, NotACacheError

#: ``meta.json``'s ``"format"``: what tells a torchloom cache folder from any other folder.
MARKER = "torchloom.DecodedCache"
META_FILE = "meta.json"
INPUTS_FILE = "inputs.npz"
FIXED_FILE = "images.npy"
BLOB_FILE = "images.bin"
OFFSETS_FILE = "offsets.npy"
SHAPES_FILE = "shapes.npy"
CHANNELS = 3


def fsync_path(path: str) -> None:
    """Flush a file's (or a folder's) data to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_meta(folder: str, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` with a ``checksum`` of its content, durably."""
    body = {key: value for key, value in meta.items() if key != "checksum"}
    body["checksum"] = _meta_checksum(body)
    path = os.path.join(folder, META_FILE)
    with open(path, "w", encoding="ascii") as handle:
        json.dump(body, handle, indent=1, sort_keys=True)
    fsync_path(path)


def read_meta(folder: str) -> dict[str, Any]:
    """Read and check ``meta.json``: a torchloom cache of a readable version, not altered.

    Raises :class:`NotACacheError` for a folder that is not a torchloom cache, :class:`CacheError`
    for a newer format, :class:`CorruptCacheError` (the caller says how to rebuild) when altered.
    """
    path = os.path.join(folder, META_FILE)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        if holds_only_cache_files(folder):
            raise CorruptCacheError(f"cache {folder!r}: {META_FILE} is missing") from None
        raise NotACacheError(
            f"{folder!r} is not a torchloom cache (it has no {META_FILE}) and is never overwritten; "
            "pass another cache path, or delete the folder if it is yours to delete"
        ) from None
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        if MARKER.encode() in raw or holds_only_cache_files(folder):
            raise CorruptCacheError(f"cache {folder!r}: {META_FILE} is damaged ({exc})") from exc
        raise NotACacheError(
            f"{path!r} is not a torchloom cache's metadata (not JSON); pass another cache path"
        ) from exc
    if not isinstance(meta, dict) or meta.get("format") != MARKER:
        if holds_only_cache_files(folder):
            raise CorruptCacheError(f"cache {folder!r}: {META_FILE} is damaged (no format {MARKER!r})")
        raise NotACacheError(
            f"{folder!r} is not a torchloom cache ({META_FILE} has no format {MARKER!r}) and is never "
            "overwritten; pass another cache path"
        )
    version = meta.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CacheError(
            f"cache {folder!r} has format version {version!r}, newer than this torchloom reads "
            f"({FORMAT_VERSION}); upgrade torchloom, or pass another cache path"
        )
    body = {key: value for key, value in meta.items() if key != "checksum"}
    if meta.get("checksum") != _meta_checksum(body):
        raise CorruptCacheError(f"cache {folder!r}: {META_FILE} was altered (its checksum differs)")
    return meta


def holds_only_cache_files(folder: str) -> bool:
    """``folder`` holds a cache's input list and images and nothing that is not a cache file: a
    cache whose ``meta.json`` was lost or cut short (an interrupted copy writes it last), which may
    be rebuilt; any other folder is never overwritten.

    Example:
        >>> import tempfile
        >>> holds_only_cache_files(tempfile.mkdtemp())
        False
    """
    try:
        names = set(os.listdir(folder))
    except OSError:
        return False
    layouts = ({FIXED_FILE}, {BLOB_FILE, OFFSETS_FILE, SHAPES_FILE})
    return INPUTS_FILE in names and any(
        layout <= names and names <= layout | {INPUTS_FILE, META_FILE} for layout in layouts
    )


def _meta_checksum(body: dict[str, Any]) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("ascii"))


def reserve(path: str) -> None:
    """Allocate the disk blocks of the (sparse) file ``path`` now: a disk without room for it is a
    :class:`CacheSpaceError` naming both sizes, and one that fills up meanwhile is one too, not a
    SIGBUS that kills the process when a page of its memory map is first written.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "images.bin")
        >>> with open(path, "wb") as handle:
        ...     _ = handle.truncate(1 << 20)  # sparse: no blocks yet
        >>> reserve(path)
        >>> os.stat(path).st_blocks * 512 >= 1 << 20
        True
    """
    folder = os.path.dirname(path)
    descriptor = os.open(path, os.O_RDWR)
    try:
        needed, free = os.fstat(descriptor).st_size, shutil.disk_usage(folder).free
        if needed > free:  # a sparse file takes no blocks yet: the whole size must be free
            raise CacheSpaceError(
                f"building a cache in {os.path.dirname(folder)!r} needs {format_bytes(needed)} for its "
                f"images, but only {format_bytes(free)} is free there; free some space, pass a path on "
                "another disk, or a smaller max_side"
            )
        os.posix_fallocate(descriptor, 0, needed)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise CacheSpaceError(
                f"the disk holding {path!r} ran out of space while the cache's files were laid out; "
                "free some space, or pass a path on another disk"
            ) from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise  # a filesystem that cannot allocate ahead keeps the free-space check alone
    finally:
        os.close(descriptor)


class ImageWriter:
    """Lays out a new cache's images from their shapes, then takes them in any order, from any thread.

    Args:
        folder: where the files are written.
        shapes: ``(N, 3)`` shape of every image; a row of zeros for a sample that failed.
    """

    def __init__(self, folder: str, shapes: np.ndarray) -> None:
        self.folder = folder
        valid = shapes[shapes[:, 0] > 0]
        distinct = np.unique(valid, axis=0)
        self.shape: list[int] | None = distinct[0].tolist() if len(distinct) == 1 else None
        self.layout = "fixed" if self.shape is not None else "variable"
        self._images: np.ndarray | None = None
        self._blob: np.ndarray | None = None
        if self.shape is not None:
            images_path = os.path.join(folder, FIXED_FILE)
            self._images = np.lib.format.open_memmap(
                images_path, mode="w+", dtype=np.uint8, shape=(len(shapes), *self.shape)
            )
            reserve(images_path)
            self.files = [FIXED_FILE]
            return
        sizes = np.prod(shapes.astype(np.int64), axis=1)
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        np.save(os.path.join(folder, OFFSETS_FILE), self._offsets, allow_pickle=False)
        np.save(os.path.join(folder, SHAPES_FILE), shapes.astype(np.int32), allow_pickle=False)
        total = int(self._offsets[-1])
        blob_path = os.path.join(folder, BLOB_FILE)
        if total:
            self._blob = np.memmap(blob_path, dtype=np.uint8, mode="w+", shape=(total,))
            reserve(blob_path)
        else:
            open(blob_path, "wb").close()
        self.files = [BLOB_FILE, OFFSETS_FILE, SHAPES_FILE]

    def write(self, index: int, image: np.ndarray) -> None:
        """Store image ``index`` (its shape must be the one given for it)."""
        if self._images is not None:
            self._images[index] = image
        elif self._blob is not None:
            self._blob[self._offsets[index] : self._offsets[index + 1]] = image.reshape(-1)

    def close(self) -> list[str]:
        """Flush everything to the disk; returns the names of the files written."""
        for array in (self._images, self._blob):
            if isinstance(array, np.memmap):
                array.flush()
        self._images = self._blob = None
        for name in self.files:
            fsync_path(os.path.join(self.folder, name))
        return list(self.files)


class ImageStore:
    """The images of a cache folder, memory-mapped read-only; reads return private copies."""

    def __init__(
        self,
        layout: str,
        images: np.ndarray | None = None,
        blob: np.ndarray | None = None,
        offsets: np.ndarray | None = None,
        shapes: np.ndarray | None = None,
    ) -> None:
        self.layout = layout
        # Plain ndarray views of the memory maps: indexing a np.memmap runs its Python-level
        # __array_finalize__ for every image (a few µs per sample on the hot path).
        self._images = images.view(np.ndarray) if images is not None else None
        self._blob = blob.view(np.ndarray) if blob is not None else np.zeros(0, np.uint8)
        self._offsets = offsets if offsets is not None else np.zeros(1, np.int64)
        self._shapes = shapes if shapes is not None else np.zeros((0, CHANNELS), np.int32)

    @classmethod
    def open(cls, folder: str, meta: dict[str, Any]) -> ImageStore:
        """Map the image files of ``folder`` as ``meta`` describes them (their sizes already checked)."""
        count = int(meta["count"])
        if meta["layout"] == "fixed":
            images = _load_array(folder, FIXED_FILE)
            expected = (count, *meta["shape"])
            if images.shape != expected or images.dtype != np.uint8:
                why = f"holds {images.dtype} {images.shape}, not uint8 {expected}"
                raise _damaged(folder, FIXED_FILE, why)
            return cls("fixed", images=images)
        offsets = _load_array(folder, OFFSETS_FILE)
        shapes = _load_array(folder, SHAPES_FILE)
        blob_path = os.path.join(folder, BLOB_FILE)
        size = os.path.getsize(blob_path)
        blob = np.memmap(blob_path, dtype=np.uint8, mode="r") if size else None
        if offsets.shape != (count + 1,) or shapes.shape != (count, CHANNELS) or offsets.dtype != np.int64:
            why = f"offsets {offsets.shape} and shapes {shapes.shape} for {count} samples"
            raise _damaged(folder, OFFSETS_FILE, why)
        sizes = np.prod(shapes.astype(np.int64), axis=1)
        if offsets[0] != 0 or offsets[-1] != size or not np.array_equal(np.diff(offsets), sizes):
            raise _damaged(folder, OFFSETS_FILE, f"offsets disagree with the shapes or {BLOB_FILE}'s size")
        return cls("variable", blob=blob, offsets=offsets, shapes=shapes)

    def shape(self, index: int) -> tuple[int, ...]:
        if self._images is not None:
            return tuple(self._images.shape[1:])
        return tuple(int(n) for n in self._shapes[index])

    def read(self, index: int) -> np.ndarray:
        """Image ``index`` as a writable array of its own (a transform may change it in place)."""
        return np.array(self.view(index))

    def read_many(self, indices: Sequence[int]) -> list[np.ndarray]:
        """Several images; with the fixed layout, one gather for all of them."""
        if self._images is not None and len(indices) > 1:
            return list(self._images[np.asarray(indices, dtype=np.int64)])
        return [self.read(index) for index in indices]

    def view(self, index: int) -> np.ndarray:
        """Image ``index`` as a read-only view of the memory map: no copy, for a reader that only reads."""
        if self._images is not None:
            return self._images[index]
        start, stop = int(self._offsets[index]), int(self._offsets[index + 1])
        return self._blob[start:stop].reshape(self.shape(index))


def _load_array(folder: str, name: str) -> np.ndarray:
    try:
        array: np.ndarray = np.load(os.path.join(folder, name), mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise _damaged(folder, name, f"unreadable as an array ({exc})") from exc
    return array


def _damaged(folder: str, name: str, why: str) -> CorruptCacheError:
    return CorruptCacheError(f"cache {folder!r}: {name} is damaged: {why}")

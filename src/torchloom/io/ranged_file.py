"""An object read in byte ranges: what readers that seek (npy headers, zip directories, h5py, ENVI
windows) read a URL through.

fsspec's own file object reads ahead a whole block on its first read (50 MiB with s3fs) and sends
a HEAD when it opens: probing the 128-byte header of a ``.npy`` volume would download up to 50 MiB.
:class:`RangedFile` instead sends one ranged GET per read that misses the blocks it holds (a small
one, :data:`BLOCK_BYTES`, after a seek; growing ones as a read goes on sequentially, as a video
decoder's does), through the dataset's :class:`~torchloom.io.ObjectRoot`: each request is
confined to the root, retried and counted by its store, and checked against the object as first
read (another size or ETag is an :class:`~torchloom.errors.ObjectChangedError`). The object's
size comes with the first GET (its ``Content-Range``), so no HEAD is sent to S3.
:func:`fetch_ranges` reads many ranges of one object at once (an ENVI patch's rows or bands).

Example:
    >>> import fsspec
    >>> from torchloom.io import ObjectRoot, ObjectStore
    >>> from torchloom.io.ranged_file import RangedFile
    >>> fsspec.filesystem("memory").pipe("memory://ranged/a.bin", b"0123456789")
    >>> root = ObjectRoot("memory://ranged", ObjectStore())
    >>> with RangedFile(root, "memory://ranged/a.bin") as handle:
    ...     _ = handle.seek(-3, 2)
    ...     handle.read()
    b'789'
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchloom.errors import ObjectChangedError

if TYPE_CHECKING:  # the root's own module opens objects as RangedFile
    from torchloom.io.objects import ObjectRoot

#: Bytes a read that misses the blocks held fetches at least (a header, a zip directory).
BLOCK_BYTES = 64 << 10
#: The most one GET of a sequential read fetches (each continuing miss doubles the last fetch).
MAX_READAHEAD_BYTES = 8 << 20
#: Small blocks (at most :data:`BLOCK_BYTES`) held besides the current one: a container's headers.
KEPT_BLOCKS = 3


def fetch_ranges(root: ObjectRoot, url: str, spans: Sequence[tuple[int, int]]) -> list[bytes]:
    """The bytes of every ``(start, end)`` span of ``url``, requested at the same time (the
    store's ``max_in_flight`` at most); the first failure raises, naming the URL.

    Example:
        >>> import fsspec
        >>> from torchloom.io import ObjectRoot, ObjectStore
        >>> fsspec.filesystem("memory").pipe("memory://ranged/c.bin", b"abcdef")
        >>> root = ObjectRoot("memory://ranged", ObjectStore())
        >>> fetch_ranges(root, "memory://ranged/c.bin", [(0, 2), (4, 6)])
        [b'ab', b'ef']
    """
    root.check(url)
    results = root.store.get_many([(url, start, end) for start, end in spans])
    fetched: list[bytes] = []
    for result in results:
        if isinstance(result, Exception):
            raise result
        fetched.append(root.checked(url, result).data)
    return fetched


class RangedFile(io.RawIOBase):
    """A read-only, seekable file object of one object of ``root``, each read that misses the
    blocks it holds one ranged GET; it has no descriptor, so ``fileno()`` raises
    ``io.UnsupportedOperation`` and memory-mapping is not offered.

    A read after a seek fetches :data:`BLOCK_BYTES`; a miss that continues a held block (a
    decoder reading a video's packets, a reader going through a zip member) fetches twice that
    block, up to :data:`MAX_READAHEAD_BYTES`, so a sequential read of ``n`` bytes is about
    ``log2(n / BLOCK_BYTES)`` GETs rather than ``n / BLOCK_BYTES``, and a seek starts small again.
    The last :data:`KEPT_BLOCKS` blocks of at most :data:`BLOCK_BYTES` are held besides the
    current one: a container's header read at the open (an MP4's ``moov`` at the end of the file,
    a Matroska's ``Tracks`` at its start) is served again without a GET.

    Args:
        root: the dataset's object root (its store, its confinement).
        url: the object.
        size: its size when already known (a listing's), else learnt from the first GET.

    Example:
        >>> import fsspec
        >>> from torchloom.io import ObjectRoot, ObjectStore
        >>> fsspec.filesystem("memory").pipe("memory://ranged/d.bin", b"abcdef")
        >>> handle = RangedFile(ObjectRoot("memory://ranged", ObjectStore()), "memory://ranged/d.bin")
        >>> handle.read(2), handle.tell(), handle.size
        (b'ab', 2, 6)
    """

    def __init__(self, root: ObjectRoot, url: str, *, size: int | None = None) -> None:
        super().__init__()
        root.check(url)
        root.store.filesystem(url)  # a scheme no installed filesystem serves is refused at the open
        self.root = root
        self.url = url
        self.name = url
        self._size = size
        self._position = 0
        # Held blocks as (start, bytes), the most recently fetched last: small ones kept, one large.
        self._blocks: list[tuple[int, bytes]] = []

    @property
    def size(self) -> int:
        """The object's size in bytes: a ranged GET of a byte when no read told it yet, or a HEAD
        from a store whose GETs do not say it (S3's do)."""
        if self._size is None:
            self._fetch(0, 1, read_ahead=False)
        if self._size is None:
            self._size = self.root.info(self.url).size
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._checkClosed()
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._checkClosed()
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position}.get(whence)
        if base is None:
            if whence != os.SEEK_END:
                raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
            base = self.size
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        self._checkClosed()
        end = self._position + len(buffer)
        if self._size is not None:
            end = min(end, self._size)
        done = 0
        while self._position < end:
            data = self._held(self._position, end)
            if data is None:
                self._fetch(self._position, end)
                data = self._held(self._position, end)
                if data is None:  # the object ended before ``end``
                    break
            buffer[done : done + len(data)] = data
            done += len(data)
            self._position += len(data)
        return done

    def readall(self) -> bytes:
        return self.read(max(self.size - self._position, 0))

    def _held(self, start: int, end: int) -> memoryview | None:
        """The bytes from ``start`` (up to ``end``) of a held block that holds ``start``."""
        for block_start, block in reversed(self._blocks):
            if block_start <= start < block_start + len(block):
                return memoryview(block)[start - block_start : end - block_start]
        return None

    def _fetch(self, start: int, end: int, *, read_ahead: bool = True) -> None:
        """Fetch a block from ``start``: at least to ``end``, larger when it continues a held one."""
        if read_ahead:
            end = max(end, start + self._readahead(start))
        if self._size is not None:
            end = min(end, self._size)
        fetched = self.root.fetch(self.url, start, end)
        if not fetched.data and self._size is not None and start < self._size:
            raise ObjectChangedError(
                self.url, f"it was {self._size:,} bytes and now ends before byte {start:,} (rewritten)"
            )
        if fetched.size is not None:
            self._size = fetched.size
        elif not fetched.data:  # past the end, and the store named no size: ask it
            self._size = self.root.info(self.url).size
        elif len(fetched.data) < end - start:  # a store that names no size: the end was reached
            self._size = start + len(fetched.data)
        kept = [block for block in self._blocks if len(block[1]) <= BLOCK_BYTES][-KEPT_BLOCKS:]
        self._blocks = [*kept, (start, fetched.data)]

    def _readahead(self, start: int) -> int:
        """Bytes to fetch from ``start``: twice a held block it continues (within that block's
        length past its end: a demuxer skipping another stream's packets), else one block."""
        for block_start, block in reversed(self._blocks):
            block_end = block_start + len(block)
            if block_end <= start <= block_end + len(block):
                return max(BLOCK_BYTES, min(2 * len(block), MAX_READAHEAD_BYTES))
        return BLOCK_BYTES

"""Files in an object store (``s3://``, ``gs://``, any fsspec URL): the file layer's second backend.

:class:`ObjectStore` reaches a store through fsspec with the ``storage_options`` pandas, Hugging
Face datasets and LitData take (credentials, ``client_kwargs={"endpoint_url": ...}`` for MinIO,
Ceph or SeaweedFS). It makes every read one request, retries what another attempt may fix and
counts it all (:class:`~torchloom.io.store_requests.StoreStats`):

- **One GET per read.** A whole object is one GET with a range of ``max_bytes + 1`` bytes (the
  size guard without a HEAD first, which s3fs's ``cat`` would send); a header or a patch is one
  ranged GET. :meth:`ObjectStore.get_many` sends many at once (``max_in_flight``), so the latency
  of each is hidden behind the others.
- **Retries** with exponential backoff and full jitter (``backoff * 2**attempt`` at most,
  ``max_backoff`` at most) for throttling (503 SlowDown, 429), other 5xx, lost connections and
  timeouts, ``retries`` times; s3fs's and botocore's own retries are turned off so that every
  attempt is seen and counted. A missing object is a :class:`~torchloom.errors.MissingFileError`,
  a denied one an :class:`~torchloom.errors.UnreadableFileError`, each naming the URL, never retried.

:class:`ObjectRoot` is a store bound to a dataset's root prefix: what a dataset passes as
``inside=`` to every read, so that the file layer serves its URLs from that store, refuses any
outside the prefix, and names an object that changed (another size or ETag) since the dataset
first read it (:class:`~torchloom.errors.ObjectChangedError`).

Example:
    >>> import fsspec
    >>> from torchloom.io import ObjectRoot, ObjectStore
    >>> memory = fsspec.filesystem("memory")
    >>> memory.pipe("memory://shop/photos/cat/1.jpg", b"0123456789")
    >>> root = ObjectRoot("memory://shop/photos", ObjectStore())
    >>> root.read("memory://shop/photos/cat/1.jpg", inside=root.url, max_bytes=None, too_large=None)
    b'0123456789'
    >>> root.read_range("memory://shop/photos/cat/1.jpg", 8, 4, inside=root.url)
    b'89'
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, BinaryIO, cast

from torchloom.errors import DecodeError, ObjectChangedError, UnsafeFileError
from torchloom.io.backend import FileInfo, refuse_size
from torchloom.io.object_store import ObjectStore
from torchloom.io.object_urls import normal_url, outside_reason, root_url
from torchloom.io.ranged_file import RangedFile
from torchloom.io.store_requests import Fetched

__all__ = ["ObjectRoot", "ObjectStore"]


class ObjectRoot:
    """An :class:`ObjectStore` bound to a dataset's root prefix: a file backend that serves the
    URLs below it and refuses the others, and names an object whose size or ETag changed since
    it was first read (a changed object is never mixed in silently).

    Args:
        url: the root prefix (``s3://bucket/prefix``).
        store: how to reach it.
        confined: refuse URLs outside the root (default True; False with ``allow_outside_root``).

    Example:
        >>> root = ObjectRoot("s3://shop/photos/", ObjectStore())
        >>> root.url
        's3://shop/photos'
        >>> root.read_range("s3://other/x.jpg", 0, 4, inside=root.url)
        Traceback (most recent call last):
        ...
        torchloom.errors.UnsafeFileError: refusing to read 's3://other/x.jpg': it is in another bucket, ...
    """

    def __init__(self, url: str, store: ObjectStore, *, confined: bool = True) -> None:
        self.url = root_url(url)
        self.store = store
        self.confined = confined
        self._seen: dict[str, tuple[int | None, str | None]] = {}
        self._seen_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_seen_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._seen_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ObjectRoot({self.url!r})"

    def expect(self, url: str, size: int | None, etag: str | None = None) -> None:
        """Record what ``url`` was when the dataset was indexed (a manifest's size, a listing's
        ETag): a later read of another size or ETag is an ``ObjectChangedError``."""
        with self._seen_lock:
            self._seen[url] = (size, etag)

    def read(self, path: str, *, inside: str | None, max_bytes: int | None, too_large: str | None) -> bytes:
        path = normal_url(path)
        self.check(path)
        fetched = self.store.get(path, 0, None if max_bytes is None else max_bytes + 1, etag=self._etag(path))
        if max_bytes is not None and len(fetched.data) > max_bytes:
            raise refuse_size(path, fetched.size, max_bytes, too_large)
        return self.checked(path, fetched).data

    def read_range(self, path: str, offset: int, length: int, *, inside: str | None) -> bytes:
        if length == 0:  # a check that it is there: one byte, whose response names the version
            return self.fetch(path, offset, offset + 1).data[:0]
        return self.fetch(path, offset, offset + length).data

    def fetch(self, url: str, start: int, end: int) -> Fetched:
        """Bytes ``start`` to ``end`` (exclusive) of ``url`` in one ranged GET, confined and
        checked against the object as first read, with its size and ETag where the store says them.

        Example:
            >>> import fsspec
            >>> from torchloom.io import ObjectRoot, ObjectStore
            >>> fsspec.filesystem("memory").pipe("memory://ranged/b.bin", b"abcdef")
            >>> ObjectRoot("memory://ranged", ObjectStore()).fetch("memory://ranged/b.bin", 1, 3).data
            b'bc'
        """
        url = normal_url(url)
        self.check(url)
        return self.checked(url, self.store.get(url, start, end))

    def open(self, path: str, *, inside: str | None) -> BinaryIO:
        """A :class:`~torchloom.io.ranged_file.RangedFile`: each read that misses its blocks one
        ranged GET through this root (fsspec's own file would send a HEAD, then read 50 MiB)."""
        path = normal_url(path)
        self.check(path)
        return cast(BinaryIO, RangedFile(self, path))

    def info(self, path: str) -> FileInfo:
        path = normal_url(path)
        self.check(path)
        return self.store.info(path)

    def read_many(
        self, paths: Sequence[str], *, max_bytes: int | None, too_large: str | None
    ) -> list[bytes | Exception]:
        """:meth:`read` of every path, ``max_in_flight`` at once: each object's bytes, or the
        error its read raised (an empty object is a ``DecodeError``, as :func:`read_bytes` says).

        Example:
            >>> import fsspec
            >>> fsspec.filesystem("memory").pipe("memory://set/a.bin", b"abc")
            >>> root = ObjectRoot("memory://set", ObjectStore())
            >>> [type(r).__name__ for r in root.read_many(["memory://set/a.bin", "memory://set/no"],
            ...                                            max_bytes=None, too_large=None)]
            ['bytes', 'MissingFileError']
        """
        results: list[bytes | Exception] = [b""] * len(paths)
        requests: list[tuple[str, int, int | None]] = []
        places: list[int] = []
        for place, path in enumerate(paths):
            path = normal_url(path)
            try:
                self.check(path)
            except UnsafeFileError as exc:
                results[place] = exc
                continue
            requests.append((path, 0, None if max_bytes is None else max_bytes + 1))
            places.append(place)
        fetched_all = self.store.get_many(requests, [self._etag(path) for path, _, _ in requests])
        for place, (path, _, _), fetched in zip(places, requests, fetched_all, strict=True):
            try:
                if isinstance(fetched, Exception):
                    raise fetched
                if max_bytes is not None and len(fetched.data) > max_bytes:
                    raise refuse_size(path, fetched.size, max_bytes, too_large)
                if not fetched.data:
                    raise DecodeError(path, "file is empty (0 bytes)")
                results[place] = self.checked(path, fetched).data
            except (OSError, DecodeError) as exc:
                results[place] = exc
        return results

    def checked(self, url: str, fetched: Fetched) -> Fetched:
        """``fetched`` once it is known to come from the object as first read (size, ETag)."""
        with self._seen_lock:
            before = self._seen.setdefault(url, (fetched.size, fetched.etag))
        size, etag = before
        if size is not None and fetched.size is not None and size != fetched.size:
            raise ObjectChangedError(url, f"it was {size:,} bytes when indexed, and is {fetched.size:,}")
        if etag is not None and fetched.etag is not None and etag != fetched.etag:
            raise ObjectChangedError(url, f"its ETag was {etag} when indexed, and is {fetched.etag}")
        if before == (None, None) and (fetched.size, fetched.etag) != (None, None):
            self.expect(url, fetched.size, fetched.etag)
        return fetched

    def _etag(self, url: str) -> str | None:
        """The ETag ``url`` had when first seen, if known."""
        with self._seen_lock:
            return self._seen.get(url, (None, None))[1]

    def check(self, url: str) -> None:
        """Refuse ``url`` (an :class:`~torchloom.errors.UnsafeFileError`) when it lies outside the
        root; a root made with ``confined=False`` takes any.

        Example:
            >>> from torchloom.io import ObjectRoot, ObjectStore
            >>> ObjectRoot("s3://shop/cubes", ObjectStore()).check("s3://shop/other/a.img")
            Traceback (most recent call last):
            ...
            torchloom.errors.UnsafeFileError: refusing to read 's3://shop/other/a.img': it ...
        """
        if not self.confined:
            return
        why = outside_reason(url, self.url)
        if why is not None:
            raise UnsafeFileError(
                url, f"it {why}, not inside the dataset root {self.url!r} (allow_outside_root=True trusts it)"
            )

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

import asyncio
import os
import random
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, BinaryIO, TypeVar

import fsspec
import fsspec.asyn
from tqdm.auto import tqdm

from torchloom.errors import (
    ConfigError,
    DataError,
    DecodeError,
    MissingFileError,
    ObjectChangedError,
    UnreadableFileError,
    UnsafeFileError,
    UnsupportedURLError,
)
from torchloom.io.backend import FileInfo, refuse_size
from torchloom.io.object_cache import ObjectCache
from torchloom.io.object_urls import normal_url, outside_reason, root_url, split_url
from torchloom.io.store_requests import (
    DENIED,
    MISSING,
    NOT_MODIFIED,
    PAST_END,
    TRANSIENT,
    Fetched,
    StoreStats,
    classify,
    s3_get,
)

T = TypeVar("T")

#: The fsspec packages of the common stores, for the message of a scheme with none installed.
STORE_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}


class ObjectStore:
    """How to reach an object store, and what was asked of it: fsspec filesystems made from
    ``storage_options``, one per scheme and process, with the retry rules above.

    Args:
        storage_options: what fsspec's filesystem takes (``key``, ``secret``, ``anon``,
            ``client_kwargs={"endpoint_url": ...}``), as in ``pandas.read_csv(storage_options=)``.
        max_in_flight: requests :meth:`get_many` keeps in flight at once (default 64).
        retries: further attempts of a request that failed for a reason another may fix (default 6).
        backoff: the longest first wait, in seconds, doubled each attempt (default 0.1).
        max_backoff: the longest wait (default 10 s).
        cache: an :class:`~torchloom.io.ObjectCache` that keeps whole objects on a local disk
            (default None: every read goes to the store).

    Example:
        >>> store = ObjectStore({"anon": True}, max_in_flight=16)
        >>> store.max_in_flight, store.stats.summary()
        (16, 'requests: none; retried: none; failed: none; 0 bytes')
    """

    def __init__(
        self,
        storage_options: Mapping[str, Any] | None = None,
        *,
        max_in_flight: int = 64,
        retries: int = 6,
        backoff: float = 0.1,
        max_backoff: float = 10.0,
        cache: ObjectCache | None = None,
    ) -> None:
        if storage_options is not None and not isinstance(storage_options, Mapping):
            given = type(storage_options).__name__
            raise ConfigError(f"storage_options is a dict of fsspec options, got {given}")
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be a whole number >= 1, got {max_in_flight!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be a whole number >= 0, got {retries!r}")
        if not backoff >= 0 or not max_backoff >= backoff:
            raise ConfigError(f"need 0 <= backoff <= max_backoff, got {backoff=} and {max_backoff=}")
        self.storage_options = dict(storage_options or {})
        self.max_in_flight = max_in_flight
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.cache = cache
        #: Requests, retries, failures and bytes received in this process (each process its own).
        self.stats = StoreStats()
        self._filesystems: dict[tuple[int, str], Any] = {}
        self._lock = threading.Lock()
        self._jitter = random.Random()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_filesystems"] = {}  # a filesystem's connections and event loop stay in its process
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        options = sorted(self.storage_options)
        return f"ObjectStore(storage_options keys={options}, max_in_flight={self.max_in_flight})"

    def filesystem(self, url: str) -> Any:
        """The fsspec filesystem serving ``url``'s scheme in this process (made on first use)."""
        scheme = split_url(url)[0]
        key = (os.getpid(), scheme)  # a filesystem made before a fork is not used after it
        with self._lock:
            fs = self._filesystems.get(key)
            if fs is None:
                fs = self._filesystems[key] = self._make_filesystem(scheme)
        return fs

    def _make_filesystem(self, scheme: str) -> Any:
        options: dict[str, Any] = {"skip_instance_cache": True, **self.storage_options}
        if scheme in ("s3", "s3a"):
            # Every attempt is this store's to make, back off and count: botocore's own are off.
            config = dict(options.get("config_kwargs") or {})
            config.setdefault("retries", {"total_max_attempts": 1})
            options["config_kwargs"] = config
        try:
            fs = fsspec.filesystem(scheme, **options)
        except (ImportError, ValueError) as exc:
            package = STORE_PACKAGES.get(scheme)
            hint = f"pip install {package}" if package else "install the fsspec filesystem of that scheme"
            raise UnsupportedURLError(f"cannot reach {scheme}:// URLs: {exc}; {hint}") from None
        if scheme in ("s3", "s3a"):
            fs.retries = 1  # s3fs's wrapper: one attempt, the rest are ours (an instance of our own)
        return fs

    def get(self, url: str, start: int = 0, end: int | None = None, *, etag: str | None = None) -> Fetched:
        """Bytes ``start`` to ``end`` (exclusive; None: to the end) of the object at ``url``, in
        one GET (more only to retry); past the end, empty.

        Example:
            >>> import fsspec
            >>> fsspec.filesystem("memory").pipe("memory://doc/a.bin", b"abcdef")
            >>> ObjectStore().get("memory://doc/a.bin", 2, 4).data
            b'cd'
        """
        fs = self.filesystem(url)
        return self._run(fs, self._get(fs, url, start, end, etag))

    def get_many(
        self, requests: Sequence[tuple[str, int, int | None]], etags: Sequence[str | None] | None = None
    ) -> list[Fetched | Exception]:
        """:meth:`get` of every ``(url, start, end)``, ``max_in_flight`` at a time: each result in
        its request's place, a request's error in place of its bytes (a bug still raises).

        Example:
            >>> import fsspec
            >>> fsspec.filesystem("memory").pipe("memory://doc/b.bin", b"abc")
            >>> url = "memory://doc/b.bin"
            >>> [r.data for r in ObjectStore().get_many([(url, 0, 1), (url, 1, None)])]
            [b'a', b'bc']
        """
        if not requests:
            return []
        fs = self.filesystem(requests[0][0])  # the loop; each request is served by its own scheme's

        known = list(etags) if etags is not None else [None] * len(requests)

        async def one(
            url: str, start: int, end: int | None, etag: str | None, gate: asyncio.Semaphore
        ) -> Fetched | Exception:
            async with gate:
                try:
                    return await self._get(self.filesystem(url), url, start, end, etag)
                except (OSError, DataError, UnsupportedURLError) as exc:
                    return exc

        async def every() -> list[Fetched | Exception]:
            gate = asyncio.Semaphore(self.max_in_flight)  # made on the loop that awaits it
            pairs = zip(requests, known, strict=True)
            work = (one(url, start, end, etag, gate) for (url, start, end), etag in pairs)
            return list(await asyncio.gather(*work))

        return self._run(fs, every())

    def info(self, url: str) -> FileInfo:
        """The object's size (one HEAD); a missing object is a ``MissingFileError``."""
        fs = self.filesystem(url)

        async def head() -> FileInfo:
            details = await self._call(fs, "head", url, fs.info, url)
            if details.get("type") == "directory":
                raise UnsafeFileError(url, "it is a prefix (a folder of objects), not an object")
            modified = details.get("LastModified") or details.get("mtime") or details.get("created")
            stamp = getattr(modified, "timestamp", None)
            return FileInfo(int(details.get("size") or 0), int(stamp() * 1e9) if callable(stamp) else 0)

        return self._run(fs, head())

    def open(self, url: str) -> BinaryIO:
        """A readable, seekable file object of the object (reads become ranged GETs), for
        libraries that read through one (h5py, PyAV, ``numpy.load``)."""
        fs = self.filesystem(url)

        async def opened() -> BinaryIO:
            return await self._call(fs, "open", url, fs.open, url, "rb", cache_type="readahead")

        return self._run(fs, opened())

    def list_below(self, prefix: str, *, progress: bool = True) -> list[dict[str, Any]]:
        """Every object below the URL ``prefix``, sorted, each a dict of ``name`` (its URL),
        ``size`` and ``etag`` (None where the store gives none): the first level in one listing,
        then every prefix in it listed at the same time, with a progress bar; retried as reads are.

        Example:
            >>> import fsspec
            >>> fsspec.filesystem("memory").pipe("memory://lst/a/1.bin", b"12")
            >>> [(o["name"], o["size"]) for o in ObjectStore().list_below("memory://lst", progress=False)]
            [('memory://lst/a/1.bin', 2)]
        """
        fs = self.filesystem(prefix)
        scheme = split_url(prefix)[0]
        fs.invalidate_cache(prefix)  # a listing made before (by this store) may be stale

        async def listing() -> list[dict[str, Any]]:
            top = await self._call(fs, "list", prefix, fs.ls, prefix, detail=True)
            below = [item["name"] for item in top if item.get("type") == "directory"]
            found = [item for item in top if item.get("type") != "directory"]
            gate = asyncio.Semaphore(min(self.max_in_flight, 16))
            with tqdm(desc=f"listing {prefix}", unit=" objects", disable=not progress, leave=False) as bar:
                bar.update(len(found))

                async def one(name: str) -> list[dict[str, Any]]:
                    async with gate:
                        items = await self._call(fs, "list", name, fs.find, name, detail=True)
                    bar.update(len(items))
                    return list(items.values())

                for items in await asyncio.gather(*(one(name) for name in below)):
                    found += items
            # A key ending in '/' is a folder marker (the S3 console's "Create folder"), not data.
            objects = [
                {"name": f"{scheme}://{str(item['name']).lstrip('/')}", "size": item.get("size"),
                 "etag": item.get("ETag")}
                for item in found
                if item.get("type") != "directory" and not str(item["name"]).endswith("/")
            ]
            return sorted(objects, key=lambda item: item["name"])

        return self._run(fs, listing())

    # -- how each request is made ------------------------------------------------------------

    async def _get(
        self, fs: Any, url: str, start: int, end: int | None, etag: str | None = None
    ) -> Fetched:
        if self.cache is not None and start == 0:
            return await self._get_cached(fs, url, end, etag, self.cache)
        return await self._get_fresh(fs, url, start, end)

    async def _get_cached(
        self, fs: Any, url: str, end: int | None, etag: str | None, cache: ObjectCache
    ) -> Fetched:
        """A whole object from ``cache`` when it holds the version ``etag`` (no request), or the
        version the store confirms with a conditional GET (a ``304``), else from the store (kept)."""
        data = await asyncio.to_thread(cache.get, url, etag=etag)
        if data is not None:
            self.stats.count("cache hit")
            return Fetched(data, len(data), etag)
        kept = None if etag is not None or not _speaks_s3(fs) else await asyncio.to_thread(cache.newest, url)
        fetched = await self._get_fresh(fs, url, 0, end, unless=kept[0] if kept else None)
        if fetched.not_modified and kept is not None:
            return Fetched(kept[1], len(kept[1]), kept[0])
        if fetched.etag is not None and (end is None or len(fetched.data) < end):
            await asyncio.to_thread(cache.put, url, fetched.data, etag=fetched.etag)
        return fetched

    async def _get_fresh(
        self, fs: Any, url: str, start: int, end: int | None, unless: str | None = None
    ) -> Fetched:
        kind = "get" if start == 0 and end is None else "ranged get"
        if unless is not None:
            kind = "conditional get"
        if _speaks_s3(fs):
            fetched: Fetched = await self._attempts(url, kind, lambda: s3_get(fs, url, start, end, unless))
        else:
            data = await self._call(fs, kind, url, fs.cat_file, url, start=start, end=end)
            fetched = Fetched(data)
        self.stats.add_bytes(len(fetched.data))
        return fetched

    async def _call(
        self, fs: Any, kind: str, url: str, call: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T:
        """A synchronous fsspec call on a thread of the loop, under the retry rules."""
        return await self._attempts(url, kind, lambda: asyncio.to_thread(call, *args, **kwargs))

    async def _attempts(self, url: str, kind: str, request: Callable[[], Awaitable[T]]) -> T:
        for attempt in range(self.retries + 1):
            self.stats.count(kind)
            try:
                return await request()
            except Exception as exc:
                category, why = classify(exc)
                if category == PAST_END:
                    return Fetched(b"")  # type: ignore[return-value]  # a range past the end: nothing
                if category == NOT_MODIFIED:
                    return Fetched(b"", not_modified=True)  # type: ignore[return-value]
                if category == TRANSIENT and attempt < self.retries:
                    self.stats.count_retry(why)
                    longest = min(self.max_backoff, self.backoff * 2**attempt)
                    await asyncio.sleep(self._jitter.uniform(0, longest))  # full jitter: no herd
                    continue
                self.stats.count_failure(why)
                raise self._error(url, category, why, exc, attempt + 1) from exc
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def _error(self, url: str, category: str, why: str, exc: Exception, attempts: int) -> Exception:
        if category == MISSING:
            return MissingFileError(
                f"{url!r} is not in the store (no such object): check the URL, or whether it was deleted"
            )
        if category == DENIED:
            return UnreadableFileError(url, f"access denied ({why}): check storage_options' credentials")
        if category == TRANSIENT:
            return UnreadableFileError(
                url, f"the store failed {attempts} times ({why}, last: {exc}); it may be overloaded or down"
            )
        # Whatever else the store's library raised (botocore's ParamValidationError for a key it
        # cannot send, say) is this object's failure, typed and named, not the whole batch's.
        return UnreadableFileError(url, f"{type(exc).__name__}: {exc}")

    def _run(self, fs: Any, work: Awaitable[T]) -> T:
        loop = getattr(fs, "loop", None) if getattr(fs, "async_impl", False) else None
        return fsspec.asyn.sync(loop or fsspec.asyn.get_loop(), _awaited, work)


async def _awaited(work: Awaitable[T]) -> T:
    return await work


def _speaks_s3(fs: Any) -> bool:
    """Whether ``fs`` is s3fs, whose ``get_object`` calls give a response's ETag and size."""
    return hasattr(fs, "_call_s3") and hasattr(fs, "split_path")


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
        self._check(path)
        fetched = self.store.get(path, 0, None if max_bytes is None else max_bytes + 1, etag=self._etag(path))
        if max_bytes is not None and len(fetched.data) > max_bytes:
            raise refuse_size(path, fetched.size, max_bytes, too_large)
        return self.checked(path, fetched).data

    def read_range(self, path: str, offset: int, length: int, *, inside: str | None) -> bytes:
        path = normal_url(path)
        self._check(path)
        if length == 0:  # a check that it is there: one byte, whose response names the version
            return self.checked(path, self.store.get(path, offset, offset + 1)).data[:0]
        return self.checked(path, self.store.get(path, offset, offset + length)).data

    def open(self, path: str, *, inside: str | None) -> BinaryIO:
        path = normal_url(path)
        self._check(path)
        return self.store.open(path)

    def info(self, path: str) -> FileInfo:
        path = normal_url(path)
        self._check(path)
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
                self._check(path)
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

    def _check(self, url: str) -> None:
        if not self.confined:
            return
        why = outside_reason(url, self.url)
        if why is not None:
            raise UnsafeFileError(
                url, f"it {why}, not inside the dataset root {self.url!r} (allow_outside_root=True trusts it)"
            )

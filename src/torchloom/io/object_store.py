"""How an object store is reached and asked: :class:`ObjectStore`, the requests, retries and stats.

:mod:`torchloom.io.objects` says what the object-store backend guarantees; this module makes its
requests.

Example:
    >>> from torchloom.io import ObjectStore
    >>> ObjectStore(max_in_flight=8).max_in_flight
    8
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import fsspec
import fsspec.asyn
from tqdm.auto import tqdm

from torchloom.errors import (
    ConfigError,
    DataError,
    MissingFileError,
    UnreadableFileError,
    UnsafeFileError,
    UnsupportedURLError,
)
from torchloom.io.backend import FileInfo
from torchloom.io.object_cache import ObjectCache
from torchloom.io.object_urls import split_url
from torchloom.io.presigned_gets import PresignedGets, close_on, presigns
from torchloom.io.store_requests import (
    DENIED,
    MISSING,
    NOT_MODIFIED,
    PAST_END,
    TRANSIENT,
    Fetched,
    StoreStats,
    classify,
    past_end_size,
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
        presigned_gets: send an S3 GET as a presigned URL over aiohttp (default True: a quarter
            of the CPU of botocore's ``get_object``, see :mod:`torchloom.io.presigned_gets`);
            False sends every GET through ``get_object``.

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
        presigned_gets: bool = True,
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
        for name in ("key", "secret", "token"):
            value = self.storage_options.get(name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(
                    f"storage_options[{name!r}] is a credential, text; got {type(value).__name__} "
                    "(on the command line, quote a secret of digits: --storage-option 'secret=\"0123\"')"
                )
        self.max_in_flight = max_in_flight
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.cache = cache
        self.presigned_gets = presigned_gets
        self._presigned: dict[tuple[int, int], PresignedGets] = {}
        #: Requests, retries, failures and bytes received in this process (each process its own).
        self.stats = StoreStats()
        self._filesystems: dict[tuple[int, str], Any] = {}
        self._lock = threading.Lock()
        self._jitter = random.Random()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_filesystems"] = {}  # a filesystem's connections and event loop stay in its process
        state["_presigned"] = {}
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
            return Fetched(data[:end], len(data), etag)  # only the bytes asked for
        kept = None if etag is not None or not _speaks_s3(fs) else await asyncio.to_thread(cache.newest, url)
        fetched = await self._get_fresh(fs, url, 0, end, unless=kept[0] if kept else None)
        if fetched.not_modified and kept is not None:
            return Fetched(kept[1][:end], len(kept[1]), kept[0])
        if fetched.etag is not None and (end is None or len(fetched.data) < end):
            try:
                await asyncio.to_thread(cache.put, url, fetched.data, etag=fetched.etag)
            except OSError:  # a full or vanished cache disk is the cache's failure, not the read's
                self.stats.count_failure("cache write")
        return fetched

    async def _get_fresh(
        self, fs: Any, url: str, start: int, end: int | None, unless: str | None = None
    ) -> Fetched:
        kind = "get" if start == 0 and end is None else "ranged get"
        if unless is not None:
            kind = "conditional get"
        if _speaks_s3(fs):
            gets = self._presigned_gets_of(fs)
            if gets is not None:
                fetched: Fetched = await self._attempts(url, kind, lambda: gets.get(url, start, end, unless))
            else:
                fetched = await self._attempts(url, kind, lambda: s3_get(fs, url, start, end, unless))
        else:
            data = await self._call(fs, kind, url, fs.cat_file, url, start=start, end=end)
            fetched = Fetched(data)
        self.stats.add_bytes(len(fetched.data))
        return fetched

    def _presigned_gets_of(self, fs: Any) -> PresignedGets | None:
        """This process's presigned GETs of ``fs``, or None where they do not apply."""
        if not self.presigned_gets or not presigns(fs):
            return None
        key = (os.getpid(), id(fs))
        with self._lock:
            gets = self._presigned.get(key)
            if gets is None:
                config = dict(self.storage_options.get("config_kwargs") or {})
                gets = self._presigned[key] = PresignedGets(
                    fs,
                    connections=self.max_in_flight,
                    connect_timeout=float(config.get("connect_timeout", getattr(fs, "connect_timeout", 5))),
                    read_timeout=float(config.get("read_timeout", getattr(fs, "read_timeout", 15))),
                )
                weakref.finalize(self, close_on, fs.loop, gets)
        return gets

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
                if category == PAST_END:  # a range past the end: nothing, and the size if named
                    return Fetched(b"", size=past_end_size(exc))  # type: ignore[return-value]
                if category == NOT_MODIFIED:
                    return Fetched(b"", not_modified=True)  # type: ignore[return-value]
                if category == TRANSIENT and attempt < self.retries:
                    self.stats.count_retry(why)
                    longest = min(self.max_backoff, self.backoff * 2**attempt)
                    await asyncio.sleep(self._jitter.uniform(0, longest))  # full jitter: no herd
                    continue
                self.stats.count_failure(why)
                error = self._error(url, category, why, exc, attempt + 1)
                if error is exc:
                    raise  # a bug in this code, not the store's failure: as it is
                raise error from exc
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
        # Whatever else the store's libraries raised (botocore's ParamValidationError for a key it
        # cannot send, say) is this object's failure, typed and named, not the whole batch's; an
        # error of any other code is a bug and surfaces as it is.
        if isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in _STORE_LIBRARIES:
            return UnreadableFileError(url, f"{type(exc).__name__}: {exc}")
        return exc

    def _run(self, fs: Any, work: Awaitable[T]) -> T:
        loop = getattr(fs, "loop", None) if getattr(fs, "async_impl", False) else None
        return fsspec.asyn.sync(loop or fsspec.asyn.get_loop(), _awaited, work)


async def _awaited(work: Awaitable[T]) -> T:
    return await work


# The packages an fsspec filesystem's own errors come from.
_STORE_LIBRARIES = frozenset(
    {"botocore", "aiobotocore", "boto3", "s3fs", "aiohttp", "yarl", "fsspec", "gcsfs", "adlfs", "azure"}
)


def _speaks_s3(fs: Any) -> bool:
    """Whether ``fs`` is s3fs, whose ``get_object`` calls give a response's ETag and size."""
    return hasattr(fs, "_call_s3") and hasattr(fs, "split_path")

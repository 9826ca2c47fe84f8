"""A bounded local cache of objects from a store: each object's bytes kept once on a local disk.

A second epoch over a bucket need not fetch every object again. :class:`ObjectCache` keeps whole
objects under ``cache_dir``, each in a file named by its URL's hash and its ETag's hash, so that
an entry can only be taken for the version of the object it holds:

- **Checked against the ETag.** An entry is used without a request when the dataset knows the
  object's ETag (from a listing, or from an earlier read in this process) and it matches; when it
  does not know it, the store is asked with a conditional GET (``If-None-Match``): a ``304`` costs
  one round trip and no bytes. An object rewritten in the store is fetched again, never served old.
- **Atomic, shared by processes.** An entry is written to a temporary file in the cache's own
  folder and renamed into place, so a reader sees a whole entry or none; several processes and
  ranks on one node may share one ``cache_dir`` (an entry two of them write at once is written
  twice, identically); a process that dies while writing leaves only a temporary file, swept later.
- **Bounded.** Past ``max_bytes``, the entries used longest ago are deleted (each hit touches its
  entry's modification time) until 90 % of ``max_bytes`` is left; the cache's size is measured by
  listing its folder, at most once per ``max_bytes / 16`` written by this process.

Example:
    >>> import tempfile
    >>> from torchloom.io import ObjectCache
    >>> cache = ObjectCache(tempfile.mkdtemp(), max_bytes=1 << 20)
    >>> cache.put("s3://b/cat/1.jpg", b"\\xff\\xd8 bytes", etag='"e1"')
    >>> cache.get("s3://b/cat/1.jpg", etag='"e1"'), cache.get("s3://b/cat/1.jpg", etag='"e2"')
    (b'\\xff\\xd8 bytes', None)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import uuid

from torchloom.errors import ConfigError

_ENTRIES = "objects"
_TEMPORARY = "incoming"
# A temporary file older than this was left by a process that died while writing it.
_STALE_TEMPORARY_S = 3600.0
_KEEP_AFTER_EVICTION = 0.9


class ObjectCache:
    """Whole objects of a store on a local disk, at most ``max_bytes`` of them.

    Args:
        cache_dir: a local folder (made if missing); it may be shared by the processes of a node.
        max_bytes: the most the entries may hold together, in bytes.

    Example:
        >>> import tempfile
        >>> cache = ObjectCache(tempfile.mkdtemp(), max_bytes=10 << 20)
        >>> cache.get("s3://bucket/none.jpg", etag=None) is None
        True
    """

    def __init__(self, cache_dir: str | os.PathLike[str], *, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ConfigError(f"max_bytes must be a whole number of bytes >= 1, got {max_bytes!r}")
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.max_bytes = max_bytes
        self._entries = os.path.join(self.cache_dir, _ENTRIES)
        self._incoming = os.path.join(self.cache_dir, _TEMPORARY)
        try:
            os.makedirs(self._entries, exist_ok=True)
            os.makedirs(self._incoming, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot use cache_dir={self.cache_dir!r} for objects: {exc}") from None
        self._written = 0  # bytes this process wrote since it last measured the cache
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        return {"cache_dir": self.cache_dir, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["cache_dir"], max_bytes=state["max_bytes"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"ObjectCache({self.cache_dir!r}, max_bytes={self.max_bytes:,})"

    def get(self, url: str, *, etag: str | None) -> bytes | None:
        """The bytes kept for ``url`` at ``etag``, or None; with ``etag=None``, None (an entry
        whose version is not known is never served: see :meth:`newest`)."""
        if etag is None:
            return None
        return self._read_entry(url, etag)

    def newest(self, url: str) -> tuple[str, bytes] | None:
        """The ETag and bytes of the entry kept for ``url`` last (to ask the store whether it is
        still current), or None.

        Example:
            >>> import tempfile
            >>> cache = ObjectCache(tempfile.mkdtemp(), max_bytes=1 << 20)
            >>> cache.put("s3://b/a.bin", b"abc", etag='"v1"')
            >>> cache.newest("s3://b/a.bin")
            ('"v1"', b'abc')
        """
        folder, stem = self._place(url)
        try:
            with open(os.path.join(folder, stem + ".etag"), encoding="utf-8") as handle:
                etag = handle.read()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        data = self._read_entry(url, etag)
        return None if data is None else (etag, data)

    def put(self, url: str, data: bytes, *, etag: str | None) -> None:
        """Keep ``data`` as ``url`` at ``etag`` (nothing is kept without an ETag: it could not be
        checked), in place of any other version; past ``max_bytes``, the entries used longest ago go."""
        if etag is None or len(data) > self.max_bytes:
            return
        folder, stem = self._place(url)
        os.makedirs(folder, exist_ok=True)
        pointer = os.path.join(folder, stem + ".etag")
        try:
            with open(pointer, encoding="utf-8") as handle:
                before: str | None = handle.read()
        except (FileNotFoundError, UnicodeDecodeError):
            before = None
        self._write_atomically(os.path.join(folder, f"{stem}-{_digest(etag)}"), data)
        self._write_atomically(pointer, etag.encode("utf-8"))
        if before is not None and before != etag:
            _unlink(os.path.join(folder, f"{stem}-{_digest(before)}"))  # the old version
        with self._lock:
            self._written += len(data)
            due = self._written >= max(1, self.max_bytes // 16)
            if due:
                self._written = 0
        if due:
            self.evict()

    def size(self) -> int:
        """The bytes the entries hold together (a listing of the cache's folder).

        Example:
            >>> import tempfile
            >>> cache = ObjectCache(tempfile.mkdtemp(), max_bytes=1 << 20)
            >>> cache.put("s3://b/a.bin", b"abcd", etag='"v1"'); cache.size()
            4
        """
        return sum(size for _, _, size in self._listing())

    def evict(self) -> int:
        """Delete the entries used longest ago until at most 90 % of ``max_bytes`` is held, when
        more than ``max_bytes`` is; return the bytes freed.

        Example:
            >>> import tempfile
            >>> cache = ObjectCache(tempfile.mkdtemp(), max_bytes=10)
            >>> for n in range(4):
            ...     cache.put(f"s3://b/{n}.bin", b"1234", etag='"e"')
            >>> cache.size() <= 10
            True
        """
        entries = self._listing()
        total = sum(size for _, _, size in entries)
        if total <= self.max_bytes:
            return 0
        freed = 0
        for _, path, size in sorted(entries):
            if total - freed <= self.max_bytes * _KEEP_AFTER_EVICTION:
                break
            _unlink(path)  # its .etag pointer stays: it names a version no longer kept, a miss
            freed += size
        self._sweep_incoming()
        return freed

    def _read_entry(self, url: str, etag: str) -> bytes | None:
        folder, stem = self._place(url)
        path = os.path.join(folder, f"{stem}-{_digest(etag)}")
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None  # never kept, or evicted (by any process)
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be evicted
        return data

    def _place(self, url: str) -> tuple[str, str]:
        """The folder of ``url``'s entries and the stem of their names."""
        digest = _digest(url)
        return os.path.join(self._entries, digest[:2]), digest

    def _write_atomically(self, final: str, data: bytes) -> None:
        temporary = os.path.join(self._incoming, uuid.uuid4().hex)
        if not os.path.isdir(self._incoming):  # removed by a cleaner of temporary files: again
            os.makedirs(self._incoming, exist_ok=True)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, final)

    def _listing(self) -> list[tuple[float, str, int]]:
        """``(last used, path, size)`` of every entry."""
        entries: list[tuple[float, str, int]] = []
        try:
            folders = os.listdir(self._entries)
        except FileNotFoundError:
            return entries
        for folder in folders:
            try:
                with os.scandir(os.path.join(self._entries, folder)) as found:
                    for entry in found:
                        if entry.name.endswith(".etag"):
                            continue
                        try:
                            status = entry.stat()
                        except FileNotFoundError:
                            continue
                        entries.append((status.st_mtime, entry.path, status.st_size))
            except (FileNotFoundError, NotADirectoryError):
                continue
        return entries

    def _sweep_incoming(self) -> None:
        """Delete temporary files a process that died while writing left behind."""
        now = time.time()
        try:
            with os.scandir(self._incoming) as found:
                for entry in found:
                    try:
                        if now - entry.stat().st_mtime > _STALE_TEMPORARY_S:
                            os.unlink(entry.path)
                    except FileNotFoundError:
                        continue
        except FileNotFoundError:
            return


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # another process deleted it first
        os.unlink(path)

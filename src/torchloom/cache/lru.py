"""LRUCache: bounded memoisation within one process, with hit and miss statistics.

Each process has its own: every DataLoader worker holds a separate copy, so N workers use up to
N × ``max_bytes`` (per-worker dict caches multiply memory by the number of workers). To
share decoded images across workers, use :class:`torchloom.cache.DecodedCache`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from torchloom.errors import ConfigError

T = TypeVar("T")

#: The size counted for a value that is neither an array, a tensor, bytes, text nor a container.
SMALL_OBJECT_BYTES = 64


def size_of(value: Any) -> int:
    """Bytes ``value`` is counted as: arrays and tensors by ``nbytes``, bytes and text by length,
    dicts, lists and tuples by their contents; anything else ``SMALL_OBJECT_BYTES``.

    Example:
        >>> import numpy as np
        >>> size_of({"image": np.zeros((2, 4), np.uint8), "path": "a.jpg"})
        22
    """
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return len(value)
    if isinstance(value, Mapping):
        return sum(size_of(key) + size_of(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return sum(size_of(item) for item in value)
    return SMALL_OBJECT_BYTES


@dataclass(frozen=True)
class CacheStats:
    """A snapshot of an :class:`LRUCache`'s counters.

    Example:
        >>> from torchloom.cache import LRUCache
        >>> cache = LRUCache(max_bytes=1 << 20)
        >>> for key in ("a", "b", "a"):
        ...     _ = cache.get(key, lambda: b"0123")
        >>> stats = cache.stats
        >>> stats.hits, stats.misses, stats.entries, stats.bytes
        (1, 2, 2, 8)
    """

    hits: int
    misses: int
    evictions: int
    #: Values computed but not stored, being larger than ``max_bytes`` on their own.
    oversized: int
    bytes: int
    entries: int

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before the first lookup)."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


class LRUCache:
    """Memoise values up to ``max_bytes``, evicting the least recently used first.

    :meth:`get` returns the stored value of a key or computes, stores and returns it. A value larger
    than ``max_bytes`` is returned but not stored (counted in ``stats.oversized``). Thread-safe;
    ``compute`` runs outside the lock, so two threads missing the same key may both compute it.
    The cache is per process: each DataLoader worker has its own, pickled empty into it (share
    decoded images across workers with :class:`torchloom.cache.DecodedCache`).

    Args:
        max_bytes: the most bytes of values kept, as :func:`size_of` counts them.
        sizer: how a value's size is counted (default :func:`size_of`).

    Example:
        >>> cache = LRUCache(max_bytes=10)
        >>> cache.get("a", lambda: b"12345"), cache.get("b", lambda: b"67890")
        (b'12345', b'67890')
        >>> cache.get("a", lambda: b"xxxxx")  # a hit: "a" becomes the most recently used
        b'12345'
        >>> _ = cache.get("c", lambda: b"!")  # evicts "b", the least recently used
        >>> "b" in cache, cache.stats.hits, cache.stats.evictions
        (False, 1, 1)
    """

    def __init__(self, max_bytes: int, *, sizer: Callable[[Any], int] = size_of) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ConfigError(f"max_bytes must be an int >= 0, got {max_bytes=}")
        self.max_bytes = max_bytes
        self._sizer = sizer
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self._hits = self._misses = self._evictions = self._oversized = 0

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The value stored for ``key``, or ``compute()``, stored if it fits."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                stored: T = entry[0]
                return stored
            self._misses += 1
        value = compute()
        size = self._sizer(value)
        with self._lock:
            if size > self.max_bytes:
                self._oversized += 1
                return value
            previous = self._entries.pop(key, None)
            if previous is not None:  # another thread stored it meanwhile
                self._bytes -= previous[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted
                self._evictions += 1
        return value

    @property
    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self._hits, self._misses, self._evictions, self._oversized, self._bytes, len(self._entries)
            )

    def clear(self) -> None:
        """Drop every value (the counters are kept)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled empty, counters at zero: a DataLoader worker starts its own cache."""
        return {"max_bytes": self.max_bytes, "sizer": self._sizer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["max_bytes"], sizer=state["sizer"])  # type: ignore[misc]

    def __repr__(self) -> str:
        stats = self.stats
        return (
            f"LRUCache(max_bytes={self.max_bytes}, {stats.entries} entries, {stats.bytes} bytes, "
            f"hit rate {stats.hit_rate:.0%})"
        )

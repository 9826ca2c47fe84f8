"""Caches: decode once into a memory-mapped file every worker shares; memoise cheap work per process.

Example:
    >>> from torchloom.cache import LRUCache
    >>> cache = LRUCache(max_bytes=1 << 20)
    >>> cache.get("answer", lambda: 42), cache.stats.misses
    (42, 1)
"""

from torchloom.cache.decoded import CacheReport, DecodedCache
from torchloom.cache.lru import CacheStats, LRUCache
from torchloom.errors import (
    CacheError,
    CacheSpaceError,
    CorruptCacheError,
    NotACacheError,
    StaleCacheError,
)

__all__ = [
    "CacheError",
    "CacheReport",
    "CacheSpaceError",
    "CacheStats",
    "CorruptCacheError",
    "DecodedCache",
    "LRUCache",
    "NotACacheError",
    "StaleCacheError",
]

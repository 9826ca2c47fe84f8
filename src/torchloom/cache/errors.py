"""Errors of the decoded cache: each names the cache folder, the file or setting at fault, and the fix.

Example:
    >>> from torchloom.errors import TorchloomError
    >>> issubclass(StaleCacheError, CacheError) and issubclass(CacheError, TorchloomError)
    True
"""

from __future__ import annotations

from torchloom.errors import TorchloomError


class CacheError(TorchloomError):
    """A decoded cache cannot be used as it is (also raised for a cache of a newer format)."""


class StaleCacheError(CacheError):
    """The inputs (files' sizes and times, the file list) or the settings changed since the cache
    was built, and ``rebuild=False`` forbids rebuilding it; says what changed."""


class CorruptCacheError(CacheError):
    """A cache file is missing, truncated or altered (its checksum differs); names the file."""


class NotACacheError(CacheError):
    """The cache path holds something that is not a torchloom cache; it is never overwritten."""


class CacheSpaceError(CacheError):
    """``location="memory"`` asked for more shared memory than is free; says both sizes."""

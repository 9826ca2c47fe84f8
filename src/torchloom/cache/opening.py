"""Deciding whether the folder at a cache path can be read as it is, and mapping it again later.

:func:`inspect_cache` checks, cheapest first: that the folder is a torchloom cache (else
:class:`NotACacheError`: it is never rebuilt over), its metadata's checksum, the settings, the
inputs' checksum, every input file's size and mtime, then the image files (sizes and sampled
blocks, or every byte with ``full=True``). It returns the opened cache, or the first problem found.

Example:
    >>> import tempfile
    >>> from torchloom.cache.fingerprint import InputStats
    >>> from torchloom.datasets.index import StringColumn
    >>> empty = InputStats.of(StringColumn.from_strings([]))
    >>> inspect_cache(tempfile.mkdtemp(), {}, empty, root=None, full=False).kind
    'missing'
"""

from __future__ import annotations

import os
import zipfile
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from torchloom.cache.atomic import cache_lock
from torchloom.cache.fingerprint import InputStats, settings_changes
from torchloom.cache.integrity import file_problem
from torchloom.cache.storage import INPUTS_FILE, ImageStore, read_meta
from torchloom.errors import CacheError, CorruptCacheError, NotACacheError, StaleCacheError


@dataclass(frozen=True)
class CacheProblem:
    """Why the folder at a cache path cannot be used as it is: ``missing``, ``stale`` or ``corrupt``."""

    kind: str
    message: str

    def error(self, path: str) -> CacheError:
        """The error to raise when rebuilding is not allowed."""
        kind = StaleCacheError if self.kind == "stale" else CorruptCacheError
        return kind(f"{self.message}; rebuild it with rebuild=True (the default), or delete {path!r}")


def inspect_cache(
    path: str, settings: dict[str, Any], inputs: InputStats, *, root: str | None, full: bool
) -> CacheProblem | tuple[dict[str, Any], ImageStore]:
    """The cache at ``path`` checked against ``settings`` and ``inputs``: ``(meta, store)`` when
    valid, else the first problem (input paths in messages are shown relative to ``root``)."""
    if not os.path.lexists(path) or (os.path.isdir(path) and not os.listdir(path)):
        return CacheProblem("missing", f"no cache at {path!r}")
    if not os.path.isdir(path):
        raise NotACacheError(f"{path!r} is a file, not a torchloom cache folder; pass another cache path")
    try:
        meta = read_meta(path)
    except CorruptCacheError as exc:
        return CacheProblem("corrupt", str(exc))
    changed = settings_changes(meta.get("settings", {}), settings)
    if changed is not None:
        return CacheProblem("stale", f"cache {path!r}: {changed}")
    why = file_problem(os.path.join(path, INPUTS_FILE), meta["files"][INPUTS_FILE], full=True)
    if why is not None:
        return CacheProblem("corrupt", f"cache {path!r}: {INPUTS_FILE} is {why}")
    try:
        built = InputStats.load(os.path.join(path, INPUTS_FILE))
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
        return CacheProblem("corrupt", f"cache {path!r}: {INPUTS_FILE} is unreadable ({exc})")
    changed = inputs.changes_since(built, root)
    if changed is not None:
        return CacheProblem("stale", f"cache {path!r}: {changed}")
    for name, entry in meta["files"].items():
        why = file_problem(os.path.join(path, name), entry, full=full)
        if why is not None:
            return CacheProblem("corrupt", f"cache {path!r}: {name} is {why}")
    try:
        return meta, ImageStore.open(path, meta)
    except CorruptCacheError as exc:
        return CacheProblem("corrupt", str(exc))


def map_again(path: str, folder: str, build_id: str, image_files: list[str]) -> ImageStore:
    """Map the image files in ``folder`` (``path`` itself, or its shared-memory copy) again, as a
    DataLoader worker does after unpickling, checking they are still the cache ``build_id``."""
    with cache_lock(path, exclusive=False) if folder == path else nullcontext():
        if not os.path.isdir(folder):
            raise CacheError(
                f"the files of cache {path!r} are gone from {folder!r}; with location='memory' the "
                "process that opened the cache removes its copy when it closes the DecodedCache or "
                "exits: keep it open while loaders read it"
            )
        meta = read_meta(folder)
        # A shared-memory copy is named by its content (another build of the same content may have
        # made it): only the folder at the cache's path can have been rebuilt since.
        if folder == path and meta["build_id"] != build_id:
            raise StaleCacheError(
                f"cache {path!r} was rebuilt since this DecodedCache opened it; open it again"
            )
        for name in image_files:
            why = file_problem(os.path.join(folder, name), meta["files"][name], full=False)
            if why is not None:
                raise CorruptCacheError(f"cache {folder!r}: {name} is {why}")
        return ImageStore.open(folder, meta)

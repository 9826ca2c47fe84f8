"""Checksums that tell a cache file intact from a truncated or altered one.

At build time every file gets its exact size, a full CRC-32 and the CRC-32s of a few fixed-size
blocks spread over it. Opening a cache checks sizes and those blocks (a few MiB read, whatever the
cache's size); :meth:`DecodedCache.verify` reads every byte. Files of up to
``CHECK_BLOCKS * CHECK_BLOCK_BYTES`` are checked whole in both cases. CRC-32 finds accidents
(a truncated copy, a flipped bit), not a deliberate forgery.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "data.bin")
    >>> _ = open(path, "wb").write(bytes(1000))
    >>> entry = checksums(path)
    >>> file_problem(path, entry, full=False) is None
    True
    >>> _ = open(path, "r+b").write(b"x")
    >>> file_problem(path, entry, full=False)
    'altered (checksum of bytes 0..1000 differs)'
"""

from __future__ import annotations

import os
import zlib
from typing import Any

#: Bytes read at a time when checksumming a whole file.
CHUNK_BYTES = 1 << 20
#: Blocks checked when a cache is opened, and their size.
CHECK_BLOCKS = 16
CHECK_BLOCK_BYTES = 64 << 10


def crc32_of(path: str, start: int = 0, length: int | None = None) -> int:
    """The CRC-32 of ``length`` bytes of ``path`` from ``start`` (to the end when ``None``)."""
    crc = 0
    with open(path, "rb") as handle:
        handle.seek(start)
        remaining = length
        while remaining is None or remaining > 0:
            chunk = handle.read(CHUNK_BYTES if remaining is None else min(CHUNK_BYTES, remaining))
            if not chunk:
                break
            crc = zlib.crc32(chunk, crc)
            if remaining is not None:
                remaining -= len(chunk)
    return crc


def block_ranges(size: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of the blocks checked on open: the whole file when it is small."""
    if size <= CHECK_BLOCKS * CHECK_BLOCK_BYTES:
        return [(0, size)]
    last = size - CHECK_BLOCK_BYTES
    return [(last * i // (CHECK_BLOCKS - 1), CHECK_BLOCK_BYTES) for i in range(CHECK_BLOCKS)]


def checksums(path: str) -> dict[str, Any]:
    """A file's integrity entry: ``size``, full ``crc32`` and ``blocks`` (``[offset, length, crc32]``)."""
    size = os.path.getsize(path)
    return {
        "size": size,
        "crc32": crc32_of(path),
        "blocks": [[offset, length, crc32_of(path, offset, length)] for offset, length in block_ranges(size)],
    }


def file_problem(path: str, entry: dict[str, Any], *, full: bool) -> str | None:
    """Why ``path`` does not match its entry (missing, truncated, grown, altered), or ``None``."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return "missing"
    expected = int(entry["size"])
    if size < expected:
        return f"truncated ({size:,} of {expected:,} bytes)"
    if size > expected:
        return f"grown ({size:,} bytes, {expected:,} expected)"
    if full:
        return None if crc32_of(path) == int(entry["crc32"]) else "altered (full checksum differs)"
    for offset, length, crc in entry["blocks"]:
        if crc32_of(path, int(offset), int(length)) != int(crc):
            return f"altered (checksum of bytes {offset}..{offset + length} differs)"
    return None

"""Exact and near-duplicate images, found without comparing every pair.

Exact duplicates share a content hash (BLAKE2b of the bytes). Near duplicates have perceptual
hashes (:func:`torchloom.tools.doctor.perceptual.phash`) within :data:`NEAR_MAX_DISTANCE` bits.
The near search is multi-index hashing (Norouzi et al., 2012): the 64-bit hash is cut into
:data:`BANDS` bands of 16 bits; if two hashes differ in at most ``d`` bits, one band differs in
at most ``d // BANDS`` bits (pigeonhole). So each hash looks up, in each band's bucket table, the
keys within that small radius of its own, and only those candidates have their full distance
checked. With ``d = 10`` that is 137 lookups per band, each of which finds about
``n / 65536`` random candidates: near-linear, not quadratic, for any realistic ``n``.
A hash match counts only when the images' colour thumbnails agree too
(:func:`torchloom.tools.doctor.perceptual.thumbnail_difference`): the grey hash alone pairs different
pictures that share a layout of light and dark. Pairs join into groups by union-find (connected
components).

Example:
    >>> import numpy as np, os, simplejpeg, tempfile
    >>> from torchloom.testing import synthetic_image
    >>> folder = tempfile.mkdtemp()
    >>> images = [synthetic_image(np.random.default_rng(i), 96, 96, 0) for i in range(3)]
    >>> paths = [os.path.join(folder, f"{i}.jpg") for i in range(4)]
    >>> for path, image, quality in zip(paths, images + [images[0]], [90, 90, 90, 60]):
    ...     _ = open(path, "wb").write(simplejpeg.encode_jpeg(image, quality=quality))
    >>> duplicate_groups(paths)
    [[0, 3]]
    >>> duplicate_groups(paths, near=False)
    []
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torchloom.errors import ConfigError
from torchloom.tools.doctor.examine import Examination, examine_files
from torchloom.tools.doctor.perceptual import (
    HASH_BITS,
    THUMBNAIL_MAX_DIFFERENCE,
    hamming,
    thumbnail_difference,
)

#: Two images whose perceptual hashes differ in at most this many of 64 bits are near duplicates.
NEAR_MAX_DISTANCE = 10
BANDS = 4
BAND_BITS = HASH_BITS // BANDS


def duplicate_groups(
    paths: Sequence[str], *, near: bool = True, num_threads: int | None = None, progress: bool = False
) -> list[list[int]]:
    """Groups (of two or more indices into ``paths``) of exact or, with ``near``, near duplicates.

    Files are read once each, in ``num_threads`` threads. Groups are connected components: A ≈ B
    and B ≈ C put A, B and C in one group. Files that cannot be read are in no group; files
    that can be read but not decoded still group with byte-identical copies. Groups are sorted,
    and ordered by their first index.

    Example:
        >>> duplicate_groups([])
        []
    """
    facts = examine_files(paths, num_threads=num_threads, progress=progress)
    return examination_groups(facts, near_max_distance=NEAR_MAX_DISTANCE if near else None)


def examination_groups(
    facts: Examination, *, near_max_distance: int | None = NEAR_MAX_DISTANCE
) -> list[list[int]]:
    """:func:`duplicate_groups` of files already examined; ``near_max_distance=None``: exact only."""
    pairs = exact_pairs(facts.digest, facts.hashed)
    if near_max_distance is not None:
        near = near_pairs(facts.phash, facts.readable, max_distance=near_max_distance)
        near = near[thumbnail_difference(facts.thumbnail, near) <= THUMBNAIL_MAX_DIFFERENCE]
        pairs = np.concatenate([pairs, near])
    return connected_groups(len(facts.paths), pairs)


def exact_pairs(digests: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Pairs ``(first, other)`` joining every valid row to the first row with the same digest.

    Example:
        >>> exact_pairs(np.array([b"a", b"b", b"a", b"a"]), np.ones(4, bool)).tolist()
        [[0, 2], [0, 3]]
    """
    rows = np.flatnonzero(valid)
    _, first, inverse = np.unique(digests[rows], return_index=True, return_inverse=True)
    representative = rows[first[inverse.ravel()]]
    keep = representative != rows
    return np.stack([representative[keep], rows[keep]], axis=1).astype(np.int64)


def near_pairs(
    hashes: np.ndarray, valid: np.ndarray | None = None, *, max_distance: int = NEAR_MAX_DISTANCE
) -> np.ndarray:
    """Pairs ``(i, j)``, ``i < j``, of valid rows whose 64-bit hashes differ in at most
    ``max_distance`` bits; every such pair is found (identical hashes pair with their first row).

    Example:
        >>> near_pairs(np.array([0b0, 0b111, 0b1 << 40, 0xFFFF], np.uint64), max_distance=3).tolist()
        [[0, 1], [0, 2]]
    """
    if not 0 <= max_distance < HASH_BITS:
        raise ConfigError(f"max_distance must be in 0..{HASH_BITS - 1}, got {max_distance}")
    rows = np.arange(len(hashes)) if valid is None else np.flatnonzero(valid)
    unique, first, inverse = np.unique(
        np.asarray(hashes, dtype=np.uint64)[rows], return_index=True, return_inverse=True
    )
    representative = rows[first[inverse.ravel()]]
    same = representative != rows
    identical = np.stack([representative[same], rows[same]], axis=1)
    close = hash_pairs(unique, max_distance)
    between = rows[first[close]]
    pairs = np.concatenate([identical, between]).astype(np.int64)
    pairs.sort(axis=1)
    return pairs


def hash_pairs(unique: np.ndarray, max_distance: int) -> np.ndarray:
    """Index pairs ``(i, j)``, ``i < j``, of distinct ``uint64`` hashes within ``max_distance``
    bits, by multi-index hashing over :data:`BANDS` bands.

    Example:
        >>> hash_pairs(np.array([1, 2, 0b111 << 60], np.uint64), 2).tolist()
        [[0, 1]]
    """
    count = len(unique)
    found: list[np.ndarray] = []
    flips = _flips(max_distance // BANDS)
    band_mask = np.uint64((1 << BAND_BITS) - 1)
    for band in range(BANDS):
        keys = ((unique >> np.uint64(band * BAND_BITS)) & band_mask).astype(np.int64)
        order = np.argsort(keys, kind="stable")
        sizes = np.bincount(keys, minlength=1 << BAND_BITS)
        starts = np.cumsum(sizes) - sizes
        for flip in flips:
            query = keys ^ flip
            hits = sizes[query]
            total = int(hits.sum())
            if total == 0:
                continue
            left = np.repeat(np.arange(count), hits)
            offset = np.arange(total) - np.repeat(np.cumsum(hits) - hits, hits)
            right = order[np.repeat(starts[query], hits) + offset]
            keep = left < right
            left, right = left[keep], right[keep]
            keep = hamming(unique[left], unique[right]) <= max_distance
            found.append(left[keep] * count + right[keep])
    codes = np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
    return np.stack([codes // max(count, 1), codes % max(count, 1)], axis=1)


def connected_groups(count: int, pairs: np.ndarray) -> list[list[int]]:
    """Connected components (of two or more of ``0..count-1``) of the graph of ``pairs``.

    Example:
        >>> connected_groups(6, np.array([[0, 4], [4, 2], [3, 5]]))
        [[0, 2, 4], [3, 5]]
    """
    parent = np.arange(count)

    def root(node: int) -> int:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = int(parent[node])
        return node

    for a, b in pairs.tolist():
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    roots = np.array([root(node) for node in range(count)], dtype=np.int64)
    members = np.flatnonzero(np.bincount(roots, minlength=count)[roots] > 1)
    groups: dict[int, list[int]] = {}
    for node in members.tolist():
        groups.setdefault(int(roots[node]), []).append(node)
    return [groups[key] for key in sorted(groups)]


def _flips(radius: int) -> np.ndarray:
    """Every :data:`BAND_BITS`-bit value with at most ``radius`` bits set (XOR masks to probe)."""
    values = np.arange(1 << BAND_BITS, dtype=np.int64)
    weights = hamming(values.astype(np.uint64), np.uint64(0))
    return values[weights <= radius]

"""A deterministic, stratified split that keeps every file's split when files are added.

The rule, exactly:

1. **Hash.** Each unit (a file, or a group of duplicate files) has a key: its relative POSIX
   path (a group's smallest one). ``u = blake2b(seed as 8 little-endian bytes + key as UTF-8,
   digest_size=8)``, read big-endian, top 53 bits divided by 2**53: uniform in ``[0, 1)``, the
   same on every machine and Python version, and independent of every other file.
2. **Cut.** With fractions ``f`` (e.g. ``0.8, 0.1, 0.1``) and cumulative edges
   ``0 = e0 < e1 < ... < ek = 1``, a unit's *hash split* is the ``j`` with ``e_j <= u < e_{j+1}``.
3. **Keep.** A unit that a previous split placed (``previous``: the manifest of the last run)
   stays where it was, whatever the hash says.
4. **Count.** Within each class of ``n`` units, split ``j``'s target is ``n f_j``. The new units
   are shared by :func:`nearest_counts`: splits that the kept units already fill to their target
   or beyond get none; the others get the largest-remainder rounding of their shortfalls (lowered
   by one common amount first when the kept units overfill a split, so that they sum to the new
   units). Without kept units these are the counts nearest ``n f``: 7 units at 0.7/0.15/0.15 give
   5/1/1.
5. **Balance.** While a split holds more new units than its count, one moves to a split holding
   fewer: of all such units and receiving splits, the unit whose ``u`` is closest to the
   receiving split's interval ``[e_j, e_{j+1})`` moves (ties: the smaller key). Each move fixes
   one unit of excess, so the number moved is the least possible.

So adding files never moves an old one: the new files alone restore the balance, as far as they
can. Without a previous split, files near a cut may change split when others are added
(``rebalanced`` marks those step 5 moved).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from torchloom.errors import ConfigError

#: Split names, in the order fractions are given.
SPLIT_NAMES = ("train", "val", "test")
#: Fractions must sum to 1 within this tolerance.
FRACTION_TOLERANCE = 1e-6
# n * f computed in floating point (10 * 0.1 = 1.0000000000000002) is rounded within this slack.
_TARGET_SLACK = 1e-9
#: A unit not placed by a previous split.
NEW = -1
_HASH_BITS = 53


@dataclass(frozen=True)
class SplitResult:
    """Per unit: the split number (index into the split names), the hash split it started in,
    the hash value ``u``, and whether it kept its previous split.

    Example:
        >>> import numpy as np
        >>> from torchloom.tools.prepare import stratified_split
        >>> classes = np.array([0, 0, 0, 0, 1, 1])
        >>> result = stratified_split([f"{i}.jpg" for i in range(6)], classes, (0.5, 0.5), seed=0)
        >>> result.split.shape, bool(((result.u >= 0) & (result.u < 1)).all())
        ((6,), True)
    """

    split: np.ndarray
    hash_split: np.ndarray
    u: np.ndarray
    #: True for units that kept the split a previous split gave them.
    kept: np.ndarray

    @property
    def rebalanced(self) -> np.ndarray:
        """True for units outside their hash split (moved by balancing, now or in a previous split)."""
        return np.asarray(self.split != self.hash_split)


def parse_fractions(text: str) -> tuple[float, ...]:
    """``"0.8,0.1,0.1"`` as fractions of train, val (and test); a :class:`ConfigError` otherwise.

    Example:
        >>> parse_fractions("0.8, 0.2")
        (0.8, 0.2)
    """
    try:
        fractions = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--fractions {text!r} must be 2 or 3 comma-separated numbers, e.g. 0.8,0.1,0.1"
        ) from None
    if not 2 <= len(fractions) <= len(SPLIT_NAMES):
        raise ConfigError(
            f"--fractions {text!r} gives {len(fractions)} fraction(s); "
            "give 2 (train,val) or 3 (train,val,test)"
        )
    if any(not math.isfinite(f) or f < 0 for f in fractions) or fractions[0] <= 0:
        raise ConfigError(f"--fractions {text!r}: fractions must be finite and >= 0, and train's > 0")
    if abs(sum(fractions) - 1) > FRACTION_TOLERANCE:
        raise ConfigError(f"--fractions {text!r} sums to {sum(fractions):g}; the fractions must sum to 1")
    return fractions


def unit_hash(key: str, seed: int) -> float:
    """The uniform ``[0, 1)`` value of ``key`` under ``seed`` (step 1 of the module's rule).

    Example:
        >>> unit_hash("cat/1.jpg", 0) == unit_hash("cat/1.jpg", 0) != unit_hash("cat/1.jpg", 1)
        True
    """
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")
    key_bytes = key.encode("utf-8", "surrogateescape")  # a name's own bytes, valid UTF-8 or not
    digest = hashlib.blake2b(seed.to_bytes(8, "little") + key_bytes, digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> (64 - _HASH_BITS)) / float(1 << _HASH_BITS)


def stratified_split(
    keys: Sequence[str],
    classes: np.ndarray,
    fractions: Sequence[float],
    *,
    seed: int,
    previous: np.ndarray | None = None,
) -> SplitResult:
    """Assign each unit (``keys[i]`` of class ``classes[i]``) a split: by a seeded hash of its key,
    keeping the units a previous run placed, with each class's new units shared to the nearest
    counts (the rule, exactly: :mod:`torchloom.tools.prepare.split`'s notes).

    ``previous``: per unit, the split a previous run gave it (an index into the split names), or
    :data:`NEW` (``-1``) for a unit it did not place; those placed keep their split.

    Example:
        >>> import numpy as np
        >>> from torchloom.tools.prepare import stratified_split
        >>> keys = [f"img_{i}.jpg" for i in range(10)]
        >>> result = stratified_split(keys, np.zeros(10, np.int64), (0.8, 0.2), seed=0)
        >>> np.bincount(result.split, minlength=2).tolist()
        [8, 2]
        >>> more = stratified_split(keys + ["new.jpg"], np.zeros(11, np.int64), (0.8, 0.2), seed=0,
        ...                         previous=np.append(result.split, -1))
        >>> bool(np.all(more.split[:10] == result.split)), int(more.split[10])
        (True, 0)
    """
    if len(keys) != len(classes):
        raise ConfigError(f"{len(keys)} keys but {len(classes)} classes")
    old = np.full(len(keys), NEW, np.int64) if previous is None else np.asarray(previous, np.int64)
    if len(old) != len(keys) or np.any((old < NEW) | (old >= len(fractions))):
        raise ConfigError(
            f"previous must give each of the {len(keys)} units a split in 0..{len(fractions) - 1}, or -1"
        )
    edges = np.concatenate([[0.0], np.cumsum(fractions, dtype=np.float64)])
    edges[-1] = 1.0
    u = np.array([unit_hash(key, seed) for key in keys], dtype=np.float64)
    hash_split = np.clip(np.searchsorted(edges, u, side="right") - 1, 0, len(fractions) - 1)
    kept = old != NEW
    split = np.where(kept, old, hash_split)
    order = np.argsort(np.asarray(keys, dtype=object), kind="stable")  # ties go to the smaller key
    rank = np.empty(len(keys), np.int64)
    rank[order] = np.arange(len(keys))
    labels = np.asarray(classes)
    for label in np.unique(labels):
        members = labels == label
        new = np.flatnonzero(members & ~kept)
        held = np.bincount(old[members & kept], minlength=len(fractions))
        counts = nearest_counts(int(members.sum()), fractions, held=held)
        split[new] = _balance(u[new], hash_split[new], rank[new], edges, counts)
    return SplitResult(split.astype(np.int8), hash_split.astype(np.int8), u, kept)


def nearest_counts(total: int, fractions: Sequence[float], *, held: np.ndarray | None = None) -> np.ndarray:
    """How many of a class's new units each split gets (step 4 of the module's rule): ``total``
    units in the class, ``held[j]`` of them kept in split ``j`` already.

    Example:
        >>> nearest_counts(7, (0.7, 0.15, 0.15)).tolist()
        [5, 1, 1]
        >>> nearest_counts(12, (0.5, 0.5), held=np.array([2, 8])).tolist()  # 2 more would be 6/6
        [2, 0]
    """
    have = np.zeros(len(fractions), np.int64) if held is None else np.asarray(held, np.int64)
    new = total - int(have.sum())
    if new < 0:
        raise ConfigError(f"{int(have.sum())} units held in a class of {total}")
    shortfall = total * np.asarray(fractions, dtype=np.float64) - have
    share = np.maximum(shortfall - _water_level(shortfall, new), 0.0)
    counts = np.floor(share + _TARGET_SLACK).astype(np.int64)
    remainder = np.round(share - counts, 9)  # float noise must not decide between equal remainders
    extra = np.argsort(-remainder, kind="stable")[: new - int(counts.sum())]
    counts[extra] += 1
    return counts


def _water_level(shortfall: np.ndarray, new: int) -> float:
    """The amount ``c >= 0`` by which the positive shortfalls are lowered so that what is left
    of them sums to ``new`` (0 unless kept units overfill a split)."""
    positive = np.sort(shortfall[shortfall > 0])[::-1]
    if positive.sum() <= new + _TARGET_SLACK:
        return 0.0
    for size in range(1, len(positive) + 1):
        level = (positive[:size].sum() - new) / size
        if size == len(positive) or level >= positive[size]:
            return float(level)
    raise AssertionError("unreachable: the last size always returns")  # pragma: no cover


def _balance(
    u: np.ndarray, start: np.ndarray, rank: np.ndarray, edges: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """Step 5 for one class's new units: the fewest moves from their hash splits to ``counts``."""
    split = start.copy()
    held = np.bincount(start, minlength=len(counts))
    # Each split's units sorted by u: a donor gives from its top end to a later split and from its
    # bottom end to an earlier one, so what it still holds stays one run [low, high) of the order.
    by_u = [np.flatnonzero(start == j)[np.argsort(u[start == j], kind="stable")] for j in range(len(counts))]
    low = [0] * len(counts)
    high = [len(units) for units in by_u]
    while True:
        donors = [j for j in range(len(counts)) if held[j] > counts[j]]
        if not donors:
            return split
        best: tuple[float, int, int, int] | None = None  # distance, rank, unit's donor, receiver
        for receiver in (j for j in range(len(counts)) if held[j] < counts[j]):
            for donor in donors:
                unit = by_u[donor][high[donor] - 1] if donor < receiver else by_u[donor][low[donor]]
                distance = max(edges[receiver] - u[unit], u[unit] - edges[receiver + 1])
                candidate = (float(distance), int(rank[unit]), donor, receiver)
                if best is None or candidate < best:
                    best = candidate
        if best is None:  # unreachable: counts sum to the units, so a donor implies a receiver
            raise ConfigError(f"cannot balance split counts {held.tolist()} to {counts.tolist()}")
        _, _, donor, receiver = best
        if donor < receiver:
            high[donor] -= 1
            unit = by_u[donor][high[donor]]
        else:
            unit = by_u[donor][low[donor]]
            low[donor] += 1
        split[unit] = receiver
        held[donor] -= 1
        held[receiver] += 1

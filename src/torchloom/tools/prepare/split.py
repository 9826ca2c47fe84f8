"""A deterministic, stratified split that stays put when files are added.

The rule, exactly:

1. **Hash.** Each unit (a file, or a group of duplicate files) has a key: its relative POSIX
   path (a group's smallest one). ``u = blake2b(seed as 8 little-endian bytes + key as UTF-8,
   digest_size=8)``, read big-endian, top 53 bits divided by 2**53: uniform in ``[0, 1)``, the
   same on every machine and Python version, and independent of every other file.
2. **Cut.** With fractions ``f`` (e.g. ``0.8, 0.1, 0.1``) and cumulative edges
   ``0 = e0 < e1 < ... < ek = 1``, a unit's *hash split* is the ``j`` with ``e_j <= u < e_{j+1}``.
3. **Balance.** Within each class of ``n`` units, split ``j`` must hold ``floor(n f_j)`` or
   ``ceil(n f_j)`` units (within ±1 of the exact target ``n f_j``). While a split is over its
   ceiling or under its floor, one unit moves from a split that must (or, failing that, may)
   give to a split that must (or may) take: of all such units and receiving splits, the unit
   whose ``u`` is closest to the receiving split's interval ``[e_j, e_{j+1})`` moves (ties: the
   smaller key). Each move fixes one unit of excess or shortfall, so the number moved is the
   least possible.

The trade-off, honestly: steps 1-2 never change an old file's split when files are added, but
step 3 may. Moved units are those nearest a boundary, so the set moved across a boundary grows
or shrinks at its edge: when files are added, the old files whose split changes are among those
moved by balancing before or after (``rebalanced`` in the manifest), typically a handful per
class (the change in the class's hash-sampling imbalance), never a reshuffle.
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
_HASH_BITS = 53


@dataclass(frozen=True)
class SplitResult:
    """Per unit: the split number (index into the split names), the hash split it started in,
    and the hash value ``u``.

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

    @property
    def rebalanced(self) -> np.ndarray:
        """True for units that balancing moved out of their hash split."""
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
    keys: Sequence[str], classes: np.ndarray, fractions: Sequence[float], *, seed: int
) -> SplitResult:
    """Assign each unit (``keys[i]`` of class ``classes[i]``) a split: by a seeded hash of its key,
    then balanced per class to within one unit of each fraction, moving the units nearest a
    boundary (the rule, exactly: :mod:`torchloom.tools.prepare.split`'s notes).

    Example:
        >>> import numpy as np
        >>> from torchloom.tools.prepare import stratified_split
        >>> keys = [f"img_{i}.jpg" for i in range(10)]
        >>> result = stratified_split(keys, np.zeros(10, np.int64), (0.8, 0.2), seed=0)
        >>> np.bincount(result.split, minlength=2).tolist()
        [8, 2]
    """
    if len(keys) != len(classes):
        raise ConfigError(f"{len(keys)} keys but {len(classes)} classes")
    edges = np.concatenate([[0.0], np.cumsum(fractions, dtype=np.float64)])
    edges[-1] = 1.0
    u = np.array([unit_hash(key, seed) for key in keys], dtype=np.float64)
    hash_split = np.clip(np.searchsorted(edges, u, side="right") - 1, 0, len(fractions) - 1)
    split = hash_split.copy()
    order = np.argsort(np.asarray(keys, dtype=object), kind="stable")  # ties go to the smaller key
    for label in np.unique(classes):
        members = order[np.asarray(classes)[order] == label]
        split[members] = _balance(u[members], hash_split[members], edges, fractions)
    return SplitResult(split.astype(np.int8), hash_split.astype(np.int8), u)


def split_bounds(count: int, fractions: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The least and most units each split may hold in a class of ``count`` units.

    Example:
        >>> [b.tolist() for b in split_bounds(10, (0.8, 0.1, 0.1))]
        [[8, 1, 1], [8, 1, 1]]
    """
    targets = count * np.asarray(fractions, dtype=np.float64)
    return np.floor(targets + _TARGET_SLACK).astype(int), np.ceil(targets - _TARGET_SLACK).astype(int)


def _balance(u: np.ndarray, start: np.ndarray, edges: np.ndarray, fractions: Sequence[float]) -> np.ndarray:
    """Step 3 for one class (units sorted by key): the fewest moves into the ±1 bounds."""
    split = start.copy()
    low, high = split_bounds(len(u), fractions)
    while True:
        counts = np.bincount(split, minlength=len(fractions))
        short, over = counts < low, counts > high
        if short.any():
            receivers, donors = short, over if over.any() else counts > low
        elif over.any():
            receivers, donors = counts < high, over
        else:
            return split
        best: tuple[float, int, int] | None = None
        candidates = np.flatnonzero(donors[split])
        for receiver in np.flatnonzero(receivers):
            distance = np.maximum(edges[receiver] - u[candidates], u[candidates] - edges[receiver + 1])
            position = int(np.argmin(distance))  # first minimum: the smallest key among ties
            if best is None or distance[position] < best[0]:
                best = (float(distance[position]), int(candidates[position]), int(receiver))
        if best is None:  # unreachable: the bounds always admit the class's total
            raise ConfigError(f"cannot balance split counts {counts.tolist()} into [{low}, {high}]")
        split[best[1]] = best[2]

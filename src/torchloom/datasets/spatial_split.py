"""Train/validation splits of an image's pixels by spatial blocks, and the guard band between them.

Neighbouring pixels of a scene are nearly the same spectrum: a random per-pixel split puts
near-copies of training pixels in validation. :func:`spatial_block_split` assigns whole blocks to
splits instead. A pixel-centred patch still sees up to ``patch_size // 2`` pixels past its centre,
so a centre near a block border reads pixels of the neighbouring block: :func:`touches_other_split`
finds those centres, and :class:`torchloom.datasets.HyperspectralDataset` drops them (``guard=True``), so no
patch of one split holds a pixel of another split's blocks.

Example:
    >>> import numpy as np
    >>> from torchloom.datasets import spatial_block_split
    >>> splits = spatial_block_split(np.ones((4, 8), np.uint8), block=4, fractions=(0.5, 0.5), seed=0)
    >>> sorted(np.unique(splits).tolist()), splits.shape
    ([0, 1], (4, 8))
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from torchloom.errors import ConfigError

#: Pixels of a split map outside every split (never counted as another split's).
NO_SPLIT = -1


def spatial_block_split(
    mask: np.ndarray | tuple[int, int],
    *,
    block: int | tuple[int, int],
    fractions: Sequence[float] = (0.8, 0.2),
    seed: int = 0,
    ignore_label: int | None = 0,
) -> np.ndarray:
    """Assign square (or ``(height, width)``) blocks of pixels to splits; return each pixel's split id.

    Blocks are visited in a seeded random order, each going to the split furthest below its
    share (``fractions``) of labelled pixels, so the splits get close to their fractions of the
    labelled pixels, not just of the area. A block with no labelled pixel goes to a split drawn
    with the fractions' weights.

    Args:
        mask: the per-pixel label mask (pixels equal to ``ignore_label`` are unlabelled), or a
            ``(height, width)`` shape when every pixel counts.
        block: the block size in pixels.
        fractions: each split's share; split ids are their positions (0 = train, 1 = val, ...).
        seed: the same seed, mask and settings give the same split.
        ignore_label: the label of unlabelled pixels, or ``None`` when every pixel is labelled.

    Returns:
        An ``int8`` array of the mask's shape holding split ids.

    Example:
        >>> import numpy as np
        >>> mask = np.ones((6, 6), np.int64)
        >>> split = spatial_block_split(mask, block=2, fractions=(2, 1), seed=3)
        >>> np.bincount(split.ravel()).tolist()
        [24, 12]
    """
    labelled = _labelled(mask, ignore_label)
    height, width = labelled.shape
    block_height, block_width = (block, block) if isinstance(block, int) else (int(block[0]), int(block[1]))
    if block_height < 1 or block_width < 1:
        raise ConfigError(f"block must be >= 1 pixel, got {block!r}")
    shares = np.asarray(fractions, dtype=np.float64)
    if shares.ndim != 1 or len(shares) < 1 or len(shares) > 127 or (shares <= 0).any():
        raise ConfigError(f"fractions must be 1 to 127 positive numbers, got {fractions!r}")
    shares = shares / shares.sum()
    grid = (-(-height // block_height), -(-width // block_width))
    padded = np.zeros((grid[0] * block_height, grid[1] * block_width), dtype=np.int64)
    padded[:height, :width] = labelled
    weights = padded.reshape(grid[0], block_height, grid[1], block_width).sum(axis=(1, 3)).ravel()
    rng = np.random.default_rng(seed)
    targets = shares * weights.sum()
    assigned = np.zeros(len(shares))
    block_split = np.empty(len(weights), dtype=np.int8)
    for block_id in rng.permutation(len(weights)):
        weight = weights[block_id]
        choice = int(np.argmax(targets - assigned)) if weight else int(rng.choice(len(shares), p=shares))
        block_split[block_id] = choice
        assigned[choice] += weight
    if weights.sum() and (assigned == 0).any():
        warnings.warn(
            f"spatial_block_split: split(s) {np.flatnonzero(assigned == 0).tolist()} got no labelled "
            f"pixel ({len(weights)} blocks of {block_height}x{block_width}); use smaller blocks",
            stacklevel=2,
        )
    per_pixel = np.repeat(np.repeat(block_split.reshape(grid), block_height, axis=0), block_width, axis=1)
    return np.ascontiguousarray(per_pixel[:height, :width])


def touches_other_split(splits: np.ndarray, split: int, patch_size: int) -> np.ndarray:
    """Which pixels' ``patch_size`` × ``patch_size`` window (centred) holds a pixel of another split.

    Pixels marked :data:`NO_SPLIT` (``-1``) belong to no split and are not counted.

    Example:
        >>> import numpy as np
        >>> touches_other_split(np.array([[0, 0, 0, 1]]), 0, patch_size=3).tolist()
        [[False, False, True, True]]
    """
    if splits.ndim != 2:
        raise ConfigError(f"a split map is 2-D (height, width), got shape {splits.shape}")
    other = (splits != split) & (splits != NO_SPLIT)
    radius = patch_size // 2
    return _window_any(_window_any(other, radius, axis=0), radius, axis=1)


def _window_any(flags: np.ndarray, radius: int, axis: int) -> np.ndarray:
    """Whether any flag lies within ``radius`` along ``axis`` (a running count, no Python loop)."""
    size = flags.shape[axis]
    counts = np.cumsum(flags, axis=axis, dtype=np.int64)
    counts = np.concatenate([np.zeros_like(np.take(counts, [0], axis=axis)), counts], axis=axis)
    positions = np.arange(size)
    high = np.minimum(positions + radius + 1, size)
    low = np.maximum(positions - radius, 0)
    return np.asarray((np.take(counts, high, axis=axis) - np.take(counts, low, axis=axis)) > 0)


def _labelled(mask: np.ndarray | tuple[int, int], ignore_label: int | None) -> np.ndarray:
    if isinstance(mask, tuple):
        if len(mask) != 2 or min(mask) < 1:
            raise ConfigError(f"a split shape is (height, width) >= 1, got {mask!r}")
        return np.ones(mask, dtype=bool)
    mask = np.asarray(mask)
    if mask.ndim != 2 or 0 in mask.shape:
        raise ConfigError(f"a label mask is a non-empty 2-D (height, width) array, got shape {mask.shape}")
    return mask != ignore_label if ignore_label is not None else np.ones(mask.shape, dtype=bool)

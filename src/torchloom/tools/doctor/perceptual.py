"""Perceptual hashes: 64-bit fingerprints that survive re-encoding, resizing and slight crops.

:func:`phash` is the DCT hash (Zauner, 2010): the image is shrunk to 32×32 grey, transformed
with a 2-D DCT, and each of the 8×8 lowest-frequency coefficients (the DC term excluded from the
median) becomes one bit, set when the coefficient is above their median. Re-encoding at another
JPEG quality or resizing changes a few bits at most; a different picture changes about half.
:func:`hamming` counts differing bits between arrays of hashes. :func:`phashes` hashes a stack of
32×32 grey images (:func:`hash_image`) at once, one matrix product for all their DCT blocks, and
:func:`resize_stack` shrinks a stack of equal-sized images in one call where it can.

The hash sees only grey structure: two different pictures with a similar layout of light and
dark (a blob in the same corner) can land a few bits apart. :func:`colour_thumbnail` keeps an
8×8 colour summary of each image, and :func:`thumbnail_difference` confirms a hash match only
when the colours agree too, which re-encoded, resized and slightly cropped copies do.

Example:
    >>> import cv2, numpy as np
    >>> from torchloom.testing import synthetic_image
    >>> image = synthetic_image(np.random.default_rng(0), 128, 128, label=0)
    >>> other = synthetic_image(np.random.default_rng(1), 128, 128, label=0)
    >>> smaller = cv2.resize(image, (96, 96), interpolation=cv2.INTER_AREA)
    >>> int(hamming(np.uint64(phash(image)), np.uint64(phash(smaller)))) <= 2
    True
    >>> int(hamming(np.uint64(phash(image)), np.uint64(phash(other)))) > 16
    True
"""

from __future__ import annotations

import cv2
import numpy as np

#: Side of the colour thumbnail that confirms a hash match.
THUMBNAIL_SIDE = 8
#: A hash match is a near duplicate only when the colour thumbnails differ by at most this much
#: (mean absolute difference, 0-255 scale). Re-encoded, resized and 3-4 % cropped copies of the
#: demo images stay under 1; 43 different pictures within 10 hash bits of another differed by 34 to 60.
THUMBNAIL_MAX_DIFFERENCE = 12.0
#: Side of the grey thumbnail the DCT is taken of.
HASH_IMAGE_SIDE = 32
#: Side of the block of low-frequency coefficients that become bits (8 × 8 = 64 bits).
HASH_BLOCK_SIDE = 8
HASH_BITS = HASH_BLOCK_SIDE * HASH_BLOCK_SIDE

_MEDIAN_RANK = (HASH_BITS - 1) // 2  # the median of the 63 terms after the DC one
# The first 8 rows of the orthonormal 32-point DCT-II matrix (what cv2.dct uses): the 8 × 8 block
# of lowest frequencies of X is _DCT_ROWS @ X @ _DCT_ROWS.T.
_DCT_ROWS = np.sqrt(2.0 / HASH_IMAGE_SIDE) * np.cos(
    np.pi
    * np.arange(HASH_BLOCK_SIDE)[:, None]
    * (2 * np.arange(HASH_IMAGE_SIDE)[None, :] + 1)
    / (2 * HASH_IMAGE_SIDE)
)
_DCT_ROWS[0] /= np.sqrt(2.0)
_BITWISE_COUNT = getattr(np, "bitwise_count", None)
_POPCOUNT_16 = np.array([bin(value).count("1") for value in range(1 << 16)], dtype=np.uint8)


def phash(image: np.ndarray) -> int:
    """The 64-bit DCT perceptual hash of an RGB (HWC) or grey (HW) ``uint8`` image.

    Example:
        >>> phash(np.zeros((8, 8), np.uint8)) == phash(np.zeros((40, 30, 3), np.uint8))
        True
    """
    return int(phashes(hash_image(image)[None])[0])


def hash_image(image: np.ndarray) -> np.ndarray:
    """The ``32 × 32`` grey ``uint8`` image an RGB (HWC) or grey (HW) image is hashed from.

    Example:
        >>> hash_image(np.zeros((40, 30, 3), np.uint8)).shape
        (32, 32)
    """
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY) if image.ndim == 3 else image
    resized: np.ndarray = resize_stack(grey[None], HASH_IMAGE_SIDE)[0]
    return resized


def phashes(greys: np.ndarray) -> np.ndarray:
    """The hashes (``uint64``) of a stack of ``32 × 32`` grey images, shape ``(n, 32, 32)``.

    Example:
        >>> phashes(np.zeros((2, 32, 32), np.uint8)).tolist()
        [0, 0]
    """
    block = _DCT_ROWS @ greys.astype(np.float64) @ _DCT_ROWS.T
    coefficients = block.reshape(len(greys), HASH_BITS)
    median = np.partition(coefficients[:, 1:], _MEDIAN_RANK, axis=1)[:, _MEDIAN_RANK]
    bits = np.packbits(coefficients > median[:, None], axis=1)
    return np.ascontiguousarray(bits).view(">u8").ravel().astype(np.uint64)


def resize_stack(images: np.ndarray, side: int) -> np.ndarray:
    """Each image of a stack ``(n, h, w[, c])`` area-averaged to ``side × side`` (``uint8``).

    When ``side`` divides both ``h`` and ``w`` every output pixel averages a block inside one
    image, so the stack is resized as one tall image in a single call; otherwise image by image.
    The result equals resizing each image alone.

    Example:
        >>> stack = np.random.default_rng(0).integers(0, 256, (3, 64, 32, 3), dtype=np.uint8)
        >>> alone = cv2.resize(stack[1], (8, 8), interpolation=cv2.INTER_AREA)
        >>> resize_stack(stack, 8).shape, bool((resize_stack(stack, 8)[1] == alone).all())
        ((3, 8, 8, 3), True)
    """
    count, height, width = images.shape[:3]
    size = (side, side)
    if height % side == 0 and width % side == 0:
        tall = images.reshape(count * height, *images.shape[2:])
        resized = cv2.resize(tall, (side, count * side), interpolation=cv2.INTER_AREA)
        return resized.reshape(count, side, side, *images.shape[3:])
    return np.stack([cv2.resize(image, size, interpolation=cv2.INTER_AREA) for image in images])


def hamming(a: np.ndarray | np.uint64, b: np.ndarray | np.uint64) -> np.ndarray:
    """The number of differing bits between 64-bit hashes (element-wise, broadcasting).

    Example:
        >>> hamming(np.array([0b1011], np.uint64), np.uint64(0b0001)).tolist()
        [2]
    """
    xor = np.bitwise_xor(np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64))
    if _BITWISE_COUNT is not None:  # numpy >= 2.0: one pass
        return np.asarray(_BITWISE_COUNT(xor), dtype=np.int64)
    mask = np.uint64(0xFFFF)
    count = np.zeros(xor.shape, dtype=np.int64)
    for shift in (0, 16, 32, 48):
        count += _POPCOUNT_16[(xor >> np.uint64(shift)) & mask]
    return count


def colour_thumbnail(image: np.ndarray) -> np.ndarray:
    """An ``8 × 8 × 3`` ``uint8`` area-averaged thumbnail of an RGB or grey ``uint8`` image.

    Example:
        >>> colour_thumbnail(np.full((40, 30), 9, np.uint8)).shape
        (8, 8, 3)
    """
    small = resize_stack(image[None], THUMBNAIL_SIDE)[0]
    if small.ndim == 2 or small.shape[2] == 1:
        small = np.repeat(small.reshape(THUMBNAIL_SIDE, THUMBNAIL_SIDE, 1), 3, axis=2)
    return np.ascontiguousarray(small[:, :, :3])


def thumbnail_difference(thumbnails: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Mean absolute difference (0-255) between the thumbnails of each pair ``(i, j)``.

    Example:
        >>> thumbs = np.stack([np.zeros((8, 8, 3), np.uint8), np.full((8, 8, 3), 10, np.uint8)])
        >>> thumbnail_difference(thumbs, np.array([[0, 1]])).tolist()
        [10.0]
    """
    if len(pairs) == 0:
        return np.zeros(0, dtype=np.float64)
    left = thumbnails[pairs[:, 0]].astype(np.int16)
    right = thumbnails[pairs[:, 1]].astype(np.int16)
    return np.abs(left - right).mean(axis=(1, 2, 3))

"""Image-quality scores, the checks of cleanvision (0.3) computed on a small copy of each image.

Every score lies in ``[0, 1]`` and an image is flagged when its score is *below* the threshold,
as in cleanvision. Scores come from the image shrunk so its longer side is at most
:data:`QUALITY_SIDE` pixels (cleanvision's own resolution for blur), so they cost microseconds.

=================  ==========================================================  ===============
issue              score                                                       flagged when
=================  ==========================================================  ===============
dark               99th percentile of perceived brightness                     < 0.37
light              1 − 5th percentile of perceived brightness                  < 0.05
blurry             1 − exp(−0.01·std(edges)) (+ grey-histogram spread term)     < 0.29
low_information    entropy of the RGB histogram (bits) × 0.1                   < 0.3
grayscale          all three channels are equal                                is grey
odd_aspect_ratio   min(w/h, h/w)                                               < 0.5
odd_size           distance of sqrt(w·h) from the IQR fence (×3) of the data    < 0.5
=================  ==========================================================  ===============

Perceived brightness is ``sqrt(0.241 R² + 0.691 G² + 0.068 B²) / 255`` (percentiles to 1/255);
edges are the 3×3 ``FIND_EDGES`` kernel of Pillow (8 in the centre, −1 around) on the grey image.

Example:
    >>> import numpy as np
    >>> scores = pixel_scores(np.zeros((64, 64, 3), np.uint8))
    >>> bool(scores[DARK] < DARK_THRESHOLD), bool(scores[LOW_INFORMATION] < LOW_INFORMATION_THRESHOLD)
    (True, True)
"""

from __future__ import annotations

import math

import cv2
import numpy as np

#: The longer side (pixels) of the copy every score is computed on.
QUALITY_SIDE = 64

DARK, LIGHT, BLURRY, LOW_INFORMATION = 0, 1, 2, 3
#: Column names of :func:`pixel_scores`' result, in order.
PIXEL_SCORES = ("dark", "light", "blurry", "low_information")

DARK_THRESHOLD = 0.37
"""Dark: even the brightest 1 % of pixels are below 37 % brightness."""
LIGHT_THRESHOLD = 0.05
"""Light (overexposed): even the darkest 5 % of pixels are above 95 % brightness."""
BLURRY_THRESHOLD = 0.29
"""Blurry: few strong edges (and a flat grey histogram does not make up for it)."""
BLUR_NORMALIZER = 0.01
BLUR_SPREAD_THRESHOLD = 0.18
"""A grey-histogram spread score at or below this adds nothing to the blur score."""
LOW_INFORMATION_THRESHOLD = 0.3
"""Low information: the RGB histogram holds under 3 bits of entropy."""
ENTROPY_NORMALIZER = 0.1
ODD_ASPECT_RATIO_THRESHOLD = 0.5
"""Odd aspect ratio: one side more than twice the other."""
ODD_SIZE_IQR_FACTOR = 3.0
ODD_SIZE_THRESHOLD = 0.5
"""Odd size: ``sqrt(w·h)`` outside the fence ``[q1 − 3·IQR, q3 + 3·IQR]`` of the dataset."""

_BRIGHTNESS_WEIGHTS = np.array([[0.241, 0.691, 0.068]], dtype=np.float32)
_EDGE_KERNEL = np.array([[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]], dtype=np.float32)


def shrink(image: np.ndarray, side: int = QUALITY_SIDE) -> np.ndarray:
    """``image`` with its longer side reduced to at most ``side`` pixels (area averaging).

    Example:
        >>> shrink(np.zeros((256, 128, 3), np.uint8)).shape
        (64, 32, 3)
    """
    height, width = image.shape[:2]
    longest = max(height, width)
    if longest <= side:
        return image
    size = (max(1, round(width * side / longest)), max(1, round(height * side / longest)))
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def pixel_scores(small: np.ndarray) -> np.ndarray:
    """The dark, light, blurry and low-information scores of a small RGB ``uint8`` image.

    Example:
        >>> [round(float(s), 2) for s in pixel_scores(np.full((8, 8, 3), 255, np.uint8))]
        [1.0, 0.0, 0.0, 0.16]
    """
    values = small.astype(np.float32)
    brightness = cv2.sqrt(cv2.transform(cv2.multiply(values, values), _BRIGHTNESS_WEIGHTS))
    low, high = _percentiles(_histogram(brightness.astype(np.uint8)), (0.05, 0.99)) / 255.0
    grey = cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)
    edges = cv2.filter2D(grey, -1, _EDGE_KERNEL, borderType=cv2.BORDER_REPLICATE)
    blur = 1.0 - math.exp(-_std(edges) * BLUR_NORMALIZER)
    spread = 1.0 - math.exp(-_std(_histogram(grey)) * BLUR_NORMALIZER)
    if spread <= BLUR_SPREAD_THRESHOLD:
        spread = 0.0
    counts = np.concatenate([_histogram(small, channel) for channel in range(3)])
    probabilities = counts[counts > 0] / counts.sum()
    entropy = -float(probabilities @ np.log2(probabilities))
    return np.array(
        [high, 1.0 - low, min(blur + spread, 1.0), min(entropy * ENTROPY_NORMALIZER, 1.0)],
        dtype=np.float32,
    )


def _std(values: np.ndarray) -> float:
    return float(cv2.meanStdDev(values)[1][0, 0])


def _histogram(image: np.ndarray, channel: int = 0) -> np.ndarray:
    """The 256-bin histogram of one channel of a ``uint8`` image."""
    return cv2.calcHist([image], [channel], None, [256], [0, 256]).ravel()


def _percentiles(histogram: np.ndarray, fractions: tuple[float, ...]) -> np.ndarray:
    """The values (bin numbers) below which the given fractions of a histogram's counts lie."""
    cumulative = np.cumsum(histogram)
    return np.searchsorted(cumulative, np.asarray(fractions) * cumulative[-1]).astype(np.float64)


def is_grayscale(small: np.ndarray) -> bool:
    """Whether all three channels of an RGB image are equal (a grey picture stored as colour).

    Example:
        >>> is_grayscale(np.zeros((2, 2, 3), np.uint8)), is_grayscale(np.eye(3, dtype=np.uint8)[None])
        (True, False)
    """
    return bool(np.array_equal(small[..., 0], small[..., 1]) and np.array_equal(small[..., 0], small[..., 2]))


def aspect_ratio_scores(heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """``min(w/h, h/w)`` of every image (0 where a size is unknown).

    Example:
        >>> aspect_ratio_scores(np.array([100, 100]), np.array([100, 300])).round(2).tolist()
        [1.0, 0.33]
    """
    short = np.minimum(heights, widths).astype(np.float64)
    long = np.maximum(heights, widths).astype(np.float64)
    return np.divide(short, long, out=np.zeros_like(short), where=long > 0)


def size_scores(heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, float]:
    """cleanvision's odd-size scores of ``sqrt(w·h)`` against the dataset's IQR fence, and the
    threshold to flag them with (0.5, or 1.0 when every size is the same: then any other is odd).

    Example:
        >>> scores, threshold = size_scores(np.array([100] * 9 + [1000]), np.array([100] * 9 + [1000]))
        >>> (scores < threshold).tolist()[-2:]
        [False, True]
    """
    size = np.sqrt(heights.astype(np.float64) * widths.astype(np.float64))
    if len(size) == 0:
        return size, ODD_SIZE_THRESHOLD
    q1, q3 = np.percentile(size, [25, 75])
    low, high = q1 - ODD_SIZE_IQR_FACTOR * (q3 - q1), q3 + ODD_SIZE_IQR_FACTOR * (q3 - q1)
    middle, gap = (low + high) / 2, high - low
    norm, threshold = (gap, ODD_SIZE_THRESHOLD) if gap > 0 else (middle, 1.0)
    if norm <= 0:
        return np.ones_like(size), threshold
    return 1.0 - np.clip(np.abs(size - middle) / norm, 0.0, 1.0), threshold

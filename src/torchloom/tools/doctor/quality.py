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
:func:`stack_quality` scores a stack of equal-sized images at once (what ``doctor`` uses);
:func:`pixel_scores` scores one image the same way.

Example:
    >>> import numpy as np
    >>> scores = pixel_scores(np.zeros((64, 64, 3), np.uint8))
    >>> bool(scores[DARK] < DARK_THRESHOLD), bool(scores[LOW_INFORMATION] < LOW_INFORMATION_THRESHOLD)
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

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

#: The most images :func:`stack_quality` measures in one go (image numbers are ``uint8``).
MAX_STACK = 256
DARK_PERCENTILE, LIGHT_PERCENTILE = 0.99, 0.05

_BRIGHTNESS_WEIGHTS = np.array([[0.241, 0.691, 0.068]], dtype=np.float32)
_SQUARES = (np.arange(256, dtype=np.float32) ** 2).reshape(1, 256)
# Each 8-bit level and its square: a histogram @ _POWERS gives the sums of x and x².
_POWERS = np.stack([np.arange(256.0), np.arange(256.0) ** 2], axis=1)
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


@dataclass(frozen=True)
class StackQuality:
    """What :func:`stack_quality` measures of each image of a stack, one row per image.

    ``scores`` holds the columns :data:`PIXEL_SCORES`; ``channel_mean`` and ``channel_square``
    are the per-channel means of ``x`` and ``x²`` (``x`` on the 0-1 scale); ``grey`` is each
    image in grey (OpenCV's RGB to grey weights), ``(n, h, w)``.
    """

    scores: np.ndarray
    grayscale: np.ndarray
    channel_mean: np.ndarray
    channel_square: np.ndarray
    grey: np.ndarray


_FIELDS = [field.name for field in fields(StackQuality)]


def stack_quality(stack: np.ndarray) -> StackQuality:
    """Scores, grey flags and channel moments of a stack ``(n, h, w, 3)`` of small RGB images.

    Pixel-wise steps run once over the stack seen as one tall image, and every histogram is one
    joint histogram of (value, image number), so the cost per image is a few array operations
    whatever ``n`` is. Each row equals what the image alone would give.

    Example:
        >>> line = np.repeat(np.eye(8, dtype=np.uint8)[..., None] * 255, 3, axis=2)
        >>> quality = stack_quality(np.stack([np.zeros((8, 8, 3), np.uint8), line]))
        >>> quality.grayscale.tolist(), quality.channel_mean[:, 0].round(3).tolist()
        ([True, True], [0.0, 0.125])
    """
    count, height, width = stack.shape[:3]
    if count > MAX_STACK:
        parts = [stack_quality(stack[start : start + MAX_STACK]) for start in range(0, count, MAX_STACK)]
        joined = {name: np.concatenate([getattr(part, name) for part in parts]) for name in _FIELDS}
        return StackQuality(**joined)
    tall = stack.reshape(count * height, width, 3)
    rows = _row_numbers(count, height, width)
    grey = cv2.cvtColor(tall, cv2.COLOR_RGB2GRAY)
    channels = np.stack([_stack_histograms(tall, rows, count, channel) for channel in range(3)], axis=1)
    dark, light = _brightness_scores(tall, rows, count)
    scores = np.stack(
        [dark, light, _blur_scores(grey.reshape(count, height, width), rows), _information_scores(channels)],
        axis=1,
    ).astype(np.float32)
    same = (channels[:, 0] == channels[:, 1]).all(axis=1) & (channels[:, 0] == channels[:, 2]).all(axis=1)
    grayscale = np.zeros(count, dtype=bool)
    grayscale[same] = [is_grayscale(stack[i]) for i in np.flatnonzero(same)]
    moments = channels @ _POWERS / (height * width)
    return StackQuality(
        scores=scores,
        grayscale=grayscale,
        channel_mean=moments[..., 0] / 255.0,
        channel_square=moments[..., 1] / 255.0**2,
        grey=grey.reshape(count, height, width),
    )


def _brightness_scores(tall: np.ndarray, rows: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The dark and light scores: percentiles (to 1/255) of each image's perceived brightness."""
    squares = cv2.transform(cv2.LUT(tall, _SQUARES), _BRIGHTNESS_WEIGHTS)
    cumulative = np.cumsum(_stack_histograms(cv2.sqrt(squares).astype(np.uint8), rows, count), axis=1)
    low = np.count_nonzero(cumulative < LIGHT_PERCENTILE * cumulative[:, -1:], axis=1) / 255.0
    high = np.count_nonzero(cumulative < DARK_PERCENTILE * cumulative[:, -1:], axis=1) / 255.0
    return high, 1.0 - low


def _blur_scores(greys: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The blurry score of every grey image of a stack ``(n, h, w)``."""
    count, height, width = greys.shape
    moments = _stack_histograms(_edges(greys), rows, count) @ _POWERS / (height * width)
    edge_std = np.sqrt(np.maximum(moments[:, 1] - moments[:, 0] ** 2, 0.0))
    blur = 1.0 - np.exp(-edge_std * BLUR_NORMALIZER)
    grey_counts = _stack_histograms(greys.reshape(-1, width), rows, count)
    spread = 1.0 - np.exp(-grey_counts.std(axis=1) * BLUR_NORMALIZER)
    spread[spread <= BLUR_SPREAD_THRESHOLD] = 0.0
    return np.minimum(blur + spread, 1.0)


def _information_scores(channels: np.ndarray) -> np.ndarray:
    """The low-information score: entropy (bits) of the three channels' histograms ``(n, 3, 256)``."""
    counts = channels.reshape(len(channels), -1)
    total = counts[0].sum() if len(counts) else 1.0
    logs = np.log2(counts, out=np.zeros_like(counts), where=counts > 0)
    entropy = np.log2(total) - np.einsum("ij,ij->i", counts, logs) / total
    return np.minimum(entropy * ENTROPY_NORMALIZER, 1.0)


def pixel_scores(small: np.ndarray) -> np.ndarray:
    """The dark, light, blurry and low-information scores of a small RGB ``uint8`` image.

    Example:
        >>> [round(float(s), 2) for s in pixel_scores(np.full((8, 8, 3), 255, np.uint8))]
        [1.0, 0.0, 0.0, 0.16]
    """
    scores: np.ndarray = stack_quality(small[None]).scores[0]
    return scores


def is_grayscale(small: np.ndarray) -> bool:
    """Whether all three channels of an RGB image are equal (a grey picture stored as colour).

    Example:
        >>> is_grayscale(np.zeros((2, 2, 3), np.uint8)), is_grayscale(np.eye(3, dtype=np.uint8)[None])
        (True, False)
    """
    return bool(np.array_equal(small[..., 0], small[..., 1]) and np.array_equal(small[..., 0], small[..., 2]))


def _row_numbers(count: int, height: int, width: int) -> np.ndarray:
    """The number of its image at every pixel of a tall stack of ``count`` images."""
    return np.repeat(np.arange(count, dtype=np.uint8), height * width).reshape(count * height, width)


def _stack_histograms(tall: np.ndarray, rows: np.ndarray, count: int, channel: int = 0) -> np.ndarray:
    """The 256-bin histogram of one channel of every image of a tall ``uint8`` stack, ``(n, 256)``."""
    row_channel = tall.shape[2] if tall.ndim == 3 else 1
    joint = cv2.calcHist([tall, rows], [channel, row_channel], None, [256, count], [0, 256, 0, count])
    return np.ascontiguousarray(joint.T, dtype=np.float64)


def _edges(greys: np.ndarray) -> np.ndarray:
    """The edge image of every grey image of a stack, as a tall image (borders replicated)."""
    count, height, width = greys.shape
    padded = np.empty((count, height + 2, width), dtype=np.uint8)
    padded[:, 1:-1], padded[:, 0], padded[:, -1] = greys, greys[:, 0], greys[:, -1]
    edges = cv2.filter2D(padded.reshape(-1, width), -1, _EDGE_KERNEL, borderType=cv2.BORDER_REPLICATE)
    return np.ascontiguousarray(edges.reshape(count, height + 2, width)[:, 1:-1]).reshape(-1, width)


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

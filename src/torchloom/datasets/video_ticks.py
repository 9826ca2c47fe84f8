"""The frame timestamps a video dataset keeps from indexing: those of every clip read by frame number
from a seekable file, end to end in one ``int64`` array, with each clip's span.

Kept, a sample's read seeks straight to its frames' timestamps
(:func:`torchloom.io.read_frame_numbers` with ``frame_ticks``) instead of reading every packet of
the file again to find them.

Example:
    >>> import numpy as np
    >>> from fractions import Fraction
    >>> from torchloom.io.video_header import VideoHeader
    >>> def header(on_grid, ticks):
    ...     return VideoHeader(1.0, 0.0, 4.0, len(ticks), True, 16, 16, Fraction(1, 1000), "h264",
    ...                        True, on_grid, np.array(ticks, np.int64))
    >>> flat, begin, end = flat_frame_ticks([header(False, [0, 40, 90]), header(True, [0, 250])])
    >>> flat.tolist(), begin.tolist(), end.tolist()
    ([0, 40, 90], [0, 3], [3, 3])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torchloom.io.video_header import VideoHeader


def flat_frame_ticks(headers: Sequence[VideoHeader]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The frame timestamps (stream ticks) of the headers' seekable streams off the time grid, one
    after the other, and each header's ``[begin, end)`` span in them (empty for the others, whose
    frames are found by time or read from the start)."""
    kept = [
        header.frame_ticks
        if header.frame_ticks is not None and header.seekable and not header.on_grid
        else np.zeros(0, np.int64)
        for header in headers
    ]
    ends = np.cumsum([len(ticks) for ticks in kept], dtype=np.int64)
    begins = ends - np.array([len(ticks) for ticks in kept], dtype=np.int64)
    flat = np.concatenate(kept).astype(np.int64, copy=False) if kept else np.zeros(0, np.int64)
    return flat, begins, ends

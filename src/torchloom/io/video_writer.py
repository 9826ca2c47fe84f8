"""Write RGB frames into a video file with PyAV: generated clips for tests, examples and benchmarks.

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import probe_video, write_video
    >>> path = os.path.join(tempfile.mkdtemp(), "clip.avi")
    >>> write_video(path, np.zeros((8, 16, 16, 3), np.uint8), rate=4)
    >>> probe_video(path).duration
    2.0
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from torchloom.errors import ConfigError
from torchloom.io.video import require_av


def write_video(
    path: str | os.PathLike[str],
    frames: np.ndarray,
    *,
    rate: int = 25,
    codec: str = "mpeg4",
    gop: int = 12,
    timestamps: Sequence[float] | np.ndarray | None = None,
) -> None:
    """Encode RGB ``uint8`` ``(T, H, W, 3)`` frames into a video file (for tests and examples).

    ``gop``: frames between keyframes. ``timestamps`` (seconds, increasing) makes a
    variable-rate file (use a container that keeps them, e.g. ``.mkv``); by default frames are
    ``1 / rate`` apart.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io.video import frame_timestamps
        >>> path = os.path.join(tempfile.mkdtemp(), "vfr.mkv")
        >>> write_video(path, np.zeros((3, 16, 16, 3), np.uint8), timestamps=[0, 0.1, 0.5])
        >>> frame_timestamps(path).tolist()
        [0.0, 0.1, 0.5]
    """
    av = require_av()
    if frames.ndim != 4 or frames.shape[3] != 3 or frames.dtype != np.uint8:
        raise ConfigError(f"frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    millis = Fraction(1, 1000)
    with av.open(os.fspath(path), "w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        if timestamps is not None:
            stream.codec_context.time_base = millis
        for position, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            if timestamps is not None:
                frame.pts, frame.time_base = round(float(timestamps[position]) * 1000), millis
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))

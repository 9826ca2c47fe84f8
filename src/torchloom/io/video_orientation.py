"""The orientation a video is shown in: its display matrix, as phones record portrait video.

A phone stores the sensor's landscape frames and records, in the stream's display matrix (MP4
``tkhd``, Matroska projection, FFmpeg's ``AV_PKT_DATA_DISPLAYMATRIX``), the turn a player applies.
Players, ffmpeg (``-autorotate``) and torchcodec show the turned frames; this module reads the
matrix (an MP4's or QuickTime's whole, from its track header; a Matroska's or WebM's, from its
track's projection pose; other formats' rotation, as a decoded frame carries it) and turns
``(T, H, W, 3)`` arrays the same way, as :mod:`torchloom.io.orientation` does for a photo's EXIF
orientation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from torchloom.errors import DecodeError
from torchloom.io.files import Inside
from torchloom.io.video_boxes import track_matrix
from torchloom.io.video_ebml import projection_matrix

if TYPE_CHECKING:
    from av.container import InputContainer
    from av.video.frame import VideoFrame
    from av.video.stream import VideoStream


@dataclass(frozen=True)
class DisplayOrientation:
    """The turn from stored to displayed frames, as index operations on ``(.., H, W, C)`` arrays:
    swap rows and columns (``transpose``), then reverse the rows (``flip_rows``) and the columns
    (``flip_columns``). The identity leaves frames as stored.

    Attributes:
        transpose: the displayed frame is the stored one on its side (a 90° or 270° turn).
        flip_rows: the displayed rows run bottom to top.
        flip_columns: the displayed columns run right to left.

    Example:
        >>> import numpy as np
        >>> from torchloom.io import DisplayOrientation
        >>> turn = DisplayOrientation(transpose=True, flip_rows=True)  # a phone held upright
        >>> turn.rotation, turn.apply(np.zeros((2, 4, 6, 3), np.uint8)).shape
        (90, (2, 6, 4, 3))
    """

    transpose: bool = False
    flip_rows: bool = False
    flip_columns: bool = False

    @property
    def rotation(self) -> int:
        """The turn in degrees counter-clockwise (0, 90, 180 or 270) before any mirroring, the
        angle FFmpeg's ``av_display_rotation_get`` and PyAV's ``VideoFrame.rotation`` report."""
        if self.transpose:
            return 90 if self.flip_rows else 270
        return 180 if self.flip_rows else 0

    @property
    def mirrored(self) -> bool:
        """Whether the displayed frame is also mirrored (determinant -1; rare, front cameras)."""
        return self.transpose == (self.flip_rows == self.flip_columns)

    @property
    def is_identity(self) -> bool:
        return not (self.transpose or self.flip_rows or self.flip_columns)

    def displayed_size(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` a stored ``height × width`` frame is shown at."""
        return (width, height) if self.transpose else (height, width)

    def apply(self, frames: np.ndarray) -> np.ndarray:
        """``(.., H, W, C)`` frames as displayed (a view; copy it for a contiguous array)."""
        turned = np.swapaxes(frames, -3, -2) if self.transpose else frames
        if self.flip_rows:
            turned = turned[..., ::-1, :, :]
        if self.flip_columns:
            turned = turned[..., :, ::-1, :]
        return turned


#: Each right-angle turn (degrees counter-clockwise) as index operations.
TURNS = {
    0: DisplayOrientation(),
    90: DisplayOrientation(transpose=True, flip_rows=True),
    180: DisplayOrientation(flip_rows=True, flip_columns=True),
    270: DisplayOrientation(transpose=True, flip_columns=True),
}


def orientation_of_rotation(degrees: int) -> DisplayOrientation | None:
    """The turn of a display matrix that rotates by ``degrees`` counter-clockwise (PyAV's
    ``VideoFrame.rotation``, -180 to 180), or ``None`` for an angle other than a right one (a
    player would resample the frame; no index operation shows it).

    Example:
        >>> orientation_of_rotation(-90)
        DisplayOrientation(transpose=True, flip_rows=False, flip_columns=True)
        >>> orientation_of_rotation(45) is None
        True
    """
    return TURNS.get(degrees % 360)


def orientation_of_matrix(a: int, b: int, c: int, d: int) -> DisplayOrientation | None:
    """The turn, mirroring included, of a display matrix whose entries ``a b / c d`` show a stored
    pixel ``(x, y)`` at ``(a x + c y, b x + d y)`` (an MP4 ``tkhd`` matrix; any scale), or ``None``
    for a matrix that is no right-angle turn or flip.

    Example:
        >>> orientation_of_matrix(-65536, 0, 0, 65536)  # ffmpeg -display_hflip
        DisplayOrientation(transpose=False, flip_rows=False, flip_columns=True)
        >>> orientation_of_matrix(0, 65536, -65536, 0).rotation  # a phone held upright
        270
    """
    if b == c == 0 and a and d:
        return DisplayOrientation(flip_rows=d < 0, flip_columns=a < 0)
    if a == d == 0 and b and c:
        return DisplayOrientation(transpose=True, flip_rows=b < 0, flip_columns=c < 0)
    return None


def frame_orientation(frame: VideoFrame) -> DisplayOrientation | None:
    """The turn the display matrix a decoded frame carries (the stream's, which FFmpeg hands every
    frame) describes; the identity when it has none.

    PyAV reads the matrix's rotation (``av_display_rotation_get``), not its mirroring: a matrix
    that also mirrors (written by no phone, only on request, e.g. ``ffmpeg -display_hflip``) is
    read as its rotation, so MP4, QuickTime, Matroska and WebM files are read with
    :func:`orientation_of_matrix` from their track header or projection pose instead.
    ``VideoFrame.side_data``, which holds the whole matrix, is not used: in PyAV 18 reading it
    leaves DataLoader workers forked afterwards to crash.
    """
    return orientation_of_rotation(int(frame.rotation))


def shown_orientation(
    path: str | os.PathLike[str],
    container: InputContainer,
    stream: VideoStream,
    handle: BinaryIO,
    frame: VideoFrame,
    *,
    inside: Inside = None,
) -> DisplayOrientation:
    """How ``stream``'s frames are shown: an MP4's or QuickTime's whole display matrix from its
    track header, a Matroska's or WebM's from its first video track's projection pose (both read
    through ``handle``, the file the container reads, its position kept: an object's header blocks
    are still held from the open), mirroring included; else the rotation ``frame``, one of its
    decoded frames, carries; a :class:`DecodeError` for a turn no index operation shows."""
    matrix = None
    formats = container.format.name.split(",")
    if _ISO_MEDIA.intersection(formats):
        matrix = track_matrix(handle, track_id=stream.id)
    elif _MATROSKA in formats:
        matrix = projection_matrix(path, inside=inside, handle=handle)
    orientation = orientation_of_matrix(*matrix) if matrix else frame_orientation(frame)
    if orientation is None:
        turn = f"the matrix {matrix}" if matrix else f"a turn of {frame.rotation} degrees"
        raise DecodeError(
            path,
            f"its display matrix shows the frames by {turn}, not a right-angle turn or flip, "
            "which no reader here shows; read the frames as stored with display_rotation=False",
        )
    return orientation


# FFmpeg's names of the ISO base media formats, whose track header holds the display matrix.
_ISO_MEDIA = frozenset({"mov", "mp4"})
# FFmpeg's name of the Matroska demuxer (which reads WebM too).
_MATROSKA = "matroska"

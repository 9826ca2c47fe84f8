"""Read video frames at given times with PyAV (the optional ``video`` extra).

A reader seeks to the keyframe before the first wanted time and decodes forward only as far as
the last one; a wanted time further ahead than :data:`SEEK_AHEAD_SECONDS` is reached by a new
seek. Times are presentation timestamps (``pts × time_base``), so variable-rate files read
correctly: the frame taken for a time ``t`` is the one on screen at ``t``, the last frame whose
timestamp is ``<= t``. Frames come back as RGB ``uint8`` ``(T, H, W, 3)`` arrays, turned as the
display matrix says (a phone's portrait video upright), with the timestamps of the frames taken.
What a file holds (start, frames, duration) is read from its video stream
(:mod:`torchloom.io.video_header`). A corrupt or truncated file raises :class:`DecodeError` naming
it; FIFOs and devices are refused before they are opened. Each call opens the file itself:
nothing is cached between calls, so DataLoader workers share no handles.

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import probe_video, read_frames, write_video
    >>> path = os.path.join(tempfile.mkdtemp(), "clip.avi")
    >>> frames = np.repeat(np.arange(0, 250, 25, dtype=np.uint8), 16 * 16 * 3).reshape(10, 16, 16, 3)
    >>> write_video(path, frames, rate=5)
    >>> header = probe_video(path)
    >>> header.frames, header.rate, header.duration
    (10, 5.0, 2.0)
    >>> clip = read_frames(path, [0.1, 1.5])
    >>> clip.frames.shape, clip.timestamps.tolist()
    ((2, 16, 16, 3), [0.0, 1.4])
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from torchloom.errors import ConfigError, DecodeError
from torchloom.io.files import open_file
from torchloom.io.video_boxes import track_matrix
from torchloom.io.video_header import (
    END_TOLERANCE_FRAMES,
    StreamFacts,
    VideoHeader,
    read_video_header,
    require_av,
    stream_facts,
    stream_time_base,
)
from torchloom.io.video_orientation import DisplayOrientation, frame_orientation, orientation_of_matrix

if TYPE_CHECKING:
    from av.container import InputContainer
    from av.video.frame import VideoFrame
    from av.video.stream import VideoStream

#: A wanted time more than this many seconds past the last decoded frame is reached by seeking
#: again (to the keyframe before it) rather than by decoding every frame in between.
SEEK_AHEAD_SECONDS = 1.0
#: When a seek lands after the wanted time (an imprecise index), the next seek goes back this
#: far, then twice as far, and so on down to the start of the stream.
SEEK_BACKOFF_SECONDS = 1.0
# Seconds given as floats are converted to stream ticks with this much slack (in ticks).
_TICK_SLACK = Fraction(1, 10**6)


@dataclass(frozen=True)
class VideoClip:
    """Decoded frames: RGB ``uint8`` ``(T, H, W, 3)``, each frame's timestamp in seconds, and how
    many frames were decoded to find them (seeking keeps this near ``T`` plus a keyframe interval).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io import read_frames, write_video
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "clip.avi")
        ...     write_video(path, np.zeros((6, 16, 16, 3), np.uint8), rate=3)
        ...     clip = read_frames(path, [0.0, 1.0])
        >>> clip.frames.shape, clip.timestamps.tolist()
        ((2, 16, 16, 3), [0.0, 1.0])
    """

    frames: np.ndarray
    timestamps: np.ndarray
    decoded: int


def probe_video(path: str | os.PathLike[str], *, inside: str | None = None) -> VideoHeader:
    """Read the header of ``path``'s first video stream: duration, rate, frame count, size.

    ``inside``: a real folder the path must resolve into (checked when the file is opened).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io.video_writer import write_video
        >>> path = os.path.join(tempfile.mkdtemp(), "clip.avi")
        >>> write_video(path, np.zeros((4, 16, 32, 3), np.uint8), rate=2)
        >>> header = probe_video(path)
        >>> header.frames, header.height, header.width, header.codec
        (4, 16, 32, 'mpeg4')
    """
    with open_video(path, inside=inside) as container:
        return read_video_header(path, container, video_stream(container, path))


def read_frames(
    path: str | os.PathLike[str],
    times: Sequence[float] | np.ndarray,
    *,
    inside: str | None = None,
    display_rotation: bool = True,
) -> VideoClip:
    """Decode the frames on screen at ``times`` (seconds, any order, repeats allowed).

    The frame for a time ``t`` is the last one whose presentation timestamp is ``<= t`` (the
    first frame for a time before it). Decoding starts at the keyframe before the earliest time,
    never from the start of the file unless that is where the keyframe is (or the format cannot
    be sought exactly: MPEG-PS and MPEG-TS are read from the start, see
    :mod:`torchloom.io.video_header`).

    ``display_rotation``: turn the frames as the stream's display matrix says (default), as
    players show them, so a phone's portrait video comes back upright, ``(T, W, H, 3)`` for frames
    stored ``H × W``; ``False`` returns them as stored. The name follows images'
    ``exif_orientation``: where the turn is recorded, then what it is.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io.video_writer import write_video
        >>> path = os.path.join(tempfile.mkdtemp(), "clip.avi")
        >>> write_video(path, np.zeros((20, 16, 16, 3), np.uint8), rate=10)
        >>> read_frames(path, [1.95, 0.0, 0.42]).timestamps.tolist()
        [1.9, 0.0, 0.4]
    """
    wanted = np.asarray(times, dtype=np.float64)
    if wanted.ndim != 1 or not np.all(np.isfinite(wanted)):
        raise ConfigError(f"times must be a 1-D sequence of finite seconds, got {np.asarray(times)!r}")
    with _open_container(path, inside) as (container, handle):
        stream = video_stream(container, path)
        facts = stream_facts(path, container, stream)
        order = np.argsort(wanted, kind="stable")
        seeker = _FrameSeeker(path, container, stream, facts)
        taken = seeker.take([wanted[i] for i in order])
        orientation = DisplayOrientation()
        if display_rotation and taken:
            orientation = _orientation(path, container, stream, handle, taken[0])
        return _to_clip(path, taken, order, facts, seeker.decoded, orientation)


def frame_timestamps(path: str | os.PathLike[str], *, inside: str | None = None) -> np.ndarray:
    """Decode every frame of ``path`` and return their timestamps (seconds, ``float64``).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io.video_writer import write_video
        >>> path = os.path.join(tempfile.mkdtemp(), "clip.avi")
        >>> write_video(path, np.zeros((3, 16, 16, 3), np.uint8), rate=4)
        >>> frame_timestamps(path).tolist()
        [0.0, 0.25, 0.5]
    """
    with open_video(path, inside=inside) as container:
        stream = video_stream(container, path)
        time_base = stream_time_base(path, stream)
        return np.array([float(_pts(path, frame) * time_base) for frame in container.decode(stream)])


def verify_video(path: str | os.PathLike[str], *, inside: str | None = None) -> VideoHeader:
    """:func:`probe_video`, then decode every frame: a :class:`DecodeError` when a packet does not
    decode or the frames end before the last one the header declares (a truncated file).

    Costs a whole decode, where :func:`probe_video` reads the header only.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io.video_writer import write_video
        >>> path = os.path.join(tempfile.mkdtemp(), "clip.mkv")
        >>> noise = np.random.default_rng(0).integers(0, 256, (30, 32, 32, 3), dtype=np.uint8)
        >>> write_video(path, noise, rate=10)
        >>> data = open(path, "rb").read()
        >>> _ = open(path, "wb").write(data[: len(data) // 2])
        >>> try:
        ...     verify_video(path)
        ... except DecodeError as error:
        ...     print("truncated" in str(error))
        True
    """
    header = probe_video(path, inside=inside)
    stamps = frame_timestamps(path, inside=inside)
    last_slot = float(slot_times(header.start, header.rate, np.array([header.frames - 1]))[0])
    if not len(stamps):
        raise DecodeError(path, "no frame decodes")
    check_reaches(path, float(stamps[-1]), last_slot, header.rate)
    return header


def slot_times(start: float | np.ndarray, rate: float | np.ndarray, slots: np.ndarray) -> np.ndarray:
    """The times (seconds) of frame slots: slot ``i`` at ``start + (i + 0.5) / rate``, mid-way
    through frame ``i`` of a constant-rate stream, so rounding never picks its neighbour.

    Example:
        >>> slot_times(0.0, 10.0, np.array([0, 5])).tolist()
        [0.05, 0.55]
    """
    times: np.ndarray = start + (slots + 0.5) / rate
    return times


def check_reaches(path: str | os.PathLike[str], last: float, wanted: float, rate: float) -> None:
    """Raise :class:`DecodeError` (truncated) when a stream whose last frame is at ``last``
    seconds cannot show the frame wanted at ``wanted`` (more than a couple of frames later)."""
    if wanted > last + END_TOLERANCE_FRAMES / rate:
        raise DecodeError(
            path,
            f"the video ends at {last:.3f} s, before the frame wanted at {wanted:.3f} s that its header "
            "promises: the file is truncated",
        )


@contextlib.contextmanager
def open_video(path: str | os.PathLike[str], *, inside: str | None = None) -> Iterator[InputContainer]:
    """Open ``path`` with PyAV, handing it the file object the file layer opened and checked (a
    FIFO or a device refused, confined to ``inside``); PyAV's errors, inside the ``with`` block
    too, become :class:`DecodeError` naming the file."""
    with _open_container(path, inside) as (container, _):
        yield container


@contextlib.contextmanager
def _open_container(
    path: str | os.PathLike[str], inside: str | None
) -> Iterator[tuple[InputContainer, BinaryIO]]:
    av = require_av()
    with open_file(path, inside=inside) as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            raise DecodeError(path, "file is empty (0 bytes)")
        try:
            with av.open(handle, mode="r", metadata_errors="ignore") as container:
                yield container, handle
        except av.error.FFmpegError as exc:
            raise DecodeError(path, f"{type(exc).__name__}: {exc.strerror or exc}") from exc


def video_stream(container: InputContainer, path: str | os.PathLike[str]) -> VideoStream:
    """The first video stream of ``container``, or a :class:`DecodeError` when it has none."""
    if not container.streams.video:
        raise DecodeError(path, "the file holds no video stream")
    return container.streams.video[0]


def _pts(path: str | os.PathLike[str], frame: VideoFrame) -> int:
    pts = frame.pts if frame.pts is not None else frame.dts
    if pts is None:
        raise DecodeError(path, "a decoded frame carries no timestamp")
    return int(pts)


class _FrameSeeker:
    """Finds the frames on screen at sorted wanted times: seek, decode forward, seek again when far."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        container: InputContainer,
        stream: VideoStream,
        facts: StreamFacts,
    ) -> None:
        self.path = path
        self.container = container
        self.stream = stream
        self.time_base = facts.time_base
        self.start = facts.start_ticks
        # Where a seek is not to be trusted, every frame is decoded in one pass from the start.
        self.ahead: float = self._ticks(SEEK_AHEAD_SECONDS) if facts.seekable else math.inf
        self.rate = facts.rate
        self.fresh = True  # nothing decoded yet: the demuxer is at the start of the stream
        self.decoded = 0

    def _ticks(self, seconds: float) -> int:
        return max(1, math.ceil(Fraction(seconds) / self.time_base))

    def take(self, times: list[float]) -> list[VideoFrame]:
        # A time a float's rounding error below a frame's timestamp still takes that frame.
        wanted = [math.floor(Fraction(t) / self.time_base + _TICK_SLACK) for t in times]
        taken: list[VideoFrame] = []
        while len(taken) < len(wanted):
            self._run(wanted, taken)
        return taken

    def _run(self, wanted: list[int], taken: list[VideoFrame]) -> None:
        """Seek before ``wanted[len(taken)]`` and take frames until the next wanted time is far."""
        target = wanted[len(taken)]
        back = 0
        while True:
            from_start = target - back <= self.start
            if self.fresh and (from_start or target - self.start <= self.ahead):
                from_start = True  # decode from where the demuxer already is
            elif from_start:
                self.container.seek(self.start, stream=self.stream, backward=True)
            else:
                self.container.seek(target - back, stream=self.stream, backward=True)
            self.fresh = False
            if self._decode_forward(wanted, taken, from_start):
                return
            back = max(2 * back, self._ticks(SEEK_BACKOFF_SECONDS))

    def _decode_forward(self, wanted: list[int], taken: list[VideoFrame], from_start: bool) -> bool:
        """Take frames decoded from the current position; False when it lies past the wanted time."""
        previous: VideoFrame | None = None
        began = len(taken)
        for frame in self.container.decode(self.stream):
            self.decoded += 1
            pts = _pts(self.path, frame)
            if previous is None and pts > wanted[len(taken)] and not from_start:
                return False  # the seek landed after the wanted time: go further back
            while len(taken) < len(wanted) and wanted[len(taken)] < pts:
                taken.append(previous if previous is not None else frame)
            if len(taken) == len(wanted):
                return True
            previous = frame
            if len(taken) > began and wanted[len(taken)] - pts > self.ahead:
                return True  # far ahead: the caller seeks again
        if previous is None:
            raise DecodeError(self.path, f"no frame decodes from {self._seconds(wanted[len(taken)])} s on")
        last = self._seconds(_pts(self.path, previous))
        check_reaches(self.path, last, self._seconds(wanted[-1]), self.rate)
        taken.extend([previous] * (len(wanted) - len(taken)))
        return True

    def _seconds(self, ticks: int) -> float:
        return float(ticks * self.time_base)


def _to_clip(
    path: str | os.PathLike[str],
    taken: list[VideoFrame],
    order: np.ndarray,
    facts: StreamFacts,
    decoded: int,
    orientation: DisplayOrientation,
) -> VideoClip:
    """Frames in sorted order as RGB arrays back in the caller's order (each frame converted once),
    turned by ``orientation``."""
    height, width = orientation.displayed_size(facts.height, facts.width)
    frames = np.empty((len(taken), height, width, 3), dtype=np.uint8)
    timestamps = np.empty(len(taken), dtype=np.float64)
    converted: dict[int, tuple[np.ndarray, float]] = {}
    for frame, position in zip(taken, order.tolist(), strict=True):
        found = converted.get(id(frame))
        if found is None:
            array = orientation.apply(
                frame.to_ndarray(format="rgb24", width=facts.width, height=facts.height)
            )
            found = converted[id(frame)] = (array, float(_pts(path, frame) * facts.time_base))
        frames[position], timestamps[position] = found
    return VideoClip(frames, timestamps, decoded)


def _orientation(
    path: str | os.PathLike[str],
    container: InputContainer,
    stream: VideoStream,
    handle: BinaryIO,
    frame: VideoFrame,
) -> DisplayOrientation:
    """How the stream's frames are shown: an MP4's or QuickTime's whole display matrix from its
    track header (mirroring included), else the rotation every decoded frame carries."""
    matrix = None
    if _ISO_MEDIA.intersection(container.format.name.split(",")):
        matrix = track_matrix(handle.fileno(), track_id=stream.id)
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

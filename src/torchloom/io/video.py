"""Read video frames at given times with PyAV (the optional ``video`` extra).

A reader seeks to the keyframe before the first wanted time and decodes forward only as far as
the last one; a wanted time further ahead than :data:`~torchloom.io.video_seek.SEEK_AHEAD_SECONDS`
is reached by a new seek. Times are presentation timestamps (``pts × time_base``): the frame taken
for a time ``t`` is the one on screen at ``t``, the last frame whose timestamp is ``<= t``;
:func:`read_frame_numbers` takes frames by number instead, which reaches every frame of a
variable-rate file. Frames come back as RGB ``uint8`` ``(T, H, W, 3)`` arrays, turned as the
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
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from torchloom.errors import ConfigError, DecodeError
from torchloom.io.files import Inside, open_file
from torchloom.io.video_header import (
    PacketScan,
    StreamFacts,
    VideoHeader,
    read_video_header,
    require_av,
    slot_times,
    stream_facts,
    stream_time_base,
)
from torchloom.io.video_orientation import DisplayOrientation, shown_orientation
from torchloom.io.video_seek import (
    FrameSeeker,
    check_reaches,
    frame_pts,
)

if TYPE_CHECKING:
    from av.container import InputContainer
    from av.video.frame import VideoFrame
    from av.video.stream import VideoStream


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


def probe_video(path: str | os.PathLike[str], *, inside: Inside = None) -> VideoHeader:
    """Read the header of ``path``'s first video stream: duration, rate, frame count, size.

    ``inside``: a real folder the path must resolve into (checked when the file is opened), or
    the :class:`~torchloom.io.ObjectRoot` a URL is read from (an MP4's header in one or two
    ranged GETs, at its start or its end).

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
    inside: Inside = None,
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

    def at_times(
        container: InputContainer, stream: VideoStream, facts: StreamFacts, ordered: list[float]
    ) -> _Taken:
        seeker = FrameSeeker(path, container, stream, facts)
        return seeker.take([seeker.ticks_of(t) for t in ordered]), seeker.decoded

    return _decode_clip(path, inside, wanted, display_rotation, at_times)


def read_frame_numbers(
    path: str | os.PathLike[str],
    numbers: Sequence[int] | np.ndarray,
    *,
    inside: Inside = None,
    display_rotation: bool = True,
    frame_ticks: np.ndarray | None = None,
) -> VideoClip:
    """Decode frames by number (any order, repeats allowed): frame ``n`` is the ``n``-th frame the
    stream presents, counted from 0, as torchcodec and decord index frames.

    For a stream off the time grid (``VideoHeader.on_grid`` False: a variable frame rate, or an
    MPEG program or transport stream) this is how every frame is reached: a seekable file's
    packets are read (not decoded) to find frame ``n``'s timestamp, then it is read as
    :func:`read_frames` reads a time; a stream read from the start takes the ``n``-th frame the
    decoder gives. A number past the stream's frames is a :class:`DecodeError` (truncated).
    ``display_rotation`` as for :func:`read_frames`. ``frame_ticks``: the stream's frame
    timestamps a probe found (``VideoHeader.frame_ticks``, which
    :class:`~torchloom.datasets.VideoClipDataset` keeps): a seekable file's packets are then not
    read, each frame sought at its timestamp.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io.video_writer import write_video
        >>> path = os.path.join(tempfile.mkdtemp(), "clip.mkv")
        >>> write_video(path, np.zeros((8, 16, 16, 3), np.uint8), rate=4)
        >>> read_frame_numbers(path, [7, 0, 3]).timestamps.tolist()
        [1.75, 0.0, 0.75]
    """
    wanted = np.asarray(numbers)
    if wanted.ndim != 1 or wanted.dtype.kind not in "iu" or (wanted.size and wanted.min() < 0):
        raise ConfigError(
            f"numbers must be a 1-D sequence of frame numbers >= 0, got {np.asarray(numbers)!r}"
        )
    if frame_ticks is not None and (frame_ticks.ndim != 1 or frame_ticks.dtype.kind not in "iu"):
        raise ConfigError(f"frame_ticks must be a 1-D array of integer ticks, got {frame_ticks!r}")

    def by_number(
        container: InputContainer, stream: VideoStream, facts: StreamFacts, ordered: list[int]
    ) -> _Taken:
        if not facts.seekable:
            return _in_presented_order(path, container, stream, ordered)
        ticks = frame_ticks
        if ticks is None:
            scan = PacketScan(stream, facts, scan_all=True)
            scan.read(container)
            ticks = scan.ticks
        _check_count(path, len(ticks), ordered)
        seeker = FrameSeeker(path, container, stream, facts, fresh=frame_ticks is not None)
        return seeker.take([int(ticks[n]) for n in ordered]), seeker.decoded

    return _decode_clip(path, inside, wanted, display_rotation, by_number)


_Taken = tuple[list["VideoFrame"], int]  # frames in sorted order, and how many were decoded


def _decode_clip(
    path: str | os.PathLike[str],
    inside: Inside,
    wanted: np.ndarray,
    display_rotation: bool,
    take: Callable[[InputContainer, VideoStream, StreamFacts, list[Any]], _Taken],
) -> VideoClip:
    """The frames ``take`` finds for ``wanted`` (handed sorted), back in the caller's order."""
    with _open_container(path, inside) as (container, handle):
        stream = video_stream(container, path)
        facts = stream_facts(path, container, stream)
        order = np.argsort(wanted, kind="stable")
        taken, decoded = take(container, stream, facts, [wanted[i].item() for i in order])
        orientation = _shown(path, inside, container, stream, handle, taken if display_rotation else [])
        return _to_clip(path, taken, order, facts, decoded, orientation)


def _check_count(path: str | os.PathLike[str], count: int, ordered: list[int]) -> None:
    if ordered and ordered[-1] >= count:
        raise DecodeError(
            path,
            f"the stream shows {count} frames, fewer than frame {ordered[-1]} wanted: the file is truncated",
        )


def _in_presented_order(
    path: str | os.PathLike[str], container: InputContainer, stream: VideoStream, ordered: list[int]
) -> tuple[list[VideoFrame], int]:
    """The frames numbered ``ordered`` (sorted) in the order the decoder presents them, from the
    start; and how many were decoded."""
    taken: list[VideoFrame] = []
    decoded = 0
    for frame in container.decode(stream):
        while len(taken) < len(ordered) and ordered[len(taken)] == decoded:
            taken.append(frame)
        decoded += 1
        if len(taken) == len(ordered):
            return taken, decoded
    _check_count(path, decoded, ordered)
    return taken, decoded


def frame_timestamps(path: str | os.PathLike[str], *, inside: Inside = None) -> np.ndarray:
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
        return np.array([float(frame_pts(path, frame) * time_base) for frame in container.decode(stream)])


def verify_video(path: str | os.PathLike[str], *, inside: Inside = None) -> VideoHeader:
    """:func:`probe_video`, then decode every frame: a :class:`DecodeError` when a packet does not
    decode or the frames end before the last one the header declares (a truncated file).

    For a stream off the time grid (``VideoHeader.on_grid`` False), the frames decoded are counted
    against the header's count instead of placed on the grid. Costs a whole decode, where
    :func:`probe_video` reads the header only.

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
    if not len(stamps):
        raise DecodeError(path, "no frame decodes")
    if not header.on_grid:
        if len(stamps) < header.frames:
            raise DecodeError(
                path,
                f"{len(stamps)} frames decode of the {header.frames} its packets hold: the file is "
                "truncated or corrupt",
            )
        return header
    last_slot = float(slot_times(header.start, header.rate, np.array([header.frames - 1]))[0])
    check_reaches(path, float(stamps[-1]), last_slot, header.rate)
    return header


@contextlib.contextmanager
def open_video(path: str | os.PathLike[str], *, inside: Inside = None) -> Iterator[InputContainer]:
    """Open ``path`` with PyAV, handing it the file object the file layer opened and checked (a
    FIFO or a device refused, confined to ``inside``); PyAV's errors, inside the ``with`` block
    too, become :class:`DecodeError` naming the file."""
    with _open_container(path, inside) as (container, _):
        yield container


@contextlib.contextmanager
def _open_container(
    path: str | os.PathLike[str], inside: Inside
) -> Iterator[tuple[InputContainer, BinaryIO]]:
    av = require_av()
    with open_file(path, inside=inside) as handle:
        # A read rather than fstat: an object has no descriptor, and its first block is what
        # the demuxer reads first anyway.
        if not handle.read(1):
            raise DecodeError(path, "file is empty (0 bytes)")
        handle.seek(0)
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
            found = converted[id(frame)] = (array, float(frame_pts(path, frame) * facts.time_base))
        frames[position], timestamps[position] = found
    return VideoClip(frames, timestamps, decoded)


def _shown(
    path: str | os.PathLike[str],
    inside: Inside,
    container: InputContainer,
    stream: VideoStream,
    handle: BinaryIO,
    taken: list[VideoFrame],
) -> DisplayOrientation:
    """The turn the frames ``taken`` are shown with; the identity where none is to be applied."""
    if not taken:
        return DisplayOrientation()
    return shown_orientation(path, container, stream, handle, taken[0], inside=inside)

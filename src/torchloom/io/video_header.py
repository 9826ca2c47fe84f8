"""What a video's first video stream holds, taken from the stream itself: its frames' timestamps
and packets, not the container's duration (which covers every stream, an audio track that runs on
included, and in MPEG program and transport streams is a bit-rate estimate).

- Start: the stream's first presentation time (a Matroska or WebM file cut from a recording
  starts seconds after 0).
- Frames: the count the stream declares (MP4, AVI) less the packets an edit list skips (what
  ``ffmpeg -ss T -c copy`` writes: the frames from the keyframe before ``T`` are stored, flagged
  to be discarded); where none is declared (Matroska, WebM), its packets counted (a read of every
  packet, not a decode: the file's bytes once).
- On the grid or not (``on_grid``): a stream whose frame ``i`` is the one on screen at
  ``start + (i + 0.5) / rate`` for every ``i`` is read by time on that grid; one whose timestamps
  leave frames off it (a variable frame rate: a phone's or a screen recording's) is read by frame
  number, frame ``i`` the ``i``-th it presents, as torchcodec and decord index frames. Known from
  the packets' timestamps where they are read; a stream that declares a count is taken to be on
  the grid unless its average rate and its timestamps' base rate disagree.
- Formats with no seek index whose timestamps may jump (MPEG-PS, MPEG-TS: FFmpeg's
  ``AVFMT_TS_DISCONT``) are not ``seekable``: a seek there lands somewhere near the time, and the
  timestamps the demuxer gives after it differ from those of a read from the start (an MPEG-2
  program stream may even repeat two), so their packets are counted from the start and their
  frames read from the start by number, in the order the decoder presents them.

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import probe_video, write_video
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "clip.mkv")
    ...     write_video(path, np.zeros((6, 16, 16, 3), np.uint8), rate=3, codec="libx264")
    ...     header = probe_video(path)
    >>> header.frames, header.duration, header.seekable, header.on_grid
    (6, 2.0, True, True)
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from fractions import Fraction
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from torchloom.errors import DecodeError, install_hint
from torchloom.io.image import DEFAULT_MAX_PIXELS

if TYPE_CHECKING:
    from collections.abc import Iterator

    from av.container import InputContainer
    from av.packet import Packet
    from av.video.stream import VideoStream

#: FFmpeg's ``AVFMT_TS_DISCONT``: the format has no seek index and its timestamps may jump.
TS_DISCONT_FLAG = 0x200
#: Packets read from the start for an edit list's discarded packets, at most (they lie within the
#: first keyframe interval).
LEAD_PACKETS = 512
#: Average and base frame rates further apart than this (relative) mark a stream whose declared
#: count does not say it is on the grid: its packets' timestamps are read to tell.
RATE_TOLERANCE = 0.01
#: A stream that ends this many frame periods before the container's declared duration (every
#: stream of it) means the file holds less than its header declares: it is truncated.
END_TOLERANCE_FRAMES = 2


def require_av() -> ModuleType:
    """The PyAV module, or an ImportError saying how to install it."""
    try:
        return importlib.import_module("av")
    except ImportError as exc:
        raise ImportError(f"reading video needs PyAV: {install_hint('av', 'video')}") from exc


@dataclass(frozen=True)
class VideoHeader:
    """What a video's first video stream holds, read without decoding it.

    ``frames`` is the stream's frame count: declared (less an edit list's skipped frames) or
    counted from its packets, never estimated from a duration (``frames_known`` is always True;
    kept for older callers). Times are in seconds; ``start`` is the stream's first presentation time.
    ``height`` and ``width`` are the stored frames' (read_frames turns them as the display matrix
    says). ``seekable`` is False for formats whose frames are read from the start; ``on_grid`` is
    False for a stream read by frame number rather than by time
    (:func:`~torchloom.io.read_frame_numbers`; :mod:`torchloom.io.video_header`'s notes).
    ``frame_ticks`` holds the shown frames' presentation timestamps (``int64`` stream ticks of
    ``time_base``, sorted) where the probe read every packet, else None: handed to
    :func:`~torchloom.io.read_frame_numbers`, they spare it a read of every packet.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io import probe_video, write_video
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "clip.avi")
        ...     write_video(path, np.zeros((6, 16, 16, 3), np.uint8), rate=3)
        ...     header = probe_video(path)
        >>> header.frames, header.rate, header.duration, header.frames_known
        (6, 3.0, 2.0, True)
    """

    duration: float
    start: float
    rate: float
    frames: int
    frames_known: bool
    height: int
    width: int
    time_base: Fraction
    codec: str
    seekable: bool = True
    on_grid: bool = True
    frame_ticks: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class StreamFacts:
    """What reading frames needs of a stream, all from its header: no packet is read."""

    time_base: Fraction
    rate: float
    start_ticks: int
    height: int
    width: int
    seekable: bool

    @property
    def period(self) -> int:
        """One frame period in ticks (at least one)."""
        return max(1, round(1 / (self.rate * self.time_base)))


def stream_time_base(path: str | os.PathLike[str], stream: VideoStream) -> Fraction:
    if not stream.time_base:
        raise DecodeError(path, "the video stream declares no time base")
    return Fraction(stream.time_base)


def stream_facts(path: str | os.PathLike[str], container: InputContainer, stream: VideoStream) -> StreamFacts:
    """The stream's time base, rate, start and size, checked: a :class:`DecodeError` naming the
    file where the header declares no usable video or frames larger than the pixel guard."""
    time_base = stream_time_base(path, stream)
    rate_value = stream.average_rate or stream.guessed_rate or stream.base_rate
    rate = float(rate_value) if rate_value else 0.0
    if not rate > 0 and stream.frames and stream.duration:
        rate = stream.frames / float(stream.duration * time_base)
    height, width = stream.codec_context.height, stream.codec_context.width
    if not (rate > 0 and height > 0 and width > 0):
        raise DecodeError(
            path, f"the header declares no usable video (rate {rate}, {width}x{height}){_REMUX}"
        )
    if height * width > DEFAULT_MAX_PIXELS:
        guard = f"{DEFAULT_MAX_PIXELS:,} pixels"
        raise DecodeError(path, f"frames of {width}x{height} are larger than the pixel guard ({guard})")
    seekable = not container.format.flags & TS_DISCONT_FLAG
    return StreamFacts(time_base, rate, int(stream.start_time or 0), height, width, seekable)


_REMUX = "; remux it (e.g. ffmpeg -i IN -c copy OUT.mkv) or drop it"


def read_video_header(
    path: str | os.PathLike[str], container: InputContainer, stream: VideoStream
) -> VideoHeader:
    """The header of ``stream`` (module docstring), from a container just opened: reads the first
    packets, or every packet where the header does not tell the count and the grid (the container
    is left wherever that ends)."""
    facts = stream_facts(path, container, stream)
    declared, declared_ticks = int(stream.frames or 0), int(stream.duration or 0)
    scan_all = not (facts.seekable and declared and declared_ticks) or _rates_disagree(stream)
    scan = PacketScan(stream, facts, scan_all=scan_all)
    scan.read(container)
    on_grid = facts.seekable
    if scan_all:
        frames, end = scan.counted, scan.end
        if facts.seekable and not (declared and declared_ticks):
            _check_not_cut(path, container, facts, scan)
        on_grid = on_grid and frames_on_grid(scan.ticks, facts)
    else:
        frames, end = declared - scan.discarded, facts.start_ticks + declared_ticks
    duration = float((end - facts.start_ticks) * facts.time_base) if end is not None else 0.0
    if not (duration > 0 and frames > 0):
        raise DecodeError(
            path, f"the video stream holds no frames (duration {duration} s, {frames} frames){_REMUX}"
        )
    start = float(facts.start_ticks * facts.time_base)
    return VideoHeader(
        duration, start, facts.rate, frames, True, facts.height, facts.width, facts.time_base,
        stream.codec_context.name, facts.seekable, on_grid, scan.ticks if scan_all else None,
    )  # fmt: skip


def slot_times(start: float | np.ndarray, rate: float | np.ndarray, slots: np.ndarray) -> np.ndarray:
    """The times (seconds) of frame slots: slot ``i`` at ``start + (i + 0.5) / rate``, mid-way
    through frame ``i`` of a constant-rate stream, so rounding never picks its neighbour.

    Example:
        >>> slot_times(0.0, 10.0, np.array([0, 5])).tolist()
        [0.05, 0.55]
    """
    times: np.ndarray = start + (slots + 0.5) / rate
    return times


def frames_on_grid(ticks: np.ndarray, facts: StreamFacts) -> bool:
    """Whether slot ``i`` of the time grid (:func:`slot_times`) shows frame ``i`` for each of the
    frames presented at ``ticks`` (sorted): no frame skipped, none taken twice."""
    count = len(ticks)
    if count == 0 or np.any(np.diff(ticks) <= 0):
        return False  # repeated timestamps: two frames no time tells apart
    start = float(facts.start_ticks * facts.time_base)
    slots = np.floor(slot_times(start, facts.rate, np.arange(count)) / float(facts.time_base) + 1e-6)
    shown = np.searchsorted(ticks, slots.astype(np.int64), side="right") - 1
    return bool(np.array_equal(shown, np.arange(count)))


def _rates_disagree(stream: VideoStream) -> bool:
    average, base = stream.average_rate, stream.base_rate
    return bool(average and base and abs(float(average) / float(base) - 1) > RATE_TOLERANCE)


class PacketScan:
    """The packets of a stream read from its start, without decoding: those an edit list
    discards, and, with ``scan_all``, every packet to the end (every stream's, to tell where the
    file ends), the shown frames' timestamps in :attr:`ticks` (sorted)."""

    def __init__(self, stream: VideoStream, facts: StreamFacts, *, scan_all: bool) -> None:
        self.stream, self.start_ticks, self.scan_all = stream, facts.start_ticks, scan_all
        self.period = facts.period
        self.discarded = self.counted = 0
        self.end: int | None = None
        self.others_end = Fraction(0)  # seconds: where the file's other streams end
        self._ticks: list[int] = []

    @property
    def ticks(self) -> np.ndarray:
        """The presentation timestamps of the frames shown (not discarded), sorted."""
        return np.sort(np.array(self._ticks, dtype=np.int64))

    def read(self, container: InputContainer) -> None:
        packets: Iterator[Packet] = container.demux() if self.scan_all else container.demux(self.stream)
        for number, packet in enumerate(packets):
            if packet.size == 0:
                continue  # the flush packet at the end
            if packet.stream is not self.stream:
                if packet.pts is not None and packet.time_base and not packet.is_discard:
                    stop = (packet.pts + int(packet.duration or 0)) * Fraction(packet.time_base)
                    self.others_end = max(self.others_end, stop)
                continue
            self._count(packet)
            past_discards = packet.dts is None or packet.dts >= self.start_ticks
            if not self.scan_all and (past_discards or number >= LEAD_PACKETS):
                return

    def _count(self, packet: Packet) -> None:
        if packet.is_discard:
            self.discarded += 1
            return
        self.counted += 1
        self.end = _packet_end(packet, self.end, self.period)
        if self.scan_all and packet.pts is not None:
            self._ticks.append(int(packet.pts))


def _packet_end(packet: Packet, end: int | None, period: int) -> int | None:
    """The later of ``end`` and the tick ``packet``'s frame stops being shown (``period`` ticks on,
    where the packet declares no duration)."""
    if packet.pts is None:
        return end
    stop = packet.pts + (int(packet.duration or 0) or period)
    return stop if end is None else max(end, stop)


def _check_not_cut(
    path: str | os.PathLike[str], container: InputContainer, facts: StreamFacts, scan: PacketScan
) -> None:
    """Where every stream of the file stops well before the duration the container declares, the
    file was cut: a DecodeError."""
    declared = Fraction(int(container.duration or 0), 1_000_000)  # AV_TIME_BASE: microseconds
    last = scan.others_end
    if scan.end is not None:
        last = max(last, scan.end * facts.time_base)
    if declared and last + Fraction(END_TOLERANCE_FRAMES) / Fraction(facts.rate) < declared:
        raise DecodeError(
            path,
            f"its streams end at {float(last):.3f} s, before the {float(declared):.3f} s its header "
            "declares: "
            "the file is truncated",
        )

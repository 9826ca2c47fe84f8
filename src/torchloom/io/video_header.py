"""What a video's first video stream holds, taken from the stream itself: its frames' timestamps
and packets, not the container's duration (which covers every stream, an audio track that runs on
included, and in MPEG program and transport streams is a bit-rate estimate).

- Start: the stream's first presentation time (a Matroska or WebM file cut from a recording
  starts seconds after 0).
- Frames: the count the stream declares (MP4, AVI) less the packets an edit list skips (what
  ``ffmpeg -ss T -c copy`` writes: the frames from the keyframe before ``T`` are stored, flagged
  to be discarded); where none is declared, the stream's own duration × rate, its end taken from
  its last packets (a seek to its last keyframe, then its packets to the end).
- Formats with no seek index whose timestamps may jump (MPEG-PS, MPEG-TS: FFmpeg's
  ``AVFMT_TS_DISCONT``) are not ``seekable``: a seek there lands somewhere near the time, and the
  timestamps the demuxer gives after it differ from those of a read from the start, so their
  packets are counted from the start and their frames read from the start.

Example:
    >>> import numpy as np, os, tempfile
    >>> from torchloom.io import probe_video, write_video
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "clip.mkv")
    ...     write_video(path, np.zeros((6, 16, 16, 3), np.uint8), rate=3, codec="libx264")
    ...     header = probe_video(path)
    >>> header.frames, header.duration, header.frames_known, header.seekable
    (6, 2.0, False, True)
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
from dataclasses import dataclass
from fractions import Fraction
from types import ModuleType
from typing import TYPE_CHECKING

from torchloom.errors import DecodeError, install_hint
from torchloom.io.image import DEFAULT_MAX_PIXELS

if TYPE_CHECKING:
    from av.container import InputContainer
    from av.packet import Packet
    from av.video.stream import VideoStream

#: FFmpeg's ``AVFMT_TS_DISCONT``: the format has no seek index and its timestamps may jump.
TS_DISCONT_FLAG = 0x200
#: Packets read from the start for an edit list's discarded packets, at most (they lie within the
#: first keyframe interval).
LEAD_PACKETS = 512
#: A stream that ends this many frame periods before the container's declared duration (every
#: stream of it) means the file holds less than its header declares: it is truncated.
END_TOLERANCE_FRAMES = 2
# Where no container duration bounds the stream, its tail is sought from this tick on.
_FAR_TICKS = 1 << 62


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
    counted from its packets (``frames_known``), else ``round(duration × rate)`` with the duration
    the stream's own. Times are in seconds; ``start`` is the stream's first presentation time.
    ``height`` and ``width`` are the stored frames' (read_frames turns them as the display matrix
    says, which only a decoded frame tells). ``seekable`` is False for formats whose frames are
    read from the start (:mod:`torchloom.io.video_header`'s notes).

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
    packets, then, where the stream declares no duration, its last ones (the container is left
    wherever that ends)."""
    facts = stream_facts(path, container, stream)
    lead = _Lead(stream, facts, scan_all=not facts.seekable)
    lead.read(container)
    if not facts.seekable:
        frames, known, end = lead.counted, True, lead.end
    else:
        if stream.duration:
            end = facts.start_ticks + int(stream.duration)
        else:
            end = _tail_end(path, container, stream, facts, lead.end)
        frames = int(stream.frames) - lead.discarded if stream.frames else 0
        known = frames > 0
    duration = float((end - facts.start_ticks) * facts.time_base) if end is not None else 0.0
    if not known:
        frames = round(duration * facts.rate)
    if not (duration > 0 and frames > 0):
        raise DecodeError(
            path, f"the video stream holds no frames (duration {duration} s, {frames} frames){_REMUX}"
        )
    start = float(facts.start_ticks * facts.time_base)
    return VideoHeader(
        duration, start, facts.rate, frames, known, facts.height, facts.width, facts.time_base,
        stream.codec_context.name, facts.seekable,
    )  # fmt: skip


class _Lead:
    """The packets of a stream read from its start: those an edit list discards, and, with
    ``scan_all``, every packet counted to the end."""

    def __init__(self, stream: VideoStream, facts: StreamFacts, *, scan_all: bool) -> None:
        self.stream, self.start_ticks, self.scan_all = stream, facts.start_ticks, scan_all
        self.period = facts.period
        self.discarded = self.counted = 0
        self.end: int | None = None

    def read(self, container: InputContainer) -> None:
        for number, packet in enumerate(container.demux(self.stream)):
            if packet.size == 0:
                continue  # the flush packet at the end
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


def _packet_end(packet: Packet, end: int | None, period: int) -> int | None:
    """The later of ``end`` and the tick ``packet``'s frame stops being shown (``period`` ticks on,
    where the packet declares no duration)."""
    if packet.pts is None:
        return end
    stop = packet.pts + (int(packet.duration or 0) or period)
    return stop if end is None else max(end, stop)


def _tail_end(
    path: str | os.PathLike[str],
    container: InputContainer,
    stream: VideoStream,
    facts: StreamFacts,
    end: int | None,
) -> int | None:
    """The tick the stream's last frame stops being shown: its packets from the last keyframe on.
    The other streams' packets there say whether the file holds what its header declares: where
    all of them stop well before the declared duration, the file was cut (a DecodeError)."""
    declared = Fraction(int(container.duration or 0), 1_000_000)  # AV_TIME_BASE: microseconds
    far = math.ceil((declared + Fraction(int(container.start_time or 0), 1_000_000)) / facts.time_base) + 1
    av = require_av()
    with contextlib.suppress(av.error.FFmpegError):  # no seek: read on to the end from where it is
        container.seek(far if declared else _FAR_TICKS, stream=stream, backward=True)
    last = Fraction(0)
    for packet in container.demux():
        if not packet.size or packet.is_discard:
            continue
        if packet.stream is stream:
            end = _packet_end(packet, end, facts.period)
        elif packet.pts is not None and packet.time_base:
            last = max(last, (packet.pts + int(packet.duration or 0)) * Fraction(packet.time_base))
    if end is not None:
        last = max(last, end * facts.time_base)
    if declared and last + Fraction(END_TOLERANCE_FRAMES) / Fraction(facts.rate) < declared:
        raise DecodeError(
            path,
            f"its streams end at {float(last):.3f} s, before the {float(declared):.3f} s its header "
            "declares: "
            "the file is truncated",
        )
    return end

"""Finding the frames on screen at given times in a stream: seek to the keyframe before the first,
decode forward, seek again when the next is far (:func:`torchloom.io.read_frames`)."""

from __future__ import annotations

import math
import os
from fractions import Fraction
from typing import TYPE_CHECKING

from torchloom.errors import DecodeError
from torchloom.io.video_header import END_TOLERANCE_FRAMES, StreamFacts

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


def check_reaches(path: str | os.PathLike[str], last: float, wanted: float, rate: float) -> None:
    """Raise :class:`DecodeError` (truncated) when a stream whose last frame is at ``last``
    seconds cannot show the frame wanted at ``wanted`` (more than a couple of frames later)."""
    if wanted > last + END_TOLERANCE_FRAMES / rate:
        raise DecodeError(
            path,
            f"the video ends at {last:.3f} s, before the frame wanted at {wanted:.3f} s that its header "
            "promises: the file is truncated",
        )


def frame_pts(path: str | os.PathLike[str], frame: VideoFrame) -> int:
    pts = frame.pts if frame.pts is not None else frame.dts
    if pts is None:
        raise DecodeError(path, "a decoded frame carries no timestamp")
    return int(pts)


class FrameSeeker:
    """Finds the frames on screen at sorted wanted times: seek, decode forward, seek again when far."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        container: InputContainer,
        stream: VideoStream,
        facts: StreamFacts,
        *,
        fresh: bool = True,
    ) -> None:
        self.path = path
        self.container = container
        self.stream = stream
        self.time_base = facts.time_base
        self.start = facts.start_ticks
        # Where a seek is not to be trusted, every frame is decoded in one pass from the start.
        self.ahead: float = self._ticks(SEEK_AHEAD_SECONDS) if facts.seekable else math.inf
        self.rate = facts.rate
        self.fresh = fresh  # nothing read yet: the demuxer is at the start of the stream
        self.decoded = 0

    def _ticks(self, seconds: float) -> int:
        return max(1, math.ceil(Fraction(seconds) / self.time_base))

    def ticks_of(self, seconds: float) -> int:
        """The tick of a time: one a float's rounding error below a frame's timestamp is its."""
        return math.floor(Fraction(seconds) / self.time_base + _TICK_SLACK)

    def take(self, wanted: list[int]) -> list[VideoFrame]:
        """The frames on screen at ``wanted`` (ticks, sorted)."""
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
            pts = frame_pts(self.path, frame)
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
        last = self._seconds(frame_pts(self.path, previous))
        check_reaches(self.path, last, self._seconds(wanted[-1]), self.rate)
        taken.extend([previous] * (len(wanted) - len(taken)))
        return True

    def _seconds(self, ticks: int) -> float:
        return float(ticks * self.time_base)

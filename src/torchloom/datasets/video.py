"""VideoClipDataset: fixed-length clips of frames taken from video files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np
import torch
from typing_extensions import Unpack

from torchloom.datasets.base import Slot
from torchloom.datasets.options import IndexingOptions
from torchloom.datasets.sources import ProbedFileDataset, Source
from torchloom.datasets.video_ticks import flat_frame_ticks
from torchloom.errors import ConfigError, DataError, TransformError, check_choice
from torchloom.io.files import Inside
from torchloom.io.video import (
    VideoHeader,
    probe_video,
    read_frame_numbers,
    read_frames,
    slot_times,
    verify_video,
)

#: File extensions that are videos (matched in any case).
VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv")
Sampling = Literal["uniform", "random_segment"]
SAMPLINGS = ("uniform", "random_segment")
ShortClips = Literal["repeat_last", "loop", "drop"]
SHORT_CLIPS = ("repeat_last", "loop", "drop")
#: The most frames one clip may take: each is decoded into memory (1,000 1080p frames are ~6 GB).
MAX_CLIP_FRAMES = 10_000
#: The longest span ``(frames - 1) × stride`` of a clip, in frames (keeps slot arithmetic in int64).
MAX_CLIP_SPAN = 1 << 40


class VideoClipDataset(ProbedFileDataset[VideoHeader]):
    """Clips of ``frames`` frames from video files, labelled by class folder or manifest column.

    Sources: a folder of class folders (``root/<class>/<clip>.avi``, the UCF101 layout; one
    split of a split root, ``root/<split>/<class>/<clip>.avi``, chosen with ``split``; or videos
    directly in the folder, unlabelled; files found as :class:`torchloom.FolderDataset` finds
    them), a manifest (a CSV, JSON, JSONL or Parquet file with ``path`` and, optionally, ``label``
    columns, or a :class:`~torchloom.datasets.Manifest` naming other columns, its root or a pyarrow
    table), or a list of paths; a root or a manifest may be a URL (``s3://bucket/clips``, with
    ``storage_options=``), each video then read in a few ranged GETs.
    Every file's header is probed at construction, in threads: durations, frame counts and
    rates go into numpy arrays (:attr:`durations`, :attr:`frame_counts`, :attr:`rates`), and
    files that do not probe are left out and listed in :attr:`report` (``strict=True`` raises).

    A clip of ``n`` frames at rate ``r`` starting at ``s`` seconds is read on a grid of ``n``
    frame slots, slot ``i`` at time ``s + (i + 0.5) / r``, where the stream's frame ``i`` is the
    one on screen then (``VideoHeader.on_grid``); slot ``i`` of a stream off that grid (a variable
    frame rate, an MPEG program or transport stream) is its ``i``-th presented frame
    (:func:`torchloom.io.read_frame_numbers`), so every frame a file shows is a slot. Sampling
    picks the slots:

    - ``"uniform"``: ``round(linspace(0, n - 1, frames))``, the first and last frame and
      ``frames - 2`` evenly between them (``frames=1``: the first); deterministic.
    - ``"random_segment"``: slots ``start + stride * k`` for ``k < frames``, with ``start``
      uniform in ``[0, n - span]`` (``span = (frames - 1) * stride + 1``) drawn from the
      sample's generator: ``(seed, epoch, index)`` with a :class:`torchloom.SampleKey`.

    A clip with fewer slots than the sampling needs (``frames`` for uniform, ``span`` for
    random_segment) follows ``short``: ``"repeat_last"`` (default: the slots from 0, the last
    frame repeated to fill the clip, as its repeated timestamps show), ``"loop"`` (slots wrap
    around to the first frame) or ``"drop"`` (the file is left out at construction and listed
    in :attr:`report`).

    Samples are ``{"video": uint8 (T, 3, H, W) tensor, "label": int (when labels are known),
    "index", "path", "timestamps": float64 (T,) tensor of the frames' times in seconds}``.
    A corrupt or truncated file raises :class:`torchloom.errors.DecodeError` inside the fault
    policy (``on_error="skip"`` skips it).

    Args:
        source: a folder, a manifest file, a :class:`~torchloom.datasets.Manifest` or a list of
            video paths.
        frames: frames per clip (``T``).
        sampling: ``"uniform"`` or ``"random_segment"`` (above).
        stride: slots between consecutive frames of a random segment.
        short: what a clip shorter than the sampling needs does (above).
        extensions: file extensions that are videos, in a folder source.
        split: the split folder of a split-root folder source (``"train"``, ``"val"``, ...); a
            split root without it is a :class:`torchloom.errors.ConfigError` naming its splits.
        options: :class:`~torchloom.datasets.IndexingOptions`. ``transform(frames, rng)`` gets
            the ``uint8`` ``(T, H, W, 3)`` array and returns such an array or a ``(T, C, H, W)``
            tensor; ``rng`` is the sample's generator, after the segment start was drawn from it.
            ``validate`` is ``"header"`` (default: probe each file's header) or ``"full"`` (decode
            every frame at construction: catches truncated files, costs a full decode).
            ``allow_outside_root`` accepts manifest paths and folder symlinks that lead outside the
            root.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from torchloom.io.video_writer import write_video
        >>> root = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(root, "wave"))
        >>> write_video(os.path.join(root, "wave", "a.avi"), np.zeros((20, 16, 16, 3), np.uint8), rate=10)
        >>> clips = VideoClipDataset(root, frames=4, progress=False)
        >>> sample = clips[0]
        >>> sample["video"].shape, sample["label"], sample["timestamps"].tolist()
        (torch.Size([4, 3, 16, 16]), 0, [0.0, 0.6, 1.3, 1.9])
    """

    #: The frame timestamps (stream ticks) of the clips read by frame number from seekable files,
    #: end to end in one ``int64`` array; clip ``i``'s span is its ``ticks_from`` to ``ticks_to``.
    frame_ticks: np.ndarray

    def __init__(
        self,
        source: Source,
        *,
        frames: int = 16,
        sampling: Sampling = "uniform",
        stride: int = 1,
        short: ShortClips = "repeat_last",
        extensions: Sequence[str] = VIDEO_EXTENSIONS,
        split: str | None = None,
        display_rotation: bool = True,
        **options: Unpack[IndexingOptions],
    ) -> None:
        _check_config(frames, sampling, stride, short)
        if not isinstance(display_rotation, bool):
            raise ConfigError(f"display_rotation must be True or False, got {display_rotation!r}")
        self.frames, self.sampling, self.stride, self.short = frames, sampling, stride, short
        self.display_rotation = display_rotation
        super().__init__(source, extensions=extensions, split=split, **options)

    def probe(self, path: str, inside: Inside) -> VideoHeader:
        header = probe_video(path, inside=inside)  # cheap: probed again by verify_video when "full"
        if self.short == "drop" and header.frames < self.needed_frames:
            raise DataError(
                f"the clip has {header.frames} frames, fewer than the {self.needed_frames} that "
                f"frames={self.frames}, sampling={self.sampling!r}, stride={self.stride} need (short='drop')"
            )
        return verify_video(path, inside=inside) if self.validate == "full" else header

    def header_columns(self, headers: list[VideoHeader]) -> dict[str, np.ndarray]:
        """The header columns; keeps the frame timestamps of seekable streams read by number in
        :attr:`frame_ticks`, each clip's span in the ``ticks_from``/``ticks_to`` columns."""
        self.frame_ticks, ticks_from, ticks_to = flat_frame_ticks(headers)
        return {
            "frames": np.array([h.frames for h in headers], dtype=np.int64),
            "duration": np.array([h.duration for h in headers], dtype=np.float64),
            "rate": np.array([h.rate for h in headers], dtype=np.float64),
            "start": np.array([h.start for h in headers], dtype=np.float64),
            "on_grid": np.array([h.on_grid for h in headers], dtype=np.bool_),
            "ticks_from": ticks_from,
            "ticks_to": ticks_to,
        }

    @property
    def needed_frames(self) -> int:
        """Frames a clip must hold to be sampled without repeats (``frames`` or the segment span)."""
        if self.sampling == "uniform":
            return self.frames
        return (self.frames - 1) * self.stride + 1

    @property
    def frame_counts(self) -> np.ndarray:
        """Frames of every clip, from its video stream (declared or counted, less an edit list's
        skipped frames; else the stream's duration × rate)."""
        return self._numbers("frames")

    @property
    def durations(self) -> np.ndarray:
        """Duration of every clip in seconds."""
        return self._numbers("duration")

    @property
    def rates(self) -> np.ndarray:
        """Average frame rate of every clip (frames per second)."""
        return self._numbers("rate")

    def _numbers(self, name: str) -> np.ndarray:
        return cast(np.ndarray, self.index.columns[name])

    def slots(self, index: int, rng: np.random.Generator) -> np.ndarray:
        """The frame slots clip ``index`` takes (see the class docstring); draws from ``rng``
        only for ``"random_segment"``."""
        count = int(self.frame_counts[index])
        steps = np.arange(self.frames, dtype=np.int64)
        if self.sampling == "uniform":
            if count >= self.frames:
                return np.round(np.linspace(0, count - 1, self.frames)).astype(np.int64)
        else:
            steps *= self.stride
            span = int(steps[-1]) + 1
            if count >= span:
                return int(rng.integers(0, count - span + 1)) + steps
        return steps % count if self.short == "loop" else np.minimum(steps, count - 1)

    def _load(self, index: int, key: int, slot: Slot | None) -> dict[str, Any]:
        path = self.index.paths[index]
        rng = self.rng(key, slot)
        slots, rotate = self.slots(index, rng), self.display_rotation
        if self._numbers("on_grid")[index]:
            start, rate = float(self._numbers("start")[index]), float(self.rates[index])
            times = slot_times(start, rate, slots)
            clip = read_frames(path, times, inside=self.read_root, display_rotation=rotate)
        else:
            begin, end = int(self._numbers("ticks_from")[index]), int(self._numbers("ticks_to")[index])
            ticks = self.frame_ticks[begin:end] if end > begin else None
            clip = read_frame_numbers(
                path, slots, inside=self.read_root, display_rotation=rotate, frame_ticks=ticks
            )
        video = clip.frames if self.transform is None else self.transform(clip.frames, rng)
        return self.labelled(
            {"video": _to_tchw(video), "timestamps": torch.from_numpy(clip.timestamps)}, index, key
        )

    def __repr__(self) -> str:
        return (
            f"VideoClipDataset({self.source_name!r}, {len(self)} clips, frames={self.frames}, "
            f"sampling={self.sampling!r})"
        )


def _check_config(frames: int, sampling: str, stride: int, short: str) -> None:
    for name, value in (("frames", frames), ("stride", stride)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive int, got {name}={value!r}")
    if frames > MAX_CLIP_FRAMES:
        raise ConfigError(
            f"frames={frames} is more than {MAX_CLIP_FRAMES:,} frames per clip, whose decoded arrays would "
            "not fit in memory; take fewer frames (or a larger stride)"
        )
    if (frames - 1) * stride > MAX_CLIP_SPAN:
        raise ConfigError(
            f"frames={frames} with stride={stride} spans {(frames - 1) * stride:,} frames, more than any "
            f"video holds (at most {MAX_CLIP_SPAN:,} here); use a smaller stride"
        )
    check_choice("sampling", sampling, SAMPLINGS)
    check_choice("short", short, SHORT_CLIPS)


def _to_tchw(video: Any) -> torch.Tensor:
    """A transform's result as a ``(T, C, H, W)`` tensor: THWC arrays are permuted and copied."""
    if isinstance(video, torch.Tensor):
        return video
    if not isinstance(video, np.ndarray) or video.ndim != 4:
        shape = getattr(video, "shape", None)
        raise TransformError(
            f"the transform returned {type(video).__name__} {shape}, but a clip must be a (T, H, W, C) "
            "array or a (T, C, H, W) tensor; make the transform return one (a bug in the pipeline, "
            "not in the data, so no fault policy skips it)"
        )
    return torch.from_numpy(np.ascontiguousarray(video)).permute(0, 3, 1, 2).contiguous()

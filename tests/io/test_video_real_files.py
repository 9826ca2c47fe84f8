"""Video files as real sources make them: every frame they show is read, the right one, and counted
from the stream (not the container's duration); a phone's portrait video comes back upright.

Each case is checked against a full sequential PyAV decode: the frame count, every frame slot,
the frames of the last 0.14 s and scattered single reads, pixel for pixel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from torchloom.datasets.video import VideoClipDataset
from torchloom.errors import DecodeError, EmptyDatasetError
from torchloom.io.video import probe_video, read_frame_numbers, read_frames, slot_times, verify_video
from torchloom.io.video_ebml import projection_matrix
from torchloom.io.video_orientation import TURNS, orientation_of_rotation
from torchloom.io.video_writer import write_video
from video_files import (
    cut_with_edit_list,
    decode_everything,
    edit_list_skips,
    encode,
    gray_ramp,
    numbered,
    numbers,
)


def late_start(folder: Path, suffix: str) -> Path:
    """A recording cut from a stream: timestamps start at 2 s (``-output_ts_offset 2``)."""
    path = folder / f"late{suffix}"
    encode(path, 100, codec="libvpx-vp9" if suffix == ".webm" else "libx264", first_pts=2.0)
    return path


def audio_outlasts_video(folder: Path, suffix: str) -> Path:
    """5 s of video, 8 s of audio: the container's duration is the audio's."""
    path = folder / f"audio{suffix}"
    encode(path, 50, codec="libvpx-vp9" if suffix == ".webm" else "libx264", audio_seconds=8.0)
    return path


def edit_list_mp4(folder: Path, suffix: str) -> Path:
    """``ffmpeg -ss 3.3 -c copy``: from the keyframe at 2 s, an edit list skipping frames 20-32."""
    source = folder / "whole.mp4"
    encode(source, 100, gop=20)
    path = folder / f"cut{suffix}"
    cut_with_edit_list(source, path, 3.3)
    assert edit_list_skips(path) > 0  # the file really is cut with an edit list
    return path


def program_stream(folder: Path, suffix: str) -> Path:
    """A DVD/camcorder MPEG-2 program stream: no index, its duration a bit-rate estimate."""
    path = folder / f"ps{suffix}"
    encode(path, 100, codec="mpeg2video", rate=25, gop=12, container_format="vob")
    return path


def transport_stream(folder: Path, suffix: str) -> Path:
    """An AVCHD camcorder's H.264 transport stream (.mts)."""
    path = folder / f"camcorder{suffix}"
    encode(path, 100, rate=25, gop=12, container_format="mpegts")
    return path


CASES: list[tuple[Callable[[Path, str], Path], str, int, int]] = [
    # maker, suffix, frames shown, first frame number shown
    (late_start, ".mkv", 100, 0),
    (late_start, ".webm", 100, 0),
    (audio_outlasts_video, ".mkv", 50, 0),
    (audio_outlasts_video, ".webm", 50, 0),
    (edit_list_mp4, ".mp4", 67, 33),
    (edit_list_mp4, ".mov", 67, 33),
    (program_stream, ".mpg", 100, 0),
    (transport_stream, ".mts", 100, 0),
]


@pytest.mark.parametrize(
    ("maker", "suffix", "shown", "first"), CASES, ids=lambda case: getattr(case, "__name__", case)
)
def test_every_frame_a_file_shows_is_counted_and_read(
    tmp_path: Path, maker: Callable[[Path, str], Path], suffix: str, shown: int, first: int
) -> None:
    path = maker(tmp_path, suffix)
    reference, stamps = decode_everything(path)
    assert numbers(reference) == list(range(first, first + shown))  # what a player shows
    header = probe_video(path)
    assert header.frames == shown and header.start == pytest.approx(stamps[0])
    slots = slot_times(header.start, header.rate, np.arange(header.frames))
    every = read_frames(path, slots)
    np.testing.assert_array_equal(every.frames, reference)  # pixel for pixel, no frame twice
    np.testing.assert_array_equal(every.timestamps, stamps)
    last = stamps[stamps > stamps[-1] - 0.14] + 0.001  # the last 0.14 s, read on their own
    np.testing.assert_array_equal(read_frames(path, last).frames, reference[-len(last) :])
    for number in range(0, shown, 9):  # scattered single reads, each a seek of its own
        assert numbers(read_frames(path, [stamps[number] + 0.001]).frames) == [first + number]
    assert verify_video(path).frames == shown
    dataset = VideoClipDataset([path], frames=shown, progress=False)
    assert numbers(dataset[0]["video"]) == list(range(first, first + shown))


def test_a_cut_mkv_is_truncated_though_its_frames_are_read_from_the_stream(tmp_path: Path) -> None:
    path = tmp_path / "cut.mkv"
    write_video(path, numbered(100), rate=10, codec="libx264")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DecodeError, match=r"cut\.mkv.*before the 10\.000 s its header declares.*truncated"):
        probe_video(path)
    with pytest.raises(EmptyDatasetError, match=r"cut\.mkv': its streams end at .* truncated"):
        VideoClipDataset([path], frames=4, progress=False)


def variable_rate(folder: Path, suffix: str) -> Path:
    """A phone's or a screen recorder's variable frame rate: gaps of 10 to 80 ms, B-frames."""
    path = folder / f"vfr{suffix}"
    gaps = np.random.default_rng(0).integers(10, 80, 60) / 1000
    codec = "libvpx-vp9" if suffix == ".webm" else "libx264"
    encode(path, 60, rate=30, codec=codec, gop=10, b_frames=2, times=np.cumsum(gaps) - gaps[0])
    return path


def repeated_timestamps(folder: Path, suffix: str) -> Path:
    """An MPEG-2 program stream with B-frames whose muxer repeats two presentation times."""
    path = folder / f"repeats{suffix}"
    encode(
        path,
        60,
        rate=30,
        codec="mpeg2video",
        gop=12,
        b_frames=2,
        container_format="mpeg",
        images=gray_ramp(60),
    )
    stamps = decode_everything(path)[1]
    assert len(set(stamps.tolist())) < len(stamps)  # the muxer really repeats timestamps
    return path


OFF_GRID: list[tuple[Callable[[Path, str], Path], str]] = [
    (variable_rate, ".mkv"),
    (variable_rate, ".webm"),
    (variable_rate, ".mp4"),
    (repeated_timestamps, ".mpg"),
    (transport_stream, ".mts"),
]


@pytest.mark.parametrize(("maker", "suffix"), OFF_GRID, ids=lambda case: getattr(case, "__name__", case))
def test_a_stream_off_the_time_grid_is_counted_and_read_by_frame_number(
    tmp_path: Path, maker: Callable[[Path, str], Path], suffix: str
) -> None:
    path = maker(tmp_path, suffix)
    reference, _ = decode_everything(path)  # what a player shows, in order
    shown = len(reference)
    header = probe_video(path)
    assert header.frames == shown and not header.on_grid
    assert verify_video(path).frames == shown  # never called truncated
    every = read_frame_numbers(path, np.arange(shown)[::-1])
    np.testing.assert_array_equal(every.frames, reference[::-1])  # pixel for pixel, every frame
    for number in range(0, shown, 7):
        np.testing.assert_array_equal(read_frame_numbers(path, [number]).frames[0], reference[number])
    clip = VideoClipDataset([path], frames=shown, progress=False)[0]["video"]
    np.testing.assert_array_equal(clip.permute(0, 2, 3, 1).numpy(), reference)  # every frame a slot
    with pytest.raises(DecodeError, match=rf"{path.name}.*shows {shown} frames.*truncated"):
        read_frame_numbers(path, [shown])


def codec_for(suffix: str) -> str:
    return "libvpx-vp9" if suffix == ".webm" else "libx264"


@pytest.mark.parametrize(("rotation", "turns"), [(90, 1), (-90, -1), (180, 2), (0, 0)])
@pytest.mark.parametrize("suffix", [".mp4", ".mov", ".mkv", ".webm"])
def test_a_portrait_phone_video_comes_back_as_displayed(
    tmp_path: Path, suffix: str, rotation: int, turns: int
) -> None:
    path = tmp_path / f"phone{suffix}"
    encode(path, 30, rotation=rotation, codec=codec_for(suffix))
    stored, _ = decode_everything(path)
    header = probe_video(path)
    assert (header.height, header.width) == (48, 64)  # as stored
    times = [0.05, 1.55, 2.95]
    shown = read_frames(path, times)
    # np.rot90 turns counter-clockwise, as the display matrix's angle counts; ffmpeg -autorotate agrees.
    np.testing.assert_array_equal(shown.frames, np.rot90(stored[[0, 15, 29]], turns, axes=(1, 2)))
    kept = read_frames(path, times, display_rotation=False)
    np.testing.assert_array_equal(kept.frames, stored[[0, 15, 29]])
    upright = VideoClipDataset([path], frames=3, progress=False)[0]["video"]  # frames 0, 14 and 29
    assert upright.shape == ((3, 3, 64, 48) if turns % 2 else (3, 3, 48, 64)) and upright.is_contiguous()
    expected = np.rot90(stored[[0, 14, 29]], turns, axes=(1, 2))
    torch.testing.assert_close(upright, torch.from_numpy(expected.copy()).permute(0, 3, 1, 2))
    as_stored = VideoClipDataset([path], frames=3, display_rotation=False, progress=False)[0]["video"]
    assert numbers(as_stored) == [0, 14, 29]


ONE = 1 << 16
MIRRORS = {  # display matrix (FFmpeg's order) and the stored frames' axes as shown
    "hflip": ((-ONE, 0, 0, ONE), lambda f: f[:, :, ::-1]),
    "vflip": ((ONE, 0, 0, -ONE), lambda f: f[:, ::-1]),
    "rot90_hflip": ((0, ONE, ONE, 0), lambda f: np.swapaxes(f, 1, 2)),
    "rot90_vflip": ((0, -ONE, -ONE, 0), lambda f: np.swapaxes(f, 1, 2)[:, ::-1, ::-1]),
}


@pytest.mark.parametrize("name", sorted(MIRRORS))
@pytest.mark.parametrize("suffix", [".mp4", ".mov", ".mkv", ".webm"])
def test_a_mirroring_display_matrix_is_shown_mirrored_not_turned(
    tmp_path: Path, suffix: str, name: str
) -> None:
    matrix, shown = MIRRORS[name]
    path = tmp_path / f"{name}{suffix}"
    encode(path, 10, matrix=matrix, codec=codec_for(suffix))
    if suffix in (".mkv", ".webm"):  # FFmpeg writes the matrix as the track's projection pose
        assert projection_matrix(path) == matrix
    stored, _ = decode_everything(path)
    np.testing.assert_array_equal(read_frames(path, [0.05, 0.55]).frames, shown(stored[[0, 5]]))
    np.testing.assert_array_equal(read_frames(path, [0.05], display_rotation=False).frames, stored[[0]])


def test_display_rotation_is_checked_and_odd_angles_are_named() -> None:
    with pytest.raises(Exception, match="display_rotation must be True or False"):
        VideoClipDataset([], frames=2, display_rotation="yes", progress=False)  # type: ignore[arg-type]
    assert orientation_of_rotation(45) is None and orientation_of_rotation(-180) == TURNS[180]
    assert [TURNS[d].rotation for d in (0, 90, 180, 270)] == [0, 90, 180, 270]
    assert not any(turn.mirrored for turn in TURNS.values())

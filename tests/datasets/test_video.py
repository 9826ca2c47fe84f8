"""Video clips: frames found by seeking equal a decode from the start, exact frame indices, variable
frame rates by timestamps, truncated and hostile files as typed errors under the fault policy, and
random segments seeded by (seed, epoch, index) through DataLoader workers.

Every generated frame carries its number (tests/video_files.py), so a test reads back exactly which
frames it got."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

from torchloom import FaultReport, SampleError, SampleKey, collate
from torchloom.datasets import Manifest
from torchloom.datasets.video import VideoClipDataset
from torchloom.errors import ConfigError, DecodeError, TransformError, UnsafeFileError, ValidationFailedError
from torchloom.io.video import (
    frame_timestamps,
    probe_video,
    read_frame_numbers,
    read_frames,
    require_av,
    slot_times,
)
from torchloom.io.video_writer import write_video
from video_files import decode_everything, numbered, numbers

FRAMES, RATE = 100, 10  # 10 s clips


# Irregular gaps: 150 ms after every third frame, 70 ms otherwise.
VFR_TIMES = np.cumsum(np.r_[0, np.where(np.arange(FRAMES - 1) % 3 == 0, 0.15, 0.07)])


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """UCF101-style class folders: mpeg4 AVI (GOP 10), H.264 MP4 with B-frames (GOP 25), MKV, VFR MKV."""
    root = tmp_path_factory.mktemp("clips")
    frames = numbered(FRAMES)
    (root / "jump").mkdir()
    (root / "wave").mkdir()
    write_video(root / "jump" / "a.avi", frames, rate=RATE, gop=10)
    write_video(root / "jump" / "b.mp4", frames, rate=RATE, codec="libx264", gop=25)
    write_video(root / "wave" / "c.mkv", frames, rate=RATE, codec="libx264", gop=25)
    write_video(root / "wave" / "vfr.mkv", frames, rate=RATE, codec="libx264", gop=20, timestamps=VFR_TIMES)
    return root


def test_probe_reads_the_header(clips: Path) -> None:
    for name, known in (("jump/a.avi", True), ("jump/b.mp4", True), ("wave/c.mkv", True)):  # counted
        header = probe_video(clips / name)
        assert (header.frames, header.rate, header.duration) == (FRAMES, RATE, 10.0)
        assert (header.height, header.width, header.frames_known) == (48, 64, known)


@pytest.mark.parametrize("name", ["jump/a.avi", "jump/b.mp4", "wave/c.mkv", "wave/vfr.mkv"])
def test_seeking_gives_the_frames_a_decode_from_the_start_gives(clips: Path, name: str) -> None:
    reference, stamps = decode_everything(clips / name)
    assert numbers(reference) == list(range(FRAMES))
    rng = np.random.default_rng(0)
    for _ in range(12):
        times = rng.uniform(0, stamps[-1] + 0.05, int(rng.integers(1, 12)))
        clip = read_frames(clips / name, times)
        on_screen = np.searchsorted(stamps, times, side="right") - 1
        np.testing.assert_array_equal(clip.frames, reference[on_screen])  # pixel for pixel
        np.testing.assert_array_equal(clip.timestamps, stamps[on_screen])


def test_a_clip_in_the_second_half_seeks_instead_of_decoding_from_the_start(clips: Path) -> None:
    reference, _ = decode_everything(clips / "jump" / "a.avi")
    times = 7.05 + np.arange(8) / RATE
    clip = read_frames(clips / "jump" / "a.avi", times)
    np.testing.assert_array_equal(clip.frames, reference[70:78])
    assert clip.decoded <= 8 + 10 + 1  # from the keyframe before 7 s (GOP 10), not 78 frames
    spread = read_frames(clips / "jump" / "a.avi", [0.05, 3.05, 6.05, 9.05])  # far apart: one seek each
    assert numbers(spread.frames) == [0, 30, 60, 90] and spread.decoded < 40


def test_uniform_sampling_takes_exact_frame_indices(clips: Path) -> None:
    dataset = VideoClipDataset(clips, frames=8, progress=False)
    expected = np.round(np.linspace(0, FRAMES - 1, 8)).astype(int).tolist()
    for index in range(3):  # the constant-rate files
        sample = dataset[index]
        assert sample["video"].shape == (8, 3, 48, 64) and sample["video"].dtype == torch.uint8
        assert numbers(sample["video"]) == expected
        np.testing.assert_allclose(sample["timestamps"].numpy(), np.array(expected) / RATE)
        assert sample["timestamps"].dtype == torch.float64
    assert dataset.classes == ["jump", "wave"] and dataset.targets.tolist() == [0, 0, 1, 1]
    assert dataset.frame_counts.tolist()[:3] == [FRAMES] * 3 and dataset.rates.tolist()[:3] == [RATE] * 3


def test_variable_frame_rate_indexes_frames_by_number_not_a_constant_rate(clips: Path) -> None:
    path = clips / "wave" / "vfr.mkv"
    stamps = frame_timestamps(path)
    np.testing.assert_allclose(stamps, VFR_TIMES, atol=1e-3)  # irregular, as written
    dataset = VideoClipDataset([path], frames=10, progress=False)
    assert not probe_video(path).on_grid and dataset.frame_counts.tolist() == [FRAMES]
    sample = dataset[0]
    # Slot i is the i-th frame presented (as torchcodec and decord index), every frame reachable.
    slots = dataset.slots(0, np.random.default_rng())
    assert numbers(sample["video"]) == slots.tolist()
    np.testing.assert_array_equal(sample["timestamps"].numpy(), stamps[slots])
    times = slot_times(0.0, dataset.rates[0], slots)
    assert slots.tolist() != (np.searchsorted(stamps, times, side="right") - 1).tolist()  # the grid's


class CountingDemux:
    """A PyAV container that records each demux() call made on it: a read of packets, which
    decoding (the container's own call) is not."""

    def __init__(self, container: Any, calls: list[tuple[Any, ...]]) -> None:
        self._container, self._calls = container, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._container, name)

    def __enter__(self) -> CountingDemux:
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._container.__exit__(*exc)

    def demux(self, *streams: Any) -> Any:
        self._calls.append(streams)
        return self._container.demux(*streams)


def count_demux_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    av, calls = require_av(), []
    real_open = av.open
    monkeypatch.setattr(av, "open", lambda *a, **k: CountingDemux(real_open(*a, **k), calls))
    return calls


def test_a_variable_rate_sample_seeks_to_its_frames_without_reading_every_packet(
    clips: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = clips / "wave" / "vfr.mkv"
    reference, stamps = decode_everything(path)
    uniform = VideoClipDataset([path], frames=10, progress=False)
    segments = VideoClipDataset([path], frames=6, sampling="random_segment", stride=3, progress=False)
    begin, end = int(uniform.index.columns["ticks_from"][0]), int(uniform.index.columns["ticks_to"][0])
    time_base = probe_video(path).time_base
    kept = [float(ticks * time_base) for ticks in uniform.frame_ticks[begin:end].tolist()]
    assert uniform.frame_ticks.dtype == np.int64 and np.array_equal(kept, stamps)  # kept at indexing
    calls = count_demux_calls(monkeypatch)
    slots = uniform.slots(0, np.random.default_rng())
    sample = uniform[0]
    for epoch in range(3):
        segment = segments[SampleKey(0, epoch=epoch)]
        shown = numbers(segment["video"])
        np.testing.assert_array_equal(segment["video"].permute(0, 2, 3, 1).numpy(), reference[shown])
    assert calls == []  # no packet read to find the frames: each sought at its timestamp
    np.testing.assert_array_equal(sample["video"].permute(0, 2, 3, 1).numpy(), reference[slots])
    np.testing.assert_array_equal(sample["timestamps"].numpy(), stamps[slots])
    scanned = read_frame_numbers(path, slots)  # without the kept timestamps: every packet read
    assert len(calls) == 1 and np.array_equal(scanned.frames, reference[slots])
    with pytest.raises(ConfigError, match="frame_ticks must be a 1-D array of integer ticks"):
        read_frame_numbers(path, slots, frame_ticks=np.zeros((2, 2)))


def test_random_segment_is_reproducible_per_key_and_differs_across_epochs(clips: Path) -> None:
    dataset = VideoClipDataset(clips, frames=4, sampling="random_segment", stride=3, seed=7, progress=False)
    first = numbers(dataset[SampleKey(0, epoch=0)]["video"])
    assert first == numbers(dataset[SampleKey(0, epoch=0)]["video"])
    assert np.all(np.diff(first) == 3) and 0 <= first[0] <= FRAMES - 10
    starts = {numbers(dataset[SampleKey(0, epoch=epoch)]["video"])[0] for epoch in range(6)}
    assert len(starts) > 1
    other_seed = VideoClipDataset(
        clips, frames=4, sampling="random_segment", stride=3, seed=8, progress=False
    )
    assert [numbers(other_seed[SampleKey(1, epoch=e)]["video"]) for e in range(4)] != [
        numbers(dataset[SampleKey(1, epoch=e)]["video"]) for e in range(4)
    ]


def test_dataloader_with_two_workers_matches_one_process(clips: Path) -> None:
    dataset = VideoClipDataset(clips, frames=6, sampling="random_segment", stride=2, progress=False)
    keys = [SampleKey(i, epoch=3) for i in range(len(dataset))]

    def batches(workers: int) -> list[dict[str, object]]:
        return list(DataLoader(dataset, batch_size=2, sampler=keys, num_workers=workers, collate_fn=collate))

    parallel, serial = batches(2), batches(0)
    assert [tuple(b["video"].shape) for b in parallel] == [(2, 6, 3, 48, 64)] * 2
    for a, b in zip(parallel, serial, strict=True):
        torch.testing.assert_close(a["video"], b["video"])
        torch.testing.assert_close(a["timestamps"], b["timestamps"])
        assert a["label"].tolist() == b["label"].tolist() and a["path"] == b["path"]


@pytest.mark.parametrize(
    ("short", "expected"),
    [("repeat_last", [0, 4, 8, 11, 11, 11]), ("loop", [0, 4, 8, 0, 4, 8])],
)
def test_short_clips_follow_the_documented_policy(tmp_path: Path, short: Any, expected: list[int]) -> None:
    write_video(tmp_path / "short.avi", numbered(12), rate=RATE)
    dataset = VideoClipDataset(
        tmp_path, frames=6, sampling="random_segment", stride=4, short=short, progress=False
    )
    assert numbers(dataset[SampleKey(0)]["video"]) == expected
    uniform = VideoClipDataset(tmp_path, frames=16, short=short, progress=False)
    assert len(numbers(uniform[0]["video"])) == 16


def test_short_clips_are_dropped_and_reported_with_drop(tmp_path: Path) -> None:
    write_video(tmp_path / "short.avi", numbered(12), rate=RATE)
    write_video(tmp_path / "long.avi", numbered(40), rate=RATE)
    dataset = VideoClipDataset(tmp_path, frames=16, short="drop", progress=False)
    assert len(dataset) == 1 and dataset.index.paths[0].endswith("long.avi")
    ((path, reason),) = dataset.report.invalid
    assert path.endswith("short.avi") and "12 frames, fewer than the 16" in reason


def test_a_manifest_gives_paths_and_labels(clips: Path) -> None:
    table = pa.table({"path": ["jump/a.avi", "wave/c.mkv", "../escape.avi"], "label": ["up", "side", "up"]})
    with pytest.raises(Exception, match="outside root"):
        VideoClipDataset(Manifest(table, root=clips), frames=2, progress=False)
    dataset = VideoClipDataset(Manifest(table.slice(0, 2), root=clips), frames=2, progress=False)
    assert dataset.classes == ["side", "up"] and [dataset[i]["label"] for i in range(2)] == [1, 0]
    (clips.parent / "m.csv").write_text(f"path\n{clips.name}/jump/a.avi\n")
    unlabelled = VideoClipDataset(clips.parent / "m.csv", frames=2, progress=False)
    assert "label" not in unlabelled[0] and unlabelled.classes is None


def truncated_avi(folder: Path) -> Path:
    """An AVI cut at 60 %: its header (100 frames, 10 s) probes fine; decoding fails past the cut."""
    path = folder / "cut.avi"
    write_video(path, numbered(FRAMES), rate=RATE, gop=10)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.6)])
    return path


def test_a_truncated_file_raises_decode_error_or_is_skipped(tmp_path: Path) -> None:
    cut = truncated_avi(tmp_path)
    write_video(tmp_path / "fine.avi", numbered(30), rate=RATE)
    assert probe_video(cut).frames == FRAMES
    with pytest.raises(DecodeError, match=r"cut\.avi"):
        read_frames(cut, [9.5])
    raising = VideoClipDataset(tmp_path, frames=4, progress=False)
    with pytest.raises(SampleError, match=r"cut\.avi") as caught:
        raising[0]
    assert isinstance(caught.value.__cause__, DecodeError)
    skipping = VideoClipDataset(tmp_path, frames=4, on_error="skip", progress=False)
    report = FaultReport()
    batches = list(report.watch(DataLoader(skipping, batch_size=2, num_workers=2, collate_fn=collate)))
    assert [b["path"] for b in batches] == [[str(tmp_path / "fine.avi")]]
    assert [s.path for s in report.skipped] == [str(cut)]
    full = VideoClipDataset(tmp_path, frames=4, validate="full", progress=False)
    assert len(full) == 1 and full.report.invalid[0][0] == str(cut)


def test_a_truncated_mkv_that_just_ends_early_is_a_decode_error(tmp_path: Path) -> None:
    path = tmp_path / "early.mkv"
    write_video(path, numbered(FRAMES), rate=RATE, codec="libx264", gop=25)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert len(frame_timestamps(path)) < FRAMES  # no error from the decoder: the stream just stops
    with pytest.raises(DecodeError, match="truncated"):
        read_frames(path, [9.95])


def test_hostile_files_are_excluded_at_construction_with_reasons(tmp_path: Path) -> None:
    write_video(tmp_path / "ok.avi", numbered(10), rate=RATE)
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "text.mkv").write_text("not a video at all\n" * 50)
    os.mkfifo(tmp_path / "pipe.avi")
    dataset = VideoClipDataset(tmp_path, frames=2, progress=False)
    assert len(dataset) == 1
    reasons = {os.path.basename(path): reason for path, reason in dataset.report.invalid}
    assert "empty" in reasons["empty.mp4"] and "FIFO" in reasons["pipe.avi"] and "text.mkv" in reasons
    with pytest.raises(UnsafeFileError, match="FIFO"):
        read_frames(tmp_path / "pipe.avi", [0.0])
    with pytest.raises(ValidationFailedError, match=r"text\.mkv"):
        VideoClipDataset(tmp_path, frames=2, strict=True, progress=False)


def test_a_transform_bug_surfaces_even_under_skip(clips: Path) -> None:
    def flip(frames: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return frames[:, :, ::-1]

    flipped = VideoClipDataset(clips, frames=2, transform=flip, progress=False)[0]["video"]
    assert flipped.shape == (2, 3, 48, 64)
    broken = VideoClipDataset(
        clips, frames=2, transform=lambda f, rng: f.tolist(), on_error="skip", progress=False
    )
    with pytest.raises(TransformError, match="returned list"):
        broken[0]


def test_missing_pyav_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "av", None)
    hint = r"pip install av \(or, in a torchloom clone, pip install -e '\.\[video\]'\)"
    with pytest.raises(ImportError, match=hint):
        require_av()


def test_unicode_and_space_laden_paths_read(tmp_path: Path) -> None:
    folder = tmp_path / "vidéos" / "猫 cat"
    folder.mkdir(parents=True)
    write_video(folder / "clip 1 — été.avi", numbered(20), rate=RATE)
    dataset = VideoClipDataset(tmp_path / "vidéos", frames=3, progress=False)
    assert dataset.classes == ["猫 cat"] and numbers(dataset[0]["video"]) == [0, 10, 19]
    assert dataset[0]["path"] == str(folder / "clip 1 — été.avi")

"""Action-recognition style clips: class folders of short videos (the UCF101 layout) into batches of
random 8-frame segments, through a plain DataLoader with 2 workers.

Generates 3 classes × 4 clips (a square moving left, moving right, or standing still; 4 s at
25 fps, MPEG-4) in a temporary folder and plants one truncated file. VideoClipDataset probes
every header once; each sample seeks to a random segment (drawn from ``(seed, epoch, index)``)
instead of decoding from the start, and the truncated file is skipped and reported, not faked.

Run: ``python examples/video_clips.py`` (needs the ``video`` extra: ``pip install -e '.[video]'`` in a clone)
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.datasets import VideoClipDataset
from torchloom.io import write_video

CLASSES = {"left": -3, "right": 3, "still": 0}  # pixels per frame the square moves
SECONDS, RATE, HEIGHT, WIDTH = 4, 25, 72, 96


def moving_square(step: int, seed: int) -> np.ndarray:
    """A noisy background with a bright square moving ``step`` pixels per frame."""
    rng = np.random.default_rng(seed)
    background = rng.integers(40, 90, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    frames = np.repeat(background[None], SECONDS * RATE, axis=0)
    x0, y0 = int(rng.integers(30, 50)), int(rng.integers(10, 40))
    for t, frame in enumerate(frames):
        x = (x0 + step * t) % (WIDTH - 16)
        frame[y0 : y0 + 16, x : x + 16] = (230, 200, 60)
    return frames


def write_clips(root: str) -> str:
    for name, step in CLASSES.items():
        os.makedirs(os.path.join(root, name))
        for i in range(4):
            write_video(
                os.path.join(root, name, f"v_{name}_{i}.avi"), moving_square(step, i), rate=RATE, gop=25
            )
    planted = os.path.join(root, "left", "v_left_broken.avi")
    write_video(planted, moving_square(-3, 9), rate=RATE, gop=25)
    with open(planted, "r+b") as handle:  # the header still promises 4 s; the data stops early
        handle.truncate(os.path.getsize(planted) // 2)
    return planted


def random_flip(frames: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mirror the whole clip left-right half the time (one draw per clip, so motion stays coherent)."""
    return np.ascontiguousarray(frames[:, :, ::-1]) if rng.random() < 0.5 else frames


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="torchloom-video-") as root:
        planted = write_clips(root)
        clips = VideoClipDataset(
            root,
            frames=8,
            sampling="random_segment",
            stride=2,
            transform=random_flip,
            on_error="skip",
            progress=False,
        )
        first = f"{clips.frame_counts[0]} frames at {clips.rates[0]} fps"
        print(f"{len(clips)} clips, classes {clips.classes}, {first}")
        print(f"left out at construction: {len(clips.report.invalid)}")
        sampler = tl.IndexSampler(len(clips), seed=0)
        loader = DataLoader(
            clips,
            batch_size=4,
            sampler=sampler,
            num_workers=2,
            collate_fn=tl.collate,
            persistent_workers=True,
        )
        report = tl.FaultReport()
        for epoch in range(2):
            sampler.set_epoch(epoch)
            started, seen = time.perf_counter(), 0
            for batch in report.watch(loader):
                video = batch["video"].float() / 255  # (B, T, C, H, W): normalise the batch, not each sample
                seen += len(video)
            rate = seen / (time.perf_counter() - started)
            print(f"epoch {epoch}: {seen} clips, {tuple(video.shape[1:])} each, {rate:.0f} clips/s")
        print("last batch labels", batch["label"].tolist(), "first clip at", batch["timestamps"][0].tolist())
        skipped = [s.path for s in report.skipped]
        print(f"skipped: {[os.path.basename(p) for p in skipped]} ({report.skipped[0].reason})")
        assert skipped == [planted]


if __name__ == "__main__":
    main()

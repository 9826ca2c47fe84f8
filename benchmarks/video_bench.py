"""Video clips: torchloom's seeking reader against the straightforward PyAV loop, on the same files.

Four generated 10-second H.264 files (320×240, 25 fps, a keyframe every 25 frames); each clip is
16 consecutive frames starting at a random frame of the second half. Measured in this process:

- seek: ``torchloom.io.video.read_frames`` (seek to the keyframe before the clip, decode forward,
  RGB only for the clip's frames);
- from start: open the file and decode every frame from the start up to the clip's last frame,
  converting the clip's frames to RGB (what a hand-written PyAV ``__getitem__`` does);
- the bare decode limit: every frame of a file decoded in a tight loop (``container.decode``,
  no conversion), and the same with each frame converted to RGB ``uint8``.

Usage: ``python -m benchmarks.video_bench``
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import av
import numpy as np

from benchmarks.common import Measurement, interleave
from torchloom.io.video import read_frames
from torchloom.io.video_writer import write_video

FILES, SECONDS, RATE, GOP = 4, 10, 25, 25
HEIGHT, WIDTH = 240, 320
CLIP = 16
GOAL = 3.0


@dataclass
class VideoResult:
    clips: int
    seek: Measurement
    from_start: Measurement
    bare_decode: Measurement
    bare_rgb: Measurement
    seek_decoded_per_clip: float

    @property
    def ratio(self) -> float:
        return self.seek.best / self.from_start.best


def write_files(folder: str) -> list[str]:
    """Moving textured frames (so H.264 has real work), one file per seed."""
    paths = []
    for seed in range(FILES):
        rng = np.random.default_rng(seed)
        texture = rng.integers(0, 256, (HEIGHT, WIDTH * 2, 3), dtype=np.uint8)
        frames = np.stack([texture[:, 3 * t % WIDTH :][:, :WIDTH] for t in range(SECONDS * RATE)])
        path = os.path.join(folder, f"clip_{seed}.mp4")
        write_video(path, frames, rate=RATE, codec="libx264", gop=GOP)
        paths.append(path)
    return paths


def clip_starts(count: int, seed: int = 0) -> list[tuple[int, int]]:
    """(file, first frame) of each clip: a random start in the second half of a random file."""
    rng = np.random.default_rng(seed)
    total = SECONDS * RATE
    return [(int(rng.integers(FILES)), int(rng.integers(total // 2, total - CLIP))) for _ in range(count)]


def read_from_start(path: str, first: int) -> np.ndarray:
    """The straightforward loop: decode from frame 0, keep frames ``first .. first + CLIP - 1``."""
    frames = []
    with av.open(path) as container:
        for number, frame in enumerate(container.decode(video=0)):
            if number >= first:
                frames.append(frame.to_ndarray(format="rgb24"))
            if len(frames) == CLIP:
                break
    return np.stack(frames)


def clips_per_second(
    paths: list[str], starts: list[tuple[int, int]], read: Callable[[str, int], Any]
) -> list[float]:
    began = time.perf_counter()
    for file, first in starts:
        read(paths[file], first)
    return [len(starts) / (time.perf_counter() - began)]


def decode_rate(paths: list[str], rgb: bool) -> list[float]:
    """Frames/s of decoding every file whole in a tight loop."""
    began, frames = time.perf_counter(), 0
    for path in paths:
        with av.open(path) as container:
            for frame in container.decode(video=0):
                if rgb:
                    frame.to_ndarray(format="rgb24")
                frames += 1
    return [frames / (time.perf_counter() - began)]


def run_video(quick: bool = False) -> VideoResult:
    count = 24 if quick else 64
    with tempfile.TemporaryDirectory(prefix="torchloom-bench-video-") as folder:
        paths = write_files(folder)
        starts = clip_starts(count)
        times = (np.arange(CLIP) + 0.5) / RATE

        def seek(path: str, first: int) -> np.ndarray:
            return read_frames(path, first / RATE + times).frames

        reference = read_from_start(paths[starts[0][0]], starts[0][1])
        np.testing.assert_array_equal(seek(paths[starts[0][0]], starts[0][1]), reference)
        decoded = np.mean([read_frames(paths[f], s / RATE + times).decoded for f, s in starts[:8]])
        results = interleave(
            2 if quick else 3,
            {
                "seek": lambda: clips_per_second(paths, starts, seek),
                "from_start": lambda: clips_per_second(paths, starts, read_from_start),
                "bare_decode": lambda: decode_rate(paths, rgb=False),
                "bare_rgb": lambda: decode_rate(paths, rgb=True),
            },
        )
    return VideoResult(
        count,
        results["seek"],
        results["from_start"],
        results["bare_decode"],
        results["bare_rgb"],
        float(decoded),
    )


def video_section(quick: bool, table: Callable[[Sequence[dict[str, Any]]], str]) -> str:
    """The BENCHMARKS.md section (rows as in benchmarks.run)."""
    result = run_video(quick)
    print(f"video: seek {result.ratio:.2f}× the from-start loop", flush=True)
    rows = [
        {
            "reader": "torchloom read_frames (seek)",
            "clips/s": f"{result.seek.best:,.1f}",
            "frames/s": f"{result.seek.best * CLIP:,.0f}",
            "vs from start": f"{result.ratio:.2f}×",
        },
        {
            "reader": "PyAV loop from the start",
            "clips/s": f"{result.from_start.best:,.1f}",
            "frames/s": f"{result.from_start.best * CLIP:,.0f}",
            "vs from start": "1.00×",
        },
        {
            "reader": "bare decode limit (whole files, no RGB)",
            "clips/s": "-",
            "frames/s": f"{result.bare_decode.best:,.0f}",
            "vs from start": "-",
        },
        {
            "reader": "bare decode + RGB uint8 (whole files)",
            "clips/s": "-",
            "frames/s": f"{result.bare_rgb.best:,.0f}",
            "vs from start": "-",
        },
    ]
    return "\n".join(
        [
            "## Video clips",
            "",
            f"{FILES} generated H.264 files, {WIDTH}×{HEIGHT}, {SECONDS} s at {RATE} fps, a keyframe "
            f"every {GOP} frames. {result.clips} clips of {CLIP} consecutive frames, each starting at a "
            "random frame of the second half of a random file, read in this process (best of interleaved "
            f"rounds). The seeking reader decoded {result.seek_decoded_per_clip:.1f} frames per "
            f"{CLIP}-frame clip on average. Frames/s of the readers count the clip frames delivered; the "
            "bare decode limit decodes every frame of the files.",
            "",
            table(rows),
            "",
            "| goal | measured | met |",
            "|---|---|---|",
            f"| seeking ≥ {GOAL:.0f}× the from-start loop | {result.ratio:.2f}× | "
            f"{'yes' if result.ratio >= GOAL else 'no'} |",
        ]
    )


if __name__ == "__main__":
    from benchmarks.common import markdown_table

    print(video_section(quick=False, table=markdown_table))

"""The scientific and video examples run as a user runs them, in their own process, and say what they did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str) -> str:
    """Run ``examples/<name>`` with this interpreter from the repository root; return its stdout."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=EXAMPLES.parent,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_hyperspectral_patches_example_runs() -> None:
    out = run_example("hyperspectral_patches.py")
    assert "train: 1641 patches, val: 336 patches (of 2759 labelled)" in out
    assert "batch image (64, 16, 9, 9) torch.int16, labels (64,)" in out
    assert "reloaded the same: True" in out and "ENVI bil patch after PCA: (8, 9, 9)" in out


def test_video_clips_example_runs_and_skips_the_planted_file() -> None:
    out = run_example("video_clips.py")
    assert "13 clips, classes ['left', 'right', 'still'], 100 frames at 25.0 fps" in out
    assert "epoch 0: 12 clips, (8, 3, 72, 96) each" in out and "epoch 1: 12 clips" in out
    assert "skipped: ['v_left_broken.avi']" in out and "truncated" in out

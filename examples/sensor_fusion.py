"""A 10 Hz camera and a 30 Hz IMU with clock jitter and a dropout gap, fused on the camera's clock
and batched as windows of consecutive steps.

TimeSync interpolates the IMU at every camera frame (gaps masked, every record accounted for);
WindowDataset then cuts windows of 8 fused steps that never cross a recording boundary; a plain
DataLoader with 2 workers batches them.

Run: ``python examples/sensor_fusion.py``
"""

from __future__ import annotations

import numpy as np
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.datasets import WindowDataset
from torchloom.fusion import TimeSync
from torchloom.samplers import WindowSampler

WINDOW = 8


def recording(seed: int, seconds: float = 20.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Camera frames (a frame number stands in for the image) and 6-axis IMU readings."""
    rng = np.random.default_rng(seed)
    camera_t = np.arange(0, seconds, 0.1) + rng.normal(0, 0.002, int(seconds * 10))
    imu_t = np.sort(np.arange(0, seconds, 1 / 30) + rng.normal(0, 0.003, round(seconds * 30)))
    gap = (imu_t > 7.0) & (imu_t < 8.5)  # the IMU drops out for 1.5 s
    imu_t = imu_t[~gap]
    imu_v = np.stack([np.sin(imu_t * (k + 1)) for k in range(6)], axis=1).astype(np.float32)
    return {"camera": (camera_t, np.arange(len(camera_t))), "imu": (imu_t, imu_v)}


def fused(seed: int) -> TimeSync:
    return TimeSync(
        recording(seed), reference="camera", tolerance=0.05, policy="interpolate", on_gap="mask"
    )


def main() -> None:
    recordings = [fused(seed) for seed in range(3)]
    steps = tl.MixedDataset(recordings)  # recordings end to end: the steps windows are cut from
    windows = WindowDataset(steps, [len(r) for r in recordings], window=WINDOW, stride=4)
    sampler = WindowSampler([len(r) for r in recordings], window=WINDOW, stride=4, seed=0)
    loader = DataLoader(windows, sampler=sampler, batch_size=16, num_workers=2, collate_fn=tl.collate)
    batch = next(iter(loader))
    print(recordings[0].report)
    print(
        "imu",
        tuple(batch["imu"].shape),
        "imu_valid",
        tuple(batch["imu_valid"].shape),
        "camera",
        tuple(batch["camera"].shape),
    )
    print(
        "windows",
        len(windows),
        "masked steps in recording 0:",
        sum(not s["imu_valid"] for s in recordings[0]),
    )


if __name__ == "__main__":
    main()

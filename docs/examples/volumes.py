"""3-D volumes of different sizes, memory-mapped, batched to one size by cropping or padding."""

import os
import tempfile

import numpy as np
from torch.utils.data import DataLoader

import torchloom as tl
from torchloom.collation import CropOrPadVolumes
from torchloom.datasets import VolumeDataset


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as root:
        for label in ("healthy", "lesion"):  # root/<class>/<scan>.npy, (D, H, W) int16
            os.makedirs(f"{root}/{label}")
            for scan in range(3):
                depth, side = int(rng.integers(20, 40)), int(rng.integers(48, 80))
                np.save(f"{root}/{label}/{scan}.npy", rng.integers(0, 2000, (depth, side, side), np.int16))

        scans = VolumeDataset(root, progress=False)
        print(len(scans), scans.classes, scans.shapes[:2].tolist())  # (C, D, H, W), C = 0: no channel axis
        to_batch = tl.Collate({"volume": CropOrPadVolumes((32, 64, 64), padding="reflect")})
        keys = [tl.SampleKey(index, epoch=0) for index in range(len(scans))]  # reproducible crops
        loader = DataLoader(scans, sampler=keys, batch_size=3, num_workers=2, collate_fn=to_batch)
        batch = next(iter(loader))
        volume, mask = batch["volume"], batch["volume_mask"]
        print(volume.shape, volume.dtype, mask.shape, batch["label"].tolist())
        # torch.Size([3, 32, 64, 64]) torch.int16 torch.Size([3, 32, 64, 64]) [0, 0, 0]


if __name__ == "__main__":
    main()

"""Pixel-centred patches from a hyperspectral scene, split by spatial blocks, with band sampling.

A small synthetic scene (96 × 96 pixels, 64 bands, int16, 4 classes painted as regions) is written
twice in a temporary folder: as an HDF5 file (cube + label mask) and as an ENVI cube (.img + .hdr
with wavelengths). The pipeline a patch classifier trains on:

1. ``spatial_block_split`` assigns 16 × 16 blocks to train/val (no random per-pixel split: nearby
   pixels are near-copies of each other);
2. ``HyperspectralDataset`` takes a 9 × 9 patch around every labelled pixel of the train blocks,
   dropping centres whose patch would reach a val block (``guard=True``);
3. a transform keeps the visible-to-near-infrared bands, then 16 of those drawn at random per
   sample and epoch (reproducible for a ``SampleKey``);
4. a plain DataLoader with 2 workers batches them (each worker opens the HDF5 file itself).

A PCA to 8 components, fitted once on train pixels and saved beside the data, is shown on the
ENVI copy.

Run: ``python examples/hyperspectral_patches.py``
"""

from __future__ import annotations

import os
import tempfile

import h5py
import numpy as np
from torch.utils.data import DataLoader

from torchloom import SampleKey, collate
from torchloom.datasets import HyperspectralDataset, spatial_block_split
from torchloom.io import open_envi, write_envi
from torchloom.transforms import PCA, Compose, RandomBands, WavelengthBands

SIZE, BANDS, PATCH = 96, 64, 9


def synthetic_scene(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cube HWC int16, label mask with 0 = unlabelled, wavelengths in nm)."""
    rng = np.random.default_rng(seed)
    wavelengths = np.linspace(400, 2500, BANDS)
    rows, cols = np.mgrid[:SIZE, :SIZE]
    regions = (rows // (SIZE // 2)) * 2 + cols // (SIZE // 2)  # 4 quadrants, one class each
    spectra = rng.uniform(500, 3000, size=(4, BANDS))
    cube = spectra[regions] + rng.normal(0, 50, size=(SIZE, SIZE, BANDS))
    mask = np.where(rng.random((SIZE, SIZE)) < 0.3, regions + 1, 0)  # 30 % of pixels labelled 1..4
    return cube.astype(np.int16), mask.astype(np.uint8), wavelengths


def main() -> None:
    cube, mask, wavelengths = synthetic_scene()
    with tempfile.TemporaryDirectory(prefix="torchloom-hyperspectral-") as folder:
        h5_path = os.path.join(folder, "scene.h5")
        with h5py.File(h5_path, "w") as handle:
            stored = handle.create_dataset("cube", data=cube, chunks=(16, 16, BANDS))
            stored.attrs["wavelength"] = wavelengths
            handle.create_dataset("labels", data=mask)
        envi_path = write_envi(
            os.path.join(folder, "scene.img"), cube, interleave="bil", wavelengths=wavelengths
        )

        splits = spatial_block_split(mask, block=16, fractions=(0.75, 0.25), seed=0)
        bands = Compose([WavelengthBands((400, 1000), wavelengths=wavelengths), RandomBands(16)])
        train = HyperspectralDataset(
            h5_path, masks="labels", patch_size=PATCH, splits=splits, split=0, transform=bands, seed=1
        )
        val = HyperspectralDataset(h5_path, masks="labels", patch_size=PATCH, splits=splits, split=1)
        print(f"train: {len(train)} patches, val: {len(val)} patches (of {int((mask > 0).sum())} labelled)")

        keys = [SampleKey(int(i), epoch=0) for i in np.random.default_rng(0).permutation(len(train))]
        loader = DataLoader(train, sampler=keys, batch_size=64, num_workers=2, collate_fn=collate)
        batch = next(iter(loader))
        image, labels = batch["image"], batch["label"]
        print(f"batch image {tuple(image.shape)} {image.dtype}, labels {tuple(labels.shape)}")
        row, col = (int(axis[0]) for axis in batch["position"])
        print(f"first patch centre ({row}, {col}), label {int(labels[0])}")

        envi = open_envi(envi_path)
        on_envi = HyperspectralDataset(envi, masks=mask, patch_size=PATCH, splits=splits, split=0)
        pca = PCA.fit_or_load(os.path.join(folder, "pca.npz"), on_envi, 8, pixels=2000, seed=0)
        reused = PCA.fit_or_load(os.path.join(folder, "pca.npz"), on_envi, 8, pixels=2000, seed=0)
        share = pca.variance.sum() / np.var(cube.reshape(-1, BANDS).astype(np.float64), axis=0).sum()
        same = reused.fingerprint == pca.fingerprint
        print(f"PCA: 8 components keep {share:.0%} of the variance; reloaded the same: {same}")
        projected = HyperspectralDataset(
            envi, masks=mask, patch_size=PATCH, splits=splits, split=0, transform=pca
        )
        print(f"ENVI {envi.interleave} patch after PCA: {tuple(projected[0]['image'].shape)}")


if __name__ == "__main__":
    main()

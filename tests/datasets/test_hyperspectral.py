"""HyperspectralDataset over HDF5 and ENVI cubes: workers, hostile files, padding, splits, band transforms."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any

import h5py  # the hdf5 extra, installed by make test
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from torchloom import SampleKey, collate
from torchloom.datasets.hyperspectral import HyperspectralDataset, read_patch
from torchloom.datasets.spatial_split import spatial_block_split
from torchloom.errors import (
    ConfigError,
    DecodeError,
    EmptyDatasetError,
    SampleError,
    TransformError,
)
from torchloom.faults import Skipped
from torchloom.io.cube import ArrayCube
from torchloom.io.envi import open_envi, write_envi
from torchloom.io.hdf5 import Hdf5Cube, require_h5py
from torchloom.transforms import Compose
from torchloom.transforms.bands import RandomBands, SelectBands, WavelengthBands
from torchloom.transforms.pca import PCA

BANDS = 10


def scene(height: int = 12, width: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A cube whose band ``b`` holds ``100 * b`` plus noise (a band is recognisable), and a mask."""
    rng = np.random.default_rng(seed)
    cube = (np.arange(BANDS) * 100 + rng.integers(0, 50, size=(height, width, BANDS))).astype(np.int16)
    mask = rng.integers(0, 4, size=(height, width)).astype(np.uint8)
    return cube, mask


def write_h5(path: Path, cube: np.ndarray, mask: np.ndarray | None = None, layout: str = "HWC") -> str:
    with h5py.File(path, "w") as handle:
        stored = cube.transpose(2, 0, 1) if layout == "CHW" else cube
        dataset = handle.create_dataset("cube", data=stored, chunks=True)
        dataset.attrs["wavelength"] = np.linspace(400, 900, cube.shape[2])
        if mask is not None:
            handle.create_dataset("labels", data=mask)
    return str(path)


def band_patches(path: str) -> HyperspectralDataset:
    """A module-level dataset definition: what spawned workers unpickle."""
    return HyperspectralDataset(path, masks="labels", patch_size=5, transform=RandomBands(4))


def samples_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


# --- HDF5 through DataLoader workers ---------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_hdf5_patches_through_two_workers(tmp_path: Path, start_method: str) -> None:
    cube, mask = scene()
    dataset = band_patches(write_h5(tmp_path / "scene.h5", cube, mask))
    assert len(dataset) == int((mask != 0).sum())
    first = dataset[SampleKey(0, epoch=1)]  # the main process opens the file before forking
    assert len(pickle.dumps(dataset)) < 20_000  # no handle, no data
    keys = [SampleKey(i, epoch=1) for i in range(len(dataset))]
    loader = DataLoader(
        dataset,
        sampler=keys,
        batch_size=8,
        num_workers=2,
        collate_fn=collate,
        multiprocessing_context=start_method,
    )
    seen = []
    for batch in loader:
        assert batch["image"].shape[1:] == (4, 5, 5) and batch["image"].dtype == torch.int16
        for position, index in enumerate(batch["index"].tolist()):
            expected = dataset[SampleKey(index, epoch=1)]
            assert torch.equal(batch["image"][position], expected["image"])
            assert batch["label"][position].item() == expected["label"]
            seen.append(index)
    assert sorted(seen) == list(range(len(dataset)))
    assert samples_equal(first, dataset[SampleKey(0, epoch=1)])


def test_truncated_or_corrupt_hdf5_is_a_decode_error_naming_it(tmp_path: Path) -> None:
    cube, mask = scene(32, 32)
    path = write_h5(tmp_path / "cut.h5", cube, mask)
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(DecodeError, match=r"cut\.h5.*not a readable HDF5 file") as error:
        HyperspectralDataset(path, masks="labels", patch_size=3)
    assert error.value.path == path
    (tmp_path / "junk.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    with pytest.raises(DecodeError, match=r"junk\.h5"):
        Hdf5Cube(tmp_path / "junk.h5")
    good = write_h5(tmp_path / "good.h5", cube, mask)
    with pytest.raises(DecodeError, match=r"has no dataset 'nope'.*\['cube', 'labels'\]"):
        Hdf5Cube(good, "nope")


def test_without_h5py_the_error_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "h5py", None)
    hint = r"pip install h5py \(or, in a torchloom clone, pip install -e '\.\[hdf5\]'\)"
    with pytest.raises(ImportError, match=hint):
        require_h5py()


def test_a_cube_truncated_after_construction_fails_that_sample_by_policy(tmp_path: Path) -> None:
    cube, mask = scene()
    path = write_h5(tmp_path / "later.h5", cube, mask)
    strict = HyperspectralDataset(path, masks="labels", patch_size=3)
    lenient = HyperspectralDataset(path, masks="labels", patch_size=3, on_error="skip")
    os.truncate(path, 600)
    with pytest.raises(SampleError, match=r"later\.h5") as error:
        strict[0]
    assert isinstance(error.value.__cause__, DecodeError)
    skipped = lenient[0]
    assert isinstance(skipped, Skipped) and skipped.path == path and skipped.error == "DecodeError"
    envi = write_envi(tmp_path / "later.img", cube)
    dataset = HyperspectralDataset(envi, masks=mask, patch_size=3, on_error="skip")
    os.truncate(envi, 10)
    assert isinstance(dataset[0], Skipped) and "holds 10 bytes" in dataset[0].reason


# --- patches ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("patch_size", [1, 3, 7, 13])
@pytest.mark.parametrize("padding", ["reflect", "constant"])
def test_patches_at_every_pixel_equal_numpy_pad(tmp_path: Path, patch_size: int, padding: str) -> None:
    cube, _ = scene(5, 6)
    sources = [
        ArrayCube(cube),
        open_envi(write_envi(tmp_path / "c.img", cube, interleave="bil", byte_order=1)),
        Hdf5Cube(write_h5(tmp_path / "c.h5", cube, layout="CHW"), layout="CHW"),
    ]
    half = patch_size // 2
    options: dict[str, Any] = {"constant_values": -7} if padding == "constant" else {}
    padded = np.pad(cube, ((half, half), (half, half), (0, 0)), mode=padding, **options)  # type: ignore[call-overload]
    for source in sources:
        dataset = HyperspectralDataset(
            source,
            masks=np.ones(cube.shape[:2], np.int64),
            patch_size=patch_size,
            padding=padding,
            pad_value=-7,
        )
        assert len(dataset) == cube.shape[0] * cube.shape[1]
        for index in range(len(dataset)):
            sample = dataset[index]
            row, col = sample["position"]
            expected = padded[row : row + patch_size, col : col + patch_size].transpose(2, 0, 1)
            np.testing.assert_array_equal(
                sample["image"].numpy(), expected, err_msg=f"{source!r} {row},{col}"
            )


def test_labels_positions_dtype_and_ignore_label(tmp_path: Path) -> None:
    cube, mask = scene()
    kept = HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=3, dtype="float32")
    rows, cols = np.nonzero(mask)
    assert kept.targets.tolist() == mask[rows, cols].tolist()
    sample = kept[4]
    assert sample["position"] == (rows[4], cols[4]) and sample["image"].dtype == torch.float32
    every = HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=3, ignore_label=None)
    assert len(every) == mask.size
    other = HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=3, ignore_label=3)
    assert 3 not in other.targets and 0 in other.targets


# --- spatial block split ---------------------------------------------------------------------------


def test_spatial_block_split_leaks_no_pixel_between_splits() -> None:
    cube, mask = scene(48, 40, seed=3)
    splits = spatial_block_split(mask, block=8, fractions=(0.7, 0.3), seed=5)
    assert np.array_equal(splits, spatial_block_split(mask, block=8, fractions=(0.7, 0.3), seed=5))
    labelled = np.bincount(splits[mask != 0], minlength=2) / (mask != 0).sum()
    assert abs(labelled[0] - 0.7) < 0.08
    patch = 5
    datasets = [
        HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=patch, splits=splits, split=s)
        for s in (0, 1)
    ]
    centres = [set(zip(d.rows.tolist(), d.cols.tolist(), strict=True)) for d in datasets]
    assert centres[0] and centres[1] and not centres[0] & centres[1]
    half = patch // 2
    for split, dataset in enumerate(datasets):
        for row, col in zip(dataset.rows.tolist(), dataset.cols.tolist(), strict=True):
            window = splits[max(row - half, 0) : row + half + 1, max(col - half, 0) : col + half + 1]
            assert (window == split).all(), f"patch at {row},{col} of split {split} reads another split"
    unguarded = HyperspectralDataset(
        ArrayCube(cube), masks=mask, patch_size=patch, splits=splits, split=1, guard=False
    )
    assert len(unguarded) > len(datasets[1])  # the halo: centres next to a train block
    assert (splits[unguarded.rows, unguarded.cols] == 1).all()


def test_split_settings_are_validated() -> None:
    cube, mask = scene()
    with pytest.raises(ConfigError, match="go together"):
        HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=3, split=0)
    with pytest.raises(ConfigError, match=r"splits= for cube .* shape \(12, 10\)"):
        HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=3, splits=np.zeros((3, 3), int), split=0)
    with pytest.raises(ConfigError, match="odd patch_size"):
        HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=4)
    with pytest.raises(ConfigError, match="not both"):
        HyperspectralDataset(ArrayCube(cube), masks=mask, labels=[1], patch_size=3)
    with pytest.raises(EmptyDatasetError, match="no labelled pixel"):
        HyperspectralDataset(ArrayCube(cube), masks=np.zeros_like(mask), patch_size=3)
    with pytest.raises(ConfigError, match="fractions"):
        spatial_block_split(mask, block=4, fractions=(0.5, -1))
    with pytest.warns(UserWarning, match="got no labelled pixel"):
        spatial_block_split(mask, block=100, fractions=(0.5, 0.5))


# --- band transforms -------------------------------------------------------------------------------


def chosen_bands(image: torch.Tensor) -> list[int]:
    """The band numbers a patch of :func:`scene` holds (band ``b`` reads 100 b to 100 b + 49)."""
    return (image[:, 0, 0] // 100).tolist()


def test_random_bands_are_reproducible_per_key_and_differ_across_epochs() -> None:
    cube, mask = scene()
    dataset = HyperspectralDataset(
        ArrayCube(cube), masks=mask, patch_size=3, transform=RandomBands(4), seed=7
    )
    copy = pickle.loads(pickle.dumps(dataset))
    epochs = []
    for epoch in (0, 1):
        drawn = [chosen_bands(dataset[SampleKey(i, epoch)]["image"]) for i in range(len(dataset))]
        assert drawn == [chosen_bands(copy[SampleKey(i, epoch)]["image"]) for i in range(len(dataset))]
        assert all(bands == sorted(set(bands)) and len(bands) == 4 for bands in drawn)
        epochs.append(drawn)
    assert sum(a != b for a, b in zip(*epochs, strict=True)) > len(dataset) // 2


def test_fixed_and_wavelength_bands(tmp_path: Path) -> None:
    cube, mask = scene()
    wavelengths = np.linspace(400, 2500, BANDS)
    path = write_envi(tmp_path / "w.img", cube, wavelengths=wavelengths)
    source = open_envi(path)
    visible = WavelengthBands([(400, 700), (2400, 2600)], wavelengths=source.wavelengths)
    assert visible.indices.tolist() == [0, 1, 9]
    dataset = HyperspectralDataset(
        path, masks=mask, patch_size=3, transform=Compose([visible, SelectBands([2, 0])])
    )
    assert chosen_bands(dataset[0]["image"]) == [9, 0]
    assert dataset.wavelengths is not None and dataset.wavelengths.tolist() == wavelengths.tolist()
    with pytest.raises(ConfigError, match="wavelengths"):
        WavelengthBands((400, 700), wavelengths=None)
    with pytest.raises(ConfigError, match="no band lies"):
        WavelengthBands((3000, 4000), wavelengths=wavelengths)


def test_a_band_transform_bug_surfaces_even_under_skip() -> None:
    cube, mask = scene()
    dataset = HyperspectralDataset(
        ArrayCube(cube), masks=mask, patch_size=3, transform=RandomBands(50), on_error="skip"
    )
    with pytest.raises(TransformError, match="more bands than the image's 10"):
        dataset[0]


# --- PCA -------------------------------------------------------------------------------------------


def low_rank_scene(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    abundances = rng.random((24, 24, 2))
    endmembers = rng.random((2, BANDS)) * 1000
    cube = (abundances @ endmembers + rng.normal(0, 1, (24, 24, BANDS))).astype(np.float32)
    return cube, rng.integers(1, 3, size=(24, 24))


def test_pca_is_fitted_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cube, mask = low_rank_scene()
    path = write_h5(tmp_path / "s.h5", cube, mask)
    splits = spatial_block_split(mask, block=6, fractions=(0.5, 0.5), seed=0)
    train = HyperspectralDataset(path, masks="labels", patch_size=3, splits=splits, split=0)
    saved = tmp_path / "pca.npz"
    pca = PCA.fit_or_load(saved, train, 3, pixels=200, seed=1)
    assert saved.exists() and pca.variance[:2].sum() / pca.variance.sum() > 0.99
    monkeypatch.setattr(PCA, "fit", classmethod(lambda *args, **kwargs: pytest.fail("refitted")))
    again = PCA.fit_or_load(saved, train, 3, pixels=200, seed=1)
    np.testing.assert_array_equal(again.components, pca.components)
    assert again.fingerprint == pca.fingerprint
    projected = HyperspectralDataset(
        path, masks="labels", patch_size=3, splits=splits, split=0, transform=pca
    )
    image = projected[0]["image"]
    assert image.shape == (3, 3, 3) and image.dtype == torch.float32


def test_pca_save_load_round_trip_and_mismatched_settings_are_refused(tmp_path: Path) -> None:
    cube, mask = low_rank_scene()
    splits = spatial_block_split(mask, block=6, fractions=(0.5, 0.5), seed=0)
    train = HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=3, splits=splits, split=0)
    val = HyperspectralDataset(ArrayCube(cube), masks=mask, patch_size=3, splits=splits, split=1)
    pca = PCA.fit(train, 2, pixels=150, seed=3)
    assert np.array_equal(PCA.fit(train, 2, pixels=150, seed=3).components, pca.components)
    path = tmp_path / "pca.npz"
    pca.save(path)
    loaded = PCA.load(path, source=train, k=2, pixels=150, seed=3)
    for name in ("mean", "components", "variance"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(pca, name))
    patch = cube[:3, :3]
    np.testing.assert_allclose(loaded(patch, np.random.default_rng(0)), pca(patch, np.random.default_rng(0)))
    with pytest.raises(ConfigError, match="k differ"):
        PCA.load(path, source=train, k=3, pixels=150, seed=3)
    with pytest.raises(ConfigError, match="candidates differ"):
        PCA.load(path, source=val, k=2, pixels=150, seed=3)
    with pytest.raises(ConfigError, match="seed differ"):
        PCA.load(path, source=train, k=2, pixels=150, seed=4)
    (tmp_path / "other.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(DecodeError, match=r"other\.npz"):
        PCA.load(tmp_path / "other.npz")


def test_pca_refits_when_the_cube_file_changes(tmp_path: Path) -> None:
    cube, _ = low_rank_scene()
    path = write_envi(tmp_path / "s.img", cube)
    saved = tmp_path / "pca.npz"
    first = PCA.fit_or_load(saved, [open_envi(path)], 2, pixels=100)
    write_envi(path, cube[::-1].copy())
    os.utime(path, ns=(1, 1))
    second = PCA.fit_or_load(saved, [open_envi(path)], 2, pixels=100)
    assert second.fingerprint != first.fingerprint
    assert PCA.load(saved).fingerprint == second.fingerprint


# --- whole cubes -----------------------------------------------------------------------------------


def test_per_cube_labels_over_hdf5_and_envi(tmp_path: Path) -> None:
    cubes = [scene(6, 5, seed=i)[0] for i in range(3)]
    paths = [write_h5(tmp_path / f"{i}.h5", cube, layout="CHW") for i, cube in enumerate(cubes[:2])]
    paths.append(write_envi(tmp_path / "2.img", cubes[2], interleave="bip"))
    dataset = HyperspectralDataset(paths, labels=[2, 0, 1], layout="CHW")
    assert len(dataset) == 3 and dataset.targets.tolist() == [2, 0, 1] and dataset.pixel_index() is None
    batch = next(iter(DataLoader(dataset, batch_size=3, collate_fn=collate)))
    assert batch["image"].shape == (3, BANDS, 6, 5) and batch["label"].tolist() == [2, 0, 1]
    assert "position" not in batch and batch["path"] == paths
    for i, cube in enumerate(cubes):
        np.testing.assert_array_equal(batch["image"][i].numpy(), cube.transpose(2, 0, 1))
    with pytest.raises(ConfigError, match="one int per cube"):
        HyperspectralDataset(paths, labels=[1, 2], layout="CHW")
    unlabelled = HyperspectralDataset(ArrayCube(cubes[0]))
    assert unlabelled[0]["label"] == -1


def test_envi_and_hdf5_give_the_same_patches(tmp_path: Path) -> None:
    cube, mask = scene()
    from_h5 = HyperspectralDataset(write_h5(tmp_path / "a.h5", cube, mask), masks="labels", patch_size=5)
    from_envi = HyperspectralDataset(
        write_envi(tmp_path / "a.img", cube, interleave="bsq"), masks=mask, patch_size=5
    )
    assert len(from_h5) == len(from_envi)
    for index in range(0, len(from_h5), 7):
        assert torch.equal(from_h5[index]["image"], from_envi[index]["image"])
    assert read_patch(ArrayCube(cube), 0, 0, 5).shape == (5, 5, BANDS)

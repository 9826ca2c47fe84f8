"""EXIF orientation: applied by default (as viewers show the photo), consistent with header probing,
DCT-scaled decoding and crop planning; ``exif_orientation=False`` keeps the stored order."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image as PILImage
from PIL import ImageOps

from torchloom import FolderDataset, read_image
from torchloom.io.image import probe_image
from torchloom.io.orientation import jpeg_orientation, orient
from torchloom.testing import synthetic_image
from torchloom.transforms import RandomResizedCrop


def jpeg_with_orientation(orientation: int, height: int = 96, width: int = 160) -> bytes:
    stored = synthetic_image(np.random.default_rng(orientation), height, width, orientation)
    image = PILImage.fromarray(stored)
    exif = image.getexif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=95, exif=exif.tobytes())
    return out.getvalue()


@pytest.mark.parametrize("orientation", range(1, 9))
def test_jpeg_orientation_is_read_and_applied_like_pillow(tmp_path: Path, orientation: int) -> None:
    data = jpeg_with_orientation(orientation)
    assert jpeg_orientation(data) == orientation
    path = tmp_path / "photo.jpg"
    path.write_bytes(data)
    upright = read_image(path)
    stored = simplejpeg.decode_jpeg(data, colorspace="RGB")
    np.testing.assert_array_equal(upright, orient(stored, orientation))
    expected_shape = np.asarray(ImageOps.exif_transpose(PILImage.open(io.BytesIO(data)))).shape
    assert upright.shape == expected_shape
    header = probe_image(data, path)
    assert (header.height, header.width) == upright.shape[:2] and header.orientation == orientation
    np.testing.assert_array_equal(read_image(path, exif_orientation=False), stored)


def test_dct_scaled_decoding_keeps_the_displayed_minimum(tmp_path: Path) -> None:
    path = tmp_path / "portrait.jpg"
    path.write_bytes(jpeg_with_orientation(6, height=400, width=800))  # displayed 800 x 400
    full = read_image(path)
    assert full.shape[:2] == (800, 400)
    small = read_image(path, min_size=(190, 95))  # 1/4 of the displayed size suffices
    assert small.shape[:2] == (200, 100)


def test_pngs_are_oriented_too(tmp_path: Path) -> None:
    stored = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    image = PILImage.fromarray(stored)
    exif = image.getexif()
    exif[0x0112] = 8
    image.save(tmp_path / "a.png", exif=exif.tobytes())
    np.testing.assert_array_equal(read_image(tmp_path / "a.png"), orient(stored, 8))


def test_datasets_crop_the_upright_photo_and_can_keep_the_stored_one(tmp_path: Path) -> None:
    (tmp_path / "data" / "cat").mkdir(parents=True)
    (tmp_path / "data" / "cat" / "p.jpg").write_bytes(jpeg_with_orientation(6, height=300, width=600))
    upright = FolderDataset(tmp_path / "data", progress=False)
    assert tuple(upright[0]["image"].shape) == (3, 600, 300)
    stored = FolderDataset(tmp_path / "data", progress=False, exif_orientation=False)
    assert tuple(stored[0]["image"].shape) == (3, 300, 600)
    cropped = FolderDataset(tmp_path / "data", transform=RandomResizedCrop(64), progress=False)
    assert tuple(cropped[0]["image"].shape) == (3, 64, 64)


def test_malformed_exif_means_as_stored() -> None:
    head = b"\xff\xd8"
    broken = head + b"\xff\xe1\x00\x10Exif\x00\x00MM\x00\x2a\xff\xff\xff\xff" + b"\xff\xd9"
    assert jpeg_orientation(broken) == 1
    assert jpeg_orientation(head + b"\xff\xe1\x00\x01") == 1
    assert jpeg_orientation(b"") == 1


def test_a_planned_crop_of_an_oriented_jpeg_matches_cropping_the_upright_image(tmp_path: Path) -> None:
    from torchloom import SampleKey, sample_rng

    (tmp_path / "data" / "cat").mkdir(parents=True)
    (tmp_path / "data" / "cat" / "p.jpg").write_bytes(jpeg_with_orientation(6, height=600, width=1000))
    crop = RandomResizedCrop(96, scale=(0.5, 0.6))
    dataset = FolderDataset(tmp_path / "data", transform=crop, progress=False)
    for epoch in range(4):
        planned = dataset[SampleKey(0, epoch)]["image"].permute(1, 2, 0).numpy().astype(np.float64)
        reference = crop(read_image(tmp_path / "data" / "cat" / "p.jpg"), sample_rng(0, epoch, 0))
        assert np.abs(planned - reference.astype(np.float64)).mean() < 12, f"epoch {epoch}"

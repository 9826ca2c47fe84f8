"""read_image: every image kind decodes like Pillow; every broken file is a typed error."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from conftest import png_declaring, write_jpeg
from torchloom import read_image
from torchloom._buffers.pool import ScratchArrays
from torchloom.errors import DecodeError
from torchloom.io.image import (
    HEADER_PROBE_BYTES,
    decode_image,
    jpeg_scale_for,
    probe_file,
    probe_image,
)
from torchloom.testing import synthetic_image

RGB = synthetic_image(np.random.default_rng(3), 40, 56, 2)


def _pillow_rgb(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _save(path: Path, image: Image.Image, fmt: str, **options: object) -> Path:
    image.save(path, fmt, **options)
    return path


KINDS = {
    "jpeg_rgb": lambda p: _save(p, Image.fromarray(RGB), "JPEG", quality=92),
    "jpeg_gray": lambda p: _save(p, Image.fromarray(RGB).convert("L"), "JPEG"),
    "jpeg_cmyk": lambda p: _save(p, Image.fromarray(RGB).convert("CMYK"), "JPEG"),
    "jpeg_444": lambda p: _save(p, Image.fromarray(RGB), "JPEG", subsampling="4:4:4"),
    "png_rgb": lambda p: _save(p, Image.fromarray(RGB), "PNG"),
    "png_rgba": lambda p: _save(p, Image.fromarray(RGB).convert("RGBA"), "PNG"),
    "png_gray": lambda p: _save(p, Image.fromarray(RGB).convert("L"), "PNG"),
    "png_gray_alpha": lambda p: _save(p, Image.fromarray(RGB).convert("LA"), "PNG"),
    "png_palette": lambda p: _save(p, Image.fromarray(RGB).convert("P"), "PNG"),
    "png_bilevel": lambda p: _save(p, Image.fromarray(RGB).convert("1"), "PNG"),
    "bmp": lambda p: _save(p, Image.fromarray(RGB), "BMP"),
    "tiff": lambda p: _save(p, Image.fromarray(RGB), "TIFF"),
    "tiff_cmyk": lambda p: _save(p, Image.fromarray(RGB).convert("CMYK"), "TIFF"),
    "webp_lossless": lambda p: _save(p, Image.fromarray(RGB), "WEBP", lossless=True),
    "webp_alpha": lambda p: _save(p, Image.fromarray(RGB).convert("RGBA"), "WEBP", lossless=True),
    "gif": lambda p: _save(p, Image.fromarray(RGB).convert("P"), "GIF"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_decodes_like_pillow(tmp_path: Path, kind: str) -> None:
    path = KINDS[kind](tmp_path / f"{kind}.img")
    image = read_image(path)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert image.flags.c_contiguous and image.flags.writeable
    reference = _pillow_rgb(path)
    tolerance = 2 if kind.startswith("jpeg") else 0
    assert np.abs(image.astype(int) - reference.astype(int)).max() <= tolerance


def test_alpha_is_dropped_not_composited(tmp_path: Path) -> None:
    rgba = np.dstack([RGB, np.zeros(RGB.shape[:2], np.uint8)])
    path = _save(tmp_path / "clear.png", Image.fromarray(rgba, "RGBA"), "PNG")
    np.testing.assert_array_equal(read_image(path), RGB)


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_sixteen_bit_keeps_the_high_byte(tmp_path: Path, fmt: str) -> None:
    wide = (np.arange(40 * 56, dtype=np.uint32).reshape(40, 56) * 29 % 65536).astype(np.uint16)
    path = tmp_path / f"wide.{fmt.lower()}"
    Image.fromarray(wide).save(path, fmt)
    image = read_image(path)
    expected = (wide >> 8).astype(np.uint8)
    for channel in range(3):
        np.testing.assert_array_equal(image[:, :, channel], expected)


def test_jpeg_dct_scaling_picks_the_smallest_sufficient_scale(tmp_path: Path) -> None:
    path = tmp_path / "big.jpg"
    write_jpeg(path, height=1080, width=1920)
    assert read_image(path).shape == (1080, 1920, 3)
    assert read_image(path, min_size=224).shape == (270, 480, 3)
    assert read_image(path, min_size=(540, 100)).shape == (540, 960, 3)
    assert read_image(path, min_size=2000).shape == (1080, 1920, 3)
    assert jpeg_scale_for(1080, 1920, 100) == 8


def test_unicode_and_spaces_in_path(tmp_path: Path) -> None:
    path = tmp_path / "数据 集" / "猫 的 照片 1.jpg"
    write_jpeg(path)
    assert read_image(path).shape == (48, 64, 3)
    assert read_image(str(path)).shape == (48, 64, 3)


def _truncated_jpeg(path: Path) -> None:
    data = simplejpeg.encode_jpeg(RGB)
    path.write_bytes(data[: len(data) // 2])


def _truncated_png(path: Path) -> None:
    buffer = io.BytesIO()
    Image.fromarray(synthetic_image(np.random.default_rng(0), 200, 200, 0)).save(buffer, "PNG")
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])


BROKEN = {
    "zero_bytes.jpg": (lambda p: p.write_bytes(b""), "empty"),
    "text.jpg": (lambda p: p.write_text("hello, I am not a JPEG"), "not a supported image"),
    "truncated.jpg": (_truncated_jpeg, "truncated"),
    "truncated.png": (_truncated_png, "truncated"),
    "corrupt.jpg": (lambda p: p.write_bytes(b"\xff\xd8\xff" + bytes(range(256)) * 4), "JPEG"),
    "bomb.png": (lambda p: p.write_bytes(png_declaring(100_000, 100_000)), "bomb"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_files_raise_decode_error_naming_the_file(tmp_path: Path, name: str) -> None:
    make, reason = BROKEN[name]
    path = tmp_path / name
    make(path)
    with pytest.raises(DecodeError) as caught:
        read_image(path)
    assert caught.value.path == str(path)
    assert str(path) in str(caught.value)
    assert reason in str(caught.value)


def test_pixel_guard_is_configurable(tmp_path: Path) -> None:
    path = tmp_path / "ok.png"
    Image.fromarray(RGB).save(path)
    with pytest.raises(DecodeError, match="max_pixels"):
        read_image(path, max_pixels=100)
    data = simplejpeg.encode_jpeg(RGB)
    with pytest.raises(DecodeError, match="decompression-bomb guard"):
        decode_image(data, "x.jpg", max_pixels=100)
    with pytest.raises(DecodeError, match="max_pixels"):
        probe_image(data, "x.jpg", max_pixels=100)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing\.jpg"):
        read_image(tmp_path / "missing.jpg")


def test_float_images_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "float.tiff"
    Image.fromarray(np.zeros((4, 4), np.float32)).save(path)
    with pytest.raises(DecodeError, match="mode F"):
        read_image(path)


def test_decoding_into_scratch_buffers_never_overwrites_a_kept_image(tmp_path: Path) -> None:
    scratch = ScratchArrays()
    datas = [write_jpeg(tmp_path / f"{i}.jpg", 40, 56, seed=i) for i in range(4)]
    plain = [decode_image(data, f"{i}.jpg") for i, data in enumerate(datas)]
    kept = decode_image(datas[0], "0.jpg", scratch=scratch)
    cropped = decode_image(datas[1], "1.jpg", scratch=scratch)[5:20, 3:9]  # a view keeps its buffer
    for i in (2, 3, 2, 3):
        assert np.array_equal(decode_image(datas[i], f"{i}.jpg", scratch=scratch), plain[i])
    assert np.array_equal(kept, plain[0]) and np.array_equal(cropped, plain[1][5:20, 3:9])
    scaled = decode_image(datas[0], "0.jpg", min_size=(10, 10), scratch=scratch)  # 1/4 scale: 10x14
    assert np.array_equal(scaled, decode_image(datas[0], "0.jpg", min_size=(10, 10)))


def test_scratch_buffers_are_reused_once_free_and_not_pickled() -> None:
    scratch = ScratchArrays(limit=2)
    first = scratch.take(100)
    assert scratch.take(50) is not first  # held: a second buffer
    address = first.ctypes.data
    del first
    assert scratch.take(80).ctypes.data == address  # free and big enough: reused
    held = [scratch.take(10), scratch.take(10)]  # both pooled buffers, now held
    extra = scratch.take(10)  # the pool is full and nothing is free: a new, unpooled buffer
    assert len({buffer.ctypes.data for buffer in [*held, extra]}) == 3 and len(scratch._buffers) == 2
    assert len(pickle.loads(pickle.dumps(scratch))._buffers) == 0


def test_a_corrupt_jpeg_reports_the_same_error_with_a_scratch_buffer(tmp_path: Path) -> None:
    data = write_jpeg(tmp_path / "a.jpg", 40, 56)
    broken = data[:200] + b"\x00" * 50
    with pytest.raises(DecodeError) as plain:
        decode_image(broken, "a.jpg")
    with pytest.raises(DecodeError) as with_scratch:
        decode_image(broken, "a.jpg", scratch=ScratchArrays())
    assert str(with_scratch.value) == str(plain.value) and "a.jpg" in str(plain.value)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_with_its_own_scratch_pool() -> None:
    scratch = ScratchArrays()
    scratch.take(64)
    scratch._lock.acquire()  # as if a thread of the parent was inside take() when it forked
    try:
        pid = os.fork()
        if pid == 0:  # the child: take() must neither hang on the copied lock nor reuse the parent's buffers
            os._exit(0 if scratch.take(64) is not None and len(scratch._buffers) == 1 else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        scratch._lock.release()
    assert os.waitstatus_to_exitcode(status) == 0


def _png_with_exif_after_the_pixels(image: np.ndarray, orientation: int) -> bytes:
    """A valid PNG whose eXIf chunk follows its IDAT chunks (the PNG spec allows it)."""
    import struct
    import zlib

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=0)
    raw = buffer.getvalue()
    exif = Image.Exif()
    exif[0x0112] = orientation
    tiff = exif.tobytes()
    tiff = tiff[6:] if tiff.startswith(b"Exif\0\0") else tiff
    end = raw.rfind(b"IEND") - 4
    return raw[:end] + chunk(b"eXIf", tiff) + raw[end:]


def test_a_large_png_with_its_orientation_after_the_pixels_probes_upright(tmp_path: Path) -> None:
    image = np.random.default_rng(0).integers(0, 256, (200, 300, 3), dtype=np.uint8)
    path = tmp_path / "late.png"
    path.write_bytes(_png_with_exif_after_the_pixels(image, 6))
    assert path.stat().st_size > HEADER_PROBE_BYTES  # the probe's prefix cannot hold the chunk
    header = probe_file(path)
    assert (header.height, header.width, header.orientation) == (300, 200, 6)
    assert read_image(path).shape == (300, 200, 3)  # decoding agrees (the cache checks that it does)


HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64
AVIF = b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf" + b"\x00" * 64


@pytest.mark.parametrize(("data", "name"), [(HEIC, "HEIC"), (AVIF, "AVIF")])
def test_a_phone_photo_named_jpg_is_named_for_what_it_is(tmp_path: Path, data: bytes, name: str) -> None:
    path = tmp_path / "IMG_0001.jpg"
    path.write_bytes(data)
    for read in (read_image, probe_file):
        with pytest.raises(DecodeError) as caught:
            read(path)
        assert caught.value.reason == (
            f"{name} image named .jpg: not supported; convert it (e.g. with `heif-convert`)"
        )
    own = tmp_path / f"IMG_0002.{name.lower()}"
    own.write_bytes(data)
    with pytest.raises(DecodeError, match=f"'{own}': {name} image: not supported"):
        read_image(own)
    mp4 = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom"
    with pytest.raises(DecodeError, match="not a supported image"):  # an ISO container, not an image
        decode_image(mp4, "clip.jpg")

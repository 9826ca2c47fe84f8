"""Hostile cube and volume files, built the way real sources build them (h5py's external storage,
external links and virtual datasets; npy headers as a writer may leave them; symlinked folders;
tampered PCA files): each read right, or refused with a typed error naming the file, which the
fault policy handles. Nothing returns the bytes of a file beside the data."""

from __future__ import annotations

import io
import json
import os
import struct
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from torchloom.datasets.hyperspectral import HyperspectralDataset
from torchloom.datasets.volume import VolumeDataset
from torchloom.errors import ConfigError, DecodeError, HeaderError, SampleError, UnsafeFileError
from torchloom.faults import Skipped
from torchloom.io.cube import ArrayCube
from torchloom.io.envi import open_envi, write_envi
from torchloom.io.hdf5 import Hdf5Cube, read_hdf5_array
from torchloom.io.volume import probe_volume, read_volume, verify_volume
from torchloom.transforms import pca as pca_module
from torchloom.transforms.pca import PCA

h5py = pytest.importorskip("h5py")

SECRET = b"-----BEGIN PRIVATE KEY-----\n" + bytes(range(256)) * 4


@pytest.fixture
def beside(tmp_path: Path) -> Path:
    """A data folder, with a key file and an HDF5 file of that key next to it (outside it)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "id.key").write_bytes(SECRET)
    with h5py.File(tmp_path / "other.h5", "w") as handle:
        handle.create_dataset("cube", data=np.frombuffer(SECRET[:64], np.uint8).reshape(4, 4, 4))
    return tmp_path


# -- HDF5: nothing outside the file ------------------------------------------------------------------


def external_storage(folder: Path, handle: Any) -> None:
    handle.create_dataset("cube", shape=(4, 4, 4), dtype="u1", external=[(str(folder / "id.key"), 0, 64)])


def external_link(folder: Path, handle: Any) -> None:
    handle["cube"] = h5py.ExternalLink(str(folder / "other.h5"), "/cube")


def relative_external_link(folder: Path, handle: Any) -> None:
    handle["cube"] = h5py.ExternalLink("../other.h5", "/cube")


def external_group(folder: Path, handle: Any) -> None:
    handle["scene"] = h5py.ExternalLink(str(folder / "other.h5"), "/")
    handle["cube"] = h5py.SoftLink("/scene/cube")  # an in-file alias of the outside dataset


def virtual_dataset(folder: Path, handle: Any) -> None:
    layout = h5py.VirtualLayout(shape=(4, 4, 4), dtype="u1")
    layout[:] = h5py.VirtualSource(str(folder / "other.h5"), "cube", shape=(4, 4, 4))
    handle.create_virtual_dataset("cube", layout)


def soft_link_loop(folder: Path, handle: Any) -> None:
    handle["a"] = h5py.SoftLink("/cube")
    handle["cube"] = h5py.SoftLink("/a")


OUTSIDE = [
    (external_storage, "external raw storage"),
    (external_link, "external link"),
    (relative_external_link, "external link"),
    (external_group, "external link"),
    (virtual_dataset, "virtual dataset"),
    (soft_link_loop, "soft links"),
]


def build_h5(path: Path, build: Callable[[Path, Any], None], folder: Path) -> str:
    with h5py.File(path, "w") as handle:
        build(folder, handle)
        handle.create_dataset("labels", data=np.ones((4, 4), np.uint8))
    return str(path)


@pytest.mark.parametrize(("build", "reason"), OUTSIDE, ids=[build.__name__ for build, _ in OUTSIDE])
def test_hdf5_datasets_reaching_outside_the_file_are_refused(
    beside: Path, build: Callable[[Path, Any], None], reason: str
) -> None:
    path = build_h5(beside / "data" / "scene.h5", build, beside)
    for read in (lambda: Hdf5Cube(path).read(), lambda: read_hdf5_array(path, "cube")):
        with pytest.raises(DecodeError, match=reason) as error:
            read()
        assert error.value.path == path
    with pytest.raises(DecodeError, match=reason):
        HyperspectralDataset(path, masks="labels", patch_size=3)


def test_a_mask_behind_an_external_link_is_refused(beside: Path) -> None:
    path = beside / "data" / "scene.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("cube", data=np.zeros((4, 4, 2), np.float32))
        handle["labels"] = h5py.ExternalLink(str(beside / "other.h5"), "/cube")
    with pytest.raises(DecodeError, match="external link"):
        HyperspectralDataset(str(path), masks="labels", patch_size=3)


def test_in_file_soft_links_and_groups_still_read(tmp_path: Path) -> None:
    values = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    path = tmp_path / "linked.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("scene/raw/cube", data=values)
        handle["scene/alias"] = h5py.SoftLink("raw/cube")  # relative to its group
        handle["top"] = h5py.SoftLink("/scene/alias")
    for name in ("scene/raw/cube", "/scene/raw/cube", "scene/alias", "top", "scene/./raw//cube"):
        np.testing.assert_array_equal(Hdf5Cube(path, name).read(), values)


def test_hdf5_replaced_by_an_external_link_after_construction_fails_by_policy(beside: Path) -> None:
    path = beside / "data" / "scene.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("cube", data=np.zeros((4, 4, 4), np.uint8))
    dataset = HyperspectralDataset(str(path), labels=[0], on_error="skip")
    build_h5(beside / "data" / "swap.h5", external_link, beside)
    os.replace(beside / "data" / "swap.h5", path)
    dataset.cubes[0].close()  # the next read opens the file again, as a new worker does
    skipped = dataset[0]
    assert isinstance(skipped, Skipped) and skipped.path == str(path) and "external link" in skipped.reason


# -- sizes checked before anything is read ----------------------------------------------------------


def test_a_small_hdf5_declaring_a_huge_mask_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge_mask.h5"
    with h5py.File(path, "w") as handle:  # as a labelling tool leaves an unwritten, compressed mask
        handle.create_dataset("cube", data=np.zeros((8, 8, 3), np.float32))
        handle.create_dataset(
            "labels", shape=(45000, 45000), dtype="u1", chunks=(1000, 1000), compression="gzip"
        )
    assert path.stat().st_size < 64 << 10
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=r"shape \(8, 8\), got uint8 \(45000, 45000\)"):
            HyperspectralDataset(str(path), masks="labels", patch_size=3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20
    with pytest.raises(DecodeError, match="more than max_bytes=1,000,000"):
        read_hdf5_array(path, "labels", max_bytes=1_000_000)


@pytest.mark.parametrize("shape", [(2**62, 2, 2), (2**40, 2**40, 1)])
def test_an_hdf5_cube_no_machine_could_hold_is_refused_at_opening(
    tmp_path: Path, shape: tuple[int, ...]
) -> None:
    path = tmp_path / "vast.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("cube", shape=shape, dtype="u1", chunks=(1, 1, 1))
    with pytest.raises(DecodeError, match="numpy can address") as error:
        Hdf5Cube(path)
    assert error.value.path == str(path)


def test_a_small_hdf5_declaring_a_vast_whole_cube_sample_is_refused_at_construction(tmp_path: Path) -> None:
    path = tmp_path / "vast.h5"
    with h5py.File(path, "w") as handle:  # 1.4 KB declaring 754 GiB: each sample was a MemoryError
        handle.create_dataset("cube", shape=(45000, 45000, 200), dtype="i2", chunks=(64, 64, 200))
    with pytest.raises(DecodeError, match="read it as patches") as error:
        HyperspectralDataset(str(path), labels=[0], on_error="skip")
    assert error.value.path == str(path)


def test_an_hdf5_mask_with_a_null_dataspace_is_a_decode_error(tmp_path: Path) -> None:
    path = tmp_path / "null.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("cube", data=np.zeros((4, 4, 2), np.float32))
        handle.create_dataset("labels", data=h5py.Empty("u1"))
    with pytest.raises(DecodeError, match="null dataspace"):
        HyperspectralDataset(str(path), masks="labels", patch_size=3)


def bomb_cube(handle: Any) -> None:  # 16000² bands in one gzip chunk each: 256 MB per 1-pixel read
    handle.create_dataset("cube", (16000, 16000, 4), "u1", chunks=(16000, 16000, 1), compression="gzip")


def bomb_cube_bands_first(handle: Any) -> None:
    handle.create_dataset("cube", (4, 16000, 16000), "u1", chunks=(1, 16000, 16000), compression="lzf")


def bomb_mask(handle: Any) -> None:  # a 4×4 mask in a resizable dataset's 900 MB chunk
    handle.create_dataset("cube", data=np.zeros((4, 4, 2), np.float32))
    handle.create_dataset(
        "labels", (4, 4), "u1", maxshape=(None, None), chunks=(30000, 30000), compression="gzip"
    )


CHUNK_BOMBS: dict[str, tuple[Callable[[Any], None], Callable[[str], object], str]] = {
    "cube": (bomb_cube, Hdf5Cube, r"\(16000, 16000, 1\) uint8, 256,000,000 bytes.*CHUNK=1000x1000x1"),
    "cube bands first": (
        bomb_cube_bands_first,
        lambda path: Hdf5Cube(path, layout="CHW"),
        r"\(1, 16000, 16000\) uint8, 256,000,000 bytes.*CHUNK=1x1000x1000",
    ),
    "mask": (
        bomb_mask,
        lambda path: read_hdf5_array(path, "labels"),
        r"'labels' .*\(30000, 30000\) uint8, 900,000,000 bytes.*labels:CHUNK=4x4 ",
    ),
    "mask of a dataset": (
        bomb_mask,
        lambda path: HyperspectralDataset(path, masks="labels", patch_size=3, on_error="skip"),
        "900,000,000 bytes",
    ),
}


@pytest.mark.parametrize("case", sorted(CHUNK_BOMBS))
def test_hdf5_compressed_chunks_past_the_read_budget_are_refused_at_opening(
    tmp_path: Path, case: str
) -> None:
    build, opened, message = CHUNK_BOMBS[case]
    path = tmp_path / "bomb.h5"
    with h5py.File(path, "w") as handle:
        build(handle)
    assert path.stat().st_size < 64 << 10
    with pytest.raises(DecodeError, match=message) as error:
        opened(str(path))
    assert error.value.path == str(path) and "h5repack" in str(error.value)


def test_hdf5_large_chunks_read_when_uncompressed_or_allowed(tmp_path: Path) -> None:
    path = tmp_path / "scene.h5"
    with h5py.File(path, "w") as handle:
        bomb_cube(handle)  # unwritten: read as its fill value, nothing inflated
        handle.create_dataset("plain", (16000, 16000, 4), "u1", chunks=(16000, 16000, 1))  # read in part
    assert Hdf5Cube(path, max_chunk_bytes=256_000_000).read(slice(0, 1), slice(1, 2)).tolist() == [[[0] * 4]]
    assert Hdf5Cube(path, "plain").read(slice(0, 1), slice(1, 2)).tolist() == [[[0] * 4]]


def test_hdf5_replaced_by_one_in_larger_chunks_is_refused_at_the_read(tmp_path: Path) -> None:
    path = tmp_path / "scene.h5"
    for name, chunks in (("scene.h5", (16, 16, 4)), ("swap.h5", (64, 64, 4))):
        with h5py.File(tmp_path / name, "w") as handle:
            handle.create_dataset("cube", data=np.ones((64, 64, 4), "u1"), chunks=chunks, compression="gzip")
    cube = Hdf5Cube(path, max_chunk_bytes=8192)
    os.replace(tmp_path / "swap.h5", path)
    with pytest.raises(DecodeError, match="16,384 bytes each, more than max_chunk_bytes=8,192"):
        cube.read(slice(0, 1), slice(0, 1))


def npy_bytes(shape: str, descr: str = "<f8", data: bytes = b"\0" * 64) -> bytes:
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (-(len(header) + 11) % 64) + b"\n"  # padded to 64 bytes, as np.save pads it
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data


HOSTILE_SHAPES = [
    "(0, 1000000000000, 1000000000000)",
    "(0, 18446744073709551616)",
    "(9223372036854775807, 0)",
]


@pytest.mark.parametrize("shape", HOSTILE_SHAPES)
@pytest.mark.parametrize("container", ["npy", "stored npz", "compressed npz"])
def test_volume_shapes_numpy_cannot_address_are_decode_errors(
    tmp_path: Path, shape: str, container: str
) -> None:
    data = npy_bytes(shape)
    if container == "npy":
        path = tmp_path / "v.npy"
        path.write_bytes(data)
    else:
        path = tmp_path / "v.npz"
        method = zipfile.ZIP_STORED if container == "stored npz" else zipfile.ZIP_DEFLATED
        with zipfile.ZipFile(path, "w", method) as archive:
            archive.writestr("ct.npy", data)
    for read in (probe_volume, read_volume):
        with pytest.raises(DecodeError, match="numpy can address") as error:
            read(path)
        assert error.value.path == str(path)


def test_a_folder_of_volumes_reports_the_unaddressable_one_and_keeps_the_rest(tmp_path: Path) -> None:
    np.save(tmp_path / "good.npy", np.zeros((2, 3, 4), np.int16))
    (tmp_path / "crafted.npy").write_bytes(npy_bytes("(0, 18446744073709551616, 1)"))
    volumes = VolumeDataset(tmp_path, progress=False)
    assert len(volumes) == 1 and volumes.shapes.tolist() == [[0, 2, 3, 4]]
    assert [os.path.basename(path) for path, _ in volumes.report.invalid] == ["crafted.npy"]
    (tmp_path / "good.npy").write_bytes(npy_bytes("(0, 1000000000000, 1000000000000)"))
    with pytest.raises(SampleError, match="numpy can address"):
        volumes[0]


# -- npz members compressed with a method zipfile cannot inflate -----------------------------------


def recompressed(path: Path, method: int) -> Path:
    """The npz at ``path`` as an archiver using zip ``method`` labels it (7-Zip and Windows write
    Deflate64, 9, for large files; newer tools Zstandard, 93): zipfile refuses such members
    before it inflates a byte, so only the method fields need to say it."""
    data = bytearray(path.read_bytes())
    for signature, field in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        at = data.find(signature)
        while at >= 0:
            data[at + field : at + field + 2] = struct.pack("<H", method)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
    return path


UNSUPPORTED_METHODS = {9: r"method 9 \(Deflate64", 93: r"method 93 \(Zstandard|does not inflate"}


@pytest.mark.parametrize("method", sorted(UNSUPPORTED_METHODS))
def test_npz_volume_in_an_unsupported_zip_method_is_a_decode_error(tmp_path: Path, method: int) -> None:
    np.savez_compressed(tmp_path / "ct.npz", image=np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    path = recompressed(tmp_path / "ct.npz", method)
    for read in (probe_volume, read_volume, verify_volume):
        with pytest.raises(DecodeError, match=UNSUPPORTED_METHODS[method]) as error:
            read(path)
        assert error.value.path == str(path)
        assert method == 93 or "np.savez_compressed" in str(error.value)


def test_a_folder_of_volumes_reports_the_deflate64_one_and_keeps_the_rest(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    np.save(tmp_path / "a" / "good.npy", np.zeros((2, 3, 4), np.int16))
    np.savez_compressed(tmp_path / "a" / "bad.npz", np.ones((2, 3, 4), np.int16))
    recompressed(tmp_path / "a" / "bad.npz", 9)
    volumes = VolumeDataset(tmp_path, on_error="skip", progress=False)
    assert len(volumes) == 1 and volumes[0]["path"] == str(tmp_path / "a" / "good.npy")
    (bad, reason), = volumes.report.invalid
    assert bad == str(tmp_path / "a" / "bad.npz") and "Deflate64" in reason


# -- ENVI: the data file named by the header stays in its folder --------------------------------------


def test_envi_data_file_through_a_symlinked_sub_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    write_envi(tmp_path / "elsewhere" / "x.img", np.zeros((2, 2, 2), np.uint8))
    os.symlink(tmp_path / "elsewhere", tmp_path / "data" / "sub")
    header = (tmp_path / "elsewhere" / "x.hdr").read_text() + "data file = sub/x.img\n"
    (tmp_path / "data" / "scene.hdr").write_text(header)
    with pytest.raises(HeaderError, match="outside the header's folder") as error:
        open_envi(tmp_path / "data" / "scene.hdr")
    assert error.value.path == str(tmp_path / "data" / "scene.hdr")
    os.symlink(tmp_path / "elsewhere" / "x.img", tmp_path / "data" / "link.img")  # a link to a file
    (tmp_path / "data" / "linked.hdr").write_text(header.replace("sub/x.img", "link.img"))
    with pytest.raises(HeaderError, match="resolves to"):
        open_envi(tmp_path / "data" / "linked.hdr")


def test_envi_sub_folder_swapped_for_a_symlink_after_opening_is_refused_at_the_read(tmp_path: Path) -> None:
    values = np.arange(8, dtype=np.uint8).reshape(2, 2, 2)
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    write_envi(tmp_path / "data" / "sub" / "x.img", values)
    write_envi(tmp_path / "elsewhere" / "x.img", values + 100)
    header = (tmp_path / "data" / "sub" / "x.hdr").read_text() + "data file = sub/x.img\n"
    (tmp_path / "data" / "scene.hdr").write_text(header)
    cube = open_envi(tmp_path / "data" / "scene.hdr")  # validated: inside, and not mapped yet
    os.rename(tmp_path / "data" / "sub", tmp_path / "data" / "old")
    os.symlink(tmp_path / "elsewhere", tmp_path / "data" / "sub")
    with pytest.raises(UnsafeFileError, match="outside"):
        cube.read()


def envi_beside_link(data: Path) -> Path:
    os.symlink(data.parent / "elsewhere" / "x.img", data / "scene.img")  # no data file line
    return data / "scene.hdr"


def envi_opened_from_the_link(data: Path) -> Path:
    envi_beside_link(data)
    return data / "scene.img"


@pytest.mark.parametrize("opened", [envi_beside_link, envi_opened_from_the_link])
def test_envi_data_file_found_beside_the_header_through_a_symlink_is_refused(
    tmp_path: Path, opened: Callable[[Path], Path]
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    write_envi(tmp_path / "elsewhere" / "x.img", np.frombuffer(SECRET[:8], np.uint8).reshape(2, 2, 2))
    (tmp_path / "data" / "scene.hdr").write_text((tmp_path / "elsewhere" / "x.hdr").read_text())
    with pytest.raises(UnsafeFileError, match="outside the header's folder") as error:
        open_envi(opened(tmp_path / "data"))
    assert error.value.path == str(tmp_path / "data" / "scene.img")


def test_envi_data_file_beside_swapped_for_a_symlink_is_refused_at_the_read(tmp_path: Path) -> None:
    values = np.arange(8, dtype=np.uint8).reshape(2, 2, 2)
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    write_envi(tmp_path / "data" / "scene.img", values)
    write_envi(tmp_path / "elsewhere" / "x.img", values + 100)
    for opened in ("scene.hdr", "scene.img"):
        cube = open_envi(tmp_path / "data" / opened)  # inside, and not mapped yet
        os.rename(tmp_path / "data" / "scene.img", tmp_path / "data" / "old.img")
        os.symlink(tmp_path / "elsewhere" / "x.img", tmp_path / "data" / "scene.img")
        with pytest.raises(UnsafeFileError, match="outside"):
            cube.read()
        os.remove(tmp_path / "data" / "scene.img")
        os.rename(tmp_path / "data" / "old.img", tmp_path / "data" / "scene.img")


def test_envi_data_file_linked_inside_the_header_folder_is_read(tmp_path: Path) -> None:
    values = np.arange(8, dtype=np.uint8).reshape(2, 2, 2)
    (tmp_path / "data" / "real").mkdir(parents=True)
    write_envi(tmp_path / "data" / "real" / "x.img", values)
    os.symlink(tmp_path / "data" / "real" / "x.img", tmp_path / "data" / "x.img")
    os.rename(tmp_path / "data" / "real" / "x.hdr", tmp_path / "data" / "x.hdr")
    for opened in ("x.hdr", "x.img"):
        np.testing.assert_array_equal(open_envi(tmp_path / "data" / opened).read(), values)


# -- PCA files: arrays checked against their settings ----------------------------------------------


def saved_pca(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    cube = ArrayCube(np.random.default_rng(0).normal(size=(16, 16, 10)), path="scene")
    path = tmp_path / "pca.npz"
    PCA.fit([cube], 3, pixels=200, seed=0).save(path)
    with np.load(path) as saved:
        return path, {name: saved[name] for name in saved.files}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


TAMPERED = {
    "ten output bands for k=3": {"components": lambda a: np.tile(a["components"], (4, 1))[:10]},
    "NaN patches": {"mean": lambda a: np.where(np.arange(10) == 4, np.nan, a["mean"])},
    "inf variance": {"variance": lambda a: np.full(3, np.inf)},
    "negative variance": {"variance": lambda a: -a["variance"]},
    "not orthonormal": {"components": lambda a: a["components"] * 2},
    "k disagrees": {"settings": lambda a: np.array(str(a["settings"]).replace('"k": 3', '"k": 2'))},
    "settings nested past recursion": {"settings": lambda a: np.array(nested(100_000))},
    "settings a list": {"settings": lambda a: np.array("[3]")},
    "format an array": {"format": lambda a: np.array([1, 1])},
    "text components": {"components": lambda a: np.array(["x"] * 30).reshape(3, 10)},
    "mean of the wrong length": {"mean": lambda a: a["mean"][:9]},
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_pca_file_is_refused_naming_it(tmp_path: Path, case: str) -> None:
    path, arrays = saved_pca(tmp_path)
    for name, change in TAMPERED[case].items():
        arrays[name] = change(arrays)
    np.savez(path, **arrays)
    with pytest.raises(DecodeError) as error:
        PCA.load(path)
    assert error.value.path == str(path) and "delete it and fit again" in str(error.value)


def test_a_pca_file_declaring_more_than_the_limit_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = saved_pca(tmp_path)
    monkeypatch.setattr(pca_module, "MAX_PCA_BYTES", 100)
    with pytest.raises(DecodeError, match="more than max_bytes=100"):
        PCA.load(path)


def test_an_untampered_pca_file_still_loads(tmp_path: Path) -> None:
    path, arrays = saved_pca(tmp_path)
    loaded = PCA.load(path)
    assert loaded.components.shape == (3, 10) and json.loads(str(arrays["settings"]))["k"] == 3


def test_a_pca_file_in_deflate64_is_a_decode_error_naming_it(tmp_path: Path) -> None:
    path = recompressed(saved_pca(tmp_path)[0], 9)
    with pytest.raises(DecodeError, match=r"method 9 .*delete it and fit again") as error:
        PCA.load(path)
    assert error.value.path == str(path)


@pytest.mark.parametrize("length", [2**31, 2**37])
def test_a_pca_member_declaring_more_than_it_holds_is_refused_unallocated(
    tmp_path: Path, length: int
) -> None:
    path, arrays = saved_pca(tmp_path)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:  # a 200-byte mean of 1 TiB
        for name, values in arrays.items():
            member = npy_bytes(f"({length},)", data=b"") if name == "mean" else npy_of(values)
            archive.writestr(f"{name}.npy", member)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match=r"member 'mean.npy' holds 0 data bytes.*delete it") as error:
            PCA.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert error.value.path == str(path) and peak < 16 << 20


def npy_of(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values)
    return buffer.getvalue()


def test_a_fifo_in_place_of_a_pca_file_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pca.npz")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        PCA.load(tmp_path / "pca.npz")

"""Hostile input against the cube, video and volume readers and the prepare/show commands: every
case ends in a typed torchloom error naming the input, or in an explicit reported policy."""

from __future__ import annotations

import argparse
import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from torchloom.datasets.hyperspectral import HyperspectralDataset
from torchloom.datasets.video import VideoClipDataset
from torchloom.errors import (
    ConfigError,
    DecodeError,
    HeaderError,
    MissingFileError,
    SampleError,
    TransformError,
    UnsafeFileError,
)
from torchloom.io.envi import open_envi, write_envi
from torchloom.io.envi_header import parse_header
from torchloom.io.volume import probe_volume, read_volume
from torchloom.tools.prepare.materialize import MAX_NAME_BYTES, check_folder_name, target_names
from torchloom.tools.show import command as show
from torchloom.tools.show.transform_spec import parse_transform_spec

h5py = pytest.importorskip("h5py")

HEADER = "ENVI\nsamples = 2\nlines = 2\nbands = 2\ndata type = 1\ninterleave = bsq\n"


# -- ENVI --------------------------------------------------------------------------------------------


def test_missing_envi_header_is_a_missing_file_error(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match=r"nope\.hdr"):
        open_envi(tmp_path / "nope.hdr")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ("wavelength = {-400, 500}", "finite number >= 0"),
        ("wavelength = {nan, 500}", "finite number >= 0"),
        ("wavelength = {400,, 500}", "empty item"),
        ("byte order = 2", "must be 0 or 1"),
        ("samples = \u0661", "not a whole number"),  # an Arabic-Indic digit is not an ENVI number
    ],
)
def test_envi_header_values_are_refused_with_the_line(extra: str, match: str) -> None:
    text = HEADER.replace("samples = 2\n", "") + ("" if "samples" in extra else "samples = 2\n") + extra
    with pytest.raises(HeaderError, match=match):
        parse_header(text.encode(), "bad.hdr")


def test_envi_trailing_comma_in_a_list_is_accepted() -> None:
    header = parse_header((HEADER + "wavelength = {400, 500,}\n").encode(), "ok.hdr")
    assert header.wavelengths is not None and header.wavelengths.tolist() == [400.0, 500.0]


def test_astronomical_envi_size_is_refused_before_mapping(tmp_path: Path) -> None:
    big = "ENVI\nsamples=999999999999999\nlines=999999999999999\nbands=999999999999999\n"
    (tmp_path / "huge.hdr").write_text(big + "data type=15\ninterleave=bsq\n")
    (tmp_path / "huge.img").write_bytes(b"x" * 10)
    with pytest.raises(DecodeError, match="holds 10 bytes"):
        open_envi(tmp_path / "huge.hdr")


def test_envi_fifo_and_folder_data_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "f.hdr").write_text(HEADER)
    os.mkfifo(tmp_path / "f.img")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        open_envi(tmp_path / "f.hdr")
    (tmp_path / "d.hdr").write_text(HEADER)
    (tmp_path / "d.img").mkdir()
    with pytest.raises(UnsafeFileError, match="folder"):
        open_envi(tmp_path / "d.img")


@pytest.mark.parametrize("name", ["q\"uo'te", "sp ace", "new\nline", "ünï€"])
def test_envi_odd_file_names_read(tmp_path: Path, name: str) -> None:
    path = write_envi(tmp_path / f"{name}.img", np.arange(8, dtype=np.int16).reshape(2, 2, 2))
    assert open_envi(path).read().tolist() == np.arange(8).reshape(2, 2, 2).tolist()


def test_envi_file_cut_short_after_mapping_raises_instead_of_sigbus(tmp_path: Path) -> None:
    path = write_envi(tmp_path / "c.img", np.zeros((64, 64, 4), np.float32))
    cube = open_envi(path)
    cube.read(rows=slice(0, 1))  # mapped now
    os.truncate(path, 16)
    with pytest.raises(DecodeError, match="shrank"):
        cube.read(rows=slice(60, 64))


# -- HDF5 ---------------------------------------------------------------------------------------------


def _h5(path: Path, **datasets: np.ndarray) -> str:
    with h5py.File(path, "w") as handle:
        for name, data in datasets.items():
            handle.create_dataset(name, data=data)
    return str(path)


def test_hdf5_file_replaced_after_construction_is_refused_not_broadcast(tmp_path: Path) -> None:
    path = _h5(tmp_path / "a.h5", cube=np.ones((4, 4, 3), np.float32))
    dataset = HyperspectralDataset(path, labels=[0])
    travelled = pickle.loads(pickle.dumps(dataset))  # a worker opens the file itself
    _h5(tmp_path / "b.h5", cube=np.zeros((1, 1, 1), np.float32))
    os.replace(tmp_path / "b.h5", path)
    with pytest.raises(SampleError, match="the file was replaced"):
        travelled[0]


@pytest.mark.parametrize("shape", [(3, 3), (2, 2, 2, 2)])
def test_hdf5_dataset_of_the_wrong_rank_is_refused(tmp_path: Path, shape: tuple[int, ...]) -> None:
    path = _h5(tmp_path / "r.h5", cube=np.zeros(shape))
    with pytest.raises(DecodeError, match="3 non-empty axes"):
        HyperspectralDataset(path, labels=[0])


def test_hdf5_missing_mask_lists_the_datasets(tmp_path: Path) -> None:
    path = _h5(tmp_path / "m.h5", cube=np.zeros((2, 2, 2)), labels=np.ones((2, 2), np.uint8))
    with pytest.raises(DecodeError, match=r"\['cube', 'labels'\]"):
        HyperspectralDataset(path, masks="nope", patch_size=3)


@pytest.mark.parametrize("ignore_label", [0, None])
def test_negative_mask_labels_are_refused(tmp_path: Path, ignore_label: int | None) -> None:
    path = _h5(tmp_path / "n.h5", cube=np.zeros((2, 2, 2)), mask=np.array([[-1, 2], [0, 1]]))
    with pytest.raises(ConfigError, match="labels must be >= 0"):
        HyperspectralDataset(path, masks="mask", patch_size=3, ignore_label=ignore_label)
    assert len(HyperspectralDataset(path, masks="mask", patch_size=3, ignore_label=-1)) == 3


@pytest.mark.parametrize("mask", [np.full((2, 2), 0.5), np.zeros((3, 3), np.int64)])
def test_float_or_misshapen_masks_are_refused(tmp_path: Path, mask: np.ndarray) -> None:
    path = _h5(tmp_path / "f.h5", cube=np.zeros((2, 2, 2)), mask=mask)
    with pytest.raises(ConfigError, match=r"integer array of shape \(2, 2\)"):
        HyperspectralDataset(path, masks="mask", patch_size=3)


def test_patch_larger_than_the_cube_is_padded_to_its_size(tmp_path: Path) -> None:
    path = _h5(tmp_path / "s.h5", cube=np.arange(12, dtype=np.float32).reshape(2, 2, 3))
    dataset = HyperspectralDataset(path, masks=[np.ones((2, 2), np.int64)], patch_size=9)
    assert dataset[0]["image"].shape == (3, 9, 9)


@pytest.mark.parametrize("workers", [0, 2])
def test_cube_transform_bug_surfaces_under_skip(tmp_path: Path, workers: int) -> None:
    path = _h5(tmp_path / "t.h5", cube=np.zeros((2, 2, 2), np.float32))
    dataset = HyperspectralDataset(path, labels=[0], on_error="skip", transform=lambda image, rng: "x")
    with pytest.raises(TransformError):
        list(DataLoader(dataset, batch_size=1, num_workers=workers, collate_fn=list))


# -- volumes ------------------------------------------------------------------------------------------


def _npy(path: Path, header: str, data: bytes = b"") -> Path:
    text = header.encode() + b" " * (118 - len(header)) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data)
    return path


def test_volume_header_larger_than_int64_is_truncated_not_wrapped(tmp_path: Path) -> None:
    path = _npy(
        tmp_path / "h.npy",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000, 100000000000, 100000000000), }",
    )
    with pytest.raises(DecodeError, match="truncated"):
        read_volume(path)


def test_volume_negative_shape_is_refused(tmp_path: Path) -> None:
    path = _npy(
        tmp_path / "n.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (-5, 2, 2), }", b"\0" * 64
    )
    with pytest.raises(DecodeError, match="sizes >= 0"):
        read_volume(path)


def test_volume_pickled_member_is_refused_unread(tmp_path: Path) -> None:
    np.savez(tmp_path / "o.npz", a=np.array([{"x": 1}, None], dtype=object))
    with pytest.raises(DecodeError, match="dtype object"):
        probe_volume(tmp_path / "o.npz")


def test_volume_missing_member_lists_members(tmp_path: Path) -> None:
    np.savez(tmp_path / "m.npz", a=np.zeros((2, 2, 2)), b=np.zeros(3))
    with pytest.raises(DecodeError, match=r"\['a.npy', 'b.npy'\]"):
        probe_volume(tmp_path / "m.npz", array="zz")


def test_volume_byte_order_and_fortran_layout_read_right(tmp_path: Path) -> None:
    data = np.arange(24, dtype=">i4").reshape(2, 3, 4)
    np.save(tmp_path / "b.npy", np.asfortranarray(data))
    assert np.array_equal(read_volume(tmp_path / "b.npy"), data)


# -- video --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [{"frames": 0}, {"frames": True}, {"frames": 10**9}, {"stride": 10**18, "sampling": "random_segment"}],
)
def test_video_clip_settings_out_of_range_are_refused(tmp_path: Path, settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"frames|stride"):
        VideoClipDataset(tmp_path, progress=False, **settings)


# -- prepare / show -----------------------------------------------------------------------------------


def test_label_too_long_for_a_folder_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="longer than a folder name"):
        check_folder_name("x" * (MAX_NAME_BYTES + 1), "label")


def test_tagged_target_names_stay_within_the_name_limit() -> None:
    long = "é" * 120 + ".png"  # 244 bytes: the hash tag would push it past 255
    names = target_names([f"a/{long}", f"b/{long}"])
    assert len(set(names)) == 2 and all(len(n.encode()) <= MAX_NAME_BYTES for n in names)


@pytest.mark.parametrize(
    "spec",
    [
        "__import__('os').system('id')",
        "os.system('id')",
        "Resize(224).__class__",
        "Resize('224')",
        "Resize(True)",
        "Resize((3, 4, 5))",
        "Resize(1e309)",
        "Resize({1: 2})",
        "Resize(b'x')",
        "Resize(size=224, size=3)",
        "CenterCrop(99999999999999999999)",
        "Resize(" + "(" * 300 + "1" + ")" * 300 + ")",
    ],
)
def test_hostile_transform_specs_are_config_errors(spec: str) -> None:
    with pytest.raises(ConfigError):
        parse_transform_spec(spec)


def _show_args(data: Path, out: Path, n: int = 4) -> argparse.Namespace:
    return argparse.Namespace(
        data=str(data), n=n, out=str(out), transform="", batch=False, multiple_of=1, seed=0
    )


def test_show_into_a_missing_folder_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cls").mkdir()
    assert show.run(_show_args(tmp_path, tmp_path / "nodir" / "grid.png")) == 2
    assert "existing folder" in capsys.readouterr().err


def test_show_n_zero_is_a_usage_error(tmp_path: Path) -> None:
    assert show.run(_show_args(tmp_path, tmp_path / "g.png", n=0)) == 2


def test_cube_dataset_reads_through_workers(tmp_path: Path) -> None:
    path = _h5(tmp_path / "w.h5", cube=np.ones((3, 3, 2), np.float32))
    loader = DataLoader(HyperspectralDataset(path, labels=[1]), batch_size=1, num_workers=2)
    batch = next(iter(loader))
    assert torch.equal(batch["image"], torch.ones(1, 2, 3, 3))

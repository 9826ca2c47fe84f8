"""Volumes from .npy and .npz: memory-mapped where stored, read whole where compressed, typed errors
naming the file for truncated or foreign files, and batches through CropOrPadVolumes in a DataLoader."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import DataLoader

from torchloom import Collate, FaultReport, SampleError, SampleKey
from torchloom.collation import CropOrPadVolumes
from torchloom.datasets import Manifest
from torchloom.datasets.volume import VolumeDataset, volume_tensor
from torchloom.errors import (
    DecodeError,
    EmptyDatasetError,
    PathOutsideRootError,
    UnsafeFileError,
    UsageError,
    ValidationFailedError,
)
from torchloom.io.volume import probe_volume, read_volume


def volume(shape: tuple[int, ...], dtype: str = "int16", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1000, 1000, shape).astype(dtype)


def is_memory_mapped(array: np.ndarray) -> bool:
    while not isinstance(array, np.memmap) and array.base is not None and isinstance(array.base, np.ndarray):
        array = array.base
    return isinstance(array, np.memmap)


# --- the reader ---------------------------------------------------------------------------------


def test_npy_is_memory_mapped_and_reads_nothing_until_touched(tmp_path: Path) -> None:
    data = volume((16, 32, 32))
    path = tmp_path / "ct.npy"
    np.save(path, data)
    header = probe_volume(path)
    assert header.shape == (16, 32, 32) and header.dtype == np.int16 and header.memmappable
    mapped = read_volume(path)
    assert is_memory_mapped(mapped) and not mapped.flags.writeable
    assert mapped.offset == header.offset  # mapped at the data, not copied from a read
    # Only the pages of a crop are touched: the mmap keeps the file, so rewriting bytes after the
    # crop region shows through the mapping (a full read at open time would have kept the old values).
    crop = np.array(mapped[:2])
    with open(path, "r+b") as handle:
        handle.seek(header.offset + data[:8].nbytes)
        handle.write(np.full(8 * 32 * 32, 7, np.int16).tobytes())
    np.testing.assert_array_equal(crop, data[:2])
    assert (mapped[8:16] == 7).all()


def test_stored_npz_member_is_memory_mapped_at_its_offset(tmp_path: Path) -> None:
    data, mask = volume((8, 16, 16), "float32"), volume((8, 16, 16), "uint8", seed=1)
    path = tmp_path / "case.npz"
    np.savez(path, image=data, mask=mask)
    for name, expected in (("image", data), ("mask.npy", mask)):
        array = read_volume(path, array=name)
        assert is_memory_mapped(array)
        np.testing.assert_array_equal(array, expected)
    with open(path, "rb") as handle:  # the offset is where the bytes really are
        header = probe_volume(path, array="image")
        handle.seek(header.offset)
        assert handle.read(16) == data.tobytes()[:16]


def test_compressed_npz_is_read_whole_and_fortran_order_kept(tmp_path: Path) -> None:
    data = np.asfortranarray(volume((5, 6, 7), "uint16"))
    path = tmp_path / "packed.npz"
    np.savez_compressed(path, data)
    header = probe_volume(path)
    assert not header.memmappable and header.fortran_order and header.member == "arr_0.npy"
    array = read_volume(path)
    assert not is_memory_mapped(array)
    np.testing.assert_array_equal(array, data)
    with pytest.raises(DecodeError, match="max_bytes"):
        read_volume(path, max_bytes=100)


@pytest.mark.parametrize("kind", ["npy", "stored npz", "compressed npz"])
def test_truncated_files_raise_decode_error_naming_the_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / ("v.npy" if kind == "npy" else "v.npz")
    data = volume((8, 16, 16))
    if kind == "npy":
        np.save(path, data)
    elif kind == "stored npz":
        np.savez(path, data)
    else:
        np.savez_compressed(path, data)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DecodeError, match=r"v\.np[yz]") as caught:
        read_volume(path)
    assert caught.value.path == str(path)
    if kind == "npy":
        assert "truncated" in caught.value.reason


def test_a_stored_member_shorter_than_its_header_is_truncated(tmp_path: Path) -> None:
    """A well-formed zip whose member holds fewer bytes than its npy header declares."""
    header_only = volume((8, 16, 16))
    path = tmp_path / "short.npz"
    np.save(tmp_path / "member.npy", header_only)
    raw = (tmp_path / "member.npy").read_bytes()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("arr_0.npy", raw[: len(raw) - 100])
    with pytest.raises(DecodeError, match="truncated"):
        probe_volume(path)


def test_foreign_and_hostile_files_are_typed_errors(tmp_path: Path) -> None:
    (tmp_path / "text.npy").write_text("not an array")
    (tmp_path / "empty.npy").write_bytes(b"")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object))
    np.savez(tmp_path / "two.npz", a=np.zeros(3), b=np.zeros(3))
    for name, match in (
        ("text.npy", "not a .npy or .npz"),
        ("empty.npy", "empty"),
        ("objects.npy", "dtype object"),
        ("two.npz", "pass array="),
    ):
        with pytest.raises(DecodeError, match=match):
            read_volume(tmp_path / name)
    with pytest.raises(DecodeError, match="no array 'c'"):
        read_volume(tmp_path / "two.npz", array="c")
    os.mkfifo(tmp_path / "pipe.npy")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        read_volume(tmp_path / "pipe.npy")


def test_volume_tensor_copies_out_of_the_file_in_native_byte_order(tmp_path: Path) -> None:
    np.save(tmp_path / "big_endian.npy", np.arange(8, dtype=">f4").reshape(2, 2, 2))
    tensor = volume_tensor(read_volume(tmp_path / "big_endian.npy"))
    assert tensor.dtype == torch.float32 and tensor[1, 1, 1].item() == 7.0
    tensor[0, 0, 0] = 100  # writable: its own memory, not the read-only mapping
    assert read_volume(tmp_path / "big_endian.npy")[0, 0, 0] == 0


# --- the dataset --------------------------------------------------------------------------------


@pytest.fixture
def class_volumes(tmp_path: Path) -> Path:
    root = tmp_path / "scans"
    for label, name in enumerate(("healthy", "tumour")):
        (root / name).mkdir(parents=True)
        for i in range(3):
            shape = (6 + 2 * i, 12 + i, 10 + 3 * i)
            np.save(root / name / f"{i}.npy", volume(shape, seed=10 * label + i))
    np.savez_compressed(root / "tumour" / "packed.npz", volume((4, 9, 9), seed=99))
    (root / "tumour" / "notes.txt").write_text("ignored")
    return root


def test_dataset_from_class_folders_with_labels_shapes_and_native_dtype(class_volumes: Path) -> None:
    dataset = VolumeDataset(class_volumes, progress=False)
    assert dataset.classes == ["healthy", "tumour"] and len(dataset) == 7
    assert dataset.targets.tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert dataset.report.ignored_count == 1
    sample = dataset[1]
    assert sample["volume"].dtype == torch.int16 and tuple(sample["volume"].shape) == (8, 13, 13)
    assert sample["label"] == 0 and sample["index"] == 1 and sample["path"].endswith("1.npy")
    np.testing.assert_array_equal(sample["volume"].numpy(), np.load(sample["path"]))
    assert dataset.shapes[1].tolist() == [0, 8, 13, 13]


def test_dataset_from_a_manifest_and_from_paths(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", volume((2, 4, 4, 4), "float32"))
    np.save(tmp_path / "b.npy", volume((2, 5, 4, 4), "float32"))
    (tmp_path / "m.csv").write_text("path,label\na.npy,bone\nb.npy,soft\n,bone\n")
    dataset = VolumeDataset(tmp_path / "m.csv", progress=False)
    assert dataset.classes == ["bone", "soft"] and len(dataset) == 2
    assert dataset.shapes.tolist() == [[2, 4, 4, 4], [2, 5, 4, 4]]
    assert "row 2" in dataset.report.invalid[0][0]
    unlabelled = VolumeDataset([tmp_path / "b.npy"], progress=False)
    assert "label" not in unlabelled[0] and tuple(unlabelled[0]["volume"].shape) == (2, 5, 4, 4)


def test_a_manifest_source_names_its_columns_and_root(tmp_path: Path) -> None:
    scans = tmp_path / "scans"
    scans.mkdir()
    np.savez(scans / "a.npz", ct=volume((3, 4, 4)), mask=volume((3, 4, 4), "uint8"))
    np.savez(scans / "b.npz", ct=volume((5, 4, 4)), mask=volume((5, 4, 4), "uint8"))
    table = pa.table({"file": ["a.npz", "b.npz", "../c.npz"], "organ": ["liver", "lung", "liver"]})
    with pytest.raises(PathOutsideRootError, match="row 2"):
        VolumeDataset(Manifest(table, path_column="file", label_column="organ", root=scans), progress=False)
    dataset = VolumeDataset(
        Manifest(table.slice(0, 2), path_column="file", label_column="organ", root=scans),
        array="ct",
        progress=False,
    )
    assert dataset.classes == ["liver", "lung"] and [dataset[i]["label"] for i in range(2)] == [0, 1]
    assert dataset.shapes[:, 1].tolist() == [3, 5]
    pq.write_table(pa.table({"path": ["scans/b.npz"]}), tmp_path / "m.parquet")  # the default columns
    unlabelled = VolumeDataset(tmp_path / "m.parquet", array="mask", progress=False)
    assert unlabelled.classes is None and unlabelled[0]["volume"].dtype == torch.uint8
    with pytest.raises(UsageError, match=r"Manifest\(table, root=\.\.\.\)"):
        VolumeDataset(table, progress=False)  # type: ignore[arg-type]


def test_full_validation_reads_every_volume_and_leaves_out_what_does_not_inflate(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", volume((4, 8, 8)))
    np.savez_compressed(tmp_path / "b.npz", volume((8, 32, 32)))
    with zipfile.ZipFile(tmp_path / "b.npz") as archive:
        member = archive.infolist()[0]
    raw = bytearray((tmp_path / "b.npz").read_bytes())
    data_end = member.header_offset + 30 + len(member.filename) + len(member.extra) + member.compress_size
    raw[data_end - 200 : data_end - 150] = bytes(50)  # the header inflates; the end of the data does not
    (tmp_path / "b.npz").write_bytes(bytes(raw))
    assert len(VolumeDataset(tmp_path, progress=False)) == 2  # the header alone looks fine
    checked = VolumeDataset(tmp_path, validate="full", progress=False)
    assert [os.path.basename(path) for path in checked.index.paths.to_list()] == ["a.npy"]
    assert "does not inflate" in dict(checked.report.invalid)[str(tmp_path / "b.npz")]


def test_invalid_files_are_excluded_and_reported_or_raise_when_strict(tmp_path: Path) -> None:
    np.save(tmp_path / "good.npy", volume((4, 4, 4)))
    np.save(tmp_path / "flat.npy", volume((4, 4)))
    np.save(tmp_path / "cut.npy", volume((8, 8, 8)))
    raw = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(raw[:200])
    dataset = VolumeDataset(tmp_path, progress=False)
    assert len(dataset) == 1
    reasons = dict(dataset.report.invalid)
    assert "truncated" in reasons[str(tmp_path / "cut.npy")]
    assert "(D, H, W)" in reasons[str(tmp_path / "flat.npy")]
    with pytest.raises(ValidationFailedError, match=r"cut\.npy"):
        VolumeDataset(tmp_path, strict=True, progress=False)
    with pytest.raises(EmptyDatasetError):
        VolumeDataset([tmp_path / "cut.npy"], progress=False)


def test_a_file_broken_after_indexing_follows_the_fault_policy(tmp_path: Path) -> None:
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", volume((4, 6, 6), seed=i))
    raising = VolumeDataset(tmp_path, progress=False)
    skipping = VolumeDataset(tmp_path, on_error="skip", progress=False)
    raw = (tmp_path / "1.npy").read_bytes()
    (tmp_path / "1.npy").write_bytes(raw[:150])
    with pytest.raises(SampleError, match=r"1\.npy") as caught:
        raising[1]
    assert isinstance(caught.value.__cause__, DecodeError)
    report = FaultReport()
    collate = Collate({"volume": CropOrPadVolumes((4, 6, 6), random=False)})
    batches = list(report.watch(DataLoader(skipping, batch_size=3, collate_fn=collate)))
    assert batches[0]["volume"].shape == (2, 4, 6, 6)
    assert [s.path for s in report.skipped] == [str(tmp_path / "1.npy")]


def crop_first_slices(array: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return array[:5]  # a view of the memmap: only these slices are read when copied


@pytest.mark.parametrize("num_workers", [0, 2])
def test_crop_or_pad_volumes_batches_through_a_dataloader(class_volumes: Path, num_workers: int) -> None:
    dataset = VolumeDataset(class_volumes, transform=crop_first_slices, progress=False)
    size = (5, 12, 12)
    collate = Collate({"volume": CropOrPadVolumes(size, seed=3)})
    keys = [SampleKey(i, epoch=1) for i in range(len(dataset))]
    loader = DataLoader(dataset, batch_size=4, sampler=keys, num_workers=num_workers, collate_fn=collate)
    batches = list(loader)
    assert [tuple(b["volume"].shape) for b in batches] == [(4, *size), (3, *size)]
    assert batches[0]["volume"].dtype == torch.int16 and batches[0]["volume_mask"].dtype == torch.bool
    first = dataset[keys[0]]["volume"]  # (4 slices: padded to 5) x 12 x 10: padded on the last axis
    mask = batches[0]["volume_mask"][0]
    assert int(mask.sum()) == first.numel()
    torch.testing.assert_close(batches[0]["volume"][0][mask].reshape(first.shape), first)
    again = list(DataLoader(dataset, batch_size=4, sampler=keys, num_workers=0, collate_fn=collate))
    torch.testing.assert_close(again[1]["volume"], batches[1]["volume"])  # crops seeded per SampleKey


def test_unicode_and_space_laden_paths_read(tmp_path: Path) -> None:
    folder = tmp_path / "scans é" / "猫 cat"
    folder.mkdir(parents=True)
    np.savez(folder / "case 1 — été.npz", volume((3, 4, 5)))
    dataset = VolumeDataset(tmp_path / "scans é", progress=False)
    assert dataset.classes == ["猫 cat"] and tuple(dataset[0]["volume"].shape) == (3, 4, 5)

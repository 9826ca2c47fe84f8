"""Readers open a user's file once through the file layer: confined at the open, and read from
the file checked, never from the path looked up again."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image as PILImage

from conftest import point_link, swap_before_open, write_jpeg
from torchloom import FolderDataset, Image, ManifestDataset
from torchloom.datasets import VolumeDataset
from torchloom.errors import SampleError, UnsafeFileError
from torchloom.io.hdf5 import Hdf5Cube, open_hdf5, read_hdf5_array
from torchloom.io.image import probe_file
from torchloom.io.table import read_table
from torchloom.io.volume import read_volume
from torchloom.streaming import StreamDataset
from torchloom.tools.prepare.labels import read_label_map


def test_a_dataset_refuses_a_symlink_swapped_in_just_before_its_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    write_jpeg(root / "a.jpg")
    write_jpeg(tmp_path / "secret.jpg", seed=9)
    (root / "b.jpg").symlink_to(root / "a.jpg")
    dataset = ManifestDataset(
        pa.table({"image": ["b.jpg"]}), root=root, fields=[Image("image")], progress=False
    )
    swap_before_open(
        monkeypatch, Path(dataset.index.paths[0]), point_link(root / "b.jpg", tmp_path / "secret.jpg")
    )
    with pytest.raises(UnsafeFileError, match="outside the dataset root"):
        dataset.read_file(dataset.index.paths[0])


def test_a_folder_dataset_confines_its_reads_to_the_real_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    write_jpeg(root / "cat" / "a.jpg")
    write_jpeg(tmp_path / "secret.jpg", seed=9)
    (root / "cat" / "b.jpg").symlink_to(root / "cat" / "a.jpg")
    dataset = FolderDataset(root, progress=False)
    link = next(path for path in dataset.index.paths.to_list() if path.endswith("b.jpg"))
    swap_before_open(monkeypatch, Path(link), point_link(root / "cat" / "b.jpg", tmp_path / "secret.jpg"))
    with pytest.raises(UnsafeFileError, match="outside the dataset root"):
        dataset.read_file(link)
    monkeypatch.undo()
    trusting = FolderDataset(root, allow_outside_root=True, progress=False)
    assert trusting.read_root is None


def test_a_volume_folder_source_confines_its_reads_to_the_real_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    np.save(root / "v.npy", np.zeros((2, 2, 2), np.uint8))
    np.save(tmp_path / "secret.npy", np.ones((2, 2, 2), np.uint8))
    (root / "w.npy").symlink_to(root / "v.npy")
    volumes = VolumeDataset(root, progress=False)
    position = [os.path.basename(path) for path in volumes.index.paths.to_list()].index("w.npy")
    swap_before_open(monkeypatch, root / "w.npy", point_link(root / "w.npy", tmp_path / "secret.npy"))
    with pytest.raises(SampleError) as caught:
        volumes[position]
    assert isinstance(caught.value.__cause__, UnsafeFileError)


def test_volume_and_png_probe_reads_are_confined_at_the_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    real_root = os.path.realpath(root)
    np.save(root / "v.npy", np.zeros((2, 2, 2), np.uint8))
    np.save(tmp_path / "secret.npy", np.ones((2, 2, 2), np.uint8))
    (root / "link.npy").symlink_to(root / "v.npy")
    swap_before_open(monkeypatch, root / "link.npy", point_link(root / "link.npy", tmp_path / "secret.npy"))
    with pytest.raises(UnsafeFileError, match="outside the dataset root"):
        read_volume(root / "link.npy", inside=real_root)
    monkeypatch.undo()
    # A PNG past the probe's prefix is opened a second time for its chunk walk: confined too.
    pixels = np.random.default_rng(0).integers(0, 256, (200, 300, 3), dtype=np.uint8)
    PILImage.fromarray(pixels).save(root / "big.png", compress_level=0)
    PILImage.fromarray(pixels).save(tmp_path / "secret.png", compress_level=0)
    (root / "link.png").symlink_to(root / "big.png")
    assert probe_file(root / "link.png", inside=real_root).width == 300
    swap_before_open(
        monkeypatch, root / "link.png", point_link(root / "link.png", tmp_path / "secret.png"), nth=2
    )
    with pytest.raises(UnsafeFileError, match="outside the dataset root"):
        probe_file(root / "link.png", inside=real_root)


def replace_after_first_look(
    monkeypatch: pytest.MonkeyPatch, path: Path, replace: Callable[[], None]
) -> None:
    """Run ``replace`` right after the first ``os.stat`` or ``os.open`` of ``path`` returns: a reader
    that looks at the path, then opens it again (or hands it to a library), reads the replacement."""
    done = False

    def hooked(real: Callable[..., object]) -> Callable[..., object]:
        def call(target: object, *args: object, **kwargs: object) -> object:
            nonlocal done
            result = real(target, *args, **kwargs)
            if not done and isinstance(target, (str, os.PathLike)) and os.fspath(target) == str(path):
                done = True
                replace()
            return result

        return call

    monkeypatch.setattr(os, "open", hooked(os.open))
    monkeypatch.setattr(os, "stat", hooked(os.stat))


def _replace_with_folder(path: Path) -> Callable[[], None]:
    def replace() -> None:
        os.rename(path, str(path) + ".old")
        path.mkdir()

    return replace


@pytest.mark.timeout(60)
def test_manifests_label_maps_and_shards_are_read_from_the_file_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("m.csv", "m.parquet", "m.jsonl", "m.json"):
        path = tmp_path / name
        table = pa.table({"image": ["a.jpg", "b.jpg"], "label": [0, 1]})
        if name.endswith(".parquet"):
            pq.write_table(table, path)
        elif name == "m.json":
            path.write_text('[{"image": "a.jpg", "label": 0}, {"image": "b.jpg", "label": 1}]')
        elif name.endswith(".jsonl"):
            path.write_text('{"image": "a.jpg", "label": 0}\n{"image": "b.jpg", "label": 1}\n')
        else:
            path.write_text("image,label\na.jpg,0\nb.jpg,1\n")
        replace_after_first_look(monkeypatch, path, _replace_with_folder(path))
        assert read_table(path).column("image").to_pylist() == ["a.jpg", "b.jpg"], name
        monkeypatch.undo()
    labels = tmp_path / "labels.csv"
    labels.write_text("file,class\nok/1.jpg,ok\n")
    replace_after_first_look(monkeypatch, labels, _replace_with_folder(labels))
    assert read_label_map(str(labels)) == [("ok/1.jpg", "ok")]
    monkeypatch.undo()
    shard = tmp_path / "part.jsonl"
    shard.write_text('{"x": 1}\n{"x": 2}\n')
    replace_after_first_look(monkeypatch, shard, _replace_with_folder(shard))
    assert [record["x"] for record in StreamDataset([str(shard)])] == [1, 2]


@pytest.mark.parametrize("swap", ["replaced", "relinked"])
def test_hdf5_opens_the_checked_file_not_the_path_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    first, other = tmp_path / "a.h5", tmp_path / "b.h5"
    for name, value in ((first, 1), (other, 2)):
        with h5py.File(name, "w") as handle:
            handle.create_dataset("cube", data=np.full((2, 2, 2), value, np.int16))
    if swap == "replaced":  # renamed over: the file opened is deleted, HDF5 reads it by its file object
        path, replace = first, lambda: os.replace(other, first)
    else:  # a symlink pointed elsewhere: HDF5 opens the file opened by its /proc/self/fd name
        path = tmp_path / "link.h5"
        path.symlink_to(first)
        replace = point_link(path, other)
    replace_after_first_look(monkeypatch, path, replace)
    with open_hdf5(str(path)) as handle:
        assert int(handle["cube"][()].sum()) == 8
        if swap == "relinked" and os.path.isdir("/proc/self/fd"):
            assert handle.filename.startswith("/proc/self/fd/")
    assert int(read_hdf5_array(path, "cube").sum()) == 16  # the path names the other file by now


def test_hdf5_without_a_descriptor_name_reads_through_the_file_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("cube", data=np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    monkeypatch.setattr("torchloom.io.hdf5.reopenable_name", lambda handle: None)
    cube = Hdf5Cube(path)
    assert cube.read(rows=slice(1, 2), cols=slice(2, 3), bands=[3, 1]).tolist() == [[[23, 21]]]
    cube.close()

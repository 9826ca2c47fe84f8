"""Regressions for edge cases: odd file names, CSV typing, label numbering, error round trips."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from conftest import write_jpeg
from torchloom import (
    FolderDataset,
    Image,
    Label,
    ManifestDataset,
    Numeric,
    SampleError,
    SampleKey,
    Text,
    collate,
)
from torchloom.datasets import StringColumn
from torchloom.errors import CollateError, ManifestError, PathOutsideRootError, ValidationFailedError


def test_file_names_that_are_not_utf8(tmp_path: Path) -> None:
    folder = os.fsencode(tmp_path / "cls")
    os.makedirs(folder)
    write_jpeg(tmp_path / "tmp.jpg")
    os.rename(os.fsencode(tmp_path / "tmp.jpg"), os.path.join(folder, b"caf\xe9.jpg"))
    dataset = FolderDataset(tmp_path, progress=False)
    sample = dataset[0]
    assert os.fsencode(sample["path"]).endswith(b"caf\xe9.jpg")
    assert sample["image"].shape == (3, 48, 64)


def test_unreadable_subfolder_is_reported(clean_folders: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hidden = str(clean_folders / "class_1")
    real_scandir = os.scandir

    def scandir(path: str | os.PathLike[str] = ".") -> object:
        if os.fspath(path) == hidden:
            raise PermissionError(13, "Permission denied", hidden)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.warns(UserWarning, match="class_1"):
        dataset = FolderDataset(clean_folders, progress=False)
    assert len(dataset) == 10
    assert dataset.report.invalid[0][0] == hidden and "cannot list folder" in dataset.report.invalid[0][1]
    with pytest.raises(ValidationFailedError, match="class_1"):
        FolderDataset(clean_folders, strict=True, progress=False)


def _manifest_root(tmp_path: Path) -> Path:
    write_jpeg(tmp_path / "a.jpg")
    write_jpeg(tmp_path / "b.jpg", seed=1)
    return tmp_path


def test_reserved_field_keys_are_refused(tmp_path: Path) -> None:
    root = _manifest_root(tmp_path)
    (root / "m.csv").write_text("file,path\na.jpg,x\n")
    with pytest.raises(ManifestError, match="reserved"):
        ManifestDataset(root / "m.csv", fields=[Image("file"), Text("path")], progress=False)
    dataset = ManifestDataset(
        root / "m.csv", fields=[Image("file"), Text("path", name="origin")], progress=False
    )
    assert dataset[0]["origin"] == "x" and dataset[0]["path"].endswith("a.jpg")


def test_symlink_escape_is_refused_even_without_validation(tmp_path: Path) -> None:
    root = _manifest_root(tmp_path / "root")
    write_jpeg(tmp_path / "secret.jpg")
    os.symlink(tmp_path / "secret.jpg", root / "link.jpg")
    (root / "m.csv").write_text("image,label\nlink.jpg,x\n")
    with pytest.raises(PathOutsideRootError, match="symlink"):
        ManifestDataset(root / "m.csv", validate="none", progress=False)


def test_csv_keeps_text_columns_as_text_and_empty_labels_invalid(tmp_path: Path) -> None:
    root = _manifest_root(tmp_path)
    (root / "m.csv").write_text("image,label,id\na.jpg,ok,00123\nb.jpg,,00042\n")
    dataset = ManifestDataset(
        root / "m.csv", fields=[Image("image"), Label("label"), Text("id")], progress=False
    )
    assert len(dataset) == 1 and dataset[0]["id"] == "00123"
    assert "empty" in dataset.report.invalid[0][1]


def test_integer_labels_define_classes_up_to_the_maximum(tmp_path: Path) -> None:
    root = _manifest_root(tmp_path)
    pq.write_table(pa.table({"image": ["a.jpg", "b.jpg"], "grade": [0, 5]}), root / "m.parquet")
    dataset = ManifestDataset(root / "m.parquet", fields=[Image("image"), Label("grade")], progress=False)
    assert dataset.classes == list(range(6)) and dataset.targets.tolist() == [0, 5]


def test_dictionary_encoded_labels(tmp_path: Path) -> None:
    root = _manifest_root(tmp_path)
    labels = pa.array(["dent", "ok"]).dictionary_encode()
    pq.write_table(pa.table({"image": ["a.jpg", "b.jpg"], "defect": labels}), root / "m.parquet")
    dataset = ManifestDataset(root / "m.parquet", fields=[Image("image"), Label("defect")], progress=False)
    assert dataset.classes == ["dent", "ok"] and dataset.targets.tolist() == [0, 1]


def test_json_rows_with_optional_keys(tmp_path: Path) -> None:
    root = _manifest_root(tmp_path)
    (root / "m.json").write_text('[{"image": "a.jpg"}, {"image": "b.jpg", "age": 4}]')
    dataset = ManifestDataset(
        root / "m.json", fields=[Image("image"), Numeric("age", nan=-1.0)], progress=False
    )
    assert [dataset[i]["numeric"].item() for i in range(2)] == [-1.0, 4.0]


def test_numeric_and_text_argument_and_type_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Invalid nan"):
        Numeric("age", nan="dorp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Invalid missing"):
        Text("title", missing="skip")  # type: ignore[arg-type]
    root = _manifest_root(tmp_path)
    table = pa.table({"image": ["a.jpg", "b.jpg"], "huge": [1.0, 1e300], "tags": [["x"], ["y"]]})
    with pytest.raises(ManifestError, match="float32"):
        ManifestDataset(table, root=root, fields=[Image("image"), Numeric("huge")], progress=False)
    with pytest.raises(ManifestError, match="not text"):
        ManifestDataset(table, root=root, fields=[Image("image"), Text("tags")], progress=False)


def test_errors_round_trip_through_pickle_and_worker_messages() -> None:
    outside = pickle.loads(pickle.dumps(PathOutsideRootError(3, "../x.jpg", "/data", "climbs with '..'")))
    assert outside.row == 3 and "row 3" in str(outside)
    failed = pickle.loads(pickle.dumps(ValidationFailedError("FolderDataset", [("a.jpg", "empty")])))
    assert failed.problems == [("a.jpg", "empty")]
    message = (
        "Caught SampleError in DataLoader worker process 0.\nTraceback ...\n"
        "torchloom.errors.DecodeError: cannot decode '/d/4 sample 0.jpg': truncated\n\n"
        "torchloom.errors.SampleError: sample 4 ('/d/4 sample 0.jpg') failed: DecodeError: truncated"
    )
    rebuilt = SampleError(message)
    assert rebuilt.index == 4 and rebuilt.path == "/d/4 sample 0.jpg"


def test_bugs_in_transforms_keep_their_type_and_name_the_sample(clean_folders: Path) -> None:
    def broken(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise KeyError("bug")

    dataset = FolderDataset(clean_folders, transform=broken, on_error="skip", progress=False)
    with pytest.raises(KeyError) as caught:
        dataset[3]
    assert any("sample 3" in note for note in getattr(caught.value, "__notes__", []))


def test_negative_sample_key_keeps_its_epoch(clean_folders: Path) -> None:
    from torchloom.transforms import Compose, RandomResizedCrop

    dataset = FolderDataset(clean_folders, transform=Compose([RandomResizedCrop(16)]), progress=False)
    last = len(dataset) - 1
    assert torch.equal(dataset[SampleKey(-1, epoch=2)]["image"], dataset[SampleKey(last, epoch=2)]["image"])


def test_collate_mixed_kinds() -> None:
    assert collate([{"v": 1}, {"v": 2.5}])["v"].tolist() == [1.0, 2.5]
    with pytest.raises(CollateError, match="different kinds"):
        collate([{"v": True}, {"v": 5}])
    with pytest.raises(CollateError, match=r"batch\.v"):
        collate([{"v": torch.zeros(1)}, {"v": None}])
    batch = collate([{"a": 1, "b": "x"}, {"b": "y", "a": 2}])
    assert batch["a"].tolist() == [1, 2] and batch["b"] == ["x", "y"]


def test_string_column_indexing() -> None:
    column = StringColumn.from_strings(["a", "b"])
    assert column[-1] == "b"
    with pytest.raises(IndexError):
        column[2]

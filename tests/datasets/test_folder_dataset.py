"""FolderDataset: layout, validation, reports and fault policies with real DataLoader workers."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import write_jpeg
from torchloom import FaultReport, FolderDataset, SampleError, Skipped, collate
from torchloom.errors import EmptyDatasetError, ValidationFailedError
from torchloom.testing import PlantedFaults


def test_layout_classes_targets_and_samples(clean_folders: Path) -> None:
    dataset = FolderDataset(clean_folders, progress=False)
    assert dataset.classes == ["class_0", "class_1"]
    assert dataset.class_to_idx == {"class_0": 0, "class_1": 1}
    assert dataset.class_counts == {"class_0": 10, "class_1": 6}
    assert isinstance(dataset.targets, np.ndarray) and dataset.targets.dtype == np.int64
    assert dataset.targets.tolist() == [0] * 10 + [1] * 6
    sample = dataset[11]
    assert set(sample) == {"image", "label", "index", "path"}
    assert sample["image"].dtype == torch.uint8 and sample["image"].shape == (3, 48, 48)
    assert sample["label"] == 1 and sample["index"] == 11
    assert sample["path"] == os.path.join(clean_folders, "class_1", "000001.jpg")
    assert dataset[-1]["index"] == 15
    with pytest.raises(IndexError, match="out of range"):
        dataset[16]


def test_unicode_and_spaces_in_class_and_file_names(tmp_path: Path) -> None:
    write_jpeg(tmp_path / "缺陷 划痕" / "图 片 1.jpg")
    write_jpeg(tmp_path / "正常 ok" / "sub dir" / "ファイル 2.JPG")
    dataset = FolderDataset(tmp_path, progress=False)
    assert dataset.classes == sorted(["缺陷 划痕", "正常 ok"])
    paths = {dataset[i]["path"] for i in range(len(dataset))}
    assert str(tmp_path / "缺陷 划痕" / "图 片 1.jpg") in paths
    assert str(tmp_path / "正常 ok" / "sub dir" / "ファイル 2.JPG") in paths


def test_empty_root_missing_root_and_no_images(tmp_path: Path) -> None:
    with pytest.raises(EmptyDatasetError, match="no class folders"):
        FolderDataset(tmp_path, progress=False)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        FolderDataset(tmp_path / "nowhere", progress=False)
    (tmp_path / "only_text").mkdir()
    (tmp_path / "only_text" / "notes.txt").write_text("x")
    with pytest.raises(EmptyDatasetError, match="no usable images"):
        FolderDataset(tmp_path, progress=False)


def test_empty_class_folder_keeps_its_label_and_warns(clean_folders: Path) -> None:
    (clean_folders / "a_empty").mkdir()
    with pytest.warns(UserWarning, match="a_empty"):
        dataset = FolderDataset(clean_folders, progress=False)
    assert dataset.classes == ["a_empty", "class_0", "class_1"]
    assert dataset.class_counts["a_empty"] == 0
    assert dataset.report.empty_classes == ["a_empty"]


def test_unknown_extensions_and_root_files_are_ignored_and_counted(clean_folders: Path) -> None:
    (clean_folders / "class_0" / "labels.csv").write_text("x")
    (clean_folders / "class_1" / "clip.mp4").write_bytes(b"\0")
    (clean_folders / "README.txt").write_text("x")
    dataset = FolderDataset(clean_folders, progress=False)
    assert len(dataset) == 16
    ignored = {os.path.basename(path) for path, _ in dataset.report.ignored}
    assert ignored == {"labels.csv", "clip.mp4", "README.txt"}
    assert dataset.report.ignored_count == 3
    with pytest.raises(EmptyDatasetError, match=r"\.png"):
        FolderDataset(clean_folders, extensions=[".png"], progress=False)


def test_header_validation_excludes_and_reports(class_folders: tuple[Path, PlantedFaults]) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, progress=False)
    assert len(dataset) == 42 + 2  # truncated files pass a header check
    assert sorted(path for path, _ in dataset.report.invalid) == sorted(faults.empty + faults.not_an_image)
    reasons = dict(dataset.report.invalid)
    assert "empty" in reasons[faults.empty[0]]
    assert "not a supported image" in reasons[faults.not_an_image[0]]


def test_full_validation_also_excludes_truncated(class_folders: tuple[Path, PlantedFaults]) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, validate="full", progress=False)
    assert len(dataset) == 42
    assert sorted(path for path, _ in dataset.report.invalid) == sorted(faults.all)


def test_exists_and_none_validation(class_folders: tuple[Path, PlantedFaults], tmp_path: Path) -> None:
    root, _faults = class_folders
    # A link to nothing inside the root (one leading outside is refused whatever validate says).
    os.symlink(root / "class_0" / "gone.jpg", root / "class_0" / "dangling.jpg")
    exists = FolderDataset(root, validate="exists", progress=False)
    assert [os.path.basename(p) for p, _ in exists.report.invalid] == ["dangling.jpg"]
    assert len(FolderDataset(root, validate="none", progress=False)) == 42 + 5


def test_strict_raises_one_error_listing_every_invalid_file(
    class_folders: tuple[Path, PlantedFaults],
) -> None:
    root, faults = class_folders
    with pytest.raises(ValidationFailedError) as caught:
        FolderDataset(root, validate="full", strict=True, progress=False)
    assert sorted(path for path, _ in caught.value.problems) == sorted(faults.all)
    for path in faults.all:
        assert path in str(caught.value)


def test_raise_policy_names_sample_and_chains_the_cause(class_folders: tuple[Path, PlantedFaults]) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, progress=False)
    broken = next(i for i in range(len(dataset)) if dataset.index.paths[i] in faults.truncated)
    with pytest.raises(SampleError) as caught:
        dataset[broken]
    assert caught.value.index == broken
    assert caught.value.path in faults.truncated
    assert "truncated" in str(caught.value)
    assert caught.value.__cause__ is not None
    loader = DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=collate)
    with pytest.raises(SampleError, match="broken_truncated"):
        for _ in loader:
            pass


@pytest.mark.parametrize("num_workers", [0, 2])
def test_skip_policy_reports_exactly_the_planted_files(
    class_folders: tuple[Path, PlantedFaults], num_workers: int
) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, on_error="skip", progress=False)
    report = FaultReport()
    loader = DataLoader(dataset, batch_size=5, num_workers=num_workers, collate_fn=collate, shuffle=True)
    seen = 0
    for batch in report.watch(loader):
        assert batch["image"].shape[0] == len(batch["label"]) == len(batch["path"])
        seen += len(batch["label"])
    assert seen == 42
    assert sorted(s.path for s in report.skipped) == sorted(faults.truncated)
    assert all(s.error == "DecodeError" and "truncated" in s.reason for s in report.skipped)
    not_trained = sorted([s.path for s in report.skipped] + [p for p, _ in dataset.report.invalid])
    assert not_trained == sorted(faults.all)
    assert "broken_truncated" in report.summary()


def test_skip_returns_marker_and_never_fake_data(class_folders: tuple[Path, PlantedFaults]) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, on_error="skip", progress=False)
    results = [dataset[i] for i in range(len(dataset))]
    markers = [r for r in results if isinstance(r, Skipped)]
    assert sorted(m.path for m in markers) == sorted(faults.truncated)
    batch = collate(markers)
    assert set(batch) == {"skipped"}


def test_debug_logs_first_samples_and_checks_signatures(
    clean_folders: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="torchloom"):
        dataset = FolderDataset(clean_folders, debug=True, progress=False)
        for i in range(5):
            dataset[i]
    assert len([r for r in caplog.records if "uint8" in r.getMessage()]) == 3

    class SometimesFloat:
        def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
            return image.astype(np.float32) if rng.random() < 0.5 else image

    mixed = FolderDataset(clean_folders, transform=SometimesFloat(), debug=True, progress=False)
    with pytest.raises(SampleError, match="debug check"):
        for i in range(len(mixed)):
            mixed[i]


def test_bad_arguments_are_clear(clean_folders: Path) -> None:
    with pytest.raises(ValueError, match="validate"):
        FolderDataset(clean_folders, validate="deep", progress=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_error"):
        FolderDataset(clean_folders, on_error="ignore", progress=False)
    with pytest.raises(TypeError, match="keys are int"):
        FolderDataset(clean_folders, progress=False)["0"]  # type: ignore[index]

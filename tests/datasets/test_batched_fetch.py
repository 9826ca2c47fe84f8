"""Batched fetch: images written into one batch buffer equal the per-sample path, uncopied."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import write_jpeg
from torchloom import FolderDataset, SampleKey, collate
from torchloom._buffers.slots import BatchSlots, consecutive_block, empty_batch
from torchloom.errors import CollateError
from torchloom.testing import PlantedFaults
from torchloom.transforms import Compose, HorizontalFlip, RandomResizedCrop

AUGMENT = Compose([RandomResizedCrop(24), HorizontalFlip()])


def test_batched_fetch_matches_single_fetch_and_is_not_copied(clean_folders: Path) -> None:
    dataset = FolderDataset(clean_folders, transform=AUGMENT, progress=False)
    keys = [SampleKey(i, epoch=2) for i in (5, 0, 9, 3)]
    samples = dataset.__getitems__(keys)
    batch = collate(samples)
    assert batch["image"].data_ptr() == samples[0]["image"].data_ptr()  # the buffer itself
    for position, key in enumerate(keys):
        assert torch.equal(batch["image"][position], dataset[key]["image"])
    assert batch["index"].tolist() == [5, 0, 9, 3]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_batches_equal_stacked_single_samples(clean_folders: Path, num_workers: int) -> None:
    dataset = FolderDataset(clean_folders, transform=AUGMENT, progress=False)
    keys = [SampleKey(i, epoch=0) for i in range(len(dataset))]
    loader = DataLoader(dataset, sampler=keys, batch_size=5, num_workers=num_workers, collate_fn=collate)
    for batch in loader:
        expected = torch.stack([dataset[SampleKey(int(i), epoch=0)]["image"] for i in batch["index"]])
        assert torch.equal(batch["image"], expected)
        assert batch["image"].is_contiguous()


def test_skipped_sample_in_the_middle_falls_back_to_a_copy(class_folders: tuple[Path, PlantedFaults]) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, transform=AUGMENT, on_error="skip", progress=False)
    broken = next(i for i in range(len(dataset)) if dataset.index.paths[i] in faults.truncated)
    good = [i for i in range(len(dataset)) if dataset.index.paths[i] not in faults.truncated][:4]
    keys = [SampleKey(i, epoch=0) for i in (good[0], broken, *good[1:])]
    batch = collate(dataset.__getitems__(keys))
    assert [s.index for s in batch["skipped"]] == [broken]
    assert batch["image"].shape[0] == 4
    for position, index in enumerate(good):
        assert torch.equal(batch["image"][position], dataset[SampleKey(index, epoch=0)]["image"])


def test_a_datasets_own_rows_are_copied_never_aliased() -> None:
    data = torch.arange(12.0).reshape(4, 3)
    batch = collate([{"x": data[0]}, {"x": data[1]}])
    batch["x"].mul_(0)
    assert data[0].tolist() == [0.0, 1.0, 2.0] and data[1].tolist() == [3.0, 4.0, 5.0]


def test_different_shapes_get_their_own_tensors_and_a_clear_collate_error(tmp_path: Path) -> None:
    write_jpeg(tmp_path / "a" / "small.jpg", height=20, width=30)
    write_jpeg(tmp_path / "a" / "large.jpg", height=40, width=30)
    dataset = FolderDataset(tmp_path, progress=False)
    samples = dataset.__getitems__([0, 1])
    assert samples[0]["image"].shape != samples[1]["image"].shape
    with pytest.raises(CollateError, match="PadImages"):
        collate(samples)


def test_buffers() -> None:
    batch = empty_batch((3, 2, 2), torch.float32)
    assert batch.shape == (3, 2, 2) and batch.is_contiguous()
    assert consecutive_block([batch[1], batch[2]]) is None  # not a BatchSlots buffer
    views = BatchSlots(3)
    slots = [views.slot(i, (2, 2), torch.float32) for i in range(3)]
    assert consecutive_block([slots[0], slots[2]]) is None  # not consecutive
    assert consecutive_block([slots[1], slots[2]]).data_ptr() == slots[1].data_ptr()  # type: ignore[union-attr,index]
    assert consecutive_block([torch.zeros(2), torch.zeros(2)]) is None
    # Views of the right slots that are not the slots as they are: transposed, or of another dtype.
    assert consecutive_block([slots[0], slots[1].t(), slots[2]]) is None
    assert consecutive_block([slots[0], slots[1].view(torch.int32), slots[2]]) is None
    assert consecutive_block([slots[0], slots[1], slots[2][:1]]) is None
    slots = BatchSlots(2)
    assert slots.slot(0, (2,), torch.int64) is not None and slots.slot(1, (2,), torch.float32) is None
    np.testing.assert_array_equal(np.asarray(slots.buffer.shape), [2, 2])  # type: ignore[union-attr]

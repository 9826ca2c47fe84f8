"""The thread Loader: exact resume at every seam (the shared helper), no thread left behind, errors
naming the sample, fault-report parity with the DataLoader path, kept batches intact."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from resume import Setup, check_every_seam
from test_resume_seams import sampler_subject
from test_samplers import SAMPLERS, KeyEcho
from torchloom import FaultReport, FolderDataset, Lambda, Loader, SampleError, collate
from torchloom.buffers import BatchSlots
from torchloom.errors import TransformError
from torchloom.samplers import IndexSampler

THREADS = Setup(num_workers=0, persistent=False, threads=2)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_loader_resumes_every_sampler_at_every_seam(name: str) -> None:
    check_every_seam(sampler_subject(name), THREADS)


def loader_threads() -> int:
    return sum(thread.name.startswith("torchloom-loader") for thread in threading.enumerate())


def wait_for_no_loader_threads() -> int:
    for _ in range(50):
        if not loader_threads():
            return 0
        time.sleep(0.02)
    return loader_threads()


def abandon_after_one_batch(loader: Loader) -> None:
    iterator = iter(loader)
    next(iterator)


def test_stopping_early_leaves_no_thread_running() -> None:
    loader = Loader(KeyEcho(1000), batch_size=4, num_threads=3, prefetch=4)
    for number, _ in enumerate(loader):
        if number == 2:
            break
    assert wait_for_no_loader_threads() == 0
    iterator = iter(loader)
    next(iterator)
    loader.close()
    assert wait_for_no_loader_threads() == 0
    abandon_after_one_batch(loader)  # the iterator is dropped with the function's frame
    assert wait_for_no_loader_threads() == 0
    assert len(list(loader)) == 250 and wait_for_no_loader_threads() == 0


class Exploding(Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return 20

    def __getitem__(self, key: int) -> dict[str, Any]:
        if int(key) == 13:
            raise SampleError(13, "thirteen.jpg", "DecodeError: corrupt")
        return {"x": int(key)}


def test_errors_name_the_sample_and_stop_the_threads() -> None:
    with pytest.raises(SampleError, match=r"sample 13 \('thirteen.jpg'\)"):
        list(Loader(Exploding(), batch_size=4, num_threads=2))
    assert wait_for_no_loader_threads() == 0


def test_a_transform_bug_names_the_sample(class_folders: tuple[Path, Any]) -> None:
    root, _ = class_folders
    dataset = FolderDataset(root, transform=Lambda(lambda image: "oops"), on_error="skip", progress=False)
    with pytest.raises(TransformError, match="returned a str") as caught:
        list(Loader(dataset, batch_size=8, num_threads=2))
    assert "while loading sample" in "".join(getattr(caught.value, "__notes__", []))


def test_fault_report_is_the_same_as_through_the_dataloader(class_folders: tuple[Path, Any]) -> None:
    root, faults = class_folders
    dataset = FolderDataset(root, validate="none", on_error="skip", progress=False)
    by_loader, by_dataloader = FaultReport(), FaultReport()
    sampler = IndexSampler(len(dataset), seed=1)
    kept = [b["label"].tolist() for b in by_loader.watch(Loader(dataset, batch_size=8, sampler=sampler))]
    reference = DataLoader(
        dataset, batch_size=8, sampler=IndexSampler(len(dataset), seed=1), num_workers=2, collate_fn=collate
    )
    expected = [b["label"].tolist() for b in by_dataloader.watch(reference)]
    assert kept == expected
    assert by_loader.skipped == by_dataloader.skipped and len(by_loader) == len(faults.all)


class Images(Dataset[dict[str, Any]]):
    """Writes each sample's image into the batch's slots, as torchloom's datasets do."""

    def __init__(self, size: int = 64) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> dict[str, Any]:
        return {"image": torch.full((3, 8, 8), int(key), dtype=torch.uint8), "index": int(key)}

    def getitems_into(self, keys: list[int], slots: BatchSlots) -> list[dict[str, Any]]:
        samples = []
        for position, key in enumerate(keys):
            target = slots.slot(position, (3, 8, 8), torch.uint8)
            assert target is not None
            target.fill_(int(key))
            samples.append({"image": target, "index": int(key)})
        return samples


def test_batches_kept_in_a_list_stay_intact_while_buffers_are_reused() -> None:
    loader = Loader(Images(), batch_size=4, num_threads=2, prefetch=1)
    kept = list(loader)  # every batch held: no buffer may be reused
    assert all(torch.equal(b["image"][:, 0, 0, 0], b["index"].to(torch.uint8)) for b in kept)
    assert len({b["image"].data_ptr() for b in kept}) == len(kept) == 16
    del kept
    loader.set_epoch(1)
    allocated = loader._pool.allocated
    for batch in loader:  # each batch dropped before long: buffers come back
        assert torch.equal(batch["image"][:, 0, 0, 0], batch["index"].to(torch.uint8))
    assert loader._pool.allocated - allocated <= 2, "buffers in flight are reused, not reallocated"


def test_loader_defaults_and_refusals() -> None:
    loader = Loader(KeyEcho(10), batch_size=3, shuffle=True, seed=4)
    first = [i for b in loader for i in b["index"].tolist()]
    assert sorted(first) == list(range(10)) and len(loader) == 4
    loader.set_epoch(1)
    assert [i for b in loader for i in b["index"].tolist()] != first
    assert len(Loader(KeyEcho(10), batch_size=3, drop_last=True)) == 3
    with pytest.raises(ValueError, match="not both"):
        Loader(KeyEcho(10), batch_size=3, shuffle=True, sampler=IndexSampler(10))
    from torchloom import StreamDataset

    with pytest.raises(TypeError, match="DataLoader with workers"):
        Loader(StreamDataset(["a.jsonl"], reader=lambda shard: iter([])), batch_size=2)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        Loader(KeyEcho(4), batch_size=2, pin_memory=True)


def test_plain_torch_samplers_resume_by_fast_forward() -> None:
    from torch.utils.data import SequentialSampler

    loader = Loader(KeyEcho(20), batch_size=4, sampler=SequentialSampler(range(20)))
    iterator = iter(loader)
    first = [i for _ in range(2) for i in next(iterator)["index"].tolist()]
    state = loader.state_dict()
    resumed = Loader(KeyEcho(20), batch_size=4, sampler=SequentialSampler(range(20)))
    resumed.load_state_dict(state)
    assert first + [i for b in resumed for i in b["index"].tolist()] == list(range(20))
    assert [i for b in resumed for i in b["index"].tolist()] == list(range(20))  # the next epoch: whole

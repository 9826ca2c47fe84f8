"""Worker batch buffers: reused only after the main process lets go; a kept batch is never overwritten."""

from __future__ import annotations

import copy
import os
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, default_collate
from torchdata.stateful_dataloader import StatefulDataLoader

from torchloom import Collate, DecodedCache, FolderDataset, IndexSampler, Loader, SampleKey, collate
from torchloom._buffers.pool import BufferPool
from torchloom._buffers.slots import LEASE_ATTRIBUTE, BatchSlots
from torchloom._buffers.worker import Lease, ShippedBatch, WorkerBatchPool, _release
from torchloom.testing import write_class_folders
from torchloom.transforms import Compose, HorizontalFlip, RandomResizedCrop

AUGMENT = Compose([RandomResizedCrop(24), HorizontalFlip()])
BATCH = 4


@pytest.fixture
def folders(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    write_class_folders(root, [16, 16], size=(40, 40), progress=False)
    return root


def lease_of(tensor: torch.Tensor) -> Lease:
    lease: Lease = getattr(tensor, LEASE_ATTRIBUTE)
    return lease


def release(lease: Lease) -> None:
    """What the main process's finalizer writes when the last view of the batch dies."""
    lease.board[lease.position] = lease.generation


def shipped_batch(pool: WorkerBatchPool) -> ShippedBatch:
    """A batch collated from one leased buffer, as a worker's collate makes it."""
    slots = BatchSlots(BATCH, pool.take)
    samples = [{"image": slots.slot(i, (3, 2, 2), torch.uint8).fill_(i)} for i in range(BATCH)]
    batch = collate(samples)
    assert isinstance(batch, ShippedBatch)
    return batch


def test_a_buffer_is_reused_only_after_it_was_shipped_and_released() -> None:
    pool = WorkerBatchPool(shared=True)
    batch = shipped_batch(pool)
    lease = lease_of(batch["image"])
    assert (lease.position, lease.generation, lease.shipped) == (0, 1, False)
    pickle.dumps(batch)  # what the worker's result queue does: the lease is now shipped
    assert lease.shipped
    pointer = batch["image"].data_ptr()
    del batch
    assert pool.take((BATCH, 3, 2, 2), torch.uint8).data_ptr() != pointer  # not released yet
    release(lease)
    reused = pool.take((BATCH, 3, 2, 2), torch.uint8)
    assert reused.data_ptr() == pointer and pool.reused == 1
    assert lease_of(reused).generation == 3  # a new number: an old release cannot free it again


def test_a_buffer_held_in_the_worker_is_not_reused_even_when_released() -> None:
    pool = WorkerBatchPool(shared=True)
    batch = shipped_batch(pool)
    pickle.dumps(batch)
    release(lease_of(batch["image"]))
    view = batch["image"][1]  # e.g. the worker's own code still holds a view
    del batch
    assert pool.take((BATCH, 3, 2, 2), torch.uint8).data_ptr() != view.data_ptr() - view.storage_offset()
    assert pool.reused == 0


def test_a_buffer_that_left_without_being_shipped_is_dropped_never_reused() -> None:
    pool = WorkerBatchPool(shared=True)
    slots = BatchSlots(BATCH, pool.take)
    views = [slots.slot(i, (3, 2, 2), torch.uint8) for i in range(BATCH)]
    lease = lease_of(slots.buffer)  # type: ignore[arg-type]
    pickle.dumps(views)  # another collate sends the views themselves: no release will come
    release(lease)  # even a (stale) release on the board must not free it
    del slots, views
    pool.take((BATCH, 3, 2, 2), torch.uint8)
    assert pool.reused == 0 and pool.allocated == 2  # the first buffer was let go, a new one made


def test_a_late_release_of_an_older_use_does_not_free_the_buffer() -> None:
    pool = WorkerBatchPool(shared=True)
    first = shipped_batch(pool)
    old = lease_of(first["image"])
    pickle.dumps(first)
    del first
    release(old)
    second = shipped_batch(pool)  # the buffer again, under a new generation
    assert lease_of(second["image"]).position == old.position
    pickle.dumps(second)
    pointer = second["image"].data_ptr()
    del second
    release(old)  # the first use's finalizer, written again late
    assert pool.take((BATCH, 3, 2, 2), torch.uint8).data_ptr() != pointer


def test_a_batch_whose_tensor_is_held_elsewhere_when_it_ships_is_never_reused() -> None:
    pool = WorkerBatchPool(shared=True)
    batch = shipped_batch(pool)
    remembered = batch["image"]  # e.g. a collate function keeping the previous batch
    lease = lease_of(remembered)
    pickle.dumps(batch)
    assert lease.kept
    del batch, remembered
    release(lease)
    pool.take((BATCH, 3, 2, 2), torch.uint8)
    assert pool.reused == 0


def test_a_batch_shipped_twice_is_never_reused() -> None:
    pool = WorkerBatchPool(shared=True)
    batch = shipped_batch(pool)
    lease = lease_of(batch["image"])
    pickle.dumps(batch)
    assert not lease.kept
    pickle.dumps(batch)  # the same buffer leaving again: one release cannot stand for both
    assert lease.kept
    del batch
    release(lease)
    pool.take((BATCH, 3, 2, 2), torch.uint8)
    assert pool.reused == 0


def test_a_batch_of_another_shape_does_not_empty_the_pool() -> None:
    pool = WorkerBatchPool(limit=3, shared=True)
    batches = [shipped_batch(pool) for _ in range(2)]
    leases = [lease_of(batch["image"]) for batch in batches]
    for batch in batches:
        pickle.dumps(batch)
    del batches, batch
    for lease in leases:
        release(lease)
    pool.take((2, 3, 2, 2), torch.uint8)  # a short last batch: the empty position
    pool.take((2, 3, 2, 2), torch.uint8)  # the pool is full: one released buffer makes room
    assert pool.allocated == 4
    pool.take((BATCH, 3, 2, 2), torch.uint8)
    assert pool.reused == 1  # the other full-size buffer is still there


def test_when_every_pooled_buffer_is_held_a_fresh_one_is_returned() -> None:
    pool = WorkerBatchPool(limit=2, shared=True)
    held = [pool.take((2,), torch.uint8) for _ in range(3)]
    assert len({buffer.data_ptr() for buffer in held}) == 3
    assert not hasattr(held[2], LEASE_ATTRIBUTE)  # unpooled: never part of a shipped batch
    assert pool.allocated == 3


def test_unpickling_in_the_worker_itself_releases_nothing() -> None:
    pool = WorkerBatchPool(shared=True)
    batch = shipped_batch(pool)
    lease = lease_of(batch["image"])
    for copied in (copy.deepcopy(batch), pickle.loads(pickle.dumps(batch))):
        assert type(copied) is dict
        assert torch.equal(copied["image"], batch["image"])
        del copied
    assert int(lease.board[lease.position]) == 0


def test_a_forked_child_dropping_its_copy_releases_nothing() -> None:
    board = torch.zeros(2, dtype=torch.int64).share_memory_()
    _release(board.numpy(), 1, 7, pid=os.getpid() + 1)
    assert board.tolist() == [0, 0]
    _release(board.numpy(), 1, 7, pid=os.getpid())
    assert board.tolist() == [0, 7]


def test_pickling_gives_an_empty_pool_and_outside_a_worker_plain_tensors() -> None:
    pool = WorkerBatchPool(shared=True)
    kept = pool.take((2,), torch.uint8)
    assert kept.is_shared()
    copied = pickle.loads(pickle.dumps(pool))
    assert copied.allocated == 0 and copied.shared is True
    plain = WorkerBatchPool().take((2,), torch.uint8)
    assert not plain.is_shared() and not hasattr(plain, LEASE_ATTRIBUTE)


def test_a_loader_buffer_shared_with_another_process_is_never_written_again() -> None:
    pool = BufferPool()
    batch = pool.take((2, 3), torch.uint8)
    batch.share_memory_()  # what a torch.multiprocessing queue does to a batch it sends (in place)
    pointer = batch.data_ptr()
    del batch
    assert all(pool.take((2, 3), torch.uint8).data_ptr() != pointer for _ in range(3))


# --- through DataLoader workers ----------------------------------------------------------------------


def worker_stats(collate_fn: Callable[[Sequence[Any]], Any], dataset: FolderDataset) -> Callable[..., Any]:
    def collate_with_stats(samples: Sequence[Any]) -> Any:
        batch = collate_fn(samples)
        pool = dataset._batch_buffers
        if isinstance(batch, dict):  # set on the batch itself: a ShippedBatch stays one
            batch["reused"] = torch.tensor(pool.reused)
        return batch

    return collate_with_stats


def worker_loader(
    source: Any,
    dataset: FolderDataset,
    collate_fn: Callable[[Sequence[Any]], Any],
    seed: int,
    loader_class: type[DataLoader[Any]] = DataLoader,
) -> tuple[DataLoader[Any], IndexSampler]:
    """2 persistent workers over ``source``, batches reporting how often their pool reused a buffer."""
    sampler = IndexSampler(len(source), shuffle=True, seed=seed)
    loader = loader_class(
        source,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=2,
        collate_fn=worker_stats(collate_fn, dataset),
        persistent_workers=True,
        prefetch_factor=2,
    )
    return loader, sampler


def expected_images(dataset: Any, indices: Sequence[int], epoch: int) -> torch.Tensor:
    return torch.stack([dataset[SampleKey(int(i), epoch=epoch)]["image"] for i in indices])


@pytest.mark.parametrize(
    ("cached", "loader_class"),
    [(False, DataLoader), (True, DataLoader), (True, StatefulDataLoader)],
    ids=["DataLoader", "DataLoader-cache", "StatefulDataLoader-cache"],
)
def test_kept_batches_and_views_stay_intact_while_workers_reuse_released_buffers(
    folders: Path, tmp_path: Path, cached: bool, loader_class: type[DataLoader[Any]]
) -> None:
    dataset = FolderDataset(folders, transform=AUGMENT, progress=False)
    source: Any = DecodedCache(dataset, tmp_path / "cache", progress=False) if cached else dataset
    loader, sampler = worker_loader(source, dataset, collate, seed=5, loader_class=loader_class)
    kept: list[dict[str, Any]] = []
    kept_views: list[tuple[torch.Tensor, int]] = []
    reused = []
    for epoch in range(4):
        sampler.set_epoch(epoch)
        for number, batch in enumerate(loader):
            assert type(batch) is dict
            reused.append(int(batch["reused"]))
            if epoch == 1:
                kept.append(batch)  # whole batches, kept across the later epochs
            elif epoch == 2 and number % 2 == 0:
                kept_views.append((batch["image"][1], int(batch["index"][1])))  # a view outlives its batch
    assert max(reused) > 0  # released buffers were written again
    for batch in kept:
        assert torch.equal(batch["image"], expected_images(source, batch["index"].tolist(), epoch=1))
    for view, index in kept_views:
        assert torch.equal(view, source[SampleKey(index, epoch=2)]["image"])


class CarryPrevious:
    """A collate function that sends each batch's image again with the next batch (e.g. to contrast
    consecutive batches), in the batch dict or beside it, with a private copy to check it by."""

    def __init__(self, beside: bool) -> None:
        self.beside = beside
        self.previous: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, samples: Sequence[Any]) -> Any:
        batch = collate(samples)
        previous = self.previous or (batch["image"], batch["image"].clone())
        self.previous = (batch["image"], batch["image"].clone())
        if self.beside:
            return batch, *previous
        batch["previous"], batch["previous_copy"] = previous
        return batch


@pytest.mark.parametrize("beside", [False, True], ids=["in-the-batch", "beside-the-batch"])
def test_a_batch_a_collate_function_sends_again_later_is_never_overwritten(
    folders: Path, beside: bool
) -> None:
    dataset = FolderDataset(folders, transform=AUGMENT, progress=False)
    loader, sampler = worker_loader(dataset, dataset, CarryPrevious(beside), seed=3)
    kept = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for number, batch in enumerate(loader):
            previous = batch[1:] if beside else (batch["previous"], batch["previous_copy"])
            if number % 2 == 0:
                kept.append(previous)  # only the image sent again; the batch it came with is dropped
    for image, copy_made_in_the_worker in kept:
        assert torch.equal(image, copy_made_in_the_worker)


@pytest.mark.parametrize(
    "collate_fn",
    [lambda samples: samples, default_collate, Collate({})],
    ids=["views-in-a-list", "default_collate", "Collate"],
)
def test_batches_of_other_collate_functions_are_never_overwritten(
    folders: Path, collate_fn: Callable[[Sequence[Any]], Any]
) -> None:
    dataset = FolderDataset(folders, transform=AUGMENT, progress=False)
    loader, sampler = worker_loader(dataset, dataset, collate_fn, seed=1)
    kept = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in loader:
            if epoch == 0:
                kept.append(batch)
    for batch in kept:
        if isinstance(batch, list):  # the samples themselves, their images views of a worker buffer
            indices = [int(sample["index"]) for sample in batch]
            images = torch.stack([sample["image"] for sample in batch])
        else:
            indices, images = batch["index"].tolist(), batch["image"]
        assert torch.equal(images, expected_images(dataset, indices, epoch=0))


# --- batches passed on to another process, batches of a dataset of the user's own -------------------


def _check_received(queue: Any, answers: Any) -> None:
    """A child process: compare each batch it receives with the copy sent beside it, after the
    parent has gone on writing its batch buffers."""
    received = []
    while (item := queue.get()) is not None:
        received.append(item)
        answers.put("got")
    answers.put(all(torch.equal(image, copy_sent) for image, copy_sent in received))


def test_a_batch_sent_to_another_process_is_never_overwritten(folders: Path) -> None:
    """A torch.multiprocessing queue moves a batch to shared memory in place; the Loader's buffer
    pool then never writes that buffer again (and batches built without workers are fresh)."""
    context = torch.multiprocessing.get_context("spawn")
    queue, answers = context.Queue(), context.Queue()
    child = context.Process(target=_check_received, args=(queue, answers))
    child.start()
    try:
        dataset = FolderDataset(folders, transform=AUGMENT, progress=False)
        loaders = [
            Loader(dataset, batch_size=BATCH, shuffle=True, num_threads=2),
            DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=0, collate_fn=collate),
        ]
        for loader in loaders:
            for epoch in range(3):
                if isinstance(loader, Loader):
                    loader.set_epoch(epoch)
                for number, batch in enumerate(loader):
                    if epoch == 0 and number % 2 == 0:
                        queue.put((batch["image"], batch["image"].clone()))
                        assert answers.get(timeout=60) == "got"  # shared before the parent drops it
        queue.put(None)
        assert answers.get(timeout=60) is True
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()


class OwnImages(torch.utils.data.Dataset[dict[str, Any]]):
    """A dataset of the user's own: a fresh tensor per sample, batched by ``Collate()``."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int) -> dict[str, Any]:
        generator = torch.Generator().manual_seed(index)
        return {
            "image": torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8, generator=generator),
            "index": index,
        }


class CollateWithStats:
    def __init__(self) -> None:
        self.collate = Collate()

    def __call__(self, samples: Sequence[Any]) -> Any:
        batch = self.collate(samples)
        batch["reused"] = torch.tensor(self.collate._buffers.reused)  # set on the batch: it stays shipped
        return batch


@pytest.mark.parametrize("workers", [0, 2])
def test_collate_reuses_its_own_buffers_for_a_users_dataset_and_never_overwrites_kept_batches(
    workers: int,
) -> None:
    dataset = OwnImages()
    collate_fn = CollateWithStats()
    loader = DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        collate_fn=collate_fn,
        persistent_workers=workers > 0,
    )
    kept, reused = [], []
    for epoch in range(4):
        for number, batch in enumerate(loader):
            reused.append(int(batch["reused"]))
            if epoch == 1 and number % 2 == 0:
                kept.append(batch)
    assert max(reused) > 0 if workers else max(reused) == 0  # in-process, torch.stack allocates
    for batch in kept:
        expected = torch.stack([dataset[int(index)]["image"] for index in batch["index"]])
        assert torch.equal(batch["image"], expected)

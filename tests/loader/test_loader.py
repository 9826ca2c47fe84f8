"""The thread Loader: exact resume at every seam (the shared helper), no thread left behind, errors
naming the sample, fault-report parity with the DataLoader path, kept batches intact."""

from __future__ import annotations

import itertools
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from resume import Setup, check_every_seam
from subjects import SAMPLERS, KeyEcho, sampler_subject
from torchloom import FaultReport, FolderDataset, Loader, MixtureSampler, SampleError, collate
from torchloom._buffers.slots import BatchSlots
from torchloom.errors import ConfigError, TransformError, UsageError
from torchloom.samplers import IndexSampler
from torchloom.transforms import Lambda, Resize

THREADS = Setup(num_workers=0, persistent=False, threads=2)


@pytest.mark.parametrize("drop_last", [False, True], ids=["keep-last", "drop-last"])
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_loader_resumes_every_sampler_at_every_seam(name: str, drop_last: bool) -> None:
    unit = getattr(SAMPLERS[name](), "unit", 1)
    batch_size = 3 if unit == 1 else unit  # 3: most epochs end in a short batch
    setup = Setup(num_workers=0, persistent=False, threads=2, batch_size=batch_size, drop_last=drop_last)
    check_every_seam(sampler_subject(name), setup)


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


# --- seams found by review --------------------------------------------------------------------------


def indices(batches: Any) -> list[int]:
    return [i for batch in batches for i in batch["index"].tolist()]


def test_an_empty_sampler_is_kept_not_replaced_by_the_whole_dataset() -> None:
    empty = IndexSampler(3, rank=3, world_size=4, drop_last=True)
    assert len(empty) == 0
    loader = Loader(KeyEcho(10), batch_size=2, sampler=empty)
    assert loader.sampler is empty and list(loader) == []


def test_a_sampler_set_epoch_after_a_break_moves_the_state_to_that_epoch() -> None:
    """Lightning calls ``loader.sampler.set_epoch`` (e.g. after ``limit_train_batches`` broke the
    epoch off): the state is the start of that epoch, not the rest of the one before."""
    sampler = IndexSampler(20, shuffle=True, seed=1)
    loader = Loader(KeyEcho(20), batch_size=4, sampler=sampler)
    sampler.set_epoch(1)
    assert len(indices(itertools.islice(loader, 2))) == 8
    sampler.set_epoch(2)
    state = loader.state_dict()
    resumed_sampler = IndexSampler(20, shuffle=True, seed=1)
    resumed = Loader(KeyEcho(20), batch_size=4, sampler=resumed_sampler)
    resumed.load_state_dict(state)
    expected = IndexSampler(20, shuffle=True, seed=1)
    expected.set_epoch(2)
    assert indices(resumed) == [int(key) for key in expected]


@pytest.mark.filterwarnings("ignore:IndexSampler is iterated again")  # the first drew the whole epoch
def test_a_second_iteration_stops_the_first_which_then_says_so() -> None:
    loader = Loader(KeyEcho(12), batch_size=4)
    first = iter(loader)
    next(first)
    second = iter(loader)
    with pytest.raises(UsageError, match="iter\\(loader\\) started a new iteration"):
        next(first)
    assert indices(second) == list(range(12))


def test_after_a_failed_batch_the_iteration_goes_on_with_no_thread_running_meanwhile() -> None:
    loader = Loader(Exploding(), batch_size=4, num_threads=2)
    delivered, errors = [], 0
    iterator = iter(loader)
    while True:
        try:
            delivered += next(iterator)["x"].tolist()
        except SampleError:
            errors += 1
            assert wait_for_no_loader_threads() == 0  # paused while the error is handled
            state_after_error = loader.state_dict()
            continue
        except StopIteration:
            break
    assert errors == 1 and delivered == [i for i in range(20) if not 12 <= i < 16]  # as a DataLoader does
    resumed = Loader(Exploding(), batch_size=4, num_threads=2)
    resumed.load_state_dict(state_after_error)
    assert [i for b in resumed for i in b["x"].tolist()] == list(range(16, 20))


def test_a_batch_size_that_splits_the_samplers_units_is_refused() -> None:
    with pytest.raises(ConfigError, match="multiple of the sampler's unit 5"):
        Loader(KeyEcho(50), batch_size=3, sampler=MixtureSampler([20, 10, 11], [0.5, 0.3, 0.2], batch_size=5))


@pytest.mark.parametrize("drop_last", [False, True])
def test_plain_torch_samplers_with_epochs_resume_at_every_seam(drop_last: bool) -> None:
    from torch.utils.data.distributed import DistributedSampler

    def loader() -> Loader:
        sampler = DistributedSampler(range(22), num_replicas=1, rank=0, shuffle=True, seed=3)
        return Loader(KeyEcho(22), batch_size=4, sampler=sampler, drop_last=drop_last)

    def epoch(number: int) -> list[int]:
        reference = loader()
        reference.set_epoch(number)
        return indices(reference)

    for stop in range(len(loader()) + 1):
        first = loader()
        first.set_epoch(1)
        seen = indices(itertools.islice(first, stop))
        state = first.state_dict()
        for order in ("before", "after", "none"):
            resumed = loader()
            if order == "before":
                resumed.set_epoch(1 if stop < len(first) else 2)
            resumed.load_state_dict(state)
            if order == "after":
                resumed.set_epoch(1 if stop < len(first) else 2)
            rest = indices(resumed)
            if stop < len(first):
                assert seen + rest == epoch(1), (stop, order)
            else:  # a finished epoch resumes into the whole next one
                assert rest == epoch(2), (stop, order)


def test_a_kept_untyped_storage_holds_its_buffer(class_folders: tuple[Path, Any]) -> None:
    root, _ = class_folders
    dataset = FolderDataset(root, transform=Resize((16, 16)), on_error="skip", progress=False)
    loader = Loader(dataset, batch_size=4, shuffle=True, num_threads=2)
    kept = [(batch["image"].untyped_storage(), batch["image"].clone()) for batch in loader]
    loader.set_epoch(1)
    for _ in loader:  # another order: buffers not held are written again, with other images
        pass
    for storage, copy_made in kept:
        image = torch.empty(0, dtype=copy_made.dtype).set_(storage, 0, copy_made.shape)
        assert torch.equal(image, copy_made)


def test_pinning_a_batch_leaves_its_skipped_records_as_they_are() -> None:
    """torch's pin_memory (DataLoader's pin thread, the Loader's pin_memory=True) walks the batch."""
    from torch.utils.data._utils.pin_memory import pin_memory

    from torchloom.faults import Skipped

    record = Skipped(3, "a.jpg", "DecodeError", "truncated")
    batch = pin_memory({"label": [1, 2], "skipped": [record]})
    assert batch["skipped"][0] is record


def test_an_end_of_epoch_state_of_an_earlier_release_resumes_into_a_whole_epoch() -> None:
    from torch.utils.data import SequentialSampler

    loader = Loader(KeyEcho(10), batch_size=4, sampler=SequentialSampler(range(10)))
    loader.load_state_dict({"sampler": {}, "batches": 3, "version": 1, "kind": "Loader"})
    assert indices(loader) == list(range(10))


def test_with_its_own_shuffled_sampler_each_new_iteration_is_the_next_epoch() -> None:
    """As DataLoader(shuffle=True) reshuffles every iteration, with no set_epoch needed."""
    loader = Loader(KeyEcho(12), batch_size=5, shuffle=True, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "iterated again without set_epoch" warning
        first, second = indices(loader), indices(loader)
    assert sorted(first) == sorted(second) == list(range(12)) and first != second
    reference = Loader(KeyEcho(12), batch_size=5, shuffle=True, seed=2)
    reference.set_epoch(1)
    assert indices(reference) == second
    resumed = Loader(KeyEcho(12), batch_size=5, shuffle=True, seed=2)
    resumed.load_state_dict(reference.state_dict())  # the end of epoch 1: epoch 2 next
    reference.set_epoch(2)
    assert indices(resumed) == indices(reference)


def test_nothing_is_drawn_or_started_before_the_first_batch_is_asked_for() -> None:
    """Lightning calls iter() to check a loader, and iter() before sampler.set_epoch when it resumes."""
    sampler = IndexSampler(12, shuffle=True, seed=5)
    loader = Loader(KeyEcho(12), batch_size=4, sampler=sampler, num_threads=2)
    iterator = iter(loader)
    assert loader_threads() == 0
    sampler.set_epoch(1)
    first = next(iterator)
    expected = IndexSampler(12, shuffle=True, seed=5)
    expected.set_epoch(1)
    assert first["index"].tolist() == [int(key) for key in expected][:4]


class Halt(BaseException):
    """A BaseException that is not an Exception (as SystemExit or KeyboardInterrupt are)."""


class FailingAt(Dataset[dict[str, Any]]):
    """Samples ``0..size-1``; the keys in ``failing`` raise ``error``."""

    def __init__(self, size: int, failing: set[int], error: type[BaseException] = SampleError) -> None:
        self.size, self.failing, self.error = size, failing, error

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> dict[str, Any]:
        if int(key) in self.failing:
            raise self.error(int(key), "x.jpg", "DecodeError") if self.error is SampleError else self.error()
        return {"x": int(key)}


def read_through_errors(loader: Loader) -> tuple[list[list[int]], int]:
    batches, errors = [], 0
    iterator = iter(loader)
    while True:
        try:
            batches.append(next(iterator)["x"].tolist())
        except StopIteration:
            return batches, errors
        except (SampleError, Halt):
            errors += 1


@pytest.mark.parametrize(("threads", "prefetch", "failing"), [(1, 0, {4}), (2, 2, {0, 2, 4, 6})])
def test_failed_batches_filling_every_slot_in_flight_do_not_end_the_epoch(
    threads: int, prefetch: int, failing: set[int]
) -> None:
    loader = Loader(FailingAt(12, failing), batch_size=2, num_threads=threads, prefetch=prefetch)
    batches, errors = read_through_errors(loader)
    assert errors == len(failing)
    assert batches == [[i, i + 1] for i in range(0, 12, 2) if i not in failing]
    resumed = Loader(FailingAt(12, set()), batch_size=2)
    resumed.load_state_dict(loader.state_dict())  # the end of the epoch: the whole next one
    assert [i for b in resumed for i in b["x"].tolist()] == list(range(12))


def test_a_base_exception_from_a_sample_is_raised_once_then_the_epoch_goes_on() -> None:
    loader = Loader(FailingAt(8, {2}, Halt), batch_size=2, num_threads=2)
    batches, errors = read_through_errors(loader)
    assert errors == 1 and batches == [[0, 1], [4, 5], [6, 7]]


def test_a_sampler_error_while_drawing_ahead_comes_after_the_batch_already_loaded() -> None:
    class BrokenAfter(torch.utils.data.Sampler[int]):
        def __len__(self) -> int:
            return 8

        def __iter__(self) -> Any:
            yield from range(4)
            raise OSError("index file unreadable")

    loader = Loader(FailingAt(8, set()), batch_size=2, sampler=BrokenAfter(), num_threads=1, prefetch=0)
    iterator = iter(loader)
    assert [next(iterator)["x"].tolist(), next(iterator)["x"].tolist()] == [[0, 1], [2, 3]]
    with pytest.raises(OSError, match="index file unreadable"):
        next(iterator)
    assert wait_for_no_loader_threads() == 0


# --- the epoch rules, the same with a plain sampler as with torchloom's ------------------------------


def epoch_loader(kind: str) -> Loader:
    from torch.utils.data.distributed import DistributedSampler

    if kind == "IndexSampler":
        return Loader(KeyEcho(12), batch_size=4, sampler=IndexSampler(12, seed=3))
    sampler = DistributedSampler(range(12), num_replicas=1, rank=0, seed=3)  # type: ignore[arg-type]
    return Loader(KeyEcho(12), batch_size=4, sampler=sampler)


def epoch_of(kind: str, epoch: int) -> list[int]:
    reference = epoch_loader(kind)
    reference.set_epoch(epoch)
    return indices(reference)


@pytest.mark.parametrize("kind", ["IndexSampler", "DistributedSampler"])
def test_an_earlier_set_epoch_after_loading_an_epoch_end_loses_with_a_warning(kind: str) -> None:
    first = epoch_loader(kind)
    first.set_epoch(1)
    indices(first)
    resumed = epoch_loader(kind)
    resumed.load_state_dict(first.state_dict())  # the end of epoch 1: epoch 2 next
    # The checkpoint is the end of epoch 1 (the Loader's state with a plain sampler: the start of 2).
    ending = r"(end of epoch 1|start of epoch 2): the later epoch wins, so the next iteration reads epoch 2"
    with pytest.warns(UserWarning, match=rf"set_epoch\(1\) after loading a checkpoint at the {ending} whole"):
        resumed.set_epoch(1)
    assert indices(resumed) == epoch_of(kind, 2)


@pytest.mark.parametrize("kind", ["IndexSampler", "DistributedSampler"])
def test_a_checkpoint_of_an_earlier_epoch_loaded_after_an_iteration_applies(kind: str) -> None:
    early = epoch_loader(kind)
    early.set_epoch(0)
    taken = indices(itertools.islice(early, 1))
    state = early.state_dict()
    late = epoch_loader(kind)
    late.set_epoch(3)
    indices(late)
    late.load_state_dict(state)  # going back: no set_epoch since that iteration competes with it
    assert taken + indices(late) == epoch_of(kind, 0)


def test_what_the_dataset_offers_is_resolved_once_when_the_loader_is_built() -> None:
    dataset = KeyEcho(6)
    loader = Loader(dataset, batch_size=3, num_threads=1)
    dataset.__getitems__ = lambda keys: [{"index": -1, "epoch": -1} for _ in keys]  # type: ignore[attr-defined]
    assert indices(loader) == list(range(6))
    batched = Loader(dataset, batch_size=3, num_threads=1)
    assert indices(batched) == [-1] * 6

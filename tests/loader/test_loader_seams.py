"""The Loader's resume seams found by an adversarial review of the epoch rules: each reproduction,
with every kind of sampler (torchloom's, torch's DistributedSampler, torchdata's stateful one, a plain
or a user's), checked for what it delivers, what its state says and what it warns."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from torch.utils.data import Dataset, DistributedSampler, RandomSampler, Sampler, SequentialSampler
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

from subjects import KeyEcho
from torchloom import Loader
from torchloom.errors import StateMismatchError
from torchloom.samplers import IndexSampler


def indices(batches: Any) -> list[int]:
    return [i for batch in batches for i in batch["index"].tolist()]


def first(loader: Loader, batches: int) -> list[int]:
    """The first ``batches`` batches of a new iteration, which is then dropped (its threads stopped)."""
    return indices(itertools.islice(loader, batches))


SIZE = 10


def distributed(world: int = 1, rank: int = 0) -> DistributedSampler[int]:
    return DistributedSampler(range(SIZE), num_replicas=world, rank=rank, seed=1)  # type: ignore[arg-type]


SAMPLER_KINDS: dict[str, Callable[[], Sampler[Any]]] = {
    "IndexSampler": lambda: IndexSampler(SIZE, seed=1),
    "DistributedSampler": distributed,
    "StatefulDistributedSampler": lambda: StatefulDistributedSampler(
        range(SIZE),  # type: ignore[arg-type]
        num_replicas=1,
        rank=0,
        seed=1,
    ),
}


def loader_of(kind: str, dataset: Dataset[Any] | None = None) -> Loader:
    return Loader(dataset or KeyEcho(SIZE), batch_size=3, sampler=SAMPLER_KINDS[kind](), num_threads=1)


def epoch_of(kind: str, epoch: int) -> list[int]:
    reference = loader_of(kind)
    reference.set_epoch(epoch)
    return indices(reference)


def at_batch(kind: str, epoch: int, batches: int) -> tuple[list[int], dict[str, Any]]:
    loader = loader_of(kind)
    loader.set_epoch(epoch)
    return first(loader, batches), loader.state_dict()


def at_end(kind: str, epoch: int) -> dict[str, Any]:
    loader = loader_of(kind)
    loader.set_epoch(epoch)
    indices(loader)
    return loader.state_dict()


class UserSampler(Sampler[int]):
    """A user's sampler whose ``epoch`` and ``unit`` are None until set (as the old Loader allowed)."""

    def __init__(self, size: int) -> None:
        self.size, self.epoch, self.unit = size, None, None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.size))

    def __len__(self) -> int:
        return self.size


def test_a_sampler_whose_epoch_and_unit_are_none_works_as_before() -> None:
    loader = Loader(list(range(6)), sampler=UserSampler(6), batch_size=3, num_threads=1, collate_fn=list)
    assert list(loader) == [[0, 1, 2], [3, 4, 5]]
    state = loader.state_dict()
    assert state["epoch"] == 1  # a new pass of a sampler without epochs is the next epoch
    loader.set_epoch(2)
    assert loader.sampler.epoch == 2 and list(loader) == [[0, 1, 2], [3, 4, 5]]  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", sorted(SAMPLER_KINDS))
def test_set_epoch_of_the_same_epoch_after_a_break_starts_it_over_and_the_state_says_so(kind: str) -> None:
    loader = loader_of(kind)
    loader.set_epoch(1)
    assert len(first(loader, 2)) == 6
    assert loader.state_dict()["batches"] == 2  # the stopped position, to resume from
    loader.set_epoch(1)
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 0)
    resumed = loader_of(kind)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert indices(resumed) == epoch_of(kind, 1) == indices(loader)  # the state is what comes next


@pytest.mark.parametrize("kind", sorted(SAMPLER_KINDS))
def test_set_epoch_of_an_epoch_read_to_its_end_reads_it_again_as_its_state_says(kind: str) -> None:
    loader = loader_of(kind)
    loader.set_epoch(1)
    indices(loader)
    loader.set_epoch(1)  # Lightning's validation loop does this every time it validates
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 0)
    resumed = loader_of(kind)
    resumed.load_state_dict(state)
    assert indices(resumed) == indices(loader) == epoch_of(kind, 1)


@pytest.mark.parametrize("after", ["a break", "its end"])
def test_a_torchloom_samplers_own_set_epoch_of_its_epoch_is_seen_by_the_loader(after: str) -> None:
    """Lightning calls ``loader.sampler.set_epoch(e)`` for a validation loader it read before; a
    torchloom sampler's state shows it (a plain sampler's ``set_epoch(e)`` of its own epoch cannot)."""
    loader = loader_of("IndexSampler")
    if after == "a break":
        first(loader, 2)
    else:
        indices(loader)
    loader.sampler.set_epoch(0)  # type: ignore[attr-defined]
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (0, 0)
    resumed = loader_of("IndexSampler")
    resumed.load_state_dict(state)
    assert indices(resumed) == indices(loader) == epoch_of("IndexSampler", 0)


@pytest.mark.parametrize("kind", ["DistributedSampler", "StatefulDistributedSampler"])
def test_the_samplers_own_set_epoch_after_a_load_leaves_no_stale_batch_count(kind: str) -> None:
    _, middle = at_batch(kind, 1, 2)
    resumed = loader_of(kind)
    resumed.load_state_dict(middle)
    resumed.sampler.set_epoch(2)  # type: ignore[attr-defined]  # as Lightning calls it
    state = resumed.state_dict()
    assert (state["epoch"], state["batches"]) == (2, 0)
    again = loader_of(kind)
    again.load_state_dict(state)
    again.set_epoch(2)
    assert indices(again) == indices(resumed) == epoch_of(kind, 2)


@pytest.mark.parametrize("kind", sorted(SAMPLER_KINDS))
def test_right_after_a_load_the_state_is_the_loaded_one_field_for_field(kind: str) -> None:
    _, middle = at_batch(kind, 1, 2)
    resumed = loader_of(kind)
    resumed.load_state_dict(middle)
    assert resumed.state_dict() == middle


def test_a_world_size_change_with_a_distributed_sampler_is_refused_naming_the_field() -> None:
    def loader(rank: int, world: int) -> Loader:
        sampler = DistributedSampler(range(24), num_replicas=world, rank=rank, seed=1)  # type: ignore[arg-type]
        return Loader(KeyEcho(24), batch_size=2, sampler=sampler, num_threads=1)

    two = loader(0, 2)
    two.set_epoch(1)
    first(two, 3)
    state = two.state_dict()
    with pytest.raises(StateMismatchError, match=r"'settings.world_size' is 2 .* num_replicas=3.* re-split"):
        loader(0, 3).load_state_dict(state)
    assert state["settings"]["world_size"] == 2
    same = loader(1, 2)  # another rank of the same world (Lightning saves rank 0's state for all)
    same.load_state_dict(state)
    assert len(indices(same)) == 12 - 3 * 2
    with pytest.raises(StateMismatchError, match=r"'settings.samples' is 12 .* samples=13"):
        sampler = DistributedSampler(range(26), num_replicas=2, rank=0, seed=1)  # type: ignore[arg-type]
        Loader(KeyEcho(26), batch_size=2, sampler=sampler).load_state_dict(state)


def test_a_random_sampler_cannot_resume_inside_an_epoch_and_says_what_to_use() -> None:
    def loader() -> Loader:
        return Loader(KeyEcho(SIZE), batch_size=3, sampler=RandomSampler(range(SIZE)), num_threads=1)

    shuffled = loader()
    iterator = iter(shuffled)
    next(iterator)
    with pytest.warns(UserWarning, match=r"RandomSampler draws a new order every pass.*IndexSampler") as told:
        state = shuffled.state_dict()
    assert told[0].filename == __file__
    with pytest.raises(StateMismatchError, match=r"1 batches into epoch 0.*torchloom.IndexSampler"):
        loader().load_state_dict(state)
    del iterator
    indices(shuffled)
    resumed = loader()
    resumed.load_state_dict(shuffled.state_dict())  # the end of an epoch: a whole new one
    assert sorted(indices(resumed)) == list(range(SIZE))


def test_a_foreign_stateful_sampler_resumes_by_the_epoch_rules() -> None:
    kind = "StatefulDistributedSampler"
    resumed = loader_of(kind)
    resumed.load_state_dict(at_end(kind, 1))  # the end of epoch 1: epoch 2 whole, not nothing
    resumed.set_epoch(2)
    assert indices(resumed) == epoch_of(kind, 2)
    seen, middle = at_batch(kind, 2, 2)
    for order in ("set_epoch, load", "load, set_epoch"):
        later = loader_of(kind)
        with pytest.warns(UserWarning, match="is not resumed: set_epoch.3. asks for a later epoch"):
            if order == "set_epoch, load":
                later.set_epoch(3)
                later.load_state_dict(middle)
            else:
                later.load_state_dict(middle)
                later.set_epoch(3)
        assert indices(later) == epoch_of(kind, 3), order  # the later epoch, whole
    loaded = loader_of(kind)
    loaded.load_state_dict(middle)
    assert {key: loaded.state_dict()[key] for key in ("sampler", "batches", "epoch")} == {
        key: middle[key] for key in ("sampler", "batches", "epoch")
    }
    loaded.set_epoch(2)
    assert seen + indices(loaded) == epoch_of(kind, 2)


def test_a_load_that_loses_says_so_at_the_users_line() -> None:
    _, middle = at_batch("IndexSampler", 2, 1)
    resumed = loader_of("IndexSampler")
    resumed.set_epoch(3)
    with pytest.warns(UserWarning, match=r"epoch 2 .* is not resumed: set_epoch\(3\)") as caught:
        resumed.load_state_dict(middle)
    assert caught[0].filename == __file__
    assert indices(resumed) == epoch_of("IndexSampler", 3)


class EpochEcho(Dataset[dict[str, Any]]):
    """Samples that change with the epoch: the epoch it was last told comes back with each one."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, key: int) -> dict[str, Any]:
        return {"index": int(key), "epoch": self.epoch}


def epochs_read(loader: Loader) -> set[int]:
    return {epoch for batch in loader for epoch in batch["epoch"].tolist()}


@pytest.mark.parametrize("kind", sorted(SAMPLER_KINDS))
def test_the_dataset_is_told_the_epoch_actually_read(kind: str) -> None:
    _, middle = at_batch(kind, 2, 1)
    resumed = loader_of(kind, EpochEcho())
    resumed.load_state_dict(middle)
    assert epochs_read(resumed) == {2}  # resumed inside epoch 2, with no set_epoch
    losing = loader_of(kind, EpochEcho())
    losing.load_state_dict(at_end(kind, 0))
    with pytest.warns(UserWarning, match="the later epoch wins"):
        losing.set_epoch(0)
    assert epochs_read(losing) == {1}  # the epoch that won


@pytest.mark.parametrize("kind", sorted(SAMPLER_KINDS))
def test_a_loop_one_epoch_behind_an_end_of_epoch_checkpoint_is_warned_at_each_step(kind: str) -> None:
    end = at_end(kind, 0)
    assert end["epoch"] == 1, "every Loader state names the epoch it resumes in"
    resumed = loader_of(kind)
    resumed.load_state_dict(end)
    read, messages = [], []
    for epoch in range(3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            resumed.set_epoch(epoch)
        assert all(warning.filename == __file__ for warning in caught)
        messages.append([str(warning.message) for warning in caught])
        read.append(indices(resumed))
    assert read == [epoch_of(kind, 1), epoch_of(kind, 1), epoch_of(kind, 2)]
    assert "set_epoch(0) after loading a checkpoint at the" in messages[0][0]
    assert "reads epoch 1 whole, not epoch 0" in messages[0][0]
    assert "epoch 1 was read to its end already" in messages[1][0] and messages[2] == []
    following = loader_of(kind)  # the loop started at the checkpoint's epoch: no warning, no repeat
    following.load_state_dict(end)
    assert following.epoch == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        following.set_epoch(following.epoch)
    assert indices(following) == epoch_of(kind, 1)


def test_a_state_written_before_epochs_were_recorded_resumes_in_the_epoch_set_after_it() -> None:
    loader = Loader(KeyEcho(SIZE), batch_size=4, sampler=distributed(), num_threads=1)
    loader.load_state_dict({"sampler": {}, "batches": 1, "version": 1, "kind": "Loader"})
    loader.set_epoch(1)
    assert indices(loader) == epoch_of_distributed(1, batch_size=4)[4:]
    before = Loader(KeyEcho(SIZE), batch_size=4, sampler=distributed(), num_threads=1)
    before.set_epoch(1)
    before.load_state_dict({"sampler": {}, "batches": 1, "version": 1, "kind": "Loader"})
    assert indices(before) == epoch_of_distributed(1, batch_size=4)[4:]


def epoch_of_distributed(epoch: int, *, batch_size: int) -> list[int]:
    reference = Loader(KeyEcho(SIZE), batch_size=batch_size, sampler=distributed(), num_threads=1)
    reference.set_epoch(epoch)
    return indices(reference)


def test_a_state_of_a_sampler_with_nothing_to_read_loads_as_it_was() -> None:
    def loader() -> Loader:
        empty = IndexSampler(3, rank=1, world_size=5, drop_last=True)
        return Loader(KeyEcho(3), batch_size=2, sampler=empty, num_threads=1)

    start = loader().state_dict()
    resumed = loader()
    resumed.load_state_dict(start)
    assert resumed.state_dict()["epoch"] == start["epoch"] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed.set_epoch(0)
    assert indices(resumed) == []


def test_the_pass_count_of_a_sampler_without_epochs_never_goes_back() -> None:
    loader = Loader(KeyEcho(6), batch_size=2, sampler=SequentialSampler(range(6)), num_threads=1)
    seen = []
    for _ in range(2):
        iterator = iter(loader)
        next(iterator)
        seen.append(loader.state_dict()["epoch"])
        del iterator
        indices(loader)
        seen.append(loader.state_dict()["epoch"])
    assert seen == [0, 1, 1, 2]
